"""seed004 layer breakdown (Perplexity, H100, one MoE layer) and seed002's real step, predicted from
kernel-table calibration only. A figure the model misses honestly is xfail with the number."""
import pytest

from moesim.validate import run_case

pytestmark = pytest.mark.validation

MISSES = {
    "ep8_overlap_five_stage": "predicted 2224 us vs 1802 (+23%): EP8 reads all 32 experts per micro-batch",
    "ep8_grouped_gemm": "predicted 1265 us for both micro-batches vs 555; 2 x 1.41 GB of expert weights cannot "
                        "stream in 555 us at 3.35 TB/s, so the published bar is likely per micro-batch",
    "ep128_grouped_gemm": "predicted 190 us vs 270 (-30%): DeepGEMM-table efficiency at m=512 per expert",
}


def _checks(seed_cases, cid):
    return {c.metric: c for c in run_case(seed_cases[cid], seed_cases)}


@pytest.mark.parametrize("metric", ["ep128_overlap_none", "ep128_overlap_shared", "ep128_overlap_five_stage",
                                    "ep8_overlap_five_stage", "ep8_grouped_gemm", "ep128_grouped_gemm"])
def test_layer_breakdown(seed_cases, metric, request):
    if metric in MISSES:
        request.applymarker(pytest.mark.xfail(strict=False, reason=MISSES[metric]))
    c = _checks(seed_cases, "seed004-layer-breakdown")[metric]
    assert c.passed, (c.predicted, c.expected)


def test_microbatch_crossover(seed_cases):
    checks = _checks(seed_cases, "seed004-microbatch-crossover")
    assert all(c.passed for c in checks.values()), {k: c.predicted for k, c in checks.items()}


def test_decode_real_five_stage(seed_cases):
    c = _checks(seed_cases, "seed002-decode-real")["step_time_s"]
    assert c.passed, c.predicted
