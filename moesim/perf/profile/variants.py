"""Which part of a profile entry prices a shape: the variant of a table-fitted entry (per layout,
dtype, backend) and the nominal links a comm entry's rows were measured on (for rescaling to the
live spec). Split from moesim.perf.profile.reader."""

from __future__ import annotations

from moesim.errors import SpecError
from moesim.perf.profile import schema as S
from moesim.specs.loader import load_hardware


def _base_dtype(d) -> str:
    d = str(d or "").lower()
    return {"fp8_block": "fp8", "bfloat16": "bf16"}.get(d, d)


def pick_variant(e: dict, dtype: str, layout=None) -> dict:
    """The entry's variant (waves_v1 / stream_v1 fits per layout, dtype, backend) for a priced dtype
    and layout: the first listed (preferred) one whose dtype matches (fp8 = fp8_block) and, where
    the shape names one scalar layout, whose layout matches; the entry itself when none does."""
    lay = layout if isinstance(layout, str) else None
    for v in e.get("variants") or []:
        if _base_dtype(v.get("dtype")) == _base_dtype(dtype) and (lay is None or v.get("layout") in (None, lay)):
            return v
    return e


def fused_variant(e: dict | None, dtype) -> dict | None:
    """The variant of a `moe` entry that prices a layer's routed experts as ONE fused call
    (moesim.perf.fused_moe), or None. Where every variant is layout "fused", the engine's own MoE
    tables time one fused call per layer, which is what the engine runs: TRT-LLM's CutlassFusedMoE /
    DeepGemmFusedMoE (tensorrt_llm/_torch/modules/fused_moe: torch.ops.trtllm.fused_moe runs
    expandInputRowsKernel (permute + FP8 quant), both grouped GEMMs, the SwiGLU + requant and
    finalizeMoeRouting in one op; aiconfigurator collector/trtllm/collect_moe.py times that op), vLLM's
    fused_experts / FlashInfer cutlass_fused_moe. A masked / contiguous variant (SGLang's DeepEP
    layouts) marks an engine running the grouped GEMMs and the activation as separate kernels: priced
    op by op (None). None too where no variant has the priced dtype."""
    if not e or e.get("model") != S.WAVES:
        return None
    if any((v.get("layout") or "fused") != "fused" for v in e.get("variants") or [e]):
        return None
    d = str(getattr(dtype, "value", dtype) or "").lower()
    v = pick_variant(e, d, "fused")
    return v if _base_dtype(v.get("dtype")) == _base_dtype(d) else None


def _measured_nominal(entry: dict, data: dict) -> dict:
    """{"rdma": Bps, "nvlink": Bps}: nominal links of the GPU an entry's rows were measured on."""
    nom = entry.get("nominal")
    if isinstance(nom, dict) and nom.get("rdma_GBps"):
        return {"rdma": float(nom["rdma_GBps"]) * 1e9, "nvlink": float(nom.get("nvlink_GBps") or 0) * 1e9}
    try:  # the measuring GPU's spec (an entry inherited from another GPU names it in `gpu`)
        hw = load_hardware(str(entry.get("gpu") or data["gpu"]))
        return {"rdma": hw.rdma_Bps(False), "nvlink": hw.nvlink_Bps(False)}
    except SpecError:
        return S.roofline_from_yaml(data.get("roofline") or {})["nominal"]
