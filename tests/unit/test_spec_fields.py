"""Every HardwareSpec / ModelSpec field is honoured (issue 17 sec. 3): changing it moves an output in
the documented direction, in a configuration where the field is read (table-driven: one row per
field, an explicit expected direction). Fields that are not model inputs (name, source, texts,
published reference figures) are listed in NOT_INPUTS with the reason."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from moesim.api import estimate
from moesim.errors import MoesimError
from moesim.specs.hardware import HardwareSpec
from moesim.specs.model import AttentionSpec, DenseFFNSpec, ModelSpec, MoESpec, PrecisionSpec

UP, DOWN, ERROR = +1, -1, "error"
# configurations: multi-node EP decode (RDMA + NVLink), one-node EP decode (NVLink only), prefill
D16 = dict(ep=16, dp=16, batch=64, context=4096)
D8 = dict(ep=8, dp=8, batch=64, context=4096)
P16 = dict(ep=16, dp=16, batch=8192, context=4096, phase="prefill")
P8S = dict(ep=8, dp=8, batch=8192, context=4096, phase="prefill", overlap="serial")
N32 = dict(ep=32, dp=32, batch=64, context=4096, comm="deepep-normal")  # one RDMA copy per node
T8 = dict(tp=8, dp=1, ep=8, batch=64, context=4096)  # attention TP: an NVLink all-reduce

# (field, --set value, model, hardware, config, output, direction, cost modes)
HW_ROWS = [
    ("sms", 66, "deepseek-v3", "h800", P16, "step_time_s", UP, ("roofline", "calibrated")),
    ("fp8_tflops", 3958, "deepseek-v3", "h800", P16, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("bf16_tflops", 1978, "deepseek-v3", "h800", P16, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("memory_GB", 160, "deepseek-v3", "h800", D16, "max_batch", UP, ("roofline",)),
    ("hbm_bw_GBps", 6700, "deepseek-v3", "h800", D16, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("gpus_per_node", 16, "deepseek-v3", "h800", D16, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("nvlink_bw_GBps", 100, "deepseek-v3", "h800", D8, "step_time_s", UP, ("roofline", "calibrated")),
    ("nvlink_bw_GBps", 0, "deepseek-v3", "h800", D8, "step_time_s", UP, ("roofline", "calibrated")),
    ("nvlink_eff_bw_GBps", 40, "deepseek-v3", "h800", T8, "step_time_s", UP, ("calibrated",)),
    ("nvlink_latency_us", 33.3, "deepseek-v3", "h800", D8, "step_time_s", UP, ("roofline",)),
    ("rdma_bw_GBps", 25, "deepseek-v3", "h800", D16, "step_time_s", UP, ("roofline", "calibrated")),
    ("rdma_eff_bw_GBps", 20, "deepseek-v3", "h100-sxm", {**D16, "comm": "nccl"}, "step_time_s", UP, ("calibrated",)),
    ("rdma_latency_us", 28, "deepseek-v3", "h800", D16, "step_time_s", UP, ("roofline",)),
    ("nvlink_domain_gpus", 16, "deepseek-v3", "h800", D16, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("kernel_launch_us", 20, "deepseek-v3", "h800", D16, "step_time_s", UP, ("calibrated",)),
    (
        "kernel_launch_eager_us",
        50,
        "deepseek-v3",
        "h800",
        {**D16, "cuda_graphs": False},
        "step_time_s",
        UP,
        ("calibrated",),
    ),
    ("layer_sync_us", 50, "deepseek-v3", "h800", D16, "step_time_s", UP, ("calibrated",)),
    ("memory_reserve_GB", 8, "deepseek-v3", "h800", D16, "max_batch", DOWN, ("roofline",)),
    ("sm_version", 80, "deepseek-v3", "h800", D16, "step_time_s", ERROR, ("roofline",)),
    ("fp4_tflops", 18000, "deepseek-v3", "b200", P8S, "step_time_s", DOWN, ("roofline", "calibrated")),
    ("fp32_tflops", 134, "deepseek-v3", "h800", P16, "step_time_s", DOWN, ("roofline",)),
    ("usd_per_gpu_hour", 4, None, "h800", None, "usd_per_gpu_hour", UP, ()),
]
# model rows that need a precision/arrangement where the hardware field is read
HW_MODEL_SETS = {
    "fp4_tflops": ["model.precision.weight_dtype=fp4", "model.precision.activation_dtype=fp4"],
    "fp32_tflops": ["model.precision.attention_dtype=fp32"],
}
# (field, --set value, model, config, output, direction)
MODEL_ROWS = [
    ("num_layers", 122, "deepseek-v3", D16, "step_time_s", UP),
    ("hidden_size", 14336, "deepseek-v3", D16, "weights_bytes", UP),
    ("vocab_size", 258560, "deepseek-v3", D16, "weights_bytes", UP),
    ("num_dense_layers", 6, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("mtp_layers", 0, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("max_context", 2048, "deepseek-v3", D16, "step_time_s", ERROR),
    ("tie_embeddings", True, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("attention.num_heads", 256, "deepseek-v3", D16, "step_time_s", UP),
    ("attention.q_lora_rank", 3072, "deepseek-v3", D16, "weights_bytes", UP),
    ("attention.kv_lora_rank", 1024, "deepseek-v3", D16, "kv_cache_bytes", UP),
    ("attention.qk_nope_head_dim", 256, "deepseek-v3", D16, "weights_bytes", UP),
    ("attention.qk_rope_head_dim", 128, "deepseek-v3", D16, "kv_cache_bytes", UP),
    ("attention.v_head_dim", 256, "deepseek-v3", D16, "weights_bytes", UP),
    ("attention.num_kv_heads", 2, "qwen3-235b-a22b", D8, "kv_cache_bytes", DOWN),
    ("attention.head_dim", 256, "qwen3-235b-a22b", D8, "kv_cache_bytes", UP),
    ("attention.qkv_bias", True, "qwen3-235b-a22b", D8, "weights_bytes", UP),
    ("attention.kind", "mha", "deepseek-v3", D16, "kv_cache_bytes", UP),  # full K and V per head
    ("dense_ffn.intermediate_size", 36864, "deepseek-v3", D16, "weights_bytes", UP),
    ("dense_ffn.gated", False, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("moe.num_experts", 512, "deepseek-v3", D16, "weights_bytes", UP),
    ("moe.top_k", 16, "deepseek-v3", D16, "step_time_s", UP),
    ("moe.expert_intermediate_size", 4096, "deepseek-v3", D16, "weights_bytes", UP),
    ("moe.num_shared_experts", 2, "deepseek-v3", D16, "weights_bytes", UP),
    ("moe.shared_intermediate_size", 4096, "deepseek-v3", D16, "weights_bytes", UP),
    ("moe.topk_group", 2, "deepseek-v3", N32, "step_time_s", DOWN),  # fewer nodes per token
    ("moe.n_group", 32, "deepseek-v3", N32, "step_time_s", DOWN),  # 4 of 32 groups: fewer nodes
    ("moe.router_bias", False, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("precision.weight_dtype", "bf16", "deepseek-v3", D16, "weights_bytes", UP),
    ("precision.weight_block", 0, "deepseek-v3", D16, "weights_bytes", DOWN),
    ("precision.activation_dtype", "bf16", "deepseek-v3", P16, "step_time_s", UP),
    ("precision.attention_dtype", "fp32", "deepseek-v3", P16, "step_time_s", UP),
    ("precision.kv_dtype", "fp8", "deepseek-v3", D16, "kv_cache_bytes", DOWN),
    ("precision.embedding_dtype", "fp32", "deepseek-v3", D16, "weights_bytes", UP),
    ("precision.dispatch_dtype", "bf16", "deepseek-v3", D16, "step_time_s", UP),
    ("precision.combine_dtype", "fp8", "deepseek-v3", D16, "step_time_s", DOWN),
]
# read by no prediction, with the reason (text, provenance, or reference figures the tests check)
NOT_INPUTS = {
    "name": "identity (picks the calibration profile)",
    "source": "provenance text",
    "description": "text",
    "sources": "provenance text per field",
    "published_params": "reference figure the catalog tests check the closed forms against",
    "published_active_params": "reference figure (as published_params)",
    "published_active_excludes_embedding": "how the reference figure counts (as published_params)",
}


# read by the request-level simulator only (its KV-cache tiers), each checked there:
# tests/property/test_simulate_props.py::test_kv_tiers_below_hbm_raise_hits_and_cost_their_load
SIMULATOR_INPUTS = {"host_kv_GB", "host_bw_GBps", "disk_kv_GB", "disk_bw_GBps"}


def _paths(cls, prefix=""):
    out = []
    for f in dataclasses.fields(cls):
        tp = {AttentionSpec: AttentionSpec, DenseFFNSpec: DenseFFNSpec, MoESpec: MoESpec, PrecisionSpec: PrecisionSpec}
        sub = next((c for c in tp if c.__name__ in str(f.type)), None)
        out += _paths(sub, f"{prefix}{f.name}.") if sub else [prefix + f.name]
    return out


def _value(model, hw, sets, cfg, output, mode):
    r = estimate(model, hw, set=sets, cost_mode=mode, **cfg)
    return float(np.ravel(r.memory[output] if output in r.memory else r.values[output])[0])


def test_every_field_has_a_row():
    hw_rows = {r[0] for r in HW_ROWS}
    hw_fields = set(_paths(HardwareSpec)) - set(NOT_INPUTS) - set(SIMULATOR_INPUTS)
    assert hw_fields == hw_rows, hw_fields ^ hw_rows
    model_rows = {r[0] for r in MODEL_ROWS}
    model_fields = set(_paths(ModelSpec)) - set(NOT_INPUTS)
    assert model_fields == model_rows, model_fields ^ model_rows


def _check(base, new, direction):
    assert np.isfinite(new)
    assert (new > base) if direction == UP else (new < base), (base, new)


def _hw_case(field, value, model, hw, cfg, output, direction, mode):
    extra = HW_MODEL_SETS.get(field, [])
    if direction == ERROR:
        with pytest.raises(MoesimError):
            _value(model, hw, [*extra, f"hardware.{field}={value}"], cfg, output, mode)
        return
    base = _value(model, hw, extra, cfg, output, mode)
    _check(base, _value(model, hw, [*extra, f"hardware.{field}={value}"], cfg, output, mode), direction)


@pytest.mark.parametrize("row", [r for r in HW_ROWS if "roofline" in r[7]], ids=lambda r: r[0])
def test_hardware_field_moves_roofline(row):
    _hw_case(*row[:7], "roofline")


@pytest.mark.parametrize("row", [r for r in HW_ROWS if "calibrated" in r[7]], ids=lambda r: r[0])
def test_hardware_field_moves_calibrated(row):
    _hw_case(*row[:7], "calibrated")


def test_price_moves_cost():
    from moesim.metrics.economics import daily_cost_usd
    from moesim.specs import load_hardware

    a, b = (load_hardware("h800", {"usd_per_gpu_hour": p}).usd_per_gpu_hour for p in (2, 4))
    assert daily_cost_usd(1, 8, b) > daily_cost_usd(1, 8, a)


@pytest.mark.parametrize("row", MODEL_ROWS, ids=lambda r: r[0])
def test_model_field_moves(row):
    field, value, model, cfg, output, direction = row
    sets = [f"model.{field}={value}"]
    if direction == ERROR:
        with pytest.raises(MoesimError):
            _value(model, "h800", sets, cfg, output, "roofline")
        return
    _check(
        _value(model, "h800", [], cfg, output, "roofline"),
        _value(model, "h800", sets, cfg, output, "roofline"),
        direction,
    )
