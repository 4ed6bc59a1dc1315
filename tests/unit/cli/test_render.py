"""What people see: every table at 80 columns on a real terminal (a pty), with NO_COLOR, and piped.

Each command runs in a child process whose stdout is a pseudo-terminal of 80 columns
(python's pty module, TIOCSWINSZ), over a real Triton cache damaged in two ways.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys

import pytest

from jitwarden import __version__
from jitwarden.cli import render as out
from tests.helpers import kernels
from tests.helpers.maint import SRC, cli
from tests.helpers.paths import DOCS

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _transcripts():
    """docs/transcripts.py as a module: its pty runner is the one every rendering test and transcript uses."""
    import importlib.util

    path = os.path.join(DOCS, "transcripts.py")
    spec = importlib.util.spec_from_file_location("jw_docs_transcripts", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_PTY = _transcripts().run_pty


def run_pty(args, env, cols=80):
    """(exit status, output) of ``jitwarden ARGS`` with stdout and stderr on a pty ``cols`` wide."""
    return _PTY([sys.executable, "-m", "jitwarden", *args], env, cols)


@pytest.fixture(scope="module")
def damaged(built_cache, tmp_path_factory):
    """A home with a damaged Triton cache in ~/.triton/cache and one more given on the command line."""
    base = tmp_path_factory.mktemp("render")
    home = base / "home"
    src, manifest = built_cache
    recs = {m["label"]: m for m in manifest}
    root = str(home / ".triton" / "cache")
    kernels.copy_cache(src, root)
    add, sub = (
        os.path.join(root, recs["add_sm90"]["id"]),
        os.path.join(root, recs["sub_sm90"]["id"]),
    )
    shutil.copyfile(os.path.join(sub, "sub_kernel.cubin"), os.path.join(add, "add_kernel.cubin"))
    os.unlink(os.path.join(root, recs["matmul_sm90"]["id"], "matmul_kernel.ptx"))
    other = str(base / "elsewhere")
    kernels.copy_cache(root, other)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")
    }
    env.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(base / "ind"),
        PYTHONPATH=SRC,
        TERM="xterm-256color",
    )
    for k in ("TRITON_CACHE_DIR", "TRITON_HOME", "VLLM_CACHE_ROOT", "JITWARDEN_HOME"):
        env.pop(k, None)
    assert cli("clean", other, "--target", "90", "-y", env=env).returncode == 0
    return env, root, other, recs


# Each command and its exit status on the damaged home: 1 where it judges the damaged entries, 0 where it
# only lists or plans (ls, clean --dry-run, quarantine ls) or judges nothing (fingerprint).
COMMANDS = {
    "doctor --target 90": 1,
    "status --target 90": 1,
    "verify --target 90": 1,
    "verify --target 90 --all": 1,
    "ls --target 90": 0,
    "clean --target 90 --dry-run": 0,
    "quarantine ls": 0,
    "fingerprint": 0,
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_line_fits_80_columns_on_a_terminal(damaged, command):
    env, *_ = damaged
    rc, text = run_pty(command.split(), env)
    assert rc == COMMANDS[command], text
    assert "\x1b[" in text  # a terminal gets colour/bold (NO_COLOR is tested below)
    plain = ANSI.sub("", text)
    for line in plain.splitlines():
        assert len(line) <= 80, f"{len(line)} columns: {line!r}"
    assert "Traceback" not in plain


def test_tables_at_80_columns_keep_ids_whole_and_details_on_their_own_line(damaged):
    env, root, _, recs = damaged
    rc, text = run_pty(["verify", "--target", "90"], env)
    plain = ANSI.sub("", text)
    assert rc == 1
    add_id = recs["add_sm90"]["id"][:12]
    row = next(l for l in plain.splitlines() if l.startswith(add_id))
    assert "add_kernel" in row and "mismatch" in row
    # The finding's words are on their own indented lines, not folded into an 11-column cell.
    assert re.search(
        r"^    mismatch: add_kernel\.cubin does not define kernel add_kernel", plain, re.MULTILINE
    )
    rc, text = run_pty(["doctor", "--target", "90"], env)
    plain = ANSI.sub("", text)
    header = next(l for l in plain.splitlines() if l.startswith("KIND"))
    assert "…" not in header and "QUAR" in header and "ROOT" in header
    assert "~/.triton/cache" in plain


def test_quarantine_ls_ids_at_80_columns_are_distinct_and_restore_them(damaged, tmp_path):
    env, root, other, recs = damaged
    rc, text = run_pty(["quarantine", "ls"], env)
    plain = ANSI.sub("", text)
    ids = [
        l.split()[0]
        for l in plain.splitlines()[1:]
        if l and not l.startswith((" ", "2 quarantined"))
    ]
    ids = [i for i in ids if not i[0].isdigit() or "-" in i]
    assert ids and len(set(ids)) == len(ids) and all("…" not in i for i in ids)
    assert recs["add_sm90"]["id"][:12] in ids
    # The id exactly as shown restores the entry (a copy of the module's root, so other tests keep theirs).
    p = cli("quarantine", "restore", recs["add_sm90"]["id"][:12], "--dry-run", env=env)
    assert p.returncode == 0 and f"restore {recs['add_sm90']['id'][:12]} into {other}" in p.stdout
    p = cli("quarantine", "restore", recs["add_sm90"]["id"][:12], "--dry-run", "--long", env=env)
    assert p.returncode == 0 and os.path.join(other, recs["add_sm90"]["id"]) in p.stdout


@pytest.mark.parametrize(
    "command",
    [
        "doctor --target 90",
        "verify --target 90",
        "fingerprint",
        "quarantine ls",
        "clean --target 90 --dry-run",
    ],
)
def test_no_color_means_no_escape_sequence_at_all(damaged, command):
    env, *_ = damaged
    rc, text = run_pty(command.split(), dict(env, NO_COLOR="1"))
    assert rc == COMMANDS[command], text
    assert "\x1b" not in text, repr(text[:300])
    assert len(text.strip()) > 50


def test_piped_output_has_no_escapes_and_never_breaks_a_word(damaged):
    env, root, *_ = damaged
    p = cli("fingerprint", env=env)
    assert p.returncode == 0 and "\x1b" not in p.stdout
    # Every ptxas path is whole on its row (the old box table folded paths and words mid-way).
    rows = [l for l in p.stdout.splitlines() if l.startswith("ptxas[")]
    assert rows and all(re.search(r"/ptxas(-blackwell)?$", r) for r in rows)
    assert not any(l.startswith(("┃", "│", "┏", "└")) for l in p.stdout.splitlines())
    p = cli("verify", "--target", "90", "--long", env=env)
    assert "\x1b" not in p.stdout
    assert any(
        l.split()[-1].startswith(root + "/") for l in p.stdout.splitlines()
    )  # --long: full paths, uncut, last


def test_hostile_names_through_the_cli(damaged, tmp_path):
    env, root0, _, recs = damaged
    root = tmp_path / "hostile"
    root.mkdir()
    for name in ("evil[bold]", "esc\x1b[31m", "[red]x[\\red]"):
        (root / name).mkdir()
        (root / name / "f.json").write_text("{")
    # A real entry whose kernel name is rich markup that would raise if it were read as markup.
    entry = root / recs["add_sm90"]["id"]
    shutil.copytree(os.path.join(root0, recs["add_sm90"]["id"]), entry)
    md = entry / "add_kernel.json"
    md.write_text(md.read_text().replace('"name": "add_kernel"', '"name": "evil[/bold]"'))
    # The renamed kernel contradicts its cubin (mismatch, an error): exit 1 where it is judged, 0 where listed or planned.
    for args, want in (
        (["ls", str(root), "--target", "90"], 0),
        (["verify", "--all", str(root), "--target", "90"], 1),
        (["doctor", str(root), "--target", "90"], 1),
        (["clean", str(root), "--target", "90", "--dry-run"], 0),
    ):
        rc, text = run_pty(args, dict(env, NO_COLOR="1"))
        assert rc == want, text
        assert "internal error" not in text and "Traceback" not in text
        assert "\x1b" not in text  # NO_COLOR: any escape would be the name's own, obeyed
    p = cli("verify", "--all", str(root), "--target", "90", env=env)
    assert p.returncode == 1 and "internal error" not in p.stderr
    assert "evil[bold]" in p.stdout and "esc\\x1b[31m" in p.stdout and "[red]x[\\red]" in p.stdout
    assert "evil[/bold]" in p.stdout


def test_the_format_is_chosen_once_and_builds_only_its_own_view(capsys):
    import argparse

    calls = []

    def body():
        calls.append("body")
        return {"answer": 42, "schema": 1}

    def show():
        calls.append("show")
        print("a table")

    table = out.output_format(argparse.Namespace(format="table"))
    table.human(print, "a plan")
    table.result("demo", body, show)
    assert calls == ["show"] and capsys.readouterr().out == "a plan\na table\n"
    calls.clear()
    js = out.output_format(argparse.Namespace(format="json"))
    js.human(print, "a plan")  # a plan is for a person: never in the JSON stream
    js.result("demo", body, show)
    assert calls == ["body"]
    doc = json.loads(capsys.readouterr().out)
    # The envelope's schema is never overridden by a body's: the body's is renamed <verb>_schema.
    assert list(doc) == ["schema", "tool", "command", "answer", "demo_schema"]
    assert doc == {
        "schema": 2,
        "tool": {"name": "jitwarden", "version": __version__},
        "command": "demo",
        "answer": 42,
        "demo_schema": 1,
    }
    # A command without --format prints tables.
    assert isinstance(out.output_format(argparse.Namespace()), out.TableFormat)


def test_json_is_compact_when_piped_and_indented_when_asked(capsys):
    out.write_json({"a": [1, 2]})
    assert capsys.readouterr().out == '{"a":[1,2]}\n'
    out.write_json({"a": [1, 2]}, indent=True)
    assert capsys.readouterr().out == '{\n  "a": [\n    1,\n    2\n  ]\n}\n'


def test_the_console_never_reads_markup(capsys):
    con = out.console()
    con.print("[bold]not bold[/bold] [/nothing]")  # no MarkupError, printed as it is
    assert capsys.readouterr().out == "[bold]not bold[/bold] [/nothing]\n"
