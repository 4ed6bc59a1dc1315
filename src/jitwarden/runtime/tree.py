"""What a Triton cache tree holds: its entry dirs and the unsealed kernels among them (ARCHITECTURE.md, "The runtime").

A leaf of the runtime: it lists, it never judges, writes or moves anything. The start-up sweep,
the proofs, the hiding for the background prover and the torch hooks all read a tree through it.
Stdlib only; imports nothing beyond the layout names and the cache locations.
"""

from __future__ import annotations

import os

from jitwarden.env import locations
from jitwarden.model.layout import SEAL_FILE, is_reserved

BINARIES = (".cubin", ".hsaco")
"""The kernel binaries a loader maps: an entry without one holds nothing Inductor's launcher loads."""


def tree_roots(kind: str, partition_path: str) -> list[str]:
    """The Triton trees inside one root or partition of ``kind`` (a Triton one is a tree itself; where the others
    keep theirs is said by their rows: :func:`jitwarden.env.locations.triton_trees`)."""
    return locations.triton_trees(kind, partition_path)


def entry_names(tree: str) -> list[str]:
    """Names of the entry dirs of a Triton cache tree: no links, nothing of ours, no ``tmp.*`` write in flight."""
    try:
        it = os.scandir(tree)
    except OSError:
        return []
    with it:
        return [
            e.name
            for e in it
            if not is_reserved(e.name)
            and not e.name.startswith("tmp.")
            and e.is_dir(follow_symlinks=False)
        ]


def files(path: str) -> list[str]:
    """The entry's own regular files, sorted: what a seal covers (no links, no dirs, nothing of ours)."""
    with os.scandir(path) as it:
        return sorted(
            e.name for e in it if not is_reserved(e.name) and e.is_file(follow_symlinks=False)
        )


def unsealed_kernels(trees) -> list[str]:
    """Entry dirs of ``trees`` that hold a cubin and no seal: what a start-up proves before anything loads them."""
    out = []
    for tree in trees:
        for d in (os.path.join(tree, n) for n in entry_names(tree)):
            try:
                with os.scandir(d) as it:
                    names = {e.name for e in it}
            except OSError:
                continue
            if SEAL_FILE not in names and any(n.endswith(".cubin") for n in names):
                out.append(d)
    return out
