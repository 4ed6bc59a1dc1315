"""The private functions jitwarden's load hooks wrap, and what each hook needs of them (stdlib only).

A tool's cache functions are private and change shape between releases (JAX 0.11 dropped ``_cache_write``'s
``host_callbacks``: a wrapper written for 0.10's shape crashed every guarded program). So no hook copies a
signature: each row here names the parameters its hook reads, a wrapper binds the real function's own signature
(:func:`bind`) to find them and passes every argument through unchanged, and a function whose shape lacks one is
not hooked at all (:func:`fit` raises :class:`ShapeError` at patch time): the tool then runs as it is, its cache
checked at start-up only, said in one line.

The same rows answer ``doctor``'s question "which protection is active for this tool" without importing it:
:func:`static_fit` reads the tool's source with :mod:`ast` (``inspect`` needs the import).
"""

from __future__ import annotations

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
    hook reads (``needs``), and whether it must exist for the tool to be hooked at all (``required``)."""

    tool: str
    module: str
    attr: str
    needs: tuple[str, ...]
    required: bool = True

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
        needs=("cache_key", "executable"),
        required=False,  # without it unsealed files are judged at first sight, not proven (flathooks)
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


def params_of(fn: Callable[..., Any]) -> tuple[str, ...]:
    import inspect  # at patch time only: the tool is being imported, and imports inspect itself

    return tuple(inspect.signature(fn).parameters)


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


# ---------------------------------------------------------------- without importing the tool (doctor)


def static_params(source: str, attr: str) -> tuple[str, ...] | None:
    """The parameter names of ``attr`` (``f`` or ``Class.method``) as ``source`` defines it at its top level, or
    None when it defines no such function (then :func:`static_fit` says so). Read with :mod:`ast`, nothing run."""
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
        if isinstance(n, (ast.Assign, ast.AnnAssign)) and not outer:
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            if any(isinstance(x, ast.Name) and x.id == last for x in targets):
                return ()  # assigned, not defined here: known to exist, its shape unknown
    return None


def static_fit(source: str | None, t: Target) -> str | None:
    """Why ``t``'s hook would not be installed over ``source`` (the module's text), None when it would be."""
    if source is None:
        return f"{t.module} not found"
    params = static_params(source, t.attr)
    if params is None:
        return f"{t.name} not defined"
    if params == ():
        return None if not t.needs else f"{t.name}'s parameters unknown"
    lack = missing(params, t)
    return f"{t.name} has no parameter {', '.join(lack)}" if lack else None
