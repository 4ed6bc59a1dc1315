"""What a new user meets: hints that work for any root, IDs that work as arguments, one age parser,
known archs only, and the small options that used to be ignored or wrongly worded."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from jitwarden.model import arch
from jitwarden.model import text as ages
from jitwarden.store import qregistry
from jitwarden.store import quarantine as q
from tests.helpers import kernels
from tests.helpers.maint import SRC, cli


@pytest.fixture
def env(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    e = {
        k: v for k, v in os.environ.items() if not k.startswith(("TRITON_", "JITWARDEN_", "VLLM_"))
    }
    e.update(
        HOME=str(home),
        XDG_CACHE_HOME=str(home / ".cache"),
        TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "ind"),
        PYTHONPATH=SRC,
    )
    return e


@pytest.fixture
def damaged(cache):
    """A cache given on the command line (not one jitwarden discovers) with two error-level entries."""
    root, recs = cache
    add, sub = recs["add_sm90"]["path"], recs["sub_sm90"]["path"]
    shutil.copyfile(os.path.join(sub, "sub_kernel.cubin"), os.path.join(add, "add_kernel.cubin"))
    os.unlink(os.path.join(recs["matmul_sm90"]["path"], "matmul_kernel.ptx"))
    return root, recs


# ---------------------------------------------------------------- 1, 2: hints and IDs, end to end


def test_clean_of_any_root_then_follow_the_hints(env, damaged):
    root, recs = damaged
    p = cli("clean", root, "--target", "90", "-y", env=env)
    assert p.returncode == 0, p.stderr
    add_short = recs["add_sm90"]["id"][:12]
    plan_ids = re.findall(r"^([A-Z2-7]{12})  ", p.stdout, re.MULTILINE)
    assert add_short in plan_ids
    undo = next(l for l in p.stdout.splitlines() if l.startswith("undo: "))
    assert "--batch clean-" in undo and "jitwarden quarantine ls" in p.stdout
    # The hint: `quarantine ls` with no --root lists this root (the registry remembered it).
    ls = cli("quarantine", "ls", env=env)
    assert ls.returncode == 0 and "nothing quarantined" not in ls.stdout
    assert add_short in ls.stdout and "2 quarantined" in ls.stdout
    # The id the clean table showed restores it, byte for byte where it was.
    r = cli("quarantine", "restore", add_short, "-y", env=env)
    assert r.returncode == 0, r.stderr
    assert os.path.isdir(recs["add_sm90"]["path"])
    # doctor (not given the root) counts what is still quarantined there and points at the same command.
    d = cli("doctor", "--target", "90", env=env)
    assert (
        "info quarantined: 1 entry in quarantine" in d.stdout
        and "jitwarden quarantine ls" in d.stdout
    )


def test_every_id_a_table_shows_is_accepted(env, damaged):
    root, recs = damaged
    assert cli("clean", root, "--target", "90", "-y", env=env).returncode == 0
    recs_q = q.list_root(root)
    full = {r.entry_id: r.id for r in recs_q}
    matmul = recs["matmul_sm90"]["id"]
    for arg in (full[matmul], full[matmul][:22], matmul, matmul[:12], matmul[:6]):
        p = cli("quarantine", "restore", arg, "--dry-run", env=env)
        assert p.returncode == 0 and f"restore {matmul[:12]} into" in p.stdout, (
            arg,
            p.stdout,
            p.stderr,
        )


def test_ambiguous_and_unknown_ids_say_what_to_do(env, damaged):
    root, recs = damaged
    assert cli("clean", root, "--target", "90", "-y", env=env).returncode == 0
    # Quarantine the same entry a second time (restored, damaged again, cleaned again).
    add = recs["add_sm90"]["id"]
    assert cli("quarantine", "restore", add[:12], "-y", env=env).returncode == 0
    assert cli("clean", root, "--target", "90", "-y", "--code", "mismatch", env=env).returncode == 0
    ls = cli("quarantine", "ls", env=env)
    # Both rows are told apart, and each shown id names exactly one of them.
    shown = re.findall(r"^(\S+)  +\S+  +mismatch", ls.stdout, re.MULTILINE)  # ID, ROOT, REASON
    assert len(shown) == len(set(shown)) >= 1
    p = cli("quarantine", "restore", "ZZZZZZZZ", env=env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "quarantine ls" in p.stderr and "--root" in p.stderr


def test_a_broken_registry_never_breaks_anything(env, damaged, tmp_path):
    root, _ = damaged
    reg = qregistry.path(env)
    os.makedirs(os.path.dirname(reg), exist_ok=True)
    for bad in (
        b'\xff\xfe garbage\n[1,2]\n"relative/path"\n"/nonexistent/x"\n{"a":1}\n',
        None,
        "dir",
        "link",
    ):
        if os.path.islink(reg) or os.path.isfile(reg):
            os.unlink(reg)
        elif os.path.isdir(reg):
            shutil.rmtree(reg)
        if bad == "dir":
            os.mkdir(reg)
        elif bad == "link":
            os.symlink(str(tmp_path / "elsewhere"), reg)
        elif bad is not None:
            open(reg, "wb").write(bad)
        assert qregistry.roots(env) == [] or all(os.path.isabs(r) for r in qregistry.roots(env))
        p = cli("quarantine", "ls", env=env)
        assert p.returncode == 0 and "Traceback" not in p.stderr, p.stderr
    # A directory in the registry's place: quarantining still works (the hint is lost, nothing else).
    p = cli("clean", root, "--target", "90", "-y", env=env)
    assert p.returncode == 0 and "quarantined 2" in p.stdout
    assert cli("quarantine", "ls", "--root", root, env=env).stdout.count("2 quarantined") == 1
    assert not os.path.exists(
        str(tmp_path / "elsewhere")
    )  # the symlink was never followed to create a file


def test_registry_remembers_once_and_forgets_roots_without_a_quarantine(tmp_path):
    e = {"JITWARDEN_HOME": str(tmp_path / "jw")}
    a, b = tmp_path / "a", tmp_path / "b"
    for r in (a, b):
        (r / "jitwarden-quarantine").mkdir(parents=True)
    assert qregistry.remember(str(a), e) and not qregistry.remember(str(a), e)
    qregistry._seen.clear()
    assert not qregistry.remember(str(a), e)  # already in the file
    assert qregistry.remember(str(b), e)
    assert qregistry.roots(e) == [str(a), str(b)]
    shutil.rmtree(a)
    assert qregistry.roots(e) == [str(b)]
    assert open(qregistry.path(e)).read().count("\n") == 2


# ---------------------------------------------------------------- 3, 4: ages and archs


def test_one_age_parser_a_unit_is_required():
    assert (
        ages.parse_age("7d") == 7 * 86400
        and ages.parse_age("90s") == 90
        and ages.parse_age("2w") == 14 * 86400
    )
    assert ages.parse_age("1.5h") == 5400 and ages.parse_age("0") == 0
    for bad in ("7", "30", "-1h", "soon", "7x", ""):
        with pytest.raises(ValueError):
            ages.parse_age(bad)
    assert ages.parse_age("10", bare_unit="s") == 10


@pytest.mark.parametrize(
    "args",
    [
        ["clean", "--older-than", "30", "/tmp"],
        ["clean", "--orphan-age", "30", "/tmp"],
        ["verify", "--orphan-age", "7", "/tmp"],
        ["ls", "--orphan-age", "7", "/tmp"],
        ["prune", "--older-than", "7"],
        ["prune", "--older-than", "7d", "--orphan-age", "7"],
        ["quarantine", "empty", "--older-than", "7"],
        ["quarantine", "purge", "--all", "--older-than", "7"],
        ["clean", "--lock-timeout", "5", "/tmp"],
    ],
    ids=lambda a: " ".join(a),
)
def test_bare_numbers_are_refused_the_same_way_everywhere(env, args):
    p = cli(*args, env=env)
    assert p.returncode == 2
    line = p.stderr.strip()
    assert len(line.splitlines()) == 1 and "needs a unit" in line and "d or " in line
    assert "argument " not in line and "invalid float" not in line


@pytest.mark.parametrize(
    "args",
    [
        ["verify", "--orphan-age", "1h", "--target", "90"],
        ["ls", "--orphan-age", "30m", "--target", "90"],
        ["prune", "--older-than", "30d", "--orphan-age", "1h", "--dry-run"],
        ["quarantine", "purge", "--all", "--older-than", "7d", "--dry-run"],
        ["quarantine", "empty", "--older-than", "12h", "--dry-run"],
    ],
    ids=lambda a: " ".join(a),
)
def test_ages_with_units_are_accepted_everywhere(env, args):
    p = cli(*args, env=env)
    assert p.returncode == 0, p.stderr


def test_unknown_arch_is_refused_with_the_known_list(env):
    for t in ("sm_999", "95", "9.9"):
        p = cli("doctor", "--target", t, env=env)
        assert (
            p.returncode == 2
            and "known:" in p.stderr
            and "sm_90" in p.stderr
            and "sm_121" in p.stderr
        )
    assert (
        arch.parse_arch("sm_90a") == 90
        and arch.parse_arch("12.1") == 121
        and arch.parse_arch("120") == 120
    )


# ---------------------------------------------------------------- 6: options and wording


def test_verify_code_and_rebuild_only_options(env, damaged, tmp_path):
    root, recs = damaged
    p = cli("verify", root, "--target", "90", "--code", "foreign-arch", env=env)
    assert p.returncode == 1 and "foreign-arch" in p.stdout and "mismatch  " not in p.stdout
    assert recs["add_sm80"]["id"][:12] in p.stdout and recs["add_sm90"]["id"][:12] not in p.stdout
    assert cli("verify", "--code", "bogus", root, env=env).returncode == 2
    keep = tmp_path / "keep"
    for opt in (["--keep-cubins", str(keep)], ["--jobs", "2"]):
        p = cli("verify", root, "--target", "90", *opt, env=env)
        assert p.returncode == 2 and "needs --rebuild" in p.stderr
    assert not keep.exists()


def test_rebuild_says_how_many_and_with_which_ptxas_and_keeps_no_empty_dir(env, cache, tmp_path):
    root, recs = cache
    only = tmp_path / "one"
    kernels.copy_cache(root, str(only))
    for r in recs.values():  # two kernels are enough to say it
        if r["label"] not in ("add_sm90", "sub_sm90"):
            shutil.rmtree(os.path.join(only, r["id"]))
    keep = tmp_path / "keep"
    p = cli("verify", "--rebuild", str(only), "--target", "90", "--keep-cubins", str(keep), env=env)
    assert p.returncode == 0, p.stderr
    line = next(l for l in p.stdout.splitlines() if l.startswith("rebuilt "))
    assert line.startswith("rebuilt 2 kernels: 2 verified (with ") and "ptxas" in line
    assert not keep.exists()  # nothing differed, so nothing kept, so no directory


def test_wording():
    assert ages.plural(1, "entry") == "1 entry" and ages.plural(2, "entry") == "2 entries"
    assert ages.plural(0, "segment") == "0 segments" and ages.plural(1, "kernel") == "1 kernel"
    assert ages.plural(3, "day") == "3 days"


def test_no_target_hint_names_the_arch_the_entries_are_for(env, tmp_path, cache):
    root, recs = cache
    only90 = tmp_path / "c90"
    kernels.copy_cache(root, str(only90))
    for r in recs.values():
        if r["arch"] != 120:
            shutil.rmtree(os.path.join(only90, r["id"]))
    p = cli("doctor", str(only90), env=env)
    assert "jitwarden doctor --target sm_120" in p.stdout and "sm_90" not in p.stdout
    assert "1 entries" not in p.stdout


def test_unreadable_entry_is_a_permission_problem_not_damage(cache):
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to act as an unprivileged user")
    import subprocess
    import sys
    import tempfile

    root, recs = cache
    base = tempfile.mkdtemp(prefix="jw-newcomer-")
    try:
        os.chmod(base, 0o755)
        target = kernels.copy_cache(root, os.path.join(base, "cache"))
        for d, dirs, files in os.walk(base):
            for n in dirs + files:
                os.lchown(os.path.join(d, n), 65534, 65534)
        os.lchown(base, 65534, 65534)
        cubin = os.path.join(target, recs["add_sm90"]["id"], "add_kernel.cubin")
        os.lchown(cubin, 0, 0)
        os.chmod(cubin, 0o600)  # nobody owns the cache but may not read this one file
        e = {
            "PATH": "/usr/bin:/bin",
            "HOME": base,
            "PYTHONPATH": SRC,
            "XDG_CACHE_HOME": os.path.join(base, ".c"),
        }
        p = subprocess.run(
            [
                "setpriv",
                "--reuid=nobody",
                "--regid=nogroup",
                "--clear-groups",
                sys.executable,
                "-m",
                "jitwarden",
                "doctor",
                target,
                "--target",
                "90",
            ],
            env=e,
            capture_output=True,
            text=True,
            cwd="/",
            stdin=subprocess.DEVNULL,
            timeout=300,
        )
        assert "Traceback" not in p.stderr, p.stderr
        assert (
            "unreadable: 1 entry in" in p.stdout and "permission problem, not damage" in p.stdout
        ), p.stdout
        assert "clean --code corrupt" not in p.stdout
    finally:
        shutil.rmtree(base)
