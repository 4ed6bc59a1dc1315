"""``jitwarden coverage NAME [--cache PATH | BUNDLE | REF]``: how much of a recorded workload a cache will serve.

Before a start (issue 44): the kernels workload NAME used (``run --record NAME``, or the list a bundle
carried here) against this node's cache (its partitions for this fingerprint), the cache dirs ``--cache``
names, a bundle file before ``import``, or an OCI reference before ``pull`` (its index and signed config
only, no layer). Exit 0 every kernel held and sealed, 5 some will compile, 6 all held but some unsealed
(each proven by a rebuild at first use), 2 no such record or a source that cannot be read.
"""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.cli.render import output as out
from jitwarden.model.errors import UsageError


def register(sub) -> None:
    p = sub.add_parser(
        "coverage",
        help="how many of a recorded workload's kernels a cache holds, before its start",
        description="Say how many of workload NAME's kernels (recorded by `run --record NAME`, or listed by a "
        "bundle installed here) this node's cache, the dirs of --cache, a bundle file or an OCI reference "
        "(read before pulling: index and signed config only) holds sealed, holds unsealed, or lacks, and the "
        "compile time the missing ones cost. Exit 0 all ready and sealed, 5 some will compile, 6 all held "
        "but some unsealed, 2 no record of NAME or a source that cannot be read.",
    )
    p.add_argument("name", metavar="NAME", help="the workload's name, as given to `run --record`")
    p.add_argument(
        "source",
        nargs="?",
        metavar="BUNDLE|REF",
        help="a bundle file (`export`) or HOST[:PORT]/REPO[:TAG|@DIGEST], judged before it is installed",
    )
    p.add_argument(
        "--cache",
        action="append",
        metavar="PATH",
        help="judge this cache dir instead of this node's partitions (repeatable; an empty dir is 0%%)",
    )
    p.add_argument(
        "--target",
        metavar="FINGERPRINT.json",
        help="judge for another node: its saved `jitwarden fingerprint --format json` (which GPU, driver and "
        "toolchain the kernels must be built for); a bundle or registry bundle built for another "
        "fingerprint then warms none of it, and without one this machine's partitions for that "
        "fingerprint are judged",
    )
    p.add_argument(
        "--insecure",
        action="store_true",
        help="talk plain HTTP to the registry (a local test registry)",
    )
    options.add_format_argument(p)
    options.examples(
        p,
        "jitwarden coverage llama                            what this node's cache holds of it",
        "jitwarden coverage llama registry:5000/kernels:v1   what a registry's bundle holds, before pull",
        "jitwarden coverage llama kernels.tar --target h200.json   what it would warm on that node",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.env import fingerprint
    from jitwarden.ops import coverage, workload

    if args.cache and args.source:
        raise UsageError("coverage takes --cache PATH or a BUNDLE|REF, not both")
    from jitwarden.cli.commands import _common

    fp = _common.load_fingerprint(args.target) if args.target else fingerprint.of_host()
    w = workload.find(args.name, fp.digest)
    if args.source:
        holdings, listed, source = _from_source(args, fp, _node(args.target))
        if w is None and listed is not None:
            w = listed
    else:
        holdings, source = _from_caches(args.cache, fp.digest, args.target)
    if w is None:
        raise UsageError(
            f"no record of workload {args.name!r} here (record one with `jitwarden run --record "
            f"{args.name} -- CMD`, or install a bundle that lists it)"
        )
    note = "" if w.digest == fp.digest else f"recorded under another fingerprint, {w.digest}"
    cov = coverage.judge(args.name, w.kernels, holdings, source, w.digest, note)
    out.output_format(args).result("coverage", cov.to_json, lambda: _show(cov))
    return cov.status


def _show(cov) -> None:
    print(f"{cov.workload}: {cov.line()}")
    print(f"  judged: {cov.source}")
    if cov.note:
        print(f"  note: {cov.note}")
    for k in cov.of("missing"):
        print(f"  will compile: {k.kind} {k.name or '?'} {k.key} (~{k.seconds:.2f} s)")


def _partitions(digest: str) -> list[tuple[str, str]]:
    """This node's partition dir of each kind for ``digest`` that exists."""
    from jitwarden.env import locations
    from jitwarden.model import kinds
    from jitwarden.store import partition

    found = []
    for kind in (k.name for k in kinds.bundled()):
        base = locations.partition_base(kind, os.environ)
        pdir = partition.path_for(base, digest)
        if os.path.isdir(pdir) and not os.path.islink(pdir):
            found.append((kind, pdir))
    return found


def _node(target: str | None) -> str:
    """The node a coverage is for, in words: this one, or the one whose fingerprint ``--target`` names."""
    return f"the target node ({target})" if target else "this node"


def _from_caches(paths, digest: str, target: str | None = None):
    """(holdings, what was judged) of the cache dirs ``paths``, else of this machine's partitions for
    ``digest`` (this node's fingerprint, or the one ``target``, ``--target``'s file, names)."""
    from jitwarden.model.entries import CacheRoot
    from jitwarden.ops import coverage
    from jitwarden.ops import scan as scanner
    from jitwarden.ops.roots import roots_from_paths

    if paths:
        nonempty = [p for p in paths if not _empty_dir(p)]
        roots = roots_from_paths(nonempty) if nonempty else []
        source = ", ".join(paths)
    else:
        roots = [
            (CacheRoot(kind=k, path=p, source="partition", partition=digest), None)
            for k, p in _partitions(digest)
        ]
        source = (
            f"this node's cache (fingerprint {digest})"
            if target is None
            else f"this machine's partitions for {_node(target)}, fingerprint {digest}"
        )
    if not roots:
        return {}, source
    judge = scanner.make_judge(None)
    report = scanner.scan(roots, judge, scanner.Target(arch=None, source="none"), expand=True)
    return coverage.holdings_of_entries(report.entries), source


def _empty_dir(path: str) -> bool:
    try:
        return os.path.isdir(path) and not os.listdir(path)
    except OSError:
        return False


def _from_source(args, fp, node: str):
    """(holdings, the workload the source lists or None, what was judged) of a bundle file or an OCI reference,
    for ``node`` (in words: this one, or the target)."""
    from jitwarden.ops import bundle, coverage, keys, workload

    try:
        trusted = keys.load_trusted()
    except keys.KeyError_ as exc:
        raise UsageError(str(exc)) from None
    if os.path.exists(args.source):
        try:
            tar, opened = bundle.open_bundle(args.source, trusted, allow_unsigned=True)
        except OSError as exc:
            raise UsageError(f"{args.source}: {exc.strerror or exc}") from None
        except bundle.BundleRefused as exc:
            raise UsageError(f"{args.source}: {exc}") from None
        tar.close()
        m, signed, source = opened.manifest, opened.signed_by is not None, f"bundle {args.source}"
    else:
        m, source = _from_registry(args, trusted, fp), f"registry {args.source} (before pulling)"
        signed = True  # resolve() refuses a config whose signature does not verify
    if m.digest != fp.digest:
        print(
            f"jitwarden: warning: {args.source} was built for fingerprint {m.digest}, {node} is "
            f"{fp.digest}: import there would install none of it",
            file=sys.stderr,
        )
    rows = m.workloads.get(args.name)
    listed = workload.from_summary(args.name, m.digest, rows) if rows is not None else None
    held = coverage.holdings_of_bundle(m, signed) if m.digest == fp.digest else {}
    return held, listed, source


def _from_registry(args, trusted, fp):
    """The signed manifest (config) of the bundle ``args.source`` offers this node; no layer is read."""
    from jitwarden.cli.commands import _bundles
    from jitwarden.ops import bundle
    from jitwarden.ops import oci as registry

    ref = _bundles.registry_ref(args.source)
    reg = _bundles.registry_for(ref, args.insecure)

    def differ(theirs: dict, digest: str) -> str:
        return _bundles.mismatch_line(
            _bundles.theirs_headline(theirs, digest),
            _bundles.brief(fp),
            _bundles.differences(theirs, fp),
        )

    with _bundles.registry_errors(ref):
        try:
            chosen = registry.resolve(reg, ref, trusted, fp, differ)
        except (registry.Refused, bundle.BundleRefused) as exc:
            raise UsageError(f"{args.source}: {exc}") from None
    return bundle.parse_manifest(chosen.mbytes)
