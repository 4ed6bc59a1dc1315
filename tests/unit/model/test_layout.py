"""The names of Triton's interrupted writes (model/layout.py), recognised in one place for the scan and prune."""

from __future__ import annotations

import pytest

from jitwarden.model.layout import is_tmp_dir, is_tmp_file, is_write_leftover

TMP_DIRS = [
    "tmp.pid_4242_5f0c9d",
    "tmp.pid_1_",
    "tmp.pid_٣_x",
]  # \d is any decimal digit, as Triton's uuid follows
TMP_FILES = ["kernel.cubin.tmp.pid_4242_5f0c9d", "x.tmp.pid_x.tmp.pid_7_y", ".tmp.pid_0_"]
NEITHER = [
    "tmp.pid_",
    "tmp.pid__x",
    "tmp.pid_12",
    "tmp.pid_1a_x",
    "tmp.pid_²_x",
    "kernel.cubin",
    "kernel.tmp.pid_x_1",
    "Tmp.pid_1_x",
    "xtmp.pid_1_",
]


@pytest.mark.parametrize("name", TMP_DIRS)
def test_writer_dirs(name):
    assert is_tmp_dir(name) and is_write_leftover(name)


@pytest.mark.parametrize("name", TMP_FILES)
def test_writer_files(name):
    assert is_tmp_file(name) and not is_tmp_dir(name) and is_write_leftover(name)


@pytest.mark.parametrize("name", NEITHER)
def test_other_names(name):
    assert not is_tmp_dir(name) and not is_tmp_file(name) and not is_write_leftover(name)
