"""Imported FP8 GEMM rows time the engine's linear op (input quant + GEMM): the fit subtracts a known
quant time per row (moesim.calibration.fit.act_quant), so the GEMM entry prices the GEMM alone and the
step prices its quant passes as their own kernels: the quant is counted once, neither twice nor never."""

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit.act_quant import STAND_IN_NOTE, act_quant_model, quant_seconds
from moesim.calibration.fit.gemm import WAVES_NAMES, WavesData, act_quant_in_rows, fit_waves
from moesim.calibration.fit.peaks import Peaks
from moesim.engine.estimate import estimate
from moesim.perf.profile import load_profile
from moesim.specs import load_hardware

CFG = {"model": "deepseek-v3", "hardware": "h800", "ep": 144, "redundant_experts": 32, "batch": 64}
QUANT_OPS = {"mlp_quant", "mlp_down_quant", "shared_quant", "shared_down_quant", "o_proj_quant", "qkv_a_quant"}
QUANT_OPS |= {"q_b_quant", "w_uk_quant", "w_uv_quant"}
SOURCE = "aiconfigurator-core 0.12.0 h200_sxm sglang 0.5.14 gemm_perf x"
TRUE = dict(zip(WAVES_NAMES, (0.7, 0.75, 3.0, 100.0, 60.0)))
QUANT_BEFORE = {"qkv_a_proj": "qkv_a_quant", "q_b_proj": "q_b_quant", "o_proj": "o_proj_quant"}
QUANT = {"model": "stream_v1", "params": {"alpha_us": 2.0, "eta_m": 0.9}, "source": "test"}


def test_fit_marks_only_imported_fp8_linear_rows():
    imported = pd.DataFrame({"source": [SOURCE] * 3})
    ours = pd.DataFrame({"source": ["moesim runner deepgemm"] * 3})
    assert act_quant_in_rows(imported, "fp8_block")
    assert not act_quant_in_rows(imported, "bf16")  # no quant in a BF16 linear
    assert not act_quant_in_rows(ours, "fp8_block")  # moesim's runners time the GEMM kernel alone


def test_quant_model_is_the_profiles_own_fit_else_the_stand_in():
    peaks = Peaks.from_hardware(load_hardware("h200"))
    fitted = {
        "model": "stream_v1",
        "op": "scale_matrix",
        "backend": "torch_ops",
        "params": {"alpha_us": 1.3, "eta_m": 0.94},
    }
    assert act_quant_model(fitted, None, peaks)["params"] == {"alpha_us": 1.3, "eta_m": 0.94}
    scale_only = {**fitted, "op": "compute_scale"}  # an amax pass, not the quant pass
    elem = {"params": {"eta_c": 1.0, "eta_m": 0.8}, "source": "FMLA-001"}
    stand_in = act_quant_model(scale_only, elem, peaks)
    assert stand_in["params"]["eta_m"] == 0.8 and STAND_IN_NOTE in stand_in["source"]
    assert stand_in["params"]["alpha_us"] == pytest.approx(peaks.launch_s * 1e6)


def _linear_op_rows(peaks):
    """Synthetic linear-op rows: the waves_v1 GEMM at TRUE params plus the QUANT pass of its input."""
    ms = 2.0 ** np.arange(0, 13)
    nk = [(n, k) for n in (2112, 4096, 7168, 24576) for k in (512, 2048, 7168)]
    d = pd.DataFrame([(m, n, k) for n, k in nk for m in ms], columns=["m", "n", "k"])
    d["source"], d["time_s"] = SOURCE, 1.0
    gemm_s = WavesData("gemm", d, "fp8_block", peaks).predict(list(TRUE.values()), np.arange(len(d)))
    d["time_s"] = gemm_s + quant_seconds(d.m.values, d.k.values, peaks, QUANT)
    return d, gemm_s


def _entry_gemm_s(e, d, peaks):
    """The entry's GEMM time per row as the reader prices it: physics x its residual factor."""
    data = WavesData("gemm", d, "fp8_block", peaks)
    phys = data.predict([e["params"][n] for n in WAVES_NAMES], np.arange(len(d)))
    return phys * e["residual"]["_data"].factor({c: d[c].values for c in ("m", "n", "k")})


def test_linear_op_rows_fit_the_gemm_alone():
    peaks = Peaks.from_hardware(load_hardware("h200"))
    d, gemm_s = _linear_op_rows(peaks)
    q = quant_seconds(d.m.values, d.k.values, peaks, QUANT)
    assert (q / d.time_s.values).max() > 0.3  # the quant is a large share at small m: the test can see it
    e = fit_waves("gemm", d, "fp8_block", "b", peaks, "h200", quant=QUANT)
    assert e["act_quant_in_rows"] and e["act_quant_model"] == QUANT
    np.testing.assert_allclose(_entry_gemm_s(e, d, peaks), gemm_s, rtol=0.02)  # not quant + GEMM
    assert e["cv"]["median_abs_pct"] < 2 and e["cv"]["leave_one_shape_out"]["median_abs_pct"] < 2
    # without the quant model the entry would price the linear op: over the GEMM by the quant
    lin = fit_waves("gemm", d, "fp8_block", "b", peaks, "h200")
    assert "act_quant_model" not in lin
    np.testing.assert_allclose(_entry_gemm_s(lin, d, peaks), d.time_s.values, rtol=0.02)


def test_residual_is_that_of_the_gemm_part():
    """A measured excess on the linear op lands on the GEMM part: known + GEMM x R = measured."""
    peaks = Peaks.from_hardware(load_hardware("h200"))
    d, gemm_s = _linear_op_rows(peaks)
    q = quant_seconds(d.m.values, d.k.values, peaks, QUANT)
    slow = (d.n == 4096).values & (d.k == 2048).values  # one (n, k) runs a slower kernel config
    d.loc[slow, "time_s"] = q[slow] + 1.3 * gemm_s[slow]
    e = fit_waves("gemm", d, "fp8_block", "b", peaks, "h200", quant=QUANT)
    got = _entry_gemm_s(e, d, peaks)
    np.testing.assert_allclose(got[slow], 1.3 * gemm_s[slow], rtol=0.03)


def test_quant_passes_priced_as_their_own_ops():
    cal = estimate(**CFG)
    priced = {o["name"] for o in cal.ops if o["time_s"] > 0}
    assert QUANT_OPS <= priced  # counted: the GEMM entry no longer holds them
    assert not any("inside the FP8 GEMM times" in n for n in cal.notes)
    roof = estimate(**CFG, cost_mode="roofline")
    assert QUANT_OPS <= {o["name"] for o in roof.ops if o["time_s"] > 0}


def _same_input(g, q, groups=1.0):
    assert q.shape.kernel_family == "quant" and float(q.present) == 1.0
    assert float(q.shape.m[0]) == float(g.shape.m[0])
    assert float(q.shape.k[0]) == float(g.shape.k[0]) * groups


def test_dense_down_projection_quantises_its_input():
    from moesim.specs import load_model
    from moesim.workload.ffn import dense_ffn_ops

    ops = {o.name: o for o in dense_ffn_ops(load_model("deepseek-v3"), t=np.array([64.0]), tp=1)}
    _same_input(ops["mlp_down"], ops["mlp_down_quant"])
    _same_input(ops["mlp_gate_up"], ops["mlp_quant"])


def test_every_bf16_fed_fp8_projection_has_its_input_quant():
    """The GEMM entries price the GEMM alone: a block-FP8 projection whose input leaves a norm or the
    attention core in BF16 needs its quant pass as an op of the step, with the GEMM's [m, k] input."""
    from moesim.specs import load_model
    from moesim.workload.attention import attention_ops

    t = np.array([64.0])
    kw = dict(t=t, b_req=t, q_len=1.0, context=np.array([4096.0]), tp=1)
    for prefill, pairs in ((False, QUANT_BEFORE), (True, {**QUANT_BEFORE, "kv_b_proj": "kv_b_quant"})):
        ops = {o.name: o for o in attention_ops(load_model("deepseek-v3"), prefill=prefill, **kw)}
        for gemm_name, quant_name in pairs.items():
            _same_input(ops[gemm_name], ops[quant_name])
        if not prefill:  # the absorb BMMs: [t, heads x k] inputs
            for bmm, quant in (("w_uk_bmm", "w_uk_quant"), ("w_uv_bmm", "w_uv_quant")):
                _same_input(ops[bmm], ops[quant], float(ops[bmm].shape.groups))
    bf16 = {o.name for o in attention_ops(load_model("llama-3-1-70b"), prefill=False, **kw)}
    assert not any(n.endswith("_quant") for n in bf16)  # BF16 activations: no quant pass


@pytest.mark.slow  # ~3 s each: loads the imported GEMM table and the profile's residuals
@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_shipped_gemm_plus_its_input_quant_is_the_measured_linear_op(engine):
    """End to end on the shipped H200 profile: `kernel gemm` (the GEMM alone) plus the input quant the
    step prices reproduce the measured linear-op rows; counting the quant twice or never would miss them
    by its share (median 12-18 % of a row)."""
    from pathlib import Path

    from moesim.calibration.fit.data import load_measurements
    from moesim.engine.pricing import resolve_specs
    from moesim.enums import CostMode
    from moesim.perf.kernel import price_kernel
    from moesim.specs.loader import data_root
    from moesim.workload.kernels import kernel_op

    model, hw = resolve_specs("deepseek-v3", "h200", None)
    prof = load_profile(hw, engine=engine)
    if not prof.gemm_act_quant():
        pytest.skip("shipped profile predates act_quant_model (calibration/profiles not regenerated)")
    rows = load_measurements([Path(data_root()) / f"calibration/measurements/h200/{engine}/gemm_perf.csv.gz"])
    rows = rows[(rows.dtype == "fp8_block") & (rows.exclude == "")].sample(40, random_state=0)
    err, share = [], []
    for r in rows.itertuples():
        res = price_kernel(kernel_op(model, hw, "gemm", m=r.m, n=r.n, k=r.k), model, hw, CostMode.CALIBRATED, prof)
        err.append(abs((res["time_s"] + res["input_quant_s"]) / r.time_s - 1.0))
        share.append(res["input_quant_s"] / r.time_s)
    assert np.median(err) < 0.02 and np.percentile(err, 90) < 0.05
    assert np.median(share) > 0.05  # the quant is a visible share: twice or never would fail above


def test_single_node_deepep_rows_take_the_parents_nic_share_per_node_count():
    """vLLM's DeepEP normal rows are one node: its multi-node pricing uses the same library's measured
    NIC share per node count (SGLang's knots), not a flat 100 % of the NIC."""
    from moesim.calibration.fit.comm_deepep import parent_knots

    assert parent_knots({"params": {"rdma_knot_nodes": [2, 8], "rdma_knot_frac": [0.9, 0.45]}}) == {
        "rdma_knot_nodes": [2.0, 8.0],
        "rdma_knot_frac": [0.9, 0.45],
    }
    assert parent_knots({"params": {"rdma_frac_nominal": 0.88}}) == {} and parent_knots(None) == {}
    # H200 vLLM's single-node DeepEP-normal fit: over nodes, its parent's NIC share (the H800 README fit
    # SGLang's H200 profile inherits, issue 27) and marked derived
    vllm = load_profile(load_hardware("h200"), engine="vllm").data["comm"]["deepep-normal"]
    sgl = load_profile(load_hardware("h200"), engine="sglang").data["comm"]["deepep-normal"]
    for op in ("dispatch", "combine"):
        assert vllm[op]["params"]["rdma_frac_nominal"] == sgl[op]["params"]["rdma_frac_nominal"]
        assert vllm[op]["internode"]["status"] == "derived"
