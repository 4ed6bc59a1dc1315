"""A cache another environment writes is not dead weight (issue 34, item 2): doctor beside another Triton called a
live cache ``stale`` and offered ``clean --stale``, which would quarantine what the workload loads."""

from __future__ import annotations

import json
import os

from jitwarden.cli.main import main


def _doctor(capsys, *args) -> tuple[int, str]:
    rc = main(["doctor", *args])
    return rc, capsys.readouterr().out


def _written_by(entry: str, version: str) -> None:
    """The entry's metadata says another Triton built it (what a cache of another environment holds)."""
    for f in os.listdir(entry):
        if f.endswith(".json") and not f.startswith("__grp__"):
            p = os.path.join(entry, f)
            with open(p) as fh:
                md = json.load(fh)
            md["triton_version"] = version
            with open(p, "w") as fh:
                json.dump(md, fh)


def test_a_root_of_another_environment_is_not_offered_to_clean_stale(built_cache, tmp_path, capsys):
    """A root most of whose entries another Triton built is another environment's (its line names no
    ``clean --stale``); a root with one stale entry among sound ones keeps a ``clean --stale`` of itself only."""
    from tests.helpers import kernels

    src, _manifest = built_cache
    theirs = kernels.copy_cache(src, str(tmp_path / "theirs"))
    mine = kernels.copy_cache(src, str(tmp_path / "mine"))
    for name in os.listdir(theirs):
        _written_by(os.path.join(theirs, name), "3.4.0")
    _written_by(os.path.join(mine, min(os.listdir(mine))), "3.4.0")
    _rc, doc = _doctor(capsys, "--format", "json", "--target", "90", theirs, mine)
    probs = {p["code"]: p for p in json.loads(doc)["problems"]}
    other, stale = probs["other-environment"], probs["stale"]
    assert other["count"] == len(os.listdir(theirs)) and "Triton 3.4.0" in other["message"]
    assert "clean" not in other["fix"] and other["fix"].startswith("jitwarden doctor --python PATH")
    assert stale["count"] == 1 and stale["fix"] == f"jitwarden clean --stale --target sm_90 {mine}"


def test_the_fix_names_the_python_a_partition_records_only_when_it_can_be_trusted(
    built_cache, tmp_path, capsys
):
    """A partition records the Python that writes it, and the fix names it: a line users paste and run, so a
    record naming a Python anyone could have replaced (world-writable) is not offered."""
    from jitwarden.store import partition
    from tests.helpers import kernels

    src, _manifest = built_cache
    root = tmp_path / "cache"
    part = root / "jitwarden-v1" / "0123456789abcdef"
    kernels.copy_cache(src, str(part))
    for name in os.listdir(part):
        _written_by(str(part / name), "3.4.0")
    python = tmp_path / "venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    partition.ensure(str(part), "0123456789abcdef", None, "triton", python=str(python))

    def fix() -> str:
        _rc, doc = _doctor(capsys, "--format", "json", "--target", "90", str(root))
        return next(p for p in json.loads(doc)["problems"] if p["code"] == "other-environment")[
            "fix"
        ]

    assert fix().startswith(f"jitwarden doctor --python {python} --target sm_90")
    python.chmod(0o777)  # anyone may replace it: the record proves nothing
    assert fix().startswith("jitwarden doctor --python PATH")
