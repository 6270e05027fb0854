"""Bad inputs, table-driven (DESIGN.md, Contracts -> Errors): every bad spec, flag, file or
combination must end in ONE line that names the field and what is allowed, never a traceback,
never NaN/inf in the output.

* CLI cases run `moesim.cli.main(argv)` in process (exactly the wrapper the `moesim` entry point
  calls) with stdout/stderr captured and warnings recorded: exit code != 0, stderr is one line
  `error: ...`, stdout is empty. A few run as real subprocesses (`python -m moesim.cli`) too.
* API cases call moesim.estimate / moesim.analyses.sweep / plan / eplb / loaders: a MoesimError subclass
  with a one-line message.
* Each case lists needles that must appear in the message (the field, and the allowed range or
  the problem), case-insensitive.

The last test prints `bad inputs tried: N, clean errors: M` and asserts M == N (it runs any case
the selection skipped, so the count is always the whole table).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import random
import re
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from moesim.errors import MoesimError
from tests.conftest import ROOT, run_cli_subprocess


@dataclass(frozen=True)
class Case:
    id: str
    args: Sequence[str] | Callable  # argv for the CLI, or f(files) for the API
    needles: Sequence[str]
    subprocess: bool = False  # also run as a real `python -m moesim.cli` process

    @property
    def kind(self) -> str:
        return "api" if callable(self.args) else "cli"


def cli(id, argv: str, *needles, subprocess=False) -> Case:
    return Case(id, argv.split(), needles, subprocess)


def api(id, fn, *needles) -> Case:
    return Case(id, fn, needles)


# ------------------------------------------------------------------------------------ files
def _make_files(d: Path) -> dict:
    f = {}

    def put(name, text=None, data=None, raw=None):
        p = d / name
        if raw is not None:
            p.write_bytes(raw)
        elif data is not None:
            p.write_text(json.dumps(data) if name.endswith(".json") else yaml.safe_dump(data, sort_keys=False))
        else:
            p.write_text(text)
        f[name.rsplit(".", 1)[0]] = str(p)

    v3 = yaml.safe_load((ROOT / "models" / "deepseek_v3.yaml").read_text())
    h800 = yaml.safe_load((ROOT / "hardware" / "h800.yaml").read_text())

    def model(**edit):
        m = copy.deepcopy(v3)
        for k, v in edit.items():
            node = m
            *head, leaf = k.split("__")
            for part in head:
                node = node[part]
            node[leaf] = v
        return m

    def hw(**edit):
        h = copy.deepcopy(h800)
        h.update(edit)
        return h

    rng = random.Random(9)
    binary = bytes(rng.randrange(128, 256) for _ in range(256))
    put("empty.yaml", "")
    put("malformed.yaml", "num_layers: [61,\nhidden_size: 7168\n")
    put("list.yaml", "- 1\n- 2\n")
    put("binary.yaml", raw=binary)
    (d / "adir").mkdir()
    f["adir"] = str(d / "adir")
    put("m_unknown.yaml", data=model(bogus_key=1))
    put("m_type.yaml", data=model(num_layers="abc"))
    put("m_neg.yaml", data=model(hidden_size=-7168))
    put("m_heads0.yaml", data=model(attention__num_heads=0))
    put("m_topk.yaml", data=model(moe__top_k=300))
    put("m_ctx.yaml", data=model(max_context=float("nan")))
    put("m_dense.yaml", data=model(num_dense_layers=70))
    put("h_eff.yaml", data=hw(nvlink_eff_bw_GBps=300))
    put("h_reserve.yaml", data=hw(memory_reserve_GB=90))
    put("h_inf.yaml", data=hw(hbm_bw_GBps=float("inf")))
    put("h_gpus.yaml", data=hw(gpus_per_node=1e12))
    put("h_name.yaml", data=hw(name="../../etc/passwd"))
    hf = json.loads((ROOT / "tests" / "data" / "hf_configs" / "qwen3-30b-a3b.json").read_text())
    put("hf_missing.json", data={"model_type": "llama"})
    put("hf_type.json", data={**hf, "model_type": "gpt_neox"})
    put("hf_layers.json", data={**hf, "num_hidden_layers": 2**63})
    put("hf_heads.json", data={**hf, "num_key_value_heads": 5})
    put("hf_malformed.json", '{"model_type": "llama",')
    put("load_nan.csv", "1,nan\n2,3\n")
    put("load_neg.csv", "1,-2\n2,3\n")
    put("load_cols.csv", "1,2\n3,4\n")
    put("load_empty.csv", "")
    put("load_binary.csv", raw=binary)
    put("study_unknown.yaml", "axes: {ep: [8]}\nbogus: 1\n")
    put("study_set.yaml", "axes: {ep: [8]}\nset: 5\n")
    put("study_axis.yaml", "axes: {ep: [8], batch: [.nan]}\n")
    put("study_filter.yaml", "axes: {ep: [8]}\nfilters: {max_tpot_s: -1}\n")
    put("t_unknown.yaml", "input_tokens: 1e9\noutput_tokens: 1e9\nbogus: 1\n")
    put("t_nan.yaml", "input_tokens: 1e9\noutput_tokens: .nan\n")
    put("t_acc.yaml", "input_tokens: 1.0e+9\noutput_tokens: 1.0e+9\ndecode: {acceptance: 1.5}\n")
    put("t_ep.yaml", "input_tokens: 1.0e+9\noutput_tokens: 1.0e+9\ndecode: {ep: 7, dp: 7}\n")
    put("t_ctx.yaml", "input_tokens: 1.0e+9\noutput_tokens: 1.0e+9\ncontext: 1.0e+7\n")
    put("c_tol.yaml", "cases:\n- {id: a, tolerance: -1, config: {batch: 8}, expect: {fits: true}}\n")
    put("c_same.yaml", "cases:\n- {id: a, config: {same_as: nope}, expect: {fits: true}}\n")
    put("c_cfg.yaml", "cases:\n- {id: a, config: 5, expect: {fits: true}}\n")
    prof = yaml.safe_load((ROOT / "calibration" / "profiles" / "h800.yaml").read_text())

    def profile(name, fn):
        p = copy.deepcopy(prof)
        fn(p)
        put(name, data=p)

    ll = lambda p: p["comm"]["deepep-ll"]["dispatch"]["params"]  # noqa: E731
    profile("p_rdma0.yaml", lambda p: ll(p).update(rdma_GBps=0, rdma_frac_nominal=0))
    profile("p_alpha.yaml", lambda p: ll(p).update(alpha_us=float("inf")))
    profile("p_launch.yaml", lambda p: p.update(launch="fast"))
    profile("p_eta.yaml", lambda p: p["kernels"]["gemm"]["params"].update(eta_c=0))
    profile("p_schema.yaml", lambda p: p.update(schema_version=99))
    profile("p_gpu.yaml", lambda p: p.update(gpu="b200"))
    profile("p_coll.yaml", lambda p: p.update(collectives={"all_reduce": {"params": {"alpha_us": 5}}}))
    meas = (ROOT / "calibration" / "measurements" / "h800" / "gemm.csv").read_text().splitlines(keepends=True)
    hdr = meas[0].rstrip("\n").split(",")
    row = meas[1].rstrip("\n").split(",")  # the first data row has no quoted commas before time_s

    def csv_with(name, col, value):
        r = list(row)
        r[hdr.index(col)] = value
        put(name, "".join([meas[0], ",".join(r) + "\n"] + meas[2:]))

    csv_with("cal_nan.csv", "time_s", "nan")
    csv_with("cal_neg.csv", "time_s", "-1e-6")
    csv_with("cal_inf.csv", "m", "inf")
    put("cal_header.csv", meas[0])
    put("cal_columns.csv", "a,b\n1,2\n")
    text = (ROOT / "calibration" / "profiles" / "h800.yaml").read_text()
    put("p_trunc.yaml", text[: len(text) // 3] + "\n  params: {eta_c: [\n")
    return f


# ------------------------------------------------------------------------------------ the table
def _est(**kw):
    import moesim

    return lambda f: moesim.estimate(
        **{k: (f[v[2:]] if isinstance(v, str) and v.startswith("f:") else v) for k, v in kw.items()}
    )


def _sweep(**kw):
    import moesim

    return lambda f: moesim.sweep(
        **{k: (f[v[2:]] if isinstance(v, str) and v.startswith("f:") else v) for k, v in kw.items()}
    )


PLAN = "plan --input-tokens 1e9 --output-tokens 1e9"

CASES = [
    # --- estimate: sizes, NaN/inf, divisibility, ranges
    cli("batch-nan", "estimate --batch nan", "batch", "finite", "1e9", subprocess=True),
    cli("batch-inf", "estimate --batch inf", "batch", "finite"),
    cli("batch-neg", "estimate --batch -1", "batch", "> 0"),
    cli("batch-zero", "estimate --batch 0", "batch", "> 0"),
    cli("batch-1e15", "estimate --batch 1e15", "batch", "1e9"),
    # moesim's words, not typer's / click's (theirs change by version): the flag, the value, what it is not
    cli("batch-text", "estimate --batch abc", "--batch: 'abc' is not a number"),
    cli("ep-text", "estimate --ep=x", "--ep: 'x' is not an integer"),
    cli("context-beyond-max", "estimate --context 1e9", "context", "max_context"),
    cli("context-nan", "estimate --context nan", "context", "finite"),
    cli("context-beyond-max-prefill", "estimate --phase prefill --context 1e12", "context", "max_context"),
    cli("tp-zero", "estimate --tp 0", "tp", "positive integer"),
    cli("tp-zero-with-ep", "estimate --tp 0 --ep 8", "tp", "positive integer"),
    cli("tp-heads", "estimate --tp 3", "tp", "divide", "128 attention heads"),
    cli("tp-fraction", "estimate --tp 1.5", "--tp", "integer", subprocess=True),
    cli("tp-missing-value", "estimate --tp", "--tp", "requires an argument"),
    cli("ep-slots", "estimate --ep 7", "ep", "divide", "expert slots"),
    cli("moe-tp-zero", "estimate --moe-tp 0", "moe_tp", "positive integer"),
    cli("moe-tp-divisible", "estimate --moe-tp 3", "moe_tp", "not divisible"),
    cli("gpus-1e12", "estimate --dp 1000000000000", "1,000,000"),
    cli("mtp-100", "estimate --mtp 100", "mtp", "[0, 16]"),
    cli("mtp-neg", "estimate --mtp -1", "mtp", "[0, 16]"),
    cli("mtp-no-module-qwen", "estimate --model qwen3-30b-a3b --mtp 1", "mtp", "no MTP", "allowed 0"),
    cli("mtp-no-module-mixtral", "estimate --model mixtral-8x7b --mtp 2", "mtp", "allowed 0"),
    cli("acceptance-1.5", "estimate --mtp 1 --acceptance 1.5", "acceptance", "[0, 1]"),
    cli("acceptance-neg", "estimate --acceptance -0.1", "acceptance", "[0, 1]"),
    cli("acceptance-nan", "estimate --acceptance nan", "acceptance", "[0, 1]"),
    cli("redundant-neg", "estimate --redundant-experts -1", "redundant_experts", ">= 0"),
    cli("redundant-slots", "estimate --redundant-experts 7 --ep 8", "ep", "expert slots"),
    cli("dense-ep", "estimate --model llama-3-1-70b --ep 8", "ep"),
    cli("dense-redundant", "estimate --model llama-3-1-70b --redundant-experts 8", "redundant_experts", "allowed 0"),
    # --- estimate: names and modes
    cli("overlap-name", "estimate --overlap bogus", "overlap", "serial", "five-stage"),
    cli("overlap-phase", "estimate --overlap five-stage --phase prefill", "overlap", "prefill", "allowed"),
    cli("overlap-microbatch", "estimate --overlap two-batch --batch 1", "overlap", "batch >= 2"),
    cli("cost-mode-name", "estimate --cost-mode bogus", "cost_mode", "roofline", "calibrated"),
    cli("comm-name", "estimate --comm bogus", "comm", "deepep-ll"),
    cli("phase-name", "estimate --phase bogus", "phase", "decode", "prefill"),
    cli("mixed-no-isl", "estimate --phase mixed", "isl", "positive"),
    cli("mixed-isl-nan", "estimate --phase mixed --isl nan --osl 10", "isl", "positive"),
    cli("mixed-rate-neg", "estimate --phase mixed --isl 10 --osl 10 --request-rate -1", "request_rate", "positive"),
    cli(
        "mixed-chunk-0", "estimate --phase mixed --isl 10 --osl 10 --chunked-prefill-size 0", "chunk_tokens", "positive"
    ),
    cli("mixed-budget-nan", "sweep --phase mixed --isl 10 --osl 10 --ep 8 --max-batched-tokens nan", "chunk_tokens"),
    cli("skew-name", "estimate --expert-skew bogus", "expert-skew", "zipf"),
    cli("skew-zipf-neg", "estimate --expert-skew zipf:-1", "zipf", ">= 0"),
    cli("skew-zipf-nan", "estimate --expert-skew zipf:nan", "zipf", ">= 0"),
    cli("context-dist-nan", "estimate --context-dist lognormal:nan", "context-dist", "lognormal"),
    cli("context-dist-huge", "estimate --context-dist lognormal:1e308", "context-dist", "100"),
    cli("unknown-flag", "estimate --unknown-flag", "no such option"),
    cli("unknown-command", "bogus-command", "no such command", subprocess=True),
    # --- --set what-ifs
    cli("set-inf", "estimate --set hardware.hbm_bw_GBps=.inf", "hbm_bw_GBps", "finite", "allowed"),
    cli("set-nan", "estimate --set hardware.hbm_bw_GBps=.nan", "hbm_bw_GBps", "finite"),
    cli("set-neg", "estimate --set hardware.hbm_bw_GBps=-1", "hbm_bw_GBps", "allowed [1e-12"),
    cli("set-zero", "estimate --set hardware.rdma_bw_GBps=0", "rdma_bw_GBps", "allowed [1e-12"),
    cli("set-absurd", "estimate --set hardware.memory_GB=1e100", "memory_GB", "allowed"),
    cli("set-unknown-key", "estimate --set hardware.bogus=1", "bogus", "unknown key", "allowed keys"),
    cli("set-syntax", "estimate --set bogus", "--set", "hardware.rdma_bw_GBps=100"),
    cli("set-prefix", "estimate --set foo.bar=1", "--set", "'model.' or 'hardware.'"),
    cli("set-section", "estimate --set model.moe.x.y=5", "moe.x", "not a section"),
    cli("set-type", "estimate --set hardware.hbm_bw_GBps=abc", "hbm_bw_GBps", "expected a number"),
    cli("set-int", "estimate --set hardware.sms=1.5", "sms", "integer"),
    cli("set-topk", "estimate --set model.moe.top_k=1000", "top_k", "num_experts"),
    cli("set-experts-zero", "estimate --set model.moe.num_experts=0", "num_experts", "[1, 100000]"),
    cli("set-kind", "estimate --set model.attention.kind=xyz", "attention.kind", "mla", "gqa"),
    cli("set-eff", "estimate --set hardware.rdma_eff_bw_GBps=100", "rdma_eff_bw_GBps", "nominal"),
    # --- spec files
    cli("model-unknown-name", "estimate --model nope", "model", "available", "deepseek-v3"),
    cli("hardware-unknown-name", "estimate --hardware nope", "hardware", "available", "h800"),
    cli("model-missing-file", "estimate --model /nonexistent/x.yaml", "model", "does not exist"),
    cli("model-directory", "estimate --model {adir}/", "model", "not a file"),
    cli("model-empty", "estimate --model {empty}", "empty"),
    cli("model-malformed", "estimate --model {malformed}", "malformed YAML", "line"),
    cli("model-list", "estimate --model {list}", "expected a mapping"),
    cli("model-binary", "estimate --model {binary}", "cannot read"),
    cli("model-unknown-key", "estimate --model {m_unknown}", "bogus_key", "unknown key", "allowed keys"),
    cli("model-wrong-type", "estimate --model {m_type}", "num_layers", "expected a number", "[1, 10000]"),
    cli("model-negative", "estimate --model {m_neg}", "hidden_size", "out of range", "allowed"),
    cli("model-heads-zero", "estimate --model {m_heads0}", "attention.num_heads", "allowed"),
    cli("model-topk", "estimate --model {m_topk}", "moe.top_k", "num_experts"),
    cli("model-nan", "estimate --model {m_ctx}", "max_context", "finite"),
    cli("model-dense-layers", "estimate --model {m_dense}", "num_dense_layers", "num_layers"),
    cli("hw-eff", "estimate --hardware {h_eff}", "nvlink_eff_bw_GBps", "nominal"),
    cli("hw-reserve", "estimate --hardware {h_reserve}", "memory_reserve_GB", "below memory_GB"),
    cli("hw-inf", "estimate --hardware {h_inf}", "hbm_bw_GBps", "finite"),
    cli("hw-absurd-gpus", "estimate --hardware {h_gpus}", "gpus_per_node", "[1, 100000]"),
    cli("hw-name-path", "estimate --hardware {h_name}", "name", "letters, digits"),
    cli("hw-empty", "estimate --hardware {empty}", "empty"),
    cli("hw-directory", "estimate --hardware {adir}/", "hardware", "not a file"),
    cli("hf-missing-key", "estimate --model {hf_missing}", "num_hidden_layers", "required", "[1, 10,000]"),
    cli("hf-model-type", "estimate --model {hf_type}", "model_type", "allowed", "qwen3_moe"),
    cli("hf-huge-layers", "estimate --model {hf_layers}", "num_hidden_layers", "10,000"),
    cli("hf-kv-heads", "estimate --model {hf_heads}", "num_key_value_heads", "divide"),
    cli("hf-malformed", "estimate --model {hf_malformed}", "malformed JSON"),
    cli("model-import-missing", "model import /nonexistent/config.json", "does not exist", "config.json"),
    cli("model-import-directory", "model import {adir}", "not a file"),
    cli("model-import-malformed", "model import {hf_malformed}", "malformed JSON"),
    # --- expert load CSVs (estimate --expert-skew, eplb --load)
    cli("skew-csv-nan", "estimate --expert-skew {load_nan}", "load", "NaN", ">= 0"),
    cli("skew-csv-columns", "estimate --expert-skew {load_cols}", "expert-skew", "num_experts = 256"),
    cli("skew-csv-missing", "estimate --expert-skew /nonexistent/load.csv", "load", "does not exist"),
    cli("eplb-csv-negative", "eplb --slots 4 --gpus 2 --load {load_neg}", "load", "negative", ">= 0"),
    cli("eplb-csv-empty", "eplb --slots 4 --gpus 2 --load {load_empty}", "load", "empty"),
    cli("eplb-csv-binary", "eplb --slots 4 --gpus 2 --load {load_binary}", "load", "cannot read"),
    # --- output paths
    cli("out-missing-dir", "estimate --out /nonexistent/dir/x.json", "--out", "writable"),
    cli("out-directory", "estimate --out {adir}", "--out", "writable"),
    cli("out-device", "estimate --out /dev/null", "--out", "/dev/null", "character device", "not a regular file"),
    cli("sweep-out-directory", "sweep --ep 8 --batch 1 --out {adir}", "--out", ".csv"),
    cli("sweep-out-missing-dir", "sweep --ep 8 --batch 1 --out /nonexistent/x.csv", "/nonexistent", "does not exist"),
    cli("fit-out-directory", "calibrate fit {cal_header} --gpu h800 --out {adir}", "is a directory"),
    cli("validate-out-suffix", "validate --out {adir}/v.txt", "--out", ".md", ".png"),
    cli("timeline-out-suffix", "timeline --json --out {adir}/t.txt", "--out", ".png"),
    # --- sweep / pareto
    cli("sweep-batch-nan", "sweep --ep 8 --batch nan", "batch", "(0, 1e9]"),
    cli("sweep-batch-1e15", "sweep --ep 8 --batch 1e15", "batch", "(0, 1e9]"),
    cli("sweep-gpus-1e12", "sweep --tp 1 --ep 1e12", "ep", "1,000,000"),
    cli("sweep-range-order", "sweep --batch 8:1", "batch", "a <= b"),
    cli("sweep-range-size", "sweep --batch 0:1e12:1", "batch", "1,000,000 values"),
    cli("sweep-axis-text", "sweep --tp abc", "tp", "not a number"),
    cli("sweep-none-valid", "sweep --tp 3 --dp 8 --ep 24", "none of", "tp: must divide", "heads"),
    cli("sweep-filter-neg", "sweep --ep 8 --max-tpot -1", "max_tpot_s", "> 0"),
    cli("sweep-filter-nan", "sweep --ep 8 --min-tokens-per-s-per-user nan", "min_tokens_per_s_per_user", "> 0"),
    cli("sweep-skew", "sweep --ep 8 --expert-skew bogus", "expert-skew", "zipf"),
    cli("sweep-mtp-qwen", "sweep --model qwen3-30b-a3b --ep 8 --mtp 1", "none of", "mtp", "allowed 0"),
    cli("sweep-study-missing", "sweep --study /nonexistent/study.yaml", "study", "cannot read"),
    cli("sweep-study-unknown", "sweep --study {study_unknown}", "study", "unknown key", "allowed"),
    cli("sweep-study-set", "sweep --study {study_set}", "study", "set", "key=value"),
    cli("sweep-study-axis", "sweep --study {study_axis}", "batch", "(0, 1e9]"),
    cli("sweep-study-filter", "sweep --study {study_filter}", "max_tpot_s", "> 0"),
    cli("sweep-study-binary", "sweep --study {binary}", "study", "cannot read"),
    cli("sweep-out-ext", "sweep --ep 8 --out x.xlsx", "--out", ".csv"),
    cli("sweep-out-dir", "sweep --ep 8 --out /nonexistent/x.csv", "--out", "writable"),
    cli("sweep-hardware", "sweep --ep 8 --hardware h800,bogus", "hardware", "available"),
    cli("pareto-column", "pareto --ep 8 --x bogus", "no column 'bogus'", "available"),
    cli("pareto-per", "pareto --ep 8 --per bogus", "--per", "gpu, node"),
    cli(
        "disagg-mtp-no-module",
        "disagg --isl 1000 --osl 100 --max-ttft 2 --max-tpot 0.05 --model qwen3-30b-a3b --mtp 1",
        "mtp",
        "allowed 0",
    ),
    cli("disagg-isl-nan", "disagg --isl nan --osl 100 --max-ttft 2 --max-tpot 0.05", "isl", "positive"),
    cli(
        "disagg-instances",
        "disagg --isl 1000 --osl 100 --max-ttft 2 --max-tpot 0.05 --max-instances 0",
        "max_instances",
        ">= 1",
    ),
    # --- plan / traffic
    cli("plan-no-traffic", "plan", "input_tokens", "required"),
    cli("plan-traffic-binary", "plan --traffic {binary}", "traffic", "cannot read"),
    cli("plan-traffic-unknown", "plan --traffic {t_unknown}", "bogus", "unknown key", "allowed"),
    cli("plan-traffic-nan", "plan --traffic {t_nan}", "output_tokens", "finite", ">= 0"),
    cli("plan-traffic-acceptance", "plan --traffic {t_acc}", "decode.acceptance", "<= 1"),
    cli("plan-traffic-ep", "plan --traffic {t_ep}", "decode", "ep", "expert slots"),
    cli("plan-traffic-context", "plan --traffic {t_ctx}", "context", "max_context"),
    cli("plan-cache-hits", f"{PLAN} --cache-hit-tokens 2e9", "cache_hit_tokens", "allowed"),
    cli("plan-hours", f"{PLAN} --hours 0", "hours", ">= 1"),
    cli("plan-diurnal", f"{PLAN} --diurnal 1,2,3", "diurnal", "24"),
    cli("plan-max-batch", f"{PLAN} --decode-max-batch 1000000000000", "decode.max_batch", "100000"),
    cli("plan-mtp", f"{PLAN} --mtp 1 --model qwen3-30b-a3b", "mtp", "allowed 0"),
    cli("plan-overlap", f"{PLAN} --overlap bogus", "decode.overlap", "five-stage"),
    cli("plan-slo", f"{PLAN} --min-tokens-per-s-per-user 1e5", "min_tokens_per_s_per_user", "allowed <="),
    cli("plan-out", f"{PLAN} --out /nonexistent/plan.json", "--out", "writable"),
    # --- eplb
    cli("eplb-slots", "eplb --slots 0", "--slots", ">= 1"),
    cli("eplb-zipf-nan", "eplb --zipf nan", "--zipf", ">= 0"),
    cli("eplb-divisible", "eplb --experts 16 --slots 20 --gpus 8", "--slots", "multiple of --gpus"),
    cli("eplb-absurd", "eplb --layers 100000000", "--layers", "10,000"),
    cli("eplb-cells", "eplb --experts 100000 --slots 100000 --gpus 100 --layers 10000", "placement cells", "at most"),
    # --- kernel / timeline / validate / calibrate show
    cli("kernel-op", "kernel --op bogus", "--op", "gemm"),
    cli("kernel-nan", "kernel --op gemm --m nan --n 1 --k 1", "--m", "(0, 1e+09]"),
    cli("kernel-absurd", "kernel --op gemm --m 1e300 --n 1 --k 1", "--m", "(0, 1e+09]"),
    cli("kernel-q-len", "kernel --op mla_decode --batch 1 --context 1 --q-len nan", "--q-len", "(0"),
    cli("kernel-mla-on-gqa", "kernel --op mla_decode --batch 1 --context 1 --model qwen3-30b-a3b", "mla_decode", "MLA"),
    cli("kernel-ep-fraction", "kernel --op dispatch --ep 7.5 --tokens 128", "--ep", "integer"),
    cli("timeline-microbatch", "timeline --batch 1 --overlap two-batch", "overlap", "batch >= 2"),
    cli("timeline-out", "timeline --out /nonexistent/x.png", "--out", "writable"),
    cli("validate-case-id", "validate --case bogus", "--case", "unknown case id"),
    cli("validate-missing-file", "validate /nonexistent/cases.yaml", "case file", "does not exist"),
    cli("validate-tolerance", "validate {c_tol}", "tolerance", "> 0"),
    cli("validate-same-as", "validate {c_same}", "same_as", "allowed"),
    cli("validate-config", "validate {c_cfg}", "config", "mapping"),
    cli("calibrate-show-name", "calibrate show bogus", "profile", "available"),
    cli(
        "calibrate-fit-columns",
        "calibrate fit {cal_columns} --gpu h800 --out {adir}/c1.yaml",
        "missing columns",
        "time_s",
    ),
    cli("calibrate-fit-binary", "calibrate fit {binary} --gpu h800 --out {adir}/c2.yaml", "cannot read"),
    cli(
        "calibrate-fit-missing", "calibrate fit /nonexistent/gemm.csv --gpu h800 --out {adir}/c3.yaml", "does not exist"
    ),
    cli("calibrate-show-corrupt", "calibrate show {p_trunc}", "profile", "corrupted YAML"),
    # --- Python API
    api("api-batch-text", _est(batch="abc"), "batch", "not a number"),
    api("api-tp-fraction", _est(tp=2.5), "tp", "positive integer"),
    api("api-tp-bool", _est(tp=True), "tp", "positive integer"),
    api("api-moe-tp-zero", _est(moe_tp=0), "moe_tp", "positive integer"),
    api("api-context-nan", _est(context=float("nan")), "context", "finite"),
    api("api-acceptance-none", _est(acceptance=None), "acceptance", "[0, 1]"),
    api("api-set-string", _est(set="hardware.hbm_bw_GBps=1e9"), "hbm_bw_GBps", "allowed"),
    api("api-mixed-osl", _est(phase="mixed", isl=100, osl=float("inf")), "osl", "positive"),
    api("api-profile-missing", _est(profile="/nonexistent/profile.yaml"), "profile", "does not exist"),
    api("api-profile-truncated", _est(profile="f:p_trunc"), "profile", "corrupted YAML"),
    api("api-profile-empty", _est(profile="f:empty"), "profile", "empty"),
    api("api-profile-rdma-zero", _est(profile="f:p_rdma0"), "rdma_GBps", "(0, 1e+06]"),
    api("api-profile-alpha-inf", _est(profile="f:p_alpha"), "alpha_us", "finite"),
    api("api-profile-launch", _est(profile="f:p_launch"), "launch", "mapping"),
    api("api-profile-eta", _est(profile="f:p_eta"), "eta_c", "(0, 1]"),
    api("api-profile-schema", _est(profile="f:p_schema"), "schema_version", "supported"),
    api("api-profile-gpu", _est(profile="f:p_gpu"), "fitted for gpu", "h800"),
    api("api-profile-collective", _est(profile="f:p_coll"), "bw_efficiency", "(0, 1]"),
    api("api-sweep-nan", _sweep(axes={"ep": [8], "batch": [float("nan")]}), "batch", "(0, 1e9]"),
    api("api-sweep-axis", _sweep(axes={"bogus": [1]}), "unknown axis", "allowed"),
    api("api-sweep-tp-zero", _sweep(axes={"tp": [0], "ep": [8]}), "tp", "[1, 1,000,000]"),
    api("api-sweep-filter", _sweep(axes={"ep": [8]}, filters={"max_tpot_s": float("nan")}), "max_tpot_s", "> 0"),
    api("api-sweep-isl", _sweep(phase="mixed", axes={"ep": [8]}, isl="abc", osl=1), "isl", "positive"),
    api("api-sweep-study", _sweep(study="f:study_set"), "study", "key=value"),
    api(
        "api-plan-negative",
        lambda f: __import__("moesim.analyses.plan", fromlist=["plan"]).plan({"input_tokens": -1, "output_tokens": 1}),
        "input_tokens",
        ">= 0",
    ),
    api("api-plan-type", lambda f: __import__("moesim.analyses.plan", fromlist=["plan"]).plan(5), "traffic", "mapping"),
    api(
        "api-plan-slo-nan",
        lambda f: __import__("moesim.analyses.plan", fromlist=["plan"]).decode_capacity(
            "deepseek-v3", "h800", min_tokens_per_s_per_user=float("nan")
        ),
        "min_tokens_per_s_per_user",
        ">= 0",
    ),
    api(
        "api-plan-max-batch",
        lambda f: __import__("moesim.analyses.plan", fromlist=["plan"]).decode_capacity(
            "deepseek-v3", "h800", __import__("moesim.specs.traffic", fromlist=["x"]).DecodePool(max_batch=0)
        ),
        "decode.max_batch",
        ">= 1",
    ),
    api(
        "api-eplb-nan",
        lambda f: __import__("moesim.balance.eplb", fromlist=["x"]).rebalance_experts(
            np.array([[1.0, np.nan]]), 2, 1, 1, 1
        ),
        "weight",
        "finite",
    ),
    api(
        "api-eplb-ragged",
        lambda f: __import__("moesim.balance.eplb", fromlist=["x"]).rebalance_experts([[1, 2], [3]], 4, 1, 1, 2),
        "weight",
        "array",
    ),
    api(
        "api-eplb-command",
        lambda f: __import__("moesim.cli.eplb", fromlist=["x"]).eplb_command(experts=float("nan"), echo=lambda s: None),
        "--experts",
        ">= 1",
    ),
    api("api-load-model-dir", lambda f: __import__("moesim").load_model(f["adir"] + "/"), "not a file"),
    api(
        "api-load-hardware-overrides",
        lambda f: __import__("moesim").load_hardware("h800", {"hbm_bw_GBps": float("inf")}),
        "hbm_bw_GBps",
        "finite",
    ),
    api(
        "api-hf-not-dict",
        lambda f: __import__("moesim.specs.hf_import", fromlist=["x"]).mapping_from_hf_config([1, 2], name="x"),
        "expected a JSON object",
    ),
    api(
        "api-traffic-file",
        lambda f: __import__("moesim.specs.traffic", fromlist=["x"]).load_traffic(f["t_unknown"]),
        "bogus",
        "unknown key",
    ),
]

# Calibration fit/show inputs (fixed after the hardening pass: fit.py rejects bad rows, profile.py
# checks every number it reads).
CASES += [
    cli("calibrate-fit-nan-time", "calibrate fit {cal_nan} --gpu h800 --out {adir}/p1.yaml", "time_s"),
    cli("calibrate-fit-negative-time", "calibrate fit {cal_neg} --gpu h800 --out {adir}/p2.yaml", "time_s"),
    cli("calibrate-fit-inf-shape", "calibrate fit {cal_inf} --gpu h800 --out {adir}/p3.yaml", "m"),
    cli("calibrate-fit-no-rows", "calibrate fit {cal_header} --gpu h800 --out {adir}/p4.yaml", "rows"),
    cli("calibrate-show-launch", "calibrate show {p_launch}", "launch"),
]

RESULTS: dict = {}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NONFINITE = re.compile(r"(?<![\w.])-?(nan|inf|infinity)(?![\w])", re.I)


def _run_cli_inprocess(argv):
    from moesim.cli import main

    out, err = io.StringIO(), io.StringIO()
    code, exc = None, None
    with (
        warnings.catch_warnings(record=True) as caught,
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        warnings.simplefilter("always")
        try:
            main(list(argv))
        except SystemExit as e:
            code = e.code
        except BaseException as e:  # noqa: BLE001 - a traceback is what the test looks for
            exc = e
    return code, out.getvalue(), err.getvalue(), exc, caught


def check_case(case: Case, files: dict) -> str:
    """'' when the case fails cleanly as the contract asks, else what is wrong."""
    problems = []
    if case.kind == "cli":
        argv = [a.format(**files) for a in case.args]
        code, out, err, exc, caught = _run_cli_inprocess(argv)
        if exc is not None:
            return f"traceback: {type(exc).__name__}: {exc}"
        if not isinstance(code, int) or code == 0:
            problems.append(f"exit code {code!r}")
        lines = [x for x in _ANSI.sub("", err).splitlines() if x.strip()]
        if len(lines) != 1 or not lines[0].startswith("error: "):
            problems.append(f"stderr is not one 'error: ...' line: {err[:300]!r}")
        if out.strip():
            problems.append(f"stdout not empty: {out[:200]!r}")
        msg = lines[0] if lines else ""
    else:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                r = case.args(files)
            except MoesimError as e:
                msg = str(e)
                if "\n" in msg or not msg.strip():
                    problems.append(f"message is not one line: {msg!r}")
            except Exception as e:  # noqa: BLE001
                return f"not a MoesimError: {type(e).__name__}: {e}"
            else:
                return f"no error raised (returned {str(r)[:120]})"
    if "Traceback" in msg:
        problems.append("traceback text in the message")
    for w in caught:
        if issubclass(w.category, DeprecationWarning) and "moesim" not in Path(w.filename).parts:
            continue  # one library's deprecation inside another (matplotlib < 3.11 on pyparsing 3.3): users never see it
        problems.append(f"warning: {w.category.__name__}: {w.message}")
    for n in case.needles:
        if n.lower() not in msg.lower():
            problems.append(f"message lacks {n!r}: {msg!r}")
    return "; ".join(problems)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _make_files(tmp_path_factory.mktemp("bad_inputs"))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, files):
    problem = check_case(case, files)
    RESULTS[case.id] = problem
    assert not problem, f"{case.id}: {problem}"


SUBPROCESS = [c for c in CASES if c.subprocess]


@pytest.mark.slow
@pytest.mark.parametrize("case", SUBPROCESS, ids=[c.id for c in SUBPROCESS])
def test_bad_input_as_a_user_sees_it(case, files):
    """The same contract through a real `python -m moesim.cli` process (no in-process shortcuts)."""
    p = run_cli_subprocess(*[a.format(**files) for a in case.args])
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), p.stderr
    assert "Traceback" not in p.stderr and not p.stdout.strip()
    assert all(n.lower() in lines[0].lower() for n in case.needles), lines[0]


def test_no_nan_or_inf_in_outputs_of_extreme_but_valid_inputs():
    """Extremes that are allowed still produce finite numbers (JSON null at most, never NaN)."""
    for argv in (
        ["estimate", "--batch", "1e9", "--json"],
        ["estimate", "--batch", "1e-9", "--json"],
        ["estimate", "--phase", "prefill", "--batch", "1e9", "--context", "163840", "--json"],
        ["estimate", "--expert-skew", "zipf:1e308", "--json"],
    ):
        code, out, err, exc, caught = _run_cli_inprocess(argv)
        assert exc is None and code == 0 and not caught, (argv, exc, err, caught)
        assert not _NONFINITE.search(out), argv
        d = json.loads(out)
        assert np.isfinite(d["step_time_s"]) and d["step_time_s"] > 0


def test_disagg_default_space_on_a_model_without_mtp():
    """The default decode space drafts one MTP token; for a model without MTP the CLI drops it
    (every decode row used to be invalid, reported as 'no decode configuration meets TPOT')."""
    code, out, err, exc, caught = _run_cli_inprocess(
        [
            "disagg",
            "--isl",
            "1000",
            "--osl",
            "100",
            "--max-ttft",
            "2",
            "--max-tpot",
            "0.05",
            "--model",
            "qwen3-30b-a3b",
            "--json",
        ]
    )
    assert exc is None and code == 0, (exc, err)
    d = json.loads(out)
    assert d["decode"] is not None and d["decode"]["mtp"] == 0


def test_zz_summary(files, capsys):
    """Runs last (file order): every case of the table, counted."""
    for c in CASES:
        if c.id not in RESULTS:
            RESULTS[c.id] = check_case(c, files)
    n = len(CASES)
    m = sum(1 for c in CASES if not RESULTS[c.id])
    with capsys.disabled():
        print(f"\nbad inputs tried: {n}, clean errors: {m}")
        for c in CASES:
            if RESULTS[c.id]:
                print(f"  not clean: {c.id}: {RESULTS[c.id]}")
    assert n >= 60
    assert m == n
