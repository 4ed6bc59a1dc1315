"""The environment caches are judged against: this process's, or another Python's (``--python PATH``).

A cache is written by the environment a workload runs in, which need not be the one jitwarden is installed
in (a standalone install through pipx or ``uv tool``, a workload's venv beside it). ``--python PATH`` (or
``JITWARDEN_PYTHON``) names that environment's interpreter, as pip and uv take it. jitwarden asks it for its
``sys.path`` and version once, by running it isolated (``-I``: no ``PYTHON*`` variables, no user site) on a
few lines of the standard library (:data:`QUERY`), and then reads that environment's Triton, torch and other
builds from their files (dist-info, ``torch/version.py``, Triton's bundled ptxas) exactly as it reads its own:
nothing of theirs is imported into jitwarden's process (ARCHITECTURE.md, "env/").

:func:`use` makes an :class:`Interpreter` the one the fingerprint reads (:func:`search_path`,
:func:`package_dir`, :func:`python_facts`); the CLI calls it once, before anything is read.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from jitwarden.model.errors import ExitStatus, JitwardenError

QUERY = (
    "import json, sys, sysconfig; v = sys.version_info; print(json.dumps({'path': sys.path, "
    "'prefix': sys.prefix, 'executable': sys.executable, 'version': [v[0], v[1], v[2]], "
    "'implementation': sys.implementation.name, 'cache_tag': sys.implementation.cache_tag, "
    "'soabi': sysconfig.get_config_var('SOABI'), 'abiflags': getattr(sys, 'abiflags', '')}))"
)
"""What the other interpreter runs (standard library only, nothing of the environment imported)."""

QUERY_TIMEOUT_S = 30.0
QUERY_MAX_BYTES = 1 << 20


class InterpreterError(JitwardenError, ValueError):
    """The named interpreter cannot be asked (missing, not executable, not a Python, too slow): a usage error."""

    exit_code = ExitStatus.USAGE


class Interpreter:
    """Another environment's Python, as it describes itself: where it looks for packages, and its version.

    Immutable, keyword-only. A ``__slots__`` class rather than a frozen dataclass: the activation memo reads
    :func:`current` on every warm start, where importing ``dataclasses`` would cost more than the lookup.
    """

    __slots__ = (
        "given",  # the path as named (--python, JITWARDEN_PYTHON, the command `run` starts)
        "source",  # --python, JITWARDEN_PYTHON, run
        "executable",
        "prefix",
        "path",  # its sys.path, in order (its site-packages among them)
        "version",  # (major, minor, micro)
        "implementation",
        "cache_tag",
        "soabi",
        "abiflags",
    )

    given: str
    source: str
    executable: str
    prefix: str
    path: tuple[str, ...]
    version: tuple[int, ...]
    implementation: str
    cache_tag: str
    soabi: str
    abiflags: str

    def __init__(
        self,
        *,
        given: str,
        source: str,
        executable: str,
        prefix: str,
        path: tuple[str, ...],
        version: tuple[int, int, int],
        implementation: str = "cpython",
        cache_tag: str = "",
        soabi: str = "",
        abiflags: str = "",
    ) -> None:
        for name, value in (
            ("given", given),
            ("source", source),
            ("executable", executable),
            ("prefix", prefix),
            ("path", tuple(path)),
            ("version", tuple(version)),
            ("implementation", implementation),
            ("cache_tag", cache_tag),
            ("soabi", soabi),
            ("abiflags", abiflags),
        ):
            object.__setattr__(self, name, value)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"Interpreter is immutable ({name})")

    def __repr__(self) -> str:
        return (
            f"Interpreter(given={self.given!r}, source={self.source!r}, version={self.version!r})"
        )

    def python_facts(self) -> tuple[tuple[str, str], ...]:
        """The fingerprint's ``python`` group of this interpreter (the same keys ``fingerprint._python`` has)."""
        v = self.version
        return tuple(
            sorted(
                {
                    "implementation": self.implementation,
                    "version": f"{v[0]}.{v[1]}.{v[2]}",
                    "minor": f"{v[0]}.{v[1]}",
                    "cache_tag": self.cache_tag,
                    "soabi": self.soabi,
                    "abiflags": self.abiflags,
                }.items()
            )
        )

    def to_json(self) -> dict[str, str]:
        return {
            "python": self.given,
            "source": self.source,
            "executable": self.executable,
            "prefix": self.prefix,
            "version": ".".join(map(str, self.version)),
        }


def resolve(given: str) -> str:
    """The interpreter ``given`` names: the file itself, or ``bin/python`` of a venv directory (as uv takes
    one); InterpreterError when there is none."""
    path = os.path.abspath(os.path.expanduser(given))
    if os.path.isdir(path):
        for name in ("bin/python", "bin/python3", "Scripts/python.exe"):
            cand = os.path.join(path, name)
            if os.path.isfile(cand):
                return cand
        raise InterpreterError(f"{given}: a directory with no bin/python (name a Python or a venv)")
    if not os.path.exists(path):
        raise InterpreterError(f"{given}: no such file")
    if not os.access(path, os.X_OK):
        raise InterpreterError(f"{given}: not executable")
    return path


def describe(given: str, source: str = "--python") -> Interpreter:
    """Ask the interpreter ``given`` names for its ``sys.path`` and version (:data:`QUERY`, run isolated);
    InterpreterError, in one line, when it cannot answer."""
    import subprocess

    from jitwarden.formats import jsonlimits

    exe = resolve(given)
    try:
        p = subprocess.run(
            [exe, "-I", "-c", QUERY],
            capture_output=True,
            timeout=QUERY_TIMEOUT_S,
            check=False,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        raise InterpreterError(f"{given}: did not answer within {QUERY_TIMEOUT_S:.0f}s") from None
    except OSError as exc:
        raise InterpreterError(f"{given}: cannot run: {exc.strerror or exc}") from None
    if p.returncode != 0:
        last = (p.stderr or b"").decode("utf-8", "replace").strip().splitlines()[-1:] or [""]
        raise InterpreterError(
            f"{given}: not a Python jitwarden can ask (exit {p.returncode}: {last[0][:200]})"
        )
    try:
        doc = jsonlimits.loads(p.stdout[-QUERY_MAX_BYTES:].strip().splitlines()[-1])
        return Interpreter(
            given=given,
            source=source,
            executable=str(doc["executable"] or exe),
            prefix=str(doc["prefix"]),
            path=tuple(str(e) for e in doc["path"]),
            version=(int(doc["version"][0]), int(doc["version"][1]), int(doc["version"][2])),
            implementation=str(doc["implementation"]),
            cache_tag=str(doc["cache_tag"] or ""),
            soabi=str(doc["soabi"] or ""),
            abiflags=str(doc["abiflags"] or ""),
        )
    except (ValueError, KeyError, TypeError, IndexError):
        raise InterpreterError(
            f"{given}: not a Python jitwarden can ask (no answer it reads)"
        ) from None


_USED: Interpreter | None = None


def use(interpreter: Interpreter | None) -> None:
    """Judge against ``interpreter`` from now on in this process (None: this process's own environment)."""
    global _USED
    _USED = interpreter


def current() -> Interpreter | None:
    """The other environment judged against, or None for this process's own."""
    return _USED


def search_path() -> list[str]:
    """Where packages are looked for: the other interpreter's ``sys.path``, else this process's."""
    return list(_USED.path) if _USED is not None else sys.path


def package_dir(name: str) -> str | None:
    """Directory of the top-level package ``name`` in the environment judged against, found without
    importing it (another interpreter's: searched on its ``sys.path`` alone, never on ours)."""
    from jitwarden.store.paths import package_dir as find

    return find(name, None if _USED is None else _USED.path)


def python_tag() -> str:
    """``311``: what torch extensions and FlashInfer name their builds by, of the environment judged against."""
    v = _USED.version if _USED is not None else sys.version_info
    return f"{v[0]}{v[1]}"


MIN_VERSION = (3, 10)
"""The oldest Python that can import jitwarden (pyproject's ``requires-python``)."""


def _python_name(name: str) -> bool:
    """Whether ``name`` is an interpreter's (``python``, ``python3``, ``python3.12``); no ``re`` at activation."""
    if not name.startswith("python"):
        return False
    rest = name[len("python") :]
    major, dot, minor = rest.partition(".")
    return not rest or (
        major.isdigit() and major.isascii() and (not dot or (minor.isdigit() and minor.isascii()))
    )


def python_of_command(cmd: list[str], env: Mapping[str, str]) -> str | None:
    """The Python interpreter ``cmd`` starts, when it is one: ``cmd[0]`` itself (``/venv/bin/python``,
    ``python3`` on ``env``'s PATH), or the one a script's ``#!`` line names (a console script such as
    ``vllm`` or ``torchrun`` of another venv); None when it starts no Python jitwarden can tell."""
    from jitwarden.store.paths import which
    from jitwarden.store.reads import read_head

    exe = which(cmd[0], env.get("PATH")) if cmd else None
    if exe is None:
        return None
    if _python_name(os.path.basename(exe)):
        return os.path.abspath(exe)
    try:
        head = read_head(exe, 256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").split()
    if words and os.path.basename(words[0]) == "env":  # #!/usr/bin/env python3
        words = [w for w in words[1:] if not w.startswith("-")]
        found = which(words[0], env.get("PATH")) if words else None
        words = [found] if found else []
    if words and _python_name(os.path.basename(words[0])):
        return os.path.abspath(words[0])
    return None


def is_own(python: str) -> bool:
    """Whether ``python`` is this process's own environment's interpreter (the same ``sys.prefix``): the
    common case, told without running it."""
    env_dir = os.path.dirname(os.path.dirname(python))
    try:
        return os.path.samefile(
            env_dir, sys.prefix
        )  # never the executables: a venv's links to its base
    except OSError:
        return False
