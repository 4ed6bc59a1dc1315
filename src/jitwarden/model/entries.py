"""The data every adapter and command shares: cache roots, the judge, and judged entries (stdlib only).

An adapter (one per cache kind, :mod:`jitwarden.adapters`) finds :class:`CacheRoot`s,
reads entries without following symlinks, and judges them against a :class:`Judge`
into :class:`Entry` records, so ``ls``, ``verify``, ``doctor`` and ``clean`` all
see the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from itertools import repeat
from typing import Any, ClassVar

from jitwarden.model.asjson import class_of, field_names
from jitwarden.model.findings import Finding, Severity
from jitwarden.model.settings import ORPHAN_AGE


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheRoot:
    """A directory one tool uses as its cache (or a jitwarden partition of one)."""

    kind: str  # triton, inductor, vllm, cuda-compute, flashinfer, deepgemm, torch-ext
    path: str
    source: str  # the variable or default that named it: TRITON_CACHE_DIR, default, inductor, vllm, cli, partition, ...
    partition: str | None = None
    base: str | None = None  # the user-visible root a partition lives in


@dataclass(frozen=True, slots=True, kw_only=True)
class Judge:
    """What entries are judged against; built once per command from the environment.

    Everything here is plain data (it crosses into worker processes): the target GPU
    arch, the installed versions of the packages whose caches we judge, the host.
    """

    target_arch: int | None = None
    triton_version: str | None = None
    host_machine: str | None = None
    orphan_age: float = ORPHAN_AGE.default
    now: float = 0.0
    check_seals: bool = True
    versions: tuple[
        tuple[str, str], ...
    ] = ()  # installed (package, version) by fingerprint name: torch, vllm, flashinfer, deep_gemm
    gpu_names: tuple[str, ...] = ()  # names of the visible GPUs, as NVML reports them
    driver_version: str | None = None
    torch_cuda: str | None = (
        None  # the CUDA torch was built with ("13.0"), None for a CPU build or no torch
    )
    python_tag: str | None = (
        None  # "311": what torch extensions and FlashInfer name their builds by
    )
    uid: int | None = None  # whose caches these are; other owners make a root unsafe
    refs_beside: tuple[str, ...] = ()
    """Other roots of the same kind where what an entry loads may lie besides its own root: an import's
    destination partition, judged beside its staging (an AOTAutograd result whose FX graph is installed)."""

    def version(self, package: str) -> str | None:
        """Installed version of ``package`` (``torch``, ``triton``, ``vllm``, ``flashinfer``, ``deep_gemm``), or None."""
        return next((v for d, v in self.versions if d == package), None)


TOP_FACTS = ("triton_version", "cubin_sm", "ptx_version", "ptx_target", "producer")
"""Facts JSON schema 1 shows at the top of every entry (null where a kind has no such fact)."""
_NO_TOP = dict.fromkeys(TOP_FACTS)


@cache
def _extra_fields(cls: Any) -> tuple[str, ...]:
    """The fields of a :class:`KindFacts` class that its JSON shows in ``extra``, in declared order."""
    return tuple(f for f in field_names(cls) if f not in cls.TOP)


def _reduce(self: Any) -> tuple[type, tuple[Any, ...]]:
    """Pickled as the call of its class with its field values: the scan's workers send one per entry, and
    the slotted dataclass's own state (a list, set back field by field) costs twice the time."""
    return type(self), tuple(map(getattr, repeat(self), field_names(class_of(self))))


@dataclass(frozen=True, slots=True)
class FactGroup:
    """A few facts of one kind that come from one source and mean one thing together (the system torch
    keys a cache by: GPU name, CUDA, Triton), held as one field of its :class:`KindFacts`. JSON shows its
    fields among the entry's ``extra`` ones, each by its own name, a None left out."""

    __reduce__ = _reduce

    def to_json(self) -> dict[str, Any]:
        out = {}
        for name in field_names(class_of(self)):
            v = getattr(self, name)
            if v is not None:
                out[name] = list(v) if type(v) is tuple else v
        return out


@dataclass(frozen=True, slots=True)
class KindFacts:
    """What one kind's adapter read of an entry beyond what every entry has; each kind subclasses it
    with named, typed fields (ARCHITECTURE.md, "How to add … A cache kind").

    In JSON the fields are the entry's ``extra`` object, in declared order, a None left out unless
    the field is in ``SHOWN_NONE``; a :class:`FactGroup`'s fields stand there by their own names; fields
    in ``TOP`` (names of :data:`TOP_FACTS`) go to the entry's top level instead. Tuples are written as lists.
    """

    TOP: ClassVar[frozenset[str]] = frozenset()
    SHOWN_NONE: ClassVar[frozenset[str]] = frozenset()

    __reduce__ = _reduce

    def to_json(self) -> dict[str, Any]:
        """The entry's ``extra`` object."""
        out = {}
        for name in _extra_fields(class_of(self)):
            v = getattr(self, name)
            if isinstance(v, FactGroup):
                out.update(v.to_json())
            elif v is not None or name in self.SHOWN_NONE:
                out[name] = list(v) if type(v) is tuple else v
        return out

    def top_json(self) -> dict[str, Any]:
        """Every name of :data:`TOP_FACTS`, in that order, with this kind's value where ``TOP`` has it, else None."""
        top = self.TOP
        return {k: getattr(self, k) if k in top else None for k in TOP_FACTS} if top else _NO_TOP


NO_FACTS = KindFacts()


@dataclass(frozen=True, slots=True)
class Entry:
    """One cache entry with its findings; the unit every command reports on and acts on.

    ``id`` is unique within its root and may be a relative path (``fxgraph/ab/<key>``);
    ``path`` is a directory or a single file. ``facts``: the kind's own facts, typed per kind
    (``TritonFacts``, ``FlashInferFacts``, ...: each adapter module defines its own).
    """

    kind: str
    root: str
    id: str
    path: str
    type: str  # kernel, launcher, autotune, partial, empty, other, link, and each adapter's own
    name: str | None
    arch: int | None
    bytes: int
    mtime: float
    sealed: bool = False
    findings: tuple[Finding, ...] = ()
    facts: KindFacts = NO_FACTS
    proven: bool = False  # rebuilt from its own PTX this run, and the code matched (``--rebuild``)

    @property
    def verdict(self) -> str | None:
        """What vouches for this entry (:func:`verdict_of`)."""
        return verdict_of(self)

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "root": self.root,
            "id": self.id,
            "path": self.path,
            "type": self.type,
            "name": self.name,
            "arch": self.arch,
            "bytes": self.bytes,
            "mtime": self.mtime,
            **self.facts.top_json(),
            "sealed": self.sealed,
            "verdict": verdict_of(self),
            "findings": [f.to_json() for f in self.findings],
            "extra": self.facts.to_json(),
        }


HOLDS_NO_CODE = frozenset({"empty", "lock", "locks", "link", "partial", "building"})
"""Entry types that hold nothing a program loads (an empty dir, a lock, a link, an interrupted write): there is
nothing to prove, so they get no verdict."""

VERDICTS = ("proven", "sealed", "unproven")
"""What vouches for an entry with no error-level finding, strongest first: ``proven``, rebuilt from its own PTX
and the code matched (``--rebuild``); ``sealed``, unchanged since jitwarden sealed it; ``unproven``, only the
structural checks passed, which another kernel's code under the same key also passes (docs/commands.md,
"Verdicts")."""


def verdict_of(e: Entry) -> str | None:
    """``proven``, ``sealed`` or ``unproven`` (:data:`VERDICTS`) for an entry with no error-level finding; None
    for one with an error (its findings are the verdict) or one that holds no code (pure)."""
    if e.type in HOLDS_NO_CODE or any(f.severity == Severity.ERROR for f in e.findings):
        return None
    if e.proven:
        return "proven"
    return "sealed" if e.sealed else "unproven"
