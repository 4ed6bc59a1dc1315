"""``jitwarden pull REF``: install the bundle an OCI registry holds for this node, checked as ``import`` checks.

The tag's index is read, the bundle of this node's exact fingerprint chosen, its signature checked
against the trusted keys, its layer streamed to an unnamed temp file with its digest checked, then
installed through ``import``'s path (every file's digest, each entry judged, staged, sealed): each entry
that passes goes in, each refused one is named with its reason (``--all-or-nothing``: none goes in). A
bundle whose integrity fails (signature, a digest, the manifest, the fingerprint) installs nothing. Exit
0 installed, 1 refused (the bundle, or an entry of it), 2 usage error or a registry that cannot be used,
4 no bundle for this node (what differs, per candidate).
"""

from __future__ import annotations

import sys

from jitwarden.cli import options
from jitwarden.cli.commands import _bundles, _common
from jitwarden.model.errors import EXIT_FINDINGS, UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "pull",
        help="install the signed bundle an OCI registry holds for this environment",
        description="Pick the bundle of REF built for this exact fingerprint, check its signature and "
        "digests and install it. Exit 0 installed, 1 refused, 2 usage or registry, 4 none for this node.",
    )
    p.add_argument("ref", metavar="REF", help="HOST[:PORT]/REPO[:TAG|@DIGEST]")
    p.add_argument(
        "--dry-run", action="store_true", help="check everything and say what would be installed"
    )
    p.add_argument(
        "--fingerprint",
        metavar="FILE",
        help="install for the environment FILE describes (`jitwarden fingerprint --format json` saved on "
        "a serving node) instead of this one: an image build without the GPU",
    )
    p.add_argument(
        "--allow-older",
        action="store_true",
        help="install a bundle signed before the one this node last pulled from REF for its fingerprint "
        "(a tag moved back on purpose)",
    )
    _bundles.add_all_or_nothing_argument(p)
    _bundles.add_insecure_argument(p)
    options.add_format_argument(p)
    options.examples(
        p,
        "jitwarden pull registry:5000/kernels:latest --dry-run  what would be installed",
        "jitwarden pull registry:5000/kernels:latest            install the bundle of this fingerprint",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.env import fingerprint
    from jitwarden.ops import bundle, bundle_install, keys
    from jitwarden.ops import oci as registry

    ref = _bundles.registry_ref(args.ref)
    try:
        trusted = keys.load_trusted()
    except keys.KeyError_ as exc:
        raise UsageError(str(exc)) from None
    fp = _common.load_fingerprint(args.fingerprint) if args.fingerprint else fingerprint.of_host()
    reg = _bundles.registry_for(ref, args.insecure)

    def differ(theirs: dict, digest: str) -> str:
        diffs = _bundles.differences(theirs, fp)
        return _bundles.mismatch_line(
            _bundles.theirs_headline(theirs, digest), _bundles.brief(fp), diffs
        )

    def refused(why: str, code: int = EXIT_FINDINGS, extra=None) -> int:
        rep = bundle_install.ImportReport(
            str(ref), "", fp.digest, None, "", refused=why, dry_run=args.dry_run
        )
        return _bundles.finish(rep, args, code, "pull", extra)

    with _bundles.registry_errors(ref):
        try:
            chosen = registry.resolve(reg, ref, trusted, fp, differ)
        except registry.NoMatch as exc:
            for line in exc.lines:
                print(f"  {line}", file=sys.stderr)
            return refused(str(exc), _bundles.EXIT_OTHER_ENV, {"candidates": exc.lines})
        except (registry.Refused, bundle.BundleRefused, keys.KeyError_) as exc:
            return refused(str(exc))
        older = _older(args, ref, chosen, fp)
        if older:
            return refused(older)
        with _bundles.blob_file() as layer:
            size = chosen.layout.layer["size"]
            with _bundles.progress(size, "pull") as cb:
                try:
                    registry.download(reg, chosen, layer, cb)
                except registry.Refused as exc:
                    return refused(str(exc))
            return _install(args, ref, chosen, layer, trusted, fp)


def _install(args, ref, chosen, layer, trusted, fp) -> int:
    """Install the downloaded layer through import's path; refused unless its manifest is the signed config
    the choice was made on."""
    import hashlib

    from jitwarden.ops import bundle, bundle_install

    source = f"{ref.registry}/{ref.repo}@{chosen.manifest}"

    def refused(why: str) -> int:
        rep = bundle_install.ImportReport(
            source, "", fp.digest, None, "", refused=why, dry_run=args.dry_run
        )
        return _bundles.finish(rep, args, EXIT_FINDINGS, "pull")

    try:
        tar, opened = bundle.open_bundle_file(layer.reader(), trusted)
    except bundle.BundleRefused as exc:
        return refused(str(exc))
    try:
        if opened.manifest_sha256 != hashlib.sha256(chosen.mbytes).hexdigest():
            return refused("the layer's manifest is not the signed config the index chose")
        rep, code = _bundles.install(
            source, tar, opened, fp, args.dry_run, all_or_nothing=args.all_or_nothing
        )
        extra = {"manifest": chosen.manifest, "candidates": chosen.candidates}
        if not args.dry_run and rep.refused is None and rep.digest_bundle == rep.digest_here:
            _remember(ref, chosen, fp)
        return _bundles.finish(rep, args, code, "pull", extra)
    finally:
        tar.close()


def _tag_key(ref) -> str | None:
    """What a pull is remembered by: ``host/repo:tag``; None for a digest, which names exact bytes."""
    return None if ref.digest else f"{ref.registry}/{ref.repo}:{ref.tag or 'latest'}"


def _older(args, ref, chosen, fp) -> str | None:
    """Why the chosen bundle is refused as older than the one this node installed from the tag, else None."""
    import os

    from jitwarden.model.text import iso_time
    from jitwarden.store import pulled

    key = _tag_key(ref)
    if key is None or args.allow_older:
        return None
    try:
        last = pulled.installed(os.environ, key, fp.digest)
    except (OSError, ValueError) as exc:
        print(
            f"jitwarden: warning: {pulled.where(os.environ)}: cannot tell what was pulled before "
            f"({getattr(exc, 'strerror', None) or exc}); an older bundle is not noticed",
            file=sys.stderr,
        )
        return None
    if last is None or chosen.created >= last.created or chosen.manifest == last.manifest:
        return None
    return (
        f"{ref}: its bundle for fingerprint {fp.digest} was signed at {iso_time(chosen.created)}, before "
        f"the one this node installed from the tag ({last.manifest[:19]}…, signed at "
        f"{iso_time(last.created)}): the tag was moved back; pass --allow-older to install it"
    )


def _remember(ref, chosen, fp) -> None:
    import os

    from jitwarden.store import pulled

    key = _tag_key(ref)
    if key is None:
        return
    try:
        pulled.record(
            os.environ,
            key,
            fp.digest,
            pulled.Installed(created=chosen.created, manifest=chosen.manifest),
        )
    except OSError as exc:
        print(
            f"jitwarden: warning: {pulled.where(os.environ)}: not recorded ({exc.strerror or exc}); "
            "a later older bundle is not noticed",
            file=sys.stderr,
        )
