"""Request streams for the simulator: the benchmark clients (closed loop, open loop); the trace readers
(`read_trace`, `mooncake_prefixes`) live in `moesim.simulate.traces` and are re-exported here.

Every function returns a `moesim.simulate.requests.Workload` (SI units: seconds, tokens). Draws use
one ``numpy.random.default_rng(seed)`` (input lengths, then output lengths, then inter-arrival gaps),
so a seed gives the same workload on every machine. The *distributions* follow the tools cited
below; the tools' own random streams (``np.random`` / ``random`` globals) are not reproduced.

Length rules (``tool=``), each with its source:

``"sglang"``  SGLang ``bench_serving --dataset-name random``: input and output lengths each uniform
    over the integers [max(int(n * r), 1), n] (python/sglang/benchmark/datasets/common.py
    ``compute_random_lens``, 2025-26 main; python/sglang/bench_serving.py ``sample_random_requests``
    before the split, where the output bound had no max(., 1)). r = --random-range-ratio in [0, 1];
    r = 1 fixes the length; SGLang's default r = 0 draws from [1, n] (mean ~ n / 2).
``"vllm"``  vLLM ``vllm bench serve --dataset-name random`` since PR #16126 (merged 2025-04-08,
    v0.8.4+): uniform over [floor(n * (1 - r)), ceil(n * (1 + r))], r in [0, 1), output low bound
    raised to 1; an input window reaching 0 is an error (vllm/benchmarks/datasets/random.py
    ``RandomDataset.get_sampling_params`` / ``sample``, 2025-26 main; v0.8.4-v0.10 used int() for
    both bounds, one token narrower at the top). vLLM's default r = 0 fixes the length.
``"vllm-legacy"``  vLLM before v0.8.4 (benchmarks/benchmark_serving.py ``sample_random_requests``
    and benchmarks/benchmark_dataset.py ``RandomDataset``): uniform over [int(n * r), n],
    r in [0, 1], default 1 (fixed). A 0-token draw (r * n < 1) is raised to 1 here.
``"genai-perf"``  NVIDIA GenAI-Perf synthetic inputs: input = max(0, int(N(mean, stddev)))
    (genai_perf/inputs/retrievers/synthetic_prompt_generator.py ``create_synthetic_prompt``;
    a 0 is raised to 1 here), output ``max_tokens`` = int(max(1, N(mean, stddev)))
    (genai_perf/inputs/converters/base_converter.py, ``sample_bounded_normal(lower=1)``);
    mean = isl / osl, stddev = ``isl_stddev`` / ``osl_stddev`` (--synthetic-input-tokens-stddev,
    --output-tokens-stddev; default 0). No range ratio.

``range_ratio=None`` (the default) means fixed lengths under every rule (sglang / vllm-legacy r = 1,
vllm r = 0): ``isl=1024`` then means 1024 tokens, whichever tool is named.

Warm-up: ``warmup`` extra requests are put *before* the measured ones (the Workload serves them and
the statistics leave them out). SGLang sends its --warmup-requests (default 1) as copies of the
first request with output min(osl, 32) and waits for them before the run (bench_serving.py
``benchmark``); GenAI-Perf's --warmup-request-count and vLLM's --num-warmups draw them like the
rest. Here: tool "sglang" -> copies of the first measured request with output min(osl, 32); other
tools -> drawn by the same rule. In a closed loop they take client slots at t = 0 with the others
(the simulator has no separate warm-up phase); in an open loop they lead the arrival process.
"""

from __future__ import annotations

import math

import numpy as np

from moesim.errors import ConfigError, check_number, key_text
from moesim.simulate.requests import Workload

# the row cap and the integer check are shared with the trace readers and live there (traces may not import
# this module, which re-exports read_trace / mooncake_prefixes: no import cycle)
from moesim.simulate.traces import MAX_REQUESTS, _int, mooncake_prefixes, read_trace

TOOLS = ("sglang", "vllm", "vllm-legacy", "genai-perf")
# closed_loop's length keywords and their defaults (open_loop takes them as **lengths)
LENGTH_KEYWORDS = {"range_ratio": None, "tool": "sglang", "warmup": 0, "seed": 0, "isl_stddev": 0.0, "osl_stddev": 0.0}
SGLANG_WARMUP_OUTPUT_TOKENS = 32  # bench_serving.py benchmark(): warm-up output_len=min(output_len, 32)


# --------------------------------------------------------------------------------------------------
# validation


def _tool(tool) -> str:
    if tool not in TOOLS:
        raise ConfigError(f"--tool: {key_text(tool)!s} is not known; allowed: {', '.join(TOOLS)}")
    return tool


def _lengths_args(num_prompts, isl, osl, tool, range_ratio, isl_stddev, osl_stddev, warmup, seed):
    n = _int("--num-prompts", num_prompts, 1, MAX_REQUESTS)
    isl = _int("--isl", isl, 1)
    osl = _int("--osl", osl, 1)
    tool = _tool(tool)
    warmup = _int("--warmup", warmup, 0, MAX_REQUESTS - n)
    seed = _int("--seed", seed, 0)
    if tool == "genai-perf":
        if range_ratio is not None:
            raise ConfigError("--range-ratio: not used by --tool genai-perf; allowed: --isl-stddev / --osl-stddev")
        isl_sd = check_number("--isl-stddev", isl_stddev, lo=0)
        osl_sd = check_number("--osl-stddev", osl_stddev, lo=0)
        return n, isl, osl, tool, None, (isl_sd, osl_sd), warmup, seed
    for flag, v in (("--isl-stddev", isl_stddev), ("--osl-stddev", osl_stddev)):
        if v not in (None, 0, 0.0):
            raise ConfigError(f"{flag}: only used by --tool genai-perf; allowed with --tool {tool}: --range-ratio")
    if range_ratio is None:
        r = 0.0 if tool == "vllm" else 1.0  # fixed lengths (see the module docstring)
    elif tool == "vllm":
        # vllm/benchmarks/datasets/random.py get_sampling_params: "range_ratio must be in [0, 1)"
        r = check_number("--range-ratio", range_ratio, lo=0, hi=1)
        if r >= 1:
            raise ConfigError(f"--range-ratio: {r:g} is out of range for --tool vllm; allowed a number >= 0 and < 1")
    else:
        r = check_number("--range-ratio", range_ratio, lo=0, hi=1)
    if tool == "vllm" and math.floor(isl * (1 - r)) < 1:
        # vllm/benchmarks/datasets/random.py sample(): minimum total input tokens must be >= 1
        raise ConfigError(
            f"--range-ratio: {r:g} with --isl {isl} lets vLLM's rule draw 0-token prompts; "
            "allowed: floor(isl * (1 - range_ratio)) >= 1"
        )
    return n, isl, osl, tool, r, None, warmup, seed


# --------------------------------------------------------------------------------------------------
# length rules


def _uniform(rng, lo: int, hi: int, n: int) -> np.ndarray:
    return rng.integers(lo, hi + 1, size=n, dtype=np.int64)


def _draw_lengths(rng, n: int, isl: int, osl: int, tool: str, r, sd) -> tuple[np.ndarray, np.ndarray]:
    """(input, output) token counts, int64 >= 1, per the tool's rule (module docstring)."""
    if tool == "sglang":
        # python/sglang/benchmark/datasets/common.py compute_random_lens: randint(max(int(n*r), 1), n + 1)
        return _uniform(rng, max(int(isl * r), 1), isl, n), _uniform(rng, max(int(osl * r), 1), osl, n)
    if tool == "vllm-legacy":
        # benchmarks/benchmark_serving.py (vLLM <= v0.8.3): randint(int(n*r), n + 1); 0 raised to 1 here
        return (
            np.maximum(_uniform(rng, int(isl * r), isl, n), 1),
            np.maximum(_uniform(rng, int(osl * r), osl, n), 1),
        )
    if tool == "vllm":
        # vllm/benchmarks/datasets/random.py get_sampling_params: [floor(n(1-r)), ceil(n(1+r))], output low >= 1
        i_lo, i_hi = math.floor(isl * (1 - r)), math.ceil(isl * (1 + r))
        o_lo, o_hi = max(math.floor(osl * (1 - r)), 1), max(math.ceil(osl * (1 + r)), 1)
        return _uniform(rng, i_lo, i_hi, n), _uniform(rng, o_lo, o_hi, n)
    # genai-perf: input max(0, int(gauss)) (synthetic_prompt_generator.py; 0 -> 1 here),
    # output int(max(1, gauss)) (converters/base_converter.py); int() truncates toward zero
    isl_sd, osl_sd = sd
    x = np.trunc(rng.normal(isl, isl_sd, size=n)) if isl_sd > 0 else np.full(n, float(isl))
    y = np.trunc(np.maximum(1.0, rng.normal(osl, osl_sd, size=n))) if osl_sd > 0 else np.full(n, float(osl))
    return np.maximum(x, 1).astype(np.int64), np.maximum(y, 1).astype(np.int64)


def _with_warmup(rng, n, isl, osl, tool, r, sd, warmup) -> tuple[np.ndarray, np.ndarray]:
    """Measured lengths with ``warmup`` requests in front (module docstring: Warm-up)."""
    inp, out = _draw_lengths(rng, n, isl, osl, tool, r, sd)
    if warmup == 0:
        return inp, out
    if tool == "sglang":
        # bench_serving.py benchmark(): warm-up = input_requests[0] with output_len=min(output_len, 32)
        w_in = np.full(warmup, inp[0], np.int64)
        w_out = np.full(warmup, min(int(out[0]), SGLANG_WARMUP_OUTPUT_TOKENS), np.int64)
    else:
        w_in, w_out = _draw_lengths(rng, warmup, isl, osl, tool, r, sd)
    return np.concatenate([w_in, inp]), np.concatenate([w_out, out])


def _rule_text(tool: str, r, sd) -> str:
    if tool == "genai-perf":
        return f"genai-perf normal lengths (stddev {sd[0]:g} / {sd[1]:g} tokens)"
    return f"{tool} random lengths (range ratio {r:g})"


# --------------------------------------------------------------------------------------------------
# clients


def closed_loop(
    concurrency,
    num_prompts,
    isl,
    osl,
    *,
    range_ratio=None,
    tool: str = "sglang",
    warmup=0,
    seed=0,
    isl_stddev=0.0,
    osl_stddev=0.0,
) -> Workload:
    """``concurrency`` clients, each sending its next request when its previous one finishes.

    This is bench_serving / ``vllm bench serve`` with --request-rate inf and --max-concurrency C
    (every request is released at t = 0 and an asyncio.Semaphore(C) lets C run: bench_serving.py
    ``benchmark`` / vllm/benchmarks/serve.py ``limited_request_func``), and GenAI-Perf's
    --concurrency C mode (perf_analyzer keeps C requests outstanding). Lengths: module docstring."""
    c = _int("--concurrency", concurrency, 1, MAX_REQUESTS)
    n, isl, osl, tool, r, sd, warmup, seed = _lengths_args(
        num_prompts, isl, osl, tool, range_ratio, isl_stddev, osl_stddev, warmup, seed
    )
    rng = np.random.default_rng(seed)
    inp, out = _with_warmup(rng, n, isl, osl, tool, r, sd, warmup)
    label = (
        f"closed loop: {c} clients, {n} requests"
        + (f" (+{warmup} warm-up)" if warmup else "")
        + f", ISL {isl} / OSL {osl} tokens, {_rule_text(tool, r, sd)}, seed {seed}"
    )
    return Workload(input_tokens=inp, output_tokens=out, concurrency=c, warmup=warmup, label=label)


def _arrivals(rng, n: int, rate: float, burstiness: float, tool: str) -> np.ndarray:
    """Send times (s) of ``n`` requests at ``rate`` req/s.

    Gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate, burstiness 1 = Poisson,
    burstiness inf = constant 1/rate (vllm/benchmarks/serve.py ``get_request``; the gamma form since
    vLLM PR #8692, 2024-10; the inf case since issue #26940, 2025-10). rate inf = all at t = 0.
    tool "vllm" (serve.py since PR #21108, 2025-07): every request waits its gap (the first one too)
    and the cumulative times are rescaled so the last request is sent at exactly n / rate.
    Other tools (SGLang bench_serving.py ``get_request``, vLLM benchmark_serving.py before #21108,
    GenAI-Perf): the first request at t = 0, then the cumulative gaps, unscaled."""
    if math.isinf(rate):
        return np.zeros(n)
    if math.isinf(burstiness):
        gaps = np.full(n, 1.0 / rate)
    else:
        gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=n)
    if tool == "vllm":
        t = np.cumsum(gaps)
        return t * ((n / rate) / t[-1]) if t[-1] > 0 else t
    return np.concatenate([[0.0], np.cumsum(gaps[:-1])])


def open_loop(rate, num_prompts, isl, osl, *, burstiness=1.0, max_concurrency=None, **lengths) -> Workload:
    """Requests sent at ``rate`` req/s (``float('inf')``: all at t = 0), inter-arrival gaps as in
    `_arrivals`; ``max_concurrency`` caps the requests in flight (bench_serving's --max-concurrency
    semaphore: a request past the cap waits for a slot). Warm-up requests lead the arrival process.
    lengths: `closed_loop`'s length keywords (range_ratio, tool, warmup, seed, isl_stddev, osl_stddev)."""
    unknown = sorted(set(lengths) - set(LENGTH_KEYWORDS))
    if unknown:
        raise ConfigError(f"open_loop: unknown keyword(s) {', '.join(unknown)}; allowed rate, num_prompts, isl, osl, "
                          f"burstiness, max_concurrency, {', '.join(LENGTH_KEYWORDS)}")  # fmt: skip
    length = {**LENGTH_KEYWORDS, **lengths}
    rate = math.inf if _is_inf(rate) else check_number("--rate", rate, lo=0, lo_open=True)
    burst = (
        math.inf
        if _is_inf(burstiness)
        else check_number("--burstiness", burstiness, lo=0, lo_open=True)  # serve.py: "A positive burstiness"
    )
    cap = None if max_concurrency is None else _int("--max-concurrency", max_concurrency, 1, MAX_REQUESTS)
    n, isl, osl, tool, r, sd, warmup, seed = _lengths_args(
        num_prompts,
        isl,
        osl,
        length["tool"],
        length["range_ratio"],
        length["isl_stddev"],
        length["osl_stddev"],
        length["warmup"],
        length["seed"],
    )
    rng = np.random.default_rng(seed)
    inp, out = _with_warmup(rng, n, isl, osl, tool, r, sd, warmup)
    t = _arrivals(rng, n + warmup, rate, burst, tool)
    kind = "Poisson" if burst == 1 else ("constant gaps" if math.isinf(burst) else f"gamma (burstiness {burst:g})")
    label = (
        f"open loop: {'all at t=0' if math.isinf(rate) else f'{rate:g} req/s {kind}'}"
        + (f", max {cap} in flight" if cap else "")
        + f", {n} requests"
        + (f" (+{warmup} warm-up)" if warmup else "")
        + f", ISL {isl} / OSL {osl} tokens, {_rule_text(tool, r, sd)}, seed {seed}"
    )
    return Workload(input_tokens=inp, output_tokens=out, arrival_s=t, concurrency=cap, warmup=warmup, label=label)


def _is_inf(v) -> bool:
    try:
        return not isinstance(v, bool) and math.isinf(float(v)) and float(v) > 0
    except (TypeError, ValueError, OverflowError):
        return False


__all__ = ["closed_loop", "open_loop", "read_trace", "mooncake_prefixes", "TOOLS", "MAX_REQUESTS"]
