"""The use log (issue 45): what the runtime writes on a hit, what ``budget`` reads from it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from jitwarden.model.layout import USES_DIR
from jitwarden.store import uselog
from tests.helpers.paths import SRC

HOLDER = textwrap.dedent(
    """
    import sys
    from jitwarden.store import uselog
    for eid in sys.argv[2:]:
        uselog.used(sys.argv[1], eid)
        uselog.used(sys.argv[1], eid)  # rate-limited: one line each
    print("logged", flush=True)
    sys.stdin.read()  # held until the test closes our stdin
    """
)


def _holder(root: str, *ids: str) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=SRC)
    p = subprocess.Popen(
        [sys.executable, "-c", HOLDER, root, *ids],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "logged"
    return p


def test_a_live_process_pins_what_it_logged_and_its_log_is_merged_after_it_ends(tmp_path):
    root = str(tmp_path / "part")
    os.mkdir(root)
    p = _holder(root, "AAAA", "fxgraph/ab/fabc")
    try:
        uses = uselog.read(root)
        assert uses.live == {"AAAA", "fxgraph/ab/fabc"} and uses.live_logs == 1
        assert set(uses.last) == {"AAAA", "fxgraph/ab/fabc"} and not uses.ended
        logs = [n for n in os.listdir(os.path.join(root, USES_DIR)) if n.endswith(".log")]
        assert len(logs) == 1
        with open(os.path.join(root, USES_DIR, logs[0]), "rb") as f:
            assert len(f.read().splitlines()) == 2  # the second call of each was rate-limited
    finally:
        assert p.stdin is not None
        p.stdin.close()
        p.wait(timeout=60)
    uses = uselog.read(root)
    assert uses.live == frozenset() and uses.live_logs == 0 and len(uses.ended) == 1
    uselog.compact(root, uses, keep={"AAAA"})  # fxgraph/ab/fabc: gone since
    assert sorted(os.listdir(os.path.join(root, USES_DIR))) == [uselog.COMPACT_FILE]
    again = uselog.read(root)
    assert dict(again.last) == {"AAAA": uses.last["AAAA"]} and not again.live


def test_used_never_raises_where_it_cannot_log(tmp_path):
    uselog.used(str(tmp_path / "no-such-root"), "AAAA")
    f = tmp_path / "a-file"
    f.write_text("")
    uselog.used(str(f), "AAAA")
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / USES_DIR).symlink_to(tmp_path)  # not what jitwarden made: refused, silently
    uselog.used(str(tmp_path / "r"), "AAAA")
    assert not [n for n in os.listdir(tmp_path) if n.endswith(".log")]


def test_parse_keeps_the_latest_time_and_skips_what_is_not_a_line():
    raw = b"2000000000\tA\nxx\tB\n3000000000\tA\n\n1000000000\tC\ngarbage\n"
    assert uselog.parse(raw) == {"A": 3.0, "C": 1.0}


def test_a_log_that_is_no_regular_file_is_unreadable_not_fatal(tmp_path):
    root = tmp_path / "part"
    (root / USES_DIR).mkdir(parents=True)
    os.mkfifo(root / USES_DIR / "12.abcd.log")
    uses = uselog.read(str(root))  # O_NONBLOCK: a FIFO never blocks the reader
    assert uses.unreadable and uses.unreadable[0][0] == "12.abcd.log" and not uses.last
