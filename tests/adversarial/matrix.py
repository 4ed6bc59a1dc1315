"""The hostile-environment matrix (issue 21): every entry point x every path it touches x every hostile shape.

Nothing here is hand-listed that can be derived:

- entry points: every leaf verb of the real argparse parser (``cli/main.py``, sub-verbs such as
  ``quarantine ls`` included), plus ``activate()``, the guard (Triton's cache manager, get and put)
  and the remote manager, which have no verb;
- paths: every on-disk name of ``model/layout.py`` (placed at the level of the tree it lives at:
  root, partition, entry, quarantine slot), jitwarden's own state files (memos, stats, keys), every
  location variable (read from ``env/locations.py`` and from the ``JITWARDEN_*`` path variables in
  ``src``) and each verb's own path arguments (its argparse actions with a PATH, DIR or FILE metavar);
- shapes: :data:`SHAPES`.

A case runs in a fresh process group with a bounded wall time (killed after it, counted as a
hang) against a fresh copy of one real world (real Triton compiles, real seals, a real bundle, a
real quarantine slot, real memos and stats) at one fixed path, so the absolute paths Triton writes
stay valid. A sentinel tree outside the world is digested before and after. Entry points that
serve kernels compile through Triton with one sealed entry tampered with (a flipped cubin byte);
the cubin Triton gets must never be the tampered one.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import errno
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

from jitwarden.formats import elf
from tests.adversarial.adv import tree_hash
from tests.helpers import kernels
from tests.helpers.guarded import ADD, JOBS
from tests.helpers.guarded import DRIVER as GUARDED_DRIVER
from tests.helpers.paths import SRC

WALL_S = float(os.environ.get("JW_MATRIX_WALL", "15"))
"""Seconds a case may run before it is killed and counted as a hang."""

SHAPES = (
    "symlink-out",
    "fifo",
    "wrong-type",
    "read-only-fs",
    "full-fs",
    "deep-json",
    "huge-json",
    "non-utf8-name",
)
JSON_ONLY = frozenset({"deep-json", "huge-json"})
DEEP = 200_000
GUARD = "jitwarden.guard:GuardedCacheManager"
REMOTE = "jitwarden.remote_manager:RemoteGuardedCacheManager"

TALLY = {
    "cases": 0,
    "kills": 0,
    "hangs": 0,
    "outside changes": 0,
    "exit-3s": 0,
    "tracebacks": 0,
    "tampered served": 0,
    "bad exits": 0,
    "failed": 0,
}
RESULTS: list = []  # one dict per case run, for the summary and JW_MATRIX_REPORT


# ------------------------------------------------------------------------------------------- entry points


@dataclasses.dataclass(frozen=True)
class PathArg:
    """A path argument of a verb: its argparse destination, option string (None: positional), and kind."""

    dest: str
    option: str | None
    kind: str  # "dir", "file" or "json"


@dataclasses.dataclass(frozen=True)
class Entry:
    """One entry point: a CLI verb (``verb`` words) or a runtime entry (``runtime``)."""

    name: str
    verb: tuple = ()
    runtime: str = ""  # "activate", "guard" or "remote"
    path_args: tuple = ()
    serves: bool = False


def _leaf_parsers(parser, words=()):
    """(verb words, parser) of every leaf command; aliases share their parser, so each appears once."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield words, parser
        return
    seen = set()
    for name, sp in subs[0].choices.items():
        if id(sp) not in seen:
            seen.add(id(sp))
            yield from _leaf_parsers(sp, words + (name,))


def parser_verbs() -> list[tuple]:
    """Every leaf verb the real parser has (the list a test checks the matrix against)."""
    from jitwarden.cli.main import build_parser

    return [w for w, _p in _leaf_parsers(build_parser())]


def _path_kind(action) -> str | None:
    meta = action.metavar if isinstance(action.metavar, str) else ""
    if action.dest in ("paths", "root") or meta == "DIR":
        return "dir"
    if meta.endswith(".json") or action.dest == "bundle":
        return "json"  # read as data: deep and huge JSON apply
    if meta in ("PATH", "FILE"):
        return "file"
    return None


def _actions(parser):
    return [
        a
        for a in parser._actions
        if not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
    ]


def entry_points() -> list[Entry]:
    from jitwarden.cli.main import build_parser

    out = []
    for words, p in _leaf_parsers(build_parser()):
        args = tuple(
            PathArg(a.dest, (a.option_strings or [None])[-1] if a.option_strings else None, k)
            for a in _actions(p)
            if (k := _path_kind(a))
        )
        serves = any(
            a.nargs == argparse.REMAINDER for a in _actions(p)
        )  # `run -- CMD`: CMD compiles kernels
        out.append(Entry(" ".join(words), verb=words, path_args=args, serves=serves))
    out += [
        Entry("activate()", runtime="activate", serves=True),
        Entry("guard", runtime="guard", serves=True),
        Entry("remote-manager", runtime="remote", serves=True),
    ]
    return out


# ------------------------------------------------------------------------------------------- paths


@dataclasses.dataclass(frozen=True)
class Target:
    """Where a shape is planted: a world path (``where`` relative to a level), a variable, or a verb's argument."""

    label: str
    kind: str  # "dir", "file" or "json"
    level: str = ""  # "root", "partition", "entry", "slot", "memo", "stats", "config"
    name: str = ""
    var: str = ""
    arg: PathArg | None = None


LEVELS_OF = {  # layout constant -> the levels of the tree it lives at; a new constant lands at every level
    "PARTITIONS_DIR": ("root",),
    "QUARANTINE_DIR": ("root", "partition"),
    "TRASH_DIR": ("root", "partition"),
    "ROOT_LOCK_FILE": ("root", "partition"),
    "PARTITION_INFO": ("partition",),
    "SEAL_FILE": ("entry",),
    "ENTRY_LOCK_FILE": ("entry",),
    "ENTRY_WRITERS_FILE": ("entry",),
    "PROVING_DIR": ("partition",),
    "USES_DIR": ("root", "partition"),
}
ALL_LEVELS = ("root", "partition", "entry")
NOT_NAMES = {
    "TMP_DIR_PREFIX",
    "TMP_FILE_INFIX",
}  # prefixes Triton's writers use, not names jitwarden writes


def layout_names() -> dict:
    """Every on-disk name ``model/layout.py`` declares: {constant: name}."""
    from jitwarden.model import layout

    return {
        k: v
        for k, v in vars(layout).items()
        if k.isupper() and isinstance(v, str) and k not in NOT_NAMES
    }


def _kind_of_name(const: str, name: str) -> str:
    if const.endswith("_DIR"):
        return "dir"
    return "json" if name.endswith(".json") else "file"


def state_targets() -> list[Target]:
    """jitwarden's own state outside cache roots: memos, stats, keys (names from their modules)."""
    from jitwarden.ops import metrics
    from jitwarden.runtime import memo
    from jitwarden.store import quarantine, sealkey

    return [
        Target(f"slot/{quarantine.RECORD}", "json", "slot", quarantine.RECORD),
        Target(f"memo/{memo.FILE}", "json", "memo", memo.FILE),
        Target("memo/fingerprint-memo.json", "json", "memo", "fingerprint-memo.json"),
        Target("memo/stats", "dir", "memo", "stats"),
        Target(f"stats/{metrics.LAST_VERIFY}", "json", "stats", metrics.LAST_VERIFY),
        Target("stats/remote-*.json", "json", "stats", "remote-*.json"),
        Target("config/signing-key", "file", "config", "signing-key"),
        Target("config/trusted-keys", "dir", "config", "trusted-keys"),
        Target("config/trusted-keys/*.pub", "file", "config", "trusted-keys/*.pub"),
        Target(f"config/{sealkey.KEY_DIR}", "dir", "config", sealkey.KEY_DIR),
        Target(
            f"config/{sealkey.KEY_DIR}/{sealkey.KEY_FILE}",
            "file",
            "config",
            f"{sealkey.KEY_DIR}/{sealkey.KEY_FILE}",
        ),
    ]


_SEARCH_PATHS = {
    "PATH",
    "LD_LIBRARY_PATH",
    "PYTHONPATH",
}  # lists of directories to search, not locations
_FILE_VARS = ("_KEY", "_KEYS", "PTXAS_PATH")  # variables that name files rather than directories
_PATHLIKE = re.compile(r"[A-Z][A-Z0-9_]*(_DIR|_HOME|_ROOT|_PATH|_KEYS?)|HOME|TMPDIR|TEMP|TMP")


def _names_read(tree: ast.Module) -> set:
    """Upper-case string constants in a module, except those of module-level tables (names only recorded,
    such as the compiler variables a fingerprint lists: jitwarden never reads a path from them)."""
    tables = {
        id(n)
        for node in tree.body
        if isinstance(node, (ast.Assign, ast.AnnAssign))
        for n in ast.walk(node)
    }
    return {
        n.value
        for n in ast.walk(tree)
        if isinstance(n, ast.Constant)
        and isinstance(n.value, str)
        and id(n) not in tables
        and re.fullmatch(r"[A-Z][A-Z0-9_]+", n.value)
    }


def location_vars() -> list[str]:
    """Every cache location variable: the names ``env/locations.py`` reads, and every path-like variable
    (``*_DIR``, ``*_HOME``, ``*_ROOT``, ``*_PATH``, ``*_KEY(S)``) that code in ``src`` reads."""
    names = set()
    for d, _dirs, files in os.walk(os.path.join(SRC, "jitwarden")):
        for n in files:
            if n.endswith(".py"):
                with open(os.path.join(d, n), encoding="utf-8") as f:
                    read = _names_read(ast.parse(f.read()))
                if n == "locations.py" and os.path.basename(d) == "env":
                    names |= read - {
                        "LOGNAME",
                        "USER",
                        "LNAME",
                        "USERNAME",
                    }  # who the user is, not a location
                names |= {v for v in read if _PATHLIKE.fullmatch(v)}
    from jitwarden.model import (
        settings,
    )  # the JITWARDEN_* variables are named there only, one row each

    names |= {s.name for s in settings.SETTINGS if _PATHLIKE.fullmatch(s.name)}
    return sorted(
        n for n in names - _SEARCH_PATHS if not n.startswith("O_")
    )  # O_PATH is an open flag


def world_targets() -> list[Target]:
    out = []
    for const, name in sorted(layout_names().items()):
        for level in LEVELS_OF.get(const, ALL_LEVELS):
            out.append(Target(f"{level}/{name}", _kind_of_name(const, name), level, name))
    out = list(
        {t.label: t for t in out}.values()
    )  # one lock-file name serves two constants at one level
    out += state_targets()
    out += [
        Target(f"${v}", "file" if v.endswith(_FILE_VARS) else "dir", var=v) for v in location_vars()
    ]
    return out


def applies(shape: str, target: Target) -> bool:
    if shape in JSON_ONLY:
        return target.kind == "json"
    # A variable names the root itself: a symlink there is the user's own choice of root.
    return not (shape == "symlink-out" and target.var)


@dataclasses.dataclass(frozen=True)
class Case:
    entry: Entry
    target: Target
    shape: str

    @property
    def id(self) -> str:
        return f"{self.entry.name}|{self.target.label}|{self.shape}".replace(" ", "_")


def all_cases() -> list[Case]:
    out = []
    shared = world_targets()
    for e in entry_points():
        own = [Target(f"arg {a.option or a.dest}", a.kind, arg=a) for a in e.path_args]
        for t in shared + own:
            out += [Case(e, t, s) for s in SHAPES if applies(s, t)]
    return out


def sample(cases: list[Case], per_entry: int, seed: int) -> list[Case]:
    """A bounded subset that still has every entry point (``per_entry`` times), every shape, every path
    and every (entry point, path argument) pair: cases in a seeded order, kept when they add coverage."""
    order = list(cases)
    random.Random(seed).shuffle(order)
    order.sort(
        key=lambda c: 0 if c.target.arg else 1
    )  # an entry point's own arguments first: they are its own
    need_entry = {c.entry.name: per_entry for c in cases}
    seen_shape, seen_path, seen_arg, seen_entry_shape, seen_entry_path = (
        set(),
        set(),
        set(),
        set(),
        set(),
    )
    out = []
    for c in order:
        e = c.entry.name
        gain = (
            c.shape not in seen_shape
            or c.target.label not in seen_path
            or (c.target.arg and (e, c.target.label) not in seen_arg)
            or (
                need_entry[e] > 0
                and (
                    (e, c.shape) not in seen_entry_shape
                    or (e, c.target.label) not in seen_entry_path
                )
            )
        )
        if gain:
            out.append(c)
            seen_shape.add(c.shape)
            seen_path.add(c.target.label)
            seen_entry_shape.add((e, c.shape))
            seen_entry_path.add((e, c.target.label))
            if c.target.arg:
                seen_arg.add((e, c.target.label))
            need_entry[e] -= 1
    return sorted(out, key=lambda c: c.id)


PINNED = (  # the flaws issue 21 found, always in the sample so that their fixes stay fixed
    "import|root/jitwarden-v1|symlink-out",
    "metrics|arg_--textfile-dir|symlink-out",
    "metrics|arg_--textfile-dir|read-only-fs",
    "export|config/signing-key|fifo",
    "export|arg_--key|fifo",
    "import|config/trusted-keys/*.pub|fifo",
    "remote-manager|config/trusted-keys/*.pub|fifo",
    "metrics|stats/remote-*.json|fifo",
    "metrics|stats/last-verify.json|deep-json",
    "keygen|$JITWARDEN_CONFIG_DIR|wrong-type",
    "keygen|arg_--output|read-only-fs",
    "activate()|memo/fingerprint-memo.json|fifo",
    # issue 32: the remote guard's stats written through a linked stats dir; the seal key planted as others would
    "remote-manager|memo/stats|symlink-out",
    "remote-manager|config/seal/key|symlink-out",
    "guard|config/seal|symlink-out",
    "activate()|config/seal/key|fifo",
    "verify|config/seal/key|wrong-type",
)


def selected_cases() -> list[Case]:
    """``JW_MATRIX=full``: the whole product; else a sample (``JW_MATRIX=<cases per entry point>``, default 2).
    ``JW_MATRIX_ONLY=import,metrics``: only those entry points."""
    mode = os.environ.get("JW_MATRIX", "")
    cases = all_cases()
    only = {n.strip() for n in os.environ.get("JW_MATRIX_ONLY", "").split(",") if n.strip()}
    if only:
        cases = [c for c in cases if c.entry.name in only]
    if mode == "full":
        return cases
    chosen = sample(
        cases, int(mode) if mode.isdigit() else 2, int(os.environ.get("JW_MATRIX_SEED", "0"))
    )
    ids = {c.id for c in chosen}
    return sorted(
        chosen + [c for c in cases if c.id in PINNED and c.id not in ids], key=lambda c: c.id
    )


# ------------------------------------------------------------------------------------------- the world


def base_env(w: str) -> dict:
    """Every location inside the world ``w``; nothing of the caller's caches or settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(
            ("TRITON_", "TORCHINDUCTOR_", "VLLM_", "JITWARDEN_", "CUDA_CACHE", "XDG_", "TORCH_EXT")
        )
    }
    env.update(
        HOME=f"{w}/home",
        XDG_CACHE_HOME=f"{w}/home/.cache",
        XDG_CONFIG_HOME=f"{w}/home/.config",
        XDG_RUNTIME_DIR=f"{w}/run",
        TMPDIR=f"{w}/tmp",
        TRITON_CACHE_DIR=f"{w}/cache",
        TORCHINDUCTOR_CACHE_DIR=f"{w}/inductor",
        VLLM_CACHE_ROOT=f"{w}/vllm",
        CUDA_CACHE_PATH=f"{w}/nv",
        TORCH_EXTENSIONS_DIR=f"{w}/torch_ext",
        JW_KERNEL_DIR=f"{w}/.jw-kernels",
        JW_JOBS=json.dumps(ADD),
        PYTHONPATH=SRC + os.pathsep + os.environ.get("PYTHONPATH", ""),
    )
    return env


def _cli(env, *args, timeout=300):
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    if p.returncode not in (0, 1):
        raise RuntimeError(
            f"building the matrix world: jitwarden {' '.join(args)} -> {p.returncode}\n{p.stderr}"
        )
    return p


@dataclasses.dataclass(frozen=True)
class World:
    path: str  # where every case's world lives (one fixed path: Triton's group files hold absolute paths)
    template: str
    partition: str  # relative to path
    entry: str  # the served, sealed entry in the partition (relative)
    slot: str  # a quarantine slot (relative)
    qid: str
    cubin: str  # the served entry's cubin (relative)
    tampered_sha: str
    remote_url: str | None
    registry: str | None = (
        None  # host:port of a real OCI registry holding the world's bundle (push, pull)
    )


def build_world(base: str, remote_url: str | None, registry: str | None = None) -> World:
    """Build the template once: real compiles, seals, partition, memos, stats, keys, a bundle, a slot."""
    from jitwarden.store import quarantine as q

    w = os.path.join(base, "world")
    for d in (
        "home/.cache",
        "home/.config",
        "run",
        "tmp",
        "cache",
        "inductor",
        "vllm",
        "nv",
        "torch_ext",
        "metrics",
        "args",
        ".jw-kernels",
    ):
        os.makedirs(os.path.join(w, d), exist_ok=True)
    os.chmod(os.path.join(w, "run"), 0o700)
    with open(os.path.join(w, ".jw-kernels", "jw_test_kernels.py"), "w") as f:
        f.write(kernels.KERNEL_SOURCE)
    env = base_env(w)
    legacy = kernels.build_cache(
        os.path.join(w, "cache"),
        kernels.jobs_for(archs=(90,), variants=kernels.VARIANTS[:3]),
        env={k: v for k, v in env.items() if k != "TRITON_CACHE_MANAGER"},
    )
    _cli(env, "keygen")
    cfg = os.path.join(w, "home/.config/jitwarden")
    os.makedirs(os.path.join(cfg, "trusted-keys"), exist_ok=True)
    shutil.copy(
        os.path.join(cfg, "signing-key.pub"), os.path.join(cfg, "trusted-keys", "builder.pub")
    )
    run = _cli(
        env, "run", "--", sys.executable, "-c", GUARDED_DRIVER
    )  # a guarded compile: partition, seals, memos
    served = json.loads(run.stdout.strip().splitlines()[-1])
    parts = os.path.join(w, "cache", "jitwarden-v1")
    (digest,) = [n for n in os.listdir(parts) if os.path.isdir(os.path.join(parts, n))]
    partition = os.path.join("cache", "jitwarden-v1", digest)
    entry = os.path.join(partition, served["add_sm90"]["id"])
    cubin = os.path.join(
        entry, next(n for n in os.listdir(os.path.join(w, entry)) if n.endswith(".cubin"))
    )
    rec = q.move(
        os.path.join(w, "cache", next(j["id"] for j in legacy if j["variant"] == "sub")),
        "matrix",
        root=os.path.join(w, "cache"),
    )
    _cli(env, "verify", "--target", "90")  # stats/last-verify.json
    _cli(env, "export", "-o", os.path.join(w, "bundle.jwb"))
    if registry:  # the world's bundle in a real registry: what every pull case pulls
        _cli(env, "push", registry_ref(registry), "--insecure")
    if (
        remote_url
    ):  # the served kernel on the server (signed by a builder), and stats/remote-<pid>.json
        scratch = os.path.join(w, "scratch", "jitwarden-v1", digest)
        for where, role in ((scratch, "writer"), (os.path.join(w, partition), "reader")):
            renv = {
                **env,
                **_runtime_env(w, "remote", remote_url),
                "JITWARDEN_REMOTE_ROLE": role,
                "TRITON_CACHE_DIR": where,
            }
            p = subprocess.run(
                [sys.executable, "-c", GUARDED_DRIVER],
                env=renv,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert p.returncode == 0, p.stderr[-3000:]
        shutil.rmtree(os.path.join(w, "scratch"))
        assert any(
            n.startswith("remote-")
            for n in os.listdir(os.path.join(w, "home/.cache/jitwarden/stats"))
        )
    with open(os.path.join(w, cubin), "rb") as f:
        code = next(at for n, at in elf.file_sections(f).items() if n.startswith(".text."))
        f.seek(0)
        data = bytearray(f.read())
    # What the served entry's cubin is in every case: sealed, then a byte of its code flipped. Code, not any byte:
    # where no seal vouches for an entry (a seal key the case made unusable), a proof judges it, and a proof rightly
    # accepts a difference in a debug-only section (docs/first-use.md); a changed instruction it must refuse.
    data[code[0] + code[1] // 2] ^= 0xFF
    template = os.path.join(base, "world.template")
    shutil.copytree(w, template, symlinks=True)
    with open(os.path.join(template, cubin), "wb") as f:
        f.write(data)
    shutil.rmtree(w)
    return World(
        w,
        template,
        partition,
        entry,
        os.path.relpath(rec.path, w),
        rec.id,
        cubin,
        hashlib.sha256(bytes(data)).hexdigest(),
        remote_url,
        registry,
    )


def registry_ref(registry: str | None) -> str:
    """The REF of the world's bundle (a closed port when no registry runs: push and pull then exit 2)."""
    return f"{registry or '127.0.0.1:9'}/matrix/bundle:t"


def _runtime_env(w: str, runtime: str, remote_url: str | None) -> dict:
    if runtime == "guard":
        return {"TRITON_CACHE_MANAGER": GUARD}
    if runtime == "remote":
        return {
            "TRITON_CACHE_MANAGER": REMOTE,
            "JITWARDEN_REMOTE": remote_url or "redis://127.0.0.1:1/0",
            "JITWARDEN_REMOTE_ROLE": "reader",
        }
    return {}


# ------------------------------------------------------------------------------------------- planting


class Planter:
    """Plants one shape at one path of a fresh world; remembers its mounts to undo them."""

    def __init__(self, world: World, outside: str):
        self.w = world.path
        self.world = world
        self.outside = outside
        self.mounts: list[str] = []

    def level_dir(self, level: str) -> str:
        w = self.world
        return {
            "root": os.path.join(self.w, "cache"),
            "partition": os.path.join(self.w, w.partition),
            "entry": os.path.join(self.w, w.entry),
            "slot": os.path.join(self.w, w.slot),
            "memo": os.path.join(self.w, "home/.cache/jitwarden"),
            "stats": os.path.join(self.w, "home/.cache/jitwarden/stats"),
            "config": os.path.join(self.w, "home/.config/jitwarden"),
        }[level]

    def resolve(self, t: Target) -> str:
        d = self.level_dir(t.level)
        if "*" in t.name:  # the one file of that pattern the world holds
            sub, _, pat = t.name.rpartition("/")
            d = os.path.join(d, sub) if sub else d
            pre, _, suf = pat.partition("*")
            found = (
                sorted(n for n in os.listdir(d) if n.startswith(pre) and n.endswith(suf))
                if os.path.isdir(d)
                else []
            )
            return os.path.join(d, found[0] if found else pat.replace("*", "1"))
        return os.path.join(d, t.name)

    # -- shapes
    def plant(self, shape: str, path: str, kind: str, fs: str | None = None) -> str:
        """Plant ``shape`` at ``path``. A read-only or full filesystem is mounted at ``fs``, the top of the tree
        ``path`` is in (a cache root, the memo dir: what a real mount holds), else at ``path`` (a directory)
        or its parent. Returns the path to hand the entry point."""
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if shape in ("read-only-fs", "full-fs"):
            host = fs or (path if kind == "dir" else os.path.dirname(path))
            if kind == "dir":
                os.makedirs(path, exist_ok=True)
            self._mount(host, ro=shape == "read-only-fs")
            return path
        return getattr(self, "_" + shape.replace("-", "_"))(path, kind)

    def fs_of(self, level: str) -> str:
        """The tree a level lives in: the cache root for root, partition, entry and slot."""
        return self.level_dir(
            "root"
            if level in ("root", "partition", "entry", "slot")
            else level
            if level != "stats"
            else "memo"
        )

    @staticmethod
    def _remove(path):
        if os.path.islink(path) or (os.path.lexists(path) and not os.path.isdir(path)):
            os.unlink(path)
        elif os.path.isdir(path):
            shutil.rmtree(path)

    def _symlink_out(self, path, kind):
        self._remove(path)
        os.symlink(
            os.path.join(self.outside, "a")
            if kind == "dir"
            else os.path.join(self.outside, "a", "precious0.txt"),
            path,
        )
        return path

    def links_inside(self, path: str, names) -> str:
        """A real directory at ``path`` with links out of the world at ``names`` (files jitwarden writes there)
        and at two names of its own (a file link and a directory link). Returns ``path``."""
        os.makedirs(path, exist_ok=True)
        to_file = os.path.join(self.outside, "a", "precious0.txt")
        for n, dest in [(n, to_file) for n in names] + [
            ("matrix-link", to_file),
            ("matrix-dir-link", os.path.join(self.outside, "a")),
        ]:
            self._remove(os.path.join(path, n))
            os.symlink(dest, os.path.join(path, n))
        return path

    def _fifo(self, path, kind):
        self._remove(path)
        os.mkfifo(path)
        return path

    def _wrong_type(self, path, kind):
        self._remove(path)
        if kind == "dir":
            with open(path, "w") as f:
                f.write("a file where a directory belongs\n")
        else:
            os.makedirs(os.path.join(path, "inside"))
            with open(os.path.join(path, "inside", "x.json"), "w") as f:
                f.write("{}")
        return path

    def _deep_json(self, path, kind):
        self._remove(path)
        with open(path, "w") as f:
            f.write("[" * DEEP + "]" * DEEP)
        return path

    def _huge_json(self, path, kind):
        from jitwarden.formats.jsonlimits import MAX_BYTES

        self._remove(path)
        with open(path, "wb") as f:  # valid JSON, larger than any bound jitwarden reads
            f.write(b'{"pad": "')
            chunk = b"a" * (1 << 20)
            f.writelines(chunk for _ in range((MAX_BYTES >> 20) + 2))
            f.write(b'"}')
        return path

    def _non_utf8_name(self, path, kind):
        if kind == "dir":
            os.makedirs(path, exist_ok=True)
            bad = os.fsencode(path) + b"/\xff\xfe-matrix"
            with open(bad, "wb") as f:
                f.write(b"junk with a name that is not UTF-8\n")
            os.makedirs(os.fsencode(path) + b"/bad\xffdir/AAAA", exist_ok=True)
            with open(os.fsencode(path) + b"/bad\xffdir/AAAA/x.json", "wb") as f:
                f.write(b"{}")
            return path
        sib = os.fsencode(path) + b"\xff"
        if os.path.isfile(path):
            shutil.copyfile(path, sib)
        else:
            with open(sib, "wb") as f:
                f.write(b"{}")
        return path

    def _mount(self, host: str, ro: bool) -> None:
        """A tmpfs at ``host`` holding a copy of what was there; read-only, or full to the last byte."""
        orig = host + ".mx-orig"
        if os.path.lexists(host):
            os.rename(host, orig)
        os.makedirs(host)
        p = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "tmpfs", host],
            capture_output=True,
            text=True,
        )
        if p.returncode != 0:
            import pytest

            pytest.skip(
                f"cannot mount a tmpfs here (a read-only or full filesystem needs one): {p.stderr.strip()}"
            )
        self.mounts.append(host)
        if os.path.isdir(orig):
            shutil.copytree(orig, host, symlinks=True, dirs_exist_ok=True)
            shutil.rmtree(orig)
        if ro:
            subprocess.run(["mount", "-o", "remount,ro", host], check=True)
            return
        chunk = b"\0" * (1 << 16)
        with open(os.path.join(host, "zz-matrix-filler"), "wb", buffering=0) as f:
            while True:
                try:
                    f.write(chunk)
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    if len(chunk) == 1:
                        break
                    chunk = chunk[: len(chunk) // 2]

    def undo(self) -> None:
        for m in reversed(self.mounts):
            subprocess.run(["umount", "-l", m], capture_output=True)
        self.mounts.clear()


# ------------------------------------------------------------------------------------------- one case


def make_outside(path: str) -> None:
    for sub in ("", "a", "a/b", "c"):
        os.makedirs(os.path.join(path, sub), exist_ok=True)
        for i in range(2):
            with open(os.path.join(path, sub, f"precious{i}.txt"), "wb") as f:
                f.write(f"outside {sub} {i}\n".encode() * 10)


def _base_argv(world: World, e: Entry, w: str) -> list:
    """The entry point's command line, every required argument filled in from the world."""
    from jitwarden.cli.main import build_parser

    if e.runtime:
        code = (
            GUARDED_DRIVER
            if e.runtime != "activate"
            else "import jitwarden; jitwarden.activate()\n" + GUARDED_DRIVER
        )
        return [sys.executable, "-c", code]
    parser = dict(_leaf_parsers(build_parser(list(e.verb))))[e.verb]
    argv = [sys.executable, "-m", "jitwarden", *e.verb]
    for a in _actions(parser):
        opt = a.option_strings[-1] if a.option_strings else None
        if a.nargs == argparse.REMAINDER:
            argv += ["--", sys.executable, "-c", GUARDED_DRIVER]
        elif opt in ("--yes", "--target"):
            argv += [opt] + (["90"] if opt == "--target" else [])
        elif a.dest == "ids":
            argv.append(world.qid)
        elif a.dest == "bundle":
            argv.append(os.path.join(w, "bundle.jwb"))
        elif a.dest == "size":  # budget: 1 byte, so every entry it may evict is evicted
            argv.append("1")
        elif a.dest == "ref":  # push, pull: the world's registry, plain HTTP on loopback
            argv += [registry_ref(world.registry), "--insecure"]
        elif opt is None and a.nargs in (None, "+"):
            argv.append(os.path.join(w, "args", a.dest))
        elif opt and a.required:
            argv += [opt, _arg_default(a, w)]
    return argv


def _var_default(var: str, env: dict) -> str | None:
    """What an unset jitwarden variable resolves to in the world, to seed the place a case points it at."""
    from jitwarden.ops import keys
    from jitwarden.store.paths import memo_dir

    return {
        "JITWARDEN_HOME": lambda: memo_dir(env),
        "JITWARDEN_CONFIG_DIR": lambda: keys.config_dir(env),
        "JITWARDEN_SIGNING_KEY": lambda: keys.signing_key_path(env=env),
        "JITWARDEN_TRUSTED_KEYS": lambda: os.path.join(
            keys.config_dir(env), "trusted-keys", "builder.pub"
        ),
    }.get(var, lambda: None)()


def arg_dir_writes() -> dict:
    """The names a verb writes inside a directory argument (by dest): where symlink-out plants its links."""
    from jitwarden.ops import metrics

    return {"textfile_dir": (metrics.TEXTFILE,)}


def _arg_default(a, w: str) -> str:
    return os.path.join(w, "args", a.dest)


def _arg_path(world: World, e: Entry, arg: PathArg, w: str) -> str:
    """Where a verb's path argument points before a shape is planted there, seeded with what it reads."""
    p = os.path.join(w, "args", arg.dest)
    if arg.dest in ("paths", "root", "cache"):
        return os.path.join(w, "cache")
    if arg.dest == "bundle":
        return os.path.join(w, "bundle.jwb")
    if arg.dest == "key":
        shutil.copyfile(os.path.join(w, "home/.config/jitwarden/signing-key"), p)
        os.chmod(p, 0o600)
    elif arg.dest == "diff":
        shutil.copyfile(os.path.join(w, "home/.cache/jitwarden/fingerprint-memo.json"), p)
    elif arg.kind == "dir":
        os.makedirs(p, exist_ok=True)
    return p


def _with_arg(argv: list, arg: PathArg, value) -> list:
    """``argv`` with the path argument set to ``value`` (replacing the default the base filled in)."""
    if arg.option is None:
        return _replace_positional(argv, arg, value)
    if arg.option in argv:
        i = argv.index(arg.option)
        return argv[: i + 1] + [value] + argv[i + 2 :]
    cut = argv.index("--") if "--" in argv else len(argv)
    return argv[:cut] + [arg.option, value] + argv[cut:]


def _replace_positional(argv, arg, value):
    out, done = [], False
    for x in argv:
        if (
            not done
            and isinstance(x, str)
            and (
                x.endswith(os.sep + "args" + os.sep + arg.dest)
                or (arg.dest == "bundle" and x.endswith("bundle.jwb"))
            )
        ):
            out.append(value)
            done = True
        else:
            out.append(x)
    return out if done else out + [value]


def run_case(world: World, case: Case, base: str) -> dict:
    """Run one case: fresh world, shape planted, entry point under a wall limit; what happened, as a record.

    A workload that fails is run once more with stock Triton (no jitwarden) on the same hostile files,
    compiling a kernel the cache lacks, so the report says whether Triton alone survives a miss there
    (the failure is forgiven only when it is stock Triton's own: see :func:`same_triton_failure`)."""
    e, t = case.entry, case.target
    outside = os.path.join(base, "outside")
    rec, before = _run_once(world, case, outside, stock=False)
    rec.update(id=case.id, entry=e.name, path=t.label, shape=case.shape)
    rec["outside changed"] = tree_hash(outside) != before
    rec["tampered served"] = bool(e.serves and world.tampered_sha in rec["stdout"])
    rec["stock rc"] = None
    if e.serves and rec["rc"] not in (0, None):
        stock = _run_once(world, case, outside, stock=True)[0]
        rec["stock rc"], rec["stock stderr"] = stock["rc"], stock["stderr"]
    rec["problems"] = problems(case, rec)
    return rec


def _run_once(world: World, case: Case, outside: str, stock: bool) -> tuple[dict, dict]:
    w = world.path
    if os.path.lexists(w):
        shutil.rmtree(w)
    shutil.copytree(world.template, w, symlinks=True)
    if os.path.lexists(outside):
        shutil.rmtree(outside)
    make_outside(outside)
    before = tree_hash(outside)
    planter = Planter(world, outside)
    e, t = case.entry, case.target
    env = base_env(w)
    env.update(_runtime_env(w, e.runtime, world.remote_url))
    if e.runtime in (
        "guard",
        "remote",
    ):  # the cache manager alone, as activation leaves it: on the partition
        env["TRITON_CACHE_DIR"] = os.path.join(w, world.partition)
    argv = _base_argv(world, e, w)
    try:
        if t.arg:
            p = _arg_path(world, e, t.arg, w)
            if case.shape == "non-utf8-name":  # the argument itself is a name that is not UTF-8
                bad = os.fsencode(p) + b"\xff"
                if os.path.lexists(p):
                    os.rename(p, bad)
                elif t.arg.kind == "dir":
                    os.makedirs(bad)
                value = bad
            elif case.shape == "symlink-out" and t.arg.kind == "dir":
                # A directory the user names is followed like `cp x link/` follows it (paths.open_dir_path: the
                # user's own symlinks are followed), so a link AS the argument is the user's choice, not hostile;
                # hostile are links planted at the names jitwarden writes INSIDE it, which must never be followed.
                value = planter.links_inside(p, arg_dir_writes().get(t.arg.dest, ()))
            else:
                value = planter.plant(case.shape, p, t.arg.kind)
            argv = _with_arg(argv, t.arg, value)
        elif t.var:
            p = os.path.join(w, "vars", t.var)
            was = env.get(t.var) or _var_default(t.var, env)
            if was and os.path.isdir(was):
                shutil.copytree(was, p, symlinks=True)
            elif was and os.path.isfile(was):
                os.makedirs(os.path.dirname(p), exist_ok=True)
                shutil.copyfile(was, p)
            env[t.var] = planter.plant(case.shape, p, t.kind)
        else:
            planter.plant(case.shape, planter.resolve(t), t.kind, fs=planter.fs_of(t.level))
        if stock:  # stock Triton on the same files, compiling a kernel it lacks (the guard made a miss of the tampered one)
            env = {
                k: v
                for k, v in env.items()
                if not k.startswith("JITWARDEN_") and k != "TRITON_CACHE_MANAGER"
            }
            env["JW_JOBS"] = json.dumps([j for j in JOBS if j["label"] == "add_b256_sm90"])
            if t.var != "TRITON_CACHE_DIR":
                env["TRITON_CACHE_DIR"] = os.path.join(w, world.partition)
            argv = [sys.executable, "-c", GUARDED_DRIVER]
        rec = _execute(argv, env)
    finally:
        planter.undo()
    return rec, before


def _execute(argv: list, env: dict) -> dict:
    t0 = time.monotonic()
    proc = subprocess.Popen(
        argv,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    hang = False
    try:
        out, err = proc.communicate(timeout=WALL_S)
    except subprocess.TimeoutExpired:
        hang = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    kills = int(hang)
    try:  # anything the case left running in its group (a background prover past its workload) is killed
        os.killpg(proc.pid, 0)
        os.killpg(proc.pid, signal.SIGKILL)
        kills += 0 if hang else 1
    except (ProcessLookupError, PermissionError):
        pass
    return {
        "rc": None if hang else proc.returncode,
        "hang": hang,
        "kills": kills,
        "wall_s": time.monotonic() - t0,
        "stdout": out.decode(errors="replace"),
        "stderr": err.decode(errors="replace"),
    }


_ERROR_LINE = re.compile(r"^jitwarden[^\n:]*: (internal )?error\b", re.MULTILINE)


_FRAME = re.compile(r'^  File "([^"]+)", line \d+, in (\S+)', re.MULTILINE)


def _last_traceback(text: str) -> tuple[list, str] | None:
    """(frames as (file, function), the exception line) of the last traceback in ``text``; None if there is none."""
    i = text.rfind("Traceback (most recent call last):")
    if i < 0:
        return None
    tb = text[i:]
    frames = _FRAME.findall(tb)
    lines = [ln for ln in tb.splitlines()[1:] if ln and not ln.startswith(" ")]
    return frames, (lines[0] if lines else "")


def same_triton_failure(err: str, stock_err: str) -> bool:
    """Whether ``err``'s traceback is stock Triton's own failure: no frame of jitwarden's, raised in Triton's code
    (the innermost frame outside the standard library is Triton's), and stock Triton (``stock_err``) raised the
    same exception (type, errno and message; the path it names aside) in its own code too."""
    import triton

    ours, stock = _last_traceback(err), _last_traceback(stock_err)
    if ours is None or stock is None:
        return False
    tdir = os.path.dirname(os.path.realpath(triton.__file__)) + os.sep
    jdir = os.path.join(os.path.realpath(SRC), "jitwarden") + os.sep
    stdlib = sysconfig.get_paths()["stdlib"] + os.sep

    def raiser(frames):
        own = [
            (f, fn) for f, fn in frames if not f.startswith("<frozen ") and not f.startswith(stdlib)
        ]
        return own[-1] if own and os.path.realpath(own[-1][0]).startswith(tdir) else None

    if any(
        os.path.realpath(f).startswith(jdir) or f"{os.sep}jitwarden{os.sep}" in f
        for f, _fn in ours[0]
    ):
        return False
    exc = lambda line: re.sub(r": '[^']*'$", "", line)  # noqa: E731 - the path in the message differs
    return (
        raiser(ours[0]) is not None
        and raiser(stock[0]) is not None
        and exc(ours[1]) == exc(stock[1])
    )


def problems(case: Case, rec: dict) -> list[str]:
    """What the case broke: the promises of issue 21, one short phrase each."""
    out = []
    err = rec["stderr"]
    stock_too = False
    if rec["hang"]:
        out.append(f"hang (killed after {WALL_S:.0f}s)")
    elif case.entry.serves:
        # A hostile cache must never take the workload down, unless stock Triton fails the same way (one rule for
        # every case: same exit, same exception raised in Triton's own code, no jitwarden frame at all).
        stock_too = (
            rec["rc"] != 0
            and rec.get("stock rc") == rec["rc"]
            and same_triton_failure(err, rec.get("stock stderr", ""))
        )
        if rec["rc"] != 0 and not stock_too:
            tb = _last_traceback(err)
            ours = [
                f"{os.path.basename(f)}:{fn}"
                for f, fn in (tb[0] if tb else [])
                if f"{os.sep}jitwarden{os.sep}" in f
            ]
            out.append(
                f"workload exit {rec['rc']} (stock Triton: exit {rec['stock rc']})"
                + (f" through jitwarden's {ours[-1]}" if ours else "")
            )
    elif rec["rc"] not in (0, 1, 2, 4):
        out.append(f"exit {rec['rc']}")
    if ("Traceback" in err or "Traceback" in rec["stdout"]) and not (
        case.entry.serves and stock_too
    ):
        out.append("traceback")
    if (
        not case.entry.serves and rec["rc"] == 2 and len(_ERROR_LINE.findall(err)) != 1
    ):  # a refusal: one line
        out.append(f"{len(_ERROR_LINE.findall(err))} error lines")
    if rec["outside changed"]:
        out.append("outside changed")
    if rec["tampered served"]:
        out.append("tampered cubin served")
    if rec["rc"] == 3 or "internal error" in err:
        last = [ln for ln in err.splitlines() if "internal error" in ln]
        if last:
            out.append(last[-1][:160])
    return out


def record(rec: dict) -> None:
    TALLY["cases"] += 1
    TALLY["kills"] += rec["kills"]
    TALLY["hangs"] += rec["hang"]
    TALLY["outside changes"] += rec["outside changed"]
    TALLY["exit-3s"] += rec["rc"] == 3
    TALLY["tracebacks"] += "traceback" in rec["problems"]
    TALLY["tampered served"] += rec["tampered served"]
    TALLY["bad exits"] += any(p.startswith(("exit ", "workload exit")) for p in rec["problems"])
    TALLY["failed"] += bool(rec["problems"])
    RESULTS.append(
        {k: v for k, v in rec.items() if k != "stdout"}
        | {"stderr": rec["stderr"][-600:]}
        | ({"stock stderr": rec["stock stderr"][-600:]} if "stock stderr" in rec else {})
    )
    path = os.environ.get("JW_MATRIX_REPORT")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(RESULTS[-1]) + "\n")


def summary() -> str:
    entries = {r["entry"] for r in RESULTS}
    shapes = {r["shape"] for r in RESULTS}
    paths = {r["path"] for r in RESULTS}
    return (
        f"hostile matrix: {len(entries)} entry points x {len(shapes)} shapes x {len(paths)} paths, "
        + ", ".join(f"{k} {v}" for k, v in TALLY.items())
    )
