"""Steps several commands share (not a command): scan, rebuild, ask, check codes, protection notes.

Commands import this module and :mod:`jitwarden.cli.options`, never each other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from typing import TYPE_CHECKING

from jitwarden.cli import render as out
from jitwarden.model import settings
from jitwarden.model.arch import parse_arch
from jitwarden.model.errors import UsageError
from jitwarden.model.findings import CODES
from jitwarden.model.text import display, human_size, parse_age
from jitwarden.ops import scan as scanner

if TYPE_CHECKING:  # the rebuild machinery is imported only when a command rebuilds
    from jitwarden.ops.rebuild import RebuildOptions


def fingerprint_or_none():
    """The current fingerprint, or None when it cannot be computed (never fatal for a scan)."""
    try:
        from jitwarden.env import fingerprint

        return fingerprint.collect()
    except Exception as exc:
        print(f"jitwarden: warning: fingerprint unavailable: {exc}", file=sys.stderr)
        return None


def resolve_target(arg: str | None, fp) -> scanner.Target:
    if arg:
        try:
            return scanner.Target(parse_arch(arg), "cli")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    archs = fp.device_archs() if fp is not None else ()
    if archs:
        return scanner.Target(archs[0], "gpu")
    return scanner.Target(None, "none")


MAX_AGE_S = 100 * 365 * 86400.0


def check_age(value: float, what: str) -> float:
    """``value`` when it is a sane age in seconds (finite, zero to a century); UsageError otherwise."""
    if not (0.0 <= value <= MAX_AGE_S):  # also false for NaN
        raise UsageError(
            f"{what} must be a number of seconds from 0 to {MAX_AGE_S:.0f}, not {value!r}"
        )
    return value


def orphan_age(args) -> float:
    """Seconds after which ``tmp.pid_*`` leftovers are orphans: ``--orphan-age`` (where the command has
    it), ``JITWARDEN_ORPHAN_AGE``, else the setting's default.

    A negative, infinite or NaN age would make a live writer's files look abandoned: refused.
    """
    given = getattr(args, "orphan_age", None)
    if given is not None:
        return check_age(given, "--orphan-age")
    name, raw = settings.ORPHAN_AGE.name, settings.ORPHAN_AGE.raw(os.environ)
    if raw:
        try:
            value = parse_age(raw, bare_unit="s")  # its documented form is a bare number of seconds
        except ValueError as exc:
            raise UsageError(f"{name}: {exc}") from None
        return check_age(value, f"{name}={raw!r}")
    return settings.ORPHAN_AGE.default


def run_scan(args, fp=None, *, emit=None, sink=None):
    """Resolve roots and target from ``args`` and scan; returns the report. With ``emit`` and ``sink``:
    a streamed scan (:func:`jitwarden.ops.scan.scan_streamed`), whose entries are not kept."""
    target = resolve_target(args.target, fp)
    kinds = kinds_of(args)
    roots = (
        scanner.roots_from_paths(args.paths) if args.paths else scanner.default_roots(kinds=kinds)
    )
    if args.paths:
        _note_searched(args.paths, roots)
    if kinds:
        roots = [(r, only) for r, only in roots if r.kind in kinds]
    judge = scanner.make_judge(target.arch, orphan_age(args), fp=fp)
    fast_json()
    if emit is not None:
        return scanner.scan_streamed(roots, judge, target, emit, sink)
    return scanner.scan(roots, judge, target)


def fast_json() -> None:
    """The scan parses cache JSON with orjson where it is installed (a dependency of the CLI, ~4x faster on
    Triton's metadata and group files; :func:`jitwarden.formats.jsonlimits.use_fast_decoder` says why the
    values are the same); the runtime never does, it stays standard-library only."""
    try:
        import orjson
    except ImportError:  # installed without it: the standard library alone, the same report
        return
    from jitwarden.formats import jsonlimits

    jsonlimits.use_fast_decoder(orjson.loads)


def _note_searched(paths, roots) -> None:
    """One stderr line per path that held no cache itself and stands for the roots found beneath it."""
    given = {os.path.abspath(p) for p in paths}
    for p in paths:
        top = os.path.abspath(p)
        below = [
            r
            for r, only in roots
            if only is None
            and r.path not in given
            and r.path.startswith(top.rstrip(os.sep) + os.sep)
        ]
        if below:
            listed = ", ".join(f"{display(out.short_path(r.path))} ({r.kind})" for r in below)
            print(
                f"{display(out.short_path(top))} is not a cache root; checking the {len(below)} found beneath it: {listed}",
                file=sys.stderr,
            )


def kinds_of(args) -> tuple[str, ...] | None:
    """The ``--kind`` values, checked against the adapters there are; None when not given."""
    from jitwarden.adapters import KINDS

    kinds = tuple(dict.fromkeys(getattr(args, "kind", None) or ()))
    for k in kinds:
        if k not in KINDS:
            raise UsageError(f"unknown cache kind {k!r} (one of: {', '.join(KINDS)})")
    return kinds or None


def check_codes(codes) -> None:
    """Each ``--code`` must be a finding code there is (UsageError otherwise)."""
    for c in codes or ():
        if c not in CODES:
            raise UsageError(f"unknown finding code {c!r} (one of: {', '.join(CODES)})")


def confirm(args, question: str) -> bool:
    """Ask on a terminal (default No); ``--dry-run`` never proceeds, ``-y`` always does; without a terminal,
    ``-y`` is required, and so with ``-q``, which never asks (it may have hidden the plan the question is about)."""
    if args.dry_run:
        return False
    if args.yes:
        return True
    if getattr(args, "quiet", False):
        raise UsageError("-q never asks: pass -y to proceed, or --dry-run to see the plan only")
    if not sys.stdin.isatty():
        raise UsageError("not a terminal: pass -y to proceed, or --dry-run to see the plan only")
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        ans = sys.stdin.readline().strip().lower()
    except (EOFError, OSError):
        ans = ""
    return ans in ("y", "yes")


# --- --rebuild: typed options for the engine, its errors worded with our flags ---------------------

#: Each :class:`jitwarden.ops.rebuild.RebuildOptions` field and the flag that sets it.
REBUILD_FLAGS = {"keep_dir": "--keep-cubins", "extra_ptxas": "--ptxas", "jobs": "--jobs"}


@dataclasses.dataclass(frozen=True, slots=True)
class RebuildRequest:
    """A checked ``--rebuild``: the engine's options, and whether ``--keep-cubins DIR`` is new (removed again if
    left empty)."""

    options: RebuildOptions
    keep_is_new: bool = False


@contextlib.contextmanager
def _worded():
    """The engine's OptionError as a one-line usage error naming the flag (``--ptxas /x: no such file``)."""
    from jitwarden.ops import rebuild

    try:
        yield
    except rebuild.OptionError as exc:
        raise UsageError(
            f"{REBUILD_FLAGS.get(exc.field, exc.field)} {exc.value}: {exc.why}"
        ) from None


def rebuild_request(args) -> RebuildRequest | None:
    """The ``--rebuild`` options, checked before any scan (exit 2 for a bad one); None without ``--rebuild``.

    ``--keep-cubins``, ``--ptxas`` and ``--jobs`` act only with ``--rebuild``: given without it, they are refused
    rather than ignored silently.
    """
    given = {"keep_dir": args.keep_cubins, "extra_ptxas": args.ptxas, "jobs": args.jobs}
    if not args.rebuild:
        for field, val in given.items():
            if val:
                raise UsageError(
                    f"{REBUILD_FLAGS[field]} needs --rebuild (it only changes how kernels are rebuilt)"
                )
        return None
    from jitwarden.ops import rebuild

    opts = rebuild.RebuildOptions(
        jobs=args.jobs, extra_ptxas=tuple(args.ptxas or ()), keep_dir=args.keep_cubins
    )
    keep_is_new = bool(args.keep_cubins) and not os.path.lexists(args.keep_cubins)
    with _worded():
        rebuild.check_options(opts)
    return RebuildRequest(opts, keep_is_new)


def rebuilt(report, req: RebuildRequest, results: dict | None = None):
    """``report`` with its rebuild candidates re-assembled and judged (``verify --rebuild``); ``results``
    receives {entry path: RebuildResult}. A progress bar shows on a terminal."""
    from jitwarden.ops import rebuild

    start = time.perf_counter()
    candidates = rebuild.candidates(report.entries)
    try:
        with _worded(), out.progress_bar(len(candidates), "rebuild") as progress:
            got = rebuild.verify_entries(candidates, req.options, progress=progress)
    finally:
        if req.keep_is_new:  # created by this run and left empty (nothing differed): removed again
            from jitwarden.store.fsutil import remove_empty_dir

            assert req.options.keep_dir is not None  # keep_is_new: it was given

            remove_empty_dir(
                req.options.keep_dir
            )  # kept when not empty (cubins kept) or not ours to remove
    if results is not None:
        results.update(got)
    rebuilt = report.with_findings({path: r.findings for path, r in got.items()})
    return dataclasses.replace(rebuilt, elapsed=report.elapsed + time.perf_counter() - start)


# --- reduced protection and leftover trash (the runtime's own report; status and doctor) ----------

TRASH_FIX = "jitwarden quarantine empty"


def protection_lines(report, env=None) -> list[dict]:
    """Reduced protection and leftover trash, as JSON-ready records (setting or root, why, fix)."""
    from jitwarden.ops.maintenance import leftover_trash
    from jitwarden.runtime.activation import reduced_protection

    lines: list[dict[str, object]] = [
        {"kind": "reduced-protection", "what": s, "why": why, "fix": fix}
        for s, why, fix in reduced_protection(os.environ if env is None else env)
    ]
    for root, size, files in leftover_trash(c.root.path for c in report.caches):
        lines.append(
            {
                "kind": "trash",
                "what": root,
                "bytes": size,
                "why": f"{human_size(size)} in {files} file(s) a killed deletion left in its trash; "
                "nothing removes them by itself",
                "fix": TRASH_FIX,
            }
        )
    return lines
