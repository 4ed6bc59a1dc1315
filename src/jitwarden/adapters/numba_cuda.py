"""numba adapter: numba-cuda's ``@cuda.jit(cache=True)`` cache under ``NUMBA_CACHE_DIR`` (stdlib only).

Followed sources (numba 0.68 ``numba/core/caching.py``, used by numba-cuda 0.30): with ``NUMBA_CACHE_DIR``
set, a function's cache lives in ``<NUMBA_CACHE_DIR>/<source dir name>_<sha1 of its path>/`` (the
``_UserProvidedCacheLocator``); without it, in ``__pycache__`` beside the source file, which no variable
names: give such a dir as a ``PATH``. Per function: an index ``<module>.<qualname>-<line>.py<XY>.nbi`` and
one data file ``<same stem>.<n>.nbc`` per overload (format: :mod:`jitwarden.formats.numbacache`).

What binds a data file to its key: the kernel's mangled name inside it (``_ZN6jwkern3add…``) against the
function its file name names; numba checks neither (on the H200 a sub kernel's ``.nbc`` copied over an add
kernel's ran as x-y under stock numba-cuda 0.30.4). Not partitioned or sealed by activation: numba's
default location is beside each source file. See ARCHITECTURE.md ("How to add … A cache kind").
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

from jitwarden.adapters import base
from jitwarden.adapters.surveys import Survey
from jitwarden.model import bounds
from jitwarden.model.entries import CacheRoot, Entry, Judge, KindFacts
from jitwarden.model.findings import Finding
from jitwarden.model.layout import is_reserved
from jitwarden.store.reads import read_bytes

if TYPE_CHECKING:
    from jitwarden.formats.numbacache import NumbaFile

KIND = "numba"
ROOT_RISK = "numba unpickles entries from it, so loading one runs their code"
ROOT_CHECKS = ()
INDEX = re.compile(r"^(.+)-(\d+)\.py(\d+)\.nbi$")
DATA = re.compile(r"^(.+)-(\d+)\.py(\d+)\.(\d+)\.nbc$")
SUBDIR = re.compile(r"^.+_[0-9a-f]{40}$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_FILE = bounds.NUMBA_FILE_MAX


@dataclass(frozen=True, slots=True)
class NumbaFacts(KindFacts):
    """A file's function (``<module>.<qualname>`` from its name) and what it holds: for an index, numba's version,
    the data files it lists and the compute capabilities of its keys; for a data file, the kernel's mangled
    name and its cubin's SM."""

    TOP: ClassVar[frozenset[str]] = frozenset({"cubin_sm"})

    function: str | None = None
    numba_version: str | None = None
    data_files: tuple[str, ...] = ()
    compute_capabilities: tuple[int, ...] = ()
    mangled: str | None = None
    cubin_sm: int | None = None


def discover_roots(env=os.environ) -> list[CacheRoot]:
    """``NUMBA_CACHE_DIR`` when set (numba's default, ``__pycache__`` beside each source, has no one place)."""
    return base.existing(KIND, base.set_vars(env, "NUMBA_CACHE_DIR"))


def _files(d: str) -> list[str]:
    with os.scandir(d) as it:
        return sorted(e.name for e in it if not is_reserved(e.name))


def looks_like_root(path: str) -> bool:
    """A dir holding ``*.nbi`` index files, itself or in its ``<source dir>_<sha1>`` subdirs."""
    try:
        ls = base.listed(path)
    except OSError:
        return False
    # C-speed tests first: a root of another kind lists 10,000s of names, none an index or a source dir.
    if ls.has_name_ending(".nbi") and any(INDEX.match(n) and not is_reserved(n) for n in ls.names):
        return True
    if not any(map(SUBDIR.match, ls.names)):
        return False
    names = sorted(n for n in ls.names if not is_reserved(n))
    return any(
        SUBDIR.match(n) and any(INDEX.match(x) for x in _safe_files(os.path.join(path, n)))
        for n in names[:256]
    )


def _safe_files(d: str) -> list[str]:
    try:
        return _files(d) if os.path.isdir(d) and not os.path.islink(d) else []
    except OSError:
        return []


def list_entry_names(root: str) -> tuple[list[str], list[tuple[str, str]]]:
    """Every ``.nbi`` and ``.nbc`` file, in the root or one ``<source dir>_<sha1>`` level below it."""
    names, strays = [], []
    for top in _files(root):
        full = os.path.join(root, top)
        if INDEX.match(top) or DATA.match(top):
            names.append(top)
        elif SUBDIR.match(top) and os.path.isdir(full) and not os.path.islink(full):
            for n in _safe_files(full):
                if INDEX.match(n) or DATA.match(n):
                    names.append(f"{top}/{n}")
                else:
                    strays.append((f"{top}/{n}", "not part of numba's cache layout"))
        else:
            strays.append((top, "not part of numba's cache layout"))
    return names, strays


def _named_function(stem: str) -> str | None:
    """The last part of ``<module>.<qualname>`` when it is a plain identifier (nested ``<locals>`` names are not
    compared: numba escapes them in the mangled name)."""
    last = stem.rpartition(".")[2]
    return last if _IDENT.match(last) else None


def inspect_entry(root: str, name: str, judge: Judge, root_uid: int | None = None) -> Entry:
    """Read one index or data file (pickles walked, never loaded) and judge it.

    Evidence per rule: ``corrupt`` for a pickle that does not parse; ``mismatch`` for a data file whose
    kernel is another function than its name says (another function's code under this key); ``incomplete``
    for a data file an index lists that is missing; ``foreign-arch`` for a compute capability or cubin SM
    other than the target's (numba keys by it); ``unrecognised`` for a shape jitwarden does not know.
    """
    from jitwarden.formats import numbacache  # here: telling a root's kind imports every adapter

    s, out, other = base.lone_file(
        KIND,
        root,
        name,
        root_uid,
        NumbaFacts(),
        "not a regular file: numba writes one file per index and overload",
    )
    if other:
        return other
    f = s.files[0]
    base_name = name.rpartition("/")[2]
    mi, md = INDEX.match(base_name), DATA.match(base_name)
    named = mi or md
    assert named is not None  # the kind's names are an index's or a data file's
    stem = named.group(1)
    etype = "index" if mi else "data"
    try:
        data = read_bytes(s.path, max_bytes=MAX_FILE, size_hint=f.size)
    except OSError as exc:
        out.append(base.read_failure(exc, f"unreadable: {exc.strerror or exc}"))
        return _entry(root, name, s, etype, stem, None, out, NumbaFacts(stem))
    if mi:
        p = numbacache.parse_index(data)
        arch = _index_findings(p, stem, os.path.dirname(s.path), judge, out)
        facts = NumbaFacts(stem, p.numba_version, p.data_files, p.compute_capabilities)
        return _entry(root, name, s, etype, stem, arch, out, facts)
    d = numbacache.parse_data(data)
    _data_findings(d, stem, judge, out)
    facts = NumbaFacts(stem, None, (), (), d.mangled, d.cubin_sm)
    return _entry(root, name, s, etype, stem, d.cubin_sm, out, facts)


def _entry(
    root: str,
    name: str,
    s: Survey,
    etype: str,
    stem: str,
    arch: int | None,
    out: list[Finding],
    facts: NumbaFacts,
) -> Entry:
    """The entry of one index or data file (``s``: its survey) as judged."""
    f = s.files[0]
    return Entry(
        KIND,
        root,
        name,
        s.path,
        etype,
        stem,
        arch,
        f.size,
        f.mtime,
        findings=tuple(out),
        facts=facts,
    )


def _index_findings(
    p: NumbaFile, stem: str, here: str, judge: Judge, out: list[Finding]
) -> int | None:
    """An index file (of the dir ``here``): the data files it lists present and the function's own, its
    compute capabilities against the target; returns the newest of them."""
    if p.problem:
        out.append(Finding("corrupt", p.problem))
        return None
    if p.unknown:
        out.append(Finding("unrecognised", p.unknown))
        return None
    missing = [d for d in p.data_files if not os.path.lexists(os.path.join(here, d))]
    if missing:
        out.append(
            Finding(
                "incomplete",
                f"lists {', '.join(missing[:3])}, which is missing: numba compiles "
                "that overload again",
            )
        )
    foreign = [d for d in p.data_files if not d.startswith(f"{stem}-")]
    if foreign:
        out.append(Finding("mismatch", f"lists {foreign[0]}, another function's data file"))
    if (
        judge.target_arch is not None
        and p.compute_capabilities
        and judge.target_arch not in p.compute_capabilities
    ):
        out.append(
            Finding(
                "foreign-arch",
                f"compiled for compute capability "
                f"{', '.join(str(c) for c in p.compute_capabilities)}, judged "
                f"against sm_{judge.target_arch}: numba keys by it, unreachable here",
            )
        )
    return max(p.compute_capabilities) if p.compute_capabilities else None


def _data_findings(p: NumbaFile, stem: str, judge: Judge, out: list[Finding]) -> None:
    """A data file: its kernel the function its name says, its cubin's SM against the target."""
    if p.problem:
        out.append(Finding("corrupt", p.problem))
    elif p.unknown:
        out.append(Finding("unrecognised", p.unknown))
    else:
        want = _named_function(stem)
        got = p.function[-1] if p.function else None
        if want and got and _IDENT.match(got) and got != want:
            out.append(
                Finding(
                    "mismatch",
                    f"the file is {stem}'s, the kernel in it is {'.'.join(p.function)}: another "
                    "function's code under this key (numba would run it)",
                )
            )
    if p.cubin_sm is not None and judge.target_arch is not None and p.cubin_sm != judge.target_arch:
        out.append(
            Finding(
                "foreign-arch",
                f"cubin is sm_{p.cubin_sm}, judged against sm_{judge.target_arch}: unreachable here",
            )
        )
