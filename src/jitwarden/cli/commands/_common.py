"""Options and steps shared by the commands that scan caches (ls, verify, status)."""

from __future__ import annotations

import argparse
import os
import sys

from jitwarden.ops import scan as scanner
from jitwarden.model.text import age_arg, parse_age
from jitwarden.model.arch import parse_arch
from jitwarden.model.errors import UsageError


def add_scan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="*", metavar="PATH", help="cache roots or entry directories (default: every root found)")
    p.add_argument("--target", metavar="ARCH", help="judge as if running on this GPU (sm_90, 90, 9.0); default: the live GPU")
    p.add_argument("--format", choices=("table", "json"), default="table")
    p.add_argument("--orphan-age", type=age_arg, default=None, metavar="AGE",
                   help="tmp.pid_* leftovers older than AGE are orphans (default 1h, env JITWARDEN_ORPHAN_AGE)")
    p.add_argument("--long", action="store_true", help="show full paths in tables")
    p.add_argument("--kind", action="append", metavar="KIND",
                   help="only caches of this kind (repeatable): triton, inductor, vllm, cuda-compute, flashinfer, "
                        "deepgemm, torch-ext")


def fingerprint_or_none():
    """The current fingerprint, or None when it cannot be computed (never fatal for a scan)."""
    try:
        from jitwarden.env import fingerprint

        return fingerprint.collect()
    except Exception as exc:  # noqa: BLE001 - a scan must not fail because NVML or a package is odd
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
        raise UsageError(f"{what} must be a number of seconds from 0 to {MAX_AGE_S:.0f}, not {value!r}")
    return value


def orphan_age(args) -> float:
    """Seconds after which ``tmp.pid_*`` leftovers are orphans: ``--orphan-age``, ``JITWARDEN_ORPHAN_AGE``, 3600.

    A negative, infinite or NaN age would make a live writer's files look abandoned: refused.
    """
    if args.orphan_age is not None:
        return check_age(args.orphan_age, "--orphan-age")
    raw = os.environ.get("JITWARDEN_ORPHAN_AGE")
    if raw:
        try:
            value = parse_age(raw, bare_unit="s")  # its documented form is a bare number of seconds
        except ValueError as exc:
            raise UsageError(f"JITWARDEN_ORPHAN_AGE: {exc}") from None
        return check_age(value, f"JITWARDEN_ORPHAN_AGE={raw!r}")
    return 3600.0


def run_scan(args, fp=None):
    """Resolve roots and target from ``args`` and scan; returns the report."""
    target = resolve_target(args.target, fp)
    kinds = kinds_of(args)
    roots = scanner.roots_from_paths(args.paths) if args.paths else scanner.default_roots(kinds=kinds)
    if kinds:
        roots = [(r, only) for r, only in roots if r.kind in kinds]
    judge = scanner.make_judge(target.arch, orphan_age(args), fp=fp)
    return scanner.scan(roots, judge, target)


def kinds_of(args) -> tuple[str, ...] | None:
    """The ``--kind`` values, checked against the adapters there are; None when not given."""
    from jitwarden.adapters import KINDS

    kinds = tuple(dict.fromkeys(getattr(args, "kind", None) or ()))
    for k in kinds:
        if k not in KINDS:
            raise UsageError(f"unknown cache kind {k!r} (one of: {', '.join(KINDS)})")
    return kinds or None
