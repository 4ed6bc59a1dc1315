"""The error contract (ARCHITECTURE.md, "The flow of one command"): every exit status the CLI returns
(:class:`ExitStatus`), the exceptions that carry one (:class:`JitwardenError` and its subclasses, each
with its ``exit_code``) and the one table (:data:`ERRORS`, :func:`exit_of`) by which ``cli/main``'s one
handler turns an exception that reaches it into a status and one line. ``docs/commands.md``'s exit-code
section is generated from :class:`ExitStatus` (docs/gen_commands.py)."""

from __future__ import annotations

import enum

from jitwarden.model.settings import DEBUG

TYPE_CHECKING = False  # mypy takes it as true; typing stays off the activation path
if TYPE_CHECKING:
    from typing import ClassVar


class ExitStatus(enum.IntEnum):
    """Every status ``jitwarden`` exits with; each member's :attr:`meaning` is its line in the docs."""

    OK = 0
    FINDINGS = 1
    USAGE = 2
    INTERNAL = 3
    OTHER_ENVIRONMENT = 4
    WILL_COMPILE = 5
    UNPROVEN = 6
    CANNOT_EXECUTE = 126
    COMMAND_NOT_FOUND = 127
    INTERRUPTED = 130

    @property
    def meaning(self) -> str:
        return _MEANING[self]


_MEANING = {
    ExitStatus.OK: "success: nothing at error level (warnings may be printed)",
    ExitStatus.FINDINGS: "findings at error level (`verify`, `status`, `doctor`); a cache root that could not "
    "be read (`unreadable`: `ls` and `clean` too, whose listing and plan are then incomplete), "
    "a check that failed (`canary`), a bundle `import` refused, unproven entries under `--strict`, "
    "or `dir KIND` with no dir of that kind here",
    ExitStatus.USAGE: "bad input or a refusal: a missing path, a malformed option, a lock not taken "
    "in time, a file or directory that is not what jitwarden made; one line on stderr",
    ExitStatus.INTERNAL: f"an internal error (a bug): one line on stderr, the traceback with "
    f"`{DEBUG.name}=1`",
    ExitStatus.OTHER_ENVIRONMENT: "`import`, `pull`: the bundle was built for another environment "
    "(another fingerprint); nothing installed",
    ExitStatus.WILL_COMPILE: "`coverage`: some of the workload's kernels are not in the cache and will "
    "compile at its start (the line says how many and about how long)",
    ExitStatus.UNPROVEN: "`coverage`: every kernel is in the cache, some unsealed: each is proven by a "
    "rebuild at its first use (no compile)",
    ExitStatus.CANNOT_EXECUTE: "`run`: the command was found but could not be executed (as a shell says)",
    ExitStatus.COMMAND_NOT_FOUND: "`run`: no such command (as a shell says)",
    ExitStatus.INTERRUPTED: "interrupted (Ctrl-C, SIGINT)",
}

EXIT_OK = ExitStatus.OK
EXIT_FINDINGS = ExitStatus.FINDINGS
EXIT_USAGE = ExitStatus.USAGE
EXIT_OTHER_ENV = ExitStatus.OTHER_ENVIRONMENT


class JitwardenError(Exception):
    """An expected failure with a message meant for the user, one line; ``exit_code`` is its status.

    The root of every exception a layer raises for the CLI to report. A class whose status is
    ``INTERNAL`` is reported as an internal error (a bug), like any exception outside the hierarchy.
    """

    exit_code: ClassVar[ExitStatus] = ExitStatus.INTERNAL


class UsageError(JitwardenError):
    """Bad input: a missing path, a malformed option, a file that is not what it should be."""

    exit_code = ExitStatus.USAGE


if TYPE_CHECKING:
    _Exit = tuple[ExitStatus, str, bool]
else:
    _Exit = tuple


class Exit(_Exit):
    """What the CLI does with an exception that reaches its handler: exit with ``status``, print
    ``line`` (after ``jitwarden: ``) unless it is empty; ``internal``: a bug (``JITWARDEN_DEBUG=1`` re-raises).
    (A tuple, as a NamedTuple would be, without importing typing on the activation path.)"""

    __slots__ = ()

    def __new__(cls, status: ExitStatus, line: str, internal: bool = False) -> Exit:
        return tuple.__new__(cls, (status, line, internal))

    @property
    def status(self) -> ExitStatus:
        return self[0]

    @property
    def line(self) -> str:
        return self[1]

    @property
    def internal(self) -> bool:
        return self[2]


ERRORS: tuple[tuple[type[BaseException], ExitStatus | None, str], ...] = (
    (JitwardenError, None, "error: {exc}"),  # None: the class's own exit_code
    (KeyboardInterrupt, ExitStatus.INTERRUPTED, "interrupted"),
    (
        BrokenPipeError,
        ExitStatus.OK,
        "",
    ),  # `jitwarden ls -q | head`: the reader left; nothing is wrong
)
"""THE table: the first row whose type the exception is decides; anything else is an internal error."""

INTERNAL_LINE = "internal error: {name}: {exc} (set " + DEBUG.name + "=1 for a traceback)"


def exit_of(exc: BaseException) -> Exit:
    """How the CLI exits on ``exc`` (pure): by :data:`ERRORS`, else as an internal error."""
    for kind, status, line in ERRORS:
        if isinstance(exc, kind):
            if status is None:
                status = exc.exit_code if isinstance(exc, JitwardenError) else ExitStatus.INTERNAL
            if status is not ExitStatus.INTERNAL:
                return Exit(status, line.format(exc=exc))
            break
    return Exit(
        ExitStatus.INTERNAL, INTERNAL_LINE.format(name=type(exc).__name__, exc=exc), internal=True
    )


def os_error_line(exc: OSError, lines: dict[type[OSError], str], other: str) -> str:
    """The line ``lines`` holds for the first OSError subclass (in order) that ``exc`` is one of, else ``other``
    (pure): how a command words each way a path it was given fails, in its own words, without a ladder of excepts."""
    return next((line for kind, line in lines.items() if isinstance(exc, kind)), other)
