"""The `slow` marker is derived (tests/helpers/slow.py): what starts a process is slow, what does not is not."""

from __future__ import annotations

from tests.adversarial import adv, matrix
from tests.helpers import cli, kernels, maint, slow


def test_spawning_helpers_and_their_callers_and_aliases_are_slow():
    assert slow._func_is_slow(cli.jw)  # subprocess.run
    assert slow._func_is_slow(adv.jw)  # calls the runner through an import alias (run_cli)
    assert slow._func_is_slow(kernels.build_cache)  # subprocess, then a compile
    assert slow._func_is_slow(matrix.run_case)  # through _execute -> Popen
    _funcs, names = slow._index()
    assert "cli" in names  # maint.cli = jw: an alias by assignment


def test_pure_helpers_are_not_slow():
    assert not slow._func_is_slow(maint.snapshot)
    assert not slow._func_is_slow(kernels.copy_cache)
    assert not slow._func_is_slow(matrix.sample)
    assert not slow._func_is_slow(test_pure_helpers_are_not_slow)
