"""``jitwarden prune [PATH…]``: remove whole fingerprint partitions, least recently used first.

A partition (``<root>/jitwarden-v1/<digest>/``) holds what one environment compiled.
Never the current environment's, never one written to within ``--orphan-age`` (a live
process); each is renamed into quarantine under the locks of its root and itself, then
deleted (``--keep-quarantined``: left restorable there).
"""

from __future__ import annotations

import os
import sys
import time

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import UsageError
from jitwarden.model.layout import PARTITIONS_DIR
from jitwarden.model.text import age_arg, display, human_age, human_size, plural, size_arg
from jitwarden.ops import maintenance
from jitwarden.ops import plans as cleanplan
from jitwarden.store import locks as lock
from jitwarden.store import partition
from jitwarden.store import quarantine as q


def register(sub) -> None:
    p = sub.add_parser(
        "prune",
        help="remove whole partitions of other environments, least recently used first",
        description="Remove whole fingerprint partitions (never the current environment's), least "
        "recently used first. Prints the plan and asks first.",
    )
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="roots holding partitions (default: every root found)",
    )
    p.add_argument(
        "--keep-last",
        type=int,
        metavar="N",
        help="keep the N most recently used partitions per root (the current one counts)",
    )
    options.refuse(
        p,
        "--keep",
        "renamed --keep-last N (how many recently used partitions to keep)",
        takes_value=True,
    )
    p.add_argument(
        "--max-size",
        type=size_arg,
        metavar="SIZE",
        help="drop the least recently used until a root's partitions fit in SIZE (500M, 20G)",
    )
    p.add_argument(
        "--older-than",
        type=age_arg,
        metavar="AGE",
        help="drop partitions unused for more than AGE (30d, 12h)",
    )
    p.add_argument(
        "--orphan-age",
        type=age_arg,
        default=None,
        metavar="AGE",
        help="a partition written to more recently than AGE is in use and kept (default 1h)",
    )
    p.add_argument(
        "--keep-quarantined",
        action="store_true",
        help="leave pruned partitions restorable in quarantine",
    )
    options.refuse(
        p,
        "--purge",
        "prune already deletes (after moving each partition into quarantine); "
        "--keep-quarantined leaves them restorable instead",
    )
    options.add_format_argument(p)
    p.add_argument("--long", action="store_true", help="show full paths")
    options.add_action_arguments(p)
    options.examples(
        p,
        "jitwarden prune --keep-last 2           the two partitions used last stay",
        "jitwarden prune --older-than 30d --dry-run",
        "jitwarden prune --max-size 20G --keep-quarantined",
    )
    p.set_defaults(func=run)


def bases(paths) -> list[str]:
    """Roots that hold a partitions dir: those named, else every discovered root's base."""
    if paths:
        out_ = []
        for p in paths:
            if not os.path.isdir(p):
                raise UsageError(f"{display(p)}: not a directory")
            s = partition.split(os.path.abspath(p))
            out_.append(s[0] if s else os.path.abspath(p))
        return out_
    from jitwarden.ops.roots import default_roots

    cands = []
    for r, _ in default_roots():
        cands += [partition.base_of(r.path)] + ([r.base] if r.base else [])
    seen, out_ = set(), []
    for c in cands:
        k = os.path.realpath(c)
        if k not in seen and os.path.isdir(os.path.join(c, PARTITIONS_DIR)):
            seen.add(k)
            out_.append(c)
    return out_


def facts(base_list, current) -> list[cleanplan.PartitionFacts]:
    out_ = []
    for b in base_list:
        for path, info in partition.list_partitions(b):
            out_.append(
                maintenance.partition_facts(
                    b, path, os.path.basename(path), info.last_used if info else None, current
                )
            )
    return out_


def _check(args) -> None:
    """Refuse (:class:`UsageError`) a prune that names no rule, or keeps fewer than one partition."""
    if args.keep_last is None and args.max_size is None and args.older_than is None:
        raise UsageError("prune needs --keep-last N, --max-size SIZE or --older-than AGE")
    if args.keep_last is not None and args.keep_last < 1:
        raise UsageError("--keep-last must be at least 1 (the current partition always stays)")


def _current_digest() -> str:
    """This environment's digest, whose partition is never pruned; :class:`UsageError` when unknown."""
    current = getattr(_common.fingerprint_or_none(), "digest", None)
    if current is None:
        raise UsageError(
            "the current fingerprint is unavailable, so its partition cannot be told apart; nothing pruned"
        )
    return current


def run(args) -> int:
    _check(args)
    busy = _common.orphan_age(args)
    current = _current_digest()
    base_list = bases(args.paths)
    for b in (
        base_list
    ):  # a partitions dir that is a symlink out of the root, another user's, ...: stop here
        lock.vet(b)
    now = time.time()
    parts = facts(base_list, current)
    plan = cleanplan.plan_prune(
        parts, args.keep_last, args.max_size, args.older_than, now, busy, current
    )
    fmt = out.output_format(args)
    fmt.human(_print_plan, plan, args.long, _nothing_why(parts, now, args.older_than, busy))
    if not plan.actions or not _common.confirm(
        args, f"Remove {plural(len(plan.actions), 'partition')} ({human_size(plan.bytes)})?"
    ):
        fmt.result(
            "prune",
            lambda: _body(plan, [], args),
            lambda: (
                plan.actions
                and print(
                    "dry run: nothing changed" if args.dry_run else "nothing changed",
                    file=sys.stderr,
                )
            ),
        )
        return 0
    # execute() decides again under the locks and acts only on what was shown and is still chosen.
    chosen_bases = sorted({a.partition.base for a in plan.actions})
    batch = q.new_batch("prune")
    outcomes = plan.execute(
        keep_quarantined=args.keep_quarantined,
        lock_timeout=args.lock_timeout,
        batch=batch,
        replan=lambda: cleanplan.plan_prune(
            facts(chosen_bases, current),
            args.keep_last,
            args.max_size,
            args.older_than,
            time.time(),
            busy,
            current,
        ),
    )
    kept = batch if args.keep_quarantined and any(o.quarantine_id for o in outcomes) else None
    fmt.result(
        "prune",
        lambda: _body(plan, outcomes, args, kept),
        lambda: _print_outcomes(outcomes, kept, chosen_bases),
    )
    return 0


def _nothing_why(parts, now: float, older_than: float | None, busy: float = 0.0) -> str:
    """Why a plan is empty, in a few words: no other partition, the ``--orphan-age`` rule that kept those written
    to lately, or how long the longest unused one was unused."""
    from jitwarden.model.text import human_duration

    others = [p for p in parts if not p.current]
    if not others:
        return "no partition of another environment"
    fresh = [p for p in others if busy and now - p.newest < busy]
    if fresh:
        return (
            f"{plural(len(fresh), 'partition')} of other environments kept: a file in "
            f"{'it' if len(fresh) == 1 else 'each'} was written within --orphan-age "
            f"({human_duration(busy)}), so it may be in use (a smaller --orphan-age takes "
            f"{'it' if len(fresh) == 1 else 'them'})"
        )
    idle = max(now - p.last_used for p in others)
    limit = (
        f", not more than {human_duration(older_than)}"
        if older_than is not None and idle <= older_than
        else ""
    )
    return (
        f"{plural(len(others), 'partition')} of other environments, the longest unused for "
        f"{human_duration(max(idle, 0.0))}{limit}"
    )


def _print_plan(plan, long: bool, why: str = "") -> None:
    con = out.console()
    if not plan.actions:
        con.print(out.text("nothing to prune" + (f": {why}" if why else "")))
        return
    g = out.Grid(
        [
            out.Column("PARTITION", flex=long),
            out.Column("ROOT", flex=True, min=10),
            out.Column("LAST USED"),
            out.Column("SIZE", right=True),
            out.Column("WHY", wrap=True, min=10),
        ]
    )
    for a in plan.actions:
        p = a.partition
        g.add(
            p.path if long else p.digest,
            out.short_path(p.base),
            human_age(p.last_used) + " ago",
            human_size(p.bytes),
            a.why,
        )
    con.print(g)
    con.print(
        out.text(
            (f"plan: {plural(len(plan.actions), 'partition')}, {human_size(plan.bytes)}", "dim")
        )
    )


def _print_outcomes(outcomes, batch: str | None, bases) -> None:
    for o in outcomes:
        if o.status == "skipped" or o.why:
            print(f"jitwarden: {o.status} {display(o.path)}: {o.why}", file=sys.stderr)
    done = [o for o in outcomes if o.status != "skipped"]
    print(f"pruned {plural(len(done), 'partition')}, {human_size(sum(o.bytes for o in done))}")
    if batch:  # --keep-quarantined: one command puts every partition of this run back
        print(_common.undo_line(batch, bases))


def _body(plan, outcomes, args, batch: str | None = None) -> dict:
    """The JSON body: ``plan`` and ``done`` as every command has them (cli/render/output.py); ``batch``: the id
    ``quarantine restore --batch`` takes back (``--keep-quarantined``; null otherwise)."""
    return {
        "dry_run": bool(args.dry_run),
        "batch": batch,
        "keep_quarantined": bool(args.keep_quarantined),
        "plan": [
            out.plan_record(
                a.partition.digest,
                "partition",
                a.partition.base,
                a.partition.path,
                a.partition.bytes,
                a.why,
                **{k: v for k, v in a.to_json().items() if k not in ("path", "bytes", "why")},
            )
            for a in plan.actions
        ],
        "done": [out.done_record(**o.to_json()) for o in outcomes],
    }
