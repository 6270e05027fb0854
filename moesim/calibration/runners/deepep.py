"""EP all-to-all and NCCL collectives, one process per GPU (torchrun).

    torchrun --nproc-per-node 8 [--nnodes N ...] -m moesim.calibration.runners.deepep --backend deep_ep --out F.csv
    moesim calibrate run deepep            # single node: re-launches itself under torchrun

backend deep_ep: deep_ep.Buffer normal kernels (get_dispatch_layout + dispatch / combine; 4096..
8192 tokens, FP8 dispatch, BF16 combine, tokens limited to top-min(nodes, 4) nodes as DeepEP's own
test does) and low-latency kernels (low_latency_dispatch / low_latency_combine; 1..256 tokens per
rank). backend nccl: torch.distributed all_to_all_single carrying the same per-rank payload as
comm.py's "nccl" accounting (one copy per distinct destination rank), all_reduce and all_gather.
Hidden 7168, top-8, 256 experts (DeepSeek-V3). Each rank times with CUDA events; the row keeps
the slowest rank's median (a synchronous step waits for it). Rank 0 writes the rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from moesim.calibration.records import append_rows_atomic, done_keys, row_key
from moesim.calibration.runners import apis
from moesim.calibration.runners.backends import machine_info
from moesim.errors import CalibrationError
from moesim.workload.comm import a2a_copies, combine_bytes_per_token, dispatch_bytes_per_token

HIDDEN, TOPK, EXPERTS = 7168, 8, 256
DEFAULT_SMS = 20  # DeepEP's Buffer.num_sms default, which SGLang keeps unless --deepep-config sets it
LL_TOKENS = [1, 8, 32, 64, 128, 256]
NORMAL_TOKENS = [512, 1024, 2048, 4096, 8192]
NCCL_BYTES = [64 * 1024, 1024 * 1024, 16 * 1024 * 1024, 256 * 1024 * 1024]


def shapes(quick: bool, backend: str, ep: int, gpus_per_node: int) -> list[dict]:
    nodes = max(ep // gpus_per_node, 1)
    base = {"ep": ep, "hidden": HIDDEN, "topk": TOPK, "experts": EXPERTS, "gpus_per_node": gpus_per_node}
    out = []
    if backend == "deep_ep":
        for t in [128] if quick else LL_TOKENS:
            out += [{**base, "mode": "ll", "op": op, "tokens": t} for op in ("dispatch", "combine")]
        for t in [4096] if quick else NORMAL_TOKENS:
            out += [
                {**base, "mode": "normal", "op": op, "tokens": t, "topk_groups": min(nodes, 4)}
                for op in ("dispatch", "combine")
            ]
    else:
        for t in [128] if quick else LL_TOKENS + NORMAL_TOKENS:
            out += [{**base, "mode": "nccl", "op": op, "tokens": t} for op in ("dispatch", "combine")]
        for b in [16 * 1024 * 1024] if quick else NCCL_BYTES:
            out += [{"ep": ep, "op": op, "bytes": b} for op in ("all_reduce", "all_gather")]
    return out


def _kernel_of(shape: dict, backend: str) -> str:
    if backend == "deep_ep":
        return "deepep"
    return {"all_reduce": "nccl_all_reduce", "all_gather": "nccl_all_gather"}.get(shape["op"], "nccl_all_to_all")


def _routing(tokens, ep, gpus_per_node, groups, device):  # pragma: no cover - multi-GPU
    import torch  # lazy: torch is optional; only a run on this backend needs it

    scores = torch.randn(tokens, EXPERTS, device=device).abs() + 1
    nodes = max(ep // gpus_per_node, 1)
    if groups and groups < nodes:
        gs = scores.view(tokens, nodes, -1).amax(-1)
        keep = torch.topk(gs, groups, dim=-1).indices
        mask = torch.zeros(tokens, nodes, device=device, dtype=torch.bool).scatter_(1, keep, True)
        scores = scores.masked_fill(~mask.repeat_interleave(EXPERTS // nodes, dim=1), 0.0)
    idx = torch.topk(scores, TOPK, dim=-1).indices.to(torch.int64)
    w = torch.rand(tokens, TOPK, device=device, dtype=torch.float32) + 0.1
    return idx, w


def _fp8_tokens(x):  # pragma: no cover - multi-GPU
    import torch  # lazy: torch is optional; only a run on this backend needs it

    m, h = x.shape
    xv = x.float().view(m, h // 128, 128)
    amax = xv.abs().amax(-1).clamp(min=1e-4)
    q = (xv * (448.0 / amax.unsqueeze(-1))).to(torch.float8_e4m3fn).view(m, h)
    s = (amax / 448.0).contiguous()
    return q, s.T.contiguous().T  # column-major scales as DeepEP's test passes them


def _time(fn, warmup, repeats):  # pragma: no cover - multi-GPU
    import torch  # lazy: torch is optional; only a run on this backend needs it
    import torch.distributed as dist  # lazy: torch is optional; only a deepep/nccl run needs it

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        dist.barrier()
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        times.append(s.elapsed_time(e) * 1e-3)
    t = torch.tensor([statistics.median(times)], device="cuda", dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _deep_ep_fn(shape, group, device):  # pragma: no cover - multi-GPU with DeepEP
    import deep_ep  # lazy: optional GPU library, probed by backends.choose_backend
    import torch  # lazy: torch is optional; only a run on this backend needs it

    ep, t = shape["ep"], shape["tokens"]
    Buffer = apis.deep_ep_buffer(deep_ep)
    idx_dtype = apis.deep_ep_index_dtype(deep_ep, torch)
    x = torch.randn(t, HIDDEN, device=device, dtype=torch.bfloat16)
    if shape["mode"] == "ll":
        idx, w = _routing(t, ep, shape["gpus_per_node"], None, device)
        idx = idx.to(idx_dtype)
        rdma = Buffer.get_low_latency_rdma_size_hint(t, HIDDEN, ep, EXPERTS)
        buf = Buffer(group, 0, rdma, low_latency_mode=True, num_qps_per_rank=max(EXPERTS // ep, 1))
        if shape["op"] == "dispatch":
            return lambda: buf.low_latency_dispatch(x, idx, t, EXPERTS, use_fp8=True), buf
        recv, _, handle, _, _ = buf.low_latency_dispatch(x, idx, t, EXPERTS, use_fp8=False)
        y = recv if not isinstance(recv, tuple) else recv[0]
        return lambda: buf.low_latency_combine(y, idx, w, handle), buf
    idx, w = _routing(t, ep, shape["gpus_per_node"], shape.get("topk_groups"), device)
    idx = idx.to(idx_dtype)
    internode = ep > shape["gpus_per_node"]
    Buffer.set_num_sms(int(shape.get("sms") or DEFAULT_SMS))  # SMs the normal kernels may use (even)
    buf = Buffer(group, int(2e9), int(1e9) if internode else 0)
    per_rank, per_rdma, per_expert, in_rank, _ = buf.get_dispatch_layout(idx, EXPERTS)
    args = dict(
        topk_idx=idx,
        topk_weights=w,
        num_tokens_per_rank=per_rank,
        num_tokens_per_rdma_rank=per_rdma,
        is_token_in_rank=in_rank,
        num_tokens_per_expert=per_expert,
    )
    if shape["op"] == "dispatch":
        xq = _fp8_tokens(x)
        return lambda: buf.dispatch(xq, **args), buf
    recv_x, _, recv_w, _, handle, _ = buf.dispatch(x, **args)
    return lambda: buf.combine(recv_x, handle, topk_weights=recv_w), buf


def _nccl_fn(shape, group, device):  # pragma: no cover - multi-GPU
    import torch  # lazy: torch is optional; only a run on this backend needs it
    import torch.distributed as dist  # lazy: torch is optional; only a deepep/nccl run needs it

    ep = shape["ep"]
    if shape["op"] in ("all_reduce", "all_gather"):
        n = int(shape["bytes"]) // 2
        if shape["op"] == "all_reduce":
            x = torch.randn(n, device=device, dtype=torch.bfloat16)
            return lambda: dist.all_reduce(x, group=group), None
        per = max(n // ep, 1)
        x = torch.randn(per, device=device, dtype=torch.bfloat16)
        y = torch.empty(per * ep, device=device, dtype=torch.bfloat16)
        return lambda: dist.all_gather_into_tensor(y, x, group=group), None
    per_tok = dispatch_bytes_per_token(HIDDEN) if shape["op"] == "dispatch" else combine_bytes_per_token(HIDDEN)
    r, v = a2a_copies("nccl", ep, shape["gpus_per_node"], EXPERTS, TOPK)
    total = int(shape["tokens"] * (float(r) + float(v)) * per_tok)
    chunk = -(-total // max(ep - 1, 1))
    rank = dist.get_rank(group)
    splits = [0 if i == rank else chunk for i in range(ep)]
    src = torch.randint(1, 255, (sum(splits),), device=device, dtype=torch.uint8)
    dst = torch.empty_like(src)
    return lambda: dist.all_to_all_single(dst, src, splits, splits, group=group), None


def main(argv=None) -> int:  # pragma: no cover - runs under torchrun on GPUs
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default="deep_ep", choices=("deep_ep", "nccl"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--out", required=True)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sms", type=int, default=DEFAULT_SMS, help="SMs for DeepEP's normal kernels (even)")
    a = ap.parse_args(argv)
    import torch  # lazy: torch is optional; only a run on this backend needs it
    import torch.distributed as dist  # lazy: torch is optional; only a deepep/nccl run needs it

    local = int(os.environ.get("LOCAL_RANK", 0))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl")
    group = dist.new_group(list(range(dist.get_world_size())))
    ep = dist.get_world_size()
    gpn = int(os.environ.get("LOCAL_WORLD_SIZE", min(ep, 8)))
    info = machine_info("cuda", a.backend)
    info["lib_versions"] += f"; world={ep}"
    out = Path(a.out)
    done = done_keys(out) if dist.get_rank() == 0 else set()
    flag = torch.zeros(1, device="cuda")
    for shape in shapes(a.quick, a.backend, ep, gpn):
        if shape.get("mode") == "normal":
            shape["sms"] = a.sms
        row = {
            "kernel": _kernel_of(shape, a.backend),
            "backend": a.backend,
            **info,
            **shape,
            "dtype": "fp8" if shape.get("op") == "dispatch" else "bf16",
        }
        flag.fill_(1.0 if row_key(row) in done else 0.0)
        dist.broadcast(flag, 0)
        if flag.item():
            continue
        fn, buf = (_deep_ep_fn if a.backend == "deep_ep" else _nccl_fn)(shape, group, "cuda")
        t = _time(fn, a.warmup, a.repeats)
        del fn, buf
        torch.cuda.empty_cache()
        if dist.get_rank() == 0:
            row.update(
                time_s=t,
                source=f"local run: moesim.calibration.runners.deepep --backend {a.backend} on {ep} GPUs "
                f"({info['gpu']})",
                note=f"slowest rank's median of {a.repeats} CUDA-event timings after {a.warmup} warm-up",
            )
            append_rows_atomic(out, [row])
            print(f"{row['kernel']} {shape}: {t * 1e6:.1f} us", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def launch(backend: str, quick: bool, out: Path) -> int:  # pragma: no cover - needs >= 2 GPUs
    """Single node: re-run this module under torchrun on every visible GPU."""

    import torch  # lazy: torch is optional; only a run on this backend needs it

    n = torch.cuda.device_count()
    if n < 2:
        raise CalibrationError(
            f"deepep: all-to-all needs >= 2 GPUs, found {n}; for several nodes run "
            "`torchrun --nnodes N --nproc-per-node 8 -m moesim.calibration.runners.deepep --out F.csv`"
        )
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        f"--nproc-per-node={n}",
        "-m",
        "moesim.calibration.runners.deepep",
        "--backend",
        backend,
        "--out",
        str(out),
    ] + (["--quick"] if quick else [])
    return subprocess.call(cmd)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
