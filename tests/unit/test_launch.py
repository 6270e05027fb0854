"""--emit-launch: the priced engine's launch commands, from the engine model (moesim/report/launch.py).

The real parsers of the pinned releases check every emitted line in tests/slow/test_launch_parsers.py;
tests/property/test_engine_model.py checks that the lines run what was priced. Here: the mapping."""

import itertools

import pytest

from moesim.report.launch import ENGINES, emitted_flags, hf_model_path, launch_commands, launch_pd, launch_text
from moesim.specs.engine import load_engine_model

WIDE = {"model_path": "deepseek-ai/DeepSeek-V3", "tp": 1, "dp": 32, "ep": 32, "moe_tp": 1, "gpus": 32,
        "batch": 64, "mtp": 1, "redundant": 32, "comm": "deepep-ll", "overlap": "two-batch", "phase": "decode"}  # fmt: skip
ROUTER_FLAGS = {"--pd-disaggregation", "--prefill", "--decode", "--host", "--port", "-c"}


def _cmds(lines):
    return [c for c in lines if not c.startswith("#")]


def _configs():
    """A grid over the axes the generator branches on (parallelism, comm, overlap, MTP, EPLB, role)."""
    shapes = [(8, 1, 8, 1, 8), (1, 8, 8, 1, 8), (2, 8, 16, 1, 16), (1, 32, 32, 1, 32), (8, 1, 1, 8, 8)]
    for (tp, dp, ep, mtp_, g), comm, ov, mtp, red, role, chunk in itertools.product(
        shapes, ["deepep-ll", "deepep-normal", "allgather", "pplx"], ["serial", "sbo", "two-batch", "five-stage"],
        [0, 2], [0, 32], [None, "prefill", "decode"], [0, 8192],
    ):  # fmt: skip
        cfg = dict(model_path="m/x", tp=tp, dp=dp, ep=ep, moe_tp=mtp_, gpus=g, batch=32, mtp=mtp, redundant=red,
                   comm=comm, overlap=ov, chunk_tokens=chunk, phase="mixed")  # fmt: skip
        yield cfg, role


def test_every_emitted_flag_is_a_flag_of_the_engine_model():
    """Flags come from the engine model (moesim/specs/engines/*.yaml launch.flags), never spelt inline."""
    for eng in ENGINES:
        em = load_engine_model(eng)
        allowed = set(em.flags.values()) | {o.flag for o in em.overlap.values() if o.flag}
        for cfg, role in _configs():
            for line in _cmds(launch_commands(cfg, eng, role=role)):
                flags = {f for tok in line.split() for f in [tok] if tok.startswith("--")} - {
                    "--mpi",
                    "--ntasks-per-node",
                }
                flags = {f.split("=", 1)[0] for f in flags} - {"--pd-disaggregation"}
                unknown = {f for f in flags if not any(a.split()[0] == f for a in allowed)} - ROUTER_FLAGS
                assert not unknown, (eng, line, unknown)


def test_engine_models_pin_a_release_and_name_sources():
    for eng in ENGINES:
        m = load_engine_model(eng)
        assert m.release[0].isdigit() and m.dist and m.label == f"{eng} {m.release}"
        assert all(m.sources.values()), [k for k, v in m.sources.items() if not v]


def test_sglang_wide_ep_decode_uses_the_current_spellings():
    (cmd,) = _cmds(launch_commands(WIDE, "sglang", role="decode", gpus_per_node=32))
    assert cmd.startswith("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3")
    for part in ("--tp-size 32", "--attn-dp-size 32", "--ep-size 32", "--moe-a2a-backend deepep",
                 "--deepep-mode low_latency", "--enable-two-batch-overlap", "--speculative-algorithm EAGLE",
                 "--speculative-num-steps 1", "--speculative-num-draft-tokens 2", "--ep-num-redundant-experts 32",
                 "--disaggregation-mode decode", "--max-running-requests 2048", "--cuda-graph-max-bs-decode 64",
                 "--host 0.0.0.0"):  # fmt: skip
        assert part in cmd, part
    for gone in ("--dp-size", "--enable-dp-attention", "--cuda-graph-max-bs ", "--nnodes"):
        assert gone not in cmd + " ", gone


def test_sglang_aggregated_server_runs_deepep_auto_and_raises_the_ll_token_cap():
    """An aggregated server's prefill chunks must not go through the 128-token low-latency buffer."""
    (cmd,) = _cmds(launch_commands({**WIDE, "phase": "mixed", "chunk_tokens": 8192}, "sglang", gpus_per_node=32))
    assert "--deepep-mode auto" in cmd and "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK" not in cmd
    big = {**WIDE, "batch": 128, "mtp": 1}  # 256 tokens per rank per decode step > 128
    (cmd,) = _cmds(launch_commands(big, "sglang", role="decode", gpus_per_node=32))
    assert cmd.startswith("SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=256 python -m sglang.launch_server")


def test_sglang_multi_node_one_line_per_node():
    lines = _cmds(launch_commands(WIDE, "sglang", gpus_per_node=8))
    assert len(lines) == 4
    assert [f"--node-rank {k}" in line for k, line in enumerate(lines)] == [True] * 4
    assert all("--nnodes 4" in line and "--dist-init-addr $HEAD_IP:5000" in line for line in lines)


def test_no_a2a_without_ep_and_allgather_without_a2a():
    tp8 = {"tp": 8, "dp": 1, "ep": 1, "gpus": 8, "comm": "deepep-ll"}
    (cmd,) = _cmds(launch_commands(tp8, "sglang"))
    assert "--tp-size 8" in cmd and "--ep-size" not in cmd and "--moe-a2a-backend" not in cmd
    ag = {**WIDE, "comm": "allgather", "overlap": "serial"}
    (cmd,) = _cmds(launch_commands(ag, "sglang", gpus_per_node=32))
    assert "--moe-a2a-backend" not in cmd  # SGLang gathers over the DP ranks without an a2a backend


def test_vllm_all2all_backend_only_where_it_runs():
    """vLLM ignores --all2all-backend with DP = 1: it is not emitted there (the priced path is an all-reduce)."""
    tp_ep = {"tp": 8, "dp": 1, "ep": 8, "gpus": 8, "batch": 32, "comm": "deepep-ll", "overlap": "serial"}
    (cmd,) = _cmds(launch_commands(tp_ep, "vllm"))
    assert "--enable-expert-parallel" in cmd and "--all2all-backend" not in cmd
    vl = _cmds(launch_commands(WIDE, "vllm", gpus_per_node=8))
    assert len(vl) == 4 and "--data-parallel-size 32" in vl[0] and "--all2all-backend deepep_low_latency" in vl[0]
    assert "--enable-dbo" in vl[0] and all("--headless" in line for line in vl[1:])
    small = {**WIDE, "batch": 8, "mtp": 0}  # 8 tokens per rank: below vLLM's DBO decode threshold (32)
    lines = launch_commands(small, "vllm", gpus_per_node=32)
    assert "--enable-dbo" not in " ".join(lines) and lines[0].startswith("# vllm: overlap two-batch is not run")
    odd = {**WIDE, "tp": 2, "dp": 8, "ep": 8, "moe_tp": 2, "gpus": 16}
    assert launch_commands(odd, "vllm")[0].startswith("# vllm: not supported")


def test_trtllm_options_follow_the_engine_model():
    assert launch_commands({**WIDE, "tp": 2, "dp": 8, "ep": 8, "gpus": 16}, "trtllm")[0].startswith(
        "# trtllm: not supported"
    )
    lines = launch_commands(WIDE, "trtllm", gpus_per_node=32)
    assert lines[0].startswith("# trtllm: overlap two-batch is not run by trtllm")
    (echo,) = [c for c in lines if c.startswith("echo ")]
    assert '"enable_attention_dp":true' in echo and '"decoding_type":"MTP"' in echo
    assert '"backend":"CUTLASS"' in echo and '"num_slots":288' in echo  # Hopper: no MNNVL alltoall
    assert "--tp_size 32" in lines[-1] and "--ep_size 32" in lines[-1] and "--extra_llm_api_options" in lines[-1]
    mnnvl = launch_commands(WIDE, "trtllm", gpus_per_node=32, mnnvl=True)
    assert '"backend":"WIDEEP"' in next(c for c in mnnvl if c.startswith("echo "))


def test_pd_launch_is_complete_for_every_engine():
    pre = {**WIDE, "phase": "prefill", "batch": 8192, "comm": "deepep-normal", "mtp": 0, "overlap": "serial"}
    for eng in ENGINES:
        lines = launch_pd(pre, WIDE, eng, prefill_instances=2, decode_instances=1, gpus_per_node=32)
        text = "\n".join(lines)
        for host in ("$PREFILL_0_IP", "$PREFILL_1_IP", "$DECODE_0_IP"):
            assert host in text, (eng, host)
        servers = [c for c in _cmds(lines) if ("serve " in c and "disaggregated" not in c) or "launch_server" in c]
        servers = [c for c in servers if not c.startswith(("echo ", "cat "))]
        assert len(servers) == 3, (eng, servers)
        assert all("0.0.0.0" in c for c in servers)
        # MTP on both sides: the prefill server keeps the decode side's draft configuration
        key = {"sglang": "--speculative-num-steps 1", "vllm": "deepseek_mtp", "trtllm": None}[eng]
        if key:
            assert all(key in c for c in servers), eng
    sg = launch_pd(pre, WIDE, "sglang", prefill_instances=2, gpus_per_node=32)
    router = sg[-1]
    assert router.startswith("python -m sglang_router.launch_router --pd-disaggregation")
    assert (
        router.count("--prefill http://") == 2 and "8998" in router and "--decode http://$DECODE_0_IP:30000" in router
    )
    trt = launch_pd(pre, WIDE, "trtllm", gpus_per_node=32)
    assert trt[-1] == "trtllm-serve disaggregated -c disagg_config.yaml"
    assert any('"num_nextn_predict_layers":1' in c for c in trt if "prefill" in c)


def test_text_names_the_priced_engine_and_release():
    txt = launch_text([("decode pool", WIDE, "decode")], gpus_per_node=32, engine="vllm")
    assert "# ---- launch: decode pool on vllm 0.34.0" in txt and "sglang" not in txt
    assert hf_model_path("huggingface.co/deepseek-ai/DeepSeek-V3 config.json; x", "v3") == "deepseek-ai/DeepSeek-V3"
    assert hf_model_path(None, "mine") == "mine"
    with pytest.raises(ValueError):
        launch_commands(WIDE, "tgi")
    assert emitted_flags("# --x") == [] and emitted_flags("a --b=1 --c 2") == ["--b", "--c"]


def test_cli_estimate_emits_the_priced_engine():
    from tests.conftest import run_cli

    p = run_cli("estimate", "-m", "deepseek-v3", "-g", "h200", "--tp", "1", "--ep", "16", "--batch", "64", "--mtp", "1",
                "--overlap", "two-batch", "--emit-launch", check=True)  # fmt: skip
    sg = [c for c in p.stdout.splitlines() if c.startswith("python -m sglang")]
    assert "on sglang 0.5.23" in p.stdout and "vllm serve" not in p.stdout
    assert len(sg) == 2 and "--ep-size 16" in sg[0] and "--enable-two-batch-overlap" in sg[0]  # 2 H200 nodes
    assert "--node-rank 1" in sg[1] and "--speculative-num-steps 1" in sg[0]
    p = run_cli("estimate", "-m", "deepseek-v3", "-g", "h200", "--tp", "8", "--ep", "8", "--batch", "16",
                "--engine", "vllm", "--emit-launch", check=True)  # fmt: skip
    assert "on vllm 0.34.0" in p.stdout and "vllm serve deepseek-ai/DeepSeek-V3" in p.stdout


def test_cli_disagg_emits_the_whole_pd_deployment():
    from tests.conftest import run_cli

    p = run_cli("disagg", "-m", "deepseek-v3", "-g", "h200", "--isl", "4000", "--osl", "1000", "--max-ttft", "2s",
                "--max-tpot", "50ms", "--prefill-tp", "1", "--prefill-ep", "8", "--prefill-batch", "8192", "--decode-tp",
                "1", "--decode-ep", "8", "--decode-batch", "32,64", "--no-aggregated", "--emit-launch", check=True)  # fmt: skip
    out = p.stdout
    assert "--disaggregation-mode prefill" in out and "--disaggregation-mode decode" in out
    assert "python -m sglang_router.launch_router --pd-disaggregation" in out
    assert "# ---- launch: PD:" in out
