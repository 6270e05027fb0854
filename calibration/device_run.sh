#!/usr/bin/env bash
# One prepared calibration run on ONE GPU (made for an H200; <= 8 min): every single-GPU runner at
# the shapes SGLang runs for DeepSeek-V3, then the two-source comparison with the imported tables.
#
#   bash calibration/device_run.sh [--dry-run] [OUT_DIR]
#
# OUT_DIR: where the rows go (default: $OUT, else ./device_rows); one CSV per runner and backend.
# Env: PYTHON (default python3), ENGINE (default sglang: the imported tables compared against),
#      BUDGET_S (default 450: the whole run's time budget; each runner gets its share, capped by
#      what is left).
# Runners (each under `timeout`; a runner that runs out of time keeps the shapes it finished,
# rows are appended atomically and a re-run resumes):
#   DeepGEMM FP8 GEMM, grouped contiguous + masked (--strict: a missing library is reported, not
#   replaced), FlashMLA decode (--strict), the torch fallbacks of all three, HBM memcpy + launch.
# Then `moesim calibrate compare` of these rows against calibration/measurements/<gpu>/<engine>/.
# Exit status: non-zero only if nothing at all could be measured.
# --dry-run: print the plan and check that every command it would run exists (`... --help`).
set -euo pipefail

DRY=0
if [[ "${1:-}" == "--dry-run" ]]; then
  DRY=1
  shift
fi
PY="${PYTHON:-python3}"
ENGINE="${ENGINE:-sglang}"
BUDGET_S="${BUDGET_S:-450}"
ROWS="${1:-${OUT:-./device_rows}}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYTHONPATH="${HERE}${PYTHONPATH:+:${PYTHONPATH}}"
MOESIM=("$PY" -m moesim)

# kernel  backend  strict  seconds (share of the budget)
PLAN=(
  "memcpy torch - 25"
  "gemm deep_gemm --strict 120"
  "grouped_gemm deep_gemm --strict 90"
  "mla flash_mla --strict 60"
  "gemm torch - 50"
  "grouped_gemm torch - 40"
  "mla torch - 40"
)

run_args() {  # kernel backend strict -> the `calibrate run` arguments
  local kernel="$1" backend="$2" strict="$3"
  local args=(calibrate run "$kernel" --backend "$backend" --device cuda --shapes engine
    --out "${ROWS}/${kernel}.${backend}.csv")
  [[ "$strict" == "--strict" ]] && args+=(--strict)
  echo "${args[@]}"
}

if [[ "$DRY" == 1 ]]; then
  echo "device_run plan (dry run): rows -> ${ROWS}, engine ${ENGINE}, budget ${BUDGET_S} s"
  for step in "${PLAN[@]}"; do
    read -r kernel backend strict secs <<<"$step"
    read -r -a args <<<"$(run_args "$kernel" "$backend" "$strict")"
    echo "  timeout ${secs}s moesim ${args[*]}"
    "${MOESIM[@]}" "${args[@]}" --help >/dev/null
  done
  echo "  moesim calibrate compare ${ROWS} --against calibration/measurements/<gpu>/${ENGINE}"
  "${MOESIM[@]}" calibrate compare "$ROWS" --against "$ROWS" --help >/dev/null
  command -v timeout >/dev/null
  echo "dry run: every command exists"
  exit 0
fi

mkdir -p "$ROWS"
echo "== machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || true
"$PY" - <<'EOF' || true
from moesim.calibration.runners.backends import detect
for name, lib in detect().items():
    print(f"{name:10s} {'v' + lib.version if lib.available else 'not importable: ' + lib.reason[:120]}")
try:
    import torch
    print("cuda", torch.version.cuda, "| device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")
except Exception as e:  # torch missing: the runners will say so
    print("torch:", e)
EOF

START=$SECONDS
for step in "${PLAN[@]}"; do
  read -r kernel backend strict secs <<<"$step"
  left=$((BUDGET_S - (SECONDS - START)))
  if ((left < 10)); then
    echo "== ${kernel} ${backend}: skipped, time budget spent"
    continue
  fi
  ((secs > left)) && secs=$left
  read -r -a args <<<"$(run_args "$kernel" "$backend" "$strict")"
  echo "== ${kernel} ${backend} (up to ${secs} s)"
  rc=0
  timeout -k 10 "${secs}s" "${MOESIM[@]}" "${args[@]}" || rc=$?
  case "$rc" in
    0) ;;
    124 | 137) echo "   ${kernel} ${backend}: time budget reached; the shapes finished are kept" ;;
    *) echo "   ${kernel} ${backend}: exit ${rc} (see above); continuing" ;;
  esac
done

ROWS_N=$("$PY" - "$ROWS" <<'EOF'
import sys
from pathlib import Path
from moesim.calibration.records import read_csv_rows
print(sum(len(read_csv_rows(p)) for p in Path(sys.argv[1]).glob("*.csv")))
EOF
)
echo "== ${ROWS_N} rows measured in ${ROWS} ($((SECONDS - START)) s)"
if [[ "$ROWS_N" == 0 ]]; then
  echo "nothing could be measured"
  exit 1
fi

GPU=$("$PY" -c "
import torch
from moesim.calibration.runners.backends import gpu_slug
print(gpu_slug(torch.cuda.get_device_name(0)))" 2>/dev/null || echo unknown)
AGAINST="${HERE}/calibration/measurements/${GPU}/${ENGINE}"
if [[ -d "$AGAINST" ]]; then
  echo "== compare: these rows (A) vs imported ${GPU}/${ENGINE} (B)"
  "${MOESIM[@]}" calibrate compare "$ROWS" --against "$AGAINST" || echo "compare failed (see above)"
  "${MOESIM[@]}" calibrate compare "$ROWS" --against "$AGAINST" --json >"${ROWS}/compare.${ENGINE}.json" || true
else
  echo "== compare: no imported tables at ${AGAINST} (run moesim calibrate import aiconfigurator first)"
fi
exit 0
