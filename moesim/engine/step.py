"""One configuration, op by op: the single-row evaluation plus the per-op table, the memory
breakdown, notes and the echoed configuration (EstimateResult; `moesim estimate --json`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from moesim.balance.factors import expert_load_info
from moesim.engine.pricing import evaluate_grid, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import Overlap, Phase
from moesim.errors import ConfigError, check_number
from moesim.grid.core import Grid
from moesim.grid.layout import resolve_parallel
from moesim.grid.validity import require_valid
from moesim.schedule.schemes import SCHEMES, micro_batches, schemes_for
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec
from moesim.units import jsonable
from moesim.workload.ffn import comm_sms_held

DEFAULTS = {"decode": {"batch": 32, "context": 4096}, "prefill": {"batch": 16384, "context": 4096}}


@dataclass
class EstimateResult:
    """One configuration priced: `values` (figure -> one-element array; SI units: s, bytes,
    tokens/s), `ops` (per-op rows), `memory` (bytes), `config` (the inputs as resolved) and notes.
    ``r["tpot_s"]``: one figure as a scalar (float, str or bool)."""

    model: ModelSpec
    hardware: HardwareSpec
    config: dict
    values: dict
    ops: list
    memory: dict
    notes: list = field(default_factory=list)

    def __getitem__(self, key: str):
        """`values[key]` as a scalar (the array itself where it holds more than one entry)."""
        if key not in self.values:
            raise KeyError(f"{key!r}: not a figure of this estimate; allowed: {', '.join(self.values)}")
        v = np.asarray(self.values[key])
        return v.item() if v.size == 1 else v

    def to_dict(self) -> dict:
        m = self.model
        d = {k: jsonable(v, squeeze=True) for k, v in self.values.items() if not k.startswith("step_time_s[")}
        d["step_time_s_by_overlap"] = {
            k[len("step_time_s[") : -1]: jsonable(v, squeeze=True)
            for k, v in self.values.items()
            if k.startswith("step_time_s[")
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


def _number(name, v, allowed):
    """A real number as given (API inputs may be str/None/bool); the grid checks finiteness and ranges."""
    try:
        if isinstance(v, (bool, np.bool_, str, bytes)):
            raise TypeError
        x = float(v)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}: {v!r} is not a number; allowed {allowed}") from None
    return v if isinstance(v, (int, float)) else x


def _first(x) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def op_table(op_costs, ub: int) -> list[dict]:
    """Per-op rows of one configuration: per call (one micro-batch's kernel), per layer (every
    micro-batch of one layer, or of the step for step-level ops such as the LM head), per step."""
    agg = {}
    for c, n in op_costs:
        t_call, n = _first(c.time_s), _first(n)
        if n == 0 or (t_call == 0 and _first(c.flops) == 0 and _first(c.bytes) == 0):
            continue
        e = agg.setdefault(
            c.name,
            {"name": c.name, "stream": c.stream.value, "stage": c.stage, "time_s": 0.0, "time_per_call_s": t_call,
             "time_per_layer_s": t_call * ub, "count": 0.0, "calls_per_layer": ub, "bound": c.bound_name(0),
             "provenance": c.provenance, "flops": 0.0, "bytes": 0.0},
        )  # fmt: skip
        e["time_s"] += t_call * n
        e["count"] += n
        e["flops"] += _first(c.flops) * n
        e["bytes"] += _first(c.bytes) * n
    total_op_time = sum(e["time_s"] for e in agg.values()) or 1.0
    for e in agg.values():
        e["share"] = e["time_s"] / total_op_time
    return list(agg.values())


def memory_table(mem) -> dict:
    """The memory footprint of one configuration (bytes per GPU) with the weights' breakdown."""
    return {
        "weights_bytes": _first(mem.weights_bytes),
        "weights_breakdown_bytes": {
            "attention": _first(mem.weights_attention_bytes),
            "routed_experts": _first(mem.weights_experts_bytes),
            "shared_expert_and_router": _first(mem.weights_shared_bytes),
            "dense_ffn": _first(mem.weights_dense_bytes),
            "embedding_and_lm_head": _first(mem.weights_embedding_bytes),
            "mtp": _first(mem.weights_mtp_bytes),
        },
        "kv_cache_bytes": _first(mem.kv_cache_bytes),
        "activation_bytes": _first(mem.activation_bytes),
        "comm_buffer_bytes": _first(mem.comm_buffer_bytes),
        "reserve_bytes": float(mem.reserve_bytes),
        "total_bytes": _first(mem.total_bytes),
        "capacity_bytes": float(mem.capacity_bytes),
        "fits": bool(mem.fits[0]),
    }


def _check_step(ev, batch, overlap):
    step = _first(ev.values["step_time_s"])
    if np.isfinite(step):
        return
    if batch >= 2 or overlap in (Overlap.SERIAL, Overlap.SHARED, Overlap.SBO, Overlap.IDEAL):
        raise ConfigError(
            "step time is not finite for this configuration; check the hardware spec and the "
            "calibration profile (allowed: finite, positive bandwidths and FLOP/s)"
        )
    raise ConfigError(
        f"overlap: {overlap.value if overlap else 'this schedule'} splits the batch into micro-batches "
        f"and needs batch >= 2; allowed for batch {batch:g}: serial, shared, sbo, ideal"
    )


def _notes(ev, memd, phase, overlap) -> list:
    notes = []
    if not memd["fits"]:
        notes.append(
            f"does not fit: needs {memd['total_bytes'] / 1e9:.1f} GB of {memd['capacity_bytes'] / 1e9:.1f} GB "
            f"per GPU; max batch here is {int(ev.values['max_batch'][0])}"
        )
    if overlap == Overlap.AUTO:
        by = {s: _first(ev.values[f"step_time_s[{s}]"]) for s in schemes_for(phase)}
        ranked = sorted(by.items(), key=lambda kv: kv[1])
        chosen, em = str(ev.values["overlap"][0]), ev.engine_model
        skipped = [k for k, _ in ranked if k != chosen and by[k] < by[chosen]]
        why = f" ({', '.join(skipped)}: not run by {em.label} here)" if skipped else ""
        notes.append("overlap auto: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in ranked) + f" -> {chosen}{why}")
    return notes


def _tbo_note(ev, h, phase, ep, comm_sms) -> list:
    """What a prefill two-batch step exposes besides the critical path (moesim.schedule.schemes)."""
    if phase != Phase.PREFILL or ep <= 1 or not SCHEMES.get(ev.chosen, SCHEMES["serial"]).caps_gemm_sms:
        return []
    held = comm_sms_held(ev.comm, comm_sms)
    if not held:
        return []
    return [
        f"{ev.chosen} prefill: GEMMs run on {h.sms - held:.0f} of {h.sms} SMs for the whole forward beside "
        f"DeepEP normal's {held:.0f} (SGLang TBO caps DeepGEMM; DeepSeek's profile: 108 / 24); the first "
        "layer starts cold and the last layer's combines are exposed (fill/drain)"
    ]


@dataclass(frozen=True)
class StepConfig:
    """The deployment and workload scalars of one configuration (None: the phase default
    `DEFAULTS`, or derived by `resolve_parallel`): parallelism, batch (requests per DP group;
    prefill: tokens), context (tokens), MTP draft tokens, acceptance, redundant expert slots, overlap."""

    tp: object = None
    dp: object = None
    ep: object = None
    moe_tp: object = None
    batch: object = None
    context: object = None
    mtp: object = 0
    acceptance: object = 0.8
    redundant_experts: object = 0
    overlap: object = None

    @classmethod
    def of(cls, where: str, keywords: dict) -> StepConfig:
        """From keywords; an unknown one is a ConfigError naming `where` and the allowed names."""
        unknown = sorted(set(keywords) - set(STEP_FIELDS))
        if unknown:
            raise ConfigError(f"{where}: unknown keyword(s) {', '.join(unknown)}; allowed {', '.join(STEP_FIELDS)}")
        return cls(**keywords)


STEP_FIELDS = tuple(f.name for f in dataclasses.fields(StepConfig))


def _inputs(m: ModelSpec, phase, c: StepConfig):
    """(batch, context, mtp, acceptance, redundant_experts) with the phase defaults, checked numbers."""
    batch = DEFAULTS[phase.value]["batch"] if c.batch is None else _number("batch", c.batch, "a number in (0, 1e9]")
    context = (
        DEFAULTS[phase.value]["context"]
        if c.context is None
        else _number("context", c.context, f"tokens in (0, max_context = {m.max_context:,}]")
    )
    mtp = _number("mtp", c.mtp, "an integer in [0, 16]")
    acceptance = _number("acceptance", c.acceptance, "[0, 1]")
    redundant_experts = _number("redundant_experts", c.redundant_experts, "an integer >= 0")
    if phase == Phase.PREFILL and mtp:
        raise ConfigError(f"mtp: prefill has no draft tokens; allowed 0 (got {mtp})")
    return batch, context, mtp, acceptance, redundant_experts


def estimate_step(model="deepseek-v3", hardware="h800", *, phase="decode", set=None, pricing: Pricing | None = None,
                  **config) -> EstimateResult:  # fmt: skip
    """One decode or prefill step of one configuration, per-op detail (phase "mixed" composes two
    of these: `moesim.engine.serving`). config: `StepConfig`'s fields (tp, dp, ep, moe_tp, batch,
    context, mtp, acceptance, redundant_experts, overlap); pricing: `Pricing` (default: `Pricing()`;
    its engine picks the calibration profile; config records it and the file used). Raises
    MoesimError subclasses on bad input."""
    c = StepConfig.of("estimate_step", config)
    p = pricing if pricing is not None else Pricing()
    phase = Phase.parse(phase, "phase")
    overlap = Overlap.parse(c.overlap, "overlap") if c.overlap else None
    m, h = resolve_specs(model, hardware, set)
    tp, dp, ep, moe_tp = resolve_parallel(m, c.tp, c.dp, c.ep, c.moe_tp)
    batch, context, mtp, acceptance, redundant_experts = _inputs(m, phase, c)
    grid = Grid.single(tp=tp, dp=dp, ep=ep, moe_tp=moe_tp, batch=batch, context=context, mtp=mtp,
                       acceptance=acceptance, redundant=redundant_experts)  # fmt: skip
    require_valid(m, h, grid, phase)
    if p.comm_sms is not None:  # DeepEP normal: 2 SMs per channel, at most the GPU's SMs
        check_number("comm_sms", p.comm_sms, lo=2, hi=h.sms - 1, integer=True)
    ev, notes = evaluate_grid(m, h, grid, phase=phase, overlap=overlap, pricing=p)
    notes += ev.notes
    _check_step(ev, batch, overlap)
    memd = memory_table(ev.memory)
    notes += _notes(ev, memd, phase, overlap)
    notes += _tbo_note(ev, h, phase, ep, p.comm_sms)
    config = {"phase": phase.value, "tp": tp, "dp": dp, "ep": ep, "moe_tp": moe_tp, "gpus": tp * dp,
              "batch": batch, "context": context, "mtp": mtp, "acceptance": acceptance,
              "redundant_experts": redundant_experts, "overlap": ev.chosen, "cost_mode": p.cost_mode.value,
              "comm": ev.comm.value, "expert_skew": p.expert_skew, "context_dist": p.context_dist,
              "cuda_graphs": p.cuda_graphs, "set": list(set or []), **ev.pricing,
              # what the engine runs (moesim.specs.engine): the MoE path and the pinned release
              "moe_comm": str(ev.values["moe_comm"][0]), "engine_release": ev.engine_model.label}  # fmt: skip
    if p.comm_sms is not None:
        config["comm_sms"] = p.comm_sms
    config["expert_load"] = expert_load_info(
        m, phase, p.expert_skew, p.cost_mode.value, getattr(ev, "imbalance", None), micro_batches(ev.chosen)
    )
    ops = op_table(ev.op_costs, micro_batches(ev.chosen))
    return EstimateResult(m, h, config, dict(ev.values), ops, memd, list(dict.fromkeys(notes)))
