"""Kernel-time models shared by the calibration fit (moesim.calibration.fit) and the profile
reader (moesim.perf.profile). One definition, so a fitted parameter means the same thing on both
sides (collectives' alpha-beta times: moesim.perf.collectives). Everything is vectorized numpy;
nothing here reads files.

Efficiency is defined against the roofline of the kernel's own work:

    eta(shape) = T_roofline(shape) / T_model(shape)            (0 < eta <= 1)
    T_roofline = max(F / P, (B_in + B_out) / W)

with F = FLOPs, B_in = bytes read, B_out = bytes written, P = dense tensor peak of the dtype,
W = HBM bandwidth (hardware spec). The fitted model ("overlap_v1", moesim.perf.models.overlap_v1) is

    T_model = t0 + smax_q(F / (P * eta_c * u), B_in / (W * eta_m * u)) + B_out / W
    u       = 1 - exp(-x / c)      x = thread blocks (CTAs) of the kernel per SM
    smax_q(a, b) = (a^q + b^q)^(1/q): q = inf is max(a, b) (loads fully overlapped with math, as
                   GPU kernels with async copies do), q = 1 the sum (no overlap: CPU BLAS packs
                   the weights before computing); the fit picks q from {inf, 2, 1} by CV.

i.e. a main loop that is compute- or load-bound at fractions eta_c / eta_m of peak, slowed when
the kernel has too few CTAs to fill the SMs (DeepGEMM has no split-K, so small m x n leaves SMs
idle), an epilogue that writes the output without overlap, and a fixed per-kernel overhead t0
(pipeline fill, scheduling; launch overhead is *not* in t0, it is Profile.launch_s). Since
eta_c, eta_m, u <= 1 and t0 >= 0, T_model >= T_roofline, so eta is in (0, 1].

A "peak" model is a pair of constants (eta_c, eta_m) from published best-case figures; the cost
model then applies them directly: time = max(F / (P eta_c), B / (W eta_m)). A fitted model's time
is split the same way (*_sides: the max of a compute side and a memory side, each with the fixed
costs), and eta_c = (F / P) / compute side, eta_m = (B / W) / memory side (side_efficiencies): one
efficiency per bound, so an op priced on its own work never gets slower with more P or W.
"""

from __future__ import annotations

import numpy as np

from moesim.grid.core import unique_rows
from moesim.workload.attention import mla_decode_work as W_mla_decode_work
from moesim.workload.ops import matmul_work

# FlashMLA's kernel geometry, which the fitted mla_decode entries measure (DeepSeek-V3 dims:
# kv_lora_rank 512, qk_rope_head_dim 64). The workload prices a model's MLA from its own dims.
MLA_LATENT = 512
MLA_ROPE = 64
MLA_QK_DIM = MLA_LATENT + MLA_ROPE
MLA_V_DIM = MLA_LATENT

DTYPE_BYTES = {"fp8": 1.0, "fp8_block": 1.0, "bf16": 2.0, "bfloat16": 2.0, "fp16": 2.0, "fp32": 4.0, "fp4": 0.5}


def dtype_bytes(dtype, default: float = 1.0) -> float:
    if dtype is None:
        return default
    key = getattr(dtype, "value", dtype)
    return DTYPE_BYTES.get(str(key).lower(), default)


def out_bytes_for(dtype) -> float:
    """GEMM output bytes per element: FP8 GEMMs write BF16 (DeepGEMM), others keep their dtype."""
    b = dtype_bytes(dtype, 1.0)
    return 2.0 if b < 2 else b


# ---------------------------------------------------------------------------- work of a kernel
def gemm_work(m, n, k, groups=1.0, in_bytes=1.0, out_bytes=2.0, weights=None):
    """(F, B_in, B_out) of `groups` GEMMs [m, k] x [k, n] (grouped GEMM: m tokens per group).

    The workload's GEMM work (moesim.workload.ops.matmul_work) in the DeepGEMM README's byte
    convention (verified against its TFLOPS/GB/s pairs): inputs m*k + n*k per group at
    `in_bytes`, output m*n at `out_bytes`; FP8 scales are not counted (block = 0). weights: the
    weight matrices read (default: groups; routed groups: only those with >= 1 row, as the op's).
    """
    g = np.asarray(groups, float)
    rows = g * np.asarray(m, float)
    w = g if weights is None else np.asarray(weights, float)
    flops, b_w, b_a, b_out = matmul_work(
        rows, n, k, weights=w, w_bytes=in_bytes, a_bytes=in_bytes, out_bytes=out_bytes, block=0
    )
    return flops, b_a + b_w, b_out


def gemm_ctas_per_sm(m, n, groups, sms, tile_pad=None):
    """DeepGEMM-like tiling: BLOCK_M 64 for m <= 64 else 128, BLOCK_N 128; CTAs / SMs.
    tile_pad (routed groups, random counts): M tiles per group = m * tile_pad / BLOCK_M, the
    expected tile count (= ceil(m / BLOCK_M) for a deterministic m)."""
    m = np.maximum(np.asarray(m, float), 1.0)
    n = np.maximum(np.asarray(n, float), 1.0)
    g = np.maximum(np.asarray(groups, float), 1.0)
    bm = gemm_block_m(m)
    tiles = np.ceil(m / bm) if tile_pad is None else m * np.asarray(tile_pad, float) / bm
    return g * tiles * np.ceil(n / 128.0) / float(sms)


def gemm_block_m(m):
    """DeepGEMM's M tile: 64 rows for m <= 64, else 128 (as gemm_ctas_per_sm)."""
    return np.where(np.asarray(m, float) <= 64.0, 64.0, 128.0)


# ---------------------------------------------------------------------------- tiles and waves
# DeepGEMM's SM90 tile choice (deep_gemm jit_kernels/gemm.py, get_best_configs): BLOCK_M 64 when
# m <= 64, else 64 or 128; BLOCK_N from 16..128 step 8 plus 144 and 160; the fewest waves
# ceil(CTAs / SMs) win, then the fullest last wave, then the smaller tile (less padded math).
BLOCK_N_CHOICES = np.array(list(range(16, 129, 8)) + [144, 160, 192, 224, 256], float)


def gemm_tiling(m, n, groups, sms, tile_pad=None, bm_max: float = 128.0, bn_max: float = 160.0, bm_min: float = 64.0):
    """(CTAs, BLOCK_M, BLOCK_N) of `groups` GEMMs [m, k] x [k, n] under the DeepGEMM heuristic,
    vectorized (distinct (m, n, groups, pad) only). tile_pad (routed groups): M tiles per group =
    m * tile_pad / BLOCK_M (its expectation; routed_tile_padding uses the same BLOCK_M). bm_min: a
    kernel whose layout fixes BLOCK_M (DeepGEMM m-grouped contiguous: 128) gets no smaller tile."""
    m, n, g, pad = np.broadcast_arrays(
        np.maximum(np.asarray(m, float), 1.0 if tile_pad is None else 0.0),  # routed: a mean below 1 row
        np.maximum(np.asarray(n, float), 1.0),
        np.maximum(np.asarray(groups, float), 1.0),
        np.asarray(1.0 if tile_pad is None else tile_pad, float),
    )
    key = np.stack([m.ravel(), n.ravel(), g.ravel(), pad.ravel()], axis=1)
    u, inv = unique_rows(key)  # = np.unique(key, axis=0, return_inverse=True), faster
    um, un, ug, up = (u[:, i : i + 1] for i in range(4))
    bns = BLOCK_N_CHOICES[BLOCK_N_CHOICES <= bn_max][None, :]
    best = None
    for bm in [b for b in (64.0, 128.0, 256.0) if bm_min <= b <= bm_max]:
        tiles_m = np.where(up == 1.0, np.ceil(np.maximum(um, 1.0) / bm), um * up / bm)
        ctas = ug * tiles_m * np.ceil(un / bns)
        waves = np.ceil(ctas / sms)
        last = ctas - (waves - 1) * sms  # CTAs in the last wave
        # fewest waves, then fullest last wave, then least padded math (smaller tile area)
        score = waves * 1e6 - last / sms * 1e3 + bm * bns / 1e5
        score = np.where((bm > 64) & (um <= 64), np.inf, score)  # m <= 64: BLOCK_M 64 only
        # routed groups: the BLOCK_M their expected padding was computed with (one definition)
        score = np.where((up != 1.0) & (gemm_block_m(um) != bm), np.inf, score)
        j = np.argmin(score, axis=1)
        r = np.arange(len(u))
        cand = (score[r, j], ctas[r, j], np.full(len(u), bm), bns[0, j])
        if best is None:
            best = cand
        else:
            better = cand[0] < best[0]
            best = tuple(np.where(better, c, b) for c, b in zip(cand, best))
    shape = m.shape
    return tuple(v[inv.ravel()].reshape(shape) for v in best[1:])


def quant_ctas(m, k, group: float = 128.0):
    """CTAs of SGLang's FP8 input quant (sgl-kernel per_token_group_quant_8bit, sgl-project/sglang
    sgl-kernel/csrc/gemm/per_token_group_quant_8bit.cu): 16 / 8 / 4 / 2 / 1 groups of `group` elements per CTA,
    the largest dividing the m k / group groups. A fractional m (an expected row count) takes 16 per CTA."""
    m = np.asarray(m, float)
    whole = np.isclose(m, np.round(m))
    groups = np.where(whole, np.round(m), m) * np.asarray(k, float) / group
    per_cta = np.select([~whole] + [np.mod(groups, g) == 0 for g in (16, 8, 4, 2)], [16.0, 16.0, 8.0, 4.0, 2.0], 1.0)
    return groups / per_cta


def _erfc(x):
    """erfc for x >= 0, Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7); numpy only (no scipy import
    on the estimate path)."""
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return poly * np.exp(-x * x)


def _normal_sf(z):
    z = np.asarray(z, float)
    r = 0.5 * _erfc(np.abs(z) / np.sqrt(2.0))
    return np.where(z >= 0, r, 1.0 - r)


POISSON_EXACT_MAX = 50.0  # exact Poisson sums up to this mean, the normal approximation above it


def expected_tiles(m, bm):
    """E[ceil(X / bm)] for X ~ Poisson(m): the M tiles a grouped-GEMM group computes when its token
    count is random (multinomial routing: each expert's count ~ Poisson(m) for many tokens), a
    partial tile costing a whole one (tensor-core MMA on full tiles; DeepGEMM masked and contiguous
    layouts pad each group to its block). Exact sum for m <= 50, else the normal approximation with
    continuity correction: sum_j P(X > j bm) over the j near m / bm (P = 1 below, 0 above)."""
    m, bm = np.broadcast_arrays(np.asarray(m, float), np.asarray(bm, float))
    out = np.zeros(m.shape)
    small = m <= POISSON_EXACT_MAX
    if small.any():
        ms, bs = m[small], bm[small]
        x = np.arange(0.0, 4.0 * POISSON_EXACT_MAX)
        pmf = np.exp(-ms)[:, None] * np.cumprod(
            np.concatenate([np.ones((ms.size, 1)), ms[:, None] / x[None, 1:]], axis=1), axis=1
        )
        out[small] = (pmf * np.ceil(x[None, :] / bs[:, None])).sum(axis=1)
    big = ~small
    if big.any():
        mb, bb = m[big], bm[big]
        sd = np.sqrt(mb)
        lo = np.maximum(np.floor((mb - 9.0 * sd) / bb), 0.0)  # P(X > j bm) = 1 for j < lo
        width = int(np.max(np.ceil(18.0 * sd / bb))) + 2
        j = lo[:, None] + np.arange(width)[None, :]
        out[big] = lo + _normal_sf((j * bb[:, None] + 0.5 - mb[:, None]) / sd[:, None]).sum(axis=1)
    return out


def routed_tile_padding(m):
    """MMA rows computed per useful row of a routed grouped GEMM with Poisson counts of mean m
    per group: E[ceil(X / bm)] bm / m (>= 1; 1 where no tokens)."""
    m = np.asarray(m, float)
    u, inv = np.unique(m, return_inverse=True)  # a grid holds few distinct group sizes
    bm = gemm_block_m(u)
    with np.errstate(divide="ignore", invalid="ignore"):
        f = np.where(u > 0, expected_tiles(u, bm) * bm / np.maximum(u, 1e-12), 1.0)
    return np.maximum(f, 1.0)[inv].reshape(m.shape)


def mla_decode_work(batch, q_len, heads, context, kv_bytes=2.0, q_bytes=2.0, *, latent=MLA_LATENT, rope=MLA_ROPE):
    """(F, B_in, B_out) of absorbed-MLA decode attention over a latent KV cache (FlashMLA): the
    workload's formula (moesim.workload.attention.mla_decode_work) at the given dims, FlashMLA's
    by default. F = 2 * b * s_q * h * ctx * ((latent + rope) + latent); reads the KV cache and the
    queries; writes b * s_q * h * latent outputs.
    """
    flops, kv, q_in, out = W_mla_decode_work(
        batch, q_len, heads, context, latent=latent, rope=rope, kv_bytes=kv_bytes, q_bytes=q_bytes
    )
    return flops, kv + q_in, out


def mla_ctas_per_sm(batch, q_len, heads, context, sms):
    """FlashMLA tiles 64 query rows (s_q * h) per CTA and splits the KV sequence across SMs."""
    b = np.maximum(np.asarray(batch, float), 1.0)
    rows = np.maximum(np.asarray(q_len, float) * np.asarray(heads, float), 1.0)
    c = np.maximum(np.asarray(context, float), 1.0)
    return b * np.ceil(rows / 64.0) * np.ceil(c / 512.0) / float(sms)


# ---------------------------------------------------------------------------- time models
def smax(a, b, q=np.inf):
    """(a^q + b^q)^(1/q) for a, b >= 0; q = inf -> max(a, b), q = 1 -> a + b."""
    if not np.isfinite(q):
        return np.maximum(a, b)
    if q == 1:
        return a + b
    hi = np.maximum(a, b)
    safe = np.where(hi > 0, hi, 1.0)
    return hi * ((a / safe) ** q + (b / safe) ** q) ** (1.0 / q)


def smax_sides(a, b, q=np.inf):
    """(compute side, memory side) of smax_q(a, b) for a compute term a and a memory term b: each
    term combined with the smaller of the two, smax_q(a, min(a, b)) and smax_q(b, min(a, b)). Their
    max is smax_q(a, b) (the larger term's side), the larger side is the larger term's (the bound),
    and each is non-decreasing in a and in b, so neither side grows when a peak or a bandwidth does.
    q = inf: (a, b)."""
    lo = np.minimum(a, b)
    return smax(a, lo, q), smax(b, lo, q)


def side_efficiencies(flops, nbytes, compute_s, memory_s, peak, bw, fixed_s=0.0):
    """(eta_c, eta_m) of a kernel whose model time is max(compute_s, memory_s), both holding the fixed
    cost fixed_s: eta_c = (F / P) / (compute_s - fixed_s) on the FLOP time, eta_m = (B / W) /
    (memory_s - fixed_s) on the byte time, each in (0, 1]. The cost model's fixed_s +
    max(F_op / (P eta_c), B_op / (W eta_m)) of an op whose work (F_op, B_op) is the kernel's is then
    the model time; an op with other work scales each side's work by its own ratio (F_op / F,
    B_op / B: properties of the shape, the fixed cost unscaled), so it never gets slower with more
    P or W."""
    t_c = np.asarray(flops, float) / peak
    t_m = np.asarray(nbytes, float) / bw
    fixed_s = np.asarray(fixed_s, float)
    return efficiency_from_times(t_c, compute_s - fixed_s), efficiency_from_times(t_m, memory_s - fixed_s)


def efficiency_from_times(t_roof, t_model):
    """eta = roofline / model, clipped to (0, 1]; 1 where there is no work at all."""
    t_roof = np.asarray(t_roof, float)
    t_model = np.asarray(t_model, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        eta = np.where(t_model > 0, t_roof / t_model, 1.0)
    eta = np.where(t_roof > 0, eta, 1.0)
    return np.clip(eta, 1e-9, 1.0)
