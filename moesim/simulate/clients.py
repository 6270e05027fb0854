"""Request streams for the simulator: the benchmark clients (closed loop, open loop) and trace readers.

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
from pathlib import Path

import numpy as np

from moesim.errors import ConfigError, check_number, key_text
from moesim.simulate.requests import Workload

TOOLS = ("sglang", "vllm", "vllm-legacy", "genai-perf")
MAX_REQUESTS = 10_000_000  # generated requests and trace rows (memory: ~10 arrays of 8 B each per request)
MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash_ids block (kvcache-ai/Mooncake FAST25-release/traces README;
#                              GenAI-Perf's trace replay uses block_size=512 for them too)
SGLANG_WARMUP_OUTPUT_TOKENS = 32  # bench_serving.py benchmark(): warm-up output_len=min(output_len, 32)


# --------------------------------------------------------------------------------------------------
# validation


def _int(flag: str, v, lo: int, hi: int | None = None) -> int:
    return check_number(flag, v, lo=lo, hi=hi, integer=True, error=ConfigError)


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


def open_loop(
    rate,
    num_prompts,
    isl,
    osl,
    *,
    burstiness=1.0,
    range_ratio=None,
    max_concurrency=None,
    tool: str = "sglang",
    warmup=0,
    seed=0,
    isl_stddev=0.0,
    osl_stddev=0.0,
) -> Workload:
    """Requests sent at ``rate`` req/s (``float('inf')``: all at t = 0), inter-arrival gaps as in
    `_arrivals`; ``max_concurrency`` caps the requests in flight (bench_serving's --max-concurrency
    semaphore: a request past the cap waits for a slot). Warm-up requests lead the arrival process."""
    rate = math.inf if _is_inf(rate) else check_number("--rate", rate, lo=0, lo_open=True)
    burst = (
        math.inf
        if _is_inf(burstiness)
        else check_number("--burstiness", burstiness, lo=0, lo_open=True)  # serve.py: "A positive burstiness"
    )
    cap = None if max_concurrency is None else _int("--max-concurrency", max_concurrency, 1, MAX_REQUESTS)
    n, isl, osl, tool, r, sd, warmup, seed = _lengths_args(
        num_prompts, isl, osl, tool, range_ratio, isl_stddev, osl_stddev, warmup, seed
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


# --------------------------------------------------------------------------------------------------
# traces

#: accepted column names of the documented generic format (CSV or JSONL)
TRACE_TIME_COLUMNS = {"arrival_s": 1.0, "timestamp_s": 1.0, "time_s": 1.0, "arrival_ms": 1e-3, "timestamp_ms": 1e-3}
TRACE_INPUT_COLUMNS = ("input_tokens", "prompt_tokens")
TRACE_OUTPUT_COLUMNS = ("output_tokens", "completion_tokens")


def read_trace(path, *, time_scale=1.0, max_requests=None) -> Workload:
    """Read a request trace (CSV or JSONL, by content) into a Workload; one ConfigError line naming the
    file, the 1-based line, the field and what is allowed for any bad row.

    Formats (recognised by their columns):

    * generic: an arrival time column -- ``arrival_s`` / ``timestamp_s`` / ``time_s`` (seconds) or
      ``arrival_ms`` / ``timestamp_ms`` (milliseconds) --, ``input_tokens`` (or ``prompt_tokens``),
      ``output_tokens`` (or ``completion_tokens``), optional ``prefix_id`` (int, -1 = none) and
      ``prefix_tokens`` (shared-prefix tokens, <= input_tokens; with a prefix_id).
    * Mooncake (kvcache-ai/Mooncake FAST25-release traces, JSONL): ``timestamp`` (ms since the first
      request), ``input_length``, ``output_length``, optional ``hash_ids`` (one id per 512-token
      block; equal ids = equal content). Prefix sharing: see `mooncake_prefixes`.
    * Azure LLM inference traces 2023 / 2024 (Azure/AzurePublicDataset AzureLLMInferenceDataset2023.md,
      ...2024.md, CSV): ``TIMESTAMP`` (date-time text, e.g. ``2023-11-16 18:15:46.6805900``; an offset
      such as ``+00:00`` is read as UTC), ``ContextTokens``, ``GeneratedTokens``.

    Times are shifted so the first request is sent at t = 0 and multiplied by ``time_scale``
    (> 1 replays slower, like SGLang's --mooncake-slowdown-factor in benchmark/datasets/mooncake.py).
    Rows out of time order are sorted stably by time (SGLang's Mooncake replay sorts too) and the
    label says how many moved. ``max_requests`` keeps the first N rows of the file, before sorting
    (as SGLang's MooncakeDataset.load does); a file of more than 10,000,000 rows needs it.
    UTF-8 with or without BOM, LF or CRLF line ends; blank lines are skipped."""
    path = Path(path)
    scale = check_number("--time-scale", time_scale, lo=0, lo_open=True)
    cap = MAX_REQUESTS if max_requests is None else _int("--max-requests", max_requests, 1, MAX_REQUESTS)
    name = path.name
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError as e:
        raise ConfigError(
            f"--trace: cannot read {str(path)!r} ({e.strerror or e}); allowed: a readable CSV or JSONL file"
        ) from None
    text_head = head.decode("utf-8-sig", errors="replace").lstrip()
    if not text_head:
        raise ConfigError(f"--trace {name}: the file is empty; allowed: a CSV header or JSONL rows")
    if text_head.startswith("{"):
        df, lines = _read_jsonl(path, cap, max_requests is None)
        fmt = "JSONL"
    else:
        df, lines = _read_csv(path, cap, max_requests is None)
        fmt = "CSV"
    if len(df) == 0:
        raise ConfigError(f"--trace {name}: no rows; allowed: at least one request")
    cols = set(df.columns)
    where = lambda i, field: f"--trace {name} line {int(lines[i])} {field}"  # noqa: E731
    prefix_id = prefix_tokens = None
    if {"timestamp", "input_length", "output_length"} <= cols:
        fmt = "Mooncake"
        t_s = _numbers(df["timestamp"], "timestamp", where, lo=0, what="milliseconds >= 0") * 1e-3
        inp = _tokens(df["input_length"], "input_length", where)
        out = _tokens(df["output_length"], "output_length", where)
    elif {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        fmt = "Azure"
        t_s = _datetimes(df["TIMESTAMP"], "TIMESTAMP", where)
        inp = _tokens(df["ContextTokens"], "ContextTokens", where)
        out = _tokens(df["GeneratedTokens"], "GeneratedTokens", where)
    else:
        fmt = f"generic {fmt}"
        tcol = next((c for c in TRACE_TIME_COLUMNS if c in cols), None)
        icol = next((c for c in TRACE_INPUT_COLUMNS if c in cols), None)
        ocol = next((c for c in TRACE_OUTPUT_COLUMNS if c in cols), None)
        missing = [
            what
            for what, c in (
                ("an arrival time (" + " / ".join(TRACE_TIME_COLUMNS) + ")", tcol),
                ("input_tokens", icol),
                ("output_tokens", ocol),
            )
            if c is None
        ]
        if missing:
            shown = ", ".join(key_text(c) for c in list(df.columns)[:8])
            raise ConfigError(
                f"--trace {name}: missing column {'; '.join(missing)} (has: {shown}); allowed: the generic "
                "columns, Mooncake (timestamp, input_length, output_length) or Azure (TIMESTAMP, ContextTokens, "
                "GeneratedTokens)"
            )
        unit = "seconds" if TRACE_TIME_COLUMNS[tcol] == 1.0 else "milliseconds"
        t_s = _numbers(df[tcol], tcol, where, lo=0, what=f"{unit} >= 0") * TRACE_TIME_COLUMNS[tcol]
        inp = _tokens(df[icol], icol, where)
        out = _tokens(df[ocol], ocol, where)
        if "prefix_tokens" in cols and "prefix_id" not in cols:
            raise ConfigError(f"--trace {name}: prefix_tokens needs a prefix_id column; allowed: both or neither")
        if "prefix_id" in cols:
            prefix_id = _numbers(df["prefix_id"], "prefix_id", where, lo=-1, integer=True, what="an integer >= -1")
            prefix_id = prefix_id.astype(np.int64)
            if "prefix_tokens" in cols:
                prefix_tokens = _numbers(
                    df["prefix_tokens"], "prefix_tokens", where, lo=0, integer=True, what="an integer >= 0"
                ).astype(np.int64)
                bad = np.flatnonzero((prefix_tokens > inp) | ((prefix_id < 0) & (prefix_tokens > 0)))
                if bad.size:
                    i = bad[0]
                    raise ConfigError(
                        f"{where(i, 'prefix_tokens')}: {prefix_tokens[i]} with prefix_id {prefix_id[i]} and "
                        f"{inp[i]} input tokens; allowed 0..input_tokens, and 0 when prefix_id is -1"
                    )
            else:
                prefix_tokens = np.zeros(len(df), np.int64)
                if (prefix_id >= 0).any():
                    raise ConfigError(
                        f"--trace {name}: prefix_id needs a prefix_tokens column; allowed: both or neither"
                    )
    order = np.argsort(t_s, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
    if fmt == "Mooncake" and "hash_ids" in cols:
        prefix_id, prefix_tokens = mooncake_prefixes(df["hash_ids"].to_numpy(), inp, where)
    inp, out, t_s = inp[order], out[order], t_s[order]
    if prefix_id is not None:
        prefix_id, prefix_tokens = prefix_id[order], prefix_tokens[order]
    arrival = (t_s - t_s[0]) * scale
    label = (
        f"trace {name} ({fmt}): {inp.size} requests over {arrival[-1]:.6g} s"
        + (f", time scale {scale:g}" if scale != 1 else "")
        + (f", first {cap} rows" if max_requests is not None else "")
        + (f", {moved} rows sorted into time order" if moved else "")
    )
    return Workload(
        input_tokens=inp,
        output_tokens=out,
        arrival_s=arrival,
        prefix_id=prefix_id,
        prefix_tokens=prefix_tokens,
        label=label,
    )


def _too_many(name: str, cap: int):
    return ConfigError(
        f"--trace {name}: more than {cap:,} rows; allowed at most {cap:,} (pass --max-requests N to read the first N)"
    )


def _read_csv(path: Path, cap: int, check_cap: bool):
    """-> (frame, 1-based line of each row). Blank lines are dropped without shifting line numbers."""
    import pandas as pd  # lazy: `moesim --help` must not import pandas

    try:
        df = pd.read_csv(
            path,
            encoding="utf-8-sig",
            skip_blank_lines=False,
            dtype=str,
            nrows=cap + 1 if check_cap else cap,
            keep_default_na=False,
        )
    except pd.errors.EmptyDataError:
        raise ConfigError(f"--trace {path.name}: the file is empty; allowed: a CSV header and rows") from None
    except (pd.errors.ParserError, UnicodeDecodeError) as e:
        raise ConfigError(
            f"--trace {path.name}: not a readable CSV ({str(e).splitlines()[0]}); allowed: UTF-8 CSV"
        ) from None
    df.columns = [str(c).strip() for c in df.columns]
    if check_cap and len(df) > cap:
        raise _too_many(path.name, cap)
    lines = np.arange(len(df), dtype=np.int64) + 2  # line 1 = header
    blank = (df == "").all(axis=1).to_numpy() if len(df.columns) else np.zeros(len(df), bool)
    if blank.any():
        df, lines = df.loc[~blank].reset_index(drop=True), lines[~blank]
    return df, lines


def _read_jsonl(path: Path, cap: int, check_cap: bool):
    """-> (frame, 1-based line of each row). Reads at most cap (+1) lines; blank lines are skipped."""
    import io
    import itertools

    import pandas as pd  # lazy: `moesim --help` must not import pandas

    with open(path, encoding="utf-8-sig", errors="strict", newline=None) as f:
        try:
            raw = list(itertools.islice(f, 2 * cap + 2))  # C-level line reads; blank lines counted in
        except UnicodeDecodeError:
            raise ConfigError(f"--trace {path.name}: not UTF-8 text; allowed: UTF-8 JSONL") from None
    arr = pd.Series(raw, dtype=object).str.strip().to_numpy(object)
    keep = np.flatnonzero(arr != "")
    if check_cap and keep.size > cap:
        raise _too_many(path.name, cap)
    keep = keep[:cap]
    lines = keep + 1
    body = "\n".join(arr[keep].tolist())
    try:
        # no dtype or date guessing ("timestamp" would become a datetime); pandas 3 folds
        # convert_dates into dtype=False and deprecates the keyword
        dates = {} if int(pd.__version__.split(".")[0]) >= 3 else {"convert_dates": False}
        df = pd.read_json(io.StringIO(body), lines=True, orient="records", dtype=False, **dates)
    except ValueError:
        df = None
    if df is None:
        raise _first_bad_json_line(path.name, lines, arr[keep])
    if len(df) != keep.size:
        raise ConfigError(f"--trace {path.name}: not readable as JSONL; allowed: one JSON object per line")
    df.columns = [str(c) for c in df.columns]
    return df, lines


def _first_bad_json_line(name: str, lines, rows) -> ConfigError:
    """The error for the first line that is not a JSON object (error path only: a loop is fine)."""
    import json

    for ln, text in zip(lines, rows):
        try:
            obj = json.loads(text)
        except ValueError as e:
            return ConfigError(f"--trace {name} line {ln}: not JSON ({e.msg}); allowed: one JSON object per line")
        if not isinstance(obj, dict):
            return ConfigError(f"--trace {name} line {ln}: not a JSON object; allowed: one JSON object per line")
    return ConfigError(f"--trace {name}: not readable as JSONL; allowed: one JSON object per line")


def _numbers(col, field: str, where, *, lo: float, what: str, integer: bool = False) -> np.ndarray:
    """The column as float64, or one ConfigError naming the first bad row (missing, non-numeric,
    non-finite, below ``lo``, or not an integer when ``integer``)."""
    import pandas as pd  # lazy

    s = col
    if s.dtype == bool:
        raise ConfigError(f"{where(0, field)}: {bool(col.iloc[0])} is not a number; allowed {what}")
    if s.dtype == object:
        types = s.map(type)
        is_bool = types.isin([bool, np.bool_]).to_numpy()
        if is_bool.any():
            i = int(np.flatnonzero(is_bool)[0])
            raise ConfigError(f"{where(i, field)}: {bool(col.iloc[i])} is not a number; allowed {what}")
        is_str = types.isin([str]).to_numpy()
        if is_str.any():
            s = s.copy()
            s[is_str] = s[is_str].str.strip().replace("", np.nan)
    x = pd.to_numeric(s, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
    bad = ~np.isfinite(x) | (x < lo)
    if integer:
        bad |= np.isfinite(x) & (x != np.round(x))
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        v = col.iloc[i]
        if v is None or (isinstance(v, float) and math.isnan(v)) or (isinstance(v, str) and not v.strip()):
            reason = "missing"
        elif not np.isfinite(x[i]) and np.isnan(x[i]):
            reason = f"{key_text(v)!r} is not a number"
        elif not np.isfinite(x[i]):
            reason = "must be finite"
        elif x[i] < lo:
            reason = f"{x[i]:g} is out of range"
        else:
            reason = f"{x[i]:g} is not an integer"
        raise ConfigError(f"{where(i, field)}: {reason}; allowed {what}")
    return x


def _tokens(col, field: str, where) -> np.ndarray:
    return _numbers(col, field, where, lo=1, integer=True, what="an integer >= 1").astype(np.int64)


def _datetimes(col, field: str, where) -> np.ndarray:
    """Date-time text -> seconds (float64) since the epoch; timezone offsets are read as UTC."""
    import pandas as pd  # lazy

    s = col.astype(str).str.strip()
    t = pd.to_datetime(s, format="ISO8601", utc=True, errors="coerce")
    bad = t.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(
            f"{where(i, field)}: {key_text(col.iloc[i])!r} is not a date-time; allowed ISO 8601 text such as "
            "2023-11-16 18:15:46.6805900"
        )
    ns = t.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    return (ns - ns.min()).astype(float) * 1e-9


def mooncake_prefixes(hash_ids, input_tokens, where=None) -> tuple[np.ndarray, np.ndarray]:
    """Shared prefixes from Mooncake ``hash_ids`` -> (prefix_id, prefix_tokens), one per request.

    A Mooncake block id names a 512-token block *and everything before it* (ids are handed out in
    order of first appearance and requests that share a prefix share its leading ids: the FAST25
    README, and dynamo's benchmarks/data_generator README on the format). So the prefix a request
    shares is its longest leading run of blocks whose ids occur in at least one *other* request of
    the trace (so the result does not depend on the order of the rows). prefix_tokens = run * 512,
    capped at input_tokens; prefix_id = the id of the run's last block (equal ids <=> the same
    prefix); -1 / 0 when the first block is not shared. The first request that carries a prefix has
    it too (it fills the cache; the simulator's cache model decides hits and misses).
    Nested prefixes (A shares 2 blocks with B and 5 with C) keep only the longest one per request:
    B's prefix id differs from A's, so a cache keyed on prefix_id does not see B reuse A's first
    2 blocks (it undercounts hits; a block-level radix cache would need the whole list).
    ``where(i, field)`` names row i in errors. Vectorized over the flattened ids (pandas explode)."""
    import pandas as pd  # lazy: `moesim --help` must not import pandas

    name = where or (lambda i, field: f"{field} of request {i + 1}")
    s = pd.Series(list(hash_ids), dtype=object)
    n = len(s)
    kinds = s.map(type)
    is_list = kinds.isin([list, tuple, np.ndarray]).to_numpy()
    bad = ~is_list & ~s.isna().to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ConfigError(f"{name(i, 'hash_ids')}: {key_text(s.iloc[i])!r} is not a list; allowed a list of integers")
    lens = np.zeros(n, np.int64)
    lens[is_list] = s[is_list].map(len).to_numpy(np.int64)
    prefix_id = np.full(n, -1, np.int64)
    prefix_tokens = np.zeros(n, np.int64)
    if lens.sum() == 0:
        return prefix_id, prefix_tokens
    ex = s[lens > 0].explode()  # index = request
    req = ex.index.to_numpy(np.int64)
    etypes = ex.map(type)
    num = pd.to_numeric(ex.where(~etypes.isin([bool, np.bool_])), errors="coerce").to_numpy(float)
    bad = ~np.isfinite(num) | (num != np.round(num))
    if bad.any():
        i = int(req[np.flatnonzero(bad)[0]])
        raise ConfigError(f"{name(i, 'hash_ids')}: not a list of integers; allowed a list of integers")
    flat = ex.to_numpy().astype(np.int64)
    total = flat.size
    starts = np.cumsum(lens) - lens
    pos = np.arange(total) - starts[req]
    # distinct requests per id: sort by (id, request), drop repeats of the same pair, count per id
    o = np.lexsort((req, flat))
    f_s, r_s = flat[o], req[o]
    first_pair = np.ones(total, bool)
    first_pair[1:] = (f_s[1:] != f_s[:-1]) | (r_s[1:] != r_s[:-1])
    _, inv = np.unique(f_s, return_inverse=True)
    n_req = np.bincount(inv, weights=first_pair)
    shared = np.empty(total, bool)
    shared[o] = n_req[inv] >= 2
    # leading run: the first position per request that is not shared (else the whole list)
    run = lens.copy()
    ns = np.flatnonzero(~shared)
    if ns.size:
        r_ns, first = np.unique(req[ns], return_index=True)
        run[r_ns] = pos[ns[first]]
    has = run > 0
    prefix_id[has] = flat[starts[has] + run[has] - 1]
    prefix_tokens[has] = np.minimum(run[has] * MOONCAKE_BLOCK_TOKENS, np.asarray(input_tokens, np.int64)[has])
    return prefix_id, prefix_tokens


__all__ = ["closed_loop", "open_loop", "read_trace", "mooncake_prefixes", "TOOLS", "MAX_REQUESTS"]
