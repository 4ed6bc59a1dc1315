"""The ptxas command line a Triton release ran for one cache entry, and who assembled a cubin (stdlib only).

Part of ``verify --rebuild`` (ARCHITECTURE.md, "The flow of one command"): :func:`ptxas_flags`
rebuilds ``make_cubin``'s arguments from the entry's metadata (``ptx_options`` only through an
allow-list: the metadata is untrusted input), :func:`releases_for_ptx` and :func:`cubin_producer`
name the CUDA release that should have, and did, assemble it. Pure functions of bytes and records.
"""

from __future__ import annotations

import re

from jitwarden.adapters import triton as tri
from jitwarden.env import ptxas
from jitwarden.model.errors import ExitStatus, JitwardenError
from jitwarden.model.flags import parse_flag


def _env_true(md: dict, key: str) -> bool:
    v = md.get(key)
    if isinstance(v, bool):
        return v
    return parse_flag(v) is True


class RefusedOption(JitwardenError, ValueError):
    """The entry's ``ptx_options`` hold something jitwarden will not hand to ptxas."""

    exit_code = ExitStatus.USAGE


# ptxas options a cache entry's ``ptx_options`` (Triton's ``PTXAS_OPTIONS`` knob) may carry into
# a rebuild: the ones Triton's own make_cubin emits, and the codegen options people set with
# PTXAS_OPTIONS. Each changes the code, none reads or writes a file. Anything else (an
# ``--options-file``, an output path, a second ``--gpu-name``) makes the entry unverifiable:
# the metadata is untrusted input and never becomes an arbitrary ptxas argument.
_BOOL = re.compile(r"(true|false)\Z")
_INT = re.compile(r"\d{1,4}\Z")
_PTX_FLAGS = frozenset(
    {
        "-v",
        "--verbose",
        "-lineinfo",
        "--generate-line-info",
        "-suppress-debug-info",
        "--suppress-debug-info",
        "-g",
        "--device-debug",
        "--warn-on-spills",
        "-warn-spills",
        "--warn-on-local-memory-usage",
        "-warn-lmem-usage",
        "--warn-on-double-precision-use",
        "-warn-double-usage",
        "--disable-optimizer-constants",
        "-disable-optimizer-consts",
        "--sp-bounds-check",
        "-sp-bounds-check",
    }
)
_PTX_VALUED = {
    "--maxrregcount": _INT,
    "-maxrregcount": _INT,
    "--opt-level": re.compile(r"[0-4]\Z"),
    "-O": re.compile(r"[0-4]\Z"),
    "--regAllocOptLevel": _INT,
    "-regAllocOptLevel": _INT,
    "--fmad": _BOOL,
    "-fmad": _BOOL,
    "--allow-expensive-optimizations": _BOOL,
    "-allow-expensive-optimizations": _BOOL,
    "--def-load-cache": re.compile(r"(ca|cg|cs|lu|cv)\Z"),
    "-dlcm": re.compile(r"(ca|cg|cs|lu|cv)\Z"),
    "--def-store-cache": re.compile(r"(wb|cg|cs|wt)\Z"),
    "-dscm": re.compile(r"(wb|cg|cs|wt)\Z"),
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
            raise RefusedOption(
                f"ptx_options holds {_shown(tok)}, not an option Triton passes to ptxas; "
                "it was not run (untrusted metadata never becomes a ptxas argument)"
            )
        if eq:
            out.append(tok)
        else:
            if i >= len(tokens):
                raise RefusedOption(
                    f"ptx_options ends with {_shown(tok)} and no value; it was not run"
                )
            value = tokens[i]
            i += 1
            out += [tok, value]
        if not check.match(value):
            raise RefusedOption(
                f"ptx_options gives {_shown(name)} the value {_shown(value)}, which it does not "
                "take; it was not run (untrusted metadata never becomes a ptxas argument)"
            )
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
    debug = _debug_flags(md, no_opt, recipe)
    fmad = [] if md.get("enable_fp_fusion", True) else ["--fmad=false"]
    disable_opt = ["--opt-level", "0"] if no_opt else []
    reg_alloc = ["--regAllocOptLevel=2"] if recipe.reg_alloc else []
    extra = _extra_options(md.get("ptx_options"))
    if not no_opt and _sanitizer_opt(md, recipe.sanitizer_opt):
        extra += ["--opt-level", "1"]
    gpu = f"--gpu-name=sm_{arch}{'a' if arch >= 90 else ''}"
    return arch, [*debug, *fmad, "-v", *disable_opt, *reg_alloc, *extra, gpu]


def _debug_flags(md: dict, no_opt: bool, recipe: ptxas.TritonRecipe) -> list[str]:
    """The line-info or debug flags ``make_cubin`` passes: ``-suppress-debug-info`` with line info off,
    ``-g`` with optimisation off where the release does so, else ``-lineinfo``."""
    if _env_true(md, "TRITON_DISABLE_LINE_INFO"):
        return ["-lineinfo", "-suppress-debug-info"]
    if no_opt and recipe.debug_g:
        return ["-g"]
    return ["-lineinfo"]


def _extra_options(opts: object) -> list[str]:
    """The metadata's ``ptx_options`` as flags, only through the allow-list (:class:`RefusedOption` else)."""
    if opts is not None and not isinstance(opts, str):
        raise RefusedOption(f"ptx_options is a {type(opts).__name__}, not a string; it was not run")
    return allowed_ptx_options(opts) if opts else []


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
    for cmaj, cmin in (
        [(11, m) for m in range(10)]
        + [(12, m) for m in range(10)]
        + [(13, m) for m in range(10)]
        + [(14, m) for m in range(10)]
    ):
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
    except Exception:
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
