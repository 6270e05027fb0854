"""One runner per kind of validation case, registered in `RUNNERS` (kind -> runner, default
class). `case_kind` reads a case's kind from its keys (first match, in this order): economics of
a fleet (`inputs.average_nodes`), capacity plan (`inputs`), published rows of a measurement CSV
(`kernel_rows`), kernel (`kernel`), layer breakdown
(`expect_us`), micro-batching speed-up (`expect.speedup_at_batch_<B>`), Pareto ratio
(`expect.throughput_ratio_...`), largest batch at an SLO (`config.min_tokens_per_s_per_user`),
a served benchmark run replayed by the simulator (`client`), else a plain estimate. Adding a kind = one runner + one table row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from moesim.analyses.plan import plan
from moesim.analyses.validate.common import (
    Check,
    case_config,
    compare,
    largest_batch_at_slo,
    num,
    result_value,
    run_estimate,
)
from moesim.analyses.validate.kernel_rows import run_kernel_rows
from moesim.analyses.validate.pareto_case import pareto_ratio
from moesim.analyses.validate.simulate_case import SERVING_TOLERANCE, run_simulate_case
from moesim.engine.pricing import load_profile_for, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import DEFAULT_ENGINE
from moesim.errors import SpecError
from moesim.metrics.economics import economics_report
from moesim.perf.cost import CostModel
from moesim.schedule.schemes import SCHEMES
from moesim.specs.traffic import traffic_from_dict
from moesim.workload.kernels import kernel_op

PLAN_INPUT_KEYS = (
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
ESTIMATE_EXPECT_KEYS = (
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
)


@dataclass
class Case:
    """One case as the runners see it; `cls` is the case's own class or the kind's default."""

    raw: dict
    by_id: dict
    cls: str
    tol: float

    @property
    def id(self):
        return self.raw["id"]

    @property
    def expect(self) -> dict:
        return self.raw.get("expect") or {}

    @property
    def inputs(self) -> dict:
        return self.raw.get("inputs") or {}

    def config(self) -> dict:
        return case_config(self.raw, self.by_id)

    def check(self, metric, pred, expected, note="") -> Check:
        return compare(self.id, self.cls, metric, pred, expected, self.tol, note=note)


def run_economics(c: Case) -> list[Check]:
    """Economics of a given fleet (DeepSeek's day of serving)."""
    i = c.inputs
    rep = economics_report(
        nodes=float(num(i["average_nodes"])),
        gpus_per_node=int(i["gpus_per_node"]),
        usd_per_gpu_hour=float(num(i["usd_per_gpu_hour"])),
        input_tokens=float(num(i["input_tokens"])),
        cache_hit_tokens=float(num(i["cache_hit_tokens"])),
        output_tokens=float(num(i["output_tokens"])),
        usd_per_million={k: float(num(v)) for k, v in i["usd_per_million"].items()},
    )
    return [c.check(k, rep[k], v) for k, v in c.expect.items()]


def run_capacity(c: Case) -> list[Check]:
    """Capacity plan from traffic: the planner with the model's own throughputs."""
    i = c.inputs
    t = traffic_from_dict(
        {k: (num(v) if not isinstance(v, dict) else v) for k, v in i.items() if k in PLAN_INPUT_KEYS}
        | ({} if "slo" in i else {"slo": {"min_tokens_per_s_per_user": 20}})
    )
    res = plan(
        t,
        i.get("model", "deepseek-v3"),
        i.get("hardware", "h800"),
        i.get("cost_mode", "calibrated"),
        engine=i.get("engine", DEFAULT_ENGINE),
    ).to_dict()
    return [c.check(k, res[k], v) for k, v in c.expect.items()]


def run_kernel(c: Case) -> list[Check]:
    """One kernel priced as `moesim kernel` prices it."""
    k = dict(c.raw["kernel"])
    m, h = resolve_specs(k.pop("model", "deepseek-v3"), k.pop("hardware", "h800"), k.pop("set", None))
    mode = k.pop("cost_mode", "calibrated")
    prof, _ = load_profile_for(h, Pricing.of(cost_mode=mode, engine=k.pop("engine", DEFAULT_ENGINE)))
    op = k.pop("op")
    shape = {kk: num(vv) if kk not in ("layout", "mode") else vv for kk, vv in k.items()}
    cost = CostModel(h, m, mode, prof).cost(kernel_op(m, h, op, **shape))
    checks = []
    for key, v in c.expect.items():
        pred = float(np.ravel(cost.time_s)[0]) * (1e6 if key.endswith("_us") else 1.0)
        checks.append(c.check(key, pred, v))
    return checks


def _layer_key(c: Case, key):
    """ep<N>_overlap_<scheme> | ep<N>_grouped_gemm[_<scheme>] -> (match, scheme name)."""
    m = re.fullmatch(r"ep(\d+)_(?:overlap_(\w+)|grouped_gemm(?:_(\w+))?)", key)
    scheme = (m and (m.group(2) or m.group(3)) or "five_stage").replace("_", "-")
    scheme = "serial" if scheme == "none" else scheme
    if not m or scheme not in SCHEMES:
        raise SpecError(
            f"{c.raw['_file']}: {c.id}: expect_us key {key!r}; allowed ep<N>_overlap_<scheme> "
            f"or ep<N>_grouped_gemm[_<scheme>] (grouped GEMM of both micro-batches; "
            f"default five_stage), scheme one of none, shared, sbo, two_batch, five_stage"
        )
    return m, scheme


def run_layer_breakdown(c: Case) -> list[Check]:
    """Layer breakdown (µs): the MoE layer under a scheme, or the grouped GEMMs of one layer."""
    cfg = c.config()
    checks = []
    for key, v in c.raw["expect_us"].items():
        m, scheme = _layer_key(c, key)
        ep = int(m.group(1))
        r = run_estimate(cfg, ep=ep, dp=ep * int(cfg.get("moe_tp", 1)) // int(cfg.get("tp", 1)), overlap=scheme)
        if m.group(2):
            pred = float(r.values["moe_layer_time_s"][0]) * 1e6
        else:
            n = r.model.n_moe_layers
            pred = sum(o["time_s"] for o in r.ops if o["name"] in ("experts_gate_up", "experts_down")) / n * 1e6
        checks.append(c.check(key, pred, v))
    return checks


def run_speedup(c: Case) -> list[Check]:
    """Micro-batching (five-stage) vs dispatch overlap (shared): step-time ratio at a batch."""
    cfg = c.config()
    checks = []
    for k, v in c.expect.items():
        if not k.startswith("speedup_at_batch_"):
            continue
        b = float(k.rsplit("_", 1)[1])
        a = run_estimate(cfg, batch=b, overlap="shared").values["step_time_s"][0]
        f = run_estimate(cfg, batch=b, overlap="five-stage").values["step_time_s"][0]
        checks.append(c.check(k, float(a / f), v))
    return checks


def run_pareto_ratio(c: Case) -> list[Check]:
    """Throughput per machine of two deployments at the same speed, off sweep frontiers."""
    cfg = c.config()
    return [c.check(k, pareto_ratio(cfg, k), v) for k, v in c.expect.items() if k.startswith("throughput_ratio_")]


def run_slo_batch(c: Case) -> list[Check]:
    """The largest decode batch that fits and keeps the SLO; its metrics vs the published ones."""
    cfg = c.config()
    b, vals = largest_batch_at_slo(cfg, float(cfg["min_tokens_per_s_per_user"]))
    note = f"batch {b:g}" if b else "no batch meets SLO"
    return [c.check(k, float(vals[k]) if vals is not None else float("nan"), v, note=note) for k, v in c.expect.items()]


def run_estimate_case(c: Case) -> list[Check]:
    """One estimate; its metrics (or max_batch within a range) vs the published ones."""
    r = run_estimate(c.config())
    checks = []
    for k, v in c.expect.items():
        if k == "max_batch_range":
            checks.append(c.check("max_batch", float(result_value(r, "max_batch")), v))
        elif k in ESTIMATE_EXPECT_KEYS:
            checks.append(c.check(k, result_value(r, k), v))
        else:
            raise SpecError(f"{c.raw['_file']}: {c.id}: unknown expectation {k!r}")
    return checks


# kind -> (runner, default class when the case gives none)
RUNNERS = {
    "economics": (run_economics, "economics"),
    "capacity": (run_capacity, "system"),
    "kernel": (run_kernel, "kernel"),
    "kernel_rows": (run_kernel_rows, "kernel"),
    "layer_breakdown": (run_layer_breakdown, "layer"),
    "speedup": (run_speedup, "layer"),
    "pareto_ratio": (run_pareto_ratio, "system"),
    "slo_batch": (run_slo_batch, "system"),
    "estimate": (run_estimate_case, "system"),
    "simulate": (run_simulate_case, "serving"),
}


def case_kind(case, by_id) -> str:
    """The kind of a case (a key of RUNNERS), read from which keys it has."""
    inputs = case.get("inputs") or {}
    expect = case.get("expect") or {}
    if "client" in case:
        return "simulate"
    if "average_nodes" in inputs:
        return "economics"
    if inputs:
        return "capacity"
    if "kernel_rows" in case:
        return "kernel_rows"
    if "kernel" in case:
        return "kernel"
    cfg = case_config(case, by_id)
    if "expect_us" in case:
        return "layer_breakdown"
    if any(k.startswith("speedup_at_batch_") for k in expect):
        return "speedup"
    if any(k.startswith("throughput_ratio_") for k in expect):
        return "pareto_ratio"
    if "min_tokens_per_s_per_user" in cfg:
        return "slo_batch"
    return "estimate"


def with_engine(case: dict, engine) -> dict:
    """The case with `engine` as the default of its estimate config, kernel or plan inputs (a
    case's own `engine:` key wins): `moesim validate --engine`."""
    if engine is None:
        return case
    out = dict(case)
    for sec in ("config", "kernel", "kernel_rows", "inputs"):
        if isinstance(case.get(sec), dict) and "same_as" not in case[sec]:
            out[sec] = {"engine": str(engine), **case[sec]}
    return out


def run_case(case, by_id) -> list[Check]:
    """The checks of one case: its kind's runner."""
    kind = case_kind(case, by_id)
    tol = float(num(case.get("tolerance", SERVING_TOLERANCE if kind == "simulate" else 0.2)))
    runner, default_cls = RUNNERS[kind]
    return runner(Case(case, by_id, case.get("class") or default_cls, tol))
