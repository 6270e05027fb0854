"""Data frames to files, atomically (`moesim.fsio.atomic_write_via`): a whole frame by extension
(`write_frame`: .csv / .parquet / .json), or a sweep's pieces one after another into ONE atomic
write (`stream_frame`: .csv / .parquet; a temporary file beside the target, moved onto it only when
the last piece is written; an error or an interrupt leaves the old file). CSV through pyarrow's
columnar writer, Parquet through pyarrow (a row group per streamed piece). A streamed file's schema
is fixed before the first piece from a probe frame with the in-memory frame's columns and dtypes,
so it holds the same rows, columns and values that `write_frame` writes for the whole frame. An
OSError becomes one ConfigError line naming the flag and what is allowed. pandas and pyarrow load
only when a frame is written."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from pathlib import Path

from moesim.errors import ConfigError
from moesim.fsio import OutputError, atomic_write_via

FRAME_SUFFIXES = (".csv", ".parquet", ".json")
STREAM_SUFFIXES = (".csv", ".parquet")


def atomic_write(out, write: Callable[[Path], object], *, flag: str = "--out", allowed: str) -> Path:
    """``write(tmp)`` beside ``out``, then moved onto it (moesim.fsio.atomic_write_via: regular files
    only, symlinks written through, mode kept, one writer per path); a failure becomes one ConfigError
    line naming the flag, the path, the reason and what is allowed."""
    try:
        return atomic_write_via(out, write)
    except OutputError as e:
        raise ConfigError(f"{flag}: cannot write {str(out)!r} ({e.reason}); allowed: a writable {allowed}") from None


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


def csv_header(columns) -> str:
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
        f.write(csv_header(df.columns).encode("utf-8"))
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


def arrow_schema(probe):
    """The pyarrow schema `write_frame` would give the whole frame, from a frame with its columns
    and dtypes (`moesim.analyses.sweep_stream.probe_frame`); all-missing object columns as strings."""
    import pyarrow as pa  # lazy: only commands that write frames load it

    schema = pa.Schema.from_pandas(probe, preserve_index=False)
    fields = [pa.field(f.name, pa.large_string()) if pa.types.is_null(f.type) else f for f in schema]
    return pa.schema(fields)


def piece_table(df, schema):
    """A piece as a Table of `schema` (a column the piece lacks is all missing; NaN -> missing,
    as `pyarrow.Table.from_pandas` does for the whole frame)."""
    import pyarrow as pa  # lazy

    n = len(df)
    arrays = []
    for f in schema:
        if f.name in df.columns:
            arrays.append(pa.array(df[f.name], type=f.type, from_pandas=True))  # arrow-backed text: no copy
        else:
            arrays.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def stream_frame(pieces: Iterable, probe, out, *, allowed: str) -> Path:
    """Write every frame of `pieces` (an iterable of DataFrames, consumed here) to `out` (.csv /
    .parquet) in one atomic write; the schema comes from `probe`."""
    out = Path(out)
    suf = checked_suffix(out, STREAM_SUFFIXES)
    schema = arrow_schema(probe)
    write = _write_csv_pieces if suf == ".csv" else _write_parquet_pieces
    return atomic_write(out, lambda tmp: write(tmp, pieces, schema), allowed=allowed)


def _write_csv_pieces(path, pieces: Iterable, schema) -> None:
    import pyarrow.csv as pcsv  # lazy: only --out loads it

    opts = pcsv.WriteOptions(include_header=False)
    with open(path, "wb") as f:
        f.write(csv_header(schema.names).encode("utf-8"))
        for df in pieces:
            if len(df):
                pcsv.write_csv(piece_table(df, schema), f, opts)


def _write_parquet_pieces(path, pieces: Iterable, schema) -> None:
    import pyarrow.parquet as pq  # lazy: only --out loads it

    with pq.ParquetWriter(str(path), schema) as w:
        for df in pieces:
            if len(df):
                w.write_table(piece_table(df, schema))
