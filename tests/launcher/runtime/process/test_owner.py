"""launcher.runtime.process.owner: one serve per state dir, refused before anything is written."""

from __future__ import annotations

import os

import pytest

from launcher.errors import UserError
from launcher.runtime.process import owner
from launcher.state_layout import StatePaths


def test_the_second_claim_names_the_first_owner_and_writes_nothing(tmp_path):
    paths = StatePaths(tmp_path / "state")
    fd = owner.claim(paths)
    try:
        assert paths.owner_lock.read_text().strip() == str(os.getpid())
        before = sorted(p.name for p in paths.root.iterdir())
        with pytest.raises(UserError, match=rf"already served by pid {os.getpid()}"):
            owner.claim(paths)
        assert sorted(p.name for p in paths.root.iterdir()) == before
        assert paths.owner_lock.read_text().strip() == str(os.getpid())
    finally:
        os.close(fd)
    os.close(owner.claim(paths))  # released with its descriptor: the next serve may own it


def test_the_lock_survives_the_move_below_supervisords_reload_range(tmp_path):
    paths = StatePaths(tmp_path)
    fd = owner.claim(paths)
    saved = os.dup(owner.LOCK_FD) if _is_open(owner.LOCK_FD) else None
    try:
        owner.hand_over(fd)
        assert os.get_inheritable(owner.LOCK_FD)
        with pytest.raises(UserError, match="already served"):
            owner.claim(paths)
    finally:
        os.close(owner.LOCK_FD)
        if saved is not None:
            os.dup2(saved, owner.LOCK_FD)
            os.close(saved)


def test_an_unwritable_state_dir_is_a_user_error(tmp_path):
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match="cannot write there"):
        owner.claim(StatePaths(tmp_path / "file" / "state"))


def _is_open(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


def test_deleting_the_pid_note_frees_nothing(tmp_path):
    paths = StatePaths(tmp_path / "state")
    fd = owner.claim(paths)
    try:
        paths.owner_lock.unlink()  # the lock is the state dir's, not the file's
        with pytest.raises(UserError, match="already served by another process"):
            owner.claim(paths)
        assert not paths.owner_lock.exists()  # the refused claim wrote nothing
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["a symbolic link", "a directory", "a FIFO"])
def test_a_pid_note_that_is_no_plain_file_is_named_for_what_it_is(tmp_path, kind):
    paths = StatePaths(tmp_path / "state")
    paths.root.mkdir()
    if kind == "a symbolic link":
        paths.owner_lock.symlink_to(tmp_path / "elsewhere")
    elif kind == "a directory":
        paths.owner_lock.mkdir()
    else:
        os.mkfifo(paths.owner_lock)
    with pytest.raises(UserError, match=f"serve.lock is {kind}, not the plain file") as err:
        owner.claim(paths)
    assert "remove it" in str(err.value) and "mount it writable" not in str(err.value)
    assert sorted(p.name for p in paths.root.iterdir()) == ["serve.lock"]  # nothing written
    assert not (tmp_path / "elsewhere").exists()
