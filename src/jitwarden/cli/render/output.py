"""The output format, chosen once from ``--format``, and the one JSON envelope.

A command never asks which format it prints: it hands both views to the format object,
which builds only the one asked for (the pip-audit shape: a format is an object, not a flag
tested on every line). :meth:`human` lines (a plan before a question, progress notes) reach
a person and are left out of JSON; :meth:`result` prints the command's outcome.

Every JSON document is ``{"schema": 2, "tool": {"name", "version"}, "command": VERB, **body}``: a stable
contract, fields added, never repurposed; a field whose type changes bumps ``schema`` (docs/commands.md, "JSON").

- ``command`` is the verb without flags (``doctor``, ``quarantine restore``); how it ran is in the body
  (``mode``: ``quick`` or ``rebuild``).
- The envelope's fields are never overridden by a body: a body field of the same name is renamed
  ``<verb>_<name>`` (the fingerprint's own ``schema`` is ``fingerprint_schema``).
- Every command that plans has ``plan``, a list of :func:`plan_record` (the same six fields, then its own), and
  ``done``, a list of :func:`done_record`.

Schema 2 (from 1): ``plan`` of ``clean`` was an object (now a list; its selection, counts and notes are
top-level ``selection``, ``by_reason``, ``notes``); ``done`` of ``quarantine restore|empty`` was a list of ids
(now records); ``command`` held flags (``verify --quick``, ``doctor --rebuild``, ``fingerprint --diff``).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass

from jitwarden import tool

SCHEMA = 2
ENVELOPE = ("schema", "tool", "command")


def envelope(command: str, body: dict) -> dict:
    """The JSON document of ``command`` (the verb, without flags): schema, tool, command, then ``body``'s
    fields; a body field named like an envelope field becomes ``<verb>_<name>``, never overriding it."""
    if any(w.startswith("-") for w in command.split()):
        raise ValueError(f"command {command!r}: the verb only; say how it ran in the body")
    verb = command.split()[-1]
    return {
        "schema": SCHEMA,
        "tool": tool(),
        "command": command,
        **{(f"{verb}_{k}" if k in ENVELOPE else k): v for k, v in body.items()},
    }


def plan_record(
    id: str, kind: str | None, root: str, path: str, bytes: int, why: str, **extra
) -> dict:
    """One thing a plan would act on, the same six fields in every command's ``plan``, then its own."""
    return {"id": id, "kind": kind, "root": root, "path": path, "bytes": bytes, "why": why, **extra}


def done_record(
    id: str,
    path: str,
    status: str,
    why: str = "",
    bytes: int = 0,
    quarantine_id: str | None = None,
    **extra,
) -> dict:
    """What happened to one thing, the same fields in every command's ``done`` (``status``: quarantined,
    deleted, restored, skipped)."""
    return {
        "id": id,
        "path": path,
        "status": status,
        "why": why,
        "bytes": bytes,
        "quarantine_id": quarantine_id,
        **extra,
    }


def indented(indent: bool | None = None) -> bool:
    """Whether JSON goes out indented: for a person at a terminal, unless ``indent`` True or False decides."""
    return sys.stdout.isatty() if indent is None else indent


def dumps(value, indent: bool, level: int = 0) -> str:
    """``value`` as :func:`write_json` writes it at nesting ``level`` of a document (0: the document itself)."""
    if not indent:
        return json.dumps(value, separators=(",", ":"))
    text = json.dumps(value, indent=2)
    return (
        text.replace("\n", "\n" + "  " * level) if level else text
    )  # JSON strings hold no raw newline


def write_json(doc: dict, indent: bool | None = None) -> None:
    """``doc`` on stdout: indented for a person at a terminal, compact (C encoder, ~3x faster) for pipes
    and files; ``indent`` True or False decides instead."""
    sys.stdout.write(dumps(doc, indented(indent)))
    sys.stdout.write("\n")


class Streamed:
    """A list in a document that :func:`write_json_streamed` writes from items encoded ahead, piece by piece
    (:func:`list_items`), and set aside in ``store`` (anything with ``write(bytes)`` and ``chunks()``, such as
    :class:`~jitwarden.store/tempdirs.Spill`) until the document reaches it. :meth:`add` is the sink."""

    def __init__(self, store, indent: bool) -> None:
        self.store = store
        self.indent = indent
        self.empty = True

    def add(self, piece: bytes) -> None:
        """Append the items encoded in ``piece`` (none: b"")."""
        if not piece:
            return
        if not self.empty:
            self.store.write(b",\n" if self.indent else b",")
        self.store.write(piece)
        self.empty = False


def list_items(items, indent: bool) -> bytes:
    """``items`` as members of a list at the top level of a document (nesting 2), joined as
    :func:`write_json` joins them: what :class:`Streamed` pieces hold. Empty: b""."""
    if not indent:
        return json.dumps(items, separators=(",", ":"))[1:-1].encode()
    return ",\n".join("    " + dumps(x, True, 2) for x in items).encode()


def write_json_streamed(doc: dict, indent: bool) -> None:
    """``doc`` on stdout byte for byte as :func:`write_json` writes it, where a value may be a
    :class:`Streamed` list, written piece by piece as it is read (never held whole)."""
    out = sys.stdout.write
    key_sep, item_sep = (": ", ",\n  ") if indent else (":", ",")
    out("{\n  " if indent else "{")
    for n, (k, v) in enumerate(doc.items()):
        if n:
            out(item_sep)
        out(json.dumps(k) + key_sep)
        if not isinstance(v, Streamed):
            out(dumps(v, indent, 1))
            continue
        if v.empty:
            out("[]")
            continue
        out("[\n" if indent else "[")
        for chunk in v.store.chunks():
            out(chunk.decode("ascii"))  # json.dumps escapes every non-ASCII character
        out("\n  ]" if indent else "]")
    out("\n}\n" if indent else "}\n")


@dataclass(frozen=True, slots=True)
class TableFormat:
    """For a person: tables and lines; no JSON body is built."""

    streams = False  # no streamed_result: a table is sized from every row

    def human(self, show: Callable[..., object], *args, **kw) -> None:
        show(*args, **kw)

    def result(self, command: str, body: Callable[[], dict], show: Callable[[], object]) -> None:
        show()


@dataclass(frozen=True, slots=True)
class JsonFormat:
    """For programs: one JSON document on stdout, nothing else there. ``indent``: see :func:`write_json`."""

    indent: bool | None = None
    streams = True  # has streamed_result

    def human(self, show: Callable[..., object], *args, **kw) -> None:
        pass

    def result(self, command: str, body: Callable[[], dict], show: Callable[[], object]) -> None:
        write_json(envelope(command, body()), self.indent)

    def streamed_result(self, command: str, body: dict) -> None:
        """:meth:`result` of a body whose lists may be :class:`Streamed` (written as they are read)."""
        write_json_streamed(envelope(command, body), indented(self.indent))


OutputFormat = TableFormat | JsonFormat


def output_format(args, *, indent: bool | None = None) -> OutputFormat:
    """The format ``--format`` asked for: the one place that reads it. ``indent``: for JSON (see :func:`write_json`)."""
    return JsonFormat(indent) if getattr(args, "format", "table") == "json" else TableFormat()
