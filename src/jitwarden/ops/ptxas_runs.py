"""The ptxas runs of one rebuild: one per (ptxas binary, PTX, flags) however many entries share them.

A PTX is written once into the rebuild's private temp dir (named as Triton's ``NamedTemporaryFile``
names it), each assembly runs at most once and its output is shared by every entry that asks for it
(the ``index``-th run of the same inputs: ptxas is not deterministic for every kernel), every run has
a deadline, and :meth:`PtxasRuns.cancel` kills the running children (an interrupt).
"""

from __future__ import annotations

import concurrent.futures as cf
import os
import secrets
import subprocess
import threading
from dataclasses import dataclass

from jitwarden.ops.ptxas_candidates import Candidate
from jitwarden.store.atomic import write_new_file
from jitwarden.store.reads import read_bytes
from jitwarden.store.removal import remove_file

PTXAS_TIMEOUT_S = 900.0
REBUILD_MAX = 256 << 20
"""The most of a PTX file, a cubin or ptxas's output a rebuild reads: past it, unverifiable (Triton writes MiBs)."""


class Cancelled(Exception):
    """The rebuild was cancelled while this run waited or ran."""


@dataclass
class Attempt:
    """One assembly: whether ptxas succeeded, the cubin it wrote, why not, how long it took."""

    ok: bool
    cubin: bytes | None
    error: str | None
    seconds: float = 0.0


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "fatal" in line or "error" in line.lower():
            return line.strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


class PtxasRuns:
    """Every ptxas run of one rebuild, in the private temp dir ``tmp``; counts them for ``stats``."""

    def __init__(self, tmp: str):
        self.tmp = tmp
        self.lock = threading.Lock()
        # (ptxas sha256, PTX digest, flags) -> futures of its 1st, 2nd, ... assembly: the set of
        # outputs one ptxas gave for one PTX, shared by every entry with that PTX.
        self.attempts: dict[tuple, list[cf.Future]] = {}
        self.ptx_files: dict[str, str] = {}
        self.procs: set[subprocess.Popen] = set()
        self.cancelled = threading.Event()
        self.runs = 0
        self.retry_runs = 0
        self.ptxas_seconds = 0.0
        self._counter = 0

    def _ptx_file(self, digest: str, data: bytes) -> str:
        with self.lock:
            p = self.ptx_files.get(digest)
            if p is not None:
                return p
            # Same shape of name as Triton's NamedTemporaryFile ("tmpXXXXXXXX.ptx").
            p = os.path.join(self.tmp, f"tmp{secrets.token_hex(4)}.ptx")
            write_new_file(p, data)
            self.ptx_files[digest] = p
            return p

    def assemble(
        self, cand: Candidate, digest: str, ptx: bytes, flags: list[str], index: int = 0
    ) -> Attempt:
        """The ``index``-th assembly (0: the first) of this PTX by ``cand`` with ``flags``, run at most once."""
        key = (cand.info.sha256, digest, tuple(flags))
        for i in range(index + 1):
            with self.lock:
                futs = self.attempts.setdefault(key, [])
                owner = i == len(futs)
                if owner:
                    futs.append(cf.Future())
                fut = futs[i]
            if owner:
                try:
                    fut.set_result(self._run(cand, digest, ptx, flags, retry=i > 0))
                except BaseException as exc:
                    fut.set_exception(exc)
                    raise
        return fut.result()

    def _run(
        self, cand: Candidate, digest: str, ptx: bytes, flags: list[str], retry: bool = False
    ) -> Attempt:
        import time

        src = self._ptx_file(digest, ptx)
        with self.lock:
            self._counter += 1
            out = f"{src}.{self._counter}.o"
        cmd = [cand.path, *flags, src, "-o", out]
        t0 = time.perf_counter()
        with self.lock:
            if self.cancelled.is_set():
                raise Cancelled()
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=self.tmp,
                close_fds=True,
            )
            self.procs.add(proc)
        try:
            try:
                text, _ = proc.communicate(timeout=PTXAS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return Attempt(False, None, f"timed out after {PTXAS_TIMEOUT_S:.0f} s")
        finally:
            with self.lock:
                self.procs.discard(proc)
        dt = time.perf_counter() - t0
        with self.lock:
            self.runs += 1
            self.retry_runs += retry
            self.ptxas_seconds += dt
        if self.cancelled.is_set():
            raise Cancelled()
        msg = text.decode("utf-8", "replace")
        if proc.returncode != 0:
            remove_file(out)
            return Attempt(False, None, f"exit {proc.returncode}: {_first_error_line(msg)}", dt)
        try:
            data = read_bytes(out, max_bytes=REBUILD_MAX)
        except OSError as exc:
            return Attempt(False, None, f"wrote no cubin ({exc.strerror})", dt)
        finally:
            remove_file(out)
        return Attempt(True, data, None, dt)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled.set()
            procs = list(self.procs)
        for p in procs:
            try:
                p.kill()
            except OSError:
                pass
