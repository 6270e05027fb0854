"""Deployment-config validation: one vectorized mask with reasons (sweeps) and a raising check
(estimate). Messages name the field and what is allowed."""

from __future__ import annotations

import numpy as np

from moesim.enums import Dtype, Phase
from moesim.errors import ConfigError
from moesim.grid.core import Grid
from moesim.grid.layout import MAX_GPUS
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec

# EPLB redundant slots: at most 3x the routed experts (4 slots per expert on average). Published
# deployments use far fewer (DeepSeek-V3: 32 for 256 experts); the greedy replication gives a hot
# expert about its load ratio in replicas, so more than ~1 per expert no longer balances anything,
# and each slot costs an expert's weights. The bound keeps an estimate's EPLB placement (a loop
# over slots) to seconds.
MAX_REDUNDANT_PER_EXPERT = 3


def check_redundant(model: ModelSpec, values, flag: str = "--redundant-experts") -> None:
    """Every redundant-slot count of an MoE model in [0, MAX_REDUNDANT_PER_EXPERT x routed experts],
    checked before any work -> ConfigError naming the flag, the value and the range."""
    if not model.is_moe:  # no routed experts: the per-row rules decide (as before)
        return
    experts = int(model.moe.num_experts)
    hi = MAX_REDUNDANT_PER_EXPERT * experts
    for v in np.atleast_1d(np.asarray(values, float)):
        if np.isfinite(v) and v > hi:
            raise ConfigError(
                f"{flag}: {v:,.0f} is out of range; allowed an integer in [0, {hi:,}] "
                f"({MAX_REDUNDANT_PER_EXPERT}x the {experts} routed experts of {model.name})"
            )


def default_redundant(model: ModelSpec, values) -> list:
    """The default redundant-slot axis for `model`: the values within check_redundant's bound (the
    default space's 32 is DeepSeek-V3's; an 8-expert model keeps 0 and whatever fits 3 x 8)."""
    if not model.is_moe:
        return list(values)
    hi = MAX_REDUNDANT_PER_EXPERT * int(model.moe.num_experts)
    return [v for v in values if float(v) <= hi] or [0.0]


def _number_rules(model: ModelSpec, grid: Grid) -> list:
    """(bad mask, reason) for each axis that must be finite, whole or in range, and the layout rule."""
    finite_allowed = {
        "tp": "a positive integer",
        "dp": "a positive integer",
        "ep": "a positive integer",
        "moe_tp": "a positive integer",
        "batch": "allowed (0, 1e9]",
        "context": f"allowed (0, max_context = {model.max_context:,}] tokens",
        "mtp": "an integer in [0, 16]",
        "redundant": "an integer >= 0",
    }
    rules = [
        (~np.isfinite(getattr(grid, name)),
         f"{'redundant_experts' if name == 'redundant' else name}: must be a finite number; {allowed}")
        for name, allowed in finite_allowed.items()
    ]  # fmt: skip
    for name in ("tp", "dp", "ep", "moe_tp"):
        v = getattr(grid, name)
        rules.append(((v < 1) | (v != np.round(v)), f"{name}: must be a positive integer"))
    heads = model.attention.num_heads
    return rules + [
        (grid.tp * grid.dp > MAX_GPUS, f"tp x dp: at most {MAX_GPUS:,} GPUs"),
        (heads % np.maximum(grid.tp, 1) != 0, f"tp: must divide the {heads} attention heads"),
        (
            grid.ep * grid.moe_tp != grid.tp * grid.dp,
            "ep x moe_tp: must equal tp x dp (every GPU holds attention and experts)",
        ),
        (grid.batch <= 0, "batch: must be > 0"),
        (grid.batch > 1e9, "batch: at most 1e9"),
        (grid.context <= 0, "context: must be > 0 tokens"),
        (grid.context > model.max_context, f"context: at most the model's max_context = {model.max_context:,}"),
        ((grid.mtp < 0) | (grid.mtp != np.round(grid.mtp)) | (grid.mtp > 16), "mtp: an integer in [0, 16]"),
        (
            ~np.isfinite(grid.acceptance) | (grid.acceptance < 0) | (grid.acceptance > 1),
            "acceptance: must be in [0, 1]",
        ),
        ((grid.redundant < 0) | (grid.redundant != np.round(grid.redundant)), "redundant_experts: an integer >= 0"),
    ]


def _model_rules(model: ModelSpec, grid: Grid, phase: Phase) -> list:
    """(bad mask, reason) for what the model allows: MTP, expert slots and widths, dense FFN width."""
    rules = []
    if phase == Phase.DECODE and not model.mtp_layers:
        rules.append((grid.mtp > 0, f"mtp: {model.name} has no MTP module (mtp_layers = 0); allowed 0"))
    if model.is_moe:
        m = model.moe
        slots = m.num_experts + grid.redundant
        rules += [
            (np.mod(slots, np.maximum(grid.ep, 1)) != 0,
             f"{EP_SLOTS_REASON} (num_experts {m.num_experts} + redundant_experts)"),
            (grid.ep > slots, "ep: at most num_experts + redundant_experts ranks"),
            (m.expert_intermediate_size % np.maximum(grid.moe_tp, 1) != 0,
             f"moe_tp: must divide the expert width {m.expert_intermediate_size}"),
        ]  # fmt: skip
    else:
        rules += [(grid.ep != 1, f"ep: {model.name} is dense; allowed ep = 1 (use tp/dp)"),
                  (grid.redundant != 0, "redundant_experts: dense model; allowed 0")]  # fmt: skip
    if model.dense_ffn is not None:
        width = model.dense_ffn.intermediate_size
        rules.append((width % np.maximum(grid.tp, 1) != 0, f"tp: must divide the dense FFN width {width}"))
    return rules


def check_grid(model: ModelSpec, hw: HardwareSpec, grid: Grid, phase: Phase):
    """-> (valid mask, reason per config ('' if valid)). Vectorized; first failing rule wins."""
    phase = Phase(phase)
    n = grid.size
    reason = np.full(n, "", dtype=object)
    ok = np.ones(n, bool)
    for bad, text in _number_rules(model, grid) + _model_rules(model, grid, phase):
        bad = np.asarray(bad, bool) & np.ones(n, bool)
        reason[bad & ok] = text
        ok &= ~bad
    return ok, reason


EP_SLOTS_REASON = "ep: must divide the expert slots"


def fix_hint(model: ModelSpec, reason: str, ep: float, redundant: float) -> str:
    """The likely fix for a reason of `check_grid`, for one configuration ('' if none): an EP that
    does not divide the expert slots takes the fewest redundant experts that make it divide
    (--ep 144 with 256 experts: 32 redundant, 288 = 2 x 144, DeepSeek's EPLB deployment)."""
    if not (reason.startswith(EP_SLOTS_REASON) and model.is_moe) or not (np.isfinite(ep) and np.isfinite(redundant)):
        return ""
    ep, redundant, n = int(ep), int(redundant), model.moe.num_experts
    if ep < 1 or redundant < 0:
        return ""
    want = redundant + (-(n + redundant)) % ep  # smallest count >= the given one with ep | n + count
    divisors = [d for d in range(ep, 0, -1) if n % d == 0]
    return (
        f"; {n} + {redundant} = {n + redundant} slots do not split over {ep} ranks: add --redundant-experts {want} "
        f"({n + want} = {(n + want) // ep} x {ep}) or use --ep {divisors[0]} (divides {n})"
    )


def require_valid(model, hw, grid, phase):
    check_redundant(model, grid.redundant)
    ok, reason = check_grid(model, hw, grid, phase)
    if not ok.all():
        i = int(np.flatnonzero(~ok)[0])
        text = str(reason[i])
        ep = np.broadcast_to(grid.ep, (grid.size,))[i]
        redundant = np.broadcast_to(grid.redundant, (grid.size,))[i]
        raise ConfigError(text + fix_hint(model, text, ep, redundant))


# the precision fields that pick a tensor-core rate (the GEMM and attention math); storage-only
# dtypes (KV cache, embedding, dispatch payload) can be up-cast on any GPU
_COMPUTE_DTYPES = ("weight_dtype", "activation_dtype", "attention_dtype")


def require_dtypes(model: ModelSpec, hw: HardwareSpec) -> None:
    """The model's compute dtypes must run on the GPU: FP4 needs an FP4 peak (fp4_tflops > 0: Blackwell
    tensor cores), FP8 needs FP8 tensor cores (compute capability >= 8.9, HardwareSpec.has_fp8)."""
    allowed = ["bf16", "fp16", "fp32"] + ["fp8"] * hw.has_fp8 + ["fp4"] * (hw.fp4_tflops > 0)
    for key in _COMPUTE_DTYPES:
        d = Dtype(getattr(model.precision, key))
        if (d == Dtype.FP4 and hw.fp4_tflops <= 0) or (d == Dtype.FP8 and not hw.has_fp8):
            why = "fp4_tflops is 0" if d == Dtype.FP4 else f"no FP8 tensor cores (sm_version {hw.sm_version})"
            raise ConfigError(
                f"precision.{key}: {d.value} is not supported on {hw.name} ({why}) for model {model.name}; "
                f"allowed on {hw.name}: {', '.join(allowed)}"
            )
