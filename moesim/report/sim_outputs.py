"""Outputs of a simulated run (`moesim.simulate.core.simulate`): a per-request table for ``--out``
(csv / parquet / json through `moesim.report.writer`) and a time-series figure. The summary statistics
are `moesim.simulate.stats.summarize`."""

from __future__ import annotations

import numpy as np

from moesim.report.writer import check_figure_suffix, write_figure
from moesim.simulate.requests import RequestLog, TimeSeries


def per_request_frame(log: RequestLog):
    """One row per request (warm-up included, flagged), units in the column names; for ``--out``
    through `moesim.report.writer.write_frame`."""
    import pandas as pd  # lazy: `moesim --help` must not import pandas

    n_out = np.asarray(log.output_tokens, np.int64)
    return pd.DataFrame(
        {
            "request": np.arange(n_out.size, dtype=np.int64),
            "warmup": np.asarray(log.warmup, bool),
            "sent_s": np.asarray(log.sent_s, float),
            "first_token_s": np.asarray(log.first_token_s, float),
            "finish_s": np.asarray(log.finish_s, float),
            "ttft_s": np.asarray(log.ttft_s, float),
            "tpot_s": np.asarray(log.tpot_s, float),
            "e2e_s": np.asarray(log.e2e_s, float),
            "input_tokens": np.asarray(log.input_tokens, np.int64),
            "output_tokens": n_out,
            "cached_tokens": np.asarray(log.cached_tokens, np.int64),
            "replica": np.asarray(log.replica, np.int64),
            "preemptions": np.asarray(log.preemptions, np.int64),
        }
    )


def plot_timeseries(ts: TimeSeries, log: RequestLog, path, title: str = "") -> None:
    """Three panels over run time: running batch and queue (requests), KV-cache use (%), and TTFT
    per request against its send time (warm-up requests in grey). Saved by extension (.png / .svg /
    .pdf) through the one atomic writer."""
    check_figure_suffix(path)
    import matplotlib  # lazy: matplotlib only when a figure is drawn (start-up time), as moesim.report.plots

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # lazy: matplotlib only when a figure is drawn (start-up time)

    fig, axes = plt.subplots(3, 1, figsize=(9, 7.5), sharex=True)
    t = np.asarray(ts.t_s, float)
    ax = axes[0]
    ax.step(t, np.asarray(ts.running, float), where="post", label="running (decode batch)")
    ax.step(t, np.asarray(ts.queued, float), where="post", label="queued (waiting for prefill)")
    ax.set_ylabel("requests")
    ax.legend(loc="upper right", fontsize=8)
    ax = axes[1]
    ax.step(t, 100.0 * np.asarray(ts.kv_used_frac, float), where="post", color="tab:green")
    ax.set_ylabel("KV cache used (%)")
    ax.set_ylim(0, 105)
    ax = axes[2]
    warm = np.asarray(log.warmup, bool)
    sent, ttft = np.asarray(log.sent_s, float), np.asarray(log.ttft_s, float)
    ax.scatter(sent[~warm], ttft[~warm], s=6, label="measured")
    if warm.any():
        ax.scatter(sent[warm], ttft[warm], s=6, color="grey", label="warm-up")
        ax.legend(loc="upper right", fontsize=8)
    ax.set_ylabel("TTFT (s)")
    ax.set_xlabel("time since start (s)")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    write_figure(fig, path, dpi=130)


__all__ = ["per_request_frame", "plot_timeseries"]
