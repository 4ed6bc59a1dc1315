"""``jitwarden status``: the fingerprint's headline and every cache root with its health."""

from __future__ import annotations

import os

from jitwarden.cli import render as out
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK
from jitwarden.model.findings import Severity
from jitwarden.cli.commands import _common


def register(sub) -> None:
    p = sub.add_parser("status", help="fingerprint headline and cache health",
                       description="Show this environment's fingerprint headline and each cache root's health.")
    _common.add_scan_arguments(p)
    p.set_defaults(func=run)


TRASH_FIX = "jitwarden quarantine empty"
_TRASH_WALK_MAX = 100_000


def leftover_trash(paths) -> list[tuple[str, int, int]]:
    """(root, bytes, files) for each root whose ``.jitwarden-trash`` still holds what a killed deletion left.

    Never follows a symlink (a trash that is not a real directory is not counted); stops
    counting after a bounded number of files.
    """
    import stat

    from jitwarden.store.quarantine import TRASH_DIR

    found = []
    for root in dict.fromkeys(paths):
        trash = os.path.join(root, TRASH_DIR)
        try:
            if not stat.S_ISDIR(os.lstat(trash).st_mode):
                continue
        except OSError:
            continue
        size = files = seen = 0
        for d, dirs, names in os.walk(trash, followlinks=False):
            for n in names + dirs:
                seen += 1
                try:
                    st = os.lstat(os.path.join(d, n))
                except OSError:
                    continue
                if stat.S_ISREG(st.st_mode):
                    size += st.st_size
                    files += 1
            if seen > _TRASH_WALK_MAX:
                break
        if seen:
            found.append((root, size, files))
    return found


def protection_lines(report, env=None) -> list[dict]:
    """Reduced protection and leftover trash, as JSON-ready records (setting or root, why, fix)."""
    from jitwarden.runtime.activation import reduced_protection

    lines = [{"kind": "reduced-protection", "what": s, "why": why, "fix": fix}
             for s, why, fix in reduced_protection(os.environ if env is None else env)]
    for root, size, files in leftover_trash(c.root.path for c in report.caches):
        lines.append({"kind": "trash", "what": root, "bytes": size,
                      "why": f"{out.human_bytes(size)} in {files} file(s) a killed deletion left in its trash; "
                             "nothing removes them by itself", "fix": TRASH_FIX})
    return lines


def run(args) -> int:
    fp = _common.fingerprint_or_none()
    report = _common.run_scan(args, fp)
    notes = protection_lines(report)
    if args.format == "json":
        doc = out.to_json(report, getattr(fp, "digest", None), "status", entries=[])
        doc["fingerprint"] = fp.to_json() if fp is not None else None
        doc["protection"] = notes
        out.print_json(doc)
    else:
        con = out.console()
        con.print(out.text((fp.headline() if fp is not None else "fingerprint unavailable", "bold")))
        if report.caches:
            digest = getattr(fp, "digest", None)
            con.print(out.caches_table(report, long=args.long, current_digest=digest))
            if any(c.root.partition == digest for c in report.caches):
                con.print("[dim]@DIGEST: a partition (one environment's caches); * marks this environment's[/dim]")
        else:
            con.print("no kernel cache roots found")
        for c in report.caches:
            for f in c.findings:
                con.print(out.text((f.code, "bold red"), " ", out.short_path(c.root.path), ": ", f.message))
        out.hanging(con, out.text((out.summary_line(report), "dim")))
        for n in notes:
            head = "reduced protection" if n["kind"] == "reduced-protection" else "leftover trash"
            what = n["what"] if n["kind"] == "reduced-protection" else out.short_path(n["what"])
            con.print(out.text((head, "yellow"), " ", what, ": ", n["why"]))
            con.print(out.text("    fix: ", (n["fix"], "bold")))
        if report.worst == Severity.ERROR:
            con.print("run [bold]jitwarden verify[/bold] for the entries at fault")
    return EXIT_FINDINGS if report.worst == Severity.ERROR else EXIT_OK
