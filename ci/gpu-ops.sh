#!/usr/bin/env bash
# gpu-ops.sh: the GPU checks of the built-in row ops (softmax, rmsnorm, layernorm; issue 18).
#
#   bash ci/gpu-ops.sh [clean] [mutants] [racecheck]     (no argument: all three)
#
#   clean      each correct kernel (kernels/norm/*.toml) runs CASES generated cases (default
#              20000) with `cudafuzz fuzz --cases $CASES --jobs $JOBS`; it must have 0 findings.
#   mutants    each planted-bug mutant (kernels/mutants/{softmax,rmsnorm,layernorm}_*.toml) with
#              default settings: `cudafuzz fuzz --kernel M --time 60s --stop-after 1`.
#   racecheck  the missing-barrier mutants again under `--sanitize racecheck --time 120s`
#              (a race may have no native symptom).
#   reference  which reference judged (`cudafuzz repro` of a 3 x 1025 case: "reference: gpu"), and
#              each correct kernel for CPU_CASES (default 2000) cases judged by the CPU reference.
#
# Needs a GPU and the cudafuzz binary ($CUDAFUZZ, else .gpu/bin/cudafuzz, else
# target/release/cudafuzz). Logs go to $OUT (default gpu-ops-logs); the table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${CUDAFUZZ:-$( [ -x .gpu/bin/cudafuzz ] && echo .gpu/bin/cudafuzz || echo target/release/cudafuzz )}
logs=${OUT:-gpu-ops-logs}
cases=${CASES:-20000}
jobs=${JOBS:-8}
mkdir -p "$logs"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(clean mutants racecheck reference)
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s | %s |' "$@")"); echo "${rows[-1]}"; }
# The campaign summary line: "<kernel>: N cases in S s ... F failed, E errors; D distinct".
summary() { grep -E "^[A-Za-z0-9_]+: [0-9]+ cases" "$1" | tail -n1; }
first() { grep -m1 -Eo 'NEW +after [0-9.]+ s' "$1" | grep -Eo '[0-9.]+' || echo "-"; }
case_no() { grep -m1 -E '^NEW' "$1" | grep -Eo 'case #[0-9]+' | head -n1 || true; }
oracle() { grep -m1 -A1 -E '^NEW' "$1" | tail -n1 | sed 's/^ *//' | cut -c1-80; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1 > "$logs/gpu.txt"
echo "GPU: $(cat "$logs/gpu.txt"); $(date -u +%Y-%m-%dT%H:%MZ); $bin"

if want clean; then
  for k in softmax rmsnorm layernorm; do
    t0=$(date +%s.%N)
    "$bin" fuzz --kernel "kernels/norm/$k.toml" --cases "$cases" --jobs "$jobs" --escalate none --out "$logs/out-clean-$k" > "$logs/clean-$k.log" 2>&1
    st=$?
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}")
    s=$(summary "$logs/clean-$k.log")
    n=$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1 | grep -Eo '[0-9]+')
    f=$(echo "$s" | sed -nE 's/.* ([0-9]+) failed, ([0-9]+) errors; ([0-9]+) distinct.*/\1 failed, \2 errors, \3 distinct/p')
    row "clean $k" "${n:-?} cases" "${f:-?} (rc=$st)" "$secs s" "$(echo "$s" | grep -Eo '[0-9.]+ s \([0-9]+/s\)'); $(echo "$s" | grep -Eo 'inside the contract: [0-9.]+%' | head -n1)"
  done
fi

if want mutants; then
  for m in kernels/mutants/softmax_*.toml kernels/mutants/rmsnorm_*.toml kernels/mutants/layernorm_*.toml; do
    k=$(basename "$m" .toml)
    timeout 150 "$bin" fuzz --kernel "$m" --time "${MUT_TIME:-60s}" --stop-after 1 --out "$logs/out-mut-$k" > "$logs/mut-$k.log" 2>&1
    row "mutant $k" "$(first "$logs/mut-$k.log") s to first finding" "$(case_no "$logs/mut-$k.log")" "default fuzz" "$(oracle "$logs/mut-$k.log")"
  done
fi

if want racecheck; then
  for m in kernels/mutants/*_no_barrier.toml; do
    k=$(basename "$m" .toml)
    timeout 200 "$bin" fuzz --kernel "$m" --time "${RACE_TIME:-120s}" --stop-after 1 --sanitize racecheck --escalate none --out "$logs/out-race-$k" > "$logs/race-$k.log" 2>&1
    row "mutant $k" "$(first "$logs/race-$k.log") s to first finding" "$(case_no "$logs/race-$k.log")" "--sanitize racecheck" "$(oracle "$logs/race-$k.log")"
  done
fi

if want reference; then
  for k in softmax rmsnorm layernorm; do
    "$bin" case example --kernel "kernels/norm/$k.toml" | sed -E 's/"n": 1,/"n": 1025,/; s/"rows": 1$/"rows": 3/' > "$logs/case-$k.json"
    for r in gpu cpu; do
      "$bin" repro --reference "$r" "$logs/case-$k.json" > "$logs/repro-$k-$r.log" 2>&1
      row "repro $k 3x1025 --reference $r" "rc=$?" "$(grep -m1 -Eo '^reference: [a-z]+' "$logs/repro-$k-$r.log")" "-" "$(grep -m1 -E '(PASS|FAIL|ERROR)' "$logs/repro-$k-$r.log" | cut -c1-80)"
    done
    t0=$(date +%s.%N)
    "$bin" fuzz --kernel "kernels/norm/$k.toml" --cases "${CPU_CASES:-2000}" --jobs "$jobs" --reference cpu --escalate none --seed 7 --out "$logs/out-cpu-$k" > "$logs/cpu-$k.log" 2>&1
    s=$(summary "$logs/cpu-$k.log")
    row "clean $k --reference cpu" "$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1)" "$(echo "$s" | sed -nE 's/.* ([0-9]+) failed, ([0-9]+) errors.*/\1 failed, \2 errors/p')" "$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}") s" "seed 7"
  done
fi

echo
echo "| check | cases / seconds to first finding | findings / case | mode / seconds | summary / oracle |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
