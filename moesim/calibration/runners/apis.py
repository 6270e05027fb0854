"""The vendor-library calls the runners make, resolved against the installed version (old and new
names), in one place so a test can check them against fake modules on a CPU.

DeepGEMM (github.com/deepseek-ai/DeepGEMM)
  v2 (2.0 .. 2.8, deep_gemm/__init__.py + deep_gemm/utils/{layout,math}.py):
    fp8_gemm_nt((a, sfa), (b, sfb), d)                          dense, d = a @ b.T (BF16 out)
    m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
    m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, expected_m)
    get_mk_alignment_for_contiguous_layout()                    (alias get_m_alignment_...)
    utils.per_token_cast_to_fp8(x, use_ue8m0) / utils.per_block_cast_to_fp8(x, use_ue8m0)
    FP32 scales in their natural [m, k/128] / [n/128, k/128] layout: the library transforms them
    (transform_sf_into_required_layout; UE8M0 on SM100).
  v1 (<= 1.x): gemm_fp8_fp8_bf16_nt, m_grouped_gemm_fp8_fp8_bf16_nt_contiguous / _masked (same
    positional arguments), get_m_alignment_for_contiguous_layout, and the LHS scales must be made
    column-major and TMA-aligned first with get_col_major_tma_aligned_tensor.
FlashMLA (github.com/deepseek-ai/FlashMLA, flash_mla/flash_mla_interface.py)
  get_mla_metadata(cache_seqlens, s_q * h_q // h_k, h_k) -> (tile_scheduler_metadata, num_splits)
  in old versions; in new ones get_mla_metadata(*args) -> (FlashMLASchedMeta, None), filled on the
  first flash_mla_with_kvcache call, and num_splits must be None. Passing what it returned works
  with both: flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
  tile_scheduler_metadata=meta, num_splits=splits, softmax_scale=..., causal=True).
DeepEP (github.com/deepseek-ai/DeepEP, deep_ep/buffer.py; 2.x: deep_ep/buffers/legacy.py)
  Buffer(group, num_nvl_bytes, num_rdma_bytes, low_latency_mode=, num_qps_per_rank=),
  Buffer.set_num_sms(n) (even), get_dispatch_layout(topk_idx, num_experts), dispatch / combine,
  low_latency_dispatch(x, topk_idx, max_tokens, num_experts, use_fp8=) -> (recv, count, handle,
  event, hook), low_latency_combine(x, topk_idx, topk_weights, handle). topk_idx dtype is
  deep_ep.topk_idx_t where exported (1.2+), else int64. 2.x built with DISABLE_LEGACY has
  Buffer = None (only ElasticBuffer): the runner says so and stops.
"""

from __future__ import annotations

from moesim.errors import CalibrationError


def first_attr(mod, names: tuple[str, ...], what: str):
    """The first of `names` that `mod` has, or a one-line error naming them and the version."""
    for n in names:
        f = getattr(mod, n, None)
        if f is not None:
            return f
    ver = getattr(mod, "__version__", "?")
    raise CalibrationError(f"{getattr(mod, '__name__', mod)} {ver}: no {what} ({' or '.join(names)})")


def deep_gemm_dense(dg):
    return first_attr(dg, ("fp8_gemm_nt", "gemm_fp8_fp8_bf16_nt"), "FP8 dense GEMM")


def deep_gemm_grouped(dg, layout: str):
    names = {
        "contiguous": ("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_gemm_fp8_fp8_bf16_nt_contiguous"),
        "masked": ("m_grouped_fp8_gemm_nt_masked", "m_grouped_gemm_fp8_fp8_bf16_nt_masked"),
    }[layout]
    return first_attr(dg, names, f"grouped FP8 GEMM ({layout})")


def deep_gemm_m_alignment(dg) -> int:
    """Rows per group of the contiguous layout (128 where the library does not say)."""
    for n in ("get_mk_alignment_for_contiguous_layout", "get_m_alignment_for_contiguous_layout"):
        f = getattr(dg, n, None) or getattr(getattr(dg, "utils", None), n, None)
        if f is not None:
            return int(f())
    return 128


def deep_gemm_lhs_scales(dg, sf):
    """v1 wants LHS scales column-major and TMA-aligned; v2 transforms them itself."""
    if hasattr(dg, "fp8_gemm_nt") or not hasattr(dg, "get_col_major_tma_aligned_tensor"):
        return sf
    return dg.get_col_major_tma_aligned_tensor(sf)


def deep_gemm_casts(dg):
    """(per_token_cast(x), per_block_cast(w)) -> (fp8, fp32 scales) from deep_gemm.utils (v2), or
    None (v1 ships them only in its tests: the runner makes random FP8 inputs and scales)."""
    utils = getattr(dg, "utils", None)
    tok = getattr(utils, "per_token_cast_to_fp8", None)
    blk = getattr(utils, "per_block_cast_to_fp8", None)
    if tok is None or blk is None:
        return None
    return (lambda x: tok(x, use_ue8m0=False)), (lambda w: blk(w, use_ue8m0=False))


def deep_ep_buffer(ep):
    buf = getattr(ep, "Buffer", None)
    if buf is None:
        raise CalibrationError(
            f"deep_ep {getattr(ep, '__version__', '?')}: no legacy Buffer (built with DISABLE_LEGACY?); "
            "this runner times Buffer's normal and low-latency kernels"
        )
    return buf


def deep_ep_index_dtype(ep, torch):
    t = getattr(ep, "topk_idx_t", None)
    return t if isinstance(t, torch.dtype) else torch.int64
