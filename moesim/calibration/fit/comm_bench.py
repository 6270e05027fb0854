"""What a benchmark harness adds around the DeepEP kernels it times: the facts a fit needs to read
the rows as kernel time (fit side only; the cost model prices the kernels, not the harness).

aiconfigurator's vLLM collector (collector/wideep/vllm/collect_moe_a2a.py, vLLM 0.24.0 ee0da84,
VllmBenchmarkAdapter.benchmark) times vLLM's own prepare / finalize with CUDA events, eagerly:

    sync; clean_low_latency_buffer; [start] prepare(x bf16, quant_config=None) [end]
    expert_output = expert_x.clone(); [start] finalize(...) [end]; sync

  * dispatch is BF16: FusedMoEQuantConfig.make(None) and use_fp8_dispatch=False (LL and HT), so a
    dispatched token is hidden x 2 bytes, not FP8 + scales (the SGLang tables run DeepEP's FP8
    dispatch);
  * the clone of the received activations is queued on the stream just before the combine's start
    event, so the GPU is still copying while the host runs finalize's Python: the host time the
    combine row shows shrinks by the copy's time. LL receives into DeepEP's padded layout
    [experts / ranks, ranks x max_tokens, hidden] (internode_ll.cu / Buffer.low_latency_dispatch:
    packed_recv_x; the collector's max_tokens = tokens), i.e. experts x tokens x hidden BF16 values;
    the normal (HT) kernels receive exactly the tokens sent to the rank (= the bytes a rank sends,
    symmetric routing). A copy reads and writes them once each, at most at the nominal HBM rate.

Collector glitches (every DeepEP table alike, `token_glitches`): a dispatch or combine moves more
bytes for more tokens and the host work of a call does not shrink with them, so at one setting
(hidden, top-k, experts, EP, GPUs per node, SMs) time is non-decreasing in tokens. A row more than
GLITCH_FACTOR slower than a row of the same setting and op with more tokens was timed in a disturbed
state (the H200 vLLM table: the first shape the collector runs, hidden 3072 in its case order
(backend, SMs, hidden, top-k, experts, tokens), reads 1.4-2.0x its own 256-512 token rows at 16-128
tokens, and one case reads 1.3x (dispatch) and 2.5x (combine)). The collector times dispatch and
combine of one case in the same rounds (collect_moe_a2a.py one_round; SGLang's the same), so the
case (both ops at that token count) leaves the fit, and the count goes into the entry's note.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BF16_BYTES = 2.0
# A row this much slower than a row of the same setting with more tokens is a glitch (module
# docstring). 1.25: the host floor's own spread is within +-7 % (H200 vLLM dispatch 241-275 us over
# 16-512 tokens, first shape aside), DeepEP's kernels within a few % (SGLang tables).
GLITCH_FACTOR = 1.25
GLITCH_RULE = f"a case with a row > {GLITCH_FACTOR}x a row of the same setting and op with more tokens"
SETTING = ["kernel", "backend", "mode", "hidden", "topk", "experts", "ep", "gpus_per_node", "sms"]
TEXT = ("kernel", "backend", "mode", "op")


def vllm_prepare_finalize(d: pd.DataFrame) -> np.ndarray:
    """Rows of the vLLM DeepEP collector (moe_a2a_perf rows of a vLLM table), as a bool array."""
    src = d["source"].astype(str).str.lower() if "source" in d else pd.Series("", index=d.index)
    lib = d["lib_versions"].astype(str).str.lower() if "lib_versions" in d else pd.Series("", index=d.index)
    return (src.str.contains("moe_a2a_perf") & lib.str.startswith("vllm")).to_numpy()


def bf16_dispatch(d: pd.DataFrame) -> np.ndarray:
    """Rows whose dispatch carries BF16 activations (the vLLM collector: quant_config None)."""
    return vllm_prepare_finalize(d)


def combine_queued_s(d: pd.DataFrame, mode: str, op: str, sent_bytes, hbm_Bps: float) -> np.ndarray:
    """GPU time (s) queued ahead of a combine row's start event: the vLLM collector's clone of the
    received activations, 2 x bytes / nominal HBM (module docstring); 0 for other rows and ops."""
    n = len(d)
    if op != "combine" or hbm_Bps <= 0 or n == 0:
        return np.zeros(n)
    col = lambda c: d[c].to_numpy(dtype=float)  # noqa: E731
    if mode == "deepep-ll":
        received = col("experts") * col("tokens") * col("hidden") * BF16_BYTES
    else:
        received = np.asarray(sent_bytes, float)
    return np.where(vllm_prepare_finalize(d), 2.0 * received / hbm_Bps, 0.0)


def _group_ids(d: pd.DataFrame, cols: list[str]) -> np.ndarray:
    """One id per distinct value tuple of `cols` (absent numbers: -1)."""
    x = pd.DataFrame(
        {c: d[c].astype(str) if c in TEXT else d[c].astype(float).fillna(-1.0) for c in cols if c in d}, index=d.index
    )
    return x.groupby(list(x.columns), sort=False, dropna=False).ngroup().to_numpy()


def token_glitches(d: pd.DataFrame, factor: float = GLITCH_FACTOR) -> np.ndarray:
    """Row mask of DeepEP rows `d` (both ops) in a glitched case: a row of the case more than
    `factor` slower than a row of the same setting and op with more tokens (module docstring)."""
    if d.empty:
        return np.zeros(0, bool)
    x = pd.DataFrame({"g": _group_ids(d, SETTING + ["op"]), "tokens": d.tokens.to_numpy(dtype=float)})
    x["t"] = d.time_s.to_numpy(dtype=float)
    per = x.groupby(["g", "tokens"], as_index=False).t.min().sort_values(["g", "tokens"], ascending=[True, False])
    per["after"] = per.groupby("g").t.cummin().groupby(per.g).shift(1)  # fastest row with more tokens
    after = x.merge(per[["g", "tokens", "after"]], on=["g", "tokens"], how="left")["after"].to_numpy()
    slow = x.t.to_numpy() > factor * after  # NaN (no row with more tokens): False
    case = _group_ids(d, SETTING + ["tokens"])
    return np.isin(case, case[slow])
