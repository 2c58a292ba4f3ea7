#!/usr/bin/env bash
# GPU check of the op-generic kernel model (issue "Any tensor kernel"): the GPU tests, every
# correct shipped kernel over many generated cases, the kernels that are not attention-shaped and
# their planted bugs, seeds written before format 2, contract inference and standalone repros of
# a kernel with a user reference. Uses binaries staged in .gpu/ by ci/gpu-pack
# (or target/release). Prints a summary table last; logs go to gpu-any-logs/ (and $OUT).
#
#   bash ci/gpu-any-kernel.sh [STAGE...]
#
# Stages (default: all but tests):
#   tests     the GPU test executables (gpu_engine, gpu_props, gpu_sanitizer)
#   clean     CLEAN_CASES (default 20000) generated cases per correct kernel (CLEAN_KERNELS),
#             0 findings expected; the inside-contract rate of each campaign
#   mutants   default `fuzz --stop-after 1` on each new mutant, seeds 0-4: median time to the
#             first finding (must be under 60 s)
#   seedsv1   every format-1 seed under tests/fixtures/seeds-v1 replays its saved signature
#   contract  `cudafuzz contract` on fa_accum (its seq_k == seq_q term) and silu_and_mul
#   emit      a silu_and_mul finding as a standalone .cu (user reference embedded), built with
#             nvcc and run
set -uo pipefail
cd "$(dirname "$0")/.."
logs=gpu-any-logs
rm -rf "$logs"; mkdir -p "$logs"
if [ -x .gpu/bin/cudafuzz ]; then bin=$PWD/.gpu/bin/cudafuzz; elif [ -x target/release/cudafuzz ]; then bin=$PWD/target/release/cudafuzz
else echo "gpu-any-kernel: no cudafuzz binary: run ci/gpu-pack first" >&2; exit 4; fi
export CUDAFUZZ_BIN=$bin
stages=("$@"); [ ${#stages[@]} -gt 0 ] || stages=(clean mutants seedsv1 contract emit)
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
jobs=${JOBS:-12}
finish() {
  trap - EXIT TERM INT
  { echo; echo "== gpu-any-kernel summary ($(date -u +%F))"; printf '%s\n' "${rows[@]}"; } | tee "$logs/summary.txt"
  if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-any-logs.tgz" "$logs" 2>/dev/null; cp "$logs/summary.txt" "$OUT/any-summary.txt"; fi
}
rows=()
row() { rows+=("$(printf '%-52s %-6s %s' "$1" "$2" "$3")"); printf '%s\n' "${rows[-1]}" >> "$logs/rows.txt"; }
trap finish EXIT
trap 'row "stopped at the time limit" "-" ""; exit 124' TERM INT
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
row gpu info "$(head -n1 "$logs/gpu.txt")"

if want clean; then
  for k in ${CLEAN_KERNELS:-fa_accum silu_and_mul simple_attn flash_fwd flash_fwd_hd64 flash_fwd_hd128}; do
    start=$(date +%s)
    timeout 200 $bin fuzz --kernel $k --cases ${CLEAN_CASES:-20000} --time ${CLEAN_TIME:-150s} --jobs $jobs --seed 17 --escalate none \
      --out "$logs/clean-$k" > "$logs/clean-$k.log" 2>&1; st=$?
    line=$(grep -E "^$k: [0-9]+ cases" "$logs/clean-$k.log" | tail -n1)
    n=$(sed -E 's/^[^:]+: ([0-9]+) cases.*/\1/' <<< "$line")
    ok=$([ $st = 0 ] && [ "${n:-0}" -ge ${CLEAN_CASES:-20000} ] && echo ok || echo FAIL)
    row "clean $k: ${CLEAN_CASES:-20000} cases, 0 findings" "$ok" "rc=$st $(sed -E 's/^[^:]+: //; s/; [0-9]+ worker starts.*//' <<< "$line" | cut -c1-150)"
  done
fi

if want mutants; then
  for k in ${NEW_MUTANTS:-fa_accum_unmasked_tail silu_mul_unchecked_vec silu_mul_int32_row}; do
    times=()
    for s in 0 1 2 3 4; do
      timeout 120 $bin fuzz --kernel kernels/mutants/$k.toml --cases 100000 --time 60s --stop-after 1 --escalate none --jobs 4 --seed $s \
        --out "$logs/mut-$k-$s" > "$logs/mut-$k-$s.log" 2>&1
      t=$(grep -m1 -Eo 'NEW   after [0-9.]+ s' "$logs/mut-$k-$s.log" | grep -Eo '[0-9.]+' | head -n1)
      times+=("${t:-inf}")
      echo "$k seed $s: ${t:-not found} $(grep -m1 -A1 '^NEW' "$logs/mut-$k-$s.log" | tail -n1 | sed 's/^ *//' | cut -c1-140)" >> "$logs/mutants.txt"
    done
    med=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 3p)
    sig=$(grep -m1 -A1 '^NEW' "$logs/mut-$k-0.log" | tail -n1 | sed 's/^ *//' | cut -c1-90)
    row "mutant $k: median first finding < 60 s" "$(python3 -c "print('ok' if float('$med') < 60 else 'FAIL')" 2>/dev/null || echo FAIL)" "median ${med} s (${times[*]}); $sig"
  done
fi

if want seedsv1; then
  # Seeds saved with a finding must reproduce its signature; plain cases must run.
  n=0; good=0; plain=0
  for f in tests/fixtures/seeds-v1/*.json; do
    log="$logs/seedv1-$(basename "$f" .json).log"
    timeout 300 $bin repro "$f" > "$log" 2>&1; st=$?
    if ! grep -q '"signature"' "$f"; then
      plain=$((plain + 1)); echo "$(basename "$f"): plain case, exit $st" >> "$logs/seedsv1.txt"; continue
    fi
    n=$((n + 1))
    if grep -qE '^saved signature .*: reproduced$' "$log"; then good=$((good + 1)); fi
    echo "$(basename "$f"): $(grep -m1 '^saved signature' "$log" | sed 's/.*: //')" >> "$logs/seedsv1.txt"
  done
  row "format-1 seeds reproduce their signatures" "$([ $good = $n ] && echo ok || echo FAIL)" "$good of $n (and $plain plain cases run)"
fi

if want contract; then
  for k in fa_accum silu_and_mul; do
    timeout 240 $bin contract --kernel $k --jobs $jobs --out "$logs/contract-$k" > "$logs/contract-$k.log" 2>&1; st=$?
    row "contract $k" "rc=$st" "$(grep -m1 -iE 'precondition|seq_k' "$logs/contract-$k.log" | cut -c1-110)"
  done
fi

if want emit; then
  # A silu_and_mul finding and a clean example case as standalone repros: the .cu built with
  # nvcc and the Python script, each running the user reference kernel itself.
  e="$logs/emit"; mkdir -p "$e"
  timeout 120 $bin fuzz --kernel kernels/mutants/silu_mul_unchecked_vec.toml --cases 2000 --stop-after 1 --escalate none --seed 1 --out "$e/out" > "$e/fuzz.log" 2>&1
  cp "$(ls "$e"/out/seeds/*.json 2>/dev/null | head -n1)" "$e/bug.json" 2>/dev/null
  $bin case example --kernel silu_and_mul > "$e/clean.json"
  for n in bug clean; do
    want_st=$([ $n = bug ] && echo 1 || echo 0)
    if [ -f "$e/$n.json" ] && $bin repro "$e/$n.json" --emit cu -o "$e/$n.cu" > "$e/emit-$n.log" 2>&1 \
       && nvcc -arch=native -lineinfo -o "$e/$n" "$e/$n.cu" > "$e/nvcc-$n.log" 2>&1; then
      timeout 120 "$e/$n" > "$e/run-$n.log" 2>&1; st=$?
      row "emit cu silu $n (exit $want_st)" "$([ $st = $want_st ] && echo ok || echo FAIL)" "rc=$st $(grep -m1 -iE 'RESULT|CUDA error|fail' "$e/run-$n.log" | cut -c1-80)"
    else
      row "emit cu silu $n" FAIL "see emit/emit-$n.log, emit/nvcc-$n.log"
    fi
    if $bin repro "$e/$n.json" --emit python -o "$e/$n.py" >> "$e/emit-$n.log" 2>&1; then
      (cd "$e" && PYTHONUNBUFFERED=1 timeout 120 python3 $n.py) > "$e/py-$n.log" 2>&1; st=$?
      row "emit python silu $n (exit $want_st)" "$([ $st = $want_st ] && echo ok || echo FAIL)" "rc=$st $(grep -m1 -iE 'RESULT|CUDA error|fail' "$e/py-$n.log" | cut -c1-80)"
    fi
  done
fi

if want tests; then
  # Test executables resolve paths under the directory they were built in (gpu-pack's note).
  build_root=$(cat .gpu/build-root 2>/dev/null)
  if [ -n "$build_root" ] && [ "$build_root" != "$PWD" ] && [ ! -e "$build_root" ]; then mkdir -p "$(dirname "$build_root")" && ln -s "$PWD" "$build_root"; fi
  for t in .gpu/tests/gpu_engine-* .gpu/tests/gpu_props-* .gpu/tests/gpu_sanitizer-*; do
    [ -x "$t" ] || continue
    name=$(basename "$t" | sed 's/-[0-9a-f]*$//')
    start=$(date +%s)
    CUDAFUZZ_REQUIRE_GPU=1 timeout ${TEST_TIMEOUT:-240} "$t" --test-threads=1 > "$logs/test-$name.log" 2>&1; st=$?
    row "test $name" "$([ $st = 0 ] && echo ok || echo FAIL)" "rc=$st $(grep -m1 '^test result' "$logs/test-$name.log" | cut -c1-60) $(( $(date +%s) - start )) s"
  done
fi
