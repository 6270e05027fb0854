"""The one safe file writer: every file moesim writes (profiles, measurement rows, residual
side-cars, --out reports and tables) goes through `atomic_write_via`.

- All or nothing: ``write(tmp)`` fills a temporary file in the target's folder (``.NAME.XXXXXXXX.SUFFIX``),
  which is fsynced and moved onto the target with os.replace; the folder is fsynced. An error, Ctrl-C
  (KeyboardInterrupt) or SIGTERM leaves the old file byte-identical and no temporary file behind
  (SIGKILL cannot be caught: it may leave a temporary file, which the next write of that path removes).
- Only regular files are replaced: a directory, device node, fifo or socket at the path is an
  `OutputError` naming the path and what it is. A symlink is written *through*: the file it points
  to gets the new content and the link stays a link (a dangling link creates its target).
- Mode: an existing file keeps its permission bits; a new file gets what a plain open() gives
  (0666 minus the umask: 0644 under umask 022), not mkstemp's 0600.
- One writer per path: an exclusive, non-blocking flock (Windows: msvcrt.locking) on ``.NAME.lock`` beside the target; a
  second moesim process writing the same path gets "PATH is being written by another moesim
  process". The lock file is removed when the write ends (a stale one after SIGKILL is harmless).
- SIGTERM during a write (main thread, default handler only): the temporary file and the lock are
  removed, then the process is terminated by SIGTERM as it would have been.
- Every OSError becomes one `OutputError` line naming the path and the reason (is a directory,
  permission denied, read-only file system, disk full, folder does not exist)."""

from __future__ import annotations

import errno
import os
import re
import signal
import stat
import tempfile
import threading
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from moesim.errors import ConfigError

try:  # POSIX (Linux, macOS): flock
    import fcntl

    msvcrt = None
except ImportError:  # Windows: no fcntl; msvcrt's non-blocking lock of the lock file's first byte
    fcntl = None
    import msvcrt

REASONS = {
    errno.EISDIR: "is a directory",
    errno.ENOTDIR: "a component of the path is not a directory",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.EROFS: "read-only file system",
    errno.ENOSPC: "disk full (no space left on device)",
    errno.EDQUOT: "disk quota exceeded",
    errno.EFBIG: "file too large",
    errno.ENAMETOOLONG: "file name too long",
}


class OutputError(ConfigError):
    """A file cannot be written: ``path`` and ``reason`` (one line)."""

    def __init__(self, path, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"cannot write {self.path!r}: {reason}")


class _Terminated(BaseException):
    """SIGTERM arrived during a write (unwinds through the clean-up, then the signal is re-sent)."""


def file_mode() -> int:
    """0666 minus the process umask: the mode os.open / open() gives a new file."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def fsync_dir(path: Path) -> None:
    """fsync a folder so a rename in it is durable (no-op where the OS does not allow it)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _kind(mode: int) -> str | None:
    """What a non-regular file is, or None for a regular file."""
    if stat.S_ISREG(mode):
        return None
    if stat.S_ISDIR(mode):
        return "is a directory"
    for test, name in (
        (stat.S_ISFIFO, "a fifo (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return f"is {name}, not a regular file"
    return "is not a regular file"


def _reason(e: OSError, target: Path) -> str:
    """One phrase for an OSError met while writing ``target``."""
    if e.errno == errno.ENOENT and not target.parent.is_dir():
        return f"folder {str(target.parent)!r} does not exist"
    reason = REASONS.get(e.errno, e.strerror or str(e))
    other = e.filename is not None and Path(str(e.filename)).parent != target.parent
    return f"{reason} ({e.filename})" if other else reason


def resolve_target(path) -> tuple[Path, int | None]:
    """The file to replace (a symlink resolved: written through) and its permission bits (None: new).
    Raises OutputError when something other than a regular file is there."""
    path = Path(path)
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return target, None
    except OSError as e:
        raise OutputError(path, _reason(e, target)) from None
    kind = _kind(st.st_mode)
    if kind is not None:
        raise OutputError(path, kind if target == path else f"links to {str(target)!r}, which {kind}")
    return target, stat.S_IMODE(st.st_mode)


@contextmanager
def _signals_deferred():
    """SIGINT and SIGTERM held back around the few steps that create, replace or remove the temporary
    and lock files, then delivered (so an interrupt never lands between creating a file and noting
    it). Python-level: a sigmask would not do, as the signal may go to another thread (pyarrow's,
    BLAS's) and Python runs its handler in the main thread at the next bytecode anyway."""
    if threading.current_thread() is not threading.main_thread():
        yield  # Python runs signal handlers in the main thread only: nothing can interrupt this one
        return
    got: list[int] = []
    old: dict = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            old[sig] = signal.signal(sig, lambda signum, frame: got.append(signum))
        yield
    finally:
        _restore(list(old.items()))
        for sig in dict.fromkeys(got):
            if old.get(sig) != signal.SIG_IGN:
                signal.raise_signal(sig)  # the restored handler runs now (KeyboardInterrupt, _Terminated)


def _restore(handlers: list) -> None:
    """Put each (signal, handler) back, every one even if a signal lands while doing it."""
    if handlers:
        (sig, handler), rest = handlers[0], handlers[1:]
        try:
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        finally:
            _restore(rest)


def _lock_fd(fd: int) -> None:
    """An exclusive, non-blocking lock on the open file ``fd`` (released when it is closed)."""
    if fcntl is not None:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    else:
        msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)


def _unlink_lock(lock: Path) -> None:
    """Remove the lock file while still holding it; Windows refuses to remove an open file: left there
    (harmless, as a stale one after SIGKILL is)."""
    try:
        lock.unlink(missing_ok=True)
    except PermissionError:
        if fcntl is not None:
            raise


def _take_lock(lock: Path, shown) -> int:
    """fd of ``lock``, flocked; refused when another process holds it. Re-checks after locking that
    the file is still the one at the path (a holder that just removed it would let two writers in)."""
    while True:
        fd = os.open(str(lock), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            _lock_fd(fd)
        except (BlockingIOError, PermissionError):  # flock: EWOULDBLOCK; msvcrt.locking: EACCES
            os.close(fd)
            raise OutputError(shown, "it is being written by another moesim process") from None
        try:
            if os.path.samestat(os.fstat(fd), os.stat(lock)):
                return fd
        except FileNotFoundError:
            pass
        os.close(fd)


@contextmanager
def path_lock(target: Path, shown):
    """Exclusive non-blocking flock on ``.NAME.lock`` beside ``target``, removed on exit (while still
    held: the next writer's re-check sees the new file)."""
    lock, fd = target.with_name(f".{target.name}.lock"), None
    try:
        with _signals_deferred():  # an interrupt held here is raised on leaving: fd is set by then
            fd = _take_lock(lock, shown)
        yield
    finally:
        if fd is not None:
            with _signals_deferred():
                try:
                    _unlink_lock(lock)
                finally:
                    os.close(fd)


def _remove_stale_temporaries(target: Path) -> None:
    """Temporary files of an earlier write of ``target`` killed by SIGKILL (only called under the lock)."""
    pat = re.compile(rf"\.{re.escape(target.name)}\.[a-z0-9_]{{8}}{re.escape(target.suffix or '.tmp')}")
    try:
        for p in target.parent.iterdir():
            if pat.fullmatch(p.name):
                p.unlink(missing_ok=True)
    except OSError:
        pass


@contextmanager
def _sigterm_raises():
    """In the main thread, with SIGTERM at its default: SIGTERM raises _Terminated inside the block."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return

    def handler(signum, frame):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one is enough: let the clean-up finish
        raise _Terminated

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _write_replace(target: Path, mode: int, write: Callable[[Path], object]) -> None:
    """mkstemp beside ``target``, ``write(tmp)``, fsync, os.replace; the temporary file never outlives it."""
    tmp = None
    try:
        with _signals_deferred():
            fd, name = tempfile.mkstemp(
                prefix=f".{target.name}.", suffix=target.suffix or ".tmp", dir=str(target.parent)
            )
            tmp = Path(name)
            os.close(fd)
        os.chmod(tmp, mode)
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        with _signals_deferred():
            os.replace(tmp, target)
            tmp = None
    finally:
        if tmp is not None:
            with _signals_deferred():
                tmp.unlink(missing_ok=True)


def atomic_write_via(path, write: Callable[[Path], object], *, make_parent: bool = False) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same suffix, so writers that infer
    the format from it see the target's), fsync it, then move it onto ``path`` (see the module
    docstring: regular files only, symlinks written through, mode kept, one writer per path).
    An OSError (from ``write`` too) becomes OutputError; other exceptions propagate after clean-up."""
    path = Path(path)
    try:
        with _sigterm_raises():
            if make_parent:
                path.parent.mkdir(parents=True, exist_ok=True)
            target, mode = resolve_target(path)
            with path_lock(target, path):
                _remove_stale_temporaries(target)
                _write_replace(target, file_mode() if mode is None else mode, write)
    except _Terminated:
        signal.raise_signal(signal.SIGTERM)  # the default handler is back: the process ends as SIGTERM ends it
        raise KeyboardInterrupt from None  # not reached unless SIGTERM is blocked
    except OSError as e:
        raise OutputError(path, _reason(e, Path(path))) from None
    fsync_dir(target.parent)
    return path


def atomic_write_bytes(path, data: bytes) -> Path:
    """``data`` to ``path`` atomically (parent folders created)."""
    return atomic_write_via(path, lambda p: p.write_bytes(data), make_parent=True)
