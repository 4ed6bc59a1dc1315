"""The runtime half of each cache kind: one guard module per kind, and how they are put in a workload (stdlib only).

A guard sits on one cache dir of its tool, between the tool's own read and write of an entry (ARCHITECTURE.md,
"The runtime"): :class:`Guard` is what every guard does, whatever names the tool gives its methods; the modules
of :data:`MODULES` implement it, one per kind (its row in ``model/kinds.py`` names it). Triton imports its
guard itself (``TRITON_CACHE_MANAGER``); the others wrap the tool's private functions in place as the tool
imports them (:data:`HOOKS`, through :mod:`~jitwarden.runtime.postimport`). This package imports none of its
modules: each is imported when its tool is, so activation costs the standard library only and never imports
torch or touches CUDA.
"""

from __future__ import annotations

import os

from jitwarden.model import kinds
from jitwarden.model.settings import LOAD_HOOKS, TORCH_HOOKS
from jitwarden.runtime import postimport

TYPE_CHECKING = False  # mypy takes it as true
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, Protocol


if TYPE_CHECKING:  # the protocols mypy holds each guard to; typing stays off the activation path

    class Guard(Protocol):
        """One cache dir of one tool, guarded: the tool's own read and write of an entry call these two.

        ``check_read(name)``: before the tool reads the entry ``name``, what it may use of it (the checked bytes, or
        private copies of them), else None, a miss: absent, changed since sealed (set aside, with a line), unproven,
        or anything jitwarden could not check (an error of its own is a miss, never raised into the tool).
        ``seal_write(name, data)``: once the tool wrote ``name`` (``data``: what it wrote), seal it when what is on
        disk is that; an error leaves it unsealed, to be proven at its next read, never raised into the tool."""

        KIND: str
        """Its row in ``model/kinds.py``."""

        def check_read(self, name: str) -> object: ...

        def seal_write(self, name: str, data: Any) -> object: ...

    class Prover(Guard, Protocol):
        """A guard that proves an unsealed entry before it is used or sealed: ``prove(name, ...)`` judges it against
        what the tool (or a rebuild) makes of its source, seals it when they agree and sets it aside when they
        do not. Triton's and the Inductor bundle's proofs rebuild the PTX (:mod:`~jitwarden.runtime.proof`); JAX's
        and CuPy's compare the compile their miss made; numba-cuda's guard has nothing to prove from (an unsealed
        entry is compiled again)."""

        @property
        def prove(self) -> Callable[..., object]: ...


def table(rows) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """(kind -> its guard module, a tool's module -> (the kind whose guard wraps it, that guard's function)) of
    the kinds' ``rows`` (pure). A kind's guard is ``guards.<kind>`` where its row names it first (a kind without
    one is guarded by others', as vLLM's kernels are Triton's and Inductor's, or checked by ``verify`` only);
    what it wraps once imported is its row's ``hooks``, in order."""
    mods = {
        r.name: f"jitwarden.runtime.{r.guard[0]}"
        for r in rows
        if r.guard[:1] == (f"guards.{r.name}",)
    }
    hooks = {m: (r.name, fn) for r in rows if r.name in mods for m, fn in r.hooks}
    return mods, hooks


MODULES, HOOKS = table(kinds.ROWS)


def module_of(fn: str, kind: str) -> str:
    """The tool module that kind ``kind``'s guard wraps with its function ``fn``: named once, in its row's
    ``hooks``; KeyError for a pair no row declares."""
    for m, pair in HOOKS.items():
        if pair == (kind, fn):
            return m
    raise KeyError((kind, fn))


BUNDLER = module_of("patch_bundler", "inductor")
CODECACHE = module_of("patch_codecache", "inductor")
AOTCACHE = module_of("patch_aotcache", "inductor")
JAX_COMPILER = module_of("patch_compiler", "jax")
JAX_CACHE = module_of("patch_cache", "jax")
CUPY_COMPILER = module_of("patch", "cupy")
NUMBA_CACHING = module_of("patch", "numba")
"""The tool modules the guards name in their own code, read from the rows' ``hooks`` (never typed twice)."""

TORCH_MODULES = tuple(m for m, (kind, _f) in HOOKS.items() if kind == "inductor")
LOAD_MODULES = tuple(m for m, (kind, _f) in HOOKS.items() if kind != "inductor")

STATIC = "static launcher"
"""The :func:`torch_status` key of how the static launcher's loads are checked (the Inductor guard's)."""
noted: dict[str, str] = {}
"""What a guard says of itself beyond its patches (the Inductor guard: :data:`STATIC`)."""


def load(kind: str) -> Any:
    """The guard module of ``kind``, imported now (its tool is: a guard module may import it)."""
    import importlib

    return importlib.import_module(MODULES[kind])


def _patch(module: str) -> Callable[[Any], None]:
    """What :mod:`postimport` runs once ``module`` is imported: its guard's patch, the guard imported then."""
    kind, fn = HOOKS[module]
    return lambda mod: getattr(load(kind), fn)(mod)


def _refused(module: str, exc: Exception) -> str:
    """The state of a hook that did not fit the tool as installed: the guard's own fallback (issue 42: one line,
    and whatever check it does instead)."""
    return load(HOOKS[module][0]).refused(module, exc)


def _install(modules: tuple[str, ...]) -> dict[str, str]:
    return {m: postimport.when_imported(m, _patch(m), on_error=_refused) for m in modules}


def torch_enabled(env=None) -> bool:
    """False only when ``JITWARDEN_TORCH_HOOKS`` is turned off (its row in model/settings.py)."""
    return TORCH_HOOKS.on(os.environ if env is None else env)


def install_torch(env=None) -> dict[str, str]:
    """Guard torch's kernel and graph loaders now where imported, else as soon as torch imports them; never raises.

    Returns {module: "guarded" | "waiting for import" | why not} (:func:`torch_status`)."""
    try:
        if not torch_enabled(env):
            return dict.fromkeys(TORCH_MODULES, f"{TORCH_HOOKS.name}=0")
        _install(TORCH_MODULES)
        return torch_status()
    except Exception as exc:
        return {m: f"not installed ({type(exc).__name__}: {exc})" for m in TORCH_MODULES}


def torch_status() -> dict[str, str]:
    """{module: how it is guarded}, and how the static launcher's loads are checked once torch's code cache is in."""
    out = {m: _waiting(postimport.status(m)) for m in TORCH_MODULES}
    if STATIC in noted:
        out[STATIC] = noted[STATIC]
    return out


def _waiting(state: str) -> str:
    return "waiting for import" if state == "not asked for" else state


def install_load_hooks(env=None) -> dict[str, str]:
    """Guard JAX's persistent cache, CuPy's and numba-cuda's kernel caches in this process, now or as soon as each
    imports the module wrapped; never raises. Returns {module: state}. Off with ``JITWARDEN_LOAD_HOOKS=0``."""
    if not LOAD_HOOKS.on(os.environ if env is None else env):
        return dict.fromkeys(LOAD_MODULES, f"{LOAD_HOOKS.name}=0")
    try:
        return _install(LOAD_MODULES)
    except Exception as exc:
        return dict.fromkeys(LOAD_MODULES, f"not installed ({type(exc).__name__}: {exc})")


def hooked(env) -> tuple[str, ...]:
    """The kinds whose loads the load hooks will check in a Python started with ``env``: ``jax`` where JAX is
    installed, ``cupy`` where CuPy has its kernel-cache backend (14 and later: ``cuda/_compiler_cache.py``); () with
    ``JITWARDEN_LOAD_HOOKS=0``. Found without importing either."""
    if not LOAD_HOOKS.on(env):
        return ()
    out: tuple[str, ...] = ("jax",) if postimport.package_dir("jax") else ()
    cupy = postimport.package_dir("cupy")
    if cupy and os.path.isfile(os.path.join(cupy, "cuda", "_compiler_cache.py")):
        out += ("cupy",)
    return out


# ---------------------------------------------------------------- every Python ``jitwarden run`` starts


def boot_dir() -> str:
    """The directory whose ``sitecustomize`` installs these guards in every Python that ``jitwarden run`` starts."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "_boot")


def add_boot_path(env) -> bool:
    """Put :func:`boot_dir` first on ``env``'s ``PYTHONPATH`` when torch is installed and the torch hooks are on.

    ``jitwarden run`` activates in its own process and then execs the command, so the hooks
    must be installed by the command's interpreter itself. True when it was added (or was there).
    """
    if not torch_enabled(env) or postimport.package_dir("torch") is None:
        return False
    put_boot_path(env)
    return True


def put_boot_path(env) -> None:
    """Put :func:`boot_dir` first on ``env``'s ``PYTHONPATH`` (once)."""
    d = boot_dir()
    parts = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if d not in parts:
        env["PYTHONPATH"] = os.pathsep.join([d, *parts])
