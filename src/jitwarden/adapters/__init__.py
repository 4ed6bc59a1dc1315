"""Cache adapters: one module per cache kind, each a :class:`CacheAdapter`, named by the kind's row.

What every kind shares (partitions, the one ownership rule, root discovery helpers) lives once in
:mod:`jitwarden.adapters.base`, the no-follow survey of an entry in :mod:`jitwarden.adapters.surveys`, each used from there;
an adapter module holds only what is its kind's own. To add a kind: write its module with
every member of :class:`CacheAdapter` and add the kind's row, which names the module, to
:data:`jitwarden.model.kinds.ROWS` (ARCHITECTURE.md, "How to add … A cache kind").

One verb, one name: an adapter's ``inspect_entry`` reads an entry and judges it, with the :class:`Judge` always
named ``judge``; where a kind splits reading from judging, its pure half is ``judge_facts`` (what was read in,
findings out), and ``judge_files`` judges each file of one surveyed entry (Inductor's, shared with vLLM).

Modules are imported on first use: importing this package costs nothing on the activation path.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from jitwarden.model import kinds

if TYPE_CHECKING:
    from jitwarden.model.entries import CacheRoot, Entry, Judge
    from jitwarden.model.findings import Finding


@runtime_checkable
class CacheAdapter(Protocol):
    """What each cache-kind module provides; the scanner and the commands use nothing else of it."""

    KIND: str
    """The kind's name (``triton``, ``inductor``, ...): ``--kind``'s value and every entry's ``kind``."""

    ROOT_RISK: str | None
    """What a root others may write lets them do through this kind's tool, said with the root's ``unsafe``
    findings (None: nothing beyond planting entries)."""

    ROOT_CHECKS: tuple[Callable[[str], list[Finding]], ...]
    """This kind's own checks of a root path, beyond the ownership rule every root gets (:func:`judge_root`);
    most kinds have none."""

    def discover_roots(self, env: Mapping[str, str]) -> list[CacheRoot]:
        """The roots ``env`` points this kind's tool at, found the way the tool finds them (same variables,
        precedence and defaults), plus jitwarden's private ones; existing directories only."""

    def looks_like_root(self, path: str) -> bool:
        """Whether a directory named on the command line is one of this kind's roots."""

    def list_entry_names(self, root: str) -> tuple[list[str], list[tuple[str, str]]]:
        """(entry ids, relative paths for nested kinds; stray items as (name, why)) of one root, jitwarden's
        own names left out. OSError when the root cannot be listed."""

    def inspect_entry(
        self, root: str, name: str, judge: Judge, root_uid: int | None = None
    ) -> Entry:
        """Read one entry without following a symlink or running anything (never unpickle), then judge it."""


class EntryMemo(Protocol):
    """What an adapter that can judge an entry again by stat alone provides as its module's ``MEMO``
    (:mod:`jitwarden.ops.scanmemo`: ``verify --quick`` over an unchanged cache reads no file of it)."""

    def judge_stamped(
        self, root: str, name: str, judge: Judge, root_uid: int | None = None
    ) -> tuple[Entry, list | None, int]:
        """(the entry, as ``inspect_entry`` judges it; the record :meth:`recall` rebuilds it from, JSON, or None
        where it cannot be memoised; the newest ctime (ns) the record vouches for)."""

    def recall(
        self, root: str, name: str, record: object, root_fd: int | None = None
    ) -> Entry | None:
        """The entry ``record`` describes while what it stamped is unchanged, else None (judge it again);
        ``root_fd``: an fd of ``root`` to open the entry in."""


def memo_of(kind: str) -> EntryMemo | None:
    """The kind's :class:`EntryMemo`, None where it has none (its entries are read at every scan)."""
    return getattr(get(kind), "MEMO", None)


ASKED_LAST = "triton"
"""The adapter asked last whose directory a path is: Triton's evidence (entry dirs named by kernel keys) is the
weakest, as its caches have no marker file of their own."""


def get(kind: str) -> CacheAdapter:
    """The adapter of ``kind``; KeyError for an unknown kind."""
    return importlib.import_module(f"{__name__}.{kinds.get(kind).adapter}")


def every() -> list[CacheAdapter]:
    """Every adapter, in the order of the kinds' rows."""
    return [get(k) for k in kinds.NAMES]


def discover_roots(env=os.environ, only: tuple[str, ...] | None = None) -> list[CacheRoot]:
    """Every root of every (or each named) kind on this machine, deduplicated by real path."""
    out, seen = [], set()
    for a in every():
        if only is not None and a.KIND not in only:
            continue
        for r in a.discover_roots(env):
            key = (os.path.realpath(r.path), r.kind)
            if key not in seen:
                seen.add(key)
                out.append(r)
    return out


def kind_of_path(path: str) -> str | None:
    """The kind of a directory named on the command line: the first adapter whose evidence claims it,
    :data:`ASKED_LAST` last; None when no kind does (the path holds no cache of a known kind). The path is
    listed once for them all (:func:`jitwarden.adapters.base.listing_once`)."""
    from jitwarden.adapters.base import listing_once

    order = [a for a in every() if a.KIND != ASKED_LAST] + [get(ASKED_LAST)]
    with listing_once():
        return next((a.KIND for a in order if a.looks_like_root(path)), None)


def judge_root(adapter: CacheAdapter, path: str, uid: int | None = None) -> list[Finding]:
    """Every finding about a root: the ownership rule (worded with the adapter's ``ROOT_RISK``), then its own checks."""
    from jitwarden.adapters import base

    return base.root_safety(path, uid, adapter.ROOT_RISK) + [
        f for check in adapter.ROOT_CHECKS for f in check(path)
    ]
