"""One MoE layer's two-stream timeline (compute and comm) for a single configuration."""

from __future__ import annotations

import numpy as np

from moesim import workload as W
from moesim.balance.factors import apply_factors, factors_for, imbalance_factors
from moesim.engine.evaluate import default_comm
from moesim.engine.pricing import evaluate_grid, load_profile_for, profile_info, resolve_specs
from moesim.engine.settings import Pricing
from moesim.engine.step import StepConfig
from moesim.enums import OpKind, Overlap, Phase, Stream
from moesim.errors import ConfigError
from moesim.grid.core import Grid
from moesim.grid.layout import resolve_parallel
from moesim.grid.validity import require_valid
from moesim.perf.cost import CostModel
from moesim.schedule.schemes import SCHEMES, layer_period, slot_label, slot_time
from moesim.specs.engine import load_engine_model


def layer_timeline(model="deepseek-v3", hardware="h800", *, phase="decode", set=None, pricing: Pricing | None = None,
                   **config) -> dict:  # fmt: skip
    """-> {"events": [...], "period_s": float, "scheme": str, "title": str}. Events: dicts with stream,
    micro_batch, label, start_s, end_s, ops (list of (name, time_s) inside compute slots).
    config: `StepConfig`'s fields (defaults here: tp 1, moe_tp 1, batch 64, context 4096);
    pricing: `Pricing` (default `Pricing()`: cost mode, engine, comm, expert skew, context distribution)."""
    c = StepConfig.of("layer_timeline", config)
    p = pricing if pricing is not None else Pricing()
    phase = Phase.parse(phase, "phase")
    m, h = resolve_specs(model, hardware, set)
    tp, dp, ep, moe_tp = resolve_parallel(m, _or(c.tp, 1), c.dp, c.ep, _or(c.moe_tp, 1))
    batch, context = _or(c.batch, 64), _or(c.context, 4096)
    grid = Grid.single(tp=tp, dp=dp, ep=ep, moe_tp=moe_tp, batch=batch, context=context,
                       mtp=0 if phase == Phase.PREFILL else c.mtp, acceptance=c.acceptance,
                       redundant=c.redundant_experts)  # fmt: skip
    require_valid(m, h, grid, phase)
    scheme_name = _scheme_name(m, h, grid, phase, c.overlap, p)
    scheme = SCHEMES[scheme_name]
    comm = p.comm or default_comm(phase)
    prof, notes = load_profile_for(h, p)
    imb, _ = imbalance_factors(m, h, grid, phase, p.expert_skew, p.context_dist, p.cost_mode.value)
    em = load_engine_model(p.engine)  # the MoE path the engine runs (moesim.specs.engine), as evaluate prices it
    comm = em.requested(comm, phase)
    path = em.moe_paths(comm, dp=grid.dp, ep=grid.ep, mnnvl=h.domain_gpus > h.gpus_per_node)
    f = factors_for(imb, scheme.micro_batches) if imb else {}
    wl = W.build(m, h, grid, phase, comm, micro_batches=scheme.micro_batches, path=path, load=f.get("experts"))
    costs = CostModel(h, m, p.cost_mode, prof).costs(wl.moe_layer if m.is_moe else wl.dense_layer)
    if imb:
        costs = apply_factors(costs, f, routed_in_work=True)
    trace: list = []
    period = float(np.ravel(layer_period(costs, scheme, trace=trace))[0])
    title = (
        f"{m.name} {h.name} {phase.value} TP{tp} DP{dp} EP{ep} batch {batch:g} ctx {context:g} · "
        f"{scheme_name} · {p.cost_mode.value} · {p.engine.value} · {comm.value} · layer {period * 1e6:.0f} µs"
    )
    return {
        "events": _events(trace, scheme, costs),
        "period_s": period,
        "scheme": scheme_name,
        "title": title,
        "notes": notes,
        **profile_info(prof, p.engine),
        "slot_compute_s": [float(np.ravel(slot_time(costs, s))[0]) for s in scheme.slots],
    }


def _or(v, default):
    return default if v is None else v


def _scheme_name(m, h, grid, phase, overlap, pricing: Pricing) -> str:
    """The schedule to draw: the requested one, or the one `moesim estimate` picks for "auto"."""
    if overlap in (None, "auto", Overlap.AUTO):
        # the schedule `moesim estimate` would pick for this configuration (fastest; never "ideal")
        ev, _ = evaluate_grid(m, h, grid, phase=phase, overlap="auto", pricing=pricing)
        scheme_name = ev.chosen
    else:
        scheme_name = Overlap.parse(overlap, "overlap").value
    if scheme_name in ("ideal", "auto"):
        raise ConfigError(f"overlap: timeline needs a concrete schedule; allowed: {', '.join(SCHEMES)}")
    if scheme_name == "five-stage" and phase == Phase.PREFILL:
        raise ConfigError(
            "overlap: five-stage is a decode schedule; allowed for prefill: serial, shared, sbo, two-batch"
        )
    return scheme_name


def _events(trace, scheme, costs) -> list:
    """Trace rows -> event dicts, times from the first event; compute slots list their ops."""
    events = []
    t0 = float(np.ravel(trace[0][3])[0]) if trace else 0.0
    for stream, mb, label, start, end in trace:
        ev = {
            "stream": stream,
            "micro_batch": mb,
            "label": label,
            "start_s": float(np.ravel(start)[0]) - t0,
            "end_s": float(np.ravel(end)[0]) - t0,
            "ops": [],
        }
        if stream == "compute":
            slot = next(s for s in scheme.slots if s.mb == mb and slot_label(s) == label)
            ev["ops"] = _slot_ops(slot, costs)
        events.append(ev)
    return events


def _slot_ops(slot, costs) -> list:
    """(name, time_s) of the ops a compute slot runs (its stages, only / skip; no all-to-all), > 0 s."""
    ops = []
    for c in costs:
        if slot.holds(c) and not (c.stream == Stream.COMM and c.kind == OpKind.ALL_TO_ALL):
            t = float(np.ravel(c.time_s)[0])
            if t > 0:
                ops.append((c.name, t))
    return ops
