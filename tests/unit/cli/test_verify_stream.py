"""``verify --quick --format json`` streams its entries (issue 25): each chunk is encoded where it was judged and
set aside on disk, never all held; the document is the one the whole report gives, byte for byte."""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import pytest

from jitwarden.cli.main import main
from jitwarden.cli.render import output
from jitwarden.model.entries import CacheRoot
from jitwarden.ops import scan
from jitwarden.store.tempdirs import Spill


def damaged(root: str, recs: dict) -> None:
    """Findings of several codes and severities, in entries spread over the root's sorted names."""

    def f(label, ext):
        return os.path.join(recs[label]["path"], f"{recs[label]['name']}.{ext}")

    cubin = f("add_sm90", "cubin")
    with open(cubin, "r+b") as fh:
        fh.truncate(os.path.getsize(cubin) // 2)  # corrupt
    shutil.copyfile(f("sub_sm90", "cubin"), f("matmul_sm90", "cubin"))  # mismatch
    os.unlink(f("add_b256_sm90", "ptx"))  # incomplete
    os.mkdir(os.path.join(root, "tmp.jitwarden-" + "0" * 32))  # a staging dir: its own type
    # Names that JSON escapes: a quote and a non-ASCII character in an entry's directory name.
    shutil.copytree(recs["sub_sm80"]["path"], os.path.join(root, 'caf\u00e9 "quoted"'))


def verify_json(capsys, monkeypatch, *args, streamed: bool, tty: bool = False) -> str:
    """What ``verify --format json ARGS`` prints, by the streamed path or (``streamed`` False) the whole report."""
    with monkeypatch.context() as m:
        m.setattr(output.JsonFormat, "streams", streamed)
        m.setattr(sys.stdout, "isatty", lambda: tty)
        main(["verify", "--format", "json", *args])
    return capsys.readouterr().out


def same(a: str, b: str) -> bool:
    """Whether two documents are the same bytes, ``elapsed_s`` aside (the one field that differs run to run)."""

    def blank(text):
        return re.sub(r'"elapsed_s": ?[0-9.eE+-]+', '"elapsed_s":_', text)

    return blank(a) == blank(b)


@pytest.mark.parametrize("pool", [False, True], ids=["one-process", "pool"])
@pytest.mark.parametrize("tty", [False, True], ids=["compact", "indented"])
@pytest.mark.parametrize(
    "codes", [(), ("mismatch", "corrupt"), ("stale",)], ids=["all", "codes", "none-listed"]
)
def test_streamed_json_is_the_whole_reports_byte_for_byte(
    cache, built_cache, capsys, monkeypatch, pool, tty, codes
):
    root, recs = cache
    damaged(root, recs)
    if pool:  # several chunks in worker processes, merged in order
        monkeypatch.setattr(scan, "PARALLEL_THRESHOLD", 1)
        monkeypatch.setattr(scan, "CHUNK", 3)
    else:
        monkeypatch.setattr(scan, "CHUNK", 4)
    args = [root, built_cache[0], "--target", "90", *[w for c in codes for w in ("--code", c)]]
    whole = verify_json(capsys, monkeypatch, *args, streamed=False, tty=tty)
    streamed = verify_json(capsys, monkeypatch, *args, streamed=True, tty=tty)
    assert same(streamed, whole)
    doc = json.loads(streamed)
    assert doc["summary"]["errors"] >= 3 and len(doc["caches"]) == 2
    if not codes:
        assert len(doc["entries"]) == doc["summary"]["entries"]
        assert '"caf\\u00e9 \\"quoted\\"' in streamed
    else:
        assert all(any(f["code"] in codes for f in e["findings"]) for e in doc["entries"])
        assert len(doc["entries"]) == (2 if "mismatch" in codes else 0)


def test_streamed_json_of_an_empty_root(tmp_path, capsys, monkeypatch):
    root = tmp_path / "triton"
    (root / "jitwarden-quarantine").mkdir(
        parents=True
    )  # a Triton root by jitwarden's own evidence, no entry
    for tty in (False, True):
        whole = verify_json(
            capsys, monkeypatch, str(root), "--target", "90", streamed=False, tty=tty
        )
        assert same(
            verify_json(capsys, monkeypatch, str(root), "--target", "90", streamed=True, tty=tty),
            whole,
        )
        assert json.loads(whole)["entries"] == []


def test_streamed_scan_hands_on_each_chunk_before_judging_the_next(cache, monkeypatch):
    """Memory flat in the number of entries: no more than one chunk of entries exists at a time."""
    root, recs = cache
    monkeypatch.setattr(scan, "CHUNK", 2)
    events = []

    def emit(entries):
        events.append(("emit", len(entries)))
        return [e.id for e in entries]

    got = []

    def sink(ids):
        events.append(("sink", len(ids)))
        got.extend(ids)

    judge = scan.make_judge(90)
    report = scan.scan_streamed(
        [(CacheRoot(kind="triton", path=root, source="cli"), None)],
        judge,
        scan.Target(90, "cli"),
        emit,
        sink,
    )
    whole = scan.scan(
        [(CacheRoot(kind="triton", path=root, source="cli"), None)], judge, scan.Target(90, "cli")
    )
    assert got == [e.id for e in whole.entries]
    assert events == [
        ev for n in [len(c) for c in _chunks(got, 2)] for ev in (("emit", n), ("sink", n))
    ]
    assert report.summary() == whole.summary() and report.worst == whole.worst
    assert [c.to_json() for c in report.caches] == [c.to_json() for c in whole.caches]


def _chunks(xs, n):
    return [xs[i : i + n] for i in range(0, len(xs), n)]


def test_spill_reads_back_what_was_written_and_leaves_no_name(tmp_path):
    pieces = [os.urandom(n) for n in (0, 1, 5000, 70000)]
    with Spill(str(tmp_path)) as spill:
        for p in pieces:
            spill.write(p)
        assert os.listdir(tmp_path) == []  # an unnamed file: nothing to find, nothing left behind
        assert b"".join(spill.chunks(size=4096)) == b"".join(pieces)
        assert all(len(c) <= 4096 for c in spill.chunks(size=4096))


def test_spill_where_no_file_can_be_made_holds_the_bytes_in_memory(tmp_path):
    with Spill(str(tmp_path / "missing")) as spill:
        spill.write(b"abc")
        spill.write(b"def")
        assert b"".join(spill.chunks()) == b"abcdef"


def grown_tree(src_entry: str, dst: str, n: int) -> str:
    """``n`` copies of one real Triton entry under fresh kernel keys (their findings do not matter here)."""
    import base64
    import hashlib

    os.makedirs(dst)
    for i in range(n):
        key = base64.b32encode(hashlib.sha256(f"{dst}-{i}".encode()).digest()).decode().rstrip("=")
        shutil.copytree(src_entry, os.path.join(dst, key))
    return dst


def test_streamed_verify_holds_no_more_for_four_times_the_entries(
    cache, tmp_path, capsys, monkeypatch
):
    """Peak memory flat in the number of entries: what the process allocates at its peak grows by no more than
    the sorted entry names (~110 bytes an entry) from N to 4N entries; the whole report holds ~5 KB an entry."""
    import tracemalloc

    root, recs = cache
    monkeypatch.setattr(
        scan, "PARALLEL_THRESHOLD", 10**9
    )  # this process judges every chunk: all of it is traced
    monkeypatch.setattr(scan, "CHUNK", 50)  # at most one chunk of entries is alive at a time
    peaks = {}
    for n in (150, 600):
        tree = grown_tree(recs["add_sm90"]["path"], str(tmp_path / f"t{n}"), n)
        with (
            open(os.devnull, "w") as null,
            monkeypatch.context() as m,
        ):  # the printed document is not held either
            m.setattr(sys, "stdout", null)
            tracemalloc.start()
            try:
                main(["verify", "--format", "json", tree, "--target", "90"])
                peaks[n] = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
        assert (
            json.loads(verify_json(capsys, monkeypatch, tree, "--target", "90", streamed=True))[
                "summary"
            ]["entries"]
            == n
        )
    assert peaks[600] - peaks[150] < 450 * 1000, peaks


def test_a_pool_judges_the_entries_one_process_does_in_its_order(
    cache, built_cache, capsys, monkeypatch
):
    """Chunks judged in worker processes, the last ones cut smaller so that no worker waits long for another,
    make the same document as one process judging them all: each entry under its own root, in order."""
    root, recs = cache
    damaged(root, recs)
    args = [root, built_cache[0], "--target", "90", "--all"]
    monkeypatch.setattr(
        scan, "CHUNK", 5
    )  # several chunks per root, the last two cut in entries of one
    alone = verify_json(capsys, monkeypatch, *args, streamed=True)
    monkeypatch.setattr(scan, "PARALLEL_THRESHOLD", 1)
    pooled = verify_json(capsys, monkeypatch, *args, streamed=True)
    assert same(pooled, alone)
    doc = json.loads(pooled)
    assert [c["entries"] for c in doc["caches"]] == [
        len(os.listdir(root)),
        len(os.listdir(built_cache[0])),
    ]
