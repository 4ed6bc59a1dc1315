"""Patch a module right after Python imports it, or now if it is imported (stdlib only).

The tools whose loads jitwarden checks offer no plug-in point (ARCHITECTURE.md, "The runtime"): their one read and
write of a cache are wrapped in place. :func:`when_imported` never imports the module itself: a finder first on
``sys.meta_path`` wraps the module's loader so the patch runs after the module's own code, before anyone uses it.
A patch that raises leaves the module as it was and says why in :func:`status` (in the caller's words when it
gives ``on_error``). One finder serves every hook that waits for a module (torch's, JAX's, CuPy's, numba's).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

_patches: dict[str, Callable[[Any], None]] = {}
_on_error: dict[str, Callable[[str, Exception], str]] = {}
_applied: dict[str, str] = {}  # module name -> "guarded" or why not


def when_imported(
    name: str,
    patch: Callable[[Any], None],
    *,
    on_error: Callable[[str, Exception], str] | None = None,
) -> str:
    """Run ``patch(module)`` once for module ``name``: now when imported, else right after its import. Returns
    its state ("guarded", "waiting for import" or why not); never raises.

    ``on_error(name, exc)``: the state to record when ``patch`` raises (it may also warn); else a line of this
    module's own."""
    if name in _applied:
        return _applied[name]
    _patches[name] = patch
    if on_error is not None:
        _on_error[name] = on_error
    mod = sys.modules.get(name)
    if mod is not None:
        _apply(name, mod)
        return _applied[name]
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
    return "waiting for import"


def package_dir(top: str) -> str | None:
    """The directory of the installed top-level package ``top``: found, not imported; None when absent."""
    import importlib.util
    import os

    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def status(name: str) -> str:
    return _applied.get(name, "waiting for import" if name in _patches else "not asked for")


def _apply(name: str, module) -> None:
    if name in _applied:
        return
    try:
        _patches[name](module)
        _applied[name] = "guarded"
    except Exception as exc:
        _applied[name] = _on_error.get(name, _not_guarded)(name, exc)


def _not_guarded(name: str, exc: Exception) -> str:
    return f"not guarded: {name} is not the shape jitwarden knows ({type(exc).__name__}: {exc})"


class _Finder:
    """Finds nothing itself: wraps the loader of a watched module so it is patched after it runs."""

    def find_spec(self, name, path=None, target=None):
        if name not in _patches or name in _applied:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        if spec.loader is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _Loader(spec.loader, name)
        return spec


class _Loader:
    def __init__(self, inner, name: str) -> None:
        self._inner, self._name = inner, name

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, attr):
        return getattr(self._inner, attr)
