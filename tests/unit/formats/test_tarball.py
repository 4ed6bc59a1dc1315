"""Tar files of signed bundles (formats/tarball.py): written from bytes, read member by member, a member handed
over only when it is a regular file within its bound; what is not a tar is one usage error."""

from __future__ import annotations

import io
import tarfile

import pytest

from jitwarden.formats import tarball
from jitwarden.model.errors import ExitStatus


def _written(gz: bool) -> bytes:
    buf = io.BytesIO()
    with tarball.open_writer(buf, gz) as tar:
        tarball.add_bytes(tar, "manifest.json", b'{"v": 1}', 1700000000.9)
        tarball.add_stream(tar, "blobs/a", io.BytesIO(b"x" * 5000), 5000, 0)
        link = tarfile.TarInfo("evil")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    return buf.getvalue()


@pytest.mark.parametrize("gz", [False, True])
def test_what_is_written_reads_back_member_by_member(gz):
    data = _written(gz)
    assert data[:2] == b"\x1f\x8b" if gz else data[257:262] == b"ustar"
    with tarball.open_reader(io.BytesIO(data)) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert tar.pax_headers is not None
        m = members["manifest.json"]
        assert (m.mode, m.mtime) == (0o644, 1700000000)
        assert tarball.read_member(tar, m, limit=8) == b'{"v": 1}'
        assert tarball.member_stream(tar, members["blobs/a"]).read() == b"x" * 5000


def test_a_member_past_its_bound_or_not_a_regular_file_is_refused():
    with tarball.open_reader(io.BytesIO(_written(False))) as tar:
        members = {m.name: m for m in tar.getmembers()}
        with pytest.raises(ValueError, match="not a regular file of at most 4999 bytes"):
            tarball.read_member(tar, members["blobs/a"], limit=4999)
        with pytest.raises(ValueError, match="evil: not a regular file"):
            tarball.read_member(tar, members["evil"], limit=1 << 20)
        with pytest.raises(ValueError, match="evil: not a regular file"):
            tarball.member_stream(tar, members["evil"])


@pytest.mark.parametrize("data", [b"", b"not a tar at all" * 100, b"\x1f\x8b\x08garbage"])
def test_what_is_not_a_tar_is_one_usage_error(data):
    with pytest.raises(tarball.NotATar) as exc:
        tarball.open_reader(io.BytesIO(data))
    assert str(exc.value) == "not a tar file" and exc.value.exit_code == ExitStatus.USAGE
    assert exc.value.__cause__ is None and exc.value.__suppress_context__


def test_a_reader_that_owns_its_file_closes_it():
    owned, lent = io.BytesIO(_written(False)), io.BytesIO(_written(False))
    tarball.open_reader(owned, owns=True).close()
    tarball.open_reader(lent).close()
    assert owned.closed and not lent.closed


def test_a_bundle_is_opened_as_it_is_written_never_by_trying_every_compression(tmp_path):
    """Issue 42: ``r:*`` tried xz and bz2 on a file that is not a plain tar, reading all of it: ``import`` of a
    gigabyte of zeros took 57 s to refuse. A gzip stream opens as gzip, anything else as a plain tar: the zeros
    are an empty tar at once (refused by the bundle reader for its missing manifest), a sparse file costing
    nothing to read."""
    import gzip
    import io

    from jitwarden.formats import tarball

    zeros = tmp_path / "z.tar"
    with open(zeros, "wb") as f:
        f.truncate(1 << 30)  # sparse: a gigabyte that costs nothing on disk
    with open(zeros, "rb") as f:
        assert tarball._mode(f) == "r:" and f.tell() == 0
        with tarball.open_reader(f) as t:
            assert t.getmembers() == []
    gz = io.BytesIO(gzip.compress(b"x"))
    assert tarball._mode(gz) == "r:gz" and gz.tell() == 0
