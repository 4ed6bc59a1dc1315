"""Private temporary directories (store/tempdirs.py): made 0700 by an exclusive mkdir, only beneath parents that
nobody but the caller and root can change; the unnamed spill file a streamed report sets bytes aside in."""

from __future__ import annotations

import os
import stat
import subprocess

import pytest

from jitwarden.store import removal, tempdirs

NOBODY = 65534


def _st(mode: int, uid: int = 0) -> os.stat_result:
    return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))


def test_rmtree_at_removes_a_staging_dir_without_following_links(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("x")
    fd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        name, sfd = tempdirs.make_temp_dir(fd, ".jitwarden-import.")
        assert oct(os.fstat(sfd).st_mode & 0o777) == oct(0o700)
        os.close(sfd)
        os.makedirs(tmp_path / name / "0" / "sub")
        (tmp_path / name / "0" / "f").write_text("y")
        os.symlink(outside, tmp_path / name / "0" / "link")
        removal.rmtree_at(fd, name)
    finally:
        os.close(fd)
    assert sorted(os.listdir(tmp_path)) == ["outside"] and (outside / "keep").read_text() == "x"


@pytest.mark.parametrize(
    ("mode", "uid", "why"),
    [
        (stat.S_IFDIR | 0o755, 0, None),
        (stat.S_IFDIR | 0o700, 1000, None),  # the caller's own
        (stat.S_IFDIR | 0o1777, 0, None),  # /tmp: world-writable but sticky
        (stat.S_IFDIR | 0o1777, 1000, None),
        (stat.S_IFDIR | 0o775, 0, "writable by others without the sticky bit (mode 775)"),
        (stat.S_IFDIR | 0o757, 1000, "writable by others without the sticky bit (mode 757)"),
        (
            stat.S_IFDIR | 0o700,
            NOBODY,
            f"owned by uid {NOBODY}, neither this user (uid 1000) nor root",
        ),
        (stat.S_IFREG | 0o600, 1000, "is not a directory"),
    ],
)
def test_why_untrusted_names_who_else_could_change_a_directory(mode, uid, why):
    got = tempdirs.why_untrusted(_st(mode, uid), uid=1000)
    assert got == why if why is None else why in got


def test_open_trusted_dir_refuses_a_link_a_relative_path_and_another_users_dir(tmp_path):
    fd = tempdirs.open_trusted_dir(str(tmp_path))
    try:
        assert os.path.samestat(os.fstat(fd), os.stat(tmp_path))
    finally:
        os.close(fd)
    (tmp_path / "real").mkdir()
    os.symlink(tmp_path / "real", tmp_path / "ln")
    with pytest.raises(tempdirs.UntrustedDir, match="ln is a symlink"):
        tempdirs.open_trusted_dir(str(tmp_path / "ln" / "sub"))
    with pytest.raises(tempdirs.UntrustedDir, match="not an absolute path"):
        tempdirs.open_trusted_dir("relative/dir")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    (theirs / "inner").mkdir()
    with pytest.raises(tempdirs.UntrustedDir) as exc:
        tempdirs.open_trusted_dir(str(theirs / "inner"))
    assert exc.value.filename == str(theirs)  # the first component that fails is named
    with pytest.raises(FileNotFoundError):
        tempdirs.open_trusted_dir(str(tmp_path / "missing"))


def test_private_dir_passes_over_a_parent_another_user_can_write(tmp_path):
    open_to_all = tmp_path / "shared"
    open_to_all.mkdir()
    os.chmod(open_to_all, 0o777)  # no sticky bit: anyone could rename our directory away
    with pytest.raises(tempdirs.UntrustedDir, match="without the sticky bit"):
        tempdirs.private_dir(".jw-work.", where=str(open_to_all))
    assert os.listdir(open_to_all) == []
    made = tempdirs.private_dir(".jw-work.", where=str(tmp_path))
    assert os.path.dirname(made) == str(tmp_path) and os.path.basename(made).startswith(".jw-work.")
    st = os.lstat(made)
    assert stat.S_ISDIR(st.st_mode) and st.st_mode & 0o777 == 0o700 and st.st_uid == os.geteuid()


def test_make_private_dir_makes_its_parent_and_a_new_name_each_time(tmp_path):
    parent = str(tmp_path / "a" / "b")
    (p1, fd1), (p2, fd2) = (tempdirs.make_private_dir(parent, ".stage.") for _ in range(2))
    os.close(fd1)
    os.close(fd2)
    assert p1 != p2 and sorted(os.listdir(parent)) == sorted(os.path.basename(p) for p in (p1, p2))


def test_a_private_dir_cannot_be_entered_by_another_user(tmp_path):
    os.chmod(tmp_path, 0o755)
    made = tempdirs.private_dir(".jw-work.", where=str(tmp_path))
    r = subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "ls", made],
        capture_output=True,
        check=False,
    )
    assert r.returncode != 0


def test_spill_gives_back_what_was_written_in_order_and_leaves_no_name(tmp_path):
    pieces = [os.urandom(n) for n in (1, 3000, 0, 70000)]
    with tempdirs.Spill(str(tmp_path)) as spill:
        for p in pieces:
            spill.write(p)
        assert b"".join(spill.chunks(size=4096)) == b"".join(pieces)
        assert all(len(c) <= 4096 for c in spill.chunks(size=4096))
        assert os.listdir(tmp_path) == []  # unnamed: nothing to find, nothing left behind


def test_spill_holds_in_memory_where_no_file_can_be_made(tmp_path):
    with tempdirs.Spill(str(tmp_path / "missing")) as spill:
        spill.write(b"head")
        spill.write(b"tail")
        assert b"".join(spill.chunks()) == b"headtail"
