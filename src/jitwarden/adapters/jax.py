"""JAX adapter: JAX's persistent compilation cache (``JAX_COMPILATION_CACHE_DIR``) (stdlib only).

Followed sources (jax-ml/jax, 0.10-0.11): ``jax/_src/config.py`` (``jax_compilation_cache_dir``,
default None: no cache unless set; every flag's default is read from its upper-cased variable, so
``JAX_COMPILATION_CACHE_DIR`` sets it; a ``jax.config.update`` or ``compilation_cache.set_cache_dir``
call inside the program cannot be read without importing jax, so ``--path`` is how to name such a
dir), ``jax/_src/lru_cache.py`` (``<key>-cache`` written in place with ``Path.write_bytes``; with
``jax_compilation_cache_max_size`` set, an 8-byte little-endian ns ``<key>-atime`` beside it and a
``.lockfile``, and eviction reads every entry's ``-atime``), ``jax/_src/cache_key.py`` (a key is
``<module name>-<sha256 hex>``), ``jax/_src/compilation_cache.py`` (the file's format:
:mod:`jitwarden.formats.jaxexec`) and ``jax/_src/compiler.py`` (XLA's own caches beside the entries:
``xla_gpu_per_fusion_autotune_cache_dir/``, on by default, and ``xla_gpu_kernel_cache_file``).

What binds an entry to its key: the module name in the file name against the executable's own name.
JAX checks neither (design.md §2: ``jit_f_sub``'s file under ``jit_f_add``'s key loads and computes
x-y); a swap between two modules of one name is beyond that evidence and is caught by the seal
(:mod:`jitwarden.runtime.flatseal`). See ARCHITECTURE.md ("How to add … A cache kind").
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

from jitwarden.adapters import base, surveys
from jitwarden.model import bounds
from jitwarden.model.entries import CacheRoot, Entry, FactGroup, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.store.reads import kind_of, read_bytes

if TYPE_CHECKING:
    from jitwarden.formats import jaxexec

KIND = "jax"
ROOT_RISK = None
ROOT_CHECKS = ()
ENTRY = re.compile(r"^(.+)-([0-9a-f]{64})-(cache|atime)$")
AUTOTUNE_DIR = "xla_gpu_per_fusion_autotune_cache_dir"
KERNEL_CACHE_FILE = "xla_gpu_kernel_cache_file"
LOCKFILE = ".lockfile"
ATIME_BYTES = 8
MAX_ENTRY = bounds.JAX_ENTRY_MAX
"""A ``-cache`` file is read whole up to this (the largest seen: 12 MB); a larger one is judged by its head
(:data:`HEAD`: the stream's start and the executable's header), its seal by a streamed sha256, and the rest is
said not checked (ARCHITECTURE.md, "Reads bounded by kind")."""
HEAD = 1 << 20


@dataclass(frozen=True, slots=True)
class Executable(FactGroup):
    """What a ``-cache`` file says of the executable in it (:func:`jitwarden.formats.jaxexec.parse`): its
    compression and serialization, its own module name and its compile time in ms as JAX measured it."""

    compression: str | None = None
    serialization: str | None = None
    executable_module: str | None = None
    compile_time_ms: int | None = None


@dataclass(frozen=True, slots=True)
class JaxFacts(KindFacts):
    """An entry's key parts (``<module>-<hash>``), what its file says (:class:`Executable`; its ABI version
    strings: platform, CUDA and cuDNN versions on GPU), its cubins' SMs and whether an ``-atime`` companion is there."""

    TOP: ClassVar[frozenset[str]] = frozenset({"cubin_sm"})

    module: str | None = None
    key_hash: str | None = None
    executable: Executable | None = None
    cubin_sm: int | None = None
    cubin_sms: tuple[int, ...] = ()
    atime: bool | None = None
    abi: tuple[str, ...] = ()


# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``JAX_COMPILATION_CACHE_DIR`` when set (JAX has no default: its persistent cache is off without it), and
    jitwarden's private root; existing dirs only."""
    return base.existing(
        KIND, base.set_vars(env, "JAX_COMPILATION_CACHE_DIR") + base.private_root(KIND, env)
    )


def looks_like_root(path: str) -> bool:
    """A dir holding ``<module>-<sha256>-cache`` files or XLA's autotune dir."""
    if os.path.isdir(os.path.join(path, AUTOTUNE_DIR)) and not os.path.islink(
        os.path.join(path, AUTOTUNE_DIR)
    ):
        return True
    return base.holds_match(path, ENTRY)


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``<key>-cache`` for every entry (its ``-atime`` goes with it), a lone ``<key>-atime``, each file of
    XLA's autotune dir as ``xla_gpu_per_fusion_autotune_cache_dir/<file>``, and XLA's kernel cache file."""
    names, strays = [], []
    tops = base.entries(root)
    have = {e.name for e in tops}
    for top, is_dir in ((e.name, e.is_dir(follow_symlinks=False)) for e in tops):
        m = ENTRY.match(top)
        if m and m.group(3) == "cache":
            names.append(top)
        elif m:  # an -atime: part of its entry, or left over
            if f"{m.group(1)}-{m.group(2)}-cache" not in have:
                names.append(top)
        elif top == AUTOTUNE_DIR and is_dir:
            names += _autotune_names(os.path.join(root, top))
        elif top == KERNEL_CACHE_FILE:
            names.append(top)
        elif top == LOCKFILE:
            continue  # JAX's eviction lock (filelock): no entry
        else:
            strays.append((top, "not part of JAX's persistent cache layout"))
    return names, strays


def _autotune_names(adir: str) -> list[str]:
    """``xla_gpu_per_fusion_autotune_cache_dir/<version hash>/<fusion key>.pb`` for every result file (and any
    other item at either level, judged as not understood)."""
    out = []
    for sub in base.entries(adir):
        if not sub.is_dir(follow_symlinks=False):
            out.append(f"{AUTOTUNE_DIR}/{sub.name}")
            continue
        try:
            out += [f"{AUTOTUNE_DIR}/{sub.name}/{e.name}" for e in base.entries(sub.path)]
        except OSError:
            out.append(f"{AUTOTUNE_DIR}/{sub.name}")
    return out


# ---------------------------------------------------------------- judging


def _eviction_on(root: str) -> bool:
    """Whether JAX's LRU eviction has been used on ``root``: it alone creates the ``.lockfile``."""
    return os.path.lexists(os.path.join(root, LOCKFILE))


def _atime_findings(root: str, key: str) -> tuple[bool, list[Finding]]:
    """(companion present, findings) for ``<key>-atime``."""
    path = os.path.join(root, f"{key}-atime")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        if _eviction_on(root):
            return False, [
                Finding(
                    "incomplete",
                    f"{key}-atime is missing while JAX's eviction is on (.lockfile): "
                    "eviction reads every entry's -atime and fails on this one",
                )
            ]
        return False, []
    if not os.path.isfile(path) or os.path.islink(path):
        return True, [Finding("unsafe", f"{key}-atime is not a regular file; not followed")]
    if st.st_size != ATIME_BYTES:
        return True, [
            Finding(
                "corrupt",
                f"{key}-atime holds {st.st_size} bytes; JAX writes exactly {ATIME_BYTES} "
                "(a little-endian time in ns)",
            )
        ]
    return True, []


def same_module(file_module: str, exe_module: str) -> bool:
    """Whether the key's module name and the executable's name are the same module (XLA may replace
    characters outside ``[A-Za-z0-9_.-]`` in a module's name: those are not told apart)."""
    norm = re.compile(r"[^A-Za-z0-9_.\-]")
    return norm.sub("_", file_module) == norm.sub("_", exe_module)


WRITING_S = 60.0
"""JAX writes a ``-cache`` file in place (``Path.write_bytes``): one cut short and younger than this may still
be being written, and is not called damage yet."""


def _judge_executable(
    path: str, size: int, mtime: float, module: str, judge: Judge
) -> tuple[JaxFacts, list[Finding], int | None, bool]:
    out: list[Finding] = []
    young = not base.older_than(mtime, judge, WRITING_S)
    if size == 0:
        if young:
            return (
                JaxFacts(),
                [
                    Finding(
                        "unrecognised",
                        "empty, written in the last minute: perhaps still being "
                        "written (JAX writes in place)",
                    )
                ],
                None,
                False,
            )
        return (
            JaxFacts(),
            [
                Finding(
                    "corrupt", "empty -cache file (an interrupted write: JAX writes it in place)"
                )
            ],
            None,
            False,
        )
    try:
        data, p = _read(path, size, judge)
    except OSError as exc:
        return JaxFacts(), [base.unreadable("the file", exc)], None, False
    sealed, out = base.dir_seal_findings(os.path.dirname(path), os.path.basename(path), data, judge)
    if p.problem and young and "cut short" in p.problem:
        out.append(
            Finding(
                "unrecognised",
                f"{p.problem}, written in the last minute: perhaps still being written "
                "(JAX writes in place)",
            )
        )
    elif p.problem:
        out.append(Finding("corrupt", f"{p.problem}: JAX cannot load it"))
    elif p.unknown:
        out.append(Finding("unrecognised", p.unknown))
    if p.module and not same_module(module, p.module):
        out.append(
            Finding(
                "mismatch",
                f"the key names module {module}, the executable in the file is {p.module}: "
                "another function's executable under this key (JAX would run it)",
            )
        )
    arch = None
    if p.cubin_sms:
        arch = max(p.cubin_sms)
        if judge.target_arch is not None and judge.target_arch not in p.cubin_sms:
            out.append(
                Finding(
                    "foreign-arch",
                    f"its cubins are for {', '.join(f'sm_{s}' for s in p.cubin_sms)}, "
                    f"judged against sm_{judge.target_arch}: JAX keys by device, unreachable here",
                )
            )
    facts = JaxFacts(
        executable=Executable(p.compression, p.serialization, p.module, p.compile_time),
        cubin_sm=arch,
        cubin_sms=p.cubin_sms,
        abi=p.abi,
    )
    return facts, out, arch, sealed


def _read(path: str, size: int, judge: Judge) -> tuple[bytes | tuple[int, str], jaxexec.JaxPayload]:
    """(what the seal check takes, the payload) of a ``-cache`` file: read whole up to :data:`MAX_ENTRY`, else its
    head alone inflated (and, where seals are checked, its sha256 streamed): a sparse file of gigabytes costs
    its head, a bomb its cap (:data:`jitwarden.formats.jaxexec.MAX_EXECUTABLE`)."""
    # Imported where an entry is read: telling what a path is imports every adapter.
    from jitwarden.formats import jaxexec
    from jitwarden.store import seal
    from jitwarden.store.reads import read_head

    if size <= MAX_ENTRY:
        data = read_bytes(path, max_bytes=MAX_ENTRY, size_hint=size)
        return data, jaxexec.parse(data)
    p = jaxexec.parse(jaxexec.inflate((read_head(path, HEAD),), whole=False))
    past = f"{size} bytes, past the {MAX_ENTRY >> 20} MiB jitwarden reads of a JAX entry: judged by its head"
    p = replace(p, unknown=f"{past}; {p.unknown}" if p.unknown else past)
    from jitwarden.model.layout import SEAL_FILE

    if not judge.check_seals or not os.path.lexists(os.path.join(os.path.dirname(path), SEAL_FILE)):
        return (size, ""), p  # no seal to check it against: nothing hashed
    sha, n = seal.file_digest(path, size)
    return (n, sha), p


def _xla_file_findings(path: str, name: str, size: int, judge: Judge) -> list[Finding]:
    """XLA's own cache files, serialized protobuf messages: the per-fusion autotune result
    ``<version hash>/<fusion key>.pb`` names its own key inside (field 1: version hash as 1.1.1, fusion key
    as 1.1.3), so a result moved under another key contradicts its path; the kernel cache file is a list of
    kernels (field 1). A message that does not parse is damage; any other shape is not understood."""
    parts = name.split("/")
    if name != KERNEL_CACHE_FILE and not (len(parts) == 3 and parts[2].endswith(".pb")):
        return [
            Finding(
                "unrecognised",
                "not laid out as <version hash>/<fusion key>.pb as XLA's autotune cache is",
            )
        ]
    try:
        data = read_bytes(path, max_bytes=MAX_ENTRY, size_hint=size)
    except OSError as exc:
        return [base.read_failure(exc, f"unreadable: {exc.strerror or exc}")]
    sealed = base.dir_seal_findings(os.path.dirname(path), os.path.basename(path), data, judge)[1]
    return sealed + _xla_proto_findings(data, name, parts)


def _xla_proto_findings(data: bytes, name: str, parts: list[str]) -> list[Finding]:
    """What the protobuf message of an XLA cache file says: the kernel cache's kernels whole, an autotune
    result's key (version hash, fusion key) the one its path names."""
    from jitwarden.formats import jaxexec

    try:
        top = jaxexec.fields(data)
        if name == KERNEL_CACHE_FILE:
            for num, wt, v in top:
                if num == 1 and wt == 2 and isinstance(v, bytes):  # wire type 2: bytes
                    jaxexec.fields(v)
            return []
        got = _autotune_key(top)
    except ValueError as exc:
        return [Finding("corrupt", f"not a whole protobuf message ({exc}): XLA cannot parse it")]
    version, fusion = got.get(1), got.get(3)
    if not isinstance(version, bytes) or not isinstance(fusion, bytes):
        return [
            Finding("unrecognised", "an autotune result without the key fields jitwarden knows")
        ]
    want = (parts[1], parts[2][:-3])
    have = (version.decode("utf-8", "replace"), fusion.decode("utf-8", "replace"))
    if have != want:
        return [
            Finding(
                "mismatch",
                f"the result inside is for {have[0]}/{have[1]}, the file is {want[0]}/{want[1]}: "
                "another fusion's autotune result under this key",
            )
        ]
    return []


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one entry (no symlink followed, nothing deserialized) and judge it (see the module docstring).

    Evidence per rule: ``corrupt`` for a zlib/zstd stream that is damaged or cut short, an empty file, an
    ``-atime`` that is not 8 bytes, a file that no longer matches its dir's seal; ``mismatch`` for an executable of another module than its key names;
    ``incomplete`` for a missing ``-atime`` while eviction is on; ``orphan`` for an ``-atime`` whose entry
    is gone; ``unrecognised`` for a compression or serialization jitwarden does not know.
    """
    s = surveys.survey(root, name)
    out = base.survey_findings(s, root_uid, "entry")
    top = name.partition("/")[0]

    def plain(etype: str, size: int, mtime: float) -> Entry:
        """The entry as found so far: no module, no key, the findings gathered up to here."""
        return Entry(
            KIND,
            root,
            name,
            s.path,
            etype,
            None,
            None,
            size,
            mtime,
            findings=tuple(out),
            facts=JaxFacts(),
        )

    if s.is_symlink:
        return base.not_a_directory(KIND, root, name, s, out, "entry", None, JaxFacts())
    if s.is_dir:
        out.append(Finding("unrecognised", "a directory where JAX writes files"))
        return plain("other", s.bytes, s.mtime)
    if not s.files:
        if s.mode and stat.S_IFMT(s.mode) not in (stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK):
            what = kind_of(
                s.mode
            )  # a FIFO or device at a key: stock JAX's read of it blocks or never ends
            out.append(
                Finding("corrupt", f"{what} where JAX writes files: JAX's read of it never returns")
            )
        return plain("other", 0, s.mtime)
    f = s.files[0]
    if top == AUTOTUNE_DIR or name == KERNEL_CACHE_FILE:
        etype = "autotune" if top == AUTOTUNE_DIR else "kernel-cache"
        out += _xla_file_findings(s.path, name, f.size, judge)
        return plain(etype, f.size, f.mtime)
    m = ENTRY.match(name)
    if m is None:
        out.append(
            Finding("unrecognised", "not named <module>-<sha256>-cache as JAX names entries")
        )
        return plain("other", f.size, f.mtime)
    module, khash, part = m.groups()
    key = f"{module}-{khash}"
    if part == "atime":
        if base.older_than(f.mtime, judge):
            out.append(
                Finding(
                    "orphan",
                    f"-atime of an entry that is gone ({key}-cache): JAX never reads it again",
                )
            )
        return Entry(
            KIND,
            root,
            name,
            s.path,
            "partial",
            module,
            None,
            f.size,
            f.mtime,
            findings=tuple(out),
            facts=JaxFacts(module, khash),
        )
    facts, found, arch, sealed = _judge_executable(s.path, f.size, f.mtime, module, judge)
    has_atime, afind = _atime_findings(root, key)
    size = f.size + (ATIME_BYTES if has_atime and not afind else 0)
    facts = replace(facts, module=module, key_hash=khash, atime=has_atime)
    return Entry(
        KIND,
        root,
        name,
        s.path,
        "executable",
        module,
        arch,
        size,
        f.mtime,
        sealed,
        findings=tuple(dict.fromkeys(out + found + afind)),
        facts=facts,
    )


def _autotune_key(top: list[tuple[int, int, int | bytes]]) -> dict[int, bytes]:
    """The fields of an autotune result's key identity (1.1: version hash at 1, fusion key at 3), by number;
    empty where the message has none. ValueError when a nested message does not parse."""
    from jitwarden.formats import jaxexec

    key = next((v for num, wt, v in top if num == 1 and isinstance(v, bytes)), None)
    ident = (
        next((v for num, wt, v in jaxexec.fields(key) if num == 1 and isinstance(v, bytes)), None)
        if key
        else None
    )
    return (
        {num: v for num, _wt, v in jaxexec.fields(ident) if isinstance(v, bytes)} if ident else {}
    )
