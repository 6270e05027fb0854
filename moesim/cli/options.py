"""Command-line options describing one deployment configuration, shared by `estimate` and
`roofline` (one definition: same names, defaults and help)."""

from __future__ import annotations

import typer

PHASE = typer.Option("decode", help="decode | prefill | mixed (needs --isl, --osl)")
TP = typer.Option(1, help="attention tensor parallel degree")
DP = typer.Option(None, help="attention data-parallel groups (default: ep x moe_tp / tp)")
EP = typer.Option(None, help="expert-parallel ranks (default: tp x dp / moe_tp)")
MOE_TP = typer.Option(1, "--moe-tp", help="tensor parallel inside experts")
BATCH = typer.Option(None, help="decode: requests per DP group; prefill: tokens per DP group")
CONTEXT = typer.Option(None, help="decode: mean KV length; prefill: prompt length (tokens)")
MTP = typer.Option(0, help="draft tokens per step (MTP)")
ACCEPTANCE = typer.Option(0.8, help="acceptance probability per draft token")
REDUNDANT = typer.Option(0, "--redundant-experts", help="EPLB redundant expert slots")
OVERLAP = typer.Option(None, help="serial | ideal | shared | sbo | two-batch | five-stage | auto")
COST_MODE = typer.Option("calibrated", "--cost-mode", help="roofline | calibrated | measured")
COMM = typer.Option(None, help="deepep-ll | deepep-normal | nccl | pplx")
EXPERT_SKEW = typer.Option("auto", "--expert-skew", help="auto | none | uniform | zipf:<s> | load.csv")
CONTEXT_DIST = typer.Option("fixed", "--context-dist", help="fixed | exp | lognormal:<cv>")
ISL = typer.Option(None, "--isl", help="phase mixed: input (prompt) tokens per request")
OSL = typer.Option(None, "--osl", help="phase mixed: output tokens per request")
