"""`kernel_rows` cases: published kernel rows of a measurement CSV (DeepGEMM / FlashMLA / DeepEP
README figures, ids DG-xxx, FMLA-xxx, DEP-xxx in the row's `source`) priced by `moesim kernel`'s
machinery (workload.kernels.kernel_op + perf.kernel.price_kernel) on a GPU's profile for an engine.

    kernel_rows:
      file: calibration/measurements/h800/gemm.csv   # relative to the data root
      ids: [DG-001, DG-004]     # or `all`: every row with a time and no exclude reason
      hardware: h800            # the profile priced (default: the row's GPU folder)
      engine: sglang            # the engine's profile (default: validate --engine, else sglang)
      peak_grid: {batch: [..], q_len: [..], heads: [..], context: [..]}   # rows without a time

A row with time_s gives one check: predicted vs published time. A row without a time but with a
published best-case throughput ("up to" N GB/s or TFLOPS, no shape stated) gives one check:
the best achieved throughput the model predicts over `peak_grid` vs the published one.
"""

from __future__ import annotations

import itertools
import re

from moesim.analyses.validate.common import Check, num
from moesim.calibration.records import read_csv_rows
from moesim.engine.pricing import load_profile_for, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import DEFAULT_ENGINE, CostMode
from moesim.errors import SpecError
from moesim.perf.kernel import price_kernel
from moesim.specs.data import data_root, find_data
from moesim.workload.kernels import kernel_op

ROW_ID = re.compile(r"\b([A-Z]{2,6}-\d{3})\b")
MODES = {"ll": "deepep-ll", "normal": "deepep-normal"}
COLLECTIVES = {"nccl_all_reduce": "all_reduce", "nccl_all_gather": "all_gather"}


def row_ids(row: dict) -> list[str]:
    """The published ids a row carries: those named before the source's first ': ' (its URL)."""
    return ROW_ID.findall((row.get("source") or "").split(": ", 1)[0])


def _f(row, c):
    return float(row[c]) if row.get(c) not in (None, "") else None


def kernel_shape(row: dict) -> tuple[str, dict]:
    """(moesim kernel --op, its shape flags) of a measurement row."""
    kern = row["kernel"]
    if kern == "gemm":
        return "gemm", {"m": _f(row, "m"), "n": _f(row, "n"), "k": _f(row, "k")}
    if kern == "grouped_gemm":
        shape = {"m": _f(row, "m"), "n": _f(row, "n"), "k": _f(row, "k"), "groups": _f(row, "groups")}
        return "grouped_gemm", shape | {"layout": row.get("layout") or "masked"}
    if kern in ("mla_decode", "mla_prefill"):
        shape = {c: _f(row, c) for c in ("batch", "q_len", "heads", "context")}
        return kern, {c: v for c, v in shape.items() if v is not None}
    if kern == "deepep":
        if row.get("mode") not in MODES:
            raise SpecError(f"kernel_rows: deepep row mode {row.get('mode')!r}; allowed {', '.join(MODES)}")
        return row["op"], {"ep": _f(row, "ep"), "tokens": _f(row, "tokens"), "mode": MODES[row["mode"]]}
    if kern in COLLECTIVES:
        return COLLECTIVES[kern], {"gpus": _f(row, "ep"), "nbytes": _f(row, "bytes")}
    raise SpecError(
        f"kernel_rows: kernel {kern!r} has no `moesim kernel` op; allowed gemm, grouped_gemm, mla_decode, "
        f"mla_prefill, deepep, {', '.join(COLLECTIVES)}"
    )


def _profile(hw, engine):
    """The calibrated profile of `hw` for `engine` (<gpu>.<engine>.yaml, else the GPU's generic one)."""
    return load_profile_for(hw, Pricing.of(cost_mode=CostMode.CALIBRATED, engine=engine or DEFAULT_ENGINE))[0]


def select_rows(spec: dict, where: str) -> list[tuple[str, dict]]:
    """[(id, row)] of the case: the listed ids in order, or `all` usable rows."""
    path = find_data(spec["file"]) or data_root() / spec["file"]
    if not path.exists():
        raise SpecError(f"{where}: kernel_rows.file {spec['file']!r} does not exist under {data_root()}")
    rows = read_csv_rows(path)
    by_id = {i: r for r in rows for i in row_ids(r)}
    ids = spec.get("ids", "all")
    if ids == "all":
        return [(row_ids(r)[0], r) for r in rows if r.get("time_s") and not r.get("exclude") and row_ids(r)]
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise SpecError(
            f"{where}: kernel_rows.ids {missing[0]!r} is not in {spec['file']}; allowed: {', '.join(by_id)}"
        )
    return [(i, by_id[i]) for i in ids]


def _peak_check(case, rid, row, price) -> Check:
    """A best-case throughput without a shape: the best the model achieves over peak_grid."""
    grid = case.raw["kernel_rows"].get("peak_grid")
    if not grid:
        raise SpecError(f"{case.id}: {rid} has no time_s: give kernel_rows.peak_grid (shape lists) to check its peak")
    metric = "GBps" if row.get("GBps") else "tflops"
    keys = sorted(grid)
    best, arg = 0.0, None
    for vals in itertools.product(*(grid[k] for k in keys)):
        shape = {k: float(num(v)) for k, v in zip(keys, vals)}
        r = price(row["kernel"], shape)
        got = r["bytes"] / r["time_s"] / 1e9 if metric == "GBps" else r["flops"] / r["time_s"] / 1e12
        if got > best:
            best, arg = got, shape
    note = f"best over peak_grid at {', '.join(f'{k}={v:g}' for k, v in arg.items())}; published 'up to'"
    return case.check(f"{rid} {metric} (best case)", best, float(row[metric]), note=note)


def run_kernel_rows(case) -> list[Check]:
    """One check per selected row (see the module doc)."""
    spec = case.raw["kernel_rows"]
    if not isinstance(spec, dict) or "file" not in spec:
        raise SpecError(f"{case.id}: kernel_rows: a mapping with file (and ids) required")
    hw_name = spec.get("hardware") or spec["file"].split("/")[-2]
    model, hw = resolve_specs(spec.get("model", "deepseek-v3"), hw_name, spec.get("set"))
    prof = _profile(hw, spec.get("engine"))
    mode = CostMode.CALIBRATED if prof is not None else CostMode.ROOFLINE

    def price(op, shape):
        return price_kernel(kernel_op(model, hw, op, **shape), model, hw, mode, prof)

    checks = []
    for rid, row in select_rows(spec, f"{case.raw.get('_file', '')}: {case.id}"):
        if row.get("exclude"):
            raise SpecError(f"{case.id}: {rid} is an excluded row ({row['exclude']}); remove it from kernel_rows.ids")
        op, shape = kernel_shape(row)
        if not row.get("time_s"):
            checks.append(_peak_check(case, rid, row, price))
            continue
        r = price(op, shape)
        desc = " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{v}" for k, v in shape.items())
        checks.append(
            case.check(
                f"{rid} time_us", r["time_s"] * 1e6, float(row["time_s"]) * 1e6, note=f"{desc} [{r['provenance']}]"
            )
        )
    return checks
