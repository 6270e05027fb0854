"""Fuzz the spec loaders: random mutations of the shipped model/hardware YAMLs and random YAML
documents, and random mutations of the Hugging Face configs in tests/data/hf_configs plus random
dicts (`mapping_from_hf_config`, then the strict builder). Every case must end in a valid spec or a
clean error: a MoesimError subclass whose message is one short line. A seeded mutation loop (not
hypothesis) keeps >= 10,000 cases; a failure prints the seed and case number to replay it.

In memory: structured mutations go straight to the strict builder (`build`, what `load_model` /
`load_hardware` call after reading the file), damaged text goes through the loader's reader
(`read_mapping`) on an in-memory file. Every FILE_EVERY-th case of each kind still goes through a
real file and `load_model` / `load_hardware`, so the file path stays covered.
"""

from __future__ import annotations

import copy
import json
import math
import os
import random
import time
from pathlib import Path

import pytest
import yaml

from moesim.errors import MoesimError
from moesim.specs.hardware import HardwareSpec
from moesim.specs.hf_import import mapping_from_hf_config
from moesim.specs.loader import load_hardware, load_model, read_mapping
from moesim.specs.model import ModelSpec
from moesim.specs.schema import build

ROOT = Path(__file__).resolve().parents[2]
MODEL_FILES = sorted((ROOT / "models").glob("*.yaml"))
HW_FILES = sorted((ROOT / "hardware").glob("*.yaml"))
HF_FILES = sorted((ROOT / "tests" / "data" / "hf_configs").glob("*.json"))
SEED = int(os.environ.get("MOESIM_FUZZ_SEED", "20261130"))
MAX_MESSAGE = 1200
FILE_EVERY = 50  # one case in 50 of each YAML kind is written to a file and loaded from it

WORDS = [
    "mla",
    "gqa",
    "mha",
    "fp8",
    "bf16",
    "fp16",
    "fp4",
    "sigmoid",
    "softmax",
    "noaux_tc",
    "greedy",
    "fp8",
    "deepseek_v3",
    "qwen3_moe",
    "mixtral",
    "llama",
    "",
    " ",
    "abc",
    "1e3",
    "nan",
    ".inf",
    "-1",
    "0x10",
    "null",
    "true",
    "line\nbreak",
    "ünïcödé",
    "!!python/object:os.system",
    "{a: 1}",
    "[1, 2]",
]
KEYS = [
    "num_layers",
    "hidden_size",
    "moe",
    "attention",
    "kind",
    "num_experts",
    "top_k",
    "n_group",
    "topk_group",
    "num_heads",
    "num_kv_heads",
    "head_dim",
    "kv_lora_rank",
    "memory_GB",
    "hbm_bw_GBps",
    "gpus_per_node",
    "nvlink_bw_GBps",
    "rdma_eff_bw_GBps",
    "model_type",
    "num_hidden_layers",
    "n_routed_experts",
    "num_attention_heads",
    "num_key_value_heads",
    "first_k_dense_replace",
    "moe_layer_freq",
    "text_config",
    "quantization_config",
    "weight_block_size",
    "mlp_only_layers",
    "decoder_sparse_step",
    "bogus",
    "Name",
    "x.y",
    "with space",
    "",
    "1",
    "line\nbreak",
]


def weird_value(rng: random.Random, depth: int = 0):
    r = rng.random()
    if r < 0.30:  # plausible numbers reach the deeper validation branches
        return rng.choice(
            [
                0,
                1,
                2,
                3,
                4,
                7,
                8,
                16,
                61,
                64,
                128,
                256,
                512,
                1024,
                4096,
                7168,
                18432,
                163840,
                rng.randint(-5, 300),
                rng.randint(0, 10**6),
            ]
        )
    if r < 0.45:
        return rng.choice(
            [
                0.0,
                -0.0,
                0.5,
                1.0,
                1.5,
                -1.0,
                1e-300,
                1e300,
                1e308,
                float("nan"),
                float("inf"),
                -float("inf"),
                rng.uniform(-10, 1e4),
            ]
        )
    if r < 0.55:
        return rng.choice([None, True, False])
    if r < 0.62:
        return rng.choice([2**31, 2**63, 10**20, -(10**20), 10**400])
    if r < 0.80:
        return rng.choice(WORDS)
    if depth > 2:
        return None
    if r < 0.90:
        return [weird_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {rng.choice(KEYS): weird_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def _containers(obj, out=None):
    out = [] if out is None else out
    if isinstance(obj, (dict, list)):
        out.append(obj)
        for v in obj.values() if isinstance(obj, dict) else obj:
            _containers(v, out)
    return out


def mutate(rng: random.Random, data, n_ops: int):
    """Apply n_ops random edits to a nested mapping (in place) and return it."""
    for _ in range(n_ops):
        node = rng.choice(_containers(data))
        op = rng.random()
        if isinstance(node, list):
            if node and op < 0.4:
                node[rng.randrange(len(node))] = weird_value(rng)
            elif node and op < 0.6:
                node.pop(rng.randrange(len(node)))
            else:
                node.append(weird_value(rng))
            continue
        keys = list(node)
        if keys and op < 0.45:
            node[rng.choice(keys)] = weird_value(rng)
        elif keys and op < 0.60:
            del node[rng.choice(keys)]
        elif keys and op < 0.70:  # numeric nudge: scale, negate, off by one
            k = rng.choice(keys)
            v = node[k]
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                node[k] = rng.choice([v * 2, v // 2 if isinstance(v, int) else v / 2, -v, v + 1, v - 1, v * 10**9])
            else:
                node[k] = weird_value(rng)
        elif keys and op < 0.78:  # rename a key
            k = rng.choice(keys)
            node[rng.choice(KEYS)] = node.pop(k)
        else:
            node[rng.choice(KEYS)] = weird_value(rng)
    return data


def mutate_text(rng: random.Random, text: str) -> str:
    """Byte-level damage: delete / insert / replace characters, truncate, duplicate or drop lines."""
    op = rng.random()
    if op < 0.2:
        return text[: rng.randrange(len(text) + 1)]
    if op < 0.4:
        lines = text.splitlines(keepends=True)
        i = rng.randrange(len(lines))
        if rng.random() < 0.5:
            lines.insert(i, lines[rng.randrange(len(lines))])
        else:
            lines.pop(i)
        return "".join(lines)
    chars = list(text)
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(chars) + 1)
        c = rng.choice(
            [
                ":",
                "-",
                " ",
                "\t",
                "\n",
                "[",
                "]",
                "{",
                "}",
                "&",
                "*",
                "!",
                "#",
                "'",
                '"',
                "|",
                ">",
                "%",
                "@",
                "`",
                ",",
                "?",
                "0",
                "9",
                ".",
                "e",
                "\x00",
                "\ufeff",
                "é",
            ]
        )
        if rng.random() < 0.5 and i < len(chars):
            chars[i] = c
        elif rng.random() < 0.5 and i < len(chars):
            del chars[i]
        else:
            chars.insert(i, c)
    return "".join(chars)


def check_error(e: MoesimError, ctx: str):
    msg = str(e)
    assert msg and "\n" not in msg and "\r" not in msg, f"{ctx}: not one line: {msg!r}"
    assert len(msg) <= MAX_MESSAGE, f"{ctx}: message of {len(msg)} chars: {msg[:200]}..."
    assert "Traceback" not in msg, f"{ctx}: {msg}"


def check_model(spec: ModelSpec, ctx: str):
    for v in (spec.total_params(), spec.active_params(), spec.kv_bytes_per_token):
        assert math.isfinite(v) and v > 0, f"{ctx}: valid spec with non-finite/non-positive closed form {v}"


def check_hardware(spec: HardwareSpec, ctx: str):
    for v in (spec.peak_flops("fp8"), spec.peak_flops("bf16"), spec.hbm_bw_Bps, spec.memory_bytes):
        assert math.isfinite(v) and v > 0, f"{ctx}: valid spec with non-finite/non-positive value {v}"


def run_file_case(path: Path, loader, checker, ctx: str) -> str:
    try:
        spec = loader(str(path))
    except MoesimError as e:
        check_error(e, ctx)
        return "error"
    checker(spec, ctx)
    return "valid"


def run_mapping_case(thunk, checker, ctx: str) -> str:
    """Same outcome rules as run_file_case, for a spec built in memory."""
    try:
        spec = thunk()
    except MoesimError as e:
        check_error(e, ctx)
        return "error"
    checker(spec, ctx)
    return "valid"


class MemFile:
    """What `read_mapping` uses of a Path (suffix, read_text, str), held in memory."""

    def __init__(self, name: str, content: str | bytes):
        self.name, self.suffix, self.content = name, Path(name).suffix, content

    def read_text(self, encoding="utf-8"):
        return self.content.decode(encoding) if isinstance(self.content, bytes) else self.content

    def __str__(self):
        return self.name


SPEC_OF = {load_model: ModelSpec, load_hardware: HardwareSpec}


def run_case(i: int, f: Path, content: str | bytes, loader, checker, ctx: str) -> str:
    """Every FILE_EVERY-th case through a real file and the loader, the rest in memory through the
    loader's own reader and builder."""
    if i % FILE_EVERY == 0:
        f.write_bytes(content) if isinstance(content, bytes) else f.write_text(content, encoding="utf-8")
        return run_file_case(f, loader, checker, ctx)
    mem = MemFile(str(f), content)
    return run_mapping_case(lambda: build(SPEC_OF[loader], read_mapping(mem), file=str(mem)), checker, ctx)


def _dump(data) -> str:
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000)


@pytest.mark.slow
def test_fuzz_spec_loaders(tmp_path, capsys):
    rng = random.Random(SEED)
    t0 = time.perf_counter()
    counts = {"valid": 0, "error": 0}
    n = 0
    shipped = [(p, load_model, check_model, yaml.safe_load(p.read_text())) for p in MODEL_FILES] + [
        (p, load_hardware, check_hardware, yaml.safe_load(p.read_text())) for p in HW_FILES
    ]
    texts = {p: p.read_text() for p, *_ in shipped}
    f = tmp_path / "spec.yaml"

    # 1. structured mutations of the shipped YAMLs (~2,600 cases): the mapping goes to the strict
    #    builder (a YAML round trip returns the same mapping), one in FILE_EVERY via a file
    for i in range(2600):
        path, loader, checker, data = shipped[i % len(shipped)]
        d = mutate(rng, copy.deepcopy(data), rng.choice([1, 1, 1, 2, 3, 5]))
        ctx = f"yaml mutation {i} of {path.name} (seed {SEED})"
        if i % FILE_EVERY == 0:
            counts[run_case(i, f, _dump(d), loader, checker, ctx)] += 1
        else:
            counts[run_mapping_case(lambda d=d, cls=SPEC_OF[loader]: build(cls, d, file=str(f)), checker, ctx)] += 1
        n += 1
    # 2. text-level damage of the shipped YAMLs (~1,200 cases)
    for i in range(1200):
        path, loader, checker, _ = shipped[i % len(shipped)]
        ctx = f"text mutation {i} of {path.name} (seed {SEED})"
        counts[run_case(i, f, mutate_text(rng, texts[path]), loader, checker, ctx)] += 1
        n += 1
    # 3. random YAML documents (and a few non-mapping / empty / binary files) (~700 cases)
    for i in range(700):
        kind = rng.random()
        if kind < 0.1:
            content = bytes(rng.randrange(256) for _ in range(rng.randint(0, 64)))
        elif kind < 0.2:
            content = rng.choice(["", "\n", "---\n", "- 1\n- 2\n", "42\n", "null\n", "'text'\n", "{}\n"])
        else:
            content = _dump({rng.choice(KEYS): weird_value(rng) for _ in range(rng.randint(0, 8))})
        loader, checker = (load_model, check_model) if i % 2 else (load_hardware, check_hardware)
        # binary files always go through a real file (the reader's decode error is the point)
        j = 0 if isinstance(content, bytes) else i
        counts[run_case(j, f, content, loader, checker, f"random yaml {i} (seed {SEED})")] += 1
        n += 1
    t_yaml = time.perf_counter() - t0

    # 4. HF config.json: mutations of the shipped configs and random dicts, importer + builder
    hf = [(p.name, json.loads(p.read_text())) for p in HF_FILES]
    for i in range(6000):
        name, cfg = hf[i % len(hf)]
        if i % 10 == 9:
            c = {rng.choice(KEYS): weird_value(rng) for _ in range(rng.randint(0, 10))}
            if rng.random() < 0.7:
                c["model_type"] = rng.choice(["deepseek_v3", "qwen3_moe", "mixtral", "llama", "qwen2_moe", "bogus"])
        else:
            c = mutate(rng, copy.deepcopy(cfg), rng.choice([1, 1, 2, 3, 6]))
        ctx = f"hf mutation {i} of {name} (seed {SEED})"
        try:
            spec = build(ModelSpec, mapping_from_hf_config(c, name="fuzz", file=name), file=name)
        except MoesimError as e:
            check_error(e, ctx)
            counts["error"] += 1
        else:
            check_model(spec, ctx)
            counts["valid"] += 1
        n += 1
    # a few non-dict inputs
    for i, c in enumerate([None, [], "x", 3, [{"model_type": "llama"}]]):
        with pytest.raises(MoesimError) as e:
            mapping_from_hf_config(c, name="fuzz")
        check_error(e.value, f"hf non-dict {i}")
        counts["error"] += 1
        n += 1

    elapsed = time.perf_counter() - t0
    with capsys.disabled():
        print(
            f"\nfuzz cases: {n:,} ({counts['valid']:,} valid specs, {counts['error']:,} clean errors) in "
            f"{elapsed:.1f} s (YAML cases {t_yaml:.1f} s)"
        )
    assert n >= 10_000
    assert counts["valid"] > 100 and counts["error"] > 1000  # the mutations reach both outcomes
