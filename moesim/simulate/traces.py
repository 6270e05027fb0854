"""Request traces for the simulator: `read_trace` (generic CSV / JSONL, Mooncake, Azure) and
`mooncake_prefixes`. Both are re-exported by `moesim.simulate.clients`, beside the benchmark clients.

Every reader returns a `moesim.simulate.requests.Workload` (SI units: seconds, tokens) or raises one
ConfigError line naming the file, the 1-based line, the field and what is allowed.
"""

from __future__ import annotations

import io
import itertools
import json
import math
from pathlib import Path

import numpy as np

from moesim.errors import ConfigError, check_number, key_text
from moesim.simulate.requests import Workload

MAX_REQUESTS = 10_000_000  # generated requests and trace rows (memory: ~10 arrays of 8 B each per request)
MOONCAKE_BLOCK_TOKENS = 512  # tokens per hash_ids block (kvcache-ai/Mooncake FAST25-release/traces README;
#                              GenAI-Perf's trace replay uses block_size=512 for them too)

#: accepted column names of the documented generic format (CSV or JSONL)
TRACE_TIME_COLUMNS = {"arrival_s": 1.0, "timestamp_s": 1.0, "time_s": 1.0, "arrival_ms": 1e-3, "timestamp_ms": 1e-3}
TRACE_INPUT_COLUMNS = ("input_tokens", "prompt_tokens")
TRACE_OUTPUT_COLUMNS = ("output_tokens", "completion_tokens")


def _int(flag: str, v, lo: int, hi: int | None = None) -> int:
    return check_number(flag, v, lo=lo, hi=hi, integer=True, error=ConfigError)


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
    path = Path(path)
    scale = check_number("--time-scale", time_scale, lo=0, lo_open=True)
    cap = MAX_REQUESTS if max_requests is None else _int("--max-requests", max_requests, 1, MAX_REQUESTS)
    name = path.name
    df, lines, fmt = _read_table(path, cap, max_requests is None)
    where = lambda i, field: f"--trace {name} line {int(lines[i])} {field}"  # noqa: E731
    fmt, t_s, inp, out, prefix_id, prefix_tokens = _columns(df, name, fmt, where)
    order = np.argsort(t_s, kind="stable")
    moved = int(np.count_nonzero(order != np.arange(order.size)))
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


def _read_table(path: Path, cap: int, check_cap: bool):
    """-> (frame, 1-based line of each row, "CSV" / "JSONL"): JSONL when the file starts with ``{``."""
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
        df, lines = _read_jsonl(path, cap, check_cap)
        fmt = "JSONL"
    else:
        df, lines = _read_csv(path, cap, check_cap)
        fmt = "CSV"
    if len(df) == 0:
        raise ConfigError(f"--trace {name}: no rows; allowed: at least one request")
    return df, lines, fmt


def _columns(df, name: str, fmt: str, where):
    """-> (format, send times s, input tokens, output tokens, prefix_id, prefix_tokens), in file order;
    the format recognised by its columns (`read_trace`), every value checked."""
    cols = set(df.columns)
    if {"timestamp", "input_length", "output_length"} <= cols:
        t_s = _numbers(df["timestamp"], "timestamp", where, lo=0, what="milliseconds >= 0") * 1e-3
        inp = _tokens(df["input_length"], "input_length", where)
        out = _tokens(df["output_length"], "output_length", where)
        prefix_id = prefix_tokens = None
        if "hash_ids" in cols:
            prefix_id, prefix_tokens = mooncake_prefixes(df["hash_ids"].to_numpy(), inp, where)
        return "Mooncake", t_s, inp, out, prefix_id, prefix_tokens
    if {"TIMESTAMP", "ContextTokens", "GeneratedTokens"} <= cols:
        t_s = _datetimes(df["TIMESTAMP"], "TIMESTAMP", where)
        inp = _tokens(df["ContextTokens"], "ContextTokens", where)
        out = _tokens(df["GeneratedTokens"], "GeneratedTokens", where)
        return "Azure", t_s, inp, out, None, None
    return (f"generic {fmt}", *_generic_columns(df, name, where))


def _generic_columns(df, name: str, where):
    """The generic format (`read_trace`) -> (send times s, input, output, prefix_id, prefix_tokens)."""
    cols = set(df.columns)
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
    return (t_s, inp, out, *_generic_prefixes(df, name, inp, where))


def _generic_prefixes(df, name: str, inp: np.ndarray, where):
    """The optional ``prefix_id`` / ``prefix_tokens`` columns -> (prefix_id, prefix_tokens) or (None, None)."""
    cols = set(df.columns)
    if "prefix_tokens" in cols and "prefix_id" not in cols:
        raise ConfigError(f"--trace {name}: prefix_tokens needs a prefix_id column; allowed: both or neither")
    if "prefix_id" not in cols:
        return None, None
    prefix_id = _numbers(df["prefix_id"], "prefix_id", where, lo=-1, integer=True, what="an integer >= -1")
    prefix_id = prefix_id.astype(np.int64)
    if "prefix_tokens" not in cols:
        if (prefix_id >= 0).any():
            raise ConfigError(f"--trace {name}: prefix_id needs a prefix_tokens column; allowed: both or neither")
        return prefix_id, np.zeros(len(df), np.int64)
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
    return prefix_id, prefix_tokens


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
    import pandas as pd  # lazy: `moesim --help` must not import pandas

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
    import pandas as pd  # lazy: `moesim --help` must not import pandas

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


__all__ = ["read_trace", "mooncake_prefixes", "MAX_REQUESTS", "MOONCAKE_BLOCK_TOKENS"]
