"""Aggregated serving as a phase ("mixed"): every decode step also carries its share of the
arriving prefill, chunked (SGLang / vLLM chunked prefill).

Steady state per DP group: each request emits `a` accepted tokens per step (a = 1 + sum of
acceptance, = 1 without MTP) and a new prompt of ISL tokens arrives per OSL output tokens of a
request, so a step carries

    prefill chunk tokens = batch x a x ISL / OSL       (= batch x ISL / OSL without MTP)

The step is the decode step plus the chunk's prefill pass — both through `evaluate_grid` (decode
at the grid point; prefill with batch = chunk tokens and context = ISL, the prompt length over
which the chunk's causal attention averages) — added: that sum is the interference of prefill on
decode. TPOT = step / a; TTFT = step x max(1, ISL / chunk) (the prompt needs ISL / chunk steps).
Memory: the decode footprint plus the chunk's activations. Communication: `comm` when given
applies to both parts; by default each part uses its phase's default (decode: DeepEP low-latency,
prefill chunk: DeepEP normal).
"""

from __future__ import annotations

import numpy as np

from moesim.engine.estimate import EstimateResult, estimate_step
from moesim.engine.pricing import evaluate_grid
from moesim.enums import Overlap, Phase
from moesim.errors import ConfigError, is_positive_number
from moesim.grid.core import Grid, replace
from moesim.schedule.schemes import overlap_choices


def _check(isl, osl):
    for name, v in (("isl", isl), ("osl", osl)):
        if not is_positive_number(v):
            raise ConfigError(f"{name}: phase mixed needs a positive {name} (tokens per request); got {v!r}")
    return float(isl), float(osl)


def prefill_overlap(overlap):
    """The decode overlap scheme if prefill has it (five-stage is decode-only), else its default."""
    if overlap is None:
        return None
    o = Overlap(overlap).value
    return o if o in overlap_choices(Phase.PREFILL) else None


def chunk_tokens(grid: Grid, isl, osl):
    """Prefill tokens per DP group per step in steady state."""
    return grid.batch * grid.tokens_per_step * float(isl) / float(osl)


def combine(dec: dict, pre: dict, grid: Grid, isl, osl, gpus_per_node: int, pre_comm: str = "") -> dict:
    """Decode values + prefill-chunk values (arrays over the grid) -> mixed-step values."""
    acc = grid.tokens_per_step
    chunk = chunk_tokens(grid, isl, osl)
    td, tp_ = np.asarray(dec["step_time_s"], float), np.asarray(pre["step_time_s"], float)
    step = td + tp_
    per_gpu = grid.batch * acc / step / grid.tp
    total = np.asarray(dec["total_bytes"], float) + np.asarray(pre["activation_bytes"], float)
    cap = np.asarray(dec["capacity_bytes"], float)
    out = {
        "step_time_s": step,
        "tpot_s": step / acc,
        "tokens_per_s_per_user": acc / step,
        "ttft_s": step * np.maximum(1.0, float(isl) / chunk),
        "tokens_per_s_per_gpu": per_gpu,
        "tokens_per_s_per_node": per_gpu * gpus_per_node,
        "input_tokens_per_s_per_gpu": chunk / step / grid.tp,
        "mfu": (np.asarray(dec["mfu"], float) * td + np.asarray(pre["mfu"], float) * tp_) / step,
        "accepted_tokens_per_step": acc,
        "decode_step_time_s": td,
        "prefill_chunk_time_s": tp_,
        "prefill_chunk_tokens": chunk,
        "prefill_share": tp_ / step,
        "moe_layer_time_s": np.asarray(dec["moe_layer_time_s"], float) + np.asarray(pre["moe_layer_time_s"], float),
        "dense_layer_time_s": np.asarray(dec["dense_layer_time_s"], float)
        + np.asarray(pre["dense_layer_time_s"], float),
        "bottleneck": np.where(td >= tp_, np.asarray(dec["bottleneck"], object), np.asarray(pre["bottleneck"], object)),
        "overlap": np.asarray(dec["overlap"], object),
        "prefill_overlap": np.asarray(pre["overlap"], object),
        "prefill_comm": np.full(step.shape, pre_comm, dtype=object),
        "weights_bytes": np.asarray(dec["weights_bytes"], float),
        "kv_cache_bytes": np.asarray(dec["kv_cache_bytes"], float),
        "activation_bytes": np.asarray(dec["activation_bytes"], float) + np.asarray(pre["activation_bytes"], float),
        "comm_buffer_bytes": np.asarray(dec["comm_buffer_bytes"], float),
        "total_bytes": total,
        "capacity_bytes": cap,
        "fits": np.asarray(dec["fits"], bool) & (total <= cap),
        "max_batch": np.asarray(dec["max_batch"], float),
    }
    return out


def prefill_grid(grid: Grid, isl, osl) -> Grid:
    n = grid.size
    return replace(grid, batch=chunk_tokens(grid, isl, osl), context=np.full(n, float(isl)), mtp=np.zeros(n))


def evaluate_mixed(model, hw, grid: Grid, *, isl, osl, overlap=None, **kw):
    """Vectorized mixed-step values over a grid (the sweep's path) -> (values, notes).
    kw: evaluate_grid's keywords (cost_mode, comm, expert_skew, context_dist, profile_path, force_profile)."""
    isl, osl = _check(isl, osl)
    dec, n1 = evaluate_grid(model, hw, grid, phase=Phase.DECODE, overlap=overlap, **kw)
    pre, n2 = evaluate_grid(
        model, hw, prefill_grid(grid, isl, osl), phase=Phase.PREFILL, overlap=prefill_overlap(overlap), **kw
    )
    notes = list(dict.fromkeys(n1 + n2))
    return combine(dec.values, pre.values, grid, isl, osl, hw.gpus_per_node, pre.comm.value), notes


def _mixed_ops(decode_ops, prefill_ops) -> list[dict]:
    """The decode step's ops plus the prefill chunk's (named prefill:<op>), shares over both."""
    ops = [dict(o) for o in decode_ops] + [dict(o, name="prefill:" + o["name"]) for o in prefill_ops]
    tot = sum(o["time_s"] for o in ops) or 1.0
    for o in ops:
        o["share"] = o["time_s"] / tot
    return ops


def _mixed_memory(decode_memory: dict, vals: dict) -> dict:
    """The decode footprint with the mixed step's activations (the chunk's) and fit."""
    mem = dict(decode_memory)
    mem["activation_bytes"] = float(vals["activation_bytes"][0])
    mem["total_bytes"] = float(vals["total_bytes"][0])
    mem["fits"] = bool(vals["fits"][0])
    return mem


def estimate_mixed(model="deepseek-v3", hardware="h800", *, isl=None, osl=None, batch=None, context=None, mtp=0,
                   acceptance=0.8, overlap=None, set=None, **common) -> EstimateResult:  # fmt: skip
    """One aggregated (decode + chunked prefill) step -> EstimateResult with phase "mixed".
    context defaults to ISL + OSL / 2 (mean KV length over a request's decode). common: the
    deployment keywords of `estimate_step` (tp, dp, ep, moe_tp, redundant_experts, cost_mode, comm,
    expert_skew, context_dist, profile, force_profile), applied to both passes."""
    isl, osl = _check(isl, osl)
    if context is None:
        context = isl + osl / 2.0
    d = estimate_step(model, hardware, phase="decode", batch=batch, context=context, mtp=mtp, acceptance=acceptance,
                      overlap=overlap, set=set, **common)  # fmt: skip
    c = d.config
    g = Grid.single(**{a: c[a] for a in ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "acceptance")},
                    redundant=c["redundant_experts"])  # fmt: skip
    chunk = float(chunk_tokens(g, isl, osl)[0])
    p = estimate_step(d.model, d.hardware, phase="prefill", batch=chunk, context=isl,
                      overlap=prefill_overlap(overlap), **common)  # fmt: skip
    vals = combine(d.values, p.values, g, isl, osl, d.hardware.gpus_per_node, p.config["comm"])
    config = dict(c, phase="mixed", isl=isl, osl=osl, prefill_chunk_tokens=chunk, prefill_overlap=p.config["overlap"],
                  prefill_comm=p.config["comm"], set=list(set or []))  # fmt: skip
    notes = list(dict.fromkeys(d.notes + p.notes))
    notes.append(
        f"mixed: each step = decode {d.values['step_time_s'][0] * 1e3:.2f} ms + prefill chunk of "
        f"{chunk:,.0f} tokens/DP group {p.values['step_time_s'][0] * 1e3:.2f} ms "
        f"(ISL {isl:g}, OSL {osl:g}); TTFT {vals['ttft_s'][0] * 1e3:.1f} ms"
    )
    ops, mem = _mixed_ops(d.ops, p.ops), _mixed_memory(d.memory, vals)
    return EstimateResult(d.model, d.hardware, config, vals, ops, mem, notes)


__all__ = ["estimate_mixed", "evaluate_mixed", "combine", "chunk_tokens", "prefill_grid"]
