"""A blob set aside on disk while it is written or downloaded, its sha256 taken on the way (ARCHITECTURE.md, store/).

What ``push`` writes a bundle into before uploading it, and what ``pull`` downloads a layer into
before checking it: an unnamed file (``O_TMPFILE``, else an ``O_EXCL`` name removed at once, mode
0600) in the system's temp dir or ``where``, so no other process finds it by name, nothing is left
behind however the process ends, and memory stays flat whatever the blob's size. Unlike
:class:`tempdirs.Spill` it never falls back to memory: a temp dir that cannot hold the blob is an
``OSError``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator
from typing import IO

from jitwarden.store import tempdirs


class BlobFile:
    """Bytes appended in order (``write``), hashed as they come; read back from the start (``reader``, ``chunks``)."""

    def __init__(self, where: str | None = None) -> None:
        import tempfile

        self.place = (
            where or tempfile.gettempdir()
        )  # the directory it lies in, for an error's words
        self._fd: int | None = tempdirs.unnamed_file(self.place)
        self._h = hashlib.sha256()
        self.size = 0

    @property
    def fd(self) -> int:
        if self._fd is None:
            raise ValueError("the blob file is closed")
        return self._fd

    def write(self, data: bytes | bytearray | memoryview) -> int:
        """Append ``data`` (bytes or a buffer) and hash it; the number of bytes written."""
        view = memoryview(data).cast("B")
        n = len(view)
        self._h.update(view)
        while view:
            view = view[os.pwrite(self.fd, view, self.size + n - len(view)) :]
        self.size += n
        return n

    def tell(self) -> int:  # tarfile's writer asks where it is
        return self.size

    def flush(self) -> None:
        pass

    @property
    def digest(self) -> str:
        """``sha256:<hex>`` of what was written, the way OCI names a blob."""
        return "sha256:" + self._h.hexdigest()

    def chunks(self, size: int = 1 << 20) -> Iterator[bytes]:
        """What was written, from the start, in pieces of at most ``size`` bytes."""
        at = 0
        while at < self.size:
            piece = os.pread(self.fd, min(size, self.size - at), at)
            if not piece:
                raise OSError(5, "blob file shorter than written")
            at += len(piece)
            yield piece

    def reader(self) -> IO[bytes]:
        """A new binary file object reading the blob from its start (closing it leaves this one open)."""
        f = os.fdopen(os.dup(self.fd), "rb")
        f.seek(0)
        return f

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> BlobFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
