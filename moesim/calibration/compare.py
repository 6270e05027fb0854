"""Two sources, one GPU: measurement rows A (e.g. timed here by `calibration/device_run.sh`) against
rows B (e.g. imported from aiconfigurator), per kernel family.

A family is (kernel, mode, op, layout, dtype); DeepGEMM's "fp8" rows are block-scaled (1x128
activations, 128x128 weights), so they count as "fp8_block", aiconfigurator's name for the same
recipe. An A row is matched to the B rows of its family with the same shape (every size column that
both rows fill equal), else to the nearest B shape whose every shared size differs by at most
`tolerance` (10 %: |ln a/b| <= ln 1.1) — the smallest sum of |ln a/b| wins. Several B rows at one
shape (engine versions, backends) count as their median time. Rows with an `exclude` reason or no
time_s are left out and counted. Per family: matched rows, how many exactly, median / p10 / p90 of
A/B - 1 (signed: > 0 means A is slower) and p90 of |A/B - 1|.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np

from moesim.calibration.records import SIZE_COLUMNS, read_csv_rows
from moesim.errors import CalibrationError, check_number

FAMILY_COLUMNS = ("kernel", "mode", "op", "layout", "dtype")
# size columns a shape is matched on: the records' sizes plus `tp` (MoE TP) when a file has it
MATCH_COLUMNS = tuple(SIZE_COLUMNS) + ("tp",)
# backend -> {dtype as the runner writes it: dtype as the importer names the same recipe}
DTYPE_ALIASES = {"deep_gemm": {"fp8": "fp8_block"}}
DEFAULT_TOLERANCE = 0.10


def measurement_files(paths) -> list[Path]:
    """CSV paths; a folder stands for its *.csv and *.csv.gz files (sorted)."""
    out = []
    for p in map(Path, paths):
        if p.is_dir():
            out += sorted(x for x in p.iterdir() if x.name.endswith((".csv", ".csv.gz")))
        elif p.exists():
            out.append(p)
        else:
            raise CalibrationError(f"compare: {p} does not exist; give measurement CSV files or folders")
    return out


def family_of(row: dict) -> tuple:
    dt = (row.get("dtype") or "").strip().lower()
    dt = DTYPE_ALIASES.get((row.get("backend") or "").strip(), {}).get(dt, dt)
    return tuple((row.get(c) or "").strip() for c in FAMILY_COLUMNS[:-1]) + (dt,)


def _sizes(row: dict) -> dict:
    out = {}
    for c in MATCH_COLUMNS:
        v = row.get(c)
        if v not in (None, ""):
            x = float(v)
            if x > 0 and math.isfinite(x):
                out[c] = x
    return out


def load_rows(paths) -> tuple[list[dict], int]:
    """(usable rows with family, sizes and time, rows left out: excluded or without a time)."""
    rows, skipped = [], 0
    for p in measurement_files(paths):
        for r in read_csv_rows(p):
            t = float(r["time_s"]) if r.get("time_s") else math.nan
            if r.get("exclude") or not (t > 0 and math.isfinite(t)):
                skipped += 1
                continue
            rows.append({"family": family_of(r), "sizes": _sizes(r), "time_s": t})
    return rows, skipped


def _shape_table(rows: list[dict]) -> dict:
    """family -> (ln of each B shape's sizes [shapes, MATCH_COLUMNS], NaN where unset; median time
    of the B rows at each shape)."""
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["family"]][tuple(sorted(r["sizes"].items()))].append(r["time_s"])
    out = {}
    for fam, shapes in by.items():
        logs = np.full((len(shapes), len(MATCH_COLUMNS)), np.nan)
        for i, key in enumerate(shapes):
            for c, v in key:
                logs[i, MATCH_COLUMNS.index(c)] = math.log(v)
        out[fam] = (logs, np.array([np.median(v) for v in shapes.values()]))
    return out


def _match(sizes: dict, logs, tol_log: float):
    """(index of the matching B shape or None, exact?): every size both fill within tol_log
    (|ln a/b|), smallest sum of |ln a/b|; vectorized over the family's B shapes."""
    if logs is None or not len(logs):
        return None, False
    a = np.full(len(MATCH_COLUMNS), np.nan)
    for c, v in sizes.items():
        a[MATCH_COLUMNS.index(c)] = math.log(v)
    d = np.abs(logs - a)  # NaN where either side leaves the size unset
    shared = ~np.isnan(d)
    d0 = np.where(shared, d, 0.0)
    ok = shared.any(axis=1) & (d0.max(axis=1) <= tol_log + 1e-12)
    if not ok.any():
        return None, False
    score = np.where(ok, d0.sum(axis=1), np.inf)
    i = int(np.argmin(score))
    return i, bool(score[i] < 1e-12)


def _stats(ratios) -> dict:
    r = np.asarray(ratios, dtype=float) - 1.0
    if not r.size:
        return {"median": None, "p10": None, "p90": None, "p90_abs": None}
    return {
        "median": float(np.median(r)),
        "p10": float(np.percentile(r, 10)),
        "p90": float(np.percentile(r, 90)),
        "p90_abs": float(np.percentile(np.abs(r), 90)),
    }


def compare(a_paths, b_paths, tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """Per-family disagreement of rows A against rows B (see the module doc)."""
    tol = check_number("--tolerance", tolerance, lo=0.0, hi=1.0, error=CalibrationError)
    a_rows, a_skipped = load_rows(a_paths)
    b_rows, b_skipped = load_rows(b_paths)
    table = _shape_table(b_rows)
    per = defaultdict(lambda: {"count": 0, "exact": 0, "unmatched": 0, "ratios": []})
    for r in a_rows:
        fam = per[r["family"]]
        logs, times = table.get(r["family"], (None, None))
        i, exact = _match(r["sizes"], logs, math.log1p(tol))
        if i is None:
            fam["unmatched"] += 1
            continue
        fam["count"] += 1
        fam["exact"] += int(exact)
        fam["ratios"].append(r["time_s"] / float(times[i]))
    families = []
    for key in sorted(per):
        f = per[key]
        families.append(
            {"family": "/".join(x for x in key if x), **{c: key[j] for j, c in enumerate(FAMILY_COLUMNS)}}
            | {"count": f["count"], "exact": f["exact"], "unmatched": f["unmatched"]}
            | _stats(f["ratios"])
        )
    return {
        "a": [str(p) for p in measurement_files(a_paths)],
        "b": [str(p) for p in measurement_files(b_paths)],
        "tolerance": tol,
        "a_rows": len(a_rows),
        "b_rows": len(b_rows),
        "a_left_out": a_skipped,
        "b_left_out": b_skipped,
        "families": families,
    }
