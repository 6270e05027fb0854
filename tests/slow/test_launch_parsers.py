"""moesim's printed launch commands checked by the engines' OWN parsers (tests/engine_parsers.py).

Slow: the first run downloads the pinned wheels (SGLang ~40 MB, vLLM ~240 MB) into
$MOESIM_WHEEL_CACHE; offline, every test here skips with the reason."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import engine_parsers as ep  # noqa: E402

from moesim.report.launch import launch_text  # noqa: E402

pytestmark = pytest.mark.slow

ENGINES = ("sglang", "vllm", "trtllm")
# the commands depend on the hardware only through its node size and NVLink domain: H100 / H200 / H800 /
# B200 servers are 8-GPU nodes (one text), GB200 NVL72 4-GPU nodes in a 72-GPU NVLink domain (MNNVL)
NODES = {"H100/H200/H800/B200": (8, False), "GB200 NVL72": (4, True)}


def _cases() -> list[tuple[str, dict, str | None]]:
    """>= 30 configurations: TP8, DP attention, EP8..EP256, MTP on/off, overlap schemes, roles, phases."""
    cases = [
        ("tp8 decode", dict(tp=8, batch=64, phase="decode"), None),
        ("tp8 mtp2", dict(tp=8, batch=32, mtp=2), None),
        ("tp8 prefill", dict(tp=8, batch=8192, phase="prefill"), "prefill"),
        ("dp8 attn", dict(tp=1, dp=8, ep=8, batch=64, comm="nccl"), None),
        ("tp8 mixed chunk", dict(tp=8, batch=64, phase="mixed", chunk_tokens=4096), None),
    ]
    for ep_ in (8, 16, 32, 72, 144, 256):
        for comm in ("deepep-ll", "deepep-normal", "nccl", "pplx"):
            mtp = 1 if ep_ % 16 == 0 else 0
            overlap = {8: "two-batch", 16: "sbo", 32: "serial", 72: "two-batch", 144: "sbo", 256: "serial"}[ep_]
            phase = "prefill" if comm == "deepep-normal" else "decode"
            role = {"prefill": "prefill", "decode": "decode"}[phase] if ep_ >= 32 else None
            cfg = dict(tp=1, dp=ep_, ep=ep_, gpus=ep_, batch=128 if phase == "decode" else 16384, mtp=mtp)
            cfg.update(comm=comm, overlap=overlap, phase=phase, redundant=32 if ep_ >= 72 else 0)
            if phase == "prefill":
                cfg["chunk_tokens"] = 8192
            cases.append((f"ep{ep_} {comm} {overlap}", cfg, role))
    cases.append(("tp8 dp2 moe_tp", dict(tp=8, dp=2, ep=8, moe_tp=2, gpus=16, batch=64, comm="deepep-ll"), "decode"))
    # whole PD deployments: every instance, the router over them, MTP on both sides
    pre = dict(tp=1, dp=8, ep=8, gpus=8, batch=16384, phase="prefill", comm="deepep-normal", chunk_tokens=8192)
    for ep_, mtp, inst in ((8, 0, (2, 1)), (16, 2, (1, 2)), (32, 1, (3, 1)), (144, 1, (1, 1))):
        dec = dict(tp=1, dp=ep_, ep=ep_, gpus=ep_, batch=64, mtp=mtp, comm="deepep-ll", overlap="two-batch",
                   redundant=32 if ep_ == 144 else 0)  # fmt: skip
        pd = {"prefill": pre, "decode": dec, "prefill_instances": inst[0], "decode_instances": inst[1]}
        cases.append((f"PD {inst[0]}P x EP8 + {inst[1]}D x EP{ep_} mtp{mtp}", pd, "pd"))
    return cases


def _engine_text(engine: str, gpn: int = 8, mnnvl: bool = False) -> str:
    cases = [(t, {**c, "experts": 256}, r) for t, c, r in _cases()]
    return launch_text(cases, gpus_per_node=gpn, engine=engine, mnnvl=mnnvl)


def _check(text: str) -> list[ep.Problem]:
    try:
        return ep.check_commands(text, ep.pinned_versions())
    except ep.Unavailable as e:
        pytest.skip(e.reason)


@pytest.fixture(scope="module")
def generated() -> dict:
    """(engine, node kind) -> the problems of every command moesim prints (one parser run per engine)."""
    return {(e, k): _check(_engine_text(e, *v)) for e in ENGINES for k, v in NODES.items()}


def test_enough_cases():
    assert len(_cases()) >= 30
    assert {r for _, _, r in _cases()} == {None, "prefill", "decode", "pd"}


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("nodes", sorted(NODES))
def test_generated_commands_parse(generated, engine, nodes):
    """Every command moesim prints for the engine parses with the engine's own parser."""
    problems = [p for p in generated[engine, nodes] if p.kind != "deprecated"]
    assert not problems, f"{len(problems)} problems:\n" + "\n".join(map(str, problems[:20]))


@pytest.mark.parametrize("engine", ENGINES)
def test_generated_commands_not_deprecated(generated, engine):
    problems = [p for k, ps in generated.items() if k[0] == engine for p in ps if p.kind == "deprecated"]
    assert not problems, "\n".join(sorted({p.message for p in problems}))


# ---- the check can fail: known-bad lines are reported


BAD = [
    (
        "python -m sglang.launch_server --model-path m --tp-size 8 --cuda-graph-max-bs 64",
        "sglang",
        "parse",
        "ambiguous option: --cuda-graph-max-bs",
    ),
    ("python -m sglang.launch_server --model-path m --moe-a2a-backend nope", "sglang", "parse", "invalid choice"),
    (
        "python -m sglang.launch_server --model-path m --dp-size 2 --enable-dp-attention",
        "sglang",
        "deprecated",
        "--attn-dp-size",
    ),
    (
        "vllm serve m --tensor-parallel-size 8 --no-such-flag 1",
        "vllm",
        "parse",
        "unrecognized arguments: --no-such-flag",
    ),
    ("vllm serve m --all2all-backend nope", "vllm", "parse", "invalid choice"),
    (
        "python -m sglang_router.launch_router --pd-disaggregation --prefill http://p:30000 --policy nope",
        "sglang-router",
        "parse",
        "invalid choice",
    ),
    (
        "vllm-router --vllm-pd-disaggregation --decode http://d:8000",
        "vllm-router",
        "semantic",
        "requires --prefill",
    ),
    (
        'echo \'{"moe_config":{"backend":"DEEPEP"}}\' > x.yaml\ntrtllm-serve m --extra_llm_api_options x.yaml',
        "trtllm",
        "schema",
        "'DEEPEP' not one of",
    ),
    (
        'echo \'{"moe_config":{"bakend":"WIDEEP"}}\' > y.yaml\ntrtllm-serve m --config y.yaml',
        "trtllm",
        "schema",
        "bakend: unknown field",
    ),
    ("trtllm-serve m --tp 8", "trtllm", "parse", "No such option: --tp"),
    (
        "cat > d.yaml <<'EOF'\nhostname: localhost\nport: 8000\nctx_servers: {}\nEOF\ntrtllm-serve disaggregated -c d.yaml",
        "trtllm",
        "schema",
        "ctx_servers: unknown field",
    ),
    ("frobnicate --x", "shell", "unknown-command", "no checker"),
]


@pytest.fixture(scope="module")
def bad_problems() -> list:
    """Every known-bad line checked in one run per engine (each needle names its own line's fault)."""
    return _check("\n".join(t for t, *_ in BAD))


@pytest.mark.parametrize("text, engine, kind, needle", BAD)
def test_bad_lines_are_reported(bad_problems, text, engine, kind, needle):
    assert any(p.engine == engine and p.kind == kind and needle in p.message for p in bad_problems), bad_problems


def test_good_lines_pass():
    text = "\n".join(
        [
            "# a comment",
            "python -m sglang.launch_server --model-path m --tp-size 8 --attn-dp-size 8 --cuda-graph-max-bs-decode 64",
            "python -m sglang_router.launch_router --pd-disaggregation --prefill http://p:30000 8998 --decode http://d:30000",
            "VLLM_ALL2ALL_BACKEND=x vllm serve m --tensor-parallel-size 1 --data-parallel-size 8 --enable-expert-parallel",
            "vllm-router --vllm-pd-disaggregation --prefill http://p:8000 --decode http://d:8000",
            'echo \'{"enable_attention_dp":true,"moe_config":{"backend":"WIDEEP","load_balancer":{"num_slots":288}}}\' > o.yaml',
            "srun -N 2 --ntasks-per-node 8 trtllm-llmapi-launch trtllm-serve m --tp_size 16 --ep_size 16 --config o.yaml",
        ]
    )
    assert _check(text) == []
