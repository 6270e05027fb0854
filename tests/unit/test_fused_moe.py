"""Routed experts priced as one fused MoE call where the engine's own tables time one
(moesim.perf.fused_moe): TRT-LLM's H200 CUTLASS fused-MoE table (aiconfigurator-core 0.12.0 h200_sxm
trtllm moe_perf, backend moe_torch_flow_cutlass) against the workload's routed ops, on token counts
held out of the residual (fast) or of the whole fit (slow)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from moesim.enums import CostMode, OpKind, Tag
from moesim.perf import fused_moe as FM
from moesim.perf.cost import CostModel
from moesim.perf.profile import residual as RS
from moesim.perf.profile.reader import load_profile
from moesim.specs import load_hardware, load_model
from moesim.specs.loader import data_root
from moesim.workload.ffn import routed_experts
from moesim.workload.ops import OpWork
from moesim.workload.shapes import FusedMoeShape, GroupedGemmShape

TABLE = data_root() / "calibration" / "measurements" / "h200" / "trtllm" / "moe_perf.csv.gz"
# DeepSeek-V3 / R1 layer (HF config.json): hidden 7168, moe_intermediate_size 2048, 256 experts, top-8
DSV3 = {"hidden": 7168, "n": 2048, "experts": 256, "topk": 8, "tp": 1}
EPS = (1, 4, 8, 16)
HELD_OUT = (2, 4, 8, 16, 32, 64, 128, 256, 512)  # decode token counts per rank (the table's `tokens`)
TOL_MAX = 0.08  # every held-out row within 8 %
TOL_MEDIAN = 0.03  # and half of them within 3 % (the op-by-op pricing: median 19 %, max 33 %)


@pytest.fixture(scope="module")
def specs():
    return load_hardware("h200"), load_model("deepseek-r1")


@pytest.fixture(scope="module")
def rows():
    d = pd.read_csv(TABLE)
    d = d[(d.dtype == "fp8_block") & (d.backend == "moe_torch_flow_cutlass")]
    for k, v in DSV3.items():
        d = d[d[k] == v]
    return d[d.ep.isin(EPS) & d.tokens.isin(HELD_OUT)]


def _routed_ops(model, tokens, ep):
    """The workload's routed ops on one EP rank for the table's workload: `tokens` tokens entering
    the layer, tokens x topk / ep pairs, the table's even spread over the local experts (balanced)."""
    tokens = np.asarray(tokens, float)
    local, pairs = 256.0 / ep, tokens * 8.0 / ep
    return routed_experts(
        model, pairs=pairs, slots_per_rank=local, active=np.minimum(local, np.maximum(pairs, 1.0)), moe_tp=1,
        layout="masked",
    )  # fmt: skip


def _held_out_profile(hw, tokens):
    """The h200 trtllm profile whose fp8 moe residual leaves out every measured shape at `tokens`."""
    prof = load_profile(hw, engine="trtllm")
    v = prof.kernels["moe"]["variants"][0]
    assert (v["dtype"], v["backend"]) == ("fp8_block", "moe_torch_flow_cutlass")
    full = RS.load_residual(v["residual"], prof.path.parent)
    keep = ~np.isclose(full.points[:, full.axes.index("tokens")], np.log(tokens))
    v["residual"] = {**v["residual"], "_data": RS.Residual(full.axes, full.points[keep], full.logr[keep])}
    return prof


def _errors(cm, model, rows, tokens):
    out = []
    for ep in EPS:
        r = rows[(rows.tokens == tokens) & (rows.ep == ep)]
        priced = sum(c.time_s for c in cm.costs(_routed_ops(model, [tokens], ep)))[0]
        out.append(priced / float(r.time_s.iloc[0]) - 1.0)
    return out


def test_routed_moe_matches_held_out_table_rows(specs, rows):
    """Each decode token count held out of the measured residual: the routed run priced through the
    cost model is the table's fused call within TOL; the op-by-op pricing is not (the test's power)."""
    hw, model = specs
    fused, per_op = [], []
    for t in HELD_OUT:
        prof = _held_out_profile(hw, t)
        cm = CostModel(hw, model, CostMode.CALIBRATED, prof)
        fused += _errors(cm, model, rows, t)
        prof.fused_moe = lambda dtype: None  # the parts priced one by one (grouped_gemm entry + passes)
        per_op += _errors(cm, model, rows, t)
    fused, per_op = np.abs(fused), np.abs(per_op)
    assert len(fused) == len(HELD_OUT) * len(EPS)
    assert fused.max() < TOL_MAX and np.median(fused) < TOL_MEDIAN, np.round(fused, 3)
    assert per_op.max() > TOL_MAX and np.median(per_op) > TOL_MEDIAN


def test_hand_built_fused_call_is_the_table_call(specs, rows):
    """One fused op (what a workload may emit: kernel_family moe and the table's keys) costs the
    entry's fitted call at a measured shape (residual exact hit), with the op's own FLOPs and bytes."""
    hw, model = specs
    prof = load_profile(hw, engine="trtllm")
    cm = CostModel(hw, model, CostMode.CALIBRATED, prof)
    shape = FusedMoeShape(
        tokens=np.array([256.0]), hidden=7168.0, n=2048.0, experts=256.0, topk=8.0, ep=8.0, tp=1.0,
        active=np.array([32.0]),
    )  # fmt: skip
    op = OpWork("experts", OpKind.GROUPED_GEMM, model.precision.weight_dtype, 4, flops=1.0, bytes_act=2.0,
                shape=shape, tags=frozenset({Tag.ROUTED}))  # fmt: skip
    c = cm.cost(op)
    meas = float(rows[(rows.tokens == 256) & (rows.ep == 8)].time_s.iloc[0])
    assert c.time_s[0] == pytest.approx(meas, rel=1e-3)
    assert c.flops[0] == 1.0 and c.bytes[0] == 2.0 and c.provenance.startswith("fitted")


def test_split_keeps_parts_and_total(specs):
    """The run's time is one call's, split over [permute,] gate_up, act, down by their own prices:
    names, tags (EXPERTS_DOWN for SBO), FLOPs stay; table keys on the ops give the same call."""
    hw, model = specs
    cm = CostModel(hw, model, CostMode.CALIBRATED, load_profile(hw, engine="trtllm"))
    for layout in ("masked", "contiguous"):
        ops = routed_experts(model, pairs=np.array([64.0, 4096.0]), slots_per_rank=32.0, active=np.array([20.0, 32.0]),
                             moe_tp=1, layout=layout)  # fmt: skip
        costs = cm.costs(ops)
        call = FM.price_call(cm, FM.fused_op(model, ops))
        np.testing.assert_allclose(sum(c.time_s for c in costs), call.time_s, rtol=1e-9)
        assert [c.name for c in costs] == [o.name for o in ops]
        assert all(c.provenance.endswith(FM.PROVENANCE_SUFFIX) for c in costs)
        assert Tag.EXPERTS_DOWN in costs[-1].tags and all(c.time_s[0] > 0 for c in costs)
        np.testing.assert_allclose(costs[-1].flops, ops[-1].flops)
        keyed = [dataclasses.replace(o, shape=dataclasses.replace(o.shape, tokens=np.array([64.0, 4096.0]), ep=8.0))
                 if isinstance(o.shape, GroupedGemmShape) else o for o in ops]  # fmt: skip
        np.testing.assert_allclose(sum(c.time_s for c in cm.costs(keyed)), call.time_s, rtol=1e-9)


def test_engines_with_separate_kernels_stay_op_by_op(specs):
    """SGLang's profile (DeepEP masked / contiguous grouped GEMMs, separate kernels) and the
    roofline mode price the parts one by one, as before."""
    hw, model = specs
    ops = _routed_ops(model, [64.0], 8)
    for mode, engine in ((CostMode.CALIBRATED, "sglang"), (CostMode.ROOFLINE, "trtllm")):
        prof = load_profile(hw, engine=engine)
        cm = CostModel(hw, model, mode, prof)
        assert [c.time_s[0] for c in cm.costs(ops)] == [cm.cost(o).time_s[0] for o in ops]
    assert load_profile(hw, engine="sglang").fused_moe("fp8") is None
    assert load_profile(hw, engine="trtllm").fused_moe("fp8")["backend"] == "moe_torch_flow_cutlass"


@pytest.mark.slow
def test_routed_moe_matches_rows_held_out_of_the_whole_fit(specs, rows):
    """Each decode token count held out of the whole fit (physics params and residual refitted on the
    other rows, as `moesim calibrate fit` fits them): the priced routed run within TOL of the table."""
    from moesim.calibration.fit import gemm as G
    from moesim.calibration.fit import moe_tables as MT
    from moesim.calibration.fit import residual as R
    from moesim.calibration.fit.data import load_measurements
    from moesim.calibration.fit.peaks import Peaks

    hw, model = specs
    d = load_measurements([TABLE])
    d = d[(d.kernel == "moe") & (d.dtype == "fp8_block") & (d.backend == "moe_torch_flow_cutlass") & (d.exclude == "")]
    d = MT.fit_rows(d, "fp8_block cutlass", frozenset(), [])
    errs = []
    for t in HELD_OUT:
        data = G.WavesData("moe", d[d.tokens != t].reset_index(drop=True), "fp8_block", Peaks.from_hardware(hw))
        p = data.fit(np.arange(len(data.t)))
        points, logr = R.residual_arrays(data, R.log_points(data.d, R.AXES["moe"]), p)
        prof = load_profile(hw, engine="trtllm")
        v = prof.kernels["moe"]["variants"][0]
        v["params"] = {**v["params"], **dict(zip(data.names, (float(x) for x in p)))}
        v["residual"] = {**v["residual"], "_data": RS.Residual(R.AXES["moe"], points, logr)}
        errs += _errors(CostModel(hw, model, CostMode.CALIBRATED, prof), model, rows, t)
    errs = np.abs(errs)
    assert errs.max() < TOL_MAX and np.median(errs) < TOL_MEDIAN, np.round(errs, 3)
