"""Step time -> TPOT, TTFT, tokens/s per user / GPU / node, MFU."""

from __future__ import annotations

import numpy as np

from moesim.enums import Phase
from moesim.grid.core import Grid


def metrics(grid: Grid, phase: Phase, step_time_s, flops_per_step, peak_flops: float, gpus_per_node: int) -> dict:
    phase = Phase(phase)
    step = np.asarray(step_time_s, float)
    if phase == Phase.PREFILL:
        # a step processes `batch` prompt tokens per DP group (tp GPUs); TTFT = one step
        per_gpu = grid.batch / step / grid.tp
        out = {
            "ttft_s": step,
            "tpot_s": np.full_like(step, np.nan),
            "tokens_per_s_per_user": np.full_like(step, np.nan),
        }
    else:
        # MTP: accepted tokens per step = 1 + sum of acceptance (DESIGN "MTP / speculative decoding")
        acc = grid.tokens_per_step
        tpot = step / acc
        per_gpu = grid.batch * acc / step / grid.tp
        out = {
            "tpot_s": tpot,
            "tokens_per_s_per_user": 1.0 / tpot,
            "ttft_s": np.full_like(step, np.nan),
            "accepted_tokens_per_step": acc,
        }
    out.update(
        {
            "step_time_s": step,
            "tokens_per_s_per_gpu": per_gpu,
            "tokens_per_s_per_node": per_gpu * gpus_per_node,
            "mfu": np.asarray(flops_per_step, float) / step / peak_flops,
        }
    )
    return out
