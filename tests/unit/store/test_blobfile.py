"""A blob set aside on disk while it is written or downloaded (store/blobfile.py): hashed on the way, named as OCI
names a blob, read back whole from its start, found by no name, and never held in memory instead."""

from __future__ import annotations

import hashlib
import os

import pytest

from jitwarden.formats import tarball
from jitwarden.store.blobfile import BlobFile


def test_what_is_written_is_hashed_and_read_back_from_its_start(tmp_path):
    pieces = [b"a", os.urandom(3 << 20), bytearray(b"tail"), memoryview(b"view")]
    whole = b"".join(bytes(p) for p in pieces)
    with BlobFile(str(tmp_path)) as blob:
        assert [blob.write(p) for p in pieces] == [len(p) for p in pieces]
        assert blob.size == blob.tell() == len(whole)
        assert blob.digest == "sha256:" + hashlib.sha256(whole).hexdigest()
        assert b"".join(blob.chunks(size=1 << 20)) == whole
        assert max(len(c) for c in blob.chunks(size=1 << 20)) == 1 << 20
        with blob.reader() as r:
            assert r.read() == whole
        with blob.reader() as r:  # each reader starts at the start; closing it leaves the blob open
            assert r.read(1) == b"a"
        assert b"".join(blob.chunks()) == whole
        # unnamed: nothing another process can find, nothing left behind
        assert os.listdir(tmp_path) == []


def test_a_tar_written_into_it_reads_back(tmp_path):
    with BlobFile(str(tmp_path)) as blob:
        with tarball.open_writer(blob, gz=True) as tar:
            tarball.add_bytes(tar, "manifest.json", b"{}", 0)
        with blob.reader() as r, tarball.open_reader(r) as tar:
            (m,) = tar.getmembers()
            assert tarball.read_member(tar, m, 10) == b"{}"


def test_a_closed_blob_refuses_and_a_missing_dir_is_an_oserror(tmp_path):
    blob = BlobFile(str(tmp_path))
    blob.write(b"x")
    blob.close()
    blob.close()  # twice is fine
    with pytest.raises(ValueError, match="closed"):
        blob.write(b"y")
    with pytest.raises(OSError):
        BlobFile(str(tmp_path / "missing"))  # never memory instead (unlike tempdirs.Spill)


def test_an_empty_blob_is_the_empty_digest(tmp_path):
    with BlobFile(str(tmp_path)) as blob:
        assert blob.digest == "sha256:" + hashlib.sha256(b"").hexdigest()
        assert list(blob.chunks()) == []
        with blob.reader() as r:
            assert r.read() == b""
