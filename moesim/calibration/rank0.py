"""The fused-MoE workload aiconfigurator's collector times on EP rank 0 when remote experts' picks are
clamped to expert 0 (routing "rank0_clamped": a documented table segment, rank0_segments in
moesim/calibration/collector_facts.yaml; turned into work columns by moesim.calibration.fit.moe_work)."""

from __future__ import annotations

import numpy as np

from moesim.grid.core import unique_rows

__all__ = ["rank0_clamped_rows", "rank0_tile_padding"]


def _rank0_counts(t, e, k, ep):
    """(rank-0 tokens, rank-0 local picks) of distinct (T, E, topk, ep) rows under the collector's
    balanced_logits: token i picks (i + j s) mod E (T >= s; floor((i s / T + j s) mod E) below),
    s = ceil(E / topk), j < topk; picks repeat with period E in i, so token i < E stands for
    floor(T / E) + [i < T mod E] tokens. Vectorized over [rows, i < max E, j < max topk]."""
    s, local = np.ceil(e / k)[:, None, None], (e / ep)[:, None, None]
    i = np.arange(int(e.max()), dtype=float)[None, :, None]
    j = np.arange(int(k.max()), dtype=float)[None, None, :]
    t3, e3 = t[:, None, None], e[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        small = np.floor(np.mod(i * s / t3 + j * s, e3))
    picks = np.where(t3 >= s, np.mod(i + j * s, e3), small)
    hit = (picks < local) & (j < k[:, None, None])
    weight = np.floor(t / e)[:, None] + (i[:, :, 0] < np.mod(t, e)[:, None])
    weight = np.where(i[:, :, 0] < e[:, None], weight, 0.0)
    return (weight * hit.any(axis=2)).sum(axis=1), (weight * hit.sum(axis=2)).sum(axis=1)


def rank0_clamped_rows(tokens, experts, topk, ep):
    """(computed pairs, hot expert rows, touched experts) of the fused-MoE kernel the aiconfigurator
    collector times on EP rank 0 (collector/helper.py balanced_logits and build_rank0_local_workload;
    collector/sglang/collect_moe.py clamps the -1 ids of remote experts to expert 0 for the Triton
    kernel): rank 0 owns experts [0, E / ep) and runs every token with a pick there with ALL its
    topk picks (_rank0_counts). Its real local picks spread evenly over min(E / ep, picks) experts;
    the remote picks all land on expert 0, the hot expert. ep = 1 is the balanced layer."""
    t, e, k, ep = np.broadcast_arrays(*(np.asarray(v, float) for v in (tokens, experts, topk, ep)))
    key = np.stack([a.ravel() for a in (t, e, k, ep)], axis=1)
    u, inv = unique_rows(key)  # = np.unique(key, axis=0, return_inverse=True), faster
    rank0, hits = (v[inv.ravel()].reshape(t.shape) for v in _rank0_counts(*u.T))
    computed = rank0 * k
    touched = np.maximum(np.minimum(e / ep, hits), 1.0)
    hot = hits / touched + (computed - hits)
    return computed, hot, touched


def rank0_tile_padding(tokens, experts, topk, ep, bm):
    """MMA rows per computed row of the rank0_clamped workload: (touched - 1) cold experts of
    ceil(real / touched / bm) tiles and one hot expert of ceil(hot / bm) tiles, times bm."""
    computed, hot, touched = rank0_clamped_rows(tokens, experts, topk, ep)
    cold = np.maximum(computed - hot, 0.0) / np.maximum(touched - 1.0, 1.0)
    tiles = (touched - 1.0) * np.ceil(cold / bm - 1e-9) + np.ceil(hot / bm - 1e-9)
    return np.maximum(tiles * bm / np.maximum(computed, 1e-9), 1.0)
