"""``jitwarden import FILE``: install a signed bundle's entries into this environment's partitions.

Checks the signature against the trusted keys, then compares the bundle's fingerprint with
this node's and says what differs; installs only when they match, every digest checked,
each entry staged, moved in by rename, then sealed. Made for an init container:

- 0: every entry installed or already present;
- 1: refused: unsigned, untrusted or bad signature, tampered or unsafe content (nothing installed);
- 2: usage error (no such file, bad option);
- 4: a sound bundle built for another environment: nothing installed, the differences are printed.
"""

from __future__ import annotations

import errno
import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, ExitStatus, UsageError

EXIT_OTHER_ENV = ExitStatus.OTHER_ENVIRONMENT


def register(sub) -> None:
    p = sub.add_parser(
        "import",
        help="install a signed cache bundle made by `jitwarden export`",
        description="Check a bundle's signature and digests and install the entries built for this "
        "environment. Exit 0 installed, 1 refused, 2 usage, 4 built for another environment.",
    )
    p.add_argument("bundle", metavar="FILE")
    p.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="install an unsigned bundle, or one whose signature is not trusted (digests are still checked)",
    )
    p.add_argument(
        "--dry-run", action="store_true", help="check everything and say what would be installed"
    )
    options.add_format_argument(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.env import fingerprint
    from jitwarden.ops import bundle, keys

    trusted = keys.load_trusted()  # keys.KeyError_: a usage error, by the error table
    fp = fingerprint.collect()
    digest = fp.digest
    refused, opened, tar = None, None, None
    try:
        tar, opened = bundle.open_bundle(args.bundle, trusted, args.allow_unsigned)
    except bundle.Unsigned as exc:
        refused = f"{exc} (pass --allow-unsigned to install it anyway)"
    except bundle.BundleRefused as exc:
        refused = str(exc)
    except keys.KeyError_ as exc:
        refused = str(exc)
    except OSError as exc:
        raise UsageError(_not_a_bundle_file(args.bundle, exc)) from None
    if refused is not None:
        rep = bundle.ImportReport(
            args.bundle, "", digest, None, "", refused=refused, dry_run=args.dry_run
        )
        return _finish(rep, args, EXIT_FINDINGS)
    assert opened is not None  # opened, or refused above
    try:
        m = opened.manifest
        diffs: tuple[fingerprint.Change, ...] = ()
        if m.digest != digest:
            try:
                theirs = fingerprint.Fingerprint.from_json(m.fingerprint)
                diffs = tuple(fingerprint.diff(theirs, fp))
            except ValueError:
                diffs = ()
            why = _mismatch_line(theirs_headline(m), brief(fp), diffs)
            skipped = tuple(
                bundle.Outcome(e.kind, e.path, "skipped", why, None, e.bytes) for e in m.entries
            )
            rep = bundle.ImportReport(
                args.bundle,
                m.digest,
                digest,
                opened.signed_by,
                opened.signature_note,
                diffs,
                skipped,
                dry_run=args.dry_run,
            )
            return _finish(rep, args, EXIT_OTHER_ENV)
        dests = bundle.destinations(m, digest, os.environ)
        try:
            outcomes = bundle.plan(m, dests)
        except (
            OSError
        ) as exc:  # a symlinked jitwarden-v1, partition or subdirectory: never written through
            where = (
                f" ({exc.filename})"
                if exc.filename and str(exc.filename) not in str(exc.strerror)
                else ""
            )
            rep = bundle.ImportReport(
                args.bundle,
                m.digest,
                digest,
                opened.signed_by,
                opened.signature_note,
                refused=f"cannot install: {exc.strerror or exc}{where}",
                dry_run=args.dry_run,
            )
            return _finish(rep, args, EXIT_FINDINGS)
        if not args.dry_run:
            try:
                note = {"bundle_key": opened.signed_by, "bundle_created": m.created, **m.producer}
                outcomes = bundle.install(tar, m, outcomes, dests, digest, note)
            except bundle.BundleRefused as exc:
                rep = bundle.ImportReport(
                    args.bundle,
                    m.digest,
                    digest,
                    opened.signed_by,
                    opened.signature_note,
                    refused=str(exc),
                    dry_run=False,
                )
                return _finish(rep, args, EXIT_FINDINGS)
            except OSError as exc:  # a read-only or full cache volume, a link swapped in: one line, never a traceback
                where = (
                    f" ({exc.filename})"
                    if exc.filename and str(exc.filename) not in str(exc.strerror)
                    else ""
                )
                rep = bundle.ImportReport(
                    args.bundle,
                    m.digest,
                    digest,
                    opened.signed_by,
                    opened.signature_note,
                    refused=f"cannot install: {exc.strerror or exc}{where}",
                    dry_run=False,
                )
                return _finish(rep, args, EXIT_FINDINGS)
            _touch_partitions(dests, digest, fp.headline())
        rep = bundle.ImportReport(
            args.bundle,
            m.digest,
            digest,
            opened.signed_by,
            opened.signature_note,
            (),
            tuple(outcomes),
            dry_run=args.dry_run,
        )
        return _finish(rep, args, EXIT_OK)
    finally:
        if tar is not None:
            tar.close()


def _not_a_bundle_file(path: str, exc: OSError) -> str:
    """One line for a bundle path that cannot be opened as a regular file (pure)."""
    if isinstance(exc, FileNotFoundError):
        return f"{path}: no such file"
    if exc.errno == errno.EINVAL or isinstance(
        exc, IsADirectoryError
    ):  # fsutil.NotRegularFile: a directory, a FIFO
        return f"{path}: {exc.strerror}; a bundle is the file `jitwarden export -o FILE` writes"
    return f"{path}: cannot read ({exc.strerror or exc})"


def brief(fp) -> str:
    """A fingerprint's headline for a refusal: its GPUs, or "no GPU" without the probe's notes ("no GPU visible
    (nvml: libnvidia-ml.so.1 not found…)" says why this machine saw none, not what a bundle was built for)."""
    head = fp.headline()
    return head if fp.gpus else head.replace(fp.gpu_str(), "no GPU", 1)


def theirs_headline(m) -> str:
    fpj = m.fingerprint
    try:
        from jitwarden.env.fingerprint import Fingerprint

        return brief(Fingerprint.from_json(fpj))
    except ValueError:
        return f"fp {m.digest}"


def _mismatch_line(theirs: str, ours: str, diffs) -> str:
    what = (
        "; ".join(f"{d.component} {d.old} -> {d.new}" for d in diffs[:4]) or "fingerprints differ"
    )
    return f"not installed: built for {theirs}; this node is {ours} ({what})"


def _touch_partitions(dests: dict, digest: str, headline: str) -> None:
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


def _finish(rep, args, code: int) -> int:
    out.output_format(args).result(
        "import", lambda: {**rep.to_json(), "exit": code}, lambda: _print(rep)
    )
    return code


def _print(rep) -> None:
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
        elif rep.digest_bundle == rep.digest_here:
            print(f"skipped {o.kind} {o.path}: {o.why}")
    c = rep.counts()
    if rep.digest_bundle != rep.digest_here and rep.outcomes:
        print(rep.outcomes[0].why, file=sys.stderr)
    print(
        f"{c['installed']} {verb}, {c['present']} already present, {c['skipped']} skipped",
        file=sys.stderr,
    )
