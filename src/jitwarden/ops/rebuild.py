"""``jitwarden verify --rebuild``: re-assemble each cached kernel's PTX and compare.

Like ``nix build --check``, a rebuild proves an entry: its PTX is re-assembled with
exactly the ptxas command the Triton that built it ran (``make_cubin`` in
``triton/backends/nvidia/compiler.py``, per release in :data:`jitwarden.env.ptxas.RECIPES`),
reconstructed from the entry's metadata (``triton_version``, options, the
cache-invalidating env vars recorded in it; ``ptx_options`` only through an allow-list),
and the result is compared with the cached cubin (:mod:`jitwarden.formats.cubin_compare`).

Verdicts (one :class:`RebuildResult` per kernel entry):

- ``verified`` (no finding): a ptxas this environment's compilers use reproduces it:
  the one the installed Triton picks for the arch (asked of its ``get_ptxas``; by
  release: ``ptxas`` for every arch up to 3.5, ``ptxas-blackwell`` from sm_100 in
  3.6-3.8 and from sm_90 in 3.9; ``TRITON_PTXAS_PATH`` / ``TRITON_PTXAS_BLACKWELL_PATH``
  override), torch's ``torch/bin/ptxas`` where Triton runs ``ptxas`` (TorchInductor hands
  it over as ``TRITON_PTXAS_PATH``), or one given with ``--ptxas``.
- ``stale`` (warn): only another ptxas on this machine reproduces it (CUDA_HOME,
  PATH, /usr/local/cuda*, nvidia wheels, or the *other* bundled Triton ptxas).
  Under Triton 3.6, a cubin assembled by ``ptxas-blackwell`` under an sm_90 key
  therefore lands here, never in ``verified``: its bytes (the ELF ``e_version`` stamp
  and the CUDA-version attribute in ``.nv.info``) name another toolchain than the one
  Triton runs for sm_90.
- ``not-reproducible`` (error): candidates of the entry's own ptxas release assemble
  the PTX and none reproduces the cubin: a substituted, damaged or wrapper-built binary.
- ``unverifiable`` (warn): nothing to rebuild from (no metadata, PTX or cubin), no
  candidate can assemble the PTX, no ptxas of the entry's release is here (a
  rebuild by another release is expected to differ, so it proves nothing either way),
  ``ptx_options`` outside the allow-list (never passed to ptxas), or a Triton release
  whose command line jitwarden does not know and whose rebuild differs.

Four modules: :mod:`~jitwarden.ops.ptxas_cmdline` rebuilds the ptxas command line and names a
cubin's producer, :mod:`~jitwarden.ops.ptxas_candidates` chooses which ptxas to try,
:mod:`~jitwarden.ops.ptxas_runs` runs it (once per PTX and flags); this one is the engine (``_Engine``:
the verdict of each entry) and its API.

The engine is stdlib only and knows nothing of the command line: it takes a
:class:`RebuildOptions`, reports progress through a plain callback (the CLI draws the bar),
and refuses a bad option with an :class:`OptionError` that names the option's field (the CLI
words it with its flag).
"""

from __future__ import annotations

import concurrent.futures as cf
import errno
import hashlib
import os
from dataclasses import dataclass
from dataclasses import field as dataclass_field

from jitwarden.adapters import triton as tri
from jitwarden.env import ptxas
from jitwarden.formats import cubin_compare
from jitwarden.formats.ptx import parse_header
from jitwarden.model.asjson import fields_json
from jitwarden.model.findings import Finding
from jitwarden.ops.ptxas_candidates import (  # noqa: F401 - OptionError, recipe_disagreements: the engine's API
    Candidate,
    CandidatePool,
    OptionError,
    recipe_disagreements,
    triton_choice,
    validate_extra,
)
from jitwarden.ops.ptxas_cmdline import (  # noqa: F401 - the command line's names, used through this module
    RefusedOption,
    allowed_ptx_options,
    cubin_producer,
    ptxas_flags,
    releases_for_ptx,
)
from jitwarden.ops.ptxas_runs import REBUILD_MAX, Cancelled, PtxasRuns
from jitwarden.store.atomic import write_bytes_atomic
from jitwarden.store.paths import make_dirs
from jitwarden.store.reads import read_bytes
from jitwarden.store.removal import remove_tree
from jitwarden.store.tempdirs import private_dir

VERDICTS = ("verified", "stale", "not-reproducible", "unverifiable")
#: Extra assemblies of the same PTX by the same ptxas when its first output differs from the
#: cached cubin: ptxas is not deterministic for every kernel (see cubin_compare.judge_attempts).
#: A clean, deterministic entry never pays for them.
PTXAS_RETRIES = 4


@dataclass(frozen=True, slots=True)
class RebuildOptions:
    """How to rebuild: ``jobs`` ptxas processes at once (None: one per core), ``extra_ptxas`` more
    ptxas this environment uses (one that reproduces an entry verifies it), ``keep_dir`` where both
    cubins of an entry that differs are left for nvdisasm/cuobjdump (None: nowhere)."""

    jobs: int | None = None
    extra_ptxas: tuple[str, ...] = ()
    keep_dir: str | None = None


@dataclass(frozen=True)
class RebuildResult:
    verdict: str  # verified | stale | not-reproducible | unverifiable
    ptxas: str | None  # the ptxas that reproduced the entry, when one did
    message: str
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict:
        return fields_json(self, findings=[f.to_json() for f in self.findings])


def _validate_keep(keep_dir: str | None) -> None:
    if keep_dir is None:
        return
    try:
        make_dirs(keep_dir)
    except OSError as exc:
        raise OptionError("keep_dir", keep_dir, f"cannot create: {exc.strerror or exc}") from None
    if not os.access(keep_dir, os.W_OK | os.X_OK):
        raise OptionError("keep_dir", keep_dir, "not writable")


# ---------------------------------------------------------------- the engine


@dataclass
class _Work:
    path: str
    id: str
    name: str | None
    arch: int | None = None
    result: RebuildResult | None = None
    kept: tuple[str, str] | None = None
    retried: bool = False  # read again once because its PTX or cubin changed while it was verified


@dataclass(frozen=True)
class _Inputs:
    """What one entry gives a rebuild, read once: the PTX to assemble, the cubin to compare with, how
    Triton ran ptxas for it, who built it, and the stamp of both files (to tell a writer still at work)."""

    ptx_file: str
    cubin_file: str
    ptx: bytes
    cached: bytes
    digest: str  # sha256 of the PTX: one ptxas run per (ptxas, PTX, flags), however many entries share it
    arch: int
    flags: list[str]
    recipe: ptxas.TritonRecipe
    triton_version: object  # as the metadata records it
    ptx_version: str | None
    expected: frozenset[str]  # the CUDA releases that should have assembled it
    cub_rel: str | None
    cub_build: str | None
    producer: str  # who built it, in words
    stamp: tuple

    def rank(self, c: Candidate) -> int:
        """0 for the cubin's own ptxas build, 1 for its release, 2 for any other: the order candidates are tried in."""
        if self.cub_build and c.info.build == self.cub_build:
            return 0
        return 1 if c.info.release in self.expected or c.info.release == self.cub_rel else 2

    def same_release(self, c: Candidate) -> bool:
        return not self.expected or c.info.release in self.expected


@dataclass
class _Tries:
    """Every assembly of one entry's PTX so far: (candidate, attempt) in order, the candidates skipped
    (and why), and each candidate's cubins."""

    tried: list = dataclass_field(default_factory=list)
    skipped: list = dataclass_field(default_factory=list)
    outputs: dict = dataclass_field(default_factory=dict)


class _Engine:
    """One rebuild's verdicts, entry by entry, over the ptxas runs they share (:class:`PtxasRuns`)."""

    def __init__(self, tmp: str, pool: CandidatePool, keep_dir: str | None):
        self.pool = pool
        self.keep_dir = keep_dir
        self.ptxas = PtxasRuns(tmp)

    # -- one entry

    def verify(self, w: _Work) -> RebuildResult:
        try:
            return self._verify(w)
        except Cancelled:
            raise
        except OSError as exc:
            return _unverifiable(f"cannot rebuild: {exc}")

    def _verify(self, w: _Work) -> RebuildResult:
        """One entry: read it (:meth:`_read`), try the environment's ptxas then the machine's
        (:meth:`_assemble_all`), and judge what no candidate reproduced (:meth:`_unmatched`)."""
        inp = self._read(w)
        if isinstance(inp, RebuildResult):
            return inp
        w.arch = inp.arch
        tries = _Tries()
        matched = self._assemble_all(w, inp, tries)
        if matched is not None:
            return matched
        assembled = [(c, a) for c, a in tries.tried if a.ok]
        same = [(c, a) for c, a in assembled if inp.same_release(c)]
        unassembled = _nothing_to_compare(inp, tries, assembled, same)
        if unassembled is not None:
            return unassembled
        if _stamp(w.path, inp.ptx_file, inp.cubin_file) != inp.stamp:
            # Triton writes a group file by file: a writer still at work can pair one compile's
            # PTX with another's cubin. Judge only what stood still while we read it.
            if w.retried:
                return _unverifiable(
                    "the entry's PTX or cubin changed while it was being verified "
                    "(a process is still writing it); rerun when it is idle"
                )
            w.retried = True
            return self._verify(w)
        return self._unmatched(w, inp, [c for c, _ in same], assembled, tries.outputs)

    def _read(self, w: _Work) -> _Inputs | RebuildResult:
        """The entry's :class:`_Inputs`, or the ``unverifiable`` result that says why there is nothing to rebuild."""
        root, name = os.path.dirname(w.path), os.path.basename(w.path)
        facts = tri.read_entry(root, name, check_seal=False)
        if facts.survey.is_symlink:
            return _unverifiable("the entry is a symlink; not followed")
        md = facts.metadata
        if md is None:
            return _unverifiable("no readable metadata JSON: nothing says how it was built")
        backend, _arch = tri.metadata_target(md)
        if backend != "cuda":
            return _unverifiable(
                f"not a CUDA entry (backend {backend!r}): no ptxas rebuild applies"
            )
        if facts.ptx_file is None:
            return _unverifiable("no PTX in the entry: nothing to rebuild from")
        if facts.cubin_file is None:
            return _unverifiable("no cubin in the entry: nothing to compare with")
        tv = md.get("triton_version")
        recipe = ptxas.recipe_for(tv if isinstance(tv, str) else None)
        try:
            arch, flags = ptxas_flags(md, recipe)
        except ValueError as exc:
            return _unverifiable(f"{facts.metadata_file}: {exc}")
        w.arch = arch
        try:
            ptx = read_bytes(os.path.join(w.path, facts.ptx_file), max_bytes=REBUILD_MAX)
        except OSError as exc:
            return _unverifiable(f"cannot read {facts.ptx_file}: {_why(exc)}")
        try:
            cached = read_bytes(os.path.join(w.path, facts.cubin_file), max_bytes=REBUILD_MAX)
        except OSError as exc:
            return _unverifiable(f"cannot read {facts.cubin_file}: {_why(exc)}")
        stamp = _stamp(w.path, facts.ptx_file, facts.cubin_file)
        if not ptx.strip():
            return _unverifiable(f"{facts.ptx_file} is empty: nothing to rebuild from")
        hdr = parse_header(ptx[:16384])
        # Who built it: Triton derives the PTX .version from the release of the ptxas it
        # runs (unless ptx_version is forced), so the PTX names the release to expect;
        # the cubin's tkinfo note / e_version stamp names the one that actually assembled it.
        ptx_rels = releases_for_ptx(hdr.version) if md.get("ptx_version") is None else frozenset()
        cub_rel, cub_build = cubin_producer(cached)
        expected = ptx_rels or (frozenset({cub_rel}) if cub_rel else frozenset())
        return _Inputs(
            facts.ptx_file,
            facts.cubin_file,
            ptx,
            cached,
            hashlib.sha256(ptx).hexdigest(),
            arch,
            flags,
            recipe,
            tv,
            hdr.version,
            expected,
            cub_rel,
            cub_build,
            _producer_text(hdr.version, ptx_rels, cub_rel, cub_build),
            stamp,
        )

    def _assemble_all(self, w: _Work, inp: _Inputs, tries: _Tries) -> RebuildResult | None:
        """Assemble the PTX with each candidate until one reproduces the cubin (its result), recording every
        try in ``tries``; None when none does.

        Environment first (a match there verifies), the producer's release first within each group;
        the machine's other ptxas are looked up only when the environment's do not reproduce it.
        """
        arch, ptx, cached = inp.arch, inp.ptx, inp.cached
        for group in (self.pool.environment, self.pool.machine):
            firsts: list[Candidate] = []
            for c in sorted(group(arch), key=inp.rank):
                if ptxas.can_target(c.info, arch) is False:
                    tries.skipped.append(f"{c.path} ({c.info.release}) cannot target sm_{arch}")
                    continue
                att = self.ptxas.assemble(c, inp.digest, ptx, inp.flags)
                tries.tried.append((c, att))
                if not att.ok:
                    continue
                assert att.cubin is not None  # an assembly that went through wrote its cubin
                firsts.append(c)
                tries.outputs[c.path] = [att.cubin]
                cmp = cubin_compare.compare(cached, att.cubin)
                if cmp.equal:
                    return self._matched(w, c, cmp, cached, arch, inp.producer, tries.tried)
            # None of this group reproduced it in one run. ptxas is not deterministic for every
            # kernel, so assemble again (same temp dir, this worker thread) with the ones of the
            # producer's release before judging; clean deterministic entries never get here.
            for c in firsts:
                if not inp.same_release(c):
                    continue
                for k in range(1, 1 + PTXAS_RETRIES):
                    att = self.ptxas.assemble(c, inp.digest, ptx, inp.flags, k)
                    if not att.ok:
                        continue
                    assert att.cubin is not None  # as above
                    tries.outputs[c.path].append(att.cubin)
                    cmp = cubin_compare.compare(cached, att.cubin)
                    if cmp.equal:
                        distinct = cubin_compare.judge_attempts(
                            cached, tries.outputs[c.path]
                        ).distinct
                        note = (
                            f"; this ptxas's output varies between runs for this kernel: run {k + 1} matched "
                            f"after {k} differing run(s) ({distinct} distinct results)"
                        )
                        return self._matched(
                            w, c, cmp, cached, arch, inp.producer, tries.tried, note
                        )
        return None

    def _unmatched(
        self, w: _Work, inp: _Inputs, same: list[Candidate], assembled, outputs
    ) -> RebuildResult:
        """The verdict when every run of every producer-release candidate (``same``) differs: judge the set
        of outputs of each (cubin_compare.judge_attempts). One that varies only where the cached cubin
        differs leaves it unproven (unverifiable); otherwise the cubin differs where ptxas is stable."""
        cached, producer = inp.cached, inp.producer
        judged = [(c, cubin_compare.judge_attempts(cached, outputs[c.path])) for c in same]
        confined = next(((c, j) for c, j in judged if j.verdict == "varies-confined"), None)
        if confined is not None:
            c, j = confined
            kept = self._keep(w, cached, outputs[c.path][j.nearest])
            return _unverifiable(
                f"{j.reason}; assembled with {c.label} ({producer})" + _diff_hint(kept)
            )
        if not inp.recipe.known:
            return _unverifiable(
                f"built by Triton {inp.triton_version or '(no version recorded)'}, whose ptxas command line jitwarden "
                f"does not know (it knows Triton {ptxas.RECIPES[0].release} to {ptxas.RECIPES[-1].release}); the "
                f"rebuild with Triton {inp.recipe.release}'s differs, which proves nothing either way"
            )
        ref_c, ref_j = judged[0]
        ref_cubin = outputs[ref_c.path][ref_j.nearest or 0]
        cmp = cubin_compare.compare(cached, ref_cubin)
        kept = self._keep(w, cached, ref_cubin)
        detail, msg = _differs_words(inp, ref_c, ref_j, cmp, assembled, kept)
        return RebuildResult(
            "not-reproducible", None, detail, (Finding("not-reproducible", msg, detail),)
        )

    def _matched(
        self,
        w: _Work,
        c: Candidate,
        cmp: cubin_compare.CubinComparison,
        cached: bytes,
        arch: int,
        producer: str,
        tried,
        note: str = "",
    ) -> RebuildResult:
        how = ("byte for byte" if cmp.identical else f"{cmp.summary()}") + note
        if c.environment:
            return RebuildResult("verified", c.path, f"reproduced {how} by {c.label}")
        env = self.pool.environment(arch)
        env_att = next((a for x, a in tried if x.environment and a.ok), None)
        kept = self._keep(w, cached, env_att.cubin) if env_att is not None else None
        would = ", ".join(x.label for x in env) or "no ptxas (none found)"
        msg = (
            f"reproduced {how} only by {c.label}, which this environment's compilers do not use; for sm_{arch} "
            f"they would use {would} ({producer})"
            + (_diff_hint(kept) if env_att is not None else "")
        )
        return RebuildResult("stale", c.path, msg, (Finding("stale", msg),))

    def _keep(self, w: _Work, cached: bytes, rebuilt: bytes | None) -> tuple[str, str] | None:
        if not self.keep_dir or rebuilt is None:
            return None
        stem = f"{w.id}.{w.name or 'kernel'}"
        a = os.path.join(self.keep_dir, f"{stem}.cached.cubin")
        b = os.path.join(self.keep_dir, f"{stem}.rebuilt.cubin")
        for p, data in ((a, cached), (b, rebuilt)):
            write_bytes_atomic(p, data)
        w.kept = (a, b)
        return a, b


def _nothing_to_compare(inp: _Inputs, tries: _Tries, assembled, same) -> RebuildResult | None:
    """The ``unverifiable`` verdict when no run gives a cubin to judge by: no ptxas found, none could
    assemble the PTX, or none of the entry's own release did (``same``: those that did); else None."""
    if not tries.tried and not tries.skipped:
        return _unverifiable(
            f"no ptxas found for sm_{inp.arch} (none in the environment or on this machine)"
        )
    if not assembled:
        why = "; ".join(
            [f"{c.path} ({c.info.release}): {a.error}" for c, a in tries.tried] + tries.skipped
        )
        return _unverifiable(
            f"no ptxas here can assemble this PTX (.version {inp.ptx_version}, sm_{inp.arch}): {why}"
        )
    if not same:
        rels = ", ".join(sorted({c.info.release or "?" for c, _ in assembled}))
        wanted = "/".join(sorted(inp.expected))
        return _unverifiable(
            f"built by a CUDA {wanted} ptxas ({inp.producer}); none is here, and a rebuild by "
            f"another release ({rels}) differs by design, so it proves nothing; pass --ptxas PATH to a "
            f"{wanted} ptxas"
        )
    return None


def _differs_words(inp: _Inputs, ref_c: Candidate, ref_j, cmp, assembled, kept) -> tuple[str, str]:
    """(the detail, the one-line message) of a ``not-reproducible`` verdict: where the rebuild by ``ref_c``
    differs, whether that ptxas is the cubin's producer's release, how its runs varied, which others
    differ too, and where both cubins were kept."""
    producer = inp.producer
    if (
        ref_c.info.release == inp.cub_rel
        or inp.cub_rel is None
        and ref_c.info.release in inp.expected
    ):
        version_note = f"same release as the entry's producer ({producer})"
    else:
        version_note = (
            f"ptxas release {ref_c.info.release} differs from the cubin's producer ({producer})"
        )
    where = f"first difference in {cmp.first_section}" + (
        f" at file offset {cmp.first_offset:#x}" if cmp.first_offset is not None else ""
    )
    others = [c.path for c, _ in assembled if c is not ref_c]
    runs = (
        f"; {ref_j.reason}"
        if ref_j.verdict == "varies-differs"
        else f"; {ref_c.path} gave {ref_j.reason}"
        if ref_j.attempts > 1
        else ""
    )
    detail = (
        f"no ptxas reproduces the cubin: rebuilt with {ref_c.label}: {where}; {cmp.summary()}; {version_note}"
        + runs
        + (f"; also differs from {', '.join(others)}" if others else "")
        + _diff_hint(kept)
    )
    same_release = version_note.startswith("same release")
    msg = (
        f"no ptxas reproduces the cubin: {where} (rebuilt by ptxas {ref_c.info.release}, "
        f"{'its producer' if same_release else 'not its producer'}"
        f"{f', and {len(others)} more' if others else ''})"
        + (f"; both cubins kept in {os.path.dirname(kept[0])}" if kept else "")
    )
    return detail, msg


def _stamp(path: str, *names: str) -> tuple:
    out: list[tuple[int, int, int] | None] = []
    for n in names:
        try:
            st = os.lstat(os.path.join(path, n))
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _producer_text(ptx_version, ptx_rels, cub_rel, cub_build) -> str:
    parts = []
    if cub_rel:
        parts.append(f"cubin names CUDA {cub_build or cub_rel}")
    if ptx_version:
        parts.append(
            f"PTX .version {ptx_version}"
            + (f" pairs with CUDA {'/'.join(sorted(ptx_rels))}" if ptx_rels else "")
        )
    return ", ".join(parts) or "producer unknown"


def _diff_hint(kept: tuple[str, str] | None) -> str:
    if not kept:
        return "; rerun with --keep-cubins DIR to keep both cubins for nvdisasm/cuobjdump"
    bindir = ptxas.triton_bin_dir() or ""
    nvd = os.path.join(bindir, "nvdisasm") if bindir else "nvdisasm"
    a, b = kept
    return (
        f"; kept {a} and {b}: diff <({nvd} -c -g {a}) <({nvd} -c -g {b}) "
        f"(or {os.path.join(bindir, 'cuobjdump') if bindir else 'cuobjdump'} -sass -elf)"
    )


def _why(exc: OSError) -> str:
    """An unreadable input's reason, for an ``unverifiable`` verdict."""
    if exc.errno == errno.EFBIG:
        return f"larger than the {REBUILD_MAX >> 20} MiB a rebuild reads"
    return exc.strerror or str(exc)


def _unverifiable(reason: str) -> RebuildResult:
    return RebuildResult("unverifiable", None, reason, (Finding("unverifiable", reason),))


def _remove_work(tmp: str) -> None:
    """The engine's temp dir gone; what cannot be removed stays in the system's temp dir (never an error)."""
    try:
        remove_tree(tmp)
    except OSError:
        pass


def _ptx_size(e) -> int:
    try:
        return os.stat(os.path.join(e.path, f"{e.name}.ptx")).st_size
    except (OSError, TypeError):
        return 0


# ---------------------------------------------------------------- public API


def verify_entries(
    entries,
    options: RebuildOptions = RebuildOptions(),
    *,
    env=None,
    progress=None,
    machine_ptxas: list[str] | None = None,
    stats: dict | None = None,
    on_result=None,
) -> dict[str, RebuildResult]:
    """Rebuild every kernel entry; return {entry path: RebuildResult} in the order given.

    ``progress(done, total)`` is called from the calling thread after each entry;
    ``on_result(path, result)`` too, as each entry's rebuild ends, while the others still run
    (first use seals proven entries there, overlapping the remaining ptxas runs).
    ``machine_ptxas`` replaces the machine search (tests); ``stats`` receives counters.
    Raises :class:`OptionError` for an option that cannot be used; KeyboardInterrupt kills
    the running ptxas children, removes the temp dir and propagates.
    """
    env = os.environ if env is None else env
    check_options(options)
    jobs = (os.cpu_count() or 1) if options.jobs is None else options.jobs
    work = [
        _Work(e.path, e.id, e.name) for e in entries if getattr(e, "type", "kernel") == "kernel"
    ]
    sizes = {e.path: _ptx_size(e) for e in entries}
    total = len(work)
    results: dict[str, RebuildResult] = {}
    if not work:
        return results
    pool = CandidatePool(env, list(options.extra_ptxas), machine_ptxas)
    tmp = private_dir("jitwarden-rebuild-")  # mode 0700
    engine = _Engine(tmp, pool, options.keep_dir)
    try:
        _run_all(engine, work, sizes, min(jobs, total), on_result, progress)
    finally:
        _remove_work(tmp)
    if stats is not None:
        stats.update(
            ptxas_runs=engine.ptxas.runs,
            ptxas_retries=engine.ptxas.retry_runs,
            ptxas_seconds=engine.ptxas.ptxas_seconds,
            entries=total,
            jobs=jobs,
        )
    for w in work:
        assert w.result is not None  # every work was done above (or the call raised)
        results[w.path] = w.result
    return results


def _run_all(
    engine: _Engine, work: list[_Work], sizes: dict, workers: int, on_result, progress
) -> None:
    """Every entry of ``work`` verified by ``workers`` threads, largest PTX first (the long ptxas runs
    start early and the tail stays short), each result set on its work and reported as it ends; on any
    exception (an interrupt), the running ptxas killed and the rest cancelled before it propagates."""
    total = len(work)
    ex = cf.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="jw-rebuild")
    futs: dict[cf.Future, _Work] = {}
    try:
        for w in sorted(work, key=lambda w: -sizes.get(w.path, 0)):
            futs[ex.submit(engine.verify, w)] = w
        for done, fut in enumerate(cf.as_completed(futs), start=1):
            w = futs[fut]
            w.result = fut.result()
            if on_result is not None:
                on_result(w.path, w.result)
            if progress is not None:
                progress(done, total)
    except BaseException:
        engine.ptxas.cancel()
        for f in futs:
            f.cancel()
        ex.shutdown(wait=True, cancel_futures=True)
        raise
    ex.shutdown(wait=True)


#: Entries whose files are already known broken are not rebuilt: the finding says enough.
_NO_REBUILD = frozenset({"corrupt", "incomplete", "foreign-path", "unsafe"})


def candidates(entries) -> list:
    """The entries a rebuild judges: Triton kernels without a file-level error (pure)."""
    return [
        e
        for e in entries
        if e.kind == "triton"
        and e.type == "kernel"
        and not any(f.code in _NO_REBUILD for f in e.findings)
    ]


def check_options(options: RebuildOptions) -> None:
    """Refuse an option that cannot be used (:class:`OptionError`) before any scanning; creates ``keep_dir``."""
    validate_extra(options.extra_ptxas)
    _validate_keep(options.keep_dir)
    if options.jobs is not None and options.jobs < 1:
        raise OptionError("jobs", options.jobs, "must be at least 1")


def summarize(results: dict[str, RebuildResult]) -> dict[str, int]:
    out = dict.fromkeys(VERDICTS, 0)
    for r in results.values():
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return out
