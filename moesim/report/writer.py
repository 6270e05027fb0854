"""The one `--out` writer: JSON text, data frames (.csv / .parquet / .json: `moesim.fsio.frames`,
re-exported here), text reports and matplotlib figures. Every write is atomic: a temporary file in the target's folder, then
``os.replace`` onto the target, so a failed or interrupted command never leaves half a file.
An OSError becomes one ConfigError line naming the flag and what is allowed."""

from __future__ import annotations

import json
from pathlib import Path

from moesim.errors import ConfigError
from moesim.fsio.frames import (  # noqa: F401  (re-exported: the frame writers live below the report layer)
    FRAME_SUFFIXES,
    STREAM_SUFFIXES,
    atomic_write,
    checked_suffix,
    csv_header,
    frame_json_text,
    stream_frame,
    write_csv,
    write_frame,
    write_parquet,
)
from moesim.units import jsonable

FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def json_text(obj, *, indent: int | None = 2) -> str:
    """Strict JSON of a result (RFC 8259): numpy -> Python, non-finite numbers -> null, booleans stay
    booleans (`moesim.units.jsonable`); allow_nan=False guards it, so a NaN that slips past raises
    here (a test failure) instead of printing `NaN`. Unknown objects -> str."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False, default=str)


def write_text(text: str, out, *, flag: str = "--out", allowed: str = "file path") -> Path:
    return atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"), flag=flag, allowed=allowed)


def write_json(obj, out, *, allowed: str = "file path") -> Path:
    """One JSON object (indent 2, trailing newline, strict: `json_text`) to ``out``."""
    return write_text(json_text(obj) + "\n", out, allowed=allowed)


def check_figure_suffix(out, flag: str = "--out") -> None:
    if Path(out).suffix.lower() not in FIGURE_SUFFIXES:
        raise ConfigError(f"{flag}: {Path(out).name!r} must end in .png, .svg or .pdf")


def write_figure(fig, out, *, dpi: int, flag: str = "--out") -> Path:
    """Save a matplotlib figure (format by extension) and close it."""

    def save(p):
        try:
            fig.savefig(p, dpi=dpi)
        except ValueError as e:  # an extension matplotlib cannot write
            raise OSError(str(e)) from None

    try:
        return atomic_write(out, save, flag=flag, allowed=".png, .svg or .pdf path")
    finally:
        import matplotlib.pyplot as plt  # lazy: only commands that draw load matplotlib

        plt.close(fig)
