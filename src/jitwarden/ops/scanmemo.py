"""The scan's memo: an entry judged once is judged again only when the stat of its dir or of a file in it moved.

``verify --quick`` over a cache that did not change reads every file of it at every run, where a stat of each
says as much: a file's ctime moves on any change to it and nobody but root can set it back, and a dir's moves on
any name added, removed or renamed in it (git's index, by the same rule). So for each root (and judge) the scan
keeps, in ``memo_dir()/scan/``, each entry an adapter's :class:`~jitwarden.adapters.EntryMemo` stamped (Triton's
quick path: the stat of its dir and of every file in it, and what it judged), and next time rebuilds the same
entry from it while every stat is the same; anything else is judged from its bytes as before.

What it cannot see: bytes changed under an unchanged ctime (a disk's own corruption, a write to the raw device),
which ``JITWARDEN_SCAN_MEMO=0`` reads for again; ``--rebuild`` proves from the bytes either way. A stamp taken
within :data:`RACY_NS` of the scan's start is not kept (a change in the same clock tick keeps a ctime). The memo
is keyed by everything its verdicts depend on (the root's path and identity, the judge but its clock, the root
owner the ownership rule judges for, the stat of every seal key file (none is made), and the stat of the judging code's files), read only
when this user alone could have written it (``store/reads.read_private``), and any doubt is a miss.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import sys
import time
from typing import Any

from jitwarden import adapters
from jitwarden.formats import jsonlimits
from jitwarden.model.entries import Judge
from jitwarden.model.settings import SCAN_MEMO
from jitwarden.store import sealkey
from jitwarden.store.paths import memo_dir
from jitwarden.store.reads import NotPrivate, read_private

SCHEMA = 1
HEADER = b"jitwarden-scan-memo 1\n"
"""The file: this line, then a line per entry: its name, a tab, its record as JSON (decoded only where the entry
is recalled: a worker, never the whole file at once)."""
DIR = "scan"
RACY_NS = 2_000_000_000
MAX_BYTES = 256 << 20
"""~400 bytes an entry: a root of more than ~600,000 entries is read at every scan."""
KEEP = 32
"""Memos kept (the newest by use): one per root and judge."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class RootMemo:
    """The records of one root for one judge (``path``: its file; each record its JSON bytes, by entry name)."""

    path: str
    records: dict[str, bytes]
    cut_ns: int  # stamps newer than this are not kept

    def save(self, names: list[str], fresh: dict[str, tuple[Any, int] | None], whole: bool) -> None:
        """Keep, for the ``names`` scanned, the records that held and the ``fresh`` ones (name -> (record,
        newest ctime), None: not memoisable) taken before :attr:`cut_ns`; entries not scanned stay unless the
        scan was of the ``whole`` root. Written only when it changed; never raises."""
        old = self.records
        kept = {n: old[n] for n in names if n in old and n not in fresh}
        for n, got in fresh.items():
            if got is not None and got[1] < self.cut_ns and "\t" not in n and "\n" not in n:
                kept[n] = json.dumps(got[0], separators=(",", ":")).encode()
        if not whole:
            kept = {**old, **kept}
        if kept == old:
            return
        data = HEADER + b"".join(b"%s\t%s\n" % (n.encode(), r) for n, r in kept.items())
        try:
            from jitwarden.store.atomic import write_private

            write_private(self.path, data, ".scan-memo.", under=memo_dir(), keep=KEEP)
        except (OSError, ValueError):
            pass  # the next scan reads the bytes again: never an error of the scan's


def decode(raw: bytes) -> Any:
    """A record as its adapter's ``recall`` takes it; None when it is not JSON."""
    try:
        return jsonlimits.loads(raw)
    except (ValueError, UnicodeError):
        return None


def open_memo(kind: str, root: str, judge: Judge, root_uid: int | None) -> RootMemo | None:
    """The memo of ``root`` for ``judge`` (empty when there is none yet); None when the kind has no
    :class:`~jitwarden.adapters.EntryMemo`, the setting is off, or the memo dir is not this user's alone."""
    if adapters.memo_of(kind) is None or not SCAN_MEMO.on(os.environ):
        return None
    cut = time.time_ns() - RACY_NS
    try:
        path = os.path.join(memo_dir(), DIR, f"{kind}-{_key(kind, root, judge, root_uid)}.memo")
        raw = read_private(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        return RootMemo(path=path, records={}, cut_ns=cut)
    except (NotPrivate, OSError, ValueError):
        return None
    return RootMemo(path=path, records=_parse(raw), cut_ns=cut)


def _parse(raw: bytes) -> dict[str, bytes]:
    """The records of a memo file; none when it is not one (another schema, a name not UTF-8)."""
    if not raw.startswith(HEADER):
        return {}
    try:  # split as bytes: only the names are decoded (a record is decoded when recalled)
        return {
            name.decode(): record
            for name, record in (
                line.split(b"\t", 1) for line in raw[len(HEADER) :].split(b"\n") if b"\t" in line
            )
        }
    except UnicodeDecodeError:
        return {}


def _key(kind: str, root: str, judge: Judge, root_uid: int | None) -> str:
    """What every verdict of the memo depends on, hashed: a change of any is another memo."""
    st = os.stat(root)
    judged = {f.name: getattr(judge, f.name) for f in dataclasses.fields(judge) if f.name != "now"}
    parts = [
        SCHEMA,
        kind,
        os.path.realpath(root),
        st.st_dev,
        st.st_ino,
        repr(sorted(judged.items())),
        root_uid,
        sealkey.key_stamps() if judge.check_seals else None,
        _code_stamp(kind),
    ]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()[:24]


def _code_stamp(kind: str) -> list:
    """The stat of the modules that judge ``kind``'s memoised entries (a checkout edited in place judges anew)."""
    prefix = f"{adapters.__name__}.{kind}"
    out = []
    for name, mod in sorted(sys.modules.items()):
        file = getattr(mod, "__file__", None)
        if name.startswith(prefix) and file:
            st = os.stat(file)
            out.append([name, st.st_size, st.st_mtime_ns])
    return out
