"""The whole-tree sweep, for where loads cannot be checked as they happen (ARCHITECTURE.md, "The runtime").

TorchInductor's static launcher reads cubins itself, never asking Triton's cache manager. Where
the torch hooks are in the workload, :mod:`~jitwarden.runtime.guards.inductor` checks each kernel as
Inductor is about to load it (O(kernels used), :func:`jitwarden.runtime.sweep.check_loaded`), and
nothing is swept at start-up. Where they cannot be (``JITWARDEN_TORCH_HOOKS=0``, a child Python
that will not run them, or a torch whose loader is not the shape the hooks know), every entry of
the trees in use is checked before anything can load it: at activation, or as torch imports its
code cache. That is :func:`sweep_in_use`: the per-tree sweep (:mod:`~jitwarden.runtime.sweep`),
unsealed kernels hidden for a prover in the background (:mod:`~jitwarden.runtime.prover`) or
proven here, one line for all proofs.

Stdlib only, never raises into the caller: it runs on the activation path.
"""

from __future__ import annotations

import os

from jitwarden.env import locations
from jitwarden.model import kinds
from jitwarden.model.settings import SWEEP
from jitwarden.store import partition


def sweep_in_use(
    in_use: dict, partitions: dict, digest: str | None, env, quiet: bool = False
) -> list[str]:
    """Check the TorchInductor kernels of the cache dirs in use before Inductor's static launcher loads them.

    ``in_use``: variable -> the dir that kind's cache is in now (a partition, or the user's own dir
    under ``JITWARDEN_PARTITION=0``); Inductor's entry says torch is installed. Entries in one of
    ``partitions`` are sealed under its digest, others under none (as the guard does).
    """
    if not SWEEP.on(env) or "TORCHINDUCTOR_CACHE_DIR" not in in_use:
        return []
    try:
        from jitwarden.runtime import hiding, prover, sweep
        from jitwarden.runtime.proof import ProofCounts

        out: list[str] = []
        proofs = (
            ProofCounts()
        )  # unsealed kernels proven by every sweep below: one line for the start-up
        jobs: list | None = (
            [] if hiding.background(env) else None
        )  # proofs left to a prover in the background
        for row in kinds.partitioned(kinds.DIR):
            var = row.var
            if var not in in_use:
                continue
            # Inductor puts its kernels in TRITON_CACHE_DIR when that is set, as it is under activation.
            trees = sweep.tree_roots(row.name, in_use[var])
            if trees:
                w, counts = sweep.sweep(
                    trees, digest if var in partitions else None, jobs, proof_line=False
                )
                out += w
                proofs = proofs.plus(counts.get("proofs"))
        if jobs:  # to a prover in the background; proven here only when none can start
            proofs = proofs.plus(prover.run(jobs, quiet, env, say=out.append))
        line = proofs.summary()
        if line:
            out.append(line)
        return out
    except Exception as exc:
        return [f"start-up check of TorchInductor kernels skipped ({type(exc).__name__}: {exc})"]


def left_hidden(in_use: dict) -> bool:
    """Whether a tree in use holds kernels a stopped prover left hidden (one ``scandir`` per tree, not per entry).

    Only the whole-tree sweep takes them up (proves them and puts them back), so activation runs it
    then even where the torch hooks check loads."""
    from jitwarden.runtime import hiding, sweep

    for row in kinds.partitioned(kinds.DIR):
        if row.var in in_use:
            trees = sweep.tree_roots(row.name, in_use[row.var])
            if any(hiding.staged(t) for t in trees):
                return True
    return False


def sweep_env(env=None, quiet: bool = False) -> list[str]:
    """:func:`sweep_in_use` for the cache dirs ``env`` points at now (inside the workload, after activation).

    A dir that is a partition is swept under its digest; any other under none."""
    env = os.environ if env is None else env
    in_use = {k.var: env[k.var] for k in kinds.partitioned(kinds.DIR) if env.get(k.var)}
    if "TORCHINDUCTOR_CACHE_DIR" not in in_use:  # Inductor's default dir, as torch finds it
        in_use["TORCHINDUCTOR_CACHE_DIR"] = locations.default_base("inductor", env)
    named = {var: partition.digest_of(p) for var, p in in_use.items()}
    parts = {var: in_use[var] for var, d in named.items() if d}
    digests = {d for d in named.values() if d}
    digest = digests.pop() if len(digests) == 1 else None
    return sweep_in_use(in_use, parts if digest else {}, digest, env, quiet)
