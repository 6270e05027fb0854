"""A DeepEP fit of single-node rows prices multi-node calls by derivation (issue 27): the entry says so
(`internode.status: derived`, its source text), and names where its NIC share comes from; a fit with
rows over several node counts measured them and carries no such block. The optimizer is replaced by a
fixed parameter vector (clipped to the pins): the provenance, not the fit, is under test."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import comm_deepep as CD
from moesim.calibration.fit.comm import a2a_data
from moesim.calibration.fit.peaks import Peaks
from moesim.specs.loader import load_hardware

PEAKS = Peaks.from_hardware(load_hardware("h200"))
SRC = "aiconfigurator-core 0.12.0 h200_sxm vllm 0.24.0 moe_a2a_perf deepep"
TRUTH = np.array([30.0, 0.0, 0.0, 0.5, 0.8, 300.0, 5.0, 0.5, 4.0, 0.0, 0.0])  # CD.NAMES order


def _rows(eps=(8.0,)) -> pd.DataFrame:
    rows = []
    for ep in eps:
        for hidden in (3072.0, 5120.0, 7168.0):
            for topk in (6.0, 8.0):
                for t in (16.0, 64.0, 256.0, 1024.0, 4096.0):
                    us = (30.0 + 6e-3 * t * hidden / 1024 * topk / 8) * (1.0 + 0.2 * np.log2(ep / 8.0))
                    rows.append(dict(kernel="deepep", backend="deepep", mode="normal", op="dispatch", tokens=t))
                    rows[-1] |= dict(hidden=hidden, topk=topk, experts=256.0, ep=ep, gpus_per_node=8.0, sms=20.0)
                    rows[-1] |= dict(topk_groups=np.nan, time_s=us * 1e-6, exclude="", source=SRC, lib_versions="")
    return pd.DataFrame(rows)


@pytest.fixture(autouse=True)
def fixed_fit(monkeypatch):
    def fit(self, idx):
        return np.clip(np.concatenate([TRUTH, np.full(len(self.knot_nodes), 0.8)]), self.lo, self.hi)

    monkeypatch.setattr(CD.DeepEPRows, "fit", fit)


def test_single_node_fit_marks_its_multi_node_prices_derived():
    parent = {"status": "inherited", "inherited_from": "h800", "params": {"rdma_frac_nominal": 0.86}}
    e = CD.fit_deepep_v2(
        a2a_data(_rows(), "deepep-normal", "dispatch"), "deepep-normal", "dispatch", PEAKS, "h200", parent
    )
    assert e["status"] == "fitted" and e["params"]["rdma_frac_nominal"] == 0.86  # pinned from the parent
    block = e["internode"]
    assert block["status"] == "derived" and block["derived_from"] == "single-node fit + NIC spec"
    assert "hardware/h200.yaml's NIC x rdma_frac_nominal = 0.86 pinned from h800" in block["source"]
    assert "Not measured" in block["source"]
    assert e["source"].endswith(CD.INTERNODE_SOURCE)
    assert "pinned from the parent entry (h800)" in e["note"]  # the parent named, not assumed


def test_parent_knots_are_named_in_the_derived_block():
    parent = {
        "status": "inherited",
        "inherited_from": "h200.sglang",
        "params": {"rdma_frac_nominal": 1.0, "rdma_knot_nodes": [2.0, 4.0], "rdma_knot_frac": [0.9, 0.8]},
    }
    e = CD.fit_deepep_v2(
        a2a_data(_rows(), "deepep-normal", "dispatch"), "deepep-normal", "dispatch", PEAKS, "h200", parent
    )
    assert e["params"]["rdma_knot_frac"] == [0.9, 0.8]
    assert "rdma_knot_frac at nodes [2.0, 4.0] carried from h200.sglang" in e["internode"]["source"]


def test_rows_over_several_node_counts_are_measured_not_derived():
    ad = a2a_data(_rows((8.0, 16.0, 32.0)), "deepep-normal", "dispatch")
    e = CD.fit_deepep_v2(ad, "deepep-normal", "dispatch", PEAKS, "h200")
    assert "internode" not in e and CD.INTERNODE_SOURCE not in e["source"]
    assert e["params"]["rdma_knot_nodes"] == [2.0, 4.0]  # measured at 2 and 4 nodes
    assert "intranode" in e and "internode" not in e["intranode"]
