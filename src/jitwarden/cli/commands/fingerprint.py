"""``jitwarden fingerprint``: what decides this environment's compiled GPU code.

``--format json`` output is a stable contract (``"schema": 1``) that ``--diff`` reads
back: save it on one machine or day, compare on another. Exit codes: 0 identical,
1 different, 2 when the file to compare is missing or is not a fingerprint.
"""

from __future__ import annotations

import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK


def register(sub) -> None:
    p = sub.add_parser(
        "fingerprint",
        help="show or compare the environment fingerprint",
        description="Show every input that decides compiled GPU code, or compare with a saved one.",
    )
    options.add_format_argument(p)
    p.add_argument(
        "--diff",
        metavar="OTHER.json",
        help="compare with a saved `jitwarden fingerprint --format json`; exit 1 when different",
    )
    p.add_argument("--no-memo", action="store_true", help="recompute everything, ignore the memo")
    options.examples(
        p,
        "jitwarden fingerprint --format json > fp.json  save it",
        "jitwarden fingerprint --diff fp.json          what changed since, and why it matters",
    )
    p.set_defaults(func=run)


def load(path: str):
    """A saved fingerprint; UsageError (exit 2) with one line when it cannot be used."""
    return _common.load_fingerprint(path)


def run(args) -> int:
    from jitwarden.env import fingerprint

    other = load(args.diff) if args.diff else None  # a bad file is a usage error before any work
    fp = fingerprint.of_host(use_memo=not args.no_memo)
    # Indented even when piped: a fingerprint is saved to be read, diffed and compared (--diff) later.
    fmt = out.output_format(args, indent=True)
    if other is not None:
        return _run_diff(fmt, other, fp)
    fmt.result("fingerprint", fp.to_json, lambda: _print_table(fp))
    return EXIT_OK


def _run_diff(fmt, old, new) -> int:
    from jitwarden.env.fingerprint_diff import diff

    changes = diff(old, new)
    fmt.result(
        "fingerprint",
        lambda: {
            "mode": "diff",
            "old": old.digest,
            "new": new.digest,
            "identical": not changes,
            "changes": [
                {"component": c.component, "old": c.old, "new": c.new, "why": c.why}
                for c in changes
            ],
        },
        lambda: _print_diff(old, new, changes),
    )
    return EXIT_FINDINGS if changes else EXIT_OK


def _print_diff(old, new, changes) -> None:
    con = out.console()
    if not changes:
        con.print(out.text(f"identical: fp {new.digest}"))
        return
    con.print(
        out.text((f"fingerprint {old.digest} → {new.digest}: {len(changes)} change(s)", "bold"))
    )
    g = out.Grid(
        [
            out.Column("COMPONENT"),
            out.Column("OLD", flex=True, min=10),
            out.Column("NEW", flex=True, min=10),
        ]
    )
    for c in changes:
        g.add(c.component, c.old, c.new, details=[c.why])
    con.print(g)


def _print_table(fp) -> None:
    con = out.console()
    con.print(out.text((fp.headline(), "bold")))
    t = out.Grid([out.Column("COMPONENT"), out.Column("VALUE", wrap=True, min=20)])
    for component, value in _rows(fp):
        t.add(component, value)
    con.print(t)
    for w in fp.warnings():
        print(f"jitwarden: warning: {w}", file=sys.stderr)


def _rows(fp) -> list[tuple[str, str]]:
    """(component, value) of each line of the fingerprint's table, in the record's order."""
    rows = _device_rows(fp) + _toolchain_rows(fp)
    py = dict(fp.python)
    rows.append(("python", f"{py.get('implementation')} {py.get('version')} {py.get('soabi')}"))
    pl = dict(fp.platform)
    rows.append(("platform", f"{pl.get('system')} {pl.get('machine')} {pl.get('libc')}"))
    rows += [(f"env {k}", v) for k, v in fp.env] or [("env", "(no code-changing variables set)")]
    rows.append(("digest", fp.digest))
    return rows


def _device_rows(fp) -> list[tuple[str, str]]:
    """The GPUs (each by index, with its compute capability and where it was read) and the driver."""
    rows = []
    for g in fp.gpus:
        cap = f"sm_{g.capability[0]}{g.capability[1]}" if g.capability else "capability unknown"
        rows.append((f"gpu {g.index}", f"{g.name} ({cap}) via {fp.gpu_source}"))
    if not fp.gpus:
        rows.append(("gpu", fp.gpu_str()))
    rows.append(
        (
            "driver",
            f"{fp.driver_version or '(unknown)'}"
            + (f" (CUDA {fp.cuda_driver_version})" if fp.cuda_driver_version else ""),
        )
    )
    return rows


def _toolchain_rows(fp) -> list[tuple[str, str]]:
    """Each ptxas by role, then each package (torch with its CUDA and arch list)."""
    rows = [
        (
            f"ptxas[{role}]",
            f"{info.build or info.release or '?'} sha256 {info.sha256[:12]} {info.path}",
        )
        for role, info in fp.ptxas
    ] or [("ptxas", "(none found)")]
    for p in fp.packages:
        extra = ""
        if p.name == "torch":
            archs = " ".join(p.arch_list) if p.arch_list is not None else "unknown"
            extra = f" cuda {p.cuda or '-'} archs {archs}"
        rows.append(
            (
                f"package {p.name}",
                f"{p.version} files {p.identity[:12] if p.identity else '?'}{extra}",
            )
        )
    return rows
