#!/usr/bin/env python3
"""Every terminal transcript in README.md and docs/*.md, produced by running jitwarden.

    python docs/transcripts.py           rewrite each marked block in place
    python docs/transcripts.py --check   exit 1 (and name the blocks) when a block differs from what the tool prints now

A block is marked in the Markdown like this, and everything between the markers is ours:

    <!-- transcript: NAME -->
    ```console
    $ jitwarden ...
    ```
    <!-- /transcript -->

Each scenario builds real caches (Triton kernels compiled on the CPU with explicit
GPUTargets, as the tests do) in a temporary home, damages them the way the text says,
and runs each command in a fresh process on a pseudo-terminal 80 columns wide with
NO_COLOR=1: what a person sees at an 80-column terminal, without escape codes.

Values that differ from machine to machine or from second to second are replaced by
fixed stand-ins, so that ``--check`` is stable: the fingerprint digest (``fp
0f1e2d3c4b5a6978``), the temporary home (``~``) and TMPDIR (``/tmp``), quarantine stamps, ages under ten
seconds (``0s``) and elapsed times under ten seconds (``0.00s``). The headline names the
versions of the environment that ran this script (CI's test venv).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import pty
import re
import shutil
import struct
import sys
import termios
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(REPO, "src")
FILES = ["README.md"] + sorted(
    os.path.join("docs", n) for n in os.listdir(os.path.join(REPO, "docs")) if n.endswith(".md")
)
FP_STANDIN = "0f1e2d3c4b5a6978"
BLOCK = re.compile(r"(<!-- transcript: ([\w-]+) -->\n)(.*?)(<!-- /transcript -->)", re.DOTALL)
COLUMNS = 80


# ---------------------------------------------------------------- running commands


def run_pty(
    argv: list[str], env: dict, cols: int = COLUMNS, cwd: str | None = None
) -> tuple[int, str]:
    """(exit status, what a terminal ``cols`` wide shows) of ``argv``; stdout and stderr both on the pty."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            if cwd:
                os.chdir(cwd)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, cols, 0, 0))
    chunks = []
    while True:
        try:
            d = os.read(fd, 65536)
        except OSError:
            break
        if not d:
            break
        chunks.append(d)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), b"".join(chunks).decode("utf-8", "replace").replace(
        "\r\n", "\n"
    )


class Session:
    """A temporary home with its own caches; ``run`` shows one command as a person would type it."""

    def __init__(self):
        # A fixed place, not mkdtemp's random name: Triton writes the kernel source's path into the PTX
        # (``.file`` and its debug-info bytes, one ``.b8 N`` line per character, 2 or 3 digits), so a
        # random name changes entry sizes from run to run and the transcripts would drift.
        self.base = os.path.join("/tmp", f"jw-transcripts-{os.getuid()}")
        # One session at a time per user: two checkouts generating transcripts at once (CI beside a test run,
        # two worktrees) would remove each other's fixed-place caches. Held until this process exits.
        self._lock = os.open(self.base + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        fcntl.flock(self._lock, fcntl.LOCK_EX)
        if os.path.lexists(self.base):
            if (
                os.path.islink(self.base)
                or not os.path.isdir(self.base)
                or os.lstat(self.base).st_uid != os.getuid()
            ):
                sys.exit(
                    f"transcripts: {self.base} exists and is not a directory of ours; remove it"
                )
            shutil.rmtree(self.base)
        os.mkdir(self.base, 0o700)
        self.home = os.path.join(self.base, "home")
        os.makedirs(self.home)
        keep = ("PATH", "LANG", "LC_ALL", "PIP_CONFIG_FILE", "SYSTEMROOT")
        self.env = {k: os.environ[k] for k in keep if k in os.environ}
        self.tmp = os.path.join(
            self.base, "tmp"
        )  # TorchInductor's default root lives in TMPDIR: keep it ours
        os.makedirs(self.tmp)
        self.env.update(
            HOME=self.home,
            USER="me",
            LOGNAME="me",
            NO_COLOR="1",
            TERM="xterm",
            PYTHONPATH=SRC,
            PYTHONDONTWRITEBYTECODE="1",
            TMPDIR=self.tmp,
        )
        self.digest = None

    def cache(self) -> str:
        return os.path.join(self.home, ".triton", "cache")

    def jitwarden(self, *args, env=None) -> tuple[int, str]:
        return run_pty(
            [sys.executable, "-m", "jitwarden", *args], dict(self.env, **(env or {})), cwd=self.home
        )

    def run(self, shown: str, *, env: dict | None = None, comment: str = "") -> str:
        """``$ jitwarden ARGS`` and its output. ``shown`` is the command line as printed (and split to run)."""
        import shlex

        words = shlex.split(shown)
        assert words[0] == "jitwarden", shown
        words = [
            sys.executable if w == "python" else w for w in words
        ]  # this interpreter, whatever PATH holds
        rc, text = self.jitwarden(*words[1:], env=env)
        prefix = "".join(f"{k}={v} " for k, v in (env or {}).items())
        note = comment or (f"exit status {rc}" if rc else "")
        line = f"$ {prefix}{shown}"
        if note:
            line = f"{line:<48} # {note}" if len(line) < 48 else f"{line}   # {note}"
        return line + "\n" + self.normalise(text)

    def normalise(self, text: str) -> str:
        if self.digest is None:
            rc, out = run_pty(
                [sys.executable, "-m", "jitwarden", "fingerprint", "--format", "json"],
                self.env,
                400,
            )
            self.digest = json.loads(out[out.index("{") :])["digest"]
        text = text.replace(self.digest, FP_STANDIN).replace(self.digest[:12], FP_STANDIN[:12])
        text = (
            text.replace(self.home, "~").replace(self.tmp, "/tmp").replace(self.base, "/tmp/docs")
        )
        text = re.sub(r"\b\d{8}T\d{6}Z\b", "20260101T120000Z", text)
        text = re.sub(r"(?<=20260101T120000Z-)[0-9a-f]{6}\b", "3fa2c1", text)  # a run's batch id
        text = re.sub(
            r"\x1b\[\?25l.*?\x1b\[\?25h(\x1b\[1A)?(\x1b\[2K)?", "", text, flags=re.DOTALL
        )  # a progress bar
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", text)  # what is left of the bar's cursor moves
        text = text.replace("\r", "")
        text = re.sub(r"→ [0-9a-f]{16}\b", "→ 8796a5b4c3d2e1f0", text)
        text = re.sub(r"(?<= )[1-9]s(?=  )", "0s", text)
        text = re.sub(r"(?<![\w.])\d\.\d\ds\b", "0.00s", text)
        return "\n".join(line.rstrip() for line in text.rstrip("\n").split("\n")) + "\n"

    def close(self):
        shutil.rmtree(self.base, ignore_errors=True)
        os.close(self._lock)  # the next session (of this run or another checkout's) may start


def build(cache_dir: str, archs=(90, 80)) -> dict[str, dict]:
    """A real Triton cache (add, sub, matmul for each arch); {label: record}."""
    sys.path.insert(0, REPO)  # tests.helpers
    from tests.helpers import kernels

    jobs = kernels.jobs_for(
        archs=archs, variants=[v for v in kernels.VARIANTS if v[0] in ("add", "sub", "matmul")]
    )
    recs = {r["label"]: r for r in kernels.build_cache(cache_dir, jobs)}
    old = time.time() - 2 * 3600  # every entry two hours old: ages print the same on every run
    for d, dirs, files in os.walk(cache_dir):
        for n in files + dirs:
            os.utime(os.path.join(d, n), (old, old), follow_symlinks=False)
    return recs


def damage(recs: dict) -> None:
    """The tour's cache: another kernel's cubin under add_kernel's key, and a compile that died half-way."""
    add, sub = recs["add_sm90"]["path"], recs["sub_sm90"]["path"]
    st = os.stat(os.path.join(add, "add_kernel.cubin"))
    shutil.copyfile(os.path.join(sub, "sub_kernel.cubin"), os.path.join(add, "add_kernel.cubin"))
    os.utime(os.path.join(add, "add_kernel.cubin"), (st.st_mtime, st.st_mtime))
    os.unlink(os.path.join(recs["matmul_sm90"]["path"], "matmul_kernel.ptx"))


# ---------------------------------------------------------------- scenarios: each returns {block name: text}


def scenario_fresh() -> dict[str, str]:
    s = Session()
    try:
        return {"fresh-doctor": s.run("jitwarden doctor")}
    finally:
        s.close()


def scenario_tour() -> dict[str, str]:
    s = Session()
    try:
        recs = build(s.cache())
        damage(recs)
        out = {}
        add = recs["add_sm90"]["id"][:12]
        out["tour"] = "\n".join(
            [
                s.run("jitwarden doctor --target sm_90"),
                s.run("jitwarden clean --target sm_90 -y"),
                s.run("jitwarden quarantine ls"),
                s.run(f"jitwarden quarantine restore {add} --dry-run"),
            ]
        )
        out["verify"] = s.run("jitwarden verify --target sm_90 --all")
        out["ls-ids"] = s.run("jitwarden ls --ids --code foreign-arch --target 90")
        out["dir"] = s.run("jitwarden dir")
        out["bad-input"] = "\n".join(
            [
                s.run("jitwarden docter"),
                s.run("jitwarden clean --older-than 7"),
                s.run("jitwarden doctor --target sm_999"),
                s.run("jitwarden quarantine restore NOSUCHID"),
            ]
        )
        return out
    finally:
        s.close()


def scenario_rebuild() -> dict[str, str]:
    s = Session()
    try:
        build(s.cache(), archs=(90,))
        return {
            "rebuild": s.run("jitwarden verify --rebuild --target sm_90"),
            "canary-no-gpu": s.run("jitwarden canary"),
        }
    finally:
        s.close()


def scenario_fingerprint() -> dict[str, str]:
    s = Session()
    try:
        saved = os.path.join(s.home, "before.json")
        rc, text = s.jitwarden("fingerprint", "--format", "json")
        open(saved, "w").write(text[text.index("{") :])
        return {
            "fingerprint-diff": "$ jitwarden fingerprint --format json > before.json\n"
            + s.run(
                "jitwarden fingerprint --diff before.json", env={"TRITON_DEFAULT_FP_FUSION": "0"}
            ).replace(saved, "before.json")
        }
    finally:
        s.close()


COMPILE_PY = """\
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def add_kernel(x, y, out, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    tl.store(out + offs, tl.load(x + offs, mask=m) + tl.load(y + offs, mask=m), mask=m)


src = ASTSource(fn=add_kernel, signature={"x": "*fp32", "y": "*fp32", "out": "*fp32", "n": "i32"},
                constexprs={"BLOCK": 128})
k = triton.compile(src, target=GPUTarget("cuda", 90, 32))
print(k.metadata.hash[:12], len(k.asm["cubin"]), "bytes of cubin")
"""


def scenario_guard() -> dict[str, str]:
    """The runtime guard: a sealed entry, one byte of its cubin changed, the next run."""
    s = Session()
    try:
        open(os.path.join(s.home, "compile.py"), "w").write(COMPILE_PY)
        first = s.run(
            "jitwarden run -- python compile.py", comment="compiles add_kernel for sm_90, sealed"
        )
        cubins = [
            os.path.join(d, n)
            for d, _, ns in os.walk(s.cache())
            for n in ns
            if n == "add_kernel.cubin"
        ]
        assert len(cubins) == 1, cubins
        data = bytearray(open(cubins[0], "rb").read())
        data[len(data) // 2] ^= 0xFF
        open(cubins[0], "wb").write(bytes(data))
        return {
            "guard": "\n".join(
                [
                    first,
                    "# (docs/transcripts.py inverts one byte in the middle of that entry's add_kernel.cubin)",
                    s.run("jitwarden run -- python compile.py"),
                    s.run("jitwarden quarantine ls"),
                ]
            )
        }
    finally:
        s.close()


SCENARIOS = (scenario_fresh, scenario_tour, scenario_rebuild, scenario_fingerprint, scenario_guard)


# ---------------------------------------------------------------- the Markdown side


def blocks(path: str) -> list[tuple[str, str]]:
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(open(path, encoding="utf-8").read())]


def render(body: str) -> str:
    return "```console\n" + body + "```\n"


_SIZE = re.compile(r"\b\d+(?:\.\d+)? (?:B|KiB|MiB|GiB)\b")


def comparable(text: str) -> str:
    """``text`` as ``--check`` compares it: sizes masked, whitespace runs (wrapping, column padding) as one space.

    Triton's metadata and IR record absolute paths inside the venv (libdevice, Triton's own
    sources), so an entry's size depends on where the clone lies; everything else must match.
    """
    return " ".join(_SIZE.sub("SIZE", text).split())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--check", action="store_true", help="change nothing; exit 1 when a block drifted"
    )
    args = ap.parse_args(argv)
    wanted = {name for f in FILES for name, _ in blocks(os.path.join(REPO, f))}
    made: dict[str, str] = {}
    for sc in SCENARIOS:
        made.update(sc())
    problems = [
        f"block {n!r} is in the docs but no scenario makes it" for n in sorted(wanted - set(made))
    ]
    problems += [f"scenario output {n!r} is used by no block" for n in sorted(set(made) - wanted)]
    drifted = []
    for f in FILES:
        path = os.path.join(REPO, f)
        text = open(path, encoding="utf-8").read()
        new = BLOCK.sub(
            lambda m: (
                m.group(1) + render(made.get(m.group(2), m.group(3))) + m.group(4)
                if m.group(2) in made
                else m.group(0)
            ),
            text,
        )
        if new != text and (not args.check or comparable(new) != comparable(text)):
            drifted.append(f)
            if not args.check:
                open(path, "w", encoding="utf-8").write(new)
    for p in problems:
        print(f"transcripts: {p}", file=sys.stderr)
    if args.check and drifted:
        for f in drifted:
            print(
                f"transcripts: {f}: a transcript differs from what the tool prints now "
                "(run `python docs/transcripts.py` and review the diff)",
                file=sys.stderr,
            )
        return 1
    if not args.check:
        print(
            f"transcripts: {len(made)} blocks; rewrote {', '.join(drifted) or 'nothing'}",
            file=sys.stderr,
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
