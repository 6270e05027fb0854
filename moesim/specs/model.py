"""Model architecture spec (frozen). Parameter and KV counts are closed forms of the spec."""

from __future__ import annotations

from dataclasses import dataclass

from moesim.enums import Dtype, StrEnum
from moesim.errors import SpecError
from moesim.specs.schema import field


class AttentionKind(StrEnum):
    MLA = "mla"
    GQA = "gqa"
    MHA = "mha"


@dataclass(frozen=True)
class AttentionSpec:
    kind: AttentionKind
    num_heads: int = field(lo=1, hi=4096)
    # GQA / MHA
    num_kv_heads: int = field(0, lo=0, hi=4096, doc="0 = same as num_heads")
    head_dim: int = field(0, lo=0, hi=4096, doc="0 = hidden/num_heads (GQA/MHA)")
    qkv_bias: bool = False
    # MLA (DeepSeek-V2/V3): arXiv 2405.04434 sec. 2.1
    q_lora_rank: int = field(0, lo=0, hi=65536, doc="0 = no query compression (V2-Lite)")
    kv_lora_rank: int = field(0, lo=0, hi=65536)
    qk_nope_head_dim: int = field(0, lo=0, hi=4096)
    qk_rope_head_dim: int = field(0, lo=0, hi=4096)
    v_head_dim: int = field(0, lo=0, hi=4096)

    @property
    def kv_heads(self) -> int:
        return self.num_kv_heads or self.num_heads

    def _validate(self, file=None, path=""):
        where = f"{file}: {path}" if file else path
        if self.kind == AttentionKind.MLA:
            for name in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
                if getattr(self, name) <= 0:
                    raise SpecError(f"{where}.{name}: MLA needs a positive value, allowed >= 1")
        else:
            if self.kind == AttentionKind.MHA and self.kv_heads != self.num_heads:
                raise SpecError(
                    f"{where}.num_kv_heads: {self.num_kv_heads} with kind mha (one KV head per query head); "
                    f"allowed: 0 or {self.num_heads}, or kind gqa"
                )
            if self.kv_heads > self.num_heads or self.num_heads % self.kv_heads:
                raise SpecError(f"{where}.num_kv_heads: {self.kv_heads} must divide num_heads={self.num_heads}")


@dataclass(frozen=True)
class DenseFFNSpec:
    intermediate_size: int = field(lo=1, hi=10_000_000)
    gated: bool = True  # SwiGLU: gate, up, down = 3 matrices


@dataclass(frozen=True)
class MoESpec:
    num_experts: int = field(lo=1, hi=100_000)
    top_k: int = field(lo=1, hi=1024)
    expert_intermediate_size: int = field(lo=1, hi=10_000_000)
    num_shared_experts: int = field(0, lo=0, hi=64)
    shared_intermediate_size: int = field(0, lo=0, hi=10_000_000, doc="0 = expert width x num_shared")
    n_group: int = field(1, lo=1, hi=100_000, doc="expert groups for group-limited routing")
    topk_group: int = field(1, lo=1, hi=100_000)
    router_bias: bool = False
    # keys older model files carry that no prediction ever read (issue 17: honoured or removed)
    REMOVED_KEYS = {"scoring": "the router's score function moves no prediction: traffic follows top_k and groups"}

    def _validate(self, file=None, path=""):
        where = f"{file}: {path}" if file else path
        if self.top_k > self.num_experts:
            raise SpecError(f"{where}.top_k: {self.top_k} exceeds num_experts={self.num_experts}")
        if self.num_experts % self.n_group:
            raise SpecError(f"{where}.n_group: {self.n_group} must divide num_experts={self.num_experts}")
        if self.topk_group > self.n_group:
            raise SpecError(f"{where}.topk_group: {self.topk_group} exceeds n_group={self.n_group}")

    @property
    def shared_width(self) -> int:
        return self.shared_intermediate_size or self.expert_intermediate_size * self.num_shared_experts


@dataclass(frozen=True)
class PrecisionSpec:
    weight_dtype: Dtype = Dtype.FP8
    weight_block: int = field(128, lo=0, hi=65536, doc="block-scale size (128 = 128x128 weight blocks); 0 = per-tensor")
    activation_dtype: Dtype = Dtype.FP8  # GEMM inputs (1x128 per-token-group scales)
    attention_dtype: Dtype = Dtype.BF16  # core attention math
    kv_dtype: Dtype = Dtype.BF16
    embedding_dtype: Dtype = Dtype.BF16
    dispatch_dtype: Dtype = Dtype.FP8
    combine_dtype: Dtype = Dtype.BF16


@dataclass(frozen=True)
class ModelSpec:
    name: str
    source: str
    num_layers: int = field(lo=1, hi=10_000)
    hidden_size: int = field(lo=1, hi=1_000_000)
    vocab_size: int = field(lo=1, hi=100_000_000)
    attention: AttentionSpec
    dense_ffn: DenseFFNSpec | None = None
    moe: MoESpec | None = None
    num_dense_layers: int = field(0, lo=0, hi=10_000, doc="first k layers use the dense FFN")
    mtp_layers: int = field(0, lo=0, hi=16)
    max_context: int = field(131072, lo=1, hi=100_000_000)
    tie_embeddings: bool = False
    precision: PrecisionSpec = PrecisionSpec()
    published_params: float = field(0.0, lo=0.0, hi=1e15, doc="published total parameters (for tests); 0 = unknown")
    published_active_params: float = field(0.0, lo=0.0, hi=1e15)
    description: str = ""
    sources: dict[str, str] = None
    published_active_excludes_embedding: bool = (
        False  # DeepSeek's convention: the input embedding table is not counted as activated
    )

    def _validate(self, file=None, path=""):
        where = f"{file}: " if file else ""
        if self.moe is None:
            if self.dense_ffn is None:
                raise SpecError(f"{where}dense_ffn: a model without moe needs dense_ffn")
        elif self.num_dense_layers > self.num_layers:
            raise SpecError(f"{where}num_dense_layers: {self.num_dense_layers} exceeds num_layers={self.num_layers}")
        if self.moe is not None and self.num_dense_layers > 0 and self.dense_ffn is None:
            raise SpecError(f"{where}dense_ffn: num_dense_layers={self.num_dense_layers} needs dense_ffn")
        a = self.attention
        if a.kind != AttentionKind.MLA and a.head_dim == 0 and self.hidden_size % a.num_heads:
            raise SpecError(
                f"{where}attention.head_dim: hidden_size {self.hidden_size} not divisible by num_heads; set head_dim"
            )

    # ---------------------------------------------------------------- structure
    @property
    def is_moe(self) -> bool:
        return self.moe is not None

    @property
    def n_moe_layers(self) -> int:
        return self.num_layers - self.num_dense_layers if self.is_moe else 0

    @property
    def n_dense_layers(self) -> int:
        return self.num_dense_layers if self.is_moe else self.num_layers

    @property
    def head_dim(self) -> int:
        a = self.attention
        return a.head_dim or self.hidden_size // a.num_heads

    @property
    def kv_heads(self) -> int:
        return self.attention.kv_heads

    # ---------------------------------------------------------------- attention shapes
    @property
    def q_head_dim(self) -> int:
        a = self.attention
        return a.qk_nope_head_dim + a.qk_rope_head_dim if a.kind == AttentionKind.MLA else self.head_dim

    @property
    def kv_latent_dim(self) -> int:
        """Elements cached per token per layer."""
        a = self.attention
        if a.kind == AttentionKind.MLA:
            return a.kv_lora_rank + a.qk_rope_head_dim  # latent c_KV + decoupled RoPE key
        return 2 * self.kv_heads * self.head_dim  # K and V

    @property
    def kv_bytes_per_token(self) -> float:
        """KV cache bytes per token over all layers (ISCA'25 Table 1: 70,272 B for V3)."""
        return self.kv_latent_dim * self.precision.kv_dtype.bytes * self.num_layers

    def attention_params(self) -> float:
        a, d = self.attention, self.hidden_size
        if a.kind == AttentionKind.MLA:
            h, qd = a.num_heads, self.q_head_dim
            q = (d * a.q_lora_rank + a.q_lora_rank + a.q_lora_rank * h * qd) if a.q_lora_rank else d * h * qd
            kv_a = d * (a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank
            kv_b = a.kv_lora_rank * h * (a.qk_nope_head_dim + a.v_head_dim)
            o = h * a.v_head_dim * d
            return float(q + kv_a + kv_b + o)
        hd, h, kvh = self.head_dim, a.num_heads, self.kv_heads
        bias = (h + 2 * kvh) * hd if a.qkv_bias else 0
        return float(d * (h + 2 * kvh) * hd + bias + h * hd * d)

    # ---------------------------------------------------------------- FFN shapes
    def dense_ffn_params(self) -> float:
        f = self.dense_ffn
        return float((3 if f.gated else 2) * self.hidden_size * f.intermediate_size) if f else 0.0

    def expert_params(self) -> float:
        return float(3 * self.hidden_size * self.moe.expert_intermediate_size) if self.moe else 0.0

    def shared_expert_params(self) -> float:
        return float(3 * self.hidden_size * self.moe.shared_width) if self.moe else 0.0

    def router_params(self) -> float:
        m = self.moe
        return float(self.hidden_size * m.num_experts + (m.num_experts if m.router_bias else 0)) if m else 0.0

    def embedding_params(self) -> float:
        return float(self.vocab_size * self.hidden_size * (1 if self.tie_embeddings else 2))

    def layer_norm_params(self) -> float:
        return 2.0 * self.hidden_size

    # ---------------------------------------------------------------- totals
    def moe_layer_params(self) -> float:
        m = self.moe
        return (
            self.attention_params()
            + self.layer_norm_params()
            + m.num_experts * self.expert_params()
            + self.shared_expert_params()
            + self.router_params()
        )

    def dense_layer_params(self) -> float:
        return self.attention_params() + self.layer_norm_params() + self.dense_ffn_params()

    def mtp_module_params(self) -> float:
        """DeepSeek-V3 MTP module: eh_proj (2d -> d), two norms, one transformer block (MoE);
        embedding and output head shared with the main model (V3 report sec. 2.2)."""
        if not self.mtp_layers:
            return 0.0
        block = self.moe_layer_params() if self.is_moe else self.dense_layer_params()
        return self.mtp_layers * (2.0 * self.hidden_size * self.hidden_size + 3 * self.hidden_size + block)

    def total_params(self, include_mtp: bool = False) -> float:
        """Total parameters of the main model (MTP module excluded unless asked)."""
        p = self.n_dense_layers * self.dense_layer_params() + self.embedding_params() + self.hidden_size
        if self.is_moe:
            p += self.n_moe_layers * self.moe_layer_params()
        return p + (self.mtp_module_params() if include_mtp else 0.0)

    def active_params(self, include_input_embedding: bool = True) -> float:
        """Parameters touched per token (top-k routed + shared experts + everything dense).
        include_input_embedding=False leaves out the input embedding table (a lookup, not a GEMM);
        a tied table is kept, since it is also the output head."""
        p = self.n_dense_layers * self.dense_layer_params() + self.embedding_params() + self.hidden_size
        if not include_input_embedding and not self.tie_embeddings:
            p -= self.vocab_size * self.hidden_size
        if self.is_moe:
            m = self.moe
            per = (
                self.attention_params()
                + self.layer_norm_params()
                + m.top_k * self.expert_params()
                + self.shared_expert_params()
                + self.router_params()
            )
            p += self.n_moe_layers * per
        return p
