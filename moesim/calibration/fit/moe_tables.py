"""What the measured fused-MoE tables (aiconfigurator moe_perf) ran beyond the layer's expert GEMMs,
per backend, and which of their rows are not the kernel's cost. Read by the waves_v1 fit
(moesim.calibration.fit.gemm) through routing_keys (extra shape keys of moesim.perf.profile.work)
and dominated (rows dropped, with a note).

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
  (moesim.perf.profile.grouped_router): vLLM's and SGLang's rows of DeepSeek-V3 dims (GROUPED_ROUTER).
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
  ep_gather): CONTIGUOUS_PASSES, the packed routing and the host floor (HOST_TIMED), below.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from moesim.perf.triton_moe import TRITON_FUSED_MOE

FINALIZE_BYTES = 2.0  # finalizeMoeRouting: one BF16 output row per token
NOOP_COPY_BYTES = 4.0  # vLLM TopKWeightAndReduceNoOP: output.copy_ (BF16 read + write)
TOKEN_BYTES = {
    "moe_torch_flow_cutlass": FINALIZE_BYTES,
    "moe_torch_flow_nongated": FINALIZE_BYTES,
    "deepgemm": FINALIZE_BYTES,  # TRT-LLM's DeepGEMM MoE backend (B200 / GB200): the same finalize
    "sglang_flashinfer_cutlass_moe": FINALIZE_BYTES,  # FlashInfer cutlass_fused_moe, output in place
    "sglang_flashinfer_trtllm_moe": FINALIZE_BYTES,  # FlashInfer TRT-LLM-gen MoE: its finalize
    "vllm_fp8moe_flashinfer_cutlass_flashinferexperts": FINALIZE_BYTES + NOOP_COPY_BYTES,
    "vllm_unquantizedfusedmoe_flashinfer_cutlass_flashinferexperts": FINALIZE_BYTES + NOOP_COPY_BYTES,
    # TrtLlmFp8ExpertsModular also returns through TopKWeightAndReduceNoOP; the monolithic and BF16
    # TRT-LLM-gen experts: the kernel's finalize alone
    "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular": FINALIZE_BYTES + NOOP_COPY_BYTES,
    "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic": FINALIZE_BYTES,
    "vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts": FINALIZE_BYTES,
}
# TensorRT-LLM trtllmGenKernels/blockScaleMoe/DevKernel.cu activation::run / activationDeepSeekKernel (the
# expanded-space path; its source notes the -1 slots still run the BlockReduce, ep_size-fold CTA inflation)
EXPANDED_ACT = frozenset(
    {
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular",
        "sglang_flashinfer_trtllm_moe",  # its fp8_block rows (the BF16 kernel fuses the activation)
    }
)
ACT_ITER_PARAM = "act_iter_ns"  # SM time per (128-element block, token group, pick) iteration, fitted
ACT_ITER_BOUNDS = (20.0, 0.0, 1e5)  # start, lo, hi (ns)
DOMINATED_FACTOR = 1.5  # beyond the x1.3-1.5 a tile or wave step adds (issue 14 sec. 3)
# aiconfigurator's vLLM collector routes a model with a group-limited router through it on the balanced
# logits (the rows' EP scaling shows it, moesim.perf.profile.grouped_router): H200 FlashInfer CUTLASS
# (EP 2..256 at 16384 tokens 8.07 : 5.90 : 4.79 : 4.15 : 3.97 : 3.74 : 1.95 : 1; model 8 : 6 : 5 : 4.5 :
# 4.25 : 4 : 2 : 1), H200 Triton at EP 1 (half the experts touched: measured 0.53x the balanced price
# from 16 to 512 tokens) and B200 / GB200 TRT-LLM-gen monolithic (routes inside on the logits; EP
# 2..256 at 8192 tokens 4.7 : 3.6 : 3.1 : 2.8 : 2.7 : 2.6 : 1.5 : 1, the same hot rank 0); SGLang's
# Triton rows too (EP 1 = EP 2 at every token count for DeepSeek-V3 only: all 8 picks on experts < 128;
# EP 2..256 at 16384 tokens 1 : 0.78 : 0.66 : 0.63 : 0.58 : 0.56 : 0.33 : 0.22, model 1 : 0.75 : 0.63 :
# 0.56 : 0.53 : 0.5 : 0.25 : 0.13 plus the zero-written rows of all tokens). TRT-LLM's rows show none
# of it (DeepSeek-V3 halves with EP like its neighbours): plain top-k.
GROUPED_ROUTER = frozenset(
    {
        "vllm_fp8moe_flashinfer_cutlass_flashinferexperts",
        "vllm_fp8moe_triton_tritonexperts",
        "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic",
        "sglang_fused_moe_triton",
        "sglang_flashinfer_trtllm_moe",  # FlashInfer TRT-LLM-gen routes inside too: B200 EP 1 = EP 2 (12260, 12270 us)
    }
)
# (hidden, moe inter, experts, topk) -> (n_group, topk_group): DeepSeek-V3 / R1 (HF config.json)
GROUPED_MODELS = {(7168.0, 2048.0, 256.0, 8.0): (8.0, 4.0)}
# Table segments collected by aiconfigurator's newer SGLang collector (collector/sglang/collect_moe.py
# build_rank0_workloads for moe_ep_size > 1: EP rank 0's tokens, remote picks clamped to expert 0 and
# computed: routing rank0_clamped, moesim.perf.profile.work) inside an expert_map table, by layer dims.
# aiconfigurator-core 0.12.0 systems/data/h200_sxm/moe/sglang/0.5.14/collection_meta.yaml: "appended
# 3564 Nemotron-3-Super-120B-A12B moe rows (hidden=1024, inter=2688, 512x22 experts; recollection
# campaign on stock 0.5.14, AIC revision 1982d8d4)"; the rows show it (EP 2..16 at 16384 tokens
# 0.97 : 0.96 : 0.95 : 0.94 of EP 1, EP 32 0.65: the clamped workload's 1 : 1 : 1 : 1, 0.67).
# Keyed by (backend, gpu): a segment is one system's collection.
RANK0_SEGMENTS = {("sglang_fused_moe_triton", "h200"): frozenset({(1024.0, 2688.0, 512.0, 22.0)})}


# SGLang's DeepEP-normal contiguous MoE (moe_runner/deep_gemm.py pre_permute_deepep_normal_to_deep_gemm,
# _run_contiguous_gemm, post_permute_deep_gemm_to_deepep_normal; ep_moe/kernels.py ep_scatter /
# ep_gather), per received token (token_bytes, per hidden element): ep_scatter loads every token's FP8
# row before testing its picks (1), ep_gather writes every token's BF16 output row (2); per pair
# (pair_bytes, per hidden element): ep_scatter writes the pair's FP8 row (1), ep_gather reads its BF16
# down output (2); per pair and intermediate element (act_bytes): silu_and_mul reads 2 x BF16 and writes
# BF16 (4 + 2), sglang_per_token_group_quant_fp8 reads it and writes FP8 (2 + 1). FP8 scales (1/128) left out.
CONTIGUOUS_PASSES = {"token_bytes": 3.0, "pair_bytes": 3.0, "act_bytes": 9.0}
PASSES = {("deepepmoe", "contiguous"): CONTIGUOUS_PASSES}
# aiconfigurator's wideep context-MoE collector (collector/sglang/collect_wideep_deepep_moe.py) passes
# unaligned even counts (routing "packed", moesim.perf.profile.work.packed_touched) and times
# run_moe_core between a CUDA event recorded after a synchronize and one recorded after the next
# synchronize, under torch.profiler(with_stack=True): the host-side time of the call (Python, launches,
# the profiler's op records) is in the row and the GPU work overlaps it, t = max(host, GPU): a fitted
# host_us (the flat ~380 us floor of the H200 table up to ~512 tokens per rank at every EP)
HOST_TIMED = frozenset({("deepepmoe", "contiguous")})

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


def routing_keys(d: pd.DataFrame, shape: dict) -> dict:
    """Extra moe shape keys of rows `d` (one backend): pass bytes, routing, n_group / topk_group."""
    backends = set(d.backend) if len(d) else set()
    out = pass_keys(d)
    if host_timed(d):
        out["routing"] = "packed"
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
