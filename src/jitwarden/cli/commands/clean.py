"""``jitwarden clean [PATH…]``: move bad cache entries into quarantine (``--purge``: delete them).

Scan, plan (a pure function of the findings), print the plan, ask (default No; ``-y``
skips, ``--dry-run`` stops), then under each root's lock re-scan and carry out only
what was shown and is still selected. Exit 0 when done (skipped entries are named on
stderr), 2 for bad input or a lock that cannot be taken.
"""

from __future__ import annotations

import os
import sys
import time

from jitwarden.ops import plans as cleanplan, maintenance
from jitwarden.store import locks as lock
from jitwarden.cli import render as out
from jitwarden.model.text import age_arg, display
from jitwarden.model.errors import UsageError
from jitwarden.model.findings import CODES
from jitwarden.cli.commands import _common


def register(sub) -> None:
    p = sub.add_parser("clean", help="move bad cache entries into quarantine",
                       description="Move cache entries with findings into quarantine (default: every error-level "
                                   "finding). Prints the plan and asks first.")
    _common.add_scan_arguments(p)
    sel = p.add_argument_group("what to take (codes are or'ed; --older-than and --kind narrow)")
    sel.add_argument("--code", action="append", metavar="CODE", help="entries with this finding code (repeatable)")
    sel.add_argument("--stale", action="store_true", help="entries built by another Triton/torch/vLLM/ptxas")
    sel.add_argument("--foreign-arch", action="store_true", help="entries built for another GPU than --target's")
    sel.add_argument("--orphans", action="store_true", help="leftovers of interrupted writes older than --orphan-age")
    sel.add_argument("--older-than", type=age_arg, metavar="AGE",
                     help="only entries whose newest file is older than AGE (7d, 12h, 30m); alone: every such entry")
    try:
        from jitwarden.cli import options as rebuild_args

        rebuild_args.add_arguments(p)
    except ImportError:  # pragma: no cover - rebuild is part of every install
        pass
    add_action_arguments(p)
    p.set_defaults(func=run)


def scan(args, fp):
    """The scan ``verify`` would make with the same options (``--rebuild`` included)."""
    report = _common.run_scan(args, fp)
    if getattr(args, "rebuild", False):
        from jitwarden.cli.commands.verify import _rebuild

        report = _rebuild(report, args)
    return report


def add_action_arguments(p) -> None:
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    p.add_argument("--purge", action="store_true", help="delete instead of keeping in quarantine (after the move)")
    p.add_argument("--lock-timeout", type=age_arg, default=None, metavar="AGE",
                   help="give up waiting for another jitwarden on the same root after AGE (default: wait)")


def confirm(args, question: str) -> bool:
    """Ask on a terminal (default No); without a terminal, -y is required."""
    if args.dry_run:
        return False
    if args.yes:
        return True
    if not sys.stdin.isatty():
        raise UsageError("not a terminal: pass -y to proceed, or --dry-run to see the plan only")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        ans = sys.stdin.readline().strip().lower()
    except (EOFError, OSError):
        ans = ""
    return ans in ("y", "yes")


def selection_of(args, now: float) -> cleanplan.Selection:
    for c in args.code or ():
        if c not in CODES:
            raise UsageError(f"unknown finding code {c!r} (one of: {', '.join(CODES)})")
    return cleanplan.selection(args.code, args.stale, args.foreign_arch, args.orphans, args.older_than,
                               _common.kinds_of(args), now)


def run(args) -> int:
    sel = selection_of(args, time.time())
    from jitwarden.cli.commands.verify import check_rebuild_options

    check_rebuild_options(args)
    args.keep_existed = bool(getattr(args, "keep", None)) and os.path.lexists(args.keep)
    if getattr(args, "rebuild", False):
        from jitwarden.ops import rebuild

        rebuild.check_arguments(args)
    orphan_age = _common.orphan_age(args)
    fp = _common.fingerprint_or_none()  # also with --target: the judge needs the installed versions, GPU names, driver
    report = scan(args, fp)
    plan = cleanplan.plan_clean(report, sel)
    if args.format != "json":
        print_plan(plan, long=args.long)
    if not plan.actions or not confirm(args, f"Move {len(plan.actions)} entr{'y' if len(plan.actions) == 1 else 'ies'} "
                                             f"({out.human_bytes(plan.bytes)}) "
                                             f"{'aside and delete them' if args.purge else 'into quarantine'}?"):
        if args.format == "json":
            _json(plan, [], args)
        elif plan.actions:
            print("dry run: nothing changed" if args.dry_run else "nothing changed", file=sys.stderr)
        return 0
    shown = {a.path for a in plan.actions}
    digest = getattr(fp, "digest", None)
    with lock.hold(plan.roots, args.lock_timeout):
        # Under the lock, judge again: act only on what was shown and is still selected.
        again = cleanplan.plan_clean(scan(args, fp), sel)
        actions = [a for a in again.actions if a.path in shown]
        gone = shown - {a.path for a in actions}
        outcomes = maintenance.clean(actions, purge=args.purge, orphan_age=orphan_age, fingerprint=digest)
    outcomes += [maintenance.Outcome(p, "", "skipped", "no longer selected (changed since the plan)") for p in sorted(gone)]
    outcomes += _cascade(args, fp, sel, shown, plan.roots, orphan_age, digest)
    if args.format == "json":
        _json(plan, outcomes, args)
    else:
        print_outcomes(outcomes, args.purge)
    return 0


def _cascade(args, fp, sel, shown: set, roots: list, orphan_age: float, digest, rounds: int = 3) -> list:
    """Entries that fail only because what they depended on was just moved (an AOTAutograd result whose
    FX graph is gone, a vLLM graph list whose artifact was taken): shown as a plan of their own, asked
    again (``-y`` answers), and moved the same way. At most ``rounds`` rounds; ``--dry-run`` never gets here."""
    done = []
    for _ in range(rounds):
        with lock.hold(roots, args.lock_timeout):
            plan = cleanplan.plan_clean(scan(args, fp), sel)
            actions = [a for a in plan.actions if a.path not in shown and a.root in roots]
            if not actions:
                return done
            follow = cleanplan.Plan(tuple(actions), plan.selection, ())
            if args.format != "json":
                print(f"jitwarden: {len(actions)} more entr{'y' if len(actions) == 1 else 'ies'} now fail because "
                      "what they depend on was moved:", file=sys.stderr)
                print_plan(follow, long=args.long)
            if not confirm(args, f"Move these {len(actions)} too?"):
                return done
            shown |= {a.path for a in actions}
            done += maintenance.clean(actions, purge=args.purge, orphan_age=orphan_age, fingerprint=digest)
    return done


def print_plan(plan: cleanplan.Plan, long: bool = False) -> None:
    con = out.console()
    for n in plan.notes:
        con.print(out.text(("note", "yellow"), " ", n))
    if not plan.actions:
        con.print(out.text(f"nothing to clean ({plan.selection.describe()})"))
        return
    g = out.Grid([out.Column("ID", flex=long), out.Column("KIND"), out.Column("TYPE", flex=True, min=6),
                  out.Column("SIZE", right=True), out.Column("WHY", flex=True, min=10)])
    for a in plan.actions:
        why = ", ".join(a.reasons) + (" (leftovers only)" if a.scope == "leftovers" else "")
        g.add(a.path if long else out.short_key(a.id), a.kind, a.type, out.human_bytes(a.bytes), why,
              details=["; ".join(a.details)])
    con.print(g)
    counts = ", ".join(f"{k} {v}" for k, v in plan.by_reason().items())
    out.hanging(con, out.text((f"plan: {out.plural(len(plan.actions), 'entry')}, {out.human_bytes(plan.bytes)} ({counts}) · "
                        f"selected: {plan.selection.describe()}", "dim")))


def print_outcomes(outcomes, purge: bool) -> None:
    moved = [o for o in outcomes if o.status != "skipped"]
    for o in outcomes:
        if o.status == "skipped":
            print(f"jitwarden: skipped {display(o.path)}: {o.why}", file=sys.stderr)
        elif o.why:
            print(f"jitwarden: {display(o.path)}: {o.why}", file=sys.stderr)
    total = out.human_bytes(sum(o.bytes for o in moved))
    verb = "deleted" if purge else "quarantined"
    print(f"{verb} {len(moved)} ({total}), skipped {len(outcomes) - len(moved)}")
    ids = [out.short_key(o.id) for o in moved if o.quarantine_id]
    if ids and not purge:
        # The ids the plan showed: `quarantine restore` takes them back, and `quarantine ls` lists this root.
        shown = " ".join(display(i) for i in ids[:3]) + (" …" if len(ids) > 3 else "")
        print(f"undo: jitwarden quarantine restore {shown}")
        print("     (they are listed by `jitwarden quarantine ls`)")


def _json(plan, outcomes, args) -> None:
    out.print_json({"schema": 1, "tool": out.tool(), "command": "clean", "dry_run": bool(args.dry_run),
                    "purge": bool(args.purge), "plan": plan.to_json(), "done": [o.to_json() for o in outcomes]})
