"""Every ``JITWARDEN_*`` setting, declared once: name, kind, default, what it does, what turning it off costs.

The one table of the environment variables jitwarden reads (ARCHITECTURE.md, model/). Every
module reads a setting through its row (``PARTITION.on(env)``, ``REMOTE_TIMEOUT.number(env)``),
never by writing the name again; ``doctor`` and ``status`` word a weakened protection from the
row's ``costs``; ``docs/settings.md`` is generated from the table (:func:`markdown`).

Activation reads this module in every Python process, so it imports only :mod:`model.flags`
(nothing) and :mod:`operator` (built in), and its rows are tuples, not dataclasses. Also here: the
dotted paths users and activation write into ``TRITON_CACHE_MANAGER`` and ``TRITON_REMOTE_CACHE_BACKEND``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from operator import itemgetter

from jitwarden.model.flags import parse_flag

TYPE_CHECKING = False  # mypy takes it as true; typing costs ~5 ms of every activation
if TYPE_CHECKING:
    from typing import Any

    _Row = tuple[Any, ...]
else:
    _Row = tuple

GUARD_MANAGER = "jitwarden.guard:GuardedCacheManager"
"""``TRITON_CACHE_MANAGER`` of the guard (a stable public path, ARCHITECTURE.md)."""

REMOTE_MANAGER = "jitwarden.runtime.remote_manager:RemoteGuardedCacheManager"
"""``TRITON_CACHE_MANAGER`` activation sets with ``JITWARDEN_REMOTE``: the guard, then the signed remote cache."""

PUBLIC_REMOTE_MANAGER = "jitwarden.remote_manager:RemoteGuardedCacheManager"
"""The same class by its stable public path, as a user may write it."""

REMOTE_BACKEND = "jitwarden.remote:GuardedRemoteBackend"
"""``TRITON_REMOTE_CACHE_BACKEND`` of the guarded remote cache."""

GUARDED_MANAGERS = (GUARD_MANAGER, REMOTE_MANAGER, PUBLIC_REMOTE_MANAGER)
"""Cache managers that seal and verify every Triton entry: the guard and its remote subclass."""


def is_guarded(manager: str | None) -> bool:
    """Whether the ``TRITON_CACHE_MANAGER`` value ``manager`` is the guard (or the remote guard built on it)."""
    return manager in GUARDED_MANAGERS


class Setting(_Row):
    """One row: ``name``, ``kind`` (flag, number, age, text, path), ``default`` (its value when unset),
    ``what`` (what it does), ``costs`` (what setting it to ``weak`` costs; '' when it lowers no protection),
    ``weak`` (the flag value that lowers protection, or None)."""

    __slots__ = ()

    def __new__(
        cls,
        name: str,
        kind: str,
        default: Any,
        what: str,
        costs: str = "",
        weak: bool | None = None,
    ) -> Setting:
        return tuple.__new__(cls, (name, kind, default, what, costs, weak))

    name = property(itemgetter(0))
    kind = property(itemgetter(1))
    default = property(itemgetter(2))
    what = property(itemgetter(3))
    costs = property(itemgetter(4))
    weak = property(itemgetter(5))

    def raw(self, env: Mapping[str, str]) -> str | None:
        """The variable's text in ``env``, None when unset or empty."""
        return env.get(self.name) or None

    def on(self, env: Mapping[str, str]) -> bool:
        """A flag's value: a word of ``model.flags``, else (unset or unknown) its default."""
        value = parse_flag(env.get(self.name))
        return self.default if value is None else value

    def number(self, env: Mapping[str, str]) -> float:
        """A non-negative number, else (unset, malformed, negative, NaN) its default."""
        default: float = self.default
        raw = self.raw(env)
        try:
            v = float(raw) if raw else default
        except ValueError:
            return default
        return v if v >= 0 else default

    def text(self, env: Mapping[str, str]) -> str | None:
        """The value with blanks stripped, else its default."""
        raw = self.raw(env)
        return raw.strip() if raw and raw.strip() else self.default

    def weakened(self, env: Mapping[str, str]) -> bool:
        """Whether ``env`` turns this setting to the value that lowers protection (set explicitly)."""
        return self.weak is not None and parse_flag(env.get(self.name)) is self.weak

    def assignment(self, env: Mapping[str, str]) -> str:
        """``NAME=value`` as ``env`` has it, for messages."""
        return f"{self.name}={env.get(self.name, '')}"


DISABLE = Setting(
    "JITWARDEN_DISABLE",
    "flag",
    False,
    "activation does nothing at all",
    "activation does nothing: kernel caches are neither partitioned by fingerprint nor guarded",
    True,
)
PARTITION = Setting(
    "JITWARDEN_PARTITION",
    "flag",
    True,
    "partition every cache root by fingerprint",
    "cache roots are not partitioned by fingerprint: a hit can load a kernel another toolchain, "
    "driver or GPU built into the shared root",
    False,
)
SWEEP = Setting(
    "JITWARDEN_SWEEP",
    "flag",
    True,
    "check JAX's and CuPy's cache files at start-up, and every entry of "
    "TorchInductor's and Triton's trees where the torch hooks cannot check kernels as they load (hooks off, "
    "an unknown torch)",
    "JAX's and CuPy's cache files are not checked, and nothing else checks them; "
    "without the torch hooks, TorchInductor's static launcher loads cubins the Triton guard never sees",
    False,
)
PROVE = Setting(
    "JITWARDEN_PROVE",
    "flag",
    True,
    "prove an unsealed kernel by a rebuild before it is served or sealed",
    "unsealed kernels (copied in, restored from an FX-graph bundle, made before jitwarden) are sealed "
    "and served without being rebuilt and compared",
    False,
)
PROVE_WAIT = Setting(
    "JITWARDEN_PROVE_WAIT",
    "flag",
    False,
    "prove unsealed kernels before the workload starts, "
    "instead of in a background process beside it",
)
TORCH_HOOKS = Setting(
    "JITWARDEN_TORCH_HOOKS",
    "flag",
    True,
    "check each TorchInductor kernel as it loads, and FX-graph and autotune pickles when torch "
    "loads them",
    "kernels torch restores from its own pickles (FX-graph bundles, autotune records) "
    "are loaded without jitwarden's checks, and every start-up sweeps every Triton entry instead "
    "(a start-up that grows with the cache)",
    False,
)
LOAD_HOOKS = Setting(
    "JITWARDEN_LOAD_HOOKS",
    "flag",
    True,
    "check each JAX, CuPy and numba-cuda cache entry as the tool reads it, seal it as the tool writes it, and "
    "prove an unsealed one by the tool's own compile of it, once, before it is used, in any cache dir, one "
    "named in code included",
    "JAX's and CuPy's entries are checked and sealed at start-up only, in a dir named in the environment: a "
    "file written during a run stays unsealed until the next start, and an unsealed file is sealed as found; "
    "numba-cuda's are not sealed",
    False,
)
GUARD_HASH_ALL = Setting(
    "JITWARDEN_GUARD_HASH_ALL",
    "flag",
    False,
    "the guard hashes every file of an entry on each "
    "hit, not only the group, metadata and binaries",
)
SCAN_MEMO = Setting(
    "JITWARDEN_SCAN_MEMO",
    "flag",
    True,
    "verify --quick and every scan judge again only the Triton entries whose dir or files changed since the "
    "last scan (by stat: ctime cannot be set back); off reads every file at every scan",
)
DEBUG = Setting(
    "JITWARDEN_DEBUG", "flag", False, "the CLI shows a traceback for an internal error (exit 3)"
)
PROGRESS = Setting(
    "JITWARDEN_PROGRESS", "flag", False, "draw progress bars even when stderr is not a terminal"
)
REMOTE = Setting(
    "JITWARDEN_REMOTE",
    "text",
    None,
    "the guarded remote kernel cache: redis://[[user]:password@]host[:port][/db]",
)
REMOTE_ROLE = Setting(
    "JITWARDEN_REMOTE_ROLE",
    "text",
    "reader",
    "writer (builders sign and store) or reader (serving nodes never store)",
)
REMOTE_TIMEOUT = Setting(
    "JITWARDEN_REMOTE_TIMEOUT",
    "number",
    0.5,
    "seconds one remote request may take, connect to complete reply",
)
REMOTE_RETRY = Setting(
    "JITWARDEN_REMOTE_RETRY", "number", 30.0, "seconds the remote cache is skipped after it failed"
)
OCI_TIMEOUT = Setting(
    "JITWARDEN_OCI_TIMEOUT",
    "number",
    30.0,
    "seconds one registry request of push/pull may take, connect to complete reply "
    "(a blob's grows by 1 s per MiB)",
)
SIGNING_KEY = Setting(
    "JITWARDEN_SIGNING_KEY",
    "path",
    None,
    "the secret key a writer signs with (default <config>/signing-key)",
)
TRUSTED_KEYS = Setting(
    "JITWARDEN_TRUSTED_KEYS",
    "path",
    None,
    "public keys whose signatures are trusted: files or "
    "directories separated by the path separator (default <config>/trusted-keys)",
)
CONFIG_DIR = Setting(
    "JITWARDEN_CONFIG_DIR",
    "path",
    None,
    "jitwarden's configuration directory (default ${XDG_CONFIG_HOME:-~/.config}/jitwarden)",
)
TRUSTED_ROOTS = Setting(
    "JITWARDEN_TRUSTED_ROOTS",
    "path",
    None,
    "cache roots whose owner and mode you accept although another user could write them (a team's shared "
    "root; like git's safe.directory): separated by the path separator, * for every root; seals there must "
    "still authenticate (docs/threat-model.md says the risk)",
)
SEAL_KEY = Setting(
    "JITWARDEN_SEAL_KEY",
    "path",
    None,
    "a team's shared seal key file (one line 'jitwarden-seal-key <64 hex>', not readable by others): "
    "seals are written with it and seals made with it are trusted, besides your own key "
    "(<config>/seal/key, made on first use)",
)
HOME = Setting(
    "JITWARDEN_HOME",
    "path",
    None,
    "where memos, statistics and private roots live (default "
    "${XDG_CACHE_HOME:-~/.cache}/jitwarden)",
)
LIBCUDA = Setting(
    "JITWARDEN_LIBCUDA",
    "path",
    None,
    "libcuda when it is not in a standard place (the ComputeCache "
    "adapter reads the driver's version from it)",
)
LOCK_TIMEOUT = Setting(
    "JITWARDEN_LOCK_TIMEOUT",
    "number",
    5.0,
    "seconds a workload waits for a cache entry's lock before it takes a miss and compiles that "
    "kernel privately (any user who can read a lock file can hold it)",
)
PYTHON = Setting(
    "JITWARDEN_PYTHON",
    "path",
    None,
    "the Python of the environment that writes the caches (a workload's venv): the commands judge them "
    "against its Triton, torch and other builds, read without importing them (--python wins)",
)
RECORD = Setting(
    "JITWARDEN_RECORD",
    "text",
    None,
    "record every kernel hit and compile of this workload under this name (`run --record NAME`; set it to "
    "the model's name for the vLLM plugin), read by `coverage NAME` and the always-miss check of `doctor`",
)
RECORD_START = Setting(
    "JITWARDEN_RECORD_START",
    "text",
    None,
    "one id for every process of one start of a recorded workload (`run --record` sets it; else each "
    "process is a start of its own)",
)
ORPHAN_AGE = Setting(
    "JITWARDEN_ORPHAN_AGE",
    "age",
    3600.0,
    "seconds after which tmp.pid_* leftovers are orphans (--orphan-age wins)",
)
BUDGET = Setting(
    "JITWARDEN_BUDGET",
    "text",
    None,
    "the disk budget of `jitwarden budget` and `jitwarden run --budget` over every cache kind of this "
    "environment (500M, 20G; --budget and budget SIZE win): whole entries least recently used first",
)
BUDGET_INODES = Setting(
    "JITWARDEN_BUDGET_INODES",
    "number",
    None,
    "the inode budget beside JITWARDEN_BUDGET: files and directories of every cache kind together "
    "(--inodes wins)",
)

SETTINGS = (
    DISABLE,
    PARTITION,
    SWEEP,
    PROVE,
    PROVE_WAIT,
    TORCH_HOOKS,
    LOAD_HOOKS,
    GUARD_HASH_ALL,
    SCAN_MEMO,
    DEBUG,
    PROGRESS,
    REMOTE,
    REMOTE_ROLE,
    REMOTE_TIMEOUT,
    REMOTE_RETRY,
    OCI_TIMEOUT,
    SIGNING_KEY,
    TRUSTED_KEYS,
    CONFIG_DIR,
    TRUSTED_ROOTS,
    SEAL_KEY,
    HOME,
    LIBCUDA,
    LOCK_TIMEOUT,
    PYTHON,
    RECORD,
    RECORD_START,
    ORPHAN_AGE,
    BUDGET,
    BUDGET_INODES,
)
BY_NAME = {s.name: s for s in SETTINGS}


def _xdg_dir(env: Mapping[str, str], var: str, fallback: str) -> str:
    """``$var``, else ``~/fallback`` (``env``'s own HOME): the XDG base directory ``var`` names."""
    return env.get(var) or os.path.join(env.get("HOME") or os.path.expanduser("~"), fallback)


def home_dir(env: Mapping[str, str]) -> str:
    """Where jitwarden keeps memos, statistics and private roots: ``$JITWARDEN_HOME``, else
    ``${XDG_CACHE_HOME:-~/.cache}/jitwarden``."""
    return HOME.raw(env) or os.path.join(_xdg_dir(env, "XDG_CACHE_HOME", ".cache"), "jitwarden")


def config_dir(env: Mapping[str, str]) -> str:
    """jitwarden's configuration directory (keys): ``$JITWARDEN_CONFIG_DIR``, else
    ``${XDG_CONFIG_HOME:-~/.config}/jitwarden``."""
    return CONFIG_DIR.raw(env) or os.path.join(
        _xdg_dir(env, "XDG_CONFIG_HOME", ".config"), "jitwarden"
    )


def weakened(env: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """(``NAME=value``, what it costs, how to undo) for every setting ``env`` turns to lower protection (pure)."""
    return [(s.assignment(env), s.costs, f"unset {s.name}") for s in SETTINGS if s.weakened(env)]


def _default_text(s: Setting) -> str:
    if s.default is None:
        return "unset"
    if s.kind == "flag":
        return "on" if s.default else "off"
    return f"{s.default:g}" if isinstance(s.default, float) else str(s.default)


def markdown() -> str:
    """The table of ``docs/settings.md`` (pure; a test keeps the page equal to it)."""
    rows = [
        "| variable | kind | default | what it does | turning it off costs |",
        "|---|---|---|---|---|",
    ]
    for s in SETTINGS:
        costs = f"`{s.name}={'1' if s.weak else '0'}`: {s.costs}" if s.weak is not None else ""
        rows.append(f"| `{s.name}` | {s.kind} | {_default_text(s)} | {s.what} | {costs} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":  # pragma: no cover - regenerates the table of docs/settings.md
    print(markdown(), end="")
