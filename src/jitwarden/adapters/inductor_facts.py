"""What judging an Inductor (or vLLM) entry records (stdlib only): the facts of its kind
(:class:`InductorFacts`, its groups of facts), the mutable :class:`Judging` they are gathered in while
its files are judged, and the frozen :class:`Entry` made of them (:func:`entry_of`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from jitwarden.adapters.surveys import Survey
from jitwarden.model.entries import Entry, FactGroup, KindFacts
from jitwarden.model.findings import Finding


@dataclass(frozen=True, slots=True)
class GeneratedFor(FactGroup):
    """The GPU a kernel's generated code was made for, as its ``triton_meta`` records it (``DeviceProperties``):
    the CUDA arch its properties agree on, and the first one's device type and SM count."""

    cc: int | None = None
    device: str | None = None
    multi_processor_count: int | None = None


@dataclass(frozen=True, slots=True)
class SystemFactors(FactGroup):
    """The system torch keys a cache by (``{"device": {"name"}, "version": {"cuda", "triton"}}``): the GPU's
    name, torch's CUDA and Triton's key. A local autotune cache records it; vLLM's
    ``cache_key_factors.json`` too."""

    gpu_name: str | None = None
    cuda: str | None = None
    triton_key: str | None = None


@dataclass(frozen=True, slots=True)
class InductorFacts(KindFacts):
    """What an Inductor entry's bytes say, by the kind of entry that says it: a kernel's GPU (``generated_for``),
    an autotune result's Triton cache hash, the machine of its libraries, the FX graphs an AOTAutograd result
    loads, a local autotune cache's system, how many links torch made in ``torch_cutlass/``. JSON lists them
    by name, a group's fields among them, sorted."""

    generated_for: GeneratedFor | None = None
    triton_cache_hash: str | None = None
    machine: str | None = None
    fx_graphs: tuple[str, ...] | None = None
    system: SystemFactors | None = None
    torch_links: int | None = None

    def to_json(self) -> dict:
        return dict(sorted(KindFacts.to_json(self).items()))


class Judging:
    """What the judging of one entry found so far (mutable while judging it); ``extra`` holds fields of
    ``make`` (:class:`InductorFacts`, or the vLLM adapter's subclass), which :func:`entry_of` freezes."""

    __slots__ = ("type", "name", "arch", "extra", "findings", "make", "sealed")

    def __init__(self, make: type[InductorFacts] = InductorFacts):
        self.sealed = (
            False  # every file of the entry is covered by its pickle seal (checked against it)
        )
        self.type = "other"
        self.name: str | None = None
        self.arch: int | None = None
        self.extra: dict[str, Any] = {}
        self.findings: list[Finding] = []
        self.make = make

    def grouped(self, field: str, group: type[FactGroup], **found) -> None:
        """Set what was ``found`` (its non-None values) in the group ``field`` of ``extra``: a later file of
        the entry replaces what an earlier one said, fact by fact."""
        found = {k: v for k, v in found.items() if v is not None}
        if found:
            old = self.extra.get(field)
            self.extra[field] = replace(old, **found) if old is not None else group(**found)


def entry_of(
    kind: str, root: str, name: str, s: Survey, facts: Judging, findings: list[Finding]
) -> Entry:
    mtime = s.newest if s.files else s.mtime
    fields: dict[str, Any] = {
        k: tuple(v) if isinstance(v, list) else v for k, v in facts.extra.items()
    }
    frozen = facts.make(**fields)
    return Entry(
        kind,
        root,
        name,
        s.path,
        facts.type,
        facts.name,
        facts.arch,
        s.bytes,
        mtime,
        sealed=facts.sealed,
        findings=tuple(dict.fromkeys(findings)),
        facts=frozen,
    )
