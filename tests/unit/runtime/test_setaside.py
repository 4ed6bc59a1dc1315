"""The one runtime quarantine (jitwarden.runtime.setaside): never under a writer's feet, one wording for all."""

from __future__ import annotations

import fcntl
import os

from jitwarden.model.layout import ENTRY_WRITERS_FILE
from jitwarden.runtime import setaside
from jitwarden.store import quarantine
from jitwarden.store.entrylock import lock, unlock


def _entry(tmp_path) -> tuple[str, str]:
    root = str(tmp_path / "triton")
    path = os.path.join(root, "KEY")
    os.makedirs(path)
    with open(os.path.join(path, "k.cubin"), "wb") as f:
        f.write(b"\x7fELF")
    return root, path


def test_an_entry_a_writer_holds_is_left_in_place_and_moved_once_the_writer_is_done(tmp_path):
    root, path = _entry(tmp_path)
    writer = lock(path, ENTRY_WRITERS_FILE, fcntl.LOCK_SH)  # a Triton writer mid-group
    try:
        assert setaside.set_aside(path, "corrupt", ["x"], by="test") is None
        assert os.path.isdir(path) and quarantine.list_root(root) == []
    finally:
        unlock(writer)
    rec = setaside.set_aside(
        path, "corrupt", ["k.cubin does not match its sealed sha256"], by="test"
    )
    assert rec is not None and not os.path.exists(path)
    [listed] = quarantine.list_root(root)
    assert (listed.id, listed.reason, listed.by) == (rec.id, "corrupt", "test")
    line = setaside.line(rec, "Triton cache entry", "corrupt", rec.details, setaside.AT_STARTUP)
    assert line.startswith(
        "quarantined Triton cache entry KEY (corrupt: k.cubin does not match its sealed sha256); "
    )
    assert "at start-up" in line and line.endswith(
        f"Restore with `jitwarden quarantine restore {rec.id}`"
    )


def test_a_file_or_a_link_is_moved_as_one_name_and_a_vanished_entry_is_no_error(tmp_path):
    root, path = _entry(tmp_path)
    os.symlink(path, os.path.join(root, "LINK"))
    rec = setaside.set_aside(os.path.join(root, "LINK"), "unsafe", ["a symlink"], by="test")
    assert rec is not None and not os.path.lexists(os.path.join(root, "LINK"))
    assert not os.path.exists(
        os.path.join(path, ENTRY_WRITERS_FILE)
    )  # no lock file made through the link
    assert setaside.set_aside(os.path.join(root, "GONE"), "corrupt", [], by="test") is None
