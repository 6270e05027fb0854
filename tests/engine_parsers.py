"""Check printed engine launch commands with the engines' OWN argument parsers (test support).

`check_commands(text, versions)` takes the shell text a user would paste (what `moesim ...
--emit-launch` prints) and returns a `Problem` for every line the real engine would reject:

- SGLang (`python -m sglang.launch_server ...`): `sglang.srt.server_args.prepare_server_args`
  of the pinned wheel (argparse of `ServerArgs.add_cli_args`, --config merging, `from_cli_args`).
- SGLang router (`python -m sglang_router.launch_router ...`): `sglang_router.launch_router.
  parse_router_args` and `RouterArgs._validate_router_args` of the `sglang-router` wheel.
- vLLM (`vllm serve MODEL ...`): the `vllm` CLI's serve sub-parser built as
  `vllm.entrypoints.cli.serve.ServeSubcommand.subparser_init` builds it (`make_arg_parser`), then
  `validate_parsed_serve_args` and `AsyncEngineArgs.from_cli_args` (what `vllm serve` runs before
  it loads the model).
- vLLM router (`vllm-router ...`, PyPI `vllm-router`): `vllm_router.launch_router.parse_router_args`
  and `RouterArgs._validate_router_args`.
- TRT-LLM (`trtllm-serve ...`, `trtllm-serve disaggregated -c ...`): its wheel is not on PyPI, so
  the options, the LLM-API YAML fields and the disaggregated YAML are checked against the schema
  read from its sources, tests/data/engines/trtllm-<version>.json.

The Python engines run in ONE subprocess per engine (`python tests/engine_parsers.py --worker
ENGINE SITE_DIR`, JSON on stdin/stdout), with only the heavy modules their import chain needs
replaced by permissive stubs (`_STUBS`: torch, triton, transformers, ...); torch.cuda/NVML stubs
describe one 8-GPU H200 node so platform detection picks CUDA. Nothing leaks into the test process.

Wheels: `pip download --no-deps DIST==VERSION` into $MOESIM_WHEEL_CACHE (default
~/.cache/moesim/wheels), unpacked once into <cache>/site/<dist>-<version>/; a failure (offline, no
such version) raises `Unavailable(reason)`, which tests turn into `pytest.skip(reason)`.
Deprecation warnings printed while parsing are Problems of kind "deprecated".
Only the standard library is imported at module level (the worker runs in a bare interpreter).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shlex
import subprocess
import sys
import zipfile
from pathlib import Path

__all__ = ["Problem", "Unavailable", "check_commands", "pinned_versions", "split_commands", "engine_site"]

DATA = Path(__file__).resolve().parent / "data" / "engines"
KINDS = ("parse", "semantic", "schema", "unknown-command", "deprecated")


class Unavailable(Exception):
    """An engine's parser cannot be built here (no network, no wheel); tests skip with the reason."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclasses.dataclass(frozen=True)
class Problem:
    line: int  # 1-based line of the command in the checked text
    engine: str  # sglang | sglang-router | vllm | vllm-router | trtllm | shell
    kind: str  # one of KINDS
    message: str
    command: str = ""

    def __str__(self) -> str:
        return f"line {self.line} [{self.engine}/{self.kind}] {self.message}"


def pinned_versions() -> dict[str, str]:
    """The engine versions the launch commands are checked against: the engine model's pins
    (moesim/specs/engines/*.yaml pin.release / pin.router_release). TRT-LLM names the schema file
    tests/data/engines/trtllm-<version>.json (its wheel is not on PyPI)."""
    from moesim.specs.engine import load_engine_model

    out = {}
    for eng in ("sglang", "vllm", "trtllm"):
        m = load_engine_model(eng)
        out[eng] = m.release
        if m.router_dist != m.dist:
            out[m.router_dist] = m.router_release
    return out


# ---------------------------------------------------------------- wheels

# engine -> (PyPI dist, import packages to unpack, small real dependencies the parser imports
# (pinned; everything else heavy is stubbed in the worker))
DISTS = {
    "sglang": ("sglang", ["sglang"], ["msgspec==0.23.0"]),
    "sglang-router": ("sglang-router", ["sglang_router"], ["setproctitle==1.3.8"]),
    "vllm": ("vllm", ["vllm"], ["regex==2026.11.19", "msgspec==0.23.0"]),
    "vllm-router": ("vllm-router", ["vllm_router"], ["setproctitle==1.3.8"]),
}


def wheel_cache() -> Path:
    return Path(os.environ.get("MOESIM_WHEEL_CACHE") or Path.home() / ".cache" / "moesim" / "wheels")


def _norm(dist: str) -> str:
    return re.sub(r"[-_.]+", "_", dist).lower()


def _wheel(dist: str, version: str) -> Path:
    """The cached wheel of dist==version, downloaded with pip when missing."""
    cache = wheel_cache()
    pattern = f"{_norm(dist)}-{version}-*.whl"
    found = sorted(cache.glob(pattern)) if cache.is_dir() else []
    if found:
        return found[0]
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", f"{dist}=={version}", "-d", str(cache)]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise Unavailable(f"pip download {dist}=={version}: {e}") from e
    found = sorted(cache.glob(pattern))
    if p.returncode != 0 or not found:
        tail = (p.stderr or p.stdout).strip().splitlines()[-1:] or ["no wheel"]
        raise Unavailable(f"pip download {dist}=={version} failed: {tail[0]}")
    return found[0]


def _unpack(wheel: Path, dest: Path, packages: list[str] | None) -> None:
    """Unpack the given top-level packages (all when None) and the dist-info of a wheel."""
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            top = name.split("/", 1)[0]
            if packages is None or top in packages or top.endswith(".dist-info"):
                z.extract(name, dest)


def engine_site(engine: str, version: str) -> Path:
    """A directory holding the engine's python packages and its small real dependencies."""
    dist, packages, deps = DISTS[engine]
    site = wheel_cache() / "site" / f"{_norm(dist)}-{version}"
    if (site / ".complete").exists():
        return site
    site.mkdir(parents=True, exist_ok=True)
    _unpack(_wheel(dist, version), site, packages)
    for dep in deps:
        name, ver = dep.split("==")
        _unpack(_wheel(name, ver), site, None)
    (site / ".complete").write_text(f"{dist}=={version} {' '.join(deps)}\n")
    return site


# ---------------------------------------------------------------- shell text -> commands


@dataclasses.dataclass
class Command:
    line: int
    argv: list[str]
    text: str


def _logical_lines(text: str):
    """(first line number, joined text) with backslash continuations joined."""
    buf, start = [], 0
    for n, raw in enumerate(text.splitlines(), 1):
        if not buf:
            start = n
        if raw.rstrip().endswith("\\") and not raw.lstrip().startswith("#"):
            buf.append(raw.rstrip()[:-1])
            continue
        buf.append(raw)
        yield start, " ".join(buf)
        buf = []
    if buf:
        yield start, " ".join(buf)


_HEREDOC = re.compile(r"^\s*cat\s+>\s*(\S+)\s*<<-?\s*(['\"]?)(\w+)\2\s*$")
_LAUNCH_PREFIXES = {"trtllm-llmapi-launch", "nohup", "env", "exec", "numactl"}
_MPI_LAUNCHERS = {"srun", "mpirun", "mpiexec"}
_PROGRAMS = {"python", "python3", "vllm", "vllm-router", "trtllm-serve", "sglang"}


def split_commands(text: str) -> tuple[list[Command], dict[str, str], list[Problem]]:
    """Commands of a shell text, the files it writes (echo ... > f, heredocs) and shell problems."""
    files: dict[str, str] = {}
    cmds: list[Command] = []
    problems: list[Problem] = []
    lines = list(_logical_lines(text))
    i = 0
    while i < len(lines):
        n, line = lines[i]
        i += 1
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _HEREDOC.match(s)
        if m:
            body = []
            while i < len(lines) and lines[i][1].strip() != m.group(3):
                body.append(lines[i][1])
                i += 1
            i += 1  # the terminator
            files[m.group(1)] = "\n".join(body) + "\n"
            continue
        try:
            toks = shlex.split(s, comments=True)
        except ValueError as e:
            problems.append(Problem(n, "shell", "parse", f"shell quoting: {e}", s))
            continue
        for part in _split_on(toks, {"&&", ";", "||"}):
            if part and part[-1] == "&":
                part = part[:-1]
            if not part:
                continue
            if part[0] == "echo" and len(part) >= 3 and part[-2] == ">":
                files[part[-1]] = " ".join(part[1:-2]) + "\n"
                continue
            if part[0] == "export" or all(re.match(r"^\w+=", t) for t in part):
                continue
            cmds.append(Command(n, _strip_prefixes(part), s))
    return cmds, files, problems


def _split_on(toks: list[str], seps: set[str]) -> list[list[str]]:
    out, cur = [], []
    for t in toks:
        if t in seps:
            out.append(cur)
            cur = []
        else:
            cur.append(t)
    out.append(cur)
    return out


def _strip_prefixes(toks: list[str]) -> list[str]:
    """Drop VAR=1 assignments and launcher prefixes (srun/mpirun options, trtllm-llmapi-launch)."""
    t = list(toks)
    while t:
        if re.match(r"^[A-Za-z_]\w*=", t[0]):
            t.pop(0)
        elif t[0] in _LAUNCH_PREFIXES:
            t.pop(0)
        elif t[0] in _MPI_LAUNCHERS:
            # launcher options up to the first program we know (srun -N 2 --ntasks-per-node 8 prog ...)
            k = next((j for j in range(1, len(t)) if t[j] in _PROGRAMS | _LAUNCH_PREFIXES), len(t))
            t = t[k:]
        else:
            break
    return t


def _engine_of(argv: list[str]) -> tuple[str | None, list[str]]:
    """(engine, the arguments its parser sees) for one command."""
    if not argv:
        return None, argv
    prog = argv[0]
    if prog in ("python", "python3") and len(argv) >= 3 and argv[1] == "-m":
        mod = argv[2]
        if mod == "sglang.launch_server":
            return "sglang", argv[3:]
        if mod == "sglang_router.launch_router":
            return "sglang-router", argv[3:]
        if mod == "vllm.entrypoints.openai.api_server":
            return "vllm", ["serve", *argv[3:]]
        return None, argv
    if prog == "sglang" and argv[1:2] == ["serve"]:
        return "sglang", argv[2:]
    if prog == "vllm" and argv[1:2] == ["serve"]:
        return "vllm", argv[1:]
    if prog == "vllm-router":
        return "vllm-router", argv[1:]
    if prog == "trtllm-serve":
        return "trtllm", argv[1:]
    return None, argv


def check_commands(text: str, versions: dict | None = None) -> list[Problem]:
    """Problems of every command in a printed shell text (see the module docstring)."""
    versions = versions or pinned_versions()
    cmds, files, problems = split_commands(text)
    by_engine: dict[str, list[tuple[Command, list[str]]]] = {}
    for c in cmds:
        engine, args = _engine_of(c.argv)
        if engine is None:
            problems.append(Problem(c.line, "shell", "unknown-command", f"no checker for {c.argv[:3]}", c.text))
            continue
        by_engine.setdefault(engine, []).append((c, args))
    for engine, items in by_engine.items():
        if engine == "trtllm":
            schema = trtllm_schema(versions["trtllm"])
            for c, args in items:
                problems += [Problem(c.line, engine, k, m, c.text) for k, m in check_trtllm(args, files, schema)]
            continue
        results = run_worker(engine, versions[engine], [args for _, args in items], files)
        for (c, _), res in zip(items, results):
            problems += [Problem(c.line, engine, k, m, c.text) for k, m in res]
    return sorted(problems, key=lambda p: (p.line, p.engine, p.kind))


def run_worker(engine: str, version: str, argvs: list[list[str]], files: dict[str, str]) -> list[list]:
    """[(kind, message), ...] per argv from one worker process of the engine's real parser."""
    site = engine_site(engine, version)
    payload = json.dumps({"argvs": argvs, "files": files})
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VLLM_", "SGLANG_"))}
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", VLLM_LOGGING_LEVEL="WARNING")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", engine, str(site)]
    try:
        p = subprocess.run(cmd, input=payload, capture_output=True, text=True, timeout=600, env=env)
    except subprocess.TimeoutExpired as e:
        raise Unavailable(f"{engine} {version} parser worker timed out") from e
    out = p.stdout.strip().splitlines()
    if p.returncode != 0 or not out or not out[-1].startswith("{"):
        err = (p.stderr.strip().splitlines() or ["no output"])[-1]
        raise Unavailable(f"{engine} {version}: the parser could not be built here: {err}")
    return json.loads(out[-1])["results"]


# ---------------------------------------------------------------- TRT-LLM (schema from its sources)


def trtllm_schema(version: str) -> dict:
    path = DATA / f"trtllm-{version}.json"
    if not path.exists():
        raise Unavailable(f"no TRT-LLM schema {path.name} (tests/data/engines/extract_trtllm_schema.py)")
    return json.loads(path.read_text())


def _load_yaml(text: str):
    import yaml  # the test environment has PyYAML (moesim depends on it)

    return yaml.safe_load(text)


def _check_fields(obj, node: dict, where: str) -> list[str]:
    """Messages for keys / literal values of a YAML object that the schema node does not accept."""
    msgs = []
    if not isinstance(obj, dict):
        return [f"{where or 'options'}: a mapping expected, got {type(obj).__name__}"]
    fields = node.get("fields", {})
    for key, val in obj.items():
        f = fields.get(key)
        if f is None and node.get("open"):
            continue  # a partly known level (the schema file says which)
        if f is None:
            msgs.append(f"{where}{key}: unknown field (allowed: {', '.join(sorted(fields))})")
            continue
        lits = f.get("literals")
        if lits is not None and not isinstance(val, dict) and val not in lits and val is not None:
            msgs.append(f"{where}{key}: {val!r} not one of {lits}")
        t = f.get("type", "")
        if t == "bool" and not isinstance(val, bool):
            msgs.append(f"{where}{key}: {val!r} is not a bool")
        if t == "int" and (isinstance(val, bool) or not isinstance(val, int)):
            msgs.append(f"{where}{key}: {val!r} is not an int")
        if ("fields" in f or "variants" in f) and isinstance(val, dict):
            sub = f
            if "variants" in f:  # a discriminated union (speculative_config.decoding_type)
                disc = f["discriminator"]
                sub = f["variants"].get(str(val.get(disc)))
                if sub is None:
                    msgs.append(f"{where}{key}.{disc}: {val.get(disc)!r} not one of {sorted(f['variants'])}")
                    continue
            msgs += _check_fields(val, sub, f"{where}{key}.")
    return msgs


def _click_parse(args: list[str], spec: dict) -> tuple[list[str], dict, list[str]]:
    """(positionals, {option: value}, problems) as click would read `args` for one command spec."""
    opts = spec["options"]
    alias = {name: canon for canon, o in opts.items() for name in [canon, *o.get("aliases", [])]}
    pos, got, msgs = [], {}, []
    i = 0
    while i < len(args):
        t = args[i]
        i += 1
        if not t.startswith("-") or t == "-":
            pos.append(t)
            continue
        name, _, inline = t.partition("=")
        canon = alias.get(name)
        if canon is None:
            msgs.append(f"No such option: {name}")
            continue
        o = opts[canon]
        if o.get("flag"):
            got[canon] = True
            continue
        if inline:
            val = inline
        elif i < len(args):
            val = args[i]
            i += 1
        else:
            msgs.append(f"Option '{name}' requires an argument.")
            continue
        if "choices" in o and val not in o["choices"]:
            msgs.append(f"Invalid value for '{name}': {val!r} is not one of {o['choices']}.")
        if o.get("type") == "int" and not re.fullmatch(r"-?\d+", val):
            msgs.append(f"Invalid value for '{name}': {val!r} is not a valid integer.")
        if o.get("type") == "float" and not re.fullmatch(r"-?[\d.]+(e-?\d+)?", val):
            msgs.append(f"Invalid value for '{name}': {val!r} is not a valid float.")
        got[canon] = val
    return pos, got, msgs


def check_trtllm(args: list[str], files: dict[str, str], schema: dict) -> list[tuple[str, str]]:
    """(kind, message) for one `trtllm-serve` command line (after the program name)."""
    cli = schema["cli"]
    sub = "serve"
    if args and args[0] in cli:
        sub, args = args[0], args[1:]
    spec = cli[sub]
    pos, got, msgs = _click_parse(args, spec)
    out = [("parse", m) for m in msgs]
    if len(pos) != spec.get("positionals", 0):
        out.append(
            ("parse", f"trtllm-serve {sub}: {len(pos)} positional arguments, expects {spec.get('positionals', 0)}")
        )
    for opt in spec.get("yaml_options", []):  # --extra_llm_api_options / --config / -c: a YAML file
        if opt not in got:
            continue
        name = got[opt]
        if name not in files:
            out.append(("schema", f"{opt} {name}: the file is not written by the printed commands"))
            continue
        try:
            obj = _load_yaml(files[name])
        except Exception as e:  # noqa: BLE001 - any YAML error is the finding
            out.append(("schema", f"{name}: not YAML: {e}"))
            continue
        node = schema["disaggregated_config"] if sub == "disaggregated" else schema["llm_api"]
        out += [("schema", f"{name}: {m}") for m in _check_fields(obj, node, "")]
    return out


# ---------------------------------------------------------------- the worker (runs in a subprocess)

# modules replaced by stubs, per engine: exactly what the parser's import chain needs (found by
# importing the parser until it succeeds); everything else is the wheel's own code.
_STUBS = {
    "sglang": "torch triton orjson pybase64 requests starlette tqdm aiohttp",
    "vllm": (
        "torch triton uvloop urllib3 transformers huggingface_hub safetensors aiohttp requests fastapi pybase64 "
        "cachetools prometheus_client openai openai_harmony cbor2 cloudpickle cpuinfo partial_json_parser "
        "llguidance xgrammar starlette uvicorn watchfiles orjson tokenizers vllm.third_party.pynvml "
        "vllm._C_stable_libtorch vllm._moe_C_stable_libtorch vllm.cumem_allocator vllm._flashmla_C "
        "vllm._flashmla_extension_C vllm._deepselect_C vllm._flashkda_C vllm.fs_io_C vllm.spinloop"
    ),
    "sglang-router": "aiohttp orjson uvicorn fastapi",
    "vllm-router": "aiohttp orjson uvicorn fastapi",
}


def _install_stubs(roots: list[str]):
    import abc
    import importlib
    import importlib.abc
    import importlib.machinery
    import types

    def dunder(n):
        return n.startswith("__") and n.endswith("__")

    class AnyMeta(abc.ABCMeta):
        """Stub classes: any attribute / subscription / union is another stub class; subclassable."""

        def __getattr__(cls, n):
            if dunder(n):
                raise AttributeError(n)
            return new(n)

        def __getitem__(cls, k):
            return new("item")

        def __or__(cls, o):
            return new("union")

        __ror__ = __or__

        def __iter__(cls):
            return iter(())

        def __len__(cls):
            return 0

        def __int__(cls):
            return 0

        __index__ = __int__

        def __float__(cls):
            return 0.0

        def __lt__(cls, o):
            return False

        __gt__ = __le__ = __ge__ = __lt__

    class Any_(metaclass=AnyMeta):
        def __init__(self, *a, **k):
            pass

        def __getattr__(self, n):
            if dunder(n):
                raise AttributeError(n)
            return new(n)

        def __call__(self, *a, **k):
            return a[0] if len(a) == 1 and callable(a[0]) and not k else Any_()  # decorators keep the function

        def __getitem__(self, k):
            return Any_()

        def __iter__(self):
            return iter(())

        def __bool__(self):
            return False

        def __int__(self):
            return 0

        __index__ = __len__ = __int__

        def __float__(self):
            return 0.0

        def __eq__(self, o):
            return isinstance(o, Any_)  # stub results agree with each other (vllm.ir schema checks)

        def __hash__(self):
            return 0

        def __lt__(self, o):
            return False

        __gt__ = __le__ = __ge__ = __lt__

        @classmethod
        def __get_pydantic_core_schema__(cls, source, handler):
            from pydantic_core import core_schema

            return core_schema.any_schema()

    def new(name):
        return AnyMeta(str(name), (Any_,), {})

    def arith(self, *a):
        return Any_()

    for op in "neg pos abs add radd sub rsub mul rmul truediv rtruediv floordiv rfloordiv mod pow and rand xor lshift rshift invert matmul".split():
        setattr(AnyMeta, f"__{op}__", arith)
        setattr(Any_, f"__{op}__", arith)

    class Dtype:
        def __init__(self, name, itemsize):
            self.name, self.itemsize = name, itemsize

        def __repr__(self):
            return f"torch.{self.name}"

    dtypes = {
        n: Dtype(n, b)
        for n, b in dict(
            float16=2, half=2, bfloat16=2, float32=4, float=4, float64=8, double=8, uint8=1, uint16=2, uint32=4,
            uint64=8, int8=1, int16=2, int32=4, int=4, int64=8, long=8, bool=1, float8_e4m3fn=1, float8_e5m2=1,
            float8_e4m3fnuz=1, float8_e5m2fnuz=1, float8_e8m0fnu=1, float4_e2m1fn_x2=1, complex64=8,
        ).items()
    }  # fmt: skip

    class Props:  # one H200 (torch.cuda / NVML stand-ins: platform detection picks CUDA)
        name, major, minor, total_memory, multi_processor_count = "NVIDIA H200", 9, 0, 143771287552, 132

    def schema(fn, mutates_args=()):
        """torch.library.infer_schema stand-in: one Tensor output per Tensor in the return annotation."""
        ann = getattr(fn, "__annotations__", {}).get("return")
        r = ann if isinstance(ann, str) else getattr(ann, "__name__", "") if isinstance(ann, type) else str(ann)
        n = max(r.count("Tensor"), 1 if ann is not None else 0)
        return "f() -> " + ("()" if n == 0 else "Tensor" if n == 1 else "(" + ", ".join(["Tensor"] * n) + ")")

    presets = {
        "torch": {"__version__": "2.9.1", "dtype": Dtype, **dtypes},
        "torch.version": {"cuda": "12.9", "hip": None, "__version__": "2.9.1", "musa": None, "xpu": None},
        "torch.library": {"infer_schema": schema},
        "torch.cuda": {
            "is_available": lambda: True,
            "device_count": lambda: 8,
            "get_device_name": lambda *a: Props.name,
            "get_device_capability": lambda *a: (Props.major, Props.minor),
            "get_device_properties": lambda *a: Props(),
            "current_device": lambda: 0,
        },
        "vllm.third_party.pynvml": {
            "nvmlInit": lambda: None,
            "nvmlShutdown": lambda: None,
            "nvmlDeviceGetCount": lambda: 8,
            "nvmlDeviceGetHandleByIndex": lambda i: i,
            "nvmlDeviceGetName": lambda h: Props.name,
            "nvmlDeviceGetCudaComputeCapability": lambda h: (Props.major, Props.minor),
        },
    }
    absent = {"torch": {"npu", "hpu", "xpu", "mps"}}  # hasattr() probes for other accelerators say no

    class StubModule(types.ModuleType):
        def __getattr__(self, n):
            if n == "__version__":
                return "0.0.0"
            if dunder(n) or n in absent.get(self.__name__, ()):
                raise AttributeError(n)
            if f"{self.__name__}.{n}" in presets:
                return importlib.import_module(f"{self.__name__}.{n}")
            v = new(n)
            setattr(self, n, v)
            return v

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if any(name == r or name.startswith(r + ".") for r in roots):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            m = StubModule(spec.name)
            m.__path__ = []
            m.__dict__.update(presets.get(spec.name, {}))
            return m

        def exec_module(self, m):
            pass

    sys.meta_path.insert(0, Finder())


_PROGS = {
    "sglang": "sglang.launch_server",
    "sglang-router": "sglang_router.launch_router",
    "vllm": "vllm",
    "vllm-router": "vllm-router",
}


class _ParseError(Exception):
    pass


def _worker(engine: str, site: str) -> None:
    import argparse
    import contextlib
    import io
    import logging
    import tempfile

    req = json.loads(sys.stdin.read())
    sys.argv = [_PROGS[engine]]  # argparse's prog in the messages
    sys.path.insert(0, site)
    _install_stubs(_STUBS[engine].split())

    def error(self, message):  # argparse's error() prints usage and exits; keep the message
        raise _ParseError(f"{self.prog}: error: {message}")

    argparse.ArgumentParser.error = error
    tmp = Path(tempfile.mkdtemp(prefix="engine_parsers_"))
    for name, body in req["files"].items():  # files the printed commands write (--config YAML)
        (tmp / Path(name).name).write_text(body)
    os.chdir(tmp)

    sink = io.StringIO()
    logging.basicConfig(stream=sink, level=logging.WARNING, force=True)
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        parse, semantic = _engine_functions(engine)
    results = []
    for argv in req["argvs"]:
        sink.seek(0)
        sink.truncate()
        res = []
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            for h in logging.getLogger().handlers:
                if isinstance(h, logging.StreamHandler):
                    h.setStream(sink)
            try:
                parsed = parse(argv)
            except (_ParseError, SystemExit) as e:
                parsed = None
                res.append(["parse", str(e) if isinstance(e, _ParseError) else f"exit {e.code}: {_tail(sink)}"])
            except Exception as e:  # noqa: BLE001 - the parser's own exception is the finding
                parsed = None
                res.append(["parse", f"{type(e).__name__}: {e}"])
            if parsed is not None and semantic is not None:
                try:
                    semantic(parsed)
                except BaseException as e:  # noqa: BLE001
                    res.append(["semantic", f"{type(e).__name__}: {e}"])
        for ln in sink.getvalue().splitlines():
            if "deprecat" in ln.lower():
                res.append(["deprecated", re.sub(r"\x1b\[[0-9;]*m", "", ln).strip()])
        results.append(res)
    sys.stdout.write("\n" + json.dumps({"results": results}) + "\n")


def _tail(sink) -> str:
    lines = [ln for ln in sink.getvalue().splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def _engine_functions(engine: str):
    """(parse(argv) -> parsed, semantic(parsed) or None) of one engine's real code."""
    if engine == "sglang":
        # sglang/launch_server.py: server_args = prepare_server_args(sys.argv[1:])
        from sglang.srt.server_args import prepare_server_args

        return prepare_server_args, None
    if engine == "vllm":
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.entrypoints.common.cli_args import make_arg_parser, validate_parsed_serve_args
        from vllm.utils.argparse_utils import FlexibleArgumentParser

        def parse(argv):
            # vllm/entrypoints/cli/main.py main() + serve.py ServeSubcommand.subparser_init
            parser = FlexibleArgumentParser(description="vLLM CLI")
            subparsers = parser.add_subparsers(required=False, dest="subparser")
            make_arg_parser(subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
            args = parser.parse_args(argv)
            if getattr(args, "model_tag", None) is not None:  # ServeSubcommand.cmd
                args.model = args.model_tag
            return args

        def semantic(args):
            validate_parsed_serve_args(args)  # ServeSubcommand.validate
            AsyncEngineArgs.from_cli_args(args)

        return parse, semantic
    if engine in ("sglang-router", "vllm-router"):
        mod = __import__(f"{engine.replace('-', '_')}.launch_router", fromlist=["parse_router_args"])
        return mod.parse_router_args, lambda ra: ra._validate_router_args()
    raise KeyError(engine)


if __name__ == "__main__" and sys.argv[1:2] == ["--worker"]:
    _worker(sys.argv[2], sys.argv[3])
