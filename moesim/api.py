"""The Python front door, mirroring the CLI (the work lives in the layers; here: types, units,
keyword checks):

import moesim
r = moesim.estimate("deepseek-v3", "h800", ep=144, dp=144, batch=88, context=4989, mtp=1)
r["tpot_s"]                                                          # s per output token (a float)
df = moesim.sweep("deepseek-v3", "h800", axes={"ep": [32, 144], "batch": [32, 64]})
r = moesim.estimate("deepseek-v3", "h200", ep=8, dp=8, engine="trtllm")   # that engine's profile
front = moesim.pareto(df)
w = moesim.closed_loop(16, 200, isl=1000, osl=200)                   # 16 clients, 200 requests
s = moesim.simulate("deepseek-v3", "h200", workload=w, tp=8, ep=8)   # s.summary["ttft_p90_s"]

Every public function takes the pricing settings (`moesim.engine.settings.Pricing`: cost_mode,
engine, profile, force_profile, cuda_graphs, comm, comm_sms, expert_skew, context_dist) as keywords
or as one ``pricing=Pricing.of(...)``; a keyword it does not take is an `UnknownKeywordError`
naming the function and the allowed keywords.
"""

from __future__ import annotations

import difflib
import functools
import inspect
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from moesim.analyses.pareto import pareto as _pareto
from moesim.analyses.plan import PlanResult
from moesim.analyses.plan import plan as _plan
from moesim.analyses.sweep import sweep as _sweep
from moesim.analyses.sweep_block import OPTION_FIELDS
from moesim.analyses.sweep_digest import DIGEST_FIELDS, SweepDigest
from moesim.balance.factors import check_imbalance_flags
from moesim.engine.estimate import MIXED_KEYWORDS, estimate_mixed
from moesim.engine.estimate import estimate as _estimate
from moesim.engine.pricing import evaluate_grid, load_profile_for, profile_info, resolve_specs
from moesim.engine.settings import FIELDS as PRICING_FIELDS
from moesim.engine.settings import Pricing
from moesim.engine.step import DEFAULTS, STEP_FIELDS, EstimateResult, estimate_step
from moesim.enums import Engine
from moesim.errors import ConfigError
from moesim.grid.layout import resolve_parallel
from moesim.simulate.clients import closed_loop, open_loop, read_trace
from moesim.simulate.core import SimResult
from moesim.simulate.core import simulate as _simulate
from moesim.simulate.options import allowed_keywords, options
from moesim.simulate.requests import Workload
from moesim.specs import HardwareSpec, ModelSpec
from moesim.specs import load_hardware as _load_hardware
from moesim.specs import load_model as _load_model

if TYPE_CHECKING:  # annotations only: pandas is imported when a sweep runs
    import pandas as pd

F = TypeVar("F", bound=Callable[..., Any])
ModelLike = str | Path | ModelSpec  # a catalog name, a YAML / HF config.json path, or a spec
HardwareLike = str | Path | HardwareSpec


class UnknownKeywordError(ConfigError, TypeError):
    """A keyword a public function does not take (a ConfigError, and the TypeError Python raises)."""


def _names(target) -> list[str]:
    """A callable's named parameters, or a sequence of names as is."""
    if not callable(target):
        return list(target)
    kinds = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return [p.name for p in inspect.signature(target).parameters.values() if p.kind not in kinds]


def unknown_keyword(name: str, unknown: Sequence[str], allowed: Sequence[str]) -> UnknownKeywordError:
    """The error for keywords `name` does not take: the closest allowed name, then all of them."""
    hints = [f"{k!r} (did you mean {m[0]!r}?)" if (m := difflib.get_close_matches(k, allowed, 1)) else repr(k)
             for k in unknown]  # fmt: skip
    return UnknownKeywordError(
        f"moesim.{name}: unknown keyword{'s' if len(unknown) > 1 else ''} {', '.join(hints)}; "
        f"allowed: {', '.join(allowed)}"
    )


def public(*targets) -> Callable[[F], F]:
    """Decorator of the front door's functions: keywords are checked before the call. Allowed: the
    function's own parameters and, where it takes **keywords, those of `targets` (callables or name
    lists) and the Pricing fields. `fn.keywords`: the allowed names."""

    def wrap(fn: F) -> F:
        params = inspect.signature(fn).parameters.values()
        allowed = _names(fn)
        if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in params):
            allowed += [n for t in targets for n in _names(t)] + list(PRICING_FIELDS)
        allowed = tuple(dict.fromkeys(allowed))

        @functools.wraps(fn)
        def checked(*args, **keywords):
            unknown = [k for k in keywords if k not in allowed]
            if unknown:
                raise unknown_keyword(fn.__name__, unknown, allowed)
            return fn(*args, **keywords)

        checked.keywords = allowed
        return checked  # type: ignore[return-value]

    return wrap


# ---------------------------------------------------------------------------------------------
# the public functions (each: keywords checked, then one call into the layers)


@public(STEP_FIELDS, MIXED_KEYWORDS, ("isl", "osl", "set"))
def estimate(model: ModelLike = "deepseek-v3", hardware: HardwareLike = "h800", *, phase: str = "decode",
             pricing: Pricing | None = None, **keywords: Any) -> EstimateResult:  # fmt: skip
    """One configuration, op by op -> EstimateResult; ``r["tpot_s"]`` is a float (s per output
    token), ``r.to_dict()`` the JSON of ``moesim estimate --json``.

    phase: "decode" | "prefill" | "mixed" (aggregated serving: needs isl and osl, tokens; takes
    chunk_tokens, prefill tokens per pass, and request_rate, requests/s). keywords: tp, dp, ep, moe_tp
    (the layout), batch (requests per DP group; prefill: tokens per DP group), context (tokens),
    mtp, acceptance (0..1), redundant_experts, overlap, set (spec what-ifs) and the pricing settings."""
    return _estimate(model, hardware, phase=phase, pricing=pricing, **keywords)


@public(OPTION_FIELDS, DIGEST_FIELDS, ("set", "study"))
def sweep(model: ModelLike | None = None, hardware: HardwareLike | Sequence[HardwareLike] | None = None,
          phase: str | Sequence[str] | None = None, axes: Mapping[str, Any] | None = None, *,
          pricing: Pricing | None = None, out: str | Path | None = None,
          **keywords: Any) -> pd.DataFrame | SweepDigest:  # fmt: skip
    """Every configuration of the axes' cartesian product -> a pandas DataFrame, one row each (SI
    units: s, bytes, tokens/s; see `moesim.analyses.sweep.sweep` for the axes, filters and study).
    keywords: filters, min_tokens_per_s_per_user, max_tpot_s, max_ttft_s (s), only_fits,
    keep_invalid, isl, osl (tokens), set, study, chunk_size, progress, require_valid, chunk_tokens,
    request_rate (requests/s), fill_defaults, total_gpus / gpus_per_node (a GPU budget) and the
    pricing settings the sweep takes.
    out: a .csv / .parquet / .json path: the rows are written there as ``moesim sweep --out PATH``
    writes them (.csv / .parquet streamed in bounded memory, up to 200 M rows) and a `SweepDigest`
    is returned instead (``.top``: the best `top` rows, default 20; ``.front``: the Pareto frontier
    when ``frontier=True`` or ``{"x": ..., "y": ..., "group_by": ...}``; ``.rows`` / ``.evaluated``:
    counts; ``.budget``; ``.notes``)."""
    return _sweep(model, hardware, phase, axes, pricing=pricing, out=out, **keywords)


@public()
def pareto(df: pd.DataFrame, x: str = "tokens_per_s_per_user", y: str = "tokens_per_s_per_gpu",
           group_by: str | Sequence[str] | None = None, only_feasible: bool = True) -> pd.DataFrame:  # fmt: skip
    """The rows of a sweep no other row beats on both `x` and `y` (higher is better; default:
    tokens/s per user against tokens/s per GPU), per `group_by` group; only_feasible: valid rows that fit."""
    return _pareto(df, x=x, y=y, group_by=group_by, only_feasible=only_feasible)


@public(("set", "verify"))
def plan(traffic: Any, model: ModelLike = "deepseek-v3", hardware: HardwareLike = "h800", cost_mode: str | None = None,
         *, pricing: Pricing | None = None, **keywords: Any) -> PlanResult:  # fmt: skip
    """Nodes, cost and economics for a traffic window (a Traffic, a mapping or a YAML path; its
    rates in requests/s, lengths in tokens) -> PlanResult (``.to_dict()``: the JSON of ``moesim plan``).
    keywords: set (spec what-ifs), verify (simulate one prefill unit) and the pricing settings."""
    return _plan(traffic, model, hardware, cost_mode, pricing=pricing, **keywords)


@public(allowed_keywords())
def simulate(model: ModelLike = "deepseek-v3", hardware: HardwareLike = "h800", *, workload: Workload,
             pricing: Pricing | None = None, set: Sequence[str] | None = None, seed: int = 0,
             progress: Callable[[int, int, float], None] | None = None, **keywords: Any) -> SimResult:  # fmt: skip
    """One deployment serving `workload` (`closed_loop`, `open_loop`, `read_trace`), step by step ->
    SimResult: ``.summary`` (TTFT, TPOT, ITL, E2E in s: mean, p50/p90/p99; tokens/s), ``.log``
    (per request), ``.to_dict()`` (the JSON of ``moesim simulate``). keywords: the layout (tp, dp,
    ep, moe_tp, mtp, acceptance, redundant_experts, overlap), serving (replicas, prefill,
    prefill_only, engine_profile, rules, prefix_cache, hit_ratio), slo_ttft_s / slo_tpot_s (s) and
    the pricing settings. seed: routing draws; progress(done, total, t_s)."""
    grouped = options(pricing, **keywords)
    return _simulate(model, hardware, workload=workload, set=set, seed=seed, progress=progress, **grouped)


@public()
def load_model(name_or_path: str | Path = "deepseek-v3", overrides: Mapping[str, object] | None = None) -> ModelSpec:
    """A model spec: a catalog name, a spec YAML or a Hugging Face config.json; overrides: field -> value."""
    return _load_model(name_or_path, overrides)


@public()
def load_hardware(name_or_path: str | Path = "h800", overrides: Mapping[str, object] | None = None) -> HardwareSpec:
    """A hardware spec: a catalog name or a spec YAML; overrides: field -> value."""
    return _load_hardware(name_or_path, overrides)


@public()
def load_profile(hardware: HardwareLike = "h800", engine: str = "sglang", profile: str | Path | None = None,
                 force_profile: bool = False) -> Any:  # fmt: skip
    """The calibration profile calibrated pricing reads for `hardware` under `engine` (the engine's
    profile, else the GPU's; `profile`: a file instead) -> the profile, or None where none exists."""
    hw = hardware if isinstance(hardware, HardwareSpec) else _load_hardware(hardware)
    pricing = Pricing.of(cost_mode="calibrated", engine=engine, profile=profile, force_profile=force_profile)
    return load_profile_for(hw, pricing)[0]


__all__ = [
    "DEFAULTS",
    "Engine",
    "EstimateResult",
    "Pricing",
    "PlanResult",
    "SimResult",
    "SweepDigest",
    "UnknownKeywordError",
    "Workload",
    "check_imbalance_flags",
    "closed_loop",
    "estimate",
    "estimate_mixed",
    "estimate_step",
    "evaluate_grid",
    "load_hardware",
    "load_model",
    "load_profile",
    "load_profile_for",
    "open_loop",
    "pareto",
    "plan",
    "profile_info",
    "public",
    "read_trace",
    "resolve_parallel",
    "resolve_specs",
    "simulate",
    "sweep",
]
