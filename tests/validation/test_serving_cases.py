"""validation/serving_cases.yaml (issue 15 section 3): published serving measurements load and run.

These tests check that the cases are well formed and priced (a finite prediction for every
published figure, the mixed-phase cases through the aggregated-serving model); they do not assert
pass/fail against the published figures (that is `moesim validate`'s report, never tuned).
"""

from __future__ import annotations

import math

import pytest

from moesim.analyses.validate.cases import load_cases, validate
from moesim.analyses.validate.common import case_config
from tests.conftest import ROOT

pytestmark = pytest.mark.validation

CASES = ROOT / "validation" / "serving_cases.yaml"


@pytest.fixture(scope="module")
def checks():
    return validate([CASES])


def test_every_case_has_a_source_a_figure_and_a_reasoned_tolerance():
    cases = load_cases([CASES])
    assert len(cases) >= 9
    text = CASES.read_text()
    for c in cases:
        assert "github.com/" in c["source"] or "lmsys.org/" in c["source"], c["id"]  # where it was published
        assert c["expect"], c["id"]
        assert float(c["tolerance"]) > 0, c["id"]
    # every tolerance line carries its reason (a comment) or a block comment just above it
    for line in text.splitlines():
        if line.strip().startswith("tolerance:") and "#" not in line:
            prev = text[: text.index(line)].rstrip().splitlines()[-1].strip()
            assert prev.startswith("#"), line


def test_every_published_figure_gets_a_finite_prediction(checks):
    cases = load_cases([CASES])
    n_expect = sum(len(c["expect"]) for c in cases)
    assert len(checks) == n_expect
    for ch in checks:
        assert ch.metric != "error", (ch.case, ch.note)
        assert math.isfinite(float(ch.predicted)) and float(ch.predicted) > 0, ch.case
        assert math.isfinite(ch.rel_error), ch.case


def test_mixed_cases_run_the_serving_model_at_their_concurrency(checks):
    cases = {c["id"]: c for c in load_cases([CASES])}
    mixed = [i for i, c in cases.items() if case_config(c, cases).get("phase") == "mixed"]
    assert len(mixed) >= 4
    for i in mixed:
        cfg = case_config(cases[i], cases)
        assert cfg["isl"] > 0 and cfg["osl"] > 0
    # one deployment at several concurrencies (same_as + batch override): TPOT and throughput rise
    by = {(ch.case, ch.metric): float(ch.predicted) for ch in checks}
    sweep = [i for i in mixed if i.startswith("inferencex-")]
    assert len(sweep) >= 4
    conc = sorted(sweep, key=lambda i: case_config(cases[i], cases)["batch"])
    tpot = [by[(i, "tpot_s")] for i in conc]
    tput = [by[(i, "tokens_per_s_per_gpu")] for i in conc]
    assert tpot == sorted(tpot) and tpot[0] < tpot[-1]
    assert tput == sorted(tput) and tput[0] < tput[-1]
    # every mixed case gives a TTFT and a TPOT; a longer prompt alone gives a longer TTFT
    assert all(by[(i, "ttft_s")] > 0 and by[(i, "tpot_s")] > 0 for i in mixed)
    short, long_ = (
        "tenstorrent-16xh100-tp16-r1-isl128-osl1024-conc1",
        "tenstorrent-16xh100-tp16-r1-isl2048-osl128-conc1",
    )
    assert by[(long_, "ttft_s")] > by[(short, "ttft_s")]
