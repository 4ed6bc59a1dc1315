"""The data every adapter and command shares: cache roots, the judge, and judged entries (stdlib only).

An adapter (one per cache kind, :mod:`jitwarden.adapters`) finds :class:`CacheRoot`s,
reads entries without following symlinks, and judges them against a :class:`Judge`
into :class:`Entry` records, so ``ls``, ``verify``, ``doctor`` and ``clean`` all
see the same thing.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.model.findings import Finding


@dataclass(frozen=True, slots=True)
class CacheRoot:
    """A directory one tool uses as its cache (or a jitwarden partition of one)."""

    kind: str  # triton, inductor, vllm, cuda-compute, flashinfer, deepgemm, torch-ext
    path: str
    source: str  # the variable or default that named it: TRITON_CACHE_DIR, default, inductor, vllm, cli, partition, ...
    partition: str | None = None
    base: str | None = None  # the user-visible root a partition lives in


@dataclass(frozen=True, slots=True)
class Judge:
    """What entries are judged against; built once per command from the environment.

    Everything here is plain data (it crosses into worker processes): the target GPU
    arch, the installed versions of the packages whose caches we judge, the host.
    """

    target_arch: int | None = None
    triton_version: str | None = None
    host_machine: str | None = None
    orphan_age: float = 3600.0
    now: float = 0.0
    check_seals: bool = True
    versions: tuple[tuple[str, str], ...] = ()  # installed (package, version) by fingerprint name: torch, vllm, flashinfer, deep_gemm
    gpu_names: tuple[str, ...] = ()  # names of the visible GPUs, as NVML reports them
    driver_version: str | None = None
    torch_cuda: str | None = None  # the CUDA torch was built with ("13.0"), None for a CPU build or no torch
    python_tag: str | None = None  # "311": what torch extensions and FlashInfer name their builds by
    uid: int | None = None  # whose caches these are; other owners make a root unsafe

    def version(self, package: str) -> str | None:
        """Installed version of ``package`` (``torch``, ``triton``, ``vllm``, ``flashinfer``, ``deep_gemm``), or None."""
        return next((v for d, v in self.versions if d == package), None)


@dataclass(frozen=True, slots=True)
class Entry:
    """One cache entry with its findings; the unit every command reports on and acts on.

    ``id`` is unique within its root and may be a relative path (``fxgraph/ab/<key>``);
    ``path`` is a directory or a single file. The Triton-specific fields stay None for
    other kinds; ``extra`` carries an adapter's own facts (JSON-safe values).
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
    triton_version: str | None = None
    cubin_sm: int | None = None
    ptx_version: str | None = None
    ptx_target: str | None = None
    producer: str | None = None
    sealed: bool = False
    findings: tuple[Finding, ...] = ()
    extra: tuple[tuple[str, object], ...] = ()

    def to_json(self) -> dict:
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
            "triton_version": self.triton_version,
            "cubin_sm": self.cubin_sm,
            "ptx_version": self.ptx_version,
            "ptx_target": self.ptx_target,
            "producer": self.producer,
            "sealed": self.sealed,
            "findings": [f.to_json() for f in self.findings],
            "extra": dict(self.extra),
        }
