"""Where moesim's data lives: the shipped catalogs and profiles, and the user's own.

- Shipped data (models/, hardware/, calibration/profiles/, validation/, balance/, examples/ and the
  kernel-level measurement CSVs): the repository root in a checkout (editable install included), else
  the `moesim/_data` folder an installed wheel carries (setup.py copies it there at build time).
- User data: `$MOESIM_DATA` when set, else (an installed wheel only) `$XDG_DATA_HOME/moesim`
  (default `~/.local/share/moesim`), laid out like the shipped data. Its catalog entries and
  profiles are read before the shipped ones (same name: the user's wins), and `calibrate run` /
  `calibrate import` write their measurements there. In a checkout without `$MOESIM_DATA` there is no
  separate user root: measurements go to the checkout's calibration/measurements/ as always.
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

_PACKAGE = Path(str(files("moesim")))


def packaged_root() -> Path:
    """The data folder inside the installed package (exists in a wheel install only)."""
    return _PACKAGE / "_data"


def is_checkout() -> bool:
    """True when moesim runs from a source tree (the data folders beside the package), not a wheel."""
    return not packaged_root().is_dir() and (_PACKAGE.parent / "models").is_dir()


def data_root() -> Path:
    """The shipped data: the checkout's root, else the wheel's moesim/_data."""
    return packaged_root() if packaged_root().is_dir() else _PACKAGE.parent


def user_root() -> Path | None:
    """The user's data root: $MOESIM_DATA, else (wheel installs) $XDG_DATA_HOME/moesim or
    ~/.local/share/moesim; None in a checkout without $MOESIM_DATA (the checkout is the user's)."""
    env = os.environ.get("MOESIM_DATA")
    if env:
        return Path(env).expanduser()
    if is_checkout():
        return None
    xdg = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(xdg).expanduser() / "moesim"


def user_roots() -> list[Path]:
    """[user_root()] when there is one, else []."""
    user = user_root()
    return [user] if user is not None else []


def data_roots() -> list[Path]:
    """Roots to read from, first wins: the user's (when there is one), then the shipped data."""
    return [*user_roots(), data_root()]


def write_root() -> Path:
    """Where `calibrate run` / `calibrate import` write measurements by default: the user root, else
    (a checkout) the checkout itself."""
    return user_root() or data_root()


def find_data(relative: str | Path) -> Path | None:
    """The first existing `root / relative` over data_roots(); None when no root has it."""
    return next((r / relative for r in data_roots() if (r / relative).exists()), None)


def relative_label(path: Path, *roots: Path) -> str:
    """`path` relative to the data root that holds it (`roots`, then data_roots(); provenance in
    outputs), else as given."""
    resolved = Path(path).resolve()
    for root in (*roots, *data_roots()):
        try:
            return str(resolved.relative_to(root.resolve()))
        except ValueError:
            continue
    return str(path)
