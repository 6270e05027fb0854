"""The Python front door, mirroring the CLI (re-exports only; the work lives in the layers):

import moesim
r = moesim.estimate("deepseek-v3", "h800", ep=144, dp=144, batch=88, context=4989, mtp=1)
df = moesim.sweep("deepseek-v3", "h800", axes={"ep": [32, 144], "batch": [32, 64]})
r = moesim.estimate("deepseek-v3", "h200", ep=8, dp=8, engine="trtllm")   # that engine's profile
front = moesim.pareto(df)
"""

from __future__ import annotations

from moesim.analyses.pareto import pareto
from moesim.analyses.plan import plan
from moesim.analyses.sweep import sweep
from moesim.balance.factors import check_imbalance_flags
from moesim.engine.estimate import DEFAULTS, EstimateResult, estimate_step
from moesim.engine.phases import estimate, estimate_mixed
from moesim.engine.pricing import evaluate_grid, load_profile_for, profile_info, resolve_specs
from moesim.enums import Engine
from moesim.grid.layout import resolve_parallel
from moesim.specs import load_hardware, load_model

__all__ = [
    "DEFAULTS",
    "Engine",
    "EstimateResult",
    "check_imbalance_flags",
    "estimate",
    "estimate_mixed",
    "estimate_step",
    "evaluate_grid",
    "load_hardware",
    "load_model",
    "load_profile_for",
    "pareto",
    "plan",
    "profile_info",
    "resolve_parallel",
    "resolve_specs",
    "sweep",
]
