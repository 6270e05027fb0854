"""TEMPORARY"""

import numpy as np


def summarize(log, slo_ttft_s=None, slo_tpot_s=None, duration_s=None):
    m = ~log.warmup
    d = {}
    for k, v in (("ttft", log.ttft_s), ("tpot", log.tpot_s), ("e2e", log.e2e_s)):
        v = v[m]
        d[k + "_mean_s"] = float(np.nanmean(v))
        for q in (50, 90, 99):
            d[f"{k}_p{q}_s"] = float(np.nanpercentile(v, q))
    span = np.nanmax(log.finish_s[m]) - np.nanmin(log.sent_s[m])
    d["output_tokens_per_s"] = float(log.output_tokens[m].sum() / span)
    d["requests_per_s"] = float(m.sum() / span)
    return d
