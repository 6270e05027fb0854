"""The one atomic file writer: every file moesim writes (profiles, measurement rows, residual
side-cars, --out reports) goes to a temporary file in the target's folder, is flushed and fsynced,
gets the mode a plain open() would give (0666 minus the umask; mkstemp makes 0600), and is moved
onto the target with os.replace; the folder is fsynced. An interrupted write leaves the old file
or the new one, never half of one, and no temporary file behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


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


def atomic_write_via(path, write: Callable[[Path], object], *, make_parent: bool = False) -> Path:
    """Call ``write(tmp)`` on a temporary path beside ``path`` (same suffix, so writers that infer
    the format from it see the target's), fsync it, then move it onto ``path``."""
    path = Path(path)
    if make_parent:
        path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".tmp", dir=str(path.parent))
    os.close(fd)
    tmp = Path(name)
    try:
        os.chmod(tmp, file_mode())
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    finally:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)
    return path


def atomic_write_bytes(path, data: bytes) -> Path:
    """``data`` to ``path`` atomically (parent folders created)."""
    return atomic_write_via(path, lambda p: p.write_bytes(data), make_parent=True)
