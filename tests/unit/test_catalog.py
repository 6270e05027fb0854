"""Shipped model / hardware catalog and the Hugging Face config.json importer (offline, fast)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import yaml

from moesim.errors import SpecError
from moesim.specs import catalog, load_hardware, load_model
from moesim.specs.hardware import HardwareSpec
from moesim.specs.hf_import import mapping_from_hf_config
from moesim.specs.loader import import_hf_config
from moesim.specs.model import ModelSpec
from moesim.specs.schema import build, numeric_field_paths
from tests.conftest import run_cli

ROOT = Path(__file__).resolve().parents[2]
HF_DIR = ROOT / "tests" / "data" / "hf_configs"
HF_CONFIGS = sorted(HF_DIR.glob("*.json"))

SHIPPED_MODELS = [
    "deepseek-v3",
    "deepseek-r1",
    "deepseek-v2",
    "deepseek-v2-lite",
    "kimi-k2",
    "qwen3-235b-a22b",
    "qwen3-30b-a3b",
    "mixtral-8x7b",
    "mixtral-8x22b",
    "llama-3-1-70b",
    "llama-3-1-405b",
]
NEW_HARDWARE = ["h20", "b200", "gb200-nvl72", "a100"]


def _hf(name: str) -> dict:
    return json.loads((HF_DIR / f"{name}.json").read_text())


def _import(cfg: dict, name: str = "x", file: str = "cfg.json") -> ModelSpec:
    return build(ModelSpec, mapping_from_hf_config(cfg, name, file), file=file)


# --------------------------------------------------------------------------------- catalog: models
def test_catalog_lists_every_shipped_model():
    assert set(SHIPPED_MODELS) <= set(catalog("models"))


@pytest.mark.parametrize("name", sorted(catalog("models")))
def test_every_catalog_model_loads(name):
    m = load_model(name)
    assert m.name == name  # file name with underscores == catalog name with dashes
    assert m.source and m.total_params() > 0 and m.kv_bytes_per_token > 0


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_total_params_within_2pct_of_published(name):
    m = load_model(name)
    assert m.published_params > 0, "each shipped model cites its published total"
    assert m.total_params() == pytest.approx(m.published_params, rel=0.02)


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_active_params_within_5pct_of_published(name):
    m = load_model(name)
    if not m.published_active_params:
        pytest.skip("no published active count")
    active = m.active_params(include_input_embedding=not m.published_active_excludes_embedding)
    assert active == pytest.approx(m.published_active_params, rel=0.05)


@pytest.mark.parametrize("name", SHIPPED_MODELS)
def test_published_numbers_are_cited(name):
    m = load_model(name)
    for key in ("published_params", "published_active_params"):
        assert (m.sources or {}).get(key), f"{name}: sources.{key} missing"


def test_deepseek_v3_reference_counts_unchanged():
    m = load_model("deepseek-v3")
    assert m.total_params() / 1e9 == pytest.approx(671.03, abs=0.01)
    assert m.active_params() / 1e9 == pytest.approx(37.55, abs=0.01)
    assert m.kv_bytes_per_token == 70_272


@pytest.mark.parametrize(
    "name, expected",
    [
        ("deepseek-v3", 61 * (512 + 64) * 2),  # 70,272 B (ISCA'25 Table 1)
        ("deepseek-r1", 61 * (512 + 64) * 2),
        ("kimi-k2", 61 * (512 + 64) * 2),
        ("deepseek-v2", 60 * (512 + 64) * 2),  # 69,120
        ("deepseek-v2-lite", 27 * (512 + 64) * 2),  # 31,104
        ("qwen3-235b-a22b", 94 * 2 * 4 * 128 * 2),  # 192,512 B ~ 188 KiB
        ("qwen3-30b-a3b", 48 * 2 * 4 * 128 * 2),
        ("mixtral-8x7b", 32 * 2 * 8 * 128 * 2),
        ("mixtral-8x22b", 56 * 2 * 8 * 128 * 2),
        ("llama-3-1-70b", 80 * 2 * 8 * 128 * 2),
        ("llama-3-1-405b", 126 * 2 * 8 * 128 * 2),
    ],
)
def test_kv_bytes_per_token(name, expected):
    assert load_model(name).kv_bytes_per_token == expected


def test_qwen3_235b_kv_is_about_188_kib():
    assert load_model("qwen3-235b-a22b").kv_bytes_per_token / 1024 == pytest.approx(188, abs=0.1)


def test_shipped_shapes():
    lite = load_model("deepseek-v2-lite")
    assert lite.attention.q_lora_rank == 0 and lite.num_dense_layers == 1
    k2 = load_model("kimi-k2")
    assert (k2.moe.num_experts, k2.attention.num_heads, k2.mtp_layers, k2.moe.n_group) == (384, 64, 0, 1)
    assert k2.precision.weight_dtype == "fp8" and k2.precision.weight_block == 128
    assert load_model("deepseek-r1").mtp_layers == 1
    assert load_model("llama-3-1-70b").moe is None
    assert load_model("qwen3-235b-a22b").precision.weight_dtype == "bf16"
    assert load_model("mixtral-8x7b").moe.top_k == 2


# --------------------------------------------------------------------------------- HF import
def test_hf_config_set_covers_the_catalog():
    assert {p.stem for p in HF_CONFIGS} == set(SHIPPED_MODELS)


@pytest.mark.parametrize("path", HF_CONFIGS, ids=lambda p: p.stem)
def test_import_reproduces_shipped_yaml(path):
    imported = _import(json.loads(path.read_text()), path.stem, str(path))
    shipped = load_model(path.stem)
    assert imported.total_params() == shipped.total_params()
    assert imported.kv_bytes_per_token == shipped.kv_bytes_per_token
    assert imported.active_params() == shipped.active_params()
    assert imported.total_params(include_mtp=True) == shipped.total_params(include_mtp=True)
    assert imported.precision == shipped.precision


def test_import_mapping_shape():
    mapping = mapping_from_hf_config(_hf("deepseek-v3"), "dsv3", "x/config.json")
    assert mapping["source"] == "imported from x/config.json"
    assert list(mapping)[:3] == ["name", "description", "source"]
    assert mapping["moe"]["router_bias"] is True and mapping["mtp_layers"] == 1
    assert mapping["precision"]["weight_dtype"] == "fp8" and mapping["precision"]["weight_block"] == 128


def test_load_model_accepts_a_config_json_path():
    m = load_model(str(HF_DIR / "qwen3-235b-a22b.json"))
    assert m.kv_bytes_per_token == 192_512
    assert m.source.startswith("imported from ")


def test_import_hf_config_writes_yaml_that_round_trips(tmp_path):
    out = tmp_path / "models" / "lite.yaml"
    p = run_cli("model", "import", HF_DIR / "deepseek-v2-lite.json", "--out", out)
    assert p.returncode == 0 and out.is_file(), p.stderr
    data = yaml.safe_load(out.read_text())
    assert data["attention"]["q_lora_rank"] == 0
    assert load_model(str(out)).total_params() == load_model("deepseek-v2-lite").total_params()
    mapping = import_hf_config(HF_DIR / "deepseek-v2-lite.json")
    assert isinstance(mapping, dict) and mapping["name"] == "deepseek-v2-lite"


def test_q_lora_rank_null_means_no_query_compression():
    cfg = _hf("deepseek-v2")
    full = _import(cfg)
    cfg["q_lora_rank"] = None
    lite_q = _import(cfg)
    a = full.attention
    d, h, qd = full.hidden_size, a.num_heads, a.qk_nope_head_dim + a.qk_rope_head_dim
    compressed = d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qd
    assert lite_q.attention.q_lora_rank == 0
    assert lite_q.attention_params() - full.attention_params() == d * h * qd - compressed


def test_fp8_block_quantization_maps_to_fp8_weights_else_bf16():
    cfg = _hf("kimi-k2")
    assert _import(cfg).precision.weight_dtype == "fp8"
    del cfg["quantization_config"]
    p = _import(cfg).precision
    assert (p.weight_dtype, p.weight_block, p.activation_dtype) == ("bf16", 0, "bf16")


def test_scoring_and_groups():
    v2 = _import(_hf("deepseek-v2"))
    assert (v2.moe.n_group, v2.moe.topk_group, v2.moe.num_shared_experts) == (8, 3, 2)
    v3 = _import(_hf("deepseek-v3"))
    assert (v3.moe.n_group, v3.moe.topk_group) == (8, 4)


def test_qwen_mlp_only_prefix_becomes_dense_layers():
    cfg = _hf("qwen3-30b-a3b")
    cfg["mlp_only_layers"] = [0, 1]
    m = _import(cfg)
    assert m.num_dense_layers == 2 and m.dense_ffn.intermediate_size == cfg["intermediate_size"]


@pytest.mark.parametrize(
    "change, key",
    [
        ({"decoder_sparse_step": 2}, "decoder_sparse_step"),
        ({"mlp_only_layers": [5]}, "mlp_only_layers"),
    ],
)
def test_qwen_non_prefix_dense_layers_are_rejected(change, key):
    cfg = {**_hf("qwen3-235b-a22b"), **change}
    with pytest.raises(SpecError) as e:
        mapping_from_hf_config(cfg, "x", "q.json")
    msg = str(e.value)
    assert "\n" not in msg and key in msg and "prefix" in msg and msg.startswith("q.json: ")


def test_qwen2_moe_shared_expert_and_bias():
    cfg = {
        "model_type": "qwen2_moe",
        "hidden_size": 2048,
        "intermediate_size": 5632,
        "num_hidden_layers": 24,
        "num_attention_heads": 16,
        "num_key_value_heads": 16,
        "vocab_size": 151936,
        "num_experts": 60,
        "num_experts_per_tok": 4,
        "moe_intermediate_size": 1408,
        "shared_expert_intermediate_size": 5632,
        "decoder_sparse_step": 1,
        "mlp_only_layers": [],
    }
    m = _import(cfg)
    assert m.moe.num_shared_experts == 1 and m.moe.shared_width == 5632 and m.attention.qkv_bias
    assert m.head_dim == 128


def test_dense_qwen3_and_tied_embeddings():
    cfg = {
        "model_type": "qwen3",
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    }
    m = _import(cfg)
    assert m.moe is None and m.head_dim == 128 and m.tie_embeddings
    assert m.active_params(include_input_embedding=False) == m.active_params()


def _drop(key):
    def f(cfg):
        del cfg[key]

    return f


def _put(key, value):
    def f(cfg):
        cfg[key] = value

    return f


@pytest.mark.parametrize(
    "base, mutate, key",
    [
        ("deepseek-v3", _drop("hidden_size"), "hidden_size"),
        ("qwen3-235b-a22b", _drop("hidden_size"), "hidden_size"),
        ("llama-3-1-70b", _drop("num_attention_heads"), "num_attention_heads"),
        ("deepseek-v3", _put("hidden_size", "7168"), "hidden_size"),
        ("mixtral-8x7b", _put("num_local_experts", "8"), "num_local_experts"),
        ("deepseek-v3", _put("num_hidden_layers", -61), "num_hidden_layers"),
        ("llama-3-1-70b", _put("num_hidden_layers", 0), "num_hidden_layers"),
        ("deepseek-v3", _put("kv_lora_rank", True), "kv_lora_rank"),
        ("deepseek-v3", _put("model_type", "gpt_oss"), "model_type"),
        ("deepseek-v3", _drop("model_type"), "model_type"),
        ("deepseek-v3", _put("scoring_func", "sqrtsoftplus"), "scoring_func"),
        ("deepseek-v3", _put("moe_layer_freq", 2), "moe_layer_freq"),
        (
            "kimi-k2",
            _put("quantization_config", {"quant_method": "fp8", "weight_block_size": [128, 64]}),
            "weight_block_size",
        ),
    ],
)
def test_bad_hf_configs_raise_one_line_spec_error(base, mutate, key):
    cfg = copy.deepcopy(_hf(base))
    mutate(cfg)
    with pytest.raises(SpecError) as e:
        mapping_from_hf_config(cfg, "bad", "bad/config.json")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("bad/config.json: ") and key in msg


def test_unknown_model_type_lists_the_allowed_ones():
    with pytest.raises(SpecError, match=r"allowed: .*deepseek_v3.*qwen3_moe"):
        mapping_from_hf_config({"model_type": "gpt_oss"}, "x", "c.json")


def test_non_mapping_config_is_rejected():
    with pytest.raises(SpecError, match="expected a JSON object"):
        mapping_from_hf_config([1, 2], "x", "c.json")


def test_load_model_on_bad_json_reports_the_file(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({**_hf("llama-3-1-70b"), "hidden_size": "big"}))
    with pytest.raises(SpecError) as e:
        load_model(str(p))
    assert str(p) in str(e.value) and "hidden_size" in str(e.value) and "\n" not in str(e.value)


# --------------------------------------------------------------------------------- CLI
def test_cli_import_writes_yaml_and_prints_counts(tmp_path):
    from typer.testing import CliRunner

    from moesim.cli.model_import import app

    out = tmp_path / "q.yaml"
    res = CliRunner().invoke(app, ["import", str(HF_DIR / "qwen3-235b-a22b.json"), "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert str(out) in res.output and "total params" in res.output and "192,512" in res.output
    assert load_model(str(out)).kv_bytes_per_token == 192_512


def test_cli_import_to_stdout_is_valid_yaml():
    from typer.testing import CliRunner

    from moesim.cli.model_import import app

    res = CliRunner().invoke(app, ["import", str(HF_DIR / "mixtral-8x7b.json")])
    assert res.exit_code == 0, res.output
    data = yaml.safe_load(res.stdout)
    assert data["moe"]["num_experts"] == 8


def test_cli_import_bad_config_is_one_line(tmp_path):
    from typer.testing import CliRunner

    from moesim.cli.model_import import app

    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "llama"}))
    res = CliRunner().invoke(app, ["import", str(p)])
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.output
    assert lines[0].startswith("error: ") and str(p) in lines[0] and "required key is missing" in lines[0]


# --------------------------------------------------------------------------------- hardware
@pytest.mark.parametrize("name", sorted(catalog("hardware")))
def test_every_hardware_yaml_loads(name):
    h = load_hardware(name)
    assert h.name.replace("_", "-") == name and h.bf16_tflops > 0 and h.memory_bytes > h.memory_reserve_bytes


@pytest.mark.parametrize("name", NEW_HARDWARE)
def test_new_hardware_numbers_are_all_sourced(name):
    raw = yaml.safe_load(catalog("hardware")[name].read_text())
    numeric = [k for k in numeric_field_paths(HardwareSpec) if k in raw]
    missing = [k for k in numeric if k not in raw.get("sources", {})]
    assert not missing, f"{name}: numbers without a source: {missing}"


def test_hardware_peaks():
    b200, gb, a100, h20 = (load_hardware(n) for n in ("b200", "gb200-nvl72", "a100", "h20"))
    assert (b200.fp8_tflops, b200.bf16_tflops, b200.hbm_bw_GBps, b200.nvlink_bw_GBps) == (4500, 2250, 8000, 900)
    assert gb.domain_gpus == 72 and gb.gpus_per_node == 4
    assert a100.fp8_tflops == a100.bf16_tflops == 312  # no FP8 on Ampere: FP8 runs at the BF16 rate
    assert h20.fp8_tflops == 2 * h20.bf16_tflops == 296
