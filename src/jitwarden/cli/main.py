"""``jitwarden <verb>``: a thin argparse layer over the command modules.

Every command module in :mod:`jitwarden.cli.commands` exposes ``register(subparsers)``
(which sets ``func``) and ``run(args) -> int``. One handler maps exceptions to
exit codes, so no user ever sees a traceback unless ``JITWARDEN_DEBUG=1``.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from jitwarden import __version__
from jitwarden.model.errors import EXIT_INTERNAL, EXIT_USAGE, JitwardenError

COMMANDS = ("doctor", "status", "ls", "verify", "clean", "prune", "quarantine", "fingerprint", "run", "canary",
            "keygen", "export", "import", "metrics")
_MODULE = {"import": "import_"}  # a verb that is a Python keyword


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, as for every other usage error
        if message.startswith("argument "):  # "argument --older-than: 7: ..." -> "--older-than 7: ..."
            message = message[len("argument "):]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {' '.join(message.split())}\n")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given ``argv`` naming a command, only that command's module is imported (start-up cost)."""
    parser = _Parser(prog="jitwarden", description="Keep GPU JIT kernel caches honest.")
    parser.add_argument("--version", action="version", version=f"jitwarden {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    first = next((a for a in (argv or ()) if not a.startswith("-")), None)
    for name in (first,) if first in COMMANDS else COMMANDS:
        try:
            module = importlib.import_module(f".commands.{_MODULE.get(name, name)}", __package__)
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.endswith(f"commands.{_MODULE.get(name, name)}"):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args) or 0)
    except JitwardenError as exc:
        print(f"jitwarden: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("jitwarden: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `jitwarden ls -q | head`: the reader left; nothing is wrong.
        try:
            sys.stdout = open(os.devnull, "w")
        except OSError:
            pass
        return 0
    except Exception as exc:  # noqa: BLE001 - the one place that turns bugs into exit 3
        from jitwarden.model.settings import DEBUG

        if DEBUG.on(os.environ):  # a flag like every switch: JITWARDEN_DEBUG=0 is off
            raise
        print(f"jitwarden: internal error: {type(exc).__name__}: {exc} (set {DEBUG.name}=1 for a traceback)", file=sys.stderr)
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
