"""Sweep speed: decode configurations/s of the full decode model on one core through
`moesim.engine.pricing.evaluate_grid` (the sweep's path, in the sweep's chunks), for cost_mode roofline and
calibrated, plus the wall time of `moesim sweep` over the default DeepSeek-V3 space (subprocess,
CLI start-up included). Targets (issue 5): >= 1,000,000 configs/s and < 2 s.

    python bench/sweep_speed.py [--n 1000000] [--chunk 32768] [--profile]

--profile prints the top functions of one calibrated pass (cProfile, by own time).
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core: before numpy loads

import argparse  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def pin_one_core():
    try:
        cpu = sorted(os.sched_getaffinity(0))[0]
        os.sched_setaffinity(0, {cpu})
        return f"pinned to CPU {cpu}"
    except (AttributeError, OSError):
        return "not pinned (no sched_setaffinity)"


def decode_grid(n_target: int):
    """~n_target valid DeepSeek-V3 decode configurations (tp x ep x batch x context x acceptance)."""
    from moesim.grid.core import Grid

    tp, ep = [1, 2, 4, 8], [8, 16, 32, 64, 128, 256]
    batch = np.arange(1, 257)
    per_ctx = len(tp) * len(ep) * batch.size * 2  # x mtp {0, 1}
    n_ctx = max(1, int(np.ceil(n_target / per_ctx / 4)))
    context = np.linspace(512, 32768, n_ctx).round()
    g = Grid.product(
        tp=tp,
        dp=[np.nan],
        ep=ep,
        moe_tp=[1],
        batch=batch,
        context=context,
        mtp=[0, 1],
        acceptance=[0.6, 0.7, 0.8, 0.9],
        redundant=[0],
    )
    return Grid(**{**g.to_dict(), "dp": g.ep / g.tp})


def run_engine(model, hw, grid, cost_mode, chunk, overlap=None):
    from moesim.engine.pricing import evaluate_grid
    from moesim.engine.settings import Pricing

    pricing = Pricing.of(cost_mode=cost_mode)
    t0 = time.perf_counter()
    for s in range(0, grid.size, chunk):
        evaluate_grid(model, hw, grid.take(slice(s, s + chunk)), phase="decode", pricing=pricing, overlap=overlap)
    return time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=1_000_000, help="configurations per pass")
    ap.add_argument("--chunk", type=int, default=32768, help="chunk size (the sweep's default)")
    ap.add_argument("--profile", action="store_true", help="cProfile one calibrated pass")
    ap.add_argument("--no-tune-malloc", action="store_true", help="keep glibc malloc defaults (see tune_malloc)")
    a = ap.parse_args()

    from moesim.analyses.sweep import tune_malloc
    from moesim.engine.pricing import resolve_specs
    from moesim.grid.core import Grid
    from moesim.grid.validity import check_grid

    print(pin_one_core())
    print(
        "malloc tuned (moesim.analyses.sweep.tune_malloc, as the CLI does)"
        if not a.no_tune_malloc and tune_malloc()
        else "glibc malloc defaults"
    )
    m, h = resolve_specs("deepseek-v3", "h800")
    g = decode_grid(a.n)
    ok, _ = check_grid(m, h, g, "decode")
    g = g.take(np.flatnonzero(ok))
    print(f"grid: {g.size:,} valid decode configurations (DeepSeek-V3, h800), chunks of {a.chunk:,}")
    run_engine(m, h, g.take(slice(0, 4096)), "calibrated", a.chunk)  # warm caches, load the profile
    one = g.take(slice(0, 1))
    for cm in ("roofline", "calibrated"):
        t0 = time.perf_counter()
        for _ in range(5):
            run_engine(m, h, one, cm, 1)
        print(f"  fixed cost of one evaluate_grid call ({cm}): {(time.perf_counter() - t0) / 5 * 1e3:.1f} ms")
    from moesim.engine.pricing import _dedupe

    distinct = sum(
        len(d[0]) if (d := _dedupe(g.take(slice(s, s + a.chunk)))) else min(a.chunk, g.size - s)
        for s in range(0, g.size, a.chunk)
    )
    print(
        f"  ({distinct:,} rows differ in more than MTP acceptance. The engine prices every op once per "
        f"distinct row it depends on (acceptance: metrics only; context: attention core only) - exact, "
        f"tests/unit/test_engine.py)"
    )
    g1 = Grid(**{**g.to_dict(), "acceptance": np.full(g.size, 0.8)})  # every row distinct: no sharing
    for cm in ("roofline", "calibrated"):
        for ov, label in ((None, "default overlap (engine default)"), ("five-stage", "overlap five-stage")):
            dt = run_engine(m, h, g, cm, a.chunk, ov)
            print(f"  evaluate_grid {cm:10s} {label:34s} {dt:6.2f} s  {g.size / dt:12,.0f} configs/s")
        dt = run_engine(m, h, g1.take(slice(0, g.size // 4)), cm, a.chunk, None)
        print(
            f"  evaluate_grid {cm:10s} {'default overlap, one acceptance':34s} {dt:6.2f} s  "
            f"{g.size // 4 / dt:12,.0f} configs/s (grid without an acceptance axis)"
        )

    from moesim.analyses.sweep import sweep

    t0 = time.perf_counter()
    df = sweep(
        m,
        h,
        "decode",
        {
            "tp": [1, 2, 4, 8],
            "ep": [8, 16, 32, 64, 128, 256],
            "batch": list(range(1, 257)),
            "context": list(np.linspace(512, 32768, 25).round()),
            "mtp": [0, 1],
            "acceptance": [0.6, 0.7, 0.8, 0.9],
        },
    )
    dt = time.perf_counter() - t0
    print(f"  moesim.analyses.sweep (DataFrame incl.) {len(df):,} rows {dt:6.2f} s  {len(df) / dt:12,.0f} configs/s")

    if a.profile:
        import cProfile
        import pstats

        sub = g.take(slice(0, min(g.size, 8 * a.chunk)))
        pr = cProfile.Profile()
        pr.enable()
        run_engine(m, h, sub, "calibrated", a.chunk)
        pr.disable()
        print(f"\ncProfile, calibrated, {sub.size:,} configs (own time):")
        pstats.Stats(pr).sort_stats("tottime").print_stats(15)

    cmd = [sys.executable, "-m", "moesim.cli", "sweep", "--top", "5"]
    walls = []
    for _ in range(3):
        t0 = time.perf_counter()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        walls.append(time.perf_counter() - t0)
        if p.returncode != 0:
            print(p.stderr)
            break
    last = [ln for ln in p.stdout.splitlines() if "configurations" in ln]
    print(
        f"`moesim sweep` default DeepSeek-V3 space: wall {min(walls):.2f} s (best of {len(walls)}; "
        f"CLI start-up included) - {last[0] if last else ''}"
    )
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "moesim.cli", "--help"], cwd=ROOT, capture_output=True)
    print(f"`moesim --help` wall {time.perf_counter() - t0:.2f} s")


if __name__ == "__main__":
    main()
