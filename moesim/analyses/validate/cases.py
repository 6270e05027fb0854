"""`moesim validate`: predictions vs published figures. Cases are data (YAML); the handlers below
interpret the kinds of `expect` found in them, so adding a case needs no code.

Case keys: id, source, class (kernel | layer | system | economics; inferred when absent), config
(estimate arguments; `same_as: <id>` + `set: {dotted: value}` derive from another case),
kernel (for `moesim kernel` cases: op + shape flags), inputs (economics / capacity), expect,
expect_us (layer breakdowns), tolerance (relative) — see validation/*.yaml.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moesim.errors import MoesimError, SpecError

ESTIMATE_KEYS = {
    "model",
    "hardware",
    "phase",
    "tp",
    "dp",
    "ep",
    "moe_tp",
    "batch",
    "context",
    "mtp",
    "acceptance",
    "redundant_experts",
    "overlap",
    "cost_mode",
    "comm",
    "set",
    "expert_skew",
    "context_dist",
}


@dataclass
class Check:
    case: str
    cls: str
    metric: str
    predicted: object
    expected: object
    rel_error: float  # NaN for non-numeric checks
    tolerance: str
    passed: bool
    note: str = ""


def default_case_files() -> list[Path]:
    from moesim.specs.loader import data_root

    return sorted((data_root() / "validation").glob("*cases*.yaml"))


def load_cases(paths=None) -> list[dict]:
    from moesim.specs.loader import read_mapping

    paths = [Path(p) for p in (paths or default_case_files())]
    cases = []
    for p in paths:
        if not p.exists():
            raise SpecError(f"validate: case file {p} does not exist")
        data = read_mapping(p)
        if not isinstance(data.get("cases"), list):
            raise SpecError(f"{p}: cases: expected a list of cases")
        for c in data["cases"]:
            if not isinstance(c, dict) or "id" not in c:
                raise SpecError(f"{p}: every case needs an id")
            _check_case(p, c)
            c = dict(c)
            c["_file"] = str(p)
            cases.append(c)
    ids = {c["id"] for c in cases}
    for c in cases:
        ref = (c.get("config") or {}).get("same_as")
        if ref is not None and ref not in ids:
            raise SpecError(
                f"{c['_file']}: {c['id']}: config.same_as {ref!r} is not a case id; allowed: "
                f"{', '.join(map(str, sorted(ids, key=str)))}"
            )
    return cases


def _check_case(p, c):
    """Shape of one case (mappings where mappings go, a positive tolerance), one line on error."""
    cid = c["id"]
    if not isinstance(cid, (str, int)) or isinstance(cid, bool):
        raise SpecError(f"{p}: id: {cid!r}; allowed a text or integer id")
    for key in ("config", "inputs", "expect", "expect_us", "kernel"):
        if c.get(key) is not None and not isinstance(c[key], dict):
            raise SpecError(f"{p}: {cid}: {key}: expected a mapping, got {type(c[key]).__name__}")
    if "tolerance" in c:
        tol = _num(c["tolerance"])
        if isinstance(tol, bool) or not isinstance(tol, float) or not math.isfinite(tol) or tol <= 0:
            raise SpecError(
                f"{p}: {cid}: tolerance: {c['tolerance']!r}; allowed a finite number > 0 (relative error, 0.2 = 20%)"
            )


def _num(x):
    """PyYAML reads 31.0e9 as a string (YAML 1.1); accept it as a number."""
    if isinstance(x, bool):
        return x
    if isinstance(x, (int, float)):
        return float(x)
    if isinstance(x, str):
        try:
            return float(x.replace("_", ""))
        except ValueError:
            return x
    return x


def _config(case, by_id):
    cfg = dict(case.get("config") or {})
    if "same_as" in cfg:
        base = _config(by_id[cfg.pop("same_as")], by_id)
        extra = cfg.pop("set", {}) or {}
        base_set = list(base.pop("set", []) or [])
        base.update(cfg)
        base["set"] = base_set + [f"{k}={v}" for k, v in extra.items()]
        return base
    if isinstance(cfg.get("set"), dict):
        cfg["set"] = [f"{k}={v}" for k, v in cfg["set"].items()]
    return cfg


def _estimate(cfg, **over):
    from moesim.api import estimate

    kw = {
        k: _num(v)
        if k not in ("model", "hardware", "phase", "overlap", "cost_mode", "comm", "expert_skew", "context_dist", "set")
        else v
        for k, v in cfg.items()
        if k in ESTIMATE_KEYS
    }
    kw.update(over)
    for k in ("tp", "dp", "ep", "moe_tp", "mtp", "redundant_experts"):
        if k in kw and kw[k] is not None:
            kw[k] = int(kw[k])
    model = kw.pop("model", "deepseek-v3")
    hardware = kw.pop("hardware", "h800")
    return estimate(model, hardware, **kw)


def _cond(pred, spec):
    """'> 100', '< 1.0', 'between 3 and 8' -> bool."""
    s = str(spec).strip()
    m = re.fullmatch(r"between\s+([-\d.e+]+)\s+and\s+([-\d.e+]+)", s)
    if m:
        return float(m.group(1)) <= pred <= float(m.group(2))
    m = re.fullmatch(r"([<>]=?)\s*([-\d.e+]+)", s)
    if m:
        v = float(m.group(2))
        return {"<": pred < v, "<=": pred <= v, ">": pred > v, ">=": pred >= v}[m.group(1)]
    raise SpecError(f"validate: cannot read condition {spec!r}; allowed: '> x', '< x', 'between a and b'")


def _compare(case_id, cls, metric, pred, expected, tol, note=""):
    expected = _num(expected)
    if isinstance(expected, str) and not isinstance(pred, str):
        ok = _cond(float(pred), expected)
        return Check(case_id, cls, metric, float(pred), expected, math.nan, expected, ok, note)
    if isinstance(expected, (list, tuple)) and len(expected) == 2:
        lo, hi = map(float, expected)
        return Check(
            case_id, cls, metric, float(pred), f"[{lo:g}, {hi:g}]", math.nan, "range", lo <= float(pred) <= hi, note
        )
    if isinstance(expected, (bool, str)):
        return Check(case_id, cls, metric, pred, expected, math.nan, "equal", pred == expected, note)
    err = float(pred) / float(expected) - 1.0
    return Check(case_id, cls, metric, float(pred), float(expected), err, f"±{tol:.0%}", abs(err) <= tol, note)


def _value(r, key):
    if key in r.memory:
        return r.memory[key]
    if key in ("kv_bytes_per_token",):
        return r.model.kv_bytes_per_token
    v = r.values[key]
    v = np.asarray(v).reshape(-1)[0]
    return v.item() if isinstance(v, np.generic) else v


def _largest_batch_at_slo(cfg, min_tps):
    """Largest decode batch (requests per DP group) that fits and keeps >= min tokens/s per user."""
    from moesim.api import evaluate_grid, resolve_parallel, resolve_specs
    from moesim.grid.core import Grid

    m, h = resolve_specs(cfg.get("model", "deepseek-v3"), cfg.get("hardware", "h800"), cfg.get("set"))
    tp, dp, ep, moe_tp = resolve_parallel(m, cfg.get("tp"), cfg.get("dp"), cfg.get("ep"), cfg.get("moe_tp"))
    batches = np.arange(1, 1025, dtype=float)
    g = Grid.product(
        tp=tp,
        dp=dp,
        ep=ep,
        moe_tp=moe_tp,
        batch=batches,
        context=_num(cfg["context"]),
        mtp=cfg.get("mtp", 0),
        acceptance=cfg.get("acceptance", 0.8),
        redundant=cfg.get("redundant_experts", 0),
    )
    ev, _ = evaluate_grid(
        m,
        h,
        g,
        phase=cfg.get("phase", "decode"),
        overlap=cfg.get("overlap"),
        cost_mode=cfg.get("cost_mode", "calibrated"),
        comm=cfg.get("comm"),
    )
    ok = ev.values["fits"] & (ev.values["tokens_per_s_per_user"] >= min_tps)
    if not ok.any():
        return None, None
    i = int(np.flatnonzero(ok)[-1])
    return batches[i], {k: np.asarray(v)[i] for k, v in ev.values.items()}


def run_case(case, by_id) -> list[Check]:
    cid = case["id"]
    tol = float(_num(case.get("tolerance", 0.2)))
    expect = case.get("expect") or {}
    inputs = case.get("inputs") or {}
    cls = case.get("class")
    checks = []
    if "average_nodes" in inputs:  # economics of a given fleet
        from moesim.metrics.economics import economics_report

        rep = economics_report(
            nodes=float(_num(inputs["average_nodes"])),
            gpus_per_node=int(inputs["gpus_per_node"]),
            usd_per_gpu_hour=float(_num(inputs["usd_per_gpu_hour"])),
            input_tokens=float(_num(inputs["input_tokens"])),
            cache_hit_tokens=float(_num(inputs["cache_hit_tokens"])),
            output_tokens=float(_num(inputs["output_tokens"])),
            usd_per_million={k: float(_num(v)) for k, v in inputs["usd_per_million"].items()},
        )
        for k, v in expect.items():
            checks.append(_compare(cid, cls or "economics", k, rep[k], v, tol))
        return checks
    if inputs:  # capacity plan from traffic: the planner with the model's own throughputs
        from moesim.analyses.plan import plan
        from moesim.specs.traffic import traffic_from_dict

        keys = (
            "input_tokens",
            "cache_hit_tokens",
            "output_tokens",
            "hours",
            "context",
            "prefill",
            "decode",
            "slo",
            "prices",
            "prompt_length",
        )
        t = traffic_from_dict(
            {k: (_num(v) if not isinstance(v, dict) else v) for k, v in inputs.items() if k in keys}
            | ({} if "slo" in inputs else {"slo": {"min_tokens_per_s_per_user": 20}})
        )
        res = plan(
            t, inputs.get("model", "deepseek-v3"), inputs.get("hardware", "h800"), inputs.get("cost_mode", "calibrated")
        ).to_dict()
        for k, v in expect.items():
            checks.append(_compare(cid, cls or "system", k, res[k], v, tol))
        return checks
    if "kernel" in case:
        from moesim.api import load_profile_for, resolve_specs
        from moesim.cli.kernel import kernel_work
        from moesim.perf.cost import CostModel

        k = dict(case["kernel"])
        m, h = resolve_specs(k.pop("model", "deepseek-v3"), k.pop("hardware", "h800"), k.pop("set", None))
        mode = k.pop("cost_mode", "calibrated")
        prof, _ = load_profile_for(h, mode)
        op = k.pop("op")
        cost = CostModel(h, m, mode, prof).cost(
            kernel_work(m, h, op, **{kk: _num(vv) if kk not in ("layout", "mode") else vv for kk, vv in k.items()})
        )
        for key, v in expect.items():
            pred = float(np.ravel(cost.time_s)[0]) * (1e6 if key.endswith("_us") else 1.0)
            checks.append(_compare(cid, cls or "kernel", key, pred, v, tol))
        return checks
    cfg = _config(case, by_id)
    if "expect_us" in case:  # layer breakdown: ep<N>_overlap_<scheme> | ep<N>_grouped_gemm[_<scheme>]
        for key, v in case["expect_us"].items():
            m = re.fullmatch(r"ep(\d+)_(?:overlap_(\w+)|grouped_gemm(?:_(\w+))?)", key)
            scheme = (m and (m.group(2) or m.group(3)) or "five_stage").replace("_", "-")
            scheme = "serial" if scheme == "none" else scheme
            from moesim.schedule.schemes import SCHEMES

            if not m or scheme not in SCHEMES:
                raise SpecError(
                    f"{case['_file']}: {cid}: expect_us key {key!r}; allowed ep<N>_overlap_<scheme> "
                    f"or ep<N>_grouped_gemm[_<scheme>] (grouped GEMM of both micro-batches; "
                    f"default five_stage), scheme one of none, shared, sbo, two_batch, five_stage"
                )
            ep = int(m.group(1))
            r = _estimate(cfg, ep=ep, dp=ep * int(cfg.get("moe_tp", 1)) // int(cfg.get("tp", 1)), overlap=scheme)
            if m.group(2):
                pred = float(r.values["moe_layer_time_s"][0]) * 1e6
            else:
                n = r.model.n_moe_layers
                pred = sum(o["time_s"] for o in r.ops if o["name"] in ("experts_gate_up", "experts_down")) / n * 1e6
            checks.append(_compare(cid, cls or "layer", key, pred, v, tol))
        return checks
    speed = {k: v for k, v in expect.items() if k.startswith("speedup_at_batch_")}
    if speed:  # micro-batching (five-stage) vs dispatch overlap (shared)
        for k, v in speed.items():
            b = float(k.rsplit("_", 1)[1])
            a = _estimate(cfg, batch=b, overlap="shared").values["step_time_s"][0]
            f = _estimate(cfg, batch=b, overlap="five-stage").values["step_time_s"][0]
            checks.append(_compare(cid, cls or "layer", k, float(a / f), v, tol))
        return checks
    ratio = {k: v for k, v in expect.items() if k.startswith("throughput_ratio_")}
    if ratio:
        from moesim.analyses.validate.pareto_case import pareto_ratio

        for k, v in ratio.items():
            checks.append(_compare(cid, cls or "system", k, pareto_ratio(cfg, k), v, tol))
        return checks
    if "min_tokens_per_s_per_user" in cfg:
        b, vals = _largest_batch_at_slo(cfg, float(cfg["min_tokens_per_s_per_user"]))
        for k, v in expect.items():
            pred = float(vals[k]) if vals is not None else float("nan")
            checks.append(
                _compare(cid, cls or "system", k, pred, v, tol, note=f"batch {b:g}" if b else "no batch meets SLO")
            )
        return checks
    r = _estimate(cfg)
    for k, v in expect.items():
        if k == "max_batch_range":
            checks.append(_compare(cid, cls or "system", "max_batch", float(_value(r, "max_batch")), v, tol))
        elif k in (
            "step_time_s",
            "bottleneck",
            "tokens_per_s_per_user",
            "tokens_per_s_per_node",
            "kv_cache_bytes",
            "fits",
            "kv_bytes_per_token",
            "tpot_s",
            "ttft_s",
            "tokens_per_s_per_gpu",
            "weights_bytes",
        ):
            checks.append(_compare(cid, cls or "system", k, _value(r, k), v, tol))
        else:
            raise SpecError(f"{case['_file']}: {cid}: unknown expectation {k!r}")
    return checks


def validate(paths=None, ids=None) -> list[Check]:
    cases = load_cases(paths)
    by_id = {c["id"]: c for c in cases}
    unknown = sorted(set(ids or ()) - set(map(str, by_id)) - set(by_id), key=str)
    if unknown:
        raise SpecError(f"--case: unknown case id {unknown[0]!r}; allowed: {', '.join(map(str, by_id))}")
    out = []
    for c in cases:
        if ids and c["id"] not in ids:
            continue
        try:
            out += run_case(c, by_id)
        except (MoesimError, ImportError) as e:
            out.append(Check(c["id"], c.get("class", "system"), "error", None, None, math.nan, "-", False, str(e)))
        except (KeyError, TypeError, ValueError) as e:  # a case missing a key or with a wrong type
            out.append(
                Check(
                    c["id"],
                    c.get("class", "system"),
                    "error",
                    None,
                    None,
                    math.nan,
                    "-",
                    False,
                    f"{c['_file']}: malformed case ({e.__class__.__name__}: {e})",
                )
            )
    return out


def summary(checks: list[Check]) -> dict:
    res = {}
    for cls in sorted({c.cls for c in checks}):
        errs = [abs(c.rel_error) for c in checks if c.cls == cls and not math.isnan(c.rel_error)]
        res[cls] = {
            "checks": sum(c.cls == cls for c in checks),
            "passed": sum(c.passed for c in checks if c.cls == cls),
            "median_abs_error": float(np.median(errs)) if errs else None,
            "max_abs_error": float(np.max(errs)) if errs else None,
        }
    return res
