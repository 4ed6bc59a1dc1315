"""Compare a cached cubin with a rebuilt one: what decides behaviour, and nothing else.

Whole-file equality is the fast path. Otherwise both files are parsed and compared
part by part: the ELF header (all but the table offsets, which move when a debug
section changes size), the program headers (all but ``p_offset``), every section's
header and content by name, and the symbol table by meaning (name, binding, type,
section, value, size) rather than by raw string-table offsets.

Only the sections in :data:`IGNORED_SECTIONS` (and their relocation and Blackwell
``.nv.merc`` twins) are left out, each for a stated reason. Their differences are
still reported back (``CubinComparison.ignored``) so the caller can say what it ignored.

Stdlib only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from jitwarden.formats.elf import SHT_SYMTAB, SYM, Elf, ElfError, Section, parse

# Sections whose content cannot change what the GPU runs. The CUDA driver's loader
# reads code (.text.*), kernel info (.nv.info*), constant banks (.nv.constant*),
# shared/global reservations (.nv.shared*, .nv.global*), the call graph, the compat
# and cuinfo notes and the symbol table; the DWARF-style sections below are read
# only by debuggers and profilers (cuda-gdb, Nsight's source view) to map SASS back
# to PTX and source lines. A difference there changes which file/line a debugger
# shows, never an instruction, a register count or a launch parameter.
IGNORED_SECTIONS: dict[str, str] = {
    ".debug_line": "DWARF line table (source line <-> SASS address); its file entries record the source "
    "directories, names and the source file's mtime/size as ptxas stats it at assembly time "
    "(shown: touching the kernel's .py changes 2 LEB128 bytes here and nothing else)",
    ".debug_frame": "DWARF call-frame info, only for unwinding in a debugger",
    ".debug_info": "DWARF debug info (-g, DISABLE_PTXAS_OPT): names, types, directories",
    ".debug_abbrev": "DWARF abbreviation table for .debug_info",
    ".debug_str": "DWARF string pool (file and directory names)",
    ".debug_loc": "DWARF variable locations for a debugger",
    ".debug_ranges": "DWARF address ranges for a debugger",
    ".debug_aranges": "DWARF address-range lookup table for a debugger",
    ".debug_pubnames": "DWARF name lookup table for a debugger",
    ".debug_macinfo": "DWARF macro info for a debugger",
    ".nv_debug_line_sass": "NVIDIA SASS-level line table, used by cuda-gdb/Nsight to map SASS to PTX lines",
    ".nv_debug_ptx_txt": "the PTX text embedded for the debugger's PTX view",
    ".nv_debug_info_reg_sass": "register-location debug info for cuda-gdb",
    ".nv_debug_info_reg_type": "register-type debug info for cuda-gdb",
    ".note.nv.tkinfo": "tool note: ptxas name, version and its command line, which holds temporary file paths; "
    "its release/build strings are compared separately (TKINFO_VERSION_STRINGS)",
}
# Relocations of an ignored section (``.rela.debug_line``) only patch that section;
# ``.nv.merc.<name>`` is the Blackwell (sm_100+) "mercury" twin of ``<name>``.
# Whether the tool versions in .note.nv.tkinfo must agree: yes, a different ptxas build is a different producer.
TKINFO_VERSION_STRINGS = True

SHT_RELA = 4
SHT_REL = 9
SHF_INFO_LINK = 0x40


@dataclass(frozen=True, slots=True, kw_only=True)
class CubinComparison:
    """The result of comparing two cubins."""

    identical: bool  # byte for byte
    equal: bool  # equal in everything but IGNORED_SECTIONS
    differences: tuple[str, ...] = ()  # human descriptions, most telling first
    first_section: str | None = None  # where the first behaviour-relevant difference is
    first_offset: int | None = None  # file offset of that first differing byte in the cached cubin
    ignored: tuple[str, ...] = ()  # ignored sections that did differ

    def summary(self) -> str:
        if self.identical:
            return "byte-identical"
        if self.equal:
            return (
                "equal except debug-only sections (" + ", ".join(self.ignored) + ")"
                if self.ignored
                else "equal"
            )
        return "; ".join(self.differences[:3]) + (
            f" (+{len(self.differences) - 3} more)" if len(self.differences) > 3 else ""
        )


def is_ignored(name: str) -> bool:
    """Whether ``name`` is an ignored section or one of its relocation / ``.nv.merc`` twins."""
    base = name
    if base.startswith(".nv.merc."):
        base = base[len(".nv.merc") :]
    for prefix in (".rela", ".rel"):
        if base.startswith(prefix + "."):
            base = base[len(prefix) :]
            break
    return base in IGNORED_SECTIONS


def _symbols(p: Elf, s: Section) -> list[tuple[Any, ...]]:
    strtab = p.section_bytes(p.sections[s.link]) if s.link < len(p.sections) else b""
    table = p.section_bytes(s)
    out = []
    for off in range(0, len(table) - SYM.size + 1, SYM.size):
        st_name, st_info, st_other, shndx, value, size = SYM.unpack_from(table, off)
        end = strtab.find(b"\0", st_name)
        name = strtab[st_name : end if end >= 0 else len(strtab)].decode("utf-8", "replace")
        sec = p.name_of(shndx) if 0 < shndx < 0xFF00 else shndx
        out.append((name, st_info, st_other, sec, value, size))
    return out


def _tk_versions(p: Elf) -> tuple[str, ...]:
    for s in p.sections:
        if s.name == ".note.nv.tkinfo":
            strings = [x.decode("utf-8", "replace") for x in p.section_bytes(s).split(b"\0") if x]
            return tuple(x for x in strings if "release" in x or x.startswith("Build "))
    return ()


def _first_diff(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _link_name(p: Elf, s: Section, field: int, as_index: bool) -> object:
    return p.name_of(field) if as_index else field


Diff = tuple[str, str | None, int | None]
"""One difference :func:`compare` reports: (what differs, in which section or part, at which offset)."""


def compare(cached: bytes, rebuilt: bytes) -> CubinComparison:
    """Compare ``cached`` with ``rebuilt``; see the module docstring for what counts."""
    if cached == rebuilt:
        return CubinComparison(identical=True, equal=True)
    try:
        a = parse(cached)
    except ElfError as exc:
        return CubinComparison(
            identical=False,
            equal=False,
            differences=(f"cached cubin is not a valid cubin: {exc}",),
            first_section=None,
            first_offset=0,
        )
    try:
        b = parse(rebuilt)
    except ElfError as exc:  # pragma: no cover - ptxas wrote garbage
        return CubinComparison(
            identical=False,
            equal=False,
            differences=(f"rebuilt cubin is not a valid cubin: {exc}",),
            first_section=None,
            first_offset=0,
        )
    diffs = [
        *_header_diffs(a, b),
        *_segment_diffs(a, b),
        *_toolkit_diffs(a, b),
        *_section_list_diffs(a, b),
        *_section_diffs(a, b),
    ]
    ignored = tuple(_ignored_that_differ(a, b))
    if not diffs:
        return CubinComparison(
            identical=False,
            equal=True,
            differences=(),
            first_section=None,
            first_offset=None,
            ignored=ignored,
        )
    # Code-section differences first (most telling), then the rest in file order.
    diffs.sort(key=lambda d: 0 if (d[1] or "").startswith((".text.", ".nv.capmerc.text.")) else 1)
    _what, sec, off = diffs[0]
    return CubinComparison(
        identical=False,
        equal=False,
        differences=tuple(d[0] for d in diffs),
        first_section=sec,
        first_offset=off,
        ignored=ignored,
    )


def _header_diffs(a: Elf, b: Elf) -> list[Diff]:
    """The ELF header's fields that differ (its table offsets are not compared)."""
    out: list[Diff] = []
    for (field, va), (_f, vb) in zip(a.header, b.header):
        if va == vb:
            continue
        if field == "e_ident":
            i = _first_diff(va, vb)
            out.append(
                (f"ELF header e_ident byte {i} differs ({va[i]:#x} vs {vb[i]:#x})", "ELF header", i)
            )
            continue
        what = ""
        if field == "e_version":
            what = f" (CUDA {va // 10}.{va % 10} vs {vb // 10}.{vb % 10} toolchain stamp)"
        out.append((f"ELF header {field} differs: {va:#x} vs {vb:#x}{what}", "ELF header", None))
    return out


_SEGMENT_FIELDS = (
    "type",
    "flags",
    "virtual address",
    "physical address",
    "file size",
    "memory size",
    "alignment",
)


def _segment_diffs(a: Elf, b: Elf) -> list[Diff]:
    """The program headers, when they differ: how many segments, else which of their fields."""
    if a.phdrs == b.phdrs:
        return []
    if len(a.phdrs) != len(b.phdrs):
        why = f"{len(a.phdrs)} vs {len(b.phdrs)} segments"
    else:  # same count: say which of the segments' fields differ
        diff = {
            name
            for pa, pb in zip(a.phdrs, b.phdrs)
            for name, x, y in zip(_SEGMENT_FIELDS, pa, pb)
            if x != y
        }
        named = ", ".join(n for n in _SEGMENT_FIELDS if n in diff) or "layout"
        why = f"same {len(a.phdrs)} segments; their {named} differ"
    return [(f"program headers differ ({why})", "program headers", None)]


def _toolkit_diffs(a: Elf, b: Elf) -> list[Diff]:
    """The ptxas each cubin's tkinfo note names, where those notes carry version strings."""
    ta, tb = _tk_versions(a), _tk_versions(b)
    if not TKINFO_VERSION_STRINGS or ta == tb:
        return []
    return [
        (
            f".note.nv.tkinfo names another ptxas: {' '.join(ta) or 'none'} vs {' '.join(tb) or 'none'}",
            ".note.nv.tkinfo",
            None,
        )
    ]


def _ignored_that_differ(a: Elf, b: Elf) -> list[str]:
    """The ignored sections (:func:`is_ignored`) that differ or are in one cubin only: reported, never judged."""
    out = []
    for s in a.sections:
        if is_ignored(s.name):
            o = next((x for x in b.sections if x.name == s.name), None)
            if o is None or a.section_bytes(s) != b.section_bytes(o) or s.size != o.size:
                out.append(s.name)
    for s in b.sections:
        if is_ignored(s.name) and not any(x.name == s.name for x in a.sections):
            out.append(s.name)
    return out


def _kept(p: Elf) -> list[Section]:
    return [s for s in p.sections if not is_ignored(s.name)]


def _section_list_diffs(a: Elf, b: Elf) -> list[Diff]:
    """The compared sections each cubin has, and their order."""
    names_a, names_b = [s.name for s in _kept(a)], [s.name for s in _kept(b)]
    if names_a == names_b:
        return []
    only_a = [n for n in names_a if n not in names_b]
    only_b = [n for n in names_b if n not in names_a]
    if not (only_a or only_b):
        return [("sections are in another order", None, None)]
    listed = [f"only cached: {n}" for n in only_a] + [f"only rebuilt: {n}" for n in only_b]
    return [("sections differ: " + ", ".join(listed), (only_a or only_b)[0], None)]


def _section_diffs(a: Elf, b: Elf) -> list[Diff]:
    """Each compared section both cubins have: the symbol table by meaning, the others by content, then header."""
    bmap = {s.name: s for s in _kept(b)}
    out = []
    for sa in _kept(a):
        sb = bmap.get(sa.name)
        if sb is None:
            continue
        d = _symtab_diff(a, sa, b, sb) if sa.type == SHT_SYMTAB else _section_diff(a, sa, b, sb)
        if d is not None:
            out.append(d)
    return out


def _symtab_diff(a: Elf, sa: Section, b: Elf, sb: Section) -> Diff | None:
    syma, symb = _symbols(a, sa), _symbols(b, sb)
    if syma == symb:
        return None
    k = next(
        (i for i, (x, y) in enumerate(zip(syma, symb)) if x != y),
        min(len(syma), len(symb)),
    )
    which = syma[k][0] if k < len(syma) else (symb[k][0] if k < len(symb) else "?")
    return (
        f"symbol table differs at symbol {k} ({which!r}): "
        f"{syma[k] if k < len(syma) else 'missing'} vs {symb[k] if k < len(symb) else 'missing'}",
        sa.name,
        sa.offset + k * SYM.size,
    )


def _section_head(p: Elf, s: Section, like: Section | None = None) -> tuple[object, ...]:
    """A section's header as compared: its fields, with link and info as the names they index where the type and
    flags of ``like`` (``s`` itself by default; of two compared, the first's) say they are indexes."""
    k = s if like is None else like
    index_link = k.type in (SHT_SYMTAB, SHT_RELA, SHT_REL) or k.link != 0
    index_info = k.type in (SHT_RELA, SHT_REL) or bool(k.flags & SHF_INFO_LINK)
    return (
        s.type,
        s.flags,
        s.addr,
        s.size,
        s.align,
        s.entsize,
        _link_name(p, s, s.link, index_link),
        _link_name(p, s, s.info, index_info),
    )


def _section_diff(a: Elf, sa: Section, b: Elf, sb: Section) -> Diff | None:
    ca, cb = a.section_bytes(sa), b.section_bytes(sb)
    if ca != cb:
        i = _first_diff(ca, cb)
        size = f", size {sa.size} vs {sb.size}" if sa.size != sb.size else ""
        return (
            f"section {sa.name} differs at section offset {i:#x} (file offset {sa.offset + i:#x}){size}",
            sa.name,
            sa.offset + i,
        )
    ha, hb = _section_head(a, sa), _section_head(b, sb, sa)
    if ha != hb:
        return (f"section {sa.name} header differs: {ha} vs {hb}", sa.name, None)
    return None


# ---------------------------------------------------------------- several rebuilds of one PTX

Verdict = Literal["reproduced", "differs", "varies-confined", "varies-differs"]
"""The verdicts of :func:`judge_attempts`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AttemptsJudgement:
    """What several assemblies of one PTX by one ptxas say about a cached cubin."""

    verdict: Verdict
    attempts: int  # assemblies judged (those that wrote a cubin)
    distinct: int  # distinct outputs among them, by the comparison rules of :func:`compare`
    matched: int | None = None  # index of the first attempt equal to the cached cubin
    nearest: int | None = None  # index of the attempt closest to the cached cubin
    differing_bytes: int = 0  # bytes where the cached cubin differs from the nearest attempt
    varying_bytes: int = 0  # bytes that vary among the attempts (same layout as the cached cubin)
    first_section: str | None = None  # first difference that varying bytes do not explain ...
    first_offset: int | None = None  # ... its section offset (None: a structural difference)
    reason: str = ""  # one line for the finding message


View = tuple[tuple[Any, ...], dict[str, bytes]]  # (skeleton, {section: content}) of one cubin


def _contents(views: list[View | None], i: int) -> dict[str, bytes]:
    """The section contents of attempt ``i``, one whose view :func:`compare` matched (so it has one)."""
    v = views[i]
    assert v is not None
    return v[1]


def _view(data: bytes) -> View | None:
    """(skeleton, {section: content}) of everything :func:`compare` considers, or None when not a cubin.

    The skeleton is all but the section contents: ELF header (no table offsets), program
    headers (no offsets), tkinfo tool versions, the order of compared sections, each one's
    header, and the symbol table by meaning. ``compare(x, y).equal`` holds exactly when both
    parts are equal.
    """
    try:
        p = parse(data)
    except ElfError:
        return None
    kept = [s for s in p.sections if not is_ignored(s.name)]
    heads: list[tuple[object, ...]] = []
    contents: dict[str, bytes] = {}
    for s in kept:
        heads.append((s.name, *_section_head(p, s)))
        if s.type == SHT_SYMTAB:
            heads.append(("symbols", s.name, tuple(_symbols(p, s))))
        else:
            contents[s.name] = p.section_bytes(s)
    skeleton = (p.header, p.phdrs, _tk_versions(p) if TKINFO_VERSION_STRINGS else (), tuple(heads))
    return skeleton, contents


def _diff_positions(a: bytes, b: bytes) -> list[int]:
    if a == b:
        return []
    out = [i for i, (x, y) in enumerate(zip(a, b)) if x != y]
    out.extend(range(min(len(a), len(b)), max(len(a), len(b))))
    return out


def judge_attempts(cached: bytes, attempts: list[bytes]) -> AttemptsJudgement:
    """Judge ``cached`` against several outputs of one ptxas on one PTX with one command line.

    ptxas is not deterministic for every kernel (seen on the H200: 5 runs of the same
    ptxas 12.8 on one Inductor ``triton_bmm`` PTX gave 2 outputs differing in one byte of
    scheduling-control bits in ``.text``), so one rebuild that differs proves nothing alone.
    The rule, over exactly what :func:`compare` considers (ELF header, program headers,
    tkinfo tool versions, every non-debug section's header and content, the symbol table
    by meaning; :data:`IGNORED_SECTIONS` stay ignored):

    1. ``reproduced``: some attempt is equal to ``cached`` (``compare(...).equal``);
       ``matched`` is the first such attempt.
    2. ``differs``: every attempt is equal to every other (one distinct output) and
       ``cached`` differs: a deterministic assembler that never yields this binary.
    3. Otherwise the attempts vary. Only attempts with the same *skeleton* as ``cached``
       (everything but section contents: same sections, sizes, headers, symbols) let bytes
       be compared position by position. A byte position (section, offset) *varies* when
       those attempts do not all hold the same byte there. Among them, ``nearest`` is the
       attempt with the fewest differing bytes.

       - ``varies-confined``: every byte where ``cached`` differs from ``nearest`` is a byte
         that varies among the attempts. ``cached`` may be one more output of this
         nondeterministic ptxas, or damage hidden in bytes ptxas itself does not fix:
         neither proven nor disproven (the caller reports ``unverifiable``).
         The same holds when the other differing bytes all lie in sections that themselves
         vary among the attempts: a few runs do not sample every output of such a ptxas
         (ptxas-blackwell 12.9: 4+ distinct sm_100 ``tl.dot`` cubins in 12 runs, each
         differing in other bytes of ``.text`` and ``.nv.capmerc.text``).
       - ``varies-differs``: ``cached`` differs in its skeleton from every attempt, or differs
         from ``nearest`` in a section that every same-skeleton attempt reproduces byte for
         byte (``first_section``, ``first_offset``): a substituted kernel or damage shows up in
         a place ptxas reproduces every time (the caller reports ``not-reproducible``). A
         flipped code byte in a kernel whose ``.text`` varies is ``varies-confined``: the seal
         (guard, ``verify --quick``) is what catches it there.

    Attempts that are not valid cubins count as distinct outputs and never explain a byte.
    """
    reproduced = _reproduced(cached, attempts)
    if reproduced is not None:
        return reproduced
    views = [_view(a) for a in attempts]
    distinct = _count_distinct(attempts, views)
    cv = _view(cached)
    if distinct <= 1:
        return _deterministic(cached, attempts, distinct)
    same = [i for i, v in enumerate(views) if v is not None and cv is not None and v[0] == cv[0]]
    if not same:
        return _structure_differs(cached, attempts, distinct)
    assert cv is not None  # `same` holds attempts of its skeleton
    return _bytes_vary(cv[1], views, same, len(attempts), distinct)


def _reproduced(cached: bytes, attempts: list[bytes]) -> AttemptsJudgement | None:
    """Rule 1: ``reproduced`` by the first attempt equal to ``cached``; None when none is."""
    for i, a in enumerate(attempts):
        if compare(cached, a).equal:
            distinct = _count_distinct(attempts[: i + 1])
            return AttemptsJudgement(
                verdict="reproduced",
                attempts=i + 1,
                distinct=distinct,
                matched=i,
                reason=f"attempt {i + 1} of {i + 1} matched ({distinct} distinct outputs so far)",
            )
    return None


def _deterministic(cached: bytes, attempts: list[bytes], distinct: int) -> AttemptsJudgement:
    """Rule 2: one output in every run, which ``cached`` is not: ``differs``."""
    n = len(attempts)
    c = compare(cached, attempts[0]) if attempts else None
    return AttemptsJudgement(
        verdict="differs",
        attempts=n,
        distinct=distinct,
        nearest=0 if attempts else None,
        first_section=c.first_section if c else None,
        first_offset=c.first_offset if c else None,
        reason=f"the same output in all {n} runs" if n > 1 else "one run",
    )


def _structure_differs(cached: bytes, attempts: list[bytes], distinct: int) -> AttemptsJudgement:
    """Rule 3, no attempt of the cached cubin's skeleton: ``varies-differs`` in its structure."""
    n = len(attempts)
    c = compare(cached, attempts[0])
    return AttemptsJudgement(
        verdict="varies-differs",
        attempts=n,
        distinct=distinct,
        nearest=0,
        first_section=c.first_section,
        first_offset=None,
        reason=f"ptxas output varies between runs ({distinct} distinct results in {n} attempts), but the cached "
        f"cubin differs from every attempt in its structure ({c.first_section or 'layout'}), not only in "
        f"bytes that vary",
    )


def _varying_positions(
    contents: dict[str, bytes], views: list[View | None], same: list[int]
) -> dict[str, set[int]]:
    """Per section, the byte positions where the same-skeleton attempts ``same`` do not all agree."""
    varying: dict[str, set[int]] = {}
    for name in contents:
        pos: set[int] = set()
        first = _contents(views, same[0])[name]
        for i in same[1:]:
            pos.update(_diff_positions(first, _contents(views, i)[name]))
        varying[name] = pos
    return varying


def _nearest(
    contents: dict[str, bytes], views: list[View | None], same: list[int]
) -> tuple[int, int, dict[str, list[int]]]:
    """(differing bytes, index, the positions per section) of the same-skeleton attempt nearest ``contents``."""
    best = None
    for i in same:
        d = {name: _diff_positions(contents[name], _contents(views, i)[name]) for name in contents}
        k = sum(len(v) for v in d.values())
        if best is None or k < best[0]:
            best = (k, i, d)
    assert best is not None  # `same` names at least the first build
    return best


def _bytes_vary(
    contents: dict[str, bytes], views: list[View | None], same: list[int], n: int, distinct: int
) -> AttemptsJudgement:
    """Rule 3 among the attempts ``same`` of the cached cubin's skeleton (``contents``: its sections):
    ``varies-confined`` when every byte it differs in from the nearest varies, or lies in a section that
    varies; else ``varies-differs`` at the first byte every such attempt reproduces."""
    varying = _varying_positions(contents, views, same)
    k, nearest, d = _nearest(contents, views, same)
    nvar = sum(len(v) for v in varying.values())
    unexplained = [
        (name, off) for name, offs in d.items() for off in offs if off not in varying[name]
    ]
    confined = (
        AttemptsJudgement(  # what each verdict among same-skeleton attempts says, its reason aside
            verdict="varies-confined",
            attempts=n,
            distinct=distinct,
            nearest=nearest,
            differing_bytes=k,
            varying_bytes=nvar,
        )
    )
    if not unexplained:
        secs = sorted(name for name, offs in d.items() if offs)
        return replace(
            confined,
            reason=f"ptxas output varies between runs for this kernel: {distinct} distinct results in {n} attempts, "
            f"none identical; the differences are confined to bytes that vary between runs ({k} byte(s) in "
            f"{', '.join(secs)} differ from the nearest attempt, all among the {nvar} byte(s) that vary)",
        )
    # Code sections first, as in compare().
    unexplained.sort(
        key=lambda t: (0 if t[0].startswith((".text.", ".nv.capmerc.text.")) else 1, t[0], t[1])
    )
    stable = [(name, off) for name, off in unexplained if not varying[name]]
    if not stable:
        # Every unexplained byte lies in a section this ptxas writes differently from run to run.
        # A few runs do not sample every variant (ptxas-blackwell 12.9 gave 4+ distinct sm_100
        # tl.dot cubins in 12 runs, each differing in other bytes of .text and .nv.capmerc.text),
        # so a difference there is no evidence of damage: neither proven nor disproven.
        secs = sorted({name for name, _ in unexplained})
        return replace(
            confined,
            reason=f"ptxas output varies between runs for this kernel: {distinct} distinct results in {n} attempts, "
            f"none identical; the cached cubin differs from the nearest attempt in {k} byte(s), all in "
            f"sections this ptxas does not reproduce from run to run ({', '.join(secs)}); the layout and "
            f"every section ptxas reproduces agree",
        )
    sec, off = stable[0]
    return replace(
        confined,
        verdict="varies-differs",
        first_section=sec,
        first_offset=off,
        reason=f"ptxas output varies between runs ({distinct} distinct results in {n} attempts), but the cached cubin "
        f"differs from every attempt where all {len(same)} same-layout attempts agree: {len(unexplained)} of "
        f"{k} differing byte(s) lie outside the {nvar} byte(s) that vary, first in {sec} at section offset "
        f"{off:#x}",
    )


def _count_distinct(
    attempts: list[bytes],
    views: list[View | None] | None = None,
) -> int:
    views = [_view(a) for a in attempts] if views is None else views
    seen: list[Any] = []
    n = 0
    for v, a in zip(views, attempts):
        key = v if v is not None else ("raw", a)
        if key not in seen:
            seen.append(key)
            n += 1
    return n
