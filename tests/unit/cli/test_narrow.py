"""Tables at 80 and 60 columns (issue 23, items 6 and 7): ids copyable, names and status whole, a ROOT column
where one id can be in two roots, and ``quarantine restore`` telling such ids apart.

Every command runs in a child process on a real pseudo-terminal of the given width (the pty runner of
docs/transcripts.py), over real caches: Triton kernels compiled on the CPU, a partition of this
environment holding copies of some of them, and the TorchInductor cache captured on the H200 (long kernel
names, a second kind).
"""

from __future__ import annotations

import json
import os
import re
import sys
import tarfile

import pytest

from jitwarden.cli import render as out
from tests.helpers import kernels
from tests.helpers.maint import SRC, cli
from tests.helpers.paths import DATA, DOCS

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
LONG_DIR = "a-directory-name-long-enough-that-no-root-label-fits-in-a-narrow-table"


def _run_pty():
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "jw_docs_transcripts_narrow", os.path.join(DOCS, "transcripts.py")
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.run_pty


_PTY = _run_pty()


def shown(args, env, cols) -> tuple[int, str]:
    rc, text = _PTY([sys.executable, "-m", "jitwarden", *args], dict(env, NO_COLOR="1"), cols)
    return rc, ANSI.sub("", text)


def _partition_copy(root: str, digest: str, ids) -> str:
    part = os.path.join(root, "jitwarden-v1", digest)
    os.makedirs(part)
    for i in ids:
        kernels.copy_cache(os.path.join(root, i), os.path.join(part, i))
    return part


@pytest.fixture(scope="module")
def home(built_cache, tmp_path_factory):
    """(env, recs, digest, other): ~/.triton/cache with a partition of this environment holding two of its
    entries, the H200 Inductor capture, and a root under a long path whose entries (and its partition's copies
    of them) were cleaned into quarantine."""
    base = tmp_path_factory.mktemp("narrow")
    h = base / "home"
    src, manifest = built_cache
    recs = {m["label"]: m for m in manifest}
    root = str(h / ".triton" / "cache")
    kernels.copy_cache(src, root)
    with tarfile.open(os.path.join(DATA, "h200_inductor_cache.tgz")) as t:
        t.extractall(
            base / "h200", **({"filter": "data"} if hasattr(tarfile, "data_filter") else {})
        )
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES")
    }
    env.update(
        HOME=str(h),
        XDG_CACHE_HOME=str(h / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(base / "h200" / "ind"),
        PYTHONPATH=SRC,
        TERM="xterm",
    )
    for k in (
        "TRITON_CACHE_DIR",
        "TRITON_HOME",
        "VLLM_CACHE_ROOT",
        "JITWARDEN_HOME",
        "CUDA_CACHE_PATH",
    ):
        env.pop(k, None)
    digest = json.loads(cli("fingerprint", "--format", "json", env=env).stdout)["digest"]
    twice = [recs["add_sm90"]["id"], recs["sub_sm80"]["id"]]
    _partition_copy(root, digest, twice)
    other = str(base / LONG_DIR / "cache")
    os.makedirs(other)
    for i in twice:
        kernels.copy_cache(os.path.join(root, i), os.path.join(other, i))
    _partition_copy(other, digest, twice)
    p = cli("clean", other, "--target", "90", "--foreign-arch", "-y", env=env)
    assert p.returncode == 0, p.stderr
    return env, recs, digest, other


def _ls_json(env, *args):
    p = cli("ls", "--target", "90", "--format", "json", *args, env=env)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)["entries"]


@pytest.mark.parametrize("cols", [80, 60])
def test_ls_keeps_ids_names_and_status_whole(home, cols):
    env, *_ = home
    entries = _ls_json(env)
    rc, text = shown(["ls", "--target", "90"], env, cols)
    assert rc == 0, text
    lines = text.splitlines()
    assert all(len(l) <= cols for l in lines), [l for l in lines if len(l) > cols]
    words = set(re.findall(r"[^\s·,]+", text))
    for e in entries:
        assert out.short_key(e["id"]) in words, e["id"]
        if e["name"]:
            assert e["name"] in words, e[
                "name"
            ]  # whole somewhere (below its row when too long for the column)
    for code in ("foreign-arch", "foreign-path", "unproven"):
        assert code in words
    assert not re.search(r"\b(foreign-a|foreign-p|mismatc|incomple)…", text), (
        text
    )  # status is never cut


def test_ls_has_a_root_column_where_one_id_is_in_the_cache_and_a_partition(home):
    env, recs, digest, _ = home
    rc, text = shown(["ls", "--target", "90"], env, 80)
    assert rc == 0 and "ROOT" in text.splitlines()[0]
    rows = [l for l in text.splitlines() if recs["add_sm90"]["id"][:12] in l]
    assert len(rows) == 2, text
    assert any(re.search(r"\s~/\.triton/cache\s", r) for r in rows)
    assert any(f"{digest[-8:]} *" in r for r in rows), rows  # this environment's partition, marked
    # One root only: no ROOT column to spend width on.
    rc, text = shown(
        [
            "ls",
            "--target",
            "90",
            os.path.join(env["HOME"], ".triton", "cache", "jitwarden-v1", digest),
        ],
        env,
        80,
    )
    assert rc == 0 and "ROOT" not in text.splitlines()[0]


def test_ls_long_keeps_every_id_and_path_whole_on_a_line(home):
    env, *_ = home
    entries = _ls_json(env)
    rc, text = shown(["ls", "--target", "90", "--long"], env, 80)
    assert rc == 0
    lines = text.splitlines()
    for e in entries:
        assert any(e["id"] in l for l in lines), e["id"]
        assert any(e["path"] in l for l in lines), e["path"]
    # Piped, one line per entry, the path last: whole rows for grep and awk.
    p = cli("ls", "--target", "90", "--long", env=env)
    rows = p.stdout.splitlines()[1:-1]
    assert len(rows) == len(entries) and all(r.split()[-1].startswith("/") for r in rows)


@pytest.mark.parametrize("cols", [80, 60])
def test_doctor_root_column_keeps_the_mark_of_this_environments_partition(home, cols):
    env, recs, digest, other = home
    rc, text = shown(["doctor", "--target", "90", other], env, cols)
    assert rc in (0, 1), text
    rows = [l for l in text.splitlines() if l.startswith("triton ")]
    assert len(rows) == 2, text
    marked = [m for r in rows for m in re.findall(r"([0-9a-f]{6}) \*", r)]
    assert len(marked) == 1 and digest.endswith(marked[0]), rows
    for row in rows:
        assert len(row) <= cols


@pytest.mark.parametrize("cols", [80, 60])
def test_quarantine_ls_ids_are_never_split_and_roots_tell_them_apart(home, cols):
    env, recs, digest, other = home
    rc, text = shown(["quarantine", "ls"], env, cols)
    assert rc == 0, text
    rows = [
        l for l in text.splitlines()[1:] if l and not l.startswith(" ") and "quarantined," not in l
    ]
    ids = [r.split()[0] for r in rows]
    # The same entry id quarantined from the root and from its partition: two rows, two roots.
    sub = recs["sub_sm80"]["id"][:12]
    assert ids.count(sub) == 2, text
    roots = [r.split()[1] for r in rows if r.startswith(sub)]
    assert len(set(roots)) == 2 and any(x.endswith(digest[-8:]) for x in roots), roots
    assert all("…" not in i for i in ids)
    # --long: the full quarantine ids (70 characters), each whole on one line.
    rc, text = shown(["quarantine", "ls", "--long"], env, cols)
    full = [l.split()[0] for l in text.splitlines()[1:] if re.match(r"\d{8}T\d{6}Z-", l)]
    assert len(full) == len(rows) and all(len(i) > 60 for i in full), text


def test_restore_of_an_id_in_two_roots_lists_them_and_hints_root(home):
    env, recs, digest, other = home
    sub = recs["sub_sm80"]["id"][:12]
    p = cli("quarantine", "restore", sub[:6], "--dry-run", env=env)
    assert p.returncode == 2
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1
    assert f"{sub} in " in err and f"jitwarden-v1/{digest}" in err
    assert "--root" in err
    # The hint as given resolves it.
    root_hint = re.search(r"--root (\S+)", err).group(1)
    p = cli("quarantine", "restore", sub[:6], "--dry-run", "--root", root_hint, env=env)
    assert p.returncode == 0, p.stderr
    assert f"restore {sub} into" in p.stdout


def test_grid_moves_columns_below_the_row_and_never_cuts_ids_or_names():
    g = out.Grid(
        [
            out.Column("ID"),
            out.Column("NAME", spill=True, min=8),
            out.Column("TYPE", hide=1),
            out.Column("SIZE", right=True, hide=2),
            out.Column("STATUS"),
        ]
    )
    g.add(
        "ABCDEFGHIJKL",
        "triton_per_fused__softmax_amax_mul_sub_0",
        "kernel",
        "101.9 KiB",
        "foreign-arch",
    )
    g.add("MNOPQRSTUVWX", "add", "kernel", "1 KiB", "ok")
    piped = g.plain(None).splitlines()
    assert len(piped) == 3 and piped[1].endswith("foreign-arch")
    narrow = g.plain(50).splitlines()
    assert all(len(l) <= 50 for l in narrow)
    assert narrow[1].startswith("ABCDEFGHIJKL") and narrow[1].endswith("foreign-arch")
    below = " ".join(narrow[2:4])
    assert "name: triton_per_fused__softmax_amax_mul_sub_0" in below and "type: kernel" in below


@pytest.mark.parametrize(
    "command",
    [
        ["status"],
        ["ls", "--target", "90"],
        ["quarantine", "ls"],
        ["dir"],
        ["doctor", "--target", "90"],
    ],
)
def test_every_partition_printed_is_a_path_that_exists(home, command):
    """Issue 34, item 8: partitions were printed as ``~/.triton/cache/@21d168e2b706``, a path that does not
    exist (the directory is ``jitwarden-v1/21d168e2b7069124``). Every one printed now can be copied."""
    env, _recs, digest, _ = home
    p = cli(*command, env=env)
    assert p.returncode in (0, 1), p.stderr
    assert not re.search(r"@[0-9a-f]{12}", p.stdout), p.stdout
    paths = re.findall(r"(?:~|/)[^\s]*jitwarden-v1/[0-9a-f]{16}", p.stdout)
    assert paths, p.stdout
    for path in paths:
        real = env["HOME"] + path[1:] if path.startswith("~") else path
        if command == ["dir"] and not os.path.isdir(real):
            assert (
                f"{path}" in p.stdout and f"{path} (not made yet)" in p.stdout
            )  # where it would be
            continue
        assert os.path.isdir(real), (path, p.stdout)
    assert any(p_.endswith(digest) for p_ in paths)


def test_dir_of_a_kind_with_no_dir_says_so(home):
    env = dict(home[0])
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    p = cli("dir", "jax", env=env)
    assert p.returncode == 1 and p.stdout == "", (p.stdout, p.stderr)
    assert "JAX_COMPILATION_CACHE_DIR is unset" in p.stderr and len(p.stderr.splitlines()) == 1
    p = cli("dir", "triton", env=env)
    assert p.returncode == 0 and p.stdout.splitlines()[0] == os.path.join(
        env["HOME"], ".triton", "cache"
    )
