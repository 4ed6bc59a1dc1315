"""Hiding unsealed kernels while they are proven: the staging dir, its lock, the waits (ARCHITECTURE.md, "The runtime").

The start-up hides each unsealed kernel entry that passed the structural checks by renaming it
into ``<tree>/.jitwarden-proving/`` (same tree, atomic, by directory fds): a hidden entry is simply
absent, so nothing loads it unproven, whatever loads it. A prover (:mod:`jitwarden.runtime.prover`)
holds the staging dir's lock for its whole life, beats on it (:func:`beat`) while it works, and
puts each proven entry back (:func:`put_back`).

A lookup of a hidden key (the guard, the bundle hook) waits for it (:func:`wait_for`), but:

- never longer than :data:`WAIT_S` in all, for the whole process (:data:`BUDGET`), however many keys;
- not at all when the real entry is already in the tree and sealed, when the staging dir, the
  hidden dir or the lock file is not this user's, or when nobody holds the lock;
- not past :data:`STALL_S` without a beat from the prover (a stopped or hung prover); a tree
  whose prover stalled is not waited for again in this process.

A wait that ends without the entry is a miss: the kernel is recompiled (and sealed by the guard).
A leaf of the runtime: stdlib and the disk layer only.
"""

from __future__ import annotations

import _thread  # not threading: its import is half a millisecond of every warm activation
import fcntl
import os
import stat
import time
from collections import namedtuple

from jitwarden.model.layout import ENTRY_LOCK_FILE, PROVING_DIR, SEAL_FILE
from jitwarden.model.settings import PROVE_WAIT

WAIT_S = 300.0
"""How long one process waits for hidden kernels in all, before every lookup of one is a miss (recompiled)."""
STALL_S = 10.0
"""How long a waiter goes on without a beat from the prover (it beats every :data:`BEAT_S`) before it stops."""
BEAT_S = 1.0

Wait = namedtuple("Wait", "outcome seconds polls")
Wait.__doc__ = """How one :func:`wait_for` ended (immutable).

``outcome``: ``back`` (no longer hidden), ``in-tree`` (the real entry is in the tree and sealed),
``no-prover`` (nobody holds the lock, or it is not ours), ``not-ours`` (a staging or hidden dir
another user made), ``stalled`` (no beat for :data:`STALL_S`, now or earlier in this process),
``budget`` (this process's :data:`WAIT_S` is spent); ``seconds`` waited; ``polls``: sleeps taken.
"""

_state_lock = _thread.allocate_lock()
BUDGET = {"left": WAIT_S}
"""This process's wait budget, seconds left (all keys, all trees, all threads)."""
_stalled: set[str] = set()


def background(env=None) -> bool:
    """Whether start-up proofs go to the background (the default), not before the workload starts."""
    return not PROVE_WAIT.on(os.environ if env is None else env)


def staging(tree: str) -> str:
    return os.path.join(tree, PROVING_DIR)


def _ours(st: os.stat_result) -> bool:
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o002


def hidden(tree: str, key: str) -> bool:
    """Whether ``key`` of ``tree`` is hidden for a proof now: a directory of this user in a staging dir of this user.

    One failing ``lstat`` when nothing is being proven; false on any error.
    """
    try:
        stage = staging(tree)
        return _ours(os.lstat(stage)) and _ours(os.lstat(os.path.join(stage, key)))
    except (OSError, ValueError):
        return False


def _lock_fd(tree: str, create: bool = False) -> int | None:
    """An fd of the staging lock: a regular file of this user in a staging dir of this user, never a link or FIFO."""
    from jitwarden.store.entrylock import open_lock_file
    from jitwarden.store.paths import open_dir, reserved_dir

    try:
        tfd = open_dir(tree)
    except OSError:
        return None
    try:
        sfd = reserved_dir(tfd, PROVING_DIR, create=create)
    except Exception:
        return None
    finally:
        os.close(tfd)
    if sfd is None:
        return None
    try:
        return open_lock_file(sfd, ENTRY_LOCK_FILE, create=create)
    finally:
        os.close(sfd)


def _try_lock(fd: int, how: int) -> bool:
    """Take ``how`` on ``fd`` without waiting; False when someone holds a conflicting lock."""
    try:
        fcntl.flock(fd, how | fcntl.LOCK_NB)
        return True
    except OSError:
        return False


def alive(tree: str) -> bool:
    """Whether a prover holds ``tree``'s staging lock (a lock file of this user on which a shared lock cannot be taken)."""
    fd = _lock_fd(tree)
    if fd is None:
        return False
    try:
        return not _try_lock(fd, fcntl.LOCK_SH)
    finally:
        os.close(fd)


def _in_tree(tree: str, key: str) -> bool:
    """Whether the real entry ``key`` is in the tree and sealed: then it is judged there, never waited for."""
    try:
        return stat.S_ISDIR(os.lstat(os.path.join(tree, key)).st_mode) and stat.S_ISREG(
            os.lstat(os.path.join(tree, key, SEAL_FILE)).st_mode
        )
    except (OSError, ValueError):
        return False


def _beat_of(tree: str):
    """The prover's last beat: the lock file's (mtime, ctime) in ns, None when it cannot be read."""
    try:
        st = os.lstat(os.path.join(staging(tree), ENTRY_LOCK_FILE))
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_ctime_ns)


def _spend(seconds: float) -> None:
    with _state_lock:
        BUDGET["left"] = max(0.0, BUDGET["left"] - seconds)


def wait_for(tree: str, key: str, timeout: float | None = None, stall: float | None = None) -> Wait:
    """Wait while ``key`` of ``tree`` is hidden and a prover is alive and beating, within this process's budget.

    ``timeout``: at most this long for this key too (the process budget always applies); ``stall``:
    :data:`STALL_S` unless given. Polls (10 ms, growing to 50 ms): the prover puts an entry back as
    soon as its own proof ends, not when all proofs end.
    """
    stall = STALL_S if stall is None else stall
    tree = os.path.normpath(tree)
    if not hidden(tree, key):
        return Wait(
            "back" if not os.path.lexists(os.path.join(staging(tree), key)) else "not-ours", 0.0, 0
        )
    t0 = time.monotonic()
    polls = 0
    pause = 0.01
    alive_at = 0.0
    beat, beat_at = _beat_of(tree), t0

    def done(outcome: str) -> Wait:
        spent = time.monotonic() - t0
        _spend(spent)
        return Wait(outcome, spent, polls)

    while True:
        now = time.monotonic()
        why = _ended(tree, key, now - t0, timeout)
        if why is not None:
            return done(why)
        if now >= alive_at:
            if not alive(tree):
                return done("back" if not hidden(tree, key) else "no-prover")
            alive_at = now + 0.25
        b = _beat_of(tree)
        if b != beat:
            beat, beat_at = b, now
        elif now - beat_at >= stall:
            with _state_lock:
                _stalled.add(tree)
            return done("stalled")
        time.sleep(pause)
        polls += 1
        pause = min(pause * 1.5, 0.05)


def _ended(tree: str, key: str, waited: float, timeout: float | None) -> str | None:
    """Why a wait for ``key`` of ``tree``, ``waited`` seconds on, ends now (its :class:`Wait` outcome: the entry is
    in the tree or back, the tree's prover stalled, the budget or ``timeout`` spent), else None."""
    if _in_tree(tree, key):
        return "in-tree"
    if not hidden(tree, key):
        return "back"
    if tree in _stalled:
        return "stalled"
    with _state_lock:
        left = BUDGET["left"] - waited
    if left <= 0 or (timeout is not None and waited >= timeout):
        return "budget"
    return None


def beat(fd: int) -> None:
    """The prover's sign of progress: touch its staging lock (by fd) so waiters see it is not stopped."""
    try:
        os.utime(fd)
    except OSError:
        pass


def claim(tree: str) -> int | None:
    """Take ``tree``'s staging lock for a prover; its fd, or None when another prover has it (or no dir can be made)."""
    fd = _lock_fd(tree, create=True)
    if fd is not None and not _try_lock(fd, fcntl.LOCK_EX):
        os.close(fd)
        return None
    return fd


def tree_fds(tree: str) -> tuple[int, int] | None:
    """(fd of the tree, fd of its staging dir): every rename between them is by fd, never through a link."""
    from jitwarden.store.paths import open_dir, reserved_dir

    try:
        tfd = open_dir(tree)
    except OSError:
        return None
    try:
        sfd = reserved_dir(tfd, PROVING_DIR)
    except Exception:
        sfd = None
    if sfd is None:
        os.close(tfd)
        return None
    return tfd, sfd


def hide(tree: str, paths) -> list[str]:
    """Rename each entry of ``paths`` (directly in ``tree``) into the staging dir; the ones that could not be."""
    from jitwarden.store.quarantine import rename_noreplace

    fds = tree_fds(tree)
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


def staged(tree: str) -> list[str]:
    """The entries hidden in ``tree``'s staging dir (this start-up's and any a dead prover left)."""
    try:
        with os.scandir(staging(tree)) as it:
            return [
                e.path for e in it if not e.name.startswith(".") and e.is_dir(follow_symlinks=False)
            ]
    except OSError:
        return []


def put_back(tree: str, key: str) -> bool | None:
    """Rename a proven entry from the staging dir to its place in ``tree``; never over an entry written there meanwhile.

    True when it is back; False when another entry took its place (that one is kept); None when
    the staging dir is no longer ours (left hidden, never moved through a link).
    """
    from jitwarden.store.quarantine import rename_noreplace
    from jitwarden.store.removal import remove_empty_dir_at

    fds = tree_fds(tree)
    if fds is None:
        return None
    try:
        for _ in range(3):
            try:
                rename_noreplace(key, key, src_dir_fd=fds[1], dst_dir_fd=fds[0])
                return True
            except FileExistsError:
                if not remove_empty_dir_at(
                    fds[0], key
                ):  # the empty dir a Triton cache manager makes when it looks a key up
                    break
        return False
    finally:
        for fd in fds:
            os.close(fd)
