"""The settings table: every ``JITWARDEN_*`` variable declared once (model/settings.py), read through its row."""

from __future__ import annotations

import ast
import os
import re

import pytest

from jitwarden.model import settings

SRC = os.path.join(os.path.dirname(__file__), "..", "..", "..", "src", "jitwarden")
DOCS = os.path.join(SRC, "..", "..", "docs", "settings.md")
NAME = re.compile(r"JITWARDEN_[A-Z][A-Z0-9_]*")

PENDING: set[str] = set()
"""Files still allowed to spell a variable's name (none: messages and help texts take it from its row too)."""


def _pending(rel: str) -> bool:
    return rel in PENDING or (rel.startswith("cli/commands/") and "cli/commands/*" in PENDING)


def _docstrings(tree) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body
        ):
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def literals(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant that names a ``JITWARDEN_*`` variable, docstrings aside."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    return [
        (n.lineno, n.value)
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in docs
        and NAME.search(n.value)
    ]


def _sources():
    for top, _dirs, files in os.walk(SRC):
        for f in sorted(files):
            if f.endswith(".py"):
                path = os.path.join(top, f)
                yield (
                    os.path.relpath(path, SRC).replace(os.sep, "/"),
                    open(path, encoding="utf-8").read(),
                )


def test_the_literal_check_catches_a_planted_name():
    assert literals('import os\nx = os.environ.get("JITWARDEN_PLANTED")\n') == [
        (2, "JITWARDEN_PLANTED")
    ]
    assert literals('def f(env):\n    return f"unset JITWARDEN_PLANTED={env}"\n')
    assert literals('def f():\n    """Docs may name JITWARDEN_PLANTED."""\n') == []


def test_no_jitwarden_name_is_written_outside_the_settings_table():
    found = [
        f"{rel}:{line}: {text!r}"
        for rel, src in _sources()
        if rel != "model/settings.py" and not _pending(rel)
        for line, text in literals(src)
    ]
    assert found == [], "read it from jitwarden.model.settings instead:\n" + "\n".join(found)


def test_every_name_in_the_code_and_docs_is_declared_once():
    names = [s.name for s in settings.SETTINGS]
    assert len(names) == len(set(names)) and set(names) == set(settings.BY_NAME)
    mentioned = set()
    for _rel, src in _sources():
        mentioned |= set(NAME.findall(src))
    docs_dir = os.path.dirname(DOCS)
    for f in os.listdir(docs_dir):
        if f.endswith(".md"):
            mentioned |= set(NAME.findall(open(os.path.join(docs_dir, f), encoding="utf-8").read()))
    assert mentioned - set(names) == set(), "declare these in jitwarden.model.settings"


def test_docs_table_is_the_settings_table():
    text = open(DOCS, encoding="utf-8").read()
    start, end = (
        "<!-- settings table: python -m jitwarden.model.settings -->\n",
        "<!-- /settings table -->",
    )
    assert start in text and end in text
    assert text.split(start, 1)[1].split(end, 1)[0] == settings.markdown(), (
        "regenerate the table in docs/settings.md: python -m jitwarden.model.settings"
    )


@pytest.mark.parametrize(
    "word, on",
    [
        ("0", False),
        ("off", False),
        ("no", False),
        ("1", True),
        ("yes", True),
        ("", False),
        ("maybe", False),
    ],
)
def test_debug_is_a_flag(word, on):
    assert settings.DEBUG.on({"JITWARDEN_DEBUG": word}) is on


def test_numbers_fall_back_to_their_default():
    t = settings.REMOTE_TIMEOUT
    assert t.number({}) == 0.5 and t.number({t.name: "2"}) == 2.0
    for bad in ("-1", "nan", "soon"):
        assert t.number({t.name: bad}) == 0.5


def test_weakened_names_each_switch_turned_to_its_weak_side():
    env = {
        "JITWARDEN_PARTITION": "0",
        "JITWARDEN_SWEEP": "off",
        "JITWARDEN_PROVE": "no",
        "JITWARDEN_DISABLE": "0",
        "JITWARDEN_TORCH_HOOKS": "1",
    }
    assert [w[0] for w in settings.weakened(env)] == [
        "JITWARDEN_PARTITION=0",
        "JITWARDEN_SWEEP=off",
        "JITWARDEN_PROVE=no",
    ]
    assert all(w[1] and w[2].startswith("unset ") for w in settings.weakened(env))


# The settings table is the only reader of the environment for jitwarden's own variables: JITWARDEN_* and the
# XDG directories jitwarden's own places fall back to (settings.home_dir, settings.config_dir). Reads of them
# elsewhere, reviewed, each with its reason (the list only shrinks):
ENV_READS_ALLOWED = {
    (
        "env/locations.py",
        "XDG_CACHE_HOME",
    ): "vLLM's and torch's own cache roots fall back to it (the tools' rule)",
    (
        "adapters/vllm.py",
        "XDG_CACHE_HOME",
    ): "names what decided vLLM's root (`jitwarden dir`'s source column)",
}
LOCATION_VARS = {"XDG_CACHE_HOME", "XDG_CONFIG_HOME"}


def _setting_name(node, bound: set[str]) -> bool:
    """Whether ``node`` is a setting's name: ``ROW.name``, ``settings.ROW.name`` or a name bound to one."""
    if isinstance(node, ast.Attribute) and node.attr == "name":
        row = node.value
        return (isinstance(row, ast.Name) and row.id.isupper()) or (
            isinstance(row, ast.Attribute) and row.attr.isupper()
        )
    return isinstance(node, ast.Name) and node.id in bound


def env_reads(source: str) -> list[tuple[int, str]]:
    """(line, key) of every read ``X.get(key)``, ``X[key]`` or ``os.getenv(key)`` of a JITWARDEN_* variable
    (a literal, a setting's ``.name``, a name bound to one) or of a location variable jitwarden owns."""
    tree = ast.parse(source)
    bound = {
        t.id
        for n in tree.body
        if isinstance(n, ast.Assign) and _setting_name(n.value, set())
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    out = []
    for n in ast.walk(tree):
        key = None
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.args:
            if n.func.attr in ("get", "getenv", "pop", "setdefault"):
                key = n.args[0]
        elif isinstance(n, ast.Subscript) and isinstance(n.ctx, ast.Load):
            key = n.slice
        if key is None:
            continue
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            if NAME.fullmatch(key.value) or key.value in LOCATION_VARS:
                out.append((n.lineno, key.value))
        elif _setting_name(key, bound):
            out.append((n.lineno, ast.unparse(key)))
    return out


def test_the_reader_check_catches_planted_reads():
    planted = (
        "import os\nfrom jitwarden.model.settings import PROVE\nVAR = PROVE.name\n"
        "a = os.environ.get(PROVE.name)\nb = env[VAR]\nc = os.getenv('JITWARDEN_X')\n"
        "d = env.get('XDG_CONFIG_HOME')\ne = by_name.get(row.name)\n"
    )
    assert [line for line, _ in env_reads(planted)] == [4, 5, 6, 7]


def test_the_settings_table_is_the_only_reader_of_jitwardens_variables():
    reads = [
        (rel, line, key)
        for rel, src in _sources()
        if rel != "model/settings.py"
        for line, key in env_reads(src)
    ]
    found = [
        f"{rel}:{line}: {key}" for rel, line, key in reads if (rel, key) not in ENV_READS_ALLOWED
    ]
    assert found == [], "read it through its row in jitwarden.model.settings:\n" + "\n".join(found)
    assert set(ENV_READS_ALLOWED) <= {(rel, key) for rel, _line, key in reads}  # no stale entry
