"""``jitwarden completion bash|zsh|fish``: the shell completion script, generated from the parser by shtab.

What each argument completes is decided here, once, by its name (commands declare none of it): paths
complete file names, ``--kind`` and ``dir KIND`` the cache kinds, ``--code`` the finding codes, ``--target``
the GPU architectures, quarantine ids those ``quarantine ls`` lists (one ``jitwarden`` run per Tab, only there).
Bash keeps its own file-name completion wherever nothing is generated (``complete -o default``).
"""

from __future__ import annotations

import argparse

#: Options and positionals (by dest) whose values are paths: completed as file names.
_PATH_DESTS = frozenset(
    {"paths", "root", "ptxas", "keep_cubins", "output", "input", "diff", "cache", "bundle", "key"}
)
_PATH_METAVARS = frozenset({"PATH", "DIR", "FILE"})

_BASH_IDS = r"""
_jitwarden_quarantine_ids() {
  jitwarden quarantine ls 2>/dev/null |
    awk 'NR > 1 && !/^ / && !/^[0-9]+ quarantined/ {print $1}' |
    while IFS= read -r id; do [[ "$id" == "$1"* ]] && printf '%s\n' "$id"; done
}
"""


def _words(name: str, values) -> dict[str, str]:
    """A completer of fixed ``values`` for every shell shtab writes (bash through a function ``name``)."""
    joined = " ".join(values)
    return {"bash": name, "zsh": f"({joined})", "fish": joined, "tcsh": f"({joined})"}


def _bash_function(name: str, values) -> str:
    return f'{name}() {{ compgen -W "{" ".join(values)}" -- "$1"; }}\n'


def _completers() -> tuple[dict[str, dict[str, str]], str]:
    """{what: completer}, and the bash functions they call."""
    from jitwarden.model.arch import KNOWN
    from jitwarden.model.findings import CODES
    from jitwarden.model.kinds import NAMES as KINDS

    values = {
        "kind": ("_jitwarden_kinds", KINDS),
        "dir_kind": ("_jitwarden_dir_kinds", (*KINDS, "jitwarden")),
        "code": ("_jitwarden_codes", tuple(CODES)),
        "target": ("_jitwarden_targets", tuple(f"sm_{a}" for a in KNOWN)),
    }
    comp = {k: _words(name, vals) for k, (name, vals) in values.items()}
    comp["ids"] = {"bash": "_jitwarden_quarantine_ids"}
    funcs = "".join(_bash_function(name, vals) for name, vals in values.values()) + _BASH_IDS
    return comp, funcs


def _mark(parser: argparse.ArgumentParser, comp: dict, prog: tuple[str, ...] = ()) -> None:
    """Set shtab's ``complete`` on every action of ``parser`` and its subparsers that has values to offer."""
    import shtab

    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for name, sub in a.choices.items():
                _mark(sub, comp, (*prog, name))
            continue
        if a.nargs == 0 or a.choices:  # a flag, or argparse's own choices (shtab completes those)
            continue
        if a.dest == "kind":
            a.complete = comp["dir_kind" if prog == ("dir",) else "kind"]  # type: ignore[attr-defined]
        elif a.dest in ("code", "target"):
            a.complete = comp[a.dest]  # type: ignore[attr-defined]
        elif a.dest == "ids" and prog[:1] == ("quarantine",):
            a.complete = comp["ids"]  # type: ignore[attr-defined]
        elif a.dest in _PATH_DESTS or a.metavar in _PATH_METAVARS:
            a.complete = shtab.FILE  # type: ignore[attr-defined]


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``shell`` for ``parser`` (every command's)."""
    import shtab

    comp, funcs = _completers()
    _mark(parser, comp)
    text = shtab.complete(parser, shell=shell, preamble=funcs if shell == "bash" else "")
    if shell == "bash":
        # shtab registers `complete -o bashdefault -F`: with nothing generated, bash would offer nothing, not
        # even file names. `-o default` keeps readline's file-name completion there.
        text = text.replace("complete -o bashdefault -F", "complete -o bashdefault -o default -F")
    return text
