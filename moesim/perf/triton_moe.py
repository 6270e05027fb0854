"""Tile choice of the fused-MoE Triton kernel (vLLM / SGLang `fused_moe_kernel`, the kernel of the
`*_triton_*` moe tables): the engine's config, as data, and the programs it launches.

Source (facts, read from the engines' code; nothing copied):
* Config lookup, SGLang python/sglang/srt/layers/moe/fused_moe_triton/fused_moe_triton_config.py
  (try_get_optimal_moe_config) and vLLM model_executor/layers/fused_moe/fused_moe.py: a tuned JSON
  per (E = w2.shape[0], the rank's local experts; N = w2.shape[2], the expert's intermediate width
  per TP shard; device; dtype) whose batch-size key nearest to M (the tokens entering the layer) is
  used, else get_default_config. aiconfigurator's SGLang MoE collector (collector/sglang/,
  benchmark) makes the same choice itself and runs both GEMMs of the layer with it (override_config).
* get_default_config, unquantized (BF16) weights: BLOCK_SIZE_M 16, BLOCK_SIZE_N 32, BLOCK_SIZE_K 64
  when M <= E, else 64 / 64 / 32; FP8 with a [128, 128] weight block: 64 / 128 / 128 (BLOCK_N, K =
  the block shape).
* moe_align_block_size pads each expert's token list to a multiple of BLOCK_SIZE_M; the kernel's
  grid is ceil(padded / BLOCK_M) x ceil(N / BLOCK_N) programs (programs past the padded count exit
  at once); each program walks all of K (no split-K). Padded rows are masked loads: no bytes moved.

CONFIGS (triton_moe_configs.yaml): the tuned JSONs SGLang ships for NVIDIA_H200 (unquantized) at the measured tables' (E, N),
per M key (BLOCK_SIZE_M, BLOCK_SIZE_N), each with its file; every other (E, N, dtype) gets the
default rule. vLLM ships the same Mixtral H200 files (vllm/model_executor/layers/fused_moe/configs/
E=8,N=14336,device_name=NVIDIA_H200.json: the same values).
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import numpy as np

from moesim.errors import ConfigError

TRITON_FUSED_MOE = "triton_fused_moe"  # a moe entry's `tiling` (its model_keys): this module's tiles
# get_default_config (see module docstring): (BLOCK_SIZE_M, BLOCK_SIZE_N)
DEFAULT_SMALL_M = (16.0, 32.0)  # unquantized, M <= E
DEFAULT_LARGE_M = (64.0, 64.0)  # unquantized, M > E
DEFAULT_FP8_BLOCK = (64.0, 128.0)  # fp8_w8a8 with block_shape [128, 128]: BLOCK_N = block_shape[0]
CONFIGS = Path(__file__).with_name("triton_moe_configs.yaml")  # the engines' tuned H200 tiles (sourced there)


@cache
def tuned() -> tuple[np.ndarray, dict]:
    """(M keys, {(E local, N per shard, dtype): (BLOCK_SIZE_M per key, BLOCK_SIZE_N per key)}) of
    CONFIGS; a malformed file is one ConfigError naming the file and the field."""
    import yaml  # lazy: start-up time

    data = yaml.safe_load(CONFIGS.read_text())
    keys = np.asarray(data["keys"], float)
    out = {}
    for i, c in enumerate(data["configs"]):
        bm, bn = np.asarray(c["block_m"], float), np.asarray(c["block_n"], float)
        if bm.shape != keys.shape or bn.shape != keys.shape or (bm <= 0).any() or (bn <= 0).any():
            raise ConfigError(f"{CONFIGS}: configs[{i}]: block_m and block_n need one positive size per key")
        out[(float(c["experts"]), float(c["n"]), str(c["dtype"]))] = (bm, bn)
    return keys, out


def default_tiles(tokens, experts_local, dtype: str):
    """(BLOCK_SIZE_M, BLOCK_SIZE_N) of get_default_config for M = tokens and E = local experts."""
    m, e = np.broadcast_arrays(np.asarray(tokens, float), np.asarray(experts_local, float))
    if str(dtype).startswith("fp8"):
        return np.full(m.shape, DEFAULT_FP8_BLOCK[0]), np.full(m.shape, DEFAULT_FP8_BLOCK[1])
    small = m <= e
    bm = np.where(small, DEFAULT_SMALL_M[0], DEFAULT_LARGE_M[0])
    return bm, np.where(small, DEFAULT_SMALL_M[1], DEFAULT_LARGE_M[1])


def fused_moe_tiles(tokens, experts, ep, n, tp, dtype: str):
    """(BLOCK_SIZE_M, BLOCK_SIZE_N) the engine runs a layer's fused_moe_kernel with: the tuned entry (CONFIGS)
    for (experts / ep, n / tp, dtype) at the M key nearest to tokens, else the default rule."""
    t, e, nn = np.broadcast_arrays(
        np.asarray(tokens, float), np.asarray(experts, float) / np.asarray(ep, float), np.asarray(n, float) / tp
    )
    bm, bn = default_tiles(t, e, dtype)
    k, table = tuned()
    for (te, tn, td), (bms, bns) in table.items():
        hit = (e == te) & (nn == tn) & (td == dtype)
        if hit.any():
            j = np.argmin(np.abs(t[hit][:, None] - k[None, :]), axis=1)  # nearest key (first on a tie)
            bm, bn = bm.copy(), bn.copy()
            bm[hit], bn[hit] = bms[j], bns[j]
    return bm, bn


def fused_moe_ctas(m_per_group, n, groups, bm, bn, expected_tiles=None):
    """Programs of one fused_moe_kernel launch that do work: groups x M tiles x ceil(N / BLOCK_N),
    M tiles = ceil(m / BLOCK_M) of an even load (balanced tables), or `expected_tiles` per group
    (random counts: moesim.perf.efficiency.expected_tiles at this BLOCK_M)."""
    m = np.asarray(m_per_group, float)
    tiles = np.ceil(np.maximum(m, 1e-9) / bm - 1e-9) if expected_tiles is None else expected_tiles
    return np.asarray(groups, float) * np.maximum(tiles, 1.0) * np.ceil(np.asarray(n, float) / bn)
