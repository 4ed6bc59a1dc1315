"""``jitwarden relocate [PATH…]``: make a moved or copied Triton cache hit again, after proving its kernels.

Triton's group files name each file of an entry by absolute path. A cache copied or moved elsewhere (rsync, an
image layer, a CI artifact) names paths that no longer exist, so Triton drops every group and recompiles
(finding ``moved``). ``relocate`` first rebuilds each such kernel from its own PTX (as ``verify --rebuild``),
then points the group files of the kernels that rebuilt byte for byte at their own files; nothing unproven is
relocated. Each old group file goes into quarantine with the run's batch id, so ``quarantine restore --batch ID
--replace`` (the ``undo:`` line) puts it back. Prints the plan, asks (default No); ``-y``, ``--dry-run``.
"""

from __future__ import annotations

import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.findings import Severity
from jitwarden.model.text import display, plural
from jitwarden.ops import plans
from jitwarden.store import quarantine as q


def register(sub) -> None:
    p = sub.add_parser(
        "relocate",
        help="make a moved or copied Triton cache hit again (its kernels proven by a rebuild first)",
        description="Rebuild every kernel whose group file names paths of another tree that are gone "
        "(finding `moved`), then point the group files of those that rebuilt byte for byte at their own "
        "files, so Triton loads them again instead of recompiling. The old group files go into quarantine: "
        "the printed `undo:` line puts them back.",
    )
    options.add_scan_arguments(p)
    options.add_rebuild_arguments(p, always=True)
    options.add_action_arguments(p)
    options.examples(
        p,
        "jitwarden relocate --dry-run            after rsync, an image layer or a CI artifact: the plan",
        "jitwarden relocate /data/ci-cache -y    prove and relocate a copied cache",
        "jitwarden quarantine restore --batch ID --replace   undo (the printed undo: line)",
    )
    p.set_defaults(func=run)


def _is_moved(e) -> bool:
    """A moved entry worth a rebuild: one with an error finding (a child mapped to another file's name:
    ``mismatch``) is kept as it is, before any rebuild."""
    return any(f.code == "moved" for f in e.findings) and not any(
        f.severity >= Severity.ERROR for f in e.findings
    )


def run(args) -> int:
    req = _common.rebuild_request(args)
    assert req is not None  # relocate always rebuilds (options.add_rebuild_arguments(always=True))
    fp = _common.fingerprint_or_none()
    orphan_age = _common.orphan_age(args)
    memo: dict = {}

    def decide() -> plans.RelocatePlan:
        results: dict = {}
        report = _common.run_scan(args, fp)
        report = _common.rebuilt(report, req, results, memo=memo, select=_is_moved)
        return plans.plan_relocate(report, {p: r.verdict for p, r in results.items()})

    plan = decide()
    fmt = out.output_format(args)
    fmt.human(print_plan, plan)
    outcomes: list = []
    batch = q.new_batch("relocate")
    if plan.actions and _common.confirm(
        args, f"Point {plural(len(plan.actions), 'entry')} at their own files?"
    ):
        outcomes = plan.execute(
            batch=batch, orphan_age=orphan_age, lock_timeout=args.lock_timeout, replan=decide
        )
    done = [o for o in outcomes if o.status == "relocated"]
    fmt.result(
        "relocate",
        lambda: _body(plan, outcomes, args, batch if done else None),
        lambda: _print_outcomes(plan, outcomes, args, batch),
    )
    return 0


def print_plan(plan: plans.RelocatePlan) -> None:
    if not plan.actions and not plan.kept:
        print("nothing to relocate: no entry names paths of a tree that is gone")
        return
    for a in plan.actions:
        print(
            f"relocate {out.short_key(a.id)} in {display(out.short_path(a.root))}: proven by a rebuild"
        )
    for _path, id_, why in plan.kept:
        print(f"keep {out.short_key(id_)} as it is: {display(why)}")
    print(
        f"plan: {plural(len(plan.actions), 'entry')} to point at their own files, "
        f"{len(plan.kept)} kept as they are"
    )


def _print_outcomes(plan, outcomes, args, batch: str) -> None:
    if not outcomes:
        if plan.actions:
            print(
                "dry run: nothing changed" if args.dry_run else "nothing changed", file=sys.stderr
            )
        return
    for o in outcomes:
        if o.status == "skipped":
            print(f"jitwarden: skipped {display(o.path)}: {o.why}", file=sys.stderr)
    done = [o for o in outcomes if o.status == "relocated"]
    print(f"relocated {len(done)}, skipped {len(outcomes) - len(done)}")
    if done:
        print(_common.undo_line(batch, plan.roots, replace=True))


def _body(plan, outcomes, args, batch: str | None) -> dict:
    """The JSON body: ``plan`` and ``done`` as every command has them (cli/render/output.py), ``kept`` (moved
    entries not relocated, with why) and ``batch`` (what ``quarantine restore --batch`` takes back)."""
    return {
        "dry_run": bool(args.dry_run),
        "batch": batch,
        "plan": [
            out.plan_record(a.id, a.kind, a.root, a.path, a.bytes, "moved, proven by a rebuild")
            for a in plan.actions
        ],
        "kept": [{"path": p, "id": i, "why": why} for p, i, why in plan.kept],
        "done": [out.done_record(**o.to_json()) for o in outcomes],
    }
