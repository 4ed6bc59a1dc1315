"""store/reads: the one reader family (read_head, read_bytes, read_json) and its one bound rule:
a whole-file read past ``max_bytes`` is refused (EFBIG), never returned cut short; only read_head cuts."""

from __future__ import annotations

import errno
import os

import pytest

from jitwarden.store.reads import (
    HASH_CHUNK,
    NotRegularFile,
    digest_file,
    read_bytes,
    read_head,
    read_json,
    stat_and_read,
)

BODY = bytes(range(256)) * 300  # 76,800 bytes: more than one first read of a small hint


@pytest.fixture
def blob(tmp_path):
    p = tmp_path / "blob"
    p.write_bytes(BODY)
    return str(p)


@pytest.mark.parametrize("hint", [0, 1, 4096, len(BODY), len(BODY) * 2])
def test_whole_file_whatever_the_hint(blob, hint):
    assert read_bytes(blob, size_hint=hint) == BODY


@pytest.mark.parametrize("hint", [0, 100, len(BODY)])
def test_bound_is_inclusive_and_never_cuts(blob, hint):
    assert read_bytes(blob, max_bytes=len(BODY), size_hint=hint) == BODY
    with pytest.raises(OSError) as exc:
        read_bytes(blob, max_bytes=len(BODY) - 1, size_hint=hint)
    assert exc.value.errno == errno.EFBIG


def test_dir_fd_reads_relative_to_the_directory(blob):
    fd = os.open(os.path.dirname(blob), os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert read_bytes("blob", dir_fd=fd) == BODY
        assert read_head("blob", 10, dir_fd=fd) == BODY[:10]
    finally:
        os.close(fd)


def test_head_cuts(blob, tmp_path):
    assert read_head(blob, 64) == BODY[:64]
    (tmp_path / "short").write_bytes(b"abc")
    assert read_head(str(tmp_path / "short"), 64) == b"abc"


def test_symlink_fifo_and_directory_are_refused(blob, tmp_path):
    os.symlink(blob, tmp_path / "link")
    os.mkfifo(tmp_path / "fifo")  # opened non-blocking: refused, never waited on
    for reader in (lambda p: read_bytes(p), lambda p: read_head(p, 8), lambda p: read_json(p)):
        with pytest.raises(OSError) as exc:
            reader(str(tmp_path / "link"))
        assert exc.value.errno == errno.ELOOP
        with pytest.raises(NotRegularFile):
            reader(str(tmp_path / "fifo"))
        with pytest.raises(NotRegularFile):
            reader(str(tmp_path))


def test_json_limits(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, {"b": null}]}')
    assert read_json(str(good)) == {"a": [1, {"b": None}]}
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(ValueError, match="deeper than"):
        read_json(str(deep))
    with pytest.raises(OSError) as exc:
        read_json(str(good), max_bytes=8)
    assert exc.value.errno == errno.EFBIG
    (tmp_path / "bad.json").write_bytes(b'{"a": \xff}')
    with pytest.raises(ValueError):
        read_json(str(tmp_path / "bad.json"))


def test_stat_and_read_gives_the_stat_of_the_very_file_it_read(blob, tmp_path):
    """The survey's reader (the scan's hot path): one open, its fstat and its bytes; the same refusals as
    every reader here, and a file past the bound left to read_bytes (None), never returned cut short."""
    fd = os.open(str(tmp_path), os.O_RDONLY | os.O_DIRECTORY)
    try:
        st, data = stat_and_read("blob", dir_fd=fd)
        assert data == BODY and st.st_size == len(BODY) and st.st_ino == os.lstat(blob).st_ino
        assert stat_and_read("blob", dir_fd=fd, head=16)[1] == BODY[:16]
        st, data = stat_and_read("blob", dir_fd=fd, max_bytes=len(BODY) - 1)
        assert data is None and st.st_size == len(BODY)
        os.symlink(blob, tmp_path / "link")
        os.mkfifo(tmp_path / "fifo")  # opened non-blocking: refused, never waited on
        with pytest.raises(OSError) as exc:
            stat_and_read("link", dir_fd=fd)
        assert exc.value.errno == errno.ELOOP
        with pytest.raises(NotRegularFile):
            stat_and_read("fifo", dir_fd=fd)
        with pytest.raises(FileNotFoundError):
            stat_and_read("gone", dir_fd=fd)
    finally:
        os.close(fd)


@pytest.mark.parametrize(
    "size", [0, 1, HASH_CHUNK - 1, HASH_CHUNK, HASH_CHUNK + 1, 3 * HASH_CHUNK + 7]
)
@pytest.mark.parametrize("hint", ["none", "right", "short", "long"])
def test_digest_file_hashes_every_byte_in_chunks(tmp_path, size, hint):
    import hashlib

    data = (bytes(range(251)) * (size // 251 + 1))[:size]
    p = tmp_path / "f"
    p.write_bytes(data)
    h = hashlib.sha256()
    n = digest_file(
        str(p),
        h,
        size_hint={"none": 0, "right": size, "short": max(size // 2, 1), "long": size + 9}[hint],
    )
    assert (n, h.hexdigest()) == (size, hashlib.sha256(data).hexdigest())


def test_digest_file_and_read_bytes_refuse_past_the_bound_unread(tmp_path):
    """A sparse file of gigabytes: refused from its size, never read into memory (the bound rule above)."""
    import hashlib
    import tracemalloc

    p = tmp_path / "sparse"
    with open(p, "wb") as f:
        f.truncate(3 << 30)
    tracemalloc.start()
    try:
        for call in (
            lambda: digest_file(str(p), hashlib.sha256(), max_bytes=1 << 20),
            lambda: read_bytes(str(p), max_bytes=1 << 20),
        ):
            with pytest.raises(OSError) as exc:
                call()
            assert exc.value.errno == errno.EFBIG
        h = hashlib.sha256()
        p.write_bytes(b"")
        with open(p, "wb") as f:
            f.truncate(64 << 20)
        assert digest_file(str(p), h) == 64 << 20  # under the bound: hashed whole, 1 MiB at a time
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 << 20
    want = hashlib.sha256()
    for _ in range(64):
        want.update(bytes(1 << 20))
    assert h.hexdigest() == want.hexdigest()


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("chunk", [1000, 4096, 1 << 20])
@pytest.mark.parametrize("hint", [0, 10, len(BODY), len(BODY) * 3])
def test_read_chunks_gives_every_byte_in_bounded_chunks_and_closes(blob, chunk, hint):
    from jitwarden.store.reads import read_chunks

    before = _open_fds()
    got = list(read_chunks(blob, chunk=chunk, size_hint=hint))
    assert b"".join(got) == BODY
    assert all(
        len(c) <= max(chunk, hint + 1) for c in got
    )  # a small file's one read may take its hinted size
    assert _open_fds() == before
    it = read_chunks(blob, chunk=1000)
    next(it)  # a reader that stops early: the fd goes with the generator
    del it
    assert _open_fds() == before


def test_read_chunks_refuses_what_is_no_regular_file_or_past_the_bound(tmp_path, blob):
    from jitwarden.store.reads import read_chunks

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFile):  # opened without blocking, then refused
        next(read_chunks(str(fifo)))
    link = tmp_path / "link"
    link.symlink_to(blob)
    with pytest.raises(OSError) as exc:
        next(read_chunks(str(link)))
    assert exc.value.errno == errno.ELOOP
    with pytest.raises(OSError) as exc:
        next(
            read_chunks(blob, max_bytes=len(BODY) - 1)
        )  # its size says so: refused before a byte is read
    assert exc.value.errno == errno.EFBIG and "jitwarden reads of such a file" in exc.value.strerror
