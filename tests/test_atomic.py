"""gsprestore.core.atomic: a failed write leaves the old file (or none) and no temporary file."""

import os

import pytest

from gsprestore.core.atomic import UMASK, atomic_file


def test_clean_exit_replaces_the_target_with_usual_permissions(tmp_path):
    target = tmp_path / "a.txt"
    target.write_text("old")
    with atomic_file(target, "w", encoding="utf-8") as f:
        f.write("new")
    assert target.read_text() == "new"
    assert os.stat(target).st_mode & 0o777 == 0o666 & ~UMASK
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_an_exception_keeps_the_old_file_and_removes_the_temporary(tmp_path):
    target = tmp_path / "a.bin"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with atomic_file(target) as f:
            f.write(b"half")
            raise RuntimeError("interrupted")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.bin"]


def test_a_new_file_is_not_created_on_failure(tmp_path):
    target = tmp_path / "new.bin"
    with pytest.raises(ValueError):
        with atomic_file(target):
            raise ValueError("boom")
    assert list(tmp_path.iterdir()) == []
