"""The survey reads the files a Triton entry's reader needs as it lists them (one open each gives the file's stat
and bytes, ARCHITECTURE.md "The flow of one command"). What a user relies on: the verdict is the one a plain
survey and separate reads give, a file swapped for something else between the listing and the open is
recorded as what it is then (never read, never waited on), and large or many files are still judged whole."""

from __future__ import annotations

import os

import pytest

from jitwarden.adapters import surveys, triton, triton_read
from jitwarden.model.entries import Judge

JUDGE = Judge(target_arch=90, host_machine="x86_64")


def _entry(cache) -> str:
    root, records = cache
    rec = next(r for r in records.values() if r["arch"] == 90)
    return rec["path"]


def _verdict(path: str):
    e = triton.inspect_entry(os.path.dirname(path), os.path.basename(path), JUDGE)
    return e.type, e.findings, e.facts, e.bytes, e.name


def test_it_reads_what_the_reader_needs_and_each_file_stat_is_the_files(cache):
    path = _entry(cache)
    with surveys.surveyed(
        os.path.dirname(path),
        os.path.basename(path),
        nested=False,
        links_within=path,
        reading=triton_read.READING,
    ) as (sv, _fd):
        pass
    names = sorted(os.listdir(path))
    wanted = {n for n in names if n.endswith((".json", ".cubin", ".ptx"))}
    assert (
        set(sv.read) == wanted and len(wanted) == 4
    )  # group, metadata, cubin, PTX; not the IR dumps
    for n in wanted:
        with open(os.path.join(path, n), "rb") as f:
            assert sv.read[n] == (f.read(triton_read.PTX_HEAD) if n.endswith(".ptx") else f.read())
    plain = surveys.survey(
        os.path.dirname(path), os.path.basename(path), nested=False, links_within=path
    )
    assert sv.files == plain.files and plain.read is None  # the same File records as lstat gives


def _swap(what: str, victim: str):
    def now(entry: str) -> None:
        p = os.path.join(entry, victim)
        os.unlink(p)
        if what == "fifo":
            os.mkfifo(p)
        elif what == "link":
            os.symlink("/etc/passwd", p)
        elif what == "dir":
            os.mkdir(p)

    return now


@pytest.mark.parametrize("what", ["fifo", "link", "dir", "gone"])
def test_a_file_swapped_between_the_listing_and_the_open_is_recorded_as_what_it_is(cache, what):
    """The reading rule's hook runs after the listing and before the open: the race, made certain."""
    path = _entry(cache)
    victim = next(n for n in os.listdir(path) if n.endswith(".cubin"))
    swap = _swap(what, victim)

    def head(name: str):
        if name == victim:
            swap(path)
        return triton_read.read_while_listing(name)

    with surveys.surveyed(
        os.path.dirname(path),
        os.path.basename(path),
        nested=False,
        links_within=path,
        reading=surveys.Reading(head),
    ) as (sv, _fd):
        pass
    assert victim not in (sv.read or {})
    # Recorded as a survey made now records it: as a FIFO (never opened again), a link, a dir, or not at all.
    now = surveys.survey(
        os.path.dirname(path), os.path.basename(path), nested=False, links_within=path
    )
    assert (sv.files, sv.links, sv.dirs, sv.others) == (now.files, now.links, now.dirs, now.others)
    assert victim not in {f.name for f in sv.files}
    if what != "gone":
        assert victim in {x.name for x in (*sv.others, *sv.links, *sv.dirs)}
        assert any(f.severity.name == "ERROR" for f in _verdict(path)[1])


def test_a_cubin_past_the_bound_and_files_past_the_count_are_still_read_whole(cache, tmp_path):
    path = _entry(cache)
    before = _verdict(path)
    # A cubin larger than the survey reads (1 MiB): ELF headers are found by offset, so padding keeps it valid.
    cubin = next(n for n in os.listdir(path) if n.endswith(".cubin"))
    with open(os.path.join(path, cubin), "ab") as f:
        f.write(b"\0" * (3 << 20))
    for i in range(
        20
    ):  # more JSON files than the survey reads an entry (8): the reader reads the rest itself
        with open(os.path.join(path, f"aaa{i:02}.json"), "w") as f:
            f.write("{}")
    with surveys.surveyed(
        os.path.dirname(path),
        os.path.basename(path),
        nested=False,
        links_within=path,
        reading=triton_read.READING,
    ) as (sv, _fd):
        pass
    assert cubin not in sv.read and len(sv.read) <= triton_read.READING.most
    after = _verdict(path)
    assert after[0] == before[0] and after[2] == before[2] and after[2].cubin_sm == 90
    assert [f.code for f in after[1]] == [f.code for f in before[1]]
    assert after[3] == before[3] + (3 << 20) + 20 * 2
