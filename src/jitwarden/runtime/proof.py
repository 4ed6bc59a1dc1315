"""Proofs: the first use of an unsealed Triton kernel entry is proven, never assumed (ARCHITECTURE.md, "The runtime").

An entry nobody sealed (a cache from before jitwarden, one used under
``JITWARDEN_PARTITION=0``, kernels TorchInductor restored from an FX-graph bundle,
anything copied in) passes every structural check even when its cubin is another
kernel of the same name and signature. So before the guard serves it, the torch hooks
let Inductor load it or a sweep seals it, its PTX is re-assembled with the ptxas that produced it
and compared with the cubin, exactly as ``jitwarden verify --rebuild`` does
(:func:`jitwarden.ops.rebuild.verify_entries`):

- ``proven``: a ptxas reproduces the cubin (verdict ``verified`` or ``stale``); the
  entry is sealed over exactly the bytes that were proven, and never proven again;
- ``refuted``: ptxas of the producer's release assemble the PTX and none gives the
  cubin (``not-reproducible``): damage or substitution, quarantined;
- ``unproven``: nothing can prove it (no ptxas of the producer's release, no PTX,
  not a CUDA entry): a miss, quarantined (restorable) so Triton recompiles it.

``JITWARDEN_PROVE=0`` turns proofs off for people who accept the risk: unsealed
entries are then sealed after the structural checks alone, as before.

Below the sweep, the prover, the torch hooks and the guard; above only :mod:`~jitwarden.runtime.tree`.
It proves and seals; it never hides, moves or quarantines (the callers do, through
:mod:`~jitwarden.runtime.setaside`). Stdlib only (it runs on the activation path and inside the
guard); never imports torch. Until an unsealed kernel is found it imports nothing beyond what a warm
activation already has (no ``dataclasses`` or ``hashlib``): its records are immutable named tuples.
"""

from __future__ import annotations

import os
import threading
import time
from collections import namedtuple
from collections.abc import Callable

from jitwarden.model.settings import PROVE
from jitwarden.runtime import tree

PROVE_VAR = PROVE.name
PROVEN, REFUTED, UNPROVEN = "proven", "refuted", "unproven"
_CODES = {REFUTED: "not-reproducible", UNPROVEN: "unverifiable"}

_lock = threading.Lock()
_memo: dict[str, Proof] = {}  # entry path -> proof made by prove_many and not yet used
_totals = {"proven": 0, "refuted": 0, "unproven": 0, "seconds": 0.0}
_STATS = ("ptxas_runs", "ptxas_retries", "ptxas_seconds")


def enabled(env=None) -> bool:
    """False only when ``JITWARDEN_PROVE`` is turned off (its row in model/settings.py)."""
    return PROVE.on(os.environ if env is None else env)


class Proof(namedtuple("Proof", "path state reason digests ptxas", defaults=(None,))):
    """What a rebuild said about one entry, and the bytes it said it about (immutable, named fields).

    ``state``: proven | refuted | unproven; ``digests``: file name -> sha256 of every file of the
    entry, read before the rebuild; ``ptxas``: the one that reproduced it.
    """

    __slots__ = ()

    @property
    def proven(self) -> bool:
        return self.state == PROVEN

    @property
    def code(self) -> str:
        """The finding code a quarantine of an entry that failed its proof records."""
        return _CODES.get(self.state, "")


class ProofCounts(
    namedtuple(
        "ProofCounts",
        "proven refuted unproven seconds jobs ptxas_runs ptxas_retries ptxas_seconds",
        defaults=(0, 0, 0, 0.0, 1, 0, 0, 0.0),
    )
):
    """How many proofs one start-up (or one sweep, or one prover) made, and what they cost (immutable).

    ``jobs``: the cores they ran on; ``ptxas_*``: the rebuild's own counters. :meth:`plus` adds
    two (several trees, one start-up line); :meth:`summary` words them.
    """

    __slots__ = ()

    @property
    def total(self) -> int:
        return self.proven + self.refuted + self.unproven

    def plus(self, other: ProofCounts | None) -> ProofCounts:
        if other is None:
            return self
        return ProofCounts(
            proven=self.proven + other.proven,
            refuted=self.refuted + other.refuted,
            unproven=self.unproven + other.unproven,
            seconds=self.seconds + other.seconds,
            jobs=max(self.jobs, other.jobs),  # the cores, not a sum
            ptxas_runs=self.ptxas_runs + other.ptxas_runs,
            ptxas_retries=self.ptxas_retries + other.ptxas_retries,
            ptxas_seconds=self.ptxas_seconds + other.ptxas_seconds,
        )

    def summary(self, background: bool = False) -> str | None:
        """The one start-up line: how many unsealed kernels were proven, in what time, and how many were not.

        ``background``: the proofs ran beside the workload's start (:mod:`jitwarden.runtime.prover`).
        """
        from jitwarden.model.text import plural

        if not self.total:
            return None
        bad = self.refuted + self.unproven
        tail = (
            f"; {bad} not proven ({self.refuted} refuted, {self.unproven} unprovable): "
            "quarantined, recompiled when used"
            if bad
            else ""
        )
        return (
            f"proved {self.proven} of {self.total} unsealed Triton kernels by rebuilding their PTX in "
            f"{self.seconds:.2f} s on {plural(self.jobs, 'core')}"
            f"{', beside the workload start' if background else ''}{tail} ({PROVE_VAR}=0 skips proofs)"
        )


_Entry = namedtuple(
    "_Entry", "path id name type", defaults=("kernel",)
)  # what rebuild.verify_entries reads


def _digests(path: str) -> dict:
    from jitwarden.store.seal import (
        file_digest,
    )  # hashed 1 MiB at a time: a file of gigabytes costs no memory

    return {n: file_digest(os.path.join(path, n))[0] for n in tree.files(path)}


def _kernel_name(names) -> str | None:
    return next((n[:-6] for n in names if n.endswith(".cubin")), None)


def _digest_all(paths: list[str], jobs: int) -> dict:
    """{path: file digests, or the OSError that stopped the read}, read in parallel (hashlib and reads drop the GIL)."""

    def one(p):
        try:
            return _digests(p)
        except OSError as exc:
            return exc

    if len(paths) < 2 or jobs < 2:
        return {p: one(p) for p in paths}
    import concurrent.futures as cf

    with cf.ThreadPoolExecutor(
        max_workers=min(jobs, len(paths)), thread_name_prefix="jw-digest"
    ) as ex:
        return dict(zip(paths, ex.map(one, paths)))


_MEMO_MAX = 4 << 20
"""The fingerprint memo holds at most a few dozen small sections; anything larger is not one."""


def _warm_ptxas(env) -> None:
    """Identify the environment's ptxas from the fingerprint's persistent memo, when its stat still matches.

    A warm activation does not collect the fingerprint, so without this the first proof of a
    start-up runs ``ptxas --version`` and hashes each ptxas binary (tens of MB each) again.
    """
    from jitwarden.env import ptxas
    from jitwarden.store.paths import memo_dir
    from jitwarden.store.reads import read_own_json

    try:  # never a FIFO, another user's file or an unbounded read: this runs inside activate()
        section = read_own_json(
            os.path.join(memo_dir(env), "fingerprint-memo.json"), max_bytes=_MEMO_MAX
        ).get("ptxas")
    except (OSError, ValueError, AttributeError):
        return
    if isinstance(section, dict):
        try:
            ptxas.selected(
                env, dict(section)
            )  # fills ptxas' in-process memo; the file is never written here
        except Exception:
            pass


_STATES = {"verified": PROVEN, "stale": PROVEN, "not-reproducible": REFUTED}
"""A rebuild's verdict -> the proof's state; any other verdict (no ptxas, no PTX, not CUDA) proves nothing: unproven."""


class _Gathered:
    """The proofs of one :func:`prove_many` as they end: each kept, and handed to ``on_proof`` at once (in the
    thread that made it), whose exceptions are kept for after the others, never lost nor let stop them.

    A ``__slots__`` class, not a dataclass: this module imports nothing a warm activation does not have.
    """

    __slots__ = ("proofs", "on_proof", "errors")
    proofs: dict[str, Proof]
    on_proof: Callable[[str, Proof], object] | None
    errors: list[BaseException]

    def __init__(self, on_proof: Callable[[str, Proof], object] | None) -> None:
        self.proofs = {}
        self.on_proof = on_proof
        self.errors = []

    def add(self, path: str, pr: Proof) -> None:
        self.proofs[path] = pr
        if self.on_proof is not None:
            try:
                self.on_proof(path, pr)
            except Exception as exc:
                self.errors.append(exc)

    def unproven(self, digests: dict[str, dict], why: str) -> None:
        """Every entry of ``digests`` (path -> its file digests) that has no proof yet is unproven, for ``why``."""
        for p in digests:
            if p not in self.proofs:
                self.add(p, Proof(p, UNPROVEN, why, digests[p]))


def _read_entries(paths: list[str], jobs: int, got: _Gathered) -> dict[str, dict]:
    """The file digests of every entry of ``paths`` that can be read, before any rebuild: what a proof is about.

    One that cannot be read is unproven now; one gone since it was listed (hidden or set aside by another
    process) is not ours to prove or count.
    """
    digests: dict[str, dict] = {}
    for p, d in _digest_all(paths, jobs).items():
        if isinstance(d, FileNotFoundError):
            continue
        if isinstance(d, OSError):
            got.add(p, Proof(p, UNPROVEN, f"cannot read the entry: {d.strerror or d}", {}))
        else:
            digests[p] = d
    return digests


def _rebuild_all(
    digests: dict[str, dict], jobs: int, env, stats: dict | None, got: _Gathered
) -> None:
    """Rebuild every read entry's PTX in one parallel run (:func:`jitwarden.ops.rebuild.verify_entries`), each
    verdict a proof as it ends; an entry the rebuild gave no verdict (it could not run, or skipped one) is unproven."""
    from jitwarden.ops import rebuild

    todo = [_Entry(p, os.path.basename(p), _kernel_name(d)) for p, d in digests.items()]
    if not todo:
        return

    def judged(path: str, r) -> None:
        got.add(
            path, Proof(path, _STATES.get(r.verdict, UNPROVEN), r.message, digests[path], r.ptxas)
        )

    _warm_ptxas(os.environ if env is None else env)
    try:
        rebuild.verify_entries(
            todo, rebuild.RebuildOptions(jobs=jobs), env=env, on_result=judged, stats=stats
        )
    except Exception as exc:
        got.unproven(digests, f"the rebuild could not run ({type(exc).__name__}: {exc})")
    got.unproven(digests, "no rebuild result")


def _count(proofs: dict[str, Proof], seconds: float) -> None:
    """Add one :func:`prove_many`'s proofs and time to this process's totals."""
    with _lock:
        for pr in proofs.values():
            _totals[pr.state] += 1
        _totals["seconds"] += seconds


def prove_many(
    paths, *, jobs: int | None = None, env=None, on_proof=None, stats: dict | None = None
) -> dict[str, Proof]:
    """Prove every entry of ``paths`` in parallel (all cores by default); {path: Proof}.

    ``stats`` receives the rebuild's counters (``ptxas_runs``, ``ptxas_retries``, ``ptxas_seconds``).
    ``on_proof(path, proof)``: called in this thread as each proof ends, while the others still
    run, so that sealing overlaps the remaining ptxas runs. It must not raise; if it does, the
    first exception is raised again once every proof is done.

    Its steps: read each entry's digests, rebuild them all, count the proofs in this process's totals.
    """
    t0 = time.perf_counter()
    paths = list(dict.fromkeys(paths))
    jobs = jobs or os.cpu_count() or 1
    got = _Gathered(on_proof)
    _rebuild_all(_read_entries(paths, jobs, got), jobs, env, stats, got)
    _count(got.proofs, time.perf_counter() - t0)
    if got.errors:
        raise got.errors[0]
    return {p: got.proofs[p] for p in paths if p in got.proofs}


def prove(path: str, env=None) -> Proof:
    """One entry's proof: the one :func:`prove_ahead` made for it, else a new one.

    A proven proof is returned as it is: whoever uses it compares its ``digests`` with the bytes
    it seals or serves (:func:`seal_proven`), so rehashing here would only read every file twice.
    One that did not prove the entry is reused only while the entry's files are unchanged.
    """
    with _lock:
        pr = _memo.pop(path, None)
    if pr is not None:
        if pr.proven:
            return pr
        try:
            if _digests(path) == pr.digests:
                return pr
        except OSError:
            pass
    got = prove_many([path], jobs=1, env=env).get(path)
    return got if got is not None else Proof(path, UNPROVEN, "the entry is gone", {})


def prove_ahead(paths, *, jobs: int | None = None, env=None, on_proof=None) -> ProofCounts:
    """Prove ``paths`` in parallel now; returns their :class:`ProofCounts`.

    Without ``on_proof`` each proof is kept for :func:`prove` (one later use each); with it, each
    is handed over as it ends (see :func:`prove_many`) and nothing is kept.
    """
    t0 = time.perf_counter()
    stats: dict = {}
    proofs = prove_many(paths, jobs=jobs, env=env, on_proof=on_proof, stats=stats)
    if on_proof is None:
        with _lock:
            _memo.update(proofs)
    states = [p.state for p in proofs.values()]
    return ProofCounts(
        states.count(PROVEN),
        states.count(REFUTED),
        states.count(UNPROVEN),
        time.perf_counter() - t0,
        jobs or os.cpu_count() or 1,
        *(stats.get(k, 0) for k in _STATS),
    )


def seal_proven(path: str, names, proof: Proof, fingerprint: str | None, producer: dict) -> bool:
    """Seal ``names`` of a proven entry when every one still has the bytes that were proven; False otherwise."""
    from jitwarden.store import seal

    if not proof.proven:
        return False
    s = seal.compute(path, names, fingerprint, dict(producer, proven=proof.ptxas or True))
    if any(proof.digests.get(n) != rec["sha256"] for n, rec in s.files.items()):
        return False  # changed since it was proven: the next use proves it again
    seal.write(path, s, seal.newest_ctime(path, names))
    return True


def admit(
    path: str, names, fingerprint: str | None, producer: dict, env=None, proof: Proof | None = None
) -> tuple[str, list[str]] | None:
    """Prove and seal an unsealed entry that passed the structural checks, for the guard and the sweep.

    ``proof``: one already made for this entry (the sweep's, made in parallel); else :func:`prove`.
    None when it is now sealed (proven, or proofs are off); else (finding code, details)
    saying why it must not be used: the caller quarantines it and Triton recompiles.
    An entry that changed after its proof is proven again, once.
    """
    from jitwarden.store import seal

    names = list(names)
    if not enabled(env):
        s = seal.compute(path, names, fingerprint, dict(producer, legacy=True, proven=False))
        seal.write(path, s, seal.newest_ctime(path, names))
        return None
    proof = prove(path, env) if proof is None else proof
    for again in (False, True):
        if not proof.proven:
            break
        if seal_proven(path, names, proof, fingerprint, dict(producer, legacy=True)):
            return None
        if again:
            return "unverifiable", [
                "the entry changed while it was being proven; not used until it is proven"
            ]
        proof = prove_many([path], jobs=1, env=env)[
            path
        ]  # changed since its proof: prove what is there now
    return proof.code, [f"first use of an unsealed entry: {proof.reason}"]


def totals() -> dict:
    """Proofs made by this process so far (all callers)."""
    with _lock:
        return dict(_totals)


def doctor_warnings(env=None) -> list[tuple[str, str, str | None]]:
    """(kind, text, fix) for ``jitwarden doctor``: the risk someone accepted by turning proofs off."""
    env = os.environ if env is None else env
    out: list[tuple[str, str, str | None]] = []
    if not enabled(env):
        out.append(
            (
                "proofs-off",
                f"{PROVE_VAR}=0: unsealed Triton kernels are sealed and served after structural "
                "checks alone; another kernel's cubin under the same name would be used",
                f"unset {PROVE_VAR}  (first use then rebuilds each unsealed kernel once)",
            )
        )
    return out
