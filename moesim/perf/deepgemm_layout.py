"""DeepGEMM's SM90 layout choice for a normal (non-grouped) FP8 block-scaled GEMM: the block sizes,
the TMA multicast cluster and the waves the kernel runs, as the library picks them.

Source: deep_gemm csrc/jit_kernels/heuristics/sm90.hpp (SM90ArchSpec: get_layout_candidates,
get_storage_config, get_pipeline_config, get_layout_info, compare), the 1D2D FP8 kernel that
`fp8_gemm_nt` / `gemm_nt_f8f8bf16` runs with BF16 output. Unlike the older wave-count rule
(efficiency.gemm_tiling: fewest waves, then the fullest last wave), this version ranks every legal
candidate by its modelled L1 / L2 cycles divided by the wave efficiency, and pairs SMs into
clusters of 2 (TMA multicast of one operand) when the kernel runs more than one wave. The measured
SGLang 0.5.14 tables follow it: e.g. m 1537, n 2048 runs two multicast waves of 128 x 112 tiles
(fast), m 1536 one wave of 128 x 192 tiles.

Everything is vectorized over rows x candidates (numpy); nothing here is fitted.
"""

from __future__ import annotations

import numpy as np

from moesim.grid.core import unique_rows

SMEM_B = 232448  # SM90ArchSpec::smem_capacity
K_BLOCK = 128  # block_k = 128 / sizeof(FP8)
MAX_STAGES = 16  # kNumMaxStages
WGMMA_M = 64  # the tensor-core instruction's M: a 16- or 32-row block still issues 64-row MMAs
# block_m candidates in the library's order ({64, 128}, then 16 / 32 for small m, then 256 for a
# non-FP32 output); block_n 16..192 step 16 for the 1D2D kernel (register spills above 192), the
# unroll rule dropping 176 (block_n > block_k needs block_n % (block_n - 128) == 0 or 128 % (...) == 0)
BLOCK_M_ORDER = (64, 128, 16, 32, 256)
BLOCK_N = tuple(bn for bn in range(16, 193, 16) if bn <= 128 or bn % (bn - 128) == 0 or 128 % (bn - 128) == 0)
CLUSTERS = ((1, 1), (1, 2), (2, 1))  # (cluster_m, cluster_n) in the loop order, at most 2 SMs


def _candidates() -> np.ndarray:
    """[C x 4] (block_m, block_n, cluster_m, cluster_n) in the library's enumeration order (the
    first of equal cost wins: the comparator is a strict <); at least one block dim <= 128."""
    rows = [
        (bm, bn, cm, cn) for cm, cn in CLUSTERS for bm in BLOCK_M_ORDER for bn in BLOCK_N if not (bm > 128 and bn > 128)
    ]
    return np.array(rows, float)


CANDIDATES = _candidates()


def pipeline_stages(bm, bn, k):
    """get_pipeline_config: stages that fit shared memory next to the BF16 C/D tile (1024-aligned),
    the barriers and the B scales of all of k (two per k-block when block_n does not divide 128);
    per stage an A and a B tile of 128 k-bytes and block_m fp32 A scales (128-aligned)."""
    bm, bn, k = (np.asarray(v, float) for v in (bm, bn, k))
    smem_cd = np.ceil(bm * bn * 2.0 / 1024.0) * 1024.0
    sfb_per_kb = np.where(np.mod(K_BLOCK, bn) == 0, 1.0, 2.0)
    smem_sfb = np.ceil(np.ceil(k / K_BLOCK) * 4.0 * sfb_per_kb / 8.0) * 8.0
    per_stage = (bm + bn) * K_BLOCK + np.ceil(bm * 4.0 / 128.0) * 128.0
    free = SMEM_B - smem_cd - MAX_STAGES * 16.0 - smem_sfb
    return np.minimum(np.floor(free / per_stage), MAX_STAGES)


def _cycles(m, n, k, sms, bm, bn, cm, cn):
    """get_layout_info's cost of a [rows x C] candidate grid: max(L1, L2 cycles) / wave efficiency
    (L2 64 B/cycle per SM capped at 8e6 / 1.3e3; L1 128 B/cycle per SM; A and B FP8, C/D BF16);
    a multicast cluster on one wave costs +inf (cluster sync outweighs the saved loads)."""
    blocks = np.ceil(m / bm) * np.ceil(n / bn)
    waves = np.ceil(blocks / sms)
    l2_bw, l1_bw = np.floor(min(64.0 * sms, 8e6 / 1.3e3)), 128.0 * sms
    cd = bm * bn * 2.0
    l2 = np.floor((k * (np.floor(bm / cn) + np.floor(bn / cm)) + cd) * blocks / l2_bw)
    l1 = np.floor((k * (bm + bn) + k * (np.maximum(bm, WGMMA_M) + bn) + 2.0 * cd) * blocks / l1_bw)
    cyc = np.floor(np.maximum(l1, l2) / (blocks / (waves * sms)))
    return np.where((cm * cn > 1) & (waves <= 1), np.inf, cyc), blocks


CHUNK = 2048  # distinct shapes ranked at a time (CHUNK x candidates floats per array)


def _best(um, un, uk, sms):
    """(CTAs, block_m, block_n, load rows) of distinct shapes [U x 1] each: the cheapest legal candidate."""
    bm, bn, cm, cn = (CANDIDATES[None, :, i] for i in range(4))
    stages = pipeline_stages(bm, bn, uk)
    # stages >= 3 to hide TMA latency, >= 4 for tiles under 128 x 192; block_m 16 / 32 only for m <= 16 / 32
    ok = (stages >= 3) & ((bm * bn >= 128 * 192) | (stages >= 4)) & ((bm > 32) | (um <= bm))
    cyc, blocks = _cycles(um, un, uk, float(sms), bm, bn, cm, cn)
    j = np.argmin(np.where(ok, cyc, np.inf), axis=1)  # the first of the cheapest (strict <)
    r = np.arange(len(um))
    return blocks[r, j], bm[0, j], bn[0, j], bm[0, j] / cn[0, j] + bn[0, j] / cm[0, j]


_MEMO: dict = {}  # (m, n, k, sms) -> (CTAs, block_m, block_n, load rows): sweeps price the same shapes again
MEMO_MAX = 200_000  # entries kept (cleared past it; ~100 MB at most)


def sm90_fp8_layout(m, n, k, sms):
    """(CTAs, block_m, block_n, load rows per k-block) of one [m, k] x [k, n] FP8 GEMM as DeepGEMM
    SM90 lays it out, vectorized (distinct (m, n, k) only, in chunks; shapes ranked before are
    remembered). Load rows = block_m / cluster_n + block_n / cluster_m: the A and B rows one CTA
    pulls through L2 per k-block (the multicast operand is fetched once per cluster of 2)."""
    m, n, k = np.broadcast_arrays(*(np.maximum(np.asarray(v, float), 1.0) for v in (m, n, k)))
    key = np.stack([m.ravel(), n.ravel(), k.ravel()], axis=1)
    u, inv = unique_rows(key)  # = np.unique(key, axis=0, return_inverse=True), faster
    keys = [(*row, float(sms)) for row in u.tolist()]
    new = np.array([i for i, kk in enumerate(keys) if kk not in _MEMO], int)
    if len(new):
        todo = u[new]
        parts = [_best(*(c[:, i : i + 1] for i in range(3)), sms) for c in np.array_split(todo, -(-len(todo) // CHUNK))]
        got = np.stack([np.concatenate([p[i] for p in parts]) for i in range(4)], axis=1)
        if len(_MEMO) + len(new) > MEMO_MAX:
            _MEMO.clear()
        _MEMO.update(zip((keys[i] for i in new), map(tuple, got.tolist())))
    out = np.array([_MEMO[kk] for kk in keys], float).reshape(len(keys), 4)
    return tuple(out[:, i][inv.ravel()].reshape(m.shape) for i in range(4))
