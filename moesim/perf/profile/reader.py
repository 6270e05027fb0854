"""Read a calibration profile (calibration/profiles/<gpu>.yaml) for the cost model.

    prof = load_profile(hw)                       # None when the GPU has no profile
    ec, em, alpha = prof.kernel_efficiency("gemm", m=m, n=n, k=k)
    time   = alpha + max(F / (peak * ec), B / (hbm_bw * em)) + prof.launch_s

Everything is vectorized over numpy arrays that broadcast (grids of millions of configurations);
no Python loop runs over configurations. The profile is plain YAML read with yaml.safe_load.

Entries fitted on big measured tables carry a `residual` block: the model time is multiplied by
R(shape) (moesim.perf.profile.residual; measurement / physics at the measured shapes, 1 far from
them), read lazily once from the side-car .residuals.npz next to the profile.

Efficiency (moesim/perf/efficiency.py): a fitted kernel's model time is the max of a compute side
and a memory side (T_c, T_m: the fixed costs plus its FLOP or its byte term, efficiency.smax_sides);
ec = (F / P) / (T_c - alpha) and em = (B / W) / (T_m - alpha) of the kernel's own work (GEMM: F = 2*g*m*n*k,
B = g*(m*k + n*k) in the input dtype + g*m*n*2 output; MLA decode: F = 2*b*s*h*ctx*(576+512),
B = KV cache + queries + outputs), so the cost model's max(...) reproduces the fitted time, and an
op with other work (the workload's bytes) scales each side's work by its own work ratio (alpha, the
fixed cost, unscaled): never slower with
more FLOP/s or HBM bandwidth (issue 17). For "peak" entries (best-case published figures) ec and em
are two constants. Efficiencies are fractions of the *live* hardware spec's peaks, so a profile
inherited by another GPU (or a --set override of peaks) scales with that GPU's numbers.
"""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import yaml

from moesim.enums import Engine
from moesim.errors import CalibrationError
from moesim.perf.collectives import (
    DEEPEP_NORMAL_SMS,
    by_ep_params,
    collective_entry_terms,
    deepep_entry_terms,
    deepep_ll_sms,
)
from moesim.perf.models import model
from moesim.perf.models._kernel import KernelContext, residual_factor
from moesim.perf.models.waves_v1 import fused_variant
from moesim.perf.profile import measured as M
from moesim.perf.profile import schema as S
from moesim.perf.profile.provenance import comm_provenance, entry_provenance
from moesim.perf.profile.variants import pick_variant
from moesim.specs.data import relative_label, user_roots
from moesim.specs.loader import data_root, gpu_key, read_text, yaml_problem

_CACHE: dict = {}  # (path, mtime_ns, size) -> validated mapping; a sweep loads the same profile many times


def read_profile_file(path: Path) -> dict:
    """Parse and validate a profile file; every problem is one CalibrationError line."""
    path = Path(path)
    try:
        st = path.stat()
        key = (str(path.resolve()), st.st_mtime_ns, st.st_size)
    except OSError:
        key = None
    if key is not None and key in _CACHE:
        return copy.deepcopy(_CACHE[key])
    data = _parse_profile_file(path)
    if key is not None:
        if len(_CACHE) > 16:
            _CACHE.clear()
        _CACHE[key] = copy.deepcopy(data)
    return data


def _parse_profile_file(path: Path) -> dict:
    text = read_text(path, CalibrationError, "profile ")
    if not text.strip():
        raise CalibrationError(f"profile {path}: file is empty; regenerate it with `moesim calibrate fit`")
    try:
        # libyaml's parser where PyYAML has it (same SafeConstructor, ~10x faster on 100 kB profiles)
        data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        raise CalibrationError(
            f"profile {path}: corrupted YAML{yaml_problem(e)}; regenerate it with `moesim calibrate fit`"
        ) from None
    if not isinstance(data, dict):
        raise CalibrationError(f"profile {path}: expected a mapping at top level, got {type(data).__name__}")
    version = data.get("schema_version")
    if version in S.RETIRED_SCHEMA_VERSIONS:
        raise CalibrationError(
            f"profile {path}: schema_version {version!r} is retired (this moesim reads {S.SCHEMA_VERSION}: one "
            "module per kernel model, moesim.perf.models); re-fit the profile from its CSVs with "
            f"`moesim calibrate fit ... --out {path}`"
        )
    if version != S.SCHEMA_VERSION:
        raise CalibrationError(
            f"profile {path}: schema_version {version!r} is not supported (this moesim reads {S.SCHEMA_VERSION}); "
            f"upgrade moesim, or re-fit the profile from its CSVs with `moesim calibrate fit ... --out {path}`"
        )
    S.validate(data, path)
    return S.fill_sections(data)


def profile_path_for(gpu: str, engine=None, root: Path | None = None) -> Path | None:
    """The profile file a GPU is priced with: calibration/profiles/<gpu>.<engine>.yaml when it exists
    (per-engine kernels), else the GPU's generic <gpu>.yaml; None when neither exists. Names are tried
    as given and normalized (gb200-nvl72 -> gb200_nvl72); the user root's profiles ($MOESIM_DATA)
    before the shipped ones."""
    dirs = [r / "calibration" / "profiles" for r in ([root] if root else [*user_roots(), data_root()])]
    names = dict.fromkeys((str(gpu), gpu_key(gpu)))
    eng = Engine.parse(engine, "engine").value if engine is not None else None
    stems = ([f"{n}.{eng}" for n in names] if eng else []) + list(names)
    return next((d / f"{s}.yaml" for s in stems for d in dirs if (d / f"{s}.yaml").exists()), None)


def load_profile(hardware, path=None, force: bool = False, engine=None) -> Profile | None:
    """The calibration profile for `hardware` (a HardwareSpec) under `engine` (sglang, trtllm, vllm).

    Default path: `profile_path_for(hardware.name, engine)` (the engine's profile, else the GPU's
    generic one); None when neither exists. An explicit `path` must exist (the engine is then only
    recorded). A profile fitted for another GPU is refused (CalibrationError) unless force=True.
    """
    if path is None:
        path = profile_path_for(hardware.name, engine)
        if path is None:
            return None
    else:
        path = Path(path)
        if not path.exists():
            raise CalibrationError(f"profile {path}: file does not exist")
    data = read_profile_file(path)
    if hardware is not None and gpu_key(data["gpu"]) != gpu_key(hardware.name) and not force:
        raise CalibrationError(
            f"profile {path} was fitted for gpu {data['gpu']!r}, not {hardware.name!r}; "
            "use that GPU's profile, re-fit, or force it (--force-profile / force=True)"
        )
    return Profile(data, hardware=hardware, path=path)


class Profile:
    """A loaded calibration profile bound to a hardware spec (or to the peaks it records)."""

    def __init__(self, data: dict, hardware=None, path=None):
        self.data = data
        self.path = Path(path) if path else None
        self.hardware = hardware
        self.gpu = str(data["gpu"])
        self.schema_version = data.get("schema_version")
        self.date = str(data.get("date", ""))
        self.engine = data.get("engine")  # None: the GPU's generic profile (no engine's own tables)
        self.kernels = data.get("kernels") or {}
        self.comm = data.get("comm") or {}
        self.collectives = data.get("collectives") or {}
        if hardware is not None:
            self._flops = {d: hardware.peak_flops(d) for d in ("fp8", "bf16", "fp16", "fp32")}
            self._hbm = hardware.hbm_bw_Bps
            self._sms = int(hardware.sms)
            self._nom = {"rdma": hardware.rdma_Bps(False), "nvlink": hardware.nvlink_Bps(False)}
            self._domain = int(hardware.domain_gpus)
        else:  # no hardware spec: the peaks the profile records
            roof = S.roofline_from_yaml(data.get("roofline") or {})
            self._flops, self._hbm, self._sms = roof["flops"], roof["hbm_Bps"], roof["sms"]
            self._nom, self._domain = roof["nominal"], roof["domain_gpus"]
        # the SM count the entries were fitted at (the roofline block the fit records), for the
        # terms that are per-SM rates (attention's load saturation)
        self._fit_sms = int((data.get("roofline") or {}).get("sms") or self._sms)
        launch = data.get("launch") or {}
        if launch.get("status") == "hardware" and hardware is not None:
            self.launch_s = float(hardware.kernel_launch_s)
        else:
            self.launch_s = float(launch.get("us", 0.0)) * 1e-6
        self._tables = {fam: M.build_table(fam, self.kernels.get(fam)) for fam in M.TABLE_AXES}

    def launch_for(self, family: str) -> float:
        """The launch gap added to a kernel of `family`: 0 where the entry was fitted on measured call times
        (`alpha_includes_launch`: back-to-back calls, the fitted alpha holds the gap), else launch_s."""
        e = self.kernels.get(family) or {}
        return 0.0 if e.get("alpha_includes_launch") else self.launch_s

    def __repr__(self) -> str:
        return f"Profile(gpu={self.gpu!r}, kernels={sorted(self.kernels)}, comm={sorted(self.comm)})"

    def file_label(self) -> str | None:
        """The profile file, relative to the data root when it lies under it (for outputs' provenance)."""
        if self.path is None:
            return None
        return relative_label(self.path, data_root())

    # ------------------------------------------------------------------ kernels
    def kernel_context(self) -> KernelContext:
        """The live hardware the kernel models price with (built per call: a what-if view such as
        moesim.perf.smscale's rescales _flops / _sms on a copy)."""
        return KernelContext(self._flops, self._hbm, self._sms, self._fit_sms, self.path.parent if self.path else None)

    def _entry(self, family: str, shape: dict):
        """(entry, its model module) of `family`, or (None, None) when the profile does not cover it."""
        e = self.kernels.get(family)
        if e is None:
            return None, None
        return e, model(e["model"])

    def kernel_efficiency(self, family: str, **shape):
        """(compute_eff, memory_eff, alpha_s) for the broadcast shape, or None if not covered: eta_c on
        the FLOP time and eta_m on the byte time (in (0, 1]), from the fitted model's compute and memory
        sides, and its fixed cost alpha_s (kernel_sides; efficiency.side_efficiencies), so alpha_s +
        max(F / (P eta_c), B / (W eta_m)) of the kernel's own work is its modelled time; none grows
        with P or W. Peak entries: alpha_s = 0. The entry's model (moesim.perf.models) prices it.

        Shape keywords: m, n, k, groups, layout ("masked" | "contiguous"), batch, q_len, context,
        heads, dtype (optional; the family's fitted dtype by default), tile_pad (MMA work over
        useful work, e.g. routed groups' partial tiles; 1 by default). Other keywords are ignored.
        """
        e, mod = self._entry(family, shape)
        return None if e is None else mod.efficiency(self.kernel_context(), family, e, shape)

    def kernel_sides(self, family: str, **shape):
        """(compute side, memory side, fixed cost, F, B, peak) of a fitted (non-peak) entry: max of the
        sides is kernel_time (residual included; both hold the fixed cost); F, B the kernel's own
        work; peak its dtype's FLOP/s."""
        e, mod = self._entry(family, shape)
        if e is None:
            raise KeyError(f"kernel_sides: the profile has no {family!r} entry")
        return mod.sides(self.kernel_context(), family, e, shape)

    def kernel_time(self, family: str, **shape):
        """Modelled kernel time in seconds (launch overhead not included), or None if not covered."""
        e, mod = self._entry(family, shape)
        if e is None or family == "elementwise":
            return None
        return mod.time(self.kernel_context(), family, e, shape)

    def residual_factor(self, family: str, e: dict, shape: dict):
        """R(shape) of the priced variant's measured residual (moesim.perf.models._kernel.residual_factor):
        the measurement / physics ratio interpolated at the measured shapes, 1 far outside them."""
        return residual_factor(self.kernel_context(), family, e, shape)

    def fused_moe(self, dtype) -> dict | None:  # the variant pricing routed experts as one call (waves_v1)
        return fused_variant(self.kernels.get("moe"), dtype)

    def gemm_act_quant(self, dtype: str = "fp8_block") -> dict | None:
        """The input-quant model subtracted from the `dtype` GEMM variant's linear-op rows (fit.act_quant), or None."""
        return ((e := self.kernels.get("gemm")) and pick_variant(e, dtype).get("act_quant_model")) or None

    def measured_time(self, family: str, **shape):
        """Raw measured kernel times (s), log-log interpolated along m (GEMMs) or context (MLA) where
        this GPU's own measurements cover the shape (same n, k, groups, layout / heads, q_len, batch;
        between two measured points at most 4x apart, or on one); NaN elsewhere."""
        return M.measured_time(self._tables.get(family), family, shape)

    # ------------------------------------------------------------------ collectives
    def comm_params(self, mode, op, ep):
        """(alpha_s, rdma_Bps, nvlink_Bps) arrays shaped like `ep`, or None if (mode, op) is not covered.

        alpha is per call; entries with `alpha_intra_us` use it where ep fits in one NVLink domain.
        Bandwidths are the fitted fractions of nominal link bandwidth times this hardware's nominal
        values (equal to the fitted absolute values on the GPU the rows came from).
        """
        m = str(getattr(mode, "value", mode))
        m = S.MODE_ALIASES.get(m, m)
        e = (self.comm.get(m) or {}).get(str(op))
        if e is None:
            return None
        p = e["params"]
        if e.get("model") == S.ALPHA_BETA_BY_EP:  # per-EP knots, interpolated in log2(EP)
            return by_ep_params(p, ep, self._nom)
        ones = np.ones(np.shape(ep)) if np.ndim(ep) else np.ones(())
        alpha = float(p["alpha_us"]) * 1e-6 * ones
        if p.get("alpha_intra_us") is not None:  # EP inside one NVLink domain: no RDMA hop
            alpha = np.where(np.asarray(ep, float) <= self._domain, float(p["alpha_intra_us"]) * 1e-6, alpha)
        rdma = self._link_bw(p, "rdma") * ones
        nvl = self._link_bw(p, "nvlink") * ones
        return alpha, rdma, nvl

    def comm_time(self, mode, op, *, tokens, rdma_bytes, nvl_bytes, ep, experts, msg_bytes, sms=None, host_floor=True):
        """(alpha_s, wire_s) of a DeepEP dispatch / combine priced by a `deepep_v2` entry, or None when the
        entry is absent or of another model (then comm_params). `sms`: SMs given to the normal
        kernels (--comm-sms; DeepEP's Buffer.num_sms = 20 by default); the LL kernels' own launch
        otherwise (deepep_ll_sms). Bandwidths: RDMA as a fraction of the live NIC; the intranode
        rate is the absolute one the kernel reached, capped by the live NVLink."""
        m = str(getattr(mode, "value", mode))
        m = S.MODE_ALIASES.get(m, m)
        e = (self.comm.get(m) or {}).get(str(op))
        if e is None or e.get("model") != S.DEEPEP_V2:
            return None
        if sms is None:
            sms = deepep_ll_sms(experts, self._sms) if m == "deepep-ll" else DEEPEP_NORMAL_SMS
        nodes = np.maximum(np.asarray(ep, float) / max(self._domain, 1), 1.0)
        kw = dict(
            tokens=tokens, rdma_bytes=rdma_bytes, nvl_bytes=nvl_bytes, experts=experts, ep=ep, msg_bytes=msg_bytes
        )
        return deepep_entry_terms(e, nodes=nodes, sms=sms, nominal=self._nom, host_floor=host_floor, **kw)

    def _link_bw(self, p: dict, link: str) -> float:
        frac = p.get(f"{link}_frac_nominal")
        nominal = self._nom.get(link, 0.0)
        if frac is not None and nominal > 0:
            return float(frac) * nominal
        return float(p[f"{link}_GBps"]) * 1e9

    def collective_time(self, op, n, message_bytes, ring_bytes, link_Bps, custom=True):
        """(alpha_s, wire_s) of an all-reduce / all-gather priced by a `nccl_proto` / `collective_v2`
        entry (NCCL, or the engine's custom all-reduce where the message is within what it was
        measured at and it is faster), or None (then collective_params). A `nccl_proto` entry takes
        NVLS where it applies: engines all-reduce 16-bit activations."""
        e = self.collectives.get(str(op))
        if e is None or e.get("model") not in S.TIMED_COLLECTIVES:
            return None
        return collective_entry_terms(e, str(op), n, message_bytes, ring_bytes, link_Bps, custom)

    def collective_params(self, op):
        """(alpha_s, bw_efficiency) for all_reduce / all_gather, or None: alpha adds to the hardware's
        per-step latencies and bw_efficiency scales its achievable link bandwidth (moesim.perf.cost)."""
        e = self.collectives.get(str(op))
        if e is None:
            return None
        return float(e["params"]["alpha_us"]) * 1e-6, float(e["params"]["bw_efficiency"])

    # ------------------------------------------------------------------ provenance
    def provenance(self, family: str) -> str:
        """e.g. 'fitted:h800 DG rows (CV median 5.9%)', 'peak:h800 FMLA rows (upper bound, no CV)',
        'inherited:h800', 'derived:gemm (h800)'; 'roofline' when the profile does not cover it."""
        m = S.MODE_ALIASES.get(family, family)
        if m in self.kernels:
            return entry_provenance(self.kernels[m])
        if m in self.comm:
            return comm_provenance(self.comm[m], self.gpu)
        if m in self.collectives:
            return entry_provenance(self.collectives[m])
        return "roofline"
