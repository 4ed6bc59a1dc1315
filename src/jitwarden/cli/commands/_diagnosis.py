"""``doctor``'s diagnosis: one :class:`Problem` per thing wrong, how much of it, and the command that fixes it.

Each rule reads the scan's report (and, where it says so, the fingerprint, the partitions' records, the
start-up checks or the environment) and returns its problems; :func:`problems` gathers the scan's, worst
first. ``doctor`` prints them and writes them into its JSON (``problems``).
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass

from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model import settings
from jitwarden.model.asjson import fields_json
from jitwarden.model.findings import CATALOG, CODES, Severity
from jitwarden.model.text import display, human_age, human_size, plural


@dataclass(frozen=True, slots=True)
class Problem:
    """One line of the diagnosis: what is wrong, how much of it, and the command that fixes it."""

    code: str
    severity: Severity
    count: int
    message: str
    fix: str | None = None

    def to_json(self) -> dict:
        return fields_json(self, severity=str(self.severity))


def problems(
    report, fp, current: str | None, warnings=(), paths=(), rebuilt: bool = False, not_run=()
) -> list[Problem]:
    """Every problem the scan and the start-up checks found, worst first, each with its fix (pure).

    Gathered by source, in this order (a tie in severity and code keeps it): the entries' findings, the cache
    roots', the start-up checks', the partitions', the quarantine, the unproven entries, then what another
    environment explains, mixed GPUs, and a missing target.
    """
    suffix = fix_suffix(report, paths)
    out_ = finding_problems(report, suffix)
    out_ += cache_root_problems(report)
    out_ += startup_problems(warnings, not_run)
    out_ += partition_problems(report, current)
    out_ += quarantine_problems(report)
    out_ += unproven_problems(report, suffix, rebuilt)
    out_ = another_environments(report, out_, suffix)
    out_ += mixed_gpus(fp)
    out_ += no_target_problems(report)
    return sorted(out_, key=lambda p: (-int(p.severity), p.code))


def every_problem(report, fp, digest: str | None, paths, rebuilt: bool, tools) -> list[Problem]:
    """What ``doctor`` says, worst first: :func:`problems` of the scan and the start-up checks, then reduced
    protection (``tools``: :func:`_common.tool_protection`, read once a run), pending proofs, settings that do
    nothing and kernels compiled again under new keys."""
    probs = problems(
        report,
        fp,
        digest,
        startup_warnings(fp, report),
        paths,
        rebuilt,
        startup_not_run(fp, report),
    )
    return sorted(
        probs
        + protection_problems(report, tools)
        + pending_proofs(report)
        + misconfig_problems()
        + always_miss_problems(digest),
        key=lambda p: (-int(p.severity), p.code),
    )


def fix_suffix(report, paths) -> str:
    """What every fix command repeats of this run so that it acts on the same caches, judged the same way:
    ``--target`` when given on the command line, then the paths (quoted for the shell)."""
    tgt = report.target
    suffix = f" --target sm_{tgt.arch}" if tgt.source == "cli" and tgt.arch else ""
    return suffix + "".join(" " + shlex.quote(display(p)) for p in paths)


def _code_counts(report) -> tuple[dict[str, int], dict[str, int]]:
    """(code -> entries with a finding of it, root -> entries whose only corrupt findings are files this user
    may not read): an entry counts once per code; the unreadable ones are counted apart, not as damage."""
    counts: dict[str, int] = {}
    denied: dict[str, int] = {}
    for e in report.entries:
        fs = e.findings
        codes = dict.fromkeys(f.code for f in fs)
        if "unreadable" in codes:  # its own problem per root, with the chmod that fixes it
            del codes["unreadable"]
            denied[e.root] = denied.get(e.root, 0) + 1
        for code in codes:
            counts[code] = counts.get(code, 0) + 1
    return counts, denied


def finding_problems(report, suffix: str) -> list[Problem]:
    """One problem per finding code of the entries (its catalog fix), then one per root of unreadable entries."""
    counts, denied = _code_counts(report)
    out_: list[Problem] = []
    for code, n in counts.items():
        fix = CATALOG[code].fix
        noun = "kernel" if code == "not-reproducible" else "entry"
        out_.append(
            Problem(
                code,
                CODES[code],
                n,
                f"{plural(n, noun)} {CATALOG[code].what}",
                fix + suffix if fix else None,
            )
        )
    for root, n in denied.items():
        # Not damage: this user may not read them. Cleaning would move entries their owner can use.
        out_.append(
            Problem(
                "unreadable",
                Severity.ERROR,
                n,
                f"{plural(n, 'entry')} in {display(out.short_path(root))} with files this user may not "
                "read (a permission problem, not damage)",
                f"ls -l {shlex.quote(display(root))}; then chmod -R u+rX, or run jitwarden as their owner",
            )
        )
    return out_


def cache_root_problems(report) -> list[Problem]:
    """The cache roots' own problems (an unsafe owner or mode, a root that cannot be read), each with the
    ``chmod``/``chown`` that fixes it."""
    out_: list[Problem] = []
    for c in report.caches:
        path = display(c.root.path)
        for f in c.findings:
            out_.append(
                Problem(
                    f.code,
                    f.severity,
                    1,
                    f"{path}: {f.message}",
                    _root_fix(f, c.root.path, path),
                )
            )
        if c.error and not any(f.code == "unreadable" for f in c.findings):
            out_.append(
                Problem("corrupt", Severity.ERROR, 1, display(c.error), f"chmod u+rwx {path}")
            )
    return out_


def _root_fix(f, root: str, shown: str) -> str:
    """The command that clears a root's finding: ``chmod`` for a mode, the owner's for a root this user may
    not read (``chmod u+rwx`` when it is this user's, else ``chown`` or running as its owner)."""
    if f.code == "unreadable":
        try:
            mine = os.stat(root).st_uid == os.geteuid()
        except OSError:
            mine = False
        if mine:
            return f"chmod u+rwx {shown}"
        return f"sudo chown -R $USER {shown}  (or run jitwarden as its owner)"
    return f"chmod o-w {shown}" if "writable" in f.message else f"chown -R $USER {shown}"


def startup_problems(warnings, not_run) -> list[Problem]:
    """The start-up checks' warnings, (kind, text, fix) each, then the checks that could not run, (check, why)."""
    out_ = [Problem(kind, Severity.WARN, 1, text, fix) for kind, text, fix in warnings]
    for check, why in not_run:
        out_.append(
            Problem(
                "not-run", Severity.INFO, 1, f"start-up check {check} could not run: {why}", None
            )
        )
    return out_


def quarantine_problems(report) -> list[Problem]:
    """The entries in quarantine, here and elsewhere, as one line of information: nothing needs doing."""
    quarantined = sum(c.quarantined for c in report.caches) + elsewhere_quarantined(report)
    if not quarantined:
        return []
    return [
        Problem(
            "quarantined",
            Severity.INFO,
            quarantined,
            f"{plural(quarantined, 'entry')} in quarantine",
            "nothing needs doing: see them with `jitwarden quarantine ls`, put one back with "
            "`jitwarden quarantine restore ID`, delete them for good with `jitwarden quarantine empty`",
        )
    ]


def no_target_problems(report) -> list[Problem]:
    """With no GPU visible and no ``--target``, the arch checks were skipped: say so, and name the target most
    of the entries are for when they record one."""
    if report.target.arch is not None:
        return []
    archs: dict[int, int] = {}
    for e in report.entries:
        if e.arch:
            archs[e.arch] = archs.get(e.arch, 0) + 1
    if archs:
        best = max(archs, key=lambda a: archs[a])
        hint = f"jitwarden doctor --target sm_{best}  (most entries here are for sm_{best}; name the GPU that runs them)"
    else:
        hint = "jitwarden doctor --target sm_XX  (the GPU's compute capability: 90 for H100/H200)"
    return [
        Problem(
            "no-target",
            Severity.INFO,
            0,
            "no GPU visible and no --target: arch checks of cache "
            "entries and of torch and ptxas skipped",
            hint,
        )
    ]


def unproven_problems(report, suffix: str, rebuilt: bool) -> list[Problem]:
    """The entries only structural checks vouch for (verdict ``unproven``, as ``verify`` counts them), with
    what proves them: ``--rebuild`` for Triton kernels not rebuilt yet, the guard's seal at first use (pure)."""
    unproven = [e for e in report.entries if e.verdict == "unproven"]
    if not unproven:
        return []
    kernels = sum(e.kind == "triton" and e.type == "kernel" for e in unproven)
    fix = (
        "the guard proves and seals each kernel the first time a workload uses it "
        "(`jitwarden run -- CMD`, the vLLM plugin)"
    )
    if kernels and not rebuilt:
        fix += f"; `jitwarden doctor --rebuild{suffix}` proves the {plural(kernels, 'Triton kernel')} now"
    return [
        Problem(
            "unproven",
            Severity.INFO,
            len(unproven),
            f"{plural(len(unproven), 'entry')} unproven: only structural checks passed, which another "
            "kernel's code under the same key passes too (`--strict` fails on them)",
            fix,
        )
    ]


def recorded_writer(report, entries) -> str | None:
    """The Python the partitions holding most of ``entries`` record as their writer
    (``store.partition.PartitionInfo.python``), when it still exists and is not the one judged against; None
    when no partition records one (a stock root), or when the record proves nothing: a fix line is pasted and
    run, so the partition must be this user's and the Python this user's or root's, writable by no one else
    (docs/threat-model.md)."""
    import sys

    from jitwarden.env import interpreter
    from jitwarden.store import partition

    by_root: dict[str, int] = {}
    for e in entries:
        by_root[e.root] = by_root.get(e.root, 0) + 1
    partitions = {c.root.path for c in report.caches if c.root.partition}
    for root in sorted(by_root, key=lambda r: -by_root[r]):
        info = partition.read_info(root) if root in partitions else None
        python = info.python if info is not None else None
        other = interpreter.current()
        judged = other.executable if other is not None else sys.executable
        if python and python != judged and _ours(root) and _ours(python):
            return python
    return None


def _ours(path: str) -> bool:
    """``path`` (followed to what it names) is this user's or root's, and writable by no one else."""
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    return st.st_uid in (os.getuid(), 0) and not st.st_mode & 0o022


def another_environments(report, probs: list[Problem], suffix: str) -> list[Problem]:
    """``probs`` with the ``stale`` line split by root: a root (or partition) most of whose entries another
    toolchain built is another environment's cache, still in use there (a workload's venv beside a standalone
    jitwarden), not dead weight. Its entries are said to be so (``other-environment``), with the command that
    judges them against that environment, and no ``clean --stale`` that would take them is offered: what
    stays ``stale`` gets a ``clean`` of its own roots only (pure, but for the partitions' records)."""
    stale, judged, theirs = _common.other_environments(report)
    if not theirs:
        return probs
    mine = [r for r in stale if r not in theirs]
    out_ = [p for p in probs if p.code != "stale"]
    tgt = report.target
    target = f" --target sm_{tgt.arch}" if tgt.source == "cli" and tgt.arch else ""
    if mine:
        n = sum(len(stale[r]) for r in mine)
        roots = " ".join(shlex.quote(display(r)) for r in mine)
        out_.append(
            Problem(
                "stale",
                CODES["stale"],
                n,
                f"{plural(n, 'entry')} {CATALOG['stale'].what}",
                f"jitwarden clean --stale{target} {roots}",
            )
        )
    entries = [e for r in theirs for e in stale[r]]
    total = sum(judged[r] for r in theirs)
    fix = _python_fix(recorded_writer(report, entries), suffix)
    out_.append(
        Problem(
            "other-environment",
            Severity.WARN,
            len(entries),
            f"{len(entries)} of {plural(total, 'entry')} in {plural(len(theirs), 'root')} "
            f"{'was' if len(entries) == 1 else 'were'} built by "
            f"{_common.writers(entries)}, not by the environment judged against "
            f"({out.environment_words(report.judge)}): most likely another environment's cache, in use "
            "there; `clean --stale` would quarantine what that environment loads",
            fix,
        )
    )
    return out_


def _python_fix(writer: str | None, suffix: str) -> str:
    """The ``doctor --python`` that judges another environment's entries: the Python its partitions
    record as their writer, else PATH for the user to name."""
    if writer:
        return (
            f"jitwarden doctor --python {shlex.quote(display(writer))}{suffix}  (the Python that wrote "
            "these partitions, as they record it)"
        )
    return (
        f"jitwarden doctor --python PATH{suffix}  (PATH: the Python of the environment that writes "
        f"this cache, or set {settings.PYTHON.name})"
    )


def mixed_gpus(fp) -> list[Problem]:
    """The GPUs this process sees mix compute capabilities (pure over the fingerprint's GPU list).

    One process picks one partition from all the GPUs it sees; a rank that sees several kinds
    shares it across them, and a device index can name another GPU in another process's order.
    One GPU kind per process (as vLLM and torchrun ranks do with ``CUDA_VISIBLE_DEVICES``) keeps
    each kind's kernels in a partition of its own."""
    gpus = list(getattr(fp, "gpus", None) or ())
    kinds: dict[tuple, list[str]] = {}
    for g in gpus:
        if g.capability:
            kinds.setdefault(tuple(g.capability), []).append(str(g.index))
    if len(kinds) < 2:
        return []
    parts = [f"sm_{c[0]}{c[1]} (GPU {', '.join(ix)})" for c, ix in sorted(kinds.items())]
    first = min(kinds.items())[1]
    return [
        Problem(
            "mixed-gpus",
            Severity.WARN,
            len(gpus),
            f"the visible GPUs mix compute capabilities: {'; '.join(parts)}; one process shares one partition "
            "across them, and a device index can name another GPU in a process that orders them differently",
            f"export CUDA_VISIBLE_DEVICES={','.join(first)}  (one GPU kind per process; vLLM and torchrun "
            "ranks each see one GPU)",
        )
    ]


PRUNE_AGE = _common.UNUSED_PARTITION_AGE
"""The age ``doctor`` suggests pruning other environments' partitions at (``prune --older-than 30d``)."""


def partition_problems(report, current: str | None, now: float | None = None) -> list[Problem]:
    """Partitions of other environments: those unused for longer than :data:`PRUNE_AGE` with the ``prune``
    command that removes exactly them; the younger ones (another venv's or GPU's, in use) as information only.
    Ages are read as ``prune`` reads them (``ops.maintenance.partition_facts``), so the fix clears the line."""
    import time

    others = [c for c in report.caches if c.root.partition and c.root.partition != current]
    if not others:
        return []
    now = time.time() if now is None else now
    ages = _partition_ages(others, current, now)
    old = {d for d, a in ages.items() if a > PRUNE_AGE}
    young = set(ages) - old
    out_ = []
    if old:
        size = human_size(sum(c.bytes for c in others if c.root.partition in old))
        out_.append(
            Problem(
                "partitions",
                Severity.INFO,
                len(old),
                f"{plural(len(old), 'partition')} of other "
                f"environments unused for more than 30 days ({size})",
                "jitwarden prune --older-than 30d",
            )
        )
    if young:
        size = human_size(sum(c.bytes for c in others if c.root.partition in young))
        newest = min(ages[d] for d in young)
        out_.append(
            Problem(
                "partitions-recent",
                Severity.INFO,
                len(young),
                f"{plural(len(young), 'partition')} of other environments used within 30 days ({size}; "
                f"the latest {human_age(now - newest, now)} ago): another venv, container or GPU may use them",
                None,
            )
        )
    return out_


def _partition_ages(others, current: str | None, now: float) -> dict[str, float]:
    """digest -> seconds since the partitions of that digest among ``others`` (scanned roots) were last
    used, the youngest of them, read as ``prune`` reads it."""
    from jitwarden.ops import maintenance
    from jitwarden.store import partition

    infos: dict[str, dict] = {}
    ages: dict[str, float] = {}
    for c in others:
        base = c.root.base or partition.base_of(c.root.path)
        if base not in infos:
            infos[base] = dict(partition.list_partitions(base))
        f = maintenance.partition_facts(
            base,
            c.root.path,
            c.root.partition,
            getattr(infos[base].get(c.root.path), "last_used", None),
            current,
        )
        ages[c.root.partition] = min(ages.get(c.root.partition, now), now - f.last_used)
    return ages


def _archs(fp, report) -> tuple[int, ...]:
    """The GPUs the start-up checks judge for: ``--target`` when given, else the visible ones."""
    from jitwarden.runtime import startup_checks as sc

    tgt = report.target
    return sc.archs_of(fp, tgt.arch if tgt.source == "cli" else None)


def startup_not_run(fp, report) -> list[tuple[str, str]]:
    """(check, why) of each start-up check that could not run for the judged GPUs."""
    if fp is None:
        return [("torch-arch, ptxas", "no fingerprint of this machine")]
    from jitwarden.runtime import startup_checks as sc

    archs = _archs(fp, report)
    if not archs:
        return []  # said once, by the no-target line
    return [(o.check, o.not_run) for o in sc.run_checks(fp, archs) if o.not_run]


def elsewhere_quarantined(report) -> int:
    """Entries in the quarantines of roots jitwarden remembers (``clean /some/root``) that this scan did not cover."""
    from jitwarden.store import qregistry
    from jitwarden.store import quarantine as q

    scanned = {os.path.realpath(c.root.path) for c in report.caches}
    n = 0
    for root in qregistry.roots():
        if os.path.realpath(root) not in scanned:
            n += len(q.list_root(root))
    return n


def startup_warnings(fp, report) -> list[tuple[str, str, str | None]]:
    """The guard's start-up warnings as (kind, text, fix), for ``--target`` when given, else the visible GPUs:
    torch arch list, ptxas, shared unpartitioned roots."""
    if fp is None:
        return []
    from jitwarden.runtime import startup_checks as sc

    archs = _archs(fp, report)
    out_ = []
    for w in sc.torch_arch(fp, archs):
        out_.append(("torch-arch", w, "pip install a torch build whose arch list has this GPU"))
    for p in sc.ptxas_problems(fp, archs):  # the variable from the record, not from the sentence
        out_.append(
            (
                "ptxas",
                p.sentence(),
                f"export {p.variable}=/usr/local/cuda/bin/ptxas  (a CUDA release that supports the GPU)",
            )
        )
    seen = set()
    for c in report.caches:
        if c.root.partition or c.root.source == "partition" or not c.entries or c.root.path in seen:
            continue
        seen.add(c.root.path)
        try:
            tp = fp.package("triton")
            shared = sc.shared_root(
                c.root.path,
                archs,
                tp.version if tp else None,
                advice=None if _partitions_off() else "run `jitwarden verify` on it",
            )
        except Exception:
            shared = []
        for w in shared:
            out_.append(
                (
                    "shared-root",
                    w,
                    "run workloads partitioned by fingerprint (`jitwarden run -- CMD`, the vLLM "
                    "plugin), so each GPU and toolchain writes its own partition; the entries "
                    "built for others stay theirs (nothing here removes them)",
                )
            )
    from jitwarden.runtime import (
        hookshapes,
        proof,
    )  # proofs off, torch loaders that cannot be wrapped
    from jitwarden.runtime.remote_wiring import (
        unguarded,
    )  # fleets: TorchInductor's remote caches, which torch lets nobody guard

    for w in unguarded(os.environ):
        out_.append(
            (
                "remote-unguarded",
                w,
                f"share kernels through {settings.REMOTE.name} (signed, namespaced by "
                "fingerprint) or signed bundles (jitwarden export / import) instead",
            )
        )
    return out_ + proof.doctor_warnings() + hookshapes.doctor_warnings()


def misconfig_problems(env=None) -> list[Problem]:
    """A warning for each setting that silently does nothing: a cache dir variable naming a file, the remote
    cache's URL, trusted keys, credentials or server (``ops/config_checks.py``)."""
    from jitwarden.ops import config_checks

    return [
        Problem(m.code, Severity.WARN, 1, m.message, m.fix)
        for m in config_checks.check(os.environ if env is None else env)
    ]


def _partitions_off() -> bool:
    return settings.PARTITION.weakened(os.environ)


def pending_proofs(report) -> list[Problem]:
    """Unsealed kernels hidden for their first-use proof (jitwarden.runtime.hiding): info while a prover
    works on them, a warning when the prover that hid them is gone (each is a recompile until the next start)."""
    from jitwarden.runtime import hiding, tree

    out_, seen = [], set()
    for c in report.caches:
        trees = tree.tree_roots(c.root.kind, c.root.path)
        for t in trees:
            if t in seen:
                continue
            seen.add(t)
            n = len(hiding.staged(t))
            if not n:
                continue
            what = (
                f"{plural(n, 'unsealed kernel')} of {display(t)} hidden for their first-use proof"
            )
            if hiding.alive(t):
                out_.append(
                    Problem(
                        "proofs-pending",
                        Severity.INFO,
                        n,
                        f"{what}: being proven now; a lookup of one waits for it",
                        None,
                    )
                )
            else:
                out_.append(
                    Problem(
                        "proofs-pending",
                        Severity.WARN,
                        n,
                        f"{what}: the prover that hid them stopped, so "
                        "each is recompiled when used until the next start-up proves them",
                        "jitwarden run -- YOUR_COMMAND  (its start-up proves them and puts them back)",
                    )
                )
    return out_


def always_miss_problems(digest) -> list[Problem]:
    """A warning for each kernel a recorded workload compiles again under a new key, naming what changed."""
    return [
        Problem(
            "always-miss",
            Severity.WARN,
            m.compiles,
            f"{name}: {m.line().split('; fix: ')[0]}",
            m.fix or None,
        )
        for name, m in _common.always_misses(digest)
    ]


# --- reduced protection and leftover trash (the runtime's own report; see `status`) -------------


def protection_problems(report, tools, env=None) -> list[Problem]:
    """A warning for each setting that lowers protection and each trash a killed deletion left (pure over
    the environment and the roots the scan found), and for each of ``tools`` (:func:`_common.tool_protection`,
    read once a run) whose load hook would not be installed (its functions of a shape this jitwarden does not know)."""
    out = [
        Problem(n["kind"], Severity.WARN, 1, f"{n['what']}: {n['why']}", n["fix"])
        for n in _common.protection_lines(report, env)
    ]
    for p in tools:
        hooked = p.state == "load hook" and p.why is None
        if hooked or (p.why or "").endswith("=0"):  # off by a setting: said by its own line above
            continue
        out.append(Problem("unhooked", Severity.WARN, 1, p.line()))
    return out
