"""TorchInductor's Triton kernels checked against their seals before Inductor loads them: one entry, or a tree.

TorchInductor restores kernels on an FX-graph-cache hit and launches them through its
static CUDA launcher, which reads ``<triton cache dir>/<key>/<name>.cubin`` itself
(``TRITON_CACHE_DIR`` when set, as under activation, else ``<inductor cache>/triton/<device>``;
``torch/_inductor/runtime/triton_heuristics.py: reload_cubin_path``) and never asks Triton's
cache manager, so the guard never sees those loads. :func:`check_loaded` checks the one entry
the launcher is about to load (the torch hooks call it, O(kernels used)); :func:`sweep` checks
every entry of a tree, where loads cannot be checked as they happen
(:mod:`~jitwarden.runtime.fullsweep`). Per entry: one ``scandir``, an ``lstat`` per file and one
small read of the seal when nothing changed since it was sealed
(:func:`jitwarden.store.seal.unchanged`, the one rule), a full seal check otherwise, and a
structural check plus a proof and a seal for entries nobody sealed (:mod:`~jitwarden.runtime.proof`),
or, in a tree sweep by default, their hiding for the background prover (:mod:`~jitwarden.runtime.hiding`).
A damaged entry is set aside (:mod:`~jitwarden.runtime.setaside`), and Inductor's own bundle (or a
recompile) replaces it. ARCHITECTURE.md, "The runtime", shows where it sits.

Stdlib only, never raises into the caller: it runs on the activation path.
"""

from __future__ import annotations

import fcntl
import os
import stat

from jitwarden.model.layout import ENTRY_LOCK_FILE, SEAL_FILE, is_reserved
from jitwarden.runtime import tree as _tree
from jitwarden.store.entrylock import lock, unlock

# Checking, sealing and quarantining import more (hashlib, dataclasses): only on the slow path,
# so a warm start with nothing changed stays at the standard library's cheapest modules.

tree_roots = _tree.tree_roots


def sweep(
    trees: list[str],
    digest: str | None = None,
    background: list | None = None,
    *,
    proof_line: bool = True,
) -> tuple[list[str], dict]:
    """Check every entry of ``trees``; returns (warning lines, counts).

    ``counts["proofs"]``: the :class:`~jitwarden.runtime.proof.ProofCounts` of the proofs made here,
    when any were; ``proof_line``: add their line to the warnings (False where several sweeps make
    one start-up and the caller words them all in one line).
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
        proven_here = [
            t for t in trees if not _hide_unsealed(t, digest, counts, warnings, background)
        ]

    def check(path: str, proof=None) -> None:
        counts["entries"] += 1
        done.add(path)
        try:
            w = _entry(path, digest, counts, proof)
        except FileNotFoundError:
            w = None  # gone since it was listed: another process (a rank's sweep) hid it or set it aside
        except Exception as exc:
            w = f"could not check Inductor kernel {os.path.basename(path)[:12]}… ({type(exc).__name__}: {exc})"
        if w:
            warnings.append(w)

    # Unsealed kernels are rebuilt in parallel on all cores (jitwarden.runtime.proof); each is
    # judged and sealed here as its proof ends, while the remaining ptxas runs go on.
    made = _prove_ahead(proven_here, check)
    for tree in trees:
        for name in _tree.entry_names(tree):
            path = os.path.join(tree, name)
            if path not in done:
                check(path)
    if made is not None:
        counts["proofs"] = made
        if proof_line and made.summary():
            warnings.append(made.summary())
    return warnings, counts


def _unchanged(path: str, files: list, digest: str | None = None) -> bool:
    """Whether no file of the entry changed since its seal was written under ``digest`` (or none)
    (:func:`jitwarden.store.seal.unchanged`)."""
    from jitwarden.store.seal import unchanged

    ctimes = []
    for e in files:
        if not e.is_file(follow_symlinks=False):
            return False
        ctimes.append(e.stat(follow_symlinks=False).st_ctime_ns)
    return unchanged(path, ctimes, digest)


def _prove_ahead(trees: list[str], check):
    from jitwarden.runtime import proof

    if not proof.enabled():
        return None
    paths = _tree.unsealed_kernels(trees)
    return proof.prove_ahead(paths, on_proof=check) if paths else None


def _hide_unsealed(
    tree: str, digest: str | None, counts: dict, warnings: list[str], jobs: list
) -> bool:
    """Hide ``tree``'s unsealed kernels that pass the structural checks for the background prover.

    True when nothing is left to prove here (none to prove, or hidden); False when this tree's
    proofs are made here instead: proofs are off, or another prover holds the tree (its entries
    are hidden already; new ones are proven here).
    """
    from jitwarden.runtime import hiding, proof

    if not proof.enabled():
        return False
    unsealed = _tree.unsealed_kernels([tree])
    if not unsealed and not hiding.staged(tree):
        return True  # nothing to prove (a warm start): no staging dir, no lock, no imports
    fd = hiding.claim(tree)
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
                w = _set_aside(path, errors[0].code, [f.message for f in errors], digest, counts)
            else:
                good.append(path)
        except Exception as exc:
            w = f"could not check Inductor kernel {os.path.basename(path)[:12]}… ({type(exc).__name__}: {exc})"
        finally:
            unlock(efd)
        if w:
            warnings.append(w)
    left = set(
        hiding.hide(tree, good)
    )  # the ones that could not be moved are proven here, one by one
    counts["hidden"] += len(good) - len(left)
    if hiding.staged(tree):
        jobs.append((tree, digest, fd))
    else:
        os.close(fd)
    return True


def _entry(
    path: str, digest: str | None, counts: dict, proof=None, then: str | None = None
) -> str | None:
    """Check one entry as the sweep does; the warning line when it was set aside or could not be checked.

    ``then``: what follows a quarantine, in its line (the start-up's words by default)."""
    sealed = False
    files = []
    with os.scandir(path) as it:
        for e in it:
            if e.name == SEAL_FILE:
                sealed = True
            elif not is_reserved(e.name) and not e.is_dir(follow_symlinks=False):
                files.append(e)  # a writer's tmp.pid_* dir is not sealed content
    binaries = any(e.name.endswith(_tree.BINARIES) for e in files)
    if sealed and binaries and _unchanged(path, files, digest):
        return None  # unchanged since it was sealed, under this partition's fingerprint
    if sealed and not binaries:
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
            return _recheck(path, digest, counts, then)
        return _seal_unsealed(path, digest, counts, proof, then)
    finally:
        unlock(fd)


def _recheck(path: str, digest: str | None, counts: dict, then: str | None = None) -> str | None:
    from jitwarden.store import seal

    try:
        s = seal.read(path)
    except seal.SealError as exc:
        return _set_aside(path, "corrupt", [str(exc)], digest, counts, then)
    if s is None:
        # No seal believed: one this reader does not believe (an older jitwarden's, another user's), or
        # one gone since the entry was listed. Either way an unsealed entry: judged and proven as one.
        counts["rehashed"] -= 1
        return _seal_unsealed(path, digest, counts, None, then)
    if why := seal.foreign(s.fingerprint, digest):
        return _set_aside(
            path, "mismatch", [why], digest, counts, then
        )  # moved in from another environment
    present = _tree.files(path)
    found = seal.judge(path, s, present=present)
    # Inductor's bundle rewrites a group file's absolute paths when it restores an entry
    # elsewhere: that alone is no damage when every child still names this very entry.
    problems = [p for p in found.problems if not _relocated_group(path, p)]
    if problems:
        return _set_aside(path, "corrupt", [p.text for p in problems], digest, counts, then)
    _reseal(path, s, present)  # refresh the recorded time: the next start is a few lstats again
    return None


def _relocated_group(path: str, problem) -> bool:
    """Whether ``problem`` (a :class:`jitwarden.store.seal.Problem`) is only a group file whose child paths were
    rewritten to name this very entry (decided from its reason code and file name, never its sentence)."""
    from jitwarden.store import seal
    from jitwarden.store.reads import read_json

    if problem.reason not in (seal.SIZE, seal.DIGEST) or len(problem.names) != 1:
        return False
    name = problem.names[0]
    if not name.startswith("__grp__"):
        return False
    try:
        children = read_json(os.path.join(path, name), max_bytes=1 << 20)["child_paths"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return isinstance(children, dict) and all(
        p == os.path.join(path, c) for c, p in children.items()
    )


def _reseal(path: str, s, present: list[str]) -> None:
    from jitwarden.store import seal

    fresh = seal.compute(path, present, s.fingerprint, s.producer)
    try:
        seal.write(path, fresh, seal.newest_ctime(path, present))
    except OSError:
        pass


def _seal_unsealed(
    path: str, digest: str | None, counts: dict, proof=None, then: str | None = None
) -> str | None:
    from jitwarden.adapters import triton as tri
    from jitwarden.runtime.proof import admit

    errors, kind = tri.structural_errors(path)
    if errors:
        return _set_aside(path, errors[0].code, [f.message for f in errors], digest, counts, then)
    if kind != "kernel":
        return None
    try:
        why = admit(
            path, _tree.files(path), digest, {"by": "sweep"}, proof=proof
        )  # proven first, or refused
        if why is not None:
            return _set_aside(path, why[0], why[1], digest, counts, then)
        counts["sealed"] += 1
    except OSError:
        pass
    return None


def _set_aside(
    path: str, code: str, details, digest: str | None, counts: dict, then: str | None = None
) -> str | None:
    from jitwarden.runtime import setaside

    rec = setaside.set_aside(path, code, details, by="sweep", fingerprint=digest)
    if rec is None:
        return None  # a writer is mid-entry (its own seal settles it), or someone moved it first
    counts["quarantined"] += 1
    return setaside.line(rec, "Triton cache entry", code, details, then or setaside.AT_STARTUP)


# ---------------------------------------------------------------- one entry, as a loader loads it

AT_LOAD = "found as TorchInductor was about to load it; Inductor recompiles it"


def sealed_unchanged(path: str, digest: str | None = None) -> bool:
    """Whether ``path`` is a sealed entry none of whose files changed since it was sealed under ``digest``
    (the partition's fingerprint; None: an unpartitioned root): what may be loaded.

    The one rule (:func:`jitwarden.store.seal.unchanged`): an ``lstat`` per file and one small read of
    the seal. A link, FIFO or anything but a regular file or a writer's ``tmp.*`` dir says no."""
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError:
        return False
    if not any(e.name == SEAL_FILE for e in entries):
        return False
    files = [e for e in entries if not is_reserved(e.name) and not e.is_dir(follow_symlinks=False)]
    try:
        return _unchanged(path, files, digest)
    except OSError:
        return False


def check_loaded(path: str, digest: str | None) -> tuple[bool, str | None]:
    """(may it be loaded now, the line to say) for the entry a loader is about to read: O(1) in the tree.

    What :func:`sweep` does for one entry, at the moment Inductor's static launcher loads it
    (runtime/guards/inductor.py) instead of for every entry at every start: unchanged since sealed is a
    yes; changed, it is checked against its seal (and set aside when damaged); unsealed, it is
    proven and sealed (or set aside). The answer is read afterwards from the entry itself, so one
    that a writer holds, that cannot be locked or that was set aside is a no: the caller recompiles.
    """
    try:
        if not stat.S_ISDIR(
            os.lstat(path).st_mode
        ):  # a link (or anything but a dir) in an entry's place
            return (
                False,
                f"refused Inductor kernel {os.path.basename(path)[:12]}…: not a directory of its own",
            )
    except OSError:
        return False, None  # gone: compiled from source instead
    if sealed_unchanged(path, digest):
        return True, None
    counts = {"entries": 1, "rehashed": 0, "sealed": 0, "quarantined": 0, "hidden": 0}
    try:
        w = _entry(path, digest, counts, then=AT_LOAD)
    except Exception as exc:
        w = f"could not check Inductor kernel {os.path.basename(path)[:12]}… ({type(exc).__name__}: {exc})"
    return sealed_unchanged(path, digest), w
