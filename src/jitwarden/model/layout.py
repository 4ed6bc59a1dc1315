"""Names jitwarden adds inside cache roots, chosen so they can never be taken for a Triton entry.

Triton names entries by upper-case base32 (52 characters of ``A-Z2-7``); every
name here is lower case with a hyphen or a leading dot.
"""

PARTITIONS_DIR = "jitwarden-v1"
"""``<root>/jitwarden-v1/<fingerprint digest>/`` is one partition: a complete Triton cache dir."""

QUARANTINE_DIR = "jitwarden-quarantine"
"""``<root>/jitwarden-quarantine/<stamp>-<entry id>/``: entries moved aside, restorable."""

SEAL_FILE = ".jitwarden-seal.json"
"""Inside an entry: checksums and provenance of every file (see :mod:`jitwarden.store.seal`)."""

PARTITION_INFO = ".jitwarden-partition.json"
"""Inside a partition: its fingerprint and last use, for ``status`` and pruning."""

TRASH_DIR = ".jitwarden-trash"
"""``<root>/.jitwarden-trash/``: quarantine slots being deleted (renamed here first, then removed)."""

RESERVED = frozenset({PARTITIONS_DIR, QUARANTINE_DIR})


def is_reserved(name: str) -> bool:
    return name in RESERVED or name.startswith(".jitwarden")
