"""Attention kernel time model `mla_v2` (MLA decode, MLA prefill, MHA/GQA attention), shared by
the calibration fit (moesim.calibration.fit.attention) and the profile reader. Vectorized numpy.

    T = alpha + combine [split-KV] + cta_s * waves + fill * smax_q(F / (P * eta_c), B / (W * eta_m))
    fill = waves * SMs / CTAs above one wave, max(1, sat * SMs / CTAs) below

- alpha: the fixed per-call floor beyond launch (decode: KV append of the new token, split-KV
  metadata and combine kernels, FlashMLA get_mla_metadata / FA3 scheduler), fitted.
- CTAs and waves = ceil(CTAs / SMs): the kernel's grid. Decode (FlashMLA, FA3 with PackGQA):
  64 query rows (s_q x heads sharing one KV head) per CTA, the KV sequence split across SMs to
  fill them (split-KV, at least SPLIT_KV_MIN keys per split); prefill (FA3): one CTA per 128
  query rows of one head. A wave runs at the per-SM share of the ceilings, so below one wave the
  speed is linear in CTAs and a partial last wave costs a whole one (wave quantization, not an
  exponential saturation); cta_s is each wave's fixed cost (prologue: Q tile load; epilogue).
- F, B: the workload's one formula per concept (moesim.workload.attention); the query tiles of one
  KV head share its reads through L2 (KV read once), and the split-KV combine writes and reads
  FP32 partial outputs per split. eta_c, eta_m: measured compute / HBM ceilings (fitted).
"""

from __future__ import annotations

import numpy as np

from moesim.perf.efficiency import dtype_bytes, smax_sides
from moesim.workload.attention import gqa_decode_work, gqa_prefill_work, mla_decode_work, mla_prefill_work

DECODE_TILE_ROWS = 64.0  # FlashMLA / FA3 decode: 64 query rows per CTA (FlashMLA README, FA3 PackGQA)
PREFILL_TILE_ROWS = 128.0  # FA3 Hopper forward: kBlockM = 128 query rows per CTA
SPLIT_KV_MIN = 256.0  # keys per KV split at least (FA3 num_splits_heuristic: n-blocks of 128-176)
PARTIAL_BYTES = 4.0  # split-KV partial outputs are FP32 (written by the split, read by the combine)
# MLA geometry of the measured kernels (DeepSeek-V3: kv_lora_rank 512, qk_rope 64, qk_nope 128, v 128)
MLA_DIMS = {"latent": 512, "rope": 64, "qk_nope": 128, "v_head": 128}
ATTN_FAMILIES = ("mla_decode", "mla_prefill", "attention")
# TRT-LLM's generation attention on Hopper picks one of two kernels (DecoderXQARunner::shouldUse):
# XQA (one CTA per (request, KV head, KV block), the query-head group on tensor cores) where the
# XQA JIT supports the shape (kernelUtils.cpp supportConfigCommon / QGMMA / HMMA: 1 < query heads
# per KV head <= 32) and mayHavePerfGain (KV heads x batch x max(1, history / 128) x 4 >= SMs;
# a 16-bit KV cache only: the FP8-KV tables run XQA-speed (QGMMA) kernels at every batch and context);
# otherwise MMHA (decoderMaskedMultiheadAttention: one CTA per (request, query head), CUDA-core
# math): a different kernel with its own fitted variant `<key>.mmha`.
XQA_MAX_GROUP = 32
XQA_HISTORY_BLOCK = 128  # kMinHistoryTokensPerBlock (decoderXQAConstants.h)
XQA_MIN_BLOCK_FACTOR = 4.0  # kEnableMinBlockFactor
XQA_TARGET_WAVES = 8.0  # kTargetWaveFactor (computeMultiBlockCount)
MMHA_BACKENDS = ("torch_flow",)  # the tables of TRT-LLM's attention op (TrtllmAttention)
XQA, MMHA = "xqa", "mmha"
# On SM100 TRT-LLM runs its TRTLLM-GEN generation kernels for MHA and GQA alike (AttentionOp
# mUseTllmGen = SM >= 100 except 120/121; XqaDispatcher::shouldUse falls back to MMHA only for beam
# search, StreamingLLM, cross attention): there the rows Hopper runs on MMHA keep their own variant
# `<key>.mmha` with the split-KV grid of one CTA per (request, query head, KV split) of split_grid
# (TRTLLM-GEN's own tile scheduler is not modelled), not MMHA's launch
TLLM_GEN = "trtllm_gen"
# MMHA launch (decoderMaskedMultiheadAttentionLaunch.h mmha_launch_kernel_ex / multi_block_grid_setup):
# below 4 CTAs per SM the block grows from 256 threads to fill the SMs (at most 32 warps per SM,
# register-bound), and the KV is split into at most ceil(SMs x blocks per SM / CTAs) blocks of at
# least one KV loop (block threads / threads per value x unroll 8 keys; 16 threads per 128-dim value).
# The split count is capped at the workspace's max_seq_len_tile (AttentionOp::enqueueGeneration:
# max(getMaxNumSeqLenTile = ceil(SMs / (batch x heads)), the shared-memory minimum): one wave of one
# block per SM), so from batch x heads > SMs on there is no multi-block unless the logits do not fit.
MMHA_THREADS, MMHA_WARPS_PER_SM, MMHA_THREADS_PER_VALUE, MMHA_UNROLL = 256.0, 32.0, 16.0, 8.0
# shared memory: the block keeps the QK logits of its keys, 16 B per 4 keys in FP32 plus 4 x 2 B
# BF16 logits (estimate_min_multi_block_count / smem_size_in_bytes), in at most the opt-in block
# limit minus 2 KiB (Hopper sharedMemPerBlockOptin 227 KiB); blocks per SM share 228 KiB, 1 KiB each reserved
MMHA_SMEM_PER_4_KEYS_B, MMHA_SMEM_BLOCK_B, MMHA_SMEM_SM_B, MMHA_SMEM_RESERVED_B = 24.0, 232448.0, 233472.0, 1024.0


def mmha_grid(batch, heads, context, sms):
    """(KV splits, block threads, resident blocks per SM) of TRT-LLM's MMHA call (constants above);
    context: the past KV length (tlength; the kernel reads it plus the new token)."""
    ctas, keys = np.maximum(_a(batch) * _a(heads), 1.0), _a(context) + 1.0
    per_4 = (MMHA_SMEM_BLOCK_B - 2048.0) // MMHA_SMEM_PER_4_KEYS_B
    min_tile = np.maximum(np.ceil(np.ceil(keys / 4.0) / per_4), 1.0)  # the logits must fit
    max_tile = np.maximum(np.ceil(sms / ctas), min_tile)
    multi = max_tile > 1.0
    per_sm = MMHA_WARPS_PER_SM * 32.0 / MMHA_THREADS  # 256-thread blocks an SM holds
    grow = np.minimum(MMHA_THREADS * np.minimum(np.ceil(sms * per_sm / ctas), per_sm), 1024.0)
    block = np.where(grow < 512.0, MMHA_THREADS, np.where(grow < 1024.0, 512.0, 1024.0))
    block = np.where(~multi & (ctas >= 4.0 * sms), MMHA_THREADS, block)
    fit = MMHA_WARPS_PER_SM * 32.0 / block  # register-bound blocks per SM
    loops = np.ceil(keys / (block / MMHA_THREADS_PER_VALUE * MMHA_UNROLL))
    tile = np.clip(np.ceil(sms * fit / ctas), min_tile, np.maximum(np.minimum(loops, max_tile), min_tile))
    splits = np.where(multi, tile, 1.0)
    smem = np.ceil(np.ceil(keys / splits) / 4.0) * MMHA_SMEM_PER_4_KEYS_B + MMHA_SMEM_RESERVED_B
    return splits, block, np.maximum(np.minimum(fit, np.floor(MMHA_SMEM_SM_B / smem)), 1.0)


def mmha_rows(heads, kv_heads, batch, context, sms, kv_bytes=2.0):
    """True where TRT-LLM's generation runs MMHA rather than XQA (module constants above)."""
    h, b, c = _a(heads), _a(batch), _a(context)
    kvh = np.maximum(_a(heads if kv_heads is None else kv_heads), 1.0)
    group = h / kvh
    blocks = kvh * b * np.maximum(1.0, np.floor(c / XQA_HISTORY_BLOCK))
    few = (blocks * XQA_MIN_BLOCK_FACTOR < float(sms)) & (_a(kv_bytes) >= 2.0)
    return (group <= 1.0) | (group > XQA_MAX_GROUP) | few


def mmha_splits(batch, heads, context, sms):
    """MMHA multi-block count per (request, query head) CTA (mmha_grid)."""
    return mmha_grid(batch, heads, context, sms)[0]


def split_grid(batch, heads, context, sms):
    """KV splits per (request, head) CTA of TLLM_GEN's rows: MMHA's balanced split without the
    workspace cap or the occupancy (SMs x 4 blocks of 256 threads, merged up to 1024 threads, at
    least one 8-key loop per split, none from 4 CTAs per SM on)."""
    ctas = np.maximum(_a(batch) * _a(heads), 1.0)
    per_sm = MMHA_WARPS_PER_SM * 32.0 / MMHA_THREADS
    block = np.minimum(MMHA_THREADS * np.minimum(np.ceil(sms * per_sm / ctas), per_sm), 1024.0)
    block = np.where(block < 512.0, MMHA_THREADS, np.where(block < 1024.0, 512.0, 1024.0))
    balanced = np.ceil(sms * (MMHA_WARPS_PER_SM * 32.0 / block) / ctas)
    loops = np.ceil((_a(context) + 1.0) / (block / MMHA_THREADS_PER_VALUE * MMHA_UNROLL))
    return np.where(ctas >= 4.0 * sms, 1.0, np.clip(balanced, 1.0, np.maximum(loops, 1.0)))


def xqa_splits(batch, kv_heads, context, sms):
    """XQA multi-block count (decoderXQAImplCommon.h computeMultiBlockCount): history / 128 blocks,
    at most round(sqrt(8 x that)), cut to about kTargetWaveFactor waves of (request, KV head) CTAs."""
    b, kvh, c = _a(batch), np.maximum(_a(kv_heads), 1.0), _a(context)
    n = np.floor(c / XQA_HISTORY_BLOCK)
    n = np.maximum(np.minimum(n, np.round(np.sqrt(n * 8.0))), 1.0)
    adj = b * kvh * n / float(sms) / XQA_TARGET_WAVES
    return np.maximum(np.where(adj > 1.0, np.floor(n / np.maximum(adj, 1.0)), n), 1.0)


def _a(x, default=1.0):
    return np.asarray(default if x is None else x, float)


def decode_grid(batch, q_len, heads, kv_heads, context, sms, split_kv=SPLIT_KV_MIN):
    """(CTAs, query tiles per KV head, splits) of a split-KV decode kernel."""
    b, s, h, kvh, c = _a(batch), _a(q_len), _a(heads), np.maximum(_a(kv_heads), 1.0), _a(context)
    rows = np.maximum(s * h / kvh, 1.0)  # query rows sharing one KV head (PackGQA)
    reads = np.ceil(rows / DECODE_TILE_ROWS)
    tiles = np.maximum(b, 1.0) * kvh * reads
    splits = np.clip(np.floor(float(sms) / tiles), 1.0, np.maximum(np.ceil(c / split_kv), 1.0))
    return tiles * splits, reads, splits


def waves_of(ctas, sms):
    return np.ceil(np.maximum(ctas, 1.0) / float(sms))


def attn_work(family: str, shape: dict, kv_bytes: float, sms: int, split_kv=SPLIT_KV_MIN):
    """(F, B, CTAs, KV elements read, split-KV partial bytes (0: no split, no combine kernel); B
    includes them) of one measured attention kernel call; shape: batch, q_len, heads, context,
    groups (KV heads) and k (head dim) for MHA/GQA, prefill (bool) for `attention`."""
    b, s, h, c = (_a(shape.get(k)) for k in ("batch", "q_len", "heads", "context"))
    prefill = family == "mla_prefill" or (family == "attention" and bool(shape.get("prefill")))
    if family == "mla_decode":
        dims = MLA_DIMS
        F, kv, q_in, out = mla_decode_work(b, s, h, c, latent=dims["latent"], rope=dims["rope"], kv_bytes=kv_bytes)
        ctas, reads, splits = decode_grid(b, s, h, 1.0, c, sms, split_kv)
    elif family == "mla_prefill":
        d = MLA_DIMS
        F, act = mla_prefill_work(
            b * s, h, c, qk_head_dim=d["qk_nope"] + d["rope"], v_head_dim=d["v_head"],
            latent=d["latent"], rope=d["rope"], kv_bytes=kv_bytes,
        )  # fmt: skip
        return F, act, b * h * np.ceil(s / PREFILL_TILE_ROWS), b * c * 0.0, b * 0.0
    else:
        kvh, hd = _a(shape.get("groups"), shape.get("heads")), _a(shape.get("k"), 128.0)
        if prefill:
            F, act = gqa_prefill_work(b * s, h, kvh, hd, c, kv_bytes=kv_bytes)
            return F, act, b * h * np.ceil(s / PREFILL_TILE_ROWS), b * c * 0.0, b * 0.0
        F, kv, act = gqa_decode_work(b, s, h, kvh, hd, c, kv_bytes=kv_bytes)
        q_in, out = act / 2.0, act / 2.0
        kernel = shape.get("kernel")
        # MMHA: one CTA per query head (the heads of one KV head share its reads through L2)
        ctas, reads, splits = decode_grid(b, s, h, h if kernel == MMHA else kvh, c, sms, split_kv)
        if kernel == XQA:  # one CTA per (request, KV head, KV block)
            splits = xqa_splits(b, kvh, c, sms)
            ctas = np.maximum(b, 1.0) * kvh * splits
        elif kernel == MMHA:  # one CTA per (request, query head, KV block), `per_sm` resident per SM:
            splits, _, per_sm = mmha_grid(b, h, c, sms)  # counted in SM-fulls (waves = ceil(CTAs / slots))
            ctas = np.maximum(b, 1.0) * h * splits / per_sm
        elif kernel == TLLM_GEN:
            splits = split_grid(b, h, c, sms)
            ctas = np.maximum(b, 1.0) * h * splits
    dv = MLA_DIMS["latent"] if family == "mla_decode" else _a(shape.get("k"), 128.0)
    combine = np.where(splits > 1, 2.0 * PARTIAL_BYTES * b * s * h * dv * splits, 0.0)
    # the query tiles of one KV head run concurrently and share its KV through L2: read once
    return F, kv + q_in + out + combine, ctas, kv / kv_bytes, combine


def attn_time(F, B, ctas, split, peak, bw, sms, p: dict, batch=0.0, fit_sms=None):
    """T of the mla_v2 model (module docstring), seconds, for the params p (schema PARAMS[mla_v2]);
    split: split-KV partial bytes (> 0: a combine kernel runs). q combines the compute and memory terms
    (efficiency.smax): inf = max (one fused kernel), 1 = sum (a memory-bound pass serial with the
    attention kernel, e.g. SGLang's MLA prefill). floor_us: a minimum call time the work hides
    (host-side launch of the call's kernels overlapping the GPU work). req_us: a fixed cost per
    request of the batch (paged-KV block tables and sequence metadata; TRT-LLM's generation MHA).
    fit_sms: the SM count the params were fitted at (None: sms). `sat` is a per-SM load rate (HBM
    saturates at sat x fit_sms CTAs, each CTA's loads at most bw / (sat fit_sms)), so a GPU with
    more SMs does not need more CTAs to saturate the same HBM (issue 17: more SMs never slower)."""
    return np.maximum(*attn_sides(F, B, ctas, split, peak, bw, sms, p, batch, fit_sms)[:2])


def attn_sides(F, B, ctas, split, peak, bw, sms, p: dict, batch=0.0, fit_sms=None):
    """(compute side, memory side, fixed costs) of attn_time, whose max of the sides is attn_time: the
    fixed costs plus the compute and memory terms split by efficiency.smax_sides (each side
    non-increasing in P and W)."""
    ctas = np.maximum(np.asarray(ctas, float), 1.0)
    waves = waves_of(ctas, sms)
    # math runs on the SMs the grid occupies (SMs share no tensor cores: a CTA alone runs at its SM's
    # share of the ceiling; a partial last wave costs a whole one); loads are saturated by sat * SMs
    # CTAs already (below that, speed linear in CTAs). A per-SM math cap at the SM's own dense peak
    # (fill max(1, eta_c SMs / CTAs)) was tried: 1-5 points better p90 in decode, 3-6 worse in prefill.
    c_fill = waves * float(sms) / ctas
    sat_ctas = p.get("sat", 1.0) * float(fit_sms or sms)
    m_fill = np.where(ctas >= sms, c_fill, np.maximum(1.0, sat_ctas / ctas))
    q = p.get("q")
    main = smax_sides(
        c_fill * np.asarray(F, float) / (peak * p["eta_c"]),
        m_fill * np.asarray(B, float) / (bw * p["eta_m"]),
        np.inf if q is None else float(q),
    )
    fixed = p["alpha_us"] + p.get("combine_us", 0.0) * (np.asarray(split, float) > 0) + p["cta_us"] * waves
    fixed = fixed + p.get("req_us", 0.0) * np.asarray(batch, float)
    floor = p.get("floor_us", 0.0) * 1e-6
    return np.maximum(fixed * 1e-6 + main[0], floor), np.maximum(fixed * 1e-6 + main[1], floor), fixed * 1e-6


def pass_time(elems, bytes_per_elem, bw, eta):
    """An unfused memory pass the engine runs beside the attention kernel: the KV up-cast (read the
    FP8 cache, write BF16: kv_bytes + 2 per element; SGLang FA3 MLA with an FP8 KV cache) or the
    query FP8 quantization (read BF16, write FP8: 3 per element; TRT-LLM's FP8 MLA generation)."""
    if not eta:
        return 0.0
    return np.asarray(elems, float) * bytes_per_elem / (bw * eta)


def q_elems(family: str, shape: dict):
    """Query elements of a call: rows (batch x q_len x heads) x the QK head dim."""
    d = MLA_DIMS["latent"] + MLA_DIMS["rope"] if family.startswith("mla") else _a(shape.get("k"), 128.0)
    return _a(shape.get("batch")) * _a(shape.get("q_len")) * _a(shape.get("heads")) * d


def pick_key(family: str, entry: dict, shape: dict):
    """The key of the variant of a fitted mla_v2 entry for a shape: the variant of its phase, KV dtype
    (and, for MHA/GQA, the nearest fitted head dim: `<phase>.<dtype>.d<head dim>`), else one of its
    phase; None: the entry's main params. The head dim must be one number for the whole shape.
    `<key>.mmha` variants (TRT-LLM's MMHA) are picked per row by entry_time, never here."""
    variants = entry.get("variants") or {}
    kv = str(getattr(shape.get("kv_dtype"), "value", shape.get("kv_dtype")) or entry.get("dtype") or "bf16").lower()
    phase = "context" if family == "mla_prefill" or shape.get("prefill") else "generation"
    if family != "attention":
        return kv if kv in variants else None
    hd = float(np.max(_a(shape.get("k"), 128.0)))
    for prefix in (f"{phase}.{kv}.d", f"{phase}."):
        dims = [k for k in variants if k.startswith(prefix) and not k.endswith("." + MMHA)]
        if dims:
            return min(dims, key=lambda k: (abs(np.log(float(k.rsplit(".d", 1)[1]) / hd)), k))
    return None


def variant_params(family: str, entry: dict, shape: dict) -> dict:
    """The params of a fitted mla_v2 entry for a shape (pick_key)."""
    key = pick_key(family, entry, shape)
    return entry["params"] if key is None else entry["variants"][key]["params"]


def _variant_sides(family: str, shape: dict, p: dict, kvb: float, peak, bw, sms, fit_sms=None):
    """(compute side, memory side, fixed costs) of one variant's call: attn_sides plus its unfused passes (on both)."""
    b = _a(shape.get("batch"))
    if p.get("pass_eta"):  # the kernel reads a BF16 copy made by an unfused up-cast pass
        F, B, ctas, kv_elems, split = attn_work(family, shape, 2.0, sms)
        t_pass = pass_time(kv_elems, kvb + 2.0, bw, p["pass_eta"])
    else:
        F, B, ctas, kv_elems, split = attn_work(family, shape, kvb, sms)
        t_pass = pass_time(q_elems(family, shape), 3.0, bw, p.get("qpass_eta"))
    c, m, fixed = attn_sides(F, B, ctas, split, peak, bw, sms, p, b, fit_sms)
    return c + t_pass, m + t_pass, fixed


def entry_time(family: str, entry: dict, shape: dict, peak, bw, sms, factor=None, fit_sms=None):
    """(modelled time, roofline time) in seconds of a fitted mla_v2 entry at a shape (entry_sides)."""
    c, m, _, F, B = entry_sides(family, entry, shape, peak, bw, sms, factor, fit_sms)
    return np.maximum(c, m), np.maximum(F / peak, B / bw)


def entry_sides(family: str, entry: dict, shape: dict, peak, bw, sms, factor=None, fit_sms=None):
    """(compute side, memory side, fixed costs, F, B) of a fitted mla_v2 entry at a shape (the reader's
    side of the fit in moesim.calibration.fit.attention): max of the sides is the modelled time (s); F, B the
    workload's own work (moesim.workload.attention, what the cost model prices: B without the
    split-KV partials); peak: the BF16 dense peak. An XQA variant with a `<key>.mmha` sibling
    (TRT-LLM generation) times the rows that run MMHA (mmha_rows) with it. factor(variant, shape):
    the variant's measured residual R (the reader's; none: 1), on both sides. fit_sms: the SM count
    the entry was fitted at (attn_time)."""
    factor = factor or (lambda v, sh: 1.0)
    key = pick_key(family, entry, shape)
    variants = entry.get("variants") or {}
    v = variants[key] if key is not None else entry
    kv = shape.get("kv_dtype") or entry.get("dtype") or "bf16"
    kvb = dtype_bytes(kv, 2.0)
    F, B, ctas, kv_elems, split = attn_work(family, {**shape, "kernel": None}, kvb, sms)

    def sides(variant, kernel):
        r = factor(variant, shape)
        c, m, fixed = _variant_sides(
            family, {**shape, "kernel": kernel}, variant["params"], kvb, peak, bw, sms, fit_sms
        )
        return c * r, m * r, fixed * r

    c, m, fixed = sides(v, v.get("kernel"))
    mm = variants.get(f"{key}.{MMHA}") if v.get("kernel") == XQA else None
    if mm is not None:
        h = _a(shape.get("heads"))
        sel = mmha_rows(h, shape.get("groups"), shape.get("batch"), shape.get("context"), sms, kvb)
        if np.any(sel):
            c_mm, m_mm, f_mm = sides(mm, mm.get("kernel", MMHA))
            c, m, fixed = np.where(sel, c_mm, c), np.where(sel, m_mm, m), np.where(sel, f_mm, fixed)
    return c, m, fixed, F, B - split
