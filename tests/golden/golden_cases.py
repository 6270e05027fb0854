"""Golden outputs: the exact JSON that these commands printed when recorded.

Regenerate only in a commit that says why the numbers moved:
    python tests/golden/record.py
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).parent

_README_SPACE = "--ep 16,32,64,128,144 --redundant-experts 0,32 --batch 8:256:8 --context 4989 --mtp 1".split()
_EP144 = ["--ep", "144", "--dp", "144", "--redundant-experts", "32", "--batch", "88", "--context", "4989", "--mtp", "1"]

CASES: dict[str, list[str]] = {
    # estimate: phases x schemes x cost modes x comm modes x models x hardware
    "est_default": ["estimate"],
    "est_ep144_auto": ["estimate", *_EP144],
    "est_ep144_serial": ["estimate", *_EP144, "--overlap", "serial"],
    "est_ep144_shared": ["estimate", *_EP144, "--overlap", "shared"],
    "est_ep144_sbo": ["estimate", *_EP144, "--overlap", "sbo"],
    "est_ep144_twobatch": ["estimate", *_EP144, "--overlap", "two-batch"],
    "est_ep144_ideal": ["estimate", *_EP144, "--overlap", "ideal"],
    "est_ep144_roofline": ["estimate", *_EP144, "--cost-mode", "roofline"],
    "est_ep144_measured": ["estimate", *_EP144, "--cost-mode", "measured"],
    "est_ep144_normal": ["estimate", *_EP144, "--comm", "deepep-normal"],
    "est_ep144_zipf_lognormal": ["estimate", *_EP144, "--expert-skew", "zipf:1.0", "--context-dist", "lognormal:1.0"],
    "est_ep144_eager": ["estimate", *_EP144, "--no-cuda-graphs"],
    "est_prefill_ep32": "estimate --phase prefill --ep 32 --dp 32 --batch 16384 --context 4989".split(),
    "est_prefill_serial_roofline": "estimate --phase prefill --ep 32 --dp 32 --overlap serial --cost-mode roofline".split(),
    "est_prefill_tp8": ["estimate", "--phase", "prefill", "--tp", "8", "--ep", "8", "--batch", "8192"],
    "est_mixed": "estimate --phase mixed --isl 1024 --osl 8192 --tp 8 --ep 8 --batch 4 --hardware h200".split(),
    "est_h100_pplx": "estimate --hardware h100_sxm --ep 128 --dp 128 --batch 128 --comm pplx --overlap five-stage".split(),
    "est_h100_nccl_whatif": "estimate --hardware h100_sxm --ep 16 --tp 2 --batch 64 --comm nccl --set hardware.rdma_bw_GBps=100".split(),
    "est_tp8_h200_mtp2": "estimate --hardware h200 --tp 8 --ep 8 --batch 32 --mtp 2 --acceptance 0.7".split(),
    "est_qwen3": "estimate --model qwen3-235b-a22b --hardware h100_sxm --tp 4 --ep 8 --batch 64".split(),
    "est_llama_dense": ["estimate", "--model", "llama-3-1-70b", "--hardware", "h100_sxm", "--tp", "4", "--batch", "32"],
    "est_mixtral_b200": ["estimate", "--model", "mixtral-8x7b", "--hardware", "b200", "--ep", "8", "--batch", "64"],
    "est_kimi_moetp": "estimate --model kimi-k2 --hardware h200 --tp 8 --ep 16 --dp 2 --batch 32".split(),
    # other commands
    "kernel_gemm": ["kernel", "--op", "gemm", "--m", "64", "--n", "2112", "--k", "7168"],
    "kernel_grouped": ["kernel", "--op", "grouped_gemm", "--m", "64", "--n", "4096", "--k", "7168", "--groups", "2"],
    "kernel_mla": ["kernel", "--op", "mla_decode", "--batch", "44", "--q-len", "2", "--context", "4989"],
    "kernel_dispatch": ["kernel", "--op", "dispatch", "--ep", "144", "--tokens", "88"],
    "sweep_readme": ["sweep", *_README_SPACE, *"--min-tokens-per-s-per-user 20 --only-fits --top 20".split()],
    "sweep_mixed": "sweep --phase mixed --isl 1024 --osl 4096 --tp 1,8 --ep 8,16 --batch 8,64 --mtp 0,1 --overlap auto,serial".split(),
    "sweep_prefill": ["sweep", "--phase", "prefill", "--ep", "8,16,32", "--batch", "4096,16384", "--top", "10"],
    "pareto_readme": ["pareto", *_README_SPACE, *"--group-by ep".split()],
    "plan_day": ["plan", "--traffic", "examples/traffic_deepseek_day.yaml"],
    "plan_ttft": ["plan", "--traffic", "examples/traffic_deepseek_day.yaml", "--max-ttft", "2", "--prompt-dist", "exp"],
    "disagg_default": ["disagg", "--isl", "4000", "--osl", "1000", "--max-ttft", "2", "--max-tpot", "0.05"],
    "disagg_h200": "disagg --hardware h200 --isl 1024 --osl 8192 --max-ttft 1 --max-tpot 0.03 --max-instances 8".split(),
    "validate": ["validate"],
    "eplb": ["eplb"],
}


def path(name: str) -> Path:
    return HERE / f"{name}.json"


def run(argv: list[str]):
    """Run one command in-process; return (exit code, parsed JSON)."""
    from typer.testing import CliRunner

    from moesim.cli import app

    res = CliRunner().invoke(app, [*argv, "--json"], catch_exceptions=False)
    return res.exit_code, json.loads(res.stdout)
