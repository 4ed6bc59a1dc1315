"""One row per cache kind (issue 46, item 1): every row is complete, every table of kinds is made from the rows,
and a kind made up here needs its row and its adapter, nothing else."""

from __future__ import annotations

import importlib.util
import inspect
import os
import sys

import pytest

from jitwarden import adapters
from jitwarden.adapters import CacheAdapter
from jitwarden.env import locations
from jitwarden.model import kinds
from jitwarden.model.entries import Judge

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "..", "docs")


@pytest.mark.parametrize("row", kinds.ROWS, ids=kinds.NAMES)
def test_every_row_is_complete(row):
    # An adapter module with the whole protocol, of this very kind.
    mod = adapters.get(row.name)
    assert isinstance(mod, CacheAdapter), f"adapters/{row.adapter}.py lacks part of the protocol"
    assert row.name == mod.KIND
    for member in ("discover_roots", "looks_like_root", "list_entry_names", "inspect_entry"):
        assert callable(getattr(mod, member))
    assert row.tool and row.default
    # A variable where partitioned, and every variable a row names is one the sandbox points inside.
    assert row.partition in (kinds.DIR, kinds.FILE, kinds.NOT)
    if row.partition:
        assert row.var
    if row.var:
        assert row.var in dict(locations.LOCATION_VARS)
    assert not row.bundled or row.partition == kinds.DIR  # bundles carry entry directories only
    # A default root: under this test's HOME or temp dir, or none where the tool keeps none unless told.
    env = dict(os.environ)
    if row.root and not row.root.startswith("~/"):
        assert inspect.isfunction(getattr(locations, row.root)), row.root
    where = locations.default_base(row.name, env)
    if row.root:
        assert os.path.isabs(where)
        assert where.startswith(
            (env["HOME"], env.get("XDG_CACHE_HOME", env["HOME"]), env["TMPDIR"])
        )
    else:
        assert where == ""
    # The variable wins, as it does for the tool (FlashInfer's names a workspace the cache lies inside).
    if row.var:
        assert locations.default_base(row.name, {**env, row.var: "/elsewhere"}).startswith(
            "/elsewhere"
        )
    # Its reader and its guards are modules that exist (found, not imported).
    assert importlib.util.find_spec(f"jitwarden.formats.{row.reader}") is not None
    for g in row.guard:
        assert importlib.util.find_spec(f"jitwarden.runtime.{g}") is not None, g
    # Where its Triton trees are, as a function that exists.
    if row.triton_trees not in (None, kinds.SELF):
        assert inspect.isfunction(getattr(locations, row.triton_trees))


def test_an_unknown_kind_raises_everywhere_a_kind_is_asked():
    for ask in (
        lambda: kinds.get("madeup"),
        lambda: adapters.get("madeup"),
        lambda: locations.default_base("madeup", {}),
        lambda: locations.partition_base("madeup", {}),
        lambda: locations.triton_trees("madeup", "/r"),
    ):
        with pytest.raises(KeyError, match="unknown cache kind 'madeup'"):
            ask()


def _kind_help(parser) -> str:
    """``verify --kind``'s help text."""
    import argparse

    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return next(a.help for a in sub.choices["verify"]._actions if "--kind" in a.option_strings)


def test_kind_help_and_the_docs_table_come_from_the_rows():
    from jitwarden.cli import main as cli

    assert _kind_help(cli.build_parser()).endswith(": " + ", ".join(kinds.NAMES))
    spec = importlib.util.spec_from_file_location(
        "gen_commands", os.path.join(DOCS, "gen_commands.py")
    )
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    table = gen.kinds()
    with open(os.path.join(DOCS, "caches.md"), encoding="utf-8") as f:
        assert table in f.read()
    for row in kinds.ROWS:
        assert f"| `{row.name}` | {row.tool} | `adapters/{row.adapter}.py` |" in table
    with open(os.path.join(DOCS, "..", "ARCHITECTURE.md"), encoding="utf-8") as f:
        assert gen.kind_map() in f.read()


MADEUP = '''"""A made-up kind: one file per entry, named ``*.mk``, in ``~/.madeup``."""
import os

from jitwarden.adapters import base
from jitwarden.env import locations
from jitwarden.model.entries import Entry

KIND = "madeup"
ROOT_RISK = None
ROOT_CHECKS = ()


def discover_roots(env=os.environ):
    return base.existing(KIND, [(locations.default_base(KIND, env), "default")])


def looks_like_root(path):
    return os.path.isdir(path) and any(n.endswith(".mk") for n in os.listdir(path))


def list_entry_names(root):
    return sorted(n for n in os.listdir(root) if n.endswith(".mk")), []


def inspect_entry(root, name, judge, root_uid=None):
    p = os.path.join(root, name)
    return Entry(kind=KIND, root=root, id=name, path=p, type="file", name=name, arch=None, bytes=0, mtime=0.0)
'''


@pytest.fixture
def madeup(tmp_path, monkeypatch):
    """A kind that exists nowhere in jitwarden: its row (as model/kinds.py would hold it) and its adapter
    (as adapters/madeup.py would be), and no other file."""
    src = tmp_path / "madeup.py"
    src.write_text(MADEUP)
    spec = importlib.util.spec_from_file_location("jitwarden.adapters.madeup", src)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    monkeypatch.setitem(sys.modules, "jitwarden.adapters.madeup", mod)
    row = kinds.Kind(
        "madeup",
        adapter="madeup",
        tool="MadeUp",
        var="MADEUP_CACHE_DIR",
        partition=kinds.DIR,
        bundled=False,
        needs=None,
        root="~/.madeup",
        reader="elf",
    )
    monkeypatch.setattr(kinds, "ROWS", (*kinds.ROWS, row))
    monkeypatch.setattr(kinds, "NAMES", (*kinds.NAMES, "madeup"))
    monkeypatch.setitem(kinds._BY_NAME, "madeup", row)
    return row


def test_a_made_up_kind_needs_its_row_and_its_adapter_only(madeup, tmp_path):
    """Files a new kind touches: model/kinds.py (its row) and adapters/<kind>.py (its adapter). The scanner,
    ``--kind``, the root of a path, the default root and activation's partition follow from them. (A guard
    at load is its row's ``guard`` and ``hooks`` and runtime/guards/<kind>.py: tests/unit/runtime/test_guards.py.)"""
    from jitwarden.cli import main as cli
    from jitwarden.cli.commands import _common
    from jitwarden.ops import scan
    from jitwarden.runtime.activation import activate

    env = dict(os.environ)
    root = os.path.join(env["HOME"], ".madeup")
    assert locations.default_base("madeup", env) == root
    os.makedirs(root)
    open(os.path.join(root, "k1.mk"), "w").close()
    # Discovery, the kind of a path, the scan.
    assert [r.path for r in adapters.discover_roots(env) if r.kind == "madeup"] == [root]
    assert adapters.kind_of_path(root) == "madeup"
    found = [(r, None) for r in adapters.discover_roots(env, ("madeup",))]
    report = scan.scan(found, Judge(), scan.Target(None, "none"), jobs=1)
    assert [e.id for e in report.entries] == ["k1.mk"]
    # --kind accepts it and its help names it.
    assert _kind_help(cli.build_parser()).endswith(", madeup")
    assert _common.kinds_of(type("Args", (), {"kind": ["madeup"]})()) == ("madeup",)
    # Activation partitions its variable like any dir-partitioned kind's.
    target = {**env, "MADEUP_CACHE_DIR": str(tmp_path / "mine")}
    rec = activate(env=target, roots=("madeup",), quiet=True)
    assert target["MADEUP_CACHE_DIR"].startswith(
        str(tmp_path / "mine" / "jitwarden-v1") + os.sep
    ), rec.skipped
