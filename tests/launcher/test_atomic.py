"""launcher.atomic: a state file is opened as a regular file only (never through a symbolic link, never blocking on
a FIFO or a device), read up to a cap, and appended to only when it is a regular file."""

from __future__ import annotations

import os

import pytest

from launcher import atomic


def _fifo(path):
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("make, what", [
    (lambda p, t: os.symlink(t, p), "a symbolic link"),
    (lambda p, t: os.symlink("/dev/zero", p), "a symbolic link"),
    (lambda p, t: os.symlink(p.parent / "nowhere", p), "a symbolic link"),
    (lambda p, t: _fifo(p), "a FIFO"),
    (lambda p, t: p.mkdir(), "a directory"),
])
def test_only_a_regular_file_is_opened(tmp_path, make, what):
    target = tmp_path / "target"
    target.write_text("secret\n")
    path = tmp_path / "state.json"
    make(path, target)
    for call in (lambda: atomic.read_capped(path, 1 << 20), lambda: atomic.read_tail(path, 1 << 20)):
        with pytest.raises(atomic.NotRegular, match=f"is {what}, not a regular file"):
            call()  # a FIFO would block here without O_NONBLOCK
    assert atomic.read_capped(target, 100) == b"secret\n"


def test_a_device_is_refused(tmp_path):
    with pytest.raises(atomic.NotRegular, match="a character device"):
        atomic.read_capped("/dev/zero", 1 << 20)


def test_a_file_over_its_cap_is_refused_without_reading_it(tmp_path):
    big = tmp_path / "counts.json"
    with open(big, "wb") as fh:
        fh.truncate(300 << 20)  # sparse: 300 MB that take no disk
    with pytest.raises(atomic.TooLarge, match="314572800 bytes, more than the 65536"):
        atomic.read_capped(big, 64 << 10)
    small = tmp_path / "small"
    small.write_bytes(b"x" * 10)
    assert atomic.read_capped(small, 10) == b"x" * 10
    with pytest.raises(atomic.TooLarge):
        atomic.read_capped(small, 9)


@pytest.mark.parametrize("kind", ["link", "dangling link", "fifo", "directory"])
def test_an_append_never_goes_through_a_link_or_into_a_fifo(tmp_path, kind):
    """history.jsonl as a link to /etc/passwd (a copy here) must not get the entry: as root that writes any file."""
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0:root:/root:/bin/bash\n")
    path = tmp_path / "history.jsonl"
    if kind == "link":
        path.symlink_to(victim)
    elif kind == "dangling link":
        path.symlink_to(tmp_path / "created-by-the-append")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    with pytest.raises(atomic.NotRegular, match="not a regular file"):
        atomic.append_line(path, '{"outcome": "switched"}', mode=0o600)
    assert victim.read_text() == "root:x:0:0:root:/root:/bin/bash\n"
    assert not (tmp_path / "created-by-the-append").exists()


def test_an_append_creates_a_regular_file_of_the_mode_asked(tmp_path):
    path = tmp_path / "history.jsonl"
    atomic.append_line(path, "a", mode=0o600)
    atomic.append_line(path, "b\n", mode=0o600)
    assert path.read_text() == "a\nb\n" and oct(path.stat().st_mode & 0o777) == "0o600"


def test_holds_only_a_regular_file_with_exactly_that_text(tmp_path):
    path = tmp_path / "f.json"
    assert not atomic.holds(path, "x")  # absent
    path.write_text("abc")
    assert atomic.holds(path, "abc") and not atomic.holds(path, "ab") and not atomic.holds(path, "abcd")
    link = tmp_path / "link.json"
    link.symlink_to(path)
    assert not atomic.holds(link, "abc")
    assert not atomic.holds(_fifo(tmp_path / "fifo"), "abc")  # never blocks
