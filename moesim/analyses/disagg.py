"""Disaggregated serving search: prefill and decode pools chosen separately (DeepSeek's PD split).

For a workload (ISL input and OSL output tokens per request) and SLOs (TTFT, TPOT):

1. prefill sweep (phase prefill, context = ISL): TTFT = step x max(1, ISL / batch) (a prompt
   longer than the per-step token budget is chunked over several steps) + the KV transfer of one
   request; keep TTFT <= max_ttft_s, valid, fits, and the prefill NIC able to ship the KV it
   produces (tokens/s per GPU x KV bytes per token <= RDMA bandwidth); best = max input
   tokens/s per GPU.
2. decode sweep (phase decode, context = ISL + OSL / 2 by default): TPOT <= max_tpot_s, fits,
   and the KV arriving for new requests fits in the step: per step a DP group admits
   batch x a / OSL new requests (a = accepted tokens per step), each ISL x KV bytes per token on
   every attention-TP rank (MLA latent replicated; GQA sharded) over the GPU's RDMA link;
   kv_share = that time / step time must be <= 1. best = max output tokens/s per GPU.
3. rate matching: prefill serves pre / ISL requests/s per GPU, decode finishes dec / OSL, so
   P:D (GPUs) = (dec / OSL) / (pre / ISL) and the system makes dec / (1 + P:D) output tokens/s per
   GPU (both pools counted). Whole instances: the best (n_prefill, n_decode) up to max_instances.
4. aggregated comparison: the best `mixed` phase deployment over the decode axes under the same
   TTFT/TPOT targets: the engine's scheduler (`moesim.engine.scheduler`: SGLang prefill-priority
   chunked prefill, vLLM / TRT-LLM fused chunked prefill) at the decode batch as concurrency
   (closed loop), prefill tokens per pass `chunk_tokens` (default: the engine's).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields

import numpy as np

from moesim.analyses import budget as B
from moesim.analyses import verify as V
from moesim.analyses.sweep import defaults_not_given, sweep
from moesim.engine.pricing import resolve_specs
from moesim.engine.settings import Pricing
from moesim.enums import CostMode
from moesim.errors import ConfigError, is_positive_number
from moesim.metrics.memory import kv_bytes_per_token_per_gpu
from moesim.specs.study import normalize_axes
from moesim.units import jsonable

DEFAULT_PREFILL_AXES = {"tp": [1, 2, 4, 8], "ep": [8, 16, 32, 64], "batch": [2048, 4096, 8192, 16384, 32768]}
DEFAULT_DECODE_AXES = {
    "tp": [1, 2, 4, 8],
    "ep": [8, 16, 32, 64, 128, 144, 256],
    "redundant": [0, 32],
    "batch": [1, 2, 4, 8, 16, 32, 64, 128, 256],
    "mtp": [1],
    "acceptance": [0.8],
}


FIELDS = ("workload", "prefill", "decode", "ratio_prefill_per_decode_gpu", "deployment", "kv_transfer",
          "system_tokens_per_s_per_gpu", "system_total_tokens_per_s_per_gpu", "aggregated", "speedup_vs_aggregated",
          "notes", "budget", "searched", "verified")  # fmt: skip


@dataclass
class DisaggResult:
    workload: dict
    prefill: dict | None
    decode: dict | None
    ratio_prefill_per_decode_gpu: float
    deployment: dict
    kv_transfer: dict
    system_tokens_per_s_per_gpu: float
    system_total_tokens_per_s_per_gpu: float
    aggregated: dict | None
    speedup_vs_aggregated: float
    notes: list = field(default_factory=list)
    budget: dict | None = None
    searched: dict = field(default_factory=dict)
    frames: dict = field(default_factory=dict, repr=False)  # "prefill", "decode", "mixed" DataFrames
    verified: list = field(default_factory=list)  # simulated candidates (moesim.analyses.verify)

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in FIELDS}
        return jsonable(d)


def _row(df, i):
    r = df.loc[i].to_dict()
    return {k: (v.item() if isinstance(v, np.generic) else v) for k, v in r.items()}


@dataclass(frozen=True)
class DisaggOptions:
    """`disagg`'s search besides workload, targets and pricing: each pool's hardware and axes (None: `hardware`,
    the default spaces), the aggregated comparison, the instance and GPU budgets, progress, verification."""

    prefill_hardware: object = None
    decode_hardware: object = None
    prefill_axes: dict | None = None
    decode_axes: dict | None = None
    aggregated_axes: dict | None = None  # None: the decode axes
    compare_aggregated: bool = True
    max_instances: int = 64
    progress: object = None
    chunk_tokens: object = None  # aggregated: prefill tokens per pass (None: the engine's)
    total_gpus: object = None
    gpus_per_node: object = None
    verify: bool = False


OPTION_NAMES = tuple(f.name for f in fields(DisaggOptions))


@dataclass
class _Search:
    """What the steps of one `disagg` share."""

    m: object
    hp: object
    hd: object
    workload: dict
    kv: dict
    budget: tuple | None
    options: DisaggOptions
    pricing: Pricing
    set: object
    notes: list


def disagg(model="deepseek-v3", hardware="h800", *, isl, osl, max_ttft_s, max_tpot_s, set=None,
           pricing: Pricing | None = None, options: DisaggOptions | None = None, **kw) -> DisaggResult:  # fmt: skip
    """Best prefill pool + best decode pool for (ISL, OSL) under TTFT / TPOT targets (seconds).
    pricing: a `Pricing` (its fields may also be given as keywords); kw: also `DisaggOptions`' fields.
    total_gpus: at most this many GPUs in whole instances (x prefill + y decode; aggregated replicas),
    each instance counted in whole nodes of gpus_per_node (default: the hardware's NVLink domain)
    when it spans several; the result's `budget` compares the two at that size. verify: simulate the
    chosen PD pair and the aggregated best (`moesim.analyses.verify`) -> `verified`, notes."""
    pricing, kw = Pricing.take("disagg", pricing, kw, OPTION_NAMES)
    o = dataclasses.replace(options or DisaggOptions(), **kw)
    isl, osl, max_ttft_s, max_tpot_s = _positive_inputs(isl=isl, osl=osl, max_ttft_s=max_ttft_s, max_tpot_s=max_tpot_s)
    o = dataclasses.replace(o, max_instances=_max_instances(o.max_instances))
    m, hp = resolve_specs(model, o.prefill_hardware or hardware, set)
    _, hd = resolve_specs(m, o.decode_hardware or hardware, set)
    achievable = pricing.cost_mode != CostMode.ROOFLINE
    budget, axes = None, (o.prefill_axes, o.decode_axes, o.aggregated_axes)
    if o.total_gpus is not None:
        total_gpus, gpn = B.check_budget(o.total_gpus, o.gpus_per_node)
        budget = (total_gpus, gpn or hd.domain_gpus)
        axes = _budget_axes(m, *axes, total_gpus)
    workload = {"isl": isl, "osl": osl, "max_ttft_s": max_ttft_s, "max_tpot_s": max_tpot_s,
                "prefill_hardware": hp.name, "decode_hardware": hd.name, "cost_mode": pricing.cost_mode.value,
                "engine": pricing.engine.value}  # fmt: skip
    kv = _kv_figures(m, isl, min(hp.rdma_Bps(achievable), hd.rdma_Bps(achievable)))
    sr = _Search(m, hp, hd, workload, kv, budget, o, pricing, set, [])
    common = dict(pricing=pricing, set=set, progress=o.progress, fill_defaults=False)
    pre = _prefill_pool(m, hp, axes[0], isl, max_ttft_s, kv["transfer_s_per_request"], achievable, common, sr.notes)
    dec = _decode_pool(m, hd, axes[1], isl, osl, max_tpot_s, achievable, common, sr.notes)
    mix = (_aggregated_pool(m, hd, axes[2] or axes[1], (isl, osl), (max_ttft_s, max_tpot_s),
                            dict(common, chunk_tokens=o.chunk_tokens)) if o.compare_aggregated else None)  # fmt: skip
    return _result(sr, pre, dec, mix)


def _result(sr: _Search, pre, dec, mix) -> DisaggResult:
    """The best pools, rate-matched (or under the GPU budget), against the aggregated best."""
    w, notes, budget = sr.workload, sr.notes, sr.budget
    isl, osl = w["isl"], w["osl"]
    prow, drow = _best_row(pre), _best_row(dec)
    _missing_notes(notes, prow, drow, w["max_ttft_s"], w["max_tpot_s"], sr.kv["transfer_s_per_request"])
    dep = B.disagg_budget(pre, dec, isl, osl, *budget) if budget else None
    if budget:
        prow, drow = _budget_rows(pre, dec, dep, notes, budget[0])
    ratio, sys_tps, deployment = _rate_match(prow, drow, isl, osl, sr.options.max_instances, sr.kv)
    mix, agg = _aggregated_best(mix, budget, notes) if mix is not None else (None, None)
    speedup = sys_tps / agg["tokens_per_s_per_gpu"] if agg and np.isfinite(sys_tps) else float("nan")
    budget_d = None
    if budget:
        budget_d = B.budget_summary(budget, dep, agg)
        deployment = {k: v for k, v in dep.items() if not k.endswith("_index")}
        sys_tps = dep["output_tokens_per_s_per_gpu"] if dep else sys_tps
        speedup = budget_d["disagg_over_aggregated_total"]
    limits = {"tp": min(sr.hp.domain_gpus, sr.hd.domain_gpus)}
    srch = _searched(pre, dec, mix, (prow, drow, agg), notes, limits)
    vkw = dict(pricing=sr.pricing, set=sr.set, chunk_tokens=sr.options.chunk_tokens)
    verified = V.verify_disagg(sr.m, sr.hd, (prow, drow, agg), deployment, w, vkw, notes) if sr.options.verify else []
    total_tps = sys_tps * (1.0 + isl / osl) if np.isfinite(sys_tps) else float("nan")
    return DisaggResult(w, prow, drow, ratio, deployment, sr.kv, sys_tps, total_tps, agg, speedup, notes, budget_d,
                        srch, {"prefill": pre, "decode": dec, "mixed": mix}, verified)  # fmt: skip


def _budget_axes(m, prefill_axes, decode_axes, aggregated_axes, total_gpus):
    """The search spaces with axis values that alone exceed the budget removed."""
    pax = B.prune_axes(normalize_axes(prefill_axes or DEFAULT_PREFILL_AXES), total_gpus)
    if decode_axes is None:
        decode_axes = dict(DEFAULT_DECODE_AXES, mtp=[1] if m.mtp_layers else [0])
    dax = B.prune_axes(normalize_axes(decode_axes), total_gpus)
    aax = None if aggregated_axes is None else B.prune_axes(normalize_axes(aggregated_axes), total_gpus)
    return pax, dax, aax


def _missing_notes(notes, prow, drow, max_ttft_s, max_tpot_s, kv_req_s) -> None:
    if prow is None:
        notes.append(
            f"no prefill configuration meets TTFT <= {max_ttft_s * 1e3:g} ms (incl. KV transfer "
            f"{kv_req_s * 1e3:.2f} ms)"
        )
    if drow is None:
        notes.append(f"no decode configuration meets TPOT <= {max_tpot_s * 1e3:g} ms and fits")


def _budget_rows(pre, dec, dep, notes, total_gpus):
    """The prefill and decode rows of the budgeted deployment (None, None without one)."""
    if not dep:
        notes.append(f"no prefill + decode pair fits in {total_gpus} GPUs under the targets")
        return None, None
    return _row(pre, dep["prefill_index"]), _row(dec, dep["decode_index"])


def _aggregated_best(mix, budget, notes):
    """(frame, best row): the most tokens/s per GPU, or under a budget the most total tokens/s."""
    if budget:
        mix = B.apply_budget(mix, *budget)
        i = B.agg_budget(mix)
        agg = None if i is None else _row(mix, i)
    else:
        agg = _best_row(mix)
    if agg is None:
        notes.append("no aggregated (mixed) configuration meets both targets")
    return mix, agg


def _searched(pre, dec, mix, rows, notes, limits) -> dict:
    """The values each pool's sweep covered (from its frame) and edge flags (into the notes)."""
    out = {}
    names = {"prefill": {"batch": "--prefill-batch", "tp": "--prefill-tp", "ep": "--prefill-ep"},
             "decode": {"batch": "--decode-batch", "tp": "--decode-tp", "ep": "--decode-ep"}}  # fmt: skip
    names["aggregated"] = names["decode"]
    for name, df, row in zip(("prefill", "decode", "aggregated"), (pre, dec, mix), rows):
        if df is None:
            continue
        out[name] = {k: sorted(set(df[k].tolist())) for k in B.NUMERIC_AXES if k in df.columns}
        for f in B.edge_flags(df, row, flag_names=names[name], limits=limits):
            if f"{name}: {f}" not in notes:
                notes.append(f"{name}: {f}")
    return out


def _kv_figures(m, isl, link_Bps) -> dict:
    """One request's KV: bytes and the transfer time over one GPU's link (the slower pool's)."""
    kvb = float(m.kv_bytes_per_token)
    return {
        "kv_bytes_per_token": kvb,
        "bytes_per_request": isl * kvb,
        "link_bytes_per_s": link_Bps,
        "transfer_s_per_request": isl * kvb / link_Bps,  # one request's KV over one GPU's link
    }


def _positive_inputs(**values) -> list[float]:
    """The workload numbers as floats; each must be a finite number > 0."""
    for name, v in values.items():
        if not is_positive_number(v):
            raise ConfigError(f"{name}: must be a positive number; got {v!r}")
    return [float(v) for v in values.values()]


def _add_notes(notes: list, df) -> None:
    notes += [n for n in df.attrs.get("notes", []) if n not in notes]


def _prefill_pool(m, hp, axes, isl, max_ttft_s, kv_req_s, achievable, common, notes):
    """Prefill sweep (context = ISL) with TTFT incl. chunking and the KV transfer, and slo_ok."""
    pax = {**defaults_not_given(DEFAULT_PREFILL_AXES, axes), **normalize_axes(axes or {})}
    for bad in ("mtp", "acceptance", "phase"):
        pax.pop(bad, None)
    pax.setdefault("context", [isl])
    pre = sweep(m, hp, "prefill", pax, **common)
    _add_notes(notes, pre)
    kvb = float(m.kv_bytes_per_token)
    pre["prefill_ttft_s"] = pre["ttft_s"] * np.maximum(1.0, isl / pre["batch"].to_numpy(float))
    pre["kv_transfer_s"] = kv_req_s
    pre["ttft_total_s"] = pre["prefill_ttft_s"] + kv_req_s
    # one copy of each token's KV leaves the prefill group, its ranks sharing the sending
    pre["kv_send_link_util"] = pre["tokens_per_s_per_gpu"].to_numpy(float) * kvb / hp.rdma_Bps(achievable)
    pre["slo_ok"] = pre["valid"] & pre["fits"] & (pre["ttft_total_s"] <= max_ttft_s) & (pre["kv_send_link_util"] <= 1.0)
    return pre


def _decode_pool(m, hd, axes, isl, osl, max_tpot_s, achievable, common, notes):
    """Decode sweep (context = ISL + OSL / 2) with the KV arriving per step, and slo_ok."""
    dax = {**defaults_not_given(DEFAULT_DECODE_AXES, axes, m), **normalize_axes(axes or {})}
    dax.pop("phase", None)
    if (
        "mtp" not in normalize_axes(axes or {}) and not m.mtp_layers
    ):  # the default space drafts with MTP only where it exists
        dax["mtp"] = [0]
    dax.setdefault("context", [isl + osl / 2.0])
    dec = sweep(m, hd, "decode", dax, **common)
    _add_notes(notes, dec)
    acc = dec["accepted_tokens_per_step"].to_numpy(float)
    new_req_per_step = dec["batch"].to_numpy(float) * acc / osl
    kv_in_bytes = new_req_per_step * isl * kv_bytes_per_token_per_gpu(m, dec["tp"].to_numpy(float))
    dec["kv_recv_s_per_step"] = kv_in_bytes / hd.rdma_Bps(achievable)
    dec["kv_share_of_step"] = dec["kv_recv_s_per_step"] / dec["step_time_s"]
    dec["slo_ok"] = dec["valid"] & dec["fits"] & (dec["tpot_s"] <= max_tpot_s) & (dec["kv_share_of_step"] <= 1.0)
    return dec


def _aggregated_pool(m, hd, axes, lengths, targets, common):
    """The `mixed` phase (aggregated serving, closed loop at the batch) under both targets, and slo_ok."""
    (isl, osl), (max_ttft_s, max_tpot_s) = lengths, targets
    aax = {**defaults_not_given(DEFAULT_DECODE_AXES, axes, m), **normalize_axes(axes or {})}
    aax.pop("phase", None)
    aax.setdefault("context", [isl + osl / 2.0])
    mix = sweep(m, hd, "mixed", aax, isl=isl, osl=osl, **common)
    ok = mix["valid"] & mix["fits"] & (mix["tpot_s"] <= max_tpot_s) & (mix["ttft_s"] <= max_ttft_s)
    mix["slo_ok"] = ok & mix["stable"].fillna(False).astype(bool) if "stable" in mix else ok
    return mix


def _rate_match(prow, drow, isl, osl, max_instances, kv: dict):
    """P:D GPU ratio, system output tokens/s per GPU and whole instances (NaN, NaN, {} without
    both pools); adds the chosen pools' KV figures to ``kv``."""
    if not (prow and drow):
        return float("nan"), float("nan"), {}
    p_tps, d_tps = prow["tokens_per_s_per_gpu"], drow["tokens_per_s_per_gpu"]
    ratio = (d_tps / osl) / (p_tps / isl)
    sys_tps = d_tps / (1.0 + ratio)
    deployment = _instances(prow["gpus"], p_tps, drow["gpus"], d_tps, isl, osl, max_instances)
    kv.update(
        {
            "decode_kv_share_of_step": drow["kv_share_of_step"],
            "decode_kv_recv_s_per_step": drow["kv_recv_s_per_step"],
            "prefill_kv_send_link_util": prow["kv_send_link_util"],
        }
    )
    return ratio, sys_tps, deployment


def _best_row(df):
    """The slo_ok row with the most tokens/s per GPU as a plain dict, or None."""
    i = _best(df)
    return None if i is None else _row(df, i)


def _best(df):
    ok = df["slo_ok"].to_numpy(bool)
    if not ok.any():
        return None
    v = np.where(ok, df["tokens_per_s_per_gpu"].to_numpy(float), -np.inf)
    return df.index[int(np.argmax(v))]


# Largest pool searched: the instance search holds 2 x max_instances candidates per pair of pools;
# 100,000 instances is beyond any cluster built (~100k GPUs) even at one GPU per instance.
MAX_INSTANCES = 100_000


def _max_instances(v) -> int:
    """--max-instances: a whole number in [1, MAX_INSTANCES] (checked before any work)."""
    ok = not isinstance(v, bool) and isinstance(v, (int, float)) and float(v).is_integer() and 1 <= v <= MAX_INSTANCES
    if not ok:
        raise ConfigError(
            f"--max-instances (max_instances): {v!r} is out of range; allowed an integer >= 1 and <= {MAX_INSTANCES:,}"
        )
    return int(v)


def _instances(p_gpus, p_tps, d_gpus, d_tps, isl, osl, n_max):
    """Best whole-instance deployment (n_prefill, n_decode <= n_max) by output tokens/s per GPU."""
    p_req = p_gpus * p_tps / isl  # requests/s one prefill instance admits
    d_req = d_gpus * d_tps / osl  # requests/s one decode instance finishes
    n = np.arange(1, n_max + 1, dtype=float)
    # (a) n decode instances, enough prefill instances to feed them
    np_a = np.ceil(n * d_req / p_req - 1e-9)
    # (b) n prefill instances, enough decode instances to drain them
    nd_b = np.ceil(n * p_req / d_req - 1e-9)
    cand_p = np.concatenate([np_a, n])
    cand_d = np.concatenate([n, nd_b])
    keep = (cand_p <= n_max) & (cand_d <= n_max)
    cand_p, cand_d = cand_p[keep], cand_d[keep]
    if cand_p.size == 0:
        return {}
    req = np.minimum(cand_p * p_req, cand_d * d_req)
    gpus = cand_p * p_gpus + cand_d * d_gpus
    per_gpu = req * osl / gpus
    i = int(np.argmax(per_gpu))
    return {
        "prefill_instances": int(cand_p[i]),
        "decode_instances": int(cand_d[i]),
        "prefill_gpus": int(cand_p[i] * p_gpus),
        "decode_gpus": int(cand_d[i] * d_gpus),
        "requests_per_s": float(req[i]),
        "output_tokens_per_s_per_gpu": float(per_gpu[i]),
    }


__all__ = [
    "disagg",
    "DisaggOptions",
    "DisaggResult",
    "kv_bytes_per_token_per_gpu",
    "DEFAULT_PREFILL_AXES",
    "DEFAULT_DECODE_AXES",
]
