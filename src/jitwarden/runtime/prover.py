"""The background prover: launch it, run it, its ``main`` (ARCHITECTURE.md, "The runtime").

A cold start of a real model's cache rebuilds hundreds of kernels' PTX (:mod:`jitwarden.runtime.proof`):
seconds on all cores. Done before the workload starts, all of it is added to the start-up. Done here,
it overlaps the workload's own start (imports, model build) and costs only what is left when the
workload first asks for one of those kernels.

- The whole-tree sweep (:mod:`jitwarden.runtime.fullsweep`) hides each unsealed kernel that passed the structural checks
  (:mod:`jitwarden.runtime.hiding`): renamed into the tree's staging dir, simply absent for any loader.
- A detached prover process rebuilds them on every core, at a lower priority (``nice`` 10) than the
  workload, beating on the staging lock while it works. Each proven entry is sealed and put back
  (never over an entry someone wrote meanwhile); each refuted or unprovable one is quarantined
  (:mod:`jitwarden.runtime.setaside`), restorable to its own place. One line at the end says how many.
- A lookup of a hidden key waits for it within one budget per process (:func:`hiding.wait_for`).
- Entries a prover that died left hidden are taken up by the next start-up's prover.

``JITWARDEN_PROVE_WAIT=1`` proves before the workload starts instead (the sweep's own proofs).
Stdlib only; imports only the runtime's leaves and :mod:`~jitwarden.runtime.proof`.
"""

from __future__ import annotations

import os
import sys
import threading

from jitwarden.runtime import hiding, proof, setaside
from jitwarden.runtime.proof import ProofCounts


def launch(jobs: list[tuple[str, str | None, int]], quiet: bool, env=None) -> bool:
    """Start a detached prover for ``jobs`` (tree, seal digest, staging lock fd); False when it cannot start.

    The locks pass to the prover, which keeps them to its end; this process closes its copies.
    Under ``jitwarden run`` this process then becomes the workload: the prover is not its child.
    ``env``: the activated environment (its ptxas settings decide the proofs).
    """
    import json
    import subprocess

    spec = json.dumps({"jobs": [[t, d, fd] for t, d, fd in jobs], "quiet": quiet})
    if not os.path.basename(sys.executable or "").startswith("python"):
        return False  # an embedded interpreter (uwsgi, a frozen app): no Python to start
    try:
        p = subprocess.Popen(
            [sys.executable, "-m", "jitwarden.runtime.prover", spec],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL if quiet else None,
            pass_fds=[fd for _, _, fd in jobs],
            close_fds=True,
            env=None if env is None else dict(env),
        )
        try:
            started = p.wait(timeout=30) == 0  # the first process forks the prover and exits
        except subprocess.TimeoutExpired:
            p.kill()  # never two provers on one lock: the caller proves now
            p.wait()
            started = False
    except Exception:
        started = False
    if started:
        for _, _, fd in jobs:
            os.close(fd)
    return started


def run(
    jobs: list[tuple[str, str | None, int]], quiet: bool, env=None, say=None
) -> ProofCounts | None:
    """Hand ``jobs`` to a prover in the background (:func:`launch`); where none can start, prove them here on
    every core. Closes the jobs' lock fds either way. The counts of proofs made here; None when launched.
    """
    if launch(jobs, quiet, env):
        return None
    try:
        return prove_staged(jobs, say=say)
    finally:
        for _, _, fd in jobs:
            os.close(fd)


def prove_staged(
    jobs: list[tuple[str, str | None, int]], *, cores: int | None = None, say=None
) -> ProofCounts:
    """Prove every entry hidden in the jobs' trees; seal and put back the proven, quarantine the rest.

    Beats on each job's lock (:func:`hiding.beat`) every :data:`hiding.BEAT_S` while the proofs run,
    so a waiting lookup can tell a working prover from a stopped one. ``say(line)``: each quarantine.
    """
    digests = {os.path.normpath(t): d for t, d, _ in jobs}
    paths = [p for t, _, _ in jobs for p in hiding.staged(t)]
    say = say or (lambda line: None)

    def settle(path: str, pr) -> None:
        tree = os.path.normpath(os.path.dirname(os.path.dirname(path)))
        for fd in (fd for t, _, fd in jobs if os.path.normpath(t) == tree):
            hiding.beat(fd)
        line = _settle(tree, path, pr, digests.get(tree))
        if line:
            say(line)

    if not paths:
        return ProofCounts()
    stop = threading.Event()

    def beating() -> None:
        while True:  # the first beat at once: a waiter's stall bound counts from its first look
            for _, _, fd in jobs:
                hiding.beat(fd)
            if stop.wait(hiding.BEAT_S):
                return

    beater = threading.Thread(target=beating, name="jw-prover-beat", daemon=True)
    beater.start()
    try:
        return proof.prove_ahead(paths, jobs=cores or os.cpu_count() or 1, on_proof=settle)
    finally:
        stop.set()
        beater.join()


def _settle(tree: str, path: str, pr, digest: str | None) -> str | None:
    """Seal and put back a proven entry, or quarantine it; the line to say, if any."""
    key = os.path.basename(path)
    if os.path.islink(os.path.dirname(path)) or os.path.islink(path):
        return (
            None  # a link appeared on the way: nothing is sealed or moved through it (left hidden)
        )
    if pr.proven:
        names = sorted(n for n in os.listdir(path) if not n.startswith(".jitwarden"))
        try:
            sealed = proof.seal_proven(path, names, pr, digest, {"by": "sweep", "legacy": True})
        except (
            OSError
        ):  # no room (or read-only) for the seal: back unsealed, proven again at its next use
            sealed = True
        if sealed:
            back = hiding.put_back(tree, key)
            if back is not False:
                return None  # back in place, or left hidden where the staging dir is no longer ours
            _set_aside(
                tree,
                path,
                key,
                "replaced",
                ["written again while it was being proven; the new entry is kept"],
                digest,
            )
            return None
    code = pr.code or "unverifiable"
    details = [f"first use of an unsealed entry: {pr.reason}"]
    rec = _set_aside(tree, path, key, code, details, digest)
    return (
        None
        if rec is None
        else setaside.line(rec, "Triton cache entry", code, details, setaside.AT_STARTUP)
    )


def _set_aside(tree: str, path: str, key: str, code: str, details, digest: str | None):
    return setaside.set_aside(
        path,
        code,
        details,
        root=tree,
        entry_id=key,
        by="sweep",
        fingerprint=digest,
        origin=os.path.join(tree, key),
    )


def main(argv: list[str]) -> int:
    """``python -m jitwarden.runtime.prover SPEC``: fork the prover and return at once (see :func:`launch`)."""
    from jitwarden.formats.jsonlimits import loads

    try:
        spec = loads(argv[0])
        jobs = [(str(t), d, int(fd)) for t, d, fd in spec["jobs"]]
        quiet = bool(spec.get("quiet"))
    except (IndexError, ValueError, TypeError, KeyError, AttributeError):
        print("jitwarden prover: bad spec", file=sys.stderr)
        return 2
    if os.fork():
        return 0  # the launcher waits for this; the prover goes on, not its child
    os.setsid()  # no terminal's job control: a Ctrl-C meant for the workload leaves the proofs to finish
    try:
        os.nice(
            10
        )  # every core, but the workload's own start comes first (ptxas children inherit this)
    except OSError:
        pass
    code = 0
    try:
        made = prove_staged(jobs, say=None if quiet else _stderr)
        line = made.summary(background=True)
        if line and not quiet:
            _stderr(line)
    except BaseException as exc:
        if not quiet:
            _stderr(
                f"proofs in the background stopped ({type(exc).__name__}: {exc}); the entries not yet "
                "proven are recompiled when used, and proven at the next start"
            )
        code = 1
    finally:
        sys.stderr.flush()
    os._exit(code)


def _stderr(line: str) -> None:
    sys.stderr.write(f"jitwarden: {line}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
