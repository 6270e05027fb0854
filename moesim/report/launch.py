"""Engine launch commands for a priced configuration (`--emit-launch`), read from the engine model.

`launch_commands(cfg, engine)` maps one moesim configuration (a sweep row or the config of an
`estimate`: tp, dp, ep, moe_tp, batch, mtp, comm, overlap, redundant, gpus, and for the mixed or
prefill phase a chunk size) to the shell lines that start it on the engine it was PRICED for: one
per node, ``#`` comment lines for what the engine cannot run as priced. `launch_pd` starts a PD
pair: every prefill and decode instance (hosts, ports, the transfer backend, MTP on both sides,
multi-node ranks) and the router / proxy over them.

Everything engine-specific comes from the engine model (moesim/specs/engines/<engine>.yaml, read by
moesim.specs.engine): the pinned release, the flag spellings, which MoE communication path and
all-to-all mode each shape runs (`EngineModel.moe_paths`, the same call the pricer makes), token caps,
overlap schedules and their flags. tests/slow/test_launch_parsers.py parses every emitted line with
the pinned releases' own argument parsers; tests/property/test_engine_model.py reads the lines back
and checks that they run what was priced.

Mapping (the engine model's sources name the files):
- SGLang: --tp-size is the instance's world size, --attn-dp-size the attention-DP groups, --ep-size
  the EP ranks; DeepEP through --moe-a2a-backend deepep and --deepep-mode (auto on an aggregated
  server: normal for prefill passes, low_latency for decode).
- vLLM: --tensor-parallel-size is the attention TP, --data-parallel-size the DP ranks; with
  --enable-expert-parallel the experts span all TP x DP GPUs (EP = world size, no MoE TP); the
  --all2all-backend only runs with DP > 1.
- TRT-LLM: --tp_size is the world size; enable_attention_dp runs attention with TP 1 on every rank,
  so only attention DP 1 (pure TP) or DP = world size are expressible.
"""

from __future__ import annotations

import json
import re

from moesim.enums import CommMode, Phase
from moesim.specs.engine import PATHS, EngineModel, load_engine_model

__all__ = ["launch_commands", "launch_pd", "launch_text", "emitted_flags", "hf_model_path", "executed", "ENGINES"]

ENGINES = ("sglang", "vllm", "trtllm")
ANY_HOST = "0.0.0.0"  # servers listen on every interface: a router on another node reaches them


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
        "experts": _i(cfg, "experts", 256),
    }


def _nodes(gpus: int, gpus_per_node: int) -> int:
    return max(1, -(-gpus // max(1, gpus_per_node)))


def _phase(cfg: dict, role) -> Phase:
    if role == "prefill" or cfg.get("phase") == "prefill":
        return Phase.PREFILL
    return Phase.DECODE


def executed(cfg: dict, engine: str, role=None, mnnvl: bool = False) -> dict:
    """What the engine runs for `cfg` as priced (the pricer's own engine-model calls):
    {moe_comm: tp | a2a | allgather | allreduce, comm: the all-to-all mode asked for, modes: the
    all-to-all mode of decode-only and of prefill-carrying passes, overlap: the priced schedule if the
    engine runs it (else None)}. The generators below emit exactly this."""
    from moesim.engine.evaluate import default_comm  # lazy: only when a command is built

    em, s = load_engine_model(engine), _shape(cfg)
    phase = _phase(cfg, role)
    comm = CommMode(cfg.get("comm") or default_comm(phase))
    path = PATHS[int(em.moe_paths(comm, dp=s["dp"], ep=s["ep"], mnnvl=mnnvl))]
    aggregated = role is None
    modes = {
        "decode": em.requested(comm, Phase.DECODE, aggregated) if phase == Phase.DECODE else None,
        "prefill": em.requested(comm, Phase.PREFILL, aggregated) if (aggregated or phase == Phase.PREFILL) else None,
    }
    ov = cfg.get("overlap") or ""
    tokens = s["batch"] * (1 + s["mtp"]) if phase == Phase.DECODE else s["chunk"]
    runs = bool(ov) and bool(em.scheme_ok(ov, PATHS.index(path), tokens, phase))
    return {"moe_comm": path, "comm": comm.value, "modes": modes, "overlap": ov if runs else None, "em": em}


def _overlap_lines(em: EngineModel, ov: str, ran) -> list[str]:
    if not ov or ov == "auto" or ran is not None:
        return []
    return [f"# {em.engine.value}: overlap {ov} is not run by {em.label} at this shape: launched without it "
            f"(slower than priced; price with --overlap auto to get only what it runs)"]  # fmt: skip


def _sglang_mode(ex: dict) -> str:
    modes = {m for m in ex["modes"].values() if m is not None}
    if len(modes) > 1:
        return "auto"  # low_latency for decode batches, normal for prefill batches
    return "low_latency" if modes == {CommMode.DEEPEP_LL} else "normal"


def _sglang(cfg: dict, s: dict, role, gpn: int, ex: dict, net: dict) -> list[str]:
    """`python -m sglang.launch_server` (one line per node)."""
    em = ex["em"]
    F = em.flags
    a = [em.launch["server"], f"{F['model']} {cfg['model_path']}", F["trust_remote_code"], f"{F['tp']} {s['gpus']}"]
    if s["dp"] > 1:
        a.append(f"{F['attn_dp']} {s['dp']}")
    if s["ep"] > 1:
        a.append(f"{F['ep']} {s['ep']}")
    env = []
    if ex["moe_comm"] == "a2a":
        backend = em.a2a_backends[ex["comm"]].split(":")[0]
        a.append(f"{F['a2a_backend']} {backend}")
        if backend == "deepep":
            mode = _sglang_mode(ex)
            a.append(f"{F['deepep_mode']} {mode}")
            env = _ll_env(em, s, role, mode != "normal")
    ran = ex["overlap"]
    flag = em.overlap[ran].flag if ran else ""
    if flag:
        a.append(flag)
    if s["redundant"] > 0:
        a += [F["eplb"], f"{F['redundant']} {s['redundant']}"]
    mtp = net.get("mtp", s["mtp"])
    if mtp > 0:  # SGLang runs DeepSeek's MTP module as an EAGLE draft (docs: speculative decoding)
        a += [f"{F['spec_algorithm']} EAGLE", f"{F['spec_steps']} {mtp}", f"{F['spec_topk']} 1"]
        a.append(f"{F['spec_draft_tokens']} {mtp + 1}")
    if s["chunk"] > 0:
        a.append(f"{F['chunk']} {s['chunk'] * s['dp']}")  # SGLang splits it over the DP-attention ranks
    if s["batch"] > 0 and _phase(cfg, role) == Phase.DECODE:
        a += [f"{F['max_running']} {s['batch'] * s['dp']}", f"{F['cuda_graph_max_bs']} {s['batch']}"]
    if role:
        a += [f"{F['pd_mode']} {role}", f"{F['pd_backend']} mooncake"]
        if role == "prefill":
            a.append(f"{F['pd_bootstrap_port']} {em.launch['bootstrap_port']}")
    a += [f"{F['host']} {ANY_HOST}", f"{F['port']} {net.get('port', em.launch['port'])}"]
    pre = " ".join(env + [""]) if env else ""
    n = _nodes(s["gpus"], gpn)
    lines = _overlap_lines(em, cfg.get("overlap") or "", ran)
    if n == 1:
        return lines + [pre + " ".join(a)]
    head = net.get("host", "$HEAD_IP")
    dist = [f"{F['dist_init_addr']} {head}:{em.launch['dist_port']}", f"{F['nnodes']} {n}"]
    lines.append(f"# sglang: {n} nodes; node k runs the line with --node-rank k ({head} = node 0)")
    return lines + [pre + " ".join(a + dist + [f"{F['node_rank']} {k}"]) for k in range(n)]


def _ll_env(em: EngineModel, s: dict, role, ll: bool) -> list[str]:
    """The low-latency dispatch buffer's token cap raised when a pass sends more tokens per rank."""
    cap = em.ll_max_tokens_per_rank
    if not ll or not cap or not em.ll_env:
        return []
    per_rank = s["chunk"] if role == "prefill" else s["batch"] * (1 + s["mtp"])
    return [f"{em.ll_env}={per_rank}"] if per_rank > cap else []


def _vllm_unsupported(s: dict) -> str | None:
    if s["moe_tp"] > 1 and s["ep"] > 1:
        return "experts split by both EP and MoE TP (vLLM's EP spans every GPU of the instance)"
    if s["ep"] > 1 and s["ep"] != s["gpus"]:
        return f"EP {s['ep']} on {s['gpus']} GPUs (vLLM's --enable-expert-parallel uses EP = TP x DP)"
    return None


def _q(obj: dict) -> str:
    """A JSON argument quoted for the shell (no spaces: one token)."""
    return "'" + json.dumps(obj, separators=(",", ":"), allow_nan=False) + "'"


def _vllm(cfg: dict, s: dict, role, gpn: int, ex: dict, net: dict) -> list[str]:
    """`vllm serve` (multi-node: DP ranks per node, the other nodes --headless)."""
    em = ex["em"]
    F = em.flags
    why = _vllm_unsupported(s)
    if why:
        return [f"# vllm: not supported as priced: {why}"]
    a = [f"{em.launch['server']} {cfg['model_path']}", F["trust_remote_code"], f"{F['tp']} {s['tp']}"]
    if s["dp"] > 1:
        a.append(f"{F['dp']} {s['dp']}")
    if s["ep"] > 1:
        a.append(F["ep"])
        if ex["moe_comm"] in ("a2a", "allgather"):  # ignored with DP = 1 (use_all2all_kernels): not emitted
            a.append(f"{F['a2a_backend']} {em.a2a_backends[ex['comm'] if ex['moe_comm'] == 'a2a' else 'allgather']}")
    ran = ex["overlap"]
    if ran and em.overlap[ran].flag:
        a.append(em.overlap[ran].flag)
    if s["redundant"] > 0:
        a += [F["eplb"], F["eplb_config"] + " " + _q({"num_redundant_experts": s["redundant"]})]
    mtp = net.get("mtp", s["mtp"])
    if mtp > 0:
        a.append(F["spec"] + " " + _q({"method": "deepseek_mtp", "num_speculative_tokens": mtp}))
    if s["chunk"] > 0:
        a.append(f"{F['max_tokens']} {s['chunk']}")
    if s["batch"] > 0 and _phase(cfg, role) == Phase.DECODE:
        a.append(f"{F['max_seqs']} {s['batch']}")
    if role:
        a.append(F["kv_transfer"] + " " + _q({"kv_connector": "NixlConnector", "kv_role": "kv_both"}))
    a += [f"{F['host']} {ANY_HOST}", f"{F['port']} {net.get('port', em.launch['port'])}"]
    lines, n = _overlap_lines(em, cfg.get("overlap") or "", ran), _nodes(s["gpus"], gpn)
    if n == 1:
        return lines + [" ".join(a)]
    if s["tp"] > gpn or gpn % s["tp"]:
        return [f"# vllm: not supported as priced: attention TP {s['tp']} across nodes of {gpn} GPUs"]
    local, head = gpn // s["tp"], net.get("host", "$HEAD_IP")
    rpc = [f"{F['dp_local']} {local}", f"{F['dp_address']} {head}", f"{F['dp_rpc_port']} {em.launch['dist_port']}"]
    lines.append(f"# vllm: {n} nodes; node 0 serves the API, nodes 1..{n - 1} run headless ({head} = node 0)")
    out = lines + [" ".join(a + rpc)]
    out += [" ".join(a + rpc + [F["headless"], f"{F['dp_start_rank']} {k * local}"]) for k in range(1, n)]
    return out


def _trtllm_options(s: dict, role, ex: dict, net: dict) -> dict:
    """The LLM-API options file (TorchLlmArgs fields of the pinned release)."""
    opts: dict = {}
    if s["dp"] > 1:
        opts["enable_attention_dp"] = True
    if s["ep"] > 1:
        backend = ex["em"].a2a_backends[ex["comm"] if ex["moe_comm"] == "a2a" else "allgather"].split(":")[0]
        moe = {"backend": backend}
        if s["redundant"] > 0:  # slots beyond the experts: the MoE load balancer (num_slots a multiple of EP)
            moe["load_balancer"] = {"num_slots": s["experts"] + s["redundant"]}
        opts["moe_config"] = moe
    mtp = net.get("mtp", s["mtp"])
    if mtp > 0:
        opts["speculative_config"] = {"decoding_type": "MTP", "num_nextn_predict_layers": mtp}
    if s["batch"] > 0 and role != "prefill":
        opts["cuda_graph_config"] = {"max_batch_size": s["batch"], "enable_padding": True}
    if role:
        opts["cache_transceiver_config"] = {"backend": "DEFAULT"}
        opts["disable_overlap_scheduler"] = role == "prefill"  # TRT-LLM disaggregated docs: context servers
    return opts


def _trtllm(cfg: dict, s: dict, role, gpn: int, ex: dict, net: dict) -> list[str]:
    """`trtllm-serve` (PyTorch backend) with its LLM-API options file; multi-node under MPI."""
    em = ex["em"]
    F = em.flags
    if s["dp"] not in (1, s["gpus"]):
        return [f"# trtllm: not supported as priced: attention TP {s['tp']} x DP {s['dp']} (attention DP runs TP 1)"]
    opts = _trtllm_options(s, role, ex, net)
    name = net.get("options_file", f"llm_api_options{'_' + role if role else ''}.yaml")
    a = [f"{em.launch['server']} {cfg['model_path']}", f"{F['backend']} pytorch", F["trust_remote_code"]]
    a.append(f"{F['tp']} {s['gpus']}")
    if s["ep"] > 1:
        a.append(f"{F['ep']} {s['ep']}")
    if s["batch"] > 0 and _phase(cfg, role) == Phase.DECODE:
        a.append(f"{F['max_batch']} {s['batch']}")
    if s["chunk"] > 0:
        a.append(f"{F['max_tokens']} {s['chunk']}")
    a += [f"{F['host']} {ANY_HOST}", f"{F['port']} {net.get('port', em.launch['port'])}"]
    out = _overlap_lines(em, cfg.get("overlap") or "", ex["overlap"])
    if opts:
        out.append(f"echo {_q(opts)} > {name}")  # JSON is YAML
        a.append(f"{F['options']} {name}")
    n = _nodes(s["gpus"], gpn)
    if n > 1:
        out.append(f"# trtllm: {n} nodes of {gpn} GPUs: one MPI job (srun / mpirun) over them")
        a.insert(0, f"srun -N {n} --ntasks-per-node {gpn} --mpi pmix trtllm-llmapi-launch")
    return out + [" ".join(a)]


GENERATORS = {"sglang": _sglang, "vllm": _vllm, "trtllm": _trtllm}


def _check(engine, role):
    if engine not in GENERATORS:
        raise ValueError(f"engine {engine!r}: one of {', '.join(ENGINES)}")
    if role not in (None, "prefill", "decode"):
        raise ValueError(f"role {role!r}: prefill or decode")


def launch_commands(cfg: dict, engine: str = "sglang", *, role: str | None = None, gpus_per_node: int = 8,
                    net: dict | None = None, mnnvl: bool = False) -> list[str]:  # fmt: skip
    """Shell lines that start the configuration ``cfg`` on ``engine`` (comments start with ``#``).

    cfg: tp, dp, ep, moe_tp, gpus, batch, mtp, redundant, comm, overlap, phase, chunk_tokens, experts
    and model_path (a HF repo id or a local path). role: None | "prefill" | "decode" (PD
    disaggregation; `launch_pd` starts a whole pair). net: host (node 0's address), port, mtp (the
    decode side's drafts, for a prefill server), options_file."""
    _check(engine, role)
    cfg = {"model_path": cfg.get("model") or "deepseek-ai/DeepSeek-V3", **cfg}
    ex = executed(cfg, engine, role, mnnvl)
    return GENERATORS[engine](cfg, _shape(cfg), role, gpus_per_node, ex, net or {})


def launch_pd(prefill: dict, decode: dict, engine: str = "sglang", *, prefill_instances: int = 1,
              decode_instances: int = 1, gpus_per_node: int = 8, mnnvl: bool = False) -> list[str]:  # fmt: skip
    """A complete PD deployment: every prefill and decode instance (node 0 of instance k of a pool at
    $PREFILL_k_IP / $DECODE_k_IP), the KV transfer backend, MTP on both sides, and the router / proxy."""
    _check(engine, None)
    em = load_engine_model(engine)
    mtp = _i(decode, "mtp") if em.mtp_both_pd_sides else 0
    lines, urls = [], {"prefill": [], "decode": []}
    for role, cfg, n in (("prefill", prefill, prefill_instances), ("decode", decode, decode_instances)):
        for k in range(max(1, int(n))):
            host, port = f"${role.upper()}_{k}_IP", em.launch["port"]
            lines.append(f"# ---- {role} instance {k} (node 0 at {host})")
            net = {"host": host, "port": port, "mtp": mtp if role == "prefill" else _i(cfg, "mtp")}
            net["options_file"] = f"llm_api_options_{role}_{k}.yaml"
            lines += launch_commands(cfg, engine, role=role, gpus_per_node=gpus_per_node, net=net, mnnvl=mnnvl)
            urls[role].append(f"{host}:{port}")
    lines.append(f"# ---- router ({em.label}): clients send requests to $ROUTER_IP:{em.launch['router_port']}")
    return lines + _router(em, urls)


def _router(em: EngineModel, urls: dict) -> list[str]:
    port = em.launch["router_port"]
    if em.engine.value == "sglang":
        a = [em.launch["router"], "--pd-disaggregation"]
        a += [f"--prefill http://{u} {em.launch['bootstrap_port']}" for u in urls["prefill"]]
        a += [f"--decode http://{u}" for u in urls["decode"]]
        return [" ".join(a + [f"--host {ANY_HOST}", f"--port {port}"])]
    if em.engine.value == "trtllm":
        cfg = {"hostname": ANY_HOST, "port": port, "backend": "pytorch",
               "context_servers": {"num_instances": len(urls["prefill"]), "urls": urls["prefill"]},
               "generation_servers": {"num_instances": len(urls["decode"]), "urls": urls["decode"]}}  # fmt: skip
        # a heredoc, unquoted: the shell fills in the $..._IP addresses
        return ["cat > disagg_config.yaml <<EOF", json.dumps(cfg, indent=1), "EOF",
                f"{em.launch['router']} -c disagg_config.yaml"]  # fmt: skip
    # vllm-router (the vllm-project PD router): --vllm-pd-disaggregation over the NIXL connector
    a = [em.launch["router"], "--vllm-pd-disaggregation"]
    a += [f"--prefill http://{u}" for u in urls["prefill"]] + [f"--decode http://{u}" for u in urls["decode"]]
    return [" ".join(a + ["--kv-connector nixl", f"--host {ANY_HOST}", f"--port {port}"])]


def launch_text(configs: list[tuple[str, dict, str | None]], gpus_per_node: int = 8, engine: str = "sglang",
                mnnvl: bool = False) -> str:  # fmt: skip
    """The priced engine's commands for (title, cfg, role) entries, each block headed by the pinned
    release. role "pd": cfg = {prefill, decode, prefill_instances, decode_instances} (`launch_pd`)."""
    em = load_engine_model(engine)
    lines = []
    for title, cfg, role in configs:
        lines.append(f"# ---- launch: {title} on {em.label} (the engine priced; pinned release)")
        if role == "pd":
            lines += launch_pd(cfg["prefill"], cfg["decode"], engine, gpus_per_node=gpus_per_node, mnnvl=mnnvl,
                               prefill_instances=_i(cfg, "prefill_instances", 1),
                               decode_instances=_i(cfg, "decode_instances", 1))  # fmt: skip
        else:
            lines += launch_commands(cfg, engine, role=role, gpus_per_node=gpus_per_node, mnnvl=mnnvl)
    return "\n".join(lines)
