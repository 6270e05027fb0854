"""Expected max-over-ranks factors vs fixed-seed Monte-Carlo, limits, parsing helpers."""

import numpy as np
import pytest

from moesim.balance.eplb import rebalance_experts, zipf_load
from moesim.balance.imbalance import (
    context_dist,
    context_skewness,
    dp_attention_imbalance,
    expected_max_std_normal,
    expert_rank_imbalance,
    skew_shares,
)
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError

TOKENS = [1, 3, 10, 30, 100, 300, 1000, 3000, 20000]


def _mc_expert(tokens, top_k, shares, rng, samples):
    pairs = int(round(tokens * top_k))
    counts = rng.multinomial(pairs, shares, size=samples)
    return counts.max(axis=1).mean() / (pairs / len(shares))


def _share_cases():
    yield "uniform-8", np.full(8, 1 / 8)
    yield "uniform-256", np.full(256, 1 / 256)
    yield "zipf-naive-32", skew_shares(32, 256, 0, "zipf:1.0")
    yield "zipf-naive-64", skew_shares(64, 256, 0, "zipf:0.8")
    yield "eplb-144", skew_shares(144, 256, 32, "zipf:1.0")
    yield "eplb-16", skew_shares(16, 256, 16, "zipf:1.2")


@pytest.mark.parametrize("name,shares", list(_share_cases()), ids=lambda x: x if isinstance(x, str) else "")
def test_expert_imbalance_vs_monte_carlo(name, shares):
    rng = np.random.default_rng(12345)
    got = expert_rank_imbalance(np.array(TOKENS, float), 8, shares)
    for t, g in zip(TOKENS, got):
        want = _mc_expert(t, 8, shares, rng, samples=3000 if t >= 3000 else 8000)
        assert g == pytest.approx(want, rel=0.05), (name, t)


def test_expert_imbalance_limits():
    uni = np.full(64, 1 / 64)
    r = expert_rank_imbalance(np.array([0.0, 1e-3, 1.0, 1e3, 1e6, 1e12]), 8, uni)
    assert r[0] == 1.0  # no tokens: nothing to wait for
    assert np.all(np.isfinite(r)) and np.all(r >= 1.0)
    assert r[1] > 30  # a lone pair lands on one rank: max/mean -> ranks
    assert np.all(np.diff(r[1:]) < 0)  # more tokens -> better balanced
    assert r[-1] == pytest.approx(1.0, abs=1e-4)
    shares = skew_shares(32, 256, 0, "zipf:1.0")
    big = expert_rank_imbalance(1e11, 8, shares)
    assert big == pytest.approx(shares.max() * 32, rel=1e-3)
    assert isinstance(big, float)


def test_expert_imbalance_vectorised_and_smooth():
    shares = skew_shares(144, 256, 32, "zipf:1.0")
    t = np.geomspace(0.5, 1e7, 400).reshape(20, 20)
    r = expert_rank_imbalance(t, 8, shares)
    assert r.shape == (20, 20)
    flat = r.ravel()
    assert np.all(np.diff(flat) <= 1e-9)  # monotone across the exact/normal switch
    scalar = [expert_rank_imbalance(x, 8, shares) for x in t.ravel()[::37]]
    np.testing.assert_allclose(flat[::37], scalar)
    k = expert_rank_imbalance(100.0, np.array([1, 8]), np.full(8, 1 / 8))
    assert k[0] > k[1]  # fewer pairs -> larger factor


def test_expert_imbalance_two_d_rows_average():
    rows = skew_shares(32, 256, 0, "zipf:1.0", layers=3, seed=2)
    assert rows.shape == (3, 32)
    both = expert_rank_imbalance(500.0, 8, rows)
    each = [expert_rank_imbalance(500.0, 8, row) for row in rows]
    assert both == pytest.approx(np.mean(each))


def test_expert_imbalance_errors():
    with pytest.raises(ConfigError, match="slot_share_per_rank"):
        expert_rank_imbalance(10.0, 8, [0.5, 0.6])
    with pytest.raises(ConfigError, match="tokens_total"):
        expert_rank_imbalance(-1.0, 8, [0.5, 0.5])
    with pytest.raises(ConfigError, match="top_k"):
        expert_rank_imbalance(1.0, 0, [0.5, 0.5])


def test_expected_max_std_normal():
    np.testing.assert_allclose(
        expected_max_std_normal([1, 2, 3, 5, 10, 100]),
        [0.0, 1 / np.sqrt(np.pi), 1.5 / np.sqrt(np.pi), 1.16296, 1.53875, 2.50759],
        atol=2e-5,
    )


def test_dp_attention_vs_monte_carlo():
    rng = np.random.default_rng(7)
    cases = [
        (8, 32, "lognormal:1.0"),
        (144, 48, "lognormal:1.0"),
        (32, 8, "lognormal:1.0"),
        (144, 16, "lognormal:1.5"),
        (144, 8, "exp"),
        (256, 1, "exp"),
        (16, 16, "lognormal:0.3"),
    ]
    for dp, b, dist in cases:
        cv = context_dist(dist)
        if dist == "exp":
            lengths = rng.exponential(5000.0, size=(800, dp, b))
        else:
            sigma = np.sqrt(np.log1p(cv**2))
            lengths = rng.lognormal(-0.5 * sigma**2, sigma, size=(800, dp, b)) * 5000.0
        sums = lengths.sum(axis=2)
        want = (sums.max(axis=1) / sums.mean(axis=1)).mean()
        got = dp_attention_imbalance(b, dp, 5000.0, cv, context_skewness(dist))
        assert got == pytest.approx(want, rel=0.03), (dp, b, dist)
        normal = dp_attention_imbalance(b, dp, 5000.0, cv)  # plain normal: low, never high
        assert normal <= want * 1.02
        if b >= 32 and cv <= 1.0:
            assert normal == pytest.approx(want, rel=0.08)


def test_dp_attention_limits_and_broadcast():
    assert dp_attention_imbalance(64, 32, 4096.0, 0.0) == 1.0
    assert dp_attention_imbalance(64, 1, 4096.0, 1.0) == 1.0
    assert dp_attention_imbalance(0, 32, 4096.0, 1.0) == 1.0
    r = dp_attention_imbalance(np.array([[1], [16], [256]]), np.array([8, 144]), 4096.0, 1.0)
    assert r.shape == (3, 2)
    assert np.all(np.diff(r, axis=0) < 0) and np.all(np.diff(r, axis=1) > 0)
    with pytest.raises(ConfigError, match="context_cv"):
        dp_attention_imbalance(8, 8, 100.0, -1.0)


def test_context_dist():
    assert context_dist("fixed") == 0.0
    assert context_dist("exp") == 1.0
    assert context_dist("lognormal:0.7") == 0.7
    assert context_skewness("fixed") == 0.0 and context_skewness("exp") == 2.0
    assert context_skewness("lognormal:1") == pytest.approx(4.0)
    for bad in ("gamma", "lognormal:", "lognormal:-1"):
        with pytest.raises(ConfigError, match="context-dist"):
            context_dist(bad)


def test_skew_shares(tmp_path):
    np.testing.assert_allclose(skew_shares(8, 256, 0, "uniform"), 1 / 8)
    u = skew_shares(144, 256, 32, "uniform")
    assert u.shape == (144,) and u.sum() == pytest.approx(1.0) and u.max() * 144 < 1.13
    z = skew_shares(144, 256, 32, "zipf:1.0")
    naive_equiv = rebalance_experts(zipf_load(256, 1.0), 288, 1, 1, 144).gpu_share()[0]
    np.testing.assert_allclose(z, naive_equiv)
    assert z.max() < skew_shares(128, 256, 0, "zipf:1.0").max()
    p = tmp_path / "load.csv"
    p.write_text(",".join(["1"] * 14 + ["10", "10"]) + "\n")
    s = skew_shares(4, 16, 0, str(p))
    np.testing.assert_allclose(s, np.array([4, 4, 4, 2 + 20]) / 34)
    with pytest.raises(ConfigError, match="columns"):
        skew_shares(4, 32, 0, str(p))
    with pytest.raises(ConfigError, match="expert-skew"):
        skew_shares(4, 16, 0, "pareto:1")
    with pytest.raises(ConfigError, match="multiple of ep"):
        skew_shares(144, 256, 0, "uniform")


# ---- routed grouped-GEMM tile padding and per-micro-batch imbalance
@pytest.mark.parametrize("m", [0.3, 2.0, 17.0, 49.5, 50.5, 64.0, 100.0, 352.0, 512.0, 3000.0, 14500.0])
def test_expected_tiles_vs_monte_carlo(m):
    from moesim.perf.efficiency import expected_tiles, gemm_block_m

    bm = float(gemm_block_m(m))
    x = np.random.default_rng(7).poisson(m, 400_000)
    mc = np.ceil(x / bm).mean()
    assert float(expected_tiles(m, bm)) == pytest.approx(mc, rel=0.01, abs=2e-3)


def test_routed_tile_padding_limits():
    from moesim.perf.efficiency import routed_tile_padding

    m = np.array([0.0, 1.0, 64.0, 512.0, 1e4, 1e6])
    f = routed_tile_padding(m)
    assert f[0] == 1.0 and np.all(f >= 1.0)
    assert f[-1] == pytest.approx(1.0, abs=1e-3)  # padding vanishes for large groups
    assert f[3] == pytest.approx(128 * 4.49 / 512, rel=0.01)  # 512 +- 23 straddles the 4-tile edge


def test_padding_only_for_routed_groups_in_calibrated_mode():
    """The DeepGEMM tables time tile-aligned deterministic shapes: `moesim kernel` reproduces them
    unpadded; only routed experts (random counts) pay for partial tiles, and never in roofline mode."""
    from moesim.api import estimate, load_profile_for, resolve_specs
    from moesim.perf.cost import CostModel
    from moesim.workload.kernels import kernel_op

    m, h = resolve_specs("deepseek-v3", "h800")
    prof, _ = load_profile_for(h, Pricing.of(cost_mode="calibrated"))
    op = kernel_op(m, h, "grouped_gemm", m=512, n=4096, k=7168, groups=2, layout="masked")
    t = float(np.ravel(CostModel(h, m, "calibrated", prof).cost(op).time_s)[0])
    assert t == pytest.approx(58e-6, rel=0.12)  # DeepGEMM README row: 2 groups x 512, 58 us
    from moesim.perf.efficiency import routed_tile_padding

    kw = dict(
        model="deepseek-v3",
        hardware="h100_sxm",
        ep=128,
        dp=128,
        batch=128,
        context=5000,
        mtp=1,
        comm="pplx",
        overlap="serial",
        expert_skew="none",
    )
    cal = {o["name"]: o for o in estimate(**kw, cost_mode="calibrated").ops}
    roof = {o["name"]: o for o in estimate(**kw, cost_mode="roofline").ops}
    g = cal["experts_gate_up"]  # 2 experts per GPU, 128 x 2 x 8 x 128 / 256 = 1024 tokens each
    m, h = resolve_specs("deepseek-v3", "h100_sxm")
    prof, _ = load_profile_for(h, Pricing.of(cost_mode="calibrated"))
    shape = dict(m=1024.0, n=4096.0, k=7168.0, groups=2.0, layout="masked")
    aligned = float(np.ravel(prof.kernel_time("grouped_gemm", **shape))[0])
    padded = float(np.ravel(prof.kernel_time("grouped_gemm", **shape, tile_pad=routed_tile_padding(1024.0)))[0])
    pad = float(routed_tile_padding(1024.0))
    # waves_v1 (H200-derived profile): the padded rows of each group add whole M tiles, at most
    # ceil(1024 pad / 128) / (1024 / 128) more tile work (9/8 here); never less than aligned
    assert aligned < padded <= aligned * np.ceil(1024.0 * pad / 128.0) / (1024.0 / 128.0)
    assert g["bound"] == "compute"
    assert g["time_per_call_s"] == pytest.approx(padded + prof.launch_for("grouped_gemm"), rel=1e-6)
    assert roof["experts_gate_up"]["flops"] == g["flops"]  # useful FLOPs are reported unpadded


def test_two_micro_batches_see_more_rank_noise():
    from moesim.api import resolve_specs
    from moesim.balance.factors import imbalance_factors
    from moesim.grid.core import Grid

    m, h = resolve_specs("deepseek-v3", "h100_sxm")
    g = Grid.product(
        tp=1, dp=128, ep=128, moe_tp=1, batch=np.array([8.0, 128.0]), context=5000.0, mtp=1, acceptance=0.8, redundant=0
    )
    imb, _ = imbalance_factors(m, h, g, "decode", "uniform")
    assert np.all(imb["experts@2"] > imb["experts"]) and np.all(imb["experts"] > 1.0)
    one = imbalance_factors(m, h, g.take(np.array([1])), "decode", "uniform")[0]
    assert float(one["experts@2"][0]) == pytest.approx(
        float(
            imbalance_factors(
                m,
                h,
                Grid.product(
                    tp=1, dp=128, ep=128, moe_tp=1, batch=64.0, context=5000.0, mtp=1, acceptance=0.8, redundant=0
                ),
                "decode",
                "uniform",
            )[0]["experts"][0]
        )
    )
