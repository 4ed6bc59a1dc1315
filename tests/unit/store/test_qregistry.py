"""The quarantine registry is rewritten by the one atomic writer (store/qregistry.py, store/atomic.py)."""

from __future__ import annotations

import json
import os

from jitwarden.model.layout import QUARANTINE_DIR
from jitwarden.store import qregistry


def test_a_rewrite_never_writes_through_a_name_planted_beside_the_registry(tmp_path):
    """The old rewrite opened ``<registry>.tmp.<pid>`` with O_TRUNC: a hard link planted there (the
    victim's file, not a symlink, so O_NOFOLLOW does not stop it) was truncated and overwritten."""
    env = {"JITWARDEN_HOME": str(tmp_path / "home")}
    reg = qregistry.path(env)
    os.makedirs(os.path.dirname(reg))
    live = tmp_path / "live"
    (live / QUARANTINE_DIR).mkdir(parents=True)
    gone = [f"/nowhere/{i:06d}/{'x' * 40}" for i in range(6000)]  # past the compaction size
    with open(reg, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in [*gone, str(live)])
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.link(victim, f"{reg}.tmp.{os.getpid()}")
    new = tmp_path / "new"
    (new / QUARANTINE_DIR).mkdir(parents=True)
    assert qregistry.remember(str(new), env)
    assert victim.read_bytes() == b"precious"
    assert qregistry.roots(env) == [str(live), str(new)]
    assert os.stat(reg).st_mode & 0o777 == 0o600
    assert sorted(os.listdir(os.path.dirname(reg))) == sorted(
        [os.path.basename(reg), os.path.basename(reg) + f".tmp.{os.getpid()}"]
    )  # the planted name left alone, no temporary of ours left behind
