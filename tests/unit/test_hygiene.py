"""Hygiene contracts the gates cannot see (issue 36; docs/development.md, "Gates").

The package ships its types (``py.typed`` in the wheel) and the public ``jitwarden.activate()`` is the
runtime's, signature for signature; docs/commands.md is generated from the parser and kept current.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import os
import re

import pytest

import jitwarden
from jitwarden.runtime import activation
from tests.helpers.paths import REPO, SRC


def test_the_package_ships_its_types():
    assert os.path.isfile(os.path.join(SRC, "jitwarden", "py.typed"))
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        text = f.read()
    # the wheel holds it (.ci/package checks the built wheel)
    assert re.search(r'\[tool\.setuptools\.package-data\]\njitwarden = \["py\.typed"\]', text)


def test_jitwarden_activate_has_the_runtimes_signature():
    public, runtime = inspect.signature(jitwarden.activate), inspect.signature(activation.activate)
    assert public == runtime
    assert [p.kind for p in public.parameters.values()] == [inspect.Parameter.KEYWORD_ONLY] * 3


def _gen_commands():
    spec = importlib.util.spec_from_file_location(
        "gen_commands", os.path.join(REPO, "docs", "gen_commands.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_commands_md_is_generated_from_the_parser_and_current():
    """docs/commands.md's reference and exit-code sections are what docs/gen_commands.py makes now."""
    assert _gen_commands().main(["--check"]) == 0, "run `python docs/gen_commands.py`"


def test_commands_md_names_every_verb_option_and_exit_status():
    from jitwarden.cli import main as cli
    from jitwarden.model.errors import ExitStatus

    with open(os.path.join(REPO, "docs", "commands.md")) as f:
        doc = f.read()
    parser = cli.build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert set(verbs) == set(cli.COMMANDS)
    for verb, p in verbs.items():
        assert f"### `jitwarden {verb}`" in doc, verb
        for a in p._actions:
            for flag in a.option_strings:
                assert flag in doc, (verb, flag)
    for flag in ("--no-memo", "--unsigned", "--force", "--verbose"):  # missing before issue 36
        assert f"`{flag}" in doc or f", {flag}" in doc, flag
    for status in ExitStatus:
        assert f"| {status.value} | `{status.name}` |" in doc


def test_no_unused_code_outside_the_reviewed_whitelist():
    """vulture, as CI runs it (.ci/run): each name it cannot see used is in .ci/vulture_whitelist.py with why."""
    vulture = pytest.importorskip("vulture")
    v = vulture.Vulture()
    v.scavenge([os.path.join(SRC, "jitwarden"), os.path.join(REPO, ".ci", "vulture_whitelist.py")])
    unused = [
        f"{item.filename}:{item.first_lineno}: {item.message}"
        for item in v.get_unused_code(min_confidence=60)
    ]
    assert unused == []


def _modules(layer: str) -> set[str]:
    d = os.path.join(SRC, "jitwarden", layer)
    return {
        f.removesuffix(".py")
        for f in os.listdir(d)
        if (f.endswith(".py") and f not in ("__init__.py", "__main__.py"))
        or (os.path.isdir(os.path.join(d, f)) and f != "__pycache__")
    }


def test_architecture_names_every_module_of_each_layer():
    """ARCHITECTURE.md's layer table lists each layer's modules: a module added is named there too."""
    with open(os.path.join(REPO, "ARCHITECTURE.md")) as f:
        text = f.read()
    rows = dict(re.findall(r"^\| `(\w+)/` \| (.*?) \|", text, re.MULTILINE))
    assert set(rows) == {"model", "formats", "store", "env", "adapters", "ops", "runtime", "cli"}
    for layer, cell in rows.items():
        named = {n.split(".")[0].rstrip("/") for n in re.findall(r"`([\w.*/]+)`", cell)}
        globs = [n[:-1] for n in named if n.endswith("*")]
        missing = {m for m in _modules(layer) - named if not any(m.startswith(g) for g in globs)}
        assert not missing, f"ARCHITECTURE.md's {layer}/ row does not name {sorted(missing)}"


def test_the_commands_never_import_each_other_contract_names_every_command():
    with open(os.path.join(REPO, "pyproject.toml")) as f:
        text = f.read()
    contract = text[text.index('type = "independence"') :]
    listed = set(re.findall(r'"jitwarden\.cli\.commands\.(\w+)"', contract))
    # a leading underscore marks a module of shared steps (_common, _bundles, _foreign), not a verb
    assert listed == {m for m in _modules("cli/commands") if not m.startswith("_")}


def test_the_readme_is_read_in_one_sitting():
    """README.md: the story, the two set-up commands, a tour and links, at most 15 KB; the rest is in docs/
    (issue 46, item 5)."""
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as f:
        text = f.read()
    assert len(text.encode()) <= 15_000, len(text.encode())
    assert (
        "python3 -m venv .venv && .venv/bin/pip install -e '.[triton]' && .venv/bin/jitwarden doctor"
        in text
    )
    assert (
        "python3 -m venv .venv-test && .venv-test/bin/pip install -q -e '.[test]' && "
        ".venv-test/bin/python -m pytest -q" in text
    )
