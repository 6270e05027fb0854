"""--emit-launch: engine launch commands of a configuration (moesim/report/launch.py)."""

import itertools

import pytest

from moesim.report.launch import ENGINES, emitted_flags, hf_model_path, launch_commands, launch_flags, launch_text

WIDE = {"model_path": "deepseek-ai/DeepSeek-V3", "tp": 1, "dp": 32, "ep": 32, "moe_tp": 1, "gpus": 32,
        "batch": 64, "mtp": 1, "redundant": 32, "comm": "deepep-ll", "overlap": "two-batch", "phase": "decode"}  # fmt: skip


def _configs():
    """A grid over the axes the generator branches on (parallelism, comm, overlap, MTP, EPLB, role)."""
    shapes = [
        (8, 1, 8, 1, 8),
        (1, 8, 8, 1, 8),
        (2, 8, 16, 1, 16),
        (1, 32, 32, 1, 32),
        (8, 1, 1, 8, 8),
        (16, 1, 16, 1, 16),
    ]
    for (tp, dp, ep, mtp_, g), comm, ov, mtp, red, role, chunk in itertools.product(
        shapes, ["deepep-ll", "deepep-normal", "nccl", "pplx"], ["serial", "sbo", "two-batch", "five-stage"],
        [0, 2], [0, 32], [None, "prefill", "decode"], [0, 8192],
    ):  # fmt: skip
        cfg = dict(model_path="m/x", tp=tp, dp=dp, ep=ep, moe_tp=mtp_, gpus=g, batch=32, mtp=mtp, redundant=red,
                   comm=comm, overlap=ov, chunk_tokens=chunk, phase="mixed")  # fmt: skip
        yield cfg, role


def test_every_emitted_flag_is_in_the_pinned_list():
    pins = launch_flags()
    for cfg, role in _configs():
        for eng in ENGINES:
            allowed = set(pins[eng]["flags"])
            for line in launch_commands(cfg, eng, role=role):
                unknown = set(emitted_flags(line)) - allowed
                assert not unknown, (eng, line, unknown)


def test_pins_name_version_and_source():
    for eng in ENGINES:
        p = launch_flags()[eng]
        assert p["version"] and p["sources"] and all(s.startswith("https://") for s in p["sources"])
        assert all(f.startswith("--") for f in p["flags"])


def test_sglang_wide_ep_decode():
    (cmd,) = [c for c in launch_commands(WIDE, "sglang", role="decode", gpus_per_node=32) if not c.startswith("#")]
    assert cmd.startswith("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3")
    for part in ("--tp-size 32", "--dp-size 32", "--enable-dp-attention", "--ep-size 32", "--moe-a2a-backend deepep",
                 "--deepep-mode low_latency", "--enable-two-batch-overlap", "--speculative-algorithm EAGLE",
                 "--speculative-num-steps 1", "--speculative-num-draft-tokens 2", "--ep-num-redundant-experts 32",
                 "--disaggregation-mode decode", "--max-running-requests 2048", "--cuda-graph-max-bs 64"):  # fmt: skip
        assert part in cmd, part
    assert "--nnodes" not in cmd


def test_sglang_multi_node_one_line_per_node():
    lines = launch_commands(WIDE, "sglang", gpus_per_node=8)
    assert len(lines) == 4
    assert [f"--node-rank {k}" in line for k, line in enumerate(lines)] == [True] * 4
    assert all("--nnodes 4" in line and "--dist-init-addr" in line for line in lines)


def test_normal_mode_and_no_a2a_without_ep():
    cfg = {**WIDE, "comm": "deepep-normal", "overlap": "serial", "mtp": 0, "redundant": 0}
    (cmd,) = launch_commands(cfg, "sglang", gpus_per_node=32)
    assert "--deepep-mode normal" in cmd and "--speculative" not in cmd and "--enable-eplb" not in cmd
    tp8 = {"tp": 8, "dp": 1, "ep": 1, "gpus": 8, "comm": "nccl"}
    (cmd,) = launch_commands(tp8, "sglang")
    assert "--tp-size 8" in cmd and "--ep-size" not in cmd and "--moe-a2a-backend" not in cmd and "--dp-size" not in cmd


def test_vllm_and_trtllm_equivalents_or_say_not_supported():
    vl = launch_commands({**WIDE, "gpus": 32}, "vllm", gpus_per_node=8)
    assert len(vl) == 4 and "--data-parallel-size 32" in vl[0] and "--all2all-backend deepep_low_latency" in vl[0]
    assert "--enable-dbo" in vl[0] and all("--headless" in line for line in vl[1:])
    # vLLM's EP spans the whole instance: EP 8 with TP 2 x DP 8 (16 GPUs) is not expressible
    odd = {**WIDE, "tp": 2, "dp": 8, "ep": 8, "moe_tp": 2, "gpus": 16}
    assert launch_commands(odd, "vllm")[0].startswith("# vllm: not supported")
    # TRT-LLM: attention DP runs TP 1, so TP 2 x DP 8 cannot be launched; two-batch overlap neither
    assert launch_commands(odd, "trtllm")[0].startswith("# trtllm: not supported")
    # an overlap scheme the engine lacks: launched without it, with a comment
    assert launch_commands(WIDE, "trtllm")[0].startswith("# trtllm: overlap two-batch has no trtllm option")
    assert launch_commands({**WIDE, "overlap": "sbo"}, "vllm", gpus_per_node=32)[0].startswith("# vllm: overlap sbo")
    ok = launch_commands({**WIDE, "overlap": "serial"}, "trtllm", gpus_per_node=32)
    (echo,) = [c for c in ok if c.startswith("echo ")]
    assert '"enable_attention_dp":true' in echo and '"decoding_type":"MTP"' in echo
    assert any(c.startswith("# trtllm: 32 redundant experts") for c in ok)
    assert "--tp_size 32" in ok[-1] and "--ep_size 32" in ok[-1]


def test_text_and_model_path():
    txt = launch_text([("decode pool", WIDE, "decode")], gpus_per_node=32)
    assert "# ---- launch: decode pool" in txt and "# sglang (" in txt and "# vllm (" in txt and "# trtllm (" in txt
    assert (
        hf_model_path("huggingface.co/deepseek-ai/DeepSeek-V3 config.json; x", "deepseek-v3")
        == "deepseek-ai/DeepSeek-V3"
    )
    assert hf_model_path(None, "mine") == "mine"
    with pytest.raises(ValueError):
        launch_commands(WIDE, "tgi")


def _launch_blocks(stdout: str) -> dict:
    """engine -> the command lines printed under its '# <engine> (<version>)' header."""
    out, eng = {}, None
    for line in stdout.splitlines():
        head = line.split(" (", 1)[0][2:] if line.startswith("# ") else None
        if head in ENGINES:
            eng = head
        elif line.startswith("# ----"):
            eng = None
        elif eng and line.strip():
            out.setdefault(eng, []).append(line)
    return out


def _check_pinned(stdout: str) -> dict:
    blocks = _launch_blocks(stdout)
    for eng, lines in blocks.items():
        for line in lines:
            assert set(emitted_flags(line)) <= set(launch_flags()[eng]["flags"]), line
    return blocks


def test_cli_estimate_emits_the_priced_configuration():
    from tests.conftest import run_cli

    p = run_cli("estimate", "-m", "deepseek-v3", "-g", "h200", "--tp", "1", "--ep", "16", "--batch", "64", "--mtp", "1",
                "--overlap", "two-batch", "--emit-launch", check=True)  # fmt: skip
    sg = _check_pinned(p.stdout)["sglang"]
    assert len(sg) == 2 and "--ep-size 16" in sg[0] and "--enable-two-batch-overlap" in sg[0]  # 2 H200 nodes
    assert "--node-rank 1" in sg[1] and "--speculative-num-steps 1" in sg[0]


def test_cli_disagg_emits_both_roles():
    from tests.conftest import run_cli

    p = run_cli("disagg", "-m", "deepseek-v3", "-g", "h200", "--isl", "4000", "--osl", "1000", "--max-ttft", "2s",
                "--max-tpot", "50ms", "--prefill-tp", "1", "--prefill-ep", "8", "--prefill-batch", "8192", "--decode-tp",
                "1", "--decode-ep", "8", "--decode-batch", "32,64", "--no-aggregated", "--emit-launch", check=True)  # fmt: skip
    sg = _check_pinned(p.stdout)["sglang"]
    assert any("--disaggregation-mode prefill" in c for c in sg) and any(
        "--disaggregation-mode decode" in c for c in sg
    )
    assert "# ---- launch: prefill pool (start" in p.stdout
