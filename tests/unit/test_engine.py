"""The engine's shortcuts are exact: pricing context-free ops once per distinct row (and sharing
costs across acceptance values) gives the same numbers as pricing every row."""

import numpy as np
import pytest

import moesim.engine.evaluate as engine
import moesim.engine.pricing as pricing
from moesim import load_hardware, load_model
from moesim.engine.settings import Pricing
from moesim.grid.core import Grid


@pytest.mark.parametrize(
    "phase,cost_mode,overlap",
    [
        ("decode", "calibrated", None),
        ("decode", "roofline", "ideal"),
        ("prefill", "calibrated", None),
        ("decode", "roofline", "sbo"),
    ],
)
def test_dedup_paths_equal_full_pricing(monkeypatch, phase, cost_mode, overlap):
    m, h = load_model("deepseek-v3"), load_hardware("h800")
    batch = [1, 4, 32, 128] if phase == "decode" else [2048, 16384]
    g = Grid.product(
        tp=[1, 2],
        dp=[16],
        ep=[16, 32],
        moe_tp=[1],
        batch=batch,
        context=[512, 1000, 4096, 8192, 30000],
        mtp=[0, 1] if phase == "decode" else [0],
        acceptance=[0.6, 0.9],
        redundant=[0, 32],
    )
    g = Grid(**{**g.to_dict(), "ep": g.tp * g.dp})
    g = Grid(**{a: np.tile(v, 4) for a, v in g.to_dict().items()})  # big enough for the shortcuts
    assert g.size >= 512
    fast, _ = pricing.evaluate_grid(
        m, h, g, phase=phase, overlap=overlap, pricing=Pricing.of(cost_mode=cost_mode, context_dist="exp")
    )
    monkeypatch.setattr(engine, "_context_free_rows", lambda grid: None)
    monkeypatch.setattr(pricing, "_dedupe", lambda grid: None)
    slow, _ = pricing.evaluate_grid(
        m, h, g, phase=phase, overlap=overlap, pricing=Pricing.of(cost_mode=cost_mode, context_dist="exp")
    )
    for k, v in slow.values.items():
        a, b = np.asarray(fast.values[k]), np.asarray(v)
        if a.dtype == object:
            assert (a == b).all(), k
        else:
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=0, err_msg=k)


def test_measured_mode_uses_raw_rows_where_covered():
    """DG-001: M=64 N=2112 K=7168 at 206 TFLOPS on H800 -> 9.41 us kernel time (+ launch gap)."""
    from moesim.perf.cost import CostModel
    from moesim.perf.profile import load_profile
    from moesim.workload.kernels import kernel_op

    m, h = load_model("deepseek-v3"), load_hardware("h800")
    prof = load_profile(h)
    covered = CostModel(h, m, "measured", prof).cost(kernel_op(m, h, "gemm", m=64, n=2112, k=7168))
    assert covered.provenance == "measured"
    assert float(covered.time_s[0]) == pytest.approx(2 * 64 * 2112 * 7168 / 206e12 + prof.launch_s, rel=0.01)
    outside = CostModel(h, m, "measured", prof).cost(kernel_op(m, h, "gemm", m=1000, n=2112, k=7168))
    assert outside.provenance == "fitted"
