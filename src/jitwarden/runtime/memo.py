"""Activation's warm path: the fingerprint's digest memoised by everything it was computed from.

A warm :func:`jitwarden.activate` must cost milliseconds, and importing the fingerprint
layer alone (dataclasses, hashlib, ctypes for NVML, ...) costs more than that. So
when the slow path computes a fingerprint it also records, in
``memo_dir()/activation-memo.json``, the *dependencies* :func:`fingerprint.of_host`
read (:func:`jitwarden.env.fingerprint.dependencies`), each as a cheap fact:

- in-process facts: ``sys.executable``, ``sys.version``, ``sys.path``, uid, platform
  (``os.uname``, libc), whether torch is imported (torch's arch list falls back to it);
- the value of every code-changing env var and ``CUDA_VISIBLE_DEVICES`` (set or not);
- a stat tuple (dev, inode, size, mtime_ns, ctime_ns, mode) of each file: every ptxas
  candidate, the dist-info dir and RECORD of every found package, torch's version.py /
  libtorch_python.so / bin/ptxas, the fingerprint modules themselves, ``sys.executable``,
  the fingerprint memo. ctime and inode catch what size and mtime miss: a file renamed over
  another, or rewritten in place with its mtime set back (nobody can set ctime back);
- each ``sys.path`` directory (absolute: ``''`` is the cwd, so each cwd has its own entry)
  by stat, and the names in it that could be a tracked package or dist-info. Installing,
  removing or upgrading a package adds, removes or renames an entry, which moves the
  directory's mtime. So the check is O(1) in the size of the environment: a directory is
  listed only when its stat moved, and when it still holds the same tracked names (cwd
  churn, an unrelated package) its new stat is recorded, so the next start is stats again;
- the content of /proc/driver/nvidia/version, the /proc/driver/nvidia/gpus listing and
  each GPU's information file;
- without a driver (no GPU, no NVML): the stat of the dynamic loader's cache and default
  library dirs, so an NVML library appearing is noticed.

Next to them it stores what activation needs: digest, headline, installed package
versions, device archs, and the fingerprint-derived start-up warnings. :func:`lookup`
re-reads all of that with ``os``, ``sys`` and ``json`` only; any difference, garbage, or
an unknown schema is a miss, and the slow path (:func:`compute`) rewrites the entry.

Not memoised, re-run live on both paths by ``activation``: everything about cache roots
(the unsafe-root refusal, the private fallback, the partition's last use, the shared
unpartitioned-root sample), since roots change under us and those checks are a few stats.

A fingerprint whose GPU facts came from /proc while NVML failed is never memoised: the
slow path retries NVML every time, so a transient NVML failure is not made permanent.
Files modified within :data:`RACY_NS` of the snapshot are not trusted by stat (the
"racy git" rule: a rewrite within one timestamp tick can keep its stat).
"""

from __future__ import annotations

import os
import sys
from operator import itemgetter

from jitwarden.env import interpreter
from jitwarden.formats import jsonlimits
from jitwarden.store.paths import memo_dir
from jitwarden.store.reads import NotPrivate, read_head, read_private

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
    from typing import Any

SCHEMA = 1
KIND = "jitwarden-activation-memo"
FILE = "activation-memo.json"
MAX_ENTRIES = 8
MAX_BYTES = 1 << 20
RACY_NS = 2_000_000_000
"""A file or directory changed this recently before the snapshot is not trusted by its stat."""

last = ""
"""How the last :func:`lookup` / :func:`compute` in this process went ("hit", "miss: why", "stored", ...)."""


class ActivationFacts(tuple):
    """What activation needs from a fingerprint, as plain fields (immutable; the memo stores exactly these).

    ``digest`` (16 hex), ``headline``, ``packages`` ((name, version) pairs, sorted), ``archs``
    (the visible GPUs' archs), ``warnings`` (the fingerprint-derived start-up warnings). Made by
    :func:`compute` from a :class:`~jitwarden.env.fingerprint.Fingerprint` or read back from the
    memo; never passed where a Fingerprint is expected (ARCHITECTURE.md, activation flow). A
    tuple, not a dataclass: importing ``dataclasses`` would cost more than a warm activation.
    """

    __slots__ = ()

    def __new__(cls, digest: str, headline: str | None, packages, archs, warnings):
        return tuple.__new__(
            cls,
            (
                digest,
                headline,
                tuple(sorted(dict(packages).items())),
                tuple(archs),
                tuple(warnings),
            ),
        )

    digest = property(itemgetter(0))
    headline = property(itemgetter(1))
    packages = property(itemgetter(2))
    archs = property(itemgetter(3))
    warnings = property(itemgetter(4))

    def version(self, name: str) -> str | None:
        """The installed version of package ``name``, None when it is not installed."""
        return next((v for n, v in self.packages if n == name), None)

    def to_json(self) -> dict:
        return {
            "digest": self.digest,
            "headline": self.headline,
            "packages": dict(self.packages),
            "archs": list(self.archs),
            "warnings": list(self.warnings),
        }

    @classmethod
    def from_json(cls, d) -> ActivationFacts:
        """ValueError unless ``d`` is exactly what :meth:`to_json` writes (the digest is a path part)."""
        if not _is_digest(d["digest"]):
            raise ValueError("bad digest")
        fields = {name: d[name] for name in _FIELDS}
        for name, ok in _FIELDS.items():
            if not ok(fields[name]):
                raise ValueError(f"bad {name}")
        return cls(d["digest"], *fields.values())


def _is_digest(v) -> bool:
    return isinstance(v, str) and len(v) == 16 and all(c in "0123456789abcdef" for c in v)


def _is_headline(v) -> bool:
    return v is None or isinstance(v, str)


def _is_packages(v) -> bool:
    return isinstance(v, dict) and all(
        isinstance(k, str) and isinstance(x, str) for k, x in v.items()
    )


def _is_archs(v) -> bool:
    return isinstance(v, list) and all(type(a) is int for a in v)


def _is_warnings(v) -> bool:
    return isinstance(v, list) and all(isinstance(w, str) for w in v)


_FIELDS = {
    "headline": _is_headline,
    "packages": _is_packages,
    "archs": _is_archs,
    "warnings": _is_warnings,
}
"""The memo's fields after its digest, in :class:`ActivationFacts`' order: each with what it must be."""


def memo_path(env=None) -> str:
    return os.path.join(memo_dir(env), FILE)


# --- facts ---------------------------------------------------------------------------


def _stat(path: str):
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_mode]


def _tracked(name: str, wanted) -> bool:
    """Whether a ``sys.path`` entry named ``name`` could be what the fingerprint finds for a tracked package.

    What :func:`jitwarden.env.fingerprint.dependencies` names is looked up two ways: a
    ``<dist>-<version>.dist-info`` whose normalized dist name is watched, and an importable
    top-level ``torch``/``triton`` (a package dir, ``torch.py``, ``torch.<abi>.so``). Both are decided
    by the name's stem (normalized as ``fingerprint._find_dists`` does): a set lookup per name, not
    a scan of every watched substring (a cwd holding ``torchinductor_root`` holds no torch).
    """
    if name.endswith(".dist-info"):
        stem = name[:-10].partition("-")[0]
    else:
        stem = name.split(".", 1)[0]
    return stem.lower().replace("-", "_").replace(".", "_") in wanted


def _names(path: str, wanted) -> list | None:
    """Sorted names in directory ``path`` that could be a tracked package or its dist-info (slow path only)."""
    try:
        names = os.listdir(path)
    except (OSError, ValueError):
        return None
    watched = frozenset(wanted)
    return sorted(n for n in names if _tracked(n, watched))


def _read(path: str) -> str | None:
    try:
        return read_head(path, 1 << 16).decode("latin-1")
    except (OSError, ValueError):
        return None


def _proc(base: str) -> list:
    """/proc/driver/nvidia: version text, sorted GPU listing, each GPU's information text."""
    try:
        buses = sorted(os.listdir(os.path.join(base, "gpus")))
    except (OSError, ValueError):
        buses = None
    return [
        _read(os.path.join(base, "version")),
        buses,
        [_read(os.path.join(base, "gpus", b, "information")) for b in buses or ()],
    ]


def _ld_paths() -> list:
    """Where the dynamic loader would find libnvidia-ml: its cache, LD_LIBRARY_PATH, default dirs."""
    machine = os.uname().machine
    extra = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    return [
        "/etc/ld.so.cache",
        *extra,
        "/lib",
        "/lib64",
        "/usr/lib",
        "/usr/lib64",
        f"/lib/{machine}-linux-gnu",
        f"/usr/lib/{machine}-linux-gnu",
    ]


def _process_key(mdir: str) -> list:
    u = os.uname()
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError, AttributeError):
        libc = ""
    other = interpreter.current()  # `run` of another environment's Python: its facts, never ours
    return [
        sys.executable if other is None else other.executable,
        sys.version if other is None else ".".join(map(str, other.version)),
        list(sys.path) if other is None else list(other.path),
        os.getuid(),
        "torch" in sys.modules,
        u.sysname,
        u.machine,
        libc,
        mdir,
    ]


def _path_dirs() -> list:
    """Each ``sys.path`` entry as an absolute dir: ``''`` is the cwd, so two cwds are two entries, not one
    that each start overwrites. A cwd that was removed has no name: ``.`` then."""
    try:
        cwd = os.getcwd()
    except OSError:
        cwd = os.curdir
    return [os.path.normpath(os.path.join(cwd, e or os.curdir)) for e in interpreter.search_path()]


def _own_files() -> list:
    """This module and the start-up checks whose warnings are memoised (by path: importing them is not cheap)."""
    return [__file__, os.path.join(os.path.dirname(__file__), "startup_checks.py")]


# --- warm path -----------------------------------------------------------------------


def _load(path: str, why: list | None = None) -> dict | None:
    """The memo document at ``path`` when it is ours alone and well formed, else None (``why`` says why).

    Read by ``store/reads.read_private``: never blocks (a FIFO is refused, not opened for
    reading), at most :data:`MAX_BYTES`, and a memo or memo dir another user could have
    written is refused.
    """
    why = [] if why is None else why
    try:
        raw = read_private(path, max_bytes=MAX_BYTES)
    except FileNotFoundError:
        return None
    except NotPrivate as exc:
        why.append(
            f"memo {'dir ' if exc.filename != path else ''}{(exc.strerror or '').removeprefix('directory ')}"
        )
        return None
    except OSError as exc:
        why.append(f"memo {exc.strerror or exc}")
        return None
    try:
        doc = jsonlimits.loads(raw, max_bytes=MAX_BYTES)
    except ValueError:
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or doc.get("kind") != KIND:
        return None
    if not isinstance(doc.get("entries"), list):
        return None
    return doc


def _implausible(entry: dict, key: list) -> str | None:
    """Why the entry cannot be one :func:`compute` wrote for this process, by what is cheap to re-check."""
    fp = entry["fp"]
    digest, headline, packages = fp["digest"], fp["headline"], fp["packages"]
    if not isinstance(headline, str) or not headline.endswith(f"fp {digest}"):
        return "headline does not name the digest"
    for name in (
        "torch",
        "triton",
        "vllm",
    ):  # the headline lists exactly these, with their versions
        v = packages.get(name)
        if (v is not None) != (f" {name} {v} " in f" {headline} ".replace(" · ", " ")):
            return f"headline and packages disagree about {name}"
    if "torch" in sys.modules and "torch" not in packages:
        return "torch is imported but recorded as not installed"
    if [d[0] for d in entry["dirs"]] != _path_dirs():
        return "does not cover every sys.path dir"
    if not {"torch", "triton", "vllm"} <= set(entry["names"]):
        return "does not watch torch, triton and vllm"
    mine = set(_own_files())
    if not mine <= {f[0] for f in entry["files"]}:
        return "does not watch jitwarden's own files"
    return None


def _why_not(entry: dict, env, key: list, moved: list) -> str | None:
    """None when every recorded fact still holds, else the first one that does not.

    O(1) in the size of the environment: a ``sys.path`` dir is listed only when its own stat
    moved (an entry added, removed or renamed in it); when it still holds the same tracked
    names it is appended to ``moved`` (index, new stat), for :func:`lookup` to record, so the
    next start is back to stats alone.
    """
    if entry["key"] != key:
        return "process (python, sys.path, uid, platform or torch import) differs"
    odd = _implausible(entry, key)
    if odd:
        return f"implausible entry ({odd})"
    for name, value in entry["env"].items():
        if env.get(name) != value:
            return f"env {name} differs"
    for path, st in entry["files"]:
        if _stat(path) != st:
            return f"{path} changed"
    why = _dir_moved(entry, moved)
    if why:
        return why
    base, facts = entry["proc"]
    if _proc(base) != facts:
        return f"{base} changed"
    ld = entry["ld"]
    if ld is not None:
        if [p for p, _st in ld] != _ld_paths():
            return "LD_LIBRARY_PATH differs"
        for path, st in ld:
            if _stat(path) != st:
                return f"{path} changed"
    return None


def _dir_moved(entry: dict, moved: list) -> str | None:
    """The first ``sys.path`` dir that holds other tracked names than recorded; each one listed because its
    stat moved while its names did not goes to ``moved``. Dirs whose stat holds are not listed."""
    wanted = frozenset(entry["names"])
    for i, (path, st, names) in enumerate(entry["dirs"]):
        now = _stat(path)
        if now == st and (now is not None or names is None):  # same stat, or absent then and now
            continue
        if _names(path, wanted) != names:
            return f"{path} lists other packages"
        if now is not None:
            moved.append((i, now))
    return None


def _refresh(path: str, entry: dict, moved: list) -> None:
    """Record the new stats of dirs that moved without a tracked change (unless racy), so they are not listed again."""
    import time

    since = time.time_ns()
    fresh = [(i, st) for i, st in moved if not _racy(st, since)]
    if not fresh:
        return
    for i, st in fresh:
        entry["dirs"][i][1] = st
    _store(path, entry)


def lookup(env=None) -> ActivationFacts | None:
    """The memoised facts when everything they were computed from is unchanged, else None. Never raises."""
    global last
    env = os.environ if env is None else env
    try:
        mdir = memo_dir(env)
        why_not: list = []
        path = os.path.join(mdir, FILE)
        doc = _load(path, why_not)
        if doc is None:
            last = f"miss: no usable memo{' (' + why_not[0] + ')' if why_not else ''}"
            return None
        key = _process_key(mdir)
        why: str | None = "no entry"
        for entry in doc["entries"]:
            try:
                moved: list = []
                why = _why_not(entry, env, key, moved)
                if why is None:
                    facts = ActivationFacts.from_json(entry["fp"])
                    if moved:
                        _refresh(path, entry, moved)
                    last = "hit"
                    return facts
            except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
                why = f"malformed entry ({type(exc).__name__})"
        last = f"miss: {why}"
        return None
    except Exception as exc:
        last = f"miss: {type(exc).__name__}: {exc}"
        return None


# --- slow path -----------------------------------------------------------------------


def _racy(st, since_ns: int) -> bool:
    return st is not None and max(st[3], st[4]) >= since_ns - RACY_NS


def compute(env=None, *, store: bool = True, proc_root: str = "/proc") -> ActivationFacts:
    """Compute the fingerprint (the slow path) and memoise its facts for the next warm lookup.

    ``proc_root``: where ``driver/nvidia`` is read (tests point it at a fake one); the entry records
    it, so :func:`lookup` re-reads the same files.
    """
    global last
    import time

    from jitwarden.env import fingerprint
    from jitwarden.runtime import startup_checks

    env = os.environ if env is None else env
    mdir = memo_dir(env)
    t0 = time.time_ns()
    # Snapshot first, collect second: a change in between is then seen as a change next time.
    deps = fingerprint.dependencies(env=env, proc_root=proc_root)
    names = list(deps["names"])
    entry: dict[str, Any] = {
        "key": _process_key(mdir),
        "env": {k: env.get(k) for k in deps["env"]},
        "files": [[p, _stat(p)] for p in [*deps["files"], *_own_files()]],
        "names": names,
        "dirs": [],
        "proc": [deps["proc"], _proc(deps["proc"])],
        "ld": [[p, _stat(p)] for p in _ld_paths()],
    }
    for p in _path_dirs():
        st = _stat(p)
        entry["dirs"].append([p, None if _racy(st, t0) else st, _names(p, names)])
    fp = fingerprint.of_host(use_memo=True, env=env, proc_root=proc_root)
    facts = ActivationFacts(
        fp.digest,
        fp.headline(),
        {p.name: p.version for p in fp.packages},
        fp.device_archs(),
        startup_checks.torch_arch(fp) + startup_checks.ptxas_target(fp),
    )
    if not store:
        return facts
    if fp.gpu_source == "proc":
        last = "not stored: NVML failed with a driver present (retried at every start)"
        return facts
    if fp.gpu_source == "nvml":
        entry["ld"] = None
    racy = [p for p, st in entry["files"] + (entry["ld"] or []) if _racy(st, t0)]
    if racy:
        last = f"not stored: {racy[0]} changed just now"
        return facts
    # The fingerprint memo is read and maybe rewritten by fingerprint.of_host itself: its state after.
    entry["files"].append([deps["memo"], _stat(deps["memo"])])
    entry["fp"] = facts.to_json()
    _store(os.path.join(mdir, FILE), entry)
    return facts


def _same_run(e: dict, entry: dict, dirs: list) -> bool:
    """Whether the stored memo entry ``e`` is of ``entry``'s process key, environment and dirs (``dirs``): replaced."""
    return (
        e.get("key") == entry["key"]
        and e.get("env") == entry["env"]
        and [d[0] for d in e.get("dirs") or () if isinstance(d, list) and d] == dirs
    )


def _store(path: str, entry: dict) -> None:
    """Put ``entry`` first, drop entries of the same process key, env and dirs, keep :data:`MAX_ENTRIES`."""
    global last
    doc = _load(path) or {}
    dirs = [d[0] for d in entry["dirs"]]
    old = [
        e for e in doc.get("entries", ()) if isinstance(e, dict) and not _same_run(e, entry, dirs)
    ]
    data = {"schema": SCHEMA, "kind": KIND, "entries": [entry, *old][:MAX_ENTRIES]}
    try:
        from jitwarden.store.atomic import write_private_json

        if not write_private_json(path, data, ".activation-memo."):
            last = "not stored: the memo dir, or the nearest one there is, is not this user's alone"
            return
        last = "stored"
    except (OSError, ValueError, TypeError) as exc:
        last = f"not stored: {type(exc).__name__}: {exc}"
