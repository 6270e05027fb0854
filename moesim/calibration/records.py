"""Measurement CSVs: one schema for every kernel family, atomic appends, resume keys.

A path ending in `.csv.gz` is read and written gzip-compressed (mtime 0, so the same rows give the
same bytes: re-imports are byte-identical). Each row is one timed kernel configuration. Shape columns that do not apply stay empty. `source`
says where the number comes from (a run on this machine, or a published row id + URL); `exclude`
holds the reason a row is kept for the record but not fitted (superseded, other kernel, ...).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
from collections.abc import Iterable, Mapping
from pathlib import Path

from moesim.errors import CalibrationError
from moesim.fsio import atomic_write_bytes
from moesim.specs.loader import read_text

# The numeric shape of a kernel configuration (sizes, counts, bytes); empty where it does not apply.
SIZE_COLUMNS = [
    "m",
    "n",
    "k",
    "groups",
    "batch",
    "q_len",
    "heads",
    "context",
    "ep",
    "tokens",
    "hidden",
    "topk",
    "experts",
    "gpus_per_node",
    "topk_groups",
    "bytes",
    "tp",  # MoE / attention TP size of the measured kernel (imported tables); appended last: old CSVs still read
]
SHAPE_COLUMNS = ["mode", "op", "layout", "dtype"] + SIZE_COLUMNS
RESULT_COLUMNS = ["time_s", "tflops", "GBps"]  # what was timed (time_s) or published (throughputs)
COLUMNS = (
    ["kernel", "backend"]
    + SHAPE_COLUMNS
    + RESULT_COLUMNS
    + ["gpu", "sms", "driver", "lib_versions", "device", "date", "source", "exclude", "note"]
)
NUMERIC_COLUMNS = SIZE_COLUMNS + RESULT_COLUMNS + ["sms"]

# What identifies a measurement for resume: the kernel, how it ran, where, and its shape.
KEY_COLUMNS = ["kernel", "backend", "device", "gpu"] + SHAPE_COLUMNS


def _fmt(v) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if math.isnan(v):
            return ""
        if v.is_integer() and abs(v) < 1e15:
            return str(int(v))
        return repr(v)
    return str(v)


def normalize_key_value(v) -> str:
    """Canonical text of a key cell so 64, 64.0 and '64' compare equal."""
    s = _fmt(v).strip()
    try:
        f = float(s)
    except ValueError:
        return s
    if math.isnan(f):
        return ""
    return _fmt(f)


def row_key(row: Mapping) -> tuple:
    return tuple(normalize_key_value(row.get(c, "")) for c in KEY_COLUMNS)


def read_csv_rows(path: Path) -> list[dict]:
    """Rows of a measurement CSV as dicts of strings. Partial/malformed trailing lines are dropped."""
    path = Path(path)
    if not path.exists():
        return []
    text = _read_text(path)
    if not text.strip():
        return []
    reader = csv.DictReader(io.StringIO(text))
    header = reader.fieldnames or []
    missing = [c for c in ("kernel", "time_s", "source") if c not in header]
    if missing:
        raise CalibrationError(
            f"{path}: not a moesim measurement CSV (missing columns {', '.join(missing)}); "
            f"expected the columns {', '.join(COLUMNS)}"
        )
    rows = []
    for r in reader:
        if None in r or any(v is None for v in r.values()):
            continue  # ragged line (e.g. cut off by an interruption): not a measurement
        rows.append({c: (r.get(c) or "") for c in COLUMNS})
    return rows


def is_gzip(path: Path) -> bool:
    return Path(path).name.endswith(".gz")


def _read_text(path: Path) -> str:
    if not is_gzip(path):
        return read_text(path, CalibrationError)
    try:
        return gzip.decompress(path.read_bytes()).decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise CalibrationError(f"{path}: cannot read ({e.__class__.__name__}: {e})") from None


def done_keys(path: Path) -> set:
    return {row_key(r) for r in read_csv_rows(path)}


def _render(rows: Iterable[Mapping], header: bool) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n", extrasaction="raise")
    if header:
        w.writeheader()
    for r in rows:
        w.writerow({c: _fmt(r.get(c)) for c in COLUMNS})
    return buf.getvalue()


def atomic_write_text(path: Path, text: str) -> None:
    """Write `text` to `path` via a temp file in the same folder + os.replace (all or nothing).

    A `.gz` path gets the gzip of the UTF-8 text with mtime 0 (deterministic bytes).
    """
    data = text.encode("utf-8")
    if is_gzip(path):
        data = gzip.compress(data, compresslevel=9, mtime=0)
    atomic_write_bytes(Path(path), data)


def append_rows_atomic(path: Path, rows: list[Mapping]) -> None:
    """Append rows: old content + new rows go to a temp file that replaces the CSV in one step.

    An interruption at any point leaves either the old file or the old file plus these rows.
    Existing rows are re-rendered in the current column order (older files with fewer columns
    are upgraded in place).
    """
    path = Path(path)
    old = read_csv_rows(path) if path.exists() else []
    atomic_write_text(path, _render(list(old) + list(rows), header=True))


def write_rows(path: Path, rows: list[Mapping]) -> None:
    atomic_write_text(Path(path), _render(rows, header=True))
