"""Before / after for the published serving runs (validation/simulate_cases.yaml): the closed-form
aggregated-serving model (`estimate --phase mixed`, M/G/1 steady state) vs the request-level
simulator, against the measured mean TTFT, mean TPOT and output tokens/s per GPU. Prints a markdown
table and the median |error| per metric (aggregated cases; PD cases: simulation only).

    python bench/serving_before_after.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from moesim.analyses.validate.cases import load_cases  # noqa: E402
from moesim.analyses.validate.simulate_case import simulate_kwargs, workload  # noqa: E402
from moesim.api import simulate  # noqa: E402  (the front door: flat keywords)
from moesim.engine.estimate import estimate  # noqa: E402
from moesim.errors import MoesimError  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
METRICS = (("ttft_mean_s", "ttft_s", "ttft_mean_s"), ("tpot_mean_s", "tpot_s", "tpot_mean_s"),
           ("output_tokens_per_s_per_gpu", "tokens_per_s_per_gpu", "output_tokens_per_s_per_gpu"))  # fmt: skip


def closed_form(kw, cl) -> dict:
    """The closed form at the case's mean lengths, closed loop at its concurrency per DP group."""
    if kw.get("prefill") is not None or cl["kind"] != "closed":
        return {}
    lay = {k: kw[k] for k in ("tp", "dp", "ep", "moe_tp")}
    r = kw.get("rules", {})
    isl, osl = float(cl["isl"]), float(cl["osl"])
    ratio = cl.get("range_ratio")
    if isinstance(ratio, (int, float)) and 0 < ratio < 1:  # mean of [r x len, len]
        isl, osl = isl * (1 + ratio) / 2, osl * (1 + ratio) / 2
    e = estimate(kw["model"], kw["hardware"], phase="mixed", isl=isl, osl=osl, engine=kw["engine"], mtp=kw["mtp"],
                 batch=max(float(cl["concurrency"]) / lay["dp"], 1.0), chunk_tokens=r.get("chunk_tokens"),
                 **lay)  # fmt: skip
    return {k: float(e.values[k][0]) for _, k, _ in METRICS}


def err(pred, want):
    return pred / want - 1.0 if pred is not None and want and math.isfinite(pred) else float("nan")


def main():
    rows, errs = [], {m: ([], []) for m, _, _ in METRICS}
    for case in load_cases([ROOT / "validation" / "simulate_cases.yaml"]):
        try:
            kw, cl = simulate_kwargs(case)
            cf = closed_form(kw, cl)
            s = simulate(workload=workload(case), **kw)
        except MoesimError as e:
            print(f"{case['id']}: {e}", file=sys.stderr)
            continue
        sim = dict(s.summary)
        for metric, ck, sk in METRICS:
            want = case["expect"].get(metric)
            if want is None or isinstance(want, str):
                continue
            b, a = err(cf.get(ck), want), err(sim.get(sk), want)
            if cf:
                errs[metric][0].append(abs(b))
            errs[metric][1].append(abs(a))
            rows.append(
                f"| {case['id']} | {metric} | {want:.4g} | {cf[ck]:.4g} ({b * 100:+.0f}%) | "
                if cf
                else f"| {case['id']} | {metric} | {want:.4g} | - | "
            )
            rows[-1] += f"{sim[sk]:.4g} ({a * 100:+.0f}%) |"
    print("| case | metric | measured | closed form (before) | simulated (after) |\n|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    for metric, (b, a) in errs.items():
        bb = f"{np.nanmedian(b) * 100:.0f}% ({len(b)} cases)" if b else "-"
        print(f"median |error| {metric}: closed form {bb}; simulated {np.nanmedian(a) * 100:.0f}% ({len(a)} cases)")


if __name__ == "__main__":
    main()
