"""TorchInductor cache adapter: ``TORCHINDUCTOR_CACHE_DIR``, else ``<tempdir>/torchinductor_<user>`` (stdlib only).

Layout, as torch 2.9-2.15 write it (``torch/_inductor/codecache.py``, ``runtime/cache_dir_utils.py``,
``runtime/autotune_cache.py``, ``_functorch/_aot_autograd/autograd_cache.py``); what differs between
releases, and how each was read, is in docs/supported-versions.md:

- ``fxgraph/<key[1:3]>/<key>/<content hash>``: pickled ``CompiledFxGraph`` (its output code inside);
- ``aotautograd/<key>/<content hash>``: pickled AOTAutograd results, naming the FX graphs they load;
- ``<basename[1:3]>/<basename>.<ext>``: generated code by content hash: Triton kernel sources
  (``.py``, whose ``triton_meta`` holds ``DeviceProperties(..., cc=90, ...)``), output code (``.py``),
  ``.best_config`` autotune results (JSON), C++ kernels (``.cpp``) and their ``.so``, cubins;
- ``cache/``: local autotune caches (JSON naming the GPU) and ``inductor_on_disk_cache``;
- ``locks/``: FileLock files; ``triton/<device>/``: a Triton cache (the Triton adapter's);
- ``torch_cutlass/``: torch's own symlinks to CUTLASS's python packages and its mock modules;
  ``dynamo/``, ``gcc/``, ``aoti_eager/`` and newer releases' dirs, judged by file name;
- temporary files ``.<pid>.<thread>.tmp`` of ``write_atomic``.

Entries are judged by reading bytes only: pickles are checked for their framing (PROTO at
the start, STOP at the end) and searched as bytes, never unpickled; Python sources are
searched as text, never imported. What the bytes alone say, and how they are read within bounds, is
:mod:`~jitwarden.adapters.inductor_blobs`; what judging records, :mod:`~jitwarden.adapters.inductor_facts`
(both shared with the vLLM adapter).
"""

from __future__ import annotations

import os
import re
from dataclasses import replace
from typing import Any

from jitwarden.adapters import inductor_blobs
from jitwarden.adapters.base import (
    cubin_findings,
    existing,
    private_root,
    survey_findings,
    unreadable,
)
from jitwarden.adapters.inductor_blobs import (
    FX_KEY_AFTER_INFO,
    Streamed,
    device_props,
    pickle_problem,
    read_blob,
    source_problem,
)
from jitwarden.adapters.inductor_facts import (
    GeneratedFor,
    InductorFacts,
    Judging,
    SystemFactors,
    entry_of,
)
from jitwarden.adapters.surveys import Survey, survey
from jitwarden.env import locations
from jitwarden.formats import elf, jsonlimits
from jitwarden.model.entries import CacheRoot, Entry, Judge
from jitwarden.model.findings import Finding
from jitwarden.model.layout import SEAL_FILE, is_reserved
from jitwarden.store import partition
from jitwarden.store.reads import read_bytes

KIND = "inductor"
ROOT_RISK = "Inductor unpickles entries from it, so loading one runs their code"
ROOT_CHECKS = ()
TRITON_DIR = "triton"  # <root>/triton/<device>: scanned by the Triton adapter
SHARD = re.compile(r"^[a-z0-9_]{2}$")  # get_path(): subdir = basename[1:3]
TMP = re.compile(r"^\.\d+\.\d+\.tmp$")  # write_atomic(): .<pid>.<thread id>.tmp, then rename
KERNEL_DEF = re.compile(rb"@triton\.jit\s*\n\s*def\s+([A-Za-z_]\w*)\s*\(")

PICKLE_DIRS = {"fxgraph": "fxgraph", "aotautograd": "aotautograd"}
CUTLASS_DIR = "torch_cutlass"
#: The links torch's ``try_import_cutlass`` makes in ``<cache>/torch_cutlass`` (torch 2.9-2.14
#: ``codegen/cuda/cutlass_utils.py``, 2.15 ``codegen/cutlass/utils.py``): name -> the dir its target lies in.
CUTLASS_LINKS = {
    "cutlass_library": "python",
    "cutlass": "python",
    "cutlass_cppgen": "python",
    "pycute": "python",
    "cuda": "cutlass_mock_imports",
    "scipy": "cutlass_mock_imports",
    "pydot": "cutlass_mock_imports",
}


# ---------------------------------------------------------------- roots


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """Inductor's own cache dir (partitions are expanded by the scanner) and jitwarden's private root."""
    source = "TORCHINDUCTOR_CACHE_DIR" if env.get("TORCHINDUCTOR_CACHE_DIR") else "default"
    return existing(
        KIND,
        [(partition.base_of(locations.inductor_cache_dir(env)), source)] + private_root(KIND, env),
    )


def looks_like_root(path: str) -> bool:
    """An Inductor cache dir: named ``torchinductor_<user>``, or holding ``fxgraph/``, ``aotautograd/``,
    ``precompiled_headers/`` (CPU builds), or ``locks/`` beside ``triton/``."""

    def isdir(name):
        p = os.path.join(path, name)
        return os.path.isdir(p) and not os.path.islink(p)

    return (
        isdir("fxgraph")
        or isdir("aotautograd")
        or isdir("precompiled_headers")
        or (isdir("locks") and isdir(TRITON_DIR))
        or os.path.basename(os.path.normpath(path)).startswith("torchinductor_")
    )


# ---------------------------------------------------------------- entries


def _dirs_and_files(path: str) -> tuple[list[str], list[str]]:
    dirs, files = [], []
    with os.scandir(path) as it:
        for e in it:
            if e.is_dir(follow_symlinks=False):
                dirs.append(e.name)
            else:
                files.append(e.name)
    return sorted(dirs), sorted(files)


def list_entry_names(
    root: str, skip: tuple[str, ...] = (TRITON_DIR,)
) -> tuple[list[str], list[tuple[str, str]]]:
    """Entry ids of an Inductor cache dir (relative paths); ``triton/`` and jitwarden's names left out.

    ``fxgraph/<xx>/<key>`` and ``aotautograd/<key>`` are one entry per key; each file of a
    shard dir ``<xx>/`` is one entry; ``cache/`` one per child; ``locks/`` one; any other
    top-level dir or file one.
    """
    names: list[str] = []
    dirs, files = _dirs_and_files(root)
    for d in dirs:
        if is_reserved(d) or d in skip:
            continue
        p = os.path.join(root, d)
        try:
            if d == "fxgraph":
                for shard in _dirs_and_files(p)[0]:
                    sd, sf = _dirs_and_files(os.path.join(p, shard))
                    names += [f"fxgraph/{shard}/{k}" for k in sd + sf]
                names += [f"fxgraph/{f}" for f in _dirs_and_files(p)[1]]
            elif d in ("aotautograd", "cache") or SHARD.match(d):
                sd, sf = _dirs_and_files(p)
                names += [f"{d}/{k}" for k in sd + sf]
            else:
                names.append(d)
        except OSError:
            names.append(d)  # unreadable: judged (and reported) as one entry
    names += [f for f in files if not is_reserved(f)]
    return sorted(names), []


# ---------------------------------------------------------------- reading bytes


def arch_findings(props, judge: Judge, what: str) -> tuple[int | None, list[Finding]]:
    """(the CUDA arch named, foreign-arch findings) for device properties read from ``what``."""
    archs = sorted({cc for t, cc, _ in props if t == "cuda" and isinstance(cc, int)})
    others = sorted({f"{t} {cc}" for t, cc, _ in props if t != "cuda"})
    out = []
    if judge.target_arch is not None:
        foreign = [a for a in archs if a != judge.target_arch]
        if foreign:
            out.append(
                Finding(
                    "foreign-arch",
                    f"{what} generated for sm_{', sm_'.join(map(str, foreign))} "
                    f"(triton_meta cc), judged against sm_{judge.target_arch}: unreachable here",
                )
            )
        if others:
            out.append(
                Finding(
                    "foreign-arch",
                    f"{what} generated for {', '.join(others)}, judged against "
                    f"sm_{judge.target_arch}: unreachable here",
                )
            )
    return (archs[0] if len(archs) == 1 else None), out


def named_arch(props, judge: Judge, what: str, facts: Judging) -> int | None:
    """:func:`arch_findings` applied to an entry: its findings added, the arch named (when one) recorded; returned."""
    arch, fs = arch_findings(props, judge, what)
    facts.findings += fs
    if arch is not None:
        facts.arch = arch
    return arch


def _host(judge: Judge) -> str | None:
    return judge.host_machine


def _age_min(judge: Judge, mtime: float) -> int:
    return int(max(0.0, judge.now - mtime) // 60)


def judge_blob(
    rel: str, data: bytes | Streamed, size: int, judge: Judge, facts: Judging, kind: str = ""
) -> None:
    """Judge one generated file of an Inductor cache by its bytes (``kind``: fxgraph, aotautograd or "" for by name)."""
    base = os.path.basename(rel)
    if kind in ("fxgraph", "aotautograd") or base.endswith((".pkl", ".pickle")):
        _judge_pickle(rel, data, judge, facts)
    elif isinstance(data, Streamed):
        _judge_large(rel, data, judge, facts)
    elif base.endswith(".py"):
        _judge_python(rel, data, judge, facts)
    elif base.endswith((".best_config", ".json")):
        _judge_json(rel, data, base, facts)
    elif base.endswith(".cubin"):
        _judge_cubin(rel, data, judge, facts)
    elif base.endswith((".so", ".o")) or data[:4] == elf.MAGIC:
        _judge_elf(rel, data, size, base, judge, facts)
    elif base.endswith(".lock"):
        facts.type = "lock"
    elif base.endswith((".cpp", ".h", ".cu", ".c")):
        facts.type = "source"
        if size == 0:
            facts.findings.append(Finding("corrupt", f"{rel} is empty"))


def _judge_pickle(rel: str, data: bytes | Streamed, judge: Judge, facts: Judging) -> None:
    """An FX-graph or AOTAutograd pickle: its structure (never unpickled), then the GPU it names."""
    add = facts.findings.append
    why = pickle_problem(data)
    if why and why.startswith("not a pickle"):
        # Inductor writes pickles here; another format is a version we do not know, not damage.
        add(Finding("unrecognised", f"{rel}: {why}; not judged"))
        return
    if why:
        add(Finding("corrupt", f"{rel}: {why}"))
        return
    named_arch(device_props(data), judge, rel, facts)


def _judge_python(rel: str, data: bytes, judge: Judge, facts: Judging) -> None:
    """Generated Python: a Triton kernel (its name and the GPU its triton_meta names) or output code."""
    add = facts.findings.append
    if not data.strip():
        add(Finding("corrupt", f"{rel} is empty"))
        return
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        add(Finding("corrupt", f"{rel} is not UTF-8 text"))
        return
    # No final newline is normal (triton_mm templates); a source that stops mid-statement is not.
    syntax = source_problem(data, rel)
    if syntax is not None:
        add(syntax)
        if syntax.code == "corrupt":
            return
    props = device_props(data)
    m = KERNEL_DEF.search(data)
    if m and b"triton_meta=" in data:
        facts.type, facts.name = "kernel", m.group(1).decode()
        if not props:
            add(
                Finding(
                    "unrecognised",
                    f"{rel}: its triton_meta has no DeviceProperties(...) in a form "
                    "jitwarden reads; its GPU is not judged",
                )
            )
    elif b"@triton.jit" in data:
        facts.type = "kernel"
        add(
            Finding(
                "unrecognised",
                f"{rel}: @triton.jit is not followed by a kernel definition jitwarden reads",
            )
        )
    else:
        facts.type = "output-code"
    arch = named_arch(props, judge, rel, facts)
    facts.grouped(
        "generated_for",
        GeneratedFor,
        cc=arch,
        device=props[0][0] if props else None,
        multi_processor_count=props[0][2] if props else None,
    )


def _judge_json(rel: str, data: bytes, base: str, facts: Judging) -> None:
    """An autotune result (``.best_config``) or other JSON."""
    add = facts.findings.append
    facts.type = "autotune" if base.endswith(".best_config") else "json"
    try:
        doc = jsonlimits.loads(data)
    except (ValueError, UnicodeDecodeError):
        add(Finding("corrupt", f"{rel} is not valid JSON"))
        return
    if facts.type == "autotune" and not (isinstance(doc, dict) and "num_warps" in doc):
        add(
            Finding(
                "unrecognised",
                f"{rel}: JSON, but not an autotune result jitwarden knows (no num_warps)",
            )
        )
    elif facts.type == "autotune" and doc.get("triton_cache_hash"):
        facts.extra["triton_cache_hash"] = doc["triton_cache_hash"]


def _judge_cubin(rel: str, data: bytes, judge: Judge, facts: Judging) -> None:
    add = facts.findings.append
    facts.type = "cubin"
    try:
        sm = elf.cubin_sm(elf.parse(data))
    except elf.ElfError as exc:
        add(Finding("corrupt", f"{rel}: not a valid cubin: {exc}"))
        return
    _cubin_arch(rel, sm, judge, facts)


def _judge_elf(rel: str, data: bytes, size: int, base: str, judge: Judge, facts: Judging) -> None:
    """A library or object (by name or ELF magic): its header, its machine against this host."""
    add = facts.findings.append
    facts.type = "library" if base.endswith(".so") else "object"
    head = elf.parse_head(data, size)
    if head.problem:
        add(Finding("corrupt", f"{rel}: {head.problem}"))
        return
    mname = head.machine_name
    facts.extra["machine"] = mname
    host = _host(judge)
    if host and mname != host:
        add(
            Finding(
                "foreign-arch",
                f"{rel} is built for {mname}, this host is {host}: unreachable here",
            )
        )


# ---------------------------------------------------------------- judging


def _group(name: str) -> str:
    """Which part of the cache an entry id belongs to."""
    head = name.split("/", 1)[0]
    if head in PICKLE_DIRS or head in ("cache", "locks"):
        return head
    if SHARD.match(head) and "/" in name:
        return "shard"
    return "other"


def judge_files(root: str, name: str, s: Survey, judge: Judge, group: str, facts: Judging) -> None:
    """Judge every file of one surveyed entry (a file or a dir); shared with the vLLM adapter."""
    tmps, real = _split_files(s, group)
    sealed = _pickle_seal(s, facts) if group in PICKLE_DIRS and s.is_dir else {}
    facts.sealed = bool(real) and all(rel in sealed for rel, _size in real)
    for rel, mtime in tmps:
        if judge.now - mtime >= judge.orphan_age:
            facts.findings.append(
                Finding(
                    "orphan",
                    f"{rel}: leftover of an interrupted write, {_age_min(judge, mtime)} min old",
                )
            )
    kind = group if group in PICKLE_DIRS else ""
    for rel, size in real:
        _judge_file(root, name, s, (rel, size), sealed.get(rel), judge, group, kind, facts)
    if group in PICKLE_DIRS:
        _key_dir_type(s, group, bool(real), bool(tmps), judge, facts)


def _split_files(s: Survey, group: str) -> tuple[list[tuple[str, float]], list[tuple[str, int]]]:
    """(temporaries as (name, mtime), the files judged as (name, size)) of a surveyed entry; dot files of a
    pickle key dir are neither (Inductor itself skips them)."""
    tmps = []
    real = []
    for f in s.files:
        base = os.path.basename(f.name)
        if TMP.match(base) or base.endswith(".tmp"):
            tmps.append((f.name, f.mtime))
            continue
        if base.startswith(".") and group in PICKLE_DIRS:
            continue  # Inductor itself skips dot files in key dirs
        real.append((f.name, f.size))
    return tmps, real


def _judge_file(
    root: str,
    name: str,
    s: Survey,
    file: tuple[str, int],
    sealed: dict | None,
    judge: Judge,
    group: str,
    kind: str,
    facts: Judging,
) -> None:
    """One file (``file``: its name in the entry and its size) of a surveyed entry, read and judged; against
    its seal's record when ``sealed``; an AOTAutograd result's FX graphs looked for."""
    rel, size = file
    path = os.path.join(s.path, rel) if s.is_dir else s.path
    shown = f"{name}/{rel}" if s.is_dir else name
    try:
        data = read_blob(path, rel, size, sha256=sealed is not None)
    except OSError as exc:
        facts.findings.append(unreadable(shown, exc))
        return
    judge_blob(shown if not s.is_dir else rel, data, size, judge, facts, kind)
    if sealed is not None:
        _check_sealed(rel, data, size, sealed, facts)
    if group == "aotautograd":
        _aot_refs((root, *judge.refs_beside), rel, data, facts)


def _key_dir_type(
    s: Survey, group: str, has_files: bool, has_tmps: bool, judge: Judge, facts: Judging
) -> None:
    """A pickle key dir's type: its group's, or ``empty`` when it holds no graph (old and without a temporary:
    an interrupted write, ``orphan``)."""
    facts.type = group
    if has_files:
        return
    newest = s.newest
    if not has_tmps and judge.now - newest >= judge.orphan_age:
        facts.findings.append(
            Finding(
                "orphan",
                f"{group} key directory holds no graph: an interrupted write, "
                f"{_age_min(judge, newest)} min old",
            )
        )
    facts.type = "empty"


def _judge_large(rel: str, data: Streamed, judge: Judge, facts: Judging) -> None:
    """A file other than a pickle larger than :data:`WHOLE_MAX`: a cubin by its ELF header, anything else by the
    device properties it names. What needs it whole (parsing source or JSON, a cubin's symbols) is not done,
    and the finding says so: not understood is not damage."""
    add = facts.findings.append
    too_large = f"{rel}: {data.size} bytes, larger than the {inductor_blobs.WHOLE_MAX >> 20} MiB jitwarden reads whole of such a file"
    if not data.passed:  # a cubin: its header
        facts.type = "cubin"
        head = elf.parse_head(data.head, data.size)
        found = cubin_findings(rel, head)
        if found or head.sm is None:
            facts.findings += found
            return
        _cubin_arch(rel, head.sm, judge, facts)
        add(
            Finding(
                "unrecognised", f"{too_large}: only its ELF header was read (its machine, its SM)"
            )
        )
        return
    named_arch(device_props(data), judge, rel, facts)
    add(Finding("unrecognised", f"{too_large}: only searched for the GPU it names, not parsed"))


def _cubin_arch(rel: str, sm: int, judge: Judge, facts: Judging) -> None:
    """A cubin's SM, read from the whole file or its header alike, against the target."""
    facts.arch = sm
    if judge.target_arch is not None and sm != judge.target_arch:
        facts.findings.append(
            Finding(
                "foreign-arch",
                f"{rel} is assembled for sm_{sm}, judged against "
                f"sm_{judge.target_arch}: unreachable here",
            )
        )


def _pickle_seal(s: Survey, facts: Judging) -> dict:
    """{file: {sha256, size}} the seal of a pickle key dir covers (the torch hooks write it,
    ``runtime/guards/inductor.py``); empty when there is no seal. A seal that does not parse is reported
    at info level: it says nothing about the pickles (ARCHITECTURE.md, "A finding code")."""
    from jitwarden.store import seal

    if not any(f.name == SEAL_FILE for f in s.files):
        return {}
    try:
        found = seal.read(s.path)
    except seal.SealError as exc:
        facts.findings.append(
            Finding("unrecognised", f"{SEAL_FILE}: {exc}; the pickles are judged without it")
        )
        return {}
    except OSError as exc:
        facts.findings.append(
            Finding("unrecognised", f"{SEAL_FILE}: unreadable ({exc.strerror}); not judged")
        )
        return {}
    return dict(found.files) if found else {}


def _check_sealed(rel: str, data: bytes | Streamed, size: int, rec: dict, facts: Judging) -> None:
    """A sealed pickle whose bytes contradict its seal is ``corrupt``: the evidence the guard acts on at load."""
    import hashlib

    if isinstance(data, Streamed):
        read, digest = data.size, data.sha256
    else:
        read, digest = len(data), None
    if read != size or (isinstance(data, Streamed) and digest is None):
        return  # only part of it was read (a library's header), or it changed since listed: nothing to compare
    if size != rec["size"]:
        facts.findings.append(Finding("corrupt", f"{rel} is {size} bytes, sealed as {rec['size']}"))
    elif (digest if isinstance(data, Streamed) else hashlib.sha256(data).hexdigest()) != rec[
        "sha256"
    ]:
        facts.findings.append(Finding("corrupt", f"{rel} does not match its sealed sha256"))


def fx_graph_path(key: str) -> str:
    """Where the FX graph ``key`` lies inside an Inductor root (``fxgraph/<key[1:3]>/<key>``; pure)."""
    return f"fxgraph/{key[1:3]}/{key}"


def _aot_refs(roots: tuple[str, ...], rel: str, data: bytes | Streamed, facts: Judging) -> None:
    """An AOTAutograd result that loads its graphs from ``fxgraph/``: each named graph must be there (in its
    own root, or one the judge names beside it)."""
    keys = (
        data.fx_keys
        if isinstance(data, Streamed)
        else [m.group(1).decode() for m in FX_KEY_AFTER_INFO.finditer(data)]
    )
    for key in keys:
        facts.extra.setdefault("fx_graphs", []).append(key)
        if not any(os.path.isdir(os.path.join(r, *fx_graph_path(key).split("/"))) for r in roots):
            facts.findings.append(
                Finding("incomplete", f"{rel} loads FX graph {key}, which is missing from fxgraph/")
            )


def _local_cache(rel: str, data: bytes, judge: Judge, facts: Judging) -> None:
    """``cache/<system hash>``: JSON ``{"system": {"device": {"name"}, "version": {...}}, "cache": {...}}``."""
    if data.lstrip()[:1] != b"{":
        return
    try:
        doc = jsonlimits.loads(data)
    except (ValueError, UnicodeDecodeError):
        facts.findings.append(Finding("corrupt", f"{rel} is not valid JSON"))
        return
    facts.type = "local-cache"
    gpu, cuda = _system_of(doc)
    if gpu:
        facts.name = gpu
        if judge.gpu_names and gpu not in judge.gpu_names:
            facts.findings.append(
                Finding(
                    "stale",
                    f"autotune results for {gpu}; this machine has {', '.join(sorted(set(judge.gpu_names)))}",
                )
            )
    if cuda and judge.torch_cuda and cuda != judge.torch_cuda:
        facts.findings.append(
            Finding(
                "stale",
                f"written by a torch built with CUDA {cuda}; this torch uses CUDA {judge.torch_cuda}",
            )
        )
    facts.grouped("system", SystemFactors, gpu_name=gpu or None, cuda=cuda)


def _system_of(doc: object) -> tuple[Any, Any]:
    """(the GPU's name, torch's CUDA) a local autotune cache records under ``system``; None for what it does not."""
    system = doc.get("system") if isinstance(doc, dict) else None
    dev = system.get("device") if isinstance(system, dict) else None
    gpu = dev.get("name") if isinstance(dev, dict) else None
    ver = system.get("version") if isinstance(system, dict) else None
    cuda = ver["cuda"] if isinstance(ver, dict) and ver.get("cuda") else None
    return gpu, cuda


def link_findings(s: Survey, tool: str = "Inductor") -> list[Finding]:
    if s.links[0].leaves:
        return [
            Finding(
                "unsafe",
                f"entry is a symlink leaving the cache root (-> {s.symlink_target}); not followed",
            )
        ]
    return [
        Finding(
            "unsafe",
            f"entry is a symlink (-> {s.symlink_target}); {tool} would follow it, jitwarden does not",
        )
    ]


def torch_cutlass_link(rel: str, target: str) -> bool:
    """Whether a symlink of ``torch_cutlass/`` is one torch made: ``<name>`` -> an absolute ``.../python/<name>``
    (CUTLASS's packages) or ``.../cutlass_mock_imports/<name>``. torch checks each against the path it expects
    before use, so these are no hazard; any other link there is judged as any link is."""
    parent = CUTLASS_LINKS.get(rel)
    t = os.path.normpath(target)
    return (
        parent is not None
        and os.path.isabs(t)
        and os.path.basename(t) == rel
        and os.path.basename(os.path.dirname(t)) == parent
    )


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read (never following a symlink, never unpickling) and judge one entry of an Inductor cache dir."""
    return inspect_entry_as(KIND, root, root, name, name, judge, root_uid)


def inspect_entry_as(
    kind: str,
    shown_root: str,
    root: str,
    name: str,
    shown_name: str,
    judge: Judge,
    root_uid: int | None,
    make: type[InductorFacts] = InductorFacts,
) -> Entry:
    """Judge ``root/name`` of an Inductor cache dir, reported as entry ``shown_name`` of ``shown_root`` (vLLM nests them)."""
    s = survey(root, name)
    facts = Judging(make)
    if s.is_symlink:
        facts.type = "link"
        return entry_of(kind, shown_root, shown_name, s, facts, link_findings(s))
    if name == CUTLASS_DIR and s.is_dir:
        s = _without_torch_links(s, facts)
    findings = survey_findings(s, root_uid)
    group = _group(name)
    if group == "locks":
        facts.type = "locks"
    elif group == "cache":
        _judge_cache(root, name, s, judge, facts)
    elif s.errors and not s.files and not s.is_dir:
        pass  # could not stat: survey_findings says so
    else:
        judge_files(root, name, s, judge, group, facts)
        if group == "other" and s.is_dir and facts.type != "cutlass-links":
            facts.type = "other"
    return entry_of(kind, shown_root, shown_name, s, facts, findings + facts.findings)


def _without_torch_links(s: Survey, facts: Judging) -> Survey:
    """``torch_cutlass/`` surveyed without the symlinks torch made there (:func:`torch_cutlass_link`), counted."""
    own = tuple(link for link in s.links if torch_cutlass_link(link.name, link.target))
    facts.type, facts.extra["torch_links"] = "cutlass-links", len(own)
    return replace(s, links=tuple(link for link in s.links if link not in own))


def _judge_cache(root: str, name: str, s: Survey, judge: Judge, facts: Judging) -> None:
    """An entry of ``cache/``: its files judged, a lone file read as a local autotune cache's JSON."""
    judge_files(root, name, s, judge, "cache", facts)
    if not s.is_dir and s.files:
        try:
            data = read_bytes(s.path, max_bytes=jsonlimits.MAX_BYTES, size_hint=s.files[0].size)
        except OSError:
            data = (
                b""  # unreadable or past what the JSON reader parses: judge_files's finding says so
            )
        _local_cache(name, data, judge, facts)
    facts.type = facts.type if facts.type != "other" else "local-cache"
