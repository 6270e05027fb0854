"""`moesim sweep`, `moesim pareto`, `moesim disagg`. Module-level imports: typer only (pandas,
matplotlib and rich load inside the commands, so `moesim --help` stays light)."""

from __future__ import annotations

import time
from pathlib import Path

import typer

from moesim.errors import ConfigError

AXIS_HELP = "comma list, A:B (doubling from A to B) or A:B:STEP (linear)"
MODEL_OPT = typer.Option(None, "--model", "-m", help="catalog name, YAML spec or HF config.json [default: deepseek-v3]")
HW_OPT = typer.Option(None, "--hardware", "-g", help="catalog name(s) or YAML spec(s), comma separated [default: h800]")
SET_OPT = typer.Option(None, "--set", help="what-if override, e.g. hardware.rdma_bw_GBps=100 (repeatable)")
PHASE_OPT = typer.Option(None, "--phase", help="decode | prefill | mixed (comma list) [default: decode]")
TP_OPT = typer.Option(None, "--tp", help=f"attention TP degrees: {AXIS_HELP}")
DP_OPT = typer.Option(None, "--dp", help="attention DP groups (default: derived as ep x moe_tp / tp)")
EP_OPT = typer.Option(
    None, "--ep", help="expert-parallel ranks, e.g. 8,16,32,64,128,144,256 (default: tp x dp / moe_tp)"
)
MOE_TP_OPT = typer.Option(None, "--moe-tp", help="TP inside experts")
BATCH_OPT = typer.Option(
    None, "--batch", help="decode/mixed: requests per DP group; prefill: tokens per DP group; e.g. 1:256"
)
CONTEXT_OPT = typer.Option(None, "--context", help="decode: mean KV length; prefill: prompt length (tokens)")
MTP_OPT = typer.Option(None, "--mtp", help="draft tokens per step")
ACC_OPT = typer.Option(None, "--acceptance", help="acceptance probability per draft")
RED_OPT = typer.Option(None, "--redundant-experts", "--redundant", help="EPLB redundant expert slots")
OVERLAP_OPT = typer.Option(
    None, "--overlap", help="serial | ideal | shared | sbo | two-batch | five-stage | auto (comma list)"
)
COMM_OPT = typer.Option(None, "--comm", help="deepep-ll | deepep-normal | nccl | pplx (comma list)")
COST_OPT = typer.Option(None, "--cost-mode", help="roofline | calibrated | measured [default: calibrated]")
SKEW_OPT = typer.Option(None, "--expert-skew", help="auto | none | uniform | zipf:<s> | load.csv")
CDIST_OPT = typer.Option(None, "--context-dist", help="fixed | exp | lognormal:<cv>")
ISL_OPT = typer.Option(None, "--isl", help="phase mixed: prompt tokens per request")
OSL_OPT = typer.Option(None, "--osl", help="phase mixed: output tokens per request")
STUDY_OPT = typer.Option(None, "--study", help="study YAML (axes:, model, hardware, phase, filters:); flags override")
MIN_TPU_OPT = typer.Option(
    None, "--min-tokens-per-s-per-user", help="keep rows with at least this many tokens/s per user (decode)"
)
MAX_TPOT_OPT = typer.Option(None, "--max-tpot", help="keep rows with TPOT at most this many SECONDS (0.05 = 50 ms)")
MAX_TTFT_OPT = typer.Option(None, "--max-ttft", help="keep rows with TTFT at most this many SECONDS (prefill, mixed)")
FITS_OPT = typer.Option(False, "--only-fits", help="keep only valid configurations that fit in memory")
OUT_OPT = typer.Option(None, "--out", help="write rows to .csv, .parquet or .json")
JSON_OPT = typer.Option(False, "--json", help="print the rows as JSON")


def _axes(**flags) -> dict:
    from moesim.analyses.sweep import parse_values

    out = {}
    for k, v in flags.items():
        if v is None:
            continue
        out[k] = parse_values(k, v)
    return out


def _run_sweep(
    model,
    hardware,
    set_,
    phase,
    tp,
    dp,
    ep,
    moe_tp,
    batch,
    context,
    mtp,
    acceptance,
    redundant,
    overlap,
    comm,
    cost_mode,
    expert_skew,
    context_dist,
    isl,
    osl,
    study,
    min_tpu,
    max_tpot,
    max_ttft,
    only_fits,
):
    from moesim.analyses.sweep import sweep, tune_malloc

    tune_malloc()
    axes = _axes(
        tp=tp,
        dp=dp,
        ep=ep,
        moe_tp=moe_tp,
        batch=batch,
        context=context,
        mtp=mtp,
        acceptance=acceptance,
        redundant=redundant,
        overlap=overlap,
        comm=comm,
    )
    if hardware is not None and "," in hardware:
        axes["hardware"] = [h.strip() for h in hardware.split(",") if h.strip()]
        hardware = None
    if phase is not None and "," in phase:
        axes["phase"] = [p.strip() for p in phase.split(",") if p.strip()]
        phase = None
    with _Progress() as prog:
        t0 = time.perf_counter()
        df = sweep(
            model,
            hardware,
            phase,
            axes,
            cost_mode=cost_mode,
            expert_skew=expert_skew,
            context_dist=context_dist,
            min_tokens_per_s_per_user=min_tpu,
            max_tpot_s=max_tpot,
            max_ttft_s=max_ttft,
            only_fits=only_fits or None,
            isl=isl,
            osl=osl,
            set=set_,
            study=str(study) if study else None,
            progress=prog.update,
            require_valid=True,
        )
        df.attrs["elapsed_s"] = time.perf_counter() - t0
    return df


class _Progress:
    """A rich progress bar that appears only when a sweep runs longer than ~2 s."""

    def __init__(self, after_s=1.0):
        self.t0 = time.perf_counter()
        self.after_s = after_s
        self.bar = None
        self.task = None

    def __enter__(self):
        return self

    def update(self, done, total):
        if self.bar is None:
            el = time.perf_counter() - self.t0
            # show when the projected total exceeds ~2 s and some work is still ahead
            if el < self.after_s or done >= total or el / max(done, 1) * total < 2.0:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(
                TextColumn("sweep"),
                BarColumn(),
                TextColumn("{task.completed:,}/{task.total:,}"),
                TimeRemainingColumn(),
                transient=True,
            )
            self.bar.start()
            self.task = self.bar.add_task("sweep", total=total)
        self.bar.update(self.task, completed=done)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        return False


def write_frame(df, out: Path):
    try:
        _write_frame(df, out)
    except OSError as e:
        raise ConfigError(
            f"--out: cannot write {str(out)!r} ({e.strerror or e}); allowed: a writable .csv, .parquet or .json path"
        ) from None


def _write_frame(df, out: Path):
    suf = out.suffix.lower()
    if suf == ".csv":
        df.to_csv(out, index=False)
    elif suf == ".json":
        df.to_json(out, orient="records", indent=1)
    elif suf == ".parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            try:
                import fastparquet  # noqa: F401
            except ImportError:
                raise ConfigError(
                    "--out: .parquet needs pyarrow (pip install pyarrow); allowed without it: .csv, .json"
                ) from None
        df.to_parquet(out, index=False)
    else:
        raise ConfigError(f"--out: unknown extension {out.suffix!r}; allowed: .csv, .parquet, .json")


def _emit(df, out, json_out):
    if out is not None:
        write_frame(df, Path(out))
        typer.echo(f"wrote {len(df):,} rows to {out}", err=json_out)
    if json_out:
        typer.echo(df.to_json(orient="records", indent=1))


COLS = [
    ("hardware", "hw", None),
    ("phase", "phase", None),
    ("tp", "TP", "d"),
    ("dp", "DP", "d"),
    ("ep", "EP", "d"),
    ("batch", "batch", "g"),
    ("context", "ctx", "g"),
    ("mtp", "mtp", "d"),
    ("overlap", "overlap", None),
    ("step_time_s", "step ms", "ms"),
    ("tpot_s", "TPOT ms", "ms"),
    ("ttft_s", "TTFT ms", "ms"),
    ("tokens_per_s_per_user", "tok/s/user", ",.1f"),
    ("tokens_per_s_per_gpu", "tok/s/GPU", ",.0f"),
    ("tokens_per_s_per_node", "tok/s/node", ",.0f"),
    ("bottleneck", "bound", None),
    ("fits", "fits", None),
    ("reason", "reason", None),
]


def _fmt(v, f):
    import math

    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    if f is None:
        return str(v)
    if f == "ms":
        return f"{v * 1e3:,.2f}"
    if f == "d":
        return str(int(v)) if float(v).is_integer() else f"{v:g}"
    return format(v, f)


def print_table(df, title, top=None):
    from rich.table import Table

    cols = [c for c in COLS if c[0] in df.columns]
    const = []
    for name in (
        "hardware",
        "phase",
        "context",
        "mtp",
        "overlap",
        "ttft_s",
        "tpot_s",
        "tokens_per_s_per_user",
        "fits",
        "reason",
    ):
        if name in df.columns and len(df) and df[name].nunique(dropna=False) <= 1:
            if name in ("ttft_s", "tpot_s", "tokens_per_s_per_user") and not df[name].isna().all():
                continue
            cols = [c for c in cols if c[0] != name]
            v = df[name].iloc[0]
            if name in ("hardware", "phase", "context", "mtp", "overlap") and v == v and v is not None:
                const.append(f"{name} {_fmt(v, 'g' if name == 'context' else None)}")
    if const:
        title += " · " + ", ".join(const)
    t = Table(title=title, title_justify="left")
    for _, head, f in cols:
        t.add_column(head, justify="left" if f is None else "right")
    shown = df if top is None else df.head(top)
    for row in shown[[c[0] for c in cols]].itertuples(index=False):
        t.add_row(*[_fmt(v, c[2]) for v, c in zip(row, cols)])
    _console().print(t)


def _console():
    from rich.console import Console

    c = Console()
    if not c.is_terminal:
        c = Console(width=220)
    return c


def rank(df, by="tokens_per_s_per_gpu"):
    """Valid, fitting rows first, each part best `by` first."""
    ok = (df["valid"] & df["fits"]).astype(int)
    return (
        df.assign(_ok=ok)
        .sort_values(["_ok", by], ascending=[False, False], na_position="last", kind="stable")
        .drop(columns="_ok")
    )


def _summary(df):
    import numpy as np

    n = len(df)
    valid = int(np.sum(df["valid"])) if n else 0
    fits = int(np.sum(df["valid"] & df["fits"])) if n else 0
    el = df.attrs.get("elapsed_s", float("nan"))
    ev = df.attrs.get("evaluated")
    shown = f"{n:,} configurations ({valid:,} valid, {fits:,} fit)"
    if ev and ev["configurations"] != n:
        shown = (
            f"{ev['configurations']:,} configurations evaluated ({ev['valid']:,} valid, {ev['fit']:,} fit), "
            f"{n:,} pass the filters"
        )
    lines = [f"{shown} in {el:.2f} s; batch: {df.attrs.get('units', {}).get('batch', '')}"]
    lines += [f"note: {x}" for x in df.attrs.get("notes", [])]
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    @app.command("sweep")
    def sweep_cmd(
        model: str | None = MODEL_OPT,
        hardware: str | None = HW_OPT,
        set_: list[str] | None = SET_OPT,
        phase: str | None = PHASE_OPT,
        tp: str | None = TP_OPT,
        dp: str | None = DP_OPT,
        ep: str | None = EP_OPT,
        moe_tp: str | None = MOE_TP_OPT,
        batch: str | None = BATCH_OPT,
        context: str | None = CONTEXT_OPT,
        mtp: str | None = MTP_OPT,
        acceptance: str | None = ACC_OPT,
        redundant: str | None = RED_OPT,
        overlap: str | None = OVERLAP_OPT,
        comm: str | None = COMM_OPT,
        cost_mode: str | None = COST_OPT,
        expert_skew: str | None = SKEW_OPT,
        context_dist: str | None = CDIST_OPT,
        isl: float | None = ISL_OPT,
        osl: float | None = OSL_OPT,
        study: Path | None = STUDY_OPT,
        min_tokens_per_s_per_user: float | None = MIN_TPU_OPT,
        max_tpot: float | None = MAX_TPOT_OPT,
        max_ttft: float | None = MAX_TTFT_OPT,
        only_fits: bool = FITS_OPT,
        top: int = typer.Option(20, "--top", help="rows to print, best tokens/s per GPU first"),
        out: Path | None = OUT_OPT,
        json_out: bool = JSON_OPT,
    ):
        """Evaluate the cartesian product of deployment axes; print the best rows (tokens/s per GPU)."""
        df = _run_sweep(
            model,
            hardware,
            set_,
            phase,
            tp,
            dp,
            ep,
            moe_tp,
            batch,
            context,
            mtp,
            acceptance,
            redundant,
            overlap,
            comm,
            cost_mode,
            expert_skew,
            context_dist,
            isl,
            osl,
            study,
            min_tokens_per_s_per_user,
            max_tpot,
            max_ttft,
            only_fits,
        )
        ranked = rank(df)
        if out is not None or json_out:
            _emit(ranked, out, json_out)
            if json_out:
                return
        if top < 0:
            raise ConfigError("--top: must be >= 0")
        print_table(ranked, f"top {min(top, len(ranked))} of {len(ranked):,} by tokens/s per GPU (feasible first)", top)
        typer.echo(_summary(df))

    @app.command("pareto")
    def pareto_cmd(
        model: str | None = MODEL_OPT,
        hardware: str | None = HW_OPT,
        set_: list[str] | None = SET_OPT,
        phase: str | None = PHASE_OPT,
        tp: str | None = TP_OPT,
        dp: str | None = DP_OPT,
        ep: str | None = EP_OPT,
        moe_tp: str | None = MOE_TP_OPT,
        batch: str | None = BATCH_OPT,
        context: str | None = CONTEXT_OPT,
        mtp: str | None = MTP_OPT,
        acceptance: str | None = ACC_OPT,
        redundant: str | None = RED_OPT,
        overlap: str | None = OVERLAP_OPT,
        comm: str | None = COMM_OPT,
        cost_mode: str | None = COST_OPT,
        expert_skew: str | None = SKEW_OPT,
        context_dist: str | None = CDIST_OPT,
        isl: float | None = ISL_OPT,
        osl: float | None = OSL_OPT,
        study: Path | None = STUDY_OPT,
        min_tokens_per_s_per_user: float | None = MIN_TPU_OPT,
        max_tpot: float | None = MAX_TPOT_OPT,
        max_ttft: float | None = MAX_TTFT_OPT,
        group_by: str | None = typer.Option(
            None, "--group-by", help="ep | hardware | overlap | tp (one frontier per value; comma list for several)"
        ),
        x: str = typer.Option("tokens_per_s_per_user", "--x", help="column to maximize on x"),
        y: str | None = typer.Option(None, "--y", help="column to maximize on y [default: from --per]"),
        per: str = typer.Option("gpu", "--per", help="node | gpu: throughput per machine or per GPU on y"),
        plot: Path | None = typer.Option(None, "--plot", help="draw the frontiers to this image (png, svg, pdf)"),
        out: Path | None = OUT_OPT,
        json_out: bool = JSON_OPT,
    ):
        """Pareto frontier(s) of throughput vs tokens/s per user (valid configurations that fit)."""
        from moesim.analyses.pareto import pareto

        if per not in ("gpu", "node"):
            raise ConfigError(f"--per: {per!r} is not one of {{gpu, node}}")
        y = y or f"tokens_per_s_per_{per}"
        keys = None
        if group_by:
            keys = [k.strip() for k in group_by.split(",") if k.strip()]
        df = _run_sweep(
            model,
            hardware,
            set_,
            phase,
            tp,
            dp,
            ep,
            moe_tp,
            batch,
            context,
            mtp,
            acceptance,
            redundant,
            overlap,
            comm,
            cost_mode,
            expert_skew,
            context_dist,
            isl,
            osl,
            study,
            min_tokens_per_s_per_user,
            max_tpot,
            max_ttft,
            True,
        )
        front = pareto(df, x=x, y=y, group_by=keys if keys is None or len(keys) > 1 else keys[0])
        if plot is not None:
            plot_frontiers(df, front, x, y, keys, plot)
        if out is not None or json_out:
            _emit(front, out, json_out)
            if json_out:
                return
        print_table(front, f"Pareto frontier{'s by ' + ', '.join(keys) if keys else ''}: max {x} and {y}")
        typer.echo(_summary(df))
        if plot is not None:
            typer.echo(f"wrote {plot}")

    @app.command("disagg")
    def disagg_cmd(
        model: str | None = MODEL_OPT,
        hardware: str | None = typer.Option("h800", "--hardware", "-g", help="catalog name or YAML spec"),
        set_: list[str] | None = SET_OPT,
        isl: float = typer.Option(..., "--isl", help="prompt (input) tokens per request"),
        osl: float = typer.Option(..., "--osl", help="output tokens per request"),
        max_ttft: float = typer.Option(..., "--max-ttft", help="TTFT target in SECONDS (incl. KV transfer)"),
        max_tpot: float = typer.Option(..., "--max-tpot", help="TPOT target in SECONDS (0.05 = 50 ms)"),
        prefill_hardware: str | None = typer.Option(None, "--prefill-hardware", help="[default: --hardware]"),
        decode_hardware: str | None = typer.Option(None, "--decode-hardware", help="[default: --hardware]"),
        prefill_tp: str | None = typer.Option(None, "--prefill-tp", help=f"prefill TP: {AXIS_HELP}"),
        prefill_ep: str | None = typer.Option(None, "--prefill-ep", help="prefill EP ranks"),
        prefill_batch: str | None = typer.Option(None, "--prefill-batch", help="prefill tokens per DP group per step"),
        tp: str | None = typer.Option(None, "--decode-tp", "--tp", help="decode TP"),
        ep: str | None = typer.Option(None, "--decode-ep", "--ep", help="decode EP ranks"),
        batch: str | None = typer.Option(None, "--decode-batch", "--batch", help="decode requests per DP group"),
        context: str | None = typer.Option(None, "--context", help="decode mean KV length [default: isl + osl/2]"),
        mtp: str | None = MTP_OPT,
        acceptance: str | None = ACC_OPT,
        redundant: str | None = RED_OPT,
        cost_mode: str = typer.Option("calibrated", "--cost-mode", help="roofline | calibrated | measured"),
        expert_skew: str = typer.Option("auto", "--expert-skew", help="auto | none | uniform | zipf:<s> | load.csv"),
        context_dist: str = typer.Option("fixed", "--context-dist", help="fixed | exp | lognormal:<cv>"),
        max_instances: int = typer.Option(64, "--max-instances", help="largest pool size in instances"),
        no_aggregated: bool = typer.Option(False, "--no-aggregated", help="skip the aggregated (mixed) comparison"),
        json_out: bool = JSON_OPT,
        out: Path | None = typer.Option(None, "--out", help="write the result JSON to a file"),
    ):
        """Disaggregated prefill/decode pools for (ISL, OSL) under TTFT/TPOT targets vs aggregated serving."""
        import json

        from moesim.analyses.disagg import DEFAULT_DECODE_AXES, DEFAULT_PREFILL_AXES, disagg
        from moesim.analyses.sweep import tune_malloc

        tune_malloc()

        pax = {**DEFAULT_PREFILL_AXES, **_axes(tp=prefill_tp, ep=prefill_ep, batch=prefill_batch)}
        dax = {
            **DEFAULT_DECODE_AXES,
            **_axes(tp=tp, ep=ep, batch=batch, context=context, mtp=mtp, acceptance=acceptance, redundant=redundant),
        }
        from moesim.api import resolve_specs

        spec, _ = resolve_specs(model or "deepseek-v3", decode_hardware or hardware, set_)
        if not spec.mtp_layers:  # the default decode space drafts with MTP; a model without it cannot
            if mtp is not None and any(v > 0 for v in dax["mtp"]):
                raise ConfigError(f"mtp: {spec.name} has no MTP module (mtp_layers = 0); allowed 0")
            dax["mtp"] = [0.0]
        with _Progress() as prog:
            r = disagg(
                model or "deepseek-v3",
                hardware,
                isl=isl,
                osl=osl,
                max_ttft_s=max_ttft,
                max_tpot_s=max_tpot,
                prefill_hardware=prefill_hardware,
                decode_hardware=decode_hardware,
                prefill_axes=pax,
                decode_axes=dax,
                cost_mode=cost_mode,
                expert_skew=expert_skew,
                context_dist=context_dist,
                set=set_,
                compare_aggregated=not no_aggregated,
                max_instances=max_instances,
                progress=prog.update,
            )
        d = r.to_dict()
        if out is not None or json_out:
            text = json.dumps(d, indent=2, default=str)
            if out is not None:
                try:
                    Path(out).write_text(text + "\n")
                except OSError as e:
                    raise ConfigError(
                        f"--out: cannot write {str(out)!r} ({e.strerror or e}); allowed: a writable file path"
                    ) from None
                typer.echo(f"wrote {out}", err=json_out)
            if json_out:
                typer.echo(text)
                return
        print_disagg(r)


def print_disagg(r):
    c = _console()
    w = r.workload
    lines = [
        f"workload ISL {w['isl']:g} / OSL {w['osl']:g} tokens; targets TTFT <= {w['max_ttft_s'] * 1e3:g} ms, "
        f"TPOT <= {w['max_tpot_s'] * 1e3:g} ms; prefill on {w['prefill_hardware']}, decode on "
        f"{w['decode_hardware']} ({w['cost_mode']})"
    ]

    def cfg(row, unit):
        return (
            f"TP{row['tp']} DP{row['dp']} EP{row['ep']} ({row['gpus']} GPUs), batch {row['batch']:g} {unit}, "
            f"overlap {row['overlap']}"
        )

    p, d, a = r.prefill, r.decode, r.aggregated
    if p:
        lines.append(
            f"prefill pool     {cfg(p, 'tokens/DP group')}: {p['tokens_per_s_per_gpu']:,.0f} input tok/s/GPU, "
            f"TTFT {p['ttft_total_s'] * 1e3:,.1f} ms (KV transfer {p['kv_transfer_s'] * 1e3:.2f} ms)"
        )
    if d:
        lines.append(
            f"decode pool      {cfg(d, 'requests/DP group')}, context {d['context']:g}: "
            f"{d['tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, TPOT {d['tpot_s'] * 1e3:.1f} ms "
            f"({d['tokens_per_s_per_user']:.1f} tok/s/user)"
        )
    if p and d:
        kv = r.kv_transfer
        dep = r.deployment
        lines.append(
            f"KV transfer      {kv['bytes_per_request'] / 1e6:,.1f} MB/request over "
            f"{kv['link_bytes_per_s'] / 1e9:g} GB/s: {kv['transfer_s_per_request'] * 1e3:.2f} ms; decode "
            f"receives {kv['decode_kv_recv_s_per_step'] * 1e3:.2f} ms/step = "
            f"{kv['decode_kv_share_of_step'] * 100:.1f}% of the step; prefill NIC "
            f"{kv['prefill_kv_send_link_util'] * 100:.1f}% busy"
        )
        lines.append(
            f"rate match       {r.ratio_prefill_per_decode_gpu:.3f} prefill GPUs per decode GPU -> "
            f"{r.system_tokens_per_s_per_gpu:,.0f} output tok/s per GPU "
            f"({r.system_total_tokens_per_s_per_gpu:,.0f} input+output)"
        )
        if dep:
            lines.append(
                f"whole instances  {dep['prefill_instances']} prefill x {p['gpus']} GPUs + "
                f"{dep['decode_instances']} decode x {d['gpus']} GPUs: "
                f"{dep['output_tokens_per_s_per_gpu']:,.0f} output tok/s/GPU, "
                f"{dep['requests_per_s']:,.1f} requests/s"
            )
    if a:
        lines.append(
            f"aggregated best  {cfg(a, 'requests/DP group')}, context {a['context']:g}: {a['tokens_per_s_per_gpu']:,.0f} "
            f"output tok/s/GPU, TPOT {a['tpot_s'] * 1e3:.1f} ms, TTFT {a['ttft_s'] * 1e3:,.1f} ms "
            f"(prefill chunk {a['prefill_chunk_tokens']:,.0f} tokens/step)"
        )
        if r.speedup_vs_aggregated == r.speedup_vs_aggregated:
            lines.append(f"disaggregated / aggregated = {r.speedup_vs_aggregated:.2f}x output tokens/s per GPU")
    lines += [f"note: {n}" for n in r.notes]
    c.print("\n".join(lines), highlight=False)


def plot_frontiers(df, front, x, y, keys, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5.5))
    feas = df[df["valid"] & df["fits"]]
    if keys:
        groups = list(front.groupby(keys, sort=True))
        allg = dict(list(feas.groupby(keys, sort=True)))
    else:
        groups, allg = [(None, front)], {None: feas}
    for g, f in groups:
        label = None if g is None else ", ".join(f"{k}={v}" for k, v in zip(keys, g if isinstance(g, tuple) else (g,)))
        pts = allg.get(g)
        (line,) = ax.plot(f[x], f[y], marker="o", ms=4, label=label)
        if pts is not None and len(pts):
            ax.scatter(pts[x], pts[y], s=6, alpha=0.25, color=line.get_color())
    ax.set_yscale("log")
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.grid(True, which="both", alpha=0.3)
    if keys:
        ax.legend(fontsize=8)
    ax.set_title("Pareto frontiers (maximize both)")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=120)
    except (OSError, ValueError) as e:
        raise ConfigError(f"--plot: cannot write {path} ({e})") from None
    finally:
        plt.close(fig)
