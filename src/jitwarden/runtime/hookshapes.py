"""The private functions jitwarden's load hooks wrap, and what each hook needs of them (stdlib only).

A tool's cache functions are private and change shape between releases (JAX 0.11 dropped ``_cache_write``'s
``host_callbacks``: a wrapper written for 0.10's shape crashed every guarded program). So no hook copies a
signature: each row here names the parameters its hook reads, a wrapper binds the real function's own signature
(:func:`bind`) to find them and passes every argument through unchanged, and a function whose shape lacks one is
not hooked at all (:func:`fit` raises :class:`ShapeError` at patch time): the tool then runs as it is, its cache
checked at start-up only, said in one line.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

TYPE_CHECKING = False  # mypy takes it as true; the runtime imports nothing for annotations
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


class ShapeError(TypeError):
    """A tool's private function is not of a shape a hook knows: that tool is left unhooked."""


@dataclass(frozen=True, kw_only=True)
class Target:
    """One function a hook wraps: ``attr`` of ``module`` (``Class.method`` for a method), the parameter names the
    hook reads (``needs``)."""

    tool: str
    module: str
    attr: str
    needs: tuple[str, ...]

    @property
    def name(self) -> str:
        return f"{self.module}.{self.attr}"


# Every private function a load hook wraps or replaces, with the parameters it reads (tests/unit/runtime/
# test_hookshapes.py runs each against the real shapes of every supported release, JAX 0.9 to 0.12 included).
TARGETS: tuple[Target, ...] = (
    Target(tool="jax", module="jax._src.compilation_cache", attr="get_file_cache", needs=("path",)),
    Target(
        tool="jax",
        module="jax._src.compiler",
        attr="_cache_write",
        needs=(
            "cache_key",
            "executable",
        ),  # without it unsealed files are judged at first sight, not proven
    ),
    Target(
        tool="cupy",
        module="cupy.cuda.compiler",
        attr="_set_kernel_cache_backend",
        needs=("backend",),
    ),
    Target(
        tool="cupy",
        module="cupy.cuda._compiler_cache",
        attr="DiskKernelCacheBackend.load",
        needs=("name",),
    ),
    Target(
        tool="cupy",
        module="cupy.cuda._compiler_cache",
        attr="DiskKernelCacheBackend.save",
        needs=("name", "cubin"),
    ),
    Target(
        tool="numba",
        module="numba.cuda.core.caching",
        attr="IndexDataCacheFile._load_index",
        needs=(),
    ),
    Target(
        tool="numba",
        module="numba.cuda.core.caching",
        attr="IndexDataCacheFile._load_data",
        needs=("name",),
    ),
    Target(
        tool="numba",
        module="numba.cuda.core.caching",
        attr="IndexDataCacheFile._save_index",
        needs=("overloads",),
    ),
    Target(
        tool="numba",
        module="numba.cuda.core.caching",
        attr="IndexDataCacheFile._save_data",
        needs=("name", "data"),
    ),
    Target(
        tool="torch",
        module="torch._inductor.triton_bundler",
        attr="TritonBundler.read_and_emit",
        needs=("bundle",),
    ),
    Target(
        tool="torch",
        module="torch._inductor.codecache",
        attr="GuardedCache.iterate_over_candidates",
        needs=("local", "key"),
    ),
    Target(
        tool="torch",
        module="torch._inductor.codecache",
        attr="FxGraphCache._write_to_local_cache",
        needs=("key", "content"),
    ),
    Target(
        tool="torch",
        module="torch._functorch._aot_autograd.autograd_cache",
        attr="AOTAutogradCache._write_to_local_cache",
        needs=("key", "content"),
    ),
)
BY_NAME = {t.name: t for t in TARGETS}


def target(module: str, attr: str) -> Target:
    return BY_NAME[f"{module}.{attr}"]


def missing(params: tuple[str, ...], t: Target) -> tuple[str, ...]:
    """The parameters ``t``'s hook needs that a function taking ``params`` lacks (a ``**kwargs`` hides none)."""
    return tuple(n for n in t.needs if n not in params)


def fit(fn: Callable[..., Any], t: Target):
    """``fn``'s signature when ``t``'s hook can find every parameter it needs in it; :class:`ShapeError` naming
    what is missing otherwise (the hook is then not installed)."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError) as exc:
        raise ShapeError(f"{t.name} has no signature to bind ({exc})") from None
    lack = missing(tuple(sig.parameters), t)
    if lack:
        raise ShapeError(
            f"{t.name}{sig} has no parameter {', '.join(lack)}, which jitwarden's hook reads"
        )
    return sig


def bind(sig, args: tuple, kwargs: dict) -> dict[str, Any]:
    """The arguments of one call by name, as the real function's signature ``sig`` binds them (defaults
    applied); TypeError when the call does not fit it (the wrapper then only passes the call through)."""
    b = sig.bind(*args, **kwargs)
    b.apply_defaults()
    return dict(b.arguments)


def rebind(sig, args: tuple, kwargs: dict, **changes: Any) -> tuple[tuple, dict]:
    """(args, kwargs) of the same call with the named arguments in ``changes`` replaced, bound by ``sig``."""
    b = sig.bind(*args, **kwargs)
    b.arguments.update(changes)
    return b.args, b.kwargs


# ---------------------------------------------------------------- without importing the tool (doctor, run -v)

MAX_SOURCE = 4 << 20
"""A tool's module source read at most (the largest of these, torch's codecache.py, is about 150 KiB)."""

# Where each tool's modules are found without importing it: (a top-level package dir, whether the module's own
# top package lies inside it). numba-cuda 0.30 installs ``numba.cuda`` as ``numba_cuda/numba/cuda`` behind a
# redirector; older ones inside numba itself.
_PACKAGES = {
    "jax": (("jax", False),),
    "cupy": (("cupy", False),),
    "numba": (("numba_cuda", True), ("numba", False)),
    "torch": (("torch", False),),
}
DISTS = {
    "jax": ("jax",),
    "cupy": ("cupy-cuda13x", "cupy-cuda12x", "cupy"),
    "numba": ("numba-cuda",),
    "torch": ("torch",),
}
FALLBACK = {
    "jax": "start-up check only",
    "cupy": "start-up check only",
    "numba": "none",
    "torch": "swept at start-up",
}


@dataclass(frozen=True, kw_only=True)
class Protection:
    """What guards one installed tool's cache in a workload jitwarden activates: ``state`` is ``load hook``, the
    kind's fallback (``start-up check only``, ``swept at start-up``) or ``none``; ``why`` when it is not the hook."""

    tool: str
    version: str
    state: str
    why: str | None = None

    def line(self) -> str:
        from jitwarden.model import kinds

        return f"{kinds.tool(self.tool)} {self.version}: {self.state}" + (
            f" ({self.why})" if self.why else ""
        )

    def to_json(self) -> dict:
        return {"tool": self.tool, "version": self.version, "state": self.state, "why": self.why}


def static_params(source: str, attr: str) -> tuple[str, ...] | None:
    """The parameter names of ``attr`` (``f`` or ``Class.method``) as ``source`` defines it at its top level, or
    None when it defines no such function. Read with :mod:`ast`, nothing run (``inspect`` needs the import)."""
    import ast

    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    body: list = tree.body
    *outer, last = attr.split(".")
    for part in outer:
        cls = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == part), None)
        if cls is None:
            return None
        body = cls.body
    for n in body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == last:
            a = n.args
            names = [x.arg for x in (*a.posonlyargs, *a.args)]
            names += [a.vararg.arg] if a.vararg else []
            names += [x.arg for x in a.kwonlyargs]
            names += [a.kwarg.arg] if a.kwarg else []
            return tuple(names)
    return None


def static_fit(source: str | None, t: Target) -> str | None:
    """Why ``t``'s hook would not be installed over ``source`` (its module's text), None when it would be: the same
    rule as :func:`fit`, over the source rather than the imported function."""
    if source is None:
        return f"{t.module} not found"
    params = static_params(source, t.attr)
    if params is None:
        return f"{t.name} not defined"
    lack = missing(params, t)
    return f"{t.name} has no parameter {', '.join(lack)}" if lack else None


def _source(tool: str, module: str, package_dir) -> str | None:
    """The text of ``module`` of ``tool`` as installed (``package_dir(top)`` finds a package without importing it)."""
    from jitwarden.store import reads

    for top, inside in _PACKAGES[tool]:
        d = package_dir(top)
        if d is None:
            continue
        parts = module.split(".")
        path = os.path.join(d, *(parts if inside else parts[1:])) + ".py"
        try:
            return reads.read_bytes(path, max_bytes=MAX_SOURCE).decode("utf-8", "replace")
        except OSError:
            continue
    return None


def protection(env=None, package_dir=None, version=None) -> list[Protection]:
    """Per installed tool (JAX, CuPy, numba-cuda, torch), which protection a workload jitwarden activates gets: the
    load hook when every function it wraps is of a shape it knows (:func:`static_fit` over the installed source),
    else the kind's fallback with the reason; off with ``JITWARDEN_LOAD_HOOKS=0`` / ``JITWARDEN_TORCH_HOOKS=0``.
    ``package_dir`` and ``version`` (a distribution's version, by name): the environment judged against."""
    from jitwarden.model.settings import LOAD_HOOKS, TORCH_HOOKS

    env = os.environ if env is None else env
    if package_dir is None:
        from jitwarden.env.interpreter import package_dir
    version = version or _version
    out = []
    for tool in ("jax", "cupy", "numba", "torch"):
        if not any(package_dir(top) for top, _p in _PACKAGES[tool]):
            continue
        ver = version_of(tool, version)
        switch = TORCH_HOOKS if tool == "torch" else LOAD_HOOKS
        if not switch.on(env):
            out.append(
                Protection(tool=tool, version=ver, state=FALLBACK[tool], why=f"{switch.name}=0")
            )
            continue
        out.append(_judged(tool, ver, _misfits(tool, package_dir)))
    return out


def _misfits(tool: str, package_dir) -> dict[str, str]:
    """{hooked function: why its hook would not be installed} over ``tool``'s installed source, each module read once."""
    sources: dict[str, str | None] = {}
    bad: dict[str, str] = {}
    for t in (t for t in TARGETS if t.tool == tool):
        if t.module not in sources:
            sources[t.module] = _source(tool, t.module, package_dir)
        why = static_fit(sources[t.module], t)
        if why is not None:
            bad[t.name] = why
    return bad


def _judged(tool: str, ver: str, bad: dict[str, str]) -> Protection:
    """The protection ``tool`` (release ``ver``) gets with the hooks that would not fit (``bad``)."""
    if not bad:
        return Protection(tool=tool, version=ver, state="load hook")
    if set(bad) == {OPTIONAL}:  # the cache hooked, its unsealed files judged as read, not proven
        why = f"without its compile proof: {bad[OPTIONAL]}"
        return Protection(tool=tool, version=ver, state="load hook", why=why)
    if tool == "cupy" and f"{CUPY_CACHE} not found" in bad.values():
        why = "CuPy 13 and older have no cache backend"
        return Protection(tool=tool, version=ver, state=FALLBACK[tool], why=why)
    why = "; ".join(dict.fromkeys(bad.values()))
    return Protection(tool=tool, version=ver, state=FALLBACK[tool], why=why)


OPTIONAL = "jax._src.compiler._cache_write"
"""The one hooked function a tool is hooked without: JAX's compile proof (its guard then judges at first sight)."""
CUPY_CACHE = "cupy.cuda._compiler_cache"


def version_of(tool: str, version=None) -> str:
    """The installed release of ``tool`` (``jax``, ``cupy``, ``numba``, ``torch``) by its distribution's metadata,
    nothing imported; ``version``: how a distribution's version is found (default: the environment judged
    against)."""
    find = version or _version
    return next((v for d in DISTS[tool] if (v := find(d))), "(version unknown)")


def _version(dist: str) -> str | None:
    from importlib import metadata

    from jitwarden.env.interpreter import search_path

    try:
        found = next(iter(metadata.distributions(name=dist, path=search_path())), None)
    except Exception:
        return None
    return found.version if found is not None else None


# ---------------------------------------------------------------- torch's loaders, for doctor

#: What each wrapper needs to find in torch's source: module -> (file, the definitions it wraps).
_SHAPES = {
    "torch._inductor.triton_bundler": (
        "_inductor/triton_bundler.py",
        ("def read_and_emit(", "triton_cache_dir", "_REPLACE_BYTES"),
    ),
    "torch._inductor.codecache": (
        "_inductor/codecache.py",
        (
            "def iterate_over_candidates(",
            "def _write_to_local_cache(",
            "class StaticAutotunerFuture",
        ),
    ),
    "torch._functorch._aot_autograd.autograd_cache": (
        "_functorch/_aot_autograd/autograd_cache.py",
        ("def _write_to_local_cache(",),
    ),
}


_SOURCE_MAX = 16 << 20
"""torch's largest source file is a few MB: anything past this is not the file the wrappers know."""


def _torch_dir() -> str | None:
    from jitwarden.runtime.postimport import package_dir

    return package_dir("torch")


def doctor_warnings(env=None) -> list[tuple[str, str, str | None]]:
    """(kind, text, fix) for ``jitwarden doctor``: what torch restores that these wrappers cannot guard here.

    Reads torch's source files as text (never imports torch): a wrapper attaches only to the
    definitions it knows, so one missing from this torch is a way kernels arrive unguarded mid-run.
    """
    from jitwarden.model.settings import TORCH_HOOKS
    from jitwarden.store.reads import read_bytes

    env = os.environ if env is None else env
    tdir = _torch_dir()
    if tdir is None:
        return []
    out: list[tuple[str, str, str | None]] = []
    if not TORCH_HOOKS.on(env):
        out.append(
            (
                "torch-hooks",
                f"{TORCH_HOOKS.name}=0: Triton kernels TorchInductor restores mid-run (FX-graph bundles, "
                "remote caches, AOT artifacts) are checked only at the next start-up, by a sweep of every "
                "entry (a start-up that grows with the cache), and FX-graph pickles are not sealed",
                f"unset {TORCH_HOOKS.name}",
            )
        )
        return out
    missing = []
    for rel, needles in _SHAPES.values():
        try:
            text = read_bytes(os.path.join(tdir, rel), max_bytes=_SOURCE_MAX).decode(
                "utf-8", "replace"
            )
        except OSError:
            missing.append(f"{rel} (absent)")
            continue
        lacks = [n for n in needles if n not in text]
        if lacks:
            missing.append(f"{rel} (no {', '.join(lacks)})")
    if missing:
        out.append(
            (
                "torch-hooks",
                "this torch's " + "; ".join(missing) + ": the kernels or pickles it restores "
                "mid-run cannot be wrapped (without StaticAutotunerFuture, every Triton tree in use is swept as "
                "torch imports its code cache, a start-up that grows with the cache)",
                "export TORCHINDUCTOR_BUNDLE_TRITON_INTO_FX_GRAPH_CACHE=0  (Inductor then compiles through "
                f"Triton's guarded cache instead of restoring bundles; {TORCH_HOOKS.name}=0 silences this)",
            )
        )
    if env.get("TORCHINDUCTOR_KEEP_STATIC_CUBIN_RAW") == "1":
        out.append(
            (
                "torch-hooks",
                "TORCHINDUCTOR_KEEP_STATIC_CUBIN_RAW=1: raw cubins carried in FX-graph pickles have "
                "no PTX to prove them, so jitwarden drops them; a kernel whose directory is not on disk recompiles",
                "unset TORCHINDUCTOR_KEEP_STATIC_CUBIN_RAW",
            )
        )
    return out
