"""Measurement rows for the fit: loading and checking the CSVs (moesim.calibration.records
columns), choosing the rows of one kernel, their ids and sources, and the work of a row."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from moesim.calibration.records import COLUMNS, NUMERIC_COLUMNS, read_csv_rows
from moesim.errors import CalibrationError
from moesim.perf.profile.work import family_work

BACKEND_RANK = {
    "deep_gemm": 0,
    "flash_mla": 0,
    "deep_ep": 0,
    "pplx-nvlink": 0,
    "pplx-ibgda": 0,
    "nccl": 1,
    "triton": 1,
    "torch": 2,
}
DTYPE_RANK = {"fp8": 0, "bf16": 1, "fp16": 2, "fp32": 3}


def load_measurements(paths: Sequence[Path]) -> pd.DataFrame:
    rows = []
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise CalibrationError(f"{p}: measurement CSV does not exist")
        for r in read_csv_rows(p):
            r["_file"] = str(p)
            rows.append(r)
    if not rows:
        raise CalibrationError(
            f"{', '.join(map(str, paths)) or 'calibrate fit'}: no measurement rows; a fit needs rows "
            f"with kernel, shape columns and time_s (or tflops / GBps)"
        )
    df = pd.DataFrame(rows, columns=COLUMNS + ["_file"])
    for c in NUMERIC_COLUMNS:
        given = df[c].fillna("").astype(str).str.strip() != ""
        df[c] = pd.to_numeric(df[c].replace("", np.nan), errors="coerce").astype(float)
        # a value that is present must be a finite positive number (empty = not applicable)
        bad = given & ~(np.isfinite(df[c]) & (df[c] > 0))
        if c in ("exclude",) or not bad.any():
            continue
        i = int(np.flatnonzero(bad.values)[0])
        raise CalibrationError(
            f"{df['_file'].iloc[i]}: row {i + 1}: {c} = {rows[i][c]!r}; allowed a finite number "
            f"> 0{' (seconds)' if c == 'time_s' else ''} or empty"
        )
    for c in set(COLUMNS) - set(NUMERIC_COLUMNS):
        df[c] = df[c].fillna("").astype(str)
    return df


def row_id(source: str) -> str:
    s = str(source)
    head = s.split(":")[0]
    ids = [t.split(" ")[0] for t in head.split(", ") if "-" in t.split(" ")[0]]
    if ids and all(len(i) < 16 for i in ids):
        return ",".join(ids)
    return s[:40]


def id_span(rows: pd.DataFrame) -> str:
    ids = []
    for s in rows.source:
        ids += [i for i in row_id(s).split(",") if i]
    if not ids:
        return "local run"
    pre = sorted({i.split("-")[0] for i in ids if "-" in i})
    if len(ids) > 6:
        return f"{len(ids)} {'/'.join(pre) or 'local'} ids {ids[0]}..{ids[-1]}"
    return ", ".join(ids)


def sources_text(rows: pd.DataFrame) -> str:
    """The distinct sources of some rows (the text after 'ids: '), ' | '-joined."""
    return " | ".join(sorted({s.split(": ", 1)[1] if ": " in s else s for s in rows.source}))


def usable(df: pd.DataFrame, kernel: str | None = None, *, positive: bool = True) -> pd.Series:
    """Row mask of the rows a fit may use: not excluded, a finite time_s (> 0 unless positive=False),
    of `kernel` when one is named."""
    ok = (df.exclude == "") & np.isfinite(df.time_s)
    if positive:
        ok &= df.time_s > 0
    return ok if kernel is None else ok & (df.kernel == kernel)


def usable_rows(df: pd.DataFrame, kernel: str | None = None, *, positive: bool = True) -> pd.DataFrame:
    """The rows of `df` a fit may use (usable), their index kept."""
    return df[usable(df, kernel, positive=positive)]


def preferred_rows(df: pd.DataFrame, kernel: str, notes: list) -> pd.DataFrame:
    """The usable rows of `kernel` of its preferred backend and dtype (BACKEND_RANK, DTYPE_RANK), with
    a note when other rows are left out."""
    d = usable_rows(df, kernel)
    if d.empty:
        return d
    best_backend = min(d.backend.unique(), key=lambda b: (BACKEND_RANK.get(b, 5), b))
    d2 = d[d.backend == best_backend]
    best_dtype = min(d2.dtype.unique(), key=lambda x: (DTYPE_RANK.get(x, 9), x))
    d3 = d2[d2.dtype == best_dtype]
    if len(d3) < len(d):
        notes.append(
            f"{kernel}: fitted the {len(d3)} rows of backend {best_backend} / dtype {best_dtype}; "
            f"{len(d) - len(d3)} rows of other backends/dtypes not used"
        )
    return d3.reset_index(drop=True)


def work_of_row(r):
    """(F, B_in, B_out) of a timed GEMM / MLA-decode row; (None, None, None) for other kernels."""
    dt = (getattr(r, "dtype", "") or "fp8").lower()
    if r.kernel in ("gemm", "grouped_gemm"):
        g = r.groups if np.isfinite(r.groups) else 1.0
        return family_work(r.kernel, dt, 1, {"m": r.m, "n": r.n, "k": r.k, "groups": g})[:3]
    if r.kernel == "mla_decode" and np.isfinite(r.batch):
        shape = {"batch": r.batch, "q_len": r.q_len, "heads": r.heads, "context": r.context}
        return family_work("mla_decode", dt, 1, shape)[:3]
    return None, None, None
