"""Triton cache adapter: where the roots are, which entries a root holds, and the one call that reads and
judges an entry (:func:`inspect_entry`). Stdlib only (the guarded cache manager judges entries with the same code).

The rest is one module per concern: :mod:`~jitwarden.adapters.triton_read` reads an entry into facts, touching
the disk and never following a symlink; :mod:`~jitwarden.adapters.triton_judge` decides their findings, a pure
function of the facts and a :class:`Judge`, so every command reaches the same verdict;
:mod:`~jitwarden.adapters.triton_quick` is the scan's quick path for an entry exactly as Triton writes it;
:mod:`~jitwarden.adapters.triton_groups` holds the group files' rules.
"""

from __future__ import annotations

import os
import re

from jitwarden.adapters import triton_quick
from jitwarden.adapters.base import (
    distinct,
    holds,
    listed,
    private_dir,
    with_partitions,
)
from jitwarden.adapters.triton_groups import ChildMismatch as ChildMismatch
from jitwarden.adapters.triton_groups import relocated_group as relocated_group
from jitwarden.adapters.triton_groups import same_dir as same_dir
from jitwarden.adapters.triton_judge import (
    ENTRY_ID,
    HOST_MACHINES,
    KIND,
    judge_facts,
)
from jitwarden.adapters.triton_judge import metadata_arch as metadata_arch
from jitwarden.adapters.triton_judge import metadata_target as metadata_target
from jitwarden.adapters.triton_quick import quick_entry, quick_entry_stamped
from jitwarden.adapters.triton_read import read_entry
from jitwarden.env import locations
from jitwarden.model.entries import CacheRoot, Entry, Judge
from jitwarden.model.findings import Finding, Severity
from jitwarden.model.layout import (
    PARTITIONS_DIR,
    QUARANTINE_DIR,
    is_reserved,
)
from jitwarden.store import partition

ROOT_RISK = None
ROOT_CHECKS = ()


# ---------------------------------------------------------------- roots


def _nested_roots(base: str, source: str, trees) -> list[CacheRoot]:
    """Triton trees that ``trees(dir)`` finds in ``base`` and in each of its partitions: an Inductor cache
    dir's ``triton/<device>`` (:func:`locations.inductor_triton_trees`), vLLM's per-model ones
    (:func:`locations.vllm_triton_trees`)."""
    return [
        CacheRoot(kind=KIND, path=t, source=source, partition=digest, base=base if digest else None)
        for d, digest in with_partitions(base)
        for t in trees(d)
    ]


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """Every Triton cache dir that this environment points at, plus jitwarden's partitions and private roots.

    Triton roots are listed without their partitions (the scanner expands those);
    Inductor and vLLM trees are listed one by one, partitioned or not. Existing dirs only.
    """
    roots: list[CacheRoot] = []
    path, source = locations.triton_cache_dir(env)
    # Under activation TRITON_CACHE_DIR names a partition: list the root it lives in (and so every partition).
    roots.append(CacheRoot(kind=KIND, path=partition.base_of(path), source=source))
    if source != "default":
        roots.append(
            CacheRoot(
                kind=KIND,
                path=locations.triton_default(env),
                source="default",
            )
        )
    roots += _nested_roots(
        partition.base_of(locations.inductor_cache_dir(env)),
        "inductor",
        locations.inductor_triton_trees,
    )
    roots += _nested_roots(
        partition.base_of(locations.vllm_cache_root(env)), "vllm", locations.vllm_triton_trees
    )
    private = private_dir(env)
    if private:
        roots.append(CacheRoot(kind=KIND, path=os.path.join(private, "triton"), source="private"))
        roots += _nested_roots(
            os.path.join(private, "inductor"), "private", locations.inductor_triton_trees
        )
        roots += _nested_roots(
            os.path.join(private, "vllm"), "private", locations.vllm_triton_trees
        )
    return distinct(roots)


_OLD_ENTRY_ID = re.compile(r"^[0-9a-f]{64}$")  # Triton < 3.0 named entries by a sha256 hex digest
_LOOK_AT = 4096  # names read before a directory is judged not to be a Triton root


def looks_like_root(path: str) -> bool:
    """A directory holding Triton's evidence: an entry dir named by a kernel key (52 base32 characters, or
    64 hex before Triton 3.0), or jitwarden's own partitions or quarantine. A Triton cache has no marker
    file, so an empty or unrelated directory is not taken for one (ARCHITECTURE.md, "A cache kind")."""
    return holds(path, _is_evidence, _LOOK_AT, "d")


def _is_evidence(name: str) -> bool:
    return bool(
        name in (PARTITIONS_DIR, QUARANTINE_DIR)
        or ENTRY_ID.match(name)
        or _OLD_ENTRY_ID.match(name)
    )


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """(entry directory names, stray top-level items as (name, why)) of a root, both sorted; reserved names
    skipped. A directory or a symlink is an entry (the symlink never followed: judged ``unsafe``), a regular
    file a stray, anything else passed over. Read from :func:`~jitwarden.adapters.base.listed`: within
    :func:`~jitwarden.adapters.base.listing_once`, the listing that told the root's kind (a root lists 10,000s)."""
    ls = listed(root)
    names: list[str] = []
    strays: list[tuple[str, str]] = []
    for name, t in zip(ls.names, ls.types):
        if t == "d" or t == "l":
            if not is_reserved(name):
                names.append(name)
        elif t == "f" and not is_reserved(name):
            strays.append((name, "file"))
    names.sort()
    strays.sort()
    return names, strays


# ---------------------------------------------------------------- reading


# ---------------------------------------------------------------- judging


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read and judge one entry: the unit of work of the scanner and the guarded cache manager. An entry as
    Triton writes it takes the quick path (:func:`quick_entry`), anything else the general one."""
    try:
        got = quick_entry(root, name, judge, root_uid)
    except (
        Exception
    ):  # whatever it met, the general path judges the entry from the start, and says so
        got = None
    if got is not None:
        return got
    return judge_facts(root, read_entry(root, name, check_seal=judge.check_seals), judge, root_uid)


class _Memo:
    """The scan's memo of Triton entries (:class:`~jitwarden.adapters.EntryMemo`): an entry the quick path
    judged is judged again only once the stat of its dir or of a file in it moved."""

    @staticmethod
    def judge_stamped(
        root: str, name: str, judge: Judge, root_uid: int | None = None
    ) -> tuple[Entry, list | None, int]:
        try:
            got = quick_entry_stamped(root, name, judge, root_uid)
        except Exception:  # as inspect_entry: the general path judges it, and it is not memoised
            got = None
        if got is None:
            return inspect_entry(root, name, judge, root_uid), None, 0
        record, newest = triton_quick.memo_record(*got)
        return got[0], record, newest

    recall = staticmethod(triton_quick.recall)


MEMO = _Memo()


# ---------------------------------------------------------------- the quick path


def structural_errors(path: str, host: str | None = None) -> tuple[list[Finding], str]:
    """(error-level findings, entry type) of one entry by the scanner's own checks, seals aside.

    What the guard and the start-up sweep require of an entry nobody sealed before sealing it.
    """
    import time

    root, name = os.path.split(os.path.normpath(path))
    judge = Judge(host_machine=host or host_machine(), now=time.time(), check_seals=False)
    entry = inspect_entry(root, name, judge)
    return [f for f in entry.findings if f.severity >= Severity.ERROR], entry.type


def host_machine() -> str:
    """This host's CPU as an ELF names it (``x86_64``, ``aarch64``): ``platform.machine()``, read from
    ``os.uname()`` where there is one (importing platform costs the scan's start-up ~2 ms)."""
    if hasattr(os, "uname"):
        machine = os.uname().machine
    else:  # pragma: no cover - Windows
        import platform

        machine = platform.machine()
    return HOST_MACHINES.get(machine, machine)
