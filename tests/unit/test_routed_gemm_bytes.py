"""A decode routed grouped GEMM counts one set of weight bytes everywhere: the op (the workload's
expected active experts), the kernel's work (family_work) and the fitted model's memory side
(waves_parts) all read the weights of the groups with >= 1 row only, the groups whose tiles run
(a masked / contiguous grouped GEMM runs no tile of an empty group). Before, the kernel's work and
the model's HBM stream counted every group while the tiles counted the active ones: the op's
B_op / B_k ~ active / groups then also shrank the model's load-path floor (its k-loop), and the
overlap_v1 fill clamped a routed group's mean below one row to one row (32x the CTAs at m = 1/32)."""

from __future__ import annotations

import numpy as np
import pytest

from moesim.perf import efficiency as E
from moesim.perf.models import waves_v1
from moesim.perf.profile.work import family_work

SMS, PEAK, BW = 132, 1979e12, 4.8e12
# a load-path-bound fitted kernel: the k-loop of one CTA (ceil(k / 128) x kb_ns) is slower than
# one expert's weights streamed from HBM, as on small-SM-count fits
SLOW_LOOP = {"eta_c": 0.73, "eta_m": 0.79, "alpha_us": 9.9, "kb_ns": 400.0, "sm_GBps": 96.5}
N, K, GROUPS = 4096.0, 7168.0, 32.0


def _routed_shape(m, active):
    return {"m": m, "n": N, "k": K, "groups": GROUPS, "active": active, "tile_pad": E.routed_tile_padding(m)}


def _op_memory_side(m, active, p):
    """alpha + B_op / B_k x (memory side - alpha): the cost model's memory side of the op (cost.py via
    efficiency.side_efficiencies), B_op the workload's bytes of `active` experts."""
    from moesim.workload.ops import matmul_work

    rows = GROUPS * m
    _, b_w, b_a, b_o = matmul_work(rows, N, K, weights=active, w_bytes=1.0, a_bytes=1.0, out_bytes=2.0, block=0)
    sh = _routed_shape(m, active)
    _, b_in, b_out, _ = family_work("grouped_gemm", "fp8_block", SMS, sh)
    _, mem, alpha = waves_v1.model_sides("grouped_gemm", "fp8_block", SMS, PEAK, BW, p, sh)
    return alpha + (b_w + b_a + b_o) / (b_in + b_out) * (mem - alpha), alpha


@pytest.mark.parametrize("m", [1.0 / 32.0, 0.125, 0.5])
def test_family_work_reads_the_active_groups_weights(m):
    active = GROUPS * -np.expm1(-m)
    _, b_in, b_out, _ = family_work("grouped_gemm", "fp8_block", SMS, _routed_shape(m, active))
    assert b_in == pytest.approx(active * N * K + GROUPS * m * K, rel=1e-12)  # FP8 weights + activations
    _, b_all, _, _ = family_work("grouped_gemm", "fp8_block", SMS, {"m": m, "n": N, "k": K, "groups": GROUPS})
    assert b_all == pytest.approx(GROUPS * N * K + GROUPS * m * K, rel=1e-12)  # measured rows: every group


@pytest.mark.parametrize("m", [1.0 / 32.0, 0.125])
def test_routed_decode_gemm_keeps_its_k_loop_and_its_weight_stream(m):
    """The op's memory side is at least one CTA's k-loop (the model's own floor, whatever the number
    of active experts) and at least the active experts' weights at the full HBM bandwidth."""
    active = GROUPS * -np.expm1(-m)
    t, alpha = _op_memory_side(m, active, SLOW_LOOP)
    k_loop = np.ceil(K / 128.0) * SLOW_LOOP["kb_ns"] * 1e-9
    assert t >= alpha + k_loop * (1 - 1e-9)  # before: x active / groups (0.03 at m = 1/32)
    assert t >= alpha + active * N * K / BW


def test_routed_op_is_priced_at_its_kernels_model_time():
    """End to end on the shipped H200 SGLang profile: a DeepSeek-V3 decode routed GEMM (4 tokens
    per rank, EP8) costs the fitted model's time of its own shape (the work ratio ~ 1: only the
    FP8 scale bytes the kernel work omits differ), and at least its active experts' weights / HBM."""
    from moesim.enums import CostMode
    from moesim.perf.cost import CostModel
    from moesim.perf.profile import load_profile
    from moesim.specs import load_hardware, load_model
    from moesim.workload.ffn import expected_active_slots, routed_experts

    hw, model = load_hardware("h200"), load_model("deepseek-v3")
    prof = load_profile(hw, engine="sglang")
    local, t = 32.0, 4.0
    active = expected_active_slots(local, 256.0, 8.0, t)
    ops = routed_experts(model, pairs=t * 8.0, slots_per_rank=local, active=active, moe_tp=1, layout="masked")
    cm = CostModel(hw, model, CostMode.CALIBRATED, prof)
    for op in (o for o in ops if o.name in ("experts_gate_up", "experts_down")):
        c = cm.kernel(op)
        sh = {**op.shape.as_kwargs(), "tile_pad": E.routed_tile_padding(op.shape.m), "dtype": op.dtype.value}
        kernel_s = prof.kernel_time("grouped_gemm", **sh)
        assert float(c.time_s) - prof.launch_for("grouped_gemm") == pytest.approx(float(kernel_s), rel=2e-3)
        w_bytes = active * float(op.shape.n) * float(op.shape.k) * model.precision.weight_dtype.bytes
        assert float(c.memory_s) >= w_bytes / hw.hbm_bw_Bps
