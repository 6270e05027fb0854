"""Typed kernel shapes (moesim.workload.shapes): a misspelt field is an error where the shape is
built, every op kind's shape round-trips through as_kwargs, and the keywords the profile is priced
with are the shape columns it always was."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moesim.enums import Dtype, OpKind, Phase
from moesim.errors import ConfigError
from moesim.grid.core import Grid
from moesim.perf.fused_moe import fused_op, routed_runs
from moesim.specs.loader import load_hardware, load_model
from moesim.workload import build
from moesim.workload import shapes as S
from moesim.workload.kernels import OPS, kernel_op
from moesim.workload.ops import OpWork

# the profile keywords of each shape (what the kernel models read: moesim.perf.profile.reader)
KEYS = {
    S.GemmShape: {"m", "n", "k"},
    S.BmmShape: {"m", "n", "k", "groups"},
    S.GroupedGemmShape: {"m", "n", "k", "groups", "active", "layout"},
    S.QuantShape: {"m", "k", "kernel_family"},
    S.FusedMoeShape: {"tokens", "hidden", "n", "experts", "topk", "ep", "tp", "active", "layout", "kernel_family"},
    S.AttentionShape: {"batch", "q_len", "context", "heads", "prefill", "kv_dtype"},
    S.AllToAllShape: {"ep", "tokens", "mode", "experts", "moe_tp", "msg_bytes"},
    S.CollectiveShape: {"msg_bytes", "gpus"},
    S.ElementwiseShape: set(),
}
OPTIONAL = {S.AttentionShape: {"groups", "k"}, S.AllToAllShape: {"sms"}}  # set by some ops only
FLAGS = {
    "gemm": dict(m=64, n=2112, k=7168),
    "grouped_gemm": dict(m=64, n=4096, k=7168, groups=32, layout="contiguous"),
    "mla_decode": dict(batch=32, q_len=2, context=4096),
    "mla_prefill": dict(batch=1, context=4096),
    "dispatch": dict(ep=16, tokens=128, mode="deepep-normal"),
    "combine": dict(ep=16, tokens=128),
    "all_reduce": dict(gpus=8, nbytes=1 << 20),
    "all_gather": dict(gpus=8, nbytes=1 << 20),
}


def _grid(**kw):
    base = dict(tp=2, dp=8, ep=16, moe_tp=1, batch=32, context=4096, mtp=1, acceptance=0.8, redundant=0)
    return Grid.single(**{**base, **kw})


def _ops():
    """Every op the workload builds (MLA and GQA, decode with a fused chunk and prefill, the a2a
    modes), the `moesim kernel` ops and a fused MoE call."""
    hw, v3, llama = load_hardware("h200"), load_model("deepseek-v3"), load_model("llama-3-1-70b")
    ops = []
    chunk = (np.array([512.0]), np.array([2048.0]))
    for model in (v3, llama):
        for phase, comm, ch in ((Phase.DECODE, "deepep-ll", chunk), (Phase.PREFILL, "deepep-normal", None)):
            wl = build(model, hw, _grid(), phase, comm, chunk=ch)
            ops += wl.moe_layer + wl.dense_layer + wl.step + wl.mtp
    ops += [kernel_op(v3, hw, op, **FLAGS[op]) for op in OPS]
    layer = build(v3, hw, _grid(), Phase.DECODE, "deepep-ll").moe_layer
    ops.append(fused_op(v3, [layer[i] for i in routed_runs(layer)[0]]))
    return ops


@pytest.fixture(scope="module")
def ops():
    return _ops()


def test_a_misspelt_field_is_an_error():
    with pytest.raises(TypeError, match="kk"):
        S.GemmShape(m=1.0, n=2.0, kk=3.0)
    with pytest.raises(TypeError, match="contxt"):
        S.AttentionShape(batch=1, q_len=1, contxt=4096, heads=128, prefill=False, kv_dtype="fp8")
    with pytest.raises(TypeError):  # a required field left out
        S.GroupedGemmShape(m=1.0, n=2.0, k=3.0, groups=4.0, layout="masked")
    with pytest.raises(TypeError):  # positional: the field names are the contract
        S.GemmShape(1.0, 2.0, 3.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        S.GemmShape(m=1.0, n=2.0, k=3.0).m = 4.0


def test_an_op_carries_a_shape_of_its_kind():
    gemm = S.GemmShape(m=1.0, n=2.0, k=3.0)
    OpWork("g", OpKind.GEMM, Dtype.FP8, 1, shape=gemm)
    with pytest.raises(TypeError, match="GemmShape"):
        OpWork("g", OpKind.GEMM, Dtype.FP8, 1, shape={"m": 1.0, "n": 2.0, "k": 3.0})  # the old free dict
    with pytest.raises(TypeError, match="AttentionShape"):
        OpWork("a", OpKind.ATTENTION, Dtype.BF16, 2, shape=gemm)
    with pytest.raises(TypeError, match="AttentionShape"):
        OpWork("a", OpKind.ATTENTION, Dtype.BF16, 2)  # no shape: only elementwise ops go without
    assert OpWork("e", OpKind.ELEMENTWISE, Dtype.BF16, 1).shape.as_kwargs() == {}


def test_kernel_op_rejects_an_unknown_flag():
    hw, model = load_hardware("h200"), load_model("deepseek-v3")
    with pytest.raises(ConfigError, match="unknown shape flag.*contxt.*allowed"):
        kernel_op(model, hw, "mla_decode", batch=1, contxt=4096)


def test_every_shape_round_trips(ops):
    seen = set()
    for op in ops:
        s = op.shape
        kw = s.as_kwargs()
        seen.add(type(s))
        back = type(s)(**kw)
        assert back.as_kwargs().keys() == kw.keys(), op.name
        for key, v in kw.items():
            np.testing.assert_array_equal(np.asarray(getattr(back, key)), np.asarray(v), err_msg=f"{op.name}.{key}")
        assert list(kw) == [f.name for f in dataclasses.fields(s) if getattr(s, f.name) is not None]
    assert seen == set(KEYS)  # every shape kind is built somewhere


def test_profile_keywords_are_the_shape_columns(ops):
    """as_kwargs gives the keys the profile was always priced with (the old dict's), no more."""
    for op in ops:
        keys = set(op.shape.as_kwargs())
        want = KEYS[type(op.shape)]
        assert want <= keys <= want | OPTIONAL.get(type(op.shape), set()), (op.name, keys)
    gqa = [o for o in ops if o.kind == OpKind.ATTENTION and o.shape.groups is not None]
    mla = [o for o in ops if o.kind == OpKind.ATTENTION and o.shape.groups is None]
    assert gqa and mla and all(o.shape.k is not None for o in gqa)
    normal = [o for o in ops if o.kind == OpKind.ALL_TO_ALL and o.shape.mode == "deepep-normal"]
    assert normal and all(o.shape.sms > 0 for o in normal)  # the SMs DeepEP's normal kernels hold
    assert all(o.shape.sms is None for o in ops if o.kind == OpKind.ALL_TO_ALL and o.shape.mode == "deepep-ll")


def test_shapes_broadcast_like_the_grid():
    hw, model = load_hardware("h200"), load_model("deepseek-v3")
    base = dict(tp=1, dp=16, ep=16, moe_tp=1, context=4096, mtp=1, acceptance=0.8, redundant=0)
    grid = Grid(batch=np.array([8.0, 64.0]), **base)  # the scalars broadcast to the batch axis
    wl = build(model, hw, grid, Phase.DECODE, "deepep-ll")
    up = next(o for o in wl.moe_layer if o.name == "experts_gate_up")
    assert np.shape(up.shape.m) == np.shape(up.shape.active) == (2,)
    assert up.shape.m[1] > up.shape.m[0]
