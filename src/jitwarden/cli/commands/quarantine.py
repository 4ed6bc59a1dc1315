"""``jitwarden quarantine ls|restore|empty``: what the guard, ``clean`` and ``prune`` moved aside, and undoing it.

Quarantined entries live in ``<cache dir>/jitwarden-quarantine/<UTC stamp>-<entry id>/``
beside the cache dir (or partition) they came from, each with a record of where it came
from and why. ``restore`` and ``empty`` print their plan first, accept ``--dry-run`` and
``-y``, default to No when asked, and act under the root's lock. ``list`` and ``purge``
are aliases of ``ls`` and ``empty``, with the same arguments and rules.
"""

from __future__ import annotations

import os
import shlex
import time

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import UsageError
from jitwarden.model.text import age_arg, display, human_age, human_size, plural
from jitwarden.ops import plans
from jitwarden.store import partition
from jitwarden.store import quarantine as q
from jitwarden.store.paths import UnsafeName


def register(sub) -> None:
    p = sub.add_parser(
        "quarantine",
        help="list, restore or empty quarantined cache entries",
        description="List, restore or delete cache entries jitwarden moved aside.",
    )
    qs = p.add_subparsers(dest="action", metavar="ACTION")
    for name in ("ls", "list"):
        ls = qs.add_parser(
            name, help="list quarantined entries" + (" (alias of ls)" if name == "list" else "")
        )
        _add_arguments(ls)
        options.examples(
            ls,
            "jitwarden quarantine ls                  every entry set aside, with why and its id",
            "jitwarden quarantine ls --format json    the same for a program",
        )
    rs = qs.add_parser(
        "restore",
        help="move quarantined entries back, byte for byte",
    )
    options.examples(
        rs,
        "jitwarden quarantine restore F3G2KPKATDFY       one entry, by the id `quarantine ls` shows",
        "jitwarden quarantine restore --batch ID         everything one clean, prune or relocate run moved",
        "jitwarden quarantine restore --all --root PATH  everything quarantined in one root",
    )
    rs.add_argument(
        "ids",
        nargs="*",
        metavar="ID",
        help="quarantine id (as listed), or a unique prefix or entry id",
    )
    rs.add_argument(
        "--batch",
        metavar="ID",
        help="every entry one clean, prune or relocate run quarantined (the id its `undo:` line names)",
    )
    rs.add_argument(
        "--all",
        action="store_true",
        help="every quarantined entry (of --root PATH when given)",
    )
    rs.add_argument(
        "--replace",
        action="store_true",
        help="quarantine a rebuilt entry in the way instead of refusing",
    )
    _add_arguments(rs, destructive=True)
    for name in (
        "empty",
        "purge",
    ):  # one command, one set of rules; purge is its alias (as in `pip cache purge`)
        es = qs.add_parser(
            name,
            help="delete quarantined entries for good (only the quarantine: live cache entries "
            "are never touched; `clean --all` moves a whole cache aside)"
            + (" (alias of empty)" if name == "purge" else ""),
        )
        es.add_argument(
            "ids", nargs="*", metavar="ID", help="only these (default: every quarantined entry)"
        )
        es.add_argument(
            "--all",
            action="store_true",
            help="every quarantined entry (the default without ids; refused with ids)",
        )
        es.add_argument(
            "--older-than",
            type=age_arg,
            metavar="AGE",
            help="only entries quarantined more than AGE ago (7d, 12h)",
        )
        _add_arguments(es, destructive=True)
        options.examples(
            es,
            "jitwarden quarantine empty --older-than 7d --dry-run  what a week-old purge would delete",
            "jitwarden quarantine empty F3G2KPKATDFY               one entry, for good",
        )
    options.examples(
        p,
        "jitwarden quarantine ls                      what jitwarden set aside, and why",
        "jitwarden quarantine restore --batch ID      undo one clean, prune or budget run",
        "jitwarden quarantine empty --older-than 7d   delete what was set aside a week ago",
    )
    p.set_defaults(func=run, action=None)


def _add_arguments(p, destructive: bool = False) -> None:
    p.add_argument(
        "--root",
        action="append",
        metavar="PATH",
        help="cache root to look in (repeatable; default: every root found)",
    )
    options.add_format_argument(p)
    p.add_argument("--long", action="store_true", help="show full paths")
    if destructive:
        options.add_action_arguments(p, lock_help="")


def _dirs(args) -> list[str]:
    if not args.root:
        return _common.cache_dirs()
    dirs = []
    for r in args.root:
        if not os.path.isdir(r):
            raise UsageError(f"{display(r)}: not a directory")
        dirs.append(os.path.abspath(r))
        dirs += [p for p, _ in partition.list_partitions(os.path.abspath(r))]
    return dirs


def records(args, include_empty: bool = False) -> list[q.Record]:
    recs = []
    for d in _dirs(args):
        try:
            recs += q.list_root(d, include_empty=include_empty)
        except UnsafeName as exc:
            raise UsageError(
                f"refusing to use the quarantine of {display(d)}: {display(exc.strerror or str(exc))}"
            ) from None
    return sorted(recs, key=lambda r: (r.quarantined_at, r.id))


def short_ids(recs: list[q.Record]) -> dict[tuple[str, str], str]:
    """The shortest id each record, keyed by (root, quarantine id), can be named by in a table, and that
    ``pick`` takes back (pure): the entry's short id (as ``clean``, ``ls`` and ``verify`` show it) when no
    other record of its root has it, else ``<stamp>-<short id>``, else the full quarantine id. The same id in
    two roots (the stock cache and a partition) is told apart by the ROOT column and ``--root``."""

    def stamped(r):
        return r.id.split("-", 1)[0] + "-" + out.short_key(r.entry_id) if "-" in r.id else r.id

    by_root: dict[str, list[q.Record]] = {}
    for r in recs:
        by_root.setdefault(r.root, []).append(r)
    names = {}
    for r in recs:
        for cand in (out.short_key(r.entry_id), stamped(r)):
            if len(pick_candidates(by_root[r.root], cand)) == 1:
                names[(r.root, r.id)] = cand
                break
        else:
            names[(r.root, r.id)] = r.id
    return names


def pick_candidates(recs: list[q.Record], i: str) -> list[q.Record]:
    """Records an argument names, best match first (pure): the quarantine id, else a prefix of it, else the
    entry id, else a prefix of the entry id or of its last path component (the short ids tables show)."""
    for match in (
        lambda r: r.id == i,
        lambda r: r.id.startswith(i),
        lambda r: r.entry_id == i,
        lambda r: r.entry_id.startswith(i) or r.entry_id.rsplit("/", 1)[-1].startswith(i),
    ):
        found = [r for r in recs if match(r)]
        if found:
            return found
    return []


def pick(recs: list[q.Record], ids: list[str], roots=()) -> list[q.Record]:
    """Records named by quarantine id, entry id, the short ids tables show, or a unique prefix (pure).

    ``roots``: the ``--root`` paths given; an id found in several roots is taken from the one named exactly."""
    chosen = []
    exact = {os.path.realpath(r) for r in roots}
    for i in ids:
        cands = pick_candidates(recs, i) if i else []
        if len(cands) > 1 and exact:
            cands = [r for r in cands if os.path.realpath(r.root) in exact] or cands
        if not cands:
            raise UsageError(_none_named(recs, i))
        if len(cands) > 1:
            raise UsageError(_several_named(recs, i, cands))
        chosen.append(cands[0])
    return chosen


def _none_named(recs, i: str) -> str:
    """Why id ``i`` names no record: what is quarantined where, and how to see it or name another root."""
    where = (
        f"{plural(len(recs), 'quarantined entry', 'quarantined entries')} in {_roots_phrase(recs)}"
        if recs
        else "nothing is quarantined in any root jitwarden knows"
    )
    return (
        f"no quarantined entry {display(i)!r} ({where}; see `jitwarden quarantine ls`, "
        "or add --root PATH for a root jitwarden never quarantined into)"
    )


def _several_named(recs, i: str, cands) -> str:
    """Why id ``i`` is ambiguous: the first records it names, and a longer id or ``--root`` to choose."""
    names = short_ids(recs)
    listed = ", ".join(
        f"{display(names[(r.root, r.id)])} in {display(out.short_path(r.root))}" for r in cands[:5]
    )
    roots_ = list(dict.fromkeys(r.root for r in cands))
    hint = (
        f"name a longer id, or add --root {shlex.quote(display(roots_[0]))} to take it from that root"
        if len(roots_) > 1
        else "name a longer id (see `jitwarden quarantine ls`)"
    )
    return (
        f"{display(i)!r} names {len(cands)} quarantined entries: {listed}"
        f"{', …' if len(cands) > 5 else ''}; {hint}"
    )


def _roots_phrase(recs) -> str:
    roots = list(dict.fromkeys(r.root for r in recs))
    shown = ", ".join(display(out.short_path(r)) for r in roots[:2])
    return shown + (f" and {len(roots) - 2} more roots" if len(roots) > 2 else "")


def _print_list(recs, long: bool) -> None:
    con = out.console()
    if not recs:
        con.print(out.text("nothing quarantined"))
        return
    names = short_ids(recs)
    # ids are never cut nor split (they are copied into `restore`); on a narrow terminal REASON, SIZE, AGE and
    # the root move below the row (cli/render/table.py).
    g = out.Grid(
        [
            out.Column("ID"),
            out.Column("ROOT", flex=True, min=24, cut="middle", hide=4),
            out.Column("REASON", hide=3),
            out.Column("AGE", right=True, hide=1),
            out.Column("SIZE", right=True, hide=2),
        ]
        + ([out.Column("BATCH", hide=1), out.Column("FROM", hide=1)] if long else [])
    )
    for r in recs:
        g.add(
            r.id if long else names[(r.root, r.id)],
            out.root_label(r.root),
            r.reason,
            human_age(r.quarantined_at),
            human_size(r.bytes),
            *([r.batch or "-", r.original_path] if long else []),
            details=["; ".join(r.details)],
        )
    con.print(g)
    out.footer(
        con,
        out.text(
            (
                f"{len(recs)} quarantined, "
                f"{human_size(sum(r.bytes for r in recs))} · "
                "restore with `jitwarden quarantine restore ID`",
                "dim",
            )
        ),
    )


def _result(fmt, action: str, plan, done, args, show) -> None:
    fmt.result(
        f"quarantine {action}",
        lambda: {"dry_run": bool(args.dry_run), "plan": plan, "done": done},
        show,
    )


def _plan_json(records, why, **extra) -> list[dict]:
    """A restore or empty plan as every command's ``plan`` (cli/render/output.py): one record per quarantined entry."""
    return [
        out.plan_record(
            r.id,
            r.kind,
            r.root,
            r.path,
            r.bytes,
            why(r),
            entry_id=r.entry_id,
            original_path=r.original_path,
            **{k: f(r) for k, f in extra.items()},
        )
        for r in records
    ]


def _done_json(records, ids, status: str, path) -> list[dict]:
    """The ids a plan's execute() returned, as every command's ``done`` records."""
    by_id = {r.id: r for r in records}
    return [
        out.done_record(
            i,
            path(by_id[i]) if i in by_id else "",
            status,
            bytes=by_id[i].bytes if i in by_id else 0,
            quarantine_id=i,
        )
        for i in ids
    ]


def _execute(plan, timeout, verb: str) -> list[str]:
    """``plan.execute()``; its first failure becomes one usage-error line saying how many were done before it."""
    try:
        return plan.execute(lock_timeout=timeout)
    except plans.PlanError as exc:
        who = f"{display(exc.record_id)}: " if exc.record_id else ""
        raise UsageError(f"{who}{display(exc.why)} ({verb} before it: {exc.done})") from None


def run(args) -> int:
    if args.action is None:
        raise UsageError("quarantine needs an action: ls, restore or empty")
    if args.action in ("ls", "list"):
        recs = records(args)
        out.output_format(args).result(
            "quarantine ls",
            lambda: {"quarantined": [r.to_json() for r in recs]},
            lambda: _print_list(recs, args.long),
        )
        return 0
    if args.action == "restore":
        return _restore(args)
    return _empty(args)


def _chosen(args) -> list[q.Record]:
    """What ``restore`` takes: IDs, one ``--batch``, or ``--all`` (exactly one of them)."""
    given = [w for w, v in (("ID", args.ids), ("--batch", args.batch), ("--all", args.all)) if v]
    if len(given) != 1:
        raise UsageError(
            "quarantine restore takes IDs, --batch ID or --all"
            + (f" (not {' and '.join(given)} together)" if given else "")
        )
    recs = records(args)
    if args.ids:
        return pick(recs, args.ids, args.root or ())
    if args.all:
        return [r for r in recs if r.present]
    batch = [r for r in recs if r.batch == args.batch and r.present]
    if not batch:
        raise UsageError(
            f"no quarantined entry of batch {display(args.batch)!r} (see `jitwarden quarantine ls "
            "--long`, or add --root PATH for a root jitwarden never quarantined into)"
        )
    return batch


def _restore(args) -> int:
    plan = plans.plan_restore(_chosen(args), replace=args.replace)
    if plan.blocked:
        r = plan.blocked[0]
        raise UsageError(
            f"{display(r.original_path)} exists (rebuilt since {display(r.id)} was quarantined); "
            "pass --replace to quarantine it and restore this one"
        )
    fmt = out.output_format(args)
    fmt.human(_print_restore_plan, plan, args)
    done = []
    if _common.confirm(args, f"Restore {plural(len(plan.records), 'entry')}?"):
        done = _execute(plan, args.lock_timeout, "done")
    plan_json = _plan_json(
        plan.records,
        lambda r: f"restore to {r.original_path}",
        replaces=lambda r: r.id in plan.conflicts,
    )
    _result(
        fmt,
        "restore",
        plan_json,
        _done_json(plan.records, done, "restored", lambda r: r.original_path),
        args,
        lambda: _print_done(
            f"restored {len(done)}" if done else "dry run: nothing restored" if args.dry_run else ""
        ),
    )
    return 0


def _print_restore_plan(plan, args) -> None:
    names = short_ids(records(args)) if not args.long else {}
    for r in plan.records:
        extra = " (the entry there is quarantined first)" if r.id in plan.conflicts else ""
        what = (
            r.original_path
            if args.long
            else f"{names.get((r.root, r.id), r.id)} into {out.short_path(r.root)}"
        )
        print(f"restore {display(what)}{extra}")


def _print_done(line: str) -> None:
    if line:
        print(line)


def _empty(args) -> int:
    if args.all and args.ids:
        raise UsageError(
            f"quarantine {args.action}: --all and IDs conflict (--all is every entry; name IDs or pass --all)"
        )
    recs = records(args, include_empty=True)
    picked = pick([r for r in recs if r.present], args.ids, args.root or ()) if args.ids else recs
    plan = plans.plan_empty(
        picked, ids_given=bool(args.ids), older_than=args.older_than, now=time.time()
    )
    fmt = out.output_format(args)
    fmt.human(_print_empty_plan, recs, plan, args.long)
    done = []
    if (plan.records or plan.slots) and _common.confirm(
        args,
        f"Delete {plural(len(plan.records), 'quarantined entry', 'quarantined entries')} for good?",
    ):
        done = _execute(plan, args.lock_timeout, "deleted")
    _result(
        fmt,
        "empty",
        _plan_json(plan.records, lambda r: "delete for good"),
        _done_json(plan.records, done, "deleted", lambda r: r.path),
        args,
        lambda: _print_done(f"deleted {len(done)}" if done else ""),
    )
    return 0


def _print_empty_plan(recs, plan, long: bool) -> None:
    names = short_ids(recs) if not long else {}
    chosen, slots = plan.records, plan.slots
    for r in chosen:
        where = (
            r.path if long else f"{names.get((r.root, r.id), r.id)} from {out.short_path(r.root)}"
        )
        print(f"delete {display(where)} ({human_size(r.bytes)})")
    if slots:
        print(f"remove {plural(len(slots), 'empty slot')} left by interrupted moves")
    if not chosen and not slots:
        print("nothing to delete")
