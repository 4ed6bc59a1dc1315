"""``jitwarden verify --rebuild``: re-assemble each cached kernel's PTX and compare.

Like ``nix build --check``, a rebuild proves an entry: its PTX is re-assembled with
exactly the ptxas command the Triton that built it ran (``make_cubin`` in
``triton/backends/nvidia/compiler.py``, per release in :data:`jitwarden.env.ptxas.RECIPES`),
reconstructed from the entry's metadata (``triton_version``, options, the
cache-invalidating env vars recorded in it; ``ptx_options`` only through an allow-list),
and the result is compared with the cached cubin (:mod:`jitwarden.formats.cubin_compare`).

Verdicts (one :class:`RebuildResult` per kernel entry):

- ``verified`` (no finding): a ptxas this environment's compilers use reproduces it:
  the one the installed Triton picks for the arch (asked of its ``get_ptxas``; by
  release: ``ptxas`` for every arch up to 3.5, ``ptxas-blackwell`` from sm_100 in
  3.6-3.8 and from sm_90 in 3.9; ``TRITON_PTXAS_PATH`` / ``TRITON_PTXAS_BLACKWELL_PATH``
  override), torch's ``torch/bin/ptxas`` where Triton runs ``ptxas`` (TorchInductor hands
  it over as ``TRITON_PTXAS_PATH``), or one given with ``--ptxas``.
- ``stale`` (warn): only another ptxas on this machine reproduces it (CUDA_HOME,
  PATH, /usr/local/cuda*, nvidia wheels, or the *other* bundled Triton ptxas).
  Under Triton 3.6, a cubin assembled by ``ptxas-blackwell`` under an sm_90 key
  therefore lands here, never in ``verified``: its bytes (the ELF ``e_version`` stamp
  and the CUDA-version attribute in ``.nv.info``) name another toolchain than the one
  Triton runs for sm_90.
- ``not-reproducible`` (error): candidates of the entry's own ptxas release assemble
  the PTX and none reproduces the cubin: a substituted, damaged or wrapper-built binary.
- ``unverifiable`` (warn): nothing to rebuild from (no metadata, PTX or cubin), no
  candidate can assemble the PTX, no ptxas of the entry's release is here (a
  rebuild by another release is expected to differ, so it proves nothing either way),
  ``ptx_options`` outside the allow-list (never passed to ptxas), or a Triton release
  whose command line jitwarden does not know and whose rebuild differs.

The engine is stdlib only and knows nothing of the command line: it takes a
:class:`RebuildOptions`, reports progress through a plain callback (the CLI draws the bar),
and refuses a bad option with an :class:`OptionError` that names the option's field (the CLI
words it with its flag).
"""

from __future__ import annotations

import concurrent.futures as cf
import hashlib
import os
import re
import secrets
import shutil
import subprocess
import tempfile
import threading
from dataclasses import dataclass, field

from jitwarden.formats import cubin_compare
from jitwarden.env import ptxas
from jitwarden.adapters import triton as tri
from jitwarden.store.fsutil import read_bytes
from jitwarden.model.findings import Finding
from jitwarden.model.flags import parse_flag
from jitwarden.formats.ptx import parse_header

VERDICTS = ("verified", "stale", "not-reproducible", "unverifiable")
PTXAS_TIMEOUT_S = 900.0
#: Extra assemblies of the same PTX by the same ptxas when its first output differs from the
#: cached cubin: ptxas is not deterministic for every kernel (see cubin_compare.judge_attempts).
#: A clean, deterministic entry never pays for them.
PTXAS_RETRIES = 4


@dataclass(frozen=True, slots=True)
class RebuildOptions:
    """How to rebuild: ``jobs`` ptxas processes at once (None: one per core), ``extra_ptxas`` more
    ptxas this environment uses (one that reproduces an entry verifies it), ``keep_dir`` where both
    cubins of an entry that differs are left for nvdisasm/cuobjdump (None: nowhere)."""

    jobs: int | None = None
    extra_ptxas: tuple[str, ...] = ()
    keep_dir: str | None = None


class OptionError(ValueError):
    """A :class:`RebuildOptions` field that cannot be used: which ``field``, its ``value``, and ``why``."""

    def __init__(self, field: str, value, why: str):
        super().__init__(f"{field} {value}: {why}")
        self.field, self.value, self.why = field, value, why


@dataclass(frozen=True)
class RebuildResult:
    verdict: str  # verified | stale | not-reproducible | unverifiable
    ptxas: str | None  # the ptxas that reproduced the entry, when one did
    message: str
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict:
        return {"verdict": self.verdict, "ptxas": self.ptxas, "message": self.message,
                "findings": [f.to_json() for f in self.findings]}


@dataclass(frozen=True)
class Candidate:
    """One ptxas to try. ``environment``: one this environment's compilers use."""

    path: str
    info: ptxas.PtxasInfo
    role: str  # triton, triton-blackwell, inductor, cli, machine
    environment: bool

    @property
    def label(self) -> str:
        rel = self.info.build or self.info.release or "?"
        return f"{self.path} ({self.role}, {rel})"


# ---------------------------------------------------------------- what Triton ran


def _env_true(md: dict, key: str) -> bool:
    v = md.get(key)
    if isinstance(v, bool):
        return v
    return parse_flag(v) is True


class RefusedOption(ValueError):
    """The entry's ``ptx_options`` hold something jitwarden will not hand to ptxas."""


# ptxas options a cache entry's ``ptx_options`` (Triton's ``PTXAS_OPTIONS`` knob) may carry into
# a rebuild: the ones Triton's own make_cubin emits, and the codegen options people set with
# PTXAS_OPTIONS. Each changes the code, none reads or writes a file. Anything else (an
# ``--options-file``, an output path, a second ``--gpu-name``) makes the entry unverifiable:
# the metadata is untrusted input and never becomes an arbitrary ptxas argument.
_BOOL = re.compile(r"(true|false)\Z")
_INT = re.compile(r"\d{1,4}\Z")
_PTX_FLAGS = frozenset({
    "-v", "--verbose", "-lineinfo", "--generate-line-info", "-suppress-debug-info", "--suppress-debug-info",
    "-g", "--device-debug", "--warn-on-spills", "-warn-spills", "--warn-on-local-memory-usage",
    "-warn-lmem-usage", "--warn-on-double-precision-use", "-warn-double-usage",
    "--disable-optimizer-constants", "-disable-optimizer-consts", "--sp-bounds-check", "-sp-bounds-check",
})
_PTX_VALUED = {
    "--maxrregcount": _INT, "-maxrregcount": _INT,
    "--opt-level": re.compile(r"[0-4]\Z"), "-O": re.compile(r"[0-4]\Z"),
    "--regAllocOptLevel": _INT, "-regAllocOptLevel": _INT,
    "--fmad": _BOOL, "-fmad": _BOOL,
    "--allow-expensive-optimizations": _BOOL, "-allow-expensive-optimizations": _BOOL,
    "--def-load-cache": re.compile(r"(ca|cg|cs|lu|cv)\Z"), "-dlcm": re.compile(r"(ca|cg|cs|lu|cv)\Z"),
    "--def-store-cache": re.compile(r"(wb|cg|cs|wt)\Z"), "-dscm": re.compile(r"(wb|cg|cs|wt)\Z"),
}


def _shown(token: str) -> str:
    return repr(token if len(token) <= 40 else token[:40] + "…")


def allowed_ptx_options(text: str) -> list[str]:
    """``ptx_options`` split as Triton splits it (on single spaces), each token allow-listed.

    Raises :class:`RefusedOption` naming the first token that is not an option Triton
    passes to ptxas (or a value that option does not take).
    """
    tokens = text.split(" ")
    out: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        i += 1
        if tok == "" or tok in _PTX_FLAGS:
            out.append(tok)
            continue
        name, eq, value = tok.partition("=")
        if not eq and name.startswith("-O") and name != "-O" and name[:2] in _PTX_VALUED:
            name, value, eq = "-O", name[2:], "attached"
        check = _PTX_VALUED.get(name)
        if check is None:
            raise RefusedOption(f"ptx_options holds {_shown(tok)}, not an option Triton passes to ptxas; "
                                "it was not run (untrusted metadata never becomes a ptxas argument)")
        if eq:
            out.append(tok)
        else:
            if i >= len(tokens):
                raise RefusedOption(f"ptx_options ends with {_shown(tok)} and no value; it was not run")
            value = tokens[i]
            i += 1
            out += [tok, value]
        if not check.match(value):
            raise RefusedOption(f"ptx_options gives {_shown(name)} the value {_shown(value)}, which it does not "
                                "take; it was not run (untrusted metadata never becomes a ptxas argument)")
    return out


def _sanitizer_opt(md: dict, how: str | None) -> bool:
    """Whether Triton 3.8+ added ``--opt-level 1`` for a consan/fpsan instrumented kernel."""
    mode = md.get("instrumentation_mode")
    if not how or not isinstance(mode, str) or not mode:
        return False
    if how == "names":
        names = {m.strip() for m in mode.split(",")}
        return "consan" in names or "fpsan" in names
    return "consan" in mode or "fpsan" in mode


def ptxas_flags(md: dict, recipe: ptxas.TritonRecipe | None = None) -> tuple[int, list[str]]:
    """(arch, flags) of ``make_cubin`` of the Triton that built this metadata: all but ptxas, input and ``-o``.

    ``recipe``: the Triton release's rules, by default the one the metadata's
    ``triton_version`` names. Raises ValueError (:class:`RefusedOption` for ``ptx_options``
    outside the allow-list).
    """
    arch = tri.metadata_arch(md)
    if arch is None:
        raise ValueError("metadata has no integer target arch")
    if recipe is None:
        tv = md.get("triton_version")
        recipe = ptxas.recipe_for(tv if isinstance(tv, str) else None)
    no_opt = _env_true(md, "DISABLE_PTXAS_OPT")
    if _env_true(md, "TRITON_DISABLE_LINE_INFO"):
        debug = ["-lineinfo", "-suppress-debug-info"]
    elif no_opt and recipe.debug_g:
        debug = ["-g"]
    else:
        debug = ["-lineinfo"]
    fmad = [] if md.get("enable_fp_fusion", True) else ["--fmad=false"]
    disable_opt = ["--opt-level", "0"] if no_opt else []
    reg_alloc = ["--regAllocOptLevel=2"] if recipe.reg_alloc else []
    opts = md.get("ptx_options")
    if opts is not None and not isinstance(opts, str):
        raise RefusedOption(f"ptx_options is a {type(opts).__name__}, not a string; it was not run")
    extra = allowed_ptx_options(opts) if opts else []
    if not no_opt and _sanitizer_opt(md, recipe.sanitizer_opt):
        extra += ["--opt-level", "1"]
    gpu = f"--gpu-name=sm_{arch}{'a' if arch >= 90 else ''}"
    return arch, [*debug, *fmad, "-v", *disable_opt, *reg_alloc, *extra, gpu]


def releases_for_ptx(version: str | None) -> frozenset[str]:
    """CUDA releases whose ptxas Triton pairs with PTX ``.version`` (inverse of ``ptx_get_version``)."""
    if not version:
        return frozenset()
    try:
        major, minor = (int(x) for x in version.split("."))
    except ValueError:
        return frozenset()
    v = major * 10 + minor
    out = set()
    for cmaj, cmin in [(11, m) for m in range(10)] + [(12, m) for m in range(10)] + [(13, m) for m in range(10)] + [(14, m) for m in range(10)]:
        if cmaj == 12:
            p = 80 + cmin if cmin < 6 else 80 + cmin - 1
        elif cmaj == 11:
            p = 70 + cmin
        else:
            p = 90 + (cmaj - 13) * 10 + cmin
        if p == v:
            out.add(f"{cmaj}.{cmin}")
    return frozenset(out)


def cubin_producer(data: bytes) -> tuple[str | None, str | None]:
    """(release, build) the cached cubin names: ``.note.nv.tkinfo`` where present, else ELF ``e_version``."""
    try:
        from jitwarden.formats import elf

        e = elf.parse(data)
        tk = elf.tkinfo(e)
    except Exception:  # noqa: BLE001 - a damaged cubin names no producer
        return None, None
    if tk:
        for s in tk:
            rel, build = ptxas.parse_version(s)
            if rel:
                return rel, build
    # ptxas stamps its CUDA version into e_version (12.8 -> 128, 13.0 -> 130).
    v = int.from_bytes(data[20:24], "little") if len(data) >= 24 else 0
    if 100 <= v < 1000:
        return f"{v // 10}.{v % 10}", None
    return None, None


# ---------------------------------------------------------------- candidates


def _validate_extra(paths) -> None:
    for p in paths or ():
        if not os.path.isfile(p):
            raise OptionError("extra_ptxas", p, "no such file")
        if not os.access(p, os.X_OK):
            raise OptionError("extra_ptxas", p, "not executable")
        info = ptxas.inspect(p)
        if info is None or info.release is None:
            raise OptionError("extra_ptxas", p, f"`{p} --version` does not name a CUDA release; is it a ptxas?")


def _validate_keep(keep_dir: str | None) -> None:
    if keep_dir is None:
        return
    try:
        os.makedirs(keep_dir, exist_ok=True)
    except OSError as exc:
        raise OptionError("keep_dir", keep_dir, f"cannot create: {exc.strerror or exc}") from None
    if not os.access(keep_dir, os.W_OK | os.X_OK):
        raise OptionError("keep_dir", keep_dir, "not writable")


_RUNTIME: dict[int, str | None] = {}
_RUNTIME_LOCK = threading.Lock()


def triton_choice(arch: int) -> str | None:
    """The ptxas path the installed Triton itself picks for ``arch``: its own ``get_ptxas``.

    Asked of Triton at run time (its knobs read this process's environment), so a release
    jitwarden has not read still gets its real choice; None when Triton cannot be imported
    or finds no ptxas. Costs one Triton import (~0.4 s), paid only by ``--rebuild``.
    """
    with _RUNTIME_LOCK:
        if arch in _RUNTIME:
            return _RUNTIME[arch]
        path = None
        try:
            import inspect

            from triton.backends.nvidia import compiler

            fn = compiler.get_ptxas
            tool = fn(arch) if inspect.signature(fn).parameters else fn()  # no argument up to 3.5
            path = tool.path if isinstance(getattr(tool, "path", None), str) else None
        except Exception:  # noqa: BLE001 - no Triton, no NVIDIA backend, no ptxas: use the table
            path = None
        _RUNTIME[arch] = path
        return path


def recipe_disagreements(archs=(80, 90, 100, 120), recipe: ptxas.TritonRecipe | None = None) -> list[str]:
    """Where :data:`jitwarden.env.ptxas.RECIPES` (or ``recipe``) disagrees with the installed Triton, in words.

    Checks the ptxas Triton's own ``get_ptxas`` picks for each arch, and the flags its
    ``make_cubin`` source emits. Empty too when Triton cannot be imported (nothing to check).
    """
    import inspect

    try:
        from triton.backends.nvidia import compiler
    except Exception:  # noqa: BLE001
        return []
    version = ptxas.installed_triton_version()
    recipe = ptxas.recipe_for(version) if recipe is None else recipe
    out = [] if recipe.known else [f"Triton {version} is not in the table; Triton {recipe.release}'s stands in"]
    for arch in archs:
        real = triton_choice(arch)
        want = recipe.binary(arch)[0]
        if real is not None and os.path.basename(real) != want and not os.environ.get(recipe.binary(arch)[1]):
            out.append(f"sm_{arch}: Triton runs {os.path.basename(real)}, the table says {want}")
    try:
        src = inspect.getsource(compiler.CUDABackend.make_cubin)
    except (OSError, TypeError, AttributeError):
        return out + ["make_cubin's source is not readable"]
    facts = (("-g for DISABLE_PTXAS_OPT", '["-g"]' in src, recipe.debug_g),
             ("--regAllocOptLevel=2", "--regAllocOptLevel=2" in src, recipe.reg_alloc),
             ("--opt-level 1 for consan/fpsan", "consan" in src, recipe.sanitizer_opt is not None))
    for what, in_source, in_table in facts:
        if in_source != in_table:
            out.append(f"make_cubin {'emits' if in_source else 'does not emit'} {what}; the table says otherwise")
    return out


class _Pool:
    """Every ptxas we may try, identified once (``--version`` + sha256, memoised by ptxas.inspect)."""

    def __init__(self, env, extra: list[str], machine: list[str] | None):
        self.env = env
        self._infos: dict[str, ptxas.PtxasInfo | None] = {}
        self.extra = extra
        self.recipe = ptxas.recipe_for(None)  # the installed Triton's
        sel = ptxas.selected(env, recipe=self.recipe)
        self.inductor = [p for role, p in sel if role == "inductor"]
        self.machine_paths = ptxas.machine_candidates(env) if machine is None else list(machine)
        self._per_arch: dict[tuple, list[Candidate]] = {}
        self._lock = threading.Lock()

    def info(self, path: str) -> ptxas.PtxasInfo | None:
        if path not in self._infos:
            self._infos[path] = ptxas.inspect(path)
        return self._infos[path]

    def _build(self, arch: int, machine: bool) -> list[Candidate]:
        cands: list[Candidate] = []
        seen: set[str] = set()

        def add(path: str | None, role: str, environment: bool) -> None:
            if not path:
                return
            info = self.info(path)
            if info is None or info.sha256 in seen:
                return
            seen.add(info.sha256)
            if environment or machine:
                cands.append(Candidate(path, info, role, environment))

        role = self.recipe.role(arch)
        add(self.triton_ptxas(arch), role, True)
        if role == "triton":  # Inductor's TRITON_PTXAS_PATH reaches only the arches Triton runs `ptxas` for
            for p in self.inductor:
                add(p, "inductor", True)
        for p in self.extra:
            add(p, "cli", True)
        if machine:
            for p in self.machine_paths:
                add(p, "machine", False)
        return cands

    def triton_ptxas(self, arch: int) -> str | None:
        """What the installed Triton runs for ``arch``: asked of Triton for this process's own
        environment, else from its release's recipe (another ``env``, or Triton not importable)."""
        if self.env is os.environ:
            p = triton_choice(arch)
            if p and ptxas.inspect(p) is not None:
                return p
        return ptxas.for_arch(arch, self.env, recipe=self.recipe)

    def environment(self, arch: int) -> list[Candidate]:
        """The ptxas this environment's compilers use for ``arch`` (plus ``--ptxas``)."""
        with self._lock:
            key = (arch, False)
            if key not in self._per_arch:
                self._per_arch[key] = self._build(arch, False)
            return self._per_arch[key]

    def machine(self, arch: int) -> list[Candidate]:
        """Every other ptxas on this machine; identified only when an entry needs it."""
        with self._lock:
            key = (arch, True)
            if key not in self._per_arch:
                self._per_arch[key] = [c for c in self._build(arch, True) if not c.environment]
            return self._per_arch[key]


# ---------------------------------------------------------------- the engine


class _Cancelled(Exception):
    pass


@dataclass
class _Attempt:
    ok: bool
    cubin: bytes | None
    error: str | None
    seconds: float = 0.0


@dataclass
class _Work:
    path: str
    id: str
    name: str | None
    arch: int | None = None
    result: RebuildResult | None = None
    kept: tuple[str, str] | None = None
    extra: dict = field(default_factory=dict)


def _first_error_line(text: str) -> str:
    for line in text.splitlines():
        if "fatal" in line or "error" in line.lower():
            return line.strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


class _Engine:
    def __init__(self, tmp: str, pool: _Pool, keep_dir: str | None):
        self.tmp = tmp
        self.pool = pool
        self.keep_dir = keep_dir
        self.lock = threading.Lock()
        # (ptxas sha256, PTX digest, flags) -> futures of its 1st, 2nd, ... assembly: the set of
        # outputs one ptxas gave for one PTX, shared by every entry with that PTX.
        self.attempts: dict[tuple, list[cf.Future]] = {}
        self.ptx_files: dict[str, str] = {}
        self.procs: set[subprocess.Popen] = set()
        self.cancelled = threading.Event()
        self.runs = 0
        self.retry_runs = 0
        self.ptxas_seconds = 0.0
        self._counter = 0

    # -- ptxas runs, one per (ptxas binary, PTX, flags) however many entries share them

    def _ptx_file(self, digest: str, data: bytes) -> str:
        with self.lock:
            p = self.ptx_files.get(digest)
            if p is not None:
                return p
            # Same shape of name as Triton's NamedTemporaryFile ("tmpXXXXXXXX.ptx").
            p = os.path.join(self.tmp, f"tmp{secrets.token_hex(4)}.ptx")
            fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            self.ptx_files[digest] = p
            return p

    def assemble(self, cand: Candidate, digest: str, ptx: bytes, flags: list[str], index: int = 0) -> _Attempt:
        """The ``index``-th assembly (0: the first) of this PTX by ``cand`` with ``flags``, run at most once."""
        key = (cand.info.sha256, digest, tuple(flags))
        for i in range(index + 1):
            with self.lock:
                futs = self.attempts.setdefault(key, [])
                owner = i == len(futs)
                if owner:
                    futs.append(cf.Future())
                fut = futs[i]
            if owner:
                try:
                    fut.set_result(self._run(cand, digest, ptx, flags, retry=i > 0))
                except BaseException as exc:
                    fut.set_exception(exc)
                    raise
        return fut.result()

    def _run(self, cand: Candidate, digest: str, ptx: bytes, flags: list[str], retry: bool = False) -> _Attempt:
        import time

        src = self._ptx_file(digest, ptx)
        with self.lock:
            self._counter += 1
            out = f"{src}.{self._counter}.o"
        cmd = [cand.path, *flags, src, "-o", out]
        t0 = time.perf_counter()
        with self.lock:
            if self.cancelled.is_set():
                raise _Cancelled()
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                    cwd=self.tmp, close_fds=True)
            self.procs.add(proc)
        try:
            try:
                text, _ = proc.communicate(timeout=PTXAS_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
                return _Attempt(False, None, f"timed out after {PTXAS_TIMEOUT_S:.0f} s")
        finally:
            with self.lock:
                self.procs.discard(proc)
        dt = time.perf_counter() - t0
        with self.lock:
            self.runs += 1
            self.retry_runs += retry
            self.ptxas_seconds += dt
        if self.cancelled.is_set():
            raise _Cancelled()
        msg = text.decode("utf-8", "replace")
        if proc.returncode != 0:
            _unlink(out)
            return _Attempt(False, None, f"exit {proc.returncode}: {_first_error_line(msg)}", dt)
        try:
            data = read_bytes(out)
        except OSError as exc:
            return _Attempt(False, None, f"wrote no cubin ({exc.strerror})", dt)
        finally:
            _unlink(out)
        return _Attempt(True, data, None, dt)

    def cancel(self) -> None:
        with self.lock:
            self.cancelled.set()
            procs = list(self.procs)
        for p in procs:
            try:
                p.kill()
            except OSError:
                pass

    # -- one entry

    def verify(self, w: _Work) -> RebuildResult:
        try:
            return self._verify(w)
        except _Cancelled:
            raise
        except OSError as exc:
            return _unverifiable(f"cannot rebuild: {exc}")

    def _verify(self, w: _Work) -> RebuildResult:

        root, name = os.path.dirname(w.path), os.path.basename(w.path)
        facts = tri.read_entry(root, name, check_seal=False)
        if facts.survey.is_symlink:
            return _unverifiable("the entry is a symlink; not followed")
        md = facts.metadata
        if md is None:
            return _unverifiable("no readable metadata JSON: nothing says how it was built")
        backend, _arch = tri.metadata_target(md)
        if backend != "cuda":
            return _unverifiable(f"not a CUDA entry (backend {backend!r}): no ptxas rebuild applies")
        if facts.ptx_file is None:
            return _unverifiable("no PTX in the entry: nothing to rebuild from")
        if facts.cubin_file is None:
            return _unverifiable("no cubin in the entry: nothing to compare with")
        tv = md.get("triton_version")
        recipe = ptxas.recipe_for(tv if isinstance(tv, str) else None)
        try:
            arch, flags = ptxas_flags(md, recipe)
        except ValueError as exc:
            return _unverifiable(f"{facts.metadata_file}: {exc}")
        w.arch = arch
        try:
            ptx = read_bytes(os.path.join(w.path, facts.ptx_file))
        except OSError as exc:
            return _unverifiable(f"cannot read {facts.ptx_file}: {exc.strerror}")
        try:
            cached = read_bytes(os.path.join(w.path, facts.cubin_file))
        except OSError as exc:
            return _unverifiable(f"cannot read {facts.cubin_file}: {exc.strerror}")
        stamp = _stamp(w.path, facts.ptx_file, facts.cubin_file)
        if not ptx.strip():
            return _unverifiable(f"{facts.ptx_file} is empty: nothing to rebuild from")
        digest = hashlib.sha256(ptx).hexdigest()
        hdr = parse_header(ptx[:16384])

        # Who built it: Triton derives the PTX .version from the release of the ptxas it
        # runs (unless ptx_version is forced), so the PTX names the release to expect;
        # the cubin's tkinfo note / e_version stamp names the one that actually assembled it.
        ptx_rels = releases_for_ptx(hdr.version) if md.get("ptx_version") is None else frozenset()
        cub_rel, cub_build = cubin_producer(cached)
        expected = ptx_rels or (frozenset({cub_rel}) if cub_rel else frozenset())
        producer = _producer_text(hdr.version, ptx_rels, cub_rel, cub_build)

        def rank(c: Candidate) -> int:
            return 0 if (cub_build and c.info.build == cub_build) else 1 if c.info.release in expected or c.info.release == cub_rel else 2

        def same_release(c: Candidate) -> bool:
            return not expected or c.info.release in expected

        tried: list[tuple[Candidate, _Attempt]] = []
        skipped: list[str] = []
        outputs: dict[str, list[bytes]] = {}  # candidate path -> every cubin it wrote for this PTX
        # Environment first (a match there verifies), the producer's release first within each group;
        # the machine's other ptxas are looked up only when the environment's do not reproduce it.
        for group in (self.pool.environment, self.pool.machine):
            firsts: list[Candidate] = []
            for c in sorted(group(arch), key=rank):
                if ptxas.can_target(c.info, arch) is False:
                    skipped.append(f"{c.path} ({c.info.release}) cannot target sm_{arch}")
                    continue
                att = self.assemble(c, digest, ptx, flags)
                tried.append((c, att))
                if not att.ok:
                    continue
                firsts.append(c)
                outputs[c.path] = [att.cubin]
                cmp = cubin_compare.compare(cached, att.cubin)
                if cmp.equal:
                    return self._matched(w, c, cmp, cached, arch, producer, tried)
            # None of this group reproduced it in one run. ptxas is not deterministic for every
            # kernel, so assemble again (same temp dir, this worker thread) with the ones of the
            # producer's release before judging; clean deterministic entries never get here.
            for c in firsts:
                if not same_release(c):
                    continue
                for k in range(1, 1 + PTXAS_RETRIES):
                    att = self.assemble(c, digest, ptx, flags, k)
                    if not att.ok:
                        continue
                    outputs[c.path].append(att.cubin)
                    cmp = cubin_compare.compare(cached, att.cubin)
                    if cmp.equal:
                        distinct = cubin_compare.judge_attempts(cached, outputs[c.path]).distinct
                        note = (f"; this ptxas's output varies between runs for this kernel: run {k + 1} matched "
                                f"after {k} differing run(s) ({distinct} distinct results)")
                        return self._matched(w, c, cmp, cached, arch, producer, tried, note)

        assembled = [(c, a) for c, a in tried if a.ok]
        if not tried and not skipped:
            return _unverifiable(f"no ptxas found for sm_{arch} (none in the environment or on this machine)")
        if not assembled:
            why = "; ".join([f"{c.path} ({c.info.release}): {a.error}" for c, a in tried] + skipped)
            return _unverifiable(f"no ptxas here can assemble this PTX (.version {hdr.version}, sm_{arch}): {why}")
        same = [(c, a) for c, a in assembled if same_release(c)]
        if not same:
            rels = ", ".join(sorted({c.info.release or "?" for c, _ in assembled}))
            return _unverifiable(
                f"built by a CUDA {'/'.join(sorted(expected))} ptxas ({producer}); none is here, and a rebuild by "
                f"another release ({rels}) differs by design, so it proves nothing; pass --ptxas PATH to a "
                f"{'/'.join(sorted(expected))} ptxas")
        if _stamp(w.path, facts.ptx_file, facts.cubin_file) != stamp:
            # Triton writes a group file by file: a writer still at work can pair one compile's
            # PTX with another's cubin. Judge only what stood still while we read it.
            if w.extra.get("retried"):
                return _unverifiable("the entry's PTX or cubin changed while it was being verified "
                                     "(a process is still writing it); rerun when it is idle")
            w.extra["retried"] = True
            return self._verify(w)
        # Every run of every producer-release candidate differs. Judge the set of outputs of each
        # (cubin_compare.judge_attempts): one that varies only where the cached cubin differs
        # leaves it unproven (unverifiable); otherwise the cubin differs where ptxas is stable.
        judged = [(c, cubin_compare.judge_attempts(cached, outputs[c.path])) for c, _ in same]
        confined = next(((c, j) for c, j in judged if j.verdict == "varies-confined"), None)
        if confined is not None:
            c, j = confined
            kept = self._keep(w, cached, outputs[c.path][j.nearest])
            msg = f"{j.reason}; assembled with {c.label} ({producer})" + _diff_hint(kept)
            return _unverifiable(msg)
        if not recipe.known:
            return _unverifiable(
                f"built by Triton {tv or '(no version recorded)'}, whose ptxas command line jitwarden does not know "
                f"(it knows Triton {ptxas.RECIPES[0].release} to {ptxas.RECIPES[-1].release}); the rebuild with "
                f"Triton {recipe.release}'s differs, which proves nothing either way")
        ref_c, ref_j = judged[0]
        ref_cubin = outputs[ref_c.path][ref_j.nearest or 0]
        cmp = cubin_compare.compare(cached, ref_cubin)
        kept = self._keep(w, cached, ref_cubin)
        version_note = (
            f"same release as the entry's producer ({producer})" if ref_c.info.release == cub_rel or cub_rel is None and ref_c.info.release in expected
            else f"ptxas release {ref_c.info.release} differs from the cubin's producer ({producer})")
        where = f"first difference in {cmp.first_section}" + (f" at file offset {cmp.first_offset:#x}" if cmp.first_offset is not None else "")
        others = [c.path for c, _ in assembled if c is not ref_c]
        runs = (f"; {ref_j.reason}" if ref_j.verdict == "varies-differs"
                else f"; {ref_c.path} gave {ref_j.reason}" if ref_j.attempts > 1 else "")
        msg = (f"no ptxas reproduces the cubin: rebuilt with {ref_c.label}: {where}; {cmp.summary()}; {version_note}"
               + runs + (f"; also differs from {', '.join(others)}" if others else "")
               + _diff_hint(kept))
        return RebuildResult("not-reproducible", None, msg, (Finding("not-reproducible", msg),))

    def _matched(self, w: _Work, c: Candidate, cmp: cubin_compare.CubinComparison, cached: bytes, arch: int,
                 producer: str, tried, note: str = "") -> RebuildResult:
        how = ("byte for byte" if cmp.identical else f"{cmp.summary()}") + note
        if c.environment:
            return RebuildResult("verified", c.path, f"reproduced {how} by {c.label}")
        env = self.pool.environment(arch)
        env_att = next((a for x, a in tried if x.environment and a.ok), None)
        kept = self._keep(w, cached, env_att.cubin) if env_att is not None else None
        would = ", ".join(x.label for x in env) or "no ptxas (none found)"
        msg = (f"reproduced {how} only by {c.label}, which this environment's compilers do not use; for sm_{arch} "
               f"they would use {would} ({producer})" + (_diff_hint(kept) if env_att is not None else ""))
        return RebuildResult("stale", c.path, msg, (Finding("stale", msg),))

    def _keep(self, w: _Work, cached: bytes, rebuilt: bytes | None) -> tuple[str, str] | None:
        if not self.keep_dir or rebuilt is None:
            return None
        stem = f"{w.id}.{w.name or 'kernel'}"
        a = os.path.join(self.keep_dir, f"{stem}.cached.cubin")
        b = os.path.join(self.keep_dir, f"{stem}.rebuilt.cubin")
        for p, data in ((a, cached), (b, rebuilt)):
            tmp = f"{p}.tmp{os.getpid()}"
            with open(tmp, "wb") as f:
                f.write(data)
            os.replace(tmp, p)
        w.kept = (a, b)
        return a, b


def _stamp(path: str, *names: str) -> tuple:
    out = []
    for n in names:
        try:
            st = os.lstat(os.path.join(path, n))
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def _producer_text(ptx_version, ptx_rels, cub_rel, cub_build) -> str:
    parts = []
    if cub_rel:
        parts.append(f"cubin names CUDA {cub_build or cub_rel}")
    if ptx_version:
        parts.append(f"PTX .version {ptx_version}" + (f" pairs with CUDA {'/'.join(sorted(ptx_rels))}" if ptx_rels else ""))
    return ", ".join(parts) or "producer unknown"


def _diff_hint(kept: tuple[str, str] | None) -> str:
    if not kept:
        return "; rerun with --keep-cubins DIR to keep both cubins for nvdisasm/cuobjdump"
    bindir = ptxas.triton_bin_dir() or ""
    nvd = os.path.join(bindir, "nvdisasm") if bindir else "nvdisasm"
    a, b = kept
    return (f"; kept {a} and {b}: diff <({nvd} -c -g {a}) <({nvd} -c -g {b}) "
            f"(or {os.path.join(bindir, 'cuobjdump') if bindir else 'cuobjdump'} -sass -elf)")


def _unverifiable(reason: str) -> RebuildResult:
    return RebuildResult("unverifiable", None, reason, (Finding("unverifiable", reason),))


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _ptx_size(e) -> int:
    try:
        return os.stat(os.path.join(e.path, f"{e.name}.ptx")).st_size
    except (OSError, TypeError):
        return 0


# ---------------------------------------------------------------- public API


def verify_entries(entries, options: RebuildOptions = RebuildOptions(), *, env=None, progress=None,
                   machine_ptxas: list[str] | None = None, stats: dict | None = None,
                   on_result=None) -> dict[str, RebuildResult]:
    """Rebuild every kernel entry; return {entry path: RebuildResult} in the order given.

    ``progress(done, total)`` is called from the calling thread after each entry;
    ``on_result(path, result)`` too, as each entry's rebuild ends, while the others still run
    (first use seals proven entries there, overlapping the remaining ptxas runs).
    ``machine_ptxas`` replaces the machine search (tests); ``stats`` receives counters.
    Raises :class:`OptionError` for an option that cannot be used; KeyboardInterrupt kills
    the running ptxas children, removes the temp dir and propagates.
    """
    env = os.environ if env is None else env
    check_options(options)
    jobs = (os.cpu_count() or 1) if options.jobs is None else options.jobs
    work = [_Work(e.path, e.id, e.name) for e in entries if getattr(e, "type", "kernel") == "kernel"]
    sizes = {e.path: _ptx_size(e) for e in entries}
    total = len(work)
    results: dict[str, RebuildResult] = {}
    if not work:
        return results
    pool = _Pool(env, list(options.extra_ptxas), machine_ptxas)
    tmp = tempfile.mkdtemp(prefix="jitwarden-rebuild-")  # mode 0700
    engine = _Engine(tmp, pool, options.keep_dir)
    ex = cf.ThreadPoolExecutor(max_workers=min(jobs, total), thread_name_prefix="jw-rebuild")
    futs: dict[cf.Future, _Work] = {}
    try:
        # Largest PTX first: the long ptxas runs start early and the tail stays short.
        for w in sorted(work, key=lambda w: -sizes.get(w.path, 0)):
            futs[ex.submit(engine.verify, w)] = w
        done = 0
        for fut in cf.as_completed(futs):
            w = futs[fut]
            w.result = fut.result()
            done += 1
            if on_result is not None:
                on_result(w.path, w.result)
            if progress is not None:
                progress(done, total)
    except BaseException:
        engine.cancel()
        for f in futs:
            f.cancel()
        ex.shutdown(wait=True, cancel_futures=True)
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    ex.shutdown(wait=True)
    shutil.rmtree(tmp, ignore_errors=True)
    if stats is not None:
        stats.update(ptxas_runs=engine.runs, ptxas_retries=engine.retry_runs, ptxas_seconds=engine.ptxas_seconds, entries=total, jobs=jobs)
    for w in work:
        results[w.path] = w.result
    return results


#: Entries whose files are already known broken are not rebuilt: the finding says enough.
_NO_REBUILD = frozenset({"corrupt", "incomplete", "foreign-path", "unsafe"})


def candidates(entries) -> list:
    """The entries a rebuild judges: Triton kernels without a file-level error (pure)."""
    return [e for e in entries
            if e.kind == "triton" and e.type == "kernel" and not any(f.code in _NO_REBUILD for f in e.findings)]


def check_options(options: RebuildOptions) -> None:
    """Refuse an option that cannot be used (:class:`OptionError`) before any scanning; creates ``keep_dir``."""
    _validate_extra(options.extra_ptxas)
    _validate_keep(options.keep_dir)
    if options.jobs is not None and options.jobs < 1:
        raise OptionError("jobs", options.jobs, "must be at least 1")


def summarize(results: dict[str, RebuildResult]) -> dict[str, int]:
    out = {v: 0 for v in VERDICTS}
    for r in results.values():
        out[r.verdict] = out.get(r.verdict, 0) + 1
    return out
