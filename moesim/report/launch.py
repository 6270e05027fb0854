"""Engine launch commands for a chosen configuration (`--emit-launch`).

`launch_commands(cfg, engine)` maps one moesim configuration (a sweep row or the config of an
`estimate`: tp, dp, ep, moe_tp, batch, mtp, comm, overlap, redundant, gpus, and for the mixed or
prefill phase a chunk size) to the shell commands that start it: one per node, comment lines (``#``)
for what the engine cannot run as priced. Flags come from the pinned lists in launch_flags.yaml
(engine, version, source URL); tests check every emitted flag against them.

Mapping (sources: SGLang server_args.py and docs/advanced_features/{expert_parallelism,
server_arguments}; vLLM engine_args and the expert-parallel deployment guide; trtllm-serve 1.0 docs):
- SGLang: --tp-size is the instance's world size; --dp-size with --enable-dp-attention splits
  attention into DP groups of tp_size/dp_size GPUs (moesim's attention TP); --ep-size the EP ranks.
- vLLM: --tensor-parallel-size is the attention TP, --data-parallel-size the DP groups; with
  --enable-expert-parallel the experts span all tp x dp GPUs (EP = world size, no MoE TP).
- TRT-LLM: --tp_size is the world size; enable_attention_dp runs attention with TP 1 on every rank,
  so only attention DP 1 (pure TP) or DP = world size are expressible.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path

__all__ = ["launch_commands", "launch_flags", "emitted_flags", "launch_text", "hf_model_path"]

FLAGS_FILE = Path(__file__).with_name("launch_flags.yaml")
ENGINES = ("sglang", "vllm", "trtllm")
HEAD = "$HEAD_IP"  # address of node 0, to be filled in by the user
SGLANG_DIST_PORT = 5000  # any free port on node 0 (SGLang docs' multi-node examples use 5000)
VLLM_RPC_PORT = 13345  # vLLM's default --data-parallel-rpc-port


@lru_cache(maxsize=1)
def launch_flags() -> dict:
    """engine -> {command, version, sources, flags} from launch_flags.yaml."""
    import yaml  # lazy: start-up time

    return yaml.safe_load(FLAGS_FILE.read_text())


def emitted_flags(command: str) -> list[str]:
    """The long flags of one command line (``--name``, ``--name=value`` -> ``--name``); comments: none."""
    if command.lstrip().startswith("#"):
        return []
    return [t.split("=", 1)[0] for t in command.split() if t.startswith("--")]


def hf_model_path(source: str | None, name: str) -> str:
    """A Hugging Face repo id from a model spec's ``source`` line, else the catalog name."""
    m = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)", source or "")
    return m.group(1) if m else name


def _i(cfg: dict, key: str, default: int = 0) -> int:
    v = cfg.get(key)
    return default if v is None or v != v else int(v)


def _shape(cfg: dict) -> dict:
    """Integers of the configuration; gpus = tp x dp (= ep x moe_tp)."""
    tp, dp = _i(cfg, "tp", 1), _i(cfg, "dp", 1) or 1
    gpus = _i(cfg, "gpus", tp * dp) or tp * dp
    return {
        "tp": tp,
        "dp": dp,
        "ep": _i(cfg, "ep", 1) or 1,
        "moe_tp": _i(cfg, "moe_tp", 1) or 1,
        "gpus": gpus,
        "mtp": _i(cfg, "mtp"),
        "redundant": _i(cfg, "redundant"),
        "batch": _i(cfg, "batch"),
        # prefill tokens per forward pass per DP group; a prefill pool's batch is exactly that
        "chunk": _i(cfg, "chunk_tokens") or (_i(cfg, "batch") if cfg.get("phase") == "prefill" else 0),
    }


def _nodes(gpus: int, gpus_per_node: int) -> int:
    return max(1, -(-gpus // max(1, gpus_per_node)))


def _sglang(cfg: dict, s: dict, role: str | None, gpn: int) -> list[str]:
    """`python -m sglang.launch_server` (one line per node)."""
    a = ["python -m sglang.launch_server", f"--model-path {cfg['model_path']}", "--trust-remote-code"]
    a.append(f"--tp-size {s['gpus']}")
    if s["dp"] > 1:
        a += [f"--dp-size {s['dp']}", "--enable-dp-attention"]
    if s["ep"] > 1:
        a.append(f"--ep-size {s['ep']}")
    comm = cfg.get("comm") or ""
    if comm.startswith("deepep") and s["ep"] > 1:
        mode = "low_latency" if comm == "deepep-ll" else "normal"
        a += ["--moe-a2a-backend deepep", f"--deepep-mode {mode}"]
    elif comm == "pplx" and s["ep"] > 1:
        a.append("--moe-a2a-backend pplx")
    overlap = cfg.get("overlap") or ""
    if overlap == "two-batch":
        a.append("--enable-two-batch-overlap")
    elif overlap == "sbo":
        a.append("--enable-single-batch-overlap")
    notes = _overlap_note("sglang", overlap, ("two-batch", "sbo"))
    if s["redundant"] > 0:
        a += ["--enable-eplb", f"--ep-num-redundant-experts {s['redundant']}"]
    if s["mtp"] > 0:  # SGLang runs DeepSeek's MTP module as an EAGLE draft (docs: speculative decoding)
        a += ["--speculative-algorithm EAGLE", f"--speculative-num-steps {s['mtp']}", "--speculative-eagle-topk 1"]
        a.append(f"--speculative-num-draft-tokens {s['mtp'] + 1}")
    if s["chunk"] > 0:
        a.append(f"--chunked-prefill-size {s['chunk'] * s['dp']}")  # SGLang splits it over the DP-attention ranks
    if s["batch"] > 0 and cfg.get("phase", "decode") != "prefill":
        a += [f"--max-running-requests {s['batch'] * s['dp']}", f"--cuda-graph-max-bs {s['batch']}"]
    if role:
        a.append(f"--disaggregation-mode {role}")
    n = _nodes(s["gpus"], gpn)
    if n == 1:
        return notes + [" ".join(a)]
    dist = [f"--dist-init-addr {HEAD}:{SGLANG_DIST_PORT}", f"--nnodes {n}"]
    return notes + [" ".join(a + dist + [f"--node-rank {k}"]) for k in range(n)]


def _vllm_unsupported(cfg: dict, s: dict) -> str | None:
    if s["moe_tp"] > 1 and s["ep"] > 1:
        return "experts split by both EP and MoE TP (vLLM's EP spans every GPU of the instance)"
    if s["ep"] > 1 and s["ep"] != s["gpus"]:
        return f"EP {s['ep']} on {s['gpus']} GPUs (vLLM's --enable-expert-parallel uses EP = TP x DP)"
    return None


def _overlap_note(engine: str, overlap: str, has: tuple) -> list[str]:
    """A comment when the priced overlap scheme has no flag on the engine (launched without it)."""
    if not overlap or overlap in ("serial", "shared") + has:
        return []
    return [f"# {engine}: overlap {overlap} has no {engine} option: launched without it (slower than priced)"]


def _vllm(cfg: dict, s: dict, role: str | None, gpn: int) -> list[str]:
    """`vllm serve` (multi-node: DP ranks per node, the other nodes --headless)."""
    why = _vllm_unsupported(cfg, s)
    if why:
        return [f"# vllm: not supported as priced: {why}"]
    a = [f"vllm serve {cfg['model_path']}", "--trust-remote-code", f"--tensor-parallel-size {s['tp']}"]
    if s["dp"] > 1:
        a.append(f"--data-parallel-size {s['dp']}")
    if s["ep"] > 1:
        a.append("--enable-expert-parallel")
        backend = {"deepep-ll": "deepep_low_latency", "deepep-normal": "deepep_high_throughput", "pplx": "pplx"}
        a.append(f"--all2all-backend {backend.get(cfg.get('comm') or '', 'allgather_reducescatter')}")
    if (cfg.get("overlap") or "") == "two-batch":
        a.append("--enable-dbo")
    if s["redundant"] > 0:
        a += ["--enable-eplb", "--eplb-config " + _q({"num_redundant_experts": s["redundant"]})]
    if s["mtp"] > 0:
        a.append("--speculative-config " + _q({"method": "deepseek_mtp", "num_speculative_tokens": s["mtp"]}))
    if s["chunk"] > 0:
        a.append(f"--max-num-batched-tokens {s['chunk']}")
    if s["batch"] > 0 and cfg.get("phase", "decode") != "prefill":
        a.append(f"--max-num-seqs {s['batch']}")
    if role:
        kv_role = "kv_producer" if role == "prefill" else "kv_consumer"
        a.append("--kv-transfer-config " + _q({"kv_connector": "NixlConnector", "kv_role": kv_role}))
    notes, n = _overlap_note("vllm", cfg.get("overlap") or "", ("two-batch",)), _nodes(s["gpus"], gpn)
    if n == 1:
        return notes + [" ".join(a)]
    if s["tp"] > gpn or gpn % s["tp"]:
        return [f"# vllm: not supported as priced: attention TP {s['tp']} across nodes of {gpn} GPUs"]
    local = gpn // s["tp"]
    rpc = [
        f"--data-parallel-size-local {local}",
        f"--data-parallel-address {HEAD}",
        f"--data-parallel-rpc-port {VLLM_RPC_PORT}",
    ]
    out = notes + [" ".join(a + rpc)]
    out += [" ".join(a + rpc + ["--headless", f"--data-parallel-start-rank {k * local}"]) for k in range(1, n)]
    return out


def _q(obj: dict) -> str:
    """A JSON argument quoted for the shell (no spaces: one token)."""
    return "'" + json.dumps(obj, separators=(",", ":"), allow_nan=False) + "'"


def _trtllm_options(cfg: dict, s: dict, role: str | None) -> dict:
    """The --extra_llm_api_options YAML (LLM API fields of TRT-LLM 1.0)."""
    opts: dict = {}
    if s["dp"] > 1:
        opts["enable_attention_dp"] = True
    if (cfg.get("comm") or "").startswith("deepep") and s["ep"] > 1:
        opts["moe_config"] = {"backend": "WIDEEP"}  # TRT-LLM's wide-EP MoE: DeepEP all-to-all
    if s["mtp"] > 0:
        opts["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": s["mtp"]}
    if role:
        opts["cache_transceiver_config"] = {"backend": "DEFAULT"}
        opts["disable_overlap_scheduler"] = role == "prefill"  # TRT-LLM disaggregated docs: context servers
    return opts


def _trtllm(cfg: dict, s: dict, role: str | None, gpn: int) -> list[str]:
    """`trtllm-serve` (PyTorch backend) with its extra options file; multi-node under MPI."""
    if s["dp"] not in (1, s["gpus"]):
        return [f"# trtllm: not supported as priced: attention TP {s['tp']} x DP {s['dp']} (attention DP runs TP 1)"]
    opts = _trtllm_options(cfg, s, role)
    name = f"extra_llm_api_options{'_' + role if role else ''}.yaml"
    a = [f"trtllm-serve {cfg['model_path']}", "--backend pytorch", "--trust_remote_code", f"--tp_size {s['gpus']}"]
    if s["ep"] > 1:
        a.append(f"--ep_size {s['ep']}")
    if s["batch"] > 0 and cfg.get("phase", "decode") != "prefill":
        a.append(f"--max_batch_size {s['batch']}")
    if s["chunk"] > 0:
        a.append(f"--max_num_tokens {s['chunk']}")
    out = _overlap_note("trtllm", cfg.get("overlap") or "", ())
    if s["redundant"] > 0:  # TRT-LLM's EPLB takes a moe_config.load_balancer slot file, not a count
        out.append(f"# trtllm: {s['redundant']} redundant experts need moe_config.load_balancer (not emitted)")
    if opts:
        out.append(f"echo {_q(opts)} > {name}")  # JSON is YAML
        a.append(f"--extra_llm_api_options {name}")
    n = _nodes(s["gpus"], gpn)
    if n > 1:
        out.append(
            f"# trtllm: {n} nodes: start under MPI, e.g. srun -N {n} --ntasks-per-node {gpn} trtllm-llmapi-launch ..."
        )
        a.insert(0, "trtllm-llmapi-launch")
    if role:
        out.append(
            "# trtllm: route with `trtllm-serve disaggregated -c <disagg config>` over the context/generation servers"
        )
    return out + [" ".join(a)]


GENERATORS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}


def launch_commands(cfg: dict, engine: str = "sglang", *, role: str | None = None, gpus_per_node: int = 8) -> list[str]:
    """Shell lines that start the configuration ``cfg`` on ``engine`` (comments start with ``#``).

    cfg: tp, dp, ep, moe_tp, gpus, batch, mtp, redundant, comm, overlap, phase, chunk_tokens and
    model_path (a HF repo id or a local path). role: None | "prefill" | "decode" (PD disaggregation)."""
    if engine not in GENERATORS:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if role not in (None, "prefill", "decode"):
        raise ValueError(f"role {role!r}: prefill or decode")
    cfg = {"model_path": cfg.get("model") or "deepseek-ai/DeepSeek-V3", **cfg}
    return GENERATORS[engine](cfg, _shape(cfg), role, gpus_per_node)


def launch_text(configs: list[tuple[str, dict, str | None]], gpus_per_node: int = 8, engines=ENGINES) -> str:
    """Every engine's commands for (title, cfg, role) entries, each block headed by the pinned version."""
    pins = launch_flags()
    lines = []
    for title, cfg, role in configs:
        lines.append(f"# ---- launch: {title}")
        for eng in engines:
            lines.append(f"# {eng} ({pins[eng]['version']})")
            lines += launch_commands(cfg, eng, role=role, gpus_per_node=gpus_per_node)
    return "\n".join(lines)
