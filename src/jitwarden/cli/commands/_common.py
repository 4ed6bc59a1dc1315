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
from jitwarden.model.text import display, human_size, parse_age, plural
from jitwarden.ops import scan as scanner
from jitwarden.ops.roots import default_roots, roots_from_paths

if TYPE_CHECKING:  # the rebuild machinery is imported only when a command rebuilds
    from jitwarden.ops.rebuild import RebuildOptions


def verdict_exit(report, strict: bool) -> int:
    """The exit status of a scan that judges (verify, doctor): 1 when a finding is at error level, or, with
    ``--strict``, when an entry is unproven (docs/commands.md, "Verdicts"); else 0."""
    from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK
    from jitwarden.model.findings import Severity

    if report.worst == Severity.ERROR:
        return EXIT_FINDINGS
    return EXIT_FINDINGS if strict and report.summary()["verdicts"]["unproven"] else EXIT_OK


def unproven_note(report, strict: bool, rebuilt: bool) -> str | None:
    """The line under a scan's summary when entries are unproven: what that means and what proves them
    (pure); None when none is."""
    from jitwarden.model.text import plural

    n = report.summary()["verdicts"]["unproven"]
    if not n:
        return None
    how = (
        "a rebuild could not prove them (no PTX to rebuild from, or not a Triton kernel); "
        if rebuilt
        else "`--rebuild` proves Triton kernels; "
    )
    return (
        f"{plural(n, 'entry')} unproven: only structural checks passed, which another kernel's code under "
        f"the same key passes too; {how}the guard seals what it proves at first use"
        + ("; --strict: exit 1" if strict else "")
    )


def judge_in(args=None) -> None:
    """Judge against the environment ``--python`` (else ``JITWARDEN_PYTHON``) names, when one is named: its
    interpreter is asked once for its ``sys.path`` and version (:mod:`jitwarden.env.interpreter`); one it
    cannot ask is a usage error (exit 2). Nothing named: this process's own environment."""
    from jitwarden.env import interpreter

    given, source = getattr(args, "python", None), "--python"
    if not given:
        given, source = settings.PYTHON.text(os.environ), settings.PYTHON.name
    if not given:
        interpreter.use(None)
        return
    try:
        interpreter.use(interpreter.describe(given, source))
    except interpreter.InterpreterError as exc:
        raise UsageError(f"{source}: {exc}") from None


def fingerprint_or_none(args=None):
    """The fingerprint of the environment judged against (:func:`judge_in`), or None when it cannot be
    computed (never fatal for a scan)."""
    judge_in(args)
    try:
        from jitwarden.env import fingerprint

        return fingerprint.of_host()
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
    a streamed scan (:func:`jitwarden.ops.scan.scan_streamed`), whose entries are not kept. A root named on
    the command line is listed once, for telling its kind and for its entries (``listing_once``)."""
    from jitwarden.adapters.base import listing_once

    with listing_once():
        return _run_scan(args, fp, emit, sink)


def _run_scan(args, fp, emit, sink):
    target = resolve_target(args.target, fp)
    kinds = kinds_of(args)
    holders = tuple(HELD[k][0] for k in kinds or () if k in HELD and HELD[k][0] not in kinds)
    roots = (
        roots_from_paths(args.paths)
        if args.paths
        else default_roots(kinds=(*kinds, *holders) if kinds else None)
    )
    if args.paths:
        _note_searched(args.paths, roots)
    if kinds:
        roots = [(r, only) for r, only in roots if r.kind in kinds] + _held(roots, kinds)
    judge = scanner.make_judge(target.arch, orphan_age(args), fp=fp)
    fast_json()
    if emit is not None:
        return scanner.scan_streamed(roots, judge, target, emit, sink)
    return scanner.scan(roots, judge, target)


#: Entries one kind's root keeps for another kind, by the name they start with: vLLM keeps DeepGEMM's kernels
#: under ``deep_gemm/`` of its root (``ls`` shows them as type ``deepgemm``). ``--kind deepgemm`` takes them too.
HELD = {"deepgemm": ("vllm", "deep_gemm/")}


def _held(roots, kinds) -> list:
    """(holder root, names) of the entries ``kinds`` ask for that other kinds' roots keep (:data:`HELD`)."""
    from jitwarden import adapters

    out = []
    for kind in kinds:
        holder, prefix = HELD.get(kind, (None, ""))
        if holder is None or holder in kinds:
            continue
        for r, only in roots:
            if r.kind != holder:
                continue
            try:
                names = (
                    list(only)
                    if only is not None
                    else adapters.get(holder).list_entry_names(r.path)[0]
                )
            except OSError:
                continue
            picked = [n for n in names if n.startswith(prefix)]
            if picked:
                out.append((r, picked))
    return out


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
    from jitwarden.model.kinds import NAMES

    chosen = tuple(dict.fromkeys(getattr(args, "kind", None) or ()))
    for k in chosen:
        if k not in NAMES:
            raise UsageError(f"unknown cache kind {k!r} (one of: {', '.join(NAMES)})")
    return chosen or None


def unread_roots_status(report) -> int:
    """``ls``'s and ``clean``'s status: 1 when a root could not be read (``unreadable``: the listing or plan is
    incomplete, and nothing in that root was judged), else 0. Findings in what was read are ``verify``'s gate."""
    from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK

    unread = any(f.code == "unreadable" for c in report.caches for f in c.findings)
    return EXIT_FINDINGS if unread else EXIT_OK


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


def rebuilt(
    report,
    req: RebuildRequest,
    results: dict | None = None,
    *,
    memo: dict | None = None,
    select=None,
):
    """``report`` with its rebuild candidates re-assembled and judged (``verify --rebuild``); ``results``
    receives {entry path: RebuildResult}. A labelled progress bar with an ETA shows on a terminal.

    ``memo`` ({(path, bytes, mtime): RebuildResult}, kept by the caller across scans): an entry rebuilt before
    and unchanged since is judged from its result, so a command that scans again under its locks (``clean
    --rebuild``, ``relocate``) rebuilds each kernel once. ``select``: only the candidates it is true for."""
    from jitwarden.ops import rebuild

    start = time.perf_counter()
    candidates = [e for e in rebuild.candidates(report.entries) if select is None or select(e)]
    memo = {} if memo is None else memo
    todo = [e for e in candidates if _stamp(e) not in memo]
    fresh = _rebuild_with_bar(todo, req)
    memo.update({_stamp(e): fresh[e.path] for e in todo if e.path in fresh})
    got = {e.path: memo[_stamp(e)] for e in candidates if _stamp(e) in memo}
    if results is not None:
        results.update(got)
    # proven: a ptxas reproduced its code from its own PTX (``stale``: one this environment does not use)
    proven = frozenset(p for p, r in got.items() if r.verdict in ("verified", "stale"))
    rebuilt = report.with_findings({path: r.findings for path, r in got.items()}, proven)
    return dataclasses.replace(rebuilt, elapsed=report.elapsed + time.perf_counter() - start)


def _rebuild_with_bar(todo: list, req: RebuildRequest) -> dict:
    """{entry path: RebuildResult} of ``todo``, with a labelled progress bar; a ``--keep-cubins`` dir this
    run made is removed again when nothing was kept in it."""
    from jitwarden.ops import rebuild

    try:
        label = f"rebuilding {plural(len(todo), 'kernel')}"
        with _worded(), out.progress_bar(len(todo), label) as progress:
            return rebuild.verify_entries(todo, req.options, progress=progress)
    finally:
        if req.keep_is_new:  # created by this run and left empty (nothing differed): removed again
            from jitwarden.store.removal import remove_empty_dir

            assert req.options.keep_dir is not None  # keep_is_new: it was given

            remove_empty_dir(
                req.options.keep_dir
            )  # kept when not empty (cubins kept) or not ours to remove


def _stamp(e) -> tuple:
    """What a rebuild result is kept by: the entry's path, size and newest mtime (a changed file changes it)."""
    return (e.path, e.bytes, e.mtime)


def _discovered_roots(env) -> list:
    """The cache roots found the way ``ls`` finds them (Triton's alone when that fails)."""
    try:
        return [r for r, _ in default_roots(env)]
    except Exception:
        from jitwarden.adapters import triton as tri

        return tri.discover_roots(env)


def cache_dirs(env=os.environ) -> list[str]:
    """Every cache dir holding a quarantine: each root found, its partitions, the bases partitions live in,
    and every root jitwarden remembers quarantining into (``clean /some/root``)."""
    from jitwarden.adapters.base import expand_partitions
    from jitwarden.store import partition, qregistry
    from jitwarden.store import quarantine as q

    seen, dirs = set(), []
    found = []
    for r in _discovered_roots(env):
        found += (
            [x.path for x in expand_partitions(r)]
            + [partition.base_of(r.path)]
            + ([r.base] if r.base else [])
        )
    for path in found + qregistry.roots(env):
        k = os.path.realpath(path)
        if k not in seen and os.path.isdir(q.quarantine_dir(path)):
            seen.add(k)
            dirs.append(path)
    return dirs


def undo_line(batch: str, roots, *, replace: bool = False) -> str:
    """The one command that undoes a run, as it works pasted into a shell, never cut: ``--batch ID``, and when
    ``quarantine restore`` would not find one of ``roots`` by itself, ``--root PATH`` for each (absolute,
    quoted, never ``~``). ``replace``: the run left something in the entries' places (``relocate``)."""
    import shlex

    found = {os.path.realpath(d) for d in cache_dirs()}
    roots = list(dict.fromkeys(os.path.abspath(r) for r in roots))
    words = ["jitwarden", "quarantine", "restore", "--batch", batch]
    words += ["--replace"] if replace else []
    if any(os.path.realpath(r) not in found for r in roots):
        for r in roots:
            words += ["--root", shlex.quote(display(r))]
    return "undo: " + " ".join(words)


# --- reduced protection and leftover trash (the runtime's own report; status and doctor) ----------

TRASH_FIX = "jitwarden quarantine empty"


def tool_protection(env=None) -> list:
    """Which protection each installed tool's cache gets under jitwarden (``runtime/hookshapes.protection``: its
    load hook, or the fallback and why), judged against the environment ``--python`` names; [] on any failure."""
    from jitwarden.runtime import hookshapes

    try:
        return hookshapes.protection(os.environ if env is None else env)
    except Exception:
        return []


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


MAX_FINGERPRINT = 4 << 20
"""Larger than any saved fingerprint (a few KiB; ``status --format json`` a little more)."""


def load_fingerprint(path: str):
    """A saved fingerprint (``fingerprint --format json``, ``status --format json``, or the bare record);
    UsageError (exit 2) with one line when it cannot be used."""
    from jitwarden.env.fingerprint import Fingerprint
    from jitwarden.store.reads import read_json

    try:  # bounded: a FIFO is refused at once, deep or huge JSON is a clean refusal
        data = read_json(path, max_bytes=MAX_FINGERPRINT, follow=True)
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise UsageError(f"{path}: not JSON we read ({exc})") from None
    if isinstance(data, dict) and isinstance(data.get("fingerprint"), dict):
        data = data["fingerprint"]  # accept `jitwarden status --format json` too
    if (
        isinstance(data, dict) and "fingerprint_schema" in data
    ):  # `fingerprint --format json` (envelope schema 2)
        data = {**data, "schema": data["fingerprint_schema"]}
    try:
        return Fingerprint.from_json(data)
    except ValueError as exc:
        raise UsageError(f"{path}: {exc}") from None


UNUSED_PARTITION_AGE = 30 * 86400.0
"""A partition nobody used for this long is dead weight (``prune`` takes it), not another environment's cache."""


def writers(entries) -> str:
    """``Triton 3.6.0`` (or ``Triton 3.6.0, 3.5.1``): the Triton versions that built ``entries``, most first
    (the metadata's ``triton_version``), or ``another toolchain`` when none says (pure)."""
    seen: dict[str, int] = {}
    for e in entries:
        v = getattr(e.facts, "triton_version", None)
        if v:
            seen[v] = seen.get(v, 0) + 1
    if not seen:
        return "another toolchain"
    return "Triton " + ", ".join(sorted(seen, key=lambda v: -seen[v]))


def other_environments(report) -> tuple[dict[str, list], dict[str, int], list[str]]:
    """(stale entries by root, entries holding code by root, the roots most likely another environment's):
    a root most of whose entries another toolchain built is a cache in use there (a workload's venv beside a
    standalone jitwarden), not dead weight, unless it is a partition nobody used for
    :data:`UNUSED_PARTITION_AGE`.
    The one rule ``doctor`` (no ``clean --stale`` offered) and ``clean --stale`` (said before the plan) share."""
    from jitwarden.model.entries import HOLDS_NO_CODE

    stale: dict[str, list] = {}
    judged: dict[str, int] = {}
    for e in report.entries:
        judged[e.root] = judged.get(e.root, 0) + (e.type not in HOLDS_NO_CODE)
        if any(f.code == "stale" for f in e.findings):
            stale.setdefault(e.root, []).append(e)
    theirs = [r for r, es in stale.items() if 2 * len(es) > judged[r] and not _unused(report, r)]
    return stale, judged, theirs


def _unused(report, root: str) -> bool:
    """Whether ``root`` is a partition nobody used for :data:`UNUSED_PARTITION_AGE`: dead weight, which
    ``prune`` takes, not a cache in use elsewhere."""
    from jitwarden.store import partition

    if not any(c.root.path == root and c.root.partition for c in report.caches):
        return False
    info = partition.read_info(root)
    return info is not None and time.time() - info.last_used > UNUSED_PARTITION_AGE


def always_misses(digest: str | None, only: str | None = None, env=None) -> list:
    """(workload, ``ops.always_miss.AlwaysMiss``) of every workload recorded here for ``digest`` (of workload
    ``only``, when given), over its starts under every fingerprint, their causes read from this node's Triton
    partitions: what ``doctor`` and ``run -v`` say (issue 44)."""
    from jitwarden.env import locations
    from jitwarden.ops import always_miss, workload
    from jitwarden.store import partition

    env = os.environ if env is None else env
    if digest is None:
        return []
    base = locations.partition_base("triton", env)
    roots = [partition.path_for(base, digest)]
    roots += [p for p, _info in partition.list_partitions(base) if p not in roots] + [base]
    found = []
    names = (
        [only]
        if only is not None
        else [s.replace("--", "/") for _d, s in workload.recorded(env, digest)]
    )
    for name in names:
        w = workload.merged(name, env)
        if w is not None:
            found += [(name, m) for m in always_miss.check(w, roots)]
    return found
