"""Simulator speed (issue 26 item 7): a 10,000-request closed-loop run (OSL 1K, concurrency 64) on
one core, split into pricing the cost surfaces (evaluate_grid over the pass shapes, once per
configuration) and the event loop; target < 5 s in all. Also an open-loop PD run and a DP-attention
run for scale.

    python bench/simulate_speed.py [--requests 10000] [--repeat 3]
"""

from __future__ import annotations

import os

for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ.setdefault(_v, "1")  # one core: before numpy loads

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from sweep_speed import pin_one_core  # noqa: E402

from moesim.api import simulate  # noqa: E402  (the front door: flat keywords)
from moesim.simulate import clients as C  # noqa: E402
from moesim.simulate import surface as S  # noqa: E402

CASES = {
    "closed loop, 64 clients, ISL 1K / OSL 1K (random 0.8-1), DeepSeek-R1 TP8 H200, SGLang": (
        lambda n: C.closed_loop(64, n, 1024, 1024, range_ratio=0.8, seed=0),
        dict(model="deepseek-r1", hardware="h200", tp=8, dp=1, ep=1, moe_tp=8, engine="sglang"),
    ),
    "the same on vLLM (fused chunked prefill)": (
        lambda n: C.closed_loop(64, n, 1024, 1024, range_ratio=0.8, seed=0),
        dict(model="deepseek-r1", hardware="h200", tp=8, dp=1, ep=1, moe_tp=8, engine="vllm"),
    ),
    "open loop 8 req/s, PD 1 prefill + 1 decode DP8 EP8 H200, SGLang": (
        lambda n: C.open_loop(8.0, n, 2000, 500, range_ratio=0.2, tool="vllm", seed=0),
        dict(
            model="deepseek-r1",
            hardware="h200",
            tp=1,
            dp=8,
            ep=8,
            engine="sglang",
            prefill={"instances": 1, "tp": 1, "dp": 8, "ep": 8},
        ),
    ),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print(f"simulate speed, {pin_one_core()}; best of {a.repeat}")
    for label, (work, kw) in CASES.items():
        w = work(a.requests)
        best = None
        for _ in range(a.repeat):
            S._CACHE.clear()  # price the surfaces every time: the figure includes them
            t = time.perf_counter()
            r = simulate(workload=w, **kw)
            wall = time.perf_counter() - t
            if best is None or wall < best[0]:
                best = (wall, r)
        wall, r = best
        st, s = r.stats, r.summary
        print(f"  {label}")
        print(f"    {w.size:,} requests: {wall:.2f} s (pricing {st['pricing_s']:.2f} s for "
              f"{sum(p.surf.evaluations for p in r.pools):,} pass shapes, events {st['run_s']:.2f} s for "
              f"{st['events']:,} events / {st['passes']:,} passes); TTFT mean {s['ttft_mean_s'] * 1e3:.0f} ms, "
              f"p90 {s['ttft_p90_s'] * 1e3:.0f} ms; TPOT mean {s['tpot_mean_s'] * 1e3:.1f} ms")  # fmt: skip


if __name__ == "__main__":
    main()
