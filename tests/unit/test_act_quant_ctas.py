"""SGLang's FP8 linear op quantizes its input with sgl-kernel's per_token_group_quant_8bit, whose CTA count
depends on m k / 128 (16 / 8 / 4 / 2 / 1 groups per CTA, the largest dividing it): the fit prices the quant's
per-CTA time (fit.act_quant, a fitted param of SGLang's DeepGEMM linear-op rows) and recovers it."""

import numpy as np
import pandas as pd

from moesim.calibration.fit import act_quant as AQ
from moesim.calibration.fit.gemm import WAVES_NAMES, WavesData, fit_waves
from moesim.calibration.fit.peaks import Peaks
from moesim.specs import load_hardware

SOURCE = "aiconfigurator-core 0.12.0 b200_sxm sglang 0.5.14 gemm_perf x"
TRUE = dict(zip(WAVES_NAMES, (0.7, 0.7, 4.0, 100.0, 150.0)))
QUANT = {"model": "stream_v1", "params": {"alpha_us": 2.0, "eta_m": 0.9}, "source": "test"}
SGL = "sglang_deepgemm_gemm_nt_f8f8bf16"


def test_ctas_of_the_per_token_group_quant():
    m = np.array([1.0, 4096.0, 4097.0, 4097.0, 4097.0])
    k = np.array([128.0, 7168.0, 3584.0, 2048.0, 1024.0])
    # 1 group; 16 per CTA; 4097 x 28 groups: 4 per CTA; 4097 x 16: 16; 4097 x 8: 8 per CTA
    assert list(AQ.quant_ctas(m, k)) == [1.0, 4096 * 56 / 16, 4097 * 28 / 4, 4097.0, 4097.0]


def test_cta_term_prices_odd_m_only_where_the_packing_breaks():
    peaks = Peaks.from_hardware(load_hardware("b200"))
    m, k = np.array([4096.0, 4097.0, 4096.0, 4097.0]), np.array([3584.0, 3584.0, 4096.0, 4096.0])
    plain = AQ.quant_seconds(m, k, peaks, QUANT)
    with_cta = AQ.quant_seconds(m, k, peaks, {**QUANT, "params": {**QUANT["params"], "cta_ns": 1.0}})
    assert with_cta[1] - plain[1] > 15e-6  # 28.7k CTAs of 4 groups: ~29 us, not the ~6 us stream
    assert with_cta[0] < 1.5 * plain[0] and np.allclose(with_cta[2:], plain[2:], rtol=0.3)
    assert np.array_equal(AQ.quant_seconds(m, k, peaks, QUANT, cta_ns=1.0), with_cta)


def _rows(peaks, backend, cta_ns):
    ms = np.array([1.0, 16.0, 64.0, 512.0, 513.0, 1024.0, 1025.0, 2048.0, 2049.0, 4096.0, 4097.0])
    nk = [(n, k) for n in (1536, 7168) for k in (768, 2048, 3584, 7168)]
    d = pd.DataFrame([(m, n, k) for n, k in nk for m in ms], columns=["m", "n", "k"])
    d["source"], d["backend"], d["time_s"] = SOURCE, backend, 1.0
    gemm_s = WavesData("gemm", d, "fp8_block", peaks).predict(list(TRUE.values()), np.arange(len(d)))
    d["time_s"] = gemm_s + AQ.quant_seconds(d.m.values, d.k.values, peaks, QUANT, cta_ns=cta_ns)
    return d


def test_fit_recovers_the_per_cta_time_for_sglang_rows_only():
    peaks = Peaks.from_hardware(load_hardware("b200"))
    e = fit_waves("gemm", _rows(peaks, SGL, 1.2), "fp8_block", SGL, peaks, "b200", quant=QUANT)
    assert abs(e["act_quant_model"]["params"]["cta_ns"] - 1.2) < 0.1
    assert "cta_ns" not in e["params"] and set(e["params"]) == set(WAVES_NAMES)
    assert e["cv"]["physics"]["p90_abs_pct"] < 2.0
    other = fit_waves("gemm", _rows(peaks, "deepgemm", None), "fp8_block", "deepgemm", peaks, "b200", quant=QUANT)
    assert other["act_quant_model"] == QUANT  # TRT-LLM's / vLLM's linear ops quantize with other kernels


class _Prof:
    """A calibrated profile with no quant table (SGLang's) and a GEMM variant fitted less a CTA-priced quant."""

    def __init__(self, cta_ns):
        self.cta_ns = cta_ns

    def kernel_efficiency(self, family, **shape):
        return None if family == "quant" else (1.0, 0.9, 0.0)

    def launch_for(self, family):
        return 2e-6

    def measured_time(self, family, **shape):
        return None

    def gemm_act_quant(self, dtype="fp8_block"):
        p = {"alpha_us": 2.0, "eta_m": 0.9} | ({} if self.cta_ns is None else {"cta_ns": self.cta_ns})
        return {"model": "stream_v1", "params": p}


def test_the_step_adds_back_the_quant_the_fit_took_out():
    from moesim.enums import CostMode
    from moesim.perf.cost import CostModel
    from moesim.specs import load_model
    from moesim.workload.ops import quant_pass

    hw, model = load_hardware("b200"), load_model("deepseek-v3")
    peaks = Peaks.from_hardware(hw)
    m, k = np.array([4096.0, 4097.0, 4097.0, 36.6]), np.array([3584.0, 3584.0, 4096.0, 7168.0])
    op = quant_pass("input_quant", m, k, a_bytes=1.0, block=128, stage=1)
    for cta_ns in (None, 1.1):
        step = CostModel(hw, model, CostMode.CALIBRATED, _Prof(cta_ns))._kernel(op).time_s
        fit = AQ.quant_seconds(m, k, peaks, {"params": {"alpha_us": 2.0, "eta_m": 0.9}}, cta_ns=cta_ns)
        np.testing.assert_allclose(step, fit, rtol=1e-6)  # launch + max(stream, CTAs x cta_ns), as fitted
    assert step[1] > 2 * step[0]  # odd m: 7x the CTAs of 4 groups
