"""Issue 17 §4: every `--json` and every .json file is strict JSON (RFC 8259: no NaN/Infinity;
missing numbers are null; booleans stay booleans), and every human output is finite (a scheme that
cannot run reads `n/a (reason)`, never `inf`/`nan`).

Every command that prints JSON runs here (small spaces: the fast suite) and is parsed with a parser
that raises on NaN/Infinity; the same commands without --json are scanned for non-finite numbers."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest

from tests.conftest import run_cli

NCCL = "calibration/measurements/h200/{}/nccl_perf.csv.gz"
# command -> exit codes it may end with (validate exits 1 when a case misses its tolerance)
COMMANDS = {
    "estimate": (0,),
    "estimate --batch 1": (0,),
    "estimate --batch 1 --phase prefill": (0,),
    "estimate --phase mixed --isl 10 --osl 10 --request-rate 1e9": (0,),  # unstable queue: TTFT/TPOT unbounded
    "kernel --op gemm --m 64 --n 2112 --k 7168": (0,),
    "kernel --op dispatch --ep 144 --tokens 1": (0,),
    "sweep --ep 8,16 --batch 1,8 --overlap two-batch,serial": (0,),
    "pareto --ep 16,32 --batch 8,64": (0,),
    "disagg --isl 4000 --osl 1000 --max-ttft 2 --max-tpot 0.05 --prefill-ep 32 --prefill-batch 16384 "
    "--decode-ep 144 --batch 64 --max-instances 4 --no-aggregated": (0,),
    "recommend --isl 1000 --osl 100 --max-ttft 2s --max-tpot 50ms --request-rate 1 --max-gpus 16 --no-disagg": (0,),
    "plan --traffic examples/traffic_deepseek_day.yaml": (0,),
    "plan --input-tokens 1 --output-tokens 1": (0,),  # a pool rounds to 0 nodes: NIC use n/a, not inf%
    "eplb --experts 16 --slots 16 --gpus 4 --layers 2": (0,),
    "eplb --experts 16 --slots 16 --gpus 4 --layers 2 --zipf 0": (0,),
    "validate --case seed002-decode-roofline --case seed002-decode-memory": (0, 1),
    "timeline --out {tmp}/t.svg": (0,),
    "roofline --out {tmp}/r.svg": (0,),
    "calibrate show h800": (0,),
    f"calibrate compare {NCCL.format('sglang')} --against {NCCL.format('trtllm')}": (0,),
}
# commands that write a .json file with --out
FILE_COMMANDS = [
    "estimate --batch 1 --out {out}",
    "sweep --ep 8,16 --batch 1,8 --overlap two-batch,serial --out {out}",
    "pareto --ep 16,32 --batch 8,64 --out {out}",
    "plan --traffic examples/traffic_deepseek_day.yaml --out {out}",
    "disagg --isl 4000 --osl 1000 --max-ttft 2 --max-tpot 0.05 --prefill-ep 32 --prefill-batch 16384 "
    "--decode-ep 144 --batch 64 --max-instances 4 --no-aggregated --out {out}",
]
SLOW = ("recommend", "roofline", "timeline")  # > 1 s each: in the slow suite


def _params(cmds):
    return [pytest.param(c, marks=pytest.mark.slow) if c.split()[0] in SLOW else c for c in cmds]


NONFINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.I)


def _reject(token):
    raise ValueError(f"non-standard JSON constant {token}")


def strict_loads(text: str):
    """json.loads that refuses NaN, Infinity and -Infinity (Python's json accepts them by default)."""
    return json.loads(text, parse_constant=_reject)


def _argv(cmd: str, tmp_path, *extra) -> list[str]:
    return [*cmd.format(tmp=tmp_path).split(), *extra]


def _walk(v, path="$"):
    """Every (path, leaf) of a parsed JSON value."""
    if isinstance(v, dict):
        for k, x in v.items():
            yield from _walk(x, f"{path}.{k}")
    elif isinstance(v, list):
        for i, x in enumerate(v):
            yield from _walk(x, f"{path}[{i}]")
    else:
        yield path, v


@pytest.mark.parametrize("cmd", _params(COMMANDS))
def test_json_output_is_strict(cmd, tmp_path):
    p = run_cli(*_argv(cmd, tmp_path, "--json"))
    assert p.returncode in COMMANDS[cmd], (cmd, p.returncode, p.stderr[-500:])
    data = strict_loads(p.stdout)
    for where, leaf in _walk(data):
        assert leaf is None or isinstance(leaf, (str, bool, int, float)), (cmd, where, leaf)
        assert not isinstance(leaf, float) or math.isfinite(leaf), (cmd, where, leaf)


@pytest.mark.parametrize("cmd", _params(COMMANDS))
def test_human_output_is_finite(cmd, tmp_path):
    p = run_cli(*_argv(cmd, tmp_path))
    assert p.returncode in COMMANDS[cmd], (cmd, p.returncode, p.stderr[-500:])
    bad = [ln for ln in (p.stdout + p.stderr).splitlines() if NONFINITE.search(ln)]
    assert not bad, (cmd, bad[:3])


@pytest.mark.parametrize("cmd", FILE_COMMANDS)
def test_json_files_are_strict(cmd, tmp_path):
    out = tmp_path / "out.json"
    p = run_cli(*cmd.format(out=out).split())
    assert p.returncode == 0, p.stderr[-500:]
    strict_loads(out.read_text())


def test_scheme_that_cannot_run_is_not_applicable_with_the_reason():
    """`estimate --batch 1` used to print `two-batch inf s`; JSON has null for it."""
    p = run_cli("estimate", "--batch", "1")
    line = " ".join(p.stdout.split())
    assert "two-batch n/a (needs batch >= 2: one request per micro-batch)" in line, line
    assert "five-stage n/a (needs batch >= 2" in line
    d = strict_loads(run_cli("estimate", "--batch", "1", "--json").stdout)
    assert d["step_time_s_by_overlap"]["two-batch"] is None and d["step_time_s_by_overlap"]["five-stage"] is None
    assert math.isfinite(d["step_time_s"]) and d["step_time_s"] > 0


def test_sweep_row_of_a_scheme_that_cannot_run_is_invalid_with_the_reason():
    d = strict_loads(run_cli("sweep", "--ep", "8", "--batch", "1,2", "--overlap", "two-batch", "--json").stdout)
    by_batch = {r["batch"]: r for r in d}
    assert by_batch[1]["valid"] is False and "needs batch >= 2" in by_batch[1]["reason"]
    assert by_batch[2]["valid"] is True and by_batch[2]["step_time_s"] > 0
    p = run_cli("sweep", "--ep", "8", "--batch", "1", "--overlap", "two-batch")
    assert p.returncode == 2 and "needs batch >= 2" in p.stderr and "Traceback" not in p.stderr


def test_validate_boolean_checks_are_booleans_with_null_error():
    """`validate --json` printed NaN for the relative error of boolean / text / range checks."""
    p = run_cli("validate", "--case", "seed002-decode-memory", "--json")
    d = strict_loads(p.stdout)
    checks = [c for c in d["checks"] if isinstance(c["expected"], bool)]
    assert checks, d["checks"]
    for c in checks:
        assert c["rel_error"] is None and isinstance(c["passed"], bool) and isinstance(c["predicted"], bool)


def test_json_text_cleans_and_guards():
    from moesim.report.writer import json_text

    d = strict_loads(
        json_text(
            {
                "nan": float("nan"),
                "inf": np.float32("inf"),
                "b": np.bool_(False),
                "i": np.int64(7),
                "a": np.array([1.0, np.nan]),
                "nested": [{"x": -math.inf}],
            }
        )
    )
    assert d == {"nan": None, "inf": None, "b": False, "i": 7, "a": [1.0, None], "nested": [{"x": None}]}
    assert type(d["b"]) is bool and type(d["i"]) is int


def test_frame_json_is_strict():
    pd = pytest.importorskip("pandas")
    from moesim.report.writer import frame_json_text

    df = pd.DataFrame({"x": [1.0, np.nan, np.inf], "ok": [True, False, True], "o": pd.Series([np.inf, "a", None])})
    rows = strict_loads(frame_json_text(df))
    assert [r["x"] for r in rows] == [1.0, None, None] and [r["ok"] for r in rows] == [True, False, True]
    assert rows[0]["o"] is None
