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
"""

from __future__ import annotations

import numpy as np
import pandas as pd

BF16_BYTES = 2.0


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
