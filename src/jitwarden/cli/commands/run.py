"""``jitwarden run -- CMD ARGS…``: run CMD with jitwarden's activation applied through its environment.

The activation is applied to a copy of the environment, then CMD replaces this
process (``execvpe``): its exit code and signals are CMD's own, by construction. With a budget
(``--budget 20G`` or ``JITWARDEN_BUDGET``) CMD runs as a child instead (SIGTERM and SIGHUP passed on, SIGINT
left to reach it from the terminal; its status returned: 128+N when a signal N ended it), and only after it ended are the caches held
to the budget (``ops/budget``): never while the workload runs.
"""

from __future__ import annotations

import argparse
import os
import sys

from jitwarden.cli import options
from jitwarden.model import settings
from jitwarden.model.errors import ExitStatus, UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a command with partitioned, guarded kernel caches",
        description="Run CMD with jitwarden activated through its environment "
        "(TRITON_CACHE_DIR, TORCHINDUCTOR_CACHE_DIR, VLLM_CACHE_ROOT, CUPY_CACHE_DIR, "
        "JAX_COMPILATION_CACHE_DIR, TRITON_CACHE_MANAGER).",
        usage="jitwarden run [-q] [-v] [--record NAME] [--budget SIZE] -- CMD [ARGS...]",
    )
    p.add_argument(
        "--record",
        metavar="NAME",
        help="record every kernel hit and compile of CMD as workload NAME (what `coverage NAME` and "
        f"`doctor` read; sets {settings.RECORD.name}); with -v, say first which of its kernels compiled "
        "again under a new key in earlier starts, and why",
    )
    p.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="no start-up warnings (errors only on stderr, as -q everywhere; CMD's own output is untouched)",
    )
    p.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="print the partition and changed variables to stderr",
    )
    p.add_argument(
        "--budget",
        metavar="SIZE",
        help="after CMD ends, evict least recently used entries until this environment's caches fit "
        f"SIZE (as `jitwarden budget SIZE -y`; default: {settings.BUDGET.name})",
    )
    p.add_argument(
        "cmd",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="the command and its arguments, after --",
    )
    options.examples(
        p,
        "jitwarden run -- python train.py         guarded, partitioned caches for the workload",
        "jitwarden run -v -- vllm serve MODEL     print the partition and variables first",
    )
    p.set_defaults(func=run)


def command_of(args) -> list[str]:
    cmd = list(args.cmd or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise UsageError("run needs a command: jitwarden run -- CMD [ARGS...]")
    return cmd


def run(args) -> int:
    from jitwarden.cli.commands import _foreign
    from jitwarden.runtime.activation import activate

    cmd = command_of(args)
    limit = _budget(args)  # a bad SIZE is refused before CMD starts
    env = dict(os.environ)
    if args.record is not None:
        _record_env(args.record, env)
    guard, other = _foreign.workload_python(
        cmd, env, args.quiet
    )  # CMD a Python of another environment?
    if not guard:
        return _exec(cmd, env)
    if other is not None:  # partitioned for that environment's builds
        from jitwarden.env import interpreter

        interpreter.use(other)
    rec = activate(env=env, quiet=args.quiet)
    if other is not None and settings.is_guarded(env.get("TRITON_CACHE_MANAGER")):
        _foreign.boot_path(env)  # the guard importable there, jitwarden's package alone
    if rec.active:
        from jitwarden.runtime.guards import (
            add_boot_path,
        )  # the command's own Python guards what torch restores mid-run

        add_boot_path(env)
    if args.verbose:
        print(f"jitwarden: {rec.headline or 'not active'}", file=sys.stderr)
        for var, path in rec.partitions.items():
            print(f"jitwarden: {var}={path}", file=sys.stderr)
        if rec.cache_manager:
            print(f"jitwarden: TRITON_CACHE_MANAGER={rec.cache_manager}", file=sys.stderr)
        from jitwarden.cli.commands import _common

        for p in _common.tool_protection(env):
            print(f"jitwarden: protection: {p.line()}", file=sys.stderr)
        if args.record is not None:
            _say_always_misses(rec.digest, args.record)
    if limit is None or not rec.digest:
        return _exec(cmd, env)
    status = _child(cmd, env)
    _hold_to_budget(limit, rec.digest, args.quiet)
    return status


def _budget(args):
    """The budget ``--budget`` or ``JITWARDEN_BUDGET`` sets, else None (run then execs CMD as ever)."""
    if args.budget is None and settings.BUDGET.raw(os.environ) is None:
        return None
    from jitwarden.ops import budget

    return budget.budget_of(args.budget, None, os.environ)


def _child(cmd: list[str], env: dict) -> int:
    """CMD as a child, with the signals a scheduler sends passed on; its exit status."""
    import signal
    import subprocess

    try:
        proc = subprocess.Popen(cmd, env=env)
    except OSError as exc:
        return _not_started(cmd, exc)

    def forward(signum, _frame) -> None:
        proc.send_signal(signum)

    # Ctrl-C reaches CMD from the terminal (one process group): this process only waits for it to end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for sig in (signal.SIGTERM, signal.SIGHUP):  # what a scheduler sends to the process it started
        signal.signal(sig, forward)
    rc = proc.wait()
    return 128 - rc if rc < 0 else rc


def _hold_to_budget(limit, digest: str, quiet: bool) -> None:
    """Evict until the caches fit ``limit``, now that CMD ended; one line on stderr, never a failure of run's."""
    from jitwarden.model.text import human_size, plural
    from jitwarden.ops import budget, metrics
    from jitwarden.store import quarantine

    try:
        plan, cen = budget.planned(os.environ, digest, limit)
        outcomes = (
            budget.apply(plan, os.environ, digest, batch=quarantine.new_batch("budget"))
            if plan.evict
            else []
        )
        gone = budget.evicted_by_kind(plan, outcomes)
        metrics.record_budget(plan.after, gone, os.environ)
        n, size = sum(v[0] for v in gone.values()), sum(v[1] for v in gone.values())
        if not quiet:
            left = sum(t.bytes for t in plan.after.values())
            print(
                f"jitwarden: budget {limit.describe()}: evicted {plural(n, 'entry', 'entries')} "
                f"({human_size(size)}); {human_size(left)} left",
                file=sys.stderr,
            )
    except Exception as exc:
        print(
            f"jitwarden: warning: budget not applied ({type(exc).__name__}: {exc})", file=sys.stderr
        )


def _record_env(name: str, env: dict) -> None:
    """``JITWARDEN_RECORD=NAME`` and one start id for every process CMD starts; UsageError for a bad name."""
    import uuid

    from jitwarden.model.layout import record_file

    if record_file(name) is None:
        raise UsageError(
            f"--record {name!r}: a workload name is letters, digits, '.', '_', '-' and '/' (at most 200)"
        )
    env[settings.RECORD.name] = name
    env[settings.RECORD_START.name] = uuid.uuid4().hex[:16]


def _say_always_misses(digest: str | None, name: str) -> None:
    from jitwarden.cli.commands import _common

    for _name, m in _common.always_misses(digest, only=name):
        print(f"jitwarden: always-miss: {m.line()}", file=sys.stderr)


def _exec(cmd: list[str], env: dict) -> int:
    """CMD in place of this process, with ``env``; an exit status only when it cannot start."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execvpe(cmd[0], cmd, env)
    except OSError as exc:
        return _not_started(cmd, exc)
    return 0  # not reached


def _not_started(cmd: list[str], exc: OSError) -> int:
    """One line and the shell's status for CMD that could not start (127 not found, 126 not executable)."""
    if isinstance(exc, FileNotFoundError):
        print(f"jitwarden: {cmd[0]}: command not found", file=sys.stderr)
        return ExitStatus.COMMAND_NOT_FOUND
    why = "permission denied" if isinstance(exc, PermissionError) else exc.strerror
    print(f"jitwarden: {cmd[0]}: {why}", file=sys.stderr)
    return ExitStatus.CANNOT_EXECUTE
