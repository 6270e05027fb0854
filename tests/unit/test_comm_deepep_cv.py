"""The DeepEP fits' cross-validation (moesim.calibration.fit.comm_deepep): `cv` holds out 10 folds of
whole shapes (every token count of a shape together), `cv.leave_one_shape_out` one shape at a time;
no held-out row enters its own prediction."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from moesim.calibration.fit import comm_deepep as CD
from moesim.calibration.fit.comm import a2a_data
from moesim.calibration.fit.peaks import Peaks
from moesim.specs.loader import load_hardware

PEAKS = Peaks.from_hardware(load_hardware("h200"))
SRC = ("aiconfigurator-core 0.12.0 h200_sxm sglang 0.5.12 wideep_deepep_normal_perf deepep", "sglang 0.5.12")
TOKENS = (16.0, 64.0, 256.0, 1024.0, 4096.0)


def _rows(hiddens) -> pd.DataFrame:
    """Single-node normal dispatch rows: 30 us + 6 us per 1k tokens per kB of hidden (+-3 % alternating)."""
    rows = []
    for i, (hidden, topk) in enumerate((h, k) for h in hiddens for k in (6.0, 8.0)):
        for j, t in enumerate(TOKENS):
            us = (30.0 + 6e-3 * t * hidden / 1024 * topk / 8) * (1.03 if (i + j) % 2 else 0.97)
            rows.append(dict(kernel="deepep", backend="deepep", mode="normal", op="dispatch", tokens=t, hidden=hidden))
            rows[-1] |= dict(topk=topk, experts=256.0, ep=8.0, gpus_per_node=8.0, sms=20.0, topk_groups=np.nan)
            rows[-1] |= dict(time_s=us * 1e-6, exclude="", source=SRC[0], lib_versions=SRC[1])
    return pd.DataFrame(rows)


@pytest.mark.slow  # 24 + 2 fits of 11 parameters (seconds)
def test_ten_folds_of_whole_shapes_and_leave_one_shape_out_beside_them():
    ad = a2a_data(_rows((2048.0, 2560.0, 3072.0, 4096.0, 5120.0, 6144.0, 7168.0)), "deepep-normal", "dispatch")
    e = CD.fit_deepep_v2(ad, "deepep-normal", "dispatch", PEAKS, "h200")
    cv = e["cv"]
    assert cv["folds"] == 10 and cv["leave_one_shape_out"]["folds"] == 14  # 7 hidden x 2 top-k shapes
    assert cv["small"]["rows"] == 28 and cv["leave_one_shape_out"]["small"]["rows"] == 28  # 16 and 64 tokens
    assert cv["median_abs_pct"] < 8 and cv["leave_one_shape_out"]["median_abs_pct"] < 8
    assert "_loso" not in e and "0 rows of glitched collector cases" in e["note"]


def test_few_shapes_give_one_shape_a_fold_in_both_blocks():
    ad = a2a_data(_rows((3072.0, 7168.0)), "deepep-normal", "dispatch")
    rows = CD.DeepEPRows(ad, "deepep-normal", "dispatch", PEAKS)
    errs, loso, folds = CD.grouped_cv(rows)
    assert folds == 4 and np.array_equal(errs, loso, equal_nan=True)


def test_no_held_out_row_enters_its_own_prediction(monkeypatch):
    ad = a2a_data(_rows((2048.0, 3072.0, 4096.0, 5120.0, 6144.0, 7168.0)), "deepep-normal", "dispatch")
    rows = CD.DeepEPRows(ad, "deepep-normal", "dispatch", PEAKS)
    seen = []
    truth = np.array([30.0, 0, 0, 0, 0.8, 300.0, 5.0, 0.5, 4.0, 0.0, 0.0])
    monkeypatch.setattr(rows, "fit", lambda idx: seen.append(np.asarray(idx)) or truth)
    parts = CD.shape_folds(rows.shape_id, CD.CV_FOLDS)
    CD.held_out(rows, parts)
    assert len(seen) == len(parts) == 10
    for train, test in zip(seen, parts):
        assert not np.intersect1d(train, test).size and not np.isin(rows.shape_id[train], rows.shape_id[test]).any()
