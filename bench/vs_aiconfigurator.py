"""Ask moesim and NVIDIA aiconfigurator the same question and print both wall times:

    DeepSeek-V3 on H200, ISL 4000 / OSL 1000 tokens, TTFT <= 1000 ms, TPOT <= 50 ms:
    best disaggregated vs aggregated deployment (output tokens/s per GPU).

moesim: `moesim disagg` (prefill sweep + decode sweep + aggregated "mixed" sweep, subprocess,
CLI start-up included). aiconfigurator: `aiconfigurator cli default --model DEEPSEEK_V3
--system h200_sxm --total_gpus N ...` when installed (pip install aiconfigurator), else a note.

    python bench/vs_aiconfigurator.py [--isl 4000 --osl 1000 --ttft-ms 1000 --tpot-ms 50 --gpus 64]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def timed(cmd, timeout=1800):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    return p, time.perf_counter() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--isl", type=int, default=4000)
    ap.add_argument("--osl", type=int, default=1000)
    ap.add_argument("--ttft-ms", type=float, default=1000.0)
    ap.add_argument("--tpot-ms", type=float, default=50.0)
    ap.add_argument("--gpus", type=int, default=64, help="aiconfigurator --total_gpus")
    a = ap.parse_args()
    print(
        f"question: DeepSeek-V3 on H200, ISL {a.isl} / OSL {a.osl}, TTFT <= {a.ttft_ms:g} ms, "
        f"TPOT <= {a.tpot_ms:g} ms: best disaggregated vs aggregated output tokens/s per GPU"
    )

    cmd = [
        sys.executable,
        "-m",
        "moesim.cli",
        "disagg",
        "--hardware",
        "h200",
        "--isl",
        str(a.isl),
        "--osl",
        str(a.osl),
        "--max-ttft",
        str(a.ttft_ms / 1e3),
        "--max-tpot",
        str(a.tpot_ms / 1e3),
        "--json",
    ]
    p, dt = timed(cmd)
    if p.returncode != 0:
        print(f"moesim failed ({dt:.2f} s): {p.stderr.strip()}")
    else:
        r = json.loads(p.stdout)
        agg = r.get("aggregated") or {}
        print(
            f"moesim          wall {dt:7.2f} s: disagg {r['system_tokens_per_s_per_gpu'] or float('nan'):,.0f} "
            f"tok/s/GPU, aggregated {agg.get('tokens_per_s_per_gpu', float('nan')):,.0f} tok/s/GPU, "
            f"ratio {r.get('speedup_vs_aggregated') or float('nan'):.2f}x"
        )

    exe = shutil.which("aiconfigurator")
    if exe is None and importlib.util.find_spec("aiconfigurator") is None:
        print("aiconfigurator  not installed (pip install aiconfigurator) - no comparison run")
        return
    base = [exe] if exe else [sys.executable, "-m", "aiconfigurator.main"]
    cmd = base + [
        "cli",
        "default",
        "--model",
        "DEEPSEEK_V3",
        "--total_gpus",
        str(a.gpus),
        "--system",
        "h200_sxm",
        "--isl",
        str(a.isl),
        "--osl",
        str(a.osl),
        "--ttft",
        f"{a.ttft_ms:g}",
        "--tpot",
        f"{a.tpot_ms:g}",
    ]
    try:
        p, dt = timed(cmd)
    except subprocess.TimeoutExpired:
        print("aiconfigurator  timed out after 1800 s")
        return
    lines = [ln.strip() for ln in p.stdout.splitlines() if "Best" in ln or "tokens/s/gpu" in ln][:4]
    status = "ok" if p.returncode == 0 else f"exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]}"
    print(f"aiconfigurator  wall {dt:7.2f} s ({status})")
    for ln in lines:
        print(f"    {ln}")


if __name__ == "__main__":
    main()
