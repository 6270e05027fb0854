"""Cost surfaces of the simulator: the interpolation and the effective prompt length."""

import numpy as np
from scipy.interpolate import RegularGridInterpolator

from moesim.simulate.surface import _multilinear, effective_length


def test_multilinear_matches_scipy_and_clamps():
    rng = np.random.default_rng(0)
    axes = [np.sort(rng.uniform(0, 10, n)) for n in (4, 1, 3, 5, 2)]
    table = rng.normal(size=[a.size for a in axes])
    ref = RegularGridInterpolator([a for a in axes if a.size > 1], table.squeeze(1))
    for _ in range(50):
        pt = [rng.uniform(a[0], a[-1]) for a in axes]
        want = ref([p for p, a in zip(pt, axes) if a.size > 1])[0]
        assert abs(_multilinear(axes, table, pt) - want) < 1e-12
    low = [a[0] - 5.0 for a in axes]  # below every knot: the corner value
    assert _multilinear(axes, table, low) == table[(0,) * len(axes)]


def test_effective_length_prices_causal_attention_pairs():
    # one whole prompt of L tokens: L; a chunk of c after p cached tokens: 2p + c (c (p + c/2) pairs)
    assert effective_length([1000], [0]) == 1000
    assert effective_length([512], [1536]) == 2 * 1536 + 512
    # two chunks: pairs add up, L = sum c (2p + c) / sum c
    c, p = np.array([100.0, 300.0]), np.array([0.0, 50.0])
    L = effective_length(c, p)
    assert np.isclose(c.sum() * L / 2, np.sum(c * (p + c / 2)))
