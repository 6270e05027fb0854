"""Statistics of a simulated run: the summary a serving benchmark prints. The per-request table for
``--out`` and the time-series figure are in `moesim.report.sim_outputs` (report layer).

Definitions follow the benchmark clients (each rule names its source):

* TTFT = first token - send; E2E = last token - send; TPOT = (E2E - TTFT) / (output tokens - 1),
  left out for one-token outputs (SGLang python/sglang/benchmark/metrics.py ``do_calculate_metrics``;
  vLLM vllm/benchmarks/serve.py ``calculate_metrics``).
* ITL: the pooled gaps between streamed tokens (``RequestLog.itl_s``), each sample counted
  ``itl_weight`` times (weights 1 when absent); bench_serving pools ``outputs[i].itl`` the same way.
* Percentiles: numpy's default linear interpolation, as both tools call ``np.percentile``; the
  weighted ITL percentile is the same quantity on the samples repeated by their (integer) weights.
* Window (throughputs): from the first measured send to the last measured finish -- GenAI-Perf's
  benchmark duration (genai_perf/profile_data_parser/llm_profile_data_parser.py: max last response
  - min request timestamp). bench_serving / vllm bench serve time from just before their first send
  (after the warm-up) to the end of ``asyncio.gather``: the same window, except that vLLM since
  PR #21108 (2025-07) also counts its first request's inter-arrival wait. ``duration_s`` overrides it.
* Goodput: completed requests per second that meet every SLO given (TTFT, TPOT, E2E; a request
  meets one when its value is <= the SLO), TPOT counted as 0 for one-token outputs -- vLLM
  vllm/benchmarks/serve.py ``calculate_metrics`` (--goodput ttft:ms tpot:ms e2el:ms, "request_goodput").
* Concurrency: sum of E2E / window (SGLang metrics.py ``concurrency``).

Warm-up requests (``RequestLog.warmup``) are left out of every figure; requests that did not
finish (a non-finite ``finish_s``) are counted as ``unfinished`` and left out too. ITL samples are
taken as the simulator pooled them (the log does not say which request a gap belongs to).
"""

from __future__ import annotations

import numpy as np

from moesim.errors import ConfigError, check_number
from moesim.simulate.requests import RequestLog

PERCENTILES = (50, 90, 99)


def weighted_percentile(values, q, weights=None) -> np.ndarray | float:
    """``np.percentile(np.repeat(values, weights), q)`` (linear interpolation) without repeating:
    exact for integer weights, the natural extension for fractional ones. NaN values are dropped;
    NaN when nothing is left. ``q`` may be a scalar or an array (percent)."""
    x = np.asarray(values, float).ravel()
    w = np.ones_like(x) if weights is None else np.asarray(weights, float).ravel()
    if w.shape != x.shape:
        raise ConfigError(f"itl_weight: {w.size} weights for {x.size} samples; allowed one weight per sample")
    keep = np.isfinite(x) & (w > 0)
    x, w = x[keep], w[keep]
    qa = np.asarray(q, float)
    if x.size == 0:
        return np.full(qa.shape, np.nan) if qa.ndim else float("nan")
    o = np.argsort(x, kind="stable")
    x, cw = x[o], np.cumsum(w[o])
    h = (cw[-1] - 1.0) * qa / 100.0 if cw[-1] > 1 else np.zeros_like(qa)  # rank in the repeated sample
    lo = np.floor(h)

    def at(rank):  # the value at 0-based rank in the repeated sample
        return x[np.minimum(np.searchsorted(cw, rank, side="right"), x.size - 1)]

    r = at(lo) + (h - lo) * (at(lo + 1) - at(lo))
    return r if qa.ndim else float(r)


def _dist(prefix: str, x, weights=None) -> dict:
    x = np.asarray(x, float)
    w = None if weights is None else np.asarray(weights, float)
    keep = np.isfinite(x) if w is None else np.isfinite(x) & (w > 0)
    out = {}
    if not keep.any():
        mean = float("nan")
    elif w is None:
        mean = float(x[keep].mean())
    else:
        mean = float(np.sum(x[keep] * w[keep]) / np.sum(w[keep]))
    out[f"{prefix}_mean_s"] = mean
    ps = weighted_percentile(x, np.asarray(PERCENTILES, float), w)
    for p, v in zip(PERCENTILES, np.atleast_1d(ps)):
        out[f"{prefix}_p{p}_s"] = float(v)
    return out


def summarize(
    log: RequestLog,
    *,
    slo_ttft_s=None,
    slo_tpot_s=None,
    slo_e2e_s=None,
    duration_s=None,
) -> dict:
    """One flat dict (SI units in the key names; definitions in the module docstring):

    counts: ``requests`` (all), ``warmup``, ``unfinished``, ``completed`` (measured and finished),
    ``good_completed``; ``duration_s`` (the window), ``requests_per_s``, ``goodput_requests_per_s``,
    ``input_tokens_per_s``, ``output_tokens_per_s``, ``total_tokens_per_s``, ``concurrency_mean``;
    ``{ttft,tpot,itl,e2e}_{mean,p50,p90,p99}_s``; ``input_tokens_total``, ``output_tokens_total``,
    ``cached_tokens_total``, ``prefix_hit_frac`` (cached / input tokens); ``preemptions_total``,
    ``requests_preempted``; the SLOs used (``slo_*_s``, None when not given). Latencies are NaN and
    rates 0 when nothing completed."""
    slos = {
        "slo_ttft_s": check_number("--slo-ttft", slo_ttft_s, lo=0, lo_open=True, allow_none=True),
        "slo_tpot_s": check_number("--slo-tpot", slo_tpot_s, lo=0, lo_open=True, allow_none=True),
        "slo_e2e_s": check_number("--slo-e2e", slo_e2e_s, lo=0, lo_open=True, allow_none=True),
    }
    dur_given = check_number("--duration", duration_s, lo=0, lo_open=True, allow_none=True)
    sent = np.asarray(log.sent_s, float)
    first = np.asarray(log.first_token_s, float)
    fin = np.asarray(log.finish_s, float)
    n_all = sent.size
    warm = np.zeros(n_all, bool) if log.warmup is None else np.asarray(log.warmup, bool)
    measured = ~warm
    done = measured & np.isfinite(fin) & np.isfinite(first)
    inp = np.asarray(log.input_tokens, np.int64)
    outp = np.asarray(log.output_tokens, np.int64)

    ttft = (first - sent)[done]
    e2e = (fin - sent)[done]
    n_out = outp[done].astype(float)
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(n_out > 1, (e2e - ttft) / (n_out - 1), np.nan)  # bench_serving: only output_len > 1
    completed = int(done.sum())

    if dur_given is not None:
        dur = dur_given
    elif completed:
        dur = float(fin[done].max() - sent[done].min())
    else:
        dur = float("nan")
    rate_ok = completed > 0 and np.isfinite(dur) and dur > 0

    def per_s(total: float) -> float:
        return float(total / dur) if rate_ok else 0.0

    good_n = _good_count(ttft, tpot, e2e, n_out, slos)
    in_tot, out_tot = int(inp[done].sum()), int(outp[done].sum())
    res = {
        "requests": int(n_all),
        "warmup": int(warm.sum()),
        "unfinished": int((measured & ~done).sum()),
        "completed": completed,
        "good_completed": good_n,
        "duration_s": dur,
        "requests_per_s": per_s(completed),
        "goodput_requests_per_s": per_s(good_n),
        "input_tokens_per_s": per_s(in_tot),
        "output_tokens_per_s": per_s(out_tot),
        "total_tokens_per_s": per_s(in_tot + out_tot),
        "concurrency_mean": per_s(float(e2e.sum())),
    }
    res |= _latencies(log, ttft, tpot, e2e)
    res |= _token_totals(log, done, measured, in_tot, out_tot)
    return res | slos


def _good_count(ttft, tpot, e2e, n_out, slos: dict) -> int:
    """Completed requests that meet every SLO given (vLLM serve.py: good when slo >= value)."""
    good = np.ones(ttft.size, bool)
    if slos["slo_ttft_s"] is not None:
        good &= ttft <= slos["slo_ttft_s"]
    if slos["slo_tpot_s"] is not None:
        good &= np.where(n_out > 1, tpot, 0.0) <= slos["slo_tpot_s"]  # serve.py: tpot = 0 when output_len <= 1
    if slos["slo_e2e_s"] is not None:
        good &= e2e <= slos["slo_e2e_s"]
    return int(good.sum())


def _latencies(log: RequestLog, ttft, tpot, e2e) -> dict:
    """``{ttft,tpot,itl,e2e}_{mean,p50,p90,p99}_s`` (ITL pooled, weighted by ``itl_weight``)."""
    res = _dist("ttft", ttft)
    res |= _dist("tpot", tpot)
    itl = np.asarray(log.itl_s, float)
    w = np.asarray(log.itl_weight, float) if np.asarray(log.itl_weight).size else None
    res |= _dist("itl", itl, w)
    res |= _dist("e2e", e2e)
    return res


def _token_totals(log: RequestLog, done, measured, in_tot: int, out_tot: int) -> dict:
    """Token totals of the completed requests, prefix hits, and preemptions of the measured ones."""
    cached_tot = int(np.asarray(log.cached_tokens, np.int64)[done].sum())
    pre = np.asarray(log.preemptions, np.int64)
    return {
        "input_tokens_total": in_tot,
        "output_tokens_total": out_tot,
        "cached_tokens_total": cached_tot,
        "prefix_hit_frac": cached_tot / in_tot if in_tot else 0.0,
        "preemptions_total": int(pre[measured].sum()),
        "requests_preempted": int((pre[measured] > 0).sum()),
    }


__all__ = ["summarize", "weighted_percentile", "PERCENTILES"]
