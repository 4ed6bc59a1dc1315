"""The error contract (model/errors.py): one hierarchy, each class with its exit status, one table the
CLI's handler exits by, and no status outside :class:`ExitStatus`."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil

import pytest

import jitwarden
from jitwarden.model.errors import (
    ERRORS,
    ExitStatus,
    JitwardenError,
    UsageError,
    exit_of,
)
from jitwarden.ops import bundle, keys, metrics
from tests.helpers.cli import jw
from tests.helpers.paths import SRC
from tests.helpers.sandbox import sandbox_env

PKG = os.path.join(SRC, "jitwarden")

# Exception classes outside the hierarchy, each with its reason (reviewed; the list only shrinks).
OUTSIDE = {
    "NotRegularFile": "store/reads: an OSError of the disk layer, caught as OSError by every caller",
    "UnsafeName": "store/paths: as NotRegularFile (commands word it themselves, naming the root)",
    "NotPrivate": "store/reads: as NotRegularFile",
    "_UnsafeLock": "runtime/guards/triton: private control flow inside one method, never leaves the module",
    "Cancelled": "ops/ptxas_runs: control flow of the rebuild engine's workers, caught by ops/rebuild",
    "Rejected": "runtime/remote: private, a remote blob refused; the runtime never raises to a user",
    "LockTimeout": "store/entrylock: an OSError (ETIMEDOUT) of the disk layer; the runtime turns it into a miss",
    "UntrustedDir": "store/tempdirs: an OSError (EPERM) of the disk layer; callers pass over to the next place",
    "ChildMismatch": "adapters/triton: relocated_group's refusal of a child mapped to another file's name, caught by relocate's plan (ops/maintenance) as the entry's mismatch; never leaves the operation",
    "SealKeyError": "store/sealkey: an OSError of the disk layer; the runtime falls back to the user's own key and doctor words it (seal-key)",
}


def _subclasses(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_every_error_class_carries_an_exit_status():
    for m in pkgutil.walk_packages(jitwarden.__path__, "jitwarden."):
        if "._boot" not in m.name and not m.name.endswith("__main__"):
            importlib.import_module(m.name)
    classes = list(_subclasses(JitwardenError))
    assert len(classes) >= 15
    for cls in [JitwardenError, *classes]:
        assert isinstance(cls.exit_code, ExitStatus), cls


def test_every_exception_class_in_src_is_in_the_one_hierarchy():
    outside = []
    for dirpath, _dirs, files in os.walk(PKG):
        for f in files:
            if not f.endswith(".py"):
                continue
            tree = ast.parse(open(os.path.join(dirpath, f)).read())
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name != "JitwardenError":
                    bases = {ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases}
                    std = bases & {"Exception", "ValueError", "RuntimeError", "OSError"}
                    if std and "JitwardenError" not in bases:
                        outside.append(node.name)
    assert sorted(outside) == sorted(OUTSIDE)


@pytest.mark.parametrize(
    "exc, status, line",
    [
        (UsageError("no such file"), ExitStatus.USAGE, "error: no such file"),
        (
            keys.KeyTooOpen("k is readable by others"),
            ExitStatus.USAGE,
            "error: k is readable by others",
        ),
        (metrics.MetricsError("cannot write"), ExitStatus.USAGE, "error: cannot write"),
        (bundle.Unsigned("no signature"), ExitStatus.FINDINGS, "error: no signature"),
        (KeyboardInterrupt(), ExitStatus.INTERRUPTED, "interrupted"),
        (BrokenPipeError(), ExitStatus.OK, ""),
    ],
)
def test_the_table_gives_each_error_its_status_and_one_line(exc, status, line):
    out = exit_of(exc)
    assert (out.status, out.line, out.internal) == (status, line, False)


@pytest.mark.parametrize("exc", [RuntimeError("boom"), JitwardenError("boom"), ValueError("boom")])
def test_anything_else_is_an_internal_error_named_by_its_type(exc):
    out = exit_of(exc)
    assert out.internal and out.status == ExitStatus.INTERNAL == 3
    assert (
        out.line
        == f"internal error: {type(exc).__name__}: boom (set JITWARDEN_DEBUG=1 for a traceback)"
    )


def test_the_table_rows_are_checked_in_order_and_name_real_statuses():
    kinds = [k for k, _s, _l in ERRORS]
    assert kinds[0] is JitwardenError
    assert all(s is None or isinstance(s, ExitStatus) for _k, s, _l in ERRORS)


def test_the_cli_returns_no_status_outside_the_enum():
    """A literal status returned by a command is a member's value (0 is success)."""
    codes = set()
    for dirpath, _dirs, files in os.walk(os.path.join(PKG, "cli")):
        for f in files:
            if f.endswith(".py"):
                tree = ast.parse(open(os.path.join(dirpath, f)).read())
                for node in ast.walk(tree):
                    if (
                        isinstance(node, ast.Return)
                        and isinstance(node.value, ast.Constant)
                        and type(node.value.value) is int
                    ):
                        codes.add(node.value.value)
    assert codes <= set(ExitStatus)


def test_an_error_of_the_hierarchy_reaches_the_user_as_one_line_with_its_status(tmp_path):
    """``metrics --output`` into a directory that is not there: MetricsError, no translation in the command."""
    env = sandbox_env(str(tmp_path))
    p = jw("metrics", "--output", str(tmp_path / "nowhere" / "m.prom"), env=env, in_process=True)
    assert p.returncode == ExitStatus.USAGE
    assert p.stderr.startswith("jitwarden: error: ") and len(p.stderr.strip().splitlines()) == 1, (
        p.stderr
    )
