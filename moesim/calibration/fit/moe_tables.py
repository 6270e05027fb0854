"""What the measured fused-MoE tables (aiconfigurator moe_perf) ran beyond the layer's expert GEMMs,
per backend, and which of their rows are not the kernel's cost. Read by the waves_v1 fit
(moesim.calibration.fit.gemm) through routing / routing_keys (the collector's routing and descriptors,
turned into work columns by moesim.calibration.fit.moe_work) and dominated (rows dropped, with a note).
The per-backend facts (TOKEN_BYTES, EXPANDED_ACT, GROUPED_ROUTER, EXPERT_MAP, RANK0_SEGMENTS, PASSES,
HOST_TIMED) are data: moesim/calibration/collector_facts.yaml, each with its source.

* token_bytes: passes over EVERY token entering the layer, whether or not it has a pick on the
  timed rank (moesim.perf.profile.work.token_pass_bytes). The TRT-LLM MoE runners (TRT-LLM's
  torch-flow CutlassFusedMoE / DeepGEMM backend, FlashInfer's cutlass_fused_moe and TRT-LLM-gen MoE,
  which are those runners) end in finalizeMoeRouting, one block per token that sums the token's local rows and writes its BF16
  output row (zero when none is local): 2 bytes per token and hidden element. vLLM's FlashInferExperts
  returns through TopKWeightAndReduceNoOP, which copies the experts' output into the layer output
  (output.copy_: read + write BF16, 4 more); its FP8 block path takes BF16 input and quantizes inside
  the kernel per expanded row (expects_unquantized_inputs), so no per-token quant pass.
* dominated rows: on a rank that computes its share of the layer (balanced routing), raising EP or
  TP never adds work (fewer local experts or pairs, narrower experts); a row more than
  DOMINATED_FACTOR slower than a row of the same layer and token count with no more EP and TP ran a
  worse kernel configuration than the engine's (TRT-LLM's H200 BF16 CUTLASS table: whole (EP, TP)
  settings at 3-6x, e.g. 5120/8192, 16 experts, top-1: EP 1 TP 2 3.4 ms where EP 1 TP 1 takes
  0.95 ms at 16 tokens, and 1.5 ms at 2048 tokens). Such rows are dropped with a note, since the
  model prices the kernel's cost, not a mis-tuned run.
* n_group / topk_group: rows whose collector routes through the model's group-limited router
  (moesim.calibration.grouped_router): vLLM's and SGLang's rows of DeepSeek-V3 dims (GROUPED_ROUTER).
* expanded_act: FlashInfer's TRT-LLM-gen FP8 block-scale MoE (vLLM's TrtLlmFp8Experts*) runs SwiGLU + the
  FP8 block requant as its own kernel over the EXPANDED (token, pick) space, skipping non-local picks
  only after a per-slot index load and an unconditional 128-thread BlockReduce (moesim.perf.profile.work.
  expanded_act_iters; fitted SM time per iteration ACT_ITER_PARAM): a cost in T x topk x inter / 128 at
  every EP. The tables show it: each layer's time at 16384 tokens is a + b / ep (EP 1..256), and a, the
  EP-free part, is 3.3-4.7 ps per token, pick and intermediate element over ten layers (hidden 2048-7168),
  while the BF16 TRT-LLM-gen rows (activation fused in the GEMM) keep none of it (3072 x 1024, 256 experts:
  FP8 3474 -> 562 us, BF16 2820 -> 126 us from EP 1 to EP 256).
* DeepEP normal's contiguous layout (SGLang DeepEPMoE, moe_runner/deep_gemm.py: ep_scatter, DeepGEMM
  m-grouped contiguous up GEMM, silu_and_mul, per-token-group FP8 quant, contiguous down GEMM,
  ep_gather): PASSES, the packed routing and the host floor (HOST_TIMED).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.calibration.collectors import (
    EXPANDED_ACT,
    FINALIZE_BYTES,
    GROUPED_MODELS,
    GROUPED_ROUTER,
    HOST_TIMED,
    NOOP_COPY_BYTES,
    PASSES,
    RANK0_SEGMENTS,
    TOKEN_BYTES,
)
from moesim.calibration.collectors import EXPERT_MAP as EXPERT_MAP_BACKENDS
from moesim.calibration.fit import moe_work as MW
from moesim.perf.triton_moe import TRITON_FUSED_MOE

ACT_ITER_PARAM = "act_iter_ns"  # SM time per (128-element block, token group, pick) iteration, fitted
# (its start and bounds: moesim.perf.models.waves_v1.FIT_EXTRA)
DOMINATED_FACTOR = 1.5  # beyond the x1.3-1.5 a tile or wave step adds (issue 14 sec. 3)
CONTIGUOUS_PASSES = PASSES[("deepepmoe", "contiguous")]  # SGLang's DeepEP-normal contiguous MoE
__all__ = ["EXPANDED_ACT", "FINALIZE_BYTES", "GROUPED_MODELS", "NOOP_COPY_BYTES", "TOKEN_BYTES"]  # re-exported facts


# moe tables priced with the Triton fused_moe_kernel's own tiles (tiling "triton_fused_moe",
# moesim.perf.triton_moe): the engine and dtype whose tuned H200 configs triton_moe_configs.yaml transcribes
# (SGLang, unquantized). vLLM's Triton rows (its own tuned files) and the FP8-block ones (tuned
# block-shape files for DeepSeek-like layers, not transcribed) keep the DeepGEMM-like tiling: the
# default rule alone moved them the wrong way (10-fold p90 SGLang FP8 12.4 -> 14.1, vLLM BF16 16.5 -> 18.0).
TRITON_TILED = frozenset({"sglang_fused_moe_triton"})
TRITON_TILED_DTYPES = frozenset({"bf16"})


def tiling_keys(d: pd.DataFrame, dtype: str, sm_generation: int = 9) -> dict:
    """The `tiling` model key of moe rows `d` (one backend and dtype) measured on a GPU of SM
    generation `sm_generation`: the Triton kernel's own tiles for TRITON_TILED tables on Hopper (the
    tuned files of triton_moe_configs.yaml are H200's; B200 / GB200 rows keep the prior tiling), else none
    (the DeepGEMM-like tiling of moesim.perf.efficiency)."""
    hopper = sm_generation == 9
    if hopper and len(d) and set(d.backend) <= TRITON_TILED and dtype in TRITON_TILED_DTYPES:
        return {"tiling": TRITON_FUSED_MOE}
    return {}


def _group(d: pd.DataFrame) -> tuple:
    """(backend, layout) of rows `d` when they are one group, else ()."""
    if not len(d):
        return ()
    lay = set(d["layout"].fillna("fused")) if "layout" in d else {"fused"}
    backends = set(d.backend)
    return (next(iter(backends)), next(iter(lay))) if len(backends) == 1 and len(lay) == 1 else ()


def pass_keys(d: pd.DataFrame) -> dict:
    """Byte keys of the passes beyond the GEMMs of rows `d` (one group): PASSES, else TOKEN_BYTES."""
    g = _group(d)
    if g in PASSES:
        return dict(PASSES[g])
    out = {"token_bytes": TOKEN_BYTES[g[0]]} if g and g[0] in TOKEN_BYTES else {}
    return {**out, "expanded_act": 1.0} if expanded_act(d) else out


def expanded_act(d: pd.DataFrame) -> bool:
    """True when rows `d` (one group) ran the expanded-space FP8 activation (EXPANDED_ACT, FP8 block rows)."""
    g = _group(d)
    return bool(g) and g[0] in EXPANDED_ACT and set(d["dtype"].astype(str)) == {"fp8_block"}


def extra_params(d: pd.DataFrame, host_name: str) -> tuple:
    """Names of the fitted params rows `d` (one group) add to waves_v1's: the host floor (HOST_TIMED),
    the expanded-space activation's per-iteration time (EXPANDED_ACT)."""
    return ((host_name,) if host_timed(d) else ()) + ((ACT_ITER_PARAM,) if expanded_act(d) else ())


def host_timed(d: pd.DataFrame) -> bool:
    """True when rows `d` (one group) were timed with the call's host time in them (HOST_TIMED)."""
    return _group(d) in HOST_TIMED


def routing(d: pd.DataFrame) -> str:
    """The routing the collector ran for moe rows `d` (one group; moesim.calibration.fit.moe_work):
    packed (HOST_TIMED), expert_map (every backend in collectors.EXPERT_MAP), else balanced."""
    if host_timed(d):
        return MW.PACKED_ROUTING
    return MW.EXPERT_MAP_ROUTING if len(d) and set(d.backend) <= EXPERT_MAP_BACKENDS else MW.BALANCED_ROUTING


def routing_keys(d: pd.DataFrame, shape: dict) -> dict:
    """Extra moe shape keys of rows `d` (one backend): pass bytes and the collector's descriptors of
    uneven rows (n_group / topk_group, rank0) that moe_work.work_columns turns into work columns."""
    backends = set(d.backend) if len(d) else set()
    out = pass_keys(d)
    if backends and backends <= GROUPED_ROUTER:
        out.update(router_groups(shape))
    gpus = set(d["gpu"].astype(str)) if "gpu" in d and len(d) else set()
    key = (next(iter(backends)), next(iter(gpus))) if len(backends) == len(gpus) == 1 else None
    if key in RANK0_SEGMENTS:
        out["rank0"] = rank0_rows(shape, RANK0_SEGMENTS[key])
    return out


def rank0_segment(d: pd.DataFrame) -> np.ndarray:
    """Row mask of moe rows `d` (one backend) in a RANK0_SEGMENTS segment (the fit's note)."""
    if not len(d) or "gpu" not in d:
        return np.zeros(len(d), bool)
    key = (str(d.backend.iloc[0]), str(d.gpu.iloc[0]))
    if key not in RANK0_SEGMENTS or d.backend.nunique() != 1 or d.gpu.nunique() != 1:
        return np.zeros(len(d), bool)
    shape = {c: d[c].astype(float).values for c in ("tokens", "hidden", "n", "experts", "topk")}
    shape["ep"] = d["ep"].astype(float).fillna(1.0).values if "ep" in d else np.ones(len(d))
    return rank0_rows(shape, RANK0_SEGMENTS[key]) > 0.0


def rank0_rows(shape: dict, dims: frozenset) -> np.ndarray:
    """1.0 on the EP > 1 rows whose (hidden, n, experts, topk) is one of `dims` (RANK0_SEGMENTS), else 0."""
    cols = [np.asarray(shape[c], float) for c in ("hidden", "n", "experts", "topk")]
    hit = np.zeros(len(shape["tokens"]), bool)
    for dim in dims:
        hit |= np.all([c == v for c, v in zip(cols, dim)], axis=0)
    return (hit & (np.asarray(shape["ep"], float) > 1.0)).astype(float)


def router_groups(shape: dict) -> dict:
    """n_group / topk_group per row: GROUPED_MODELS' by the row's dims, 1 / 1 (plain top-k) otherwise."""
    ng, tg = np.ones(len(shape["tokens"])), np.ones(len(shape["tokens"]))
    for dims, (g, k) in GROUPED_MODELS.items():
        hit = np.all([shape[c] == v for c, v in zip(("hidden", "n", "experts", "topk"), dims)], axis=0)
        ng, tg = np.where(hit, g, ng), np.where(hit, k, tg)
    return {"n_group": ng, "topk_group": tg}


def dominated(d: pd.DataFrame, factor: float = DOMINATED_FACTOR) -> np.ndarray:
    """Row mask of `d` (one balanced-routing backend and dtype): rows more than `factor` slower
    than a row of the same layer dims and token count with ep and tp no larger (module docstring)."""
    keys = ["hidden", "n", "experts", "topk", "tokens"]
    x = (
        d[keys]
        .astype(float)
        .assign(
            ep=d["ep"].astype(float).fillna(1.0) if "ep" in d else 1.0,
            tp=d["tp"].astype(float).fillna(1.0) if "tp" in d else 1.0,
            t=d["time_s"].astype(float).values,
            row=np.arange(len(d)),
        )
    )
    m = x.merge(x, on=keys, suffixes=("", "_o"))
    less = (m.ep_o <= m.ep) & (m.tp_o <= m.tp) & (m.row_o != m.row) & (m.t > factor * m.t_o)
    out = np.zeros(len(d), bool)
    out[m.row[less].values] = True
    return out


def fit_rows(g: pd.DataFrame, label: str, routed: frozenset, notes: list) -> pd.DataFrame:
    """Rows of one moe (layout, dtype, backend) group to fit: dominated rows of a fused layer dropped
    (with a note) unless the backend's collector routes unevenly (`routed`: rank-0 or expert-map
    workloads)."""
    seg = rank0_segment(g)
    if seg.any():
        notes.append(f"moe {label}: {int(seg.sum())} EP > 1 rows of a rank-0 collector segment priced as rank0_clamped")
    if not len(g) or set(g.backend) & routed or set(g.get("layout", ["fused"])) != {"fused"}:
        return g  # DeepEP layouts (masked / contiguous) time a rank's own received tokens
    bad = dominated(g)
    if bad.any():
        notes.append(
            f"moe {label}: {int(bad.sum())} rows > {DOMINATED_FACTOR}x slower than the same layer with no more EP / TP: dropped"
        )
    return g[~bad]
