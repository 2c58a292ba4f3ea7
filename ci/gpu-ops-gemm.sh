#!/usr/bin/env bash
# GPU check of the built-in ops gemm and rotary (issue "Built-in ops", part 2): the correct
# kernels over generated cases (0 findings expected) and each planted-bug mutant under default
# `fuzz --stop-after 1` (time to the first finding, its case and oracle). Both are judged by the
# CPU reference (`--reference cpu`; until the GPU references gemm_f64 / rotary_f64 are wired in,
# the engine falls back to the CPU for these ops anyway). Uses .gpu/bin/cudafuzz (gpu-pack) or
# target/release/cudafuzz. Prints the tables last; logs go to gpu-ops-logs/ (and $OUT).
#
#   bash ci/gpu-ops-gemm.sh [clean] [mutants]
#
# Environment: CLEAN_CASES (default 20000) and CLEAN_TIME (default 150s) per correct kernel;
# MUTANT_TIME (default 60s) per mutant; SEEDS (default "0") for the mutant campaigns; JOBS
# (default 8: each gemm case past 2^31 elements needs up to 8 GiB, and 14 workers holding such
# cases at once ran an 80 GB H100 out of memory: 13 of 20000 cases were setup errors).
set -uo pipefail
cd "$(dirname "$0")/.."
logs=gpu-ops-logs
rm -rf "$logs"; mkdir -p "$logs"
if [ -x .gpu/bin/cudafuzz ]; then bin=$PWD/.gpu/bin/cudafuzz; elif [ -x target/release/cudafuzz ]; then bin=$PWD/target/release/cudafuzz
else echo "gpu-ops-gemm: no cudafuzz binary: build it (cargo build --release) first" >&2; exit 4; fi
stages=("$@"); [ ${#stages[@]} -gt 0 ] || stages=(clean mutants)
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
jobs=${JOBS:-8}
clean=(); mutants=()
finish() {
  trap - EXIT TERM INT
  {
    echo; echo "== gpu-ops-gemm ($(date -u +%F), $(head -n1 "$logs/gpu.txt"))"
    printf '%-12s %8s %9s %7s %8s  %s\n' kernel cases findings errors seconds "inside-contract / note"
    printf '%s\n' "${clean[@]}"
    echo
    printf '%-22s %5s %9s  %-70s %s\n' mutant seed "first(s)" case oracle
    printf '%s\n' "${mutants[@]}"
  } | tee "$logs/summary.txt"
  if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-ops-logs.tgz" "$logs" 2>/dev/null; cp "$logs/summary.txt" "$OUT/ops-summary.txt"; fi
}
trap finish EXIT
trap 'mutants+=("stopped at the time limit"); exit 124' TERM INT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1

if want clean; then
  for k in gemm rotary; do
    start=$(date +%s.%N)
    timeout 600 $bin fuzz --kernel kernels/$k/$k.toml --reference cpu --cases ${CLEAN_CASES:-20000} --time ${CLEAN_TIME:-150s} --jobs $jobs \
      --seed 17 --escalate none --out "$logs/clean-$k" > "$logs/clean-$k.log" 2>&1; st=$?
    secs=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
    line=$(grep -E "^$k: [0-9]+ cases" "$logs/clean-$k.log" | tail -n1)
    n=$(sed -E 's/^[^:]+: ([0-9]+) cases.*/\1/' <<< "$line")
    f=$(grep -Eo '[0-9]+ distinct findings' <<< "$line" | grep -Eo '^[0-9]+')
    e=$(grep -Eo '[0-9]+ errors' <<< "$line" | grep -Eo '^[0-9]+')
    inside=$(grep -m1 -Eo 'inside the contract[^;]*' "$logs/clean-$k.log" | head -n1)
    clean+=("$(printf '%-12s %8s %9s %7s %8s  rc=%s %s' "$k" "${n:-?}" "${f:-?}" "${e:-?}" "$secs" "$st" "$inside")")
  done
fi

if want mutants; then
  for m in gemm_unchecked_vec gemm_tail_tile gemm_beta_reads_c gemm_ld_assumed gemm_int32_offset \
           rotary_unchecked_vec rotary_int32_row rotary_row_stride rotary_tail; do
    for s in ${SEEDS:-0}; do
      log="$logs/mut-$m-$s.log"
      timeout 200 $bin fuzz --kernel kernels/mutants/$m.toml --reference cpu --cases 1000000 --time ${MUTANT_TIME:-60s} --stop-after 1 \
        --escalate none --jobs 4 --seed $s --out "$logs/mut-$m-$s" > "$log" 2>&1
      t=$(grep -m1 -Eo 'NEW   after [0-9.]+ s' "$log" | grep -Eo '[0-9.]+' | head -n1)
      case_=$(grep -m1 -Eo 'NEW   after [0-9.]+ s \(case #[0-9]+\): .*' "$log" | sed -E 's/NEW   after [0-9.]+ s //' | cut -c1-70)
      oracle=$(grep -m1 -A1 '^NEW' "$log" | tail -n1 | sed 's/^ *//' | cut -c1-110)
      mutants+=("$(printf '%-22s %5s %9s  %-70s %s' "$m" "$s" "${t:-none}" "${case_:--}" "${oracle:-not found}")")
    done
  done
fi
