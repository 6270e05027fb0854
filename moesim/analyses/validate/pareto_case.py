"""Pareto-frontier ratio cases (seed004-pareto-multinode): throughput per machine of two
deployments at the same tokens/s per user, read off frontiers of sweeps (Perplexity's grid: batch
1-128 per GPU, TP 1/2/4/8), interpolated at the speed (moesim.analyses.pareto.frontier_at)."""

from __future__ import annotations

import re

from moesim.analyses.pareto import frontier_at, pareto
from moesim.analyses.sweep import sweep
from moesim.errors import SpecError

BATCH = [1, 2, 4, 8, 16, 32, 64, 128]


def deployment_frontier(model, hardware, ep, cfg):
    df = sweep(
        model,
        hardware,
        cfg.get("phase", "decode"),
        {
            "ep": [ep],
            "tp": [1, 2, 4, 8],
            "batch": BATCH,
            "context": [float(cfg["context"])],
            "mtp": [cfg.get("mtp", 1)],
            "acceptance": [cfg.get("acceptance", 0.6)],
        },
        cost_mode=cfg.get("cost_mode", "calibrated"),
        set=cfg.get("set"),
        fill_defaults=False,  # Perplexity's grid, whole
    )
    return pareto(df, x="tokens_per_s_per_user", y="tokens_per_s_per_node")


def pareto_ratio(cfg, key):
    m = re.fullmatch(r"throughput_ratio_ep(\d+)_over_ep(\d+)_at_(\d+)_tok_s", key)
    if not m:
        raise SpecError(f"validate: {key!r}; allowed throughput_ratio_ep<A>_over_ep<B>_at_<S>_tok_s")
    ep_a, ep_b, speed = int(m.group(1)), int(m.group(2)), float(m.group(3))
    model = cfg.get("model", "deepseek-v3")
    multi = deployment_frontier(model, cfg.get("hardware_multi", cfg.get("hardware")), ep_a, cfg)
    single = deployment_frontier(model, cfg.get("hardware_single", cfg.get("hardware")), ep_b, cfg)
    return frontier_at(multi, speed, y="tokens_per_s_per_node") / frontier_at(single, speed, y="tokens_per_s_per_node")
