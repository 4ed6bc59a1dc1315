"""TorchInductor's guard: the ways it brings kernels and compiled graphs in mid-run (patched after torch imports them).

TorchInductor restores Triton kernels from its caches without asking Triton's cache manager:

- ``TritonBundler.read_and_emit`` writes the kernel directories held in an FX-graph bundle
  into the Triton cache dir on every FX-graph-cache hit: local, remote
  (``TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE``), AOTAutograd hits, ``torch.compiler.load_cache_artifacts``
  and precompiled/AOT artifacts (vLLM's ``torch_aot_compile``) all end there; its static CUDA
  launcher then loads ``<dir>/<name>.cubin`` itself, or writes the cubin it carries in the
  pickle (``TORCHINDUCTOR_KEEP_STATIC_CUBIN_RAW=1``) where none is on disk.
- FX-graph and AOTAutograd pickles are read back by ``GuardedCache.iterate_over_candidates``.

torch offers no hook for either, so these are wrapped in place once their modules are imported:

- every kernel directory of a bundle is written to a staging dir first, proven by a rebuild
  (:mod:`jitwarden.runtime.proof`), sealed and renamed into place; one that cannot be proven is
  quarantined there and dropped from the bundle, so Inductor recompiles it (through the guard).
  A directory already on disk is checked against its seal, or proven when unsealed. Raw cubins
  carried in the pickle are dropped (nothing to prove them from): a kernel whose directory is
  not there is recompiled. Any failure inside the wrapper drops all kernels of the bundle.
- FX-graph and AOTAutograd pickles are sealed when written (``.jitwarden-seal.json`` beside
  them; Inductor skips dot files); before Inductor reads a directory of them, a pickle that no
  longer matches its seal is quarantined (a miss, it recompiles). A pickle nobody sealed is
  sealed as it is: a pickle cannot be rebuilt, but the kernels it brings are proven above.

:func:`jitwarden.runtime.guards.install_torch` is standard library only and never imports torch: this module is
imported, and patches torch's, once torch imports them. ``JITWARDEN_TORCH_HOOKS=0`` leaves torch alone. The
bundle's kernels are proven by :mod:`~jitwarden.runtime.guards.inductor_bundle`; the pickles' guard is
:class:`GraphPickles`.
"""

from __future__ import annotations

import errno
import os
import time
from typing import TYPE_CHECKING, Any

from jitwarden.runtime import guards
from jitwarden.runtime import record as _record
from jitwarden.runtime.guards import AOTCACHE, BUNDLER, CODECACHE, STATIC
from jitwarden.runtime.guards.inductor_bundle import emptied, guard_bundle
from jitwarden.runtime.say import log

KIND = "inductor"


def refused(name: str, exc: Exception) -> str:
    """The state of a torch module its patch did not fit, said once as a warning."""
    why = f"not guarded: this torch's {name} is not the shape jitwarden knows ({type(exc).__name__}: {exc})"
    log.warning("jitwarden: %s; `jitwarden doctor` says more", why)
    return why


def _mark(wrapper: Any, fn: Any) -> None:
    """Mark ``wrapper`` as jitwarden's wrapping of ``fn``: installed once, ``__wrapped__`` leads back."""
    wrapper.__jitwarden__ = True
    wrapper.__wrapped__ = fn


# ---------------------------------------------------------------- TritonBundler


def patch_bundler(mod) -> None:
    cls = mod.TritonBundler
    fn = cls.__dict__["read_and_emit"].__func__  # a staticmethod in torch 2.11-2.13
    if getattr(fn, "__jitwarden__", False):
        return
    mod.triton_cache_dir  # noqa: B018 - the shape we rely on: fail at install, not at the first hit
    from jitwarden.runtime import hookshapes

    sig = hookshapes.fit(fn, hookshapes.target(BUNDLER, "TritonBundler.read_and_emit"))

    def read_and_emit(*args, **kwargs):
        try:
            bundle = hookshapes.bind(sig, args, kwargs)["bundle"]
            if bundle is not None and cls.is_enabled():
                checked = guard_bundle(bundle, mod.triton_cache_dir, cls._REPLACE_BYTES)
                args, kwargs = hookshapes.rebind(sig, args, kwargs, bundle=checked)
        except Exception as exc:
            log.warning(
                "jitwarden: could not check the Triton kernels of an FX-graph bundle (%s: %s); "
                "restoring none of them, Inductor recompiles them",
                type(exc).__name__,
                exc,
            )
            try:
                empty = emptied(hookshapes.bind(sig, args, kwargs)["bundle"])
                args, kwargs = hookshapes.rebind(sig, args, kwargs, bundle=empty)
            except Exception:
                return None
        return fn(*args, **kwargs)

    _mark(read_and_emit, fn)
    cls.read_and_emit = staticmethod(read_and_emit)


# ---------------------------------------------------------------- the static launcher's loads


def _guard_static_loads(mod) -> None:
    """Check each kernel Inductor's static launcher is about to load, or sweep the whole tree now.

    ``StaticAutotunerFuture.result`` (torch 2.9-2.13) turns a statically launchable autotuner
    restored from an FX-graph bundle into launchers: its ``reload_cubin_path`` names each cubin in
    the Triton cache dir and the launcher reads it, never asking Triton's cache manager. Wrapped,
    every entry it names is checked first (:func:`jitwarden.runtime.sweep.check_loaded`: unchanged
    since sealed, else checked, proven or set aside); if one may not be loaded, the kernel is
    compiled from its source as on a cache miss, through Triton's guarded cache. Where this torch
    has no such loader, the trees in use are swept here and now, before anything can load from them.
    Never raises.
    """
    try:
        cls = mod.StaticAutotunerFuture
        fn = cls.__dict__["result"]
        if not getattr(fn, "__jitwarden__", False):

            def result(self, *args, **kwargs):
                if _loadable(self.static_autotuner):
                    return fn(self, *args, **kwargs)
                kernel = self.reload_kernel_from_src()  # what AsyncCompile.triton does on a miss
                kernel.precompile(warm_cache_only=False)
                return kernel

            _mark(result, fn)
            cls.result = result
        guards.noted[STATIC] = "guarded"
    except Exception as exc:
        guards.noted[STATIC] = (
            f"swept at import: this torch's StaticAutotunerFuture is not the shape jitwarden knows "
            f"({type(exc).__name__}: {exc})"
        )
        from jitwarden.runtime import fullsweep

        for line in fullsweep.sweep_env():
            log.warning("jitwarden: %s", line)


def _loadable(autotuner) -> bool:
    """Whether every cubin ``autotuner``'s static launchers will read passes :func:`~jitwarden.runtime.sweep.check_loaded`.

    When it does, each launcher is pointed at a private copy of exactly the bytes its seal records
    (:mod:`jitwarden.store.served`, as the guard serves Triton): a cubin swapped in the cache between
    this check and the launcher's read is never what it loads. The launcher reads its copy once,
    inside ``StaticAutotunerFuture.result``, and forgets the path.
    """
    from jitwarden.runtime import sweep
    from jitwarden.store import partition

    try:
        checked = []
        for result in autotuner.compile_results:
            kernel = result.kernel
            if not getattr(kernel, "cubin_path", None):
                result.reload_cubin_path()  # Inductor's own path: <triton cache dir>/<key>/<name>.cubin
            entry, name = os.path.split(kernel.cubin_path)
            ok, line = sweep.check_loaded(entry, partition.digest_of(os.path.dirname(entry)))
            if line:
                log.warning("jitwarden: %s", line)
            data = _sealed_bytes(entry, name) if ok else None
            if data is None:
                return False
            checked.append((kernel, name, data))
        if checked:
            where = _served().begin(os.path.dirname(os.path.dirname(checked[0][0].cubin_path)))
            for i, (kernel, name, data) in enumerate(checked):
                kernel.cubin_path = _served().write(where, f"{i}.{name}", data)
        return True
    except Exception as exc:
        log.warning(
            "jitwarden: could not check a Triton kernel TorchInductor was about to load (%s: %s); "
            "Inductor recompiles it",
            type(exc).__name__,
            exc,
        )
        return False


def _sealed_bytes(entry: str, name: str) -> bytes | None:
    """``entry/name`` as its seal records it (read once, no link followed); None when the bytes differ."""
    import hashlib

    from jitwarden.store import seal
    from jitwarden.store.reads import read_bytes

    s = seal.read(entry)
    rec = s.files.get(name) if s is not None else None
    if rec is None:
        return None
    # An int of an authentic seal (seal.read believes no other), and never past what a kernel file can be.
    bound = min(max(rec["size"], 0), seal.MAX_FILE)
    try:  # past its sealed size it is not the sealed bytes: refused unread (a sparse file of gigabytes costs nothing)
        data = read_bytes(os.path.join(entry, name), max_bytes=bound, size_hint=bound)
    except OSError as exc:
        if exc.errno == errno.EFBIG:
            return None
        raise
    return data if hashlib.sha256(data).hexdigest() == rec.get("sha256") else None


_SERVED_COPIES: list = []  # one Served of its own: the guard's sets are removed at that thread's next hit


def _served():
    if not _SERVED_COPIES:
        from jitwarden.store.served import Served

        _SERVED_COPIES.append(Served())
    return _SERVED_COPIES[0]


# ---------------------------------------------------------------- FX-graph and AOTAutograd pickles


def patch_codecache(mod) -> None:
    _guard_static_loads(mod)
    _wrap_writer(mod.FxGraphCache)
    _record_keys(mod, "compiled_fx_graph_hash", "inductor")
    gc = mod.GuardedCache
    fn = gc.__dict__["iterate_over_candidates"].__func__  # a classmethod
    if getattr(fn, "__jitwarden__", False):
        return
    from jitwarden.runtime import hookshapes

    sig = hookshapes.fit(fn, hookshapes.target(CODECACHE, "GuardedCache.iterate_over_candidates"))

    def iterate_over_candidates(cls, *args, **kwargs):
        key = "?"
        try:
            a = hookshapes.bind(sig, (cls, *args), kwargs)
            key = a["key"]
            if a["local"]:
                GraphPickles(cls).check_read(key)
        except Exception as exc:
            log.warning(
                "jitwarden: could not check %s's pickles for %s (%s: %s); treating them as a miss",
                cls.__name__,
                str(key)[:16],
                type(exc).__name__,
                exc,
            )
            try:
                bound, kwargs = hookshapes.rebind(sig, (cls, *args), kwargs, local=False)
            except TypeError:
                return iter(())  # a call of no shape torch makes: nothing served unchecked
            return fn(*bound, **kwargs)
        if _record.ON:
            _record_lookup(cls, key, a["local"])
        return fn(cls, *args, **kwargs)

    _mark(iterate_over_candidates, fn)
    gc.iterate_over_candidates = classmethod(iterate_over_candidates)


_MISSED: dict[tuple[str, str], float] = {}
"""(kind, key) -> when a lookup found nothing: what the compile written under that key cost (``--record``)."""


def _record_kind(cls) -> str:
    return "aot" if "autograd" in cls.__name__.lower() else "inductor"


def _record_lookup(cls, key: str, local: bool) -> None:
    """One record line for an FX-graph or AOTAutograd lookup: a hit where the local cache holds the key's pickles."""
    kind = _record_kind(cls)
    try:
        found = local and bool(_pickles(cls._get_tmp_dir_for_key(key)))
    except Exception:
        found = False
    if found:
        _record.hit(kind, key, _record.graph_name(kind, key))
    else:
        _MISSED.setdefault((kind, key), time.perf_counter())


def patch_aotcache(mod) -> None:
    _wrap_writer(mod.AOTAutogradCache)
    _record_keys(mod, "autograd_cache_key", "aot")


def _record_keys(mod, attr: str, kind: str) -> None:
    """Under ``--record``: the lines torch returns with a graph's key (``[hash] input: value``) are kept with
    the graph (:func:`jitwarden.runtime.record.key_inputs`), so ``doctor`` can name the input that changed
    when a graph compiles again under a new key. Every argument and the result pass through unchanged; a
    release without ``attr``, or a result of another shape, records no inputs (the graph is then named by
    its kind alone)."""
    fn = getattr(mod, attr, None)
    if not _record.ON or not callable(fn) or getattr(fn, "__jitwarden__", False):
        return

    def keyed(*args, **kwargs):
        out = fn(*args, **kwargs)
        try:
            if isinstance(out, tuple) and len(out) == 2:
                _record.key_inputs(kind, out[0], out[1])
        except Exception as exc:
            log.debug("jitwarden: could not keep the inputs of a %s key: %s", kind, exc)
        return out

    _mark(keyed, fn)
    setattr(mod, attr, keyed)


def _wrap_writer(cls) -> None:
    from jitwarden.runtime import hookshapes

    fn = cls.__dict__["_write_to_local_cache"].__func__  # a staticmethod

    if getattr(fn, "__jitwarden__", False):
        return
    module = AOTCACHE if cls.__name__ == "AOTAutogradCache" else CODECACHE
    sig = hookshapes.fit(fn, hookshapes.target(module, f"{cls.__name__}._write_to_local_cache"))

    def _write_to_local_cache(*args, **kwargs):
        out = fn(*args, **kwargs)
        key = "?"
        try:
            a = hookshapes.bind(sig, args, kwargs)
            key = a["key"]
            if _record.ON:
                kind = _record_kind(cls)
                began = _MISSED.pop((kind, key), 0.0)
                _record.compiled(
                    kind,
                    key,
                    _record.graph_name(kind, key),
                    time.perf_counter() - began if began else 0.0,
                    _record.graph_inputs(kind, key),
                )
            GraphPickles(cls).seal_write(key, a["content"])
        except Exception as exc:
            log.debug(
                "jitwarden: could not seal %s pickle %s: %s", cls.__name__, str(key)[:16], exc
            )
        return out

    _mark(_write_to_local_cache, fn)
    cls._write_to_local_cache = staticmethod(_write_to_local_cache)


def _pickles(subdir: str) -> list[str]:
    with os.scandir(subdir) as it:
        return sorted(
            e.name for e in it if not e.name.startswith(".") and e.is_file(follow_symlinks=False)
        )


def _lock_seal(subdir: str):
    """(fd of the directory's entry lock, taken exclusively; its seal, None when absent or damaged)."""
    import fcntl

    from jitwarden.model.layout import ENTRY_LOCK_FILE
    from jitwarden.store import seal
    from jitwarden.store.entrylock import lock, unlock

    fd = lock(subdir, ENTRY_LOCK_FILE, fcntl.LOCK_EX)
    try:
        return fd, seal.read(subdir)
    except seal.SealError:
        return fd, None  # rewritten whole by the caller
    except BaseException:
        unlock(fd)
        raise


def _write_seal(subdir: str, files: dict) -> None:
    from jitwarden.store import seal

    seal.write(
        subdir,
        seal.Seal(files, None, {"by": "torch-hook"}, time.time()),
        seal.newest_ctime(subdir, files),
    )


def seal_pickle(subdir: str, content: bytes) -> None:
    """Add the pickle in ``subdir`` whose bytes are ``content`` to the directory's seal."""
    import hashlib

    from jitwarden.store import seal
    from jitwarden.store.entrylock import unlock

    want = hashlib.sha256(content).hexdigest()
    fd, old = _lock_seal(subdir)
    try:
        files = dict(old.files) if old else {}
        for name in _pickles(subdir):
            if name not in files and os.path.getsize(os.path.join(subdir, name)) == len(content):
                digest, size = seal.file_digest(os.path.join(subdir, name))
                if digest == want:
                    files[name] = {"sha256": digest, "size": size}
        _write_seal(subdir, files)
    finally:
        unlock(fd)


class GraphPickles:
    """TorchInductor's FX-graph or AOTAutograd cache (``cls``: ``FxGraphCache``, ``AOTAutogradCache``), its pickles
    guarded: a key's dir is checked before Inductor reads it, each pickle sealed as Inductor writes it. A pickle
    cannot be rebuilt, so nothing is proven here: the kernels it brings are (:mod:`.inductor_bundle`)."""

    KIND = KIND

    def __init__(self, cls) -> None:
        self._cls = cls

    def check_read(self, name: str) -> list[str]:
        """Before Inductor reads the pickles of the key ``name``: :func:`check_pickles` of its dir."""
        return check_pickles(self._cls._get_tmp_dir_for_key(name))

    def seal_write(self, name: str, data: bytes) -> None:
        """Once Inductor wrote the pickle ``data`` of the key ``name``: :func:`seal_pickle` of its dir."""
        seal_pickle(self._cls._get_tmp_dir_for_key(name), data)


if TYPE_CHECKING:  # mypy holds the class to the protocol
    from jitwarden.runtime.guards import Guard

    _: type[Guard] = GraphPickles


def _listed(subdir: str) -> dict | None:
    """{name: stat} of the pickles of ``subdir`` and its seal file, none followed; None when it cannot be listed."""
    from jitwarden.model.layout import SEAL_FILE

    try:
        with os.scandir(subdir) as it:
            return {
                e.name: e.stat(follow_symlinks=False)
                for e in it
                if (not e.name.startswith(".") and e.is_file(follow_symlinks=False))
                or e.name == SEAL_FILE
            }
    except OSError:
        return None


def check_pickles(subdir: str) -> list[str]:
    """Before Inductor reads ``subdir``: quarantine pickles that contradict their seal, seal the unsealed; returns lines.

    A pickle whose size is the sealed one and that has not changed since the seal was written
    (its ctime is older: a ctime cannot be set back) is not hashed again, as in the start-up sweep;
    the seal is rewritten only when it changes, so a warm start costs a few ``stat`` calls per graph.
    """
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal
    from jitwarden.store.entrylock import unlock

    st = _listed(subdir)
    if st is None:
        return []
    seal_st = st.pop(SEAL_FILE, None)
    if not st:
        return []
    _used(subdir)
    out: list[str] = []
    fd, s = _lock_seal(subdir)
    try:
        files = dict(s.files) if s else {}
        before = dict(files)
        at = seal.sealed_at_ns(subdir) if s else None
        for name, fst in sorted(st.items()):
            out += _judge_pickle(subdir, name, fst, files, at)
        files = {
            n: r for n, r in files.items() if n in st and os.path.exists(os.path.join(subdir, n))
        }
        if files != before or seal_st is None:
            _write_seal(subdir, files)
    finally:
        unlock(fd)
    return out


def _judge_pickle(subdir: str, name: str, fst, files: dict, at: int | None) -> list[str]:
    """One pickle of ``subdir`` (its stat ``fst``) against ``files``, the seal's records (updated here: an unsealed
    one added, a changed one dropped and set aside) sealed at ``at`` (ns); the lines said."""
    from jitwarden.store import seal

    rec = files.get(name)
    if rec is None:
        digest, size = seal.file_digest(os.path.join(subdir, name))
        files[name] = {"sha256": digest, "size": size}
        return []
    if at is not None and fst.st_size == rec["size"] and fst.st_ctime_ns < at:
        return []  # unchanged since it was sealed (by the time inside the seal, never the seal's ctime)
    problems = seal.check(subdir, seal.Seal({name: rec}), names=[name])
    if not problems:
        return []
    files.pop(name)
    return _quarantine_pickle(subdir, name, problems)


def _used(subdir: str) -> None:
    """Log that Inductor is about to load the graphs of ``subdir`` (``store/uselog``, what ``budget`` evicts by)."""
    from jitwarden.store import uselog

    root = _inductor_root(subdir)
    uselog.used(root, os.path.relpath(subdir, root))


def _inductor_root(subdir: str) -> str:
    """The Inductor cache dir above ``<cache>/fxgraph/<xx>/<key>`` or ``<cache>/aotautograd/<key>``."""
    p = os.path.normpath(subdir)
    for _ in range(3):
        parent = os.path.dirname(p)
        if os.path.basename(parent) in ("fxgraph", "aotautograd"):
            return os.path.dirname(parent)
        p = parent
    return os.path.dirname(os.path.normpath(subdir))


def _quarantine_pickle(subdir: str, name: str, problems: list[str]) -> list[str]:
    """Set a pickle aside (under the directory's entry lock, which the caller holds); its line."""
    from jitwarden.runtime import setaside

    rec = setaside.set_aside(
        os.path.join(subdir, name),
        "corrupt",
        problems,
        root=_inductor_root(subdir),
        kind="inductor",
        by="torch-hook",
    )
    if rec is None:
        return []
    line = setaside.line(
        rec, "TorchInductor cache pickle", "corrupt", problems, "Inductor recompiles it"
    )
    log.warning("jitwarden: %s", line)
    return [line]
