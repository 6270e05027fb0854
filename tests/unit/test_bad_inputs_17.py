"""Bad inputs of issue 17 (table-driven, the contract of tests/unit/test_bad_inputs.py: exit != 0,
stderr is ONE line `error: ...` naming the field/file and what is allowed, stdout empty, no warning,
no traceback). Categories: strict/finite output (schemes that cannot run), edge values in validate
case files (zero or non-finite expectations, self-referencing / cyclic `same_as`), non-numeric
pareto axes, load CSVs (BOM, ';', hex, decimal commas, UTF-16, overflow), study / traffic YAML
(encodings, depth, huge integers, odd keys). The last test prints `issue-17 bad inputs tried: N,
clean errors: M` and asserts M == N."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.test_bad_inputs import Case, api, check_case, cli

_CASE = "cases:\n- {id: a, config: {batch: 8}, expect: {fits: true}}\n"


def _files(d: Path) -> dict:
    f = {}

    def put(name, text=None, raw=None):
        p = d / name
        p.write_bytes(raw) if raw is not None else p.write_text(text, encoding="utf-8")
        f[name.rsplit(".", 1)[0]] = str(p)

    # load CSVs
    put("l_hex.csv", "0x10,2\n3,4\n")
    put("l_hex_semi.csv", "1;0xff\n")
    put("l_deccomma.csv", "1,5;2,5\n3,5;4,5\n")
    put("l_header.csv", "e0,e1,e2\n")
    put("l_header_bom.csv", raw=b"\xef\xbb\xbfe0;e1\n")
    put("l_bom_only.csv", raw=b"\xef\xbb\xbf\n")
    put("l_overflow.csv", "1e308,1e308\n1,2\n")
    put("l_nul.csv", raw=b"1,2\n\x003,4\n")
    put("l_ragged_semi.csv", "1;2;3\n4;5\n")
    put("l_inf_semi.csv", "1;inf\n")
    put("l_text_tab.csv", "1\t2\n3\tx\n")
    # validate case files
    put("c_zero.yaml", "cases:\n- {id: z, config: {batch: 8}, expect: {step_time_s: 0}}\n")
    put("c_zero_us.yaml", "cases:\n- {id: z, config: {batch: 8}, expect_us: {attn_core: 0.0}}\n")
    put("c_nan.yaml", "cases:\n- {id: n, config: {batch: 8}, expect: {tpot_s: .nan}}\n")
    put("c_inf.yaml", "cases:\n- {id: n, config: {batch: 8}, expect: {tpot_s: -.inf}}\n")
    put("c_self.yaml", "cases:\n- {id: a, config: {same_as: a}, expect: {fits: true}}\n")
    put(
        "c_cycle.yaml",
        "cases:\n- {id: a, config: {same_as: b}, expect: {fits: true}}\n"
        "- {id: b, config: {same_as: c}, expect: {fits: true}}\n- {id: c, config: {same_as: a}, expect: {fits: true}}\n",
    )
    put("c_same_map.yaml", "cases:\n- {id: a, config: {same_as: {x: 1}}, expect: {fits: true}}\n")
    put("c_dup.yaml", _CASE + "- {id: a, config: {batch: 16}, expect: {fits: true}}\n")
    put("c_cond.yaml", "cases:\n- {id: a, config: {batch: 8}, expect: {tpot_s: '< abc'}}\n")
    put("c_range.yaml", "cases:\n- {id: a, config: {batch: 8}, expect: {max_batch: [100, 1]}}\n")
    put("c_range3.yaml", "cases:\n- {id: a, config: {batch: 8}, expect: {max_batch: [1, 2, 3]}}\n")
    put("c_deep.yaml", "cases: " + "[" * 1100 + "]" * 1100 + "\n")
    put("c_bigint.yaml", "cases:\n- {id: a, config: {batch: " + "9" * 5000 + "}, expect: {fits: true}}\n")
    put("c_utf16.yaml", raw=_CASE.encode("utf-16"))
    # study YAML
    put("s_hex_text.yaml", 'axes: {ep: "8,0x10"}\n')
    put("s_deep.yaml", "axes: " + "[" * 1100 + "]" * 1100 + "\n")
    put("s_bigint.yaml", "axes: {ep: [" + "9" * 5000 + "]}\n")
    put("s_bom_only.yaml", raw=b"\xef\xbb\xbf")
    put("s_utf16.yaml", raw="axes: {ep: [8]}\n".encode("utf-16"))
    put("s_key_newline.yaml", 'axes: {ep: [8]}\n"bo\\ngus": 1\n')
    put("s_semi_yaml.yaml", "axes: {ep: [8]; batch: [16]}\n")
    put("s_overflow.yaml", "axes: {ep: [8], batch: [1e400]}\n")
    # traffic YAML
    put("t_deep.yaml", "input_tokens: " + "[" * 1100 + "]" * 1100 + "\n")
    put("t_deeper.yaml", "input_tokens: " + "[" * 60000 + "]" * 60000 + "\n")  # libyaml's composer segfaulted
    put("t_bigint.yaml", "input_tokens: " + "9" * 5000 + "\noutput_tokens: 1\n")
    put("t_key_newline.yaml", 'input_tokens: 1e9\noutput_tokens: 1e9\nprices: {"line\\nbreak": 1}\n')
    put("t_mixed_keys.yaml", "input_tokens: 1e9\noutput_tokens: 1e9\n1: 2\nzz: 3\n")
    put("t_utf16.yaml", raw="input_tokens: 1e9\noutput_tokens: 1e9\n".encode("utf-16"))
    put("t_semi.yaml", "input_tokens: 1e9; output_tokens: 1e9\n")
    return f


EPLB = "eplb --slots 4 --gpus 2 --load"
CASES: list[Case] = [
    # --- a scheme that cannot run is a clean error where it is the only thing asked for
    cli("sweep-microbatch-only", "sweep --ep 8 --batch 1 --overlap two-batch", "two-batch", "needs batch >= 2"),
    cli(
        "sweep-prefill-microbatch-only",
        "sweep --phase prefill --ep 8 --batch 1 --overlap two-batch",
        "needs batch >= 2",
        "token per micro-batch",
    ),
    cli("estimate-five-stage-batch-1", "estimate --batch 1 --overlap five-stage", "five-stage", "batch >= 2"),
    cli("timeline-five-stage-batch-1", "timeline --batch 1 --overlap five-stage", "five-stage", "batch >= 2"),
    # --- pareto axes must be numeric columns (a traceback before)
    cli(
        "pareto-x-text", "pareto --ep 16 --x hardware", "--x 'hardware'", "not a numeric column", "tokens_per_s_per_gpu"
    ),
    cli("pareto-y-text", "pareto --ep 16 --y bottleneck", "--y 'bottleneck'", "not a numeric column"),
    cli("pareto-x-bool", "pareto --ep 16 --x fits", "'fits'", "(bool)", "allowed"),
    cli("pareto-x-reason", "pareto --ep 16 --x reason", "'reason'", "not a numeric column"),
    # --- load CSVs: named precisely, never "empty"
    cli("eplb-load-hex", f"{EPLB} {{l_hex}}", "line 1 column 1", "'0x10'", "hexadecimal", "write 16"),
    cli("eplb-load-hex-semicolon", f"{EPLB} {{l_hex_semi}}", "column 2", "hexadecimal", "write 255"),
    cli("eplb-load-decimal-comma", f"{EPLB} {{l_deccomma}}", "'1,5'", "decimal comma", "write 1.5"),
    cli("eplb-load-header-only", f"{EPLB} {{l_header}}", "header row", "no rows of numbers"),
    cli("eplb-load-bom-header-only", f"{EPLB} {{l_header_bom}}", "header row", "line 1"),
    cli("eplb-load-bom-only", f"{EPLB} {{l_bom_only}}", "empty", "rows = layers"),
    cli("eplb-load-overflow", f"{EPLB} {{l_overflow}}", "overflow", "1e300"),
    cli("eplb-load-nul", f"{EPLB} {{l_nul}}", "cannot read", "NUL"),
    cli("eplb-load-ragged-semicolon", f"{EPLB} {{l_ragged_semi}}", "line 2", "2 columns, expected 3"),
    cli("eplb-load-inf-semicolon", f"{EPLB} {{l_inf_semi}}", "NaN/inf", "finite"),
    cli("eplb-load-text-tab", f"{EPLB} {{l_text_tab}}", "line 2 column 2", "'x'", "non-numeric"),
    cli("skew-csv-hex", "estimate --expert-skew {l_hex}", "hexadecimal", "write 16"),
    cli("skew-csv-header-only", "estimate --expert-skew {l_header}", "header row"),
    # --- validate case files: edge values
    cli("validate-zero-expectation", "validate {c_zero}", "c_zero.yaml", "z:", "expect.step_time_s", "nonzero"),
    cli("validate-zero-expect-us", "validate {c_zero_us}", "expect_us.attn_core", "no relative error"),
    cli("validate-nan-expectation", "validate {c_nan}", "expect.tpot_s", "finite nonzero"),
    cli("validate-inf-expectation", "validate {c_inf}", "expect.tpot_s", "finite nonzero"),
    cli("validate-same-as-self", "validate {c_self}", "c_self.yaml", "a:", "cycle", "a -> a"),
    cli("validate-same-as-cycle", "validate {c_cycle}", "c_cycle.yaml", "cycle", "a -> b -> c -> a"),
    cli("validate-same-as-mapping", "validate {c_same_map}", "config.same_as", "id of another case"),
    cli("validate-duplicate-id", "validate {c_dup}", "c_dup.yaml", "a:", "duplicate case id"),
    cli("validate-bad-condition", "validate {c_cond}", "expect.tpot_s", "not a condition", "between a and b"),
    cli("validate-reversed-range", "validate {c_range}", "expect.max_batch", "[lo, hi]"),
    cli("validate-three-range", "validate {c_range3}", "expect.max_batch", "[lo, hi]"),
    cli("validate-deep", "validate {c_deep}", "nested too deeply"),
    cli("validate-bigint", "validate {c_bigint}", "unreadable value", "normal size"),
    cli("validate-bom-only", "validate {s_bom_only}", "s_bom_only.yaml", "file is empty"),
    cli("model-bom-only", "estimate --model {s_bom_only}", "s_bom_only.yaml", "file is empty"),
    cli("validate-utf16", "validate {c_utf16}", "c_utf16.yaml", "cannot read"),
    # --- study YAML
    cli("study-hex-text", "sweep --study {s_hex_text}", "ep", "'0x10'", "hexadecimal", "write 16"),
    cli("study-deep", "sweep --study {s_deep}", "study", "nested too deeply"),
    cli("study-bigint", "sweep --study {s_bigint}", "study", "unreadable value", "normal size"),
    cli("study-bom-only", "sweep --study {s_bom_only}", "study", "empty", "allowed keys"),
    cli("study-utf16", "sweep --study {s_utf16}", "study", "not UTF-8"),
    cli("study-key-newline", "sweep --study {s_key_newline}", "study", "unknown key", "'bo\\ngus'"),
    cli("study-semicolon-yaml", "sweep --study {s_semi_yaml}", "study", "not valid YAML", "line 1"),
    cli("study-overflow", "sweep --study {s_overflow}", "batch", "non-finite value", "(0, 1e9]"),
    cli("sweep-axis-hex", "sweep --ep 0x10", "ep", "hexadecimal", "write 16"),
    # --- traffic YAML
    cli("traffic-deep", "plan --traffic {t_deep}", "t_deep.yaml", "nested too deeply"),
    cli("traffic-deeper", "plan --traffic {t_deeper}", "t_deeper.yaml", "nested too deeply"),
    cli("study-deeper", "sweep --study {t_deeper}", "study", "nested too deeply"),
    cli("validate-deeper", "validate {t_deeper}", "nested too deeply"),
    cli("model-deeper", "estimate --model {t_deeper}", "nested too deeply"),
    cli("set-deeper", "estimate --set hardware.sms=" + "[" * 300 + "]" * 300, "sms"),
    cli("traffic-bigint", "plan --traffic {t_bigint}", "t_bigint.yaml", "unreadable value"),
    cli("traffic-key-newline", "plan --traffic {t_key_newline}", "prices.", "unknown key", "usd_per_gpu_hour"),
    cli("traffic-mixed-keys", "plan --traffic {t_mixed_keys}", "1: unknown key", "input_tokens"),
    cli("traffic-utf16", "plan --traffic {t_utf16}", "t_utf16.yaml", "not UTF-8"),
    cli("traffic-semicolons", "plan --traffic {t_semi}", "t_semi.yaml", "not valid YAML"),
    # --- absurd but finite what-ifs and counts: rejected before any NaN (other helpers own the rest)
    cli("whatif-nvlink-tiny", "estimate --set hardware.nvlink_bw_GBps=1e-300", "nvlink_bw_GBps", "allowed"),
    cli("whatif-rdma-tiny", "estimate --set hardware.rdma_bw_GBps=1e-300", "rdma_bw_GBps", "allowed"),
    cli("whatif-memory-tiny", "estimate --set hardware.memory_GB=1e-300", "memory_reserve_GB", "below memory_GB"),
    cli("kernel-json-bad-set", "kernel --op gemm --m 64 --n 2112 --k 7168 --json --set hardware.bogus=1", "bogus"),
    cli("eplb-cells-bound", "eplb --experts 100000 --slots 1000000 --gpus 1000000 --layers 100", "placement cells"),
    cli("pareto-group-unknown", "pareto --ep 16 --group-by bogus", "no column 'bogus'", "available"),
    # --- the Python API
    api(
        "api-validate-cycle",
        lambda f: __import__("moesim.analyses.validate.cases", fromlist=["x"]).load_cases([f["c_cycle"]]),
        "cycle",
    ),
    api(
        "api-pareto-text",
        lambda f: __import__("moesim.analyses.pareto", fromlist=["x"]).pareto(
            __import__("pandas").DataFrame({"a": ["x", "y"], "b": [1.0, 2.0]}), x="a", y="b"
        ),
        "--x 'a'",
        "allowed: b",
    ),
    api(
        "api-eplb-overflow",
        lambda f: __import__("moesim.balance.eplb", fromlist=["x"]).rebalance_experts(
            __import__("numpy").array([[1e308, 1e308]]), 2, 1, 1, 1
        ),
        "weight",
        "float64",
    ),
    api(
        "api-load-csv-hex",
        lambda f: __import__("moesim.balance.eplb", fromlist=["x"]).load_from_csv(f["l_hex"]),
        "hexadecimal",
    ),
]
RESULTS: dict = {}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("bad_inputs_17"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_17(case, files):
    problem = check_case(case, files)
    RESULTS[case.id] = problem
    assert not problem, f"{case.id}: {problem}"


def test_zz_summary_17(files, capsys):
    """Runs last (file order): every case of this table, counted."""
    for c in CASES:
        if c.id not in RESULTS:
            RESULTS[c.id] = check_case(c, files)
    n, m = len(CASES), sum(1 for c in CASES if not RESULTS[c.id])
    with capsys.disabled():
        print(f"\nissue-17 bad inputs tried: {n}, clean errors: {m}")
        for c in CASES:
            if RESULTS[c.id]:
                print(f"  not clean: {c.id}: {RESULTS[c.id]}")
    assert len({c.id for c in CASES}) == n
    assert m == n
