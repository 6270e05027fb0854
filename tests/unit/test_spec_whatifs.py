"""What-ifs honoured or rejected (issue 17 sec. 3): 0 means absent where the schema says so,
absurd rates are rejected with file / field / range, unsupported precisions are an error naming
the GPU and the dtype, MXFP4 checkpoints are not priced as BF16, and user YAML reads numbers as
YAML 1.2 (no octal)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import yaml

from moesim.api import estimate
from moesim.errors import ConfigError, SpecError
from moesim.specs import load_hardware, load_model, yamlio
from moesim.specs.hardware import MIN_RATE
from moesim.specs.loader import import_hf_config, parse_overrides
from moesim.specs.study import load_study
from moesim.specs.yamlio import load_yaml
from tests.conftest import ROOT, run_cli

D8 = dict(ep=8, dp=8, batch=64, context=4096)  # one node: every EP byte over NVLink
D16 = dict(ep=16, dp=16, batch=64, context=4096)


def _step(sets, mode="roofline", hw="h800", model="deepseek-v3", **cfg):
    r = estimate(model, hw, set=sets, cost_mode=mode, **(cfg or D8))
    return float(np.ravel(r["step_time_s"])[0])


# ------------------------------------------------------------------ NVLink 0 = none
@pytest.mark.parametrize("mode", ["roofline", "calibrated"])
def test_no_nvlink_sends_intra_node_traffic_over_the_nic(mode):
    base = _step([], mode)
    none = _step(["hardware.nvlink_bw_GBps=0"], mode)  # the achievable twin follows (0)
    assert none > base  # 40-50 GB/s NIC instead of 160-200 GB/s NVLink
    # the same as a one-GPU NVLink domain: every peer is reached over the NIC
    assert none == pytest.approx(_step(["hardware.nvlink_domain_gpus=1"], mode), rel=1e-12)
    assert load_hardware("h800", {"nvlink_bw_GBps": 0}).domain_gpus == 1


def test_tiny_positive_nvlink_is_finite_and_slower_than_none():
    tiny = _step(["hardware.nvlink_bw_GBps=1e-9"])
    assert np.isfinite(tiny) and tiny > _step(["hardware.nvlink_bw_GBps=0"])


def test_nvlink_achievable_without_nominal_is_rejected():
    with pytest.raises(SpecError, match="nvlink_eff_bw_GBps.*both 0"):
        load_hardware("h800", {"nvlink_bw_GBps": 0, "nvlink_eff_bw_GBps": 100})


RATES = ["fp8_tflops", "bf16_tflops", "hbm_bw_GBps", "rdma_bw_GBps", "nvlink_bw_GBps", "fp4_tflops", "fp32_tflops"]


@pytest.mark.parametrize("key", RATES)
def test_absurd_rates_are_rejected_with_file_field_and_range(key):
    with pytest.raises(SpecError) as e:
        load_hardware("h800", {key: 1e-300})
    text = str(e.value)
    assert "h800.yaml" in text and key in text and str(MIN_RATE) in text and "\n" not in text


@pytest.mark.parametrize("key", ["fp8_tflops", "bf16_tflops", "hbm_bw_GBps", "rdma_bw_GBps", "nvlink_bw_GBps"])
@pytest.mark.parametrize("mode", ["roofline", "calibrated"])
def test_smallest_allowed_rates_give_finite_times(key, mode):
    t = _step([f"hardware.{key}={MIN_RATE}"], mode, **D16)
    assert np.isfinite(t) and t > _step([], mode, **D16)


@pytest.mark.parametrize("comm", ["pplx", "nccl"])
@pytest.mark.parametrize("mode", ["roofline", "calibrated"])
def test_rdma_what_ifs_move_pplx_and_nccl_across_nodes(comm, mode):
    cfg = dict(D16, comm=comm)  # 2 H100 nodes
    half, base, double = (_step([f"hardware.rdma_bw_GBps={b}"], mode, "h100-sxm", **cfg) for b in (25, 50, 100))
    assert half > base > double


# ------------------------------------------------------------------ precisions
@pytest.mark.parametrize(
    "hw, sets, dtype",
    [
        ("a100", [], "fp8"),
        ("h200", ["model.precision.weight_dtype=fp4"], "fp4"),
        ("h800", ["hardware.sm_version=80"], "fp8"),
    ],
)
def test_unsupported_precision_names_gpu_and_dtype(hw, sets, dtype):
    with pytest.raises(ConfigError) as e:
        estimate("deepseek-v3", hw, set=sets, **D8)
    assert re.search(rf"\b{dtype}\b.*not supported on {hw}", str(e.value)), str(e.value)


@pytest.mark.parametrize(
    "argv",
    [
        ("estimate", "--ep", "8", "--dp", "8"),
        ("kernel", "--op", "gemm", "--m", "128", "--n", "4096", "--k", "7168"),
        ("sweep", "--ep", "8", "--batch", "8"),
    ],
    ids=lambda a: a[0],
)
def test_unsupported_precision_is_one_cli_line(argv):
    r = run_cli(*argv, "--hardware", "a100")
    assert r.returncode != 0 and "a100" in r.stderr and "fp8" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_fp4_runs_where_the_gpu_has_it():
    sets = ["model.precision.weight_dtype=fp4", "model.precision.activation_dtype=fp4"]
    assert np.isfinite(_step(sets, hw="b200"))
    assert np.isfinite(_step([], hw="a100", model="mixtral-8x7b", tp=8, dp=1, ep=8, batch=8, context=1024))


def test_mxfp4_checkpoint_is_not_priced_as_bf16(tmp_path):
    cfg = json.loads((ROOT / "tests/data/hf_configs/qwen3-30b-a3b.json").read_text())
    cfg["quantization_config"] = {"quant_method": "mxfp4", "modules_to_not_convert": ["lm_head"]}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(SpecError, match="mxfp4.*not modelled"):
        import_hf_config(p)
    with pytest.raises(SpecError, match="mxfp4"):
        load_model(str(p))
    r = run_cli("model", "import", str(p))
    assert r.returncode != 0 and "mxfp4" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_mha_with_fewer_kv_heads_is_rejected():
    with pytest.raises(SpecError, match="kind mha"):
        load_model("qwen3-235b-a22b", {"attention.kind": "mha"})
    assert load_model("qwen3-235b-a22b", {"attention.kind": "mha", "attention.num_kv_heads": 0}).kv_heads == 64


# ------------------------------------------------------------------ YAML 1.2 numbers
def test_yaml_numbers_are_yaml_1_2():
    d = load_yaml("a: 010\nb: 1e3\nc: 0o17\nd: 0x1F\ne: -1.5e-3\nf: .inf\ng: 1:30\nh: 08\n")
    assert d == {"a": 10, "b": 1000.0, "c": 15, "d": 31, "e": -0.0015, "f": float("inf"), "g": "1:30", "h": 8}
    assert isinstance(d["b"], float) and isinstance(d["a"], int)


# ------------------------------------------------------------------ YAML hazards: moesim's checks, any PyYAML
@pytest.mark.parametrize("levels", [201, 999, 1100, 60000])  # libyaml (PyYAML 6.0.4) refuses 1000+ itself
def test_deep_yaml_is_moesims_recursion_error_at_any_depth(levels):
    with pytest.raises(RecursionError, match=f"deeper than {yamlio.MAX_DEPTH} levels"):
        load_yaml("[" * levels + "]" * levels)
    assert load_yaml("[" * yamlio.MAX_DEPTH + "]" * yamlio.MAX_DEPTH) is not None  # MAX_DEPTH itself reads


def _libyaml_refusing_everything(monkeypatch):
    """yaml.parse whose libyaml refuses every text in words of its own (a future libyaml's limits)."""
    if yamlio._BASE is yaml.SafeLoader:
        pytest.skip("PyYAML built without libyaml: the pure-Python parser is the only one")
    real = yaml.parse

    def parse(text, Loader):
        if Loader is yamlio._BASE:
            raise yaml.scanner.ScannerError(problem="some limit of libyaml's, in its own words")
        return real(text, Loader=Loader)

    monkeypatch.setattr(yaml, "parse", parse)


def test_a_libyaml_refusal_is_decided_by_moesims_checks(monkeypatch):
    _libyaml_refusing_everything(monkeypatch)
    assert load_yaml("a: 010\nb: [1e3, {c: 2}]\n") == {"a": 10, "b": [1000.0, {"c": 2}]}  # read, YAML 1.2 numbers
    with pytest.raises(RecursionError, match="nested deeper"):
        load_yaml("a: " + "[" * 300 + "]" * 300)
    with pytest.raises(yaml.YAMLError) as e:  # a real error is the parser's (with its line), not libyaml's words
        load_yaml("a: [1,\nb: 2\n")
    assert "libyaml's" not in str(e.value) and e.value.problem_mark.line >= 1


def test_huge_integer_is_moesims_value_error():
    with pytest.raises(ValueError, match=f"integer of 5000 digits, more than {yamlio.MAX_INT_DIGITS}"):
        load_yaml("a: " + "9" * 5000)
    with pytest.raises(ValueError, match="integer of 4301 digits"):
        load_yaml("a: 0x" + "f" * 4301)
    assert load_yaml("a: " + "9" * 40) == {"a": int("9" * 40)}


def test_spec_study_and_set_read_010_as_ten(tmp_path):
    text = (ROOT / "models/deepseek_v3.yaml").read_text()
    spec = tmp_path / "m.yaml"
    spec.write_text(re.sub(r"(?m)^num_layers: .*$", "num_layers: 010", text))
    assert load_model(str(spec)).num_layers == 10
    assert parse_overrides(["model.num_layers=010"])["model"]["num_layers"] == 10
    study = tmp_path / "s.yaml"
    study.write_text("axes:\n  batch: [010, 020]\n")
    assert list(load_study(study)["axes"]["batch"]) == [10, 20]


def test_sexagesimal_is_a_clear_error(tmp_path):
    text = (ROOT / "hardware/h800.yaml").read_text()
    spec = tmp_path / "h.yaml"
    spec.write_text(re.sub(r"(?m)^sms: .*$", "sms: 2:12", text))
    with pytest.raises(SpecError, match=r"sms: expected a number"):
        load_hardware(str(spec))


# ------------------------------------------------------------------ removed fields
@pytest.mark.parametrize(
    "kind, file, line, key",
    [
        ("hardware", "hardware/h800.yaml", "l2_MB: 50\n", "l2_MB"),
        ("hardware", "hardware/h800.yaml", "nics_per_gpu: 1\n", "nics_per_gpu"),
        ("model", "models/mixtral_8x7b.yaml", None, "moe.scoring"),
    ],
)
def test_removed_keys_say_why(tmp_path, kind, file, line, key):
    text = (ROOT / file).read_text()
    text = text + line if line else text.replace("moe:\n", "moe:\n  scoring: softmax\n", 1)
    p = tmp_path / "old.yaml"
    p.write_text(text)
    with pytest.raises(SpecError, match=rf"{re.escape(key)}: removed from the spec \(.+\); delete the key"):
        (load_hardware if kind == "hardware" else load_model)(str(p))
