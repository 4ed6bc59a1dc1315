"""store/seal: a seal judged against bytes the caller holds, and against files read by the entry's fd.

``verify --quick`` reads an entry's group, metadata, cubin and PTX as it lists them; the seal check hashes
those very bytes (``held``) instead of opening each file again by path, and reads the others by the entry's
directory fd (``dir_fd``), never by a path resolved again (issue 43).
"""

from __future__ import annotations

import os

from jitwarden.store import seal
from jitwarden.store.paths import open_dir_at


def _sealed(cache) -> tuple[str, seal.Seal, str]:
    """(entry dir, its seal as read back, the name of its cubin) of a real kernel entry, sealed here."""
    root, records = cache
    entry = next(r["path"] for r in records.values() if r.get("arch") == 90)
    names = sorted(os.listdir(entry))
    seal.write(entry, seal.compute(entry, names))
    s = seal.read(entry)
    assert s is not None
    return entry, s, next(n for n in names if n.endswith(".cubin"))


def test_held_bytes_are_what_is_hashed(cache):
    entry, s, cubin = _sealed(cache)
    with open(os.path.join(entry, cubin), "rb") as f:
        data = f.read()
    assert seal.judge(entry, s, held={cubin: data}).messages == []
    # The bytes in hand are the ones judged: a tampered copy of the same size is refused by its digest,
    # though the file on disk still matches its seal; a shorter one by its size.
    tampered = data[:-1] + bytes([data[-1] ^ 1])
    problems = seal.judge(entry, s, held={cubin: tampered}).problems
    assert [(p.names, p.reason) for p in problems] == [((cubin,), seal.DIGEST)]
    problems = seal.judge(entry, s, held={cubin: data[:-1]}).problems
    assert [(p.names, p.reason) for p in problems] == [((cubin,), seal.SIZE)]


def test_the_other_files_are_read_by_the_entrys_fd(cache, tmp_path):
    entry, s, _cubin = _sealed(cache)
    fd = open_dir_at(entry)
    try:
        moved = str(tmp_path / "moved")
        os.rename(entry, moved)  # the path now names nothing; the fd still names the entry
        assert seal.judge(entry, s, dir_fd=fd).messages == []
        by_path = seal.judge(entry, s).problems
        assert {p.reason for p in by_path} == {seal.MISSING}
    finally:
        os.close(fd)
