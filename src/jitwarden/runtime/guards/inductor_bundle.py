"""The Triton kernels of an FX-graph bundle, proven before TorchInductor restores them (the Inductor guard's part
that its ``TritonBundler.read_and_emit`` wrapper calls: :mod:`jitwarden.runtime.guards.inductor`).

Every kernel directory of a bundle is written to a staging dir first, proven by a rebuild
(:mod:`jitwarden.runtime.proof`), sealed and renamed into place; one that cannot be proven is quarantined there
and dropped from the bundle, so Inductor recompiles it (through the guard). A directory already on disk is
checked against its seal, or proven when unsealed. Raw cubins carried in the pickle are dropped (nothing to
prove them from): a kernel whose directory is not there is recompiled.
"""

from __future__ import annotations

import os

from jitwarden.model.layout import is_reserved
from jitwarden.runtime.say import log


def _parts(bundle) -> tuple[list, list]:
    """(kernel artifacts, static autotuners): torch <= 2.7 passes a plain list of kernel artifacts."""
    if isinstance(bundle, list):
        return bundle, []
    return list(bundle.kernel_artifacts), list(getattr(bundle, "static_autotuners", None) or ())


def _with(bundle, kept: list):
    import dataclasses

    return kept if isinstance(bundle, list) else dataclasses.replace(bundle, kernel_artifacts=kept)


def emptied(bundle):
    """A copy of ``bundle`` with no kernel and no static autotuner: what Inductor restores when its check failed."""
    import dataclasses

    if isinstance(bundle, list):
        return []
    fields = {f.name for f in dataclasses.fields(bundle)}
    return dataclasses.replace(
        bundle, **{k: [] for k in ("kernel_artifacts", "static_autotuners") if k in fields}
    )


def _nonempty(path: str) -> bool:
    try:
        with os.scandir(path) as it:
            return any(True for _ in it)
    except OSError:
        return False


def _safe_name(name) -> bool:
    return (
        isinstance(name, str)
        and name not in ("", ".", "..")
        and os.sep not in name
        and "\0" not in name
    )


def guard_bundle(bundle, cache_dir_for, replace_bytes: bytes = b"[REPLACE]"):
    """The bundle Inductor may restore: its kernels proven, sealed and put in place, the rest dropped.

    ``cache_dir_for(device)``: torch's ``triton_cache_dir``. Returns a copy of ``bundle`` with
    only the kernel directories that are now in place and sealed (torch skips writing those,
    as they exist) and no raw cubins on its static autotuners.
    """
    from jitwarden.store.removal import remove_tree

    artifacts, static = _parts(bundle)
    st = _stage(artifacts, cache_dir_for, replace_bytes)
    try:
        _judge(st)
    finally:
        for p in st.parents:
            remove_tree(p)
    _drop_raw_cubins(static)
    return _with(bundle, [a for a in artifacts if id(a) not in st.refused])


class _Staged:
    """What :func:`_stage` made of a bundle's kernel artifacts (one record; :func:`_judge` adds to ``refused``).

    ``staged``: staging dir -> (artifact, final dir, base dir); ``existing``: final dir already on
    disk -> (artifact, base dir); ``refused``: ids of the artifacts torch must not restore;
    ``parents``: the private directories the staging dirs are in, removed at the end.
    """

    __slots__ = ("staged", "existing", "refused", "parents")

    def __init__(self):
        self.staged: dict[str, tuple] = {}
        self.existing: dict[str, tuple] = {}
        self.refused: set[int] = set()
        self.parents: list[str] = []


def _stage(artifacts, cache_dir_for, replace_bytes) -> _Staged:
    """Write each kernel directory that is not on disk yet into a private staging dir beside where it goes.

    Everything is written by directory fds into new names only (O_EXCL). On an error the staging
    dirs made so far are removed before it is raised.
    """
    from jitwarden.runtime import hiding
    from jitwarden.store.atomic import write_new
    from jitwarden.store.paths import make_dir_at
    from jitwarden.store.removal import remove_tree
    from jitwarden.store.tempdirs import make_private_dir

    st = _Staged()
    try:
        for a in artifacts:
            base = cache_dir_for(a.device)
            directory = os.path.join(base, a.kernel_hash)
            if not _safe_name(a.kernel_hash) or not all(
                _safe_name(x.filename) for x in a.artifacts
            ):
                _warn(a.kernel_hash, "unsafe", "a file name in the bundle leaves its directory")
                st.refused.add(id(a))
                continue
            if hiding.hidden(
                base, a.kernel_hash
            ):  # on disk, being proven in the background: wait, then judge it there
                hiding.wait_for(base, a.kernel_hash)
            if _nonempty(directory):
                st.existing[directory] = (a, base)
                continue
            parent, pfd = make_private_dir(base, "tmp.jitwarden-")
            st.parents.append(parent)
            try:
                sfd = make_dir_at(pfd, a.kernel_hash)
            finally:
                os.close(pfd)
            try:
                for x in a.artifacts:
                    if is_reserved(x.filename):
                        continue  # jitwarden's own (the seal a guarded compile bundled): never carried in, never trusted
                    payload = x.payload
                    if x.filename.endswith(".json"):
                        payload = payload.replace(replace_bytes, directory.encode())
                    write_new(sfd, x.filename, payload)
            finally:
                os.close(sfd)
            st.staged[os.path.join(parent, a.kernel_hash)] = (a, directory, base)
    except BaseException:
        for p in st.parents:
            remove_tree(p)
        raise
    return st


def _judge(st: _Staged) -> None:
    """Prove the staged and the unsealed directories in parallel; seal and place each proven one as its
    proof ends (while the others' ptxas runs go on), set the rest aside."""
    from jitwarden.runtime import proof, tree
    from jitwarden.store import partition
    from jitwarden.store.paths import rename_path

    staged, existing, refused = st.staged, st.existing, st.refused
    unsealed = [d for d in existing if not _believed(d)]
    for d in existing:
        if d not in unsealed:
            code, bad = _seal_problems(d, partition.digest_of(existing[d][1]))
            if bad:
                _set_aside(d, existing[d][1], code, bad)
                refused.add(id(existing[d][0]))

    def place(path: str, pr) -> None:
        if path in staged:
            a, directory, base = staged[path]
        else:
            (a, base), directory = existing[path], path
        names = tree.files(path)  # what the proof hashed: never jitwarden's own files
        if pr.proven and proof.seal_proven(
            path, names, pr, partition.digest_of(base), {"by": "bundle", "legacy": True}
        ):
            if path in staged:
                try:
                    rename_path(
                        path, directory
                    )  # onto nothing or an empty dir; torch then skips it
                except OSError:
                    refused.add(
                        id(a)
                    )  # someone else wrote it meanwhile: theirs is judged on its own
            return
        code, why = (
            (pr.code or "unverifiable", pr.reason)
            if not pr.proven
            else (
                "unverifiable",
                "its files changed after they were proven; not used until they are proven",
            )
        )
        if path in staged:
            _set_aside(
                path,
                base,
                code,
                [f"restored from an FX-graph bundle: {why}"],
                entry_id=a.kernel_hash,
            )
        else:
            _set_aside(path, base, code, [f"first use of an unsealed entry: {why}"])
        refused.add(id(a))

    if staged or unsealed:
        proven = proof.prove_many(list(staged) + unsealed, on_proof=place)
        for path in unsealed:
            if (
                path not in proven
            ):  # gone since it was listed (another rank hid it): restore nothing there
                refused.add(id(existing[path][0]))


def _believed(path: str) -> bool:
    """Whether ``path`` holds a seal to judge it by: a seal this reader believes (authentic, nobody else's to
    write), or one it cannot read at all (:func:`_seal_problems` says why). A seal of an older jitwarden or of
    another user is none: the entry is proven like an unsealed one, never set aside for it."""
    from jitwarden.model.layout import SEAL_FILE
    from jitwarden.store import seal

    if not os.path.exists(os.path.join(path, SEAL_FILE)):
        return False
    try:
        return seal.read(path) is not None
    except seal.SealError:
        return True


def _seal_problems(path: str, digest: str | None = None) -> tuple[str, list[str]]:
    """(reason code, problems) of a sealed directory against its seal; ``("", [])`` when no file changed since
    it was sealed under ``digest`` (the partition's fingerprint; None: an unpartitioned root).

    "Unchanged since sealed" is :func:`jitwarden.store.seal.unchanged` (the time recorded inside
    the seal), never the seal file's own ctime, which a ``chmod`` of the seal moves past a tampered file's.
    A seal of another fingerprint is a ``mismatch``: an entry moved in from another environment.
    """
    from jitwarden.store import seal

    try:
        with os.scandir(path) as it:
            ours = [e for e in it if not is_reserved(e.name)]
            if all(e.is_file(follow_symlinks=False) for e in ours) and seal.unchanged(
                path, [e.stat(follow_symlinks=False).st_ctime_ns for e in ours], digest
            ):
                return "", []
    except OSError:
        pass
    try:
        s = seal.read(path)
    except seal.SealError as exc:
        return "corrupt", [str(exc)]
    if s is None:
        return "corrupt", ["not sealed"]
    why = seal.foreign(s.fingerprint, digest)
    if why:
        return "mismatch", [why]
    present = [n for n in os.listdir(path) if not is_reserved(n)]
    bad = seal.check(path, s, present=present)
    return ("corrupt", bad) if bad else ("", [])


def _drop_raw_cubins(static_autotuners) -> None:
    """Raw cubins in the pickle have no PTX beside them to prove them: never let torch write them to disk."""
    for sa in static_autotuners or ():
        for cr in getattr(getattr(sa, "kernel", None), "compile_results", None) or ():
            k = getattr(cr, "kernel", None)
            if k is not None and getattr(k, "cubin_raw", None) is not None:
                k.cubin_raw = None


_BUNDLE_THEN = "TorchInductor restored it from an FX-graph bundle; Inductor recompiles it"


def _warn(entry: str, code: str, why: str) -> None:
    log.warning(
        "jitwarden: refused Triton kernel %s restored by TorchInductor (%s: %s); Inductor recompiles it",
        entry[:12],
        code,
        why,
    )


def _set_aside(path: str, root: str, code: str, details, entry_id: str | None = None) -> None:
    from jitwarden.runtime import setaside

    rec = setaside.set_aside(path, code, details, root=root, entry_id=entry_id, by="torch-hook")
    if rec is None:
        _warn(entry_id or os.path.basename(path), code, "; ".join(details))
    else:
        log.warning(
            "jitwarden: %s", setaside.line(rec, "Triton kernel", code, details, _BUNDLE_THEN)
        )
