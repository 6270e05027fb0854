"""SGLang's DeepEP-normal contiguous MoE as aiconfigurator's wideep context collector times it
(moesim.calibration.fit.moe_tables PASSES / HOST_TIMED, moesim.calibration.fit.moe_work packed routing):
packed unaligned counts, the permute / unpermute and activation bytes, and the host floor max(host, GPU)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import gemm as G
from moesim.calibration.fit import moe_tables as MT
from moesim.calibration.fit.moe_work import packed_touched, work_columns
from moesim.calibration.fit.peaks import Peaks
from moesim.perf import efficiency as E
from moesim.perf.models import waves_v1
from moesim.perf.profile import schema as S
from moesim.perf.profile.work import CONTIG_BLOCK_M, moe_parts, moe_rows, waves_parts
from moesim.specs.loader import load_hardware

DSV3 = dict(hidden=7168.0, n=2048.0, experts=256.0, topk=8.0, tp=1.0)
P = {"eta_c": 0.85, "eta_m": 0.7, "alpha_us": 150.0, "kb_ns": 100.0, "sm_GBps": 150.0}


def _rows(layout: str = "contiguous", backend: str = "deepepmoe") -> pd.DataFrame:
    rows = [
        dict(DSV3, tokens=16.0 * ep * 2**i, ep=ep)
        for ep in (2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0)
        for i in range(0, 12)
        if 16.0 * ep * 2**i <= 524288.0
    ]
    return pd.DataFrame(rows).assign(
        backend=backend, layout=layout, kernel="moe", dtype="fp8_block", exclude="", source="x", time_s=1e-3
    )


def test_packed_counts_touch_one_expert_per_m_block():
    """Unaligned even counts: an M block of 128 rows runs its first row's expert, so 128 pairs over
    128 local experts read ONE expert's weights (the aligned engine layout would read all 128)."""
    np.testing.assert_allclose(packed_touched([128.0, 1024.0, 8192.0, 100.0], 128.0), [1.0, 8.0, 64.0, 1.0])
    np.testing.assert_allclose(packed_touched(1e6, 2.0), 2.0)
    shape = dict(DSV3, tokens=32.0, ep=2.0)
    _, balanced, _ = moe_rows(work_columns(shape, "balanced", "fp8_block"))
    _, packed, _ = moe_rows(work_columns(shape, "packed", "fp8_block"))
    assert float(balanced) == 128.0 and float(packed) == 1.0
    up_in = [moe_parts("fp8_block", work_columns(shape, r, "fp8_block"))[0][0][1] for r in ("balanced", "packed")]
    assert float(up_in[1]) < float(up_in[0]) / 50.0  # weights of 1 expert, not 128


def test_packed_tiles_are_whole_blocks_of_128_rows():
    shape = {**DSV3, "tokens": np.array([32.0, 4096.0, 65536.0]), "ep": np.array([2.0, 16.0, 4.0])}
    parts, _ = waves_parts("moe", "fp8_block", 132, work_columns(shape, "packed", "fp8_block"))
    pairs = shape["tokens"] * 8.0 / shape["ep"]
    for part in parts:
        np.testing.assert_array_equal(part[3], CONTIG_BLOCK_M)  # the contiguous layout's BLOCK_M, never 64
    n_tiles = np.ceil(2.0 * 2048.0 / parts[0][4])
    np.testing.assert_allclose(parts[0][2], np.ceil(pairs / CONTIG_BLOCK_M) * n_tiles)


def test_gemm_tiling_bm_min_drops_smaller_tiles():
    _, bm64, _ = E.gemm_tiling(128.0, 4096.0, 1.0, 132)
    _, bm128, _ = E.gemm_tiling(128.0, 4096.0, 1.0, 132, bm_min=128.0)
    assert float(bm64) == 64.0 and float(bm128) == 128.0


def test_contiguous_passes_add_their_bytes():
    d = _rows()
    keys = G._shape_of(d, "moe", "fp8_block")
    assert MT.routing(d) == "packed" and keys["pair_bytes"] == 3.0 and keys["token_bytes"] == 3.0
    assert keys["block_m_min"] == CONTIG_BLOCK_M
    assert MT.pass_keys(_rows("masked")) == {} and not MT.host_timed(_rows("masked"))
    assert MT.routing(_rows("masked")) == "balanced" and "block_m_min" not in G._shape_of(_rows("masked"), "moe")
    shape = work_columns(dict(DSV3, tokens=65536.0, ep=4.0), "packed", "fp8_block")
    _, base = moe_parts("fp8_block", shape)
    _, more = moe_parts("fp8_block", {**shape, **MT.CONTIGUOUS_PASSES})
    pairs = 65536.0 * 8.0 / 4.0
    want = 65536.0 * 7168.0 * 3.0 + pairs * 7168.0 * 3.0 + pairs * 2048.0 * (9.0 - 5.0)
    assert float(more - base) == pytest.approx(want)


def test_host_floor_is_a_max_not_a_sum():
    shape = work_columns(dict(DSV3, ep=np.array([2.0, 4.0]), tokens=np.array([32.0, 65536.0])), "packed", "fp8_block")
    args = ("moe", "fp8_block", 132, 1979e12, 4.8e12)
    gpu = waves_v1.model_time(*args, P, shape)
    floor = waves_v1.model_time(*args, {**P, "host_us": 400.0}, shape)
    assert gpu[0] < 400e-6 and floor[0] == pytest.approx(400e-6)  # small call: the host time
    assert gpu[1] > 400e-6 and floor[1] == pytest.approx(gpu[1])  # big call: the GPU work hides it
    S._Checker("x").fields("params", {**P, "host_us": 400.0, **MT.CONTIGUOUS_PASSES}, S.PARAMS[S.WAVES])


def test_fit_recovers_a_planted_host_floor_and_the_reader_prices_like_the_fit():
    peaks = Peaks.from_hardware(load_hardware("h200"))
    d = _rows()
    true = {**P, "host_us": 380.0}
    shape = {**G._shape_of(d, "moe", "fp8_block"), **MT.CONTIGUOUS_PASSES}
    t = waves_v1.model_time("moe", "fp8_block", peaks.sms, peaks.peak("fp8_block"), peaks.hbm_Bps, true, shape)
    d["time_s"] = t * np.random.default_rng(0).uniform(0.98, 1.02, len(d))
    e = G.fit_waves("moe", d, "fp8_block", "deepepmoe", peaks, "h200")
    p = e["params"]
    assert p["host_us"] == pytest.approx(380.0, rel=0.05) and p["pair_bytes"] == 3.0 and p["act_bytes"] == 9.0
    assert e["cv"]["median_abs_pct"] < 3.0
    # the fit's shape (work columns and pass keys) priced with the entry's params: the fit's own prediction
    priced = waves_v1.model_time("moe", "fp8_block", peaks.sms, peaks.peak("fp8_block"), peaks.hbm_Bps, p, shape)
    data = G.WavesData("moe", d, "fp8_block", peaks)
    np.testing.assert_allclose(priced, data.predict([p[n] for n in data.names], np.arange(len(d))), rtol=1e-9)
    masked = G.WavesData("moe", _rows("masked"), "fp8_block", peaks)
    assert masked.names == G.WAVES_NAMES  # no host floor outside HOST_TIMED
