"""Aggregated serving (phase mixed, issue 15 s.1): the acceptance properties of the engine
schedulers (`moesim.engine.scheduler`, `moesim.engine.serving`)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from moesim import workload as W
from moesim.engine import scheduler as S
from moesim.engine.estimate import estimate
from moesim.engine.pricing import evaluate_grid, resolve_specs
from moesim.engine.serving import serve
from moesim.engine.settings import Pricing
from moesim.enums import CommMode, Phase
from moesim.grid.core import Grid

SPECS = {}
FAST = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _specs(model="deepseek-v3", hw="h200"):
    if (model, hw) not in SPECS:
        SPECS[(model, hw)] = resolve_specs(model, hw)
    return SPECS[(model, hw)]


def _grid(batches, mtp=(0,), tp=8, ep=8, dp=1, context=4096.0):
    return Grid.product(tp=[tp], dp=[dp], ep=[ep], moe_tp=[1], batch=list(batches), context=[context], mtp=list(mtp),
                        acceptance=[0.8], redundant=[0])  # fmt: skip


def _one_pass(m, h, grid, isl, engine, comm):
    """One prefill pass of the whole prompt (phase prefill, ISL tokens, causal over ISL), priced with
    the same engine's kernel profile and the all-to-all the serving run's prompt passes use (a fused
    vLLM chunk rides the decode's DeepEP LL; SGLang's prefill passes their own), with evenly routed
    experts (the published skew the serving run applies to prompt tokens only adds). With DP
    attention the prompt is one rank's: its lower bound spreads its tokens over the DP ranks (the
    experts' load of the lock-step pass, less attention than the prefilling rank does)."""
    dp = float(grid.dp[0])
    g = Grid.product(tp=grid.tp[:1], dp=[dp], ep=grid.ep[:1], moe_tp=[1], batch=[isl / dp], context=[isl], mtp=[0],
                     acceptance=[0.8], redundant=[0])  # fmt: skip
    ev, _ = evaluate_grid(
        m, h, g, phase=Phase.PREFILL, pricing=Pricing.of(engine=engine, comm=comm, expert_skew="uniform")
    )
    return float(ev.values["step_time_s"][0])


ENGINES = st.sampled_from(["sglang", "vllm", "trtllm"])
LENGTHS = st.tuples(st.sampled_from([256.0, 1024.0, 3000.0, 8192.0]), st.sampled_from([128.0, 1000.0, 8192.0]))


LAYOUTS = st.sampled_from([(8, 1, 8), (1, 8, 8)])  # (tp, dp, ep): TP8, and DP attention on 8 ranks


@FAST
@given(engine=ENGINES, lengths=LENGTHS, mtp=st.sampled_from([0, 1]), layout=LAYOUTS)
def test_ttft_and_tpot_bounds_and_littles_law(engine, lengths, mtp, layout):
    """TTFT >= one prefill pass of the prompt; TPOT >= the decode step; closed loop:
    throughput x (TTFT + OSL x TPOT) = concurrency (Little's law)."""
    m, h = _specs()
    isl, osl = lengths
    tp, dp, ep = layout
    g = _grid([1, 3, 16, 64], mtp=(mtp,), context=isl + osl / 2, tp=tp, dp=dp, ep=ep)
    v = serve(m, h, g, isl=isl, osl=osl, pricing=Pricing.of(engine=engine)).values
    assert v["stable"].all()
    assert (v["ttft_s"] >= _one_pass(m, h, g, isl, engine, v["prefill_comm"][0]) * (1 - 1e-9)).all()
    assert (v["tpot_s"] * g.tokens_per_step >= v["decode_step_time_s"] * (1 - 1e-9)).all()
    out_per_dp = v["tokens_per_s_per_gpu"] * g.tp  # output tokens/s of one DP group
    little = out_per_dp / osl * (v["ttft_s"] + osl * v["tpot_s"])
    np.testing.assert_allclose(little, g.batch, rtol=1e-6)
    np.testing.assert_allclose(v["concurrency"], g.batch, rtol=1e-6)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
def test_single_user_long_output_tpot_is_the_decode_step(engine):
    """Concurrency 1 and ISL << OSL: nothing interrupts a request's decode (its own prompt came
    before it), TPOT = the decode step of one request (within a few %)."""
    r = estimate("deepseek-v3", "h200", phase="mixed", tp=8, ep=8, batch=1, isl=128, osl=16384, engine=engine)
    d = estimate("deepseek-v3", "h200", phase="decode", tp=8, ep=8, batch=1, context=128 + 16384 / 2, engine=engine)
    assert r["tpot_s"] == pytest.approx(d["step_time_s"], rel=0.02)
    assert r["ttft_queue_s"] == pytest.approx(0.0, abs=1e-12)  # no one else to wait for


def _weight_bytes(wl: W.Workload) -> float:
    """Weight bytes one forward pass reads (every layer, step ops; MTP excluded)."""
    tot = 0.0
    for ops, n in ((wl.moe_layer, wl.n_moe_layers), (wl.dense_layer, wl.n_dense_layers), (wl.step, 1)):
        tot += n * sum(float(np.ravel(np.asarray(o.bytes_weight) * np.asarray(o.present))[0]) for o in ops)
    return tot


@given(decode=st.sampled_from([1.0, 8.0, 64.0]), chunk=st.sampled_from([64.0, 1024.0, 8192.0]))
@settings(max_examples=8, deadline=None)
def test_weights_read_once_per_forward_pass(decode, chunk):
    """A fused pass (decode tokens + a prefill chunk) reads the dense weights once: the same bytes
    as the decode step alone (GQA model), independent of the chunk's tokens; a prefill pass reads
    the same weights whatever its tokens (never per token)."""
    m, h = _specs("llama-3-1-70b", "h200")
    g = _grid([decode], tp=4, ep=1, context=2048.0)
    dec = _weight_bytes(W.build(m, h, g, Phase.DECODE, CommMode.NCCL))
    fused = _weight_bytes(W.build(m, h, g, Phase.DECODE, CommMode.NCCL, chunk=(np.full(1, chunk), np.full(1, 2048.0))))
    assert fused == pytest.approx(dec, rel=1e-12)
    pre = [
        _weight_bytes(W.build(m, h, _grid([t], tp=4, ep=1), Phase.PREFILL, CommMode.NCCL)) for t in (chunk, 2 * chunk)
    ]
    assert pre[0] == pytest.approx(pre[1], rel=1e-12) and pre[0] == pytest.approx(dec, rel=1e-12)


def test_fused_moe_pass_shares_the_weights():
    """DeepSeek-V3: the fused pass reads fewer weight bytes than a decode step plus a separate
    prefill pass of the chunk (the old phase mixed), and its only extra non-expert weights are the
    MHA-form kv_b_proj of the chunk's attention."""
    m, h = _specs()
    g = _grid([16], context=5000.0)
    ch = (np.full(1, 1024.0), np.full(1, 1024.0))
    fused = W.build(m, h, g, Phase.DECODE, CommMode.DEEPEP_LL, chunk=ch)
    dec = W.build(m, h, g, Phase.DECODE, CommMode.DEEPEP_LL)
    pre = W.build(m, h, _grid([1024], context=1024.0), Phase.PREFILL, CommMode.DEEPEP_NORMAL)
    assert _weight_bytes(dec) < _weight_bytes(fused) < _weight_bytes(dec) + _weight_bytes(pre)
    names = {o.name for o in fused.moe_layer} - {o.name for o in dec.moe_layer}
    assert names == {"prefill_kv_b_quant", "prefill_kv_b_proj", "prefill_attn_core"}  # + kv_b's input quant


def test_open_loop_light_load_and_overload():
    """Open loop: at a trickle of requests TTFT -> the prompt's own pass and TPOT -> the decode
    step of one request; past the capacity the queue grows (stable False, TTFT infinite)."""
    m, h = _specs()
    g = _grid([64], context=1024 + 512.0)
    light = serve(m, h, g, isl=1024, osl=1024, pricing=Pricing.of(engine="sglang"), request_rate=1e-4).values
    assert light["stable"][0] and light["decode_batch"][0] == pytest.approx(1.0, abs=1e-2)
    assert light["ttft_s"][0] == pytest.approx(light["prefill_chunk_time_s"][0], rel=1e-3)
    assert light["tpot_s"][0] == pytest.approx(light["decode_step_time_s"][0], rel=1e-3)
    heavy = serve(m, h, g, isl=1024, osl=1024, pricing=Pricing.of(engine="sglang"), request_rate=1e4).values
    assert not heavy["stable"][0] and np.isinf(heavy["ttft_s"][0])


def test_engine_selects_the_scheduler():
    kw = dict(phase="mixed", tp=8, ep=8, batch=16, isl=2000, osl=500)
    s = estimate("deepseek-v3", "h200", engine="sglang", **kw)
    v = estimate("deepseek-v3", "h200", engine="vllm", **kw)
    assert s.config["scheduler"] == "prefill-priority-chunked" and v.config["scheduler"] == "fused-chunked-prefill"
    assert any("prefill-priority" in n for n in s.notes) and any("fused chunked prefill" in n for n in v.notes)
    assert any(o["name"].startswith("prefill:") for o in s.ops) and any(o["name"].startswith("fused:") for o in v.ops)
    assert sum(o["share"] for o in s.ops) == pytest.approx(1.0)
    # SGLang's chunk on a < 160 GiB GPU; vLLM's token budget less the decode tokens it carries
    assert s.config["prefill_budget_tokens"] == 8192 and v.config["prefill_budget_tokens"] < 8192


def test_scheduler_closed_forms_by_hand():
    """One DP group, hand-checkable: open loop, prefill-priority: u = lam ISL D / T; TPOT = t_d / (1 - u);
    W = (u D + busy t_d) / 2 / (1 - u); TTFT = W + D."""
    p = S.PassTimes(np.array([0.01]), np.array([0.1]), np.array([1000.0]), np.array([8192.0]), np.array([1.0]), False)
    lam = 2.0
    sol = S.solve(p, 1000.0, 100.0, rate=lam)
    u = lam * 0.1
    assert sol.u[0] == pytest.approx(u)
    assert sol.tpot_s[0] == pytest.approx(0.01 / (1 - u))
    busy = -np.expm1(-lam * 100 * sol.tpot_s[0])
    assert sol.ttft_s[0] == pytest.approx((u * 0.1 + min(busy, 1 - u) * 0.01) / 2 / (1 - u) + 0.1)
    assert S.default_budget_tokens("sglang", 141e9, np.array([8.0]))[0] == 1024  # 8192 over 8 DP ranks


def test_dp_lock_step_interrupts_more():
    """Same passes, the DP ranks in lock step: every rank's prefill holds the others, so a
    decoding request sees more interruptions (TPOT up) and as many passes of its own (TTFT up)."""
    p1 = S.PassTimes(np.array([0.02]), np.array([0.05]), np.array([512.0]), np.array([512.0]), np.array([1.0]), False)
    p8 = S.PassTimes(p1.t_d, p1.D, p1.T, p1.budget, p1.a, False, np.array([8.0]))
    one, eight = (S.solve(p, 2000.0, 500.0, rate=0.5) for p in (p1, p8))
    assert eight.tpot_s[0] > one.tpot_s[0] and eight.ttft_s[0] >= one.ttft_s[0]
    assert eight.any_share[0] == pytest.approx(1 - (1 - one.u[0]) ** 8)
    assert 1.0 <= eight.ranks_prefilling[0] <= 8.0


def test_wait_p90_is_the_mm1_quantile():
    """The exponential-tail approximation is exact for M/M/1: P(W > t) = rho exp(-mu (1 - rho) t),
    so W_p90 = ln(10 rho) / (mu (1 - rho)); no wait at all below P(wait) = 0.1."""
    mu, rho = 20.0, np.array([0.05, 0.3, 0.6, 0.9])
    mean = rho / (mu * (1 - rho))
    exact = np.where(rho > 0.1, np.log(10 * rho) / (mu * (1 - rho)), 0.0)
    np.testing.assert_allclose(S.wait_p90(mean, rho), exact, rtol=1e-12)


def test_ttft_p90_monotone_in_load():
    """p90 TTFT >= the prompt's own passes and never falls as the load rises: open loop over the
    request rate (fixed passes) and closed loop over the concurrency (passes re-priced)."""
    p = S.PassTimes(np.full(6, 0.02), np.full(6, 0.08), np.full(6, 1000.0), np.full(6, 8192.0), np.ones(6), False)
    rates = np.array([0.01, 0.5, 1.0, 2.0, 4.0, 6.0])
    sols = [S.solve(S.PassTimes(p.t_d[:1], p.D[:1], p.T[:1], p.budget[:1], p.a[:1], False), 1000.0, 200.0, rate=r)
            for r in rates]  # fmt: skip
    p90 = np.array([s.ttft_p90_s[0] for s in sols])
    assert all(s.stable[0] for s in sols)
    assert (np.diff(p90) >= -1e-12).all() and p90[-1] > p90[0]
    assert (p90 >= np.array([s.own_s[0] for s in sols]) * (1 - 1e-12)).all()
    m, h = _specs()
    v = serve(
        m, h, _grid([1, 4, 16, 64, 128], context=1536.0), isl=1024, osl=1024, pricing=Pricing.of(engine="sglang")
    ).values
    assert v["ttft_p90_s"][0] == pytest.approx(v["ttft_prefill_s"][0])  # one client: nobody to wait for
    assert (np.diff(v["ttft_p90_s"]) >= 0).all() and (v["ttft_p90_s"] >= v["ttft_prefill_s"]).all()
