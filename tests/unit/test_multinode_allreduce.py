"""Cross-node all-reduce (issue 15 item 5): a TP group spanning nodes is priced hierarchically
(single-node NCCL all-reduce on the local ranks + an inter-node ring over the NICs with the
hardware spec's NIC bandwidth and latency), not from single-node fits."""

import numpy as np
import pytest

from moesim.engine.pricing import load_profile_for, resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import CostMode
from moesim.perf.collectives import inter_node_allreduce_terms
from moesim.perf.kernel import price_kernel
from moesim.workload.kernels import kernel_op

MSG = 7168 * 2.0 * 16  # 16 tokens of DeepSeek-V3's BF16 hidden state (a decode step's all-reduce)


def _ar(gpus, nbytes=MSG, cost_mode="calibrated", sets=()):
    m, h = resolve_specs("deepseek-v3", "h100_sxm", list(sets))
    cm = CostMode.parse(cost_mode, "cost_mode")
    prof = load_profile_for(h, Pricing.of(cost_mode=cm, engine="sglang"))[0]
    return price_kernel(kernel_op(m, h, "all_reduce", gpus=gpus, nbytes=nbytes), m, h, cm, prof)["time_s"]


@pytest.mark.parametrize("cost_mode", ["calibrated", "roofline"])
def test_tp16_on_two_nodes_is_slower_than_tp8(cost_mode):
    """Two nodes add the inter-node ring (NIC latency per step, shards over the NIC) to what the
    node's own all-reduce costs; the engines' single-node custom all-reduce does not apply."""
    t8, t16 = _ar(8, cost_mode=cost_mode), _ar(16, cost_mode=cost_mode)
    assert t16 > t8
    lat = resolve_specs("deepseek-v3", "h100_sxm")[1].rdma_latency_s
    assert t16 - t8 >= 2 * lat * (1 - 1e-9)  # at least the two inter-node steps


def test_inter_node_part_follows_the_nic_spec():
    """A what-if on the NIC latency / bandwidth moves TP16 (two nodes), never TP8 (one node)."""
    base8, base16 = _ar(8), _ar(16)
    slow = ["hardware.rdma_latency_us=20", "hardware.rdma_bw_GBps=10", "hardware.rdma_eff_bw_GBps=8"]
    assert _ar(8, sets=slow) == pytest.approx(base8, rel=1e-12)
    big = 64 * 2**20  # bandwidth-bound message
    assert _ar(16, sets=slow) > base16
    # the shard over the NIC: 5x slower NIC -> the inter-node wire time 5x (intra part unchanged)
    d_base, d_slow = _ar(16, nbytes=big) - _ar(8, nbytes=big), _ar(16, nbytes=big, sets=slow) - _ar(8, nbytes=big)
    assert d_slow == pytest.approx(5 * d_base, rel=0.05)


def test_inter_node_terms_by_hand():
    """2 (nodes - 1) NIC latencies; 2 (nodes - 1) / nodes of the 1/local shard over one NIC."""
    a, w = inter_node_allreduce_terms(np.array([8.0, 16.0, 32.0]), 8, 8e6, 40e9, 3e-6)
    np.testing.assert_allclose(a, [0.0, 2 * 3e-6, 6 * 3e-6])
    np.testing.assert_allclose(w, [0.0, 1.0 * 1e6 / 40e9, 1.5 * 1e6 / 40e9])
