"""Rank-0 expert loads of a measured fused-MoE table whose collector routes through a model's
group-limited top-k router (DeepSeek-V3: 8 expert groups, the top 4 groups kept) on the
collector's balanced logits. Used by moesim.calibration.fit.moe_work for rows that carry
n_group / topk_group (chosen per backend and model in moesim.calibration.fit.moe_tables).

The logits (aiconfigurator collector/helper.py balanced_logits) are softmax(one-hot sum): token i's
topk picks (i + j s) mod E (s = ceil(E / topk); floor(i s / T + j s) mod E when T < s) share one
high value, every other expert one low value. The group-limited router (vLLM grouped_topk; the
DeepSeek-V3 gate, HF config n_group / topk_group) scores each of the n_group groups by the sum of
its top-2 scores, keeps topk_group groups and takes the topk best experts inside them. With one
pick per group (DeepSeek-V3: s = E / n_group) every group scores the same, so ties decide: the
lowest-index groups and, for the topk - (picks kept) slots left, the lowest-index experts of those
groups (torch.topk's order on ties). Rank 0 (experts [0, E / ep)) thus holds experts 0..3 hot with
one row per token at every EP size, not T topk / ep rows. The H200 vLLM FlashInfer CUTLASS rows
show exactly this: at 16384 tokens the time over EP 2..256 goes as 8 : 6 : 5 : 4.5 : 4.25 : 4.13 :
2.06 : 1.03 (measured 8.07 : 5.90 : 4.79 : 4.15 : 3.97 : 3.74 : 1.95 : 1), and one token reads the
weights of 8, 6, 5, 5, 5, 4, 2, 1 local experts."""

from __future__ import annotations

import numpy as np

from moesim.grid.core import unique_rows


def _picks(t, e, k, s, i, j):
    """[rows, tokens i < E, picks j] expert ids of the collector's balanced logits (period E in i)."""
    t3, e3, s3 = t[:, None, None], e[:, None, None], s[:, None, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        small = np.floor(i * s3 / t3) + j * s3
    return np.mod(np.where(t3 >= s3, i + j * s3, small), e3)


def _selected(e, k, ng, tg, high):
    """[rows, tokens, experts] experts the group-limited router keeps, from the balanced picks."""
    ex = np.arange(high.shape[2], dtype=float)[None, :]
    grp = np.where(ex < e[:, None], np.floor(ex / (e / ng)[:, None]), -1.0)  # [rows, experts]
    g_ids = np.arange(int(ng.max()), dtype=float)
    onehot = (grp[:, :, None] == g_ids[None, None, :]).astype(np.int32)  # [rows, experts, groups]
    score = np.minimum(np.einsum("rie,reg->rig", high.astype(np.int32), onehot), 2)  # top-2 sum
    better = (score[:, :, None, :] > score[:, :, :, None]) | (
        (score[:, :, None, :] == score[:, :, :, None]) & (g_ids[None, None, None, :] < g_ids[None, None, :, None])
    )
    kept = (better.sum(axis=3) < tg[:, None, None]) & (g_ids[None, None, :] < ng[:, None, None])
    in_kept = np.einsum("reg,rig->rie", onehot, kept.astype(np.int32)) > 0
    chosen = high & in_kept
    free = in_kept & ~high
    left = k[:, None, None] - chosen.sum(axis=2, keepdims=True)
    return chosen | (free & (np.cumsum(free, axis=2) <= left))


def _loads(t, e, k, ep, ng, tg):
    """[rows, local experts] tokens each of rank 0's experts computes (distinct rows only)."""
    s = np.ceil(e / k)
    i = np.arange(int(e.max()), dtype=float)[None, :, None]
    j = np.arange(int(k.max()), dtype=float)[None, None, :]
    picks = np.where(j < k[:, None, None], _picks(t, e, k, s, i, j), -1.0)
    high = np.zeros((len(t), i.shape[1], int(e.max())), bool)
    r, ii, _ = np.nonzero(picks >= 0)
    high[r, ii, picks[picks >= 0].astype(int)] = True
    sel = _selected(e, k, ng, tg, high)
    i2 = i[:, :, 0]
    weight = np.where(
        t[:, None] >= s[:, None], np.floor(t / e)[:, None] + (i2 < np.mod(t, e)[:, None]), i2 < t[:, None]
    )
    weight = np.where(i2 < e[:, None], weight, 0.0)
    local = np.arange(sel.shape[2])[None, :] < (e / ep)[:, None]
    return np.einsum("ri,rie->re", weight, sel.astype(float)) * local


def grouped_loads(tokens, experts, topk, ep, n_group, topk_group):
    """[rows, experts] rank-0 load of each expert (0 for remote ones) under the group-limited
    router on balanced logits (module docstring), for broadcast row arrays; distinct rows only."""
    arrs = np.broadcast_arrays(*(np.asarray(v, float) for v in (tokens, experts, topk, ep, n_group, topk_group)))
    key = np.stack([a.ravel() for a in arrs], axis=1)
    u, inv = unique_rows(key)  # = np.unique(key, axis=0, return_inverse=True), faster
    return _loads(*u.T)[inv.ravel()]


def grouped_rows(loads):
    """(computed pairs, touched experts) of rank-0 loads [rows, experts]."""
    return loads.sum(axis=1), np.maximum((loads > 0).sum(axis=1), 1.0)


def grouped_tile_padding(loads, bm):
    """MMA rows per computed row: every touched expert pads its rows to whole BLOCK_M tiles."""
    pairs = loads.sum(axis=1)
    bm = np.broadcast_to(np.asarray(bm, float), pairs.shape)
    tiles = np.ceil(loads / bm[:, None] - 1e-9).sum(axis=1)
    return np.maximum(tiles * bm / np.maximum(pairs, 1e-9), 1.0)
