"""One configuration in any phase: decode / prefill (`estimate.estimate_step`) or aggregated
serving, "mixed" (`serving.estimate_mixed`: a decode step plus its share of chunked prefill)."""

from __future__ import annotations

from moesim.engine.estimate import EstimateResult, estimate_step
from moesim.engine.serving import estimate_mixed
from moesim.enums import Phase


def estimate(model="deepseek-v3", hardware="h800", *, phase="decode", isl=None, osl=None, cuda_graphs=True,
             **kw) -> EstimateResult:  # fmt: skip
    """One configuration, per-op detail. Raises MoesimError subclasses on bad input.
    phase "mixed" (decode + chunked prefill in each step) needs isl and osl (tokens).
    Keywords: tp, dp, ep, moe_tp, batch, context, mtp, acceptance, redundant_experts, overlap,
    cost_mode, engine, comm, set, expert_skew, context_dist, profile, force_profile (see `estimate_step`)."""
    phase = Phase.parse(phase, "phase")
    if phase == Phase.MIXED:
        return estimate_mixed(model, hardware, isl=isl, osl=osl, **kw)
    return estimate_step(model, hardware, phase=phase, cuda_graphs=cuda_graphs, **kw)
