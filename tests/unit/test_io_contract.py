"""The I/O contract (ARCHITECTURE.md, "Layers"; docs/threat-model.md, "Disk rules"): outside ``store/`` and
``formats/`` no module of ``src/jitwarden`` touches files or sockets itself.

The check walks the AST of every module and resolves each call's name through that module's imports
(``from os import rename as mv; mv(...)`` is ``os.rename``). What it refuses outside the two layers:
the builtin ``open``, ``io.open``, ``os.open``/``fdopen``, the ``os`` calls that rename, replace, make or
remove directory entries, anything of ``shutil``, ``tempfile`` and ``zipfile``, ``json.load(s)``,
``tarfile.open`` and tar extraction, ``socket`` reads (``recv*``) and pathlib's read/write/open methods.
Every such need goes through the disk layer (directory fds, ``O_NOFOLLOW | O_NONBLOCK``, regular
files, bounds, ``O_EXCL`` temporaries renamed by fd) or a bounded reader in ``formats/``.

``ALLOWED`` is the reviewed allow-list: (module, call) pairs, each with its reason. ``PENDING`` lists
modules owned by branches that were still being brought under the contract when it landed; the lead
empties it at merge. An entry of either that no longer matches anything fails the check too, so both
only ever shrink.
"""

from __future__ import annotations

import ast
import os
import shutil
from dataclasses import dataclass

import pytest

SRC = os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "src", "jitwarden")
EXEMPT_LAYERS = ("store", "formats")
"""The two layers that own the disk and the bytes: the rules live there."""

BANNED_CALLS = frozenset(
    {
        "open",
        "builtins.open",
        "io.open",
        "io.FileIO",
        "os.open",
        "os.fdopen",
        "os.openpty",
        "os.rename",
        "os.renames",
        "os.replace",
        "os.makedirs",
        "os.mkdir",
        "os.mkfifo",
        "os.mknod",
        "os.remove",
        "os.unlink",
        "os.rmdir",
        "os.removedirs",
        "os.link",
        "os.symlink",
        "os.truncate",
        "json.load",
        "json.loads",
        "tarfile.open",
        "tarfile.TarFile",
        "tarfile.TarFile.open",
    }
)
BANNED_MODULES = ("shutil", "tempfile", "zipfile")
"""Every call into these is banned, whatever its name, except ``NOT_IO``."""
NOT_IO = frozenset({"shutil.which"})
"""Calls of a banned module that only look names up (``which``: a stat per PATH entry, nothing opened)."""

BANNED_METHODS = frozenset(
    {
        "recv",
        "recv_into",
        "recvfrom",
        "recvfrom_into",
        "recvmsg",
        "recvmsg_into",  # socket reads
        "extractall",
        "extractfile",  # tar (and zip) extraction
        "read_text",
        "write_text",
        "read_bytes",
        "write_bytes",
        "open",
        "touch",
        "symlink_to",
        "hardlink_to",  # pathlib
    }
)
"""Method names banned on any object that is not a module (``sock.recv``, ``Path(p).write_text``)."""

ALLOWED = {
    # cli/main: after a broken pipe, stdout is pointed at the null device so the interpreter's final flush
    # cannot fail; a device jitwarden names itself, never a path from the user or a cache.
    ("cli.main", "open"),
}

PENDING: set[str] = set()  # emptied: every module is under the contract (issue 21)


@dataclass(frozen=True)
class Violation:
    module: str
    line: int
    call: str

    def __str__(self) -> str:
        return f"{self.module.replace('.', '/')}.py:{self.line}: {self.call}"


def _imports(tree: ast.Module) -> dict:
    """Local name -> dotted name it stands for, from every import in the module (functions included)."""
    names: dict = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.asname:
                    names[a.asname] = a.name
                else:
                    names[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for a in node.names:
                names[a.asname or a.name] = f"{node.module}.{a.name}"
    return names


def _dotted(func: ast.expr, names: dict) -> tuple[str | None, bool]:
    """(the dotted name a call's function resolves to, whether its base is an imported name)."""
    attrs = []
    while isinstance(func, ast.Attribute):
        attrs.append(func.attr)
        func = func.value
    if not isinstance(func, ast.Name):
        return (attrs[0] if attrs else None), False
    base = names.get(func.id)
    if base is None:
        return (func.id if not attrs else ".".join([func.id, *reversed(attrs)])), False
    return ".".join([base, *reversed(attrs)]), True


def violations_in(source: str, module: str) -> list[Violation]:
    """Every banned call in one module's source."""
    tree = ast.parse(source)
    names = _imports(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name, imported = _dotted(node.func, names)
        if name is None:
            continue
        method = name.rsplit(".", 1)[-1]
        bad = name in BANNED_CALLS and (imported or name == "open")
        bad = bad or (imported and name.split(".")[0] in BANNED_MODULES and name not in NOT_IO)
        bad = bad or (
            imported
            and name.startswith(("tarfile.", "zipfile."))
            and method in ("open", "extractall")
        )
        bad = bad or (not imported and "." in name and method in BANNED_METHODS)
        bad = bad or (
            not imported and isinstance(node.func, ast.Attribute) and method in BANNED_METHODS
        )
        if bad:
            out.append(Violation(module, node.lineno, name))
    return out


def scan(src: str) -> list[Violation]:
    """Every banned call in the package at ``src`` outside the exempt layers, unfiltered."""
    out = []
    for d, dirs, files in os.walk(src):
        dirs[:] = sorted(x for x in dirs if x != "__pycache__")
        rel = os.path.relpath(d, src)
        if rel.split(os.sep)[0] in EXEMPT_LAYERS:
            continue
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            path = os.path.join(d, f)
            module = os.path.normpath(os.path.join(rel, f[:-3])).replace(os.sep, ".")
            with open(path, encoding="utf-8") as fh:
                out += violations_in(fh.read(), module)
    return out


def check(src: str) -> list[str]:
    """Problems with the package at ``src``: banned calls not allowed, and allow-list or PENDING lines that
    match nothing any more (so both only shrink)."""
    found = scan(src)
    problems = [
        f"{v} (raw I/O outside store/ and formats/: use the disk layer in store/ or a formats reader)"
        for v in found
        if (v.module, v.call) not in ALLOWED and v.module not in PENDING
    ]
    seen = {(v.module, v.call) for v in found}
    problems += [
        f"ALLOWED has ({m!r}, {c!r}), which matches no call: remove it"
        for m, c in sorted(ALLOWED - seen)
    ]
    clean = PENDING - {v.module for v in found}
    problems += [
        f"PENDING has {m!r}, which holds no banned call any more: remove it" for m in sorted(clean)
    ]
    return problems


def test_no_raw_io_outside_store_and_formats():
    problems = check(SRC)
    assert not problems, "\n".join(problems)


# ---------------------------------------------------------------- inside the disk layer: one atomic writer

ONE_WRITER = {
    # The one atomic writer: a temporary beside the target, fsync, renamed by the directory's fd.
    ("atomic", "os.replace"),
    # Spill: an unnamed file where O_TMPFILE is missing (created, then unlinked at once; never renamed).
    ("tempdirs", "tempfile.mkstemp"),
}
"""Where ``store/`` may replace a file or make a named temporary (ARCHITECTURE.md, "Layers")."""


def store_writers(src: str) -> set[tuple[str, str]]:
    """(store module, call) of every ``os.replace`` and ``tempfile.mkstemp``/``mkdtemp`` call in ``store/``."""
    out = set()
    d = os.path.join(src, "store")
    for f in sorted(os.listdir(d)):
        if not f.endswith(".py"):
            continue
        with open(os.path.join(d, f), encoding="utf-8") as fh:
            tree = ast.parse(fh.read())
        names = _imports(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                name, imported = _dotted(node.func, names)
                if imported and name in ("os.replace", "tempfile.mkstemp", "tempfile.mkdtemp"):
                    out.add((f[:-3], name))
    return out


def test_store_replaces_files_only_through_the_one_atomic_writer():
    """Every temp-then-rename writer goes through ``store/atomic.AtomicWriter``: no other module of the disk
    layer renames a temporary onto a file (by path or otherwise) or makes a named temporary of its own."""
    assert store_writers(SRC) == ONE_WRITER


# ---------------------------------------------------------------- the check catches what it must

PLANTS = {
    "builtin open": "def _planted(p):\n    return open(p).read()\n",
    "os.rename": "import os\n\ndef _planted(a, b):\n    os.rename(a, b)\n",
    "aliased replace": "from os import replace as _mv\n\ndef _planted(a, b):\n    _mv(a, b)\n",
    "json.loads": "def _planted(b):\n    import json\n    return json.loads(b)\n",
    "shutil.rmtree": "import shutil\n\ndef _planted(p):\n    shutil.rmtree(p)\n",
    "tempfile.mkdtemp": "def _planted():\n    from tempfile import mkdtemp\n    return mkdtemp()\n",
    "tarfile.open": "import tarfile\n\ndef _planted(p):\n    return tarfile.open(p)\n",
    "tar extraction": "def _planted(tar, m):\n    return tar.extractfile(m)\n",
    "socket recv": "def _planted(sock):\n    return sock.recv(4096)\n",
    "pathlib write": 'from pathlib import Path\n\ndef _planted(p):\n    Path(p).write_text("x")\n',
    "pathlib open": "import pathlib\n\ndef _planted(p):\n    return pathlib.Path(p).open()\n",
    "os.fdopen": "import os\n\ndef _planted(fd):\n    return os.fdopen(fd)\n",
}


@pytest.fixture
def tree_copy(tmp_path):
    dst = str(tmp_path / "jitwarden")
    shutil.copytree(SRC, dst, ignore=shutil.ignore_patterns("__pycache__"))
    return dst


@pytest.mark.parametrize("what", sorted(PLANTS))
def test_a_planted_violation_fails_the_check(tree_copy, what):
    with open(os.path.join(tree_copy, "ops", "scan.py"), "a", encoding="utf-8") as f:
        f.write("\n\n" + PLANTS[what])
    problems = check(tree_copy)
    assert len(problems) == 1 and problems[0].startswith("ops/scan.py:"), problems


def test_the_disk_layer_itself_is_exempt_and_a_stale_allowance_is_reported(tree_copy):
    assert check(tree_copy) == []  # the copy passes as the tree does
    with open(os.path.join(tree_copy, "store", "reads.py"), "a", encoding="utf-8") as f:
        f.write("\n\n" + PLANTS["builtin open"])
    assert check(tree_copy) == []
    with open(os.path.join(tree_copy, "cli", "main.py"), "w", encoding="utf-8") as f:
        f.write('"""Emptied: no raw I/O left."""\n')
    assert check(tree_copy) == [
        "ALLOWED has ('cli.main', 'open'), which matches no call: remove it"
    ]


def test_harmless_lookalikes_are_not_flagged():
    src = (
        "import os\nfrom jitwarden.store import reads\nfrom jitwarden.store.reads import read_bytes\n\n"
        'def f(p, s):\n    reads.read_bytes(p)\n    read_bytes(p)\n    s.replace("a", "b")\n'
        '    os.path.join(p, "x")\n    os.stat(p)\n'
    )
    assert violations_in(src, "ops.example") == []
