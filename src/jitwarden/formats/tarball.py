"""Tar files of signed bundles (``ops/bundle``): read member by member, written from bytes (stdlib only).

Nothing is ever extracted: a reader gets a member's bytes only when it is a regular file of
a bounded size, and the caller decides where they go (``store/``). The file object comes
from the disk layer (``store/reads.open_regular_file``), so a FIFO or a link is never opened
here (ARCHITECTURE.md, "Layers").
"""

from __future__ import annotations

import io
import tarfile
from typing import IO, Any, BinaryIO, Literal

from jitwarden.model.errors import ExitStatus, JitwardenError

TarError = (tarfile.TarError, EOFError)
"""What a damaged or foreign tar raises while it is read."""


class NotATar(JitwardenError, ValueError):
    """The file is not a tar (nor a compressed one) that this reader opens."""

    exit_code = ExitStatus.USAGE


class _Reader(tarfile.TarFile):
    """A tar reader that closes the file it was given when it is closed itself (``owns``)."""

    _owned: Any = None  # the file it was given, when it owns it

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self._owned is not None:
                self._owned.close()


def open_reader(fileobj: BinaryIO, *, owns: bool = False) -> tarfile.TarFile:
    """A tar reader of ``fileobj`` (plain or compressed); :class:`NotATar` in one line when it is none.

    ``owns``: closing the reader closes ``fileobj`` too.
    """
    try:
        tar = _Reader.open(fileobj=fileobj, mode=_mode(fileobj))
    except TarError:
        raise NotATar("not a tar file") from None
    if owns:
        tar._owned = fileobj
    return tar


GZIP_MAGIC = b"\x1f\x8b"


def _mode(fileobj: BinaryIO) -> Literal["r:gz", "r:", "r:*"]:
    """How to open ``fileobj``: ``r:gz`` for a gzip stream, else ``r:`` (a plain tar), as bundles are written
    (:func:`open_writer`). Never ``r:*``: it tries xz and bz2 on any file that is not plain tar, and a gigabyte of
    zeros took a minute to be refused. A file that cannot be peeked at (not seekable) is opened as ``r:*``."""
    try:
        at = fileobj.tell()
        head = fileobj.read(2)
        fileobj.seek(at)
    except (OSError, ValueError, AttributeError):
        return "r:*"
    return "r:gz" if head == GZIP_MAGIC else "r:"


def open_writer(fileobj: Any, gz: bool) -> tarfile.TarFile:
    """A PAX tar writer into ``fileobj``, gzip-compressed when ``gz``."""
    return tarfile.open(fileobj=fileobj, mode="w:gz" if gz else "w", format=tarfile.PAX_FORMAT)


def add_bytes(tar: tarfile.TarFile, name: str, data: bytes, mtime: float) -> None:
    """Add a regular file ``name`` holding ``data`` (mode 0644)."""
    add_stream(tar, name, io.BytesIO(data), len(data), mtime)


def add_stream(tar: tarfile.TarFile, name: str, reader: Any, size: int, mtime: float) -> None:
    """Add a regular file ``name`` of ``size`` bytes read from ``reader`` (anything with ``read(n)``)."""
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, int(mtime)
    tar.addfile(info, reader)


def member_stream(tar: tarfile.TarFile, info: tarfile.TarInfo) -> IO[bytes]:
    """A reader of the regular member ``info``'s bytes (``read(n)``); ValueError for any other member."""
    if not info.isreg():
        raise ValueError(f"{info.name}: not a regular file")
    f = tar.extractfile(info)
    return f if f is not None else io.BytesIO(b"")


def read_member(tar: tarfile.TarFile, info: tarfile.TarInfo, limit: int) -> bytes:
    """The bytes of the regular member ``info`` of at most ``limit`` bytes; ValueError when it is not one or is cut."""
    if not info.isreg() or info.size > limit:
        raise ValueError(f"{info.name}: not a regular file of at most {limit} bytes")
    data: bytes = member_stream(tar, info).read(limit + 1)
    if len(data) != info.size:
        raise ValueError(f"{info.name}: truncated")
    return data
