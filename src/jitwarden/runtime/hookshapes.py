"""The private functions jitwarden's load hooks wrap, and what each hook needs of them (stdlib only).

A tool's cache functions are private and change shape between releases (JAX 0.11 dropped ``_cache_write``'s
``host_callbacks``: a wrapper written for 0.10's shape crashed every guarded program). So no hook copies a
signature: each row here names the parameters its hook reads, a wrapper binds the real function's own signature
(:func:`bind`) to find them and passes every argument through unchanged, and a function whose shape lacks one is
not hooked at all (:func:`fit` raises :class:`ShapeError` at patch time): the tool then runs as it is, its cache
checked at start-up only, said in one line.
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
