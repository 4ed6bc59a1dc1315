"""Helpers for the maintenance tests: tree snapshots, damage of every kind, the CLI in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time

from tests.helpers.cli import jw
from tests.helpers.paths import SRC  # noqa: F401 - re-exported for the CLI runners


def snapshot(root: str) -> dict:
    """relpath -> what it is, byte for byte: (dir, mode) / (file, mode, bytes) / (link, target). Never follows links."""
    out = {}
    for d, dirs, files in os.walk(root):
        for n in dirs + files:
            p = os.path.join(d, n)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p))
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", st.st_mode)
            else:
                with open(p, "rb") as f:
                    out[rel] = ("file", st.st_mode, f.read())
    return out


def sub(snap: dict, prefix: str) -> dict:
    """The part of a snapshot under ``prefix`` (relative to it)."""
    pre = prefix.rstrip("/") + "/"
    return {k[len(pre) :]: v for k, v in snap.items() if k.startswith(pre)}


def file_of(rec, ext) -> str:
    return os.path.join(rec["path"], f"{rec['name']}.{ext}")


def damage_everything(root: str, recs: dict, outside_dir: str) -> dict:
    """Damage sm_90 entries in every way the vocabulary names; returns {label: expected code}."""
    d = {}
    p = file_of(recs["add_sm90"], "cubin")
    data = open(p, "rb").read()
    open(p, "wb").write(data[: len(data) // 2])
    d["add_sm90"] = "corrupt"
    shutil.copyfile(file_of(recs["sub_sm90"], "cubin"), file_of(recs["add_b256_sm90"], "cubin"))
    d["add_b256_sm90"] = "mismatch"
    os.unlink(file_of(recs["matmul_sm90"], "ptx"))
    d["matmul_sm90"] = "incomplete"
    grp = os.path.join(
        recs["add_nofma_sm90"]["path"], f"__grp__{recs['add_nofma_sm90']['name']}.json"
    )
    doc = json.load(open(grp))
    there = os.path.join(outside_dir, "other-tree", recs["add_nofma_sm90"]["id"])
    shutil.copytree(
        recs["add_nofma_sm90"]["path"], there
    )  # another tree that exists: Triton loads it
    doc["child_paths"] = {c: os.path.join(there, c) for c in doc["child_paths"]}
    json.dump(doc, open(grp, "w"))
    d["add_nofma_sm90"] = "foreign-path"
    # moved (warn): a group naming a tree that is gone (a copied cache); Triton recompiles it
    rec = recs["matmul_sm80"]
    grp = os.path.join(rec["path"], f"__grp__{rec['name']}.json")
    doc = json.load(open(grp))
    doc["child_paths"] = {c: os.path.join("/gone", rec["id"], c) for c in doc["child_paths"]}
    json.dump(doc, open(grp, "w"))
    d["matmul_sm80"] = "moved"
    # unsafe: a file inside the entry is a symlink to a file outside the root
    secret = os.path.join(outside_dir, "secret.cubin")
    with open(secret, "wb") as f:
        f.write(b"outside the root: must survive\n")
    rec = recs["add_debug_sm90"]
    os.unlink(file_of(rec, "cubin"))
    os.symlink(secret, file_of(rec, "cubin"))
    d["add_debug_sm90"] = "unsafe"
    # unsafe: the whole entry is a symlink to a directory outside the root
    rec = recs["add_sm80"]
    moved = os.path.join(outside_dir, "entry_dir")
    shutil.move(rec["path"], moved)
    os.symlink(moved, rec["path"])
    d["add_sm80"] = "unsafe"
    # stale (warn), orphan (warn), moved (warn, above): not taken by a default clean
    md_path = file_of(recs["sub_sm90"], "json")
    md = json.load(open(md_path))
    md["triton_version"] = "3.5.1"
    json.dump(md, open(md_path, "w"))
    d["sub_sm90"] = "stale"
    old = os.path.join(
        recs["add_sm120"]["path"], "tmp.pid_4242_0c4f6a7e-aaaa-bbbb-cccc-1234567890ab"
    )
    os.makedirs(old)
    t = time.time() - 7200
    os.utime(old, (t, t))
    d["add_sm120"] = "orphan"
    return d


cli = jw  # the one CLI runner (tests/helpers/cli.py), under the name this module's callers use
