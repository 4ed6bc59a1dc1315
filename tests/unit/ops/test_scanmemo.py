"""The scan's memo (ops/scanmemo.py, issue 43): a Triton entry judged once is judged again only when the stat of its
dir or of a file in it moved. What a user relies on: a re-scan of an unchanged cache gives the very report the
scan from the bytes gives, without reading a file of it; every change another process or user can make (bytes
rewritten in place at the same size and mtime, a file swapped in by rename, a mode or owner change, a file added
or removed) is judged again from the bytes, so no finding is lost; a memo it cannot trust (another's dir, garbage,
another judge, the setting off) is no memo. On real Triton compiles (the session's cache)."""

from __future__ import annotations

import os
import shutil

import pytest

from jitwarden.adapters import triton_quick
from jitwarden.model.entries import CacheRoot
from jitwarden.ops import scan, scanmemo
from jitwarden.store.paths import memo_dir


@pytest.fixture(autouse=True)
def no_racy_window(monkeypatch):
    """The entries are copied a moment before they are scanned: the 2 s racy window would keep none of them."""
    monkeypatch.setattr(scanmemo, "RACY_NS", 0)


@pytest.fixture
def reads(monkeypatch):
    """How many files the quick path opened for their bytes."""
    n = [0]
    real = triton_quick.stat_and_read

    def counted(*a, **k):
        n[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(triton_quick, "stat_and_read", counted)
    return n


def _scan(root: str, arch: int = 90, triton: str | None = None):
    report = scan.scan(
        [(CacheRoot(kind="triton", path=root, source="cli"), None)],
        scan.make_judge(arch, triton_version=triton),
        scan.Target(arch, "cli"),
        jobs=1,
    )
    return {e.id: e for e in report.entries}


def _file(entry: str, suffix: str) -> str:
    return os.path.join(entry, next(f for f in os.listdir(entry) if f.endswith(suffix)))


def test_a_rescan_of_an_unchanged_cache_reads_no_file_and_gives_the_same_entries(
    cache, reads, monkeypatch
):
    root, _ = cache
    first = _scan(root)
    assert reads[0] > 0 and first
    reads[0] = 0
    again = _scan(root)
    assert reads[0] == 0
    assert again == first
    monkeypatch.setenv("JITWARDEN_SCAN_MEMO", "0")  # the same report read from the bytes
    assert _scan(root) == first and reads[0] > 0


@pytest.mark.parametrize(
    "change", ["same_size_same_mtime", "renamed_over", "chmod_o+w", "added", "removed", "fifo"]
)
def test_every_change_is_judged_again_from_the_bytes(cache, reads, change, monkeypatch):
    root, records = cache
    entry = next(
        r["path"] for r in records.values() if r.get("arch") == 90 and os.path.isdir(r["path"])
    )
    name = os.path.basename(entry)
    before = _scan(root)[name]
    assert not before.findings
    cubin = _file(entry, ".cubin")
    st = os.stat(cubin)
    if (
        change == "same_size_same_mtime"
    ):  # its ELF magic overwritten in place, size and mtime put back
        with open(cubin, "r+b") as f:
            f.write(b"\0\0\0\0")
        os.utime(cubin, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif change == "renamed_over":  # another entry's cubin renamed over this one's
        other = _file(
            next(
                os.path.join(root, n)
                for n in sorted(os.listdir(root))
                if n != name
                and any(f.endswith(".cubin") for f in os.listdir(os.path.join(root, n)))
            ),
            ".cubin",
        )
        shutil.copy(other, cubin + ".new")
        os.replace(cubin + ".new", cubin)
    elif change == "chmod_o+w":
        os.chmod(cubin, 0o666)
    elif change == "added":
        with open(os.path.join(entry, "planted.so"), "wb") as f:
            f.write(b"\x7fELF")
    elif change == "removed":
        os.unlink(_file(entry, ".ttir"))
    else:  # a FIFO where a file was: a reader that opened it would block
        ttir = _file(entry, ".ttir")
        os.unlink(ttir)
        os.mkfifo(ttir)
    reads[0] = 0
    after = _scan(root)
    assert reads[0] > 0  # read again
    monkeypatch.setenv("JITWARDEN_SCAN_MEMO", "0")
    assert after == _scan(root)  # what the bytes say now, every entry
    assert after[name].findings  # what the bytes say now


def test_another_judge_is_another_memo(cache, reads):
    root, _ = cache
    here = _scan(root)
    older = _scan(root, triton="0.0.1")  # a judge of another Triton: every kernel stale
    assert any(f.code == "stale" for e in older.values() for f in e.findings)
    assert not any(f.code == "stale" for e in here.values() for f in e.findings)
    reads[0] = 0
    assert _scan(root) == here and _scan(root, triton="0.0.1") == older and reads[0] == 0


def _memo_files() -> list[str]:
    d = os.path.join(memo_dir(), scanmemo.DIR)
    return [os.path.join(d, n) for n in os.listdir(d)] if os.path.isdir(d) else []


def test_a_memo_of_garbage_or_forged_records_is_read_again_never_believed(cache, reads):
    root, _ = cache
    first = _scan(root)
    (path,) = _memo_files()
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    names = [ln.split(b"\t", 1)[0] for ln in lines[1:] if ln]
    # each record replaced: a record of another entry, broken JSON, a made-up finding code, not a list
    forged = [lines[0]]
    other = lines[2].split(b"\t", 1)[1]
    for i, n in enumerate(names):
        forged.append(
            n
            + b"\t"
            + [
                other,
                b"[1,",
                b'[[],"x",["kernel",null,90,1,0.0,false,[["nope","m",""]],[]]]',
                b"7",
            ][i % 4]
        )
    with open(path, "wb") as f:
        f.write(b"\n".join(forged) + b"\n")
    reads[0] = 0
    assert _scan(root) == first and reads[0] > 0
    with open(path, "wb") as f:
        f.write(os.urandom(4096))
    assert _scan(root) == first


def test_a_memo_dir_another_user_could_write_is_no_memo(cache, reads):
    root, _ = cache
    first = _scan(root)
    d = os.path.join(memo_dir(), scanmemo.DIR)
    os.chmod(d, 0o777)
    reads[0] = 0
    assert _scan(root) == first and reads[0] > 0  # not read
    reads[0] = 0
    assert _scan(root) == first and reads[0] > 0  # nor written


def test_the_setting_off_keeps_no_memo(cache, monkeypatch):
    monkeypatch.setenv("JITWARDEN_SCAN_MEMO", "0")
    _scan(cache[0])
    assert _memo_files() == []


def test_stamps_taken_in_the_racy_window_are_not_kept(cache, reads, monkeypatch):
    monkeypatch.setattr(scanmemo, "RACY_NS", 3600 * 10**9)
    root, _ = cache
    _scan(root)
    reads[0] = 0
    _scan(root)
    assert reads[0] > 0


def test_the_memo_makes_no_seal_key_and_a_key_made_later_is_another_memo(cache, reads):
    """Keyed by the stat of the seal key files, never by keys it would make: a scan of an unsealed cache writes
    no key (a root under ``sudo -E`` would have written one into its own real home)."""
    from jitwarden.store import sealkey

    shutil.rmtree(os.path.join(sealkey.config_dir(), sealkey.KEY_DIR), ignore_errors=True)
    sealkey.forget()
    root, _ = cache
    first = _scan(root)
    assert not os.path.exists(os.path.join(sealkey.config_dir(), sealkey.KEY_DIR))
    reads[0] = 0
    sealkey.own_key()  # a key made: the seals it would judge are judged again
    assert _scan(root) == first and reads[0] > 0
