"""Behaviour is pinned: every recorded command prints the same JSON as when it was recorded.

Numbers compare to 1e-9 relative (a refactor may reorder a floating-point sum; a model change
moves numbers by far more). Strings, booleans, keys and list lengths compare exactly."""

from __future__ import annotations

import json
import math

import pytest
from golden_cases import CASES, path, run


def _diff(a, b, where="$"):
    if isinstance(a, dict) and isinstance(b, dict):
        if set(a) != set(b):
            return f"{where}: keys differ: only recorded {sorted(set(a) - set(b))}, only now {sorted(set(b) - set(a))}"
        for k in a:
            d = _diff(a[k], b[k], f"{where}.{k}")
            if d:
                return d
        return None
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return f"{where}: length {len(a)} recorded, {len(b)} now"
        for i, (x, y) in enumerate(zip(a, b)):
            d = _diff(x, y, f"{where}[{i}]")
            if d:
                return d
        return None
    num = (int, float)
    if isinstance(a, num) and isinstance(b, num) and not isinstance(a, bool) and not isinstance(b, bool):
        if math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-15) or (math.isnan(a) and math.isnan(b)):
            return None
        return f"{where}: {a!r} recorded, {b!r} now"
    return None if a == b and type(a) is type(b) else f"{where}: {a!r} recorded, {b!r} now"


def test_diff_catches_changes():
    assert _diff({"a": [1.0, "x"]}, {"a": [1.0, "x"]}) is None
    assert _diff({"a": [1.0]}, {"a": [1.0 + 1e-6]})
    assert _diff({"a": True}, {"a": 1})
    assert _diff({"a": 1}, {"b": 1})
    assert _diff([1], [1, 2])


@pytest.mark.parametrize("name", sorted(CASES))
def test_golden(name):
    recorded = json.loads(path(name).read_text())
    code, data = run(CASES[name])
    assert code == recorded["exit_code"]
    d = _diff(recorded["output"], data)
    assert d is None, f"{name} ({' '.join(CASES[name])}): {d}"
