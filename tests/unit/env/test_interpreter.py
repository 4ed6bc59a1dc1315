"""The environment caches are judged against (env/interpreter.py): the Python ``--python`` names, asked for its
``sys.path`` and version by running it isolated, refused in one line when it cannot answer; its packages found
on its path alone; the Python a command starts, told from its name or its ``#!`` line."""

from __future__ import annotations

import os
import sys

import pytest

from jitwarden.env import interpreter


def _script(path, text: str) -> str:
    path.write_text(text)
    path.chmod(0o755)
    return str(path)


def _plain(path) -> str:
    path.write_text("x")
    return str(path)


@pytest.fixture
def restored():
    yield
    interpreter.use(None)


def test_this_python_answers_with_its_own_facts():
    it = interpreter.describe(sys.executable)
    assert (
        it.version == tuple(sys.version_info[:3]) and it.implementation == sys.implementation.name
    )
    assert it.cache_tag == sys.implementation.cache_tag and it.path and it.source == "--python"
    assert interpreter.is_own(sys.executable)


def test_a_venv_directory_names_its_bin_python(tmp_path):
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    py = _script(tmp_path / "venv" / "bin" / "python", "#!/bin/sh\n")
    assert interpreter.resolve(str(tmp_path / "venv")) == py


@pytest.mark.parametrize(
    ("make", "why"),
    [
        (lambda d: str(d / "missing"), "no such file"),
        (lambda d: str(d), "a directory with no bin/python"),
        (lambda d: _plain(d / "plain"), "not executable"),
        (lambda d: _script(d / "fails", "#!/bin/sh\necho boom >&2\nexit 3\n"), "(exit 3: boom)"),
        (lambda d: _script(d / "talks", "#!/bin/sh\necho hello\n"), "(no answer it reads)"),
        (
            lambda d: _script(d / "half", "#!/bin/sh\necho '{\"path\": []}'\n"),
            "(no answer it reads)",
        ),
    ],
)
def test_what_cannot_answer_is_one_usage_error(tmp_path, make, why):
    given = make(tmp_path)
    with pytest.raises(interpreter.InterpreterError) as exc:
        interpreter.describe(given)
    assert str(exc.value).startswith(f"{given}: ") and why in str(exc.value)
    assert "\n" not in str(exc.value) and exc.value.exit_code == 2


def test_another_environments_packages_are_found_on_its_path_alone(tmp_path, restored):
    site = tmp_path / "site"
    (site / "onlythere").mkdir(parents=True)
    (site / "onlythere" / "__init__.py").write_text("raise SystemExit('never imported')\n")
    (site / "single.py").write_text("")
    own = interpreter.describe(sys.executable)
    other = interpreter.Interpreter(
        given="/other/bin/python",
        source="--python",
        executable="/other/bin/python",
        prefix="/other",
        path=(str(site),),
        version=(3, 99, 0),
        implementation=own.implementation,
        cache_tag=own.cache_tag,
        soabi=own.soabi,
        abiflags=own.abiflags,
    )
    assert interpreter.package_dir("onlythere") is None  # not on ours
    interpreter.use(other)
    assert interpreter.current() is other and interpreter.search_path() == [str(site)]
    assert interpreter.package_dir("onlythere") == str(site / "onlythere")
    assert interpreter.package_dir("single") == str(site)
    assert interpreter.package_dir("pytest") is None  # ours, not theirs
    assert interpreter.python_tag() == "399"
    interpreter.use(None)
    assert interpreter.current() is None and interpreter.search_path() == sys.path
    assert interpreter.python_tag() == f"{sys.version_info[0]}{sys.version_info[1]}"


def test_the_python_a_command_starts(tmp_path):
    bindir = tmp_path / "bin"
    bindir.mkdir()
    py = bindir / "python3"
    os.symlink(sys.executable, py)
    env = {"PATH": str(bindir)}
    assert interpreter.python_of_command(["python3", "-c", "1"], env) == str(py)
    direct = _script(bindir / "vllm", f"#!{sys.executable}\nimport sys\n")
    assert interpreter.python_of_command([direct], env) == sys.executable
    _script(bindir / "torchrun", "#!/usr/bin/env -S python3 -u\n")
    assert interpreter.python_of_command(["torchrun"], env) == str(py)
    _script(bindir / "tool", "#!/bin/sh\n")
    assert interpreter.python_of_command(["tool"], env) is None
    assert interpreter.python_of_command(["nowhere"], env) is None
    assert interpreter.python_of_command([], env) is None
    assert not interpreter.is_own("/usr/bin/python3") or sys.prefix == "/usr"
