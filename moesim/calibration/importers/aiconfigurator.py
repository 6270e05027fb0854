"""Import NVIDIA aiconfigurator's measured kernel tables as moesim measurement rows.

    moesim calibrate import aiconfigurator [--system h200_sxm] [--engine all] [--data-dir systems/]

Reads `<systems>/data/<system>/<family>/<engine>/<version>/<table>.parquet` (aiconfigurator-core,
Apache-2.0; `pip install "moesim[aiconfigurator]"`) and writes
`calibration/measurements/<gpu>/<engine>/<table>.csv.gz` (records' schema, replaced on every import
so a re-import is byte-identical). Per engine and table the newest engine version folder holding the
table is read, up to aiconfigurator's own pin (systems/query_versions.yaml `current`; newer folders
are the next release's collection in progress); its collection_meta.yaml status must be `complete`
(`failed`: refused with an error; `partial`: skipped with a note, the next older version is tried).
The NCCL table (comm/nccl/<version>: the system YAML's misc.nccl_version, else the newest) goes to
every engine. Table -> kernel mapping, units and filters: aiconfigurator_tables.py and
calibration/measurements/README.md.

Never opened: the `h100_sxm` system (this project's out-of-sample validation set), any
`silicon_sample` file and any end-to-end (e2e) serving table.

Refused (not imported; `REFUSED:` lines of the summary, the next older version is tried): a table
whose rows name another GPU in their `device` column, or whose bytes (whole file, or every measured
column) are another system's same-named table; the other systems' files are compared as bytes,
never parsed (aiconfigurator_integrity.py).

Columns dropped (kept nowhere, or only inside `source` / `lib_versions` / `note`):
  framework, version    -> lib_versions ("<framework> <version>"); the folder version is in `source`
  op_name               -> kernel / mode / op (it names the table's kernel, nothing more)
  attention head_dim != 128, GEMM n or k outside 64..16384: not written by default (size trim;
                        --all-shapes writes them)
  beam_width            attention rows with beam_width > 1 are not written (moesim has no beam search)
  window_size           attention rows with a sliding window are not written (moesim prices full attention)
  attn_dtype            rows with FP8 attention compute are not written (moesim prices BF16 FMHA)
  mla_dtype             MLA compute dtype (always bfloat16 in the attention tables; GEMM dtype of modules)
  gemm_type, architecture, model (MLA module tables): the model goes to `note`
  distribution          MoE: kept in `note`; only balanced / uniform rows are written
  dp_num_tokens, rank0_num_tokens, num_slots, simulation_mode, moe_kernel (wideep_moe_perf, skipped)
  *_bandwidth_gbps      DeepEP LL: kept in GBps (aiconfigurator's logical bytes / time, not fitted)
  *_transmit_us, *_notify_us (DeepEP normal, moe_a2a): time_s is their sum, the split is in `note`
  comm_backend          moe_a2a: mode ll / normal; the name is in `note`
  implementation, backend (custom all-reduce): the same fact as kernel_source (our `backend`)
  power, and every column a table adds that is not named here.
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from moesim.calibration.importers import aiconfigurator_tables as T
from moesim.calibration.importers.aiconfigurator_integrity import integrity_problem
from moesim.calibration.records import SIZE_COLUMNS, write_rows
from moesim.errors import CalibrationError

ENGINES = ("sglang", "trtllm", "vllm")
GPU_NAMES = {"h200_sxm": "h200", "b200_sxm": "b200", "gb200": "gb200_nvl72"}
REFUSED = {
    "h100_sxm": "h100_sxm is this project's out-of-sample validation set: its tables are never imported or read",
}
NEVER_OPEN = re.compile(r"silicon_sample|(^|[_./-])e2e([_./-]|$)", re.IGNORECASE)
# aiconfigurator table families moesim does not model: one note each, nothing read.
SKIPPED_FAMILIES = {
    "linear_attention": "linear attention (GDN, Mamba2): no such layer in moesim",
    "kda": "Kimi delta attention: no such layer in moesim",
    "mhc": "mHC (hyper-connections) module: no such layer in moesim",
    "msa": "MSA sparse attention modules: not modelled",
    "sparse_attention": "DeepSeek-V3.2 / V4 / GLM-5 sparse attention modules: not modelled",
    "encoder_attention": "vision-encoder attention: not modelled",
    "mlp": "dense MLP module (DeepSeek shared expert): moesim prices its GEMMs from gemm rows",
}
SKIPPED_TABLES = {
    "wideep_moe_perf": "TRT-LLM wide-EP MoE: only skewed (power-law / EPLB) routing rows",
    "dsv4_megamoe_module_perf": "DeepSeek-V4 MegaMoE module: not modelled",
    "trtllm_alltoall_perf": "TRT-LLM MNNVL all-to-all: no moesim comm mode for it yet",
    "mamba2_perf": "Mamba2: not modelled",
    "gdn_perf": "GDN: not modelled",
}
SORT_TEXT = ["kernel", "backend", "mode", "op", "layout", "dtype", "exclude"]
INSTALL_HINT = 'pip install "moesim[aiconfigurator]"'


@dataclass
class ImportSummary:
    """What one import did: rows per file, excluded, not written, tables skipped (printed by the CLI)."""

    files: list[dict] = field(default_factory=list)  # path, table, version, rows, excluded, dropped
    notes: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # tables failing an integrity check: why, never imported

    def lines(self) -> list[str]:
        out = []
        for f in self.files:
            drop = "; ".join(f"{n} {why}" for why, n in f["dropped"].items())
            out.append(
                f"{f['path']}: {f['rows']} rows ({f['excluded']} excluded) from {f['table']} {f['version']}"
                + (f"; not written: {drop}" if drop else "")
            )
        return out + [f"REFUSED: {r}" for r in self.refused] + [f"note: {n}" for n in self.notes]


def locate_systems(data_dir: Path | None = None) -> Path:
    """The aiconfigurator `systems` folder: --data-dir, else the installed aiconfigurator_core's."""
    if data_dir is not None:
        p = Path(data_dir)
        if not (p / "data").is_dir():
            raise CalibrationError(f"--data-dir {p}: not an aiconfigurator `systems` folder (no data/ inside)")
        return p
    spec = importlib.util.find_spec("aiconfigurator_core")
    if spec is None or not spec.submodule_search_locations:
        raise CalibrationError(f"aiconfigurator tables not found: pass --data-dir PATH/systems or {INSTALL_HINT}")
    for loc in spec.submodule_search_locations:
        if (Path(loc) / "systems" / "data").is_dir():
            return Path(loc) / "systems"
    raise CalibrationError(f"aiconfigurator_core has no systems/data folder; pass --data-dir or {INSTALL_HINT}")


def package_version(systems: Path) -> str:
    """aiconfigurator-core's version: the dist-info beside the package folder holding `systems`.

    (A pip install puts aiconfigurator_core-<ver>.dist-info next to aiconfigurator_core/; an
    unpacked copy without it, e.g. a test tree, says "unknown".)
    """
    for d in sorted(Path(systems).resolve().parent.parent.glob("aiconfigurator_core-*.dist-info")):
        return d.name[len("aiconfigurator_core-") : -len(".dist-info")]
    return "unknown"


def check_system(systems: Path, system: str) -> dict:
    """The system's YAML, after refusing h100_sxm and anything older than Hopper."""
    if system in REFUSED:
        raise CalibrationError(f"--system {system}: refused; {REFUSED[system]}")
    path = Path(systems) / f"{system}.yaml"
    if not path.is_file() or not (Path(systems) / "data" / system).is_dir():
        raise CalibrationError(f"--system {system}: not in {systems}; available: {', '.join(available(systems))}")
    spec = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    sm = int((spec.get("gpu") or {}).get("sm_version") or 0)
    if sm < 90:
        raise CalibrationError(f"--system {system}: SM {sm}, not a Hopper/Blackwell GPU (SM 90+)")
    return spec


def available(systems: Path) -> list[str]:
    """Importable systems present: every system folder with a YAML, except the refused ones."""
    names = (p.name for p in sorted((Path(systems) / "data").iterdir()) if p.is_dir())
    return [n for n in names if n not in REFUSED and (Path(systems) / f"{n}.yaml").is_file()]


def version_key(v: str) -> tuple:
    """Order engine versions PEP 440-style without `packaging`: release numbers (padded), then
    dev < rc/a/b < final < post ("1.3.0rc20" < "1.3.0", "0.5.6" < "0.5.6.post2" < "0.5.9")."""
    m = re.match(r"v?(\d+(?:\.\d+)*)(.*)$", str(v).strip())
    if not m:
        return ((-1,), (0, 0))
    release = tuple(int(x) for x in m.group(1).split("."))
    release = release + (0,) * max(0, 4 - len(release))
    tail = m.group(2).lower()
    rank = {"dev": -3, "a": -2, "alpha": -2, "b": -1, "beta": -1, "rc": -1, "post": 1}
    kind = re.match(r"[.\-_]?(dev|alpha|beta|a|b|rc|post)(\d*)", tail)
    suffix = (rank[kind.group(1)], int(kind.group(2) or 0)) if kind else (0, 0)
    return (release, suffix)


def table_status(version_dir: Path, table: str) -> str:
    """collection_meta.yaml tables.<table>.status ('' when the folder or table has no record)."""
    meta = version_dir / "collection_meta.yaml"
    if not meta.is_file():
        return ""
    data = yaml.safe_load(meta.read_text(encoding="utf-8")) or {}
    entry = (data.get("tables") or {}).get(table) or {}
    return str(entry.get("status") or "") if isinstance(entry, dict) else ""


def collected_at(version_dir: Path, table: str) -> str:
    meta = version_dir / "collection_meta.yaml"
    if not meta.is_file():
        return ""
    entry = ((yaml.safe_load(meta.read_text(encoding="utf-8")) or {}).get("tables") or {}).get(table) or {}
    return str(entry.get("collected_at") or "") if isinstance(entry, dict) else ""


def current_version(systems: Path, system: str, engine: str) -> str | None:
    """aiconfigurator's own pin (systems/query_versions.yaml: overrides.<system>, else defaults).

    Folders newer than the pin hold the next engine's collection in progress (partial model
    coverage, e.g. one model's MoE shapes); aiconfigurator itself reads the pinned version and fills
    tables it lacks from older folders, and so does this importer.
    """
    path = Path(systems) / "query_versions.yaml"
    if not path.is_file():
        return None
    doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    slot = ((doc.get("overrides") or {}).get(system) or {}).get(engine) or (doc.get("defaults") or {}).get(engine)
    return str(slot["current"]) if isinstance(slot, dict) and slot.get("current") else None


def table_files(sysdir: Path, engine: str, summary: ImportSummary, pin: str | None = None) -> dict[str, list[Path]]:
    """table -> its parquet files under <family>/<engine>/<version>/ (not newer than `pin`), newest first."""
    found: dict[str, list[Path]] = {}
    for family in sorted(p for p in sysdir.iterdir() if p.is_dir()):
        if family.name in SKIPPED_FAMILIES:
            _note_once(summary, f"{sysdir.name}/{family.name}/: skipped, {SKIPPED_FAMILIES[family.name]}")
            continue
        for vdir in sorted((family / engine).glob("*/")) if (family / engine).is_dir() else []:
            if pin and version_key(vdir.name) > version_key(pin):
                _note_once(
                    summary, f"{family.name}/{engine}/{vdir.name}: newer than aiconfigurator's pin {pin}, not read"
                )
                continue
            for f in sorted(vdir.glob("*.parquet")):
                if NEVER_OPEN.search(str(f.relative_to(sysdir))):
                    continue  # end-to-end / silicon sample tables: this project's validation, never opened
                found.setdefault(f.stem, []).append(f)
    return {t: sorted(fs, key=lambda f: version_key(f.parent.name), reverse=True) for t, fs in found.items()}


def nccl_file(sysdir: Path, pinned: str | None) -> Path | None:
    """The NCCL table: the version the system YAML pins (misc.nccl_version), else the newest."""
    files = [f for f in (sysdir / "comm" / "nccl").glob("*/nccl_perf.parquet")]
    for f in files:
        if pinned and f.parent.name == str(pinned):
            return f
    return max(files, key=lambda f: version_key(f.parent.name)) if files else None


def _where(f: Path) -> str:
    return "/".join(f.parts[-5:])  # <system>/<family>/<engine>/<version>/<table>.parquet


def _note_once(summary: ImportSummary, note: str) -> None:
    if note not in summary.notes:
        summary.notes.append(note)


def choose(
    files: list[Path], table: str, summary: ImportSummary, systems: Path | None = None, system: str = ""
) -> Path | None:
    """The newest file whose status is complete (or unrecorded) and that passes the integrity checks
    (with `systems`: aiconfigurator_integrity); failed refuses the import, partial and refused files
    are skipped (the next older version is tried)."""
    import pyarrow.parquet as pq  # lazy: pyarrow is the optional extra's (row counts of skipped tables)

    for f in files:
        status = table_status(f.parent, table)
        if status == "failed":
            raise CalibrationError(f"{f}: collection status 'failed' in collection_meta.yaml; refusing to import it")
        if status == "partial":
            n = pq.ParquetFile(f).metadata.num_rows
            _note_once(summary, f"{_where(f)}: partial collection ({n} rows), skipped")
            continue
        if systems is not None and refused(f, systems, system, summary):
            continue
        if status not in ("complete", ""):
            _note_once(summary, f"{_where(f)}: collection status {status!r}, imported as complete")
        return f
    return None


def refused(f: Path, systems: Path, system: str, summary: ImportSummary) -> bool:
    """True (and the reason in summary.refused) when `f` fails an integrity check: its rows name
    another GPU, or it is a copy of another system's table (aiconfigurator_integrity)."""
    why = integrity_problem(f, systems, system)
    if why and not any(r.startswith(_where(f)) for r in summary.refused):
        summary.refused.append(f"{_where(f)}: not imported: {why}")
    return bool(why)


def sort_rows(frame):
    """Rows in shape order (kernel, backend, shape columns; stable): deterministic, and gzip packs runs."""
    import pandas as pd  # lazy: pandas only when importing (CLI start-up time)

    if not len(frame):
        return frame
    keys = pd.DataFrame({c: frame[c].astype(str) for c in SORT_TEXT})
    for c in SIZE_COLUMNS:
        keys[c] = pd.to_numeric(frame[c], errors="coerce").fillna(-1.0)
    order = keys.sort_values(list(keys.columns), kind="mergesort").index
    return frame.loc[order].reset_index(drop=True)


def import_table(f: Path, ctx: T.Ctx, out: Path, summary: ImportSummary) -> None:
    import pandas as pd  # lazy: pandas + pyarrow only when importing (CLI start-up time)

    df = pd.read_parquet(f)
    frame, dropped = T.MAPPERS[ctx.table](df, ctx)
    frame = sort_rows(frame)
    write_rows(out, frame.to_dict("records"))
    excluded = int((frame["exclude"].astype(str) != "").sum()) if len(frame) else 0
    summary.files.append(
        dict(path=str(out), table=ctx.table, version=ctx.version, rows=len(frame), excluded=excluded, dropped=dropped)
    )


def import_engine(
    systems: Path, system: str, engine: str, out_root: Path, summary: ImportSummary, trim: bool = True
) -> None:
    """Every mapped table of one engine (plus NCCL) -> <out_root>/<gpu>/<engine>/<table>.csv.gz."""
    spec = check_system(systems, system)
    sysdir = Path(systems) / "data" / system
    gpu = GPU_NAMES.get(system, system.removesuffix("_sxm"))
    base = dict(system=system, gpu=gpu, pkg=package_version(systems))
    base["gpus_per_node"] = int((spec.get("node") or {}).get("num_gpus_per_node") or 8)
    base["trim"] = trim
    outdir = Path(out_root) / gpu / engine
    written = set()
    files = table_files(sysdir, engine, summary, current_version(systems, system, engine))
    picks = {t: choose(fs, t, summary, systems, system) for t, fs in files.items()}
    nccl = nccl_file(sysdir, (spec.get("misc") or {}).get("nccl_version"))
    if nccl is not None and not refused(nccl, systems, system, summary):
        picks["nccl_perf"] = nccl
    for table, f in sorted(picks.items()):
        if f is None:
            continue
        if table not in T.MAPPERS:
            why = SKIPPED_TABLES.get(table, "no moesim kernel family for this table")
            _note_once(summary, f"{system} {engine} {table}: skipped, {why}")
            continue
        eng = "nccl" if table == "nccl_perf" else engine
        date = collected_at(f.parent, table)
        ctx = T.Ctx(**base, engine=eng, version=f.parent.name, table=table, date=date, folder=str(f.parent))
        out = outdir / f"{table}.csv.gz"
        import_table(f, ctx, out, summary)
        written.add(out.name)
    for stale in sorted(outdir.glob("*.csv.gz")) if outdir.is_dir() else []:
        if stale.name not in written:  # a table no longer imported: replace means remove
            stale.unlink()
            summary.notes.append(f"{stale}: removed (no longer imported)")


def import_aiconfigurator(
    system: str = "h200_sxm",
    engine: str = "all",
    data_dir: Path | None = None,
    out_dir: Path | None = None,
    all_shapes: bool = False,
) -> ImportSummary:
    """Python entry point of `moesim calibrate import aiconfigurator` (system / engine may be 'all')."""
    from moesim.specs.data import write_root  # lazy: keeps this module importable without the specs layer

    if system in REFUSED:  # before looking for data: the refusal does not depend on what is installed
        raise CalibrationError(f"--system {system}: refused; {REFUSED[system]}")
    systems = locate_systems(data_dir)
    out_root = Path(out_dir) if out_dir else write_root() / "calibration" / "measurements"
    if engine != "all" and engine not in ENGINES:
        raise CalibrationError(f"--engine {engine!r}: allowed {', '.join(ENGINES)} or all")
    engines = ENGINES if engine == "all" else (engine,)
    names = available(systems) if system == "all" else [system]
    summary = ImportSummary()
    for name in names:
        try:
            check_system(systems, name)
        except CalibrationError as e:
            if system != "all":
                raise
            summary.notes.append(f"{name}: skipped ({e})")  # e.g. an Ampere system under --system all
            continue
        for eng in engines:
            import_engine(systems, name, eng, out_root, summary, trim=not all_shapes)
    return summary
