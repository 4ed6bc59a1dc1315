"""vLLM cache adapter: ``VLLM_CACHE_ROOT``, else ``${XDG_CACHE_HOME:-~/.cache}/vllm`` (stdlib only).

Layout, as vLLM 0.16-0.34 write it (``vllm/envs.py``, ``vllm/compilation/backends.py``,
``compiler_interface.py``, ``decorators.py``, ``caching.py``); what differs between releases,
and the source each fact comes from, is in docs/supported-versions.md:

- ``torch_compile_cache/<hash>/rank_<r>_<dp>/<prefix>/``: ``cache_key_factors.json`` (0.16-0.33: env and
  hashes; 0.34 adds the config with vLLM's version and compiler factors with the GPU name and torch's
  CUDA), ``vllm_compile_cache.py`` (a Python literal mapping each graph to its handle ``(key, absolute
  path)``, bare in 0.16-0.17, as ``{"graph_handle": ...}`` from 0.18), the artifacts
  (``artifact_compile_range_<a>_<b>_subgraph_<i>``: CRC-checked ``BytesWriter`` files, or "unpacked"
  Inductor cache dirs; vLLM 0.16-0.31 load the stored path, 0.32+ ``<prefix>/<key>``),
  ``computation_graph.py``, ``transformed_code.py``;
- ``torch_compile_cache/<hash>/rank_<r>_<dp>/inductor_cache/``: a whole Inductor cache dir (judged by
  the Inductor adapter's code); ``.../triton_cache/`` and ``inductor_cache/triton/``: Triton's;
- AOT: ``torch_compile_cache/torch_aot_compile/<sha256>/rank_<r>_<dp>/model`` (0.17+; 0.20+ with
  ``<sha256>/inductor_cache/``) and ``torch_aot_compile/<sha256>/rank_<r>_<dp>/model`` (0.11.1-0.16);
  ``model`` is a pickle (with the mega AOT artifact, the standalone artifacts travel inside it);
- ``deep_gemm/`` (vLLM points ``DG_JIT_CACHE_DIR`` there) and
  ``flashinfer_autotune_cache/<flashinfer version>/<archs>/<hash>/autotune_configs*.json`` (0.22+).

vLLM's compile-cache key holds the GPU *name*, never its compute capability or driver, and the
AOT key (without the mega artifact) no GPU identity at all: partitioning the root by
fingerprint (activation) is what keeps a GB10's kernels from another device of that name.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from jitwarden.adapters import inductor, inductor_blobs, inductor_facts
from jitwarden.adapters.base import existing, private_root, survey_findings, unreadable
from jitwarden.adapters.surveys import Survey, inside, survey
from jitwarden.env import locations
from jitwarden.formats import jsonlimits
from jitwarden.formats.vllm_files import Handle, artifact_layout, graph_handles
from jitwarden.model.entries import CacheRoot, Entry, FactGroup, Judge
from jitwarden.model.findings import Finding
from jitwarden.model.layout import is_reserved
from jitwarden.store import partition
from jitwarden.store.reads import read_bytes

KIND = "vllm"
ROOT_RISK = "vLLM and Inductor unpickle entries from it, so loading one runs their code"
ROOT_CHECKS = ()
COMPILE = "torch_compile_cache"
AOT = "torch_aot_compile"
INDUCTOR = "inductor_cache"
TRITON_DIRS = (
    "triton_cache",
)  # Triton cache dirs vLLM sets TRITON_CACHE_DIR to (the Triton adapter's)
DEEP_GEMM = "deep_gemm"
FLASHINFER = "flashinfer_autotune_cache"
RANK = re.compile(r"^rank_\d+_\d+$")
_ARCH = re.compile(r"(\d{1,9})[af]?")
AOT_TEMP = re.compile(
    r"^tmp[a-z0-9_]{8}$"
)  # tempfile.NamedTemporaryFile of torch 2.12+ atomic_write_binary


@dataclass(frozen=True, slots=True)
class FlashInferTune(FactGroup):
    """Whose a FlashInfer autotune result is, as its path names it: FlashInfer's version and the archs tuned for."""

    flashinfer_version: str | None = None
    archs: str | None = None


@dataclass(frozen=True, slots=True)
class VllmFacts(inductor_facts.InductorFacts):
    """An Inductor entry's facts (vLLM nests Inductor caches) and vLLM's own, by what records them: the vLLM
    version in ``cache_key_factors.json`` (its GPU, CUDA and Triton key are the Inductor facts' ``system``),
    how many graphs ``vllm_compile_cache.py`` lists, the layouts of its artifacts, that an AOT entry's key
    holds no GPU, a FlashInfer autotune result's version and archs. JSON lists them by name, sorted."""

    vllm_version: str | None = None
    graphs: int | None = None
    artifact_layouts: str | None = None
    key_has_gpu: bool | None = None
    flashinfer_tune: FlashInferTune | None = None


# ---------------------------------------------------------------- roots


def root_source(env) -> str:
    if env.get("VLLM_CACHE_ROOT"):
        return "VLLM_CACHE_ROOT"
    return "XDG_CACHE_HOME" if env.get("XDG_CACHE_HOME") else "default"


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """vLLM's cache root (its partitions are expanded by the scanner) and jitwarden's private vLLM root."""
    return existing(
        KIND,
        [(partition.base_of(locations.vllm_cache_root(env)), root_source(env))]
        + private_root(KIND, env),
    )


def looks_like_root(path: str) -> bool:
    return any(
        os.path.isdir(os.path.join(path, d)) and not os.path.islink(os.path.join(path, d))
        for d in (COMPILE, AOT, FLASHINFER)
    )


# ---------------------------------------------------------------- entries


def _subdirs(path: str) -> list[str]:
    return [os.path.basename(d) for d in locations.subdirs(path)]


def _children(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _inductor_names(root: str, rel: str) -> list[str]:
    """Entries of a nested Inductor cache dir, as ids of this root (its ``triton/`` left to the Triton adapter)."""
    try:
        names, _ = inductor.list_entry_names(os.path.join(root, rel))
    except OSError:
        return [rel]
    return [f"{rel}/{n}" for n in names]


def _rank_names(root: str, rank_rel: str, aot: bool) -> list[str]:
    out = []
    rank = os.path.join(root, rank_rel)
    if aot:
        return [rank_rel]
    for c in _children(rank):
        p = os.path.join(rank, c)
        if c in TRITON_DIRS or is_reserved(c):
            continue
        if c == INDUCTOR and not os.path.islink(p) and os.path.isdir(p):
            out += _inductor_names(root, f"{rank_rel}/{c}")
        else:
            out.append(
                f"{rank_rel}/{c}"
            )  # a prefix dir (backbone, ...), or a loose file of prefix ""
    return out


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Entry ids (relative paths) of a vLLM cache root: compile dirs, AOT models, nested Inductor entries, DeepGEMM and FlashInfer autotune results."""
    os.scandir(root).close()  # an unreadable root is the scanner's error, not an empty list
    names = _compile_names(root)
    names += _aot_names(root, AOT)  # vLLM 0.11.1-0.13: <root>/torch_aot_compile/<hash>/rank_*/model
    names += _deepgemm_names(root)
    names += _flashinfer_names(root)
    return sorted(names), []


def _compile_names(root: str) -> list[str]:
    """Entry ids under ``torch_compile_cache/``: each hash's ranks, its loose files, its AOT models."""
    names: list[str] = []
    cc = os.path.join(root, COMPILE)
    for h in _subdirs(cc):
        hrel = f"{COMPILE}/{h}"
        if h == AOT:
            names += _aot_names(root, hrel)
            continue
        for r in _subdirs(os.path.join(cc, h)):
            names += _rank_names(root, f"{hrel}/{r}", aot=False)
        names += [
            f"{hrel}/{f}"
            for f in _children(os.path.join(cc, h))
            if not os.path.isdir(os.path.join(cc, h, f))
        ]
    return names


def _deepgemm_names(root: str) -> list[str]:
    """Entry ids under DeepGEMM's dir: its ``cache/`` items (where there is one) and the others."""
    dg = os.path.join(root, DEEP_GEMM)
    if os.path.isdir(os.path.join(dg, "cache")):
        return [f"{DEEP_GEMM}/cache/{c}" for c in _children(os.path.join(dg, "cache"))] + [
            f"{DEEP_GEMM}/{c}" for c in _children(dg) if c != "cache"
        ]
    return [f"{DEEP_GEMM}/{c}" for c in _children(dg)]


def _flashinfer_names(root: str) -> list[str]:
    """Entry ids under FlashInfer's autotune dir, ``<version>/<archs>/<hash>``; an item that is no directory
    where one is expected is an entry itself."""
    names: list[str] = []
    fi = os.path.join(root, FLASHINFER)
    for ver in _children(fi):
        vp = os.path.join(fi, ver)
        if not os.path.isdir(vp) or os.path.islink(vp):
            names.append(f"{FLASHINFER}/{ver}")
            continue
        for arch in _children(vp):
            ap = os.path.join(vp, arch)
            if not os.path.isdir(ap) or os.path.islink(ap):
                names.append(f"{FLASHINFER}/{ver}/{arch}")
                continue
            names += [f"{FLASHINFER}/{ver}/{arch}/{h}" for h in _children(ap)]
    return names


def _aot_names(root: str, rel: str) -> list[str]:
    out = []
    for h in _subdirs(os.path.join(root, rel)):
        hrel = f"{rel}/{h}"
        for c in _children(os.path.join(root, hrel)):
            p = os.path.join(root, hrel, c)
            if c == INDUCTOR and os.path.isdir(p) and not os.path.islink(p):
                out += _inductor_names(root, f"{hrel}/{c}")
            elif c in TRITON_DIRS or is_reserved(c):
                continue
            else:
                out.append(f"{hrel}/{c}")
    return out


# ---------------------------------------------------------------- reading


def _pairs(x):
    """vLLM's normalize_value turns mappings into sorted (key, value) pairs: read either form as a dict."""
    if isinstance(x, dict):
        return x
    if isinstance(x, (list, tuple)) and all(
        isinstance(p, (list, tuple)) and len(p) == 2 and isinstance(p[0], str) for p in x
    ):
        return dict(x)
    return None


def factors_facts(doc) -> dict:
    """``vllm_version`` and the ``system`` (GPU name, torch's CUDA, Triton's key) that ``cache_key_factors.json``
    records (any of vLLM's layouts), as facts of the entry."""
    out: dict = {}
    if not isinstance(doc, dict):
        return out
    cfg = _pairs(doc.get("config"))
    if cfg and isinstance(cfg.get("version"), str):
        out["vllm_version"] = cfg["version"]
    comp = _pairs(doc.get("compiler"))
    ind = comp.get("inductor") if comp else None
    system = _system_factors(ind) if ind is not None else {}
    if system:
        out["system"] = inductor_facts.SystemFactors(**system)
    return out


def _system_factors(ind) -> dict:
    """The system factors ``{"device": {"name"}, "version": {"cuda", "triton"}}`` wherever they sit in the
    inductor config's factors (the first found, depth first), as fields of :class:`SystemFactors`."""
    stack = [ind]
    while stack:
        x = stack.pop()
        d = _pairs(x)
        if d is not None and "device" in d:
            return _system_of(d)
        if isinstance(x, (list, tuple)):
            stack += list(x)
        elif isinstance(x, dict):
            stack += list(x.values())
    return {}


def _system_of(d: dict) -> dict:
    """The GPU name, CUDA and Triton key of one system factors mapping (those it has)."""
    system: dict = {}
    dev = _pairs(d["device"])
    if dev and isinstance(dev.get("name"), str):
        system["gpu_name"] = dev["name"]
    ver = _pairs(d.get("version"))
    if ver:
        if isinstance(ver.get("cuda"), str):
            system["cuda"] = ver["cuda"]
        if isinstance(ver.get("triton"), str):
            system["triton_key"] = ver["triton"][:24]
    return system


def _version_findings(facts: dict, judge: Judge) -> list[Finding]:
    out = []
    v, mine = facts.get("vllm_version"), judge.version("vllm")
    if v and mine and v != mine:
        out.append(
            Finding(
                "stale",
                f"compiled by vLLM {v}; vLLM {mine} is installed and keys its cache by its own version",
            )
        )
    system = facts.get("system") or inductor_facts.SystemFactors()
    gpu = system.gpu_name
    if gpu and judge.gpu_names and gpu not in judge.gpu_names:
        out.append(
            Finding(
                "stale",
                f"compiled for a {gpu}; this machine has {', '.join(sorted(set(judge.gpu_names)))}",
            )
        )
    cuda = system.cuda
    if cuda and judge.torch_cuda and cuda != judge.torch_cuda:
        out.append(
            Finding(
                "stale",
                f"compiled by a torch built with CUDA {cuda}; this torch uses CUDA {judge.torch_cuda}",
            )
        )
    return out


def vllm_release(version: str | None) -> tuple[int, int] | None:
    """(major, minor) of a vLLM version string such as ``0.34.0`` or ``0.32.0rc1.dev3+g1234``; None when unknown."""
    m = re.match(r"^(\d{1,9})\.(\d{1,9})(?!\d)", version or "")
    return (int(m.group(1)), int(m.group(2))) if m else None


#: vLLM 0.32 and later load a standalone artifact from ``<prefix dir>/<key>``; 0.16-0.31 from the
#: handle's absolute path (``InductorStandaloneAdaptor.load`` in ``vllm/compilation/compiler_interface.py``).
LOADS_BY_KEY_FROM = (0, 32)
FX_KEY = re.compile(r"^f[a-z2-7]{51}$")


def _opened(h: Handle, prefix_dir: str, rank_dir: str, by_key: bool) -> str:
    """What loading ``h`` finds, for a vLLM that opens ``<prefix>/<key>`` (``by_key``) or the stored path: ok, outside, missing."""
    if by_key:
        if "/" in h.key or h.key in ("", ".", ".."):
            return "missing"
        return "ok" if os.path.lexists(os.path.join(prefix_dir, h.key)) else "missing"
    p = os.path.normpath(h.path)
    if not os.path.isabs(p) or not (inside(p, rank_dir) or _same_tree(p, rank_dir)):
        return "outside"
    return "ok" if os.path.lexists(p) else "missing"


def handle_findings(
    handles: list[Handle], prefix_dir: str, rank_dir: str, reader: tuple[int, int] | None
) -> list[Finding]:
    """Findings on the graphs ``vllm_compile_cache.py`` lists, judged as the vLLM that reads them loads them.

    Evidence per rule: ``incomplete`` when the file vLLM opens is missing; ``foreign-path`` when it
    opens a path outside this rank's directory (a copied cache: it loads from the old tree, or fails).
    ``reader`` is the vLLM release that reads this cache (installed, else the one recorded in the
    entry). Unknown, and the two loaders disagree on a graph: ``unrecognised``, naming both.
    Legacy ``inductor`` handles are looked up by FX key in ``<rank>/inductor_cache`` (never by path).
    """
    outside: list[Handle] = []
    missing: list[Handle] = []
    unsure: list[Handle] = []
    by_verdict: dict[str, list[Handle]] = {"outside": outside, "missing": missing, "unsure": unsure}
    fxgraph = os.path.join(rank_dir, "inductor_cache", "fxgraph")
    for h in handles:
        verdict = _handle_verdict(h, fxgraph, prefix_dir, rank_dir, reader)
        if verdict is not None:
            by_verdict.get(verdict, []).append(h)
    return _handle_findings(len(handles), outside, missing, unsure)


def _handle_verdict(
    h: Handle, fxgraph: str, prefix_dir: str, rank_dir: str, reader: tuple[int, int] | None
) -> str | None:
    """What loading the graph ``h`` finds (``ok``, ``outside``, ``missing``; ``unsure`` when the loaders of
    the releases that may read it disagree); None for a handle that keeps no artifact, or a legacy one found."""
    if h.compiler == "inductor":
        if (
            FX_KEY.match(h.key)
            and os.path.isdir(fxgraph)
            and not os.path.isdir(os.path.join(fxgraph, h.key[1:3], h.key))
        ):
            return "missing"
        return None
    if h.compiler not in (None, "inductor_standalone"):
        return None  # eager and others keep no artifact
    old, new = _opened(h, prefix_dir, rank_dir, False), _opened(h, prefix_dir, rank_dir, True)
    if reader:
        return new if reader >= LOADS_BY_KEY_FROM else old
    # both loaders agree, or both fail (then the old loader's word, the more specific): else unsure
    return old if old == new or "ok" not in (old, new) else "unsure"


def _handle_findings(
    total: int, outside: list[Handle], missing: list[Handle], unsure: list[Handle]
) -> list[Finding]:
    """The findings of :func:`handle_findings`, one per verdict that some of the ``total`` graphs got."""
    out = []
    if outside:
        paths = [os.path.normpath(h.path) for h in outside]
        dirs = sorted({os.path.dirname(p) for p in paths})
        there = sum(os.path.lexists(p) for p in paths)
        out.append(
            Finding(
                "foreign-path",
                f"vllm_compile_cache.py points {len(outside)} of {total} graphs outside this "
                f"rank's directory, into {', '.join(dirs[:2])}{' …' if len(dirs) > 2 else ''} "
                f"({there} exist there: vLLM 0.16-0.31 loads them from that tree)",
            )
        )
    if missing:
        keys = [h.key for h in missing]
        out.append(
            Finding(
                "incomplete",
                f"vllm_compile_cache.py lists {len(keys)} artifact(s) that are missing: "
                f"{', '.join(keys[:3])}{' …' if len(keys) > 3 else ''}",
            )
        )
    if unsure:
        out.append(
            Finding(
                "unrecognised",
                f"vllm_compile_cache.py: {len(unsure)} graph(s) load differently by vLLM release "
                f"(0.16-0.31 open the stored path, e.g. {unsure[0].path}; 0.32 and later open "
                f"{unsure[0].key} here), and which vLLM reads this cache is not known here; not judged",
            )
        )
    return out


# ---------------------------------------------------------------- judging


def _orphans(s: Survey, judge: Judge, facts, temp=None) -> list[str]:
    """Report old temp files (``*.tmp``, or names ``temp`` matches); return the files that are not temp files."""
    real = []
    for f in s.files:
        base = os.path.basename(f.name)
        if base.endswith(".tmp") or (temp is not None and temp.match(base)):
            if judge.now - f.mtime >= judge.orphan_age:
                facts.findings.append(
                    Finding(
                        "orphan",
                        f"{f.name}: leftover of an interrupted write, "
                        f"{int((judge.now - f.mtime) // 60)} min old",
                    )
                )
        else:
            real.append(f.name)
    return real


def _judge_compile(root: str, name: str, s: Survey, judge: Judge, facts) -> None:
    """One ``torch_compile_cache/<hash>/rank_*/<prefix>`` dir."""
    facts.type = "compile"
    facts.name = os.path.basename(name)
    real = _orphans(s, judge, facts)
    files = {f.name: f for f in s.files}
    if "cache_key_factors.json" in files:
        _judge_factors(s.path, judge, facts)
    if "vllm_compile_cache.py" in files:
        _judge_graph_list(s.path, judge, facts)
    for rel in real:
        top = rel.split("/", 1)[0]
        size = files[rel].size
        if top.startswith("artifact_") and "/" not in rel:
            _judge_artifact(os.path.join(s.path, rel), rel, size, judge, facts)
        elif top.startswith("artifact_"):
            _judge_unpacked(os.path.join(s.path, rel), rel, size, judge, facts)
        elif rel.endswith(".py") and size == 0:
            facts.findings.append(Finding("corrupt", f"{rel} is empty"))


def _judge_factors(path: str, judge: Judge, facts) -> None:
    """``cache_key_factors.json`` of the compile dir ``path``: its facts recorded, against this environment."""
    try:
        doc = jsonlimits.loads(
            read_bytes(os.path.join(path, "cache_key_factors.json"), max_bytes=jsonlimits.MAX_BYTES)
        )
        got = factors_facts(doc)
        facts.extra.update(got)
        facts.findings += _version_findings(got, judge)
    except OSError as exc:
        facts.findings.append(unreadable("cache_key_factors.json", exc))
    except (ValueError, UnicodeDecodeError):
        facts.findings.append(Finding("corrupt", "cache_key_factors.json is not valid JSON"))


def _judge_graph_list(path: str, judge: Judge, facts) -> None:
    """``vllm_compile_cache.py`` of the compile dir ``path``: the graphs it lists, judged as the vLLM that reads
    this cache loads them."""
    add = facts.findings.append
    try:
        handles = graph_handles(
            read_bytes(os.path.join(path, "vllm_compile_cache.py"), max_bytes=jsonlimits.MAX_BYTES)
        )
    except OSError as exc:
        handles = []
        add(unreadable("vllm_compile_cache.py", exc))
    except (ValueError, SyntaxError, UnicodeDecodeError, MemoryError, RecursionError):
        handles = []
        add(
            Finding(
                "corrupt",
                "vllm_compile_cache.py is not a Python literal (vLLM would ignore it and recompile)",
            )
        )
    facts.extra["graphs"] = len(handles)
    reader = vllm_release(judge.version("vllm")) or vllm_release(facts.extra.get("vllm_version"))
    facts.findings += handle_findings(handles, path, os.path.dirname(path), reader)


def _judge_artifact(path: str, rel: str, size: int, judge: Judge, facts) -> None:
    """A standalone artifact file ``artifact_*``: its layout (CRC32, length fields), the GPU it names."""
    try:
        data = inductor_blobs.read_blob(
            path, rel, size
        )  # past WHOLE_MAX: one pass, its head, CRC and GPU
    except OSError as exc:
        facts.findings.append(unreadable(rel, exc))
        return
    if isinstance(data, inductor_blobs.Streamed):
        art = artifact_layout(data.head, size=data.size, crc_after_4=data.crc_after_4)
    else:
        art = artifact_layout(data)
    if art.code:
        facts.findings.append(Finding(art.code, f"{rel}: {art.why}"))
        return
    assert art.layout is not None  # a layout with no problem is named
    seen = set(filter(None, facts.extra.get("artifact_layouts", "").split(", ")))
    facts.extra["artifact_layouts"] = ", ".join(sorted(seen | {art.layout}))
    inductor.named_arch(inductor_blobs.device_props(data), judge, rel, facts)


def _judge_unpacked(path: str, rel: str, size: int, judge: Judge, facts) -> None:
    """A file of an artifact in the "unpacked" format, an Inductor cache dir of its own: judged as Inductor's
    are, the entry's type kept."""
    group = rel.split("/", 1)[1].split("/", 1)[0]
    try:
        data = inductor_blobs.read_blob(path, rel, size)
    except OSError as exc:
        facts.findings.append(unreadable(rel, exc))
        return
    saved = facts.type
    inductor.judge_blob(
        rel, data, size, judge, facts, group if group in inductor.PICKLE_DIRS else ""
    )
    facts.type = saved


def _same_tree(p: str, base: str) -> bool:
    try:
        return inside(os.path.realpath(p), os.path.realpath(base))
    except OSError:
        return False


def _judge_aot(name: str, s: Survey, judge: Judge, facts) -> None:
    """An AOT ``rank_<r>_<dp>`` dir: ``model`` (a pickle of the compiled function) and its temp files.

    vLLM 0.20+ saves to ``model.<pid>.tmp`` and renames it; torch 2.12+ writes that through a
    ``tempfile`` (``tmpXXXXXXXX``) it renames in turn. A dir with no ``model`` is a save that never
    finished: vLLM treats it as a miss and compiles again, so it is an ``orphan``, not damage.
    """
    facts.type = "aot"
    facts.extra["key_has_gpu"] = False
    real = _orphans(s, judge, facts, AOT_TEMP)
    if (
        s.is_dir and "model" not in real and len(real) == len(s.files)
    ):  # temp files are reported on their own
        newest = s.newest if s.files else s.mtime
        if judge.now - newest >= judge.orphan_age:
            facts.findings.append(
                Finding(
                    "orphan",
                    "no model file: an AOT save that never finished, "
                    f"{int((judge.now - newest) // 60)} min old (vLLM compiles again)",
                )
            )
    sizes = {f.name: f.size for f in s.files}
    for rel in real:
        path = os.path.join(s.path, rel) if s.is_dir else s.path
        try:
            data = inductor_blobs.read_blob(
                path, rel, sizes.get(rel, 0)
            )  # past WHOLE_MAX: one pass, never held
        except OSError as exc:
            facts.findings.append(unreadable(rel, exc))
            continue
        if os.path.basename(rel) == "model":
            why = inductor_blobs.pickle_problem(data)
            if why:
                facts.findings.append(Finding("corrupt", f"{rel}: {why}"))
                continue
            arch, fs = inductor.arch_findings(inductor_blobs.device_props(data), judge, rel)
            facts.findings += fs
            facts.arch = arch


def _judge_files(s: Survey, judge: Judge, facts, kind: str) -> None:
    """DeepGEMM kernels and FlashInfer autotune results: cubins by ELF, JSON by parsing."""
    facts.type = kind
    real = _orphans(s, judge, facts)
    sizes = {f.name: f.size for f in s.files}
    for rel in real:
        path = os.path.join(s.path, rel) if s.is_dir else s.path
        if rel.endswith(
            ".cubin"
        ):  # judged as Inductor's are: by ELF, past WHOLE_MAX by its header alone
            try:
                data = inductor_blobs.read_blob(path, rel, sizes.get(rel, 0))
            except OSError as exc:
                facts.findings.append(unreadable(rel, exc))
                continue
            inductor.judge_blob(rel, data, sizes.get(rel, 0), judge, facts)
            facts.type = kind
        elif rel.endswith(".json"):
            try:
                jsonlimits.loads(
                    read_bytes(path, max_bytes=jsonlimits.MAX_BYTES)
                )  # past what it parses: refused unread
            except OSError as exc:
                facts.findings.append(unreadable(rel, exc))
            except (ValueError, UnicodeDecodeError):
                facts.findings.append(Finding("corrupt", f"{rel} is not valid JSON"))


def _flashinfer_facts(name: str, judge: Judge, facts) -> None:
    """``flashinfer_autotune_cache/<flashinfer version>/<archs>/<hash>``: the path names both."""
    parts = name.split("/")
    if len(parts) < 4:
        return
    ver, archs = parts[1], parts[2]
    facts.name = f"{ver}/{archs}"
    facts.extra["flashinfer_tune"] = FlashInferTune(ver, archs)
    mine = judge.version("flashinfer")
    if mine and ver != mine and re.match(r"^\d+\.\d+", ver):
        facts.findings.append(
            Finding("stale", f"tuned by FlashInfer {ver}; FlashInfer {mine} is installed")
        )
    built = [int(m.group(1)) for m in _ARCH.finditer(archs)]
    if judge.target_arch is not None and built and judge.target_arch not in built:
        facts.findings.append(
            Finding(
                "foreign-arch",
                f"tuned under FlashInfer's workspace for sm_{archs}, judged against "
                f"sm_{judge.target_arch}: unreachable here",
            )
        )


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read (never following a symlink, never unpickling) and judge one entry of a vLLM cache root.

    Evidence per rule: ``corrupt`` for JSON, Python literals, pickles (framing), artifacts (CRC32,
    length fields) and cubins (ELF) that do not parse; ``incomplete``/``foreign-path`` for the
    artifacts ``vllm_compile_cache.py`` lists that the reading vLLM would find missing or load from
    outside the entry; ``stale`` when the entry's own ``cache_key_factors.json`` names another vLLM
    version, GPU or torch CUDA than this environment's, all of which vLLM's cache key holds;
    ``orphan`` for old temp files and unfinished AOT saves. An artifact layout or a loader that
    depends on an unknown release is ``unrecognised`` (info).
    """
    parts = name.split("/")
    if (
        INDUCTOR in parts
    ):  # a nested Inductor cache dir: the Inductor adapter's judgement, reported under this root
        i = parts.index(INDUCTOR)
        sub_root = os.path.join(root, *parts[: i + 1])
        return inductor.inspect_entry_as(
            KIND, root, sub_root, "/".join(parts[i + 1 :]), name, judge, root_uid, VllmFacts
        )
    s = survey(root, name)
    facts = inductor_facts.Judging(VllmFacts)
    if s.is_symlink:
        facts.type = "link"
        return inductor_facts.entry_of(
            KIND, root, name, s, facts, inductor.link_findings(s, "vLLM")
        )
    findings = survey_findings(s, root_uid)
    if parts[0] == COMPILE and len(parts) >= 3 and parts[1] == AOT or parts[0] == AOT:
        _judge_aot(name, s, judge, facts)
    elif parts[0] == COMPILE and len(parts) == 4 and RANK.match(parts[2]) and s.is_dir:
        _judge_compile(root, name, s, judge, facts)
    elif parts[0] == DEEP_GEMM:
        _judge_files(s, judge, facts, "deepgemm")
    elif parts[0] == FLASHINFER:
        _judge_files(s, judge, facts, "flashinfer-autotune")
        _flashinfer_facts(name, judge, facts)
    else:
        _orphans(s, judge, facts)
    return inductor_facts.entry_of(KIND, root, name, s, facts, findings + facts.findings)
