"""``jitwarden clean [PATH…]``: move bad cache entries into quarantine (``--purge``: delete them).

Only entries with findings (default: every error-level one) or the ones selected; ``--all`` moves every
entry of the roots, a restorable ``rm -rf`` (as ``uv cache clean`` or ``ccache -C``, but undone by
``quarantine restore``). ``quarantine empty`` is what empties the quarantine.

Scan, plan (a pure function of the findings), print the plan, ask (default No; ``-y``
skips, ``--dry-run`` stops), then under each root's lock re-scan and carry out only
what was shown and is still selected. Exit 0 when done (skipped entries are named on
stderr), 2 for bad input or a lock that cannot be taken.
"""

from __future__ import annotations

import os
import sys
import time

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import UsageError
from jitwarden.model.findings import NEVER_CLEANED
from jitwarden.model.text import age_arg, display, human_size, plural
from jitwarden.ops import plans as cleanplan
from jitwarden.store import quarantine as q


def register(sub) -> None:
    p = sub.add_parser(
        "clean",
        help="move bad cache entries into quarantine (--all: every entry)",
        description="Move cache entries with findings into quarantine (default: every error-level "
        "finding); only those: sound entries stay. --all moves every entry of the roots "
        "(a restorable rm -rf). Prints the plan and asks first. The quarantine itself is "
        "emptied by `jitwarden quarantine empty`.",
    )
    options.add_scan_arguments(p)
    sel = p.add_argument_group("what to take (codes are or'ed; --older-than and --kind narrow)")
    sel.add_argument(
        "--code",
        action="append",
        metavar="CODE",
        help="entries with this finding code (repeatable)",
    )
    sel.add_argument(
        "--stale", action="store_true", help="entries built by another Triton/torch/vLLM/ptxas"
    )
    sel.add_argument(
        "--foreign-arch", action="store_true", help="entries built for another GPU than --target's"
    )
    sel.add_argument(
        "--orphans",
        action="store_true",
        help="leftovers of interrupted writes older than --orphan-age",
    )
    sel.add_argument(
        "--older-than",
        type=age_arg,
        metavar="AGE",
        help="only entries whose newest file is older than AGE (7d, 12h, 30m); alone: every such entry",
    )
    sel.add_argument(
        "--all",
        action="store_true",
        help="every entry of the roots (PATH, or every root found; --kind narrows), findings or not: "
        "the whole cache moves into quarantine, restorable",
    )
    options.add_rebuild_arguments(p)
    options.add_action_arguments(p, purge=True)
    options.examples(
        p,
        "jitwarden clean --dry-run               the plan: entries with error-level findings",
        "jitwarden clean --stale -y              also entries no toolchain here reads",
        "jitwarden clean --all ~/.triton/cache   the whole cache into quarantine, restorable",
    )
    p.set_defaults(func=run)


def scan(args, fp, req, memo: dict | None = None):
    """The scan ``verify`` would make with the same options (``--rebuild`` included); ``memo`` keeps the rebuild
    results across the scans of one run (plan, replan under the locks, follow-ups): each kernel is rebuilt once."""
    report = _common.run_scan(args, fp)
    return _common.rebuilt(report, req, memo=memo) if req is not None else report


def selection_of(args, now: float) -> cleanplan.Selection:
    _common.check_codes(args.code)
    for c in sorted(NEVER_CLEANED & set(args.code or ())):
        raise UsageError(
            f"--code {c}: what this user may not read is unknown, not damage, and clean never moves it "
            "(its owner may use it); `jitwarden doctor` prints the chmod or owner that fixes it"
        )
    if args.all:
        given = [
            f
            for f, v in (
                ("--code", args.code),
                ("--stale", args.stale),
                ("--foreign-arch", args.foreign_arch),
                ("--orphans", args.orphans),
                ("--older-than", args.older_than is not None),
            )
            if v
        ]
        if given:
            raise UsageError(
                f"--all takes every entry; {', '.join(given)} would select among them (drop one)"
            )
    return cleanplan.selection(
        args.code,
        args.stale,
        args.foreign_arch,
        args.orphans,
        args.older_than,
        _common.kinds_of(args),
        now,
        every=args.all,
    )


def run(args) -> int:
    sel = selection_of(args, time.time())
    req = _common.rebuild_request(args)
    orphan_age = _common.orphan_age(args)
    fp = _common.fingerprint_or_none(
        args
    )  # also with --target: the judge needs the installed versions, GPU names, driver
    memo: dict = {}
    report = scan(args, fp, req, memo)
    plan = cleanplan.plan_clean(report, sel)
    fmt = out.output_format(args)
    if args.stale:
        _say_other_environments(report)
    fmt.human(print_plan, plan, long=args.long)
    if not plan.actions or not _common.confirm(
        args,
        f"Move {plural(len(plan.actions), 'entry')} "
        f"({human_size(plan.bytes)}) "
        f"{'aside and delete them' if args.purge else 'into quarantine'}?",
    ):
        fmt.result(
            "clean",
            lambda: _body(plan, [], args),
            lambda: (
                plan.actions
                and print(
                    "dry run: nothing changed" if args.dry_run else "nothing changed",
                    file=sys.stderr,
                )
            ),
        )
        return _common.unread_roots_status(report)
    digest = getattr(fp, "digest", None)
    batch = q.new_batch("clean")

    def rescan() -> cleanplan.CleanPlan:
        return cleanplan.plan_clean(scan(args, fp, req, memo), sel)

    # execute() judges again under the lock and acts only on what was shown and is still selected.
    outcomes = plan.execute(
        purge=args.purge,
        orphan_age=orphan_age,
        fingerprint=digest,
        lock_timeout=args.lock_timeout,
        replan=rescan,
        batch=batch,
    )
    shown = {a.path for a in plan.actions}
    outcomes += _cascade(args, fmt, rescan, shown, plan.roots, orphan_age, digest, batch)
    fmt.result(
        "clean",
        lambda: _body(plan, outcomes, args, batch),
        lambda: print_outcomes(outcomes, args.purge, batch, plan.roots),
    )
    return _common.unread_roots_status(report)


def _say_other_environments(report) -> None:
    """Before a ``--stale`` plan, one line per root most of whose entries another toolchain built
    (``_common.other_environments``, the rule ``doctor`` uses to offer no ``clean --stale`` there): most likely
    another environment's cache, in use there, which the plan would take. Said, not refused: the plan still
    asks (default No), and what it moves can be restored."""
    stale, judged, theirs = _common.other_environments(report)
    for root in theirs:
        print(
            f"warning: {len(stale[root])} of {plural(judged[root], 'entry')} in {display(root)} were built "
            f"by {_common.writers(stale[root])}, not by the environment judged against "
            f"({out.environment_words(report.judge)}): most likely another environment's cache, in use there; "
            "`jitwarden doctor --python PATH` judges it against the Python that writes it",
            file=sys.stderr,
        )


def _cascade(
    args, fmt, rescan, shown: set, roots: list, orphan_age: float, digest, batch, rounds: int = 3
) -> list:
    """Entries that fail only because what they depended on was just moved (an AOTAutograd result whose
    FX graph is gone, a vLLM graph list whose artifact was taken): shown as a plan of their own, asked
    again (``-y`` answers), and moved the same way. At most ``rounds`` rounds; ``--dry-run`` never gets here."""
    done: list = []
    if args.paths and not all(os.path.lexists(p) for p in args.paths):
        return done  # a path given was itself an entry, now quarantined: nothing left there to depend on it
    for _ in range(rounds):
        plan = rescan()
        actions = [a for a in plan.actions if a.path not in shown and a.root in roots]
        if not actions:
            return done
        follow = cleanplan.CleanPlan(tuple(actions), plan.selection, ())
        fmt.human(_print_follow_up, follow, long=args.long)
        if not _common.confirm(args, f"Move these {len(actions)} too?"):
            return done
        shown |= {a.path for a in actions}
        done += follow.execute(
            purge=args.purge,
            orphan_age=orphan_age,
            fingerprint=digest,
            lock_timeout=args.lock_timeout,
            replan=rescan,
            batch=batch,
        )
    return done


def _print_follow_up(plan: cleanplan.CleanPlan, long: bool) -> None:
    n = len(plan.actions)
    print(
        f"jitwarden: {n} more entr{'y' if n == 1 else 'ies'} now fail because what they depend on was moved:",
        file=sys.stderr,
    )
    print_plan(plan, long=long)


def print_plan(plan: cleanplan.CleanPlan, long: bool = False) -> None:
    con = out.console()
    for n in plan.notes:
        con.print(out.text(("note", "yellow"), " ", n))
    if not plan.actions:
        con.print(out.text(f"nothing to clean ({plan.selection.describe()})"))
        return
    roots = len({a.root for a in plan.actions}) > 1  # one id can be in a root and its partition
    g = out.Grid(
        [out.Column("ID")]
        + ([out.Column("ROOT", flex=True, min=24, cut="middle", hide=4)] if roots else [])
        + [
            out.Column("KIND", hide=2),
            out.Column("TYPE", hide=1),
            out.Column("SIZE", right=True, hide=3),
            out.Column("WHY", flex=True, min=10),
        ]
        + ([out.Column("PATH", hide=1)] if long else [])
    )
    for a in plan.actions:
        why = ", ".join(a.reasons) + (" (leftovers only)" if a.scope == "leftovers" else "")
        why = "--all" if a.reasons == ("all",) else why
        g.add(
            a.id if long else out.short_key(a.id),
            *([out.root_label(a.root)] if roots else []),
            a.kind,
            a.type,
            human_size(a.bytes),
            why,
            *([a.path] if long else []),
            details=["; ".join(a.details)],
        )
    con.print(g)
    counts = ", ".join(f"{k} {v}" for k, v in plan.by_reason().items())
    out.hanging(
        con,
        out.text(
            (
                f"plan: {plural(len(plan.actions), 'entry')}, {human_size(plan.bytes)} ({counts}) · "
                f"selected: {plan.selection.describe()}",
                "dim",
            )
        ),
    )


def print_outcomes(outcomes, purge: bool, batch: str, roots) -> None:
    moved = [o for o in outcomes if o.status != "skipped"]
    for o in outcomes:
        if o.status == "skipped":
            print(f"jitwarden: skipped {display(o.path)}: {o.why}", file=sys.stderr)
        elif o.why:
            print(f"jitwarden: {display(o.path)}: {o.why}", file=sys.stderr)
    total = human_size(sum(o.bytes for o in moved))
    verb = "deleted" if purge else "quarantined"
    print(f"{verb} {len(moved)} ({total}), skipped {len(outcomes) - len(moved)}")
    if any(o.status == "quarantined" for o in moved):  # not deleted: restorable
        print(_common.undo_line(batch, roots))
        print(
            "      (each entry is listed by `jitwarden quarantine ls`, and restored by its id there)"
        )


def _body(plan, outcomes, args, batch: str | None = None) -> dict:
    """The JSON body: ``plan`` and ``done`` as every command has them (cli/render/output.py); ``batch``, the
    id ``quarantine restore --batch`` takes back (null when nothing ran)."""
    doc = plan.to_json()
    return {
        "dry_run": bool(args.dry_run),
        "batch": batch if any(o.status == "quarantined" for o in outcomes) else None,
        "purge": bool(args.purge),
        "selection": doc["selection"],
        "by_reason": doc["by_reason"],
        "notes": doc["notes"],
        "plan": [
            out.plan_record(
                a["id"],
                a["kind"],
                a["root"],
                a["path"],
                a["bytes"],
                ", ".join(a["reasons"]),
                **{k: v for k, v in a.items() if k not in ("id", "kind", "root", "path", "bytes")},
            )
            for a in doc["actions"]
        ],
        "done": [out.done_record(**o.to_json()) for o in outcomes],
    }
