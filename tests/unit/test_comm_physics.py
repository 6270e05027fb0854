"""Communication physics of issue 14: DeepEP LL copies, LL launch SMs, the deepep_v2 model and fit,
--comm-sms, the nccl_proto (NCCL protocols, custom all-reduce) fit and pricing."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import yaml

from moesim.calibration.fit.collectives import CollRows, _nvls_choice, fit_nccl_entry
from moesim.calibration.fit.comm import a2a_data
from moesim.calibration.fit.comm_deepep import NAMES, fit_deepep_v2
from moesim.calibration.fit.peaks import Peaks
from moesim.calibration.routing import deepep_logical_copies
from moesim.engine.estimate import estimate
from moesim.errors import CalibrationError
from moesim.perf.collectives import (
    custom_ar_terms,
    deepep_entry_terms,
    deepep_ll_sms,
    deepep_v2_terms,
    nccl_proto_terms,
    rdma_node_share,
)
from moesim.perf.profile import schema as S
from moesim.perf.profile.reader import Profile
from moesim.specs.loader import data_root, load_hardware
from moesim.workload.comm import a2a_copies, dispatch_bytes_per_token

H200 = load_hardware("h200")
PEAKS = Peaks.from_hardware(H200)
TRUE = dict(
    alpha_us=8.0,
    alpha_node_us=20.0,
    alpha_expert_us=0.1,
    alpha_kB_us=0.2,
    rdma_frac_nominal=0.8,
    nvlink_GBps=300.0,
    sm_GBps=15.0,
    sm_token_us=0.5,
    q=3.0,
    rdma_node_decay=0.1,
)


def test_ll_counts_every_topk_copy_including_the_own_rank():
    rdma, nvl = a2a_copies("deepep-ll", np.array([8.0, 16.0, 64.0]), 8, 256, 8)
    assert np.allclose(rdma + nvl, 8.0)  # k copies per token, the own rank's one included
    assert np.allclose(nvl, [8.0, 4.0, 1.0])
    assert np.allclose(deepep_logical_copies("ll", [8, 16], 8, 256, 8), 8.0)
    assert np.all(np.asarray(a2a_copies("deepep-ll", 1.0, 8, 256, 8)[1]) == 0.0)  # no EP: no traffic


@pytest.mark.parametrize("experts,sms", [(8, 8), (128, 128), (132, 132), (133, 67), (256, 128), (384, 128)])
def test_ll_launch_is_one_sm_per_expert_up_to_the_gpu(experts, sms):
    assert deepep_ll_sms(experts, 132) == sms


def _rows(mode: str, op: str, rng) -> pd.DataFrame:
    """Synthetic DeepEP rows timed by deepep_v2 with TRUE params, +-2 % noise."""
    rows = []
    for hidden, topk, experts in ((7168, 8, 256), (4096, 8, 128), (2048, 6, 64), (6144, 4, 160)):
        for ep in (8, 16, 32):
            for sms in (4, 12, 20, 24) if mode == "deepep-normal" else (np.nan,):
                for tokens in (1, 4, 16, 64, 256, 1024, 4096):
                    rows.append(dict(kernel="deepep", mode=mode.split("-")[1], op=op, tokens=tokens, hidden=hidden,
                                     topk=topk, experts=experts, ep=ep, gpus_per_node=8, sms=sms))  # fmt: skip
    d = pd.DataFrame(rows).assign(time_s=1.0, exclude="", topk_groups=np.nan, source="synthetic", backend="deepep")
    ad = a2a_data(d, mode, op)
    nodes = np.maximum(d.ep / 8, 1)
    sms = deepep_ll_sms(d.experts, 132) if mode == "deepep-ll" else d.sms
    a, w = deepep_v2_terms(TRUE, tokens=d.tokens, rdma_bytes=ad.rdma_bytes, nvl_bytes=ad.nvl_bytes, nodes=nodes,
                           experts=d.experts, ep=d.ep, msg_bytes=[dispatch_bytes_per_token(h) for h in d.hidden],
                           sms=sms, rdma_Bps=0.8 * PEAKS.rdma_Bps, nvl_Bps=300e9)  # fmt: skip
    return d.assign(time_s=(a + w) * rng.uniform(0.98, 1.02, len(d)))


@pytest.mark.slow  # a bounded least-squares fit per held-out shape (seconds)
@pytest.mark.parametrize("mode", ["deepep-ll", "deepep-normal"])
def test_deepep_v2_fit_recovers_its_model_and_cross_validates(mode):
    d = _rows(mode, "dispatch", np.random.default_rng(0))
    e = fit_deepep_v2(a2a_data(d, mode, "dispatch"), mode, "dispatch", PEAKS, "h200")
    assert e["model"] == S.DEEPEP_V2 and set(e["params"]) == set(NAMES) | {"rdma_knot_nodes", "rdma_knot_frac"}
    # the NIC share per measured node count (2, 4 nodes) the smooth TRUE decay gives: 0.8 / (1 + 0.1 (n - 1))
    assert e["params"]["rdma_knot_nodes"] == [2, 4]
    assert e["params"]["rdma_knot_frac"] == pytest.approx([0.8 / 1.1, 0.8 / 1.3], rel=0.1)
    # normal mode: the one-node rows (EP8) are DeepEP's intranode kernels, fitted on their own
    assert ("intranode" in e) == (mode == "deepep-normal")
    assert e["cv"]["median_abs_pct"] < 3.0 and e["cv"]["small"]["p90_abs_pct"] < 8.0
    assert e["params"]["alpha_us"] == pytest.approx(8.0, abs=2.0)


def test_rdma_knots_carry_the_measured_nic_share_per_node_count():
    p = TRUE | {"rdma_frac_nominal": 1.0, "rdma_knot_nodes": [2.0, 4.0, 8.0], "rdma_knot_frac": [0.9, 0.9, 0.45]}
    share = rdma_node_share(p, np.array([1.0, 2.0, 4.0, 8.0, 16.0]))
    assert np.allclose(share, [0.9, 0.9, 0.9, 0.45, 0.45])  # clamped outside the measured counts
    mid = rdma_node_share(p, 2**2.5)  # half way in log2(nodes): time per byte interpolates
    assert 1 / mid == pytest.approx(0.5 / 0.9 + 0.5 / 0.45)
    assert np.all(rdma_node_share(TRUE, np.array([2.0, 8.0])) == 1 / (1 + 0.1 * np.array([1.0, 7.0])))  # no knots


def test_host_floor_hides_small_calls_and_leaves_large_ones():
    kw = dict(rdma_bytes=0.0, nodes=1.0, experts=256.0, ep=8.0, msg_bytes=7392.0, sms=20.0, rdma_Bps=4e10, nvl_Bps=3e11)
    tokens = np.array([16.0, 256.0, 65536.0])
    nvl = tokens * 4.6 * 7392.0
    plain = sum(deepep_v2_terms(TRUE, tokens=tokens, nvl_bytes=nvl, **kw))
    floored = sum(deepep_v2_terms(TRUE | {"host_us": 250.0}, tokens=tokens, nvl_bytes=nvl, **kw))
    assert plain[0] < 250e-6 and floored[0] == pytest.approx(250e-6)  # a host-paced loop: max(host, GPU)
    assert plain[-1] > 250e-6 and floored[-1] == pytest.approx(plain[-1])  # GPU-bound calls unchanged
    graphed = sum(deepep_v2_terms(TRUE | {"host_us": 250.0}, tokens=tokens, nvl_bytes=nvl, host_floor=False, **kw))
    np.testing.assert_allclose(graphed, plain)  # replayed in a CUDA graph: no host pacing


def test_cost_model_drops_the_host_floor_for_graphed_ll_calls_only():
    """A fitted host floor (host-paced benchmark loop) prices eager calls and DeepEP normal (its
    dispatch waits on the host), not LL calls replayed in a CUDA graph."""
    from moesim.api import resolve_specs
    from moesim.perf.cost import CostModel
    from moesim.workload.kernels import kernel_op

    prof = _profile_with({m: {"dispatch": _v2(host_us=400.0)} for m in ("deepep-ll", "deepep-normal")})
    mdl, hw = resolve_specs("deepseek-v3", "h200")

    def t(mode, graphs):
        op = kernel_op(mdl, hw, "dispatch", ep=8, tokens=16, mode=mode)
        return float(np.ravel(CostModel(hw, mdl, "calibrated", prof, cuda_graphs=graphs).cost(op).time_s)[0])

    assert t("deepep-ll", True) < 300e-6 and t("deepep-ll", False) == pytest.approx(400e-6)
    assert t("deepep-normal", True) == pytest.approx(400e-6)


@pytest.mark.slow  # four bounded fits (seconds)
def test_host_floor_is_kept_only_where_the_rows_show_it():
    d = _rows("deepep-normal", "dispatch", np.random.default_rng(2))
    d = d[d.ep == 8].reset_index(drop=True)
    plain = fit_deepep_v2(a2a_data(d, "deepep-normal", "dispatch"), "deepep-normal", "dispatch", PEAKS, "h200")
    assert plain["params"]["host_us"] == 0.0
    floored = d.assign(time_s=np.maximum(d.time_s, 250e-6))
    e = fit_deepep_v2(a2a_data(floored, "deepep-normal", "dispatch"), "deepep-normal", "dispatch", PEAKS, "h200")
    assert e["params"]["host_us"] == pytest.approx(250.0, rel=0.05) and e["cv"]["median_abs_pct"] < 3.0


def test_deepep_entry_prices_single_node_calls_with_the_intranode_kernels():
    intra = TRUE | {"alpha_us": 30.0}
    e = {"model": S.DEEPEP_V2, "params": TRUE, "intranode": {"params": intra}}
    kw = dict(tokens=64.0, rdma_bytes=np.array([0.0, 1e6]), nvl_bytes=np.array([3e6, 3e6]), experts=256.0,
              ep=np.array([8.0, 16.0]), msg_bytes=7392.0, sms=20.0)  # fmt: skip
    nodes = np.array([1.0, 2.0])
    nominal = {"rdma": PEAKS.rdma_Bps, "nvlink": PEAKS.nvlink_Bps}
    a, w = deepep_entry_terms(e, nodes=nodes, nominal=nominal, **kw)
    a_main, _ = deepep_entry_terms({"params": TRUE}, nodes=nodes, nominal=nominal, **kw)
    assert a[0] == pytest.approx(a_main[0] + 22e-6) and a[1] == pytest.approx(a_main[1])
    slow_nic = deepep_entry_terms(e, nodes=nodes, nominal=nominal | {"rdma": PEAKS.rdma_Bps / 4}, **kw)
    assert slow_nic[1][1] > w[1] and slow_nic[1][0] == pytest.approx(w[0])  # a NIC what-if moves internode only


def _profile_with(comm: dict | None = None, collectives: dict | None = None) -> Profile:
    data = yaml.safe_load((data_root() / "calibration" / "profiles" / "h200.yaml").read_text())
    data["comm"].update(comm or {})
    data["collectives"] = collectives or {}
    S.validate(data, "test")
    return Profile(S.fill_sections(data), hardware=H200)


def _v2(**over):
    return {"status": "fitted", "gpu": "h200", "model": S.DEEPEP_V2, "params": TRUE | over}


def test_comm_time_more_sms_faster_and_ll_nvlink_capped_by_live_link():
    prof = _profile_with({"deepep-normal": {"dispatch": _v2()}, "deepep-ll": {"dispatch": _v2()}})
    kw = dict(tokens=4096.0, rdma_bytes=0.0, nvl_bytes=4096 * 5 * 7392.0, ep=8.0, experts=256.0, msg_bytes=7392.0)
    t = [sum(prof.comm_time("deepep-normal", "dispatch", **kw, sms=s)) for s in (8, 20, 32)]
    assert t[0] > t[1] > t[2]
    ll = sum(prof.comm_time("deepep-ll", "dispatch", **kw))  # LL: its own launch (128 SMs)
    slow_link = Profile(prof.data, hardware=load_hardware("h200", {"nvlink_bw_GBps": 100}))
    assert sum(slow_link.comm_time("deepep-ll", "dispatch", **kw)) > ll  # 300 GB/s capped by a 100 GB/s link
    fast_link = Profile(prof.data, hardware=load_hardware("h200", {"nvlink_bw_GBps": 900}))
    assert sum(fast_link.comm_time("deepep-ll", "dispatch", **kw)) == pytest.approx(ll)  # absolute kernel rate


def test_schema_refuses_a_bad_deepep_v2_entry():
    with pytest.raises(CalibrationError, match="sm_GBps"):
        _profile_with({"deepep-ll": {"dispatch": _v2(sm_GBps=-1.0)}})


def test_comm_sms_moves_prefill_step_both_ways():
    kw = dict(hardware="h200", ep=16, phase="prefill", comm="deepep-normal", overlap="two-batch")

    def steps(engine):
        return {s: float(np.ravel(estimate(**kw, comm_sms=s, engine=engine)["step_time_s"])[0]) for s in (8, 20, 64)}

    v2 = steps("vllm")  # deepep_v2 fitted on H200 vLLM tables: fewer SMs -> slower comm, more -> slower compute
    assert v2[8] > v2[20] < v2[64]
    # SGLang on H200 inherits the H800 README DeepEP-normal fit (its own H200 table was a relabelled H100
    # copy, refused: issue 27), a model without an SM term: more comm SMs only take SMs from the compute
    sg = steps("sglang")
    assert sg[8] < sg[20] < sg[64]
    # TRT-LLM on Hopper runs no DeepEP (its alltoall needs MNNVL: moesim/specs/engines/trtllm.yaml): the
    # MoE is an all-gather + reduce-scatter, so DeepEP's SMs move nothing
    trt = steps("trtllm")
    assert trt[8] == trt[20] == trt[64]
    assert estimate(**kw, comm_sms=24).config["comm_sms"] == 24
    assert "comm_sms" not in estimate(**kw).config


NCCL_TRUE = dict(ll_us=4.0, ll_step_us=0.8, ll_bw_frac=0.03, ll128_us=5.0, ll128_step_us=0.9, ll128_bw_frac=0.4,
                 simple_us=20.0, simple_step_us=0.5, simple_bw_frac=0.9, nvls_us=70.0, nvls_bw_frac=0.75,
                 nvls_min_gpus=8)  # fmt: skip
CUSTOM_TRUE = dict(oneshot_us=2.5, oneshot_peer_us=0.1, oneshot_bw_frac=0.7, twoshot_us=2.0, twoshot_peer_us=1.0,
                   twoshot_bw_frac=0.85)  # fmt: skip
LINK = PEAKS.nvlink_eff_Bps


def _nccl_rows(rng, custom_cap=16 * 2**20) -> pd.DataFrame:
    """Synthetic NCCL (fp16 and int8) and SGLang custom all-reduce rows, +-1 % noise; the custom
    table falls back to NCCL above `custom_cap` as the engines do."""
    rows = []
    for n in (2, 4, 8):
        for msg in 2.0 ** np.arange(9, 30):
            ring = 2 * (n - 1) / n * msg
            for dtype in ("fp16", "int8"):
                a, w = nccl_proto_terms(NCCL_TRUE, "all_reduce", n, msg, ring, LINK, dtype == "fp16")
                rows.append(dict(backend="NCCL", dtype=dtype, ep=n, bytes=msg, time_s=float(a + w)))
            a, w = custom_ar_terms(CUSTOM_TRUE, n, msg, ring, LINK)
            t = float(a + w) if msg <= custom_cap else rows[-2]["time_s"]
            rows.append(dict(backend="SGLang_CustomAllReduce_graph", dtype="bf16", ep=n, bytes=msg, time_s=t))
    d = pd.DataFrame(rows).assign(kernel="nccl_all_reduce", exclude="", source="synthetic")
    return d.assign(time_s=d.time_s * rng.uniform(0.99, 1.01, len(d)))


def test_nccl_protocol_segments_switch_with_size_and_nvls_only_where_it_applies():
    msg = 2.0 ** np.arange(9, 31)
    t = {}
    for n in (4, 8):
        for nvls in (True, False):
            a, w = nccl_proto_terms(NCCL_TRUE, "all_reduce", n, msg, 2 * (n - 1) / n * msg, LINK, nvls)
            t[n, nvls] = a + w
    assert np.all(np.diff(t[8, True]) > 0)  # more bytes never faster
    small, large = t[8, False][0], t[8, False][-1]
    assert small == pytest.approx((4.0 + 0.8 * 14) * 1e-6, rel=0.05)  # LL latency at 512 B
    assert large == pytest.approx(1.75 * msg[-1] / (0.9 * LINK), rel=0.02)  # Simple bandwidth at 1 GB
    assert t[8, True][-1] < 0.9 * large  # NVLS: 16-bit float all-reduce on the full NVSwitch domain
    assert np.allclose(t[8, True][:8], t[8, False][:8])  # but not for small messages (its latency)
    assert np.allclose(t[4, True], t[4, False])  # nor below nvls_min_gpus
    slow = nccl_proto_terms(NCCL_TRUE, "all_reduce", 8, msg, 1.75 * msg, 0.5 * LINK, True)
    assert np.all(sum(slow) > t[8, True])  # a link what-if moves every segment
    ag = nccl_proto_terms(NCCL_TRUE, "all_gather", 8, msg, 7 / 8 * msg, LINK, True)
    assert ag[1][-1] == pytest.approx(7 / 8 * msg[-1] / (0.9 * LINK))  # NVLS slower than this ring: the ring


AG_TRUE = NCCL_TRUE | dict(simple_bw_frac=0.7, nvls_us=23.0, nvls_bw_frac=0.9, nvls_min_gpus=4)


def test_nvls_all_gather_receives_the_ring_bytes_from_its_gpu_count():
    msg = 2.0 ** np.arange(9, 31)
    t = {n: sum(nccl_proto_terms(AG_TRUE, "all_gather", n, msg, (n - 1) / n * msg, LINK, True)) for n in (2, 4, 8)}
    assert t[8][-1] == pytest.approx(23e-6 + 7 / 8 * msg[-1] / (0.9 * LINK))  # NVLS: each rank receives (n-1)/n M
    assert t[2][-1] == pytest.approx((20.0 + 0.5) * 1e-6 + 1 / 2 * msg[-1] / (0.7 * LINK))  # ring below 4 GPUs
    ring_only = {k: v for k, v in AG_TRUE.items() if not k.startswith("nvls")}
    ring = sum(nccl_proto_terms(ring_only, "all_gather", 8, msg, 7 / 8 * msg, LINK))
    assert np.allclose(t[8][:6], ring[:6]) and t[8][-1] < 0.8 * ring[-1]  # its latency: large messages only


def test_nvls_all_gather_count_is_read_from_the_rows_for_every_dtype():
    rows = []
    for n in (2, 4, 8):
        for msg in 2.0 ** np.arange(9, 30, 2):
            a, w = nccl_proto_terms(AG_TRUE, "all_gather", n, msg, (n - 1) / n * msg, LINK, True)
            rows += [dict(dtype=dt, ep=n, bytes=msg, time_s=float(a + w)) for dt in ("fp16", "int8")]
    r = CollRows(pd.DataFrame(rows), "all_gather", PEAKS)
    assert r.nvls[r.n > 2].all()  # multimem stores: no reduction, so int8 too
    assert _nvls_choice(r, "all_gather") == 4.0


def test_custom_ar_one_shot_for_small_two_shot_for_large():
    n, msg = 8.0, np.array([4096.0, 64 * 2.0**20])
    a, w = custom_ar_terms(CUSTOM_TRUE, n, msg, 1.75 * msg, LINK)
    assert a[0] == pytest.approx((2.5 + 0.1 * 7) * 1e-6) and w[0] == pytest.approx(7 * 4096 / (0.7 * LINK))
    assert a[1] == pytest.approx((2.0 + 1.0 * 7) * 1e-6) and w[1] == pytest.approx(1.75 * msg[1] / (0.85 * LINK))


@pytest.mark.slow  # leave-one-shape-out over 63 + 63 shapes (seconds)
def test_nccl_proto_fit_recovers_segments_nvls_and_custom_switch():
    e = fit_nccl_entry(_nccl_rows(np.random.default_rng(1)), "all_reduce", PEAKS, "h200", None)
    p = e["params"]
    assert e["model"] == S.NCCL_PROTO and p["nvls_min_gpus"] == 8
    assert p["simple_bw_frac"] == pytest.approx(0.9, rel=0.05) and p["nvls_bw_frac"] == pytest.approx(0.75, rel=0.05)
    assert p["ll_us"] + 14 * p["ll_step_us"] == pytest.approx(4.0 + 14 * 0.8, rel=0.1)
    assert e["cv"]["median_abs_pct"] < 2.0 and e["cv"]["small"]["rows"] > 0 and set(e["cv"]["by_gpus"]) == {2, 4, 8}
    c = e["custom"]["SGLang_CustomAllReduce_graph"]
    assert c["model"] == S.CUSTOM_AR and c["max_bytes"] == 16 * 2**20
    assert c["params"]["oneshot_us"] == pytest.approx(2.5, rel=0.2) and c["cv"]["median_abs_pct"] < 2.0


def test_profile_prices_custom_ar_below_its_switch_and_nccl_above():
    nccl = {"status": "fitted", "gpu": "h200", "model": S.NCCL_PROTO, "params": NCCL_TRUE}
    custom = {"model": S.CUSTOM_AR, "params": CUSTOM_TRUE, "max_bytes": 2**20}
    prof = _profile_with(collectives={"all_reduce": nccl | {"custom": {"SGLang_CustomAllReduce_graph": custom}}})
    nccl_only = _profile_with(collectives={"all_reduce": nccl})
    msg = np.array([1024.0, 2.0**20, 2.0**21])
    t = sum(prof.collective_time("all_reduce", 8.0, msg, 1.75 * msg, LINK))
    t_nccl = sum(nccl_only.collective_time("all_reduce", 8.0, msg, 1.75 * msg, LINK))
    assert t[0] < 5e-6 < t_nccl[0]  # the custom one-shot AR in CUDA graphs: a few us
    assert t[1] < t_nccl[1] and t[2] == pytest.approx(t_nccl[2])  # NCCL above the engine's switch
