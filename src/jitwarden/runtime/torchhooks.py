"""Guards on the ways TorchInductor brings kernels and compiled graphs in mid-run (installed after torch import).

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

:func:`install` is standard library only and never imports torch: it patches modules already
imported, and otherwise puts a finder on ``sys.meta_path`` that patches them right after torch
imports them. ``JITWARDEN_TORCH_HOOKS=0`` leaves torch alone.
"""

from __future__ import annotations

import errno
import os
import time
from typing import Any

from jitwarden.model.layout import is_reserved
from jitwarden.model.settings import TORCH_HOOKS
from jitwarden.runtime import postimport
from jitwarden.runtime import record as _record
from jitwarden.runtime.say import log

HOOKS_VAR = TORCH_HOOKS.name
BUNDLER = "torch._inductor.triton_bundler"
CODECACHE = "torch._inductor.codecache"
AOTCACHE = "torch._functorch._aot_autograd.autograd_cache"
_applied: dict[
    str, str
] = {}  # the static launcher's check -> "guarded" or how its loads are checked instead


def enabled(env=None) -> bool:
    """False only when ``JITWARDEN_TORCH_HOOKS`` is turned off (its row in model/settings.py)."""
    return TORCH_HOOKS.on(os.environ if env is None else env)


def install(env=None) -> dict[str, str]:
    """Guard torch's kernel and graph loaders now where imported, else as soon as torch imports them; never raises.

    Returns {module: "guarded" | "waiting for import" | why not}. The waiting is :mod:`jitwarden.runtime.postimport`'s.
    """
    try:
        if not enabled(env):
            return dict.fromkeys(_PATCHERS, f"{HOOKS_VAR}=0")
        for name, patch in _PATCHERS.items():
            postimport.when_imported(name, patch, on_error=_not_guarded)
        return status()
    except Exception as exc:
        return {m: f"not installed ({type(exc).__name__}: {exc})" for m in _PATCHERS}


def status() -> dict[str, str]:
    """{module: how it is guarded}, and how the static launcher's loads are checked once torch's code cache is in."""
    out = {m: _state(m) for m in _PATCHERS}
    if _STATIC in _applied:
        out[_STATIC] = _applied[_STATIC]
    return out


def _state(name: str) -> str:
    state = postimport.status(name)
    return "waiting for import" if state == "not asked for" else state


def _not_guarded(name: str, exc: Exception) -> str:
    """The state of a torch module its patch did not fit, said once as a warning."""
    why = f"not guarded: this torch's {name} is not the shape jitwarden knows ({type(exc).__name__}: {exc})"
    log.warning("jitwarden: %s; `jitwarden doctor` says more", why)
    return why


def _mark(wrapper: Any, fn: Any) -> None:
    """Mark ``wrapper`` as jitwarden's wrapping of ``fn``: installed once, ``__wrapped__`` leads back."""
    wrapper.__jitwarden__ = True
    wrapper.__wrapped__ = fn


# ---------------------------------------------------------------- TritonBundler


def _patch_bundler(mod) -> None:
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
                empty = _empty(hookshapes.bind(sig, args, kwargs)["bundle"])
                args, kwargs = hookshapes.rebind(sig, args, kwargs, bundle=empty)
            except Exception:
                return None
        return fn(*args, **kwargs)

    _mark(read_and_emit, fn)
    cls.read_and_emit = staticmethod(read_and_emit)


def _parts(bundle) -> tuple[list, list]:
    """(kernel artifacts, static autotuners): torch <= 2.7 passes a plain list of kernel artifacts."""
    if isinstance(bundle, list):
        return bundle, []
    return list(bundle.kernel_artifacts), list(getattr(bundle, "static_autotuners", None) or ())


def _with(bundle, kept: list):
    import dataclasses

    return kept if isinstance(bundle, list) else dataclasses.replace(bundle, kernel_artifacts=kept)


def _empty(bundle):
    import dataclasses

    if isinstance(bundle, list):
        return []
    fields = {f.name for f in dataclasses.fields(bundle)}
    return dataclasses.replace(
        bundle, **{k: [] for k in ("kernel_artifacts", "static_autotuners") if k in fields}
    )


def _nonempty(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except OSError:
        return False


def _safe_name(name) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and os.sep not in name
        and "\0" not in name
    )


def guard_bundle(bundle, cache_dir_for, replace_bytes: bytes = b"[REPLACE]"):
    """The bundle Inductor may restore: its kernels proven, sealed and put in place, the rest dropped.

    ``cache_dir_for(device)``: torch's ``triton_cache_dir``. Returns a copy of ``bundle`` with
    only the kernel directories that are now in place and sealed (torch skips writing those,
    as they exist) and no raw cubins on its static autotuners.
    """
    from jitwarden.store.removal import remove_tree

    artifacts, static = _parts(bundle)
    st = _stage(artifacts, cache_dir_for, replace_bytes)
    try:
        _judge(st)
    finally:
        for p in st.parents:
            remove_tree(p)
    _drop_raw_cubins(static)
    return _with(bundle, [a for a in artifacts if id(a) not in st.refused])


class _Staged:
    """What :func:`_stage` made of a bundle's kernel artifacts (one record; :func:`_judge` adds to ``refused``).

    ``staged``: staging dir -> (artifact, final dir, base dir); ``existing``: final dir already on
    disk -> (artifact, base dir); ``refused``: ids of the artifacts torch must not restore;
    ``parents``: the private directories the staging dirs are in, removed at the end.
    """

    __slots__ = ("staged", "existing", "refused", "parents")

    def __init__(self):
        self.staged: dict[str, tuple] = {}
        self.existing: dict[str, tuple] = {}
        self.refused: set[int] = set()
        self.parents: list[str] = []


def _stage(artifacts, cache_dir_for, replace_bytes) -> _Staged:
    """Write each kernel directory that is not on disk yet into a private staging dir beside where it goes.

    Everything is written by directory fds into new names only (O_EXCL). On an error the staging
    dirs made so far are removed before it is raised.
    """
    from jitwarden.runtime import hiding
    from jitwarden.store.atomic import write_new
    from jitwarden.store.paths import make_dir_at
    from jitwarden.store.removal import remove_tree
    from jitwarden.store.tempdirs import make_private_dir

    st = _Staged()
    try:
        for a in artifacts:
            base = cache_dir_for(a.device)
            directory = os.path.join(base, a.kernel_hash)
            if not _safe_name(a.kernel_hash) or not all(
                _safe_name(x.filename) for x in a.artifacts
            ):
                _warn(a.kernel_hash, "unsafe", "a file name in the bundle leaves its directory")
                st.refused.add(id(a))
                continue
            if hiding.hidden(
                base, a.kernel_hash
            ):  # on disk, being proven in the background: wait, then judge it there
                hiding.wait_for(base, a.kernel_hash)
            if _nonempty(directory):
                st.existing[directory] = (a, base)
                continue
            parent, pfd = make_private_dir(base, "tmp.jitwarden-")
            st.parents.append(parent)
            try:
                sfd = make_dir_at(pfd, a.kernel_hash)
            finally:
                os.close(pfd)
            try:
                for x in a.artifacts:
                    if is_reserved(x.filename):
                        continue  # jitwarden's own (the seal a guarded compile bundled): never carried in, never trusted
                    payload = x.payload
                    if x.filename.endswith(".json"):
                        payload = payload.replace(replace_bytes, directory.encode())
                    write_new(sfd, x.filename, payload)
            finally:
                os.close(sfd)
            st.staged[os.path.join(parent, a.kernel_hash)] = (a, directory, base)
    except BaseException:
        for p in st.parents:
            remove_tree(p)
        raise
    return st


def _judge(st: _Staged) -> None:
    """Prove the staged and the unsealed directories in parallel; seal and place each proven one as its
    proof ends (while the others' ptxas runs go on), set the rest aside."""
    from jitwarden.runtime import proof, tree
    from jitwarden.store import partition
    from jitwarden.store.paths import rename_path

    staged, existing, refused = st.staged, st.existing, st.refused
    unsealed = [d for d in existing if not _believed(d)]
    for d in existing:
        if d not in unsealed:
            code, bad = _seal_problems(d, partition.digest_of(existing[d][1]))
            if bad:
                _set_aside(d, existing[d][1], code, bad)
                refused.add(id(existing[d][0]))

    def place(path: str, pr) -> None:
        if path in staged:
            a, directory, base = staged[path]
        else:
            (a, base), directory = existing[path], path
        names = tree.files(path)  # what the proof hashed: never jitwarden's own files
        if pr.proven and proof.seal_proven(
            path, names, pr, partition.digest_of(base), {"by": "bundle", "legacy": True}
        ):
            if path in staged:
                try:
                    rename_path(
                        path, directory
                    )  # onto nothing or an empty dir; torch then skips it
                except OSError:
                    refused.add(
                        id(a)
                    )  # someone else wrote it meanwhile: theirs is judged on its own
            return
        code, why = (
            (pr.code or "unverifiable", pr.reason)
            if not pr.proven
            else (
                "unverifiable",
                "its files changed after they were proven; not used until they are proven",
            )
        )
        if path in staged:
            _set_aside(
                path,
                base,
                code,
                [f"restored from an FX-graph bundle: {why}"],
                entry_id=a.kernel_hash,
            )
        else:
            _set_aside(path, base, code, [f"first use of an unsealed entry: {why}"])
        refused.add(id(a))

    if staged or unsealed:
        proven = proof.prove_many(list(staged) + unsealed, on_proof=place)
        for path in unsealed:
            if (
                path not in proven
            ):  # gone since it was listed (another rank hid it): restore nothing there
                refused.add(id(existing[path][0]))


def _believed(path: str) -> bool:
    """Whether ``path`` holds a seal to judge it by: a seal this reader believes (authentic, nobody else's to
    write), or one it cannot read at all (:func:`_seal_problems` says why). A seal of an older jitwarden or of
    another user is none: the entry is proven like an unsealed one, never set aside for it."""
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal

    if not os.path.exists(os.path.join(path, SEAL_FILE)):
        return False
    try:
        return seal.read(path) is not None
    except seal.SealError:
        return True


def _seal_problems(path: str, digest: str | None = None) -> tuple[str, list[str]]:
    """(reason code, problems) of a sealed directory against its seal; ``("", [])`` when no file changed since
    it was sealed under ``digest`` (the partition's fingerprint; None: an unpartitioned root).

    "Unchanged since sealed" is :func:`jitwarden.store.seal.unchanged` (the time recorded inside
    the seal), never the seal file's own ctime, which a ``chmod`` of the seal moves past a tampered file's.
    A seal of another fingerprint is a ``mismatch``: an entry moved in from another environment.
    """
    from jitwarden.store import seal

    try:
        with os.scandir(path) as it:
            ours = [e for e in it if not is_reserved(e.name)]
            if all(e.is_file(follow_symlinks=False) for e in ours) and seal.unchanged(
                path, [e.stat(follow_symlinks=False).st_ctime_ns for e in ours], digest
            ):
                return "", []
    except OSError:
        pass
    try:
        s = seal.read(path)
    except seal.SealError as exc:
        return "corrupt", [str(exc)]
    if s is None:
        return "corrupt", ["not sealed"]
    why = seal.foreign(s.fingerprint, digest)
    if why:
        return "mismatch", [why]
    present = [n for n in os.listdir(path) if not is_reserved(n)]
    bad = seal.check(path, s, present=present)
    return ("corrupt", bad) if bad else ("", [])


def _drop_raw_cubins(static_autotuners) -> None:
    """Raw cubins in the pickle have no PTX beside them to prove them: never let torch write them to disk."""
    for sa in static_autotuners or ():
        for cr in getattr(getattr(sa, "kernel", None), "compile_results", None) or ():
            k = getattr(cr, "kernel", None)
            if k is not None and getattr(k, "cubin_raw", None) is not None:
                k.cubin_raw = None


_BUNDLE_THEN = "TorchInductor restored it from an FX-graph bundle; Inductor recompiles it"


def _warn(entry: str, code: str, why: str) -> None:
    log.warning(
        "jitwarden: refused Triton kernel %s restored by TorchInductor (%s: %s); Inductor recompiles it",
        entry[:12],
        code,
        why,
    )


def _set_aside(path: str, root: str, code: str, details, entry_id: str | None = None) -> None:
    from jitwarden.runtime import setaside

    rec = setaside.set_aside(path, code, details, root=root, entry_id=entry_id, by="torch-hook")
    if rec is None:
        _warn(entry_id or os.path.basename(path), code, "; ".join(details))
    else:
        log.warning(
            "jitwarden: %s", setaside.line(rec, "Triton kernel", code, details, _BUNDLE_THEN)
        )


# ---------------------------------------------------------------- the static launcher's loads

_STATIC = "static launcher"  # the status() key of the check below


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
        _applied[_STATIC] = "guarded"
    except Exception as exc:
        _applied[_STATIC] = (
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


def _patch_codecache(mod) -> None:
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
                check_pickles(cls._get_tmp_dir_for_key(key))
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


def _patch_aotcache(mod) -> None:
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
            seal_pickle(cls._get_tmp_dir_for_key(key), a["content"])
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


def check_pickles(subdir: str) -> list[str]:
    """Before Inductor reads ``subdir``: quarantine pickles that contradict their seal, seal the unsealed; returns lines.

    A pickle whose size is the sealed one and that has not changed since the seal was written
    (its ctime is older: a ctime cannot be set back) is not hashed again, as in the start-up sweep;
    the seal is rewritten only when it changes, so a warm start costs a few ``stat`` calls per graph.
    """
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal
    from jitwarden.store.entrylock import unlock

    try:
        with os.scandir(subdir) as it:
            st = {
                e.name: e.stat(follow_symlinks=False)
                for e in it
                if (not e.name.startswith(".") and e.is_file(follow_symlinks=False))
                or e.name == SEAL_FILE
            }
    except OSError:
        return []
    seal_st = st.pop(SEAL_FILE, None)
    if not st:
        return []
    _used(subdir)
    out = []
    fd, s = _lock_seal(subdir)
    try:
        files = dict(s.files) if s else {}
        before = dict(files)
        at = seal.sealed_at_ns(subdir) if s else None
        for name, fst in sorted(st.items()):
            rec = files.get(name)
            if rec is None:
                digest, size = seal.file_digest(os.path.join(subdir, name))
                files[name] = {"sha256": digest, "size": size}
                continue
            if at is not None and fst.st_size == rec["size"] and fst.st_ctime_ns < at:
                continue  # unchanged since it was sealed (by the time inside the seal, never the seal's ctime)
            problems = seal.check(subdir, seal.Seal({name: rec}), names=[name])
            if problems:
                files.pop(name)
                out += _quarantine_pickle(subdir, name, problems)
        files = {
            n: r for n, r in files.items() if n in st and os.path.exists(os.path.join(subdir, n))
        }
        if files != before or seal_st is None:
            _write_seal(subdir, files)
    finally:
        unlock(fd)
    return out


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


_PATCHERS = {BUNDLER: _patch_bundler, CODECACHE: _patch_codecache, AOTCACHE: _patch_aotcache}


# ---------------------------------------------------------------- doctor

#: What each wrapper needs to find in torch's source: module -> (file, the definitions it wraps).
_SHAPES = {
    BUNDLER: (
        "_inductor/triton_bundler.py",
        ("def read_and_emit(", "triton_cache_dir", "_REPLACE_BYTES"),
    ),
    CODECACHE: (
        "_inductor/codecache.py",
        (
            "def iterate_over_candidates(",
            "def _write_to_local_cache(",
            "class StaticAutotunerFuture",
        ),
    ),
    AOTCACHE: ("_functorch/_aot_autograd/autograd_cache.py", ("def _write_to_local_cache(",)),
}


_SOURCE_MAX = 16 << 20
"""torch's largest source file is a few MB: anything past this is not the file the wrappers know."""


def _torch_dir() -> str | None:
    import importlib.util

    try:
        spec = importlib.util.find_spec("torch")  # a top-level name: found, not imported
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def doctor_warnings(env=None) -> list[tuple[str, str, str | None]]:
    """(kind, text, fix) for ``jitwarden doctor``: what torch restores that these wrappers cannot guard here.

    Reads torch's source files as text (never imports torch): a wrapper attaches only to the
    definitions it knows, so one missing from this torch is a way kernels arrive unguarded mid-run.
    """
    from jitwarden.store.reads import read_bytes

    env = os.environ if env is None else env
    tdir = _torch_dir()
    if tdir is None:
        return []
    out: list[tuple[str, str, str | None]] = []
    if not enabled(env):
        out.append(
            (
                "torch-hooks",
                f"{HOOKS_VAR}=0: Triton kernels TorchInductor restores mid-run (FX-graph bundles, "
                "remote caches, AOT artifacts) are checked only at the next start-up, by a sweep of every "
                "entry (a start-up that grows with the cache), and FX-graph pickles are not sealed",
                f"unset {HOOKS_VAR}",
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
                f"Triton's guarded cache instead of restoring bundles; {HOOKS_VAR}=0 silences this)",
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


# ---------------------------------------------------------------- jitwarden run


def boot_dir() -> str:
    """The directory whose ``sitecustomize`` installs these guards in every Python that ``jitwarden run`` starts."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "_boot")


def add_boot_path(env) -> bool:
    """Put :func:`boot_dir` first on ``env``'s ``PYTHONPATH`` when torch is installed and the hooks are on.

    ``jitwarden run`` activates in its own process and then execs the command, so the hooks
    must be installed by the command's interpreter itself. True when it was added (or was there).
    """
    if not enabled(env) or _torch_dir() is None:
        return False
    put_boot_path(env)
    return True


def put_boot_path(env) -> None:
    """Put :func:`boot_dir` first on ``env``'s ``PYTHONPATH`` (once)."""
    d = boot_dir()
    parts = [p for p in (env.get("PYTHONPATH") or "").split(os.pathsep) if p]
    if d not in parts:
        env["PYTHONPATH"] = os.pathsep.join([d, *parts])
