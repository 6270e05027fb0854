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


class _Family:
    """The B shapes of one family: ln of each shape's sizes [shapes, MATCH_COLUMNS] (NaN where
    unset), the median time at each, an exact-shape index, and the shapes sorted by the size column
    every shape fills with the most distinct values (a near match only looks within tolerance of it:
    tables of 50k rows stay fast)."""

    def __init__(self, by_shape: dict):
        self.keys = list(by_shape)
        self.times = np.array([np.median(v) for v in by_shape.values()])
        self.logs = np.full((len(self.keys), len(MATCH_COLUMNS)), np.nan)
        for i, key in enumerate(self.keys):
            for c, v in key:
                self.logs[i, MATCH_COLUMNS.index(c)] = math.log(v)
        self.exact = {k: i for i, k in enumerate(self.keys)}
        full = [j for j in range(len(MATCH_COLUMNS)) if not np.isnan(self.logs[:, j]).any()]
        self.prune = max(full, key=lambda j: len(np.unique(self.logs[:, j]))) if full else None
        if self.prune is not None:
            self.order = np.argsort(self.logs[:, self.prune], kind="stable")
            self.sorted = self.logs[self.order, self.prune]

    def _candidates(self, a, tol_log):
        if self.prune is None or np.isnan(a[self.prune]):
            return np.arange(len(self.keys))
        lo = np.searchsorted(self.sorted, a[self.prune] - tol_log - 1e-12, "left")
        hi = np.searchsorted(self.sorted, a[self.prune] + tol_log + 1e-12, "right")
        return self.order[lo:hi]

    def match(self, sizes: dict, tol_log: float):
        """(index of the matching B shape or None, exact?): every size both fill within tol_log
        (|ln a/b|), smallest sum of |ln a/b|."""
        i = self.exact.get(tuple(sorted(sizes.items())))
        if i is not None:
            return i, True
        a = np.full(len(MATCH_COLUMNS), np.nan)
        for c, v in sizes.items():
            a[MATCH_COLUMNS.index(c)] = math.log(v)
        idx = self._candidates(a, tol_log)
        d = np.abs(self.logs[idx] - a)  # NaN where either side leaves the size unset
        shared = ~np.isnan(d)
        d0 = np.where(shared, d, 0.0)
        ok = shared.any(axis=1) & (d0.max(axis=1) <= tol_log + 1e-12)
        if not ok.any():
            return None, False
        score = np.where(ok, d0.sum(axis=1), np.inf)
        j = int(np.argmin(score))
        return int(idx[j]), bool(score[j] < 1e-12)


def _shape_table(rows: list[dict]) -> dict:
    """family -> _Family of the B rows."""
    by = defaultdict(lambda: defaultdict(list))
    for r in rows:
        by[r["family"]][tuple(sorted(r["sizes"].items()))].append(r["time_s"])
    return {fam: _Family(shapes) for fam, shapes in by.items()}


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
        b = table.get(r["family"])
        i, exact = b.match(r["sizes"], math.log1p(tol)) if b is not None else (None, False)
        if i is None:
            fam["unmatched"] += 1
            continue
        fam["count"] += 1
        fam["exact"] += int(exact)
        fam["ratios"].append(r["time_s"] / float(b.times[i]))
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
