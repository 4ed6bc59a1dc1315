"""``jitwarden budget [SIZE]``: keep every JIT cache of this environment within one size (and inode) budget.

``ccache -M 20G`` for GPU JIT caches: the live partitions of every kind together (Triton, Inductor, vLLM,
torch extensions, JAX, CuPy), whole entries evicted least recently *used* first, as the runtime's use log
says (``ops/budget``). A separate verb rather than ``prune --max-size``: ``prune`` removes whole
partitions of *other* environments and never touches the live one; ``budget`` works inside the live one,
entry by entry. Prints the plan and asks first; evicted entries are moved into quarantine and deleted
(``--keep-quarantined``: left restorable, ``quarantine restore --batch ID`` puts them back).
"""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model import settings
from jitwarden.model.errors import UsageError
from jitwarden.model.text import display, human_age, human_size, plural
from jitwarden.ops import budget as jb
from jitwarden.store import quarantine as q


def register(sub) -> None:
    p = sub.add_parser(
        "budget",
        help="keep every kernel cache of this environment within one disk budget, LRU first",
        description="Evict whole cache entries of this environment's partitions (every kind together), "
        "least recently used first, until they fit SIZE (and --inodes). Used means served to a guarded "
        "process (its use log; JAX's own -atime); entries a live process holds are never evicted. "
        "Prints the plan and asks first.",
    )
    p.add_argument(
        "size",
        nargs="?",
        metavar="SIZE",
        help=f"the budget: 500M, 20G (default: {settings.BUDGET.name})",
    )
    p.add_argument(
        "--inodes",
        metavar="N",
        help=f"also keep files and directories within N (default: {settings.BUDGET_INODES.name})",
    )
    p.add_argument(
        "--keep-quarantined",
        action="store_true",
        help="leave evicted entries restorable in quarantine",
    )
    options.add_format_argument(p)
    p.add_argument("--long", action="store_true", help="list every entry evicted, with full paths")
    options.add_action_arguments(p)
    options.examples(
        p,
        "jitwarden budget 20G --dry-run          the plan: what goes, per kind, and what stays",
        "jitwarden budget 20G --inodes 500000 -y  evict least recently used entries until both fit",
        "jitwarden budget 5G --keep-quarantined   evicted entries stay restorable",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    limit = jb.budget_of(args.size, args.inodes, os.environ)
    fp = _common.fingerprint_or_none()
    digest = getattr(fp, "digest", None)
    if digest is None:
        raise UsageError("the current fingerprint is unavailable, so its partitions are unknown")
    plan, cen = jb.planned(os.environ, digest, limit)
    fmt = out.output_format(args)
    fmt.human(_print_plan, plan, cen, args.long)
    for path, why in cen.problems:
        print(f"jitwarden: warning: {display(path)}: {why}", file=sys.stderr)
    question = f"Evict {plural(len(plan.evict), 'entry', 'entries')} ({human_size(plan.bytes)})?"
    if not plan.evict or not _common.confirm(args, question):
        fmt.result(
            "budget",
            lambda: _body(plan, cen, [], args),
            lambda: (
                plan.evict
                and print(
                    "dry run: nothing changed" if args.dry_run else "nothing changed",
                    file=sys.stderr,
                )
            ),
        )
        return 0
    batch = q.new_batch("budget")
    outcomes = jb.apply(
        plan,
        os.environ,
        digest,
        keep_quarantined=args.keep_quarantined,
        lock_timeout=args.lock_timeout,
        batch=batch,
    )
    _record(plan, outcomes)
    kept = batch if args.keep_quarantined and any(o.quarantine_id for o in outcomes) else None
    fmt.result(
        "budget",
        lambda: _body(plan, cen, outcomes, args, kept),
        lambda: _print_outcomes(outcomes, kept, plan.roots, plan),
    )
    return 0


def _record(plan: jb.BudgetPlan, outcomes) -> None:
    """What ``metrics`` reports: size and entries per kind after this run, and evictions added up."""
    from jitwarden.ops import metrics

    metrics.record_budget(plan.after, jb.evicted_by_kind(plan, outcomes), os.environ)


def _print_plan(plan: jb.BudgetPlan, cen: jb.Census, long: bool) -> None:
    con = out.console()
    if not cen.roots:
        con.print(out.text("no partition of this environment yet: nothing to budget"))
        return
    g = out.Grid(
        [
            out.Column("KIND"),
            out.Column("ENTRIES", right=True),
            out.Column("SIZE", right=True),
            out.Column("INODES", right=True),
            out.Column("EVICT", right=True),
            out.Column("FREES", right=True),
            out.Column("AFTER", right=True),
        ]
    )
    gone = plan.by_kind()
    for kind, t in plan.before.items():
        e = gone.get(kind, jb.KindTotals())
        a = plan.after.get(kind, jb.KindTotals())
        g.add(
            kind,
            f"{t.entries:,}",
            human_size(t.bytes),
            f"{t.inodes:,}",
            f"{e.entries:,}",
            human_size(e.bytes),
            human_size(a.bytes),
        )
    con.print(g)
    if long:
        for u in plan.evict:
            used = f"used {human_age(u.last_used)} ago" if u.last_used else "never served"
            more = f" (+{len(u.items) - 1} with it)" if len(u.items) > 1 else ""
            con.print(out.text(f"  evict {u.head.kind} {u.head.path}{more}: {used}"))
    lines = [
        f"budget {plan.budget.describe()}: {human_size(cen.bytes)}, {cen.inodes:,} inodes now; "
        f"plan: {plural(len(plan.evict), 'entry', 'entries')}, {human_size(plan.bytes)}"
    ]
    if plan.pinned:
        lines.append(f"{plural(len(plan.pinned), 'entry', 'entries')} held by a live process: kept")
    if plan.unknown:
        lines.append(
            f"{plural(len(plan.unknown), 'entry', 'entries')} could not be read: unknown, kept "
            "(`jitwarden doctor` names them)"
        )
    if not plan.fits:
        lines.append("what must stay is over the budget: it does not fit after this plan")
    for ln in lines:
        con.print(out.text((ln, "dim")))


def _print_outcomes(outcomes, batch: str | None, roots, plan: jb.BudgetPlan) -> None:
    for o in outcomes:
        if o.status == "skipped":
            print(f"jitwarden: skipped {display(o.path)}: {o.why}", file=sys.stderr)
    gone = jb.evicted_by_kind(plan, outcomes)
    n, size = sum(v[0] for v in gone.values()), sum(v[1] for v in gone.values())
    print(f"evicted {plural(n, 'entry', 'entries')}, {human_size(size)}")
    if batch:  # --keep-quarantined: one command puts every entry of this run back
        print(_common.undo_line(batch, roots))


def _body(plan, cen, outcomes, args, batch: str | None = None) -> dict:
    """The JSON body: ``plan`` and ``done`` as every command has them, and the totals per kind."""
    return {
        "dry_run": bool(args.dry_run),
        "batch": batch,
        "keep_quarantined": bool(args.keep_quarantined),
        **plan.to_json(),
        "roots": [r.path for r in cen.roots],
        "plan": [
            out.plan_record(
                u.head.id,
                u.head.kind,
                u.head.root,
                u.head.path,
                u.bytes,
                "least recently used",
                **{
                    k: v for k, v in u.to_json().items() if k not in ("kind", "id", "path", "bytes")
                },
            )
            for u in plan.evict
        ],
        "done": [out.done_record(**o.to_json()) for o in outcomes],
    }
