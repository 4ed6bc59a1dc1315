#!/usr/bin/env python3
"""docs/commands.md's reference sections, generated from the code: every verb and every option from the
argparse parser (``jitwarden.cli.main.build_parser``), every exit status from ``ExitStatus``, every finding
code from ``model/findings.CATALOG``; docs/caches.md's table of kinds and ARCHITECTURE.md's map, from
``model/kinds.ROWS``.

    python docs/gen_commands.py           rewrite the generated sections in place
    python docs/gen_commands.py --check   exit 1 when a section differs from what the code says now

Each generated section sits between markers, and everything between them is ours; the prose around
them is written by hand and kept:

    <!-- generated: NAME (docs/gen_commands.py) -->
    ...
    <!-- /generated -->
"""

from __future__ import annotations

import argparse
import os
import re
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "src"))

from jitwarden.cli import main as cli
from jitwarden.model import kinds as kind_rows
from jitwarden.model.errors import ExitStatus
from jitwarden.model.findings import CATALOG

DOC = os.path.join(REPO, "docs", "commands.md")
CACHES_DOC = os.path.join(REPO, "docs", "caches.md")
BLOCK = re.compile(
    r"(<!-- generated: ([\w-]+) \(docs/gen_commands\.py\) -->\n)(.*?)(<!-- /generated -->)",
    re.DOTALL,
)


def _cell(text: str) -> str:
    """Text for one Markdown table cell: one line, pipes escaped (and ``<`` outside code spans)."""
    parts = " ".join(text.split()).replace("|", "\\|").split("`")
    return "`".join(p if i % 2 else p.replace("<", "&lt;") for i, p in enumerate(parts))


def _flags(action: argparse.Action) -> str:
    """How an option is written: ``-o, --output FILE``; a positional: its metavar (``PATH…`` when repeated)."""
    meta = action.metavar or (action.dest.upper() if action.option_strings else action.dest)
    if isinstance(meta, tuple):
        meta = " ".join(meta)
    if not action.option_strings:
        return f"{meta}…" if action.nargs in ("*", "+", argparse.REMAINDER) else str(meta)
    takes = action.nargs != 0 and not isinstance(
        action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._StoreConstAction)
    )
    if isinstance(action, (argparse._CountAction, argparse._HelpAction, argparse._VersionAction)):
        takes = False
    if action.choices and takes and action.metavar is None:
        meta = "{" + ",".join(map(str, action.choices)) + "}"
    names = ", ".join(action.option_strings)
    return f"{names} {meta}" if takes else names


def _help(action: argparse.Action) -> str:
    text = action.help or ""
    if "%(" in text:
        text = text % {**vars(action), "prog": "jitwarden", "default": action.default}
    if isinstance(action, argparse._AppendAction) and "repeatable" not in text:
        text += " (repeatable)"
    if not text and action.choices:
        text = "one of: " + ", ".join(map(str, action.choices))
    return text


def _options(parser: argparse.ArgumentParser) -> list[str]:
    rows = []
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.help == argparse.SUPPRESS:
            continue
        rows.append(f"| `{_flags(a)}` | {_cell(_help(a))} |")
    if not rows:
        return []
    return ["| option | what it does |", "|---|---|", *rows]


def _subparsers(parser: argparse.ArgumentParser) -> argparse._SubParsersAction | None:
    return next((a for a in parser._actions if isinstance(a, argparse._SubParsersAction)), None)


def _verb(words: str, parser: argparse.ArgumentParser, help_text: str) -> list[str]:
    """One verb's (or action's) section: its description, usage line and options."""
    out = [f"### `jitwarden {words}`", ""]
    about = parser.description or help_text
    if about:
        out += [_cell(about), ""]
    usage = " ".join(parser.format_usage().split())
    out += [f"`{usage.removeprefix('usage: ')}`", ""]
    opts = _options(parser)
    if opts:
        out += [*opts, ""]
    out += _examples(parser)
    sub = _subparsers(parser)
    if sub is not None:
        helps = {c.dest: c.help or "" for c in sub._choices_actions}
        seen: set[int] = set()
        for name, p in sub.choices.items():
            if id(p) in seen:
                continue
            seen.add(id(p))
            if "alias of" in helps.get(name, ""):  # the same options as the action it names
                out += [f"`jitwarden {words} {name}`: {_cell(helps[name])}.", ""]
                continue
            out += _verb(f"{words} {name}", p, helps.get(name, ""))
    return out


def _examples(parser: argparse.ArgumentParser) -> list[str]:
    """The ``examples:`` that end the parser's ``--help`` (``cli.options.examples``), as a console block."""
    lines = (parser.epilog or "").splitlines()
    if not lines or lines[0] != "examples:":
        return []
    out = ["Examples:", ""]
    for ln in lines[1:]:
        cmd, *what = re.split(r"\s{2,}", ln.strip(), maxsplit=1)
        out.append(f"- `{cmd}`" + (f": {_cell(what[0])}" if what else ""))
    return [*out, ""]


def reference() -> str:
    parser = cli.build_parser()
    sub = _subparsers(parser)
    assert sub is not None
    helps = {c.dest: c.help or "" for c in sub._choices_actions}
    out = [
        "Every verb and option, as `jitwarden VERB --help` prints them; `-q/--quiet` is on every one.",
        "",
        _cell(parser.description or ""),
        "",
        *_examples(parser),
    ]
    for name in cli.COMMANDS:
        if name in sub.choices:
            out += _verb(name, sub.choices[name], helps.get(name, ""))
    return "\n".join(out)


def exit_codes() -> str:
    rows = [f"| {s.value} | `{s.name}` | {_cell(s.meaning)} |" for s in ExitStatus]
    return "\n".join(["| status | name | meaning |", "|---|---|---|", *rows, ""])


def findings() -> str:
    rows = [
        f"| `{code}` | {k.severity.name.lower()} | {_cell(k.meaning)} |"
        for code, k in CATALOG.items()
    ]
    return "\n".join(["| code | severity | meaning |", "|---|---|---|", *rows, ""])


def kinds() -> str:
    """One row per cache kind, as ``model/kinds.ROWS`` declares it."""

    def how(k: kind_rows.Kind) -> str:
        return {kind_rows.DIR: "by dir", kind_rows.FILE: "by dir, files sealed"}.get(
            k.partition, "no"
        )

    rows = [
        f"| `{k.name}` | {_cell(k.tool)} | `adapters/{k.adapter}.py` | "
        + (f"`{k.var}`" if k.var else "")
        + f" | {f'`{k.default}`' if k.default.startswith('~/') else _cell(k.default)} | {how(k)} | {'yes' if k.bundled else 'no'} | "
        + (f"`{k.needs}`" if k.needs else "")
        + " |"
        for k in kind_rows.ROWS
    ]
    head = "| kind | tool | adapter | variable | default root | partitioned | in bundles | needs |"
    return "\n".join([head, "|---|---|---|---|---|---|---|---|", *rows, ""])


def kind_map() -> str:
    """ARCHITECTURE.md's map: each kind's module for each phase, from ``model/kinds.ROWS``."""

    def root(k: kind_rows.Kind) -> str:
        if k.root.startswith("~/"):
            return f"`${k.var}`, else `{k.root}`"
        return f"`locations.{k.root}`" if k.root else f"`${k.var}` only"

    rows = [
        f"| `{k.name}` | {root(k)} | `formats/{k.reader}` | `adapters/{k.adapter}` | "
        + (", ".join(f"`runtime/{g.replace('.', '/')}`" for g in k.guard) or "none: `verify` only")
        + f" | {k.partition or 'no'}{', bundled' if k.bundled else ''} |"
        for k in kind_rows.ROWS
    ]
    head = "| kind | find its root | read | judge | guard at load, seal | partitioned |"
    return "\n".join([head, "|---|---|---|---|---|---|", *rows, ""])


SECTIONS = {"reference": reference, "exit-codes": exit_codes, "findings": findings}
CACHES_SECTIONS = {"kinds": kinds}
ARCH_SECTIONS = {"map": kind_map}
DOCS = {
    DOC: SECTIONS,
    CACHES_DOC: CACHES_SECTIONS,
    os.path.join(REPO, "ARCHITECTURE.md"): ARCH_SECTIONS,
}
"""Each generated file and its sections."""


def render(text: str, sections: dict = SECTIONS, doc: str = DOC) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(2)
        if name not in sections:
            raise SystemExit(f"{doc}: unknown generated section {name!r}")
        return m.group(1) + sections[name]().rstrip("\n") + "\n" + m.group(4)

    return BLOCK.sub(one, text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--check", action="store_true", help="exit 1 when a generated doc is not current"
    )
    args = ap.parse_args(argv)
    code = 0
    for doc, sections in DOCS.items():
        with open(doc, encoding="utf-8") as f:
            text = f.read()
        found = {m.group(2) for m in BLOCK.finditer(text)}
        if found != set(sections):
            print(
                f"{doc}: generated sections {sorted(found)}, expected {sorted(sections)}",
                file=sys.stderr,
            )
            code = 1
            continue
        new = render(text, sections, doc)
        if args.check:
            if new != text:
                print(f"{doc} is not current: run `python docs/gen_commands.py`", file=sys.stderr)
                code = 1
            continue
        if new != text:
            with open(doc, "w", encoding="utf-8") as f:
                f.write(new)
    return code


if __name__ == "__main__":
    sys.exit(main())
