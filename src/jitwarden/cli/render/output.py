"""The output format, chosen once from ``--format``, and the one JSON envelope.

A command never asks which format it prints: it hands both views to the format object,
which builds only the one asked for (the pip-audit shape: a format is an object, not a flag
tested on every line). :meth:`human` lines (a plan before a question, progress notes) reach
a person and are left out of JSON; :meth:`result` prints the command's outcome.

Every JSON document is ``{"schema": 1, "tool": {"name", "version"}, "command": ..., **body}``:
a stable contract, fields added, never repurposed.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from typing import Callable

from jitwarden import tool

SCHEMA = 1


def envelope(command: str, body: dict) -> dict:
    """The JSON document of ``command``: schema, tool, command, then ``body``'s fields.

    A body with a ``schema`` of its own (a fingerprint, whose schema ``--diff`` checks) keeps it.
    """
    return {"schema": SCHEMA, "tool": tool(), "command": command, **body}


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
