"""DeepGEMM's SM100 (Blackwell) layout choice for a normal FP8 block-scaled GEMM: the block sizes and
the 2-CTA TMA multicast cluster the library picks, as moesim.perf.deepgemm_layout does for SM90.

Source: sgl-project/DeepGEMM (the build SGLang's sgl-kernel ships) csrc/jit_kernels/heuristics/
common.hpp get_best_config and sm100.hpp SM100ArchSpec, for the 1D1D FP8 kernel (UE8M0 scales
copied to tensor memory by UTCCP) that `fp8_gemm_nt` runs on SM100 with K-major A and B and a BF16
output:

* block_m from {128, 256} (+ 32 for m <= 32, + 64 for m <= 64), block_n from {16, 32, 64, ..., 256}
  (stride 32: the 16 / 32 B swizzles are slow), block_k 128;
* legal: block_m <= 128 (the 1D1D kernel with K-major B), block_m and block_n <= 128 for k <= 256
  (fewer store blocks), tensor memory 2 block_n + align(block_m, 128) / 32 + align(block_n, 128) / 32
  <= 512 columns (double-buffered accumulator plus the scale factors);
* ranked in that loop order by fewest waves, then the fullest last wave, then on equal last waves:
  same block_m and smaller block_n, same block_n and smaller block_m, or a larger block_n with both
  blocks within m, n (a sequential comparison, not a total order: replayed candidate by candidate);
* a cluster of 2 CTAs along m multicasting B (each loads half the B tile) when m >= 512 and the
  number of m blocks is even (get_multicast_legality: B only, is_multicast_legal(m, block_m, 2));
  unlike SM90 there is no one-wave exception.

Everything is vectorized over shapes (a replay over the <= 40 candidates); nothing here is fitted.
"""

from __future__ import annotations

import numpy as np

from moesim.grid.core import unique_rows

TMEM_COLS = 512  # tensor memory columns per SM
SF_ALIGN = 128.0  # UTCCP-aligned scale-factor block (num_utccp_aligned_elems)
MULTICAST_MIN_M = 512  # get_best_config: TMA multicast only for m >= 512
BLOCK_M_ORDER = (128.0, 256.0, 32.0, 64.0)  # get_block_m_candidates: {128, 256}, then 32 / 64 for small m
BLOCK_N = (16.0,) + tuple(float(b) for b in range(32, 257, 32))  # get_block_n_candidates


def _legal(m, k, bm, bn):
    """is_block_size_legal (1D1D FP8, K-major B) and the block_m candidate rule (32 / 64 only for m <= 32 / 64)."""
    tmem = 2.0 * bn + np.ceil(bm / SF_ALIGN) * SF_ALIGN / 32.0 + np.ceil(bn / SF_ALIGN) * SF_ALIGN / 32.0
    small_k_ok = (k > 256) | ((bn <= 128) & (bm <= 128))
    return (bm <= 128) & small_k_ok & (tmem <= TMEM_COLS) & ((bm >= 128) | (m <= bm))


def _replay(m, n, k, sms):
    """(block_m, block_n) of each shape: get_best_config's sequential comparison over the candidates."""
    best_m, best_n = np.zeros_like(m), np.zeros_like(m)
    best_w, best_u = np.zeros_like(m), np.zeros_like(m)
    for bm in BLOCK_M_ORDER:
        for bn in BLOCK_N:
            blocks = np.ceil(m / bm) * np.ceil(n / bn)
            waves, last = np.ceil(blocks / sms), np.mod(blocks, sms)
            util = np.where(last == 0, sms, last)
            tie = (
                ((bm == best_m) & (bn < best_n))
                | ((bn == best_n) & (bm < best_m))
                | ((bm != best_m) & (bn > best_n) & (bn <= n) & (bm <= m))
            )
            same = waves == best_w
            win = (best_m == 0) | (waves < best_w) | (same & (util > best_u)) | (same & (util == best_u) & tie)
            win &= _legal(m, k, bm, bn)
            best_m, best_n = np.where(win, bm, best_m), np.where(win, bn, best_n)
            best_w, best_u = np.where(win, waves, best_w), np.where(win, util, best_u)
    return best_m, best_n


def sm100_fp8_layout(m, n, k, sms):
    """(CTAs, block_m, block_n, load rows per k-block) of [m, k] x [k, n] FP8 GEMMs as DeepGEMM SM100
    lays them out (broadcast arrays). Load rows = block_m + block_n / cluster: the A and B rows one
    CTA pulls per k-block (the multicast B tile is fetched half by each CTA of the pair)."""
    m, n, k = np.broadcast_arrays(*(np.maximum(np.asarray(v, float), 1.0) for v in (m, n, k)))
    u, inv = unique_rows(np.stack([m.ravel(), n.ravel(), k.ravel()], axis=1))
    um, un, uk = u.T  # distinct shapes only (sweeps price the same few shapes many times)
    bm, bn = _replay(um, un, uk, float(sms))
    ctas = np.ceil(um / bm) * np.ceil(un / bn)
    pair = (um >= MULTICAST_MIN_M) & (np.mod(np.ceil(um / bm), 2.0) == 0) & (int(sms) % 2 == 0)
    rows = bm + np.where(pair, bn / 2.0, bn)
    return tuple(a[inv.ravel()].reshape(m.shape) for a in (ctas, bm, bn, rows))
