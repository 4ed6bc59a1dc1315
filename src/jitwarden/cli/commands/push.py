"""``jitwarden push REF``: this node's verified, sealed entries as a signed bundle in an OCI registry.

What ``export`` writes (``--kind``, ``--rebuild``, the signing key), uploaded as an OCI artifact and added
to the tag's index beside the bundles of other GPUs and toolchains (docs/fleets.md, "OCI registries").
Exit 0 pushed, 1 nothing to push or refused, 2 usage error or a registry that cannot be used.
"""

from __future__ import annotations

import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.cli.commands import _bundles, _common
from jitwarden.model.errors import EXIT_FINDINGS, EXIT_OK, UsageError
from jitwarden.model.text import human_size, plural


def register(sub) -> None:
    p = sub.add_parser(
        "push",
        help="push a signed bundle of this environment's verified entries to an OCI registry",
        description="Upload this fingerprint's sealed entries that pass verify (what `export` takes) as "
        "an OCI artifact to REF, added to the tag's index beside other fingerprints' bundles.",
    )
    p.add_argument("ref", metavar="REF", help="HOST[:PORT]/REPO[:TAG] (the tag defaults to latest)")
    _bundles.add_bundle_arguments(p, "push an unsigned bundle (pull refuses it)")
    _bundles.add_insecure_argument(p)
    options.add_format_argument(p)
    options.add_rebuild_arguments(p)
    options.examples(
        p,
        "jitwarden push registry:5000/kernels             push this environment's bundle as :latest",
        "jitwarden push registry:5000/kernels:h100-cu13  under a tag of your own",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.ops import bundle
    from jitwarden.ops import oci as registry

    ref = _bundles.registry_ref(args.ref)
    if ref.digest:
        raise UsageError(f"{args.ref}: push names a tag, not a digest (HOST/REPO:TAG)")
    kinds = _bundles.kinds(args)
    req = _common.rebuild_request(args)
    signer = _bundles.load_signer(args.key, args.unsigned)
    reg = _bundles.registry_for(ref, args.insecure)
    with _bundles.registry_errors(ref):
        reg.check()  # a registry that cannot be used costs its deadline, not a scan first
    got = _bundles.bundle_contents(kinds, req, _common.orphan_age(args))
    if not got.manifest.entries:
        _bundles.print_skipped(got.skipped)
        print(f"jitwarden: nothing to push for fingerprint {got.manifest.digest}", file=sys.stderr)
        return EXIT_FINDINGS
    mbytes = bundle.manifest_bytes(got.manifest)
    sig = bundle.signature_record(mbytes, signer) if signer is not None else None
    notes = registry.bundle_annotations(got.fp, signer.id if signer else None, sig)
    with _bundles.blob_file() as layer:
        try:
            bundle.write_to(layer, got.manifest, got.partitions, signer)
        except OSError as exc:
            raise UsageError(
                f"cannot write the bundle to a temporary file ({exc.strerror or exc})"
            ) from None
        with _bundles.registry_errors(ref), _bundles.progress(layer.size, "push") as cb:
            try:
                pushed = registry.push(reg, ref.tag or "latest", layer, mbytes, notes, sig, cb)
            except registry.Refused as exc:  # the tag holds something that is not a jitwarden index
                raise UsageError(f"{ref}: {exc}") from None
    doc = {
        "ref": str(ref),
        "manifest": pushed.manifest,
        "digest": got.manifest.digest,
        "signed_by": signer.id if signer else None,
        "entries": len(got.manifest.entries),
        "bytes": sum(e.bytes for e in got.manifest.entries),
        "layer_bytes": pushed.layer_bytes,
        "index": pushed.index_size,
        "signature_referrer": pushed.referrer,
        "annotations": {k: v for k, v in notes.items() if k != registry.A_SIGNATURE},
        "skipped": [{"kind": e.kind, "path": e.path, "why": why} for e, why in got.skipped],
    }

    def table() -> None:
        _bundles.print_skipped(got.skipped)
        print(
            f"{ref}@{pushed.manifest}: {plural(len(got.manifest.entries), 'entry')}, {human_size(pushed.layer_bytes)}, "
            f"fingerprint {doc['digest']}, "
            + (f"signed by key {signer.id}" if signer else "UNSIGNED")
            + f"; the tag lists {plural(pushed.index_size, 'bundle')}; signature referrer: {pushed.referrer}"
        )

    out.output_format(args).result("push", lambda: doc, table)
    return EXIT_OK
