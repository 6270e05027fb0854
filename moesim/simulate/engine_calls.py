"""The simulator's one door into the engine layer (issue 28): every call simulate makes into
`moesim.engine` goes through this module, and the `Pricing` settings become the engine's keywords
here as one `pricing=`.

* `estimate_pass`: one pass of a deployment, its layout checked (`moesim.engine.step.estimate_step`);
* `price_passes`: a grid of pass shapes (`moesim.engine.pricing.evaluate_grid`);
* `default_comm`, `prefill_overlap`, `resolve_specs`: the engine's defaults and spec resolution.
"""

from __future__ import annotations

from moesim.engine.evaluate import default_comm
from moesim.engine.pricing import evaluate_grid, resolve_specs
from moesim.engine.serving import prefill_overlap
from moesim.engine.settings import Pricing
from moesim.engine.step import EstimateResult, estimate_step


def estimate_pass(model, hardware, pricing: Pricing, **step) -> EstimateResult:
    """One decode or prefill pass of a deployment (`step`: phase, batch, context and the layout:
    tp, dp, ep, moe_tp, mtp, acceptance, redundant_experts, overlap)."""
    return estimate_step(model, hardware, pricing=pricing, **step)


def price_passes(model, hw, grid, pricing: Pricing, *, phase, overlap, chunk=None):
    """Every pass shape of `grid` priced -> the engine's Evaluation (`values["step_time_s"]`: s)."""
    ev, _ = evaluate_grid(model, hw, grid, phase=phase, overlap=overlap, chunk=chunk, pricing=pricing)
    return ev


__all__ = ["default_comm", "estimate_pass", "prefill_overlap", "price_passes", "resolve_specs"]
