"""Streamed `--out` frames: a sweep's pieces written one after another into ONE atomic write
(`moesim.report.writer.atomic_write`: a temporary file beside the target, moved onto it only when
the last piece is written; an error or an interrupt leaves the old file). CSV through pyarrow's
CSV writer, Parquet through a ParquetWriter (a row group per piece). The schema is fixed before
the first piece from a probe frame with the in-memory frame's columns and dtypes, so the file
holds the same rows, columns and values that `write_frame` writes for the whole frame."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from moesim.report.writer import _csv_header, atomic_write, checked_suffix

STREAM_SUFFIXES = (".csv", ".parquet")


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
    write = _write_csv if suf == ".csv" else _write_parquet
    return atomic_write(out, lambda tmp: write(tmp, pieces, schema), allowed=allowed)


def _write_csv(path, pieces: Iterable, schema) -> None:
    import pyarrow.csv as pcsv  # lazy: only --out loads it

    opts = pcsv.WriteOptions(include_header=False)
    with open(path, "wb") as f:
        f.write(_csv_header(schema.names).encode("utf-8"))
        for df in pieces:
            if len(df):
                pcsv.write_csv(piece_table(df, schema), f, opts)


def _write_parquet(path, pieces: Iterable, schema) -> None:
    import pyarrow.parquet as pq  # lazy: only --out loads it

    with pq.ParquetWriter(str(path), schema) as w:
        for df in pieces:
            if len(df):
                w.write_table(piece_table(df, schema))
