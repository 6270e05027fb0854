"""The one evaluation path shared by estimate, sweep, pareto, plan and disagg (so they agree):
specs (catalog name or spec) + calibration profile (read once, cached) + rank-imbalance factors +
the vectorized `evaluate`, with configurations that differ only in acceptance priced once."""

from __future__ import annotations

import os

import numpy as np

from moesim.balance.factors import imbalance_factors, resolve_expert_skew
from moesim.engine.evaluate import evaluate
from moesim.engine.settings import Pricing
from moesim.enums import DEFAULT_ENGINE, CostMode, Engine, Phase
from moesim.errors import CalibrationError
from moesim.grid.core import Grid, distinct_rows, replace
from moesim.grid.validity import require_dtypes
from moesim.metrics.step import metrics
from moesim.perf.profile import load_profile
from moesim.perf.profile.reader import profile_path_for
from moesim.specs import load_hardware, load_model, parse_overrides
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import ModelSpec

COST_AXES = ("tp", "dp", "ep", "moe_tp", "batch", "context", "mtp", "redundant")  # all but acceptance

_PROFILE_CACHE: dict = {}


def resolve_specs(model, hardware, set_=None):
    """(ModelSpec, HardwareSpec) from specs or catalog names / paths, with `--set` what-ifs applied."""
    ov = parse_overrides([set_] if isinstance(set_, str) else set_)
    m = model if isinstance(model, ModelSpec) else load_model(model, ov["model"])
    h = hardware if isinstance(hardware, HardwareSpec) else load_hardware(hardware, ov["hardware"])
    return m, h


def load_profile_for(hw: HardwareSpec, pricing: Pricing | None = None):
    """-> (calibration profile or None, notes) for `pricing` (cost mode, engine, profile file,
    force_profile). Roofline mode reads no profile. The profile is `pricing.profile` if given, else
    the engine's (calibration/profiles/<gpu>.<engine>.yaml) where one exists, else the GPU's generic
    one (`moesim.perf.profile.reader.profile_path_for`); `profile_info` names the file used."""
    pricing = pricing if pricing is not None else Pricing()
    if pricing.cost_mode == CostMode.ROOFLINE:
        return None, []
    prof = _cached_profile(hw, pricing.profile, pricing.force_profile, pricing.engine)
    if prof is None:
        return None, [
            f"no calibration profile for {hw.name}: kernels use peak efficiencies (roofline) plus launch overhead"
        ]
    return prof, []


def profile_info(prof, engine=DEFAULT_ENGINE) -> dict:
    """What outputs record about the pricing: the engine asked for and the profile file used (None
    in roofline mode or without a profile for the GPU)."""
    return {"engine": Engine.parse(engine, "engine").value, "profile": prof.file_label() if prof is not None else None}


def _cached_profile(hw, path, force, engine):
    """Profiles are read once per (file, mtime, hardware): sweeps call this many times."""
    p = path or profile_path_for(hw.name, engine)
    if p is None:
        return None
    try:
        mtime = os.stat(p).st_mtime_ns
    except OSError:
        mtime = None
    key = (str(p), mtime, repr(hw), bool(force))
    if key not in _PROFILE_CACHE:
        if len(_PROFILE_CACHE) > 32:
            _PROFILE_CACHE.clear()
        try:
            _PROFILE_CACHE[key] = load_profile(hw, path=p, force=force)
        except OSError as e:
            raise CalibrationError(f"profile {p}: cannot read ({e.strerror or e.__class__.__name__})") from None
        except (AttributeError, KeyError, TypeError, ValueError) as e:  # structure the reader does not check
            raise CalibrationError(
                f"profile {p}: malformed ({e.__class__.__name__}: {e}); regenerate it with `moesim calibrate fit`"
            ) from None
    return _PROFILE_CACHE[key]


def _imbalance(model, hw, grid, phase, pricing: Pricing, chunk):
    """Rank-imbalance factors; with a fused prefill chunk the experts receive the decode and the
    chunk's tokens (the routed load of the slowest rank is drawn from all of them), the DP attention
    imbalance stays the decode requests'."""
    expert_skew, cost_mode = pricing.expert_skew, pricing.cost_mode.value
    imb, notes = imbalance_factors(model, hw, grid, phase, expert_skew, pricing.context_dist, cost_mode)
    if chunk is None or not imb or "experts" not in imb:
        return imb, notes
    moe_tokens = np.asarray(chunk[2] if len(chunk) > 2 else chunk[0], float)
    all_tokens = replace(grid, batch=grid.batch + moe_tokens / grid.q_len)
    # the pass routes prompt tokens: "auto" means what it means for a prefill pass (the published
    # routing skew where there is one), so a fused chunk costs what the same tokens cost in prefill
    skew = resolve_expert_skew(model, Phase.PREFILL, expert_skew, cost_mode)
    imb2, notes2 = imbalance_factors(model, hw, all_tokens, phase, skew, "fixed", cost_mode)
    return {**imb, **{k: v for k, v in imb2.items() if k.startswith("experts")}}, notes2 + notes[len(notes2) :]


def _dedupe(grid: Grid):
    """Rows that differ only in acceptance share every op cost (acceptance enters the metrics only)."""
    if np.ptp(grid.acceptance) == 0:
        return None
    return distinct_rows(grid, COST_AXES, max_share=0.75, min_size=256)


def evaluate_grid(model: ModelSpec, hw: HardwareSpec, grid: Grid, *, phase="decode", overlap=None,
                  pricing: Pricing | None = None, chunk=None):  # fmt: skip
    """Every configuration of `grid` -> (Evaluation, notes), priced by `pricing` (default: `Pricing()`;
    its engine picks the profile, `load_profile_for`).
    chunk: (prefill tokens per DP group, prompt length[, mean prefill tokens through the experts])
    fused into each decode pass (`moesim.workload.build`)."""
    pricing = pricing if pricing is not None else Pricing()
    require_dtypes(model, hw)
    prof, notes = load_profile_for(hw, pricing)
    imb, imb_notes = _imbalance(model, hw, grid, phase, pricing, chunk)
    run = dict(phase=phase, overlap=overlap, pricing=pricing, profile=prof, chunk=chunk)
    dd = _dedupe(grid) if chunk is None else None
    if dd is None:
        ev = evaluate(model, hw, grid, imbalance=imb, **run)
        ev.pricing, ev.imbalance = profile_info(prof, pricing.engine), imb or {}
        return ev, notes + imb_notes + ev.notes
    # configurations that differ only in acceptance share every op cost: evaluate each distinct
    # cost-relevant row once, then expand and recompute the acceptance-dependent metrics
    first, inverse = dd
    sub_imb = {k: np.broadcast_to(v, (grid.size,))[first] for k, v in imb.items()} if imb else imb
    ev = evaluate(model, hw, grid.take(first), imbalance=sub_imb, **run)
    vals = {k: np.asarray(v)[inverse] for k, v in ev.values.items()}
    peak = hw.peak_flops(model.precision.weight_dtype)
    vals.update(metrics(grid, phase, vals["step_time_s"], vals["flops_per_step"], peak, hw.gpus_per_node))
    ev.grid, ev.values, ev.pricing = grid, vals, profile_info(prof, pricing.engine)
    ev.imbalance = imb or {}
    return ev, notes + imb_notes + ev.notes
