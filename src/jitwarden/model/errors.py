"""Exceptions the CLI maps to exit codes: 0 ok, 1 findings, 2 usage, 3 internal (ARCHITECTURE.md, "The flow of one command")."""

EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3


class JitwardenError(Exception):
    """An expected failure with a message meant for the user."""

    exit_code = EXIT_INTERNAL


class UsageError(JitwardenError):
    """Bad input: a missing path, a malformed option, a file that is not what it should be."""

    exit_code = EXIT_USAGE


def os_error_line(exc: OSError, lines: dict[type[OSError], str], other: str) -> str:
    """The line ``lines`` holds for the first OSError subclass (in order) that ``exc`` is one of, else ``other``
    (pure): how a command words each way a path it was given fails, in its own words, without a ladder of excepts."""
    return next((line for kind, line in lines.items() if isinstance(exc, kind)), other)
