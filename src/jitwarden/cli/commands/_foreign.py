"""``jitwarden run`` of another environment's Python (not a command): partition its caches for that environment
and make jitwarden's guard importable there, or leave it alone with one line when it cannot load jitwarden.

Kept apart from ``run.py`` and from :mod:`._common` (which imports the scanner): ``run`` imports this module only,
and only the standard library and :mod:`jitwarden.env.interpreter` come with it.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # mypy takes it as true; typing stays off `run`'s start

if TYPE_CHECKING:
    from jitwarden.env.interpreter import Interpreter


def workload_python(cmd: list[str], env, quiet: bool = False) -> tuple[bool, Interpreter | None]:
    """(guard it, the interpreter) for ``jitwarden run -- CMD``: when CMD starts a Python of another
    environment (a venv without jitwarden), that environment is the one its caches are partitioned for, and
    jitwarden is made importable there, alone (:func:`boot_path`). (True, None): CMD starts no Python of
    another environment. (False, None) when that Python cannot load jitwarden (too old, or it does not
    answer): one line says so, and the workload then runs with its settings untouched, never crashed by a
    ``TRITON_CACHE_MANAGER`` it cannot import (issue: its first compile died of ModuleNotFoundError); ``quiet``
    (``-q``) keeps that line off stderr."""
    from jitwarden.env import interpreter

    python = interpreter.python_of_command(cmd, env)
    if python is None or interpreter.is_own(python):
        return True, None
    try:
        other = interpreter.describe(python, "run")
    except interpreter.InterpreterError as exc:
        why = str(exc)
    else:
        if other.version[:2] >= interpreter.MIN_VERSION:
            return True, other
        why = f"{python}: Python {'.'.join(map(str, other.version))} cannot import jitwarden (it needs 3.10+)"
    if not quiet:
        print(
            f"jitwarden: {why}; running it with its kernel caches as they are (not partitioned, not "
            "guarded)",
            file=sys.stderr,
        )
    return False, None


def boot_path(env) -> None:
    """``runtime/_boot`` first on ``env``'s ``PYTHONPATH``: every Python started with it can import the
    ``jitwarden`` package alone from jitwarden's own install (its ``sitecustomize``), and installs the torch
    hooks."""
    from jitwarden.runtime.guards import boot_dir

    d = boot_dir()
    parts = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if d not in parts:
        env["PYTHONPATH"] = os.pathsep.join([d, *parts])
