"""``jitwarden dir [KIND]``: where each kernel cache lives (as ``uv cache dir`` and ``pip cache dir`` say).

For each kind, the directory its tool uses in this environment (the same variables, in the same order,
as the tool itself: ``env/locations.py`` and each adapter's ``discover_roots``), what named it, whether it
exists yet, and for the kinds jitwarden partitions, where ``jitwarden run`` and ``jitwarden.activate()`` put
this environment's caches. ``dir KIND`` prints only that kind's paths, one per line, for scripts.
"""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.model import settings
from jitwarden.model.text import display

NOT_MADE = "(not made yet)"
"""Beside a path ``dir`` prints that does not exist: where the tool (or activation) would make it."""


def register(sub) -> None:
    p = sub.add_parser(
        "dir",
        help="print where each kernel cache lives",
        description="Print where each kind of kernel cache lives in this environment (the "
        "variable or default that decides it, whether it exists, and this "
        "environment's partition). With KIND, only that kind's paths, one per line.",
    )
    p.add_argument(
        "kind",
        nargs="?",
        metavar="KIND",
        help="triton, inductor, vllm, cuda-compute, flashinfer, deepgemm, torch-ext, or jitwarden "
        "(jitwarden's own state: the list of roots it quarantined into)",
    )
    options.add_format_argument(p)
    options.examples(
        p,
        "jitwarden dir                 every cache, its source and this environment's partition",
        "jitwarden dir triton          only the Triton paths, one per line (for scripts)",
    )
    p.set_defaults(func=run)


def locations_of(env, digest: str | None, kinds) -> list[dict]:
    """One record per cache dir: kind, path, source, exists, partition (this environment's, or None)."""
    from jitwarden.model import kinds as kind_rows
    from jitwarden.store import qregistry

    partitioned = {k.name: k.var for k in kind_rows.partitioned(kind_rows.DIR)}
    rows = []
    for kind in kinds:
        if kind == "jitwarden":
            path = os.path.dirname(qregistry.path(env))
            rows.append(
                _row(kind, path, settings.HOME.name if settings.HOME.raw(env) else "default", None)
            )
            continue
        rows += _kind_rows(env, digest, kind, partitioned.get(kind))
    return rows


def _kind_rows(env, digest: str | None, kind: str, var: str | None) -> list[dict]:
    """The records of one kind: its own variable's dir first (``var``: the variable that names it, None for
    a kind not partitioned), then each root its adapter finds, each dir once."""
    from jitwarden import adapters
    from jitwarden.env import locations
    from jitwarden.store import partition

    found = []
    if var is not None:
        base = partition.base_of(locations.default_base(kind, env))
        found.append((base, var if env.get(var) else "default"))
    for r in adapters.get(kind).discover_roots(env):
        if r.partition or r.source == "partition":
            continue
        found.append((r.base or partition.base_of(r.path), r.source))
    rows, seen = [], set()
    for n, (path, source) in enumerate(found):
        key = os.path.realpath(path)
        if key in seen:
            continue
        seen.add(key)
        # Activation partitions the dir the kind's own variable names (the first), not trees nested in others.
        part = partition.path_for(path, digest) if var is not None and digest and n == 0 else None
        rows.append(_row(kind, path, source, part))
    return rows or [_row(kind, None, "none found", None)]


def _row(kind, path, source, part) -> dict:
    return {
        "kind": kind,
        "path": path,
        "source": source,
        "exists": bool(path) and os.path.isdir(path),
        "partition": part,
        "partition_exists": bool(part) and os.path.isdir(part),
    }


def run(args) -> int:
    from jitwarden.cli.commands import _common
    from jitwarden.model.errors import UsageError
    from jitwarden.model.kinds import NAMES

    every = NAMES + ("jitwarden",)
    if args.kind is not None and args.kind not in every:
        raise UsageError(f"unknown cache kind {args.kind!r} (one of: {', '.join(every)})")
    fp = _common.fingerprint_or_none()
    digest = getattr(fp, "digest", None)
    rows = locations_of(os.environ, digest, (args.kind,) if args.kind else every)
    out.output_format(args).result(
        "dir",
        lambda: {"fingerprint_digest": digest, "dirs": rows},
        lambda: _print(rows, bool(args.kind)),
    )
    if args.kind and not any(r["path"] for r in rows):
        # `cd "$(jitwarden dir jax)"` must not go home silently: say so, and exit 1 (nothing to print).
        print(f"jitwarden: {_none_found(args.kind)}", file=sys.stderr)
        return 1
    return 0


def _none_found(kind: str) -> str:
    """Why ``dir KIND`` has no path: the kind's variable is unset and its tool keeps nothing by default."""
    from jitwarden.model import kinds

    row = kinds.get(kind) if kind in kinds.NAMES else None  # `dir jitwarden` always has its dir
    var = row.var if row is not None else None
    if var and row is not None and row.partition == kinds.FILE:
        return (
            f"no {kind} cache dir here: {var} is unset (a program may still name one in code); "
            f"set {var} to keep {kind}'s cache where jitwarden finds it"
        )
    return f"no {kind} cache dir here: none of the places {kind}'s tool uses exists"


def _print(rows, bare: bool) -> None:
    if bare:  # `cd "$(jitwarden dir triton)"`: the paths only
        raw = not sys.stdout.isatty()
        for r in rows:
            if r["path"]:
                print(r["path"] if raw else display(r["path"]))
        return
    con = out.console()
    g = out.Grid(
        [
            out.Column("KIND"),
            out.Column("PATH"),
            out.Column("SOURCE", hide=2),
            out.Column("PARTITION", hide=1),
        ]
    )
    for r in rows:
        path = out.short_path(r["path"]) if r["path"] else "-"
        path += "" if r["exists"] or not r["path"] else f" {NOT_MADE}"
        part = out.root_label(r["partition"]) if r["partition"] else "-"
        part += "" if r["partition_exists"] or not r["partition"] else f" {NOT_MADE}"
        g.add(r["kind"], path, r["source"], part)
    con.print(g)
    out.footer(
        con,
        out.text(
            (
                "partition: where `jitwarden run` and jitwarden.activate() keep this "
                "environment's caches (<path>/jitwarden-v1/DIGEST)",
                "dim",
            )
        ),
    )
