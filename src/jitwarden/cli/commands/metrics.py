"""``jitwarden metrics``: a Prometheus textfile of cache health and remote-cache traffic."""

from __future__ import annotations

import os
import sys

from jitwarden.cli import options
from jitwarden.model.errors import EXIT_OK


def register(sub) -> None:
    p = sub.add_parser(
        "metrics",
        help="write Prometheus metrics (node-exporter textfile collector)",
        description="Print, or write atomically, metrics: remote and local hits and misses, rejects by "
        "reason, quarantines, partitions and their bytes, the last verify.",
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout"
    )
    where.add_argument(
        "--textfile-dir",
        metavar="DIR",
        help="write DIR/jitwarden.prom (node-exporter's --collector.textfile.directory)",
    )
    options.examples(
        p,
        "jitwarden metrics                                  print them",
        "jitwarden metrics --textfile-dir /var/lib/node_exporter   for node-exporter",
    )
    p.set_defaults(func=run)


def run(args) -> int:
    from jitwarden.ops import metrics

    try:
        from jitwarden.env import fingerprint

        current = fingerprint.of_host().digest
    except Exception:
        current = None
    problems: list = []
    text = metrics.render(metrics.node_samples(os.environ, current, problems))
    for line in problems:
        print(f"jitwarden: warning: {line}", file=sys.stderr)
    path = os.path.join(args.textfile_dir, metrics.TEXTFILE) if args.textfile_dir else args.output
    if path is None:
        sys.stdout.write(text)
        return EXIT_OK
    metrics.write_textfile(path, text)  # metrics.MetricsError: a usage error, by the error table
    return EXIT_OK
