"""``jitwarden canary``: compile and run a battery of Triton kernels on the GPU, then run them again from the cache.

Exit status: 0 every kernel within tolerance in every pass, 1 any kernel wrong or failing,
2 no CUDA GPU, no torch or no Triton (or a bad ``--cache``).
"""

from __future__ import annotations

import importlib.util
import os
import sys

from jitwarden.cli import options
from jitwarden.cli import render as out
from jitwarden.model.errors import UsageError
from jitwarden.store import removal, tempdirs


def register(sub) -> None:
    p = sub.add_parser(
        "canary",
        help="run a battery of Triton kernels on the GPU, compiled and from the cache",
        description="Compile a battery of Triton kernels (elementwise, reduction, softmax, tl.dot fp16/bf16, "
        "fp8 e4m3 conversion on sm_89+, atomics) into a scratch cache guarded by jitwarden, run them "
        "against torch references, then run them again in a fresh process through the cache-hit path. "
        "Exit 0 all pass, 1 any fail, 2 no CUDA GPU / torch / Triton.",
    )
    p.add_argument(
        "--cache",
        metavar="DIR",
        help="run the battery through this existing Triton cache directory instead of a scratch one, "
        "with the cache manager of your environment (stock Triton unless TRITON_CACHE_MANAGER is "
        "set), so a suspect cache is tested as your programs would load it. Nothing in DIR is "
        "changed, except that kernels it lacks are compiled into it, as Triton itself would",
    )
    p.add_argument(
        "--guard",
        action="store_true",
        help="with --cache: load through jitwarden's guarded cache manager instead (it seals the "
        "canary's entries and quarantines any that fail their seal)",
    )
    p.add_argument(
        "--passes",
        type=int,
        default=2,
        metavar="N",
        help="fresh processes to run the battery in (default 2: compile, then cache hit)",
    )
    p.add_argument(
        "--keep-cache", action="store_true", help="keep the scratch cache and print where it is"
    )
    options.refuse(p, "--keep", "renamed --keep-cache (keep the scratch cache)")
    options.add_format_argument(p)
    options.examples(
        p,
        "jitwarden canary                        compile the battery, then run it from the cache",
        "jitwarden canary --cache ~/.triton/cache  a suspect cache, loaded as your programs load it",
        "jitwarden canary --cache DIR --guard      the same through jitwarden's guarded cache manager",
    )
    p.set_defaults(func=run)


def _check_imports() -> None:
    missing = [
        name
        for name, mod in (("torch", "torch"), ("Triton", "triton"))
        if importlib.util.find_spec(mod) is None
    ]
    if missing:
        raise UsageError(
            f"canary needs torch and Triton with a CUDA GPU; {' and '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed in {sys.executable}"
        )


def run(args) -> int:
    from jitwarden.ops import canary

    if args.passes < 1:
        raise UsageError("--passes must be 1 or more")
    if args.guard and not args.cache:
        raise UsageError("--guard goes with --cache (the scratch cache is always guarded)")
    _check_imports()
    if args.cache:
        cache_dir = os.path.abspath(args.cache)
        if not os.path.isdir(cache_dir):
            raise UsageError(f"--cache {args.cache}: no such directory")
        scratch = False
        manager = canary.MANAGER if args.guard else os.environ.get("TRITON_CACHE_MANAGER") or None
    else:
        cache_dir = tempdirs.private_dir("jitwarden-canary-")
        scratch = True
        manager = canary.MANAGER

    def relay(line: str) -> None:
        print(line, file=sys.stderr)

    try:
        rep = canary.run_passes(cache_dir, scratch, manager, passes=args.passes, stderr_sink=relay)
    except canary.NoGPU as exc:
        why = str(exc)
        why = why.removeprefix("no CUDA GPU: ")
        raise UsageError(f"canary needs a CUDA GPU: {why}") from None
    finally:
        if scratch and not args.keep_cache:
            _remove_scratch(cache_dir)
    out.output_format(args).result("canary", rep.to_json, lambda: _print_table(rep))
    if scratch and args.keep_cache:
        print(f"jitwarden: scratch cache kept at {cache_dir}", file=sys.stderr)
    return rep.exit_code


def _remove_scratch(cache_dir: str) -> None:
    """The scratch cache gone; what cannot be removed stays in the system's temp dir (never an error)."""
    try:
        removal.remove_tree(cache_dir)
    except OSError:
        pass


_STATUS_STYLE = {"pass": "green", "FAIL": "bold red", "skipped": "dim"}


def _print_table(rep) -> None:
    from jitwarden.ops import canary

    con = out.console()
    cols = {
        "EXERCISES": out.Column("EXERCISES", flex=True, min=12),
        "MAX ABS ERR": out.Column("MAX ABS ERR", right=True),
        "MAX REL ERR": out.Column("MAX REL ERR", right=True),
        "DETAILS": out.Column("DETAILS", wrap=True, min=12),
    }
    g = out.Grid([cols.get(h, out.Column(h)) for h in canary.TABLE_HEADER])
    status = canary.TABLE_HEADER.index("STATUS")
    for row in canary.table_rows(rep):
        cells: list[object] = list(row)
        cells[status] = (row[status], _STATUS_STYLE[row[status]])
        g.add(*cells)
    con.print(g)
    for n in rep.notes:
        con.print(out.text(("note", "yellow"), " ", n))
    out.hanging(con, out.text((rep.summary_line(), "dim")))
