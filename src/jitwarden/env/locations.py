"""Where each tool keeps its kernel cache, and whether a cache root is safe to share (stdlib ``os`` and
the settings table only).

One answer for the scanner and for activation, read from a given ``env`` (its HOME too),
the way each tool decides it; cheap enough for the warm activation path. Which function finds a kind's
root, and which lists the Triton trees inside it, is said by the kind's row (:mod:`jitwarden.model.kinds`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from jitwarden.model import kinds, settings


def home(env: Mapping[str, str]) -> str:
    return env.get("HOME") or os.path.expanduser("~")


def triton_cache_dir(env: Mapping[str, str]) -> tuple[str, str]:
    """Triton's own choice and why: ``TRITON_CACHE_DIR``, else ``$TRITON_HOME/.triton/cache``, else ``~/.triton/cache``."""
    if env.get("TRITON_CACHE_DIR"):
        return env["TRITON_CACHE_DIR"], "TRITON_CACHE_DIR"
    if env.get("TRITON_HOME"):
        return os.path.join(env["TRITON_HOME"], ".triton", "cache"), "TRITON_HOME"
    return triton_default(env), "default"


def triton_default(env: Mapping[str, str]) -> str:
    """Triton's root with none of its variables set: ``~/.triton/cache``."""
    return os.path.join(home(env), ".triton", "cache")


def triton_root(env: Mapping[str, str]) -> str:
    """Triton's root (:func:`triton_cache_dir` without the why)."""
    return triton_cache_dir(env)[0]


def inductor_cache_dir(env: Mapping[str, str]) -> str:
    """TorchInductor's: ``TORCHINDUCTOR_CACHE_DIR``, else ``<tempdir>/torchinductor_<user>``.

    The temp dir and user are resolved as ``tempfile.gettempdir()`` and ``getpass.getuser()``
    do, without importing either (they would double a warm activation's cost).
    """
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        return env["TORCHINDUCTOR_CACHE_DIR"]
    tmp = next(
        (env[k] for k in ("TMPDIR", "TEMP", "TMP") if env.get(k) and os.path.isdir(env[k])), "/tmp"
    )
    user = next((env[k] for k in ("LOGNAME", "USER", "LNAME", "USERNAME") if env.get(k)), None)
    if user is None:
        try:
            import pwd

            user = pwd.getpwuid(os.getuid()).pw_name
        except (ImportError, KeyError):
            user = f"uid_{os.getuid()}"  # torch's own fallback when getpass.getuser() fails (cache_dir_utils.py)
    for ch in '\\/:*?"<>|':
        user = user.replace(ch, "_")
    return os.path.join(tmp, f"torchinductor_{user}")


def vllm_cache_root(env: Mapping[str, str]) -> str:
    """vLLM's: ``VLLM_CACHE_ROOT``, else ``${XDG_CACHE_HOME:-~/.cache}/vllm``."""
    if env.get("VLLM_CACHE_ROOT"):
        return os.path.expanduser(env["VLLM_CACHE_ROOT"])
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(home(env), ".cache"), "vllm")


def torch_extensions_dir(env: Mapping[str, str]) -> str:
    """Where torch builds C++/CUDA extensions without ``TORCH_EXTENSIONS_DIR``: ``<user cache dir>/torch_extensions``
    (torch adds a ``py<XY>_<cuda>`` level below it; with the variable set it builds directly inside)."""
    cache = (
        env["XDG_CACHE_HOME"] if "XDG_CACHE_HOME" in env else os.path.join(home(env), ".cache")
    )  # as torch's appdirs
    return os.path.join(cache, "torch_extensions")


def torch_extensions_root(env: Mapping[str, str]) -> str:
    """Where torch builds extensions: ``TORCH_EXTENSIONS_DIR`` when set and not empty, else
    :func:`torch_extensions_dir`."""
    return env.get("TORCH_EXTENSIONS_DIR") or torch_extensions_dir(env)


def flashinfer_cache_dir(env: Mapping[str, str], workspace: str | None = None) -> str:
    """FlashInfer's: ``<workspace>/.cache/flashinfer``, the workspace ``FLASHINFER_WORKSPACE_BASE``, else HOME
    (``workspace`` given: that one)."""
    base = workspace or env.get("FLASHINFER_WORKSPACE_BASE") or home(env)
    return os.path.join(base, ".cache", "flashinfer")


def deepgemm_default(env: Mapping[str, str]) -> str:
    """DeepGEMM's root without its variables: ``~/.deep_gemm``."""
    return os.path.join(home(env), ".deep_gemm")


def deepgemm_cache_dir(env: Mapping[str, str]) -> str:
    """DeepGEMM's: ``DG_JIT_CACHE_DIR`` (2.x), else ``DG_CACHE_DIR`` (1.0.0), else ``~/.deep_gemm``."""
    return env.get("DG_JIT_CACHE_DIR") or env.get("DG_CACHE_DIR") or deepgemm_default(env)


def default_base(kind: str, env: Mapping[str, str]) -> str:
    """The root of cache kind ``kind`` for ``env``, found as its tool finds it: by the function its row names,
    else its variable's value, else the row's place under HOME ("" where the tool keeps none unless told).
    ``KeyError`` for a kind jitwarden does not know."""
    row = kinds.get(kind)
    if row.root.startswith("~/") or not row.root:
        return (env.get(row.var) if row.var else None) or home_default(kind, env)
    return globals()[row.root](env)  # type: ignore[no-any-return]


def home_default(kind: str, env: Mapping[str, str]) -> str:
    """Where the tool of ``kind`` keeps its cache with its variable unset, for a row whose root is a place under
    HOME (``~/.cupy/kernel_cache``); "" for a row of none."""
    root = kinds.get(kind).root
    return os.path.join(home(env), root[2:]) if root.startswith("~/") else ""


def partition_base(kind: str, env: Mapping[str, str], cur: str | None = None) -> str:
    """Where ``kind``'s partitions live: the root its variable names (``cur``, else the variable's value), a
    partition's own root when it names one, else the kind's default root."""
    from jitwarden.store.partition import base_of

    cur = cur if cur is not None else env.get(kinds.get(kind).var or "")
    return base_of(cur) if cur else default_base(kind, env)


def triton_trees(kind: str, root: str) -> list[str]:
    """The Triton cache trees inside ``root``, one of ``kind``'s roots or partitions (its row says where; a
    Triton root is one itself)."""
    where = kinds.get(kind).triton_trees
    if where is None:
        return []
    if where == kinds.SELF:
        return [root]
    return globals()[where](root)  # type: ignore[no-any-return]


def root_problems(path: str, uid: int | None = None) -> list[str]:
    """Why ``path`` must not hold shared kernels: writable by others, or owned by someone else.

    OSError when it cannot be stat'ed. ``uid`` defaults to ours, root's included: root reading a user's
    root reads what that user chose (the one rule, :mod:`jitwarden.store.trust`; a root named in
    ``JITWARDEN_TRUSTED_ROOTS`` is exempt from all but world-writability).
    """
    from jitwarden.store import trust

    st = os.stat(path)
    uid = os.geteuid() if uid is None else uid
    out = []
    mode = st.st_mode & 0o7777
    if st.st_mode & 0o002 and not st.st_mode & 0o1000:
        out.append(f"world-writable (mode {mode:o}): anyone can plant kernels")
    elif st.st_mode & 0o002:
        out.append(f"world-writable (mode {mode:o}, sticky): others can add entries")
    why = trust.other_writer(st, uid)
    if why and not trust.in_trusted_root(path):
        fix = f"name it in {settings.TRUSTED_ROOTS.name} if you trust who may write it"
        if st.st_uid not in (uid, 0):
            out.append(f"owned by uid {st.st_uid}, not by you (uid {uid}); {fix}")
        else:
            out.append(f"{why}; {fix}")
    return out


def subdirs(path: str) -> list[str]:
    """Real subdirectories of ``path`` (symlinks excluded), sorted; empty when unreadable."""
    try:
        with os.scandir(path) as it:
            return sorted(e.path for e in it if e.is_dir(follow_symlinks=False))
    except OSError:
        return []


def inductor_triton_trees(cache_dir: str) -> list[str]:
    """Triton cache dirs inside one TorchInductor cache dir: ``<dir>/triton/<device>``."""
    return subdirs(os.path.join(cache_dir, "triton"))


def vllm_triton_trees(cache_root: str) -> list[str]:
    """vLLM's per-model Triton caches, in ``torch_compile_cache/<hash>/rank_*/``:

    ``triton_cache`` (vLLM sets ``TRITON_CACHE_DIR`` there: always in 0.10-0.13, in 0.34 unless it is
    already set; ``vllm/compilation/compiler_interface.py``) and ``inductor_cache/triton/<device>``
    (where Inductor chose, e.g. 0.34's ``torch_aot_compile/<sha>/inductor_cache``).
    """
    out = []
    for h in subdirs(os.path.join(cache_root, "torch_compile_cache")):
        for rank in subdirs(h):
            flat = os.path.join(rank, "triton_cache")
            if os.path.isdir(flat) and not os.path.islink(flat):
                out.append(flat)
            out += inductor_triton_trees(os.path.join(rank, "inductor_cache"))
    return out


# --- added by honest-answers ---

LOCATION_VARS = (
    ("HOME", "the default of every location below"),
    (
        "TMPDIR",
        "TorchInductor's default cache dir (<tmp>/torchinductor_<user>), the guard's and activation's private dirs",
    ),
    ("TEMP", "as TMPDIR"),
    ("TMP", "as TMPDIR"),
    (
        "XDG_CACHE_HOME",
        "vLLM's, FlashInfer's and torch extensions' default roots, jitwarden's memo and registry",
    ),
    ("XDG_CONFIG_HOME", "jitwarden's config dir: trusted keys, signing key"),
    (
        "XDG_RUNTIME_DIR",
        "the guard's per-process dirs and activation's private root (else /dev/shm, the temp dir)",
    ),
    ("XDG_DATA_HOME", "tools' data"),
    ("XDG_STATE_HOME", "tools' state"),
    ("TRITON_CACHE_DIR", "Triton's cache"),
    ("TRITON_HOME", "Triton's cache (<home>/.triton/cache)"),
    ("TRITON_DUMP_DIR", "Triton's IR dumps"),
    ("TRITON_OVERRIDE_DIR", "Triton's kernel overrides"),
    ("TORCHINDUCTOR_CACHE_DIR", "TorchInductor's cache"),
    ("VLLM_CACHE_ROOT", "vLLM's cache"),
    ("TORCH_EXTENSIONS_DIR", "torch's C++/CUDA extension builds"),
    ("CUDA_CACHE_PATH", "the driver's ComputeCache"),
    ("FLASHINFER_WORKSPACE_BASE", "FlashInfer's JIT workspace"),
    ("DG_JIT_CACHE_DIR", "DeepGEMM's JIT cache"),
    ("DG_CACHE_DIR", "DeepGEMM's cache (older name)"),
    (
        "JAX_COMPILATION_CACHE_DIR",
        "JAX's persistent compilation cache (and XLA's caches beside it)",
    ),
    ("CUPY_CACHE_DIR", "CuPy's kernel cache (else <home>/.cupy/kernel_cache)"),
    ("NUMBA_CACHE_DIR", "numba's cache (else beside each source file)"),
    (settings.HOME.name, "jitwarden's memo, private roots and quarantine registry"),
    (settings.CONFIG_DIR.name, "jitwarden's config dir"),
    (settings.TRUSTED_KEYS.name, "keys trusted for fleet bundles"),
    (settings.SIGNING_KEY.name, "the key fleet bundles are signed with"),
)
"""(variable, what it places) of every environment variable that decides where a cache, a memo, a key or a
private directory lives: a program run with all of them pointed into one directory writes nowhere else
(the test suite's sandbox, ``tests/conftest.py``, is built from this table)."""
