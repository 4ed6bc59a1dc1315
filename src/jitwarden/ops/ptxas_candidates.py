"""Which ptxas a rebuild tries for an arch, in what order of trust (stdlib only; Triton asked when importable).

Part of ``verify --rebuild`` (ARCHITECTURE.md): the ptxas the installed Triton picks
(:func:`triton_choice`), torch's for Inductor's kernels, ``--ptxas`` ones, then every other
ptxas on the machine, each identified once by ``--version`` and sha256 (:class:`CandidatePool`).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass

from jitwarden.env import ptxas
from jitwarden.model.errors import ExitStatus, JitwardenError


class OptionError(JitwardenError, ValueError):
    """A :class:`~jitwarden.ops.rebuild.RebuildOptions` field that cannot be used: which ``field``, its
    ``value``, and ``why``."""

    exit_code = ExitStatus.USAGE

    def __init__(self, field: str, value, why: str):
        super().__init__(f"{field} {value}: {why}")
        self.field, self.value, self.why = field, value, why


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


def validate_extra(paths) -> None:
    for p in paths or ():
        if not os.path.isfile(p):
            raise OptionError("extra_ptxas", p, "no such file")
        if not os.access(p, os.X_OK):
            raise OptionError("extra_ptxas", p, "not executable")
        info = ptxas.inspect(p)
        if info is None or info.release is None:
            raise OptionError(
                "extra_ptxas", p, f"`{p} --version` does not name a CUDA release; is it a ptxas?"
            )


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
        except Exception:
            path = None
        _RUNTIME[arch] = path
        return path


def recipe_disagreements(
    archs=(80, 90, 100, 120), recipe: ptxas.TritonRecipe | None = None
) -> list[str]:
    """Where :data:`jitwarden.env.ptxas.RECIPES` (or ``recipe``) disagrees with the installed Triton, in words.

    Checks the ptxas Triton's own ``get_ptxas`` picks for each arch, and the flags its
    ``make_cubin`` source emits. Empty too when Triton cannot be imported (nothing to check).
    """
    import inspect

    try:
        from triton.backends.nvidia import compiler
    except Exception:
        return []
    version = ptxas.installed_triton_version()
    recipe = ptxas.recipe_for(version) if recipe is None else recipe
    out = (
        []
        if recipe.known
        else [f"Triton {version} is not in the table; Triton {recipe.release}'s stands in"]
    )
    for arch in archs:
        real = triton_choice(arch)
        want = recipe.binary(arch)[0]
        if (
            real is not None
            and os.path.basename(real) != want
            and not os.environ.get(recipe.binary(arch)[1])
        ):
            out.append(f"sm_{arch}: Triton runs {os.path.basename(real)}, the table says {want}")
    try:
        src = inspect.getsource(compiler.CUDABackend.make_cubin)
    except (OSError, TypeError, AttributeError):
        return out + ["make_cubin's source is not readable"]
    facts = (
        ("-g for DISABLE_PTXAS_OPT", '["-g"]' in src, recipe.debug_g),
        ("--regAllocOptLevel=2", "--regAllocOptLevel=2" in src, recipe.reg_alloc),
        ("--opt-level 1 for consan/fpsan", "consan" in src, recipe.sanitizer_opt is not None),
    )
    for what, in_source, in_table in facts:
        if in_source != in_table:
            out.append(
                f"make_cubin {'emits' if in_source else 'does not emit'} {what}; the table says otherwise"
            )
    return out


class CandidatePool:
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
        if (
            role == "triton"
        ):  # Inductor's TRITON_PTXAS_PATH reaches only the arches Triton runs `ptxas` for
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
