"""Python API mirroring the CLI: estimate(...) -> EstimateResult."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from moesim.engine.evaluate import evaluate, schemes_for
from moesim.enums import CommMode, CostMode, Overlap, Phase
from moesim.errors import CalibrationError, ConfigError
from moesim.grid.core import Grid, distinct_rows
from moesim.grid.validity import require_valid
from moesim.metrics.step import metrics
from moesim.specs import load_hardware, load_model, parse_overrides
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec

DEFAULTS = {"decode": {"batch": 32, "context": 4096}, "prefill": {"batch": 16384, "context": 4096}}


def resolve_specs(model, hardware, set_=None):
    ov = parse_overrides([set_] if isinstance(set_, str) else set_)
    m = model if isinstance(model, ModelSpec) else load_model(model, ov["model"])
    h = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware, ov["hardware"])
    return m, h


def _parallel_degree(name, v):
    """None or a positive whole number (int, or a float/numpy value equal to one)."""
    if v is None:
        return None
    try:
        ok = not isinstance(v, (bool, np.bool_, str, bytes)) and float(v) == float(v) and np.isfinite(float(v))
    except (TypeError, ValueError, OverflowError):
        ok = False
    if not ok or float(v) < 1 or float(v) != int(float(v)):
        raise ConfigError(f"{name}: {v!r} must be a positive integer (1 .. 1,000,000 GPUs)")
    return int(float(v))


def _number(name, v, allowed):
    """A finite real number (API inputs may be str/None/NaN); the grid checks ranges."""
    try:
        if isinstance(v, (bool, np.bool_, str, bytes)):
            raise TypeError
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}: {v!r} is not a number; allowed {allowed}") from None
    return v if isinstance(v, (int, float)) else x


def resolve_parallel(model: ModelSpec, tp, dp, ep, moe_tp):
    """Fill the missing one of tp x dp = ep x moe_tp (= GPUs)."""
    tp, dp, ep, moe_tp = (_parallel_degree(n, v) for n, v in (("tp", tp), ("dp", dp), ("ep", ep), ("moe_tp", moe_tp)))
    tp = 1 if tp is None else tp
    moe_tp = 1 if moe_tp is None else moe_tp
    if not model.is_moe:
        ep = 1 if ep is None else ep
        if dp is None:
            dp = 1
        moe_tp = tp * dp if moe_tp == 1 and ep == 1 else moe_tp
        return tp, dp, ep, moe_tp
    if dp is None and ep is None:
        dp = 1
    if dp is None:
        if (ep * moe_tp) % tp:
            raise ConfigError(f"dp: ep x moe_tp = {ep * moe_tp} is not divisible by tp = {tp}; pass --dp explicitly")
        dp = ep * moe_tp // tp
    if ep is None:
        if (tp * dp) % moe_tp:
            raise ConfigError(f"ep: tp x dp = {tp * dp} is not divisible by moe_tp = {moe_tp}")
        ep = tp * dp // moe_tp
    return tp, dp, ep, moe_tp


def check_imbalance_flags(model: ModelSpec, expert_skew="auto", context_dist="fixed"):
    """Raise on a bad --expert-skew / --context-dist before any evaluation (sweeps would otherwise
    turn a bad flag into invalid rows)."""
    from moesim.balance import imbalance as I

    I.context_dist(context_dist)
    if model.is_moe and str(expert_skew).strip().lower() not in ("auto", "none"):
        I.skew_shares(1, model.moe.num_experts, 0, expert_skew)


def load_profile_for(hw: HardwareSpec, cost_mode, profile_path=None, force=False):
    if CostMode(cost_mode) == CostMode.ROOFLINE:
        return None, []
    try:
        from moesim.perf.profile import load_profile
    except ImportError:  # calibration package not present
        return None, [f"no calibration support installed: {cost_mode} falls back to roofline efficiencies"]
    prof = _cached_profile(load_profile, hw, profile_path, force)
    if prof is None:
        return None, [
            f"no calibration profile for {hw.name}: kernels use peak efficiencies (roofline) plus launch overhead"
        ]
    return prof, []


def evaluate_grid(
    model: ModelSpec,
    hw: HardwareSpec,
    grid: Grid,
    *,
    phase="decode",
    overlap=None,
    cost_mode="calibrated",
    comm=None,
    expert_skew="auto",
    context_dist="fixed",
    profile_path=None,
    force_profile=False,
    cuda_graphs=True,
):
    """The one evaluation path shared by estimate, sweep, pareto and plan (so they agree):
    calibration profile + rank-imbalance factors + vectorized evaluate. -> (Evaluation, notes)."""
    from moesim.balance.factors import imbalance_factors

    cost_mode = CostMode.parse(cost_mode, "cost_mode")
    prof, notes = load_profile_for(hw, cost_mode, profile_path, force_profile)
    imb, imb_notes = imbalance_factors(model, hw, grid, phase, expert_skew, context_dist, cost_mode.value)
    dd = _dedupe(grid)
    if dd is None:
        ev = evaluate(
            model,
            hw,
            grid,
            phase=phase,
            overlap=overlap,
            cost_mode=cost_mode,
            comm=comm,
            profile=prof,
            imbalance=imb,
            cuda_graphs=cuda_graphs,
        )
        return ev, notes + imb_notes + ev.notes
    # configurations that differ only in acceptance share every op cost: evaluate each distinct
    # cost-relevant row once, then expand and recompute the acceptance-dependent metrics
    first, inverse = dd
    sub = grid.take(first)
    sub_imb = {k: np.broadcast_to(v, (grid.size,))[first] for k, v in imb.items()} if imb else imb
    ev = evaluate(
        model,
        hw,
        sub,
        phase=phase,
        overlap=overlap,
        cost_mode=cost_mode,
        comm=comm,
        profile=prof,
        imbalance=sub_imb,
        cuda_graphs=cuda_graphs,
    )
    vals = {k: np.asarray(v)[inverse] for k, v in ev.values.items()}
    peak = hw.peak_flops(model.precision.weight_dtype)
    vals.update(metrics(grid, phase, vals["step_time_s"], vals["flops_per_step"], peak, hw.gpus_per_node))
    ev.grid, ev.values = grid, vals
    return ev, notes + imb_notes + ev.notes


COST_AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "redundant")  # all but acceptance


def _dedupe(grid: Grid):
    """Rows that differ only in acceptance share every op cost (acceptance enters the metrics only)."""
    if np.ptp(grid.acceptance) == 0:
        return None
    return distinct_rows(grid, COST_AXES, max_share=0.75, min_size=256)


_PROFILE_CACHE: dict = {}


def _cached_profile(load_profile, hw, path, force):
    """Profiles are read once per (file, mtime, hardware): sweeps call this many times."""
    import os

    from moesim.specs.loader import data_root

    p = path or data_root() / "calibration" / "profiles" / f"{hw.name}.yaml"
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        mtime = None
    key = (str(p), mtime, repr(hw), bool(force))
    if key not in _PROFILE_CACHE:
        if len(_PROFILE_CACHE) > 32:
            _PROFILE_CACHE.clear()
        try:
            _PROFILE_CACHE[key] = load_profile(hw, path=path, force=force)
        except OSError as e:
            raise CalibrationError(f"profile {p}: cannot read ({e.strerror or e.__class__.__name__})") from None
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # structure the reader does not check
            raise CalibrationError(
                f"profile {p}: malformed ({e.__class__.__name__}: {e}); regenerate it with `moesim calibrate fit`"
            ) from None
    return _PROFILE_CACHE[key]


@dataclass
class EstimateResult:
    model: ModelSpec
    hardware: HardwareSpec
    config: dict
    values: dict
    ops: list
    memory: dict
    notes: list = field(default_factory=list)

    def __getitem__(self, key):
        return self.values[key]

    def to_dict(self) -> dict:
        m = self.model
        d = {k: _py(v) for k, v in self.values.items() if not k.startswith("step_time_s[")}
        d["step_time_s_by_overlap"] = {
            k[len("step_time_s[") : -1]: _py(v) for k, v in self.values.items() if k.startswith("step_time_s[")
        }
        d.update(
            {
                "config": self.config,
                "model": m.name,
                "hardware": self.hardware.name,
                "ops": self.ops,
                "memory": self.memory,
                "model_params": m.total_params(),
                "active_params": m.active_params(),
                "kv_bytes_per_token": m.kv_bytes_per_token,
                "units": {
                    "batch": "requests per DP group" if self.config["phase"] != "prefill" else "tokens per DP group",
                    "context": "tokens",
                    "time": "s",
                    "memory": "bytes",
                },
                "notes": self.notes,
            }
        )
        return d


def _py(v):
    a = np.asarray(v)
    if a.size == 1:
        x = a.reshape(-1)[0]
        if isinstance(x, (np.bool_, bool)):
            return bool(x)
        if isinstance(x, (np.integer,)):
            return int(x)
        if isinstance(x, (np.floating, float)):
            x = float(x)
            return None if not np.isfinite(x) else x
        return x if not isinstance(x, np.generic) else x.item()
    return [_py(x) for x in a.reshape(-1)]


def estimate(
    model="deepseek-v3",
    hardware="h800",
    *,
    phase="decode",
    tp=None,
    dp=None,
    ep=None,
    moe_tp=None,
    batch=None,
    context=None,
    mtp=0,
    acceptance=0.8,
    redundant_experts=0,
    overlap=None,
    cost_mode="calibrated",
    comm=None,
    set=None,
    expert_skew="auto",
    context_dist="fixed",
    profile=None,
    force_profile=False,
    isl=None,
    osl=None,
    cuda_graphs=True,
) -> EstimateResult:
    """One configuration, per-op detail. Raises MoesimError subclasses on bad input.
    phase "mixed" (decode + chunked prefill in each step) needs isl and osl (tokens)."""
    phase = Phase.parse(phase, "phase")
    if phase == Phase.MIXED:
        from moesim.engine.serving import estimate_mixed

        return estimate_mixed(
            model,
            hardware,
            isl=isl,
            osl=osl,
            tp=tp,
            dp=dp,
            ep=ep,
            moe_tp=moe_tp,
            batch=batch,
            context=context,
            mtp=mtp,
            acceptance=acceptance,
            redundant_experts=redundant_experts,
            overlap=overlap,
            cost_mode=cost_mode,
            comm=comm,
            set=set,
            expert_skew=expert_skew,
            context_dist=context_dist,
            profile=profile,
            force_profile=force_profile,
        )
    cost_mode = CostMode.parse(cost_mode, "cost_mode")
    comm = CommMode.parse(comm, "comm") if comm else None
    overlap = Overlap.parse(overlap, "overlap") if overlap else None
    m, h = resolve_specs(model, hardware, set)
    tp, dp, ep, moe_tp = resolve_parallel(m, tp, dp, ep, moe_tp)
    batch = DEFAULTS[phase.value]["batch"] if batch is None else _number("batch", batch, "a number in (0, 1e9]")
    context = (
        DEFAULTS[phase.value]["context"]
        if context is None
        else _number("context", context, f"tokens in (0, max_context = {m.max_context:,}]")
    )
    mtp = _number("mtp", mtp, "an integer in [0, 16]")
    acceptance = _number("acceptance", acceptance, "[0, 1]")
    redundant_experts = _number("redundant_experts", redundant_experts, "an integer >= 0")
    if phase == Phase.PREFILL and mtp:
        raise ConfigError(f"mtp: prefill has no draft tokens; allowed 0 (got {mtp})")
    grid = Grid.single(
        tp=tp,
        dp=dp,
        ep=ep,
        moe_tp=moe_tp,
        batch=batch,
        context=context,
        mtp=mtp,
        acceptance=acceptance,
        redundant=redundant_experts,
    )
    require_valid(m, h, grid, phase)
    ev, notes = evaluate_grid(
        m,
        h,
        grid,
        phase=phase,
        overlap=overlap,
        cost_mode=cost_mode,
        comm=comm,
        expert_skew=expert_skew,
        context_dist=context_dist,
        profile_path=profile,
        force_profile=force_profile,
        cuda_graphs=cuda_graphs,
    )
    notes += ev.notes
    step = float(ev.values["step_time_s"][0])
    if not np.isfinite(step) and (
        batch >= 2 or overlap in (Overlap.SERIAL, Overlap.SHARED, Overlap.SBO, Overlap.IDEAL)
    ):
        raise ConfigError(
            "step time is not finite for this configuration; check the hardware spec and the "
            "calibration profile (allowed: finite, positive bandwidths and FLOP/s)"
        )
    if not np.isfinite(step):
        raise ConfigError(
            f"overlap: {overlap.value if overlap else 'this schedule'} splits the batch into micro-batches "
            f"and needs batch >= 2; allowed for batch {batch:g}: serial, shared, sbo, ideal"
        )
    ops = []
    agg = {}
    from moesim.schedule.schemes import SCHEMES

    ub = SCHEMES[ev.chosen].micro_batches if ev.chosen in SCHEMES else 1
    for c, n in ev.op_costs:
        t_call = float(np.asarray(c.time_s).reshape(-1)[0])
        n = float(np.asarray(n).reshape(-1)[0])
        if n == 0 or (
            t_call == 0
            and float(np.asarray(c.flops).reshape(-1)[0]) == 0
            and float(np.asarray(c.bytes).reshape(-1)[0]) == 0
        ):
            continue
        key = c.name
        # per call = one micro-batch's kernel; per layer = every micro-batch of one layer (or of the
        # step, for step-level ops such as the LM head)
        e = agg.setdefault(
            key,
            {
                "name": c.name,
                "stream": c.stream.value,
                "stage": c.stage,
                "time_s": 0.0,
                "time_per_call_s": t_call,
                "time_per_layer_s": t_call * ub,
                "count": 0.0,
                "calls_per_layer": ub,
                "bound": c.bound_name(0),
                "provenance": c.provenance,
                "flops": 0.0,
                "bytes": 0.0,
            },
        )
        e["time_s"] += t_call * n
        e["count"] += n
        e["flops"] += float(np.asarray(c.flops).reshape(-1)[0]) * n
        e["bytes"] += float(np.asarray(c.bytes).reshape(-1)[0]) * n
    total_op_time = sum(e["time_s"] for e in agg.values()) or 1.0
    for e in agg.values():
        e["share"] = e["time_s"] / total_op_time
        ops.append(e)
    mem = ev.memory
    memd = {
        "weights_bytes": float(mem.weights_bytes[0]),
        "weights_breakdown_bytes": {
            "attention": float(mem.weights_attention_bytes[0]),
            "routed_experts": float(mem.weights_experts_bytes[0]),
            "shared_expert_and_router": float(mem.weights_shared_bytes[0]),
            "dense_ffn": float(mem.weights_dense_bytes[0]),
            "embedding_and_lm_head": float(mem.weights_embedding_bytes[0]),
            "mtp": float(mem.weights_mtp_bytes[0]),
        },
        "kv_cache_bytes": float(mem.kv_cache_bytes[0]),
        "activation_bytes": float(mem.activation_bytes[0]),
        "comm_buffer_bytes": float(mem.comm_buffer_bytes[0]),
        "reserve_bytes": float(mem.reserve_bytes),
        "total_bytes": float(mem.total_bytes[0]),
        "capacity_bytes": float(mem.capacity_bytes),
        "fits": bool(mem.fits[0]),
    }
    if not memd["fits"]:
        notes.append(
            f"does not fit: needs {memd['total_bytes'] / 1e9:.1f} GB of {memd['capacity_bytes'] / 1e9:.1f} GB "
            f"per GPU; max batch here is {int(ev.values['max_batch'][0])}"
        )
    if overlap == Overlap.AUTO:
        by = {s: float(ev.values[f"step_time_s[{s}]"][0]) for s in schemes_for(phase)}
        ranked = sorted(by.items(), key=lambda kv: kv[1])
        notes.append("overlap auto: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in ranked) + f" -> {ranked[0][0]}")
    config = {
        "phase": phase.value,
        "tp": tp,
        "dp": dp,
        "ep": ep,
        "moe_tp": moe_tp,
        "gpus": tp * dp,
        "batch": batch,
        "context": context,
        "mtp": mtp,
        "acceptance": acceptance,
        "redundant_experts": redundant_experts,
        "overlap": ev.chosen,
        "cost_mode": cost_mode.value,
        "comm": ev.comm.value,
        "expert_skew": expert_skew,
        "context_dist": context_dist,
        "cuda_graphs": cuda_graphs,
        "set": list(set or []),
    }
    return EstimateResult(m, h, config, {k: v for k, v in ev.values.items()}, ops, memd, notes)
