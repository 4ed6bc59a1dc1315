"""Always-miss, with its cause (issue 44): a kernel of one name compiled again under a new key, and which
input of the key changed.

:func:`suspects` finds them in a workload's record (pure): a name that, in a later start, only compiled
(no hit), under a key not compiled before; or that compiled under several keys within one start.
:func:`read_triton` reads what Triton keeps with each entry (its metadata JSON: options, the
key's environment variables that were set, target, version; its TTIR, locations stripped, as the code it
compiled to) and :func:`diagnose` (pure) diffs them: ``triton: add_kernel compiled 5 times in 5 starts:
only TRITON_DEFAULT_FP_FUSION differs (unset, "0", "1")``, with the fix that stops it. An FX graph or an
AOTAutograd graph (named by its order in the start, ``graph 3``) is diagnosed by :func:`diagnose_graph`
from the hash torch gave each input of its key, which the record keeps with its compile:
``inductor: graph 1 compiled 3 times in 3 starts: its key holds a value that is new in every start:
only post_grad_custom_post_pass differs (...) (the same graph, the same inputs)``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from jitwarden.formats import jsonlimits
from jitwarden.model.asjson import fields_json
from jitwarden.ops.workload import Workload
from jitwarden.store import reads

MAX_META = 4 << 20
MAX_TTIR = 16 << 20
DERIVED = frozenset(
    {
        "hash",
        "name",
        "shared",
        "tmem_size",
        "global_scratch_size",
        "global_scratch_align",
        "profile_scratch_size",
        "profile_scratch_align",
        "tensordesc_meta",
        "extern_libs",
        "cluster_dims",
    }
)
"""Metadata fields that are results of the compile or paths of this machine, not inputs of the key."""
ENV_OPTIONS = {"TRITON_DEFAULT_FP_FUSION": ("enable_fp_fusion",)}
"""An environment variable of Triton's key -> the options it sets (their change is its change)."""
GRAPH_KINDS = frozenset({"inductor", "aot"})
"""Kinds whose entries are graphs, diagnosed by the inputs of their keys (:func:`diagnose_graph`)."""
SHAPE_INPUTS = frozenset({"gm", "example_inputs"})
"""The inputs of a graph's key that are the graph itself and what it is called with."""
_PASS_FIX = (
    "give the custom pass a uuid() that is the same in every start (a hash of its code, not a random "
    "value or the time)"
)
GRAPH_FIXES = {
    "post_grad_custom_pre_pass": _PASS_FIX,
    "post_grad_custom_post_pass": _PASS_FIX,
    "joint_custom_pre_pass": _PASS_FIX,
    "joint_custom_post_pass": _PASS_FIX,
    "pre_grad_custom_pass": _PASS_FIX,
    "custom_partitioner_fn": _PASS_FIX,
    "inductor_config": "set torch._inductor.config the same way in every start (one of its values changes)",
    "fx_kwargs": "call torch.compile with the same options in every start",
}
"""An input of a graph's key -> what stops it changing (none where the fix is not one line)."""
_LOC = re.compile(r"\s*loc\((?:[^()]|\([^()]*\))*\)")


@dataclass(frozen=True, kw_only=True)
class KeyInputs:
    """What Triton recorded with one entry: the key's environment variables, options, target, version, and
    a digest of the code (TTIR without source locations; None when it could not be read)."""

    env: dict
    options: dict
    target: str
    version: str
    code: str | None


@dataclass(frozen=True, kw_only=True)
class Suspect:
    kind: str
    name: str
    keys: tuple[str, ...]
    compiles: int
    starts: int
    across: bool


@dataclass(frozen=True, kw_only=True)
class AlwaysMiss:
    """One always-missing kernel: ``cause`` (``env``, ``option``, ``source``, ``code``, ``target``,
    ``version``, ``unknown``; for a graph ``random``, ``setting``, ``graph``), what differs (field, its values in order) and the fix, '' when none."""

    kind: str
    name: str
    compiles: int
    starts: int
    keys: int
    cause: str
    why: str
    fix: str = ""
    differs: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def line(self) -> str:
        where = f"{self.starts} starts" if self.starts > 1 else "one start"
        head = f"{self.kind}: {self.name} compiled {self.compiles} times in {where}: {self.why}"
        return f"{head}; fix: {self.fix}" if self.fix else head

    def to_json(self) -> dict:
        return fields_json(self, differs={f: list(v) for f, v in self.differs}, line=self.line())


# ---------------------------------------------------------------- from the record (pure)


def suspects(w: Workload) -> list[Suspect]:
    """The names of ``w`` that compiled again under a new key (pure; module docstring)."""
    by_name: dict[tuple[str, str], list] = {}
    for e in w.events:
        if e.event != "listed":
            by_name.setdefault((e.kind, e.name), []).append(e)
    out = []
    for (kind, name), events in by_name.items():
        keys = tuple(dict.fromkeys(e.key for e in events if e.event == "compile"))
        if len(keys) < 2:
            continue
        starts = tuple(dict.fromkeys(e.start for e in events))
        across, within = _recompiled(events, starts)
        if across or within:
            compiles = sum(e.event == "compile" for e in events)
            out.append(
                Suspect(
                    kind=kind,
                    name=name,
                    keys=keys,
                    compiles=compiles,
                    starts=len(starts),
                    across=across,
                )
            )
    return out


def _recompiled(events: list, starts: tuple) -> tuple[bool, bool]:
    """(a start compiled a key no earlier start had and was served nothing from the cache; a start compiled
    more than one key) over one name's ``events`` in the order of ``starts`` (pure)."""
    across, within = False, False
    seen: set[str] = set()
    for s in starts:
        mine = [e for e in events if e.start == s]
        compiled = {e.key for e in mine if e.event == "compile"}
        if seen and compiled - seen and not any(e.event == "hit" for e in mine):
            across = True
        within = within or len(compiled) > 1
        seen |= {e.key for e in mine}
    return across, within


def _shown(v) -> str:
    return (
        "unset"
        if v is None
        else json.dumps(v, sort_keys=True)
        if not isinstance(v, str)
        else f'"{v}"'
    )


def _differing(rows: list[dict]) -> list[tuple[str, tuple[str, ...]]]:
    names = sorted({n for r in rows for n in r})
    out = []
    for n in names:
        vals = tuple(dict.fromkeys(_shown(r.get(n)) for r in rows))
        if len(vals) > 1:
            out.append((n, vals))
    return out


def _only(diffs: list[tuple[str, tuple[str, ...]]]) -> str:
    """``only X differs (a, b)``, or ``X (a, b) and Y (c, d) differ`` (pure)."""
    if len(diffs) == 1:
        n, v = diffs[0]
        return f"only {n} differs ({', '.join(v)})"
    return " and ".join(f"{n} ({', '.join(v)})" for n, v in diffs) + " differ"


def diagnose_graph(s: Suspect, inputs: dict) -> AlwaysMiss | None:
    """Why graph ``s`` (an FX graph or an AOTAutograd graph) compiled again, from the inputs of its keys
    (``inputs``: key -> ``{"h": {input: hash}, "v": {input: short value}}`` or None) (pure). Names in a graph
    record are orders in a start, so one name has one key a start: a new key is a new start's."""
    if not s.across:
        return None
    base = _counts(s)
    got = [inputs[k] for k in s.keys if inputs.get(k)]
    if len(got) < 2:
        return AlwaysMiss(
            **base,
            cause="unknown",
            why="a new key in every start, none served from the cache (the inputs of its keys were not "
            "recorded to tell which changed)",
        )
    changed = _changed_inputs(got)
    if not changed:
        cut = any(g.get("more") for g in got)
        return AlwaysMiss(
            **base,
            cause="unknown",
            why="a new key in every start, yet every input of it recorded is the same"
            + (" (torch listed more inputs than the record keeps)" if cut else ""),
        )
    return _changed_graph_input(base, changed, got)


def _changed_inputs(got: list) -> list[str]:
    """The inputs whose hash differs between the keys ``got``, sorted; an input whose items changed is
    left to them, which say it by name (pure)."""
    names = sorted({n for g in got for n in g["h"]})
    changed = [n for n in names if len({g["h"].get(n) for g in got}) > 1]
    told = {n.split("[", 1)[0] for n in changed if "[" in n}
    return [n for n in changed if n not in told]


def _changed_graph_input(base: dict, changed: list[str], got: list) -> AlwaysMiss:
    """The cause when the inputs ``changed`` differ between the keys ``got``: the graph itself (a shape or
    a constant traced into it), a value new in every start, or a setting that differs (pure)."""
    rows = [{n: g["v"].get(n, f"#{g['h'].get(n, '')[:10]}") for n in changed} for g in got]
    diffs = [(n, tuple(dict.fromkeys(r[n] for r in rows))) for n in changed]
    every = all(len(v) == len(got) for _n, v in diffs)
    shape = any(n.split("[", 1)[0] in SHAPE_INPUTS for n in changed)
    fix = next(
        (GRAPH_FIXES[n.split("[", 1)[0]] for n in changed if n.split("[", 1)[0] in GRAPH_FIXES), ""
    )
    if shape:
        return AlwaysMiss(
            **base,
            cause="graph",
            why=(
                "the graph itself is new in every start (a Python value traced into it as a constant: a "
                "random number, a time, a counter): "
                if every
                else "the graph or its inputs differ between starts: "
            )
            + _only(diffs),
            differs=tuple(diffs),
        )
    return AlwaysMiss(
        **base,
        cause="random" if every else "setting",
        why=(
            f"its key holds a value that is new in every start: {_only(diffs)} (the same graph, the same inputs)"
            if every
            else f"{_only(diffs)} (the same graph, the same inputs)"
        ),
        fix=fix,
        differs=tuple(diffs),
    )


def _counts(s: Suspect) -> dict[str, Any]:
    """What every :class:`AlwaysMiss` of ``s`` says of it: its kind, name, compiles, starts and keys."""
    return {
        "kind": s.kind,
        "name": s.name,
        "compiles": s.compiles,
        "starts": s.starts,
        "keys": len(s.keys),
    }


def diagnose(s: Suspect, inputs: dict) -> AlwaysMiss | None:
    """Why ``s`` compiled again, from the :class:`KeyInputs` of its keys (``inputs``: key -> KeyInputs or None)
    (pure). None for a name that compiled several keys within one start for a reason that is a
    specialization (another option, other code): that is a workload using several variants, not a miss."""
    base = _counts(s)
    got = [inputs[k] for k in s.keys if inputs.get(k) is not None]
    if s.kind != "triton" or len(got) < 2:
        return _unexplained(s, base)
    return _by_key_inputs(s, base, got)


def _unexplained(s: Suspect, base: dict) -> AlwaysMiss | None:
    """A name whose key inputs are not kept (gone, or a kind that keeps none): a miss only across starts."""
    if not s.across:
        return None
    what = (
        "its entries are gone"
        if s.kind == "triton"
        else f"{s.kind} keeps no key inputs with its entries"
    )
    return AlwaysMiss(
        **base,
        cause="unknown",
        why=f"a new key in every start, none served from the cache ({what} to tell which input changed)",
    )


def _by_key_inputs(s: Suspect, base: dict, got: list) -> AlwaysMiss | None:
    """What differs between the key inputs ``got`` of ``s``: the environment, an option, the target or
    version, else the source (pure)."""
    env = _differing([g.env for g in got])
    explained = {o for n, _v in env for o in ENV_OPTIONS.get(n, ())}
    opts = [d for d in _differing([g.options for g in got]) if d[0] not in explained]
    if env:
        names = ", ".join(n for n, _v in env)
        return _found(
            s,
            base,
            "env",
            env + opts,
            f"set {names} to one value for every start (or leave it unset)",
        )
    if opts:
        return _found(
            s,
            base,
            "option",
            opts,
            "pass the same "
            + ", ".join(n for n, _v in opts)
            + " at every call: each value is its own key",
            within_ok=False,
        )
    for field in ("target", "version"):
        d = _differing([{field: getattr(g, field)} for g in got])
        if d:
            return _found(s, base, field, d, "", within_ok=False)
    return _by_source(s, base, {g.code for g in got})


def _by_source(s: Suspect, base: dict, codes: set) -> AlwaysMiss | None:
    """Only the source differs: its text alone (``codes``, the code digests, all one) or its code too."""
    if None not in codes and len(codes) == 1:
        return AlwaysMiss(
            **base,
            cause="source",
            why="only the kernel's source text differs, not the code it compiles to (a comment, a blank or moved "
            "line: Triton's key hashes the source)",
            fix="keep the kernel's source file the same for every start (no per-start edit or generated text)",
        )
    if not s.across:
        return None
    return AlwaysMiss(
        **base,
        cause="code" if None not in codes else "unknown",
        why="its source differs and so does its code (an edit or a per-start specialization)"
        if None not in codes
        else "nothing Triton records with the entries differs (its own build or ptxas' version text may)",
    )


def _found(
    s: Suspect, base: dict, cause: str, diffs, fix: str, within_ok: bool = True
) -> AlwaysMiss | None:
    if not s.across and not within_ok:
        return None
    return AlwaysMiss(**base, cause=cause, why=_only(diffs), fix=fix, differs=tuple(diffs))


# ---------------------------------------------------------------- what Triton kept with each entry


def code_digest(ttir: bytes) -> str:
    """A digest of TTIR without its source locations (pure): equal for a comment moved, different for other code."""
    text = ttir.decode("utf-8", "replace")
    body = [_LOC.sub("", ln) for ln in text.splitlines() if not ln.startswith("#loc")]
    return hashlib.sha256("\n".join(body).encode()).hexdigest()


def inputs_of(meta: dict, ttir: bytes | None) -> KeyInputs:
    """The :class:`KeyInputs` of one entry's metadata JSON and TTIR (pure)."""
    env = {k: v for k, v in meta.items() if k.isupper()}
    options = {
        k: v
        for k, v in meta.items()
        if not k.isupper() and k not in DERIVED and k not in ("target", "triton_version")
    }
    raw_t = meta.get("target")
    t: dict = raw_t if isinstance(raw_t, dict) else {}
    target = f"{t.get('backend', '?')}:{t.get('arch', '?')}"
    return KeyInputs(
        env=env,
        options=options,
        target=target,
        version=str(meta.get("triton_version", "")),
        code=None if ttir is None else code_digest(ttir),
    )


def read_triton(roots, key: str, name: str) -> KeyInputs | None:
    """What Triton kept with entry ``key`` (kernel ``name``) in the first of ``roots`` that holds it; None when
    none does or its metadata cannot be read (bounded reads, never following a link)."""
    if not name or "/" in name or name.startswith("."):
        return None
    for root in roots:
        entry = os.path.join(root, key)
        try:
            meta = jsonlimits.loads(
                reads.read_bytes(os.path.join(entry, f"{name}.json"), max_bytes=MAX_META)
            )
        except (OSError, ValueError, UnicodeDecodeError):
            continue
        if not isinstance(meta, dict):
            continue
        try:
            ttir: bytes | None = reads.read_bytes(
                os.path.join(entry, f"{name}.ttir"), max_bytes=MAX_TTIR
            )
        except OSError:
            ttir = None
        return inputs_of(meta, ttir)
    return None


def check(w: Workload, triton_roots) -> list[AlwaysMiss]:
    """Every always-miss of ``w``, its cause read from ``triton_roots`` (the dirs its Triton entries lie in)."""
    graphs = {(e.kind, e.key): e.inputs for e in w.events if e.inputs and e.kind in GRAPH_KINDS}
    found = suspects(w)
    named = {s.name for s in found if s.kind == "inductor"}
    out = []
    for s in found:
        if s.kind == "aot" and s.name in named:
            continue  # AOTAutograd's key holds its FX graph's inputs: the inductor line says why
        if s.kind in GRAPH_KINDS:
            miss = diagnose_graph(s, {k: graphs.get((s.kind, k)) for k in s.keys})
        else:
            triton = s.kind == "triton"
            miss = diagnose(
                s, {k: read_triton(triton_roots, k, s.name) for k in s.keys} if triton else {}
            )
        if miss is not None:
            out.append(miss)
    return out
