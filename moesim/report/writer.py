"""The one `--out` writer: JSON text, data frames (.csv / .parquet / .json), text reports and
matplotlib figures. Every write is atomic: a temporary file in the target's folder, then
``os.replace`` onto the target, so a failed or interrupted command never leaves half a file.
An OSError becomes one ConfigError line naming the flag and what is allowed."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Callable
from pathlib import Path

from moesim.errors import ConfigError
from moesim.fsio import OutputError, atomic_write_via
from moesim.units import jsonable

FRAME_SUFFIXES = (".csv", ".parquet", ".json")
FIGURE_SUFFIXES = (".png", ".svg", ".pdf")


def json_text(obj, *, indent: int | None = 2) -> str:
    """Strict JSON of a result (RFC 8259): numpy -> Python, non-finite numbers -> null, booleans stay
    booleans (`moesim.units.jsonable`); allow_nan=False guards it, so a NaN that slips past raises
    here (a test failure) instead of printing `NaN`. Unknown objects -> str."""
    return json.dumps(jsonable(obj), indent=indent, allow_nan=False, default=str)


def atomic_write(out, write: Callable[[Path], object], *, flag: str = "--out", allowed: str) -> Path:
    """``write(tmp)`` beside ``out``, then moved onto it (moesim.fsio.atomic_write_via: regular files
    only, symlinks written through, mode kept, one writer per path); a failure becomes one ConfigError
    line naming the flag, the path, the reason and what is allowed."""
    try:
        return atomic_write_via(out, write)
    except OutputError as e:
        raise ConfigError(f"{flag}: cannot write {str(out)!r} ({e.reason}); allowed: a writable {allowed}") from None


def write_text(text: str, out, *, flag: str = "--out", allowed: str = "file path") -> Path:
    return atomic_write(out, lambda p: p.write_text(text, encoding="utf-8"), flag=flag, allowed=allowed)


def write_json(obj, out, *, allowed: str = "file path") -> Path:
    """One JSON object (indent 2, trailing newline, strict: `json_text`) to ``out``."""
    return write_text(json_text(obj) + "\n", out, allowed=allowed)


def frame_json_text(df) -> str:
    """A frame's rows as JSON records (what `--json` prints and `--out x.json` writes). pandas writes
    NaN/inf as null (strict JSON; tests/unit/test_strict_json.py holds it to that)."""
    return df.to_json(orient="records", indent=1)


def _check_parquet_engine() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        try:
            import fastparquet  # noqa: F401
        except ImportError:
            raise ConfigError(
                "--out: .parquet needs pyarrow (pip install pyarrow); allowed without it: .csv, .json"
            ) from None


def _arrow_table(df):
    """The frame as a pyarrow Table (no index), or None when pyarrow is missing or cannot type a column
    (an object column of mixed types): the caller then writes through pandas."""
    try:
        import pyarrow as pa  # lazy: only commands that write frames load it
    except ImportError:
        return None
    try:
        return pa.Table.from_pandas(df, preserve_index=False)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def _csv_header(columns) -> str:
    """The header line as pandas writes it (quotes only where a name needs them)."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow([str(c) for c in columns])
    return buf.getvalue()


def write_csv(df, path) -> None:
    """CSV through pyarrow's columnar writer (~10x pandas.to_csv: 344k rows x 46 columns in ~0.6 s
    instead of ~6 s): floats in shortest round-trip form, booleans true/false, missing values empty,
    string values quoted; the header as pandas writes it. Without pyarrow: pandas.to_csv."""
    table = _arrow_table(df)
    if table is None:
        df.to_csv(path, index=False)
        return
    import pyarrow.csv as pcsv  # lazy: start-up time (only --out loads it)

    with open(path, "wb") as f:
        f.write(_csv_header(df.columns).encode("utf-8"))
        pcsv.write_csv(table, f, pcsv.WriteOptions(include_header=False))


def write_parquet(df, path) -> None:
    """Parquet through pyarrow (no index); without it pandas' engine (fastparquet) if installed."""
    table = _arrow_table(df)
    if table is None:
        df.to_parquet(path, index=False)
        return
    import pyarrow.parquet as pq  # lazy: start-up time (only --out loads it)

    pq.write_table(table, path)


def checked_suffix(out: Path, suffixes) -> str:
    """The lower-case extension of `out` if it is one of `suffixes` (a Parquet one only with an engine
    to write it); else a one-line ConfigError listing the allowed ones."""
    suf = out.suffix.lower()
    if suf not in suffixes:
        raise ConfigError(f"--out: unknown extension {out.suffix!r}; allowed: {', '.join(suffixes)}")
    if suf == ".parquet":
        _check_parquet_engine()
    return suf


def write_frame(df, out, *, suffixes=FRAME_SUFFIXES, allowed: str | None = None) -> Path:
    """A data frame by extension: .csv (no index), .parquet (no index), .json (records)."""
    out = Path(out)
    suf = checked_suffix(out, suffixes)
    writers = {
        ".csv": lambda p: write_csv(df, p),
        ".json": lambda p: df.to_json(p, orient="records", indent=1),
        ".parquet": lambda p: write_parquet(df, p),
    }
    return atomic_write(out, writers[suf], allowed=allowed or f"{', '.join(suffixes)} path")


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
