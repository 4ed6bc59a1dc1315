"""Issue 45, item 3: every ``--help`` page ends with 1-3 examples, the top level says to start with
``jitwarden doctor``, and ``dir`` says ``(not made yet)`` beside a path that does not exist."""

from __future__ import annotations

import argparse
import json
import os
import re

from jitwarden.cli import main as cli_main
from tests.helpers.cli import jw

ALIASES = {
    "jitwarden quarantine list": "jitwarden quarantine ls",
    "jitwarden quarantine purge": "jitwarden quarantine empty",
}


def _pages(parser: argparse.ArgumentParser, words: str = "jitwarden"):
    """(words, parser) of every help page: the top level, each verb, each action of a verb."""
    yield words, parser
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, p in a.choices.items():
                yield from _pages(p, f"{words} {name}")


def _examples(help_text: str) -> list[str]:
    tail = help_text.rstrip("\n").rsplit("\nexamples:\n", 1)
    assert len(tail) == 2, help_text
    return [ln.strip() for ln in tail[1].splitlines()]


def test_every_help_page_ends_with_one_to_three_examples_of_itself():
    pages = list(_pages(cli_main.build_parser()))
    assert len(pages) >= 23, [w for w, _ in pages]
    for words, p in pages:
        shown = _examples(p.format_help())
        assert 1 <= len(shown) <= 3, (words, shown)
        for line in shown:
            assert line.startswith(("jitwarden ", "eval ")), (words, line)
        own = ALIASES.get(words, words)
        if own != "jitwarden":  # the page's own command among them (an alias: the command it names)
            assert any(ln.startswith(own + " ") or ln == own for ln in shown), (words, shown)


def test_no_verb_says_start_with_doctor():
    ran = jw(in_process=True)
    assert ran.returncode == 2
    assert "Start with `jitwarden doctor`" in ran.stderr, ran.stderr
    assert "start with `jitwarden doctor`" in cli_main.build_parser().format_help().lower()


def test_examples_are_in_the_generated_reference():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "gen_commands", os.path.join(os.path.dirname(__file__), "../../../docs/gen_commands.py")
    )
    assert spec and spec.loader
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    ref = gen.reference()
    for words, p in _pages(cli_main.build_parser()):
        for line in _examples(p.format_help()):
            cmd = re.split(r"\s{2,}", line, maxsplit=1)[0]
            assert f"- `{cmd}`" in ref, (words, cmd)


def test_dir_says_not_made_yet_beside_paths_that_do_not_exist(tmp_path):
    env = dict(os.environ)
    env["TRITON_CACHE_DIR"] = str(tmp_path / "triton-not-here")
    ran = jw("dir", env=env, in_process=True)
    assert ran.returncode == 0, ran.stderr
    line = next(ln for ln in ran.stdout.splitlines() if ln.startswith("triton"))
    assert "triton-not-here (not made yet)" in line, ran.stdout
    assert line.rstrip().endswith("(not made yet)"), line  # its partition too
    os.makedirs(tmp_path / "triton-not-here")
    ran = jw("dir", env=env, in_process=True)
    line = next(ln for ln in ran.stdout.splitlines() if ln.startswith("triton"))
    assert "triton-not-here (not made yet)" not in line and line.count("(not made yet)") == 1, line
    js = jw("dir", "--format", "json", env=env, in_process=True)
    assert json.loads(js.stdout)["dirs"][0]["partition_exists"] is False, js.stdout
