"""``jitwarden.activate()``: partition this process's kernel caches by fingerprint and guard Triton's.

Standard library only, no torch, no CUDA initialisation, a few milliseconds
warm, and it never raises into the host program.

What it changes in ``env`` (``os.environ`` by default, in place):

- ``TRITON_CACHE_DIR`` -> ``<triton root>/jitwarden-v1/<digest>``;
- ``TORCHINDUCTOR_CACHE_DIR`` -> ``<inductor root>/jitwarden-v1/<digest>``: Inductor's FX-graph
  and autotune caches are not keyed by GPU arch either;
- ``VLLM_CACHE_ROOT`` -> ``<vllm root>/jitwarden-v1/<digest>``: vLLM has no separate variable for
  its ``torch_compile_cache`` (keyed by GPU name, not compute capability or driver); the
  rest of its root (model-info and asset caches) is small and rebuilt on demand;
  (Inductor and vLLM roots only when torch, respectively vLLM, is installed.)
- ``TRITON_CACHE_MANAGER`` -> ``jitwarden.guard:GuardedCacheManager``, unless the user set
  another manager (then one warning, and it stays);
- ``PYTHONPATH`` gets ``runtime/_boot`` first, when torch is installed: every Python started with
  this environment installs the torch hooks, which check each TorchInductor kernel as it is
  loaded. Nothing then walks the cache trees at start-up; with the hooks off
  (``JITWARDEN_TORCH_HOOKS=0``) every entry is swept here instead (``runtime/fullsweep.py``).

A root the user set explicitly is kept and partitioned *inside* (a Docker volume on
``~/.triton`` keeps working); an already partitioned value is never nested again.
``JITWARDEN_PARTITION=0`` leaves every root as it is (the guard is still installed);
``JITWARDEN_DISABLE=1`` makes activation do nothing at all.

Warm path: the fingerprint facts (digest, headline, packages, archs, fingerprint-derived
warnings) come from ``activation_memo``, which checks by stat and by value everything the
fingerprint was computed from, importing only ``os``, ``sys`` and ``json``; any change is a
miss and the fingerprint is computed again (and memoised). Everything about the cache
roots (unsafe-root refusal, private fallback, partition last use, shared-root sample) is
not memoised: it runs live on both paths.
"""

from __future__ import annotations

import errno
import os
import sys
from collections.abc import Iterable, MutableMapping

from jitwarden.env import locations
from jitwarden.model import kinds, settings
from jitwarden.model.settings import DISABLE, GUARD_MANAGER, PARTITION
from jitwarden.runtime import flatseal
from jitwarden.runtime.say import say
from jitwarden.store import partition

MANAGER = GUARD_MANAGER
_LAST: list = []  # [(env object, record, values it left)], newest last; holding env keeps its id unique


class Activation:
    """What one activation did: the fingerprint digest, each redirected variable, and why anything was not.

    Immutable. A ``__slots__`` class rather than a frozen dataclass: ``dataclasses`` (and the
    ``inspect`` it imports) would cost more than the rest of a warm activation.
    """

    __slots__ = ("digest", "partitions", "cache_manager", "warnings", "skipped", "headline")
    digest: str | None
    partitions: dict
    cache_manager: str | None
    warnings: tuple[str, ...]
    skipped: dict
    headline: str | None

    def __init__(
        self,
        digest: str | None,
        partitions: dict | None = None,
        cache_manager: str | None = None,
        warnings: tuple[str, ...] = (),
        skipped: dict | None = None,
        headline: str | None = None,
    ):
        put = object.__setattr__
        put(self, "digest", digest)
        put(
            self, "partitions", {} if partitions is None else partitions
        )  # env var -> partition path
        put(self, "cache_manager", cache_manager)  # the TRITON_CACHE_MANAGER in effect
        put(self, "warnings", tuple(warnings))
        put(self, "skipped", {} if skipped is None else skipped)  # what -> why it was not done
        put(self, "headline", headline)

    def __setattr__(self, name, value):
        raise AttributeError(f"cannot assign to field {name!r}: Activation is immutable")

    def __delattr__(self, name):
        raise AttributeError(f"cannot delete field {name!r}: Activation is immutable")

    def _fields(self) -> tuple:
        return tuple(getattr(self, k) for k in self.__slots__)

    def __eq__(self, other):
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None  # type: ignore[assignment]  # holds dicts, like the frozen dataclass it replaces (whose hash raised)

    def __repr__(self) -> str:
        return "Activation(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    @property
    def active(self) -> bool:
        return self.digest is not None

    def to_json(self) -> dict:
        return {
            "schema": 1,
            "digest": self.digest,
            "partitions": dict(self.partitions),
            "cache_manager": self.cache_manager,
            "warnings": list(self.warnings),
            "skipped": dict(self.skipped),
            "headline": self.headline,
        }


def _triton_knobs():
    """``triton.knobs.cache`` when Triton is already imported (never imports it), else None."""
    mod = sys.modules.get("triton")
    knobs = getattr(mod, "knobs", None) if mod is not None else None
    return getattr(knobs, "cache", None)


def _current(kind: str, var: str, env, knobs) -> str | None:
    """The value in effect: a Python-level ``triton.knobs.cache.dir`` overrides the variable."""
    if kind == "triton" and knobs is not None and "dir" in vars(knobs):
        return vars(knobs)["dir"]
    return env.get(var) or None


def _usable_base(base: str) -> tuple[str, bool] | None:
    """None when ``base`` is safe to hold partitions, else (why not, unsafe) (creates it if missing).

    ``unsafe``: others could write or own it (a sharing problem, fixed by owner and mode), as opposed
    to a place we cannot create or write (fixed by pointing the cache elsewhere).
    """
    from jitwarden.store.paths import make_dirs, nearest_existing

    try:
        top, missing = nearest_existing(base)
        if missing and (owner := os.stat(top).st_uid) not in (os.geteuid(), 0):
            from jitwarden.store import trust

            if not trust.in_trusted_root(
                base
            ):  # root with a user's HOME: nothing of root's left there
                return (
                    f"missing, and {top} belongs to uid {owner}: no cache dir is made in another's",
                    True,
                )
        make_dirs(base)
        why = next(iter(locations.root_problems(base)), None)
    except OSError as exc:
        return f"cannot create it: {exc.strerror}", False
    if why:
        return why, True
    if not os.access(base, os.W_OK | os.X_OK):
        return "not writable", False
    return None


def _private_base(kind: str, env) -> str:
    from jitwarden.runtime.memo import memo_dir

    return os.path.join(memo_dir(env), "roots", kind)


def _private_top(env) -> str:
    from jitwarden.runtime.memo import memo_dir

    return memo_dir(env)


def _runtime_base(kind: str, env) -> str:
    """A per-user private root off the (maybe read-only) home: ``$XDG_RUNTIME_DIR``, else the temp dir."""
    return os.path.join(_runtime_top(env), "roots", kind)


def _runtime_top(env) -> str:
    run = env.get("XDG_RUNTIME_DIR")
    if run and os.path.isabs(run):
        return os.path.join(run, "jitwarden")
    return os.path.join(env.get("TMPDIR") or "/tmp", f"jitwarden-{os.getuid()}")


def _not_ours(top: str) -> str | None:
    """None when ``top`` (made 0700 if missing) is a directory of ours nobody else can write, else why not.

    The private roots live below it: whoever can rename entries in it could swap our root for theirs, and
    so could whoever can rename ``top`` itself: its parent must be only ours and root's to change (another
    user's ``XDG_RUNTIME_DIR`` or ``TMPDIR``, left by ``su`` without ``-``, is not).
    """
    import stat

    from jitwarden.store.paths import make_dirs
    from jitwarden.store.reads import why_not_private
    from jitwarden.store.tempdirs import why_untrusted

    parent = os.path.dirname(os.path.abspath(top))
    try:
        why = why_untrusted(os.stat(parent))
    except OSError as exc:
        return f"{parent}: {exc.strerror or exc}"
    if why:
        return f"{parent} {why}"
    try:
        make_dirs(top, 0o700)
        st = os.stat(top)
    except OSError as exc:
        return f"{top}: {exc.strerror or exc}"
    if not stat.S_ISDIR(st.st_mode) or why_not_private(
        st
    ):  # the memo's rule: ours, nobody else may write
        return f"{top} is not a private directory of yours (owner {st.st_uid}, mode {st.st_mode & 0o7777:o})"
    return None


def _fresh_base(kind: str, env) -> str | None:
    """A new private directory (mode 0700) in the temp dir: the last resort, empty, but ours alone."""
    from jitwarden.store.tempdirs import private_dir

    for tmp in (env.get("TMPDIR"), "/tmp", "/var/tmp", "/dev/shm"):
        if tmp and os.path.isdir(tmp):
            try:
                return private_dir(f"jitwarden-{kind}-", tmp)
            except OSError:
                continue
    return None


def _partition_in(
    i: int, cand: str, kind: str, env, digest: str, headline: str | None
) -> tuple[str | None, tuple[str, bool] | None]:
    """(the partition, None) when the ``i``-th place tried, ``cand``, holds this fingerprint's partition now; else
    (None, (why not, whether that is unsafe rather than unusable))."""
    top = {1: lambda: _private_top(env), 2: lambda: _runtime_top(env)}.get(i)
    not_ours = _not_ours(top()) if top is not None else None
    refusal = (not_ours, True) if not_ours else _usable_base(cand)
    if refusal is not None:
        return None, refusal
    path = partition.path_for(cand, digest)
    try:
        partition.ensure(path, digest, headline, kind, python=_writer())
    except OSError as exc:
        from jitwarden.store.paths import UnsafeName

        return None, (
            f"cannot use its partition: {exc.strerror or exc}",
            isinstance(exc, UnsafeName) or exc.errno in (errno.ELOOP, errno.ENOTDIR),
        )
    return path, None


def _partition(
    kind: str, base: str, env, digest: str, headline: str | None
) -> tuple[str | None, str | None]:
    """(partition path, warning or None): the first usable one of ``base``, the private roots, a fresh dir.

    Fails closed: a root that is unsafe, read-only, full, or whose partition is damaged (a symlink,
    not a directory) never leaves the cache unpartitioned while any private place can hold one.
    """
    first: tuple[str, bool] | None = (
        None  # (why, unsafe) of the first place refused: the user's root
    )
    tried = []
    for i, cand in enumerate((base, _private_base(kind, env), _runtime_base(kind, env), None)):
        if cand is None:
            cand = _fresh_base(kind, env)
            if cand is None:
                break
        if cand in tried:
            continue
        tried.append(cand)
        path, refusal = _partition_in(i, cand, kind, env, digest, headline)
        if refusal is None:
            if i == 0:
                return path, None
            from jitwarden.runtime import (
                startup_checks,
            )  # only here: refusals are rare, and it imports ptxas

            assert first is not None  # the user's root (i == 0) was refused
            return path, startup_checks.unsafe_root(base, first[0], path, first[1])
        if first is None:
            first = refusal
    from jitwarden.runtime import startup_checks

    assert first is not None  # the user's root is always tried first
    return None, startup_checks.unsafe_root(
        base, f"{first[0]}; no private place for a partition either", None, first[1]
    )


def _writer() -> str:
    """The Python whose environment this activation partitions for (``jitwarden run`` of another
    environment's: that one), recorded in the partition for ``doctor --python``."""
    from jitwarden.env import interpreter

    other = interpreter.current()
    return other.executable if other is not None else sys.executable


def activate(
    *,
    env: MutableMapping[str, str] | None = None,
    roots: Iterable[str] | None = None,
    quiet: bool = False,
) -> Activation:
    """Partition and guard the kernel caches of ``env`` (``os.environ`` by default); never raises.

    ``roots``: which cache kinds to partition (default: every kind whose row is partitioned). Idempotent: a
    second call on the same environment returns the same record and changes nothing. On any internal error it
    fails closed: the cache dirs are left as they were, the Triton guard is still
    installed (unless the user set another cache manager), and one warning is logged.
    """
    target = os.environ if env is None else env
    touched = [k.var for k in kinds.partitioned() if k.var] + ["TRITON_CACHE_MANAGER", "PYTHONPATH"]
    before = {k: target.get(k) for k in touched}
    knobs = _triton_knobs() if target is os.environ else None
    knob_before = dict(vars(knobs)) if knobs is not None else None
    try:
        done = _done_before(target)
        if done is not None:
            return done
        every = tuple(k.name for k in kinds.partitioned())
        rec = _activate(target, every if roots is None else tuple(roots), quiet, knobs)
        _LAST[:] = [x for x in _LAST if x[0] is not target][-7:] + [
            (target, rec, {k: target.get(k) for k in touched})
        ]
        return rec
    except Exception as exc:
        return _failed(target, before, knobs, knob_before, exc)


def _done_before(target) -> Activation | None:
    """The record of this process's activation of ``target`` when it left every variable as it is now: activating
    again changes nothing."""
    for env_obj, rec, left in _LAST:
        if env_obj is target and all(target.get(k) == v for k, v in left.items()):
            return rec
    return None


def _failed(target, before: dict, knobs, knob_before: dict | None, exc: Exception) -> Activation:
    """A failed activation fails closed: ``target`` and Triton's knobs as they came, the guard kept on (unless the
    user set another cache manager), one line."""
    _restore(target, before, knobs, knob_before)
    manager = _keep_guard(target, before, knobs)
    guard = (
        "the Triton guard is still on" if manager == MANAGER else "the Triton cache is not guarded"
    )
    say(
        f"activation failed ({type(exc).__name__}: {exc}); caches are not partitioned in this process, "
        f"{guard}"
    )
    return Activation(None, {}, manager, (), {"all": f"{type(exc).__name__}: {exc}"})


def _restore(target, before: dict, knobs, knob_before: dict | None) -> None:
    """After a failed activation: every variable it may have set, and Triton's knobs, as they came."""
    for k, v in before.items():
        if v is None:
            target.pop(k, None)
        else:
            target[k] = v
    if knobs is not None and knob_before is not None:
        for k in ("dir", "manager_class"):
            if k in knob_before:
                vars(knobs)[k] = knob_before[k]
            else:
                vars(knobs).pop(k, None)


def _keep_guard(target, before: dict, knobs) -> str | None:
    """Fail closed: the Triton guard set where the user set no cache manager of their own; the manager in effect."""
    manager = before.get("TRITON_CACHE_MANAGER")
    if not manager and not (knobs is not None and vars(knobs).get("manager_class") is not None):
        try:
            target["TRITON_CACHE_MANAGER"] = MANAGER  # fail closed: the guard stays on
            manager = MANAGER
        except Exception:
            pass
    return manager


def reduced_protection(env=None) -> list[tuple[str, str, str]]:
    """Every setting in ``env`` that lowers what activation protects, as (setting, what it costs, how to undo).

    Pure over the environment: ``doctor`` and ``status`` report these so that a protection
    turned off (for a test, a benchmark, a workaround) is never forgotten.
    """
    env = os.environ if env is None else env
    out = settings.weakened(
        env
    )  # each JITWARDEN_* switch turned to its weak side, worded by its row
    manager = env.get("TRITON_CACHE_MANAGER")
    if manager and not settings.is_guarded(manager):
        out.append(
            (
                f"TRITON_CACHE_MANAGER={manager}",
                "Triton cache entries are not sealed or verified (activation leaves a user's manager in place)",
                "unset TRITON_CACHE_MANAGER",
            )
        )
    return out


def _checked_at_load(env, changes: dict) -> bool:
    """Whether the workload will check each TorchInductor kernel as it loads it, so no start-up sweep is needed.

    The torch hooks (:mod:`~jitwarden.runtime.guards.inductor`) do that: installed here when ``env`` is this
    process's, and through ``PYTHONPATH`` in every Python started with ``env`` (``jitwarden run``, a
    workload's own workers). Where they are
    off or cannot be put there, False: the whole tree is swept now (:mod:`~jitwarden.runtime.fullsweep`).
    A torch whose loader the hooks do not know is swept when it imports it (its guard does that).
    """
    from jitwarden.runtime import guards

    if not guards.torch_enabled(env):
        return False
    path = {
        "PYTHONPATH": env.get("PYTHONPATH", "")
    }  # every Python started with env installs them too
    if not guards.add_boot_path(path):
        return False
    if path["PYTHONPATH"] != env.get("PYTHONPATH", ""):
        changes["PYTHONPATH"] = path[
            "PYTHONPATH"
        ]  # set with the rest, undone with them on a failure
    if env is os.environ:  # and this one, now (or as soon as torch imports its loaders)
        return all(not v.startswith("not installed") for v in guards.install_torch(env).values())
    return True


def _load_hooks(env, changes: dict) -> tuple[str, ...]:
    """The kinds whose entries are checked as their tool loads them (:mod:`~jitwarden.runtime.guards`): installed
    here when ``env`` is this process's, and through ``PYTHONPATH`` in every Python started with ``env``. Their
    unsealed files are then proven at first use, not sealed at start-up."""
    from jitwarden.runtime import guards

    hooked = guards.hooked(env)
    if not hooked:
        return ()
    path = {"PYTHONPATH": changes.get("PYTHONPATH", env.get("PYTHONPATH", ""))}
    guards.put_boot_path(path)
    if path["PYTHONPATH"] != env.get("PYTHONPATH", ""):
        changes["PYTHONPATH"] = path["PYTHONPATH"]
    if env is os.environ:
        guards.install_load_hooks(env)
    return hooked


def _fingerprint(env):
    """The :class:`~jitwarden.runtime.memo.ActivationFacts` of ``env``: memoised when nothing they came from changed."""
    from jitwarden.runtime import memo as activation_memo

    return activation_memo.lookup(env) or activation_memo.compute(env)


class _Plan:
    """What one activation is about to do, gathered step by step before anything is set in ``env``.

    Mutable, and private to :func:`_activate`: each step adds to it in the order the user reads
    the result (warnings in the order they are said, changes in the order they are set).
    A ``__slots__`` class for the reason :class:`Activation` is one.
    """

    __slots__ = ("warnings", "skipped", "changes", "partitions", "in_use", "unpartitioned_triton")
    warnings: list[str]  # said once each, in this order, after every change is set
    skipped: dict  # what -> why it was not done
    changes: (
        dict  # env var -> its new value, set together at the end (undone together on a failure)
    )
    partitions: dict  # env var -> the partition it now points into
    in_use: dict  # env var -> the root the workload will use, partitioned or not
    unpartitioned_triton: (
        str | None
    )  # Triton's root when it is left shared: its entries are sampled

    def __init__(self) -> None:
        self.warnings = []
        self.skipped = {}
        self.changes = {}
        self.partitions = {}
        self.in_use = {}
        self.unpartitioned_triton = None


def _not_applicable(row: kinds.Kind, cur: str | None, env, fp) -> str | None:
    """Why ``row``'s root has nothing to partition in this environment (the package its row needs is not
    installed; a tool without a default root, JAX's, keeps no persistent cache unless told, or a remote one), else
    None."""
    if row.needs and fp.version(row.needs) is None:
        return f"{row.needs} is not installed"
    if not cur and not locations.default_base(row.name, env):
        return f"{row.tool}'s persistent cache is off ({row.var} unset)"
    if cur and "://" in cur:  # a gs:// or s3:// cache is not a dir here
        return f"{row.tool}'s persistent cache is remote"
    return None


def _partition_roots(plan: _Plan, env, roots: tuple[str, ...], knobs, fp) -> None:
    """Step 1, partition the roots: point each kind's variable into its partition for this fingerprint.

    ``JITWARDEN_PARTITION=0`` records each root as in use, unpartitioned. A root that cannot be
    partitioned anywhere (``_partition`` fails closed first) is skipped with its warning; Triton's
    is then remembered as shared, for :func:`_check_in_use`'s sample.
    """
    no_partition = not PARTITION.on(env)
    for row in kinds.partitioned():
        kind, var = row.name, row.var
        if (
            var is None or kind not in roots
        ):  # a partitioned row always names one (tests/unit/model/test_kinds.py)
            continue
        cur = _current(kind, var, env, knobs)
        why = _not_applicable(row, cur, env, fp)
        if why is not None:
            plan.skipped[var] = why
            continue
        if no_partition:
            plan.skipped[var] = f"{PARTITION.name}=0"
            plan.in_use[var] = cur or locations.default_base(kind, env)
            if kind == "triton":
                plan.unpartitioned_triton = plan.in_use[var]
            continue
        base = locations.partition_base(kind, env, cur)
        path, warning = _partition(kind, base, env, fp.digest, fp.headline)
        if warning:
            plan.warnings.append(warning)
        if path is None:
            plan.skipped[var] = warning
            if kind == "triton":
                plan.unpartitioned_triton = cur or base
            continue
        plan.partitions[var] = plan.in_use[var] = path
        if cur != path:
            plan.changes[var] = path


def _manager_in_effect(env, knobs) -> str | None:
    """The Triton cache manager the workload would use: a ``triton.knobs`` class set in Python wins over the variable."""
    manager = env.get("TRITON_CACHE_MANAGER") or None
    cls = vars(knobs).get("manager_class") if knobs is not None else None
    if cls is not None:
        manager = f"{cls.__module__}:{cls.__qualname__}"
    return manager


def _install_guard(plan: _Plan, env, knobs) -> str | None:
    """Step 2, install the guard: jitwarden's Triton cache manager, unless the user set another (one warning,
    and it stays); then the fleet wiring (``JITWARDEN_REMOTE``, Inductor's unguarded remote caches). The
    manager in effect."""
    manager = _manager_in_effect(env, knobs)
    if manager and manager not in (MANAGER, settings.REMOTE_MANAGER):
        plan.warnings.append(
            f"TRITON_CACHE_MANAGER={manager} is set; leaving it, so Triton cache entries are not "
            "sealed or verified (unset it to let jitwarden guard them)"
        )
        plan.skipped["TRITON_CACHE_MANAGER"] = f"user set {manager}"
    elif manager != MANAGER:
        plan.changes["TRITON_CACHE_MANAGER"] = MANAGER
        manager = MANAGER
    from jitwarden.runtime.remote_wiring import (
        wire,
    )  # fleets: JITWARDEN_REMOTE, and Inductor's unguarded remote caches

    return wire(env, manager, MANAGER, plan.changes, plan.partitions, plan.warnings)


def _check_inductor(plan: _Plan, env, digest: str, quiet: bool) -> None:
    """The torch hooks or the whole-tree sweep: TorchInductor's kernels are checked as they load
    where the hooks can be put (:func:`_checked_at_load`), else every entry in use is swept now. Also
    a sweep when an earlier start left entries hidden for their proofs."""
    if "TORCHINDUCTOR_CACHE_DIR" not in plan.in_use:  # torch is not installed
        return
    from jitwarden.runtime import fullsweep

    if not _checked_at_load(env, plan.changes) or fullsweep.left_hidden(plan.in_use):
        plan.warnings += fullsweep.sweep_in_use(plan.in_use, plan.partitions, digest, env, quiet)


def _check_in_use(plan: _Plan, env, fp, quiet: bool) -> None:
    """Step 3, check what the workload will load, before it runs: the fingerprint's own warnings, a shared
    Triton root's sample, Inductor's kernels (:func:`_check_inductor`), then JAX's and CuPy's files
    (their load hooks, or :func:`~jitwarden.runtime.flatseal.startup`)."""
    plan.warnings += (
        fp.warnings
    )  # startup_checks.torch_arch and .ptxas_target, memoised with the digest
    if plan.unpartitioned_triton:  # before the sweep hides unsealed entries for their proofs
        from jitwarden.runtime import startup_checks

        plan.warnings += startup_checks.shared_root(
            plan.unpartitioned_triton, fp.archs, fp.version("triton")
        )
    _check_inductor(plan, env, fp.digest, quiet)
    hooked = _load_hooks(env, plan.changes)
    plan.warnings += flatseal.startup(
        plan.in_use, plan.partitions, fp.digest, env, hooked
    )  # JAX's and CuPy's files (runtime/flatseal.py)


def _apply(plan: _Plan, env, knobs, quiet: bool) -> None:
    """Step 4, set every change in ``env`` at once, mirror the Triton dir into a Python-level knob (which
    would otherwise hide the variable from Triton), then say the warnings, once each."""
    for var, value in plan.changes.items():
        env[var] = value
    if knobs is not None and "TRITON_CACHE_DIR" in plan.changes and "dir" in vars(knobs):
        vars(knobs)["dir"] = plan.changes["TRITON_CACHE_DIR"]
    if not quiet:
        for w in plan.warnings:
            say(w)


def _activate(env, roots, quiet, knobs) -> Activation:
    """One activation of ``env``, its steps in order (ARCHITECTURE.md, "The flow of activation"): partition
    the roots, install the guard, check what is in use, then set it all and say the warnings.

    No variable is set in ``env`` before the last step: the steps gather them in a :class:`_Plan`, so that
    the ones that run code (the sweep, the hooks) see the environment as it came.
    """
    if DISABLE.on(env):
        return Activation(
            None, {}, env.get("TRITON_CACHE_MANAGER"), (), {"all": f"{DISABLE.name} is set"}
        )
    fp = _fingerprint(env)
    plan = _Plan()
    _partition_roots(plan, env, roots, knobs, fp)
    manager = _install_guard(plan, env, knobs)
    _check_in_use(plan, env, fp, quiet)
    _apply(plan, env, knobs, quiet)
    return Activation(
        fp.digest, plan.partitions, manager, tuple(plan.warnings), plan.skipped, fp.headline
    )
