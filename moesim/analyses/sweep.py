"""Sweep: the cartesian product of deployment axes -> one tidy DataFrame row per configuration.

Numeric axes (tp, dp, ep, moe_tp, batch, context, mtp, acceptance, redundant) become one
`Grid.product`; the only Python loops are over the categorical axes (hardware, phase, overlap,
comm: a handful of values) and over memory-bounding chunks, each evaluated in array passes by
`moesim.api.evaluate_grid` (the same path as `estimate`, so a sweep row equals an estimate).

Invalid combinations are kept with ``valid=False`` and the reason from `check_grid`; only valid
rows are evaluated. Units: SI (seconds, bytes, tokens/s); ``batch`` is requests per DP group for
decode/mixed and tokens per DP group for prefill.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from moesim.enums import CommMode, CostMode, Overlap, Phase
from moesim.errors import ConfigError
from moesim.grid.core import AXES, Grid

NUMERIC_AXES = AXES  # tp, dp, ep, moe_tp, batch, context, mtp, acceptance, redundant
CATEGORICAL_AXES = ("hardware", "phase", "overlap", "comm")
AXIS_ALIASES = {"redundant_experts": "redundant", "moe-tp": "moe_tp"}
FILTER_KEYS = ("min_tokens_per_s_per_user", "max_tpot_s", "max_ttft_s", "only_fits")
STUDY_KEYS = (
    "name",
    "description",
    "model",
    "hardware",
    "phase",
    "axes",
    "filters",
    "cost_mode",
    "expert_skew",
    "context_dist",
    "set",
    "isl",
    "osl",
)
INT_COLUMNS = ("tp", "dp", "ep", "moe_tp", "gpus", "mtp", "redundant")

# `moesim sweep` with no axis flags: the DeepSeek-V3 decode space of seeds 002-004.
DEFAULT_AXES = {
    "tp": [1, 2, 4, 8],
    "ep": [8, 16, 32, 64, 128, 144, 256],
    "batch": [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 192, 256],
    "context": [2048, 4096, 8192],
    "mtp": [0, 1],
    "acceptance": [0.8],
    "redundant": [0, 32],
}
DEFAULT_PREFILL_BATCH = [1024.0, 2048.0, 4096.0, 8192.0, 16384.0, 32768.0]  # tokens per DP group
SCALAR_DEFAULTS = {"tp": 1, "moe_tp": 1, "mtp": 0, "acceptance": 0.8, "redundant": 0}
PHASE_DEFAULTS = {
    "decode": {"batch": 32, "context": 4096},
    "mixed": {"batch": 32, "context": 4096},
    "prefill": {"batch": 16384, "context": 4096},
}


_MALLOC_TUNED = False


def tune_malloc() -> bool:
    """Keep freed heap memory in the process (glibc mallopt: mmap threshold 32 MiB, trim
    threshold 1 GiB, top pad 256 MiB). A sweep allocates thousands of chunk-sized temporaries;
    with glibc defaults each one is mmap'd / trimmed and page-faulted afresh, which doubles or
    triples the wall time (measured: ~half of it in the kernel). Process-wide, so the CLI calls
    it and library users opt in. Returns True when applied (glibc only)."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        ok = libc.mallopt(-3, 32 << 20) and libc.mallopt(-1, 1 << 30) and libc.mallopt(-2, 256 << 20)
    except (OSError, AttributeError):
        return False
    _MALLOC_TUNED = bool(ok)
    return _MALLOC_TUNED


# ---------------------------------------------------------------------------------------- parsing
def parse_values(name: str, value) -> list:
    """Axis values from a list, a scalar or a string: "1,2,4", "1:256" (doubling from a up to b),
    "0:1:0.25" (linear a..b step s), or a mix "1,3,8:64". Numeric axes -> floats."""
    name = AXIS_ALIASES.get(name, name)
    if name not in NUMERIC_AXES and name not in CATEGORICAL_AXES:
        raise ConfigError(f"axes: unknown axis {name!r}; allowed: {', '.join(NUMERIC_AXES + CATEGORICAL_AXES)}")
    items = value if isinstance(value, (list, tuple, np.ndarray)) else [value]
    out = []
    for it in items:
        if isinstance(it, str):
            parts = [p.strip() for p in it.split(",") if p.strip()]
        else:
            parts = [it]
        for p in parts:
            if name in CATEGORICAL_AXES:
                out.append(None if p is None else str(p))
            elif isinstance(p, str) and ":" in p:
                out.extend(_parse_range(name, p))
            else:
                out.append(_num(name, p))
    if not out:
        raise ConfigError(f"{name}: give at least one value")
    if name in AXIS_RANGES:
        for x in out:
            _check_value(name, x)
    return out


# Absolute range of each numeric axis value (model-independent); combinations (divisibility,
# the model's max_context, MTP support) are checked per row by `check_grid`.
AXIS_RANGES = {
    "tp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "dp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "ep": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "moe_tp": (1, 1e6, True, "an integer in [1, 1,000,000]"),
    "batch": (0, 1e9, False, "a number in (0, 1e9]"),
    "context": (0, 1e8, False, "tokens in (0, 1e8] (and at most the model's max_context)"),
    "mtp": (0, 16, True, "an integer in [0, 16]"),
    "acceptance": (0, 1, False, "a number in [0, 1]"),
    "redundant": (0, 1e6, True, "an integer in [0, 1,000,000]"),
}


def _check_value(name, x: float) -> float:
    lo, hi, integer, allowed = AXIS_RANGES[name]
    bad = not np.isfinite(x) or x > hi or (x <= lo if name in ("batch", "context") else x < lo)
    if bad or (integer and x != np.round(x)):
        raise ConfigError(f"{name}: {x:g} is out of range; allowed {allowed}")
    return x


def _num(name, p) -> float:
    if isinstance(p, bool):
        raise ConfigError(f"{name}: {p!r} is not a number")
    try:
        return float(p)  # also YAML's "31.0e9" strings
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}: {p!r} is not a number; use a list, a:b (powers of two) or a:b:step") from None


def _parse_range(name, text) -> list:
    bits = text.split(":")
    if len(bits) not in (2, 3):
        raise ConfigError(f"{name}: range {text!r} must be a:b (doubling) or a:b:step")
    a, b = _num(name, bits[0]), _num(name, bits[1])
    if not (np.isfinite(a) and np.isfinite(b)) or b < a:
        raise ConfigError(f"{name}: range {text!r} needs finite a <= b")
    if len(bits) == 2:
        if a <= 0:
            raise ConfigError(f"{name}: doubling range {text!r} needs a > 0")
        n = int(np.floor(np.log2(b / a) + 1e-9))
        return [a * 2.0**i for i in range(n + 1)]
    s = _num(name, bits[2])
    if not s > 0:
        raise ConfigError(f"{name}: range step in {text!r} must be > 0")
    n = int(np.floor((b - a) / s + 1e-9))
    if n > 1_000_000:
        raise ConfigError(f"{name}: range {text!r} has more than 1,000,000 values")
    return list(a + s * np.arange(n + 1))


def normalize_axes(axes) -> dict:
    """{axis: list of values}, aliases resolved, unknown axes rejected."""
    out = {}
    for k, v in (axes or {}).items():
        key = AXIS_ALIASES.get(str(k), str(k))
        if key in out:
            raise ConfigError(f"axes: {k!r} given twice")
        out[key] = parse_values(key, v)
    return out


def load_study(path) -> dict:
    """A study YAML -> keyword arguments of `sweep`. Strict: unknown keys are an error."""
    import yaml

    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except OSError as e:
        raise ConfigError(f"study: cannot read {str(path)!r} ({e.__class__.__name__})") from None
    except UnicodeDecodeError:
        raise ConfigError(f"study: cannot read {str(path)!r} (not UTF-8 text); allowed: a YAML mapping") from None
    except yaml.YAMLError as e:
        line = getattr(getattr(e, "problem_mark", None), "line", None)
        raise ConfigError(
            f"study: {p.name} is not valid YAML" + (f" (line {line + 1})" if line is not None else "")
        ) from None
    if not isinstance(data, dict):
        raise ConfigError(f"study: {p.name} must be a mapping with keys {', '.join(STUDY_KEYS)}")
    for k in data:
        if k not in STUDY_KEYS:
            raise ConfigError(f"study: unknown key {k!r} in {p.name}; allowed: {', '.join(STUDY_KEYS)}")
    axes = data.get("axes") or {}
    if not isinstance(axes, dict):
        raise ConfigError(f"study: axes in {p.name} must be a mapping of axis -> list of values")
    filters = data.get("filters") or {}
    if not isinstance(filters, dict):
        raise ConfigError(f"study: filters in {p.name} must be a mapping; allowed keys: {', '.join(FILTER_KEYS)}")
    for k in filters:
        if k not in FILTER_KEYS:
            raise ConfigError(f"study: unknown filter {k!r} in {p.name}; allowed: {', '.join(FILTER_KEYS)}")
    kw = {
        k: data[k]
        for k in ("model", "hardware", "phase", "cost_mode", "expert_skew", "context_dist", "isl", "osl")
        if data.get(k) is not None
    }
    if data.get("set") is not None:
        s = data["set"]
        if isinstance(s, dict):
            kw["set"] = [f"{k}={v}" for k, v in s.items()]
        elif isinstance(s, list) and all(isinstance(x, str) for x in s):
            kw["set"] = list(s)
        else:
            raise ConfigError(
                f"study: set in {p.name} must be a mapping (hardware.rdma_bw_GBps: 100) or a list of "
                f"'key=value' strings; got {s!r}"
            )
    kw["axes"] = normalize_axes(axes)
    kw["filters"] = dict(filters)
    return kw


# ---------------------------------------------------------------------------------------- grid
def build_grid(axes: dict, phase: Phase, isl=None, osl=None):
    """Numeric axes -> (Grid, reason array for derived-axis problems or None). ep (or dp) not
    given per point is derived from tp x dp = ep x moe_tp, vectorized."""
    vals = {a: axes[a] for a in NUMERIC_AXES if a in axes}
    for a, v in SCALAR_DEFAULTS.items():
        vals.setdefault(a, [v])
    pd_ = PHASE_DEFAULTS[phase.value]
    vals.setdefault("batch", [pd_["batch"]])
    if "context" not in vals:
        vals["context"] = [isl + osl / 2.0] if phase == Phase.MIXED and isl and osl else [pd_["context"]]
    if phase == Phase.PREFILL:  # no drafts in prefill (as estimate): one row per remaining point
        vals["mtp"], vals["acceptance"] = [0.0], [vals["acceptance"][0]]
    has_ep, has_dp = "ep" in vals, "dp" in vals
    if not has_ep and not has_dp:
        vals["dp"] = [1.0]
        has_dp = True
    derive = None if (has_ep and has_dp) else ("dp" if has_ep else "ep")
    if derive:
        vals[derive] = [np.nan]
    g = Grid.product(**vals)
    reason = None
    if derive == "dp":
        dp = g.ep * g.moe_tp / g.tp
        bad = dp != np.round(dp)
        g = Grid(**{**g.to_dict(), "dp": dp})
        if bad.any():
            reason = np.where(bad, "dp: ep x moe_tp must be a multiple of tp (dp is derived as ep x moe_tp / tp)", "")
    elif derive == "ep":
        ep = g.tp * g.dp / g.moe_tp
        bad = ep != np.round(ep)
        g = Grid(**{**g.to_dict(), "ep": ep})
        if bad.any():
            reason = np.where(bad, "ep: tp x dp must be a multiple of moe_tp (ep is derived as tp x dp / moe_tp)", "")
    return g, reason


# ---------------------------------------------------------------------------------------- sweep
def sweep(
    model=None,
    hardware=None,
    phase=None,
    axes=None,
    *,
    cost_mode=None,
    expert_skew=None,
    context_dist=None,
    filters=None,
    min_tokens_per_s_per_user=None,
    max_tpot_s=None,
    max_ttft_s=None,
    only_fits=None,
    keep_invalid=True,
    isl=None,
    osl=None,
    set=None,
    study=None,
    chunk_size=32768,
    progress=None,
    profile=None,
    require_valid=False,
):
    """Evaluate every configuration of the axes' cartesian product -> pandas.DataFrame (one row each).

    model: catalog name / path / ModelSpec (default "deepseek-v3"); hardware: name, path, spec or a
    list of them (default "h800"); phase: "decode" | "prefill" | "mixed" or a list (default decode);
    axes: {axis: list | scalar | "a:b" | "a:b:s"} over tp, dp, ep, moe_tp, batch, context, mtp,
    acceptance, redundant (numeric) and hardware, phase, overlap, comm (categorical); no numeric
    axis -> the DeepSeek-V3 space `DEFAULT_AXES` (prefill-only: batch `DEFAULT_PREFILL_BATCH`). ep (or dp) missing is derived: ep = tp x dp / moe_tp.
    cost_mode: "calibrated" (default) | "roofline" | "measured". mixed needs isl and osl (tokens).
    filters / keywords: min_tokens_per_s_per_user, max_tpot_s, max_ttft_s (seconds), only_fits —
    a metric filter drops rows where the metric is defined and violates it; only_fits keeps valid rows
    that fit; otherwise invalid rows stay (valid=False, with the reason) unless keep_invalid=False. study: a YAML path (see `load_study`);
    explicit arguments override it. progress: callable(done_rows, total_rows) or None.
    require_valid: raise ConfigError (with the first reason) when no configuration is valid (the CLI's choice).
    Notes (e.g. calibration fallbacks) are in ``df.attrs["notes"]``.
    """
    import pandas as pd

    from moesim.api import resolve_specs

    base = load_study(study) if study is not None else {}
    model = model if model is not None else base.get("model", "deepseek-v3")
    hardware = hardware if hardware is not None else base.get("hardware", "h800")
    phase = phase if phase is not None else base.get("phase", "decode")
    cost_mode = CostMode.parse(
        cost_mode if cost_mode is not None else base.get("cost_mode", "calibrated"), "cost_mode"
    ).value
    expert_skew = expert_skew if expert_skew is not None else base.get("expert_skew", "auto")
    context_dist = context_dist if context_dist is not None else base.get("context_dist", "fixed")
    isl = isl if isl is not None else base.get("isl")
    osl = osl if osl is not None else base.get("osl")
    set_ = set if set is not None else base.get("set")
    ax = dict(base.get("axes", {}))
    ax.update(normalize_axes(axes))
    defaulted = not (_keyset(ax) & _keyset(NUMERIC_AXES))
    if defaulted:  # no numeric axis at all: the default DeepSeek-V3 space
        ax = {**normalize_axes(DEFAULT_AXES), **ax}
    flt = dict(base.get("filters", {}))
    for k, v in (filters or {}).items():
        if k not in FILTER_KEYS:
            raise ConfigError(f"filters: unknown filter {k!r}; allowed: {', '.join(FILTER_KEYS)}")
        flt[k] = v
    for k, v in (
        ("min_tokens_per_s_per_user", min_tokens_per_s_per_user),
        ("max_tpot_s", max_tpot_s),
        ("max_ttft_s", max_ttft_s),
        ("only_fits", only_fits),
    ):
        if v is not None:
            flt[k] = v
    for k in ("min_tokens_per_s_per_user", "max_tpot_s", "max_ttft_s"):
        if flt.get(k) is not None:
            flt[k] = _filter_value(k, flt[k])
    chunk_size = int(chunk_size)
    if chunk_size < 1:
        raise ConfigError("chunk_size: must be >= 1")

    hw_list = ax.pop("hardware", None) or (
        list(hardware)
        if isinstance(hardware, (list, tuple))
        else parse_values("hardware", hardware)
        if isinstance(hardware, str)
        else [hardware]
    )
    phases = [Phase.parse(p, "phase") for p in (ax.pop("phase", None) or parse_values("phase", phase))]
    overlaps = [
        None if o in (None, "default") else Overlap.parse(o, "overlap").value
        for o in (ax.pop("overlap", None) or [None])
    ]
    comms = [
        None if c in (None, "default") else CommMode.parse(c, "comm").value for c in (ax.pop("comm", None) or [None])
    ]
    if Phase.MIXED in phases:
        _check_isl_osl(isl, osl)
    if defaulted and all(p == Phase.PREFILL for p in phases):
        ax["batch"] = list(DEFAULT_PREFILL_BATCH)

    specs = [resolve_specs(model, h, set_) for h in hw_list]  # user errors (unknown names) raise here
    from moesim.api import check_imbalance_flags

    for m_, _ in specs[:1]:
        check_imbalance_flags(m_, expert_skew, context_dist)
    grids = {ph: build_grid(ax, ph, isl, osl) for ph in dict.fromkeys(phases)}
    total = sum(grids[ph][0].size for ph in phases) * len(specs) * len(overlaps) * len(comms)
    if total > 200_000_000:
        raise ConfigError(f"axes: {total:,} configurations; at most 200,000,000 per sweep (split the study)")
    state = {"done": 0, "total": total, "cb": progress}
    frames, notes = [], []
    for m, h in specs:
        for ph in phases:
            g, derived_reason = grids[ph]
            for ov in overlaps:
                for cm in comms:
                    cols, nts = _evaluate_block(
                        m,
                        h,
                        g,
                        derived_reason,
                        ph,
                        ov,
                        cm,
                        cost_mode,
                        expert_skew,
                        context_dist,
                        isl,
                        osl,
                        chunk_size,
                        profile,
                        state,
                    )
                    notes += [n for n in nts if n not in notes]
                    frames.append(pd.DataFrame(cols))
    df = pd.concat(frames, ignore_index=True, sort=False) if len(frames) > 1 else frames[0]
    if require_valid and len(df) and not df["valid"].any():
        raise ConfigError(f"sweep: none of the {len(df):,} configurations is valid; the first: {df['reason'].iloc[0]}")
    evaluated = {
        "configurations": int(len(df)),
        "valid": int(df["valid"].sum()) if len(df) else 0,
        "fit": int((df["valid"] & df["fits"]).sum()) if len(df) else 0,
    }
    df = _apply_filters(df, flt, keep_invalid)
    df.attrs["evaluated"] = evaluated
    df.attrs["notes"] = notes
    df.attrs["units"] = {
        "batch": "requests per DP group (decode, mixed) / tokens per DP group (prefill)",
        "context": "tokens",
        "time": "s",
        "memory": "bytes",
        "throughput": "tokens/s",
    }
    return df


def _filter_value(name, v) -> float:
    """A metric filter: a finite number > 0 (tokens/s or seconds)."""
    try:
        x = float(v) if not isinstance(v, bool) else float("nan")
    except (TypeError, ValueError, OverflowError):
        x = float("nan")
    if not (np.isfinite(x) and x > 0):
        unit = "tokens/s" if name.startswith("min_tokens") else "seconds"
        raise ConfigError(f"{name}: {v!r}; allowed a finite number > 0 ({unit})")
    return x


def _keyset(d):  # `set` is a parameter name inside sweep()
    return {k for k in d}


def _check_isl_osl(isl, osl):
    for name, v in (("isl", isl), ("osl", osl)):
        try:
            ok = v is not None and not isinstance(v, bool) and np.isfinite(float(v)) and float(v) > 0
        except (TypeError, ValueError, OverflowError):
            ok = False
        if not ok:
            raise ConfigError(f"{name}: phase mixed needs a positive {name} (tokens); got {v!r}")


def _evaluate_block(
    m,
    h,
    g,
    derived_reason,
    phase,
    overlap,
    comm,
    cost_mode,
    expert_skew,
    context_dist,
    isl,
    osl,
    chunk_size,
    profile,
    state,
):
    """One categorical combination over the whole numeric grid, valid rows only, in chunks."""
    from moesim.api import evaluate_grid
    from moesim.engine.evaluate import default_comm
    from moesim.errors import MoesimError
    from moesim.grid.validity import check_grid

    n = g.size
    check_phase = Phase.DECODE if phase == Phase.MIXED else phase
    ok, reason = check_grid(m, h, g, check_phase)
    if derived_reason is not None:
        bad = derived_reason != ""
        reason = np.where(bad, derived_reason, reason).astype(object)
        ok = ok & ~bad
    cols = {
        "model": np.full(n, m.name, dtype=object),
        "hardware": np.full(n, h.name, dtype=object),
        "phase": np.full(n, phase.value, dtype=object),
        "comm": np.full(n, (comm or default_comm(check_phase).value), dtype=object),
        "cost_mode": np.full(n, cost_mode, dtype=object),
        "comm_requested": np.full(n, comm or "default", dtype=object),
        "overlap_requested": np.full(n, overlap or "default", dtype=object),
    }
    for a in NUMERIC_AXES:
        cols[a] = getattr(g, a)
    cols["gpus"] = g.tp * g.dp
    if phase == Phase.MIXED:
        cols["isl"], cols["osl"] = np.full(n, float(isl)), np.full(n, float(osl))
    out = {}
    notes = []
    idx = np.flatnonzero(ok)
    try:
        for s in range(0, idx.size, chunk_size):
            sel = idx[s : s + chunk_size]
            sub = g.take(sel)
            if phase == Phase.MIXED:
                from moesim.engine.serving import evaluate_mixed

                vals, nts = evaluate_mixed(
                    m,
                    h,
                    sub,
                    isl=isl,
                    osl=osl,
                    overlap=overlap,
                    cost_mode=cost_mode,
                    comm=comm,
                    expert_skew=expert_skew,
                    context_dist=context_dist,
                    profile_path=profile,
                )
            else:
                ev, nts = evaluate_grid(
                    m,
                    h,
                    sub,
                    phase=phase,
                    overlap=overlap,
                    cost_mode=cost_mode,
                    comm=comm,
                    expert_skew=expert_skew,
                    context_dist=context_dist,
                    profile_path=profile,
                )
                vals = ev.values
            notes += [x for x in nts if x not in notes]
            for k, v in vals.items():
                v = np.asarray(v)
                if k not in out:
                    if v.dtype == bool:
                        out[k] = np.zeros(n, bool)
                    elif v.dtype.kind in "OUS":
                        out[k] = np.full(n, None, dtype=object)
                    else:
                        out[k] = np.full(n, np.nan)
                out[k][sel] = v
            _tick(state, sel.size)
    except MoesimError as e:  # a combination the engine rejects as a whole (e.g. overlap vs phase)
        ok = np.zeros(n, bool)
        reason = np.full(n, str(e), dtype=object)
        out = {}
    _tick(state, n - idx.size)
    for k in (
        "step_time_s",
        "tpot_s",
        "ttft_s",
        "tokens_per_s_per_user",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_node",
        "mfu",
        "accepted_tokens_per_step",
        "moe_layer_time_s",
        "dense_layer_time_s",
    ):
        out.setdefault(k, np.full(n, np.nan))
    out.setdefault("bottleneck", np.full(n, None, dtype=object))
    out.setdefault("overlap", np.full(n, None, dtype=object))
    out.setdefault("fits", np.zeros(n, bool))
    for k in (
        "max_batch",
        "total_bytes",
        "weights_bytes",
        "kv_cache_bytes",
        "activation_bytes",
        "comm_buffer_bytes",
        "capacity_bytes",
    ):
        out.setdefault(k, np.full(n, np.nan))
    first = (
        "step_time_s",
        "tpot_s",
        "ttft_s",
        "tokens_per_s_per_user",
        "tokens_per_s_per_gpu",
        "tokens_per_s_per_node",
        "mfu",
        "bottleneck",
        "overlap",
        "fits",
        "max_batch",
    )
    for k in first:
        cols[k] = out.pop(k)
    cols.update(out)
    cols["valid"] = ok
    cols["reason"] = reason
    for a in INT_COLUMNS:
        v = cols[a]
        if np.all(np.isfinite(v)) and np.all(v == np.round(v)):
            cols[a] = v.astype(np.int64)
    return cols, notes


def _tick(state, k):
    state["done"] += int(k)
    if state["cb"] is not None and k:
        state["cb"](state["done"], state["total"])


def _apply_filters(df, flt, keep_invalid=True):
    keep = np.ones(len(df), bool)
    v = df["tokens_per_s_per_user"].to_numpy(float)
    if flt.get("min_tokens_per_s_per_user") is not None:
        keep &= ~(v < float(flt["min_tokens_per_s_per_user"]))  # NaN (undefined) never violates
    if flt.get("max_tpot_s") is not None:
        keep &= ~(df["tpot_s"].to_numpy(float) > float(flt["max_tpot_s"]))
    if flt.get("max_ttft_s") is not None:
        keep &= ~(df["ttft_s"].to_numpy(float) > float(flt["max_ttft_s"]))
    valid = df["valid"].to_numpy(bool)
    if flt.get("only_fits"):
        keep &= valid & df["fits"].to_numpy(bool)
    if not keep_invalid:
        keep &= valid
    if keep.all():
        return df
    return df.loc[keep].reset_index(drop=True)


def best(df, by="tokens_per_s_per_gpu", n=1):
    """Top-n valid, fitting rows by a metric (descending)."""
    d = df[df["valid"] & df["fits"]]
    return d.sort_values(by, ascending=False, kind="stable").head(n)


__all__ = ["sweep", "load_study", "parse_values", "normalize_axes", "build_grid", "best", "tune_malloc", "DEFAULT_AXES"]
