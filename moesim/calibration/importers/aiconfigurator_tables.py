"""aiconfigurator perf tables -> moesim measurement rows: one mapper per table (columns, units, filters).

Every mapper takes the table as a pandas frame and the import context and returns (rows frame in
moesim.calibration.records.COLUMNS, {reason: rows not written}). Units: aiconfigurator `latency` is
in milliseconds, DeepEP `*_us` columns in microseconds; `time_s` is seconds, rounded to 4 significant
digits (0.1 % worst-case resolution, below the run-to-run spread of a kernel timing, which is a few
%; it keeps the shipped files small). The semantics of each column were read from the collectors in
ai-dynamo/aiconfigurator (collector/*) and the sdk of aiconfigurator-core; the module docstring of
moesim.calibration.importers.aiconfigurator lists every column dropped and why.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from moesim.calibration.records import COLUMNS

# Their dtype names -> ours (records' dtype column); anything else is kept verbatim.
DTYPES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "fp8_block": "fp8_block", "fp8": "fp8", "int8": "int8"}
ELEM_BYTES = {"fp16": 2, "bf16": 2, "int8": 1, "fp8": 1}  # nccl_dtype / allreduce_dtype element sizes
KEEP_DTYPES = ("fp8_block", "bf16")  # GEMM and MoE dtypes imported (size budget; see the README section)
BALANCED = ("balanced", "uniform")  # MoE routing distributions kept; skewed ones are moesim.balance's job
SKEWED = "skewed routing: expert skew is modelled by moesim.balance"
# Size trims of the shipped files (Ctx.trim; `--all-shapes` turns them off): attention head_dim 128
# (every MHA/GQA model in models/ uses it) and GEMM 64 <= n, k <= 16384 (larger ones sit on the
# plateau; 32 is no layer's width).
TRIM_HEAD_DIM, TRIM_GEMM_NK = 128, (64, 16384)
NCCL_OPS = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter"}
NCCL_OPS["alltoall"] = "all_to_all"


@dataclass(frozen=True)
class Ctx:
    """Where a table came from: written into every row's gpu, source and date."""

    system: str  # aiconfigurator system (h200_sxm)
    gpu: str  # moesim GPU name (h200)
    engine: str  # sglang | trtllm | vllm | nccl
    version: str  # engine (or NCCL) version folder the table was read from
    table: str  # table name without .parquet
    pkg: str  # aiconfigurator-core version
    gpus_per_node: int
    date: str = ""
    trim: bool = True  # the size trims above (off: every shape of the kept dtypes)
    folder: str = ""  # the version folder the table was read from (a mapper may read a sibling table)


def seconds(values, scale: float) -> np.ndarray:
    """Times in seconds (values x scale), 4 significant digits."""
    return np.array([float(f"{v * scale:.4g}") for v in np.asarray(values, dtype=float)])


def dtypes(col) -> pd.Series:
    s = pd.Series(col, dtype=object).astype(str)
    return s.map(lambda x: DTYPES.get(x, x))


def rows(df: pd.DataFrame, ctx: Ctx, kernel: str, **cols) -> pd.DataFrame:
    """A records-schema frame for `df`'s rows: `cols` (Series, arrays or scalars) + provenance columns."""
    n = len(df)
    out = pd.DataFrame(index=range(n), columns=COLUMNS, dtype=object).fillna("")
    src = df["kernel_source"].astype(str).to_numpy() if "kernel_source" in df else np.full(n, "")
    base = f"aiconfigurator-core {ctx.pkg} {ctx.system} {ctx.engine} {ctx.version} {ctx.table}"
    prov = {
        "kernel": kernel,
        "backend": src,
        "gpu": ctx.gpu,
        "device": df["device"].astype(str).to_numpy() if "device" in df else "",
        "lib_versions": _lib_versions(df),
        "date": ctx.date,
        "source": np.char.add(base + " ", src.astype(str)) if n else base,
    }
    for c, v in {**prov, **cols}.items():
        out[c] = v.to_numpy() if isinstance(v, pd.Series) else v
    return out


def _lib_versions(df: pd.DataFrame):
    if "framework" not in df or "version" not in df:
        return ""
    return (df["framework"].astype(str) + " " + df["version"].astype(str)).to_numpy()


def keep(df: pd.DataFrame, mask, reason: str, dropped: dict) -> pd.DataFrame:
    """Rows where mask holds; the others are counted under `reason` (not written)."""
    mask = np.asarray(mask, dtype=bool)
    if (~mask).any():
        dropped[reason] = dropped.get(reason, 0) + int((~mask).sum())
    return df[mask].reset_index(drop=True)


def gemm(df, ctx):
    """gemm_perf: one GEMM (m x k) @ (k x n); fp8_block and bf16 only."""
    dropped: dict = {}
    d = keep(df, dtypes(df["gemm_dtype"]).isin(KEEP_DTYPES), "dtype not imported (per-tensor fp8, fp4, ...)", dropped)
    if ctx.trim:
        lo, hi = TRIM_GEMM_NK
        ok = d["n"].between(lo, hi) & d["k"].between(lo, hi)
        d = keep(d, ok, "n or k outside 64..16384 (size trim)", dropped)
    t = seconds(d["latency"], 1e-3)
    out = rows(d, ctx, "gemm", m=d["m"], n=d["n"], k=d["k"], dtype=dtypes(d["gemm_dtype"]), time_s=t)
    return mark_host_bound(out), dropped


# A GEMM of m <= 64 rows on n, k <= 256 moves < 0.2 MB and < 9 MFLOP: on any Hopper/Blackwell GPU the
# kernel takes a launch (2-5 us; the SGLang / TRT-LLM tables of the same GPUs: 2.5-4 us). A backend
# whose such rows take > 20 us (vLLM 0.24's block-FP8 linear ops on H200: 55-160 us) times its eager
# Python op (quantization, scale layout and dispatch on the host), not GPU time; under CUDA graphs,
# where engines serve decode, that host time is absent. Those groups are kept, excluded, with the reason.
HOST_FLOOR_S = 20e-6
HOST_BOUND = (
    "host-bound timing: the group's tiny shapes (m <= 64, n, k <= 256) take {floor_us:.0f} us, > 20 us, where "
    "the GPU kernel takes a launch (2-5 us): the table timed the engine's eager op on the host, not the kernel"
)


def mark_host_bound(out: pd.DataFrame) -> pd.DataFrame:
    """Exclude every (backend, dtype) group of a GEMM table whose tiny shapes are host-bound (HOST_BOUND)."""
    num = {c: pd.to_numeric(out[c], errors="coerce") for c in ("m", "n", "k", "time_s")}
    tiny = (num["m"] <= 64) & (num["n"] <= 256) & (num["k"] <= 256) & (num["time_s"] > 0)
    for (backend, dtype), g in out[tiny].groupby(["backend", "dtype"]):
        floor = float(num["time_s"][g.index].median())
        if floor > HOST_FLOOR_S:
            sel = (out["backend"] == backend) & (out["dtype"] == dtype) & (out["exclude"] == "")
            out.loc[sel, "exclude"] = HOST_BOUND.format(floor_us=floor * 1e6)
    return out


def moe(df, ctx, layout: str):
    """moe_perf (fused), wideep_generation_moe_perf (masked), wideep_context_moe_perf (contiguous)."""
    dropped: dict = {}
    d = keep(
        df, dtypes(df["moe_dtype"]).isin(KEEP_DTYPES), "dtype not imported (per-tensor fp8, fp4, int4...)", dropped
    )
    d = keep(d, d["distribution"].astype(str).isin(BALANCED), SKEWED, dropped)
    cols = dict(tokens=d["num_tokens"], hidden=d["hidden_size"], n=d["inter_size"], experts=d["num_experts"])
    cols.update(topk=d["topk"], ep=d["moe_ep_size"], tp=d["moe_tp_size"], dtype=dtypes(d["moe_dtype"]))
    cols.update(layout=layout, note=d["distribution"], time_s=seconds(d["latency"], 1e-3))
    return rows(d, ctx, "moe", **cols), dropped


def _context(d):
    # KV length the query attends to: isl + step (generation: isl = 1, step = tokens already cached,
    # collector/*/collect_mla.py; context: step = 0, the causal prefill of isl tokens)
    return d["isl"] + d["step"]


def mla(df, ctx, phase: str, module: bool = False):
    """generation_mla_perf / context_mla_perf (the attention kernel alone) and the MLA module tables."""
    d = df.reset_index(drop=True)
    q_len = 1 if phase == "generation" else d["isl"]
    cols = dict(batch=d["batch_size"], q_len=q_len, heads=d["num_heads"], context=_context(d))
    cols.update(dtype=dtypes(d["kv_cache_dtype"]), tp=d["tp_size"], time_s=seconds(d["latency"], 1e-3))
    if not module:
        return rows(d, ctx, "mla_decode" if phase == "generation" else "mla_prefill", mode=phase, **cols), {}
    note = ("model " + d["model"].astype(str)) if "model" in d else ""
    out = rows(d, ctx, "mla_module", op=phase, note=note, **cols)
    out["exclude"] = "module table: projections + attention"
    return out, {}


def attention(df, ctx, phase: str):
    """context_attention_perf / generation_attention_perf (MHA / GQA, paged KV)."""
    dropped: dict = {}
    d = keep(df, df["attn_dtype"].astype(str) == "bfloat16", "FP8 attention compute (attn_dtype fp8)", dropped)
    d = keep(d, d["window_size"] == 0, "sliding-window attention (window_size > 0)", dropped)
    d = keep(d, d["beam_width"] == 1, "beam search (beam_width > 1)", dropped)
    if ctx.trim:
        d = keep(d, d["head_dim"] == TRIM_HEAD_DIM, "head_dim != 128 (size trim)", dropped)
    q_len = 1 if phase == "generation" else d["isl"]
    cols = dict(batch=d["batch_size"], q_len=q_len, heads=d["num_heads"], groups=d["num_key_value_heads"])
    cols.update(k=d["head_dim"], context=_context(d), dtype=dtypes(d["kv_cache_dtype"]))
    return rows(d, ctx, "attention", mode=phase, time_s=seconds(d["latency"], 1e-3), **cols), dropped


def bmm(df, ctx):
    """mla_bmm_perf: the absorbed-MLA per-head BMMs (mla_gen_pre / mla_gen_post)."""
    d = df.reset_index(drop=True)
    op = d["op_name"].astype(str).str.replace("mla_gen_", "", regex=False)
    cols = dict(op=op, m=d["num_tokens"], heads=d["num_heads"], dtype=dtypes(d["bmm_dtype"]))
    return rows(d, ctx, "bmm", time_s=seconds(d["latency"], 1e-3), **cols), {}


# SGLang's scale_matrix rows time a PyTorch eager reference, out.copy_((x / scale).clamp(..).to(fp8)):
# four unfused elementwise kernels (collector/sglang/collect_computescale.py, sglang 0.5.14), not the
# one fused per-token-group quant kernel SGLang runs before a block-FP8 GEMM; its compute_scale rows
# are sgl_per_token_quant_fp8 minus that reference, clamped at 0 (hence mostly 0). Kept, not fitted.
SGLANG_EAGER_QUANT = (
    "torch-eager reference quant ((x / scale).clamp().to(fp8) + copy_: four unfused PyTorch kernels), "
    "not the fused per-token-group quant kernel SGLang runs"
)


# vLLM's computescale rows (kernel_source "dynamic_per_token_scaled_fp8_quant_minus_static_scaled_fp8_quant",
# collector/vllm/collect_computescale.py) are max(0, t_dynamic - t_static): ops.scaled_fp8_quant per token
# minus per tensor. The dynamic per-token kernel is ONE kernel (csrc/quantization/w8a8/fp8/common.cu,
# dynamic_per_token_scaled_fp8_quant_kernel_strided: one CTA per token, a block-reduced amax over the row,
# then a quant pass re-reading that row; writes FP8 + one fp32 scale per token), so the difference times
# no kernel (it is the extra latency of one fused kernel over another) and carries the noise of both.
# The row is turned back into the dynamic kernel's time: the difference plus the static kernel's time at
# the same (m, k), the `<b>` rows of scale_matrix_perf in the same folder (the collector times both at
# once; the sum is the dynamic timing, up to the static kernel's run-to-run spread when the two tables
# came from separate runs). Rows the collector clamped at 0 (dynamic <= static) or without a static
# partner cannot be recovered: kept, excluded. (TRT-LLM's computescale rows are also dynamic minus static,
# but its dynamic per-tensor quant runs a separate amax-reduction kernel: the difference is that kernel.)
MINUS = "_minus_"
NOT_RECOVERABLE = "difference clamped at 0 or no static partner: the dynamic kernel's time is not recoverable"
UNDIFFERENCED = "time = computescale_perf ({diff}) + scale_matrix_perf {b} at the same (m, k)"


def undifference(d: pd.DataFrame, ctx: Ctx):
    """(rows, note per row, lost mask): `<a>_minus_<b>` rows as kernel a's times (see MINUS)."""
    notes, lost = np.full(len(d), "", dtype=object), np.zeros(len(d), dtype=bool)
    src = d["kernel_source"].astype(str) if "kernel_source" in d else pd.Series([""] * len(d))
    diff = src.str.contains(MINUS).to_numpy()
    if not diff.any():
        return d, notes, lost
    d = d.copy()
    static = _static_times(ctx)
    for name in sorted(set(src[diff])):
        a, b = name.split(MINUS, 1)
        sel = (src == name).to_numpy()
        partner = pd.Series(static.get(b, {}), dtype=float)
        keys = list(zip(d.loc[sel, "m"].astype(int), d.loc[sel, "k"].astype(int)))
        t_static = partner.reindex(pd.MultiIndex.from_tuples(keys)).to_numpy() if len(partner) else np.nan
        t_diff = d.loc[sel, "latency"].to_numpy(dtype=float)
        lost[sel] = ~(t_diff > 0) | ~np.isfinite(t_static)
        d.loc[sel, "latency"] = t_diff + t_static
        d.loc[sel, "kernel_source"], d.loc[sel, "op_name"] = a, a.removesuffix("_scaled_fp8_quant")
        notes[sel] = UNDIFFERENCED.format(diff=name, b=b)
    return d, notes, lost


def _static_times(ctx: Ctx) -> dict:
    """{kernel_source: {(m, k): latency}} of scale_matrix_perf beside the table ({} when absent)."""
    f = Path(ctx.folder) / "scale_matrix_perf.parquet" if ctx.folder else None
    if f is None or not f.is_file():
        return {}
    s = pd.read_parquet(f)
    g = s.groupby([s["kernel_source"].astype(str), s["m"].astype(int), s["k"].astype(int)])["latency"].median()
    return {src: g.xs(src, level=0).to_dict() for src in g.index.get_level_values(0).unique()}


def quant(df, ctx):
    """scale_matrix_perf (FP8 activation quant pass) / computescale_perf (scale computation; a
    difference of two timings named `<a>_minus_<b>` becomes kernel a's own rows: undifference)."""
    d, notes, lost = undifference(df.reset_index(drop=True), ctx)
    out = rows(d, ctx, "quant", op=d["op_name"], m=d["m"], k=d["k"], dtype=dtypes(d["quant_dtype"]), note=notes)
    out["time_s"] = seconds(d["latency"], 1e-3)
    zero = out["time_s"].to_numpy(dtype=float) <= 0
    out.loc[zero, "exclude"] = "zero latency recorded (scale computation fused into the quant kernel)"
    out.loc[lost, "exclude"] = NOT_RECOVERABLE
    out.loc[zero | lost, "time_s"] = np.nan  # a time is > 0 or absent (moesim.calibration.fit.data)
    if ctx.engine == "sglang":
        out.loc[out["op"].astype(str) == "scale_matrix", "exclude"] = SGLANG_EAGER_QUANT
    return out, {}


def _deepep_pair(d, ctx, mode: str, ep, extra: dict, times: dict, notes: dict | None = None):
    """One dispatch and one combine row per table row."""
    out = []
    for op in ("dispatch", "combine"):
        cols = dict(mode=mode, op=op, tokens=d["num_token"], hidden=d["hidden_size"], topk=d["num_topk"])
        cols.update(experts=d["num_experts"], ep=ep, gpus_per_node=ctx.gpus_per_node, time_s=times[op], **extra[op])
        if notes:
            cols["note"] = notes[op]
        out.append(rows(d, ctx, "deepep", **cols))
    return pd.concat(out, ignore_index=True)


def deepep_ll(df, ctx):
    """wideep_deepep_ll_perf: low-latency dispatch / combine; time = avg_t_us; GBps = their logical GB/s."""
    d = df.reset_index(drop=True)
    ep = d["node_num"] * ctx.gpus_per_node
    times = {op: seconds(d[f"{op}_avg_t_us"], 1e-6) for op in ("dispatch", "combine")}
    extra = {op: {"GBps": d[f"{op}_bandwidth_gbps"]} for op in ("dispatch", "combine")}
    return _deepep_pair(d, ctx, "ll", ep, extra, times), {}


def deepep_normal(df, ctx):
    """wideep_deepep_normal_perf: normal (high-throughput) kernels; time = transmit + notify (note: split)."""
    d = df.reset_index(drop=True)
    ep = d["node_num"] * ctx.gpus_per_node
    times, extra, notes = {}, {}, {}
    for op in ("dispatch", "combine"):
        tx, nt = d[f"{op}_transmit_us"], d[f"{op}_notify_us"]
        times[op] = seconds(tx + nt, 1e-6)
        extra[op] = {"sms": d[f"{op}_sms"]}
        notes[op] = "transmit_us " + tx.map(lambda v: f"{v:.7g}") + "; notify_us " + nt.map(lambda v: f"{v:.7g}")
    return _deepep_pair(d, ctx, "normal", ep, extra, times, notes), {}


def moe_a2a(df, ctx):
    """moe_a2a_perf (TRT-LLM / vLLM DeepEP): one row per phase; latency is in us (= transmit + notify)."""
    d = df.reset_index(drop=True)
    backend = d["comm_backend"].astype(str)
    mode = np.where(backend.str.endswith("_ll"), "ll", np.where(backend.str.endswith("_ht"), "normal", backend))
    dt = dtypes(d["comm_dtype"]).replace("default", "")
    note = "comm_backend " + backend + "; transmit_us " + d["transmit_us"].map(lambda v: f"{v:.7g}")
    note = note + "; notify_us " + d["notify_us"].map(lambda v: f"{v:.7g}")
    cols = dict(mode=mode, op=d["phase"], tokens=d["num_tokens"], hidden=d["hidden_size"], topk=d["topk"])
    cols.update(experts=d["num_experts"], ep=d["ep_size"], gpus_per_node=ctx.gpus_per_node, dtype=dt, note=note)
    out = rows(d, ctx, "deepep", time_s=seconds(d["latency"], 1e-6), **cols)
    out["sms"] = d["sms"].where(d["sms"] > 0, "").to_numpy()  # 0 = the LL kernels (no SM count chosen)
    return mark_host_bound_ll(out), {}


# DeepEP's low-latency kernels at <= 8 tokens per rank take 10-20 us on one node or NVLink domain
# (the same kernels timed by SGLang's wideep_deepep_ll tables: H200 10.5-11.4 us, GB200 16 us, B200
# 20 us). A table whose LL phase takes > 40 us there (twice the slowest of those floors; vLLM 0.24's
# moe_a2a rows: 50-92 us, flat in tokens and hidden size) times the engine's eager prepare / finalize
# on the host (collector/wideep/vllm/collect_moe_a2a.py: no CUDA graph), not the kernel; LL serves
# decode under CUDA graphs, where that host time is absent. Those rows are kept, excluded, with the reason.
HOST_FLOOR_LL_S = 40e-6
HOST_BOUND_LL = (
    "host-bound timing: the table's low-latency {op} takes {floor_us:.0f} us at <= 8 tokens per rank, > 40 us, "
    "where DeepEP's LL kernel takes 10-20 us: the table timed the engine's eager op on the host, not the kernel"
)


def mark_host_bound_ll(out: pd.DataFrame) -> pd.DataFrame:
    """Exclude every (backend, LL op) group of a DeepEP table whose tiny rows are host-bound (HOST_BOUND_LL)."""
    num = {c: pd.to_numeric(out[c], errors="coerce") for c in ("tokens", "time_s")}
    tiny = (out["mode"] == "ll") & (num["tokens"] <= 8) & (num["time_s"] > 0)
    for (backend, op), g in out[tiny].groupby(["backend", "op"]):
        floor = float(num["time_s"][g.index].median())
        if floor > HOST_FLOOR_LL_S:
            sel = (out["backend"] == backend) & (out["mode"] == "ll") & (out["op"] == op) & (out["exclude"] == "")
            out.loc[sel, "exclude"] = HOST_BOUND_LL.format(op=op, floor_us=floor * 1e6)
    return out


def nccl(df, ctx):
    """nccl_perf (nccl-tests): message_size is ELEMENTS (collect_nccl.py: size // bytes_per_element)."""
    dropped: dict = {}
    d = keep(df, df["op_name"].astype(str).isin(list(NCCL_OPS)), "collective moesim does not price", dropped)
    dt = dtypes(d["nccl_dtype"])
    nbytes = d["message_size"] * dt.map(ELEM_BYTES).astype(int)
    kernel = "nccl_" + d["op_name"].astype(str).map(NCCL_OPS)
    out = rows(d, ctx, "", ep=d["num_gpus"], bytes=nbytes, dtype=dt, time_s=seconds(d["latency"], 1e-3))
    out["kernel"] = kernel.to_numpy()
    return out, dropped


def custom_allreduce(df, ctx):
    """custom_allreduce_perf: the engine's own all-reduce; message_size is ELEMENTS of allreduce_dtype."""
    d = df.reset_index(drop=True)
    dt = dtypes(d["allreduce_dtype"])
    nbytes = d["message_size"] * dt.map(ELEM_BYTES).astype(int)
    out = rows(d, ctx, "nccl_all_reduce", ep=d["num_gpus"], bytes=nbytes, dtype=dt)
    out["time_s"] = seconds(d["latency"], 1e-3)
    eager = d["kernel_source"].astype(str).str.lower().str.endswith("_eager").to_numpy()
    out.loc[eager, "exclude"] = "eager launch (engines run the custom all-reduce inside CUDA graphs)"
    return out, {}


# table name -> mapper(df, ctx) -> (rows, dropped)
MAPPERS = {
    "gemm_perf": gemm,
    "moe_perf": lambda df, ctx: moe(df, ctx, "fused"),
    "wideep_generation_moe_perf": lambda df, ctx: moe(df, ctx, "masked"),
    "wideep_context_moe_perf": lambda df, ctx: moe(df, ctx, "contiguous"),
    "generation_mla_perf": lambda df, ctx: mla(df, ctx, "generation"),
    "context_mla_perf": lambda df, ctx: mla(df, ctx, "context"),
    "wideep_generation_mla_perf": lambda df, ctx: mla(df, ctx, "generation", module=True),
    "wideep_context_mla_perf": lambda df, ctx: mla(df, ctx, "context", module=True),
    "mla_generation_module_perf": lambda df, ctx: mla(df, ctx, "generation", module=True),
    "mla_context_module_perf": lambda df, ctx: mla(df, ctx, "context", module=True),
    "context_attention_perf": lambda df, ctx: attention(df, ctx, "context"),
    "generation_attention_perf": lambda df, ctx: attention(df, ctx, "generation"),
    "mla_bmm_perf": bmm,
    "scale_matrix_perf": quant,
    "computescale_perf": quant,
    "wideep_deepep_ll_perf": deepep_ll,
    "wideep_deepep_normal_perf": deepep_normal,
    "moe_a2a_perf": moe_a2a,
    "nccl_perf": nccl,
    "custom_allreduce_perf": custom_allreduce,
}
