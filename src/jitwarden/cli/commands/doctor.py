"""``jitwarden doctor``: the main job. Is every kernel cache on this machine sound, and what fixes it?

The fingerprint's headline; every cache root found (Triton, partitions, Inductor's and
vLLM's Triton trees, every other adapter's roots) with size and entry counts; every
finding of ``verify --quick`` (``--rebuild``: also rebuilds) summarised by code; the
guard's start-up warnings; and for each problem the exact command that fixes it.
Exit 0 when nothing is at error level, 1 otherwise, 2 usage, 3 internal.
"""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common, _diagnosis
from jitwarden.model.errors import EXIT_OK
from jitwarden.model.findings import Severity
from jitwarden.model.text import plural


def register(sub) -> None:
    p = sub.add_parser(
        "doctor",
        help="check everything: fingerprint, every cache, findings, warnings, fixes",
        description="The main job: fingerprint this machine, check every kernel cache it uses, "
        "and say what fixes each problem. Exit 1 on any error-level finding (--strict: or any "
        "unproven entry).",
    )
    options.add_scan_arguments(p)
    options.add_strict_argument(p)
    options.add_rebuild_arguments(p)
    options.examples(
        p,
        "jitwarden doctor                        everything found, with the command that fixes each problem",
        "jitwarden doctor --target sm_121        judged as on a GB10 (DGX Spark)",
        "jitwarden doctor --rebuild              also prove every kernel by a rebuild",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    req = _common.rebuild_request(args)
    fp = _common.fingerprint_or_none(args)
    report = _common.run_scan(args, fp)
    if req is not None:
        report = _common.rebuilt(report, req)
    digest = getattr(fp, "digest", None)
    tools = (
        _common.tool_protection()
    )  # each tool's sources read once: the JSON, the text and the warnings
    probs = _diagnosis.every_problem(report, fp, digest, args.paths, req is not None, tools)
    worst = report.worst

    def body() -> dict:
        from jitwarden.env.fingerprint import gpu_json

        return {
            "mode": "rebuild" if req is not None else "quick",
            **out.scan_json(report, digest, entries=[]),
            # its summary counts entries it does not list: said, with the command that lists them
            "entries_omitted": {
                "count": report.summary()["entries"],
                "see": "jitwarden verify --all --format json",
            },
            "headline": fp.headline() if fp is not None else None,
            "gpus": [gpu_json(g) for g in fp.gpus] if fp is not None else [],
            "problems": [p.to_json() for p in probs],
            "protection": [p.to_json() for p in tools],
            "ok": worst != Severity.ERROR,
        }

    code = _common.verdict_exit(report, args.strict)
    out.output_format(args).result(
        "doctor", body, lambda: _print(report, fp, digest, probs, args.long, code, tools)
    )
    return code


def _print(report, fp, digest, probs, long: bool, code: int = EXIT_OK, tools=()) -> None:
    from jitwarden.env import locations
    from jitwarden.model import kinds

    con = out.console()
    where = ", ".join(  # the roots Triton's kernels land in: Triton's, and those its row says hold Triton trees
        out.short_path(locations.default_base(k.name, os.environ))
        for k in kinds.ROWS
        if k.triton_trees
    )
    out.print_overview(
        con,
        report,
        fp,
        digest,
        long,
        f"no kernel caches found yet (looked in {where} and "
        "jitwarden's partitions); they appear after the first Triton or torch.compile run",
    )
    out.hanging(con, out.text((out.summary_line(report), "dim")))
    if long:  # each installed tool's protection (JSON always has it; a tool not hooked is a warning below)
        for tp in tools:
            out.hanging(con, out.text(("protection ", "dim"), tp.line()))
    for p in probs:
        out.hanging(
            con,
            out.text(
                (str(p.severity), out.SEVERITY_STYLE[p.severity]),
                " ",
                (p.code, "bold"),
                ": ",
                p.message,
            ),
        )
        if p.fix:
            out.command(con, "    fix: ", p.fix)
    con.print(_verdict_line(report, probs, code))
    sys.stdout.flush()


def _verdict_line(report, probs, code: int):
    """The closing line: errors to fix, unproven entries under ``--strict``, warnings worth a look, or all
    good (with what could not be judged, proven or run, when anything)."""
    if report.worst == Severity.ERROR:
        return out.text(
            ("problems at error level", "bold red"),
            ": run the fix commands above (each prints its plan and asks first)",
        )
    if code != EXIT_OK:
        return out.text(
            ("unproven entries under --strict", "bold red"),
            ": prove them (the fix above), or judge without --strict",
        )
    if any(p.severity > Severity.INFO for p in probs):
        return out.text("no errors; the warnings above are worth a look")
    caveats = _caveats(probs)
    if caveats:
        return out.text(
            ("no problem at warning or error level", "green"),
            f", but {' and '.join(caveats)} (see above)",
        )
    return out.text(("all good", "green"), ": no problem at warning or error level")


def _caveats(probs) -> list[str]:
    """What an all-good verdict must still say: entries not judged, entries unproven, checks not run."""
    caveats = []
    unjudged = sum(p.count for p in probs if p.code == "unrecognised")
    if unjudged:
        caveats.append(f"{plural(unjudged, 'entry', 'entries')} could not be judged")
    unproven = sum(p.count for p in probs if p.code == "unproven")
    if unproven:
        caveats.append(
            f"{plural(unproven, 'entry', 'entries')} {'is' if unproven == 1 else 'are'} unproven"
        )
    skipped = [p for p in probs if p.code in ("not-run", "no-target")]
    if skipped:
        caveats.append(f"{plural(len(skipped), 'check')} could not run")
    return caveats
