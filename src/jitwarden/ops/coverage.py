"""What a cache will serve a recorded workload, before its start (issue 44): pure decisions over what was read.

A workload's kernels (:mod:`jitwarden.ops.workload`) against what a cache holds (:func:`holdings_of_entries`:
a scan of a cache dir; :func:`holdings_of_bundle`: a bundle's or an OCI config's manifest, nothing
installed): each kernel is ``proven`` (held and sealed: served as it is), ``unproven`` (held, unsealed:
proven by a rebuild at its first use, no compile) or ``missing`` (absent, or held with an error-level
finding, so refused: it compiles). :func:`judge` gives one :class:`Coverage`, its line and its exit status.
"""

from __future__ import annotations

from dataclasses import dataclass

from jitwarden.model.entries import Entry
from jitwarden.model.errors import ExitStatus
from jitwarden.model.findings import Severity
from jitwarden.ops.workload import Kernel

ADAPTER_KIND = {
    "triton": "triton",
    "inductor": "inductor",
    "aot": "inductor",
    "jax": "jax",
    "cupy": "cupy",
}
"""A record's kind -> the cache kind (``adapters``) whose entries hold it."""
STATES = ("proven", "unproven", "missing")


def seconds_text(s: float) -> str:
    """``0.4 s``, ``14 s``, ``3.2 min``: a compile time as a deploy log shows it (pure)."""
    if s < 10:
        return f"{s:.1f} s"
    return f"{s:.0f} s" if s < 120 else f"{s / 60:.1f} min"


def key_of(kind: str, entry_id: str) -> tuple[str, str]:
    """(cache kind, the cache key) of an entry (pure): the last component of its id, JAX's without ``-cache``."""
    leaf = entry_id.rstrip("/").rsplit("/", 1)[-1]
    if kind == "jax":
        leaf = leaf.removesuffix("-cache")
    return kind, leaf


def holdings_of_entries(entries) -> dict[tuple[str, str], str]:
    """(cache kind, key) -> ``proven`` | ``unproven`` | ``missing`` for scanned entries (pure)."""
    out: dict[tuple[str, str], str] = {}
    for e in entries:
        e: Entry  # type: ignore[no-redef]
        if any(f.severity >= Severity.ERROR for f in e.findings):
            state = "missing"  # refused at its load: it compiles
        else:
            state = "proven" if e.sealed else "unproven"
        out[key_of(e.kind, e.id)] = state
    return out


def holdings_of_bundle(manifest, trusted: bool) -> dict[tuple[str, str], str]:
    """(cache kind, key) -> state for a bundle's manifest (pure): ``proven`` when a trusted key signed it
    (import checks every digest and seals what it installs), else ``unproven``."""
    state = "proven" if trusted else "unproven"
    return {key_of(e.kind, e.path): state for e in manifest.entries}


@dataclass(frozen=True, kw_only=True)
class Coverage:
    """How much of workload ``workload`` the cache ``source`` holds; ``kernels``: (kernel, state) in record order."""

    workload: str
    source: str
    kernels: tuple[tuple[Kernel, str], ...]
    digest: str = ""
    note: str = ""

    def of(self, state: str) -> tuple[Kernel, ...]:
        return tuple(k for k, s in self.kernels if s == state)

    @property
    def total(self) -> int:
        return len(self.kernels)

    @property
    def ready(self) -> int:
        return self.total - len(self.of("missing"))

    @property
    def compile_seconds(self) -> float:
        """What the missing kernels cost to compile when they were recorded."""
        return sum(k.seconds for k in self.of("missing"))

    @property
    def percent(self) -> int:
        """Kernels ready, in whole percent, rounded down (never 100 with one missing)."""
        return 100 if not self.total else self.ready * 100 // self.total

    @property
    def status(self) -> ExitStatus:
        """0 every kernel proven, 5 some will compile, 6 the rest held but some unproven."""
        if self.of("missing"):
            return ExitStatus.WILL_COMPILE
        return ExitStatus.UNPROVEN if self.of("unproven") else ExitStatus.OK

    def line(self) -> str:
        """``98% of 412 kernels ready; 8 will compile, ~14 s``."""
        head = f"{self.percent}% of {self.total} kernels ready"
        unproven = len(self.of("unproven"))
        if unproven:
            head += f" ({unproven} unsealed: proven by a rebuild at first use)"
        missing = len(self.of("missing"))
        if not missing:
            return head
        return f"{head}; {missing} will compile, ~{seconds_text(self.compile_seconds)}"

    def to_json(self) -> dict:
        return {
            "workload": self.workload,
            "source": self.source,
            "digest": self.digest,
            "kernels": self.total,
            "ready": self.ready,
            "percent": self.percent,
            **{s: len(self.of(s)) for s in STATES},
            "compile_seconds": round(self.compile_seconds, 3),
            "line": self.line(),
            "note": self.note,
            "missing_kernels": [k.to_json() for k in self.of("missing")],
            "unproven_kernels": [k.to_json() for k in self.of("unproven")],
        }


def judge(
    workload: str,
    kernels,
    holdings: dict[tuple[str, str], str],
    source: str,
    digest: str = "",
    note: str = "",
) -> Coverage:
    """The :class:`Coverage` of ``kernels`` by ``holdings`` (pure)."""
    rows = tuple(
        (k, holdings.get((ADAPTER_KIND.get(k.kind, k.kind), k.key), "missing")) for k in kernels
    )
    return Coverage(workload=workload, source=source, kernels=rows, digest=digest, note=note)
