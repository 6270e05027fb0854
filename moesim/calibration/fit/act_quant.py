"""The input quant inside an engine's measured FP8 linear op (moesim.calibration.fit.gemm.act_quant_in_rows).

aiconfigurator's FP8 GEMM rows time "activation quant + GEMM" (SGLang: sglang_per_token_group_quant_fp8
then DeepGEMM gemm_nt_f8f8bf16, collector/sglang/collect_gemm.py; TRT-LLM / vLLM: the Linear module,
which quantizes its BF16 input inside). The GEMM entry must price the GEMM alone (it is what
`moesim kernel gemm` and DeepGEMM's README time; the step prices its quant passes as their own ops),
so such rows are fitted as

    t_row = t_quant(m, k) + T_gemm(m, n, k) x R_gemm(m, n, k)

with t_quant a known per-row time (WavesData.known), the waves_v1 params fitted on the sum, and the
measured residual R_gemm that of the GEMM part, (t_row - t_quant) / T_gemm (moesim.calibration.fit.residual).

t_quant is the streaming quant pass (moesim.perf.efficiency.stream_time: alpha + m k (2 + 1 + 4/128) B /
(W eta_m), the bytes of moesim.perf.profile.work.kernel_work("quant")) with, in order of preference:

* the profile's own fitted quant pass (stream_v1 entry of scale_matrix_perf: TRT-LLM torch_ops,
  vLLM static_scaled_fp8_quant), its physics params;
* a stand-in where the engine has no table of its fused quant kernel (SGLang: its scale_matrix rows
  time a torch-eager reference and are excluded, moesim.calibration.importers.aiconfigurator_tables):
  the pass the step model prices for that engine's quant op, i.e. the profile's elementwise HBM
  efficiency (inherited) plus the launch gap (moesim.perf.cost.CostModel._kernel, no quant entry).

Either way the GEMM fit subtracts what the step adds back for the same pass, so a linear op is
priced once: quant op + GEMM op.
"""

from __future__ import annotations

import numpy as np

from moesim.calibration.fit.peaks import Peaks
from moesim.perf.efficiency import stream_time
from moesim.perf.profile.schema import round_sig as _r
from moesim.perf.profile.work import kernel_work

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


def quant_seconds(m, k, peaks: Peaks, model: dict) -> np.ndarray:
    """Time (s) of the quant pass of an [m, k] BF16 input under an act_quant_model."""
    nbytes = kernel_work("quant", "fp8", peaks.sms, {"m": np.asarray(m, float), "k": np.asarray(k, float)})[1]
    return np.asarray(stream_time(nbytes, peaks.hbm_Bps, model["params"]), float)
