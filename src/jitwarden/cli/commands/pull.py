"""``jitwarden pull REF``: install the bundle an OCI registry holds for this node, checked as ``import`` checks.

The tag's index is read, the bundle of this node's exact fingerprint chosen, its signature checked
against the trusted keys, its layer streamed to an unnamed temp file with its digest checked, then
installed through ``import``'s path (every file's digest, each entry judged, staged, sealed). Exit
0 installed, 1 refused (nothing installed), 2 usage error or a registry that cannot be used, 4 no
bundle for this node (what differs, per candidate).
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
    from jitwarden.ops import bundle, keys
    from jitwarden.ops import oci as registry

    ref = _bundles.registry_ref(args.ref)
    try:
        trusted = keys.load_trusted()
    except keys.KeyError_ as exc:
        raise UsageError(str(exc)) from None
    fp = _common.load_fingerprint(args.fingerprint) if args.fingerprint else fingerprint.collect()
    reg = _bundles.registry_for(ref, args.insecure)

    def differ(theirs: dict, digest: str) -> str:
        diffs = _bundles.differences(theirs, fp)
        return _bundles.mismatch_line(
            _bundles.theirs_headline(theirs, digest), _bundles.brief(fp), diffs
        )

    def refused(why: str, code: int = EXIT_FINDINGS, extra=None) -> int:
        rep = bundle.ImportReport(
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

    from jitwarden.ops import bundle

    source = f"{ref.registry}/{ref.repo}@{chosen.manifest}"

    def refused(why: str) -> int:
        rep = bundle.ImportReport(
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
        rep, code = _bundles.install(source, tar, opened, fp, args.dry_run, all_or_nothing=True)
        extra = {"manifest": chosen.manifest, "candidates": chosen.candidates}
        return _bundles.finish(rep, args, code, "pull", extra)
    finally:
        tar.close()
