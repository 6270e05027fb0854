"""Hugging Face `config.json` -> raw ModelSpec mapping (the same shape as models/*.yaml).

Only plain JSON values are read (never eval'd). Every key the spec needs is checked for presence,
type and range here, so a bad config fails with one line naming the file, the HF key and what is
allowed, before the strict builder (`moesim.specs.schema.build`) sees the mapping.

Supported `model_type`s:
  * MLA + DeepSeekMoE: deepseek_v2, deepseek_v3, kimi_k2
  * GQA MoE: qwen3_moe, qwen2_moe, mixtral
  * GQA dense: llama, qwen2, qwen3

Not modelled (each well under 0.01 % of the parameters): Qwen3 q/k RMSNorm weights, the Qwen2-MoE
shared-expert gate (hidden_size x 1), output-projection biases.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from moesim.errors import SpecError
from moesim.specs.schema import _show

MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2")
GQA_MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")
DENSE_TYPES = ("llama", "qwen2", "qwen3")
SUPPORTED = tuple(sorted(MLA_TYPES + GQA_MOE_TYPES + DENSE_TYPES))

_MISSING = object()
MAX_LAYERS = 10_000  # ModelSpec.num_layers upper bound

# Key order of the emitted mapping / YAML (same order as models/deepseek_v3.yaml).
_TOP_ORDER = (
    "name",
    "description",
    "source",
    "sources",
    "num_layers",
    "num_dense_layers",
    "hidden_size",
    "vocab_size",
    "max_context",
    "mtp_layers",
    "tie_embeddings",
    "published_params",
    "published_active_params",
    "published_active_excludes_embedding",
    "attention",
    "dense_ffn",
    "moe",
    "precision",
)


class _Reader:
    """Typed access to one config mapping; every failure is one line naming file and key."""

    def __init__(self, cfg: dict, file: str | None, model_type: str = ""):
        self.cfg = cfg
        self.where = file or "config.json"
        self.model_type = model_type

    def fail(self, key: str, text: str) -> SpecError:
        return SpecError(f"{self.where}: {key}: {text}")

    def _for(self) -> str:
        return f" for model_type {self.model_type!r}" if self.model_type else ""

    def int(
        self, key: str, lo: int = 1, default: Any = _MISSING, null_ok: bool = False, hi: int | None = None
    ) -> int | None:
        """An integer >= lo (and <= hi). Missing -> default (or error); null -> default when null_ok."""
        allowed = f"an integer >= {lo}" if hi is None else f"an integer in [{lo}, {hi:,}]"
        if key not in self.cfg:
            if default is _MISSING:
                raise self.fail(key, f"required key is missing{self._for()}; expected {allowed}")
            return default
        value = self.cfg[key]
        if value is None:
            if null_ok:
                return default if default is not _MISSING else None
            raise self.fail(key, f"expected {allowed}, got null")
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            raise self.fail(key, f"expected {allowed}, got {_show(value)}")
        if value < lo or (hi is not None and value > hi):
            raise self.fail(key, f"{_show(value)} out of range, expected {allowed}")
        return value

    def bool(self, key: str, default: bool) -> bool:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.fail(key, f"expected true/false, got {_show(value)}")
        return value

    def choice(self, key: str, allowed: tuple[str, ...], default: str) -> str:
        value = self.cfg.get(key, default)
        if value is None:
            return default
        if not isinstance(value, str) or value not in allowed:
            raise self.fail(key, f"{_show(value)} is not supported; allowed: {', '.join(allowed)}")
        return value

    def int_list(self, key: str) -> list[int]:
        value = self.cfg.get(key)
        if value is None:
            return []
        if not isinstance(value, list) or any(isinstance(v, bool) or not isinstance(v, int) for v in value):
            raise self.fail(key, f"expected a list of layer indices, got {_show(value)}")
        return value


# ---------------------------------------------------------------------------------------- pieces
def _dtypes(low: str, high: str, block: int) -> dict:
    """The model's `precision` block: `low` for the GEMM weights and activations and the dispatch
    payload, `high` for attention, the KV cache, the embedding and the combine payload (the
    DeepSeek-V3 FP8 recipe with low = fp8, high = bf16); `block`: weight block size (0 = none)."""
    return dict(
        weight_dtype=low,
        weight_block=block,
        activation_dtype=low,
        attention_dtype=high,
        kv_dtype=high,
        embedding_dtype=high,
        dispatch_dtype=low,
        combine_dtype=high,
    )


def _precision(r: _Reader) -> tuple[dict, str]:
    """quantization_config fp8 with square weight blocks -> FP8 block-scaled weights; else 16-bit."""
    qc = r.cfg.get("quantization_config")
    if isinstance(qc, dict) and qc.get("quant_method") == "fp8":
        blocks = qc.get("weight_block_size")
        if blocks is None:
            block = 0
        elif (
            isinstance(blocks, list)
            and len(blocks) == 2
            and blocks[0] == blocks[1]
            and all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in blocks)
        ):
            block = blocks[0]
        else:
            raise r.fail(
                "quantization_config.weight_block_size",
                f"expected two equal positive integers such as [128, 128] or null, got {_show(blocks)}",
            )
        return _dtypes("fp8", "bf16", block), f"quantization_config: fp8, weight_block_size {blocks}"
    if qc is not None:  # mxfp4 (gpt-oss), awq, gptq...: pricing them as 16-bit would be silently wrong
        method = qc.get("quant_method") if isinstance(qc, dict) else qc
        raise r.fail(
            "quantization_config.quant_method",
            f"{_show(method)} is not modelled; allowed: fp8 (block-scaled), or no quantization_config for "
            "16-bit weights (write the precision block of the imported YAML by hand for other formats)",
        )
    dtype = r.cfg.get("torch_dtype", r.cfg.get("dtype"))
    half = "fp16" if dtype == "float16" else "bf16"
    return _dtypes(half, half, 0), f"no quantization_config: {half} weights (torch_dtype {_show(dtype)})"


def _dense_prefix(r: _Reader, num_layers: int, dense: list[int], keys: str) -> int:
    """Dense layers must be the first k layers (the only layout ModelSpec models)."""
    k = len(dense)
    if dense != list(range(k)):
        shown = ", ".join(map(str, dense[:8])) + (", ..." if len(dense) > 8 else "")
        raise r.fail(
            keys,
            f"dense (non-MoE) layers [{shown}] are not a prefix 0..k-1 of the "
            f"{num_layers} layers; only first-k-dense layouts are supported",
        )
    return k


def _gqa_attention(r: _Reader, hidden: int, qkv_bias: bool) -> dict:
    heads = r.int("num_attention_heads")
    kv_heads = r.int("num_key_value_heads", default=heads, null_ok=True)
    head_dim = r.int("head_dim", default=None, null_ok=True)
    if head_dim is None:
        if hidden % heads:
            raise r.fail(
                "head_dim",
                f"missing and hidden_size {hidden} is not divisible by "
                f"num_attention_heads {heads}; expected an integer >= 1",
            )
        head_dim = hidden // heads
    if kv_heads > heads or heads % kv_heads:
        raise r.fail("num_key_value_heads", f"{kv_heads} must divide num_attention_heads={heads}")
    return dict(kind="gqa", num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, qkv_bias=qkv_bias)


def _mla(r: _Reader, out: dict, notes: dict) -> None:
    mt = r.model_type
    num_layers = out["num_layers"]
    heads = r.int("num_attention_heads")
    q_lora = r.int("q_lora_rank", default=0, null_ok=True)  # null = no query compression (V2-Lite)
    out["attention"] = dict(
        kind="mla",
        num_heads=heads,
        q_lora_rank=q_lora,
        kv_lora_rank=r.int("kv_lora_rank"),
        qk_nope_head_dim=r.int("qk_nope_head_dim"),
        qk_rope_head_dim=r.int("qk_rope_head_dim"),
        v_head_dim=r.int("v_head_dim"),
    )
    if q_lora == 0:
        notes["attention.q_lora_rank"] = "q_lora_rank null: full-rank query projection (no compression)"
    out["mtp_layers"] = r.int("num_nextn_predict_layers", lo=0, default=0, null_ok=True)
    n_routed = r.int("n_routed_experts", default=None, null_ok=True)
    if n_routed is None:  # a DeepSeek config without routed experts is a dense model
        out["dense_ffn"] = dict(intermediate_size=r.int("intermediate_size"))
        out["moe"] = None
        return
    first_dense = r.int("first_k_dense_replace", lo=0, default=0, null_ok=True)
    freq = r.int("moe_layer_freq", default=1, null_ok=True)
    if first_dense > num_layers:
        raise r.fail("first_k_dense_replace", f"{first_dense} exceeds num_hidden_layers={num_layers}")
    if freq != 1:  # transformers DeepSeek: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0
        dense = [i for i in range(num_layers) if not (i >= first_dense and i % freq == 0)]
        first_dense = _dense_prefix(r, num_layers, dense, "moe_layer_freq")
    out["num_dense_layers"] = first_dense
    if first_dense:
        out["dense_ffn"] = dict(intermediate_size=r.int("intermediate_size"))
    top_k = r.int("num_experts_per_tok")
    default_scoring = "softmax" if mt == "deepseek_v2" else "sigmoid"
    # the router's score function is validated (group-limited top-k over sigmoid / softmax scores is
    # what the traffic model describes) but not kept: no prediction depends on it
    r.choice("scoring_func", ("sigmoid", "softmax"), default_scoring)
    topk_method = r.cfg.get("topk_method")
    n_group = r.int("n_group", default=1, null_ok=True)
    topk_group = r.int("topk_group", default=1, null_ok=True)
    if topk_method == "greedy":  # plain top-k: groups are not used for routing
        n_group = topk_group = 1
    out["moe"] = dict(
        num_experts=n_routed,
        top_k=top_k,
        expert_intermediate_size=r.int("moe_intermediate_size"),
        num_shared_experts=r.int("n_shared_experts", lo=0, default=0, null_ok=True),
        n_group=n_group,
        topk_group=topk_group,
        router_bias=topk_method == "noaux_tc",
    )
    if topk_method == "noaux_tc":
        notes["moe.router_bias"] = "topk_method noaux_tc: e_score_correction_bias per expert"


def _gqa_moe(r: _Reader, out: dict, notes: dict) -> None:
    mt = r.model_type
    num_layers, hidden = out["num_layers"], out["hidden_size"]
    out["attention"] = _gqa_attention(r, hidden, qkv_bias=mt == "qwen2_moe" or r.bool("attention_bias", False))
    if mt == "mixtral":
        out["moe"] = dict(
            num_experts=r.int("num_local_experts"),
            top_k=r.int("num_experts_per_tok"),
            expert_intermediate_size=r.int("intermediate_size"),
        )
        return
    n_experts = r.int("num_experts")
    step = r.int("decoder_sparse_step", default=1, null_ok=True)
    mlp_only = r.int_list("mlp_only_layers")
    bad = [i for i in mlp_only if not 0 <= i < num_layers]
    if bad:
        raise r.fail("mlp_only_layers", f"layer {bad[0]} out of range, allowed 0..{num_layers - 1}")
    # transformers Qwen2/3-MoE: layer i is sparse iff i not in mlp_only_layers and (i + 1) % step == 0
    dense = [i for i in range(num_layers) if i in mlp_only or (i + 1) % step]
    k = _dense_prefix(r, num_layers, dense, "decoder_sparse_step/mlp_only_layers")
    out["num_dense_layers"] = k
    if k:
        out["dense_ffn"] = dict(intermediate_size=r.int("intermediate_size"))
    moe = dict(
        num_experts=n_experts,
        top_k=r.int("num_experts_per_tok"),
        expert_intermediate_size=r.int("moe_intermediate_size"),
    )
    if mt == "qwen2_moe":
        shared = r.int("shared_expert_intermediate_size", lo=0, default=0, null_ok=True)
        if shared:
            moe.update(num_shared_experts=1, shared_intermediate_size=shared)
    out["moe"] = moe


def _dense(r: _Reader, out: dict, notes: dict) -> None:
    mt = r.model_type
    out["attention"] = _gqa_attention(r, out["hidden_size"], qkv_bias=mt == "qwen2" or r.bool("attention_bias", False))
    out["dense_ffn"] = dict(intermediate_size=r.int("intermediate_size"))
    out["moe"] = None


# ---------------------------------------------------------------------------------------- API
def mapping_from_hf_config(cfg: dict, name: str, file: str | None = None) -> dict:
    """Convert a Hugging Face config.json mapping into the raw ModelSpec mapping."""
    where = file or "config.json"
    if not isinstance(cfg, dict):
        raise SpecError(f"{where}: expected a JSON object (config.json), got {type(cfg).__name__}")
    mt = cfg.get("model_type", _MISSING)
    if mt is _MISSING:
        raise SpecError(f"{where}: model_type: required key is missing; allowed: {', '.join(SUPPORTED)}")
    if mt not in SUPPORTED and isinstance(cfg.get("text_config"), dict):
        inner = dict(cfg["text_config"])  # multimodal wrappers keep the decoder under text_config
        if "quantization_config" in cfg and "quantization_config" not in inner:
            inner["quantization_config"] = cfg["quantization_config"]
        return mapping_from_hf_config(inner, name, f"{where} (text_config)")
    if not isinstance(mt, str) or mt not in SUPPORTED:
        raise SpecError(f"{where}: model_type: {_show(mt)} is not supported; allowed: {', '.join(SUPPORTED)}")
    r = _Reader(cfg, file, mt)
    out: dict[str, Any] = {
        "name": str(name),
        "description": f"{mt} architecture imported from a Hugging Face config.json",
        "source": f"imported from {file or 'config.json'}",
        "num_layers": r.int("num_hidden_layers", hi=MAX_LAYERS),  # bounded: layer layouts are built per layer
        "num_dense_layers": 0,
        "hidden_size": r.int("hidden_size"),
        "vocab_size": r.int("vocab_size"),
        "mtp_layers": 0,
        "tie_embeddings": r.bool("tie_word_embeddings", False),
    }
    ctx = r.int("max_position_embeddings", default=None, null_ok=True)
    if ctx is not None:
        out["max_context"] = ctx
    notes: dict[str, str] = {}
    if mt in MLA_TYPES:
        _mla(r, out, notes)
    elif mt in GQA_MOE_TYPES:
        _gqa_moe(r, out, notes)
    else:
        _dense(r, out, notes)
    out["precision"], notes["precision.weight_dtype"] = _precision(r)
    out["sources"] = notes
    return {k: out[k] for k in _TOP_ORDER if k in out}


def default_name(path: Path) -> str:
    stem = path.parent.name if path.stem == "config" and path.parent.name else path.stem
    return stem.strip().lower().replace("_", "-").replace(" ", "-") or "imported-model"


def to_yaml(mapping: dict) -> str:
    return yaml.safe_dump(mapping, sort_keys=False, default_flow_style=False, allow_unicode=True, width=1000)
