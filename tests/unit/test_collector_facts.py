"""What the collectors ran is data (moesim/calibration/collector_facts.yaml), read into the fit's tables
(moesim.calibration.collectors) and turned into work columns (moesim.calibration.fit.moe_work)."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from moesim.calibration import collectors as C
from moesim.calibration.fit.moe_work import work_columns
from moesim.errors import CalibrationError


def test_facts_load_into_the_fit_tables():
    assert C.TOKEN_BYTES["moe_torch_flow_cutlass"] == C.FINALIZE_BYTES == 2.0
    assert C.TOKEN_BYTES["vllm_fp8moe_flashinfer_cutlass_flashinferexperts"] == C.FINALIZE_BYTES + C.NOOP_COPY_BYTES
    assert "sglang_fused_moe_triton" in C.EXPERT_MAP and "sglang_fused_moe_triton" in C.GROUPED_ROUTER
    assert C.GROUPED_MODELS == {(7168.0, 2048.0, 256.0, 8.0): (8.0, 4.0)}
    assert C.RANK0_SEGMENTS == {("sglang_fused_moe_triton", "h200"): frozenset({(1024.0, 2688.0, 512.0, 22.0)})}
    assert C.HOST_TIMED == {("deepepmoe", "contiguous")}
    assert C.PASSES[("deepepmoe", "contiguous")] == {"token_bytes": 3.0, "pair_bytes": 3.0, "act_bytes": 9.0}


def test_a_bad_facts_file_names_the_file(tmp_path):
    data = yaml.safe_load(C.FACTS.read_text())
    bad = tmp_path / "facts.yaml"
    bad.write_text(yaml.safe_dump({k: v for k, v in data.items() if k != "expert_map"}))
    with pytest.raises(CalibrationError, match="facts.yaml: missing expert_map"):
        C._load(bad)
    data["token_passes"]["x"] = ["nope"]
    with pytest.raises(CalibrationError, match="token_passes.x: unknown pass nope"):
        C._token_bytes(data, bad)
    bad.write_text("a: [")
    with pytest.raises(CalibrationError, match="cannot read"):
        C._load(bad)


def test_work_columns_replace_the_collector_description():
    shape = dict(tokens=np.array([64.0]), hidden=7168.0, n=2048.0, experts=256.0, topk=8.0, ep=8.0, rank0=1.0)
    out = work_columns(shape, "expert_map", "bf16")
    assert "rank0" not in out and set(out) >= {"pairs", "active", "tile_pad", "zero_rows"}
    with pytest.raises(ValueError, match="routing 'random' is not one of"):
        work_columns(shape, "random", "bf16")
