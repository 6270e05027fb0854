"""Read a calibration profile (calibration/profiles/<gpu>.yaml) for the cost model.

    prof = load_profile(hw)                       # None when the GPU has no profile
    ec, em = prof.kernel_efficiency("gemm", m=m, n=n, k=k)
    time   = max(F / (peak * ec), B / (hbm_bw * em)) + prof.launch_s

Everything is vectorized over numpy arrays that broadcast (grids of millions of configurations);
no Python loop runs over configurations. The profile is plain YAML read with yaml.safe_load.

Efficiency (moesim/perf/efficiency.py): for fitted kernels eta = T_roofline / T_model of the kernel's
own work (GEMM: F = 2*g*m*n*k, B = g*(m*k + n*k) in the input dtype + g*m*n*2 output; MLA decode:
F = 2*b*s*h*ctx*(576+512), B = KV cache + queries + outputs) and ec = em = eta, so the cost model's
max(...) reproduces the fitted time. For "peak" entries (best-case published figures) ec and em
are two constants. Efficiencies are fractions of the *live* hardware spec's peaks, so a profile
inherited by another GPU (or a --set override of peaks) scales with that GPU's numbers.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import yaml

from moesim.errors import CalibrationError
from moesim.perf import efficiency as E

SCHEMA_VERSION = 1
FAMILIES = ("gemm", "grouped_gemm", "bmm", "mla_decode", "mla_prefill", "attention", "elementwise")
COMM_MODES = ("deepep-ll", "deepep-normal", "nccl", "pplx")
COLLECTIVE_OPS = ("all_reduce", "all_gather")
MODE_ALIASES = {
    "ll": "deepep-ll",
    "low-latency": "deepep-ll",
    "low_latency": "deepep-ll",
    "normal": "deepep-normal",
    "deepep_ll": "deepep-ll",
    "deepep_normal": "deepep-normal",
}
MODELS = ("overlap_v1", "peak")
MAX_GAP = 4.0  # measured_time interpolates only between points at most this ratio apart

# measured_time: key columns and the interpolation axis per family
_TABLE_AXES = {
    "gemm": (("n", "k"), "m"),
    "grouped_gemm": (("layout", "groups", "n", "k"), "m"),
    "mla_decode": (("heads", "q_len", "batch"), "context"),
}
_DEFAULT_DTYPE = {
    "gemm": "fp8",
    "grouped_gemm": "fp8",
    "bmm": "fp8",
    "mla_decode": "bf16",
    "mla_prefill": "bf16",
    "attention": "bf16",
    "elementwise": "bf16",
}


def _norm_gpu(name) -> str:
    return str(name or "").strip().lower().replace("-", "_")


_CACHE: dict = {}  # (path, mtime_ns, size) -> validated mapping; a sweep loads the same profile many times


def read_profile_file(path: Path) -> dict:
    """Parse and validate a profile file; every problem is one CalibrationError line."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _CACHE:
        return copy.deepcopy(_CACHE[key])
    data = _parse_profile_file(path)
    if key is not None:
        if len(_CACHE) > 16:
            _CACHE.clear()
        _CACHE[key] = copy.deepcopy(data)
    return data


def _parse_profile_file(path: Path) -> dict:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CalibrationError(f"profile {path}: cannot read ({e.__class__.__name__}: {e})") from None
    if not text.strip():
        raise CalibrationError(f"profile {path}: file is empty; regenerate it with `moesim calibrate fit`")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise CalibrationError(
            f"profile {path}: corrupted YAML{where}: {problem}; regenerate it with `moesim calibrate fit`"
        ) from None
    if not isinstance(data, dict):
        raise CalibrationError(f"profile {path}: expected a mapping at top level, got {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise CalibrationError(
            f"profile {path}: schema_version {version!r} is not supported (this moesim reads {SCHEMA_VERSION}); "
            f"upgrade moesim, or re-fit the profile from its CSVs with `moesim calibrate fit ... --out {path}`"
        )
    _validate(data, path)
    return data


def _validate(data: dict, path) -> None:
    _validate_structure(data, path)
    check_profile_numbers(data, path)


def check_profile_numbers(data: dict, path) -> None:
    """Numbers the profile reader takes on trust (launch, comm and collective parameters) must be
    finite and in range, or every step time turns NaN/inf. One CalibrationError line naming the key."""

    def num(where, v, lo, hi=None, lo_open=False):
        ok = (
            isinstance(v, (int, float))
            and not isinstance(v, bool)
            and np.isfinite(v)
            and (v > lo if lo_open else v >= lo)
            and (hi is None or v <= hi)
        )
        if not ok:
            rng = (
                f"{'(' if lo_open else '['}{lo:g}, {hi:g}]" if hi is not None else f"{'>' if lo_open else '>='} {lo:g}"
            )
            raise CalibrationError(
                f"profile {path}: {where} = {v!r}; allowed a finite number {rng}; regenerate it "
                f"with `moesim calibrate fit`"
            )

    launch = data.get("launch")
    if launch is not None and not isinstance(launch, dict):
        raise CalibrationError(
            f"profile {path}: launch must be a mapping (us, status); regenerate it with `moesim calibrate fit`"
        )
    if launch and "us" in launch:
        num("launch.us", launch["us"], 0.0, 1e6)
    limits = {
        "alpha_us": (0.0, 1e6, False),
        "alpha_intra_us": (0.0, 1e6, False),
        "rdma_GBps": (0.0, 1e6, True),
        "nvlink_GBps": (0.0, 1e6, True),
        "rdma_frac_nominal": (0.0, 1.0, True),
        "nvlink_frac_nominal": (0.0, 1.0, True),
        "bw_efficiency": (0.0, 1.0, True),
    }
    entries = [
        (f"comm.{mode}.{op}", e)
        for mode, ops in (data.get("comm") or {}).items()
        if isinstance(ops, dict)
        for op, e in ops.items()
    ]
    entries += [(f"collectives.{op}", e) for op, e in (data.get("collectives") or {}).items()]
    for where, e in entries:
        prm = e.get("params") if isinstance(e, dict) else None
        for name, (lo, hi, lo_open) in limits.items():
            required = where.startswith("collectives.") and name in ("alpha_us", "bw_efficiency")
            if isinstance(prm, dict) and (prm.get(name) is not None or required):
                v = prm.get(name)
                for i, x in enumerate(v) if isinstance(v, list) else [(None, v)]:  # per-EP knots are lists
                    if x is not None or i is None:
                        num(f"{where}.params.{name}" + ("" if i is None else f"[{i}]"), x, lo, hi, lo_open)


def _validate_structure(data: dict, path) -> None:
    def bad(what):
        raise CalibrationError(f"profile {path}: {what}; regenerate it with `moesim calibrate fit`")

    if not isinstance(data.get("gpu"), str) or not data["gpu"]:
        bad("missing `gpu`")
    for sec in ("kernels", "comm", "collectives"):
        if data.get(sec) is None:
            data[sec] = {}
        if not isinstance(data[sec], dict):
            bad(f"`{sec}` must be a mapping")
    for fam, e in data["kernels"].items():
        if fam not in FAMILIES:
            bad(f"kernels.{fam}: unknown kernel family (allowed: {', '.join(FAMILIES)})")
        if not isinstance(e, dict) or e.get("model") not in MODELS or not isinstance(e.get("params"), dict):
            bad(f"kernels.{fam}: needs `model` ({' or '.join(MODELS)}) and `params`")
        need = E.OVERLAP_PARAMS if e["model"] == "overlap_v1" else ("eta_c", "eta_m")
        for p in need:
            v = e["params"].get(p)
            if not isinstance(v, (int, float)) or isinstance(v, bool) or not np.isfinite(v):
                bad(f"kernels.{fam}.params.{p} must be a number")
        for p in ("eta_c", "eta_m"):
            if not 0 < e["params"][p] <= 1:
                bad(f"kernels.{fam}.params.{p} = {e['params'][p]} outside (0, 1]")
        q = e["params"].get("q")
        if q is not None and (not isinstance(q, (int, float)) or isinstance(q, bool) or not q >= 1):
            bad(f"kernels.{fam}.params.q must be a number >= 1 (.inf = max)")
    for mode, ops in data["comm"].items():
        if mode not in COMM_MODES or not isinstance(ops, dict):
            bad(f"comm.{mode}: unknown mode (allowed: {', '.join(COMM_MODES)})")
        for op, e in ops.items():
            if op not in ("dispatch", "combine") or not isinstance(e, dict) or not isinstance(e.get("params"), dict):
                bad(f"comm.{mode}.{op}: needs op dispatch/combine with `params`")
            if e.get("model") == "alpha_beta_by_ep":
                k = e["params"]
                n = len(k.get("ep") or [])
                ok = n >= 2 and all(
                    isinstance(k.get(f), list) and len(k[f]) == n for f in ("alpha_us", "rdma_GBps", "nvlink_GBps")
                )
                ok = (
                    ok
                    and all(isinstance(x, (int, float)) and x > 0 for x in k["ep"])
                    and all(isinstance(x, (int, float)) and x >= 0 for x in k["alpha_us"])
                    and all(
                        x is None or (isinstance(x, (int, float)) and x > 0) for x in k["rdma_GBps"] + k["nvlink_GBps"]
                    )
                )
                if not ok:
                    bad(
                        f"comm.{mode}.{op}.params: per-EP knots need equal-length lists ep, alpha_us, rdma_GBps, "
                        "nvlink_GBps (positive numbers or null)"
                    )
                continue
            for p in ("alpha_us", "rdma_GBps", "nvlink_GBps"):
                if not isinstance(e["params"].get(p), (int, float)):
                    bad(f"comm.{mode}.{op}.params.{p} must be a number")
    for op, e in data["collectives"].items():
        if op not in COLLECTIVE_OPS or not isinstance(e, dict) or not isinstance(e.get("params"), dict):
            bad(f"collectives.{op}: unknown op or missing params (allowed: {', '.join(COLLECTIVE_OPS)})")


def load_profile(hardware, path=None, force: bool = False) -> Profile | None:
    """The calibration profile for `hardware` (a HardwareSpec).

    Default path: calibration/profiles/<hardware.name>.yaml under moesim.specs.loader.data_root();
    None when that file does not exist. An explicit `path` must exist. A profile fitted for another
    GPU is refused (CalibrationError) unless force=True.
    """
    if path is None:
        from moesim.specs.loader import data_root

        path = data_root() / "calibration" / "profiles" / f"{hardware.name}.yaml"
        if not path.exists():
            alt = path.with_name(_norm_gpu(hardware.name) + ".yaml")
            if not alt.exists():
                return None
            path = alt
    else:
        path = Path(path)
        if not path.exists():
            raise CalibrationError(f"profile {path}: file does not exist")
    data = read_profile_file(path)
    if hardware is not None and _norm_gpu(data["gpu"]) != _norm_gpu(hardware.name) and not force:
        raise CalibrationError(
            f"profile {path} was fitted for gpu {data['gpu']!r}, not {hardware.name!r}; "
            "use that GPU's profile, re-fit, or force it (--force-profile / force=True)"
        )
    return Profile(data, hardware=hardware, path=path)


def _arr(x):
    return np.asarray(x, dtype=float)


class Profile:
    """A loaded calibration profile bound to a hardware spec (or to the peaks it records)."""

    def __init__(self, data: dict, hardware=None, path=None):
        self.data = data
        self.path = Path(path) if path else None
        self.hardware = hardware
        self.gpu = str(data["gpu"])
        self.schema_version = data.get("schema_version")
        self.date = str(data.get("date", ""))
        self.kernels = data.get("kernels") or {}
        self.comm = data.get("comm") or {}
        self.collectives = data.get("collectives") or {}
        roof = data.get("roofline") or {}
        if hardware is not None:
            self._flops = {d: hardware.peak_flops(d) for d in ("fp8", "bf16", "fp16", "fp32")}
            self._hbm = hardware.hbm_bw_Bps
            self._sms = int(hardware.sms)
            self._nom = {"rdma": hardware.rdma_Bps(False), "nvlink": hardware.nvlink_Bps(False)}
            self._domain = int(hardware.domain_gpus)
        else:
            self._domain = int(roof.get("domain_gpus", 8))
            self._flops = {k: float(v) * 1e12 for k, v in (roof.get("tflops") or {}).items()} or {"fp8": 1e15}
            self._hbm = float(roof.get("hbm_bw_GBps", 1000.0)) * 1e9
            self._sms = int(roof.get("sms", 132))
            self._nom = {
                "rdma": float(roof.get("rdma_bw_GBps", 0)) * 1e9,
                "nvlink": float(roof.get("nvlink_bw_GBps", 0)) * 1e9,
            }
        launch = data.get("launch") or {}
        if launch.get("status") == "hardware" and hardware is not None:
            self.launch_s = float(hardware.kernel_launch_s)
        else:
            self.launch_s = float(launch.get("us", 0.0)) * 1e-6
        self._tables = {fam: self._build_table(fam) for fam in _TABLE_AXES}

    @classmethod
    def from_dict(cls, data: dict, hardware=None) -> Profile:
        _validate(data, "<dict>")
        return cls(data, hardware=hardware)

    def __repr__(self) -> str:
        return f"Profile(gpu={self.gpu!r}, kernels={sorted(self.kernels)}, comm={sorted(self.comm)})"

    # ------------------------------------------------------------------ kernels
    def _peak(self, dtype) -> float:
        d = str(getattr(dtype, "value", dtype) or "fp8").lower()
        return float(self._flops.get(d) or self._flops.get("bf16") or max(self._flops.values()))

    def _work(self, family: str, e: dict, shape: dict):
        dtype = shape.get("dtype") or e.get("dtype") or _DEFAULT_DTYPE[family]
        dtype = str(getattr(dtype, "value", dtype)).lower()
        if family in ("gemm", "grouped_gemm", "bmm"):
            missing = [c for c in ("m", "n", "k") if shape.get(c) is None]
            if missing:
                raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(missing)}")
            g = shape.get("groups")
            if g is None:
                g = shape.get("batch", 1.0)
            g = 1.0 if g is None else g
            F, b_in, b_out = E.gemm_work(
                shape["m"], shape["n"], shape["k"], g, E.dtype_bytes(dtype), E.out_bytes_for(dtype)
            )
            x = E.gemm_ctas_per_sm(shape["m"], shape["n"], g, self._sms, shape.get("tile_pad"))
        else:
            missing = [c for c in ("batch", "q_len", "heads", "context") if shape.get(c) is None]
            if missing:
                raise TypeError(f"kernel_efficiency({family!r}) needs shape {', '.join(missing)}")
            kvb = E.dtype_bytes(dtype, 2.0)
            F, b_in, b_out = E.mla_decode_work(
                shape["batch"], shape["q_len"], shape["heads"], shape["context"], kvb, 2.0 if kvb < 2 else kvb
            )
            x = E.mla_ctas_per_sm(shape["batch"], shape["q_len"], shape["heads"], shape["context"], self._sms)
        return F, b_in, b_out, x, self._peak(dtype)

    @staticmethod
    def _numeric_shape(shape: dict):
        arrays = [
            v
            for k, v in shape.items()
            if k in ("m", "n", "k", "groups", "batch", "q_len", "context", "heads") and v is not None
        ]
        return np.broadcast(*[np.asarray(a) for a in arrays]).shape if arrays else ()

    def kernel_efficiency(self, family: str, **shape):
        """(compute_eff, memory_eff) arrays in (0, 1] for the broadcast shape, or None if not covered.

        Shape keywords: m, n, k, groups, layout ("masked" | "contiguous"), batch, q_len, context,
        heads, dtype (optional; the family's fitted dtype by default), tile_pad (MMA work over
        useful work, e.g. routed groups' partial tiles; 1 by default). Other keywords are ignored.
        """
        e = self.kernels.get(family)
        if e is None:
            return None
        p = e["params"]
        pad = shape.get("tile_pad")  # MMA work / useful work (routed groups' partial tiles), >= 1
        pad = 1.0 if pad is None else np.asarray(pad, float)
        if e["model"] == "peak":
            out = np.broadcast(np.empty(self._numeric_shape(shape)), pad).shape
            return (np.broadcast_to(float(p["eta_c"]) / pad, out).copy(), np.full(out, float(p["eta_m"])))
        F, b_in, b_out, x, peak = self._work(family, e, shape)
        # the padded tiles lengthen the main loop's math; the roofline keeps the useful FLOPs
        t_model = E.overlap_time(
            F * pad,
            b_in,
            b_out,
            x,
            peak,
            self._hbm,
            float(p["eta_c"]),
            float(p["eta_m"]),
            float(p["t0_us"]) * 1e-6,
            float(p["c"]),
            _q(p),
        )
        eta = E.efficiency_from_times(E.roofline_time(F, b_in, b_out, peak, self._hbm), t_model)
        return eta, eta

    def kernel_time(self, family: str, **shape):
        """Modelled kernel time in seconds (launch overhead not included), or None if not covered."""
        e = self.kernels.get(family)
        if e is None or family == "elementwise":
            return None
        F, b_in, b_out, x, peak = self._work(family, e, shape)
        p = e["params"]
        pad = shape.get("tile_pad")
        F = F if pad is None else F * np.asarray(pad, float)  # MMA work incl. partial tiles
        if e["model"] == "peak":
            return np.maximum(F / (peak * float(p["eta_c"])), (b_in + b_out) / (self._hbm * float(p["eta_m"])))
        return E.overlap_time(
            F,
            b_in,
            b_out,
            x,
            peak,
            self._hbm,
            float(p["eta_c"]),
            float(p["eta_m"]),
            float(p["t0_us"]) * 1e-6,
            float(p["c"]),
            _q(p),
        )

    # ------------------------------------------------------------------ measured tables
    def _build_table(self, family: str):
        e = self.kernels.get(family)
        meas = (e or {}).get("measurements")
        if not e or e.get("status") not in ("fitted", "measured") or not meas:
            return None
        keys, axis = _TABLE_AXES[family]
        cols = list(meas.get("columns") or [])
        if any(c not in cols for c in keys if c != "layout") or axis not in cols or "time_s" not in cols:
            return None
        groups: dict = {}
        for row in meas.get("rows") or []:
            rec = dict(zip(cols, row))
            key = tuple(
                str(rec.get(c, ""))
                if c == "layout"
                else float(rec.get(c) if rec.get(c) is not None else (1.0 if c == "groups" else np.nan))
                for c in keys
            )
            groups.setdefault(key, []).append((float(rec[axis]), float(rec["time_s"])))
        table = []
        for key, pts in groups.items():
            xs = np.array(sorted({x for x, _ in pts}))
            ts = np.array([np.median([t for x2, t in pts if x2 == x]) for x in xs])
            table.append((key, np.log(xs), np.log(ts)))
        return table

    def measured_time(self, family: str, **shape):
        """Raw measured kernel times (s), log-log interpolated along m (GEMMs) or context (MLA) where
        this GPU's own measurements cover the shape (same n, k, groups, layout / heads, q_len, batch;
        between two measured points at most 4x apart, or on one); NaN elsewhere."""
        if family not in _TABLE_AXES:
            return np.full(self._numeric_shape(shape), np.nan)
        keys, axis = _TABLE_AXES[family]
        arrays = {c: shape.get(c) for c in keys if c != "layout"}
        if family == "grouped_gemm" and arrays.get("groups") is None:
            arrays["groups"] = 1.0
        if shape.get(axis) is None or any(v is None for v in arrays.values()):
            return np.full(self._numeric_shape(shape), np.nan)
        lay = shape.get("layout")
        lay = np.asarray("" if lay is None else lay, dtype=object)
        bc = np.broadcast(_arr(shape[axis]), lay, *[_arr(v) for v in arrays.values()])
        out = np.full(bc.shape, np.nan)
        table = self._tables.get(family)
        if not table:
            return out
        x = np.broadcast_to(_arr(shape[axis]), bc.shape)
        with np.errstate(divide="ignore", invalid="ignore"):
            lx = np.log(x)
        cols = {c: np.broadcast_to(_arr(v), bc.shape) for c, v in arrays.items()}
        layout = np.broadcast_to(lay, bc.shape) if "layout" in keys else None
        for key, xs, ts in table:
            sel = np.ones(bc.shape, dtype=bool)
            for c, kv in zip(keys, key):
                if c == "layout":
                    if kv:
                        sel &= (layout == kv) | (layout == "")
                else:
                    sel &= np.isclose(cols[c], kv, rtol=1e-6, atol=1e-9)
            sel &= np.isfinite(lx) & (lx >= xs[0] - 1e-9) & (lx <= xs[-1] + 1e-9)
            if not sel.any():
                continue
            q = lx[sel]
            if len(xs) == 1:
                out[sel] = np.exp(ts[0])
                continue
            j = np.clip(np.searchsorted(xs, q), 1, len(xs) - 1)
            gap_ok = (xs[j] - xs[j - 1] <= np.log(MAX_GAP) + 1e-9) | np.isclose(q, xs[j]) | np.isclose(q, xs[j - 1])
            val = np.exp(np.interp(q, xs, ts))
            cur = out[sel]
            out[sel] = np.where(gap_ok, val, cur)
        return out

    # ------------------------------------------------------------------ collectives
    def comm_params(self, mode, op, ep):
        """(alpha_s, rdma_Bps, nvlink_Bps) arrays shaped like `ep`, or None if (mode, op) is not covered.

        alpha is per call; entries with `alpha_intra_us` use it where ep fits in one NVLink domain.
        Bandwidths are the fitted fractions of nominal link bandwidth times this hardware's nominal
        values (equal to the fitted absolute values on the GPU the rows came from).
        """
        m = str(getattr(mode, "value", mode))
        m = MODE_ALIASES.get(m, m)
        e = (self.comm.get(m) or {}).get(str(op))
        if e is None:
            return None
        p = e["params"]
        if e.get("model") == "alpha_beta_by_ep":  # per-EP knots, interpolated in log2(EP)
            return E.by_ep_params(p, ep)
        ones = np.ones(np.shape(ep)) if np.ndim(ep) else np.ones(())
        alpha = float(p["alpha_us"]) * 1e-6 * ones
        if p.get("alpha_intra_us") is not None:  # EP inside one NVLink domain: no RDMA hop
            alpha = np.where(np.asarray(ep, float) <= self._domain, float(p["alpha_intra_us"]) * 1e-6, alpha)
        rdma = self._link_bw(p, "rdma") * ones
        nvl = self._link_bw(p, "nvlink") * ones
        return alpha, rdma, nvl

    def _link_bw(self, p: dict, link: str) -> float:
        frac = p.get(f"{link}_frac_nominal")
        nominal = self._nom.get(link, 0.0)
        if frac is not None and nominal > 0:
            return float(frac) * nominal
        return float(p[f"{link}_GBps"]) * 1e9

    def collective_params(self, op):
        """(alpha_s, bw_efficiency) for all_reduce / all_gather, or None: alpha adds to the hardware's
        per-step latencies and bw_efficiency scales its achievable link bandwidth (moesim.perf.cost)."""
        e = self.collectives.get(str(op))
        if e is None:
            return None
        return float(e["params"]["alpha_us"]) * 1e-6, float(e["params"]["bw_efficiency"])

    # ------------------------------------------------------------------ provenance
    def entry(self, family: str):
        m = MODE_ALIASES.get(family, family)
        return self.kernels.get(m) or self.comm.get(m) or self.collectives.get(m)

    def provenance(self, family: str) -> str:
        """e.g. 'fitted:h800 DG rows (CV median 5.9%)', 'peak:h800 FMLA rows (upper bound, no CV)',
        'inherited:h800', 'derived:gemm (h800)'; 'roofline' when the profile does not cover it."""
        m = MODE_ALIASES.get(family, family)
        if m in self.kernels:
            return _prov(self.kernels[m])
        if m in self.comm:
            ops = self.comm[m]
            first = next(iter(ops.values()))
            if all(e.get("status") == "fitted" for e in ops.values()):
                cv = ", ".join(
                    f"{op} {e['cv']['median_abs_pct']}%"
                    for op, e in ops.items()
                    if e.get("cv", {}).get("median_abs_pct") is not None
                )
                return f"fitted:{first.get('gpu', self.gpu)} {_label(first)} rows" + (
                    f" (CV median {cv})" if cv else ""
                )
            return _prov(first)
        if m in self.collectives:
            return _prov(self.collectives[m])
        return "roofline"

    def summary(self) -> dict:
        fams = {f: self.provenance(f) for f in list(self.kernels) + list(self.comm) + list(self.collectives)}
        return {"gpu": self.gpu, "date": self.date, "launch_s": self.launch_s, "provenance": fams}


def _q(p: dict) -> float:
    """Load/compute combination exponent of overlap_v1 (absent or .inf -> max)."""
    q = p.get("q")
    return np.inf if q is None else float(q)


def _label(e: dict) -> str:
    ids = re.findall(r"\b([A-Z]{2,6})-\d{3}\b", str(e.get("source", "")))
    pre = sorted(set(ids), key=ids.index)
    return "/".join(pre) if pre else f"local {e.get('backend', '')}".strip()


def _prov(e: dict) -> str:
    st = e.get("status", "fitted")
    gpu = e.get("gpu", "")
    if st == "fitted":
        med = (e.get("cv") or {}).get("median_abs_pct")
        return f"fitted:{gpu} {_label(e)} rows" + (f" (CV median {med}%)" if med is not None else "")
    if st == "peak":
        return f"peak:{gpu} {_label(e)} rows (upper bound, no CV)"
    if st == "derived":
        return f"derived:{e.get('derived_from') or _label(e)} ({gpu})"
    if st == "inherited":
        via = f" via {e['via']}" if e.get("via") else ""
        return f"inherited:{e.get('inherited_from', '?')}{via}"
    return f"{st}:{gpu}"
