#!/usr/bin/env bash
# gpu-ops.sh: the GPU checks of the built-in ops (softmax, rmsnorm, layernorm, gemm, rotary;
# issue 18), and of attention through the same generic GPU reference path.
#
#   bash ci/gpu-ops.sh [clean] [mutants] [racecheck] [reference] [attention]
#                                            (no argument: all but attention)
#
#   clean      each correct kernel of KERNELS (default: norm/softmax norm/rmsnorm norm/layernorm
#              gemm/gemm rotary/rotary, under kernels/) runs CASES generated cases (default
#              20000) with `cudafuzz fuzz --cases $CASES --jobs $JOBS`; it must have 0 findings.
#   mutants    each planted-bug mutant of those ops (kernels/mutants/<op>_*.toml) with default
#              settings, for each seed of SEEDS (default 0):
#              `cudafuzz fuzz --kernel M --time $MUT_TIME --stop-after 1 --seed S`.
#   racecheck  the missing-barrier mutants again under `--sanitize racecheck --time 120s`
#              (a race may have no native symptom).
#   reference  which reference judged (`cudafuzz repro` of a mid-sized case of each kernel, gemm's
#              with beta != 0 so its in-out c is read: "reference: gpu" by default), and each
#              correct kernel for CPU_CASES (default 2000; 0 skips) cases judged by the CPU
#              reference.
#   attention  flash_fwd for ATT_CASES (default 3000) cases (0 findings) and the seqk_tail mutant
#              with `--stop-after 1`: attention's GPU reference through the generic op path.
#
# Needs a GPU and the cudafuzz binary ($CUDAFUZZ, else .gpu/bin/cudafuzz, else
# target/release/cudafuzz). Logs go to $OUT (default gpu-ops-logs); the table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${CUDAFUZZ:-$( [ -x .gpu/bin/cudafuzz ] && echo .gpu/bin/cudafuzz || echo target/release/cudafuzz )}
logs=${OUT:-gpu-ops-logs}
cases=${CASES:-20000}
# 8 workers: a gemm case past 2^31 elements needs up to 8 GiB, and 14 workers holding such cases
# at once ran an 80 GB H100 out of memory.
jobs=${JOBS:-8}
kernels=(${KERNELS:-norm/softmax norm/rmsnorm norm/layernorm gemm/gemm rotary/rotary})
mkdir -p "$logs"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(clean mutants racecheck reference)
op_of() { basename "$1"; }
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s | %s |' "$@")"); echo "${rows[-1]}"; }
# The campaign summary line: "<kernel>: N cases in S s ... F failed, E errors; B new bugs (S new signatures)".
summary() { grep -E "^[A-Za-z0-9_]+: [0-9]+ cases" "$1" | tail -n1; }
first() { grep -m1 -Eo 'NEW +after [0-9.]+ s' "$1" | grep -Eo '[0-9.]+' || echo "-"; }
case_no() { grep -m1 -E '^NEW' "$1" | grep -Eo 'case #[0-9]+' | head -n1 || true; }
oracle() { grep -m1 -A1 -E '^NEW' "$1" | tail -n1 | sed 's/^ *//' | cut -c1-80; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1 > "$logs/gpu.txt"
echo "GPU: $(cat "$logs/gpu.txt"); $(date -u +%Y-%m-%dT%H:%MZ); $bin"

if want clean; then
  for kp in "${kernels[@]}"; do
    k=$(op_of "$kp")
    t0=$(date +%s.%N)
    "$bin" fuzz --kernel "kernels/$kp.toml" --cases "$cases" --jobs "$jobs" --escalate none --out "$logs/out-clean-$k" > "$logs/clean-$k.log" 2>&1
    st=$?
    secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}")
    s=$(summary "$logs/clean-$k.log")
    n=$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1 | grep -Eo '[0-9]+')
    f=$(echo "$s" | sed -nE 's/.* ([0-9]+) failed, ([0-9]+) errors; ([0-9]+) new bugs.*/\1 failed, \2 errors, \3 new bugs/p')
    row "clean $k" "${n:-?} cases" "${f:-?} (rc=$st)" "$secs s" "$(echo "$s" | grep -Eo '[0-9.]+ s \([0-9]+/s\)'); $(echo "$s" | grep -Eo 'inside the contract: [0-9.]+%' | head -n1)"
  done
fi

if want mutants; then
  for kp in "${kernels[@]}"; do
    for m in kernels/mutants/"$(op_of "$kp")"_*.toml; do
      k=$(basename "$m" .toml)
      for sd in ${SEEDS:-0}; do
        timeout 150 "$bin" fuzz --kernel "$m" --time "${MUT_TIME:-60s}" --stop-after 1 --seed "$sd" --out "$logs/out-mut-$k-$sd" > "$logs/mut-$k-$sd.log" 2>&1
        row "mutant $k" "$(first "$logs/mut-$k-$sd.log") s to first finding" "$(case_no "$logs/mut-$k-$sd.log")" "default fuzz, seed $sd" "$(oracle "$logs/mut-$k-$sd.log")"
      done
    done
  done
fi

if want racecheck; then
  for m in $(for kp in "${kernels[@]}"; do ls kernels/mutants/"$(op_of "$kp")"_no_barrier.toml 2>/dev/null; done); do
    k=$(basename "$m" .toml)
    timeout 200 "$bin" fuzz --kernel "$m" --time "${RACE_TIME:-120s}" --stop-after 1 --sanitize racecheck --escalate none --out "$logs/out-race-$k" > "$logs/race-$k.log" 2>&1
    row "mutant $k" "$(first "$logs/race-$k.log") s to first finding" "$(case_no "$logs/race-$k.log")" "--sanitize racecheck" "$(oracle "$logs/race-$k.log")"
  done
fi

if want reference; then
  # The example case with mid-sized dims (and gemm's beta != 0: c is read).
  shape='s/"n": 1,/"n": 1025,/; s/"rows": 1$/"rows": 3/; s/"k": 1,/"k": 300,/; s/"m": 1,/"m": 70,/; s/"n": 1$/"n": 33/; s/"beta": 0.0,/"beta": 0.25,/;
    s/"head_dim": 2,/"head_dim": 64,/; s/"heads": 1,/"heads": 3,/; s/"max_pos": 1,/"max_pos": 7,/; s/"rot_half": 1,/"rot_half": 16,/; s/"tokens": 1$/"tokens": 5/; s/"interleaved": false/"interleaved": true/'
  for kp in "${kernels[@]}"; do
    k=$(op_of "$kp")
    "$bin" case example --kernel "kernels/$kp.toml" | sed -E "$shape" > "$logs/case-$k.json"
    dims=$(python3 -c "import json,sys; print('x'.join(str(v) for v in json.load(open(sys.argv[1]))['case']['dims'].values()))" "$logs/case-$k.json" 2>/dev/null)
    for r in gpu cpu; do
      "$bin" repro --reference "$r" "$logs/case-$k.json" > "$logs/repro-$k-$r.log" 2>&1
      row "repro $k $dims --reference $r" "rc=$?" "$(grep -m1 -Eo '^reference: [a-z]+' "$logs/repro-$k-$r.log")" "-" "$(grep -m1 -E '(PASS|FAIL|ERROR)' "$logs/repro-$k-$r.log" | cut -c1-80)"
    done
    [ "${CPU_CASES:-2000}" -gt 0 ] || continue
    t0=$(date +%s.%N)
    "$bin" fuzz --kernel "kernels/$kp.toml" --cases "${CPU_CASES:-2000}" --jobs "$jobs" --reference cpu --escalate none --seed 7 --out "$logs/out-cpu-$k" > "$logs/cpu-$k.log" 2>&1
    s=$(summary "$logs/cpu-$k.log")
    row "clean $k --reference cpu" "$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1)" "$(echo "$s" | sed -nE 's/.* ([0-9]+) failed, ([0-9]+) errors.*/\1 failed, \2 errors/p')" "$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}") s" "seed 7"
  done
fi

if want attention; then
  t0=$(date +%s.%N)
  "$bin" fuzz --kernel kernels/attention/flash_fwd.toml --cases "${ATT_CASES:-3000}" --jobs "$jobs" --escalate none --out "$logs/out-flash" > "$logs/clean-flash_fwd.log" 2>&1
  st=$?
  s=$(summary "$logs/clean-flash_fwd.log")
  row "clean flash_fwd" "$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1)" "$(echo "$s" | sed -nE 's/.* ([0-9]+) failed, ([0-9]+) errors; ([0-9]+) new bugs.*/\1 failed, \2 errors, \3 new bugs/p') (rc=$st)" "$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N)-$t0}") s" "$(echo "$s" | grep -Eo 'inside the contract: [0-9.]+%' | head -n1)"
  timeout 150 "$bin" fuzz --kernel kernels/mutants/seqk_tail.toml --time "${MUT_TIME:-60s}" --stop-after 1 --out "$logs/out-mut-seqk_tail" > "$logs/mut-seqk_tail.log" 2>&1
  row "mutant seqk_tail" "$(first "$logs/mut-seqk_tail.log") s to first finding" "$(case_no "$logs/mut-seqk_tail.log")" "default fuzz" "$(oracle "$logs/mut-seqk_tail.log")"
fi

echo
echo "| check | cases / seconds to first finding | findings / case | mode / seconds | summary / oracle |"
echo "| --- | --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
