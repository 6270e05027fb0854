"""`moesim eplb` summary: policy, imbalance before/after, layer 0's hottest experts and placement."""

from __future__ import annotations

import numpy as np


def print_eplb(out: dict, res, weight, echo=print) -> None:
    """out: the command's result dict; res: the EPLB result; weight: loads [layers, experts]."""
    experts, gpus, per_gpu = out["experts"], out["gpus"], out["slots_per_gpu"]
    placement = np.asarray(out["placement"])
    share = weight[0] / weight[0].sum() if weight[0].sum() > 0 else np.full(experts, 1.0 / experts)
    hot = np.argsort(-weight[0], kind="stable")[: min(10, experts)]
    echo(
        f"EPLB ({res.policy} policy): {experts} experts -> {out['slots']} slots on {gpus} GPUs "
        f"({per_gpu} per GPU), {out['nodes']} node(s), {out['groups']} group(s); load: {out['load_source']}, "
        f"{res.num_layers} layer(s)"
    )
    echo(
        f"imbalance (max/mean per-GPU load), mean over layers: before {res.imbalance_before_mean:.3f} "
        f"(naive contiguous, no replicas) -> after {res.imbalance_after_mean:.3f}"
    )
    echo(
        "layer 0 hottest experts (share of load, replicas): "
        + ", ".join(f"e{e} {share[e] * 100:.1f}% x{res.replica_count[0, e]}" for e in hot)
    )
    echo(
        f"layer 0 placement (GPU: logical experts; load share), imbalance "
        f"{res.imbalance_before[0]:.3f} -> {res.imbalance_after[0]:.3f}:"
    )
    gshare = res.gpu_share()[0]
    for g in range(gpus):
        ids = " ".join(str(int(e)) for e in placement[0, g])
        echo(f"  GPU {g:>4}: {ids}  ({gshare[g] * 100:.2f}%)")
