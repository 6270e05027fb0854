"""The input quant inside an engine's measured FP8 linear op (moesim.calibration.fit.gemm.act_quant_in_rows).

aiconfigurator's FP8 GEMM rows time "activation quant + GEMM" (SGLang: sglang_per_token_group_quant_fp8
then DeepGEMM gemm_nt_f8f8bf16, collector/sglang/collect_gemm.py; TRT-LLM / vLLM: the Linear module,
which quantizes its BF16 input inside). The GEMM entry must price the GEMM alone (it is what
`moesim kernel gemm` and DeepGEMM's README time; the step prices its quant passes as their own ops),
so such rows are fitted as

    t_row = t_quant(m, k) + T_gemm(m, n, k) x R_gemm(m, n, k)

with t_quant a known per-row time (WavesData.known), the waves_v1 params fitted on the sum, and the
measured residual R_gemm that of the GEMM part, (t_row - t_quant) / T_gemm (moesim.calibration.fit.residual).

t_quant is the streaming quant pass (moesim.perf.models.stream_v1.stream_time: alpha + m k (2 + 1 + 4/128) B /
(W eta_m), the bytes of moesim.perf.profile.work.family_work("quant")) with, in order of preference:

* the profile's own fitted quant pass (stream_v1 entry of scale_matrix_perf: TRT-LLM torch_ops,
  vLLM static_scaled_fp8_quant), its physics params;
* a stand-in where the engine has no table of its fused quant kernel (SGLang: its scale_matrix rows
  time a torch-eager reference and are excluded, moesim.calibration.importers.aiconfigurator_tables):
  the pass the step model prices for that engine's quant op, i.e. the profile's elementwise HBM
  efficiency (inherited) plus the launch gap (moesim.perf.cost.CostModel._kernel, no quant entry).

Either way the GEMM fit subtracts what the step adds back for the same pass, so a linear op is
priced once: quant op + GEMM op.

SGLang's quant kernel (sgl-kernel per_token_group_quant_8bit) also costs per CTA, and its CTAs are 2-16x as
many at an odd m (quant_ctas): t_quant = max(stream, alpha + CTAs x cta_ns), cta_ns fitted with the GEMM on
the same rows, per fold (measured ~1.1 / 1.1 / 1.4 ns per CTA on B200 / GB200 / H200).
"""

from __future__ import annotations

import numpy as np

from moesim.calibration.fit.peaks import Peaks
from moesim.perf.efficiency import quant_ctas
from moesim.perf.models.stream_v1 import stream_time
from moesim.perf.profile.schema import round_sig as _r
from moesim.perf.profile.work import family_work

STAND_IN_NOTE = (
    "stand-in: the engine these rows come from has no fitted table of its fused quant kernel; the streaming "
    "pass its step prices the quant op at (the profile's elementwise eta_m, inherited, plus the launch gap)"
)


def act_quant_model(quant: dict | None, elementwise: dict | None, peaks: Peaks) -> dict:
    """The stream_v1 model of the input quant subtracted from linear-op rows: {'model', 'params', 'source'}."""
    if quant is not None and quant.get("model") == "stream_v1" and quant.get("op", "scale_matrix") == "scale_matrix":
        return {
            "model": "stream_v1",
            "params": dict(quant["params"]),
            "source": f"this profile's fitted quant pass (quant|{quant['backend']}|scale_matrix), physics params",
        }
    eta_m = float(((elementwise or {}).get("params") or {}).get("eta_m", 1.0))
    origin = (elementwise or {}).get("source", "none: the HBM roofline")
    return {
        "model": "stream_v1",
        "params": {"alpha_us": _r(peaks.launch_s * 1e6, 5), "eta_m": _r(eta_m, 5)},
        "source": f"{STAND_IN_NOTE}; elementwise from {origin}",
    }


def quant_seconds(m, k, peaks: Peaks, model: dict, cta_ns=None) -> np.ndarray:
    """Time (s) of the quant pass of an [m, k] BF16 input under an act_quant_model; with cta_ns (the
    model's, or given) at least alpha + CTAs x cta_ns (quant_ctas: SGLang's kernel issues tiny CTAs)."""
    nbytes = family_work("quant", "fp8", peaks.sms, {"m": np.asarray(m, float), "k": np.asarray(k, float)})[1]
    t = np.asarray(stream_time(nbytes, peaks.hbm_Bps, model["params"]), float)
    cta_ns = model["params"].get(CTA_PARAM) if cta_ns is None else cta_ns
    if cta_ns is None:
        return t
    return np.maximum(t, float(model["params"]["alpha_us"]) * 1e-6 + quant_ctas(m, k) * float(cta_ns) * 1e-9)


# SGLang's FP8 block linear op quantizes with sgl-kernel's per_token_group_quant_8bit
# (sglang_per_token_group_quant_fp8; sgl-project/sglang sgl-kernel/csrc/gemm/per_token_group_quant_8bit.cu):
# one CTA of 16 threads per group for the largest of 16 / 8 / 4 / 2 / 1 groups that divides the m k / 128
# groups. At an odd m with k / 128 not a multiple of 16 its CTAs are 2-16x as many and tiny: the measured
# odd-m excess of SGLang's fp8_block rows is ~1 ns per extra CTA, n-independent (H200, B200, GB200).
# Its per-CTA time is fitted with the GEMM (CTA_PARAM, a waves_v1 fit's extra param, bounds below).
CTA_PARAM = "cta_ns"
CTA_BOUNDS = (1.0, 0.0, 100.0)  # start, lo, hi (ns per CTA, GPU-wide issue)
CTA_QUANT_BACKENDS = ("sglang_deepgemm",)  # rows timed with sgl-kernel's per-token-group quant


def cta_quant_rows(d) -> bool:
    """True when every row's input quant is sgl-kernel's per-token-group quant (its CTA count is priced)."""
    return bool(len(d)) and "backend" in d and bool(d["backend"].astype(str).str.startswith(CTA_QUANT_BACKENDS).all())


def attach_quant(data, peaks: Peaks, quant: dict) -> None:
    """Set a linear-op GEMM fit's known quant time (data.known); for sgl-kernel's per-token-group quant
    rows also its per-CTA time as a fitted extra param (data.names + CTA_PARAM; data.predict updates known)."""
    data.known = quant_seconds(data.d.m.values, data.d.k.values, peaks, quant)
    if cta_quant_rows(data.d):
        data.quant, data.names = (peaks, quant), data.names + (CTA_PARAM,)


def with_fitted_cta(quant: dict | None, params: dict) -> dict | None:
    """The act_quant_model with the fitted per-CTA time moved out of the GEMM params (popped), if any."""
    if quant is None or CTA_PARAM not in params:
        return quant
    return {**quant, "params": {**quant["params"], CTA_PARAM: params.pop(CTA_PARAM)}}
