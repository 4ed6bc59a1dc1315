"""Judging one Triton entry (stdlib only): :func:`judge_facts`, a pure function of the :class:`EntryFacts` read
and a :class:`Judge`, so every command (and the guarded cache manager) reaches the same verdict; one helper per
part of the entry (its items, metadata, cubin, PTX, launchers, seal)."""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, ClassVar

from jitwarden.adapters.base import (
    cubin_findings,
    error_finding,
    ownership_findings,
)
from jitwarden.adapters.triton_groups import group_findings
from jitwarden.adapters.triton_read import EntryFacts
from jitwarden.formats import elf
from jitwarden.formats.ptx import parse_header
from jitwarden.model.entries import Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import (
    SEAL_FILE,
    is_reserved,
)

KIND = "triton"
"""Every Triton entry's kind, declared where its entries are made (:mod:`jitwarden.adapters.triton` re-exports it)."""
ENTRY_ID = re.compile(r"^[A-Z2-7]{52}$")


# Kernel dirs staged beside their final name, then renamed onto it: TorchInductor's TritonBundler.read_and_emit
# (torch 2.9-2.15: tmp.<uuid4>, left behind when the rename finds the final dir already filled or the process
# dies) and jitwarden's torch hook (tmp.jitwarden-<hex>). Their group files name the final dir; Triton never reads them.
_STAGING = re.compile(
    r"^tmp\.(?:[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|jitwarden-[0-9a-f]{32})$"
)


_NAME_SIZE, _SIZE, _MTIME = attrgetter("name", "size"), attrgetter("size"), attrgetter("mtime")


HOST_MACHINES = {
    "x86_64": "x86_64",
    "amd64": "x86_64",
    "aarch64": "aarch64",
    "arm64": "aarch64",
    "ppc64le": "ppc64le",
}


@dataclass(frozen=True, slots=True)
class TritonFacts(KindFacts):
    """What a Triton entry says of its build: the metadata's Triton version, the cubin's SM, the PTX
    header, the ptxas release in the cubin's notes. JSON shows them at the entry's top level."""

    TOP: ClassVar[frozenset[str]] = frozenset(
        {"triton_version", "cubin_sm", "ptx_version", "ptx_target", "producer"}
    )

    triton_version: str | None = None
    cubin_sm: int | None = None
    ptx_version: str | None = None
    ptx_target: str | None = None
    producer: str | None = None


def entry_id_for_hash(hash_hex: str) -> str | None:
    import base64  # a message's words only: the scan compares ids by id_matches_hash

    try:
        return base64.b32encode(bytes.fromhex(hash_hex)).decode().rstrip("=")
    except (ValueError, TypeError):
        return None


_B32_DIGITS = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", "0123456789abcdefghijklmnopqrstuv")


def id_matches_hash(entry_id: str, hash_hex: str) -> bool:
    """``entry_id_for_hash(hash_hex) == entry_id`` for an id of Triton's form (52 base32 letters), without
    the pure-Python base32 encoder (the scan asks once per entry): both read as integers (pure).

    32 bytes are 256 bits, written as 52 base32 digits (260 bits, the last 4 zero); no other length of
    hash gives 52 digits, and two equal numbers of 52 digits are the same string."""
    try:
        raw = bytes.fromhex(hash_hex)
    except ValueError:
        return False
    return (
        len(raw) == 32
        and len(entry_id) == 52
        and int.from_bytes(raw, "big") << 4 == int(entry_id.translate(_B32_DIGITS), 32)
    )


def metadata_target(metadata: dict | None) -> tuple[str, object]:
    """(backend, arch as recorded) across Triton's metadata layouts; backend "cuda" when unstated.

    3.x: ``"target": {"backend", "arch", "warp_size"}``; some releases: ``[backend, arch, warp]``;
    older ones: a bare capability, or only the option ``"arch": "sm90"``.
    """
    if not metadata:
        return "cuda", None
    target = metadata.get("target")
    if isinstance(target, dict):
        return str(target.get("backend") or "cuda"), target.get("arch")
    if isinstance(target, (list, tuple)) and len(target) >= 2:
        return str(target[0] or "cuda"), target[1]
    if isinstance(target, int) and not isinstance(target, bool):
        return "cuda", target
    opt = metadata.get("arch")
    if isinstance(opt, str) and re.fullmatch(r"sm_?\d+[af]?", opt):
        return "cuda", int(re.sub(r"\D", "", opt))
    return "cuda", None


def metadata_arch(metadata: dict | None) -> int | None:
    """The CUDA compute capability an entry was built for (90 for sm_90a); None otherwise."""
    backend, arch = metadata_target(metadata)
    if backend != "cuda":
        return None
    if isinstance(arch, int) and not isinstance(arch, bool):
        return arch
    if isinstance(arch, str) and arch.isdigit():
        return int(arch)
    return None


def _ext_suffix_machine(fname: str) -> str | None:
    m = re.search(r"\.cpython-\d+[a-z]*-([a-z0-9_]+)-linux", fname)
    if not m:
        return None
    return HOST_MACHINES.get(m.group(1), m.group(1))


def judge_facts(root: str, f: EntryFacts, judge: Judge, root_uid: int | None = None) -> Entry:
    """Decide the findings of one entry from its facts alone (pure). Each rule and its evidence:

    - ``corrupt``: a file that does not parse as the format Triton writes (JSON, ELF, PTX without
      ``.version``/``.target``), an empty listed child, a seal whose checksum differs;
    - ``incomplete``: a child the group file lists is missing; ``foreign-path``: a group file's
      absolute child path leaves this entry's directory and exists there (Triton opens exactly that path);
      ``moved`` (warning): it leaves the entry and exists nowhere (Triton drops the group and recompiles);
    - ``mismatch``: two facts of the entry disagree (cubin SM vs metadata arch, kernel symbol vs
      metadata name, metadata hash vs entry id, PTX ``.target`` vs metadata);
    - ``stale``: metadata ``triton_version`` differs from the installed Triton, whose key
      (``triton_key``) never yields this entry;
    - ``unrecognised`` (info): whole JSON without the fields Triton 3.4-3.9 write;
    - ``orphan``: an old staging dir of TorchInductor's ``TritonBundler`` (``tmp.<uuid4>``), which Triton never reads.

    One helper per part of the entry, called in the order their findings are listed: the entry's own
    items (:func:`_item_findings`), the group files, the metadata, the cubin, the PTX, the launchers, the seal.
    """
    if f.survey.is_symlink:
        return _symlinked(root, f)
    out = _item_findings(f, judge, root_uid)
    size = sum(map(_SIZE, f.files))
    mtime = max(map(_MTIME, f.files), default=0.0)
    if _STAGING.match(f.id):
        return _staging(root, f, judge, out, size, mtime)
    add = out.append
    sizes = dict(map(_NAME_SIZE, f.files))
    names = sizes.keys()
    md = f.metadata
    arch = metadata_arch(md)
    kname, tv = metadata_names(md)
    for gname, doc in f.groups:
        if doc is not None:
            group_findings(f.id, f.path, gname, doc, sizes, add)
    etype = _entry_type(f, names)
    if etype == "partial":
        _partial_findings(names, mtime, judge, add)
    if md is not None:
        metadata_findings(f.id, f.metadata_file, md, arch, kname, tv, judge, add)
    cubin_sm, producer = _cubin_part(f, arch, kname, add)
    ptx_version, ptx_target = (
        ptx_findings(f.ptx_head, f.ptx_file or "", arch, kname, add)  # set with ptx_head
        if f.ptx_head is not None
        else (None, None)
    )
    if f.launchers:
        _launcher_findings(f.launchers, judge.host_machine, add)
    seal_findings(f.seal_problems, f.seal_unbelieved, f.seal_foreign, add)

    # One finding per (code, message): repeated groups can say the same thing twice.
    findings = tuple(dict.fromkeys(out))
    return Entry(
        KIND,
        root,
        f.id,
        f.path,
        etype,
        kname if md else _launcher_name(f),
        arch,
        size,
        mtime,
        f.seal_problems is not None or SEAL_FILE in names,
        findings,
        TritonFacts(tv, cubin_sm, ptx_version, ptx_target, producer),
    )


def metadata_names(md: dict | None) -> tuple[str | None, Any]:
    """(the kernel name, the Triton version) the metadata records; None for what it does not."""
    kname = md.get("name") if md and isinstance(md.get("name"), str) else None
    return kname, md.get("triton_version") if md else None


def _staging(
    root: str, f: EntryFacts, judge: Judge, out: list[Finding], size: int, mtime: float
) -> Entry:
    """A kernel dir TorchInductor staged beside its final name (:data:`_STAGING`). Evidence: none of damage.
    Triton's keys are base32, so it never opens this dir; its group files name the final dir by design. Old,
    it is dead weight from a rename that lost or never came."""
    if f.files and judge.now - mtime >= judge.orphan_age:
        out.append(
            Finding(
                "orphan",
                f"a kernel dir TorchInductor staged from an FX-graph bundle and never renamed into "
                f"place, {int((judge.now - mtime) // 60)} min old",
            )
        )
    return Entry(
        KIND,
        root,
        f.id,
        f.path,
        "staging",
        None,
        None,
        size,
        mtime,
        findings=tuple(out),
        facts=TritonFacts(),
    )


def _partial_findings(names: Collection[str], mtime: float, judge: Judge, add) -> None:
    """Files without a group file, old: an interrupted compile Triton never loads."""
    if (judge.now - mtime if mtime else 0) >= judge.orphan_age:
        add(
            Finding(
                "orphan",
                f"files without a group file ({', '.join(sorted(names)[:4])}): an interrupted compile, never loaded",
            )
        )


def _cubin_part(
    f: EntryFacts, arch: int | None, kname: str | None, add
) -> tuple[int | None, str | None]:
    """The cubin, read whole or by its header alone, and the ELF files of which only the header was read;
    returns (its SM, the ptxas release in its notes)."""
    cubin_file = f.cubin_file or ""  # set whenever a cubin or its head is
    cubin_sm, producer = (
        whole_cubin_findings(f.cubin, cubin_file, arch, kname, add)
        if f.cubin is not None
        else (None, None)
    )
    if f.cubin_head is not None:
        cubin_sm = _cubin_head_findings(f.cubin_head, cubin_file, arch, add)
    for fname, fsize in f.unread:
        add(
            Finding(
                "unrecognised",
                f"{fname}: {fsize} bytes, larger than any file of its kind Triton writes: only its "
                "ELF header was read (its machine, a cubin's SM), not its symbols or notes",
            )
        )
    return cubin_sm, producer


def seal_findings(
    problems: tuple[str, ...] | None, unbelieved: bool, foreign: str | None, add
) -> None:
    """What the seal's facts (:func:`seal_facts`) say of the entry: damage it names, a seal not believed, another
    partition's seal."""
    if problems:
        for p in problems:
            add(Finding("corrupt", f"seal: {p}"))
    if (
        unbelieved
    ):  # no evidence of damage: an older jitwarden's seal, another key's, another user's
        add(
            Finding(
                "unrecognised",
                "seal: not one you can believe (from a jitwarden before seal schema 2, made with another "
                "user's key, or in an entry another user could write); judged as unsealed, and proven at "
                "its next use",
            )
        )
    if (
        foreign
    ):  # moved or copied in from another environment's partition: the guard refuses to load it
        add(
            Finding(
                "mismatch",
                f"seal: {foreign}: copied or moved in from another environment's partition",
            )
        )


def _symlinked(root: str, f: EntryFacts) -> Entry:
    """The entry when its directory is a symlink: never followed, ``unsafe`` either way."""
    sv = f.survey
    if sv.links[0].leaves:
        why = f"entry is a symlink leaving the cache root (-> {sv.symlink_target}); not followed"
    else:
        why = f"entry is a symlink (-> {sv.symlink_target}); Triton would follow it, jitwarden does not"
    return Entry(
        KIND,
        root,
        f.id,
        f.path,
        "link",
        None,
        None,
        0,
        0.0,
        findings=(Finding("unsafe", why),),
        facts=TritonFacts(),
    )


def _item_findings(f: EntryFacts, judge: Judge, root_uid: int | None) -> list[Finding]:
    """What is wrong with the entry's items as listed, whatever they hold: files that could not be read or
    parsed, the ownership rule, symlinks inside, old leftovers of an interrupted write."""
    out = [error_finding(f"{name}: {why}" if name else why, why) for name, why in f.read_errors]
    sv = f.survey
    out += ownership_findings(sv, root_uid)
    for link in sv.links:
        if link.leaves:
            out.append(
                Finding(
                    "unsafe",
                    f"{link.name} is a symlink leaving the entry (-> {link.target}); not followed",
                )
            )
        else:
            out.append(
                Finding(
                    "unsafe",
                    f"{link.name} is a symlink (-> {link.target}); Triton writes no symlinks",
                )
            )
    for t in f.tmps:
        if judge.now - t.mtime >= judge.orphan_age:
            out.append(
                Finding(
                    "orphan",
                    f"{t.name}: leftover of an interrupted write, {int((judge.now - t.mtime) // 60)} min old",
                )
            )
    return out


def metadata_findings(
    entry_id: str,
    metadata_file: str | None,
    md: dict,
    arch: int | None,
    kname: str | None,
    tv,
    judge: Judge,
    add,
) -> None:
    """The metadata JSON (whole: a cut one is a read error) against Triton's layout, the entry's id, the
    installed Triton and the target GPU."""
    if kname is None:
        add(
            Finding(
                "unrecognised",
                f"{metadata_file}: metadata has no kernel name (a layout jitwarden does not "
                "know); not judged by name",
            )
        )
    backend, raw_arch = metadata_target(md)
    if backend == "cuda" and arch is None:
        add(
            Finding(
                "unrecognised",
                f"{metadata_file}: metadata has no CUDA target arch jitwarden reads; "
                "not judged by arch",
            )
        )
    h = md.get("hash")
    if isinstance(h, str) and ENTRY_ID.match(entry_id) and not id_matches_hash(entry_id, h):
        add(
            Finding(
                "mismatch",
                f"{metadata_file}: its hash belongs to entry {entry_id_for_hash(h) or h!r}, not this one",
            )
        )
    if tv and judge.triton_version and tv != judge.triton_version:
        add(
            Finding(
                "stale",
                f"built by Triton {tv}; Triton {judge.triton_version} is installed and never reads it",
            )
        )
    _target_findings(backend, raw_arch, arch, judge, add)


def _target_findings(backend: str, raw_arch: object, arch: int | None, judge: Judge, add) -> None:
    """The metadata's target against the judged GPU: another backend, or another SM, is unreachable here."""
    if judge.target_arch is not None and backend != "cuda":
        add(
            Finding(
                "foreign-arch",
                f"built for {backend} {raw_arch}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )
    elif arch is not None and judge.target_arch is not None and arch != judge.target_arch:
        add(
            Finding(
                "foreign-arch",
                f"built for sm_{arch}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )


def whole_cubin_findings(
    cubin: elf.Elf, cubin_file: str, arch: int | None, kname: str | None, add
) -> tuple[int | None, str | None]:
    """The cubin against the metadata (its SM, its kernel symbol); returns (its SM, the ptxas release in its notes)."""
    if cubin.machine != elf.EM_CUDA:
        add(
            Finding(
                "mismatch", f"{cubin_file} is an ELF for {cubin.machine_name}, not a CUDA cubin"
            )
        )
        return None, None
    cubin_sm = elf.cubin_sm(cubin)
    _sm_findings(cubin_sm, cubin_file, arch, add)
    try:
        syms = cubin.function_symbols()
        if kname and kname not in syms:
            shown = ", ".join(s for s in syms if not s.startswith("__")) or "none"
            add(
                Finding(
                    "mismatch", f"{cubin_file} does not define kernel {kname} (defines: {shown})"
                )
            )
    except elf.ElfError as exc:
        add(Finding("corrupt", f"{cubin_file}: {exc}"))
    producer = None
    try:
        tk = elf.tkinfo(cubin)
        if tk:
            producer = next((s for s in tk if "release" in s), None)
    except Exception:
        producer = None
    return cubin_sm, producer


def _cubin_head_findings(head: elf.ElfHead, cubin_file: str, arch: int | None, add) -> int | None:
    """A cubin too large to read whole, judged by its ELF header against the metadata; returns its SM."""
    for finding in cubin_findings(cubin_file, head):
        add(finding)
    if head.sm is not None:
        _sm_findings(head.sm, cubin_file, arch, add)
    return head.sm


def _sm_findings(sm: int, cubin_file: str, arch: int | None, add) -> None:
    """The cubin's SM against the metadata's arch, read from the whole file or its header alike."""
    if arch is not None and sm != arch:
        add(Finding("mismatch", f"{cubin_file} is assembled for sm_{sm}, metadata says sm_{arch}"))


def ptx_findings(
    head: bytes, ptx_file: str, arch: int | None, kname: str | None, add
) -> tuple[str | None, str | None]:
    """The PTX header against the metadata (its target, its entries); returns (its .version, its .target)."""
    hdr = parse_header(head)
    if hdr.target is None or hdr.version is None:
        add(Finding("corrupt", f"{ptx_file}: no PTX .version/.target header"))
    elif arch is not None and hdr.target_arch != arch:
        add(Finding("mismatch", f"{ptx_file} targets {hdr.target}, metadata says sm_{arch}"))
    if kname and hdr.entries and kname not in hdr.entries:
        add(
            Finding(
                "mismatch", f"{ptx_file} defines {', '.join(hdr.entries)}, metadata names {kname}"
            )
        )
    return hdr.version, hdr.target


def _launcher_findings(launchers, host_machine: str | None, add) -> None:
    """Each launcher module's ELF machine against its file name and this host."""
    host = HOST_MACHINES.get(host_machine or "", host_machine)
    for fname, so in launchers:
        if so is None:
            continue
        so_machine = so.machine_name
        claimed = _ext_suffix_machine(fname)
        if claimed and claimed != so_machine:
            add(
                Finding(
                    "mismatch", f"{fname} is named for {claimed} but is an ELF for {so_machine}"
                )
            )
        elif host and so_machine != host:
            add(
                Finding(
                    "foreign-arch",
                    f"{fname} is built for {so_machine}, this host is {host}: unreachable here",
                )
            )


def _launcher_name(f: EntryFacts) -> str | None:
    if f.launchers:
        return f.launchers[0][0].split(".")[0]
    return None


def _entry_type(f: EntryFacts, names: Collection[str]) -> str:
    if f.groups:
        return "kernel"
    if f.launchers:
        return "launcher"
    real = {n for n in names if not is_reserved(n) and n != "lock"}
    if not real:
        return "empty"
    if all(n.endswith(".autotune.json") for n in real):
        return "autotune"
    if any(
        n.endswith(
            (".cubin", ".ptx", ".source", ".ttir", ".ttgir", ".llir", ".json", ".hsaco", ".amdgcn")
        )
        for n in real
    ):
        return "partial"
    return "other"
