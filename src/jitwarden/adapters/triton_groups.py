"""Triton's group files (stdlib only): each child a file of its own entry (judged), and a group's child paths
pointed at the entry's directory where it moved (``jitwarden relocate``, a bundle installed elsewhere)."""

from __future__ import annotations

import os
from collections.abc import Mapping

from jitwarden.model.findings import Finding


def group_findings(
    entry_id: str, path: str, gname: str, doc: dict, sizes: Mapping[str, int], add
) -> None:
    """One group file's children: each must be a file of this very entry, present and not empty."""
    children = doc.get("child_paths")
    if not isinstance(children, dict):
        # Valid JSON without Triton's (3.4-3.9) layout: a version we do not know, not damage.
        add(
            Finding(
                "unrecognised",
                f"{gname}: no child_paths mapping (a group layout jitwarden does not know)",
            )
        )
        return
    outside: list[str] = []
    prefix = path + os.sep
    for child, cpath in children.items():
        if not isinstance(cpath, str) or not isinstance(child, str):
            add(Finding("corrupt", f"{gname}: child {child!r} has no path"))
            continue
        if (
            cpath != prefix + child
        ):  # the common case, this entry's own file by its own name, needs no more
            cdir, cbase = os.path.split(os.path.normpath(cpath))
            if cbase != child:  # wherever it points: Triton loads that file as this child
                add(
                    Finding(
                        "mismatch", f"{gname}: {child} points to a file named {cbase} ({cpath})"
                    )
                )
            if (
                not os.path.isabs(cpath)
                or os.path.basename(cdir) != entry_id
                or not same_dir(cdir, path)
            ):
                outside.append(cpath)
        csize = sizes.get(child)
        if csize is None:
            add(Finding("incomplete", f"{gname} lists {child}, which is missing"))
        elif csize == 0:
            add(Finding("corrupt", f"{child} is empty"))
    if outside:
        add(_outside_finding(gname, outside, len(children)))


def _outside_finding(gname: str, outside: list[str], total: int) -> Finding:
    """Paths of a group file that leave its entry: ``foreign-path`` (error) when any exists, for Triton opens
    exactly that path and loads the other tree's file; ``moved`` (warning) when none does, for Triton then drops
    the group and recompiles (a moved or copied cache; ``jitwarden relocate`` points it at its own files)."""
    there = [p for p in outside if os.path.lexists(p)]
    dirs = sorted({os.path.dirname(p) for p in outside})
    into = f"{', '.join(dirs[:2])}{' …' if len(dirs) > 2 else ''}"
    if there:
        return Finding(
            "foreign-path",
            f"{gname} points {len(outside)} of {total} files outside the entry, into {into} "
            f"({len(there)} exist there: Triton loads them from that tree)",
        )
    return Finding(
        "moved",
        f"{gname} names {len(outside)} of {total} files in {into}, which no longer exist: a moved or "
        "copied cache; Triton drops the group and recompiles",
    )


class ChildMismatch(ValueError):
    """A group file maps a child to a file of another name: pointing it home would prove one file and load
    another (the message names both)."""


def relocated_group(doc, entry_dir: str, present) -> dict | None:
    """A group document with each child path pointed at ``entry_dir``, for each child whose file (by its base
    name) is in ``present``; None when nothing changes or ``doc`` is not Triton's layout (pure). Used where an
    entry moved (``jitwarden relocate``, a bundle installed elsewhere): Triton's group paths are absolute.

    :class:`ChildMismatch` when a child's path ends in another name than the child's own
    (``add_kernel.cubin`` -> ``/gone/<id>/evil.cubin``): nothing is pointed anywhere."""
    kids = doc.get("child_paths") if isinstance(doc, dict) else None
    if not isinstance(kids, dict):
        return None
    new = dict(kids)
    for k, v in kids.items():
        base = os.path.basename(str(v))
        if base != k:
            raise ChildMismatch(f"mismatch: {k} points to a file named {base} ({v})")
    for k, v in kids.items():
        base = os.path.basename(str(v))
        if base in present and v != os.path.join(entry_dir, base):
            new[k] = os.path.join(entry_dir, base)
    return None if new == kids else {**doc, "child_paths": new}


def same_dir(a: str, b: str) -> bool:
    """Whether two spellings name one directory (lexically, else through symlinked parents)."""
    if a == b or os.path.normpath(a) == os.path.normpath(b):
        return True
    try:
        return os.path.realpath(a) == os.path.realpath(b)
    except OSError:
        return False
