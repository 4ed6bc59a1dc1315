"""Steps the bundle commands share (not a command): ``export`` and ``push`` make a bundle, ``import`` and
``pull`` install one, with one selection, one install path and one wording of what differs.

Commands import this module, never each other (the independence contract in pyproject).
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jitwarden import __version__
from jitwarden.cli import render as out
from jitwarden.cli.commands import _common
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, EXIT_OTHER_ENV, UsageError
from jitwarden.model.findings import Severity

if TYPE_CHECKING:
    from jitwarden.ops.bundle import Manifest


def add_bundle_arguments(p, unsigned_help: str) -> None:
    """``--kind``, ``--key`` and ``--unsigned``: what goes into a bundle and who signs it (export, push)."""
    from jitwarden.model import settings

    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help="only these partitioned cache kinds (repeatable): triton, inductor, vllm, torch-ext",
    )
    p.add_argument(
        "--key",
        metavar="PATH",
        help=f"secret key (default: {settings.SIGNING_KEY.name}, else <config>/signing-key)",
    )
    p.add_argument("--unsigned", action="store_true", help=unsigned_help)


def select(report) -> tuple[list, list]:
    """(entries to export, [(entry, why not)]): anything with a finding at warn level or above stays home."""
    take, leave = [], []
    for e in report.entries:
        worst = max((f.severity for f in e.findings), default=None)
        if worst is not None and worst >= Severity.WARN:
            codes = sorted({f.code for f in e.findings if f.severity >= Severity.WARN})
            leave.append((e, "verify: " + ", ".join(codes)))
        elif e.kind == "triton" and not e.sealed:
            leave.append((e, "not sealed"))
        else:
            take.append(e)
    return take, leave


def load_signer(key: str | None, unsigned: bool):
    """The secret key to sign with (``--key``, else the setting, else the config dir); None when ``unsigned``."""
    from jitwarden.ops import keys

    if unsigned:
        return None
    path = keys.signing_key_path(key)
    try:
        return keys.load_signing_key(path)
    except keys.KeyTooOpen as exc:
        raise UsageError(str(exc)) from None
    except keys.KeyError_ as exc:
        raise UsageError(f"{exc} (make one with `jitwarden keygen`, or pass --unsigned)") from None


@dataclass(frozen=True, kw_only=True)
class BundleContents:
    """What a bundle of this node would carry: the manifest, the partitions its paths are relative to,
    the entries left home and why, and this node's fingerprint."""

    fp: Any  # env.fingerprint.Fingerprint
    manifest: Manifest
    partitions: dict
    skipped: list


def bundle_contents(kinds, req, orphans: float) -> BundleContents:
    """This fingerprint's entries that pass verify (``req``: rebuilt first) and whose seal holds."""
    from jitwarden.env import fingerprint, locations
    from jitwarden.model import kinds as rows
    from jitwarden.model.entries import CacheRoot
    from jitwarden.ops import bundle
    from jitwarden.ops import scan as scanner
    from jitwarden.store import partition

    fp = fingerprint.of_host()
    digest = fp.digest
    env = os.environ
    roots: list[tuple[CacheRoot, list[str] | None]] = []
    partitions = {}
    for kind in (k.name for k in rows.bundled()):
        if kind not in kinds:
            continue
        base = locations.partition_base(kind, env)
        pdir = partition.path_for(base, digest)
        if os.path.isdir(pdir) and not os.path.islink(pdir):
            roots.append(
                (
                    CacheRoot(
                        kind=kind, path=pdir, source="partition", partition=digest, base=base
                    ),
                    None,
                )
            )
            partitions[kind] = pdir
    target = _common.resolve_target(None, fp)
    judge = scanner.make_judge(target.arch, orphans, fp=fp)
    report = scanner.scan(roots, judge, target, expand=False)
    if req is not None:
        report = _common.rebuilt(report, req)
    take, leave = select(report)
    entries, judged, skipped = [], [], list(leave)
    for e in take:
        rec = bundle.describe(e.kind, partitions[e.kind], e.path, e.sealed)
        if isinstance(rec, str):
            skipped.append((e, rec))
        else:
            entries.append(rec)
            judged.append(e)
    # What pull would refuse stays home: an entry that loads one the bundle does not carry (an AOTAutograd
    # result whose FX graph was left out) is refused by the node's judge, so it is left out here, saying so.
    needs = {i: bundle.loads(e) for i, e in enumerate(judged)}
    out = bundle.with_dependencies(entries, needs, {}, elsewhere=False)
    skipped += [(judged[i], why) for i, why in sorted(out.items())]
    entries = [rec for i, rec in enumerate(entries) if i not in out]
    producer = {"jitwarden": __version__, **{p.name: p.version for p in fp.packages}}
    manifest = bundle.Manifest(
        digest, fp.to_json(), producer, time.time(), tuple(entries), recorded_workloads(digest)
    )
    return BundleContents(fp=fp, manifest=manifest, partitions=partitions, skipped=skipped)


def kinds(args) -> tuple[str, ...]:
    """The partitioned kinds ``--kind`` names (all of them by default); UsageError for another."""
    from jitwarden.model import kinds as rows

    carried = tuple(k.name for k in rows.bundled())
    chosen = _common.kinds_of(args) or carried
    bad = [k for k in chosen if k not in carried]
    if bad:
        raise UsageError(
            f"--kind {bad[0]}: only partitioned kinds can be exported ({', '.join(carried)})"
        )
    return chosen


def print_skipped(skipped) -> None:
    for e, why in skipped:
        print(f"skipped {e.kind} {out.short_path(e.path)}: {why}", file=sys.stderr)


# ---------------------------------------------------------------- install (import, pull)


def brief(fp) -> str:
    """A fingerprint's headline for a refusal: its GPUs, or "no GPU" without the probe's notes ("no GPU visible
    (nvml: libnvidia-ml.so.1 not found…)" says why this machine saw none, not what a bundle was built for)."""
    head = fp.headline()
    return head if fp.gpus else head.replace(fp.gpu_str(), "no GPU", 1)


def theirs_headline(fingerprint_json: dict, digest: str) -> str:
    try:
        from jitwarden.env.fingerprint import Fingerprint

        return brief(Fingerprint.from_json(fingerprint_json))
    except ValueError:
        return f"fp {digest}"


def differences(fingerprint_json: dict, fp) -> tuple:
    """What differs from a bundle's fingerprint to this node's (``fingerprint --diff``'s changes)."""
    from jitwarden.env.fingerprint import Fingerprint
    from jitwarden.env.fingerprint_diff import diff

    try:
        return tuple(diff(Fingerprint.from_json(fingerprint_json), fp))
    except ValueError:
        return ()


def mismatch_line(theirs: str, ours: str, diffs) -> str:
    what = (
        "; ".join(f"{d.component} {d.old} -> {d.new}" for d in diffs[:4]) or "fingerprints differ"
    )
    return f"not installed: built for {theirs}; this node is {ours} ({what})"


def add_all_or_nothing_argument(p) -> None:
    p.add_argument(
        "--all-or-nothing",
        action="store_true",
        help="install nothing when verify's judge refuses any entry (default: install each entry that "
        "passes and name each refused one with its reason)",
    )


def judge(fp):
    """``verify``'s judge of this node (its GPU, else arch checks skipped): what each entry is judged by."""
    from jitwarden.ops import scan

    return scan.make_judge(_common.resolve_target(None, fp).arch, fp=fp)


def install(source: str, tar, opened, fp, dry_run: bool, all_or_nothing: bool = False):
    """Install an opened bundle (signature judged) into this node's partitions: (ImportReport, exit code).

    Another fingerprint: nothing installed, exit 4, what differs. Every digest checked, each entry
    judged as ``verify`` judges it, staged, moved in by rename and sealed (``ops.bundle_install.install``;
    ``all_or_nothing``: one refused entry keeps every other out too).
    """
    from jitwarden.ops import bundle, bundle_install

    digest = fp.digest
    m = opened.manifest

    def report(code: int, **kw):
        base = {
            "path": source,
            "digest_bundle": m.digest,
            "digest_here": digest,
            "signed_by": opened.signed_by,
            "signature_note": opened.signature_note,
            "dry_run": dry_run,
        }
        return bundle_install.ImportReport(**{**base, **kw}), code

    if m.digest != digest:
        diffs = differences(m.fingerprint, fp)
        why = mismatch_line(theirs_headline(m.fingerprint, m.digest), brief(fp), diffs)
        skipped = tuple(
            bundle_install.Outcome(e.kind, e.path, "skipped", why, None, e.bytes) for e in m.entries
        )
        return report(EXIT_OTHER_ENV, differences=diffs, outcomes=skipped)
    dests = bundle_install.destinations(m, digest, os.environ)
    try:
        outcomes = bundle_install.plan(m, dests)
        if not dry_run:
            note = {"bundle_key": opened.signed_by, "bundle_created": m.created, **m.producer}
            outcomes = bundle_install.install(
                tar, m, outcomes, dests, digest, note, judge(fp), all_or_nothing
            )
    except bundle.BundleRefused as exc:
        return report(EXIT_FINDINGS, refused=str(exc))
    except (
        OSError
    ) as exc:  # a symlinked jitwarden-v1, partition or subdirectory; a read-only or full volume
        where = (
            f" ({exc.filename})"
            if exc.filename and str(exc.filename) not in str(exc.strerror)
            else ""
        )
        return report(EXIT_FINDINGS, refused=f"cannot install: {exc.strerror or exc}{where}")
    if not dry_run:
        touch_partitions(dests, digest, fp.headline())
        learn_workloads(m)
    rep, _ = report(EXIT_OK, outcomes=tuple(outcomes))
    return rep, EXIT_FINDINGS if rep.counts()["refused"] else EXIT_OK


def recorded_workloads(digest: str) -> dict:
    """Every workload recorded here for ``digest`` (``run --record``), as the kernel lists a bundle carries."""
    from jitwarden.ops import workload

    out = {}
    for _d, name in workload.recorded(digest=digest):
        w = workload.load(name.replace("--", "/"), digest)
        if w is not None and w.events:
            out[w.name] = workload.summary(w)
    return out


def learn_workloads(m) -> None:
    """This node records the workloads a bundle lists (issue 44: ``coverage NAME`` after a pull); a warning when not."""
    from jitwarden.ops import workload

    for name, rows in m.workloads.items():
        try:
            workload.learn(workload.from_summary(name, m.digest, rows))
        except OSError as exc:
            print(
                f"jitwarden: warning: workload {name}: its kernel list not recorded ({exc.strerror or exc})",
                file=sys.stderr,
            )


def touch_partitions(dests: dict, digest: str, headline: str) -> None:
    from jitwarden.store import partition

    for kind, pdir in dests.items():
        if os.path.isdir(pdir):
            try:
                partition.ensure(pdir, digest, headline, kind)
            except (
                OSError
            ) as exc:  # bookkeeping only: the entries are in; say why it was not recorded
                print(
                    f"jitwarden: warning: {pdir}: last use not recorded ({exc.strerror or exc})",
                    file=sys.stderr,
                )


def finish(rep, args, code: int, command: str = "import", extra: dict | None = None) -> int:
    """Print an install's report (``--format``) and return ``code``."""
    out.output_format(args).result(
        command, lambda: {**rep.to_json(), **(extra or {}), "exit": code}, lambda: print_report(rep)
    )
    return code


def print_report(rep) -> None:
    if rep.refused:
        print(f"jitwarden: bundle refused: {rep.refused}; nothing installed", file=sys.stderr)
        return
    print(
        f"{rep.path}: {rep.signature_note}; fingerprint {rep.digest_bundle}"
        + (
            " (matches this node)"
            if rep.digest_bundle == rep.digest_here
            else f", this node {rep.digest_here}"
        )
    )
    if rep.differences:
        print("what differs (bundle -> this node):")
        for d in rep.differences:
            print(f"  {d.component}: {d.old} -> {d.new}: {d.why}")
    verb = "would install" if rep.dry_run else "installed"
    for o in rep.outcomes:
        if o.action == "installed":
            print(f"{verb} {o.kind} {o.path}" + (f" -> {out.short_path(o.dest)}" if o.dest else ""))
        elif o.action == "present":
            print(f"present {o.kind} {o.path}")
        elif o.action == "refused":
            print(f"refused {o.kind} {o.path}: {o.why}; not installed", file=sys.stderr)
        elif rep.digest_bundle == rep.digest_here:
            print(f"skipped {o.kind} {o.path}: {o.why}")
    c = rep.counts()
    if rep.digest_bundle != rep.digest_here and rep.outcomes:
        print(rep.outcomes[0].why, file=sys.stderr)
    print(
        f"{c['installed']} {verb}, {c['present']} already present, {c['skipped']} skipped"
        + (f", {c['refused']} refused" if c["refused"] else ""),
        file=sys.stderr,
    )


# ---------------------------------------------------------------- registries (push, pull)


def add_insecure_argument(p) -> None:
    p.add_argument(
        "--insecure",
        action="store_true",
        help="talk plain HTTP to the registry (no TLS: anyone on the path can read and change what is sent)",
    )


def registry_ref(text: str):
    """The parsed REF (formats.oci.Ref); UsageError in one line."""
    from jitwarden.formats import oci as wire

    try:
        return wire.parse_ref(text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def registry_for(ref, insecure: bool):
    """A client of ``ref``'s repository with the credentials filed for its host; ``--insecure`` said loudly."""
    from jitwarden.formats import oci as wire
    from jitwarden.model import settings
    from jitwarden.ops import oci as registry

    try:
        creds = registry.credentials(ref.registry, os.environ)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if insecure:
        print(
            f"jitwarden: WARNING: --insecure: plain HTTP to {ref.registry}, no TLS"
            + (
                ": credentials and bundles travel readable and changeable by anyone on the path"
                if creds
                else ""
            )
            + " (signatures and digests are still checked)",
            file=sys.stderr,
        )
    timeout = settings.OCI_TIMEOUT.number(os.environ) or settings.OCI_TIMEOUT.default
    client = wire.Client(ref, insecure=insecure, timeout=timeout, credentials=creds)
    return registry.Registry(client)


@contextlib.contextmanager
def registry_errors(ref):
    """A registry that is down, slow, refusing or outside the protocol: one line, exit 2."""
    from jitwarden.formats import oci as wire

    try:
        yield
    except wire.RegistryError as exc:
        raise UsageError(
            f"registry {ref.registry}: {exc}".replace(f": {ref.registry}: ", ": ", 1)
        ) from None


@contextlib.contextmanager
def blob_file():
    """An unnamed temp file for a bundle on its way to or from a registry (store/blobfile)."""
    from jitwarden.store.blobfile import BlobFile

    try:
        f = BlobFile()
    except OSError as exc:
        raise UsageError(
            f"cannot make a temporary file ({exc.strerror or exc}); set TMPDIR"
        ) from None
    try:
        yield f
    finally:
        f.close()


def progress(total: int, label: str):
    """A progress bar for a layer of at least 8 MiB (none for small ones)."""
    from jitwarden.cli.render.progress import progress_bar

    return progress_bar(total if total >= 8 << 20 else 0, label)
