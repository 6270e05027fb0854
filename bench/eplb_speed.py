"""Time EPLB on DeepSeek-V3 decode scale: 58 MoE layers x 256 experts -> 288 slots on 144 GPUs
(global policy), plus the prefill shape (EP32, 4 nodes, 8 groups: hierarchical). Prints ms."""

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
from moesim.balance.eplb import rebalance_experts, zipf_load


def bench(name, weight, repeats=20, **kw):
    rebalance_experts(weight, **kw)  # warm-up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        res = rebalance_experts(weight, **kw)
        times.append(time.perf_counter() - t0)
    t = np.array(times) * 1e3
    print(
        f"{name}: median {np.median(t):.2f} ms, min {t.min():.2f} ms "
        f"(imbalance {res.imbalance_before_mean:.3f} -> {res.imbalance_after_mean:.3f}, "
        f"naive kept in {int(res.naive_kept.sum())} layers)"
    )
    return float(np.median(t))


if __name__ == "__main__":
    w = zipf_load(256, 1.0, layers=58, seed=0)
    ms = bench(
        "decode 58x256 -> 288 slots / 144 GPUs (global)", w, num_slots=288, num_groups=8, num_nodes=18, num_gpus=144
    )
    bench(
        "prefill 58x256 -> 288 slots / 32 GPUs / 4 nodes (hierarchical)",
        w,
        num_slots=288,
        num_groups=8,
        num_nodes=4,
        num_gpus=32,
    )
    print(f"target < 10 ms: {'OK' if ms < 10 else 'SLOW'} ({ms:.2f} ms)")
