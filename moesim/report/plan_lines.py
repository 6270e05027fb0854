"""Lines both `moesim plan` reports print (`moesim.report.plan`, `moesim.report.plan_agg`)."""

from __future__ import annotations

__all__ = ["fmt_tokens", "traffic_lines", "money_lines"]


def fmt_tokens(x: float) -> str:
    for div, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(x) >= div:
            return f"{x / div:,.3g}{unit}"
    return f"{x:,.0f}"


def traffic_lines(r) -> list[str]:
    t, tot = r.traffic, r.totals
    title = f"capacity plan{' · ' + t.name if t.name else ''} · {r.model} on {r.hardware} · {r.cost_mode}"
    title += f" · engine {r.pricing['engine']}" if r.pricing.get("engine") else ""
    return [
        f"[bold]{title}[/bold]",
        f"traffic      input {fmt_tokens(t.input_tokens)} tokens ({fmt_tokens(t.cache_hit_tokens)} cache hits, "
        f"{tot['cache_hit_share'] * 100:.1f}%), output {fmt_tokens(t.output_tokens)} over {t.hours} h; context "
        f"{t.context:g} KV tokens per output token, prompt {t.prompt.describe()} tokens"
        + (f", output {t.output.describe()} tokens" if t.output is not None else ""),
        f"SLO          >= {t.min_tokens_per_s_per_user:g} tokens/s per user"
        + (f", TTFT <= {t.max_ttft_s:g} s" if t.max_ttft_s else ", no TTFT limit"),
    ]


def money_lines(r) -> list[str]:
    e, lines = r.economics, []
    if e.get("usd_per_million_output_tokens") is not None and not e.get("usd_per_million_by_pool"):
        lines.append(f"$/M tokens   output ${e['usd_per_million_output_tokens']:.3f} (whole cost on output; one pool)")
    elif e.get("usd_per_million_output_tokens") is not None:
        lines.append(
            f"$/M tokens   output ${e['usd_per_million_output_tokens']:.3f} (whole cost on output); by pool: "
            + ", ".join(
                f"{k.replace('_', ' ')} ${v:.3f}" for k, v in e["usd_per_million_by_pool"].items() if v is not None
            )
            + " (cache hits carry no compute)"
        )
    if e.get("revenue_usd_per_day") is None:
        lines.append("revenue      not computed: no list prices (--price-input-hit/--price-input-miss/--price-output)")
        return lines
    margin = (
        f"margin {e['margin'] * 100:,.0f}% (revenue / cost - 1)"
        if e["margin"] is not None
        else "margin undefined (zero cost)"
    )
    lines.append(
        f"[bold]revenue[/bold]      ${e['revenue_usd_per_day']:,.0f} per day at list prices (every token paid) -> "
        + margin
    )
    return lines
