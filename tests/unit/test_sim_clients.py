"""moesim.simulate.clients: the benchmark tools' length rules, arrival processes and trace readers."""

import math
import subprocess
import sys

import numpy as np
import pytest

from moesim.errors import ConfigError
from moesim.simulate import clients, traces
from moesim.simulate.clients import closed_loop, mooncake_prefixes, open_loop, read_trace

N = 20_000


def _lens(tool, isl, osl, **kw):
    w = closed_loop(4, N, isl, osl, tool=tool, seed=7, **kw)
    return w.input_tokens, w.output_tokens


# --- length rules ----------------------------------------------------------------------------------


def test_sglang_rule_bounds_and_mean():
    i, o = _lens("sglang", 1000, 200, range_ratio=0.5)
    assert (i.min(), i.max()) == (500, 1000) and (o.min(), o.max()) == (100, 200)
    assert abs(i.mean() - 750) < 5 and abs(o.mean() - 150) < 2  # uniform: se ~1.0 / 0.2 at N=20k


def test_sglang_rule_ratio_zero_starts_at_one():
    i, o = _lens("sglang", 3, 3, range_ratio=0.0)
    assert set(np.unique(i)) == {1, 2, 3} and set(np.unique(o)) == {1, 2, 3}


def test_vllm_rule_floor_ceil_window():
    i, o = _lens("vllm", 7, 1, range_ratio=0.3)
    assert set(np.unique(i)) == set(range(4, 11))  # floor(4.9) .. ceil(9.1)
    assert set(np.unique(o)) == {1, 2}  # floor(0.7) = 0 raised to 1 .. ceil(1.3)
    i, _ = _lens("vllm", 1000, 100, range_ratio=0.5)
    assert (i.min(), i.max()) == (500, 1500) and abs(i.mean() - 1000) < 8


def test_vllm_legacy_rule_and_zero_raised():
    i, o = _lens("vllm-legacy", 1000, 10, range_ratio=0.05)
    assert (i.min(), i.max()) == (50, 1000) and o.min() == 1 and o.max() == 10


def test_default_range_ratio_is_fixed_for_every_tool():
    for tool in ("sglang", "vllm", "vllm-legacy", "genai-perf"):
        i, o = _lens(tool, 321, 17)
        assert (i == 321).all() and (o == 17).all(), tool


def test_genai_perf_normal_lengths():
    i, o = _lens("genai-perf", 1000, 20, isl_stddev=100, osl_stddev=30)
    assert abs(i.mean() - 1000) < 5 and abs(i.std() - 100) < 5
    assert o.min() == 1  # int(max(1, gauss)): N(20, 30) is often below 1
    assert (np.asarray(i) == np.trunc(i)).all() and i.dtype == np.int64


def test_seed_determinism():
    a = open_loop(5, 500, 1000, 100, range_ratio=0.2, tool="vllm", seed=3)
    b = open_loop(5, 500, 1000, 100, range_ratio=0.2, tool="vllm", seed=3)
    c = open_loop(5, 500, 1000, 100, range_ratio=0.2, tool="vllm", seed=4)
    for f in ("input_tokens", "output_tokens", "arrival_s"):
        assert np.array_equal(getattr(a, f), getattr(b, f))
        assert not np.array_equal(getattr(a, f), getattr(c, f))
    assert a.label == b.label


def test_warmup_requests_lead():
    w = closed_loop(8, 100, 1000, 500, range_ratio=0.5, warmup=3, seed=1)
    assert w.size == 103 and w.warmup == 3 and w.concurrency == 8 and w.arrival_s is None
    # sglang bench_serving: warm-up = first request with output min(osl, 32)
    assert (w.input_tokens[:3] == w.input_tokens[3]).all() and (w.output_tokens[:3] == 32).all()
    g = closed_loop(8, 100, 1000, 500, tool="genai-perf", isl_stddev=50, warmup=3, seed=1)
    assert g.size == 103 and len(set(g.input_tokens[:3].tolist())) > 1


# --- arrivals --------------------------------------------------------------------------------------


def test_poisson_and_gamma_rates():
    n, rate = 100_000, 8.0
    w = open_loop(rate, n, 10, 10, seed=11)
    gaps = np.diff(w.arrival_s)
    assert w.arrival_s[0] == 0 and abs(gaps.mean() * rate - 1) < 0.02  # se 0.3 %
    assert abs(gaps.std() / gaps.mean() - 1) < 0.03  # exponential: CV 1
    g = open_loop(rate, n, 10, 10, burstiness=0.25, seed=11)
    gg = np.diff(g.arrival_s)
    assert abs(gg.mean() * rate - 1) < 0.05 and abs(gg.std() / gg.mean() - 2) < 0.1  # CV = 1/sqrt(0.25)
    c = open_loop(rate, 100, 10, 10, burstiness=math.inf)
    assert np.allclose(np.diff(c.arrival_s), 1 / rate)


def test_vllm_arrivals_rescaled_to_n_over_rate():
    w = open_loop(4.0, 1000, 10, 10, tool="vllm", seed=2)
    assert w.arrival_s[0] > 0 and w.arrival_s[-1] == pytest.approx(1000 / 4.0, rel=1e-12)
    assert (np.diff(w.arrival_s) >= 0).all()


def test_infinite_rate_and_cap():
    w = open_loop(float("inf"), 50, 10, 10, max_concurrency=4, warmup=2)
    assert w.size == 52 and (w.arrival_s == 0).all() and w.concurrency == 4 and w.warmup == 2


@pytest.mark.parametrize(
    "call, flag",
    [
        (lambda: closed_loop(0, 10, 10, 10), "--concurrency"),
        (lambda: closed_loop(1.5, 10, 10, 10), "--concurrency"),
        (lambda: closed_loop(True, 10, 10, 10), "--concurrency"),
        (lambda: closed_loop(1, 0, 10, 10), "--num-prompts"),
        (lambda: closed_loop(1, clients.MAX_REQUESTS + 1, 10, 10), "--num-prompts"),
        (lambda: closed_loop(1, 10, 0, 10), "--isl"),
        (lambda: closed_loop(1, 10, 10, "x"), "--osl"),
        (lambda: closed_loop(1, 10, 10, 10, tool="trtllm"), "--tool"),
        (lambda: closed_loop(1, 10, 10, 10, range_ratio=1.5), "--range-ratio"),
        (lambda: closed_loop(1, 10, 10, 10, range_ratio=-0.1), "--range-ratio"),
        (lambda: closed_loop(1, 10, 10, 10, range_ratio=1.0, tool="vllm"), "--range-ratio"),
        (lambda: closed_loop(1, 10, 1, 10, range_ratio=0.5, tool="vllm"), "--range-ratio"),
        (lambda: closed_loop(1, 10, 10, 10, range_ratio=0.5, tool="genai-perf"), "--range-ratio"),
        (lambda: closed_loop(1, 10, 10, 10, isl_stddev=5), "--isl-stddev"),
        (lambda: closed_loop(1, 10, 10, 10, tool="genai-perf", osl_stddev=-1), "--osl-stddev"),
        (lambda: closed_loop(1, 10, 10, 10, warmup=-1), "--warmup"),
        (lambda: closed_loop(1, 10, 10, 10, seed=-1), "--seed"),
        (lambda: open_loop(0, 10, 10, 10), "--rate"),
        (lambda: open_loop(float("nan"), 10, 10, 10), "--rate"),
        (lambda: open_loop(-math.inf, 10, 10, 10), "--rate"),
        (lambda: open_loop(1, 10, 10, 10, burstiness=0), "--burstiness"),
        (lambda: open_loop(1, 10, 10, 10, max_concurrency=0), "--max-concurrency"),
    ],
)
def test_parameter_errors_name_the_flag(call, flag):
    with pytest.raises(ConfigError) as e:
        call()
    msg = str(e.value)
    assert msg.startswith(flag) and "allowed" in msg and "\n" not in msg


def test_clients_do_not_import_pandas_or_matplotlib():
    code = (
        "import sys, moesim; base = {'pandas', 'matplotlib'} & set(sys.modules);"
        "import moesim.simulate.clients, moesim.simulate.stats;"
        "print(sorted(({'pandas', 'matplotlib'} & set(sys.modules)) - base))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# --- traces ----------------------------------------------------------------------------------------


def _w(tmp_path, name, text, mode="w"):
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(text, newline="")
    return p


def test_generic_csv_seconds_and_prefix(tmp_path):
    p = _w(
        tmp_path, "t.csv", "arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n1.5,10,3,-1,0\n2,20,4,7,16\n"
    )
    w = read_trace(p)
    assert np.allclose(w.arrival_s, [0, 0.5]) and w.input_tokens.tolist() == [10, 20]
    assert w.output_tokens.tolist() == [3, 4] and w.prefix_ids().tolist() == [-1, 7]
    assert w.prefix_lengths().tolist() == [0, 16] and w.concurrency is None and "generic CSV" in w.label


def test_generic_jsonl_milliseconds_bom_crlf_blank_lines(tmp_path):
    body = '{"timestamp_ms": 0, "input_tokens": 5, "output_tokens": 2}\r\n\r\n{"timestamp_ms": 250, "input_tokens": 6, "output_tokens": 3}\r\n'
    w = read_trace(_w(tmp_path, "t.jsonl", b"\xef\xbb\xbf" + body.encode()))
    assert np.allclose(w.arrival_s, [0, 0.25]) and w.input_tokens.tolist() == [5, 6]
    # the blank line still counts: a bad third record is reported on line 4
    bad = body.replace('"output_tokens": 3', '"output_tokens": 0')
    with pytest.raises(ConfigError, match=r"t2.jsonl line 3 output_tokens: 0 is out of range; allowed an integer >= 1"):
        read_trace(_w(tmp_path, "t2.jsonl", bad))


def test_unsorted_rows_sorted_stably_and_time_scale(tmp_path):
    p = _w(tmp_path, "u.csv", "arrival_s,input_tokens,output_tokens\n3,1,1\n1,2,1\n1,3,1\n2,4,1\n")
    w = read_trace(p, time_scale=2.0)
    assert w.input_tokens.tolist() == [2, 3, 4, 1] and np.allclose(w.arrival_s, [0, 0, 2, 4])
    assert "4 rows sorted into time order" in w.label and "time scale 2" in w.label
    w = read_trace(p, max_requests=2)  # the first two rows of the file, then sorted
    assert w.input_tokens.tolist() == [2, 1]


def test_mooncake_hash_ids_prefixes(tmp_path):
    rows = [
        (0, 1200, 5, [0, 1, 2]),
        (1000, 700, 7, [0, 3]),
        (500, 1100, 9, [0, 1, 4]),
        (2000, 100, 1, [5]),
        (3000, 600, 2, [0, 1]),
    ]
    text = "\n".join(
        f'{{"timestamp": {t}, "input_length": {i}, "output_length": {o}, "hash_ids": {h}}}' for t, i, o, h in rows
    )
    w = read_trace(_w(tmp_path, "mooncake_trace.jsonl", text + "\n"))
    assert "Mooncake" in w.label and np.allclose(w.arrival_s, [0, 0.5, 1.0, 2.0, 3.0])
    assert w.input_tokens.tolist() == [1200, 1100, 700, 100, 600]
    # ids shared by >= 2 requests: 0 (4x), 1 (3x); longest leading shared run, x 512 tokens, <= input
    assert w.prefix_ids().tolist() == [1, 1, 0, -1, 1]
    assert w.prefix_lengths().tolist() == [1024, 1024, 512, 0, 600]
    pid, ptok = mooncake_prefixes([[9, 8], [9, 7], [], None], [2000, 2000, 5, 5])
    assert pid.tolist() == [9, 9, -1, -1] and ptok.tolist() == [512, 512, 0, 0]


def test_azure_2023_and_2024_timestamps(tmp_path):
    a23 = "\ufeffTIMESTAMP,ContextTokens,GeneratedTokens\r\n2023-11-16 18:15:46.6805900,374,44\r\n2023-11-16 18:15:50.0,100,2\r\n"
    w = read_trace(_w(tmp_path, "AzureLLMInferenceTrace_code.csv", a23.encode()))
    assert np.allclose(w.arrival_s, [0, 3.31941]) and w.input_tokens.tolist() == [374, 100] and "Azure" in w.label
    a24 = "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.009930+00:00,10,4\n2024-05-10 00:00:01.5+00:00,11,5\n"
    w = read_trace(_w(tmp_path, "a24.csv", a24))
    assert np.allclose(w.arrival_s, [0, 1.49007]) and w.output_tokens.tolist() == [4, 5]
    with pytest.raises(ConfigError, match=r"a.csv line 3 TIMESTAMP: 'yesterday' is not a date-time"):
        read_trace(_w(tmp_path, "a.csv", a24.replace("2024-05-10 00:00:01.5+00:00", "yesterday")))


HDR = "arrival_s,input_tokens,output_tokens\n"


@pytest.mark.parametrize(
    "name, text, pattern",
    [
        ("e.csv", "", r"e.csv: the file is empty"),
        ("h.csv", HDR, r"h.csv: no rows"),
        ("c.csv", "time,input_tokens,output_tokens\n0,1,1\n", r"c.csv: missing column an arrival time"),
        (
            "n.csv",
            HDR + "0,1,1\n1,abc,4\n",
            r"n.csv line 3 input_tokens: 'abc' is not a number; allowed an integer >= 1",
        ),
        ("g.csv", HDR + "-1,1,1\n", r"g.csv line 2 arrival_s: -1 is out of range; allowed seconds >= 0"),
        ("f.csv", HDR + "0,1.5,1\n", r"f.csv line 2 input_tokens: 1.5 is not an integer"),
        ("m.csv", HDR + "0,1,1\n1,,1\n", r"m.csv line 3 input_tokens: missing"),
        ("i.csv", HDR + "inf,1,1\n", r"i.csv line 2 arrival_s: must be finite"),
        ("b.jsonl", '{"arrival_s": 0, "input_tokens": 1, "output_tokens": 1}\n{oops\n', r"b.jsonl line 2: not JSON"),
        (
            "l.jsonl",
            '{"arrival_s": 0, "input_tokens": true, "output_tokens": 1}\n',
            r"l.jsonl line 1 input_tokens: True is not a number",
        ),
        (
            "h.jsonl",
            '{"timestamp": 0, "input_length": 9, "output_length": 1, "hash_ids": "0,1"}\n',
            r"h.jsonl line 1 hash_ids: '0,1' is not a list",
        ),
        (
            "p.csv",
            "arrival_s,input_tokens,output_tokens,prefix_id,prefix_tokens\n0,10,1,3,11\n",
            r"p.csv line 2 prefix_tokens: 11 with prefix_id 3 and 10 input tokens; allowed 0..input_tokens",
        ),
        ("q.csv", "arrival_s,input_tokens,output_tokens,prefix_tokens\n0,10,1,3\n", r"prefix_tokens needs a prefix_id"),
    ],
)
def test_bad_traces_fail_with_one_line(tmp_path, name, text, pattern):
    with pytest.raises(ConfigError, match=pattern) as e:
        read_trace(_w(tmp_path, name, text))
    assert "\n" not in str(e.value) and "allowed" in str(e.value)


def test_trace_row_cap_and_bad_arguments(tmp_path, monkeypatch):
    p = _w(tmp_path, "big.csv", HDR + "".join(f"{i},1,1\n" for i in range(5)))
    monkeypatch.setattr(traces, "MAX_REQUESTS", 4)  # read_trace lives in traces (re-exported by clients)
    with pytest.raises(ConfigError, match=r"more than 4 rows; allowed at most 4 \(pass --max-requests N"):
        read_trace(p)
    assert read_trace(p, max_requests=3).size == 3
    with pytest.raises(ConfigError, match="--time-scale"):
        read_trace(p, time_scale=0)
    with pytest.raises(ConfigError, match="--max-requests"):
        read_trace(p, max_requests=0)
    with pytest.raises(ConfigError, match=r"--trace: cannot read .*missing.csv"):
        read_trace(tmp_path / "missing.csv")
