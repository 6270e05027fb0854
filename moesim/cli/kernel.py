"""`moesim kernel`: one kernel's predicted time, FLOPs, bytes, bound, efficiency, provenance."""

from __future__ import annotations

import typer

# Largest accepted shape per flag (larger overflows float64 FLOP counts or is no real kernel).
KERNEL_MAX = {"ep": 1e6, "gpus": 1e6, "groups": 1e6, "heads": 1e6, "q_len": 1e6, "context": 1e8, "bytes": 1e15}
OPS = ("gemm", "grouped_gemm", "mla_decode", "mla_prefill", "dispatch", "combine", "all_reduce", "all_gather")


def kernel_work(
    model,
    hw,
    op: str,
    *,
    m=None,
    n=None,
    k=None,
    groups=1,
    layout="masked",
    batch=None,
    q_len=1,
    context=None,
    heads=None,
    ep=None,
    tokens=None,
    mode="deepep-ll",
    gpus=None,
    nbytes=None,
):
    """Build the OpWork of one kernel from shape flags (same formulas as the workload)."""
    import numpy as np

    from moesim.enums import CommMode, Dtype, OpKind, Stream
    from moesim.errors import ConfigError
    from moesim.workload import comm as C
    from moesim.workload.ops import OpWork, gemm

    def need(**kw):
        for name, v in kw.items():
            if v is None:
                raise ConfigError(f"--{name.replace('_', '-')}: required for --op {op}")
            check(name, v)

    def check(name, v):  # a size: finite, > 0, at most SHAPE_MAX (counts: whole numbers)
        flag = f"--{name.replace('_', '-')}"
        hi = KERNEL_MAX.get(name, 1e9)
        integer = name in ("groups", "ep", "gpus")
        try:
            x = float(v)
        except (TypeError, ValueError):
            x = float("nan")
        if not np.isfinite(x) or x <= 0 or x > hi or (integer and x != round(x)):
            kind = "an integer" if integer else "a finite number"
            raise ConfigError(f"{flag}: {kind} in {'[1' if integer else '(0'}, {hi:g}] required, got {v}")

    for name, v in (("q_len", q_len), ("heads", heads), ("groups", groups)):
        if v is not None:
            check(name, v)

    p = model.precision
    if op == "gemm":
        need(m=m, n=n, k=k)
        return gemm(
            "gemm",
            np.asarray([float(m)]),
            n,
            k,
            w_bytes=p.weight_dtype.bytes,
            a_bytes=p.activation_dtype.bytes,
            dtype=p.weight_dtype,
            block=p.weight_block,
        )
    if op == "grouped_gemm":
        need(m=m, n=n, k=k, groups=groups)
        if layout not in ("masked", "contiguous"):
            raise ConfigError(f"--layout: {layout!r}; allowed: masked, contiguous")
        mm = np.asarray([float(m)])
        wb = p.weight_dtype.bytes
        return OpWork(
            "grouped_gemm",
            OpKind.GROUPED_GEMM,
            p.weight_dtype,
            4,
            flops=2.0 * groups * mm * n * k,
            bytes_weight=groups * n * k * (wb + 4.0 / 128**2) * np.ones(1),
            bytes_act=groups * mm * (k * (1 + 4.0 / 128) + n * 2.0),
            shape={
                "m": mm,
                "n": np.asarray([float(n)]),
                "k": np.asarray([float(k)]),
                "groups": np.asarray([float(groups)]),
                "layout": layout,
            },
        )
    if op in ("mla_decode", "mla_prefill"):
        a = model.attention
        need(batch=batch, context=context)
        if a.kind.value != "mla":
            raise ConfigError(
                f"--op {op}: {model.name} has {a.kind.value} attention; allowed for MLA models only (e.g. deepseek-v3)"
            )
        h = float(heads or a.num_heads)
        lat, rope = a.kv_lora_rank, a.qk_rope_head_dim
        b, c = np.asarray([float(batch)]), float(context)
        if op == "mla_decode":
            flops = 2.0 * b * q_len * h * c * ((lat + rope) + lat)
            return OpWork(
                "mla_decode",
                OpKind.ATTENTION,
                p.attention_dtype,
                2,
                flops=flops,
                bytes_kv=b * c * (lat + rope) * p.kv_dtype.bytes,
                bytes_act=b * q_len * h * (2 * lat + rope) * 2.0,
                shape={
                    "batch": b,
                    "q_len": np.asarray([float(q_len)]),
                    "context": np.asarray([c]),
                    "heads": np.asarray([h]),
                    "prefill": False,
                },
            )
        qd, vd = a.qk_nope_head_dim + rope, a.v_head_dim
        t = b * c
        return OpWork(
            "mla_prefill",
            OpKind.ATTENTION,
            p.attention_dtype,
            2,
            flops=2.0 * h * t * (c / 2) * (qd + vd),
            bytes_act=t * h * (2 * qd + 2 * vd) * 2.0,
            shape={
                "batch": b,
                "q_len": np.asarray([c]),
                "context": np.asarray([c]),
                "heads": np.asarray([h]),
                "prefill": True,
            },
        )
    if op in ("dispatch", "combine"):
        need(ep=ep, tokens=tokens)
        mode = CommMode.parse(mode, "mode")
        moe = model.moe
        if moe is None:
            raise ConfigError(f"--op {op}: {model.name} has no experts")
        e = np.asarray([float(ep)])
        rc, nc = C.a2a_copies(mode, e, hw.domain_gpus, moe.num_experts, moe.top_k)
        msg = (
            C.dispatch_bytes_per_token(model.hidden_size)
            if op == "dispatch"
            else C.combine_bytes_per_token(model.hidden_size)
        )
        return OpWork(
            op,
            OpKind.ALL_TO_ALL,
            Dtype.FP8 if op == "dispatch" else Dtype.BF16,
            3,
            stream=Stream.COMM,
            net_bytes_rdma=tokens * rc * msg,
            net_bytes_nvlink=tokens * nc * msg,
            group=e,
            comm_op=op,
            shape={"ep": e, "tokens": np.asarray([float(tokens)]), "mode": mode.value},
        )
    if op in ("all_reduce", "all_gather"):
        need(gpus=gpus, bytes=nbytes)
        g = np.asarray([float(gpus)])
        sent = C.ring_allreduce_bytes(g, nbytes) if op == "all_reduce" else C.ring_allgather_bytes(g, nbytes)
        inside = g <= hw.domain_gpus
        return OpWork(
            op,
            OpKind.COLLECTIVE,
            Dtype.BF16,
            2,
            stream=Stream.COMM,
            net_bytes_nvlink=np.where(inside, sent, 0),
            net_bytes_rdma=np.where(inside, 0, sent),
            group=g,
            comm_op=op,
            shape={"bytes": np.asarray([float(nbytes)]), "gpus": g},
        )
    raise ConfigError(f"--op: {op!r}; allowed: {', '.join(OPS)}")


def register(app: typer.Typer) -> None:
    @app.command()
    def kernel(
        op: str = typer.Option(..., "--op", help=" | ".join(OPS)),
        model: str = typer.Option("deepseek-v3", "--model", "-m"),
        hardware: str = typer.Option("h800", "--hardware", "-g"),
        cost_mode: str = typer.Option("calibrated", "--cost-mode"),
        m: float | None = typer.Option(None, "--m"),
        n: float | None = typer.Option(None, "--n"),
        k: float | None = typer.Option(None, "--k"),
        groups: float = typer.Option(1, "--groups"),
        layout: str = typer.Option("masked", "--layout"),
        batch: float | None = typer.Option(None, "--batch"),
        q_len: float = typer.Option(1, "--q-len"),
        context: float | None = typer.Option(None, "--context"),
        heads: float | None = typer.Option(None, "--heads"),
        ep: float | None = typer.Option(None, "--ep"),
        tokens: float | None = typer.Option(None, "--tokens"),
        mode: str = typer.Option("deepep-ll", "--mode"),
        gpus: float | None = typer.Option(None, "--gpus"),
        nbytes: float | None = typer.Option(None, "--bytes"),
        set_: list[str] | None = typer.Option(None, "--set"),
        json_out: bool = typer.Option(False, "--json"),
    ):
        """Predict one kernel: time_s, flops, bytes, bound, efficiency, provenance."""
        import json

        import numpy as np

        from moesim import units as U
        from moesim.api import load_profile_for, resolve_specs
        from moesim.enums import CostMode, Stream
        from moesim.perf.cost import CostModel

        mdl, hw = resolve_specs(model, hardware, set_)
        cm_mode = CostMode.parse(cost_mode, "cost_mode")
        prof, notes = load_profile_for(hw, cm_mode)
        w = kernel_work(
            mdl,
            hw,
            op,
            m=m,
            n=n,
            k=k,
            groups=groups,
            layout=layout,
            batch=batch,
            q_len=q_len,
            context=context,
            heads=heads,
            ep=ep,
            tokens=tokens,
            mode=mode,
            gpus=gpus,
            nbytes=nbytes,
        )
        cost = CostModel(hw, mdl, cm_mode, prof).cost(w)
        roof = CostModel(hw, mdl, CostMode.ROOFLINE, None).cost(w)
        t = float(np.ravel(cost.time_s)[0])
        eff = float(np.ravel(roof.time_s)[0]) / t if t > 0 else 1.0
        res = {
            "op": op,
            "hardware": hw.name,
            "cost_mode": cm_mode.value,
            "time_s": t,
            "flops": float(np.ravel(cost.flops)[0]) if w.stream == Stream.COMPUTE else 0.0,
            "bytes": float(np.ravel(cost.bytes)[0]),
            "bound": cost.bound_name(0),
            "efficiency": eff,
            "roofline_time_s": float(np.ravel(roof.time_s)[0]),
            "provenance": cost.provenance,
            "notes": notes,
        }
        if json_out:
            typer.echo(json.dumps(res, indent=2, allow_nan=False))
        else:
            typer.echo(
                f"{op} on {hw.name} ({cm_mode.value}): {U.fmt_time(t)}  bound {res['bound']}  "
                f"efficiency vs roofline {eff * 100:.0f}%  [{res['provenance']}]  "
                f"{res['flops'] / 1e9:.2f} GFLOP  {U.fmt_bytes(res['bytes'])}"
            )
            for x in notes:
                typer.echo(f"note: {x}")
