"""Cache adapters, one module per cache kind, behind one small interface.

Each adapter module defines:

- ``KIND``: the kind's name (``triton``, ``inductor``, ...);
- ``discover_roots(env) -> list[CacheRoot]``: the roots this environment points at, found
  the way the real tool finds them (same variables, same precedence, same defaults),
  existing directories only;
- ``expand_partitions(root) -> list[CacheRoot]``: the root plus jitwarden partitions inside it;
- ``list_entry_names(root_path) -> (names, strays)``: entry ids (relative paths) in a root;
- ``inspect_entry(root_path, name, judge, root_uid) -> Entry``: read without following
  symlinks or executing anything (never unpickle), then judge;
- ``root_findings(path, uid=None) -> list[Finding]``: problems of the root itself;
- ``looks_like_root(path) -> bool``: whether a directory named on the command line is one
  of this kind's roots (the Triton adapter is the fallback and need not define it).

Modules are imported lazily: this package's import costs nothing on the activation path.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

_MODULES = (
    ("triton", "triton"),
    ("inductor", "inductor"),
    ("vllm", "vllm"),
    ("cuda-compute", "cuda_compute"),
    ("flashinfer", "flashinfer"),
    ("deepgemm", "deepgemm"),
    ("torch-ext", "torch_ext"),
)
KINDS = tuple(k for k, _ in _MODULES)


def get(kind: str) -> ModuleType:
    """The adapter module of ``kind``; KeyError for an unknown kind."""
    mod = dict(_MODULES)[kind]
    return importlib.import_module(f"{__name__}.{mod}")


def available() -> list[ModuleType]:
    """Every adapter module present in this install, in a fixed order."""
    out = []
    for _kind, mod in _MODULES:
        try:
            out.append(importlib.import_module(f"{__name__}.{mod}"))
        except ModuleNotFoundError as exc:
            if exc.name != f"{__name__}.{mod}":
                raise
    return out


def discover_roots(env=os.environ, kinds: tuple[str, ...] | None = None) -> list:
    """Every root of every (or each named) kind on this machine, deduplicated by real path."""
    out, seen = [], set()
    for a in available():
        if kinds is not None and a.KIND not in kinds:
            continue
        for r in a.discover_roots(env):
            key = (os.path.realpath(r.path), r.kind)
            if key not in seen:
                seen.add(key)
                out.append(r)
    return out


def kind_of_path(path: str) -> str:
    """The kind of a directory named on the command line: the first adapter that claims it, else Triton."""
    for a in available():
        looks = getattr(a, "looks_like_root", None)
        if a.KIND != "triton" and looks is not None and looks(path):
            return a.KIND
    return "triton"
