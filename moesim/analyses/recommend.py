"""The fewest GPUs that serve a load (R requests/s or C concurrent users) under TTFT / TPOT targets.

Candidates are the configurations `disagg` finds meeting the targets (slo_ok):
- aggregated: n replicas of one `mixed` instance (closed loop at its batch). One instance
  finishes gpus x output tok/s/GPU / OSL requests/s and holds batch x dp users; n = ceil(R / that)
  or ceil(C / (batch x dp)).
- disaggregated: x prefill instances (the best per instance size: for one size, the most
  tokens/s per GPU admits the most requests) + y decode instances (every slo_ok decode row):
  x = ceil(R ISL / (gpus x input tok/s/GPU)), y = ceil(R OSL / (gpus x output tok/s/GPU)); for C
  users, y = ceil(C / (batch x dp)) and R = C / (TTFT + OSL x TPOT) (Little's law) feeds prefill.
GPUs = instances x allocated GPUs (whole nodes when an instance spans several, as `budget`). The
answer is the minimum over a fixed candidate set of ceil(load / capacity) x GPUs, so it never falls
when the load grows. All candidates are priced at once (numpy), ranked by GPUs, then tokens/s per GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from moesim.analyses import budget as B
from moesim.analyses.disagg import OPTION_NAMES, disagg
from moesim.engine.pricing import resolve_specs
from moesim.engine.settings import Pricing
from moesim.errors import ConfigError, is_positive_number

CEIL_EPS = 1e-9  # ceil(2.0000000001) is 2: rounding noise in a capacity ratio is not one more instance


def _ceil(x):
    return np.maximum(1.0, np.ceil(np.asarray(x, float) - CEIL_EPS))


def _load(request_rate, concurrency) -> tuple[str, float]:
    if (request_rate is None) == (concurrency is None):
        raise ConfigError("recommend: give exactly one of request_rate (requests/s) or concurrency (users)")
    name, v = ("request_rate", request_rate) if request_rate is not None else ("concurrency", concurrency)
    if not is_positive_number(v):
        raise ConfigError(f"{name}: must be a positive number; got {v!r}")
    return name, float(v)


def _cfg(df, name):
    c = lambda k: df[k].to_numpy()  # noqa: E731
    return [
        f"{name}TP{int(t)} DP{int(d)} EP{int(e)} b{b:g}" + (f" mtp{int(m)}" if m else "") + (f" r{int(r)}" if r else "")
        for t, d, e, b, m, r in zip(c("tp"), c("dp"), c("ep"), c("batch"), c("mtp"), c("redundant"))
    ]


def aggregated_candidates(mix, osl, load, gpn):
    """(frame of n replicas per slo_ok mixed row) for load = (kind, value)."""
    import pandas as pd  # lazy: start-up time

    kind, v = load
    d = mix.loc[mix["slo_ok"].to_numpy(bool)]
    g = d["gpus"].to_numpy(float)
    alloc = B.allocated_gpus(g, gpn)
    tps = d["tokens_per_s_per_gpu"].to_numpy(float)
    users = d["batch"].to_numpy(float) * d["dp"].to_numpy(float)
    n = _ceil(v / (g * tps / osl)) if kind == "request_rate" else _ceil(v / users)
    return pd.DataFrame(
        {
            "mode": "aggregated",
            "gpus": (n * alloc).astype(int),
            "deployment": [f"{int(k)} x {s}" for k, s in zip(n, _cfg(d, ""))],
            "instances": n.astype(int),
            "capacity_requests_per_s": n * g * tps / osl,
            "capacity_users": n * users,
            "tokens_per_s_per_gpu": tps,
            "ttft_s": d["ttft_s"].to_numpy(float),
            "tpot_s": d["tpot_s"].to_numpy(float),
            "_d": d.index.to_numpy(),  # the mixed row (for --emit-launch; dropped by `recommend`)
        }
    )


def disagg_candidates(pre, dec, isl, osl, load, gpn):
    """Every (best prefill row per size) x (slo_ok decode row) pair with the instance counts."""
    import pandas as pd  # lazy: start-up time

    kind, v = load
    p = pre.loc[B.best_per_size(pre, gpn)]
    d = dec.loc[dec["slo_ok"].to_numpy(bool)]
    if len(p) == 0 or len(d) == 0:
        return pd.DataFrame()
    pg, dg = p["gpus"].to_numpy(float)[:, None], d["gpus"].to_numpy(float)[None, :]
    p_req = pg * p["tokens_per_s_per_gpu"].to_numpy(float)[:, None] / isl  # requests/s one instance admits
    d_req = dg * d["tokens_per_s_per_gpu"].to_numpy(float)[None, :] / osl  # requests/s one instance finishes
    ttft = np.broadcast_to(p["ttft_total_s"].to_numpy(float)[:, None], (len(p), len(d)))
    tpot = np.broadcast_to(d["tpot_s"].to_numpy(float)[None, :], (len(p), len(d)))
    users = (d["batch"].to_numpy(float) * d["dp"].to_numpy(float))[None, :]
    if kind == "request_rate":
        rate, y = np.full((len(p), len(d)), v), _ceil(v / d_req) + 0.0 * p_req
    else:
        rate = v / (ttft + osl * tpot)  # Little's law: users / (time per request)
        y = np.maximum(_ceil(v / users), _ceil(rate / d_req)) + 0.0 * p_req
    x = _ceil(rate / p_req)
    gpus = x * B.allocated_gpus(pg, gpn) + y * B.allocated_gpus(dg, gpn)
    pi, di = np.indices(x.shape).reshape(2, -1)
    pn, dn = _cfg(p, "P "), _cfg(d, "D ")
    xs, ys = x.ravel().astype(int), y.ravel().astype(int)
    return pd.DataFrame(
        {
            "mode": "disaggregated",
            "gpus": gpus.ravel().astype(int),
            "deployment": [f"{a} x {pn[i]} + {b} x {dn[j]}" for a, i, b, j in zip(xs, pi, ys, di)],
            "instances": xs + ys,
            "capacity_requests_per_s": np.minimum(x * p_req, y * d_req).ravel(),
            "capacity_users": (y * users).ravel(),
            "tokens_per_s_per_gpu": (np.minimum(x * p_req, y * d_req) * osl / gpus).ravel(),
            "ttft_s": ttft.ravel(),
            "tpot_s": tpot.ravel(),
            "_x": xs,  # prefill instances (for the verification)
            "_p": p.index.to_numpy()[pi],  # the prefill and decode rows (for --emit-launch)
            "_d": d.index.to_numpy()[di],
        }
    )


@dataclass(frozen=True)
class Shortlist:
    """What `recommend` returns besides the search: the node size counted (None: the hardware's
    NVLink domain), whether PD candidates join, how many candidates get launch commands / are simulated."""

    gpus_per_node: object = None
    include_disagg: bool = True
    launch_top: int = 0
    verify_top: int = 0


SHORTLIST_FIELDS = tuple(f.name for f in fields(Shortlist))


def recommend(model="deepseek-v3", hardware="h800", *, isl, osl, max_ttft_s, max_tpot_s, request_rate=None,
              concurrency=None, pricing: Pricing | None = None, **kw):  # fmt: skip
    """Candidate deployments serving the load, fewest GPUs first (then most tokens/s per GPU): a
    DataFrame (mode, gpus, deployment, instances, capacity, tokens/s per GPU, TTFT, TPOT); the
    searched spaces and notes in ``attrs`` (with launch_top > 0, ``attrs["launch"]``: the
    configurations of the first launch_top rows as (title, row, role) entries). kw: `Shortlist`'s
    fields, and `disagg`'s keywords (set, axes, `DisaggOptions`, the `Pricing` fields)."""
    import pandas as pd  # lazy: start-up time

    sl = Shortlist(**{k: kw.pop(k) for k in SHORTLIST_FIELDS if k in kw})
    pricing, disagg_kwargs = Pricing.take("recommend", pricing, kw, ("set", "options", *OPTION_NAMES))
    gpus_per_node, launch_top, verify_top = sl.gpus_per_node, sl.launch_top, sl.verify_top
    load = _load(request_rate, concurrency)
    r = disagg(model, hardware, isl=isl, osl=osl, max_ttft_s=max_ttft_s, max_tpot_s=max_tpot_s, pricing=pricing,
               **disagg_kwargs)  # fmt: skip
    gpn = int(gpus_per_node) if gpus_per_node else _domain(model, hardware, disagg_kwargs.get("set"))
    isl, osl = float(isl), float(osl)
    frames = [aggregated_candidates(r.frames["mixed"], osl, load, gpn)] if r.frames.get("mixed") is not None else []
    if sl.include_disagg:
        frames.append(disagg_candidates(r.frames["prefill"], r.frames["decode"], isl, osl, load, gpn))
    frames = [f for f in frames if len(f)]
    out = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=["mode", "gpus"])
    if len(out):
        out = out.sort_values(["gpus", "tokens_per_s_per_gpu"], ascending=[True, False], kind="stable")
    out = out.reset_index(drop=True)
    launch = _launch_entries(out.head(launch_top), r.frames) if launch_top else []
    notes = list(r.notes)
    if verify_top and len(out):
        vkw = dict(pricing=pricing, set=disagg_kwargs.get("set"), chunk_tokens=disagg_kwargs.get("chunk_tokens"))
        notes += _verify(out, r.frames, model, hardware, (isl, osl), (max_ttft_s, max_tpot_s), load, verify_top,
                         vkw)  # fmt: skip
    out = out.drop(columns=[c for c in ("_p", "_d", "_x") if c in out.columns])
    out.attrs.update({"launch": launch} if launch_top else {})
    out.attrs.update({"load": dict([load]), "gpus_per_node": gpn, "searched": r.searched, "notes": notes})
    return out


SIM_COLUMNS = ("sim_ttft_mean_s", "sim_ttft_p90_s", "sim_tpot_mean_s", "sim_tpot_p90_s")


def _verify(out, frames, model, hardware, lengths, targets, load, top, kw) -> list:
    """The first `top` candidates simulated at the load (`moesim.analyses.verify`): sim_* columns
    (NaN below them) and the notes."""
    from moesim.analyses import verify as V  # lazy: the simulator only when candidates are verified

    cands = []
    for c in out.head(top).to_dict("records"):
        n = int(c["instances"])
        if c["mode"] == "aggregated":
            cands.append(V.Candidate(c["deployment"], frames["mixed"].loc[c["_d"]].to_dict(), n,
                                     closed={"ttft_s": c["ttft_s"], "tpot_s": c["tpot_s"]}))  # fmt: skip
            continue
        x = int(c["_x"])
        cands.append(V.Candidate(c["deployment"], frames["decode"].loc[c["_d"]].to_dict(), n - x,
                                 frames["prefill"].loc[c["_p"]].to_dict(), x,
                                 closed={"ttft_s": c["ttft_s"], "tpot_s": c["tpot_s"]}))  # fmt: skip
    rows = V.verify(model, hardware, cands, isl=lengths[0], osl=lengths[1], load=load, **kw)
    for col in SIM_COLUMNS:
        out[col] = [r[col] for r in rows] + [float("nan")] * (len(out) - len(rows))
    return V.notes_of(rows, *targets)


def _launch_entries(top, frames) -> list:
    """(title, configuration row, PD role) of each candidate in ``top`` (the instances to start)."""
    out = []
    for k, c in enumerate(top.to_dict("records")):
        if c["mode"] == "aggregated":
            row = {**frames["mixed"].loc[c["_d"]].to_dict()}
            out.append(
                (
                    f"#{k + 1} aggregated: {c['deployment']}",
                    {**row, "chunk_tokens": row.get("prefill_chunk_tokens")},
                    None,
                )
            )
            continue
        n_p = int(c["_x"])
        pd_ = {"prefill": frames["prefill"].loc[c["_p"]].to_dict(), "decode": frames["decode"].loc[c["_d"]].to_dict(),
               "prefill_instances": n_p, "decode_instances": int(c["instances"]) - n_p}  # fmt: skip
        out.append((f"#{k + 1} PD: {c['deployment']}", pd_, "pd"))
    return out


def _domain(model, hardware, set_) -> int:
    return resolve_specs(model, hardware, set_)[1].domain_gpus


__all__ = ["recommend", "aggregated_candidates", "disagg_candidates"]
