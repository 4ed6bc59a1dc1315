"""Proofs of unsealed kernels in the background, while the workload starts (ARCHITECTURE.md, "First use").

A cold start of a real model's cache rebuilds hundreds of kernels' PTX (:mod:`jitwarden.runtime.firstuse`):
seconds on all cores. Done before the workload starts, all of it is added to the start-up. Done here,
it overlaps the workload's own start (imports, model build) and costs only what is left when the
workload first asks for one of those kernels.

- The start-up sweep checks each unsealed kernel entry's structure, then hides it from the workload
  by renaming it into ``<tree>/.jitwarden-proving/`` (same directory tree, atomic). A hidden entry is
  simply absent: nothing can load it unproven, whatever loads it (Triton, Inductor's static
  launcher, a Python that never imported jitwarden).
- A detached prover process rebuilds them on every core, at a lower priority (``nice`` 10) than the
  workload, so the workload's own start comes first. Each proven entry is sealed and
  renamed back (never over an entry someone wrote meanwhile); each refuted or unprovable one is
  quarantined, restorable to its own place. One line at the end says how many, in what time.
- The guard and the bundle hook, asked for a hidden key, wait for it (at most :data:`WAIT_S`)
  instead of recompiling it. The prover holds the staging dir's lock for its whole life, so a
  waiter that finds the lock free knows nobody will bring the entry back, and stops waiting.
- Entries a prover that died left hidden are taken up by the next start-up's prover.

``JITWARDEN_PROVE_WAIT=1`` proves before the workload starts instead (the sweep's own proofs).
Stdlib only; imports nothing of ours at module level beyond the layout names.
"""

from __future__ import annotations

import fcntl
import os
import stat
import sys
import time

from jitwarden.model.layout import ENTRY_LOCK_FILE, PROVING_DIR

WAIT_VAR = "JITWARDEN_PROVE_WAIT"
WAIT_S = 300.0
"""How long a lookup of a hidden kernel waits for its proof before it is treated as a miss (recompiled)."""


def background(env=None) -> bool:
    """Whether start-up proofs go to the background (the default), not before the workload starts."""
    from jitwarden.model.flags import parse_flag

    return parse_flag((os.environ if env is None else env).get(WAIT_VAR)) is not True


def staging(tree: str) -> str:
    return os.path.join(tree, PROVING_DIR)


def hidden(tree: str, key: str) -> bool:
    """Whether ``key`` of ``tree`` is hidden for a proof now: a real directory in a real staging directory.

    One failing ``lstat`` when nothing is being proven; false on any error.
    """
    try:
        stage = staging(tree)
        return stat.S_ISDIR(os.lstat(stage).st_mode) and stat.S_ISDIR(os.lstat(os.path.join(stage, key)).st_mode)
    except (OSError, ValueError):
        return False


def _lock_fd(tree: str, flags: int) -> int | None:
    """An fd of the staging lock when it is a regular file (never a FIFO or device to block on, never a link)."""
    try:
        fd = os.open(os.path.join(tree, PROVING_DIR, ENTRY_LOCK_FILE),
                     flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, 0o644)
    except OSError:
        return None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            return fd
    except OSError:
        pass
    os.close(fd)
    return None


def _try_lock(fd: int, how: int) -> bool:
    """Take ``how`` on ``fd`` without waiting; False when someone holds a conflicting lock."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def alive(tree: str) -> bool:
    """Whether a prover holds ``tree``'s staging lock (a shared lock cannot be taken)."""
    fd = _lock_fd(tree, os.O_RDONLY)
    if fd is None:
        return False
    try:
        return not _try_lock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def wait_for(tree: str, key: str, timeout: float = WAIT_S) -> bool:
    """Wait while ``key`` of ``tree`` is hidden and a prover is alive; True when it is no longer hidden.

    Polls (10 ms, growing to 50 ms): the prover renames the entry back, or quarantines it, as soon
    as its own proof ends, not when all proofs end.
    """
    deadline = time.monotonic() + timeout
    pause = 0.01
    alive_at = 0.0
    while hidden(tree, key):
        now = time.monotonic()
        if now >= deadline:
            return False
        if now >= alive_at:
            if not alive(tree):
                return not hidden(tree, key)
            alive_at = now + 0.25
        time.sleep(pause)
        pause = min(pause * 1.5, 0.05)
    return True


def claim(tree: str) -> int | None:
    """Take ``tree``'s staging lock for a prover; its fd, or None when another prover has it (or no dir can be made)."""
    from jitwarden.store.fsutil import open_dir, reserved_dir

    try:
        root_fd = open_dir(tree)
    except OSError:
        return None
    try:
        os.close(reserved_dir(root_fd, PROVING_DIR, create=True))  # a real directory of ours, never a link
    except Exception:  # noqa: BLE001 - no staging dir (read-only, full, or not ours): prove before the start
        return None
    finally:
        os.close(root_fd)
    fd = _lock_fd(tree, os.O_RDWR | os.O_CREAT)
    if fd is not None and not _try_lock(fd, fcntl.LOCK_EX):
        os.close(fd)
        return None
    return fd


def hide(tree: str, paths) -> list[str]:
    """Rename each entry of ``paths`` (directly in ``tree``) into the staging dir; the ones that could not be."""
    from jitwarden.store.quarantine import rename_noreplace

    fds = _tree_fds(tree)
    if fds is None:
        return list(paths)
    left = []
    try:
        for p in paths:
            name = os.path.basename(p)
            try:
                rename_noreplace(name, name, src_dir_fd=fds[0], dst_dir_fd=fds[1])
            except OSError:
                left.append(p)
    finally:
        for fd in fds:
            os.close(fd)
    return left


def _tree_fds(tree: str) -> tuple[int, int] | None:
    """(fd of the tree, fd of its staging dir): every rename between them is by fd, never through a link."""
    from jitwarden.store.fsutil import open_dir, reserved_dir

    try:
        tfd = open_dir(tree)
    except OSError:
        return None
    try:
        sfd = reserved_dir(tfd, PROVING_DIR)
    except Exception:  # noqa: BLE001 - not a directory of ours
        sfd = None
    if sfd is None:
        os.close(tfd)
        return None
    return tfd, sfd


def staged(tree: str) -> list[str]:
    """The entries hidden in ``tree``'s staging dir (this start-up's and any a dead prover left)."""
    try:
        with os.scandir(staging(tree)) as it:
            return [e.path for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


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
        p = subprocess.Popen([sys.executable, "-m", "jitwarden.runtime.prover", spec],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL if quiet else None,
                             pass_fds=[fd for _, _, fd in jobs], close_fds=True,
                             env=None if env is None else dict(env))
        try:
            started = p.wait(timeout=30) == 0  # the first process forks the prover and exits
        except subprocess.TimeoutExpired:
            p.kill()  # never two provers on one lock: the caller proves now
            p.wait()
            started = False
    except Exception:  # noqa: BLE001 - no interpreter to start: the caller proves now
        started = False
    if started:
        for _, _, fd in jobs:
            os.close(fd)
    return started


def run(jobs: list[tuple[str, str | None, int]], quiet: bool, env=None, say=None) -> dict:
    """Hand ``jobs`` to a prover in the background (:func:`launch`); where none can start, prove them here on
    every core. Closes the jobs' lock fds either way. Returns the counts of proofs made here (empty when launched).
    """
    if launch(jobs, quiet, env):
        return {}
    try:
        return prove_staged(jobs, say=say)
    finally:
        for _, _, fd in jobs:
            os.close(fd)


def prove_staged(jobs: list[tuple[str, str | None, int]], *, cores: int | None = None, say=None) -> dict:
    """Prove every entry hidden in the jobs' trees; seal and put back the proven, quarantine the rest.

    ``say(line)``: each quarantine. Returns the proof counts (:func:`jitwarden.runtime.firstuse.summary`
    words them).
    """
    from jitwarden.runtime import firstuse

    digests = {os.path.normpath(t): d for t, d, _ in jobs}
    paths = [p for t, _, _ in jobs for p in staged(t)]
    say = say or (lambda line: None)

    def settle(path: str, proof) -> None:
        tree = os.path.normpath(os.path.dirname(os.path.dirname(path)))
        line = _settle(tree, path, proof, digests.get(tree))
        if line:
            say(line)

    if not paths:
        return {}
    return firstuse.prove_ahead(paths, jobs=cores or os.cpu_count() or 1, on_proof=settle)


def _settle(tree: str, path: str, proof, digest: str | None) -> str | None:
    from jitwarden.runtime import firstuse

    key = os.path.basename(path)
    if os.path.islink(os.path.dirname(path)) or os.path.islink(path):
        return None  # a link appeared on the way: nothing is sealed or moved through it (left hidden)
    if proof.proven:
        names = sorted(n for n in os.listdir(path) if not n.startswith(".jitwarden"))
        try:
            sealed = firstuse.seal_proven(path, names, proof, digest, {"by": "sweep", "legacy": True})
        except OSError:  # no room (or read-only) for the seal: back unsealed, proven again at its next use
            sealed = True
        if sealed:
            return _put_back(tree, path, key, digest)
    code = proof.code or "unverifiable"
    return _quarantine(tree, path, key, code, [f"first use of an unsealed entry: {proof.reason}"], digest)


def _put_back(tree: str, path: str, key: str, digest: str | None) -> str | None:
    """Rename a proven entry to its place; never over an entry written there meanwhile (that one is kept)."""
    from jitwarden.store.quarantine import rename_noreplace

    fds = _tree_fds(tree)
    if fds is None:
        return None  # the staging dir is no longer ours: left hidden, never moved through a link
    try:
        for _ in range(3):
            try:
                rename_noreplace(key, key, src_dir_fd=fds[1], dst_dir_fd=fds[0])
                return None
            except FileExistsError:
                try:
                    os.rmdir(key, dir_fd=fds[0])  # the empty dir a Triton cache manager makes when it looks a key up
                except OSError:
                    break
    finally:
        for fd in fds:
            os.close(fd)
    return _quarantine(tree, path, key, "replaced", ["written again while it was being proven; the new entry is kept"],
                       digest, quiet=True)


def _quarantine(tree: str, path: str, key: str, code: str, details, digest: str | None, quiet: bool = False) -> str | None:
    from jitwarden.store import quarantine

    try:
        rec = quarantine.move(path, code, details, root=tree, entry_id=key, by="sweep", fingerprint=digest,
                              origin=os.path.join(tree, key))
    except FileNotFoundError:
        return None
    if quiet:
        return None
    from jitwarden.runtime.sweep import quarantined_line

    return quarantined_line(rec, code, details)


def main(argv: list[str]) -> int:
    """``python -m jitwarden.runtime.prover SPEC``: fork the prover and return at once (see :func:`launch`)."""
    import json

    try:
        spec = json.loads(argv[0])
        jobs = [(str(t), d, int(fd)) for t, d, fd in spec["jobs"]]
        quiet = bool(spec.get("quiet"))
    except (IndexError, ValueError, TypeError, KeyError):
        print("jitwarden prover: bad spec", file=sys.stderr)
        return 2
    if os.fork():
        return 0  # the launcher waits for this; the prover goes on, not its child
    os.setsid()  # no terminal's job control: a Ctrl-C meant for the workload leaves the proofs to finish
    try:
        os.nice(10)  # every core, but the workload's own start comes first (ptxas children inherit this)
    except OSError:
        pass
    code = 0
    try:
        from jitwarden.runtime.firstuse import summary

        made = prove_staged(jobs, say=None if quiet else _stderr)
        line = summary(made, background=True)
        if line and not quiet:
            _stderr(line)
    except BaseException as exc:  # noqa: BLE001 - what is left hidden is taken up by the next start-up
        if not quiet:
            _stderr(f"proofs in the background stopped ({type(exc).__name__}: {exc}); the entries not yet "
                    "proven are recompiled when used, and proven at the next start")
        code = 1
    finally:
        sys.stderr.flush()
    os._exit(code)


def _stderr(line: str) -> None:
    sys.stderr.write(f"jitwarden: {line}\n")
    sys.stderr.flush()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
