"""Bash completion, run for real (issue 34, item 6).

The generated script was registered with ``complete -F`` and no ``-o default``, so loading it took away
bash's file-name completion, and no value completed (``--kind``, ``--code``, ``--target``, ``dir KIND``,
quarantine ids). Each test sources the script into ``bash -c``, sets ``COMP_WORDS``/``COMP_CWORD`` as bash
does on Tab, calls the function ``complete -p`` names and reads ``COMPREPLY``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from tests.helpers import kernels
from tests.helpers.maint import cli
from tests.helpers.paths import SRC

pytestmark = pytest.mark.skipif(not shutil.which("bash"), reason="needs bash")


@pytest.fixture(scope="module")
def script(tmp_path_factory):
    d = tmp_path_factory.mktemp("completion")
    p = cli("completion", "bash")
    assert p.returncode == 0, p.stderr
    path = d / "jitwarden.bash"
    path.write_text(p.stdout)
    shim = d / "bin" / "jitwarden"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m jitwarden "$@"\n')
    shim.chmod(0o755)
    return str(path), str(shim.parent)


def complete(script, *words: str, cwd: str | None = None) -> list[str]:
    """COMPREPLY for the command line ``jitwarden WORDS`` with the cursor at the end of the last word."""
    path, bindir = script
    line = " ".join(("jitwarden", *words))
    quoted = " ".join(f"'{w}'" for w in ("jitwarden", *words))
    prog = f"""
source '{path}'
fn=$(complete -p jitwarden | sed -E 's/.* -F ([^ ]+) .*/\\1/')
COMP_WORDS=({quoted}); COMP_CWORD={len(words)}; COMP_LINE='{line}'; COMP_POINT={len(line)}
"$fn" jitwarden '{words[-1]}' '{words[-2] if len(words) > 1 else "jitwarden"}'
printf '%s\\n' "${{COMPREPLY[@]}}"
"""
    env = dict(os.environ, PATH=bindir + os.pathsep + os.environ["PATH"])
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    p = subprocess.run(
        ["bash", "-c", prog], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )
    assert p.returncode == 0, p.stderr
    return [x for x in p.stdout.splitlines() if x]


def test_loading_it_keeps_file_name_completion(script):
    p = subprocess.run(
        ["bash", "-c", f"source '{script[0]}'; complete -p jitwarden"],
        capture_output=True,
        text=True,
    )
    assert "-o default" in p.stdout, p.stdout


def test_paths_complete_as_file_names(script, tmp_path):
    (tmp_path / "cache-one").mkdir()
    (tmp_path / "cache-two").mkdir()
    assert sorted(complete(script, "verify", "cache-", cwd=str(tmp_path))) == [
        "cache-one",
        "cache-two",
    ]
    assert complete(script, "quarantine", "ls", "--root", "cache-o", cwd=str(tmp_path)) == [
        "cache-one"
    ]


@pytest.mark.parametrize(
    "words, want",
    [
        (("verify", "--kind", "tr"), ["triton"]),
        (("ls", "--kind", "deep"), ["deepgemm"]),
        (("clean", "--code", "foreign-"), ["foreign-path", "foreign-arch"]),
        (("verify", "--code", "mo"), ["moved"]),
        (("doctor", "--target", "sm_12"), ["sm_120", "sm_121"]),
        (("dir", "ji"), ["jitwarden"]),
        (("dir", "cu"), ["cuda-compute", "cupy"]),
    ],
)
def test_values_complete(script, words, want):
    assert sorted(complete(script, *words)) == sorted(want)


def test_quarantine_ids_complete(script, built_cache, tmp_path):
    root = os.path.join(os.environ["HOME"], ".triton", "cache")
    src, manifest = built_cache
    kernels.copy_cache(src, root)
    add = next(j for j in manifest if j["label"] == "add_sm90")
    p = cli("clean", "--all", "-y", os.path.join(root, add["id"]))  # one entry, named by its dir
    assert p.returncode == 0 and "quarantined 1 " in p.stdout, p.stderr
    assert complete(script, "quarantine", "restore", add["id"][:4]) == [add["id"][:12]]
