"""``jitwarden quarantine list|restore|purge``: what the guard and ``clean`` moved aside, and undoing it.

Quarantined entries live in ``<cache dir>/jitwarden-quarantine/<UTC stamp>-<entry id>/``
beside the cache dir (or partition) they came from. ``restore`` and ``purge`` print
their plan first, accept ``--dry-run`` and ``-y``, and default to No when asked.
"""

from __future__ import annotations

import os
import sys
import time

from .. import partition
from .. import quarantine as q
from ..adapters import triton as tri
from ..errors import UsageError


def register(sub) -> None:
    p = sub.add_parser("quarantine", help="list, restore or purge quarantined cache entries",
                       description="List, restore or purge cache entries jitwarden moved aside.")
    qs = p.add_subparsers(dest="action", metavar="ACTION")
    ls = qs.add_parser("list", help="list quarantined entries")
    _common(ls)
    rs = qs.add_parser("restore", help="move a quarantined entry back")
    rs.add_argument("ids", nargs="+", metavar="ID", help="quarantine id (as listed), or a unique prefix or entry id")
    rs.add_argument("--replace", action="store_true", help="quarantine a rebuilt entry in the way instead of refusing")
    _common(rs, destructive=True)
    ps = qs.add_parser("purge", help="delete quarantined entries for good")
    ps.add_argument("ids", nargs="*", metavar="ID", help="quarantine ids (default: all, with --all)")
    ps.add_argument("--all", action="store_true", help="every quarantined entry")
    ps.add_argument("--older-than", type=float, metavar="DAYS", help="only entries quarantined more than DAYS ago")
    _common(ps, destructive=True)
    p.set_defaults(func=run, action=None)


def _common(p, destructive: bool = False) -> None:
    p.add_argument("--root", action="append", metavar="PATH", help="cache root to look in (repeatable; default: every root found)")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--long", action="store_true", help="show full paths")
    if destructive:
        p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
        p.add_argument("-y", "--yes", action="store_true", help="do not ask")


def cache_dirs(env=os.environ) -> list[str]:
    """Every Triton cache dir holding a quarantine: the scanner's roots and their partitions.

    The guard quarantines only inside Triton cache dirs, and discovery already covers
    partitioned Inductor/vLLM trees and jitwarden's private roots.
    """
    seen, out = set(), []
    for r in tri.discover_roots(env):
        for x in tri.expand_partitions(r):
            k = os.path.realpath(x.path)
            if k not in seen and os.path.isdir(q.quarantine_dir(x.path)):
                seen.add(k)
                out.append(x.path)
    return out


def records(args) -> list[q.Record]:
    if args.root:
        for r in args.root:
            if not os.path.isdir(r):
                raise UsageError(f"{r}: not a directory")
        dirs = []
        for r in args.root:
            dirs.append(os.path.abspath(r))
            dirs += [p for p, _ in partition.list_partitions(os.path.abspath(r))]
    else:
        dirs = cache_dirs()
    out = []
    for d in dirs:
        out += q.list_root(d)
    return sorted(out, key=lambda r: (r.quarantined_at, r.id))


def pick(recs: list[q.Record], ids: list[str]) -> list[q.Record]:
    """Records named by id, unique id prefix, or entry id (pure)."""
    chosen = []
    for i in ids:
        exact = [r for r in recs if r.id == i]
        cands = exact or [r for r in recs if r.id.startswith(i) or r.entry_id == i]
        if not cands:
            raise UsageError(f"no quarantined entry {i!r} (see `jitwarden quarantine list`)")
        if len(cands) > 1:
            raise UsageError(f"{i!r} names {len(cands)} quarantined entries; give the full id")
        chosen.append(cands[0])
    return chosen


def _print_list(recs, args) -> None:
    from .. import report as out

    if args.format == "json":
        out.print_json({"schema": 1, "tool": out.tool(), "command": "quarantine list",
                        "quarantined": [r.to_json() for r in recs]})
        return
    con = out.console()
    if not recs:
        con.print("nothing quarantined")
        return
    from rich.table import Table

    t = Table(box=None, pad_edge=False)
    for col in ("id", "reason", "age", "size", "from", "why"):
        t.add_column(col)
    for r in recs:
        where = r.original_path if args.long else out.short_path(r.root)
        why = "; ".join(r.details) or "-"
        t.add_row(r.id, r.reason, out.human_age(r.quarantined_at), out.human_bytes(r.bytes), where,
                  why if args.long or len(why) < 90 else why[:87] + "...")
    con.print(t)
    con.print(f"[dim]{len(recs)} quarantined, {out.human_bytes(sum(r.bytes for r in recs))}[/dim]")


def _confirm(args, question: str) -> bool:
    if args.dry_run:
        return False
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("not a terminal: pass -y to proceed, or --dry-run to see the plan only")
    ans = input(f"{question} [y/N] ").strip().lower()
    return ans in ("y", "yes")


def _plan_json(action, plan, done, args) -> None:
    from .. import report as out

    out.print_json({"schema": 1, "tool": out.tool(), "command": f"quarantine {action}", "dry_run": bool(args.dry_run),
                    "plan": plan, "done": done})


def _apply(chosen, action) -> list[str]:
    """Run ``action`` on each record in order; the first failure stops with a one-line usage error."""
    done = []
    for r in chosen:
        try:
            action(r)
        except q.QuarantineError as exc:
            raise UsageError(str(exc)) from None
        done.append(r.id)
    return done


def run(args) -> int:
    if args.action is None:
        raise UsageError("quarantine needs an action: list, restore or purge")
    recs = records(args)
    if args.action == "list":
        _print_list(recs, args)
        return 0
    if args.action == "restore":
        chosen = pick(recs, args.ids)
        plan = []
        for r in chosen:
            conflict = os.path.lexists(r.original_path)
            if conflict and not args.replace:
                raise UsageError(f"{r.original_path} exists (rebuilt since {r.id} was quarantined); "
                                 "pass --replace to quarantine it and restore this one")
            plan.append({"id": r.id, "to": r.original_path, "replaces": conflict})
        if args.format != "json":
            for p in plan:
                extra = " (the entry there is quarantined first)" if p["replaces"] else ""
                print(f"restore {p['id']} -> {p['to']}{extra}", file=sys.stderr)
        done = []
        if _confirm(args, f"Restore {len(plan)} entr{'y' if len(plan) == 1 else 'ies'}?"):
            done = _apply(chosen, lambda r: q.restore(r, replace=args.replace))
        if args.format == "json":
            _plan_json("restore", plan, done, args)
        elif done:
            print(f"restored {len(done)}", file=sys.stderr)
        return 0
    # purge
    if not args.ids and not args.all:
        raise UsageError("purge needs ids or --all")
    chosen = pick(recs, args.ids) if args.ids else list(recs)
    if args.older_than is not None:
        cutoff = time.time() - args.older_than * 86400
        chosen = [r for r in chosen if r.quarantined_at < cutoff]
    plan = [{"id": r.id, "path": r.path, "bytes": r.bytes} for r in chosen]
    if args.format != "json":
        for p in plan:
            print(f"delete {p['id']} ({p['path'] if args.long else p['bytes']} bytes)", file=sys.stderr)
        if not plan:
            print("nothing to purge", file=sys.stderr)
    done = []
    if plan and _confirm(args, f"Delete {len(plan)} quarantined entr{'y' if len(plan) == 1 else 'ies'} for good?"):
        done = _apply(chosen, q.purge)
    if args.format == "json":
        _plan_json("purge", plan, done, args)
    elif done:
        print(f"purged {len(done)}", file=sys.stderr)
    return 0
