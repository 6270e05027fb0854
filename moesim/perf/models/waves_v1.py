"""waves_v1: a tile- and wave-quantized GEMM-like kernel (issue 14 sec. 3): GEMMs, grouped GEMMs, the
fused / grouped MoE layer (its two GEMMs plus the streamed passes), fitted per (layout, dtype, backend)
variant on measured call times by moesim.calibration.fit.gemm (row selection, CV, writing; fit below:
its least-squares core).

    T    = alpha + max(T_c, B_in / (W eta_m)) + B_out / W
    T_c  = ceil(CTAs / SMs) * ceil(k / 128) * t_kb
    t_kb = max(2 BM BN 128 / (P / SMs * eta_c),  (BM + BN) 128 in_bytes / sm_bw,  kb_ns)

The work of a shape (tiles, bytes, CTAs per GEMM) is moesim.perf.profile.work.waves_parts.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from moesim.perf.models import _kernel as K
from moesim.perf.models.params import ETA, US, Num
from moesim.perf.models.sibling import Sibling, variants_params
from moesim.perf.profile.blocks import round_sig
from moesim.perf.profile.variants import base_dtype, pick_variant
from moesim.perf.profile.work import PASS_KEYS, entry_keys, waves_parts

NAME = "waves_v1"
# source: the fit (fit below: FIT_NAMES and FIT_EXTRA); fixed per-backend
# keys (token_bytes, pair_bytes, act_bytes, expanded_act) from moesim/calibration/collector_facts.yaml
PARAMS = {
    "eta_c": ETA,  # tensor-core math at this fraction of the SM's share of the dense peak
    "eta_m": ETA,  # HBM stream at this fraction of the bandwidth
    "alpha_us": US,  # fixed per-call latency (holds the launch gap on call-time fits), us
    "kb_ns": Num(0.0, 1e6),  # k-block pipeline latency floor per CTA, ns
    "sm_GBps": Num(0.0, 1e6, lo_open=True),  # one SM's load bandwidth, GB/s
    # moe: bytes per token and hidden element of passes over every token (per backend, not fitted;
    # moesim.perf.profile.work.token_pass_bytes)
    "token_bytes": Num(0.0, 1e3, optional=True),
    # moe: bytes per pair and hidden element (a contiguous layout's permute / unpermute) and per pair
    # and intermediate element (the activation passes); per backend
    "pair_bytes": Num(0.0, 1e3, optional=True),
    "act_bytes": Num(0.0, 1e3, optional=True),
    # a host-side time the GPU work overlaps, max(host, GPU) (a host-timed benchmark loop), us
    "host_us": US._replace(optional=True),
    # moe: TRT-LLM-gen's expanded-space FP8 activation: the flag (per backend) and its fitted SM time
    # per iteration, ns (moesim.perf.profile.work.expanded_act_iters)
    "expanded_act": Num(0.0, 1.0, optional=True),
    "act_iter_ns": Num(0.0, 1e6, optional=True),
}
# fit: (eta_c, eta_m, alpha_us, kb_ns, sm_GBps) bounds and starts (the 3rd: kb_ns over the load time,
# see test_waves.py); the fitted optional params (start, lo, hi): host_us (a host-timed benchmark loop,
# max(host, GPU)), act_iter_ns (TRT-LLM-gen's expanded-space activation)
FIT_NAMES = ("eta_c", "eta_m", "alpha_us", "kb_ns", "sm_GBps")
FIT_LO = np.array([0.01, 0.01, 0.0, 0.0, 1.0])
FIT_HI = np.array([1.0, 1.0, 1e4, 1e5, 1e4])
FIT_STARTS = ([0.7, 0.8, 5.0, 100.0, 50.0], [0.4, 0.5, 30.0, 20.0, 300.0], [0.7, 0.8, 5.0, 1000.0, 50.0])
FIT_EXTRA = {"host_us": (100.0, 0.0, 1e4), "act_iter_ns": (20.0, 0.0, 1e5)}
ALPHA_START_SHARE = 0.8  # the alpha starts at most at this share of the smallest kernel time
K_BLOCK = 128.0  # DeepGEMM / CUTLASS FP8 block-scaled main loop: one k-block = 128 (one scale)


class Part(NamedTuple):
    """One GEMM of a kernel: bytes in / out, CTAs, BLOCK_M, BLOCK_N, k, input bytes per element and
    the A + B rows a CTA loads per k-block (None: BM + BN; a TMA multicast cluster of 2 fetches one
    operand once for both, moesim.perf.deepgemm_layout)."""

    b_in: object
    b_out: object
    ctas: object
    bm: object
    bn: object
    k: object
    in_bytes: float
    load_rows: object = None


def waves_sides(part: Part, sms, peak, bw, p: dict):
    """(compute side, memory side, alpha) of one GEMM's waves_v1 time (module docstring), whose max is
    the time: the tensor-core math of the main loop (waves x k-blocks x t_math) and its load path (the
    SM's load rate and the k-block pipeline latency, or the HBM stream B_in / (W eta_m)), each plus
    alpha + B_out / W. Below one wave the time is one CTA's; each multiple of SMs CTAs adds a wave. The
    MMA runs at least 64 rows (the SM90 WGMMA instruction's M) whatever BM. Each side is
    non-increasing in P and W; the larger one is the kernel's bound."""
    ctas = np.maximum(np.asarray(part.ctas, float), 1.0)
    waves = np.ceil(ctas / sms - 1e-9)
    bm, bn = np.asarray(part.bm, float), np.asarray(part.bn, float)
    rows = bm + bn if part.load_rows is None else np.asarray(part.load_rows, float)
    t_math = 2.0 * np.maximum(bm, 64.0) * bn * K_BLOCK / (peak / sms * float(p["eta_c"]))
    t_load = rows * K_BLOCK * part.in_bytes / (float(p["sm_GBps"]) * 1e9)
    steps = waves * np.ceil(np.asarray(part.k, float) / K_BLOCK)  # k-blocks each SM walks
    t_c = steps * t_math
    t_m = np.maximum(
        steps * np.maximum(t_load, float(p["kb_ns"]) * 1e-9), np.asarray(part.b_in, float) / (bw * float(p["eta_m"]))
    )
    alpha, t_out = float(p["alpha_us"]) * 1e-6, np.asarray(part.b_out, float) / bw
    return alpha + t_c + t_out, alpha + t_m + t_out, alpha


def waves_time(part: Part, sms, peak, bw, p: dict):
    """T_model of one GEMM (seconds): the max of waves_sides."""
    return np.maximum(*waves_sides(part, sms, peak, bw, p)[:2])


def parts_sides(parts, extra, sms, peak, bw, p: dict):
    """(compute side, memory side, alpha) of a kernel of waves_parts, whose max is parts_time: one
    GEMM's sides plus alpha and the streamed bytes. A kernel of several GEMMs (the fused MoE's up and
    down) can have each bound by another side, so its time is no max of two sums: both sides are then
    the whole time (exact and monotone; such an op's bound is its work's). host_us (optional): a
    host-side time the GPU work overlaps, each side at least that: max(host, GPU time)."""
    p0 = {**p, "alpha_us": 0.0}
    gemms = [part for part in parts if not isinstance(part[6], str)]
    sides = [waves_sides(Part(*part), sms, peak, bw, p0) for part in gemms]
    c, m = sides[0][:2] if len(sides) == 1 else (sum(np.maximum(*s[:2]) for s in sides),) * 2
    alpha, t_x = float(p["alpha_us"]) * 1e-6, np.asarray(extra, float) / (bw * float(p["eta_m"]))
    for part in parts[len(gemms) :]:  # the expanded-space activation (work.ACT_SLOTS): iterations x SM time / SMs
        t_x = t_x + np.asarray(part[2], float) * float(p.get("act_iter_ns") or 0.0) * 1e-9 / sms
    host = float(p.get("host_us") or 0.0) * 1e-6
    return np.maximum(alpha + c + t_x, host), np.maximum(alpha + m + t_x, host), alpha


def parts_time(parts, extra, sms, peak, bw, p: dict):
    """alpha + the waves_v1 time of each GEMM + the streamed bytes (seconds)."""
    return np.maximum(*parts_sides(parts, extra, sms, peak, bw, p)[:2])


def model_sides(family: str, dtype: str, sms, peak, bw, p: dict, shape: dict):
    """(compute side, memory side, alpha) of an entry's params p at a broadcast shape; moe: the entry's
    passes beyond the GEMMs (PASS_KEYS) unless the shape sets them."""
    if family == "moe":
        shape = {**shape, **{k: p[k] for k in PASS_KEYS if p.get(k) is not None and shape.get(k) is None}}
    return parts_sides(*waves_parts(family, dtype, sms, shape), sms, peak, bw, p)


def model_time(family: str, dtype: str, sms, peak, bw, p: dict, shape: dict):
    """Modelled time (s) of params p for a broadcast shape (the fit's prediction and the reader's price)."""
    return np.maximum(*model_sides(family, dtype, sms, peak, bw, p, shape)[:2])


def sides(ctx: K.KernelContext, family: str, e: dict, shape: dict):
    """(compute side, memory side, fixed, F, B, peak) of an entry at a shape: the variant of the priced
    dtype and layout, its `model_keys` (tiling rule) added to the shape; residual included."""
    F, b_in, b_out, _, peak = K.work_of(ctx, family, e, shape)
    v = pick_variant(e, dtype := K.dtype_of(family, e, shape), shape.get("layout"))
    keyed = {**shape, **entry_keys(family, v)}
    c, m, fixed = model_sides(family, v.get("dtype", dtype), ctx.sms, peak, ctx.hbm_Bps, v["params"], keyed)
    r = K.residual_factor(ctx, family, e, shape)
    return c * r, m * r, fixed * r, F, b_in + b_out, peak


efficiency, time = K.from_sides(sides)  # the efficiencies of the sides, and their max (s)


def fused_variant(e: dict | None, dtype) -> dict | None:
    """The variant of a `moe` entry that prices a layer's routed experts as ONE fused call
    (moesim.perf.fused_moe), or None. Where every variant is layout "fused", the engine's own MoE
    tables time one fused call per layer, which is what the engine runs: TRT-LLM's CutlassFusedMoE /
    DeepGemmFusedMoE (tensorrt_llm/_torch/modules/fused_moe: torch.ops.trtllm.fused_moe runs
    expandInputRowsKernel (permute + FP8 quant), both grouped GEMMs, the SwiGLU + requant and
    finalizeMoeRouting in one op; aiconfigurator's TRT-LLM MoE collector times that op), vLLM's
    fused_experts / FlashInfer cutlass_fused_moe. A masked / contiguous variant (SGLang's DeepEP
    layouts) marks an engine running the grouped GEMMs and the activation as separate kernels: priced
    op by op (None). None too where no variant has the priced dtype."""
    if not e or e.get("model") != NAME:
        return None
    if any((v.get("layout") or "fused") != "fused" for v in e.get("variants") or [e]):
        return None
    d = str(getattr(dtype, "value", dtype) or "").lower()
    v = pick_variant(e, d, "fused")
    return v if base_dtype(v.get("dtype")) == base_dtype(d) else None


def fit(work, t, solve, extra=None, known=None, x0=None):
    """Params (FIT_NAMES, then the names of `extra`) minimizing the log error of parts_time + known
    against measured times t (s). work: (parts, streamed bytes, sms, peak FLOP/s, HBM B/s) of the rows
    (moesim.perf.profile.work.waves_parts); extra: {name: (start, lo, hi)} of params beyond FIT_NAMES
    (FIT_EXTRA's, or the caller's: a known model's own, which `known` reads); known: (seconds now,
    fn(p) -> seconds) of a per-row time outside the kernel (default none); x0: start from x0 alone
    (cross-validation folds). solve(residuals, starts, lo, hi): the caller's bounded least squares."""
    extra = extra or {}
    names = FIT_NAMES + tuple(extra)
    known_s, known_fn = known if known is not None else (0.0, None)

    def res(p):
        pred = parts_time(work[0], work[1], *work[2:], dict(zip(names, p)))
        return np.log((pred + (known_s if known_fn is None else known_fn(p))) / t)

    ex = list(extra.values())
    starts = [list(s) + [e[0] for e in ex] for s in FIT_STARTS] if x0 is None else [x0]
    for s in starts if x0 is None else []:
        s[2] = min(s[2], float(np.min(t - known_s)) * 1e6 * ALPHA_START_SHARE)
    lo, hi = np.append(FIT_LO, [e[1] for e in ex]), np.append(FIT_HI, [e[2] for e in ex])
    return solve(res, starts, lo, hi)


# sibling GPU (moesim.perf.models.sibling): every param carries over (efficiencies, alpha, the passes'
# bytes) except the SM-pipeline rates: the k-block pipeline latency and the per-SM load rate
# (waves_sides) are fixed numbers of SM cycles / bytes per cycle, so they follow the SM clock (within one
# SM generation, the same tensor-core FLOP per cycle per SM: the ratio of per-SM dense peaks; 1 between
# H200, H100 and H800; GB200 / B200 1.11, docs/calibration.md)
CLOCK_PARAMS = {"kb_ns": -1, "sm_GBps": 1}  # param -> exponent of the clock ratio


def transfer(entry: dict, sib: Sibling) -> None:
    """Scale the entry's (and its variants') SM-pipeline params by the clock ratio, in place."""
    if sib.clock_ratio == 1.0:
        return
    for p in variants_params(entry):
        for k, x in CLOCK_PARAMS.items():
            if isinstance(p.get(k), (int, float)):
                p[k] = round_sig(float(p[k]) * sib.clock_ratio**x)
