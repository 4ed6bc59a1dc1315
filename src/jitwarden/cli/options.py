"""Options several commands share, declared once (argparse only).

Building the parser imports this module for every command, so it stays cheap: no scanner,
no rebuild machinery (ptxas discovery, cubin comparison), no rich.
"""

from __future__ import annotations

import argparse

from jitwarden.model import kinds
from jitwarden.model.settings import ORPHAN_AGE, PYTHON
from jitwarden.model.text import age_arg

FORMATS = ("table", "json")


def _positive_int(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n}: must be at least 1")
    return n


class _Refused(argparse.Action):
    """A spelling that is no longer taken: refused at parse time with one line naming what replaced it (exit 2)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"{option_string}: {self.help_text}")


def refuse(p, flag: str, why: str, takes_value: bool = False) -> None:
    """Refuse ``flag`` clearly rather than accept it with another meaning or silently ignore it (hidden from help).

    One meaning per flag name (docs/commands.md, "Flags"): ``--keep`` was a directory in ``clean``, a count in
    ``prune`` and a switch in ``canary``; each now has its own name and ``--keep`` says which."""
    a = p.add_argument(
        flag,
        action=_Refused,
        nargs="?" if takes_value else 0,
        help=argparse.SUPPRESS,
        dest=f"_refused_{flag.lstrip('-').replace('-', '_')}",
        default=None,
    )
    a.help_text = why


def add_format_argument(p) -> None:
    """``--format table|json`` (read once, by :func:`jitwarden.cli.render.output_format`)."""
    p.add_argument("--format", choices=FORMATS, default="table")


def add_scan_arguments(p) -> None:
    """What every command that scans caches takes: paths, ``--target``, ``--format``, ``--orphan-age``,
    ``--long``, ``--kind``."""
    p.add_argument(
        "paths",
        nargs="*",
        metavar="PATH",
        help="cache roots or entry directories (default: every root found)",
    )
    p.add_argument(
        "--target",
        metavar="ARCH",
        help="judge as if running on this GPU (sm_90, 90, 9.0); default: the live GPU",
    )
    add_format_argument(p)
    p.add_argument(
        "--orphan-age",
        type=age_arg,
        default=None,
        metavar="AGE",
        help=f"tmp.pid_* leftovers older than AGE are orphans (default 1h, env {ORPHAN_AGE.name})",
    )
    p.add_argument("--long", action="store_true", help="show full paths in tables")
    p.add_argument(
        "--python",
        metavar="PATH",
        help="judge against the environment of this Python (a workload's venv: its Triton, torch, ...; "
        f"read, never imported); default: jitwarden's own (env {PYTHON.name})",
    )
    p.add_argument(
        "--kind",
        action="append",
        metavar="KIND",
        help=f"only caches of this kind (repeatable): {', '.join(kinds.NAMES)}",
    )


def add_strict_argument(p) -> None:
    """``--strict`` (verify, doctor): an unproven entry fails the run as an error does (exit 1), for CI."""
    p.add_argument(
        "--strict",
        action="store_true",
        help="exit 1 also when an entry is unproven (passed structural checks only: neither sealed "
        "unchanged nor rebuilt and matched)",
    )


def add_rebuild_arguments(parser, mode=None, *, always: bool = False) -> None:
    """``--rebuild``, ``--jobs``, ``--ptxas`` and ``--keep-cubins`` (verify, doctor, clean, export).

    ``mode``: the mutually exclusive group ``--quick`` lives in, if any. ``always``: the command always
    rebuilds (``relocate``), so there is no ``--rebuild`` flag to give.
    """
    if always:
        parser.set_defaults(rebuild=True)
    else:
        (mode or parser).add_argument(
            "--rebuild",
            action="store_true",
            help="re-assemble each kernel's PTX with Triton's exact ptxas command and compare with the cached "
            "cubin",
        )
    parser.add_argument(
        "--jobs",
        "-j",
        type=_positive_int,
        default=None,
        metavar="N",
        help="ptxas processes at once for --rebuild (default: all cores)",
    )
    parser.add_argument(
        "--ptxas",
        action="append",
        default=None,
        metavar="PATH",
        help="another ptxas this environment uses (repeatable); a match verifies",
    )
    parser.add_argument(
        "--keep-cubins",
        default=None,
        metavar="DIR",
        help="leave <id>.<name>.cached.cubin and .rebuilt.cubin in DIR for entries that differ",
    )
    refuse(
        parser,
        "--keep",
        "renamed --keep-cubins DIR (where to leave the cubins of kernels that differ)",
        takes_value=True,
    )


def add_action_arguments(p, *, purge: bool = False, lock_help: str = " (default: wait)") -> None:
    """What every command that changes caches takes: ``--dry-run``, ``-y``, ``--lock-timeout``
    (``purge``: and ``--purge``, delete instead of keeping in quarantine)."""
    p.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    p.add_argument("-y", "--yes", action="store_true", help="do not ask")
    if purge:
        p.add_argument(
            "--purge",
            action="store_true",
            help="delete instead of keeping in quarantine (after the move)",
        )
    else:
        p.set_defaults(purge=False)
    p.add_argument(
        "--lock-timeout",
        type=age_arg,
        default=None,
        metavar="AGE",
        help=f"give up waiting for another jitwarden on the same root after AGE{lock_help}",
    )


def examples(p, *lines: str) -> None:
    """An ``examples:`` section at the end of ``p``'s ``--help``, each line as written (command, two spaces,
    what it does)."""
    import argparse

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = "examples:\n" + "\n".join(f"  {line}" for line in lines)
