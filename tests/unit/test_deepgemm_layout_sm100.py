"""DeepGEMM's SM100 layout choice (moesim.perf.deepgemm_layout_sm100) as the GEMM fit and reader use it
(tiling "deepgemm_sm100", picked for Blackwell by the GPU's SM generation)."""

from __future__ import annotations

import numpy as np

from moesim.perf import deepgemm_layout_sm100 as L
from moesim.perf.models import waves_v1
from moesim.perf.profile.work import DEEPGEMM_SM90, DEEPGEMM_SM100, waves_parts

SMS, PEAK, BW = 148, 4500e12, 8e12
P = {"eta_c": 0.7, "eta_m": 0.72, "alpha_us": 5.0, "kb_ns": 100.0, "sm_GBps": 140.0}
KS = np.array([128, 256, 768, 2048, 3584, 7168, 16384.0])


def test_small_m_takes_the_32_row_block_and_the_one_wave_block_n():
    # m 1, n 7168 on 148 SMs: block_n 64 is the first one-wave choice (112 CTAs); at equal waves and last
    # wave the same block_n with a smaller block_m wins (128 -> 32); no multicast below m 512
    ctas, bm, bn, rows = L.sm100_fp8_layout(1.0, 7168.0, 2048.0, SMS)
    assert (float(ctas), float(bm), float(bn), float(rows)) == (112.0, 32.0, 64.0, 96.0)


def test_multicast_pairs_need_m_512_and_an_even_number_of_m_blocks():
    m = np.array([256.0, 4096.0, 4097.0])
    ctas, bm, bn, rows = L.sm100_fp8_layout(m, 7168.0, 2048.0, SMS)
    assert list(bm) == [128.0] * 3 and bn[1] == 224.0 and ctas[1] == 32 * 32  # 7 waves of 128 x 224
    assert rows[1] == 128.0 + 224.0 / 2  # 32 m blocks: B multicast to a pair, half each
    assert rows[0] == bm[0] + bn[0] and rows[2] == bm[2] + bn[2]  # m < 512; 33 m blocks (odd)
    assert L.sm100_fp8_layout(4096.0, 7168.0, 2048.0, 147)[3] == 128.0 + 224.0  # an odd SM count: no pairs


def test_layout_rules_hold_over_a_grid():
    m, n, k = (a.ravel() for a in np.meshgrid([1, 16, 33, 65, 129, 513, 1024, 4097, 32768.0], [128, 2112, 7168.0], KS))
    ctas, bm, bn, rows = L.sm100_fp8_layout(m, n, k, SMS)
    assert np.all(bm <= 128) and np.all(np.isin(bn, L.BLOCK_N)) and np.all(bn <= 224)  # 1D1D kernel, tensor memory
    assert np.all((bm == 128) | (m <= bm))  # 32- / 64-row blocks only for m <= 32 / 64
    assert np.all(bn[k <= 256] <= 128)  # small k: fewer store blocks
    assert np.all(ctas == np.ceil(m / bm) * np.ceil(n / bn))
    paired = rows < bm + bn
    assert np.all(rows[paired] == (bm + bn / 2)[paired]) and np.all(m[paired] >= 512)
    # no candidate has fewer waves than the chosen one (the first criterion of get_best_config)
    for cbm in L.BLOCK_M_ORDER:
        for cbn in L.BLOCK_N:
            ok = L._legal(m, k, cbm, cbn)
            waves = np.ceil(np.ceil(m / cbm) * np.ceil(n / cbn) / SMS)
            assert np.all(~ok | (waves >= np.ceil(ctas / SMS)))


def test_sm100_tiling_key_moves_the_modelled_time_and_grouped_shapes_keep_gemm_tiling():
    def t(shape, key):
        return waves_v1.model_time("gemm", "fp8_block", SMS, PEAK, BW, P, {**shape, "tiling": key})

    small = {"m": 129.0, "n": 1536.0, "k": 7168.0}  # 2 m blocks of 128 rows, not SM90's 64-row blocks
    assert t(small, DEEPGEMM_SM100) > 1.1 * max(t(small, None), t(small, DEEPGEMM_SM90))
    big = {"m": np.array([4096.0, 4097.0]), "n": 7168.0, "k": 2048.0}
    assert t(big, DEEPGEMM_SM100)[0] < t(big, DEEPGEMM_SM100)[1]  # the multicast pair loads less per CTA
    parts, _ = waves_parts("gemm", "fp8_block", SMS, {**big, "tiling": DEEPGEMM_SM100})
    assert len(parts[0]) == 8
    grouped, _ = waves_parts("gemm", "fp8_block", SMS, {**big, "groups": 4.0, "tiling": DEEPGEMM_SM100})
    assert len(grouped[0]) == 7  # the layout rule is the normal GEMM's


def test_same_layout_whatever_the_order_and_repetition_of_shapes():
    m = np.array([1.0, 17.0, 129.0, 1537.0, 4097.0, 1.0])
    k = np.array([7168.0, 512.0, 5120.0, 2048.0, 16384.0, 7168.0])
    a = L.sm100_fp8_layout(m, 1536.0, k, SMS)
    b = L.sm100_fp8_layout(m[::-1], 1536.0, k[::-1], SMS)
    assert all(np.array_equal(x[::-1], y) for x, y in zip(a, b)) and all(x[0] == x[-1] for x in a)
    one = L.sm100_fp8_layout(m[:, None], 1536.0, k[:, None], SMS)
    assert one[0].shape == (6, 1) and np.array_equal(one[0].ravel(), a[0])
