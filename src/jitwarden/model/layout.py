"""Names jitwarden adds inside cache roots, chosen so they can never be taken for a Triton entry.

Triton names entries by upper-case base32 (52 characters of ``A-Z2-7``); every
name here is lower case with a hyphen or a leading dot.
"""

PARTITIONS_DIR = "jitwarden-v1"
"""``<root>/jitwarden-v1/<fingerprint digest>/`` is one partition: a complete Triton cache dir."""

QUARANTINE_DIR = "jitwarden-quarantine"
"""``<root>/jitwarden-quarantine/<stamp>-<entry id>/``: entries moved aside, restorable."""

SEAL_FILE = ".jitwarden-seal.json"
"""Inside an entry: checksums and provenance of every file (see :mod:`jitwarden.store.seal`); in a JAX or CuPy
cache dir, of its entry files (see :mod:`jitwarden.runtime.flatseal`)."""

PARTITION_INFO = ".jitwarden-partition.json"
"""Inside a partition: its fingerprint and last use, for ``status`` and pruning."""

TRASH_DIR = ".jitwarden-trash"
"""``<root>/.jitwarden-trash/``: quarantine slots being deleted (renamed here first, then removed)."""

# Two locks, one file name. The root lock and the entry lock live in different directories, so
# the shared name never makes them one file; it stays shared on disk because jitwarden's own
# version is not part of the partition fingerprint (and JITWARDEN_PARTITION=0 shares the root
# itself): two jitwarden versions, say a CLI from pipx and the guard in a training venv, act on
# the same entries, and a renamed lock file would let them miss each other's locks.

ROOT_LOCK_FILE = ".jitwarden-lock"
"""``<root>/.jitwarden-lock``: held exclusively by commands that change the root (see :mod:`jitwarden.store.locks`)."""

ENTRY_LOCK_FILE = ".jitwarden-lock"
"""``<entry>/.jitwarden-lock``: shared while verifying an entry, exclusive while sealing or quarantining it
(see :mod:`jitwarden.store.entrylock`)."""

ENTRY_WRITERS_FILE = ".jitwarden-writers"
"""``<entry>/.jitwarden-writers``: held shared by each writer of the entry, from its first file to its group."""

PROVING_DIR = ".jitwarden-proving"
"""``<tree>/.jitwarden-proving/<key>/``: unsealed kernel entries hidden from the workload while a prover
in the background rebuilds them (see :mod:`jitwarden.runtime.prover`); that prover holds its lock file."""

PULLED_FILE = "pulled.json"
"""``<config dir>/pulled.json``: per registry tag and fingerprint, the signed ``created`` time and manifest digest of
the newest bundle ``pull`` installed on this node (``store/pulled``), so a tag moved back is noticed."""

STATS_DIR = "stats"
"""``<jitwarden home>/stats/``: what ``verify`` and ``budget`` last found, and each remote-guarded process's counters
(``remote-<pid>.json``), read by ``metrics``."""

RECORDS_DIR = "records"
"""``<jitwarden home>/records/<fingerprint digest>/<workload>.jsonl``: one line per kernel hit or compile of a
recorded workload (``run --record``), one more per kernel a bundle listed (see :mod:`jitwarden.runtime.record`)."""

RECORD_SUFFIX = ".jsonl"
_RECORD_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


def record_file(workload: str) -> str | None:
    """The file name of workload ``workload``'s record (``/`` as ``--``: ``Qwen/Qwen2-7B`` -> ``Qwen--Qwen2-7B.jsonl``);
    None for a name that cannot be one (empty, over 200 characters, a character outside ``A-Za-z0-9._-/``)."""
    flat = workload.replace("/", "--")
    if not flat or len(flat) > 200 or flat.startswith(".") or not _RECORD_CHARS.issuperset(flat):
        return None
    return flat + RECORD_SUFFIX


def record_relpath(workload: str, digest: str) -> str | None:
    """``records/<digest>/<file>``: where workload ``workload``'s record for ``digest`` lies under jitwarden's home."""
    leaf = record_file(workload)
    return (
        None
        if leaf is None or "/" in digest or digest in ("", ".", "..")
        else f"{RECORDS_DIR}/{digest}/{leaf}"
    )


USES_DIR = ".jitwarden-uses"
"""``<root>/.jitwarden-uses/``: the use log (:mod:`jitwarden.store.uselog`): ``<pid>.<token>.log``, one per guarded
process, holding ``<ns>\t<entry id>`` lines of the entries it was served (its shared lock held while it lives), and
``uses.tsv``, what ``budget`` kept of the logs of processes that ended."""

RESERVED = frozenset({PARTITIONS_DIR, QUARANTINE_DIR})


def is_reserved(name: str) -> bool:
    return name in RESERVED or name.startswith(".jitwarden")


# ---------------------------------------------------------------- names Triton's writers leave behind
# Matched with str methods, not regexes: activation imports this module in every process.

TMP_DIR_PREFIX = "tmp.pid_"
"""Triton >= 3.2 writes an entry's files into ``<entry>/tmp.pid_<pid>_<uuid>/``, then renames each out."""

TMP_FILE_INFIX = ".tmp.pid_"
"""Triton <= 3.1 wrote ``<file>.tmp.pid_<pid>_<uuid>``, then renamed it to ``<file>``."""


def _pid_tag(rest: str) -> bool:
    """Whether ``rest`` starts with ``<pid>_`` (one or more digits, then an underscore)."""
    pid, sep, _ = rest.partition("_")
    return bool(sep) and pid.isdecimal()


def is_tmp_dir(name: str) -> bool:
    """A Triton writer's temporary directory name (``tmp.pid_<pid>_…``)."""
    return name.startswith(TMP_DIR_PREFIX) and _pid_tag(name[len(TMP_DIR_PREFIX) :])


def is_tmp_file(name: str) -> bool:
    """A Triton writer's temporary file name (``….tmp.pid_<pid>_…``)."""
    at = name.find(TMP_FILE_INFIX)
    while at >= 0:
        if _pid_tag(name[at + len(TMP_FILE_INFIX) :]):
            return True
        at = name.find(TMP_FILE_INFIX, at + 1)
    return False


def is_write_leftover(name: str) -> bool:
    """Either of a writer's temporary names: what an interrupted write leaves behind."""
    return is_tmp_dir(name) or is_tmp_file(name)
