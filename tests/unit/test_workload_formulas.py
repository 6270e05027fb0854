"""Closed forms of the workload's one-formula-per-concept functions, against hand numbers
(issue 13 item 2): GEMM work incl. FP8 block scales, MLA work from the model's dims, all-to-all
copies and bytes, op tags."""

import numpy as np
import pytest

from moesim.enums import CommMode, Phase, Tag
from moesim.grid.core import Grid
from moesim.perf import efficiency as E
from moesim.specs.loader import load_hardware, load_model
from moesim.workload import build
from moesim.workload.attention import mla_decode_work, mla_prefill_work
from moesim.workload.comm import a2a_copies, a2a_network_bytes, dispatch_bytes_per_token
from moesim.workload.kernels import kernel_op
from moesim.workload.ops import Operands, act_elem_bytes, gemm, matmul_work, weight_elem_bytes


@pytest.fixture(scope="module")
def v3():
    return load_model("deepseek-v3"), load_hardware("h800")


def test_gemm_flops_and_bytes_fp8_with_block_scales():
    # [64, 7168] x [7168, 2112], FP8 weights and activations, 128x128 / 1x128 fp32 scales
    f, w, a, o = matmul_work(64, 2112, 7168, w_bytes=1.0, a_bytes=1.0, out_bytes=2.0, block=128)
    assert f == 2 * 64 * 2112 * 7168 == 1_937_768_448
    assert w == 2112 * 7168 + 2112 * 7168 / (128 * 128) * 4 == 15_142_512  # + 924 blocks x 4 B
    assert a == 64 * 7168 + 64 * (7168 / 128) * 4 == 473_088  # + 56 tiles per row x 4 B
    assert o == 64 * 2112 * 2 == 270_336
    op = gemm("g", np.asarray([64.0]), 2112, 7168, Operands(w_bytes=1.0, a_bytes=1.0, block=128))
    assert op.bytes_total[0] == 15_885_936  # = moesim kernel --op gemm (golden kernel_gemm)


def test_gemm_bytes_by_dtype_without_scales():
    f, w, a, o = matmul_work(64, 2112, 7168, w_bytes=2.0, a_bytes=2.0, out_bytes=2.0, block=128)
    assert (w, a, o) == (2112 * 7168 * 2, 64 * 7168 * 2, 64 * 2112 * 2)  # BF16: no scales
    assert weight_elem_bytes(1.0, 0) == 1.0 and act_elem_bytes(1.0, 0) == 1.0  # per-tensor scale
    assert weight_elem_bytes(1.0, 128) == 1.0 + 4.0 / 16384 and act_elem_bytes(1.0, 128) == 1.0 + 4.0 / 128


def test_grouped_gemm_and_the_fit_convention():
    # 2 groups of 64 rows through [7168, 4096]: weights of both groups read once
    f, w, a, o = matmul_work(128, 4096, 7168, weights=2, w_bytes=1.0, a_bytes=1.0, block=128)
    assert f == 7_516_192_768 and w + a + o == 60_729_344  # = golden kernel_grouped
    # the efficiency fit counts no scales (DeepGEMM README): m*k + n*k per group in, m*n out
    F, b_in, b_out = E.gemm_work(64, 4096, 7168, 2, 1.0, 2.0)
    assert F == f and b_in == 2 * (64 * 7168 + 4096 * 7168) and b_out == 2 * 64 * 4096 * 2


def test_mla_work_from_deepseek_v3_dims(v3):
    m, _ = v3
    a = m.attention
    assert a.kv_lora_rank + a.qk_rope_head_dim == m.kv_latent_dim == 576  # KV per token per layer
    f, kv, q, o = mla_decode_work(1, 1, 128, 1, latent=a.kv_lora_rank, rope=a.qk_rope_head_dim, kv_bytes=1.0)
    assert kv == 576 and f == 278_528  # seed 002: FLOP per token per key, 128 heads
    assert q == 128 * 576 * 2 and o == 128 * 512 * 2
    assert E.mla_decode_work(1, 1, 128, 1, 1.0) == (f, kv + q, o)  # FlashMLA geometry = V3 dims
    # prefill (MHA form): 81,920 FLOP per token per key per layer; context 2 -> one key on average
    f, _ = mla_prefill_work(1, 128, 2, qk_head_dim=192, v_head_dim=128, latent=512, rope=64, kv_bytes=2.0)
    assert f == 81_920
    # a model with other dims gets other work (no 576/512 hard-coded)
    f2, kv2, _, _ = mla_decode_work(1, 1, 128, 1, latent=256, rope=32, kv_bytes=1.0)
    assert kv2 == 288 and f2 == 2 * 128 * (288 + 256)


def test_a2a_copies_hand_cases():
    # DeepEP LL, EP16 over two 8-GPU nodes, top-8 of 256: half the picks off-node (RDMA), the
    # own node's 8 ranks (the sender's own one included: LL writes every top-k copy through its
    # receive buffers) get the other half over NVLink
    r, n = a2a_copies(CommMode.DEEPEP_LL, 16.0, 8, 256, 8)
    assert float(r) == 4.0 and float(n) == 4.0
    # nccl, EP2 in one node, 4 slots, top-2: the other rank is reached unless both picks are
    # on my two slots: 1 - (2/4)(1/3) = 5/6 copies, all over NVLink
    r, n = a2a_copies(CommMode.NCCL, 2.0, 8, 4, 2)
    assert float(r) == 0.0 and float(n) == pytest.approx(5 / 6, rel=1e-12)


def test_a2a_bytes_dispatch_message_and_volume(v3):
    m, h = v3
    assert dispatch_bytes_per_token(7168) == 7168 + 56 * 4 == 7392  # FP8 + fp32 scale per 128
    assert dispatch_bytes_per_token(7168, header_bytes=16) == 7408  # DeepEP LL benchmark count
    assert dispatch_bytes_per_token(7168, 2.0) == 14336  # BF16: no scales
    r, n = a2a_network_bytes(CommMode.DEEPEP_LL, "dispatch", m, tokens=10, ep=16.0, gpus_per_domain=8, slots=256)
    # V3's group limit (top-4 of 8 groups) leaves LL's expected copies unchanged: linear in the off-node share
    assert float(r) == pytest.approx(10 * 4.0 * 7392, rel=1e-12)
    assert float(n) == pytest.approx(10 * 4.0 * 7392, rel=1e-12)
    r, n = a2a_network_bytes(CommMode.DEEPEP_LL, "combine", m, tokens=10, ep=16.0, gpus_per_domain=8, slots=256)
    assert float(r) == pytest.approx(10 * 4.0 * 7168 * 2, rel=1e-12)


def _grid(**kw):
    base = dict(tp=1, dp=16, ep=16, moe_tp=1, batch=32, context=4096, mtp=1, acceptance=0.8, redundant=0)
    return Grid.single(**{**base, **kw})


@pytest.mark.parametrize("mode", ["deepep-ll", "deepep-normal", "pplx", "nccl"])
def test_kernel_prices_the_workload_all_to_all(v3, mode):
    m, h = v3
    g = _grid()
    wl = build(m, h, g, Phase.DECODE, mode)
    t = 32 * 2.0  # requests x q_len per GPU (tp 1)
    for name in ("dispatch", "combine"):
        op = next(o for o in wl.moe_layer if o.name == name)
        k = kernel_op(m, h, name, ep=16, tokens=t, mode=mode)
        assert np.allclose(k.net_bytes_rdma, op.net_bytes_rdma, rtol=1e-12)
        assert np.allclose(k.net_bytes_nvlink, op.net_bytes_nvlink, rtol=1e-12)


def test_op_tags(v3):
    m, h = v3
    wl = build(m, h, _grid(), Phase.DECODE, "deepep-ll")
    ops = wl.moe_layer + wl.mtp

    def named(tag):
        return sorted(o.name for o in ops if tag in o.tags)

    assert named(Tag.ROUTED) == sorted(
        ["experts_gate_up", "experts_act", "experts_down"]
        + ["mtp_experts_gate_up", "mtp_experts_act", "mtp_experts_down"]
    )
    assert named(Tag.A2A) == ["combine", "dispatch", "mtp_combine", "mtp_dispatch"]
    assert named(Tag.DISPATCH) == ["dispatch", "mtp_dispatch"]
    assert named(Tag.COMBINE) == ["combine", "mtp_combine"]
    assert named(Tag.CORE) == ["attn_core", "mtp_attn_core"]
    assert named(Tag.EXPERTS_DOWN) == ["experts_down", "mtp_experts_down"]
    pre = build(m, h, _grid(batch=8192, mtp=0), Phase.PREFILL, "deepep-normal")
    assert [o.name for o in pre.moe_layer if Tag.CORE in o.tags] == ["attn_core"]


@pytest.mark.parametrize(
    ("model", "dtype"), [("qwen3-30b-a3b", "bf16"), ("deepseek-v3", "fp8"), ("llama-3-1-70b", "bf16")]
)
def test_linear_projections_run_in_the_models_weight_dtype(model, dtype):
    # a BF16 model's projections are BF16 GEMMs (its peak, its kernel variant), not FP8 ones; the
    # router stays BF16 in every model
    m = load_model(model)
    wl = build(m, load_hardware("h200"), _grid(), Phase.DECODE, "deepep-ll")
    gemms = [o for o in wl.dense_layer + wl.moe_layer if o.kind.value in ("gemm", "grouped_gemm", "bmm")]
    assert gemms
    for o in gemms:
        want = "bf16" if o.name == "router" else dtype
        assert str(getattr(o.dtype, "value", o.dtype)) == want, (o.name, o.dtype)
