"""The start-up sweep: TorchInductor's Triton kernels checked against their seals before Inductor loads them.

TorchInductor restores kernels on an FX-graph-cache hit and launches them through its
static CUDA launcher, which reads ``<triton cache dir>/<key>/<name>.cubin`` itself
(``TRITON_CACHE_DIR`` when set, as under activation, else ``<inductor cache>/triton/<device>``;
``torch/_inductor/runtime/triton_heuristics.py: reload_cubin_path``) and never asks Triton's
cache manager, so the guard never sees those loads. Activation therefore sweeps this
environment's Triton, Inductor and vLLM partitions first (when torch is installed): per entry one ``scandir``,
an ``lstat`` per file and one small read of the seal when nothing changed since it was sealed, a full
seal check otherwise, and a structural check plus a seal for entries nobody sealed.

"Nothing changed" means every file's ctime is older than the file-system time recorded *inside*
the seal when it was written (``fs_time_ns``): a file's ctime moves forward on any change to it
(content, mode, owner, rename, link) and cannot be set back, and the recorded time does not
move when the seal's own metadata does (``chmod`` or ``touch`` of the seal cannot hide a changed
file). It assumes the clock stamping ctimes is not stepped back between sealing and a change.
A damaged entry is quarantined, and Inductor's own bundle (or a recompile) replaces it.

Stdlib only, never raises into the caller: it runs on the activation path.
"""

from __future__ import annotations

import fcntl
import os

from jitwarden.env import locations
from jitwarden.store.entrylock import lock, unlock
from jitwarden.model.layout import ENTRY_LOCK_FILE, ENTRY_WRITERS_FILE, SEAL_FILE, is_reserved

# Checking, sealing and quarantining import more (hashlib, dataclasses): only on the slow path,
# so a warm start with nothing changed stays at the standard library's cheapest modules.

_BINARIES = (".cubin", ".hsaco")


def tree_roots(kind: str, partition_path: str) -> list[str]:
    """The Triton trees inside one partition of an Inductor or vLLM cache dir."""
    if kind == "inductor":
        return locations.inductor_triton_trees(partition_path)
    if kind == "vllm":
        return locations.vllm_triton_trees(partition_path)
    return []


def sweep(trees: list[str], digest: str | None = None, proofs: dict | None = None,
          background: list | None = None) -> tuple[list[str], dict]:
    """Check every entry of ``trees``; returns (warning lines, counts).

    ``proofs``: where several sweeps make one start-up, their proof counts are added there
    (the caller prints one line for all); without it this sweep adds its own line.
    ``background``: when given, a tree's unsealed kernels that pass the structural checks are
    hidden for a prover in the background (:mod:`jitwarden.runtime.prover`) instead of proven
    here; (tree, digest, staging lock fd) is appended for each tree that has some, and the
    caller launches the prover.
    """
    counts = {"entries": 0, "rehashed": 0, "sealed": 0, "quarantined": 0, "hidden": 0}
    warnings: list[str] = []
    done: set[str] = set()
    proven_here = trees
    if background is not None:
        proven_here = [t for t in trees if not _hide_unsealed(t, digest, counts, warnings, background)]

    def check(path: str, proof=None) -> None:
        counts["entries"] += 1
        done.add(path)
        try:
            w = _entry(path, digest, counts, proof)
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the sweep
            w = f"could not check Inductor kernel {os.path.basename(path)[:12]}… ({type(exc).__name__}: {exc})"
        if w:
            warnings.append(w)

    # Unsealed kernels are rebuilt in parallel on all cores (jitwarden.runtime.firstuse); each is
    # judged and sealed here as its proof ends, while the remaining ptxas runs go on.
    made = _prove_ahead(proven_here, check)
    for tree in trees:
        for name in entry_names(tree):
            path = os.path.join(tree, name)
            if path not in done:
                check(path)
    if made is not None:
        from jitwarden.runtime.firstuse import add_counts, summary

        counts["proofs"] = made
        if proofs is not None:
            add_counts(proofs, made)
        elif summary(made):
            warnings.append(summary(made))
    return warnings, counts


def entry_names(tree: str) -> list[str]:
    """Names of the entry dirs of a Triton cache tree: no links, nothing of ours, no ``tmp.*`` write in flight."""
    try:
        it = os.scandir(tree)
    except OSError:
        return []
    with it:
        return [e.name for e in it if not is_reserved(e.name) and not e.name.startswith("tmp.")
                and e.is_dir(follow_symlinks=False)]


def _unchanged(path: str, files: list) -> bool:
    """Whether no file of the entry changed since its seal was written (by the time inside the seal)."""
    from jitwarden.store.seal import sealed_at_ns

    at = sealed_at_ns(path)
    if at is None:
        return False
    for e in files:
        if not e.is_file(follow_symlinks=False) or e.stat(follow_symlinks=False).st_ctime_ns >= at:
            return False
    return True


def _prove_ahead(trees: list[str], check) -> dict | None:
    from jitwarden.runtime import firstuse

    if not firstuse.enabled():
        return None
    paths = firstuse.unsealed_kernels(trees)
    return firstuse.prove_ahead(paths, on_proof=check) if paths else None


def _hide_unsealed(tree: str, digest: str | None, counts: dict, warnings: list[str], jobs: list) -> bool:
    """Hide ``tree``'s unsealed kernels that pass the structural checks for the background prover.

    True when nothing is left to prove here (none to prove, or hidden); False when this tree's
    proofs are made here instead: proofs are off, or another prover holds the tree (its entries
    are hidden already; new ones are proven here).
    """
    from jitwarden.runtime import firstuse, prover

    if not firstuse.enabled():
        return False
    unsealed = firstuse.unsealed_kernels([tree])
    if not unsealed and not prover.staged(tree):
        return True  # nothing to prove (a warm start): no staging dir, no lock, no imports
    fd = prover.claim(tree)
    if fd is None:
        return False
    from jitwarden.adapters import triton as tri

    good = []
    for path in unsealed:
        try:
            efd = lock(path, ENTRY_LOCK_FILE, fcntl.LOCK_EX, block=False)
        except OSError:
            continue
        if efd is None:
            continue  # someone is sealing it right now
        w = None
        try:
            errors, _kind = tri.structural_errors(path)
            if errors:  # structurally wrong: quarantined here, never hidden
                w = _quarantine(path, errors[0].code, [f.message for f in errors], digest, counts)
            else:
                good.append(path)
        except Exception as exc:  # noqa: BLE001 - one odd entry never stops the sweep
            w = f"could not check Inductor kernel {os.path.basename(path)[:12]}… ({type(exc).__name__}: {exc})"
        finally:
            unlock(efd)
        if w:
            warnings.append(w)
    left = set(prover.hide(tree, good))  # the ones that could not be moved are proven here, one by one
    counts["hidden"] += len(good) - len(left)
    if prover.staged(tree):
        jobs.append((tree, digest, fd))
    else:
        os.close(fd)
    return True


def _entry(path: str, digest: str | None, counts: dict, proof=None) -> str | None:
    sealed = False
    files = []
    with os.scandir(path) as it:
        for e in it:
            if e.name == SEAL_FILE:
                sealed = True
            elif not is_reserved(e.name) and not e.is_dir(follow_symlinks=False):
                files.append(e)  # a writer's tmp.pid_* dir is not sealed content
    if sealed and any(e.name.endswith(_BINARIES) for e in files) and _unchanged(path, files):
        return None  # unchanged since it was sealed
    if sealed and not any(e.name.endswith(_BINARIES) for e in files):
        return None  # no kernel binary for Inductor's launcher to load: the guard judges the rest on use
    try:
        fd = lock(path, ENTRY_LOCK_FILE, fcntl.LOCK_EX, block=False)
    except OSError:
        return None  # read-only or vanished: the scanner reports it, activation goes on
    if fd is None:
        return None  # someone is sealing or verifying it right now
    try:
        if sealed:
            counts["rehashed"] += 1
            return _recheck(path, digest, counts)
        return _seal_unsealed(path, digest, counts, proof)
    finally:
        unlock(fd)


def _present(path: str) -> list[str]:
    with os.scandir(path) as it:
        return [e.name for e in it if e.is_file(follow_symlinks=False) and not is_reserved(e.name)]


def _recheck(path: str, digest: str | None, counts: dict) -> str | None:
    from jitwarden.store import seal

    try:
        s = seal.read(path)
    except seal.SealError as exc:
        return _quarantine(path, "corrupt", [str(exc)], digest, counts)
    present = _present(path)
    problems = seal.check(path, s, present=present)
    # Inductor's bundle rewrites a group file's absolute paths when it restores an entry
    # elsewhere: that alone is no damage when every child still names this very entry.
    problems = [p for p in problems if not _relocated_group(path, p)]
    if problems:
        return _quarantine(path, "corrupt", problems, digest, counts)
    _reseal(path, s, present)  # refresh the seal's ctime: the next start is two lstats again
    return None


def _relocated_group(path: str, problem: str) -> bool:
    name = problem.split(" ", 1)[0]
    if not (name.startswith("__grp__") and ("does not match its sealed sha256" in problem or ", sealed as " in problem)):
        return False
    import json

    from jitwarden.store.fsutil import read_bytes

    try:
        children = json.loads(read_bytes(os.path.join(path, name), max_bytes=1 << 20))["child_paths"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return False
    return isinstance(children, dict) and all(p == os.path.join(path, c) for c, p in children.items())


def _reseal(path: str, s, present: list[str]) -> None:
    from jitwarden.store import seal

    fresh = seal.compute(path, present, s.fingerprint, s.producer)
    try:
        seal.write(path, fresh, seal.newest_ctime(path, present))
    except OSError:
        pass


def _seal_unsealed(path: str, digest: str | None, counts: dict, proof=None) -> str | None:
    from jitwarden.adapters import triton as tri

    errors, kind = tri.structural_errors(path)
    if errors:
        return _quarantine(path, errors[0].code, [f.message for f in errors], digest, counts)
    if kind != "kernel":
        return None
    from jitwarden.runtime.firstuse import admit

    try:
        why = admit(path, _present(path), digest, {"by": "sweep"}, proof=proof)  # proven first, or refused
        if why is not None:
            return _quarantine(path, why[0], why[1], digest, counts)
        counts["sealed"] += 1
    except OSError:
        pass
    return None


def _quarantine(path: str, code: str, details, digest: str | None, counts: dict) -> str | None:
    from jitwarden.store import quarantine

    wfd = lock(path, ENTRY_WRITERS_FILE, fcntl.LOCK_EX, block=False)
    if wfd is None:
        return None  # a writer is mid-entry: its own seal will settle it
    try:
        rec = quarantine.move(path, code, details, by="sweep", fingerprint=digest)
    except FileNotFoundError:
        return None
    finally:
        unlock(wfd)
    counts["quarantined"] += 1
    return quarantined_line(rec, code, details)


def quarantined_line(rec, code: str, details) -> str:
    """The start-up's warning for an entry it quarantined (the sweep's, and the background prover's)."""
    return (f"quarantined Triton cache entry {rec.entry_id[:12]}… at start-up ({code}: {'; '.join(details) or '-'}); "
            f"it is rebuilt (or restored from Inductor's own bundle) when next used. "
            f"Restore with `jitwarden quarantine restore {rec.id}`")
