"""TRT-LLM-gen's expanded-space FP8 activation (moesim.calibration.fit.moe_tables.EXPANDED_ACT,
moesim.perf.profile.work.expanded_act_iters): an EP-free cost in tokens x topk x inter / 128 iterations,
priced per iteration with the fitted act_iter_ns, for vLLM's TrtLlmFp8Experts backends only."""

from __future__ import annotations

import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit.moe_work import work_columns
from moesim.perf.models import waves_v1
from moesim.perf.profile import schema as S
from moesim.perf.profile.work import expanded_act_iters

MONO = "vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmonolithic"
LAYER = dict(hidden=3072.0, n=1024.0, experts=256.0, topk=8.0)
P = {"eta_c": 0.3, "eta_m": 0.7, "alpha_us": 30.0, "kb_ns": 20.0, "sm_GBps": 300.0}
SMS, PEAK, BW = 148, 4.5e15, 8e12


def _iters_brute(t: int, k: int, inter: int, sms: int) -> int:
    """Iterations of activationDeepSeekKernel's loops (grid x = scale blocks, y = token groups, z = picks)."""
    blocks = -(-inter // 128)
    ctas = blocks * t * k
    tpc = 4 if ctas > sms * 32 else 2 if ctas > sms * 4 else 1
    return sum(1 for _ in range(k) for _ in range(0, t, tpc) for _ in range(blocks))


@pytest.mark.parametrize("t", [1, 3, 16, 100, 4096])
@pytest.mark.parametrize("tp", [1.0, 2.0])
def test_iterations_match_the_kernel_loops(t, tp):
    shape = dict(LAYER, tokens=float(t), tp=tp, expanded_act=1.0)
    assert float(expanded_act_iters(shape, SMS)) == _iters_brute(t, 8, int(1024 / tp), SMS)


def test_no_iterations_without_the_flag():
    assert float(expanded_act_iters(dict(LAYER, tokens=4096.0), SMS)) == 0.0


def test_activation_time_is_the_same_at_every_ep():
    """The expanded-space kernel visits every (token, pick) slot, local or not: its time does not fall with EP."""
    p = {**P, "act_iter_ns": 300.0}
    for ep in (1.0, 8.0, 256.0):
        shape = work_columns(dict(LAYER, tokens=16384.0, ep=ep), "balanced", "fp8_block")
        base = waves_v1.model_time("moe", "fp8_block", SMS, PEAK, BW, p, shape)
        more = waves_v1.model_time("moe", "fp8_block", SMS, PEAK, BW, p, {**shape, "expanded_act": 1.0})
        iters = _iters_brute(16384, 8, 1024, SMS)
        assert float(more - base) == pytest.approx(iters * 300e-9 / SMS)


def test_the_entry_flag_prices_the_reader_like_the_fit():
    """A fitted entry carries expanded_act (a pass key) and act_iter_ns: the reader's shape gets the flag."""
    p = {**P, "act_iter_ns": 300.0, "expanded_act": 1.0}
    shape = work_columns(dict(LAYER, tokens=2048.0, ep=32.0), "balanced", "fp8_block")
    off = waves_v1.model_time("moe", "fp8_block", SMS, PEAK, BW, {**p, "expanded_act": 0.0}, shape)
    on = waves_v1.model_time("moe", "fp8_block", SMS, PEAK, BW, p, shape)
    assert float(on) > float(off)
    S._Checker("x").fields("params", p, S.PARAMS[S.WAVES])  # allowed waves_v1 params


def _rows(backend: str) -> pd.DataFrame:
    rows = [
        dict(LAYER, n=n, tokens=t, ep=ep, tp=1.0, layout="fused")
        for n in (1024.0, 2048.0)
        for t in (16.0, 256.0, 4096.0, 16384.0)
        for ep in (1.0, 8.0, 64.0)
    ]
    return pd.DataFrame(rows).assign(backend=backend, kernel="moe", dtype="fp8_block", exclude="", source="x")


@pytest.mark.parametrize(
    "backend, dtype, flagged",
    [
        (MONO, "fp8_block", True),
        ("vllm_fp8moe_flashinfer_trtllm_trtllmfp8expertsmodular", "fp8_block", True),
        ("sglang_flashinfer_trtllm_moe", "fp8_block", True),
        ("sglang_flashinfer_trtllm_moe", "bf16", False),  # TRT-LLM-gen BF16 fuses the activation in its GEMM
        ("vllm_unquantizedfusedmoe_flashinfer_trtllm_trtllmbf16experts", "bf16", False),
        ("vllm_fp8moe_flashinfer_cutlass_flashinferexperts", "fp8", False),
    ],
)
def test_only_trtllm_gen_fp8_block_rows_get_the_activation(backend, dtype, flagged):
    d = _rows(backend).assign(dtype=dtype)
    assert (MT.pass_keys(d).get("expanded_act") == 1.0) is flagged
    assert (MT.ACT_ITER_PARAM in MT.extra_params(d, G.HOST_NAME)) is flagged


@pytest.mark.slow
def test_fit_recovers_the_iteration_time():
    """Rows made by the model with act_iter_ns = 300 ns: the fit finds it back (the EP-free part)."""
    from moesim.calibration.fit.peaks import Peaks
    from moesim.specs.loader import load_hardware

    peaks = Peaks.from_hardware(load_hardware("b200"))
    d = _rows(MONO)
    shape = {c: d[c].values.astype(float) for c in ("tokens", "hidden", "n", "experts", "topk", "ep", "tp")}
    p = {**P, "act_iter_ns": 300.0, "expanded_act": 1.0, "token_bytes": MT.FINALIZE_BYTES}
    d["time_s"] = waves_v1.model_time(
        "moe",
        "fp8_block",
        peaks.sms,
        peaks.peak("fp8_block"),
        peaks.hbm_Bps,
        p,
        work_columns(shape, "balanced", "fp8_block"),
    )
    e = G.fit_waves("moe", d, "fp8_block", MONO, peaks, "b200")
    assert e["params"]["expanded_act"] == 1.0
    assert e["params"]["act_iter_ns"] == pytest.approx(300.0, rel=0.1)


def test_derived_grouped_gemm_leaves_the_moe_only_kernel_out():
    """grouped_gemm derived from the moe fit takes its GEMM params, not the fused layer's activation kernel."""
    v = {"params": {**P, "act_iter_ns": 300.0, "expanded_act": 1.0}, "dtype": "fp8_block", "backend": MONO}
    g = G.derive_grouped({"variants": [v], "gpu": "b200", "source": "x"})
    assert "act_iter_ns" not in g["params"] and "expanded_act" not in g["params"]
    assert g["params"]["eta_c"] == P["eta_c"]
