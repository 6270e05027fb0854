"""The calibration profile schema: the one declaration of a profile's layout, used by the fit that
writes it (moesim.calibration.fit) and the reader (moesim.perf.profile.reader).

A profile (calibration/profiles/<gpu>.yaml) is a mapping:

    schema_version: 2            gpu: h800        date, generated_by, device_note, inputs, notes, ...
    roofline:    peaks the efficiencies are relative to (ROOFLINE_FIELDS; used without a hardware spec)
    launch:      {us, status: measured | hardware, ...}
    kernels:     {<family>: {status, gpu, model: overlap_v1 | peak, dtype, params, rows, cv, source,
                             residuals?, measurements?: {columns, rows},
                             residual?: {file, key, axes, points, sha256, axis_weights?}  (measured log residuals in
                             a side-car .npz, moesim.perf.profile.residual; also on variants)}}
    comm:        {<mode>: {dispatch | combine: {status, model: alpha_beta_max | alpha_beta_by_ep | deepep_v2, params, ...}}}
    collectives: {all_reduce | all_gather: {status, model: ring_alpha_beta | nccl_proto, params,
                  custom?: {<backend>: {model: custom_ar, params, max_bytes, cv}}, ...}}
Every number the reader uses is checked here (moesim.errors.check_number, error=CalibrationError):
one line naming the key and the allowed range, or every step time could turn NaN/inf.
"""

from __future__ import annotations

import numpy as np

from moesim.errors import CalibrationError, check_number
from moesim.perf import models as MODELS
from moesim.perf.models._kernel import DEFAULT_DTYPE as DEFAULT_KERNEL_DTYPE
from moesim.perf.models.params import BW_FRAC, ETA, FRAC, GBPS, US, Num  # noqa: F401  (re-exported)
from moesim.perf.profile.blocks import no_cv, roofline_from_yaml, roofline_to_yaml, round_sig  # noqa: F401  (re-exported)

# 2: one module per model (moesim.perf.models); collective_v2 retired, per-EP knots carry their
# nominal fractions. A version-1 profile is refused with how to refit it (reader.read_profile_file).
SCHEMA_VERSION = 2
RETIRED_SCHEMA_VERSIONS = (1,)
KERNEL_FAMILIES = (
    "gemm",
    "grouped_gemm",
    "bmm",
    "mla_decode",
    "mla_prefill",
    "attention",
    "elementwise",
    "moe",
    "quant",
)
COMM_MODES = ("deepep-ll", "deepep-normal", "nccl", "pplx")
COMM_OPS = ("dispatch", "combine")
COLLECTIVE_OPS = ("all_reduce", "all_gather")
MODE_ALIASES = {
    "ll": "deepep-ll",
    "low-latency": "deepep-ll",
    "low_latency": "deepep-ll",
    "normal": "deepep-normal",
    "deepep_ll": "deepep-ll",
    "deepep_normal": "deepep-normal",
}
# entry models: the registry's names (moesim.perf.models.<name>: params, time, fit core)
OVERLAP, PEAK, WAVES, STREAM, MLA_V2 = MODELS.KERNEL
ALPHA_BETA, ALPHA_BETA_BY_EP, DEEPEP_V2 = MODELS.COMM
RING, NCCL_PROTO, CUSTOM_AR = MODELS.COLLECTIVE
TIMED_COLLECTIVES = (NCCL_PROTO,)  # models the reader prices with collective_time
KERNEL_MODELS = MODELS.KERNEL
# models with a fitted per-call alpha, fitted on measured call times (imported tables, runners): the
# alpha holds the launch gap between back-to-back calls, so the cost model adds no second launch
CALL_TIME_MODELS = (WAVES, STREAM, MLA_V2)
# entry statuses: measured/fitted on this GPU, or carried over
OWN_STATUSES = ("fitted", "peak", "measured")
DEFAULT_DTYPE = DEFAULT_KERNEL_DTYPE  # a family's dtype when neither the shape nor the entry names one
REGENERATE = "regenerate it with `moesim calibrate fit`"


# params per model: field -> allowed number (each model module's PARAMS)
PARAMS = {name: mod.PARAMS for name, mod in MODELS.registry().items()}
LAUNCH = {"us": US._replace(optional=True)}
ROOFLINE_FIELDS = {
    "sms": Num(1.0, integer=True, optional=True),
    "hbm_bw_GBps": Num(0.0, lo_open=True, optional=True),
    "nvlink_bw_GBps": Num(0.0, optional=True),
    "rdma_bw_GBps": Num(0.0, optional=True),
    "domain_gpus": Num(1.0, integer=True, optional=True),
}
# measured kernel tables (measurements.columns) that are not numbers
TEXT_COLUMNS = ("layout",)


# ---------------------------------------------------------------------------- validation
def fill_sections(data: dict) -> dict:
    """The reader's view: absent kernels / comm / collectives sections are empty mappings."""
    for sec in ("kernels", "comm", "collectives"):
        if data.get(sec) is None:
            data[sec] = {}
    return data


class _Checker:
    def __init__(self, path, hint: str = REGENERATE):
        self.path, self.hint = path, hint

    def fail(self, what: str):
        raise CalibrationError(f"profile {self.path}: {what}; {self.hint}")

    def mapping(self, v, what: str) -> dict:
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.fail(f"`{what}` must be a mapping")
        return v

    def number(self, where: str, v, spec: Num) -> None:
        if v is None and spec.optional:
            return
        if spec.inf_ok and isinstance(v, float) and v == np.inf:
            return
        ok = isinstance(v, (int, float)) and not isinstance(v, bool)  # a YAML string is not a number here
        if ok:
            try:
                check_number(
                    where, v, lo=spec.lo, hi=spec.hi, lo_open=spec.lo_open, integer=spec.integer, error=CalibrationError
                )
            except CalibrationError:
                ok = False
        if not ok:
            lo, hi = spec.lo, spec.hi
            rng = (
                f"{'(' if spec.lo_open else '['}{lo:g}, {hi:g}]"
                if hi is not None
                else f"{'>' if spec.lo_open else '>='} {lo:g}"
            )
            self.fail(f"{where} = {v!r}; allowed {'an integer' if spec.integer else 'a finite number'} {rng}")

    def fields(self, where: str, d: dict, specs: dict) -> None:
        for name, spec in specs.items():
            self.number(f"{where}.{name}", d.get(name), spec)


def validate(data: dict, path, hint: str = REGENERATE) -> None:
    """Check a profile mapping against the schema (does not modify it); one CalibrationError line."""
    c = _Checker(path, hint)
    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        c.fail("missing `gpu`")
    roof = c.mapping(data.get("roofline"), "roofline")
    c.fields("roofline", roof, ROOFLINE_FIELDS)
    for dt, v in c.mapping(roof.get("tflops"), "roofline.tflops").items():
        c.number(f"roofline.tflops.{dt}", v, Num(0.0, lo_open=True))
    launch = data.get("launch")
    if launch is not None and not isinstance(launch, dict):
        c.fail("launch must be a mapping (us, status)")
    c.fields("launch", launch or {}, LAUNCH)
    for fam, e in c.mapping(data.get("kernels"), "kernels").items():
        _validate_kernel(c, fam, e)
    for mode, ops in c.mapping(data.get("comm"), "comm").items():
        if mode not in COMM_MODES or not isinstance(ops, dict):
            c.fail(f"comm.{mode}: unknown mode (allowed: {', '.join(COMM_MODES)})")
        for op, e in ops.items():
            _validate_comm(c, f"comm.{mode}.{op}", op, e)
    for op, e in c.mapping(data.get("collectives"), "collectives").items():
        if op not in COLLECTIVE_OPS or not isinstance(e, dict) or not isinstance(e.get("params"), dict):
            c.fail(f"collectives.{op}: unknown op or missing params (allowed: {', '.join(COLLECTIVE_OPS)})")
        model = e.get("model") if e.get("model") in TIMED_COLLECTIVES else RING
        c.fields(f"collectives.{op}.params", e["params"], PARAMS[model])
        for backend, ce in c.mapping(e.get("custom"), f"collectives.{op}.custom").items():
            cm = CUSTOM_AR if (ce or {}).get("model") == CUSTOM_AR else model
            c.fields(f"collectives.{op}.custom.{backend}.params", (ce or {}).get("params") or {}, PARAMS[cm])
            c.number(
                f"collectives.{op}.custom.{backend}.max_bytes", (ce or {}).get("max_bytes"), Num(0.0, lo_open=True)
            )


def _validate_kernel(c: _Checker, fam: str, e) -> None:
    if fam not in KERNEL_FAMILIES:
        c.fail(f"kernels.{fam}: unknown kernel family (allowed: {', '.join(KERNEL_FAMILIES)})")
    if not isinstance(e, dict) or e.get("model") not in KERNEL_MODELS or not isinstance(e.get("params"), dict):
        c.fail(f"kernels.{fam}: needs `model` ({' or '.join(KERNEL_MODELS)}) and `params`")
    c.fields(f"kernels.{fam}.params", e["params"], PARAMS[e["model"]])
    variants = e.get("variants") or []
    if isinstance(variants, dict):  # mla_v2: named per phase / dtype; waves_v1: a list
        variants = [dict(v, _name=k) if isinstance(v, dict) else v for k, v in variants.items()]
    if not isinstance(variants, list):
        c.fail(f"kernels.{fam}.variants: must be a list or mapping of {{params, ...}}")
    names = [f"kernels.{fam}.variants" + (f".{v['_name']}" if isinstance(v, dict) and "_name" in v else f"[{i}]")
             for i, v in enumerate(variants)]  # fmt: skip
    for name, v in zip(names, variants):  # one fit per (layout, dtype, backend); same model as the entry
        if not isinstance(v, dict) or not isinstance(v.get("params"), dict):
            c.fail(f"{name}: needs `params`")
        c.fields(f"{name}.params", v["params"], PARAMS[e["model"]])
    for where, v in [(f"kernels.{fam}", e)] + list(zip(names, variants)):
        if v.get("residual") is not None:
            _validate_residual(c, f"{where}.residual", v["residual"])
    meas = e.get("measurements")
    if meas is None:
        return
    cols = meas.get("columns") if isinstance(meas, dict) else None
    rows = meas.get("rows") if isinstance(meas, dict) else None
    if not isinstance(cols, list) or not isinstance(rows, list):
        c.fail(f"kernels.{fam}.measurements: needs lists `columns` and `rows`")
    for i, row in enumerate(rows):
        if not isinstance(row, list) or len(row) != len(cols):
            c.fail(f"kernels.{fam}.measurements.rows[{i}]: needs one value per column ({', '.join(map(str, cols))})")
        for col, v in zip(cols, row):
            if col not in TEXT_COLUMNS:
                spec = Num(0.0, lo_open=True, optional=col != "time_s")
                c.number(f"kernels.{fam}.measurements.rows[{i}].{col}", v, spec)


def _validate_residual(c: _Checker, where: str, b) -> None:
    """`residual: {file, key, axes, points, sha256}` (moesim.perf.profile.residual); an in-memory fit
    carries its arrays (`_data`) instead of file and sha256 until the profile is written."""
    if not isinstance(b, dict) or not isinstance(b.get("key"), str) or not b["key"]:
        c.fail(f"{where}: needs `key`, `axes`, `points` and `file` + `sha256`")
    axes = b.get("axes")
    if not isinstance(axes, list) or not axes or not all(isinstance(a, str) and a for a in axes):
        c.fail(f"{where}.axes: must be a non-empty list of shape names")
    c.number(f"{where}.points", b.get("points"), Num(1.0, integer=True))
    w = b.get("axis_weights")  # optional neighbour-search weights, one per axis
    if w is not None and (not isinstance(w, list) or len(w) != len(axes)):
        c.fail(f"{where}.axis_weights: one positive number per axis ({', '.join(axes)})")
    for i, v in enumerate(w or []):
        c.number(f"{where}.axis_weights[{i}]", v, Num(0.0, lo_open=True))
    if b.get("_data") is None and not all(isinstance(b.get(f), str) and b[f] for f in ("file", "sha256")):
        c.fail(f"{where}: needs `file` (the .residuals.npz next to the profile) and its `sha256`")


def _validate_comm(c: _Checker, where: str, op, e) -> None:
    if op not in COMM_OPS or not isinstance(e, dict) or not isinstance(e.get("params"), dict):
        c.fail(f"{where}: needs op dispatch/combine with `params`")
    p = e["params"]
    if e.get("model") == DEEPEP_V2:
        _validate_deepep(c, f"{where}.params", p)
        if e.get("intranode") is not None:  # the single-node kernels' own params
            _validate_deepep(c, f"{where}.intranode.params", (e["intranode"] or {}).get("params") or {})
        return
    if e.get("model") != ALPHA_BETA_BY_EP:
        c.fields(f"{where}.params", p, PARAMS[ALPHA_BETA])
        return
    knots = {f: v for f, v in PARAMS[ALPHA_BETA_BY_EP].items() if "frac" not in f or p.get(f) is not None}
    n = len(p.get("ep") or [])
    if n < 2 or not all(isinstance(p.get(f), list) and len(p[f]) == n for f in knots):
        c.fail(
            f"{where}.params: per-EP knots need equal-length lists ep, alpha_us, rdma_GBps, "
            "nvlink_GBps (positive numbers or null)"
        )
    for name, spec in knots.items():
        for i, v in enumerate(p[name]):
            c.number(f"{where}.params.{name}[{i}]", v, spec)


def _validate_deepep(c: _Checker, where: str, p: dict) -> None:
    c.fields(where, {k: v for k, v in p.items() if not k.startswith("rdma_knot")}, PARAMS[DEEPEP_V2])
    kn, kf = p.get("rdma_knot_nodes"), p.get("rdma_knot_frac")  # optional: per measured node count
    if kn is not None and not (isinstance(kn, list) and isinstance(kf, list) and len(kn) == len(kf) > 0):
        c.fail(f"{where}: rdma_knot_nodes / rdma_knot_frac must be equal-length lists")
    for i, (nd, f) in enumerate(zip(kn or [], kf or [])):
        c.number(f"{where}.rdma_knot_nodes[{i}]", nd, Num(1.0))
        c.number(f"{where}.rdma_knot_frac[{i}]", f, Num(0.0, 1.0, lo_open=True))
