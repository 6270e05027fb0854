"""Imported FP8 GEMM rows time the engine's linear op with its input quant: the fit marks the variant
and the step model does not price its own pre-GEMM quant passes a second time."""

import pandas as pd

from moesim.calibration.fit.gemm import act_quant_in_rows
from moesim.engine.phases import estimate
from moesim.perf.profile import load_profile
from moesim.perf.profile.reader import profile_path_for
from moesim.specs import load_hardware

CFG = {"model": "deepseek-v3", "hardware": "h800", "ep": 144, "redundant_experts": 32, "batch": 64}
QUANT_OPS = {"mlp_quant", "shared_quant", "o_proj_quant"}


def test_fit_marks_only_imported_fp8_linear_rows():
    imported = pd.DataFrame({"source": ["aiconfigurator-core 0.12.0 h200_sxm sglang 0.5.14 gemm_perf x"] * 3})
    ours = pd.DataFrame({"source": ["moesim runner deepgemm"] * 3})
    assert act_quant_in_rows(imported, "fp8_block")
    assert not act_quant_in_rows(imported, "bf16")  # no quant in a BF16 linear
    assert not act_quant_in_rows(ours, "fp8_block")  # moesim's runners time the GEMM kernel alone


def test_shipped_engine_profiles_carry_the_flag_and_readme_profiles_do_not():
    def prof(gpu, engine=None):
        return load_profile(load_hardware(gpu), engine=engine)

    assert prof("h200", "sglang").gemm_includes_act_quant()
    assert prof("h800", "trtllm").gemm_includes_act_quant()  # derived from H200: carried
    assert prof("h800", "vllm").gemm_includes_act_quant()  # borrowed SGLang DeepGEMM variant: carried
    generic = load_profile(load_hardware("h800"), path=profile_path_for("h800", None))
    assert not generic.gemm_includes_act_quant()  # DeepGEMM README rows: the GEMM alone


def test_quant_passes_priced_once():
    cal = estimate(**CFG)
    names = {o["name"] for o in cal.ops if o["time_s"] > 0}
    assert not names & QUANT_OPS
    assert any("inside the FP8 GEMM times" in n for n in cal.notes)
    assert sum("inside the FP8 GEMM times" in n for n in cal.notes) == 1
    roof = estimate(**CFG, cost_mode="roofline")  # no fitted GEMM: the passes are their own kernels
    assert QUANT_OPS <= {o["name"] for o in roof.ops if o["time_s"] > 0}


def test_single_node_deepep_rows_take_the_parents_nic_share_per_node_count():
    """vLLM's DeepEP normal rows are one node: its multi-node pricing uses the same library's measured
    NIC share per node count (SGLang's knots), not a flat 100 % of the NIC."""
    from moesim.calibration.fit.comm_deepep import parent_knots

    assert parent_knots({"params": {"rdma_knot_nodes": [2, 8], "rdma_knot_frac": [0.9, 0.45]}}) == {
        "rdma_knot_nodes": [2.0, 8.0],
        "rdma_knot_frac": [0.9, 0.45],
    }
    assert parent_knots({"params": {"rdma_frac_nominal": 0.88}}) == {} and parent_knots(None) == {}
    vllm = load_profile(load_hardware("h200"), engine="vllm").data["comm"]["deepep-normal"]
    sgl = load_profile(load_hardware("h200"), engine="sglang").data["comm"]["deepep-normal"]
    for op in ("dispatch", "combine"):
        assert vllm[op]["params"]["rdma_knot_frac"] == sgl[op]["params"]["rdma_knot_frac"]
