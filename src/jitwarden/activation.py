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
  another manager (then one warning, and it stays).

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

import os
import sys

from . import locations, partition
from .locations import KINDS, default_base

MANAGER = "jitwarden.guard:GuardedCacheManager"
_SAID: set[str] = set()
_LAST: list = []  # [(env object, record, values it left)], newest last; holding env keeps its id unique


class Activation:
    """What one activation did: the fingerprint digest, each redirected variable, and why anything was not.

    Immutable. A ``__slots__`` class rather than a frozen dataclass: ``dataclasses`` (and the
    ``inspect`` it imports) would cost more than the rest of a warm activation.
    """

    __slots__ = ("digest", "partitions", "cache_manager", "warnings", "skipped", "headline")

    def __init__(self, digest: str | None, partitions: dict | None = None, cache_manager: str | None = None,
                 warnings: tuple[str, ...] = (), skipped: dict | None = None, headline: str | None = None):
        put = object.__setattr__
        put(self, "digest", digest)
        put(self, "partitions", {} if partitions is None else partitions)  # env var -> partition path
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

    __hash__ = None  # holds dicts, like the frozen dataclass it replaces (whose hash raised)

    def __repr__(self) -> str:
        return "Activation(" + ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__) + ")"

    @property
    def active(self) -> bool:
        return self.digest is not None

    def to_json(self) -> dict:
        return {"schema": 1, "digest": self.digest, "partitions": dict(self.partitions),
                "cache_manager": self.cache_manager, "warnings": list(self.warnings),
                "skipped": dict(self.skipped), "headline": self.headline}


def _off(value: str | None) -> bool:
    return (value or "").strip().lower() in ("0", "false", "no", "off")


def _on(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


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


def _usable_base(base: str) -> str | None:
    """None when ``base`` is safe to hold partitions, else why not (creates it if missing)."""
    try:
        os.makedirs(base, exist_ok=True)
        why = next(iter(locations.root_problems(base)), None)
    except OSError as exc:
        return f"cannot create it: {exc.strerror}"
    if why:
        return why
    if not os.access(base, os.W_OK | os.X_OK):
        return "not writable"
    return None


def _private_base(kind: str, env) -> str:
    from .activation_memo import memo_dir

    return os.path.join(memo_dir(env), "roots", kind)


def _say(msg: str, quiet: bool) -> None:
    if not quiet and msg not in _SAID:
        import logging

        _SAID.add(msg)
        logging.getLogger("jitwarden").warning("jitwarden: %s", msg)


def activate(*, env=None, roots=("triton", "inductor", "vllm", "torch-ext"), quiet: bool = False) -> Activation:
    """Partition and guard the kernel caches of ``env`` (``os.environ`` by default); never raises.

    ``roots``: which cache kinds to partition. Idempotent: a second call on the same
    environment returns the same record and changes nothing. On any internal error
    the environment is left exactly as it was and one warning is logged.
    """
    target = os.environ if env is None else env
    touched = [var for _k, var in KINDS] + ["TRITON_CACHE_MANAGER"]
    before = {k: target.get(k) for k in touched}
    knobs = _triton_knobs() if target is os.environ else None
    knob_before = dict(vars(knobs)) if knobs is not None else None
    try:
        for env_obj, rec, left in _LAST:
            if env_obj is target and all(target.get(k) == v for k, v in left.items()):
                return rec
        rec = _activate(target, tuple(roots), quiet, knobs)
        _LAST[:] = [x for x in _LAST if x[0] is not target][-7:] + [(target, rec, {k: target.get(k) for k in touched})]
        return rec
    except Exception as exc:  # noqa: BLE001 - activation must never break the host program
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
        _say(f"activation skipped ({type(exc).__name__}: {exc}); caches are unguarded in this process", False)
        return Activation(None, {}, before.get("TRITON_CACHE_MANAGER"), (), {"all": f"{type(exc).__name__}: {exc}"})


def _sweep(in_use: dict, partitions: dict, digest: str, env) -> list[str]:
    """Check the TorchInductor kernels of the cache dirs in use before Inductor's static launcher loads them.

    ``in_use``: variable -> the dir that kind's cache is in now (a partition, or the user's own dir
    under ``JITWARDEN_PARTITION=0``); Inductor's entry says torch is installed. Entries in one of
    ``partitions`` are sealed under its digest, others under none (as the guard does).
    """
    if _off(env.get("JITWARDEN_SWEEP")) or "TORCHINDUCTOR_CACHE_DIR" not in in_use:
        return []
    try:
        from . import sweep

        out: list[str] = []
        proofs: dict = {}  # unsealed kernels proven by every sweep below: one line for the start-up
        for kind, var in KINDS:
            if var not in in_use:
                continue
            # Inductor puts its kernels in TRITON_CACHE_DIR when that is set, as it is under activation.
            trees = [in_use[var]] if kind == "triton" else sweep.tree_roots(kind, in_use[var])
            if trees:
                out += sweep.sweep(trees, digest if var in partitions else None, proofs)[0]
        if proofs:
            from .firstuse import summary

            out += [line for line in (summary(proofs),) if line]
        return out
    except Exception as exc:  # noqa: BLE001 - the sweep must never stop the workload
        return [f"start-up check of TorchInductor kernels skipped ({type(exc).__name__}: {exc})"]


def _fingerprint(env):
    """The fingerprint facts activation needs: memoised when nothing they came from changed."""
    from . import activation_memo

    return activation_memo.lookup(env) or activation_memo.compute(env)


def _activate(env, roots, quiet, knobs) -> Activation:
    if _on(env.get("JITWARDEN_DISABLE")):
        return Activation(None, {}, env.get("TRITON_CACHE_MANAGER"), (), {"all": "JITWARDEN_DISABLE is set"})
    fp = _fingerprint(env)
    digest = fp.digest
    warnings: list[str] = []
    skipped: dict = {}
    changes: dict = {}
    partitions: dict = {}
    unpartitioned_triton = None

    in_use: dict = {}
    no_partition = _off(env.get("JITWARDEN_PARTITION"))
    for kind, var in KINDS:
        if kind not in roots:
            continue
        cur = _current(kind, var, env, knobs)
        needs = {"inductor": "torch", "vllm": "vllm", "torch-ext": "torch"}.get(kind)
        if needs and fp.package(needs) is None:
            skipped[var] = f"{needs} is not installed"
            continue
        if no_partition:
            skipped[var] = "JITWARDEN_PARTITION=0"
            in_use[var] = cur or default_base(kind, env)
            if kind == "triton":
                unpartitioned_triton = in_use[var]
            continue
        base = partition.base_of(cur) if cur else default_base(kind, env)
        why = _usable_base(base)
        if why is not None:
            private = _private_base(kind, env)
            pwhy = _usable_base(private)
            from . import startup_checks  # only here: refusals are rare, and it imports ptxas

            if pwhy is not None:
                warnings.append(startup_checks.unsafe_root(base, why, None))
                skipped[var] = f"{base}: {why}; private root {private}: {pwhy}"
                if kind == "triton":
                    unpartitioned_triton = cur or base
                continue
            warnings.append(startup_checks.unsafe_root(base, why, partition.path_for(private, digest)))
            base = private
        path = partition.path_for(base, digest)
        partition.ensure(path, digest, fp.headline(), kind)
        partitions[var] = in_use[var] = path
        if cur != path:
            changes[var] = path

    manager = env.get("TRITON_CACHE_MANAGER") or None
    if knobs is not None and "manager_class" in vars(knobs) and vars(knobs)["manager_class"] is not None:
        cls = vars(knobs)["manager_class"]
        manager = f"{cls.__module__}:{cls.__qualname__}"
    if manager and manager != MANAGER:
        warnings.append(f"TRITON_CACHE_MANAGER={manager} is set; leaving it, so Triton cache entries are not "
                        "sealed or verified (unset it to let jitwarden guard them)")
        skipped["TRITON_CACHE_MANAGER"] = f"user set {manager}"
    elif manager != MANAGER:
        changes["TRITON_CACHE_MANAGER"] = MANAGER
        manager = MANAGER

    warnings += fp.warnings  # startup_checks.torch_arch and .ptxas_target, memoised with the digest
    warnings += _sweep(in_use, partitions, digest, env)
    if "TORCHINDUCTOR_CACHE_DIR" in in_use and env is os.environ:  # torch is installed: guard what it restores
        from .torchhooks import install

        install(env)
    if unpartitioned_triton:
        from . import startup_checks

        warnings += startup_checks.shared_root(fp, unpartitioned_triton)

    for var, value in changes.items():
        env[var] = value
    if knobs is not None:  # a Python-level knob would hide the variable from Triton
        if "TRITON_CACHE_DIR" in changes and "dir" in vars(knobs):
            vars(knobs)["dir"] = changes["TRITON_CACHE_DIR"]
    for w in warnings:
        _say(w, quiet)
    return Activation(digest, partitions, manager, tuple(warnings), skipped, fp.headline())
