"""``jitwarden metrics`` against a hostile textfile dir and a hostile stats dir (issue 21).

The textfile is written atomically through a random ``O_EXCL`` temporary beside it, renamed by
the directory's fd; the stats files are read through the bounded reader. Every case runs the
real CLI; the ones that used to hang run it in a child process with a time limit.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.helpers.fleet import jw, node_env


@pytest.fixture
def env(tmp_path):
    return node_env(str(tmp_path / "home"))


def _stats(env) -> str:
    d = os.path.join(env["XDG_CACHE_HOME"], "jitwarden", "stats")
    os.makedirs(d, exist_ok=True)
    return d


def _one_line(err: str) -> str:
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def _cli(env, *argv, timeout=120):
    """The CLI in a child process: a hang becomes a failed test, not a stuck run."""
    p = subprocess.run(
        [sys.executable, "-m", "jitwarden", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return p.returncode, p.stdout, p.stderr


def test_links_planted_at_every_name_are_never_followed(env, tmp_path):
    d = tmp_path / "textfile"
    d.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.symlink(victim, d / "jitwarden.prom")  # the target itself
    os.symlink(
        victim, d / f"jitwarden.prom.{os.getpid()}.tmp"
    )  # the temporary name the old writer used
    rc, _, err = jw(env, "metrics", "--textfile-dir", str(d))
    assert rc == 0, err
    assert victim.read_text() == "precious\n"
    assert not os.path.islink(d / "jitwarden.prom") and (d / "jitwarden.prom").is_file()
    assert sorted(os.listdir(d)) == sorted(["jitwarden.prom", f"jitwarden.prom.{os.getpid()}.tmp"])


def test_a_directory_at_the_metrics_name_is_one_line_and_leaves_no_temporary(env, tmp_path):
    d = tmp_path / "textfile"
    (d / "jitwarden.prom").mkdir(parents=True)
    rc, _, err = jw(env, "metrics", "--textfile-dir", str(d))
    assert rc == 2 and "jitwarden.prom is a directory" in _one_line(err), err
    assert os.listdir(d) == ["jitwarden.prom"] and os.listdir(d / "jitwarden.prom") == []


def test_a_file_given_as_the_textfile_dir_says_it_is_not_a_directory(env, tmp_path):
    f = tmp_path / "afile"
    f.write_text("x")
    rc, _, err = jw(env, "metrics", "--textfile-dir", str(f))
    assert rc == 2 and f"{f} is not a directory" in _one_line(err), err
    rc, _, err = jw(env, "metrics", "--textfile-dir", str(tmp_path / "missing"))
    assert rc == 2 and "no such directory" in _one_line(err), err
    assert f.read_text() == "x"


def test_an_unwritable_directory_is_one_line_and_leaves_no_temporary(env, tmp_path):
    if os.geteuid() == 0:  # root writes through any mode bits; sysfs refuses even root
        d = "/sys/kernel"
        if not os.path.isdir(d):
            pytest.skip("no /sys/kernel to stand for a directory root cannot write")
    else:
        d = str(tmp_path / "ro")
        os.mkdir(d, 0o555)
    before = sorted(os.listdir(d))
    rc, _, err = jw(env, "metrics", "--textfile-dir", d)
    assert rc == 2 and "cannot write" in _one_line(err), err
    assert sorted(os.listdir(d)) == before


def test_a_fifo_in_the_stats_dir_does_not_hang(env):
    d = _stats(env)
    os.mkfifo(os.path.join(d, "remote-1.json"))
    os.mkfifo(os.path.join(d, "last-verify.json"))
    rc, out, err = _cli(env, "metrics", timeout=60)
    assert rc == 0, err
    assert "jitwarden_remote_requests_total" not in out
    assert "stats/remote-1.json: unreadable (not a regular file (a FIFO))" in err
    assert "stats/last-verify.json: unreadable" in err


@pytest.mark.parametrize("errors", ["Infinity", "NaN", '"3"', "-1", "2.5", "true"])
def test_a_damaged_last_verify_is_left_out_with_a_line(env, errors):
    with open(os.path.join(_stats(env), "last-verify.json"), "w") as f:
        f.write(f'{{"schema": 1, "time": 1700000000.0, "errors": {errors}, "entries": 3}}')
    rc, out, err = jw(env, "metrics")
    assert rc == 0, err
    assert "jitwarden_last_verify" not in out
    assert "stats/last-verify.json: not a valid record" in _one_line(err)


def test_remote_counters_that_are_not_counts_are_left_out(env):
    d = _stats(env)
    with open(os.path.join(d, "remote-1.json"), "w") as f:
        f.write('{"counters": {"hit": 2, "miss": 1}}')
    with open(os.path.join(d, "remote-2.json"), "w") as f:
        f.write('{"counters": {"hit": Infinity}}')
    with open(os.path.join(d, "remote-3.json"), "w") as f:
        f.write("[" * 100_000 + "]" * 100_000)
    rc, out, err = jw(env, "metrics")
    assert rc == 0, err
    assert 'jitwarden_remote_requests_total{result="hit"} 2' in out
    assert (
        "remote-2.json: its counters are not counts" in err
        and "remote-3.json: not JSON we read" in err
    )


def test_a_good_last_verify_is_a_metric(env):
    with open(os.path.join(_stats(env), "last-verify.json"), "w") as f:
        f.write('{"schema": 1, "time": 1700000000.5, "errors": 2, "entries": 3}')
    rc, out, err = jw(env, "metrics")
    assert rc == 0 and not err.strip(), err
    assert (
        "jitwarden_last_verify_errors 2" in out
        and "jitwarden_last_verify_timestamp_seconds 1700000000.5" in out
    )
