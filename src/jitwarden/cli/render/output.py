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
from dataclasses import dataclass
from typing import Callable

from jitwarden import tool

SCHEMA = 2
ENVELOPE = ("schema", "tool", "command")


def envelope(command: str, body: dict) -> dict:
    """The JSON document of ``command`` (the verb, without flags): schema, tool, command, then ``body``'s
    fields; a body field named like an envelope field becomes ``<verb>_<name>``, never overriding it."""
    if any(w.startswith("-") for w in command.split()):
        raise ValueError(f"command {command!r}: the verb only; say how it ran in the body")
    verb = command.split()[-1]
    return {"schema": SCHEMA, "tool": tool(), "command": command,
            **{(f"{verb}_{k}" if k in ENVELOPE else k): v for k, v in body.items()}}


def plan_record(id: str, kind: str | None, root: str, path: str, bytes: int, why: str, **extra) -> dict:
    """One thing a plan would act on, the same six fields in every command's ``plan``, then its own."""
    return {"id": id, "kind": kind, "root": root, "path": path, "bytes": bytes, "why": why, **extra}


def done_record(id: str, path: str, status: str, why: str = "", bytes: int = 0, quarantine_id: str | None = None,
                **extra) -> dict:
    """What happened to one thing, the same fields in every command's ``done`` (``status``: quarantined,
    deleted, restored, skipped)."""
    return {"id": id, "path": path, "status": status, "why": why, "bytes": bytes, "quarantine_id": quarantine_id,
            **extra}


def write_json(doc: dict, indent: bool | None = None) -> None:
    """``doc`` on stdout: indented for a person at a terminal, compact (C encoder, ~3x faster) for pipes
    and files; ``indent`` True or False decides instead."""
    if sys.stdout.isatty() if indent is None else indent:
        sys.stdout.write(json.dumps(doc, indent=2))
    else:
        sys.stdout.write(json.dumps(doc, separators=(",", ":")))
    sys.stdout.write("\n")


@dataclass(frozen=True, slots=True)
class TableFormat:
    """For a person: tables and lines; no JSON body is built."""

    def human(self, show: Callable[..., object], *args, **kw) -> None:
        show(*args, **kw)

    def result(self, command: str, body: Callable[[], dict], show: Callable[[], object]) -> None:
        show()


@dataclass(frozen=True, slots=True)
class JsonFormat:
    """For programs: one JSON document on stdout, nothing else there. ``indent``: see :func:`write_json`."""

    indent: bool | None = None

    def human(self, show: Callable[..., object], *args, **kw) -> None:
        pass

    def result(self, command: str, body: Callable[[], dict], show: Callable[[], object]) -> None:
        write_json(envelope(command, body()), self.indent)


OutputFormat = TableFormat | JsonFormat


def output_format(args, *, indent: bool | None = None) -> OutputFormat:
    """The format ``--format`` asked for: the one place that reads it. ``indent``: for JSON (see :func:`write_json`)."""
    return JsonFormat(indent) if getattr(args, "format", "table") == "json" else TableFormat()
