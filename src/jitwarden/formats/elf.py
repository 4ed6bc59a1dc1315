"""jitwarden's one ELF reader: cubins, launcher modules, host libraries (stdlib only, no disk access).

Three entry points over one set of header rules, cheapest first:

- :func:`parse_head`: the 64-byte header alone (machine, ABI version, flags) and whether the
  section table it names fits in the file: what ``verify --quick`` judges a library or a
  cubin by without reading it whole;
- :func:`parse`: a whole ELF64 file held in memory: section table, function symbols, notes;
- :func:`file_sections`: the section table of an open file, by seeking, for libraries too
  large to read whole (``libtorch_cuda.so``: ~1 GB).

Anything out of bounds is an :class:`ElfError` (or a ``problem`` of the head) rather than a
guess, so a truncated or damaged file is reported as such.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from functools import cache, cached_property
from operator import add
from typing import Any, BinaryIO, NamedTuple

from jitwarden.model.errors import JitwardenError

EM_CUDA = 190
EM_X86_64 = 62
EM_AARCH64 = 183
EM_PPC64 = 21

MACHINE_NAMES = {EM_CUDA: "cuda", EM_X86_64: "x86_64", EM_AARCH64: "aarch64", EM_PPC64: "ppc64le"}

MAGIC = b"\x7fELF"

SHT_SYMTAB = 2
SHT_NOTE = 7
SHT_NOBITS = 8
STT_FUNC = 2

EHDR = struct.Struct("<16sHHIQQQIHHHHHH")
HEADER_SIZE = EHDR.size
"""Bytes of an ELF64 header: all :func:`parse_head` needs of a file."""
SHDR = struct.Struct("<IIQQQQIIQQ")
_EHDR32 = struct.Struct("<16sHHIIIIIHHHHHH")
_SHDR32 = struct.Struct("<IIIIIIIIII")
SYM = struct.Struct("<IBBHQQ")
PHDR = struct.Struct("<IIQQQQQQ")


class ElfError(JitwardenError, ValueError):
    """The bytes are not a well-formed ELF64 little-endian file."""


def machine_name(machine: int) -> str:
    """``cuda``, ``x86_64``, ... for an ``e_machine`` value (``e_machine=N`` for one we do not name)."""
    return MACHINE_NAMES.get(machine, f"e_machine={machine}")


@dataclass(frozen=True, slots=True)
class ElfHead:
    """What an ELF64 header alone says; ``problem`` is set when the bytes are no ELF64 little-endian
    header, or the section table the header names ends past the file (a truncated write)."""

    machine: int | None = None
    abi_version: int = 0
    flags: int = 0
    problem: str | None = None

    @property
    def machine_name(self) -> str | None:
        return None if self.machine is None else machine_name(self.machine)

    @property
    def sm(self) -> int | None:
        """A cubin's SM (:func:`cubin_sm`), None when this is no sound CUDA ELF header."""
        if self.machine != EM_CUDA or self.problem:
            return None
        return cubin_sm(self)


def _header(data: bytes, size: int) -> tuple[tuple[Any, ...] | None, str | None]:
    """(the ELF64 header's fields, why the file is unsound): the checks :func:`parse_head` and :func:`parse` share.

    The fields are None when ``data`` holds no ELF64 little-endian header; the reason is set
    then, or when the section table the header names ends past the file's ``size`` bytes.
    """
    if len(data) < EHDR.size:
        return None, f"{len(data)} bytes is shorter than an ELF header"
    if data[:4] != MAGIC:
        return None, "no ELF magic"
    if data[4] != 2 or data[5] != 1:
        return None, "not a 64-bit little-endian ELF file"
    fields = EHDR.unpack_from(data, 0)
    shoff, shentsize, shnum = fields[6], fields[11], fields[12]
    if shnum and shoff + shnum * shentsize > size:
        return fields, f"section table ends past the file ({size} bytes): truncated"
    return fields, None


def parse_head(data: bytes, size: int) -> ElfHead:
    """The header of an ELF file of ``size`` bytes that starts with ``data`` (:data:`HEADER_SIZE` bytes suffice)."""
    fields, why = _header(data, size)
    if fields is None:
        return ElfHead(problem=why)
    return ElfHead(fields[2], data[8], fields[7], why)


class Section(NamedTuple):
    """One section header (a NamedTuple: a cubin has ~40 of them and the scan reads thousands)."""

    name: str
    type: int
    flags: int
    offset: int
    size: int
    link: int
    entsize: int
    addr: int = 0
    info: int = 0
    align: int = 0


@dataclass(frozen=True)
class Elf:
    """An ELF64 file held in memory, its header and section table checked by :func:`parse`.

    ``sections`` are decoded on first use; :meth:`section`, :meth:`function_symbols` and :meth:`notes`
    decode only the sections they read (the quick scan reads a cubin's symbols and one note, never its
    whole table). Not slotted: ``sections`` is a cached property.
    """

    machine: int
    abi_version: int
    flags: int
    data: bytes
    header: tuple[Any, ...] = ()  # (field, value) of every ELF header field but the table offsets
    phdrs: tuple[
        Any, ...
    ] = ()  # program headers without their file offsets: (type, flags, vaddr, paddr, filesz, memsz, align)
    _shoff: int = 0  # where the section table starts
    _types: tuple[int, ...] = ()  # each section's type, in table order
    _name_offsets: tuple[int, ...] = ()  # each section's name, as an offset into _names
    _names: str = (
        ""  # the section name table, decoded ("replace": one character a byte, offsets hold)
    )

    @property
    def machine_name(self) -> str:
        return machine_name(self.machine)

    @cached_property
    def sections(self) -> tuple[Section, ...]:
        return tuple(map(self._section, range(len(self._types))))

    def _section(self, index: int) -> Section:
        name_off, stype, sflags, addr, off, size, link, info, align, entsize = SHDR.unpack_from(
            self.data, self._shoff + index * SHDR.size
        )
        return _new_section(
            Section,
            (
                self._names[name_off : self._names.find("\0", name_off)],
                stype,
                sflags,
                off,
                size,
                link,
                entsize,
                addr,
                info,
                align,
            ),
        )

    def section(self, name: str) -> Section | None:
        """The first section named ``name``."""
        if "\0" in name:
            return None
        key, names, offsets = (
            name + "\0",
            self._names,
            self._name_offsets,
        )  # a name runs from its offset to a NUL
        first = len(offsets)
        at = names.find(key)
        while (
            at >= 0
        ):  # each place the name stands in the table (names share tails: ".text" in ".rela.text")
            if at in offsets:
                first = min(first, offsets.index(at))
            at = names.find(key, at + 1)
        return self._section(first) if first < len(offsets) else None

    def section_bytes(self, s: Section) -> bytes:
        if s.type == SHT_NOBITS:
            return b""
        return self.data[s.offset : s.offset + s.size]

    def name_of(self, index: int) -> str:
        """A section's name by index (``#N`` when out of range), for symbols and links."""
        if 0 <= index < len(self._types):
            return self.sections[index].name
        return f"#{index}"

    def function_symbols(self) -> tuple[str, ...]:
        """Names of STT_FUNC symbols: a cubin's kernels (and device functions)."""
        out = []
        for i in _indices(self._types, SHT_SYMTAB):
            s = self._section(i)
            if s.entsize != SYM.size:
                continue
            if s.link >= len(self._types):
                raise ElfError("symbol table links to a missing string table")
            strtab = self.section_bytes(self._section(s.link))
            table = self.section_bytes(s)
            whole = table[: len(table) - len(table) % SYM.size]  # a cut last record is not read
            funcs = whole[4 :: SYM.size].translate(
                _IS_FUNC
            )  # each symbol's st_info byte: 1 for STT_FUNC
            k = funcs.find(1)
            while k >= 0:
                (st_name,) = _U32.unpack_from(whole, k * SYM.size)
                end = strtab.find(b"\0", st_name)
                if end < 0:
                    raise ElfError("symbol name runs past its string table")
                out.append(strtab[st_name:end].decode("utf-8", "replace"))
                k = funcs.find(1, k + 1)
        return tuple(out)

    def notes(self, section_name: str) -> list[tuple[str, int, bytes]]:
        """(owner, type, descriptor) of each note in a SHT_NOTE section."""
        s = self.section(section_name)
        if s is None:
            return []
        raw = self.section_bytes(s)
        out, off = [], 0
        while off + 12 <= len(raw):
            namesz, descsz, ntype = struct.unpack_from("<III", raw, off)
            off += 12
            name = raw[off : off + namesz].rstrip(b"\0").decode("utf-8", "replace")
            off += (namesz + 3) & ~3
            desc = raw[off : off + descsz]
            off += (descsz + 3) & ~3
            out.append((name, ntype, desc))
        return out


_new_section = tuple.__new__  # Section(...) without the NamedTuple's Python __new__
_U32 = struct.Struct("<I")
_IS_FUNC = bytes(int(i & 0xF == STT_FUNC) for i in range(256))
"""For bytes.translate: an st_info byte to 1 when its type (low 4 bits) is STT_FUNC, else 0."""
_PHDR_NO_OFFSET = struct.Struct("<II8xQQQQQ")
"""A program header less its file offset (``8x``): (type, flags, vaddr, paddr, filesz, memsz, align)."""


def _indices(values: tuple[Any, ...], value: object) -> list[int]:
    """Every index of ``value`` in ``values`` (C-level searches)."""
    out, i = [], -1
    for _ in range(values.count(value)):
        i = values.index(value, i + 1)
        out.append(i)
    return out


@cache
def _checked_columns(count: int) -> struct.Struct:
    """The struct of a section table of ``count`` (at most 256) headers, keeping what :func:`parse` checks
    of each: name offset, type, offset, size."""
    return struct.Struct("<" + "II16xQQ24x" * count)


def parse(data: bytes) -> Elf:
    """Parse an ELF64 LE file held in memory; raise ElfError on any inconsistency.

    The header is judged first by :func:`parse_head`'s rules, so both say the same of one file. Every
    section must lie in the file (but SHT_NOBITS ones) and have its name in the name table; the common
    case, a sound table, is told by C-level passes over its columns.
    """
    fields, why = _header(data, len(data))
    if why:
        raise ElfError(why)
    assert fields is not None  # _header gives a reason whenever it gives no fields
    (
        ident,
        etype,
        machine,
        version,
        entry,
        phoff,
        shoff,
        flags,
        ehsize,
        phentsize,
        phnum,
        shentsize,
        shnum,
        shstrndx,
    ) = fields
    limit = len(data)
    header = (
        ("e_ident", ident),
        ("e_type", etype),
        ("e_machine", machine),
        ("e_version", version),
        ("e_entry", entry),
        ("e_flags", flags),
        ("e_ehsize", ehsize),
        ("e_phentsize", phentsize),
        ("e_phnum", phnum),
        ("e_shentsize", shentsize),
    )
    phdrs: tuple[tuple[Any, ...], ...] = ()
    if phnum:
        if phentsize != PHDR.size or phoff + phnum * phentsize > limit:
            raise ElfError(f"program headers end past the file ({limit} bytes): truncated")
        phdrs = tuple(_PHDR_NO_OFFSET.iter_unpack(data[phoff : phoff + phnum * phentsize]))
    if shnum == 0:
        return Elf(machine, ident[8], flags, data, header, phdrs)
    if shentsize != SHDR.size:
        raise ElfError(f"section table ends past the file ({limit} bytes): truncated")
    if shstrndx >= shnum:
        raise ElfError("section name table index out of range")
    if shnum <= 256:  # a cubin, a library: one unpack of the whole table
        cols = _checked_columns(shnum).unpack_from(data, shoff)
        name_offs, types, offsets, sizes = cols[0::4], cols[1::4], cols[2::4], cols[3::4]
    else:
        name_offs, types, offsets, sizes = zip(
            *_checked_columns(1).iter_unpack(data[shoff : shoff + shnum * SHDR.size])
        )
    str_off, str_size = offsets[shstrndx], sizes[shstrndx]
    names = data[str_off : str_off + str_size].decode("ascii", "replace")
    if max(map(add, offsets, sizes)) > limit or max(name_offs) > names.rfind("\0"):
        _check_rows(
            data, shoff, shnum, names
        )  # a fault, or a SHT_NOBITS section's size: row by row
    return Elf(machine, ident[8], flags, data, header, phdrs, shoff, types, name_offs, names)


def _check_rows(data: bytes, shoff: int, shnum: int, names: str) -> None:
    """The section table checked row by row: ElfError at the first section that ends past the file (but
    a SHT_NOBITS one, which holds no bytes) or whose name runs past its string table."""
    limit = len(data)
    for name_off, stype, off, size in _checked_columns(1).iter_unpack(
        data[shoff : shoff + shnum * SHDR.size]
    ):
        if off + size > limit and stype != SHT_NOBITS:
            raise ElfError(f"a section ends past the file ({limit} bytes): truncated")
        if names.find("\0", name_off) < 0:
            raise ElfError("section name runs past its string table")


def cubin_sm(elf: Elf | ElfHead) -> int:
    """The SM a cubin was assembled for, from ``e_flags`` in either ABI layout (a whole file or its head).

    ABI version 7 keeps it in the low byte (sm_90a: 0x5a0d5a), version 8 in
    bits 8-15 (sm_120a: 0x900780a).
    """
    if elf.abi_version >= 8:
        return (elf.flags >> 8) & 0xFF
    return elf.flags & 0xFF


def tkinfo(elf: Elf) -> tuple[str, ...] | None:
    """Strings of the ``.note.nv.tkinfo`` note (CUDA 12.9+/13 ptxas): tool, version text, command line."""
    for owner, _t, desc in elf.notes(".note.nv.tkinfo"):
        if owner.startswith("NVIDIA"):
            # The descriptor starts with a fixed header of offsets; the strings follow, NUL-separated.
            strings = [s.decode("utf-8", "replace") for s in desc.split(b"\0") if s]
            text = [s for s in strings if s.isprintable() and len(s) > 2]
            return tuple(text)
    return None


def file_sections(f: BinaryIO) -> dict[str, tuple[int, int]] | None:
    """name -> (file offset, size) of every section with file content, read from the open binary file ``f``
    by seeking: only the header, the section table and the name table are read.

    For libraries too large to read whole; 32- and 64-bit little-endian files, extended section
    counts included. None when ``f`` is no such ELF file or its table is implausible; a header
    cut short raises ValueError, a failed read OSError.
    """
    f.seek(0)
    ident = f.read(EHDR.size)
    layout = _table_layout(ident)
    if layout is None:
        return None
    shdr, shoff, shentsize, shnum, shstrndx = layout
    f.seek(shoff)
    first = f.read(shdr.size)
    if len(first) < shdr.size:
        raise ValueError("truncated section header")
    first_fields = shdr.unpack(first)
    if shnum == 0:  # more than 0xff00 sections: the count is in section 0's size
        shnum = first_fields[5]
    if shstrndx == 0xFFFF:  # SHN_XINDEX: the index is in section 0's link
        shstrndx = first_fields[6]
    if shnum > 100_000 or shstrndx >= shnum:
        return None
    f.seek(shoff)
    table = f.read(shnum * shentsize)
    if len(table) < shnum * shentsize:
        return None
    return _named_sections(f, shdr, table, shentsize, shnum, shstrndx)


def _table_layout(ident: bytes) -> tuple[struct.Struct, int, int, int, int] | None:
    """(the section header's struct, the table's offset, an entry's size, the count, the name table's index)
    from the ELF header ``ident``; None when it is no little-endian ELF file or has no usable table."""
    if len(ident) < _EHDR32.size or ident[:4] != MAGIC or ident[5] != 1:
        return None
    ehdr, shdr = (EHDR, SHDR) if ident[4] == 2 else (_EHDR32, _SHDR32)
    if len(ident) < ehdr.size:
        return None
    *_, shoff, _flags, _eh, _pe, _pn, shentsize, shnum, shstrndx = ehdr.unpack_from(ident, 0)
    if shoff == 0 or shentsize < shdr.size:
        return None
    return shdr, shoff, shentsize, shnum, shstrndx


def _named_sections(
    f: BinaryIO, shdr: struct.Struct, table: bytes, shentsize: int, shnum: int, shstrndx: int
) -> dict[str, tuple[int, int]] | None:
    """name -> (file offset, size) of the sections of ``table`` with file content, their names read from the
    name table (by seeking ``f``); None when that table is implausibly large."""
    rows = [shdr.unpack_from(table, i * shentsize) for i in range(shnum)]
    stroff, strsize = rows[shstrndx][4], rows[shstrndx][5]
    if strsize > 64 << 20:
        return None
    f.seek(stroff)
    strtab = f.read(strsize)
    out = {}
    for r in rows:
        end = strtab.find(b"\0", r[0])
        name = strtab[r[0] : end if end >= 0 else None].decode("ascii", "replace")
        if name and r[1] != SHT_NOBITS:
            out[name] = (r[4], r[5])
    return out
