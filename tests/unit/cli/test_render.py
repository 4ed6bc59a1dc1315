"""What people see: every table at 80 columns on a real terminal (a pty), with NO_COLOR, and piped.

Each command runs in a child process whose stdout is a pseudo-terminal of 80 columns
(python's pty module, TIOCSWINSZ), over a real Triton cache damaged in two ways.
"""

from __future__ import annotations

import os
import re
import shutil
import sys

import pytest

from tests.helpers import kernels
from tests.helpers.maint import SRC, cli

from jitwarden.cli import render as out
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
    add, sub = os.path.join(root, recs["add_sm90"]["id"]), os.path.join(root, recs["sub_sm90"]["id"])
    shutil.copyfile(os.path.join(sub, "sub_kernel.cubin"), os.path.join(add, "add_kernel.cubin"))
    os.unlink(os.path.join(root, recs["matmul_sm90"]["id"], "matmul_kernel.ptx"))
    other = str(base / "elsewhere")
    kernels.copy_cache(root, other)
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR", "COLUMNS", "LINES", "TERM")}
    env.update(HOME=str(home), XDG_CACHE_HOME=str(home / ".cache"), TORCHINDUCTOR_CACHE_DIR=str(base / "ind"),
               PYTHONPATH=SRC, TERM="xterm-256color")
    for k in ("TRITON_CACHE_DIR", "TRITON_HOME", "VLLM_CACHE_ROOT", "JITWARDEN_HOME"):
        env.pop(k, None)
    assert cli("clean", other, "--target", "90", "-y", env=env).returncode == 0
    return env, root, other, recs


COMMANDS = [
    ["doctor", "--target", "90"],
    ["status", "--target", "90"],
    ["verify", "--target", "90"],
    ["verify", "--target", "90", "--all"],
    ["ls", "--target", "90"],
    ["clean", "--target", "90", "--dry-run"],
    ["quarantine", "ls"],
    ["fingerprint"],
]


@pytest.mark.parametrize("args", COMMANDS, ids=lambda a: " ".join(a))
def test_every_line_fits_80_columns_on_a_terminal(damaged, args):
    env, *_ = damaged
    rc, text = run_pty(args, env)
    assert rc in (0, 1), text
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
    assert re.search(r"^    mismatch: add_kernel\.cubin does not define kernel add_kernel", plain, re.M)
    rc, text = run_pty(["doctor", "--target", "90"], env)
    plain = ANSI.sub("", text)
    header = next(l for l in plain.splitlines() if l.startswith("KIND"))
    assert "…" not in header and "QUAR" in header and "ROOT" in header
    assert "~/.triton/cache" in plain


def test_quarantine_ls_ids_at_80_columns_are_distinct_and_restore_them(damaged, tmp_path):
    env, root, other, recs = damaged
    rc, text = run_pty(["quarantine", "ls"], env)
    plain = ANSI.sub("", text)
    ids = [l.split()[0] for l in plain.splitlines()[1:] if l and not l.startswith((" ", "2 quarantined"))]
    ids = [i for i in ids if not i[0].isdigit() or "-" in i]
    assert ids and len(set(ids)) == len(ids) and all("…" not in i for i in ids)
    assert recs["add_sm90"]["id"][:12] in ids
    # The id exactly as shown restores the entry (a copy of the module's root, so other tests keep theirs).
    p = cli("quarantine", "restore", recs["add_sm90"]["id"][:12], "--dry-run", env=env)
    assert p.returncode == 0 and f"restore {recs['add_sm90']['id'][:12]} into {other}" in p.stderr
    p = cli("quarantine", "restore", recs["add_sm90"]["id"][:12], "--dry-run", "--long", env=env)
    assert p.returncode == 0 and os.path.join(other, recs["add_sm90"]["id"]) in p.stderr


@pytest.mark.parametrize("args", [["doctor", "--target", "90"], ["verify", "--target", "90"], ["fingerprint"],
                                  ["quarantine", "ls"], ["clean", "--target", "90", "--dry-run"]],
                         ids=lambda a: " ".join(a))
def test_no_color_means_no_escape_sequence_at_all(damaged, args):
    env, *_ = damaged
    rc, text = run_pty(args, dict(env, NO_COLOR="1"))
    assert rc in (0, 1)
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
    assert any(l.startswith(root + "/") for l in p.stdout.splitlines())  # --long: full paths, uncut


def test_names_are_escaped_at_the_cell_boundary():
    g = out.Grid([out.Column("ID"), out.Column("WHY", flex=True)])
    g.add("evil[/bold]", "a\x1b[31mred\nline", details=["tab\there [bold]x[/bold]"])
    text = g.plain(None)
    assert "evil[/bold]" in text and "\\x1b[31mred\\nline" in text and "\\there [bold]x[/bold]" in text
    assert "\x1b" not in text and "\n" not in text.split("\n", 1)[1].split("\n")[0]
    # Through rich: markup in a name is printed as it is, never read as markup (no MarkupError, no styling).
    from rich.console import Console

    con = Console(record=True, width=80, color_system=None, force_terminal=True)
    con.print(g)
    con.print(out.text("root ", ("evil[/bold] [red]x", "bold")))
    shown = con.export_text()
    assert "evil[/bold]" in shown and "[red]x" in shown


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
    for args in (["ls", str(root), "--target", "90"], ["verify", "--all", str(root), "--target", "90"],
                 ["doctor", str(root), "--target", "90"], ["clean", str(root), "--target", "90", "--dry-run"]):
        rc, text = run_pty(args, dict(env, NO_COLOR="1"))
        assert rc in (0, 1), text
        assert "internal error" not in text and "Traceback" not in text
        assert "\x1b" not in text  # NO_COLOR: any escape would be the name's own, obeyed
    p = cli("verify", "--all", str(root), "--target", "90", env=env)
    assert p.returncode in (0, 1) and "internal error" not in p.stderr
    assert "evil[bold]" in p.stdout and "esc\\x1b[31m" in p.stdout and "[red]x[\\red]" in p.stdout
    assert "evil[/bold]" in p.stdout


def test_grid_cuts_only_flex_columns_and_wraps_the_last():
    g = out.Grid([out.Column("ID"), out.Column("NAME", flex=True, min=6), out.Column("VALUE", wrap=True, min=10)])
    g.add("ABCDEFGHIJKL", "a_rather_long_kernel_name_indeed", "word " * 30)
    lines = g.plain(60).splitlines()
    assert all(len(l) <= 60 for l in lines)
    assert lines[1].startswith("ABCDEFGHIJKL  ") and "…" in lines[1]
    assert len(lines) > 2 and lines[2].startswith(" " * 20)
    assert g.plain(None).count("\n") == 1  # no width: one line per row
