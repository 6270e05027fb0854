"""Serving cases of `moesim validate` (validation/simulate_cases.yaml): a published benchmark run
(deployment + client) replayed by the request-level simulator; the figures the client reported
(TTFT / TPOT / ITL / E2E mean, median, p99; throughput) against the simulation's.

Layouts are written as the engines write them (SGLang: --tp-size = the instance's GPUs, --dp-size =
DP-attention ranks; `attention_dp` for the aggregated instance) and converted to moesim's tp x dp
(attention TP x DP groups), ep x moe_tp. `unknown` settings take the engine's defaults (its serving
profile); a figure the simulator does not produce is an error row, never a silent pass.
"""

from __future__ import annotations

import math

from moesim.errors import SpecError

# the client tools' length rules (moesim.simulate.clients: `tool`); vLLM's benchmark_serving of the
# published runs drew random lengths in [r x len, len] (the InferenceX runs' mean E2E confirms it):
# its pre-PR-16126 rule, "vllm-legacy"
TOOLS = {
    "sglang-bench-serving": "sglang",
    "vllm-benchmark-serving": "vllm-legacy",
    "vllm-bench-serve": "vllm",
    "genai-perf": "genai-perf",
}
# expect key -> the simulation summary's key (and a scale: per GPU)
METRICS = {
    "ttft_mean_s": "ttft_mean_s",
    "ttft_median_s": "ttft_p50_s",
    "ttft_p90_s": "ttft_p90_s",
    "ttft_p99_s": "ttft_p99_s",
    "tpot_mean_s": "tpot_mean_s",
    "tpot_median_s": "tpot_p50_s",
    "tpot_p99_s": "tpot_p99_s",
    "itl_mean_s": "itl_mean_s",
    "itl_median_s": "itl_p50_s",
    "itl_p99_s": "itl_p99_s",
    "e2e_mean_s": "e2e_mean_s",
    "e2e_median_s": "e2e_p50_s",
    "e2e_p99_s": "e2e_p99_s",
    "output_tokens_per_s": "output_tokens_per_s",
    "request_throughput_per_s": "requests_per_s",
    "duration_s": "duration_s",
}
PER_GPU = {
    "output_tokens_per_s_per_gpu": "output_tokens_per_s",
    "input_tokens_per_s_per_gpu": "input_tokens_per_s",
    "total_tokens_per_s_per_gpu": "total_tokens_per_s",
}
SERVING_TOLERANCE = 0.30  # one benchmark run per figure, client-side timing: as serving_cases.yaml


def _known(v):
    return None if v is None or (isinstance(v, str) and v.strip().lower().startswith("unknown")) else v


def _layout(gpus: int, attention_dp: int, ep: int) -> dict:
    """An engine's (GPUs, DP-attention ranks, EP) -> moesim's tp, dp, ep, moe_tp."""
    dp = max(int(attention_dp or 1), 1)
    ep = max(int(ep or 1), 1)
    return {"tp": gpus // dp, "dp": dp, "ep": ep, "moe_tp": gpus // ep}


def simulate_kwargs(case: dict) -> tuple[dict, dict]:
    """-> (simulate keywords without the workload, client settings)."""
    where = f"{case.get('_file', '?')}: {case['id']}"
    d, cl = case["deployment"], case["client"]
    engine = str(d["engine"]).split()[0]
    dis = _known(d.get("disagg"))
    rules = {}
    if _known(d.get("chunk_tokens")) is not None and isinstance(d["chunk_tokens"], (int, float)):
        rules["chunk_tokens"] = int(d["chunk_tokens"])
        rules["max_prefill_tokens"] = int(d["chunk_tokens"])
    if isinstance(_known(d.get("max_running_requests")), (int, float)):
        rules["max_running"] = int(d["max_running_requests"])
    kw = dict(model=d["model"], hardware=d["hardware"], engine=engine, mtp=int(_known(d.get("mtp")) or 0), rules=rules)
    if dis:
        pre, dec = dis["prefill"], dis["decode"]
        kw.update(_layout(int(dec["gpus_each"]), dec.get("dp", 1), dec.get("ep", 1)), replicas=int(dec["instances"]))
        kw["prefill"] = {"instances": int(pre["instances"]),
                         **_layout(int(pre["gpus_each"]), pre.get("dp", 1), pre.get("ep", 1))}  # fmt: skip
    else:
        gpus = int(d["gpus"])
        kw.update(_layout(gpus, d.get("attention_dp", 1), d.get("ep", 1)))
        if int(d.get("moe_tp", gpus // max(int(d.get("ep", 1)), 1))) * max(int(d.get("ep", 1)), 1) != gpus:
            raise SpecError(f"{where}: deployment: ep x moe_tp must equal gpus ({gpus})")
    kind = str(cl.get("kind", ""))
    if kind not in ("closed", "open"):
        raise SpecError(f"{where}: client.kind {kind!r}: the simulator replays closed or open loops")
    return kw, cl


def workload(case: dict):
    """The client's request stream (moesim.simulate.clients) as the published run sent it."""
    from moesim.simulate import clients as C  # lazy: the simulator only for serving cases

    cl = case["client"]
    tool = TOOLS.get(str(cl.get("tool")), "sglang")
    conc = _known(cl.get("concurrency"))
    n = _known(cl.get("num_prompts"))
    if not isinstance(n, (int, float)):  # not published: ten waves of the clients (InferenceX's rule)
        n = max(10 * int(conc or 1), 100)
    r = _known(cl.get("range_ratio"))
    r = None if not isinstance(r, (int, float)) or r >= 1.0 or r <= 0.0 else float(r)
    isl, osl = int(cl["isl"]), int(cl["osl"])
    if cl["kind"] == "closed":
        return C.closed_loop(int(conc), int(n), isl, osl, range_ratio=r, tool=tool, seed=0)
    rate = _known(cl.get("rate"))
    rate = math.inf if rate is None or str(rate) == "inf" else float(rate)
    return C.open_loop(rate, int(n), isl, osl, range_ratio=r, tool=tool, max_concurrency=conc, seed=0)


def run_simulate_case(c) -> list:
    """Simulate the case's run; one check per published figure."""
    from moesim.simulate.core import simulate  # lazy: as above
    from moesim.simulate.options import options  # lazy: as above

    kw, _ = simulate_kwargs(c.raw)
    model, hardware = kw.pop("model"), kw.pop("hardware")
    cost_mode = c.raw.get("cost_mode", "calibrated")
    r = simulate(model, hardware, workload=workload(c.raw), **options(cost_mode=cost_mode, **kw))
    s = r.summary
    gpus = r.config["gpus"]
    checks = []
    for k, v in c.expect.items():
        if k in METRICS:
            pred = s[METRICS[k]]
        elif k in PER_GPU:
            pred = s[PER_GPU[k]] / gpus
        elif k == "tokens_per_s_per_user":
            pred = 1.0 / s["tpot_mean_s"]
        else:
            raise SpecError(f"{c.raw['_file']}: {c.id}: expect.{k}: not a figure the simulator reports; "
                            f"allowed: {', '.join([*METRICS, *PER_GPU, 'tokens_per_s_per_user'])}")  # fmt: skip
        checks.append(c.check(k, float(pred), v))
    return checks


__all__ = ["run_simulate_case", "simulate_kwargs", "workload", "SERVING_TOLERANCE"]
