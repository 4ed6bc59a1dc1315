"""The tests' wait (tests/helpers/wait.py): it returns once the condition holds and fails naming what it waited for."""

from __future__ import annotations

import pytest

from tests.helpers.wait import wait_for


def test_it_returns_the_conditions_value_as_soon_as_it_holds():
    calls = []

    def third_time():
        calls.append(1)
        return len(calls) >= 3 and "ready"

    assert wait_for(third_time, 60, "the third call", interval=0) == "ready"
    assert len(calls) == 3  # polled no further once it held


def test_a_condition_that_never_holds_fails_naming_what_was_awaited():
    with pytest.raises(
        AssertionError, match=r"timed out after 0\.05 s waiting for the prover to finish"
    ):
        wait_for(lambda: False, 0.05, "the prover to finish", interval=0.01)
