"""The budget a GPU benchmark runs within, and its results file written after every measurement (issue 43).

A GPU call has a hard limit (10 minutes, and a per-session device budget). A benchmark that measures for longer
is killed with nothing to show: issue 43's part 2 never gave its answer because two cold compiles ate the limit
before any warm pair. So every GPU benchmark takes ``--budget SECONDS``, orders its parts so the headline ratio
comes first, and, through :class:`Budget`:

- prints each result the moment it has it and rewrites its JSON (``--json``) after every measurement, atomically,
  so a killed run keeps everything it measured;
- asks :meth:`Budget.fits` before each part or pair with what that part is expected to cost, and records what it
  skipped for lack of budget (``skipped``: what, why), so a short budget ends cleanly and says what is missing.

    from _budget import Budget, add_arguments
    add_arguments(ap, "warm.json")      # --budget, --json
    b = Budget.from_args("warm", args)
    if b.fits("default fx-on pair 3", 2 * wall):
        b.put("default/fx-on", row)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time

DEFAULT_BUDGET = float(os.environ.get("JW_BUDGET", "0") or 0)
"""Seconds; 0 is no budget. ``JW_BUDGET`` lets a driver (h200_all.py) hand its own down."""


def add_arguments(ap: argparse.ArgumentParser, default_json: str) -> None:
    """``--budget SECONDS`` and ``--json PATH`` (default ``<--out>/default_json``, resolved by :func:`json_path`)."""
    ap.add_argument(
        "--budget",
        type=float,
        default=DEFAULT_BUDGET,
        metavar="SECONDS",
        help="wall-clock budget: parts that would not finish in it are skipped and said (default: none)",
    )
    ap.add_argument(
        "--json",
        metavar="PATH",
        default=None,
        help=f"results file, rewritten after every measurement (default: <out>/{default_json})",
    )
    ap.set_defaults(_budget_json=default_json)


def json_path(args: argparse.Namespace, out: str) -> str:
    return args.json or os.path.join(out, args._budget_json)


_MACHINE: dict | None = None


def machine() -> dict:
    """Where this runs: host, CPUs, GPUs and driver (``nvidia-smi``, when there is one), Python."""
    global _MACHINE
    if _MACHINE is None:
        gpus = None
        try:
            p = subprocess.run(
                [
                    "nvidia-smi",
                    "--query-gpu=name,driver_version,memory.total",
                    "--format=csv,noheader",
                ],
                capture_output=True,
                text=True,
                timeout=20,
            )
            gpus = (
                [x.strip() for x in p.stdout.splitlines() if x.strip()]
                if p.returncode == 0
                else None
            )
        except (OSError, subprocess.SubprocessError):
            gpus = None
        _MACHINE = {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "gpus": gpus,
            "python": sys.version.split()[0],
            "uid": os.getuid(),
        }
    return _MACHINE


class Budget:
    """One benchmark's clock and results document (``results``: key -> value, in the order measured)."""

    def __init__(self, name: str, seconds: float, path: str, options: dict | None = None) -> None:
        self.t0 = time.monotonic()
        self.seconds = seconds if seconds and seconds > 0 else None
        self.path = os.path.abspath(path)
        self.doc: dict = {
            "benchmark": name,
            "budget_s": self.seconds,
            "machine": machine(),
            "options": options or {},
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "results": {},
            "skipped": [],
            "complete": False,
        }
        self.write()

    @classmethod
    def from_args(cls, name: str, args: argparse.Namespace, out: str) -> Budget:
        opts = {k: v for k, v in vars(args).items() if not k.startswith("_") and _plain(v)}
        return cls(name, args.budget, json_path(args, out), opts)

    def spent(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.spent()

    def timeout(self, cap: float = 600.0, floor: float = 5.0) -> float:
        """A child's timeout: what is left of the budget (at least ``floor``), at most ``cap``."""
        return max(floor, min(cap, self.left()))

    def fits(self, what: str, need_s: float) -> bool:
        """Whether ``what``, expected to take ``need_s`` seconds, ends within the budget; when not, it is
        recorded as skipped (and printed)."""
        left = self.left()
        if need_s <= left:
            return True
        self.skip(
            what,
            f"needs ~{need_s:.0f} s, {max(left, 0):.0f} s of the {self.seconds:.0f} s budget left",
        )
        return False

    def skip(self, what: str, why: str) -> None:
        self.doc["skipped"].append({"what": what, "why": why, "at_s": round(self.spent(), 1)})
        print(f"SKIPPED {what}: {why}", flush=True)
        self.write()

    def put(self, key: str, value, *, show: bool = True) -> None:
        """Record one result, print it (cut to a line) and rewrite the JSON."""
        self.doc["results"][key] = value
        if show:
            text = json.dumps(value, default=str)
            print(
                f"RESULT [{self.spent():6.1f}s] {key}: {text if len(text) <= 400 else text[:397] + '...'}",
                flush=True,
            )
        self.write()

    def note(self, key: str, value) -> None:
        """A fact about the run that is no result (which model, which roots); written at once."""
        self.doc[key] = value
        self.write()

    def finish(self, **summary) -> None:
        self.doc.update(summary)
        self.doc["complete"] = True
        self.doc["elapsed_s"] = round(self.spent(), 1)
        self.write()
        skipped = self.doc["skipped"]
        print(
            f"DONE {self.doc['benchmark']} in {self.spent():.0f} s; "
            + (
                f"skipped: {', '.join(s['what'] for s in skipped)}"
                if skipped
                else "nothing skipped"
            )
            + f"; results in {self.path}",
            flush=True,
        )

    def write(self) -> None:
        self.doc["elapsed_s"] = round(self.spent(), 1)
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        tmp = f"{self.path}.tmp{os.getpid()}"
        with open(tmp, "w") as f:
            json.dump(self.doc, f, indent=1, default=str)
        os.replace(tmp, self.path)


def _plain(v) -> bool:
    return v is None or isinstance(v, (str, int, float, bool, list))


def shared_workdir(prefix: str) -> str:
    """A fresh work directory every user can enter (0755 up to ``/``), outside ``$OUT`` (which is root's, 0700):
    benchmarks that run a step as another uid (h200_trust.py) put their scripts and caches here."""
    import tempfile

    base = "/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir()
    d = tempfile.mkdtemp(prefix=prefix, dir=base)
    os.chmod(d, 0o755)
    return d
