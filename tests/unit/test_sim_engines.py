"""Serving-engine profiles (moesim/specs/engines/*.yaml, issue 26): every shipped profile loads, every
value names its source, bad files fail as one SpecError line naming the field, and the values agree with
the constants moesim's steady-state scheduler already uses (moesim/engine/scheduler.py)."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from moesim.engine import scheduler as steady
from moesim.enums import Engine
from moesim.errors import SpecError
from moesim.simulate.engines import GiB, Tiers, load_engine_profile, shipped_profiles

H100, H200, B200 = 80 * GiB, 141 * GiB, 180 * GiB


@pytest.mark.parametrize("engine", [e.value for e in Engine])
def test_every_shipped_profile_loads_with_sources(engine):
    p = load_engine_profile(engine)
    assert p.engine == Engine(engine) and p.version.strip()
    n = 0
    for name in ("scheduler", "overheads", "cuda_graph", "first_token", "router", "pd"):
        sec = getattr(p, name)
        assert set(sec.values) == set(sec.sources)
        for key, src in sec.sources.items():
            assert isinstance(src, str) and src.strip(), f"{engine}.{name}.{key} has no source"
            v = sec.values[key]
            if isinstance(v, Tiers):
                assert v.source.strip() and math.isinf(v.rows[-1][0])
            n += 1
    assert n >= 25


def test_loads_by_path_and_version(tmp_path):
    path = shipped_profiles()[Engine.VLLM]
    p = load_engine_profile(path, version=load_engine_profile("vllm").version)
    assert p.engine == Engine.VLLM
    with pytest.raises(SpecError, match="version"):
        load_engine_profile("vllm", version="0.0.1")
    with pytest.raises(SpecError, match="unknown engine 'tgi'"):
        load_engine_profile("tgi")
    with pytest.raises(SpecError, match="does not exist"):
        load_engine_profile(tmp_path / "nope.yaml")


def test_budgets_agree_with_the_steady_state_scheduler():
    """One source of truth: the closed-form serving model (moesim/engine/scheduler.py) reads the same
    engine-model tiers the simulator's profiles validate, on every GPU size and DP split."""
    for mem in (40 * GiB, H100, H200, B200):
        for e in Engine:
            p = load_engine_profile(e.value)
            for dp in (1.0, 8.0):
                split = p.scheduler.values.get("chunk_divided_by_dp_attention", False)
                want = p.prefill_budget_tokens(mem) / (dp if split else 1.0)
                assert float(steady.default_budget_tokens(e, mem, dp)) == float(int(want)), (e, mem, dp)
    assert load_engine_profile("vllm").prefill_budget_tokens(B200) == 16384  # get_batch_defaults >= 160 GiB


def test_derived_quantities():
    sg, vl, tr = (load_engine_profile(e) for e in ("sglang", "vllm", "trtllm"))
    assert sg.cuda_graph_max_bs(H200, tp=8) == 512 and sg.cuda_graph_max_bs(H200, tp=2) == 256
    assert sg.cuda_graph_max_bs(B200, tp=1) == 512
    assert vl.cuda_graph_max_bs(H200, 8) == 512 and tr.cuda_graph_max_bs(H200, 8) == 128
    assert tr.prefill_eager and not sg.prefill_eager and not vl.prefill_eager
    assert vl.max_running_requests(H200) == 1024 and tr.max_running_requests(H200) == 2048
    # SGLang resolve_max_num_reqs: 1e6 tokens / 163840 ctx x 512 = 3125 (inside [2048, 4096]); tiny pools cap at //2
    assert sg.max_running_requests(H200, kv_token_capacity=1_000_000, context_len=163840) == 3125
    assert sg.max_running_requests(H200, kv_token_capacity=1000, context_len=163840) == 500
    o = sg.overheads
    assert sg.step_cpu_s(10) == pytest.approx(o.step_cpu_fixed_s + 10 * o.step_cpu_per_request_s)
    assert o.step_cpu_fixed_s < 1.0  # microseconds in the file, seconds here
    assert sg.request_in_s(100) - sg.request_fixed_s == pytest.approx(100 * o.tokenize_per_token_s)
    assert sg.token_out_s(1) > 0
    for p in (sg, vl, tr):
        assert p.step_cpu_overlapped and p.first_token_after_next_pass
        assert not p.first_token.after_next_pass_completes
    assert sg.router_policy == "cache_aware" and sg.router.cache_threshold == 0.3
    assert sg.dp_rank_policy == "round_robin"
    assert sg.scheduler.kind == "prefill_priority" and vl.scheduler.kind == tr.scheduler.kind == "fused_chunked_prefill"


def _write(tmp_path, data) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    return str(path)


def _raw(engine="sglang") -> dict:
    with open(shipped_profiles()[Engine(engine)], encoding="utf-8") as f:
        return yaml.safe_load(f)


def _one_line_error(tmp_path, data, *fragments):
    with pytest.raises(SpecError) as ei:
        load_engine_profile(_write(tmp_path, data))
    msg = str(ei.value)
    assert "\n" not in msg and "bad.yaml" in msg, msg
    for frag in fragments:
        assert frag in msg, msg
    return msg


def test_unknown_key_is_an_error(tmp_path):
    d = _raw()
    d["overheads"]["gpu_magic_us"] = {"value": 1, "source": "x"}
    _one_line_error(tmp_path, d, "overheads.gpu_magic_us", "unknown key")
    d = _raw()
    d["scheduler"]["max_prefill_tokens"]["unit"] = "tokens"
    _one_line_error(tmp_path, d, "scheduler.max_prefill_tokens", "'unit'")
    d = _raw()
    d["extras"] = {}
    _one_line_error(tmp_path, d, "extras", "unknown key")


def test_negative_number_is_an_error(tmp_path):
    d = _raw()
    d["overheads"]["tokenize_per_token_us"]["value"] = -1
    _one_line_error(tmp_path, d, "overheads.tokenize_per_token_us.value", "out of range", ">= 0")
    d = _raw()
    d["scheduler"]["chunked_prefill_size"]["tiers"][0][1] = -8192
    _one_line_error(tmp_path, d, "scheduler.chunked_prefill_size.tiers[0].value", ">= 0")


def test_missing_field_or_source_is_an_error(tmp_path):
    d = _raw()
    del d["first_token"]["stream_interval"]
    _one_line_error(tmp_path, d, "first_token.stream_interval", "missing")
    d = _raw()
    d["router"]["cache_threshold"]["source"] = " "
    _one_line_error(tmp_path, d, "router.cache_threshold.source", "non-empty")
    d = _raw()
    del d["pd"]["kv_transfer_backend"]["source"]
    _one_line_error(tmp_path, d, "pd.kv_transfer_backend", "'source'")
    d = _raw()
    del d["pd"]
    _one_line_error(tmp_path, d, "pd", "missing")


def test_wrong_type_is_an_error(tmp_path):
    d = _raw()
    d["overheads"]["step_cpu_overlapped"]["value"] = "yes"
    _one_line_error(tmp_path, d, "overheads.step_cpu_overlapped.value", "boolean")
    d = _raw()
    d["scheduler"]["max_prefill_tokens"]["value"] = 1.5
    _one_line_error(tmp_path, d, "scheduler.max_prefill_tokens.value", "not an integer")
    d = _raw()
    d["cuda_graph"]["prefill_mode"]["value"] = "sometimes"
    _one_line_error(tmp_path, d, "cuda_graph.prefill_mode.value", "not one of")
    d = _raw()
    d["scheduler"]["max_prefill_tokens"] = 16384  # a bare number: no source
    _one_line_error(tmp_path, d, "scheduler.max_prefill_tokens", "value: ..., source")
    d = _raw()
    d["engine"] = "tgi"
    _one_line_error(tmp_path, d, "engine", "not one of")


def test_tiers_must_cover_all_memory_and_increase(tmp_path):
    d = _raw()
    d["scheduler"]["chunked_prefill_size"]["tiers"] = [[160, 8192]]
    _one_line_error(tmp_path, d, "scheduler.chunked_prefill_size.tiers", ".inf")
    d = _raw()
    d["scheduler"]["chunked_prefill_size"]["tiers"] = [[160, 8192], [60, 4096], [float("inf"), 16384]]
    _one_line_error(tmp_path, d, "tiers[1]", "increase")
    d = _raw()
    d["cuda_graph"]["decode_max_bs"]["tiers"] = [[float("inf"), 512]]
    _one_line_error(tmp_path, d, "cuda_graph.decode_max_bs.tiers[0]", "3 numbers")


def test_engine_specific_keys_do_not_leak(tmp_path):
    """A vLLM profile carrying an SGLang knob is an unknown key, not silently accepted."""
    d = _raw("vllm")
    d["scheduler"]["max_prefill_tokens"] = copy.deepcopy(_raw()["scheduler"]["max_prefill_tokens"])
    _one_line_error(tmp_path, d, "scheduler.max_prefill_tokens", "unknown key")
