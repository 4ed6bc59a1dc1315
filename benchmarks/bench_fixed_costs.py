"""Fixed costs of a guarded process: ``activate()`` and ``jitwarden run -- python -c pass`` over a bare interpreter.

Every guarded Python pays these once (vLLM: once per rank). Measured in fresh virtual environments made
for the run, each holding this tree's ``src`` (and ``--ref REV``'s, unpacked by ``git archive``, so the
"before" code is timed in the same rounds):

- ``empty``: jitwarden and its own dependencies only;
- ``torch``: also sees the test venv's site-packages (torch, Triton);
- ``big`` (``--big N``): as ``torch`` plus a site dir of N names (empty dist-infos and modules), the size of
  a real GPU image's site-packages (17,980 names on the H200 image), where a check that lists site-packages
  shows. After the memo is filled an unrelated package is installed there (its stat moves once).

Each round runs, in every venv and for every code tree, ``python -c pass`` (the baseline),
``python -c "import jitwarden; jitwarden.activate()"`` (warm memo) and ``jitwarden run -- python -c pass``
(the console script, as users run it), interleaved; the order of the trees flips each round. Printed: the
medians, each one's extra over the bare interpreter of the same venv and round set, and the ratio
after/before of the extra. ``--profile`` also prints where a warm ``activate()`` spends its time
(cProfile of one child, and ``-X importtime``'s jitwarden modules).

    python benchmarks/bench_fixed_costs.py [--pairs 15] [--ref REV] [--big 18000] [--venvs empty,torch]
        [--parts] [--import-torch] [--profile]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
ACTIVATE = "import jitwarden; jitwarden.activate()"
CLI_DEPS = ("rich", "shtab", "orjson", "markdown_it", "mdurl", "pygments")
"""jitwarden's own dependencies (pyproject) and theirs: all the ``empty`` venv holds besides jitwarden."""
SCRIPT = "#!{py}\nimport sys\nfrom jitwarden.cli.main import main\nsys.exit(main())\n"


def base_src(rev: str, dst: str) -> str:
    """``src/`` of git revision ``rev`` unpacked under ``dst`` (``git archive``; no worktree touched)."""
    os.makedirs(dst, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", ROOT, "archive", rev, "src"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", dst], input=archive, check=True)
    return os.path.join(dst, "src")


def shared_site() -> str:
    """The site-packages torch comes from (the test venv's, which this interpreter sees)."""
    import torch  # noqa: F401  (only to find where it lives)

    return os.path.dirname(os.path.dirname(sys.modules["torch"].__file__ or ""))


def deps_dir(dst: str, site: str) -> str:
    """A dir of links to jitwarden's own dependencies only (and their dist-infos), for the empty venv."""
    os.makedirs(dst, exist_ok=True)
    for name in os.listdir(site):
        base = name.split("-")[0].lower()
        if base in CLI_DEPS or name.lower().split(".")[0] in CLI_DEPS:
            os.symlink(os.path.join(site, name), os.path.join(dst, name))
    return dst


def big_site(dst: str, n: int) -> str:
    """A site dir of ``n`` names: half empty dist-infos, half empty modules (what a big image lists)."""
    os.makedirs(dst, exist_ok=True)
    for i in range(n // 2):
        os.mkdir(os.path.join(dst, f"pad_pkg_{i:05d}-1.0.dist-info"))
        with open(os.path.join(dst, f"pad_pkg_{i:05d}.py"), "w"):
            pass
    return dst


def make_venv(dst: str, pth: list[str]) -> str:
    """A venv at ``dst`` whose site-packages adds ``pth`` (a .pth file); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", dst], check=True)
    py = os.path.join(dst, "bin", "python")
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with open(os.path.join(site, "bench.pth"), "w") as f:
        f.write("\n".join(pth) + "\n")
    script = os.path.join(dst, "bin", "jitwarden")
    with open(script, "w") as f:
        f.write(SCRIPT.format(py=py))
    os.chmod(script, 0o755)
    return py


def once(cmd: list[str], env: dict) -> float:
    t = time.perf_counter()
    subprocess.run(cmd, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - t


PARTS = {
    "cli": "import jitwarden.cli.main, jitwarden.cli.commands.run",
    "hooks": "from jitwarden.runtime.guards import install_torch; install_torch()",
}
"""``--parts``: what ``run`` is made of besides ``activate``: its CLI (parent), the hooks its boot
``sitecustomize`` installs in the command's Python (child)."""


def commands(venv: str, parts: bool = False, torch: bool = False) -> dict[str, list[str]]:
    py = os.path.join(venv, "bin", "python")
    run = [os.path.join(venv, "bin", "jitwarden"), "run", "--"]
    cmds = {
        "bare": [py, "-c", "pass"],
        "activate": [py, "-c", ACTIVATE],
        "run": [*run, py, "-c", "pass"],
    }
    if parts:
        cmds.update({k: [py, "-c", code] for k, code in PARTS.items()})
    if torch:
        cmds.update(
            {"torch": [py, "-c", "import torch"], "run torch": [*run, py, "-c", "import torch"]}
        )
    return cmds


def clean_env(tmp: str) -> dict:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TRITON_", "JITWARDEN_", "VLLM_", "TORCHINDUCTOR_", "PYTHON"))
    }
    env.update(HOME=os.path.join(tmp, "home"), XDG_CACHE_HOME=os.path.join(tmp, "home", ".cache"))
    os.makedirs(env["HOME"], exist_ok=True)
    return env


def profile(venv: str, env: dict) -> None:
    """Where a warm ``activate()`` spends its time: cProfile's top entries, jitwarden's imports."""
    py = os.path.join(venv, "bin", "python")
    code = (
        "import cProfile, pstats, io; pr = cProfile.Profile(); pr.enable();"
        f"{ACTIVATE}; pr.disable(); s = io.StringIO();"
        "pstats.Stats(pr, stream=s).sort_stats('cumulative').print_stats(18); print(s.getvalue())"
    )
    out = subprocess.run([py, "-c", code], env=env, capture_output=True, text=True, check=True)
    print(out.stdout.strip())
    out = subprocess.run(
        [py, "-X", "importtime", "-c", ACTIVATE], env=env, capture_output=True, text=True
    )
    rows = [ln.split("|") for ln in out.stderr.splitlines() if ln.startswith("import time:")]
    mods = [(int(r[1]), r[2].strip()) for r in rows[1:] if r[1].strip().isdigit()]
    jw = [m for m in mods if m[1].lstrip().startswith("jitwarden")]
    top = sum(us for us, name in mods if not name.startswith(" "))
    print(f"-X importtime: {len(jw)} jitwarden modules imported, all imports {top / 1000:.1f} ms")
    for us, name in sorted(mods, reverse=True)[:12]:
        print(f"  {us / 1000:7.1f} ms cumulative  {name}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=15, help="interleaved rounds (default 15)")
    ap.add_argument("--ref", help="a git revision whose src is timed in the same rounds")
    ap.add_argument("--big", type=int, default=0, help="also a venv with N extra site names")
    ap.add_argument("--venvs", default="empty,torch", help="which venvs (empty, torch)")
    ap.add_argument("--profile", action="store_true", help="print where activate() spends")
    ap.add_argument("--parts", action="store_true", help="also time run's CLI import and hooks")
    ap.add_argument(
        "--import-torch", action="store_true", help="also `import torch`, bare and under run"
    )
    args = ap.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="jw-bench-fixed-")
    try:
        trees = {"this": os.path.join(ROOT, "src")}
        if args.ref:
            trees[args.ref] = base_src(args.ref, os.path.join(tmp, "ref"))
        site = shared_site()
        kinds: dict[str, list[str]] = {}
        if "empty" in args.venvs:
            kinds["empty"] = [deps_dir(os.path.join(tmp, "deps"), site)]
        if "torch" in args.venvs:
            kinds["torch"] = [site]
        if args.big:
            kinds["big"] = [site, big_site(os.path.join(tmp, "big"), args.big)]
        venvs = {}
        env = clean_env(tmp)
        for tree, src in trees.items():
            for kind, extra in kinds.items():
                v = os.path.join(tmp, f"venv-{kind}-{len(venvs)}")
                make_venv(v, [src, *extra])
                e = dict(env, JITWARDEN_HOME=os.path.join(tmp, f"memo-{len(venvs)}"))
                torch = args.import_torch and kind != "empty"
                venvs[(tree, kind)] = (commands(v, args.parts, torch), e)
        time.sleep(
            2.5
        )  # dirs changed this recently are not trusted by stat (memo.RACY_NS): as in a
        # real image, the venvs are older than that when the memo is filled
        for cmds, e in venvs.values():
            for cmd in cmds.values():
                once(cmd, e)  # fill the memo and the page cache
        if args.big:  # then an unrelated package is installed: the big dir's stat moves, once
            os.mkdir(os.path.join(tmp, "big", "unrelated-1.0.dist-info"))
            time.sleep(2.5)
            for (_tree, kind), (cmds, e) in venvs.items():
                if kind == "big":
                    once(cmds["activate"], e)
        times: dict = {}
        order = list(venvs)
        for r in range(args.pairs):
            for key in order if r % 2 == 0 else order[::-1]:
                cmds, e = venvs[key]
                for what, cmd in cmds.items():
                    times.setdefault((*key, what), []).append(once(cmd, e))
        print(
            f"{args.pairs} interleaved rounds; medians in ms; extra = over `python -c pass` "
            f"of the same venv; python {sysconfig.get_python_version()}, "
            f"load {os.getloadavg()[0]:.2f}"
        )
        print(
            f"{'venv':6} {'code':12} {'bare':>7} {'activate':>9} {'extra':>7} {'run':>7} {'extra':>7}"
        )
        med = {k: statistics.median(v) * 1000 for k, v in times.items()}
        for tree, kind in venvs:
            b, a, r = (med[(tree, kind, w)] for w in ("bare", "activate", "run"))
            print(f"{kind:6} {tree[:12]:12} {b:7.1f} {a:9.1f} {a - b:7.1f} {r:7.1f} {r - b:7.1f}")
            if args.parts:
                extra = {k: med[(tree, kind, k)] - b for k in PARTS}
                print(
                    "       parts (extra): " + ", ".join(f"{k} {v:.1f}" for k, v in extra.items())
                )
            if (tree, kind, "torch") in med:
                t, rt = med[(tree, kind, "torch")], med[(tree, kind, "run torch")]
                print(
                    f"       import torch {t:.1f}, under run {rt:.1f} (extra {rt - t:.1f}, {rt / t:.3f}x)"
                )
        if args.ref:
            for kind in kinds:
                ratio = []
                for what in ("activate", "run"):
                    new = med[("this", kind, what)] - med[("this", kind, "bare")]
                    old = med[(args.ref, kind, what)] - med[(args.ref, kind, "bare")]
                    ratio.append(f"{what} extra {new / max(old, 1e-9):.2f}")
                print(f"{kind:6} this/{args.ref[:12]}: " + ", ".join(ratio))
        if args.profile:
            for tree, kind in venvs:
                print(f"\n--- profile: {kind} venv, {tree} ---")
                cmds, e = venvs[(tree, kind)]
                profile(os.path.dirname(os.path.dirname(cmds["bare"][0])), e)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
