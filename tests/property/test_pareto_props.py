"""pareto_mask (sort-based, O(n log n)) == the naive O(n^2) definition, on random inputs with
ties, duplicates, infinities and NaNs."""

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from moesim.analyses.pareto import frontier_at, pareto, pareto_mask


def oracle(x, y):
    """Non-dominated points, maximizing both: no other point >= in both and > in one. NaN: never."""
    n = len(x)
    out = np.zeros(n, bool)
    for i in range(n):
        if math.isnan(x[i]) or math.isnan(y[i]):
            continue
        out[i] = not any(
            not (math.isnan(x[j]) or math.isnan(y[j]))
            and x[j] >= x[i]
            and y[j] >= y[i]
            and (x[j] > x[i] or y[j] > y[i])
            for j in range(n)
        )
    return out


# few distinct values -> many ties and exact duplicates
small = st.one_of(
    st.integers(-3, 3).map(float), st.just(float("nan")), st.just(float("inf")), st.just(float("-inf")), st.just(-0.0)
)
wide = st.floats(allow_nan=True, allow_infinity=True, width=64)
points = st.lists(st.tuples(st.one_of(small, wide), st.one_of(small, wide)), max_size=60)


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=400, deadline=None)
@given(points)
def test_mask_equals_oracle(pts):
    x = np.array([p[0] for p in pts], float)
    y = np.array([p[1] for p in pts], float)
    assert np.array_equal(pareto_mask(x, y), oracle(x, y))


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=40))
def test_frontier_properties(pts):
    x = np.array([p[0] for p in pts], float)
    y = np.array([p[1] for p in pts], float)
    m = pareto_mask(x, y)
    assert m.any()  # a non-empty finite set has a frontier
    assert m[np.argmax(x + 1e-3 * y)]  # the best-x (then best-y) point is on it
    fx, fy = x[m], y[m]
    o = np.argsort(fx, kind="stable")
    assert np.all(np.diff(fy[o]) <= 0)  # x up, y never up along the frontier
    # invariant under permutation
    perm = np.random.default_rng(len(pts)).permutation(len(pts))
    assert np.array_equal(pareto_mask(x[perm], y[perm]), m[perm])


@pytest.mark.slow  # hypothesis, 100+ examples
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5), st.sampled_from("abc")), min_size=1, max_size=40))
def test_grouped_frontier_is_per_group_mask(rows):
    df = pd.DataFrame(rows, columns=["u", "v", "g"]).astype({"u": float, "v": float})
    df["valid"] = True
    df["fits"] = True
    front = pareto(df, x="u", y="v", group_by="g")
    want = sum(int(pareto_mask(d["u"], d["v"]).sum()) for _, d in df.groupby("g"))
    assert len(front) == want
    for _g, d in front.groupby("g"):
        assert pareto_mask(d["u"], d["v"]).all()


def test_infeasible_rows_excluded_and_interpolation():
    df = pd.DataFrame(
        {
            "x": [1.0, 2.0, 3.0, 10.0],
            "y": [100.0, 10.0, 1.0, 1000.0],
            "valid": [True, True, True, False],
            "fits": [True, True, True, True],
        }
    )
    f = pareto(df, x="x", y="y")
    assert list(f["x"]) == [1.0, 2.0, 3.0]
    assert np.isclose(frontier_at(f, 1.5, x="x", y="y"), np.sqrt(100.0 * 10.0))  # linear in x, log in y
    assert np.isclose(frontier_at(f, 1.5, x="x", y="y", log_y=False), 55.0)
    assert math.isnan(frontier_at(f, 5.0, x="x", y="y"))
    assert not pareto_mask([], []).size
