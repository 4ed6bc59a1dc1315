"""Every cache kind jitwarden knows, one row each: the one place a kind's facts are declared.

Every other table of kinds is derived from :data:`ROWS`: the adapters (:func:`jitwarden.adapters.get`
imports the module a row names), the variables activation points at partitions and the default roots
(:mod:`jitwarden.env.locations`), the packages without which a root is left alone, what bundles carry,
``--kind``'s help and the kinds table in docs/caches.md. A new kind is a row here and its adapter module
(ARCHITECTURE.md, "How to add … A cache kind"); an unknown name raises ``KeyError`` everywhere.

Standard library only and a handful of plain objects: activation imports it on every start.
"""

from __future__ import annotations

DIR = "dir"
"""Partitioned by directory: activation points the kind's variable at ``<root>/jitwarden-v1/<digest>``
and its entries are directories sealed one by one (Triton's guard, the sweep, the torch hooks)."""
FILE = "file"
"""Partitioned the same way, but the entries are single files sealed per directory
(:mod:`jitwarden.runtime.flatseal`)."""
NOT = ""
"""Not partitioned: its roots are scanned where the tool keeps them."""

SELF = "self"
"""``triton_trees`` of a kind whose root is a Triton cache tree itself."""


class Kind:
    """One cache kind's facts. Immutable. A ``__slots__`` class rather than a frozen dataclass:
    ``dataclasses`` (and the ``inspect`` it imports) would cost more than a warm activation's rest."""

    __slots__ = (
        "name",
        "adapter",
        "tool",
        "var",
        "partition",
        "bundled",
        "needs",
        "root",
        "default",
        "triton_trees",
        "reader",
        "guard",
        "hooks",
    )
    name: str
    """``--kind``'s value and every entry's ``kind``."""
    adapter: str
    """The module of its :class:`~jitwarden.adapters.CacheAdapter` in :mod:`jitwarden.adapters`."""
    tool: str
    """The tool as messages name it (``JAX``, ``CuPy``, ``numba-cuda``)."""
    var: str | None
    """The variable its tool reads first for its root (None: it reads none)."""
    partition: str
    """:data:`DIR`, :data:`FILE` or :data:`NOT`: how activation partitions it."""
    bundled: bool
    """Whether fleet bundles (``export``/``import``/``push``/``pull``) carry its entries."""
    needs: str | None
    """The distribution without which nothing writes its root: activation leaves it alone then."""
    root: str
    """Where its root is: a place under HOME (``~/.cupy/kernel_cache``: the variable's value when set, else that),
    "" (the variable's value, else none: the tool keeps none unless told), or the function of
    :mod:`jitwarden.env.locations` that finds it as the tool does, for a tool with more rules
    (``f(env) -> str``; :func:`jitwarden.env.locations.default_base` resolves all three)."""
    default: str
    """Where that is, in words, for the docs (the place under HOME itself where ``root`` is one)."""
    triton_trees: str | None
    """Where Triton cache trees live inside one of its roots: :data:`SELF`, the function of
    :mod:`jitwarden.env.locations` that lists them (``f(root) -> list[str]``), or None (none do)."""
    reader: str
    """The module of :mod:`jitwarden.formats` that reads its entries' bytes (the main one)."""
    guard: tuple[str, ...]
    """The modules of :mod:`jitwarden.runtime` that check its entries as the tool loads them and seal what it
    writes, its guard (``guards.<kind>``, :class:`jitwarden.runtime.guards.Guard`) first where it has one (none:
    jitwarden checks it by ``verify`` only)."""
    hooks: tuple[tuple[str, str], ...]
    """(a module of its tool, the function of its guard that wraps it) for each module the guard wraps once it is
    imported, in the order they are installed (JAX's compiler before its cache): where activation learns what
    to wait for, without importing the guard."""

    def __init__(
        self,
        name: str,
        *,
        adapter: str,
        tool: str,
        var: str | None,
        partition: str,
        bundled: bool,
        needs: str | None,
        root: str,
        default: str | None = None,
        triton_trees: str | None = None,
        reader: str,
        guard: tuple[str, ...] = (),
        hooks: tuple[tuple[str, str], ...] = (),
    ) -> None:
        put = object.__setattr__
        for field, value in (
            ("name", name),
            ("adapter", adapter),
            ("tool", tool),
            ("var", var),
            ("partition", partition),
            ("bundled", bundled),
            ("needs", needs),
            ("root", root),
            ("default", default or root),
            ("triton_trees", triton_trees),
            ("reader", reader),
            ("guard", guard),
            ("hooks", hooks),
        ):
            put(self, field, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"a Kind is immutable: {name}")

    def __repr__(self) -> str:
        return f"Kind({self.name!r})"


ROWS: tuple[Kind, ...] = (
    Kind(
        "triton",
        adapter="triton",
        tool="Triton",
        var="TRITON_CACHE_DIR",
        partition=DIR,
        bundled=True,
        needs=None,
        root="triton_root",
        default="`$TRITON_HOME/.triton/cache`, else `~/.triton/cache`",
        triton_trees=SELF,
        reader="elf",
        guard=("guards.triton",),
    ),
    Kind(
        "inductor",
        adapter="inductor",
        tool="TorchInductor",
        var="TORCHINDUCTOR_CACHE_DIR",
        partition=DIR,
        bundled=True,
        needs="torch",
        root="inductor_cache_dir",
        default="`<TMPDIR or /tmp>/torchinductor_<user>`",
        triton_trees="inductor_triton_trees",
        reader="fxkernels",
        guard=("guards.inductor", "sweep"),
        hooks=(
            ("torch._inductor.triton_bundler", "patch_bundler"),
            ("torch._inductor.codecache", "patch_codecache"),
            ("torch._functorch._aot_autograd.autograd_cache", "patch_aotcache"),
        ),
    ),
    Kind(
        "vllm",
        adapter="vllm",
        tool="vLLM",
        var="VLLM_CACHE_ROOT",
        partition=DIR,
        bundled=True,
        needs="vllm",
        root="vllm_cache_root",
        default="`${XDG_CACHE_HOME:-~/.cache}/vllm`",
        triton_trees="vllm_triton_trees",
        reader="vllm_files",
        guard=("guards.triton", "guards.inductor"),
    ),
    Kind(
        "cuda-compute",
        adapter="cuda_compute",
        tool="the CUDA driver",
        var="CUDA_CACHE_PATH",
        partition=NOT,
        bundled=False,
        needs=None,
        root="~/.nv/ComputeCache",
        reader="elf",
    ),
    Kind(
        "flashinfer",
        adapter="flashinfer",
        tool="FlashInfer",
        var="FLASHINFER_WORKSPACE_BASE",
        partition=NOT,
        bundled=False,
        needs=None,
        root="flashinfer_cache_dir",
        default="`$FLASHINFER_WORKSPACE_BASE/.cache/flashinfer`, else `~/.cache/flashinfer`",
        reader="elf",
    ),
    Kind(
        "deepgemm",
        adapter="deepgemm",
        tool="DeepGEMM",
        var="DG_JIT_CACHE_DIR",
        partition=NOT,
        bundled=False,
        needs=None,
        root="deepgemm_cache_dir",
        default="`$DG_CACHE_DIR` (1.0.0), else `~/.deep_gemm`",
        reader="ptx",
    ),
    Kind(
        "torch-ext",
        adapter="torch_ext",
        tool="torch extensions",
        var="TORCH_EXTENSIONS_DIR",
        partition=DIR,
        bundled=True,
        needs="torch",
        root="torch_extensions_root",
        default="`${XDG_CACHE_HOME:-~/.cache}/torch_extensions`",
        reader="elf",
    ),
    Kind(
        "jax",
        adapter="jax",
        tool="JAX",
        var="JAX_COMPILATION_CACHE_DIR",
        partition=FILE,
        bundled=False,
        needs="jaxlib",
        root="",
        default="none: JAX has no persistent cache unless told",
        reader="jaxexec",
        guard=("guards.jax", "flatseal"),
        hooks=(
            ("jax._src.compiler", "patch_compiler"),
            ("jax._src.compilation_cache", "patch_cache"),
        ),
    ),
    Kind(
        "cupy",
        adapter="cupy",
        tool="CuPy",
        var="CUPY_CACHE_DIR",
        partition=FILE,
        bundled=False,
        needs="cupy",
        root="~/.cupy/kernel_cache",
        reader="cupyentry",
        guard=("guards.cupy", "flatseal"),
        hooks=(("cupy.cuda.compiler", "patch"),),
    ),
    Kind(
        "numba",
        adapter="numba_cuda",
        tool="numba-cuda",
        var="NUMBA_CACHE_DIR",
        partition=NOT,
        bundled=False,
        needs=None,
        root="",
        default="none in one place: `__pycache__` beside each source file",
        reader="numbacache",
        guard=("guards.numba",),
        hooks=(("numba.cuda.core.caching", "patch"),),
    ),
)
"""Every kind, in the order roots are discovered and reported."""

NAMES: tuple[str, ...] = tuple(k.name for k in ROWS)
_BY_NAME = {k.name: k for k in ROWS}


def get(name: str) -> Kind:
    """The row of ``name``; ``KeyError`` naming the known kinds for any other."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown cache kind {name!r} (one of: {', '.join(NAMES)})") from None


def partitioned(how: str | None = None) -> tuple[Kind, ...]:
    """The rows activation partitions (by ``how``, :data:`DIR` or :data:`FILE`, when given), in order."""
    return tuple(k for k in ROWS if k.partition and (how is None or k.partition == how))


def bundled() -> tuple[Kind, ...]:
    """The rows fleet bundles carry, in order."""
    return tuple(k for k in ROWS if k.bundled)


def tool(name: str) -> str:
    """How messages name the tool of kind ``name`` (the name itself for one jitwarden does not know)."""
    row = _BY_NAME.get(name)
    return row.tool if row is not None else name
