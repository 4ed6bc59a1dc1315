"""torch C++/CUDA extension adapter: ``torch.utils.cpp_extension.load`` build directories (stdlib only).

Where torch puts them (``torch/utils/cpp_extension.py``, ``_get_build_directory``):
``$TORCH_EXTENSIONS_DIR/<name>/`` when the variable is set (no tag directory), else
``<user cache>/torch_extensions/py<XY><abiflags>_<cuZZZ|rocmXY|cpu>/<name>/`` where the
user cache is ``$XDG_CACHE_HOME`` or ``~/.cache`` (``torch/_appdirs.py``, ``user_cache_dir``).

One build directory holds ``build.ninja``, objects (``<src>.o``, ``<src>.cuda.o``),
``<name>.so`` and, when the sources or flags changed within one process, ``<name>_v<N>.so``
(``_jit_compile`` renames the module, not the directory). ``lock`` is torch's
``FileBaton``: created with O_EXCL for the build and removed after; a ``lock`` that
outlives its build makes every later ``load()`` of that name wait forever.

Read here: file names, ELF headers, and the text of ``build.ninja`` (compiler, Python
include dir, ``-gencode`` targets). Nothing is imported or executed.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from itertools import islice
from typing import Any, ClassVar

from jitwarden.adapters.base import (
    elf_head,
    existing,
    listed,
    not_a_directory,
    older_than,
    set_vars,
    so_findings,
    survey_findings,
    unreadable,
)
from jitwarden.adapters.surveys import File, survey
from jitwarden.env import locations
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import is_reserved
from jitwarden.store import partition
from jitwarden.store.reads import read_head

KIND = "torch-ext"
ROOT_RISK = None
ROOT_CHECKS = ()
TAG = re.compile(r"^py(\d)(\d+)([a-z]*)_(cpu|cu\d+|rocm\d+|xpu)$")
_NINJA_MAX = 1 << 20
_PY_INCLUDE = re.compile(r"/include/python(\d)\.(\d+)([a-z]*)\b")
_GENCODE = re.compile(
    r"-gencode[= ]arch=compute_(\d{1,9})[a-z]?,code=(sm|compute)_(\d{1,9})(?!\d)[a-z]?"
)
_SO_NAME = re.compile(r"^(.+?)(?:_v(\d+))?\.so$")


@dataclass(frozen=True, slots=True)
class TorchExtFacts(KindFacts):
    """A build directory's module name and tag directory (None for a build under ``$TORCH_EXTENSIONS_DIR``),
    the modules built in it (``<name>.so``, ``<name>_v<N>.so``), their machine, the Python and
    accelerator it was built for, and the ``-gencode`` cubin and PTX archs of its ``build.ninja``."""

    SHOWN_NONE: ClassVar[frozenset[str]] = frozenset({"tag"})

    module: str
    tag: str | None
    modules: tuple[str, ...] | None = None
    machine: str | None = None
    python: str | None = None
    accelerator: str | None = None
    sm: tuple[int, ...] | None = None
    ptx: tuple[int, ...] | None = None


# ---------------------------------------------------------------- roots


def default_root(env=os.environ) -> str:
    """``<user_cache_dir>/torch_extensions`` as torch computes it on Linux (realpath'd, as torch does)."""
    return os.path.realpath(locations.torch_extensions_dir(env))


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``$TORCH_EXTENSIONS_DIR`` (a flat dir of builds) when set, and the default tagged root; existing dirs only.

    torch reads ``TORCH_EXTENSIONS_DIR`` with ``os.environ.get(...) is None``; an empty value
    would make torch build into the working directory, which is no cache root: it is skipped.
    """
    # Under activation TORCH_EXTENSIONS_DIR names a partition: list the root it lives in (and so every partition).
    named = [(partition.base_of(d), src) for d, src in set_vars(env, "TORCH_EXTENSIONS_DIR")]
    return existing(KIND, named + [(default_root(env), "default")])


def looks_like_root(path: str) -> bool:
    """A ``torch_extensions`` dir, or a dir holding tag dirs (``py311_cu128``) or build dirs with ``build.ninja``."""
    if os.path.basename(os.path.normpath(path)) == "torch_extensions":
        return True
    try:
        ls = listed(path)
    except OSError:
        return False
    tags = set(
        filter(TAG.match, ls.names)
    )  # C-speed: a root of another kind lists 10,000s of names
    if tags and any(ls.dirs(tags)):
        return True
    kids = list(islice(ls.dirs(), 64))  # the first 64 subdirs, in listing order
    if not kids:
        return False
    if os.path.isfile(os.path.join(path, "build.ninja")):
        return False  # one build dir, not a root
    return any(
        os.path.isfile(os.path.join(path, k, "build.ninja"))
        and not os.path.isfile(os.path.join(path, k, "kernel.cu"))
        for k in kids
    )


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """``<tag>/<name>`` for every build under a tag dir, ``<name>`` for a build directly in the root."""
    names, strays = [], []
    with os.scandir(root) as it:
        kids = sorted(
            (e.name, e.is_dir(follow_symlinks=False), e.is_symlink())
            for e in it
            if not is_reserved(e.name)
        )
    for name, is_dir, is_link in kids:
        if is_dir and TAG.match(name):
            try:
                with os.scandir(os.path.join(root, name)) as it:
                    for e in it:
                        if not is_reserved(e.name) and (
                            e.is_dir(follow_symlinks=False) or e.is_symlink()
                        ):
                            names.append(f"{name}/{e.name}")
                        elif e.is_file(follow_symlinks=False):
                            strays.append((f"{name}/{e.name}", "file"))
            except OSError as exc:
                strays.append((name, f"cannot list: {exc.strerror}"))
        elif is_dir or is_link:
            names.append(name)
        else:
            strays.append((name, "file"))
    names.sort()
    return names, strays


# ---------------------------------------------------------------- judging


def current_tag(judge: Judge) -> tuple[str | None, str | None]:
    """(``py311``, ``cu128``/``cpu``) of the running interpreter and torch, each None when unknown.

    The accelerator comes from the judge's ``torch_cuda`` (the fingerprint), else from the
    local part of torch's version (``2.13.0+cpu``, ``2.6.0+cu124``); a bare version says nothing.
    """
    py = f"py{judge.python_tag}" if judge.python_tag else None
    acc = None
    if judge.torch_cuda:
        acc = "cu" + judge.torch_cuda.replace(".", "")
    else:
        tv = judge.version("torch")
        if tv and "+" in tv:
            local = tv.split("+", 1)[1]
            if local == "cpu" or re.fullmatch(r"cu\d+|rocm[\d.]+", local):
                acc = local.replace(".", "")
    return py, acc


def parse_ninja(text: str) -> dict:
    """Facts of a torch ``build.ninja``: python include version, CUDA build, ``-gencode`` targets, default target."""
    py = _PY_INCLUDE.search(text)
    sms: list[int] = []
    ptx: list[int] = []
    for _arch, kind, num in _GENCODE.findall(text):
        (sms if kind == "sm" else ptx).append(int(num))
    arch_flags = re.findall(
        r"--generate-code=arch=compute_(\d+)[a-z]?,code=\[?([a-z_0-9,]+)\]?", text
    )
    for _arch, codes in arch_flags:
        for c in codes.split(","):
            m = re.match(r"(sm|compute)_(\d{1,9})(?!\d)", c)
            if m:
                (sms if m.group(1) == "sm" else ptx).append(int(m.group(2)))
    default = re.search(r"^default\s+(\S+)", text, re.MULTILINE)
    return {
        "python": f"py{py.group(1)}{py.group(2)}{py.group(3)}" if py else None,
        "cuda": bool(
            re.search(r"^\s*nvcc\s*=", text, re.MULTILINE)
            or re.search(r"^\s*cuda_cflags\s*=", text, re.MULTILINE)
        ),
        "sm": tuple(sorted(set(sms))),
        "ptx": tuple(sorted(set(ptx))),
        "default": default.group(1) if default else None,
    }


def _covers(sms, ptx, arch: int) -> bool:
    """Whether a fat binary with these cubins and PTX can run on ``arch`` (same-major cubin at or below it, or PTX at or below it)."""
    if any(s // 10 == arch // 10 and s <= arch for s in sms):
        return True
    return any(p <= arch for p in ptx)


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one build directory (file names, ELF headers, build.ninja text) and judge it.

    Evidence per rule: ``corrupt`` for ``.so``/``.o`` whose ELF header is broken; ``mismatch``
    when objects and module disagree on the machine, or ``build.ninja`` on the Python or CUDA the
    tag directory names; ``incomplete`` for a build without its module past the orphan age;
    ``stale`` when the tag directory (or ``build.ninja``'s Python headers) names another Python
    or accelerator than this environment's torch: torch never loads it here.
    """
    s = survey(root, name)
    path = s.path
    out = survey_findings(s, root_uid, "build directory")
    tag, _, mod = name.rpartition("/")
    if not s.is_dir:
        return not_a_directory(
            KIND, root, name, s, out, "build directory", mod, TorchExtFacts(mod, tag or None)
        )
    files = {f.name: f for f in s.files}
    # Shared objects: <name>.so, or <name>_v<N>.so after an in-process rebuild.
    own = [
        f for f in sorted(files) if "/" not in f and (m := _SO_NAME.match(f)) and m.group(1) == mod
    ]
    so_machine = _elf_findings(path, files, judge.host_machine, out)
    ninja = None
    if "build.ninja" in files:
        try:
            ninja = parse_ninja(
                read_head(os.path.join(path, "build.ninja"), _NINJA_MAX).decode("utf-8", "replace")
            )
        except OSError as exc:
            out.append(unreadable("build.ninja", exc))
    etype = _build_state(mod, own, files, ninja is not None, s.newest, judge, out)
    py_tag, acc_tag = _tag_findings(tag, ninja, judge, out)
    arch = sms = ptxs = None
    if ninja and (ninja["sm"] or ninja["ptx"]):
        sms, ptxs = ninja["sm"], ninja["ptx"]
        arch = _arch_findings(sms, ptxs, judge, out)
    facts = TorchExtFacts(mod, tag or None, tuple(own), so_machine, py_tag, acc_tag, sms, ptxs)
    return Entry(
        KIND,
        root,
        name,
        path,
        etype,
        mod,
        arch,
        s.bytes,
        s.newest,
        findings=tuple(dict.fromkeys(out)),
        facts=facts,
    )


def _elf_findings(
    path: str, files: dict[str, File], host: str | None, out: list[Finding]
) -> str | None:
    """The ELF headers of the module's ``.so`` files and its objects: broken ones, a module not linked
    from its objects (another machine). Returns the module's machine (the first by name), None when unknown."""
    so_machines = _so_machines(path, files, host, out)
    obj_machines = _object_machines(path, files, out)
    if so_machines and obj_machines and not (so_machines & obj_machines):
        out.append(
            Finding(
                "mismatch",
                f"the module is built for {', '.join(sorted(so_machines))} but its objects for "
                f"{', '.join(sorted(obj_machines))}: the .so was not linked from them",
            )
        )
    return min(so_machines) if so_machines else None


def _so_machines(
    path: str, files: dict[str, File], host: str | None, out: list[Finding]
) -> set[str]:
    """The machines the module's sound ``.so`` headers name; each header judged against this host."""
    machines: set[str] = set()
    for rel in sorted(f for f in files if "/" not in f and f.endswith(".so")):
        try:
            head = elf_head(os.path.join(path, rel), files[rel].size)
        except OSError as exc:
            out.append(unreadable(rel, exc))
            continue
        out += so_findings(rel, head, host)
        if not head.problem and head.machine_name is not None:  # a sound head names its machine
            machines.add(head.machine_name)
    return machines


def _object_machines(path: str, files: dict[str, File], out: list[Finding]) -> set[str]:
    """The machines the build's sound object files name; a broken one is ``corrupt``, an unreadable one passed."""
    machines: set[str] = set()
    for rel in sorted(f for f in files if "/" not in f and f.endswith(".o")):
        try:
            head = elf_head(os.path.join(path, rel), files[rel].size)
        except OSError:
            continue
        if head.problem:
            out.append(Finding("corrupt", f"{rel}: not a valid object file: {head.problem}"))
        elif head.machine_name is not None:  # a sound head names its machine
            machines.add(head.machine_name)
    return machines


def _build_state(
    mod: str,
    own: list[str],
    files: dict[str, File],
    has_ninja: bool,
    newest: float,
    judge: Judge,
    out: list[Finding],
) -> str:
    """The entry's type: ``extension``, ``building`` (young, no module yet) or ``partial`` (an interrupted
    build: no module past the orphan age, or torch's lock left behind)."""
    # Half-built: torch creates the directory, writes build.ninja, then runs ninja.
    etype = "extension"
    if not own:
        if older_than(newest, judge):
            what = "build.ninja but no" if has_ninja else "neither build.ninja nor"
            out.append(
                Finding(
                    "incomplete",
                    f"build directory has {what} {mod}.so: an interrupted build "
                    f"({int((judge.now - newest) // 60)} min old); torch rebuilds it on the next load()",
                )
            )
            etype = "partial"
        else:
            etype = "building"
    if "lock" in files and older_than(files["lock"].mtime, judge):
        out.append(
            Finding(
                "orphan",
                f"lock: left by an interrupted build, {int((judge.now - files['lock'].mtime) // 60)} min old; "
                f"torch's FileBaton waits for it to vanish, so load({mod!r}) hangs until it is removed",
            )
        )
        etype = "partial"  # the build it guarded never finished: clean takes the whole directory
    return etype


def _tag_findings(
    tag: str, ninja: dict[str, Any] | None, judge: Judge, out: list[Finding]
) -> tuple[str | None, str | None]:
    """(Python tag, accelerator tag) the build is for: the tag directory names what torch built for,
    build.ninja says what it really used; either against this environment's torch."""
    py_now, acc_now = current_tag(judge)
    m = TAG.match(tag) if tag else None
    if m is None:
        return _untagged(ninja, py_now, out), None
    py_tag, acc_tag = f"py{m.group(1)}{m.group(2)}{m.group(3)}", m.group(4)
    if ninja:
        _ninja_against_tag(ninja, tag, py_tag, acc_tag, out)
    if py_now and py_tag != py_now:
        out.append(
            Finding("stale", f"built for {py_tag}, this is {py_now}: torch never looks in {tag}/")
        )
    elif acc_now and acc_tag != acc_now:
        out.append(
            Finding(
                "stale",
                f"built for {acc_tag}, the installed torch is {acc_now}: torch never looks in {tag}/",
            )
        )
    return py_tag, acc_tag


def _untagged(ninja: dict[str, Any] | None, py_now: str | None, out: list[Finding]) -> str | None:
    """A build dir under no tag directory: the Python build.ninja compiles against (None: unknown), against
    this environment's."""
    if not (ninja and ninja["python"]):
        return None
    if py_now and ninja["python"] != py_now:
        out.append(
            Finding(
                "stale",
                f"build.ninja compiles against Python {ninja['python'][2:3]}.{ninja['python'][3:]} "
                f"headers, this is {py_now}: loading it fails or rebuilds",
            )
        )
    return ninja["python"]


def _ninja_against_tag(
    ninja: dict[str, Any], tag: str, py_tag: str, acc_tag: str, out: list[Finding]
) -> None:
    """What build.ninja compiles against the tag directory the build sits under."""
    if ninja["python"] and ninja["python"] != py_tag:
        out.append(
            Finding(
                "mismatch",
                f"build.ninja compiles against Python {ninja['python'][2:3]}.{ninja['python'][3:]} "
                f"headers but sits under {tag}",
            )
        )
    if acc_tag == "cpu" and ninja["cuda"]:
        out.append(Finding("mismatch", f"build.ninja compiles CUDA sources but sits under {tag}"))


def _arch_findings(sms: list[int], ptxs: list[int], judge: Judge, out: list[Finding]) -> int:
    """The newest arch build.ninja targets; ``foreign-arch`` when none covers the judged GPU."""
    if judge.target_arch is not None and not _covers(sms, ptxs, judge.target_arch):
        shown = ", ".join([f"sm_{x}" for x in sms] + [f"compute_{x}" for x in ptxs])
        out.append(
            Finding(
                "foreign-arch",
                f"built for {shown}, judged against sm_{judge.target_arch}: no kernel image for this GPU",
            )
        )
    return max(sms or ptxs)
