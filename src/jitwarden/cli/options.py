"""The ``--rebuild`` options shared by ``verify``, ``clean`` and ``doctor`` (argparse only).

Kept apart from :mod:`jitwarden.ops.rebuild` so that building the CLI's parser does not import
the rebuild machinery (ptxas discovery, cubin comparison) for every command.
"""

from __future__ import annotations

import argparse


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be at least 1")
    return n


def add_arguments(parser, mode=None) -> None:
    """Add ``--rebuild``, ``--jobs``, ``--ptxas`` and ``--keep`` to the ``verify`` sub-parser.

    ``mode``: the mutually exclusive group ``--quick`` lives in, if any.
    """
    (mode or parser).add_argument(
        "--rebuild", action="store_true",
        help="re-assemble each kernel's PTX with Triton's exact ptxas command and compare with the cached cubin")
    parser.add_argument("--jobs", "-j", type=_positive_int, default=None, metavar="N",
                        help="ptxas processes at once for --rebuild (default: all cores)")
    parser.add_argument("--ptxas", action="append", default=None, metavar="PATH",
                        help="another ptxas this environment uses (repeatable); a match verifies")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="leave <id>.<name>.cached.cubin and .rebuilt.cubin in DIR for entries that differ")
