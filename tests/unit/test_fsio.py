"""The one atomic writer (moesim.fsio): all or nothing, the mode a plain open() gives, no litter."""

import errno
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from moesim.fsio import OutputError, atomic_write_bytes, atomic_write_via, file_mode
from tests.conftest import unwritable_out


def test_written_file_has_the_umask_mode_not_mkstemps_0600(tmp_path):
    p = atomic_write_bytes(tmp_path / "sub" / "a.yaml", b"x: 1\n")
    assert p.read_bytes() == b"x: 1\n"
    assert stat.S_IMODE(os.stat(p).st_mode) == file_mode()
    assert file_mode() & 0o044  # readable by others under the usual umask 022


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    p = tmp_path / "r.csv"
    p.write_text("old\n")

    def boom(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write_via(p, boom)
    assert p.read_text() == "old\n"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["r.csv"]


# --- issue 17 §1/§5: regular files only, symlinks written through, mode kept, one writer, signals


def _names(folder):
    return sorted(x.name for x in folder.iterdir())


def test_a_symlink_is_written_through_and_stays_a_link(tmp_path):
    real = tmp_path / "real.yaml"
    real.write_text("old\n")
    link = tmp_path / "link.yaml"
    link.symlink_to(real)
    atomic_write_bytes(link, b"new\n")
    assert link.is_symlink() and os.readlink(link) == str(real)
    assert real.read_text() == "new\n"
    assert _names(tmp_path) == ["link.yaml", "real.yaml"]


def test_a_dangling_symlink_creates_its_target(tmp_path):
    link = tmp_path / "link.csv"
    link.symlink_to(tmp_path / "made.csv")
    atomic_write_bytes(link, b"a\n")
    assert link.is_symlink() and (tmp_path / "made.csv").read_text() == "a\n"


@pytest.mark.parametrize("kind", ["dir", "fifo", "device", "link-to-dir"])
def test_only_regular_files_are_replaced(tmp_path, kind):
    p, want = unwritable_out(tmp_path, "out.csv", kind)
    before = _names(tmp_path)
    with pytest.raises(OutputError, match=want) as e:
        atomic_write_bytes(p, b"x")
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    assert _names(tmp_path) == before  # nothing replaced, no temporary or lock file left
    if kind == "device":
        assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_an_existing_files_mode_is_kept(tmp_path):
    p = tmp_path / "p.yaml"
    p.write_text("old")
    os.chmod(p, 0o640)
    atomic_write_bytes(p, b"new")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o640 and p.read_bytes() == b"new"


def test_a_new_file_is_0644_under_umask_022(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "n.csv", b"x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "n.csv").st_mode) == 0o644


def test_a_second_writer_of_the_same_path_is_refused_and_the_lock_file_goes_away(tmp_path):
    p = tmp_path / "s.csv"
    p.write_text("old\n")
    seen = {}

    def outer(tmp):
        seen["lock"] = (tmp_path / ".s.csv.lock").exists()
        with pytest.raises(OutputError, match="being written by another moesim process") as e:
            atomic_write_via(p, lambda t: t.write_text("inner\n"))
        seen["msg"] = str(e.value)
        tmp.write_text("outer\n")

    atomic_write_via(p, outer)
    assert seen["lock"] and str(p) in seen["msg"]
    assert p.read_text() == "outer\n"
    assert _names(tmp_path) == ["s.csv"]  # no lock file, no temporary


LOCK_HOLDER = "import fcntl, os, sys, time; fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT); fcntl.flock(fd, fcntl.LOCK_EX); print(1, flush=True); time.sleep(30)"  # noqa: E501


def test_a_lock_held_by_another_process_is_refused(tmp_path):
    p = tmp_path / "s.csv"
    holder = subprocess.Popen(
        [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / ".s.csv.lock")], stdout=subprocess.PIPE
    )
    try:
        assert holder.stdout.readline().strip() == b"1"
        with pytest.raises(OutputError, match="another moesim process"):
            atomic_write_bytes(p, b"x")
        assert not p.exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()
    atomic_write_bytes(p, b"y")  # the holder is gone: the flock went with it
    assert p.read_bytes() == b"y" and _names(tmp_path) == ["s.csv"]


@pytest.mark.parametrize(
    ("err", "want"),
    [
        (errno.ENOSPC, "disk full"),
        (errno.EROFS, "read-only file system"),
        (errno.EACCES, "permission denied"),
    ],
)
def test_an_io_failure_is_one_line_and_keeps_the_old_file(tmp_path, err, want):
    p = tmp_path / "r.parquet"
    p.write_bytes(b"old")

    def full(tmp):
        tmp.write_bytes(b"partial")
        raise OSError(err, os.strerror(err))

    with pytest.raises(OutputError, match=want) as e:
        atomic_write_via(p, full)
    assert str(p) in str(e.value) and "\n" not in str(e.value)
    assert p.read_bytes() == b"old" and _names(tmp_path) == ["r.parquet"]


def test_a_missing_folder_is_named(tmp_path):
    with pytest.raises(OutputError, match="does not exist") as e:
        atomic_write_via(tmp_path / "no" / "x.csv", lambda t: t.write_text("x"))
    assert str(tmp_path / "no") in str(e.value)


def test_temporaries_left_by_a_killed_writer_are_removed_by_the_next_write(tmp_path):
    p = tmp_path / "k.csv"
    (tmp_path / ".k.csv.ab_cd012.csv").write_text("half")  # as mkstemp names them
    (tmp_path / ".other.csv.ab_cd012.csv").write_text("someone else's")
    atomic_write_bytes(p, b"new")
    assert _names(tmp_path) == [".other.csv.ab_cd012.csv", "k.csv"]


SIGTERM_CHILD = """
import os, sys, time
from moesim.fsio import atomic_write_via
def slow(tmp):
    tmp.write_text("half")
    print("writing", flush=True)
    time.sleep(30)
atomic_write_via(sys.argv[1], slow)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_a_signal_during_a_write_keeps_the_old_file(tmp_path, sig):
    """SIGTERM / SIGINT: the old file and nothing else; the process still ends by that signal.
    SIGKILL cannot be caught: the old file stays, the temporary is removed by the next write."""
    p = tmp_path / "t.csv"
    p.write_text("old\n")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    child = subprocess.Popen(
        [sys.executable, "-c", SIGTERM_CHILD, str(p)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env
    )
    assert child.stdout.readline().strip() == b"writing"
    child.send_signal(sig)
    assert child.wait(timeout=20) == -sig
    child.stdout.close()
    assert p.read_text() == "old\n"
    if sig != signal.SIGKILL:
        assert _names(tmp_path) == ["t.csv"]
    else:
        atomic_write_bytes(p, b"new\n")
        assert p.read_text() == "new\n" and _names(tmp_path) == ["t.csv"]


# Windows has no fcntl: the module imports and locks with msvcrt (simulated: fcntl blocked, a stand-in msvcrt)
NO_FCNTL = """
import os, sys, types
sys.modules["fcntl"] = None  # import fcntl -> ImportError, as on Windows
held, close = {}, os.close  # fd -> inode locked; closing the fd releases it, as msvcrt's lock
def locking(fd, mode, nbytes):
    if os.fstat(fd).st_ino in held.values():
        raise PermissionError(13, "Permission denied")
    held[fd] = os.fstat(fd).st_ino
def closing(fd):
    held.pop(fd, None)
    close(fd)
os.close = closing
sys.modules["msvcrt"] = types.SimpleNamespace(locking=locking, LK_NBLCK=2)
from moesim import fsio
assert fsio.fcntl is None
p = sys.argv[1]
fsio.atomic_write_bytes(p, b"x")
def inner(tmp):
    try:
        fsio.atomic_write_bytes(p, b"y")
    except fsio.OutputError as e:
        print("refused:", e)
    open(tmp, "wb").write(b"z")
fsio.atomic_write_via(p, inner)
print(open(p, "rb").read().decode())
"""


def test_without_fcntl_writes_lock_with_msvcrt(tmp_path):
    p = tmp_path / "s.csv"
    r = subprocess.run([sys.executable, "-c", NO_FCNTL, str(p)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "refused: " in r.stdout and "another moesim process" in r.stdout and r.stdout.endswith("z\n")
    assert p.read_bytes() == b"z"
