"""Invariants over random VALID configurations (hypothesis).

A configuration: a model in {deepseek-v3, qwen3-30b-a3b, mixtral-8x7b, llama-3-1-70b}, a catalog
GPU, decode or prefill, a parallel layout that `moesim.grid.validity.check_grid` accepts, batch, context,
MTP drafts (DeepSeek-V3 decode), an overlap scheme that applies, cost mode roofline or calibrated.

* every output is finite and positive (step time, TPOT / TTFT, tokens/s, memory);
* more HBM bandwidth, FP8/BF16 FLOP/s, SMs, RDMA or NVLink bandwidth never slows a step (nominal and
  achievable raised together, as the spec requires);
* more memory never turns fits True -> False; fits <=> total_bytes <= capacity_bytes;
* decode: batch <= max_batch <=> fits;
* a sweep row equals estimate at the same point;
* overlap auto <= serial.
"""

from __future__ import annotations

import math
from functools import cache

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import moesim
from moesim.api import estimate
from moesim.errors import ConfigError, MoesimError
from moesim.grid.core import Grid
from moesim.grid.validity import MAX_REDUNDANT_PER_EXPERT, check_grid, require_dtypes
from moesim.specs import catalog, load_hardware, load_model

MODELS = ("deepseek-v3", "qwen3-30b-a3b", "mixtral-8x7b", "llama-3-1-70b")
HARDWARE = tuple(catalog("hardware"))
COST_MODES = ("roofline", "calibrated")
DECODE_OVERLAPS = (None, "serial", "shared", "sbo", "two-batch", "five-stage", "ideal", "auto")
PREFILL_OVERLAPS = (None, "serial", "shared", "sbo", "two-batch", "ideal", "auto")
MICRO_BATCHED = ("two-batch", "five-stage")
REL = 1e-9  # float noise allowed in "never slower"

SETTINGS = dict(
    deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]
)


@cache
def _model(name):
    return load_model(name)


@cache
def _hw(name):
    return load_hardware(name)


@cache
def layouts(model_name: str, phase: str) -> tuple:
    """Parallel layouts (tp, dp, ep, moe_tp, redundant) that check_grid accepts for this model."""
    m = _model(model_name)
    out = []
    for tp in (1, 2, 4, 8):
        for dp in (1, 2, 4, 8, 16, 32, 64):
            gpus = tp * dp
            if gpus > 256:
                continue
            if m.is_moe:
                combos = (
                    [(gpus, 1, r) for r in (0, 32)] + [(gpus // 2, 2, 0)]
                    if gpus % 2 == 0
                    else [(gpus, 1, r) for r in (0, 32)]
                )
            else:
                combos = [(1, gpus, 0)]
            for ep, moe_tp, red in combos:
                if m.is_moe and red > MAX_REDUNDANT_PER_EXPERT * m.moe.num_experts:
                    continue  # out of check_redundant's bound (an error before any work)
                g = Grid.single(
                    tp=tp, dp=dp, ep=ep, moe_tp=moe_tp, batch=1, context=1, mtp=0, acceptance=0.8, redundant=red
                )
                if check_grid(m, _hw("h800"), g, phase)[0][0]:
                    out.append((tp, dp, ep, moe_tp, red))
    assert out, (model_name, phase)
    return tuple(out)


@cache
def runs_on(model_name: str) -> tuple:
    """The catalog GPUs whose tensor cores run the model's dtypes (FP8 models not on A100)."""
    ok = []
    for h in HARDWARE:
        try:
            require_dtypes(_model(model_name), _hw(h))
            ok.append(h)
        except ConfigError:
            pass
    return tuple(ok)


@cache
def bf16_variant(model_name: str):
    """The model with 16-bit weights, activations and dispatch (a GPU without FP8 tensor cores)."""
    keys = ("weight_dtype", "activation_dtype", "dispatch_dtype")
    return load_model(model_name, {f"precision.{k}": "bf16" for k in keys})


@st.composite
def configs(draw, phases=("decode", "prefill"), overlaps=True, cost_modes=COST_MODES):
    model = draw(st.sampled_from(MODELS))
    hw = draw(st.sampled_from(HARDWARE))
    phase = draw(st.sampled_from(phases))
    tp, dp, ep, moe_tp, red = draw(st.sampled_from(layouts(model, phase)))
    m = _model(model)
    if phase == "decode":
        batch = draw(st.integers(1, 256))
        mtp = draw(st.integers(0, 2)) if m.mtp_layers else 0
        acceptance = draw(st.sampled_from((0.0, 0.6, 0.8, 1.0)))
    else:
        batch = draw(st.sampled_from((256, 1024, 2048, 4096, 8192, 16384, 32768)))
        mtp, acceptance = 0, 0.8
    context = draw(st.integers(64, min(32768, m.max_context)))
    overlap = None
    if overlaps:
        overlap = draw(st.sampled_from(DECODE_OVERLAPS if phase == "decode" else PREFILL_OVERLAPS))
        if overlap in MICRO_BATCHED and batch < 2:
            overlap = "shared"
    cfg = dict(
        model=model,
        hardware=hw,
        phase=phase,
        tp=tp,
        dp=dp,
        ep=ep,
        moe_tp=moe_tp,
        batch=batch,
        context=context,
        mtp=mtp,
        acceptance=acceptance,
        redundant_experts=red,
        overlap=overlap,
        cost_mode=draw(st.sampled_from(cost_modes)),
    )
    g = Grid.single(
        tp=tp, dp=dp, ep=ep, moe_tp=moe_tp, batch=batch, context=context, mtp=mtp, acceptance=acceptance, redundant=red
    )
    assert check_grid(m, _hw(hw), g, phase)[0][0], cfg  # valid by construction
    if hw not in runs_on(model):  # FP8 models do not run on A100: their BF16 checkpoint does
        cfg["model"] = bf16_variant(model)
    return cfg


def run(cfg, set=None, **over):
    kw = {**cfg, **over}
    return estimate(kw.pop("model"), kw.pop("hardware"), set=set, **kw)


def step(cfg, set=None, **over) -> float:
    return float(run(cfg, set, **over)["step_time_s"])


def _num(r, key) -> float:
    return float(np.asarray(r.values[key]).reshape(-1)[0])


# ------------------------------------------------------------------------------------ finite
@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, **SETTINGS)
@given(configs())
def test_outputs_finite_and_positive(cfg):
    r = run(cfg)
    d = r.to_dict()
    keys = ["step_time_s", "tokens_per_s_per_gpu", "tokens_per_s_per_node"]
    keys += ["tpot_s", "tokens_per_s_per_user"] if cfg["phase"] == "decode" else ["ttft_s"]
    for k in keys:
        v = d[k]
        assert isinstance(v, float) and math.isfinite(v) and v > 0, (k, v, cfg)
    mem = d["memory"]
    for k in ("weights_bytes", "kv_cache_bytes", "total_bytes", "capacity_bytes"):
        assert math.isfinite(mem[k]) and mem[k] > 0, (k, mem[k], cfg)
    for op in d["ops"]:
        assert math.isfinite(op["time_s"]) and op["time_s"] >= 0, (op, cfg)
    assert math.isfinite(d["max_batch"]) and d["max_batch"] >= 0


# ------------------------------------------------------------------------------------ monotone
def _raise(hw_name: str, what: str, k: float) -> list:
    h = _hw(hw_name)
    if what == "hbm":
        return [f"hardware.hbm_bw_GBps={h.hbm_bw_GBps * k!r}"]
    if what == "flops":
        return [f"hardware.fp8_tflops={h.fp8_tflops * k!r}", f"hardware.bf16_tflops={h.bf16_tflops * k!r}"]
    if what == "rdma":
        return [
            f"hardware.rdma_bw_GBps={h.rdma_bw_GBps * k!r}",
            f"hardware.rdma_eff_bw_GBps={h.rdma_eff_bw_GBps * k!r}",
        ]
    if what == "sms":  # the loader scales the peaks with the SMs (moesim.specs.loader)
        return [f"hardware.sms={round(h.sms * k)}"]
    if what == "nvlink":
        return [
            f"hardware.nvlink_bw_GBps={h.nvlink_bw_GBps * k!r}",
            f"hardware.nvlink_eff_bw_GBps={h.nvlink_eff_bw_GBps * k!r}",
        ]
    raise AssertionError(what)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=250, **SETTINGS)
@given(configs(), st.sampled_from(("flops", "rdma", "nvlink")), st.sampled_from((1.01, 1.25, 2.0, 8.0)))
def test_more_bandwidth_or_flops_never_slows_a_step(cfg, what, k):
    _check_faster(cfg, what, k)


# More HBM bandwidth never slows a step, calibrated included: a calibrated op once got one efficiency
# from its fitted model's total time applied to its own roofline, so a what-if that flipped the op's
# roofline bound applied the other bound's efficiency (issue 17; qwen3-30b-a3b h100 TP4 DP16 EP32
# moe_tp2 b1024 ctx64, deepseek-v3 h100 TP1 b4096 ctx8074: tests/unit/test_whatif_monotone.py).
# Now eta_c / eta_m come from the model's compute and memory sides (moesim.perf.efficiency.side_efficiencies).
@pytest.mark.slow  # hypothesis, 250 examples
@settings(max_examples=250, **SETTINGS)
@given(configs(), st.sampled_from((1.01, 1.25, 2.0, 8.0)))
def test_more_hbm_never_slows_a_step(cfg, k):
    _check_faster(cfg, "hbm", k)


# more SMs (peaks scaled with them): a calibrated kernel on more SMs than its profile's fit is never
# slower than on the fitted count (moesim.perf.smscale), and its sides only shrink
@pytest.mark.slow  # hypothesis, 150 examples
@settings(max_examples=150, **SETTINGS)
@given(configs(), st.sampled_from((1.01, 1.25, 2.0, 8.0)))
def test_more_sms_never_slows_a_step(cfg, k):
    _check_faster(cfg, "sms", k)


def _check_faster(cfg, what, k):
    base = step(cfg)
    try:
        faster_hw = step(cfg, set=_raise(cfg["hardware"], what, k))
    except MoesimError as e:  # the raised value is beyond the spec's range (e.g. 8x an 1e5 GB/s link)
        assume("out of range" not in str(e))
        raise
    assert faster_hw <= base * (1 + REL), (what, k, base, faster_hw, cfg)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=150, **SETTINGS)
@given(configs(), st.sampled_from((1.01, 1.5, 4.0)))
def test_more_memory_never_breaks_fit_and_fits_matches_bytes(cfg, k):
    r = run(cfg)
    h = _hw(cfg["hardware"])
    r2 = run(cfg, set=[f"hardware.memory_GB={h.memory_GB * k!r}"])
    for x in (r, r2):
        assert x.memory["fits"] == (x.memory["total_bytes"] <= x.memory["capacity_bytes"]), (x.memory, cfg)
    assert not (r.memory["fits"] and not r2.memory["fits"]), (k, cfg)
    assert r2.memory["capacity_bytes"] >= r.memory["capacity_bytes"]


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, **SETTINGS)
@given(configs(phases=("decode",), overlaps=False))
def test_decode_max_batch_consistent_with_fits(cfg):
    r = run(cfg)
    mb = _num(r, "max_batch")
    assert (cfg["batch"] <= mb) == r.memory["fits"], (cfg["batch"], mb, r.memory, cfg)


# ------------------------------------------------------------------------------------ agreement
@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=80, **SETTINGS)
@given(configs())
def test_sweep_row_equals_estimate(cfg):
    r = run(cfg)
    axes = {
        "tp": [cfg["tp"]],
        "dp": [cfg["dp"]],
        "ep": [cfg["ep"]],
        "moe_tp": [cfg["moe_tp"]],
        "batch": [cfg["batch"]],
        "context": [cfg["context"]],
        "mtp": [cfg["mtp"]],
        "acceptance": [cfg["acceptance"]],
        "redundant": [cfg["redundant_experts"]],
    }
    if cfg["overlap"]:
        axes["overlap"] = [cfg["overlap"]]
    df = moesim.sweep(cfg["model"], cfg["hardware"], cfg["phase"], axes, cost_mode=cfg["cost_mode"])
    assert len(df) == 1 and bool(df["valid"].iloc[0]), df[["valid", "reason"]]
    row = df.iloc[0]
    keys = [
        "step_time_s",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_node",
        "max_batch",
        "total_bytes",
        "kv_cache_bytes",
        "weights_bytes",
    ]
    keys += ["tpot_s", "tokens_per_s_per_user"] if cfg["phase"] == "decode" else ["ttft_s"]
    for k in keys:
        assert row[k] == pytest.approx(_num(r, k) if k in r.values else r.memory[k], rel=1e-12), (k, cfg)
    assert bool(row["fits"]) == r.memory["fits"]
    assert row["overlap"] == r.config["overlap"]


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=150, **SETTINGS)
@given(configs())
def test_overlap_auto_never_slower_than_serial(cfg):
    auto = step(cfg, overlap="auto")
    serial = step(cfg, overlap="serial")
    assert auto <= serial * (1 + REL), (auto, serial, cfg)
