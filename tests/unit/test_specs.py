"""Closed forms from the spec alone (DESIGN.md tests/unit)."""

import pytest

from moesim import load_hardware, load_model
from moesim.errors import SpecError
from moesim.specs import loader


def test_deepseek_v3_counts():
    m = load_model("deepseek-v3")
    assert m.total_params() == pytest.approx(671e9, rel=0.01)
    assert m.active_params() == pytest.approx(37e9, rel=0.05)
    assert m.kv_bytes_per_token == 70272  # 576 x 2 B x 61 layers (ISCA'25 Table 1)
    assert m.attention_params() == pytest.approx(187.1e6, rel=0.001)  # seed 002: 187e6 per layer


@pytest.mark.parametrize("name", ["h800", "h100_sxm", "h200"])
def test_hardware_loads_si(name):
    h = load_hardware(name)
    assert h.peak_flops("fp8") == pytest.approx(1979e12)
    assert h.peak_flops("bf16") == pytest.approx(989e12)
    assert h.rdma_Bps(False) == pytest.approx(50e9)


def test_ridge_point_h800():
    h = load_hardware("h800")
    assert h.peak_flops("fp8") / h.hbm_bw_Bps == pytest.approx(590.7, rel=1e-3)


def test_override_reaches_any_field():
    h = load_hardware("h800", {"rdma_bw_GBps": 100})
    assert h.rdma_Bps(False) == pytest.approx(100e9)
    m = load_model("deepseek-v3", {"moe.num_experts": 384})
    assert m.moe.num_experts == 384


@pytest.mark.parametrize(
    "text,needle",
    [
        ("name: x\n", "required"),
        ("{{{", "malformed YAML"),
        ("", "empty"),
    ],
)
def test_bad_hardware_yaml(tmp_path, text, needle):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match=needle):
        load_hardware(str(p))


def test_unknown_key_and_negative_bandwidth(tmp_path):
    base = (loader.data_root() / "hardware" / "h800.yaml").read_text()
    p = tmp_path / "x.yaml"
    p.write_text(base + "\nbogus: 1\n")
    with pytest.raises(SpecError, match="bogus: unknown key"):
        load_hardware(str(p))
    p.write_text(base.replace("hbm_bw_GBps: 3350", "hbm_bw_GBps: -1"))
    with pytest.raises(SpecError, match=r"hbm_bw_GBps: -1.0 out of range"):
        load_hardware(str(p))
