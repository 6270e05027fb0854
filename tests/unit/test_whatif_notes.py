"""`estimate --set`: a what-if that moves nothing says so (and why); one that moves the answer does not."""

from moesim.engine.estimate import estimate
from moesim.engine.whatif import inert_whatif_notes

BASE = {"model": "deepseek-v3", "hardware": "h800", "ep": 144, "redundant_experts": 32, "batch": 64}


def _notes(*sets, **over):
    kw = {**BASE, **over, "set": list(sets)}
    return inert_whatif_notes(estimate, kw, estimate(**kw))


def test_inert_whatif_is_named_with_the_reason():
    notes = _notes("hardware.rdma_eff_bw_GBps=20", "hardware.rdma_bw_GBps=100")
    assert len(notes) == 1, notes
    assert "rdma_eff_bw_GBps=20 changed nothing" in notes[0] and "fitted" in notes[0]


def test_effective_whatif_gets_no_note():
    assert _notes("hardware.rdma_bw_GBps=100") == []
    assert _notes("hardware.rdma_bw_GBps=100", cost_mode="roofline") == []
    (roof,) = _notes("hardware.rdma_eff_bw_GBps=20", cost_mode="roofline")
    assert "nominal bandwidth" in roof


def test_cli_estimate_carries_the_note_in_json():
    import json

    from tests.conftest import run_cli

    p = run_cli(
        "estimate", "--ep", "144", "--redundant-experts", "32", "--set", "hardware.rdma_latency_us=20", "--json"
    )
    assert p.returncode == 0, p.stderr
    assert any("rdma_latency_us=20 changed nothing" in n for n in json.loads(p.stdout)["notes"])


def test_whatif_hidden_by_the_overlap_names_the_ops_it_moved():
    kw = {"model": "deepseek-v3", "hardware": "h100_sxm", "ep": 16, "tp": 2, "batch": 64, "comm": "deepep-ll",
          "overlap": "five-stage"}  # fmt: skip
    kw["set"] = ["hardware.rdma_bw_GBps=100"]  # 2x the NIC: the all-to-alls shrink, still under compute
    (note,) = inert_whatif_notes(estimate, kw, estimate(**kw))
    assert "moved dispatch, combine but not the step" in note
