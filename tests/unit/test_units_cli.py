"""Issue 16 parts 4 and 7: time flags with units, plausibility errors with the fix, readable help."""

from __future__ import annotations

import contextlib
import io
import json
import re

import pytest

from moesim.errors import ConfigError
from moesim.units import parse_time_s


def run(*argv):
    """`moesim.cli.main(argv)` in process -> (exit code, stdout, stderr)."""
    from moesim.cli import main

    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code
    return code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize(
    "text,seconds",
    [
        ("50ms", 0.05),
        ("50 ms", 0.05),
        ("50MS", 0.05),
        ("2s", 2.0),
        ("2sec", 2.0),
        ("500us", 5e-4),
        ("500µs", 5e-4),
        ("1.5e3us", 1.5e-3),
        ("250000ns", 2.5e-4),
        ("0.05", 0.05),  # a bare number keeps the flag's documented unit (seconds)
        ("5e-2", 0.05),
        ("1", 1.0),
        ("1min", 60.0),
        (0.03, 0.03),
    ],
)
def test_parse_time_table(text, seconds):
    assert parse_time_s(text, flag="--max-tpot", what="TPOT", max_bare_s=1.0) == pytest.approx(seconds, rel=1e-12)


def test_units_give_the_same_float_as_the_bare_seconds():
    """50ms, 50000us and 0.05 are the same float: the filters and the JSON echo of the targets agree."""
    same = {
        parse_time_s(t, flag="--max-tpot", what="TPOT", max_bare_s=1.0) for t in ("50ms", "50000us", "0.05", "5e7ns")
    }
    assert same == {0.05}
    assert parse_time_s("2000ms", flag="--max-ttft", what="TTFT", max_bare_s=60.0) == 2.0


@pytest.mark.parametrize("text", ["abc", "5 parsecs", "ms", "", "2s2", "50 parsec"])
def test_parse_time_rejects_non_durations(text):
    with pytest.raises(ConfigError, match="--max-tpot: .* is not a duration; .*50ms"):
        parse_time_s(text, flag="--max-tpot", what="TPOT", max_bare_s=1.0)


@pytest.mark.parametrize(
    "argv,needles",
    [
        (
            ["sweep", "--ep", "8", "--max-tpot", "50"],
            ["--max-tpot: 50 s is implausible for a TPOT", "did you mean 50ms?"],
        ),
        (["sweep", "--ep", "8", "--max-ttft", "2000"], ["--max-ttft: 2000 s", "did you mean 2000ms?", "2s"]),
        (
            ["disagg", "--isl", "4000", "--osl", "1000", "--max-ttft", "2s", "--max-tpot", "50"],
            ["--max-tpot", "did you mean 50ms?"],
        ),
        (["plan", "--max-ttft", "2000", "--input-tokens", "1e9"], ["--max-ttft", "did you mean 2000ms?"]),
        (["sweep", "--ep", "8", "--max-tpot", "fast"], ["--max-tpot: 'fast' is not a duration"]),
    ],
)
def test_implausible_bare_time_is_one_line_error_with_fix(argv, needles):
    code, _, err = run(*argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err


def test_time_units_reach_the_filter_and_the_output():
    """--max-tpot 30ms == --max-tpot 0.03 (same rows); the summary prints the filter in ms."""
    base = [
        "sweep",
        "--ep",
        "8,16,32,64",
        "--batch",
        "16,64",
        "--context",
        "2048",
        "--tp",
        "1",
        "--mtp",
        "0",
        "--redundant",
        "0",
    ]
    code, with_unit, _ = run(*base, "--max-tpot", "30ms")
    assert code == 0
    code, bare, _ = run(*base, "--max-tpot", "0.03")
    assert code == 0
    elapsed = re.compile(r" in \d+\.\d+ s")  # the summary's elapsed time differs run to run
    assert elapsed.sub("", with_unit).strip() == elapsed.sub("", bare).strip()
    assert "filters: TPOT <= 30.00 ms" in with_unit
    _, loose, _ = run(*base, "--max-tpot", "1s")
    assert "filters: TPOT <= 1.000 s" in loose
    rows = [json.loads(run(*base, "--max-tpot", t, "--json")[1]) for t in ("30ms", "0.03", "1s")]
    assert len(rows[0]) == len(rows[1]) < len(rows[2])
    assert max(r["tpot_s"] for r in rows[0]) <= 0.03


def _command_paths():
    """Every command and sub-command of the CLI, as argv prefixes."""
    import typer

    from moesim.cli import app

    paths, todo = [], [((), typer.main.get_command(app))]
    while todo:
        path, cmd = todo.pop()
        paths.append(list(path))
        for name, sub in getattr(cmd, "commands", {}).items():
            todo.append(((*path, name), sub))
    return paths


def test_help_is_plain_text_without_type_tags_on_flags_or_emoji():
    """`--help` of every command: no `<bool>` tag on a flag, no emoji shortcode rendered
    (`A:B:STEP` once printed as `A🅱STEP`), the axis grammar printed verbatim."""
    paths = _command_paths()
    assert len(paths) >= 15
    seen_axis = False
    for path in paths:
        code, out, err = run(*path, "--help")
        assert code == 0, (path, err)
        assert "<bool>" not in out, (path, out)
        assert all(ord(ch) < 0x2000 for ch in out), (path, [ch for ch in out if ord(ch) >= 0x2000])
        seen_axis |= "A:B:STEP" in out
    assert seen_axis
    _, out, _ = run("sweep", "--help")
    assert "--max-tpot TIME" in out and "--only-fits " in out and "--set KEY=VALUE" in out


def test_report_text_is_not_read_as_markup():
    """A table cell or note that looks like rich markup or an emoji code is printed as is."""
    from moesim.report.sweep import console

    c = console()
    with c.capture() as cap:
        c.print("axis A:B:STEP, list [b]1[/b], :thumbs_up:")
    assert cap.get().strip() == "axis A:B:STEP, list [b]1[/b], :thumbs_up:"


@pytest.mark.parametrize(
    "argv,needles",
    [
        (["estimate", "--ep", "144"], ["add --redundant-experts 32 (288 = 2 x 144)", "--ep 128"]),
        (["estimate", "--ep", "144", "--redundant-experts", "10"], ["add --redundant-experts 32"]),
        (["estimate", "--ep", "100"], ["add --redundant-experts 44 (300 = 3 x 100)", "--ep 64"]),
        (
            ["sweep", "--ep", "144", "--redundant-experts", "0", "--tp", "1", "--mtp", "0"],
            ["none of the 13 configurations", "add --redundant-experts 32"],
        ),
    ],
)
def test_ep_that_does_not_divide_the_experts_suggests_redundant_experts(argv, needles):
    code, _, err = run(*argv)
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    for n in needles:
        assert n in err, err


def test_suggested_redundant_experts_make_a_valid_deployment():
    from moesim.api import estimate

    r = estimate(ep=144, redundant_experts=32)
    assert r.config["ep"] == 144


def test_a100_shows_no_fp8_peak():
    from moesim.analyses.roofline import roofline
    from moesim.report.tables import hardware_line
    from moesim.specs import load_hardware

    a100, h200 = load_hardware("a100"), load_hardware("h200")
    assert not a100.has_fp8 and h200.has_fp8 and load_hardware("b200").has_fp8
    assert "FP8" not in hardware_line(a100) and "BF16     312 TFLOP/s" in hardware_line(a100)
    assert "FP8     1979 TFLOP/s" in hardware_line(h200)
    _, out, _ = run("hardware")
    assert [ln for ln in out.splitlines() if ln.startswith("a100")][0].split()[1] == "BF16"
    r = roofline("mixtral-8x7b", "a100", tp=8, ep=8, calibration=False)
    assert list(r["peaks"]) == ["BF16"]
    assert "FP8" in roofline("mixtral-8x7b", "h200", tp=8, ep=8, calibration=False)["peaks"]


def test_estimate_with_no_flags_says_it_does_not_fit_and_the_smallest_ep_that_does():
    """Default: DeepSeek-V3 on one H800 (698 GB of weights and KV): a clear verdict and the smallest
    EP that fits, which a full estimate confirms (and the next smaller valid EP does not fit)."""
    from moesim.api import estimate

    code, out, _ = run("estimate")
    assert code == 0
    tail = out.strip().splitlines()[-2:]
    assert tail[0].startswith("DOES NOT FIT: deepseek-v3 on 1 x h800")
    assert "smallest EP that fits" in tail[1] and "--ep 16 --dp 16 = 16 GPUs" in tail[1]
    assert estimate(ep=16).memory["fits"] and not estimate(ep=8).memory["fits"]
    _, out, _ = run("estimate", "--hardware", "h200")
    assert "--ep 8 --dp 8 = 8 GPUs" in out and estimate(hardware="h200", ep=8).memory["fits"]
    _, out, _ = run("estimate", "--ep", "16")
    assert "DOES NOT FIT" not in out
    _, out, _ = run("estimate", "--batch", "100000")
    assert "No EP size fits" in out


def test_study_filters_take_units(tmp_path):
    """A study YAML may write `max_tpot_s: 30ms`: the same rows as 0.03; a quoted bare '50' is refused."""
    from moesim.api import sweep

    axes = {"ep": [8, 16, 32], "batch": [16, 64]}
    a = sweep(hardware="h800", axes=axes, filters={"max_tpot_s": "30ms"})
    b = sweep(hardware="h800", axes=axes, filters={"max_tpot_s": 0.03})
    assert len(a) == len(b) < len(sweep(hardware="h800", axes=axes))
    bad = tmp_path / "study.yaml"
    bad.write_text('axes: {ep: [8]}\nfilters: {max_tpot_s: "50"}\n')
    code, _, err = run("sweep", "--study", str(bad))
    assert code == 2 and "filters.max_tpot_s: 50 s is implausible" in err and "50ms" in err
