"""One word list for every on/off environment variable (model/flags.py), read alike by each setting."""

from __future__ import annotations

import pytest

from jitwarden.model.flags import FALSE_WORDS, TRUE_WORDS, parse_flag
from jitwarden.runtime import activation, guards, proof, remote_wiring
from tests.helpers.guarded import clean_env

ON = ["1", "true", "TRUE", " yes ", "On", "y", "Y"]
OFF = ["0", "false", "False", "no", " OFF", "n", "N"]
NEITHER = [None, "", "  ", "2", "enable", "nope", "truee"]


def test_word_lists_are_disjoint_and_lower_case():
    assert not TRUE_WORDS & FALSE_WORDS
    assert all(w == w.strip().lower() for w in TRUE_WORDS | FALSE_WORDS)


@pytest.mark.parametrize("word", ON)
def test_on_words(word):
    assert parse_flag(word) is True


@pytest.mark.parametrize("word", OFF)
def test_off_words(word):
    assert parse_flag(word) is False


@pytest.mark.parametrize("word", NEITHER)
def test_other_words_are_neither(word):
    assert parse_flag(word) is None


def test_numbers_and_metadata_values_read_as_words():
    assert parse_flag(1) is True and parse_flag(0) is False and parse_flag(7) is None
    assert parse_flag(True) is True and parse_flag(False) is False and parse_flag("yes!") is None


@pytest.mark.parametrize("word, on", [(w, True) for w in ON + NEITHER] + [(w, False) for w in OFF])
def test_default_on_settings_turn_off_only_on_an_off_word(word, on):
    env = {} if word is None else {proof.PROVE_VAR: word, guards.TORCH_HOOKS.name: word}
    assert proof.enabled(env) is on
    assert guards.torch_enabled(env) is on


@pytest.mark.parametrize("word, on", [(w, True) for w in ON] + [(w, False) for w in OFF + NEITHER])
def test_default_off_settings_turn_on_only_on_an_on_word(word, on):
    env = {} if word is None else {remote_wiring.INDUCTOR_REMOTE[0]: word}
    assert bool(remote_wiring.unguarded(env)) is on


@pytest.mark.parametrize("on, off", [("Y", "N"), ("yes", "no")])
def test_activation_reads_disable_and_partition_by_the_same_words(tmp_path, on, off):
    env = clean_env(tmp_path, JITWARDEN_DISABLE=on)
    rec = activation.activate(env=env)
    assert rec.digest is None and rec.skipped == {"all": "JITWARDEN_DISABLE is set"}
    env = clean_env(tmp_path, TRITON_CACHE_DIR=str(tmp_path / "volume"), JITWARDEN_PARTITION=off)
    rec = activation.activate(env=env)
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "volume")
    assert rec.skipped["TRITON_CACHE_DIR"] == "JITWARDEN_PARTITION=0"
