"""Pareto-frontier ratio cases (seed004-pareto-multinode): throughput per machine of two
deployments at the same tokens/s per user, read off their frontiers."""
from __future__ import annotations

import re

import numpy as np


def frontier(x, y):
    """Upper-left frontier (maximize both): returns x ascending, y descending-envelope."""
    order = np.argsort(-x, kind="stable")
    xs, ys = x[order], y[order]
    best = np.maximum.accumulate(ys)
    keep = ys >= best - 1e-12
    xs, ys = xs[keep], ys[keep]
    o = np.argsort(xs)
    return xs[o], ys[o]


def deployment_frontier(model, hardware, ep, cfg, tps=(1, 2, 4, 8), batches=None):
    from moesim.api import evaluate_grid, resolve_specs
    from moesim.config import check_grid
    from moesim.grid import Grid
    m, h = resolve_specs(model, hardware, cfg.get("set"))
    batches = np.asarray(batches if batches is not None else 2.0 ** np.arange(0, 8), float)
    xs, ys = [], []
    for tp in tps:  # a handful of TP values; each evaluated over all batches at once
        if ep % tp:
            continue
        g = Grid.product(tp=tp, dp=ep // tp, ep=ep, moe_tp=1, batch=batches, context=float(cfg["context"]),
                         mtp=cfg.get("mtp", 1), acceptance=cfg.get("acceptance", 0.6), redundant=0)
        ok, _ = check_grid(m, h, g, "decode")
        if not ok.any():
            continue
        g = g.take(np.flatnonzero(ok))
        ev, _ = evaluate_grid(m, h, g, phase="decode", overlap="auto", cost_mode=cfg.get("cost_mode", "calibrated"),
                              comm=cfg.get("comm"))
        fits = ev.values["fits"]
        xs.append(ev.values["tokens_per_s_per_user"][fits])
        ys.append(ev.values["tokens_per_s_per_node"][fits])
    x, y = np.concatenate(xs), np.concatenate(ys)
    return frontier(x, y)


def _at(xf, yf, x0):
    """Frontier throughput at speed x0: the best y among frontier points with x >= x0."""
    sel = xf >= x0
    return float(np.max(yf[sel])) if sel.any() else float("nan")


def pareto_ratio(cfg, key):
    m = re.fullmatch(r"throughput_ratio_ep(\d+)_over_ep(\d+)_at_(\d+)_tok_s", key)
    if not m:
        from moesim.errors import SpecError
        raise SpecError(f"validate: {key!r}; allowed throughput_ratio_ep<A>_over_ep<B>_at_<S>_tok_s")
    ep_a, ep_b, speed = int(m.group(1)), int(m.group(2)), float(m.group(3))
    model = cfg.get("model", "deepseek-v3")
    xa, ya = deployment_frontier(model, cfg.get("hardware_multi", cfg.get("hardware")), ep_a, cfg)
    xb, yb = deployment_frontier(model, cfg.get("hardware_single", cfg.get("hardware")), ep_b, cfg)
    return _at(xa, ya, speed) / _at(xb, yb, speed)
