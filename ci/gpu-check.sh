#!/usr/bin/env bash
# GPU check: runs the GPU test suite and a smoke campaign on any CUDA host, then prints a
# summary table last. Builds nothing: it uses binaries staged in .gpu/ by gpu-pack
# (ci/gpu-pack), or target/release when a Rust toolchain built them here.
#   bash ci/gpu-check.sh            # logs go to $OUT (if set) or ./gpu-check-logs
#   GPU_CHECK_TESTS=0 bash ci/gpu-check.sh   # smoke campaigns only, no test suite
#   GPU_CHECK_BENCH=0 bash ci/gpu-check.sh   # no bench row (it takes up to 4 minutes)
#   GPU_CHECK_STAGES="tests away" bash ci/gpu-check.sh   # only these stages (tests smoke latency wraps counts vocab shipping varlen datagen modules away python pyext triton clean pytools mps bench)
set -uo pipefail
cd "$(dirname "$0")/.."
logs=gpu-check-logs
rm -rf "$logs"; mkdir -p "$logs"
if [ -x .gpu/bin/cudafuzz ]; then bin=.gpu/bin/cudafuzz; run_tests=.gpu/run-tests
elif [ -x target/release/cudafuzz ]; then bin=target/release/cudafuzz; run_tests="cargo test --release --"
else echo "gpu-check: no cudafuzz binary: run ci/gpu-pack first" >&2; exit 4; fi
export CUDAFUZZ_BIN="$PWD/$bin"
# Binaries staged by gpu-pack were built in another folder: point them at this tree's kernels
# (the shipped manifests, reference kernels and sanitizer markers), from any working directory.
export CUDAFUZZ_KERNELS="$PWD/kernels"
rows=()
# GPU_CHECK_STAGES picks stages (default all but clean, latency, wraps and counts, which take
# minutes): tests smoke latency wraps counts vocab shipping varlen datagen modules away python pyext triton clean pytools bench.
want() { [[ " ${GPU_CHECK_STAGES:-tests smoke vocab shipping varlen datagen modules away python pyext triton pytools mps bench} " == *" $1 "* ]]; }
# Each row is also printed as it is made: a call cut short by a time limit still shows them.
row() { rows+=("$(printf '%-44s %-6s %s' "$1" "$2" "$3")"); echo "row: ${rows[-1]}"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader > "$logs/gpu.txt" 2>&1
gpu=$(head -n1 "$logs/gpu.txt")
row "gpu" info "$gpu"

# 1. The GPU test suite: every test executable, the GPU tests
#    included; under CUDAFUZZ_REQUIRE_GPU=1 a GPU test that opens no GPU fails, never skips.
#    GPU_CHECK_TESTS=0 leaves it out (smoke campaigns only) and says so in the table.
if [ "${GPU_CHECK_TESTS:-1}" = 0 ] || ! want tests; then
  echo "test suite not run: GPU_CHECK_TESTS=0" > "$logs/tests.log"; st=skipped
else
  CUDAFUZZ_REQUIRE_GPU=1 $run_tests --test-threads=1 --nocapture > "$logs/tests.log" 2>&1; st=$?
fi
passed=$(grep '^test result' "$logs/tests.log" | grep -Eo '[0-9]+ passed' | awk '{s+=$1} END {print s+0}')
failed=$(grep '^test result' "$logs/tests.log" | grep -Eo '[0-9]+ failed' | awk '{s+=$1} END {print s+0}')
skipped=$(grep -c '^SKIP ' "$logs/tests.log")
row "test suite" "$([ $st = 0 ] && echo ok || { [ $st = skipped ] && echo SKIP; } || echo FAIL)" "$passed passed, $failed failed, $skipped skipped"
for t in misaligned_q_faults gpu_reference_agrees correct_kernel_passes a_hang_is_killed out_of_bounds_write unwritten_last_row; do
  line=$(grep -E "test .*$t.* \.\.\. " "$logs/tests.log" | head -n1 | sed 's/.*\.\.\. //')
  row "  $t" "${line:-?}" ""
done

# 2. Smoke campaigns through the CLI (stage `smoke`).
if want smoke; then
$bin kernels > "$logs/kernels.log" 2>&1; row "cudafuzz kernels" "$([ $? = 0 ] && echo ok || echo FAIL)" "$(tail -n1 "$logs/kernels.log")"
$bin build --arch sm_90 > "$logs/build.log" 2>&1; st=$?
row "cudafuzz build --arch sm_90" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(tail -n1 "$logs/build.log")"
$bin fuzz --kernel simple_attn --cases 3000 --jobs 4 --seed 1 --out "$logs/out-simple" > "$logs/fuzz-simple.log" 2>&1; st=$?
row "fuzz simple_attn: 0 findings (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^simple_attn:' "$logs/fuzz-simple.log" | tail -n1)"
$bin fuzz --kernel vec_load_q --cases 100 --jobs 4 --seed 1 --out "$logs/out-vec" > "$logs/fuzz-vec.log" 2>&1; st=$?
found=$(grep -c 'misaligned_address' "$logs/fuzz-vec.log")
row "fuzz vec_load_q 100 cases: 716 found" "$([ $st = 1 ] && [ "$found" -gt 0 ] && echo ok || echo FAIL)" "$(grep -E '^vec_load_q:' "$logs/fuzz-vec.log" | tail -n1)"
seed=$(ls "$logs"/out-vec/seeds/*misaligned* 2>/dev/null | head -n1)
if [ -n "$seed" ]; then
  $bin repro "$seed" > "$logs/repro.log" 2>&1; st=$?
  row "repro saved 716 seed (exit 1)" "$([ $st = 1 ] && grep -q reproduced "$logs/repro.log" && echo ok || echo FAIL)" "$(grep 'saved signature' "$logs/repro.log" | sed 's/.*: //')"
fi
for k in oob_write skip_last_row; do
  $bin fuzz --kernel $k --cases 100 --jobs 4 --seed 1 --out "$logs/out-$k" > "$logs/fuzz-$k.log" 2>&1; st=$?
  row "fuzz $k: found (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -E "^$k:" "$logs/fuzz-$k.log" | tail -n1 | cut -c1-120)"
done
# Case #64 of every campaign has a tensor past 2^31 elements: the int32_offset mutant faults on it.
$bin fuzz --kernel kernels/mutants/int32_offset.toml --cases 100 --stop-after 1 --escalate none --seed 1 --out "$logs/out-int32" > "$logs/fuzz-int32.log" 2>&1; st=$?
row "fuzz int32_offset 100 cases: found (exit 1)" "$([ $st = 1 ] && grep -q 'case #64' "$logs/fuzz-int32.log" && echo ok || echo FAIL)" "$(grep -m1 -A1 '^NEW' "$logs/fuzz-int32.log" | tail -n1 | sed 's/^ *//' | cut -c1-80)"
fi

# 2b. Latency (stage `latency`, issue 29): every shipped mutant and fa_s512 with the default
#     `fuzz --stop-after 1 --jobs 3`, LATENCY_PARALLEL (5) campaigns at a time; from each first
#     finding's verdict to its FOUND line, and to the line that names it (ci/latency.py).
#     LATENCY_KERNELS picks other manifests.
if want latency; then
  python3 ci/latency.py --bin "$bin" --out "$logs/latency" --parallel "${LATENCY_PARALLEL:-5}" --time "${LATENCY_TIME:-120s}" ${LATENCY_KERNELS:-kernels/mutants/*.toml kernels/attention/fa_s512.toml} > "$logs/latency.txt" 2>&1; st=$?
  cat "$logs/latency.txt"
  row "latency: found by every campaign" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 '^latency: [0-9]' "$logs/latency.txt")"
  row "  named" "$(grep -q '^latency: named' "$logs/latency.txt" && echo ok || echo FAIL)" "$(grep -m1 '^latency: named' "$logs/latency.txt")"
fi
# 2c. Wraps (stage `wraps`, issue 29): the 32-bit-offset mutants' first 256 cases push every
#     tensor that can be pushed past 2^31 elements; each such case must fail within 60 s
#     (`PATH:x` for a mutant that indexes only x in 32 bits: rotary's cos and sin are read at
#     positions, in 64 bits).
if want wraps; then
  python3 ci/latency.py --wraps --bin "$bin" --out "$logs/wraps" --parallel 3 ${WRAPS_KERNELS:-kernels/mutants/int32_offset.toml kernels/mutants/rmsnorm_int32_row.toml kernels/mutants/rotary_int32_row.toml:x kernels/mutants/silu_mul_int32_row.toml kernels/mutants/gemm_int32_offset.toml} > "$logs/wraps.txt" 2>&1; st=$?
  cat "$logs/wraps.txt"
  row "wraps: every pushed tensor found" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 '^wraps:' "$logs/wraps.txt")"
fi

# 2c'. Bug counts and faulting throughput (stage `counts`, issue 29): one bug per missing barrier,
#     two for two independent races, fa_s512's four sites with no provisional twin, vec_load_q's
#     two bugs (the second behind the first's fault) under the harder steering; then fa_s512
#     with 4 jobs for 30 s (cases/s, worker starts, all four bugs) for each of FAULT_SEEDS (default
#     1), and the same with FAULT_BASELINE (another cudafuzz binary) when given.
bugs_of() { python3 -c 'import json,sys
b=json.load(open(sys.argv[1]))["bugs"]
print(len(b), sum(1 for x in b if x["id"].startswith("P")), " ".join(x["id"]+"="+(x.get("site") or x.get("what",""))[:48].replace(" ","_") for x in b))' "$1/bugs.json" 2>/dev/null || echo "? ? no bugs.json"; }
count_row() { # label dir expected-bugs
  read -r n p list <<< "$(bugs_of "$2")"
  row "$1" "$([ "$n" = "$3" ] && [ "$p" = 0 ] && echo ok || echo FAIL)" "$n bugs ($p provisional): $list"
}
if want counts; then
  for k in softmax_no_barrier layernorm_no_barrier; do
    $bin fuzz --kernel kernels/mutants/$k.toml --cases 300 --jobs 3 --seed 1 --out "$logs/out-count-$k" > "$logs/count-$k.log" 2>&1
    count_row "race mutant $k: one bug" "$logs/out-count-$k" 1
  done
  $bin fuzz --kernel kernels/mutants/no_sync.toml --time 60s --jobs 3 --seed 1 --out "$logs/out-count-no_sync" > "$logs/count-no_sync.log" 2>&1
  count_row "race mutant no_sync (60 s): one bug" "$logs/out-count-no_sync" 1
  $bin fuzz --kernel kernels/mutants/softmax_two_races.toml --cases 300 --jobs 3 --seed 1 --out "$logs/out-count-two" > "$logs/count-two.log" 2>&1
  count_row "two independent races: two bugs" "$logs/out-count-two" 2
  $bin fuzz --kernel fa_s512 --cases 1000 --seed 0 --jobs 4 --out "$logs/out-count-fa" > "$logs/count-fa.log" 2>&1
  count_row "fa_s512 1000 cases seed 0: four sites" "$logs/out-count-fa" 4
  $bin fuzz --kernel vec_load_q --cases 1000 --seed 0 --jobs 4 --out "$logs/out-count-vec" > "$logs/count-vec.log" 2>&1
  read -r n p list <<< "$(bugs_of "$logs/out-count-vec")"
  row "vec_load_q 1000 cases: both bugs" "$([ "$n" = 2 ] && echo ok || echo FAIL)" "$n bugs: $list"
  for b in "$bin" ${FAULT_BASELINE:-}; do
   for s in ${FAULT_SEEDS:-1}; do
    tag=$([ "$b" = "$bin" ] && echo this || echo baseline)-$s
    CUDAFUZZ_TRACE="$logs/fault-$tag.trace" $b fuzz --kernel fa_s512 --jobs 4 --time 30s --seed $s --out "$logs/out-fault-$tag" > "$logs/fault-$tag.log" 2>&1
    starts=$(grep -c '"worker_ready"' "$logs/fault-$tag.trace" 2>/dev/null)
    failed=$(grep -c '"outcome": *"fail"' "$logs/fault-$tag.trace" 2>/dev/null)
    read -r n p list <<< "$(bugs_of "$logs/out-fault-$tag")"
    rate=$(grep -E '^fa_s512:' "$logs/fault-$tag.log" | tail -n1 | grep -oE '\(([0-9.]+)/s\)' | tr -d '()/s')
    row "fa_s512 --jobs 4 --time 30s ($tag)" "$(awk -v r="${rate:-0}" -v n="$n" 'BEGIN{print (r>=60 && n==4)?"ok":"FAIL"}')" "${rate:-?} cases/s, $starts worker starts, $failed failed cases, $n bugs; $(grep -E '^fa_s512:' "$logs/fault-$tag.log" | tail -n1 | cut -c1-70)"
   done
  done
fi

# 2d. Contract vocabulary (stage `vocab`, issues 28 and 29): the shared-memory opt-in switch, base
#     alignment apart from stride alignment, the `huge` value class. Each switch is shown both
#     ways: the shipped manifest, and a copy (next to it, removed after) without the line.
if want vocab; then
  t=kernels/mutants/fa_accum_no_optin.toml; loose=kernels/mutants/.gpu-check-optin.toml
  $bin fuzz --kernel $t --cases 300 --jobs 4 --seed 1 --stop-after 1 --escalate none --out "$logs/out-optin" > "$logs/vocab-optin.log" 2>&1; st=$?
  row "no opt-in: launch_rejected found" "$([ $st = 1 ] && grep -q launch_rejected "$logs/vocab-optin.log" && echo ok || echo FAIL)" "$(grep -m1 -A1 '^NEW' "$logs/vocab-optin.log" | tail -n1 | sed 's/^ *//' | cut -c1-60); $(cat "$logs"/out-optin/seeds/*.json 2>/dev/null | grep -m1 -oE '"head_dim": *[0-9]+')"
  sed -e '/^shared_opt_in = false/d' -e '0,/^name = /s/^name = .*/name = "fa_accum_optin"/' $t > $loose
  $bin fuzz --kernel $loose --cases 300 --jobs 4 --seed 1 --out "$logs/out-optin-on" > "$logs/vocab-optin-on.log" 2>&1; st=$?
  row "  with the opt-in: 300 cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^fa_accum_optin:' "$logs/vocab-optin-on.log" | tail -n1 | cut -c1-100)"
  rm -f $loose
  t=kernels/norm/softmax_base16.toml; loose=kernels/norm/.gpu-check-base.toml
  $bin fuzz --kernel $t --cases 2000 --jobs 4 --seed 1 --out "$logs/out-base16" > "$logs/vocab-base16.log" 2>&1; st=$?
  row "base_align = 16: 2000 cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^softmax_base16:' "$logs/vocab-base16.log" | tail -n1 | cut -c1-100)"
  sed -e '/^base_align = 16/d' -e '0,/^name = /s/^name = .*/name = "softmax_base_any"/' $t > $loose
  $bin fuzz --kernel $loose --cases 500 --jobs 4 --seed 1 --stop-after 1 --escalate none --out "$logs/out-base-any" > "$logs/vocab-base-any.log" 2>&1; st=$?
  row "  without it: a misaligned base found" "$([ $st = 1 ] && grep -q misaligned "$logs/vocab-base-any.log" && echo ok || echo FAIL)" "$(grep -m1 -E '^NEW' "$logs/vocab-base-any.log" | cut -c1-90)"
  rm -f $loose
  s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/softmax_no_max.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-nomax" > "$logs/vocab-nomax.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "softmax without max: found within 60 s" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -E '^(FOUND|NEW)' "$logs/vocab-nomax.log" | cut -c1-70)"
  for k in softmax rmsnorm layernorm; do
    $bin fuzz --kernel kernels/norm/$k.toml --cases 3000 --jobs 4 --seed 1 --out "$logs/out-huge-$k" > "$logs/vocab-huge-$k.log" 2>&1; st=$?
    row "  $k with huge values: 3000 clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E "^$k:" "$logs/vocab-huge-$k.log" | tail -n1 | cut -c1-100)"
  done
fi

# 2e. CUDA as it ships (stage `shipping`, issue 28 step 1): a C++ template entry with a param the
#     host derives (gcd), the same kernel from prebuilt nvcc cubins and built by nvcc, a CUB
#     block reduction under NVRTC; the derived dispatch's pitch bug found and reproduced by the
#     Python emitter.
if want shipping; then
  for k in templates/rms_norm_vec templates/rms_norm_vec_prebuilt templates/rms_norm_vec_nvcc norm/rmsnorm_cub; do
    n=$(basename $k)
    $bin fuzz --kernel kernels/$k.toml --cases ${SHIP_CASES:-3000} --jobs 4 --seed 1 --out "$logs/out-ship-$n" > "$logs/ship-$n.log" 2>&1; st=$?
    row "$n: ${SHIP_CASES:-3000} cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E "^$n:" "$logs/ship-$n.log" | tail -n1 | cut -c1-100)"
  done
  s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/rms_norm_vec_pitch.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-pitch" > "$logs/ship-pitch.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "derived VEC, padded rows: found" "$([ $st = 1 ] && grep -q misaligned "$logs/ship-pitch.log" && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -A1 -E '^NEW' "$logs/ship-pitch.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)"
  seed=$(ls "$logs"/out-pitch/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    $bin repro "$seed" --emit python -o "$logs/pitch_repro.py" > "$logs/ship-emit.log" 2>&1
    python3 "$logs/pitch_repro.py" --no-determinism > "$logs/ship-emit-run.log" 2>&1; st=$?
    row "  repro --emit python (template entry)" "$([ $st = 1 ] && grep -q FAIL "$logs/ship-emit-run.log" && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/ship-emit-run.log" | cut -c1-70)"
    $bin repro "$seed" --emit cu -o "$logs/pitch_repro.cu" > "$logs/ship-emit-cu.log" 2>&1 && nvcc -arch=native -lineinfo -o "$logs/pitch_repro" "$logs/pitch_repro.cu" >> "$logs/ship-emit-cu.log" 2>&1 && "$logs/pitch_repro" --no-determinism >> "$logs/ship-emit-cu.log" 2>&1; st=$?
    row "  repro --emit cu, nvcc (template entry)" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/ship-emit-cu.log" | cut -c1-70)"
  fi
  $bin case example --kernel rms_norm_vec_prebuilt > "$logs/prebuilt-seed.json" 2> "$logs/ship-prebuilt-emit.log" \
    && $bin repro "$logs/prebuilt-seed.json" --emit python -o "$logs/prebuilt_repro.py" >> "$logs/ship-prebuilt-emit.log" 2>&1 \
    && python3 "$logs/prebuilt_repro.py" >> "$logs/ship-prebuilt-emit.log" 2>&1; st=$?
  row "  prebuilt module: python repro passes" "$([ $st = 0 ] && grep -q 'prebuilt module' "$logs/ship-prebuilt-emit.log" && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'RESULT' "$logs/ship-prebuilt-emit.log" | cut -c1-70)"
  # Distinct index tensors (issue 28 step 3): the scatter is clean with `distinct = true`, its
  # planted index bug is found, and the same correct kernel without the declaration is
  # flagged: the duplicates that `distinct` rules out.
  $bin fuzz --kernel kernels/index/scatter_rows.toml --cases ${SHIP_CASES:-3000} --jobs 4 --seed 1 --out "$logs/out-scatter" > "$logs/ship-scatter.log" 2>&1; st=$?
  row "scatter_rows (distinct slots): clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^scatter_rows:' "$logs/ship-scatter.log" | tail -n1 | cut -c1-100)"
  s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/scatter_rows_dense_rows.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-scatter-mut" > "$logs/ship-scatter-mut.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "  slot * d index bug: found" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -A1 -E '^NEW' "$logs/ship-scatter-mut.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)"
  loose=kernels/index/.gpu-check-dup.toml
  sed -e '/^distinct = true/d' -e '0,/^name = /s/^name = .*/name = "scatter_rows_dup"/' kernels/index/scatter_rows.toml > $loose
  $bin fuzz --kernel $loose --cases 1000 --jobs 4 --seed 1 --out "$logs/out-scatter-dup" > "$logs/ship-scatter-dup.log" 2>&1; st=$?
  row "  without distinct: duplicates flagged" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -E '^scatter_rows_dup:' "$logs/ship-scatter-dup.log" | tail -n1 | cut -c1-100)"
  rm -f $loose
fi

# 2f. Contract vocabulary (stage `varlen`, issue 28 steps 3-4): variable lengths with derived
#     cu_seqlens and page tables (two correct kernels clean over VARLEN_CASES (5000) cases each,
#     the planted index bug found within 60 s, its seed replayed by the Python emitter and
#     minimized), an fp64-only kernel, a capacity tail and a launch sequence (clean; their
#     mutants found).
if want varlen; then
  for k in varlen/paged_gather varlen/varlen_mean; do
    n=$(basename $k)
    $bin fuzz --kernel kernels/$k.toml --cases ${VARLEN_CASES:-5000} --jobs 4 --seed 1 --out "$logs/out-$n" > "$logs/varlen-$n.log" 2>&1; st=$?
    row "$n: ${VARLEN_CASES:-5000} cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E "^$n:" "$logs/varlen-$n.log" | tail -n1 | cut -c1-100)"
  done
  s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/paged_gather_packed_position.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-packed" > "$logs/varlen-packed.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "  packed-position index bug: found" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -A1 -E '^NEW' "$logs/varlen-packed.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)"
  seed=$(ls "$logs"/out-packed/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    $bin repro "$seed" --emit python -o "$logs/packed_repro.py" > "$logs/varlen-emit.log" 2>&1
    python3 "$logs/packed_repro.py" > "$logs/varlen-emit-run.log" 2>&1; st=$?
    row "  repro --emit python (lengths)" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/varlen-emit-run.log" | cut -c1-70)"
    $bin minimize "$seed" > "$logs/varlen-min.log" 2>&1; st=$?
    row "  minimize (exit 1: still fails)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 '^minimal case' "$logs/varlen-min.log" | grep -o 'seqlens=[^ ]*') $(grep -m1 -o '[0-9]* candidate[^,;]*' "$logs/varlen-min.log")"
  fi
  for k in fp64/row_dot_f64 capacity/box3_tiles sequence/row_sum_two_pass; do
    n=$(basename $k)
    $bin fuzz --kernel kernels/$k.toml --cases ${SHIP_CASES:-3000} --jobs 4 --seed 1 --out "$logs/out-$n" > "$logs/vocab3-$n.log" 2>&1; st=$?
    row "$n: ${SHIP_CASES:-3000} cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E "^$n:" "$logs/vocab3-$n.log" | tail -n1 | cut -c1-100)"
  done
  for k in row_dot_f64_float_acc box3_tiles_exact_buffer row_sum_floor_chunks; do
    s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/$k.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-$k" > "$logs/vocab3-$k.log" 2>&1; st=$?; e=$(date +%s.%N)
    row "  $k: found" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -A1 -E '^NEW' "$logs/vocab3-$k.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)"
  done
fi

# 2e'. Data scheme v2 (stage `datagen`, issue 30): the host's and the GPU's builds of
#      kernels/harness/datagen.h agree bit for bit, about a million values per class and type;
#      a case's arena filled on the device holds the host image's bytes; the device's oracles
#      agree with the host's.
if want datagen; then
  # The oracles on the device (step 2): they send a run to the host exactly when the host
  # oracles report it, and cases of the planted bugs end the same judged either way.
  for pair in gpu_datagen:gpu_and_host gpu_datagen:the_device_fill gpu_judge:the_device_sends gpu_judge:runs_judged_on_the_device; do
    exe=${pair%%:*}; test=${pair#*:}; t=$(ls .gpu/tests/$exe-* 2>/dev/null | head -n1)
    if [ -n "$t" ]; then CUDAFUZZ_REQUIRE_GPU=1 "$t" --nocapture "$test" > "$logs/datagen-$test.log" 2>&1; st=$?
    else CUDAFUZZ_REQUIRE_GPU=1 cargo test --release --test "$exe" -- --nocapture "$test" > "$logs/datagen-$test.log" 2>&1; st=$?; fi
    row "datagen: $test" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 -E '^datagen:|^device fill:|^device oracles:|kernels end the same|panicked|SKIP' "$logs/datagen-$test.log" | cut -c1-100)"
  done
fi

# 2f. Module kinds, launch sequences and empty dims (stage `modules`, issue 28): the template
#     kernel's prebuilt module as a .fatbin (uncompressed, so its names are readable) and as
#     .ptx, both built here by nvcc, 1000 clean cases each; a launch sequence's campaign under
#     memcheck and racecheck stays clean, its planted bug is still found under memcheck, and
#     its standalone repros (cu, python) fail on that bug's seed and pass on a clean case; a
#     kernel whose dims may be 0 stays clean behind its host's guard, and its mutant without it
#     is found, replayed by both repros and minimized.
if want modules; then
  mods=$(mktemp -d kernels/templates/modules.XXXX)
  if command -v nvcc > /dev/null; then
    arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -n1 | tr -d .)
    for kind in fatbin ptx; do
      flags=$([ $kind = fatbin ] && echo "-fatbin --no-compress" || echo "-ptx")
      nvcc $flags -arch=sm_$arch -lineinfo -std=c++17 -o "$mods/rms_norm_vec.$kind" kernels/templates/prebuilt/instantiate.cu > "$logs/modules-$kind-nvcc.log" 2>&1
      sed -e "s#^module = .*#module = \"$(basename "$mods")/rms_norm_vec.$kind\"#" -e "0,/^name = /s/^name = .*/name = \"rms_norm_vec_$kind\"/" kernels/templates/rms_norm_vec_prebuilt.toml > "kernels/templates/rms_norm_vec_$kind.toml"
      $bin fuzz --kernel kernels/templates/rms_norm_vec_$kind.toml --cases 1000 --jobs 4 --seed 1 --out "$logs/out-$kind" > "$logs/modules-$kind.log" 2>&1; st=$?
      row "prebuilt .$kind (nvcc): 1000 clean cases" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E "^rms_norm_vec_$kind:" "$logs/modules-$kind.log" | tail -n1 | cut -c1-90)$(grep -m1 "^cudafuzz:" "$logs/modules-$kind.log" | cut -c1-90)"
      rm -f "kernels/templates/rms_norm_vec_$kind.toml"
    done
  else
    row "prebuilt .fatbin / .ptx" SKIP "no nvcc on this host"
  fi
  rm -rf "$mods"
  $bin fuzz --kernel kernels/sequence/row_sum_two_pass.toml --sanitize memcheck,racecheck --cases 200 --jobs 4 --seed 1 --out "$logs/out-seq-san" > "$logs/modules-seq-san.log" 2>&1; st=$?
  row "launch sequence under memcheck+racecheck" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^row_sum_two_pass:' "$logs/modules-seq-san.log" | tail -n1 | cut -c1-90)"
  $bin fuzz --kernel kernels/mutants/row_sum_floor_chunks.toml --sanitize memcheck --cases 200 --jobs 4 --seed 1 --stop-after 1 --out "$logs/out-seq-san-bug" > "$logs/modules-seq-san-bug.log" 2>&1; st=$?
  row "  its planted bug under memcheck: found" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 -A1 -E '^NEW' "$logs/modules-seq-san-bug.log" | tail -n1 | sed 's/^ *//' | cut -c1-80)"
  timeout 240 $bin contract --kernel kernels/sequence/row_sum_two_pass.toml --out "$logs/out-seq-contract" > "$logs/seq-contract.log" 2>&1; st=$?
  row "  contract on the sequence (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 -iE 'probes|precondition' "$logs/seq-contract.log" | cut -c1-90)"
  timeout 240 $bin contract --kernel kernels/empty/silu_and_mul_empty.toml --out "$logs/out-empty-contract" > "$logs/empty-contract.log" 2>&1; st=$?
  row "  contract on the empty-dims kernel (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 -iE 'probes|precondition' "$logs/empty-contract.log" | cut -c1-90)"
  # Standalone repros of a sequence: its planted bug's seed fails (exit 1), a clean case passes.
  $bin case example --kernel kernels/sequence/row_sum_two_pass.toml > "$logs/seq-clean.json" 2> "$logs/seq-clean.err"
  for want in 1 0; do
    seed=$([ $want = 1 ] && ls "$logs"/out-seq-san-bug/seeds/*.json 2>/dev/null | head -n1 || echo "$logs/seq-clean.json")
    [ -n "$seed" ] || { row "  sequence repros (exit $want)" FAIL "no seed"; continue; }
    $bin repro "$seed" --emit cu -o "$logs/seq$want.cu" > "$logs/seq$want-cu.log" 2>&1 && nvcc -arch=native -lineinfo -o "$logs/seq$want" "$logs/seq$want.cu" >> "$logs/seq$want-cu.log" 2>&1 && "$logs/seq$want" >> "$logs/seq$want-cu.log" 2>&1; st=$?
    row "  sequence repro --emit cu (exit $want)" "$([ $st = $want ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E '^then ' "$logs/seq$want-cu.log" | cut -c1-40); $(grep -m1 -E 'FAIL|PASS' "$logs/seq$want-cu.log" | cut -c1-50)"
    $bin repro "$seed" --emit python -o "$logs/seq$want.py" > "$logs/seq$want-py.log" 2>&1 && python3 "$logs/seq$want.py" >> "$logs/seq$want-py.log" 2>&1; st=$?
    row "  sequence repro --emit python (exit $want)" "$([ $st = $want ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/seq$want-py.log" | cut -c1-70)"
  done
  # Dims that may be 0: the guarded host stays clean; the one that launches an empty grid for an
  # empty batch is found, and its seed replays through both repros and minimizes.
  $bin fuzz --kernel kernels/empty/silu_and_mul_empty.toml --cases ${SHIP_CASES:-3000} --jobs 4 --seed 1 --out "$logs/out-empty" > "$logs/empty-clean.log" 2>&1; st=$?
  row "silu_and_mul_empty: ${SHIP_CASES:-3000} cases clean" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^silu_and_mul_empty:' "$logs/empty-clean.log" | tail -n1 | cut -c1-100)"
  s=$(date +%s.%N); $bin fuzz --kernel kernels/mutants/silu_mul_empty_batch.toml --jobs 3 --seed 1 --stop-after 1 --time 60s --out "$logs/out-empty-bug" > "$logs/empty-bug.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "  silu_mul_empty_batch: found" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -A1 -E '^NEW' "$logs/empty-bug.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)"
  seed=$(ls "$logs"/out-empty-bug/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    $bin repro "$seed" --emit cu -o "$logs/empty.cu" > "$logs/empty-cu.log" 2>&1 && nvcc -arch=native -lineinfo -o "$logs/empty_repro" "$logs/empty.cu" >> "$logs/empty-cu.log" 2>&1 && "$logs/empty_repro" >> "$logs/empty-cu.log" 2>&1; st=$?
    row "  its repro --emit cu (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/empty-cu.log" | cut -c1-70)"
    $bin repro "$seed" --emit python -o "$logs/empty.py" > "$logs/empty-py.log" 2>&1 && python3 "$logs/empty.py" >> "$logs/empty-py.log" 2>&1; st=$?
    row "  its repro --emit python (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -E 'FAIL|PASS' "$logs/empty-py.log" | cut -c1-70)"
    $bin minimize "$seed" > "$logs/empty-min.log" 2>&1; st=$?
    row "  minimize (exit 1: still fails)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 '^minimal case' "$logs/empty-min.log" | cut -c1-90)"
  fi
fi

# 3. A user's kernel outside the repository (stage `away`: the shipped silu_and_mul, and its
#    unchecked-vector mutant, copied into a temporary folder with no kernels/include above it):
#    the built-in headers compile it, a clean campaign stays clean, the mutant's seed replays,
#    emits and minimizes from another directory.
if want away; then
away=$(mktemp -d); mkdir -p "$away/my" "$away/elsewhere"
cp kernels/activation/silu_and_mul.cu kernels/activation/silu_and_mul_ref.cu "$away/my/"
sed 's/^name = "silu_and_mul"/name = "my_silu"/' kernels/activation/silu_and_mul.toml > "$away/my/my_silu.toml"
sed -e '0,/^name = /s/^name = .*/name = "my_unchecked_vec"/' -e 's#"../activation/#"#' kernels/mutants/silu_mul_unchecked_vec.toml > "$away/my/my_unchecked_vec.toml"
(cd "$away" && "$OLDPWD/$bin" fuzz --kernel my/my_silu.toml --cases 1000 --jobs 4 --seed 1 --out out-clean) > "$logs/away-clean.log" 2>&1; st=$?
row "kernel outside the repo: 1000 clean cases" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^my_silu:' "$logs/away-clean.log" | tail -n1 | cut -c1-90)"
(cd "$away" && "$OLDPWD/$bin" fuzz --kernel my/my_unchecked_vec.toml --cases 300 --jobs 4 --seed 1 --stop-after 1 --out out-bug) > "$logs/away-bug.log" 2>&1; st=$?
seed=$(ls "$away"/out-bug/seeds/*.json 2>/dev/null | head -n1)
row "kernel outside the repo: planted bug found" "$([ $st = 1 ] && [ -n "$seed" ] && echo ok || echo FAIL)" "$(grep -m1 -E '^NEW' "$logs/away-bug.log" | cut -c1-90)"
if [ -n "$seed" ]; then
  grep -h '"kernel"' "$seed" > "$logs/away-seed-kernel.txt"
  (cd "$away/elsewhere" && "$OLDPWD/$bin" repro "$seed" --out out) > "$logs/away-repro.log" 2>&1; st=$?
  row "  its seed replays from another dir" "$([ $st = 1 ] && grep -q 'reproduced' "$logs/away-repro.log" && echo ok || echo FAIL)" "$(head -n1 "$logs/away-seed-kernel.txt" | tr -s ' ')"
  (cd "$away/elsewhere" && "$OLDPWD/$bin" repro "$seed" --emit cu --out out) > "$logs/away-emit.log" 2>&1; st=$?
  row "  and emits a .cu there" "$([ $st = 0 ] && ls "$away"/elsewhere/out/repro/*.cu >/dev/null 2>&1 && echo ok || echo FAIL)" "$(grep -m1 '^wrote' "$logs/away-emit.log" | cut -c1-80)"
  (cd "$away/elsewhere" && "$OLDPWD/$bin" minimize "$seed" --out out) > "$logs/away-minimize.log" 2>&1; st=$?
  row "  and minimizes from there (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 -E '^(saved|nothing)' "$logs/away-minimize.log" | cut -c1-80)"
fi
shipped=$(ls "$logs"/out-vec/seeds/*.json 2>/dev/null | head -n1)
if [ -z "$shipped" ]; then  # the smoke stage did not run: a seed of a shipped kernel of its own
  $bin fuzz --kernel vec_load_q --cases 100 --jobs 4 --seed 1 --stop-after 1 --escalate none --out "$logs/out-vec-away" > "$logs/fuzz-vec-away.log" 2>&1
  shipped=$(ls "$logs"/out-vec-away/seeds/*.json 2>/dev/null | head -n1)
fi
if [ -n "$shipped" ]; then
  (cd "$away/elsewhere" && "$OLDPWD/$bin" repro "$OLDPWD/$shipped" --out out2) > "$logs/away-shipped.log" 2>&1; st=$?
  row "shipped kernel's seed replays from another dir" "$([ $st = 1 ] && grep -q 'reproduced' "$logs/away-shipped.log" && echo ok || echo FAIL)" "$(grep -h '"kernel"' "$shipped" | head -n1 | tr -s ' ')"
  (cd "$away/elsewhere" && "$OLDPWD/$bin" repro "$OLDPWD/$shipped" --emit cu --out out3) > "$logs/away-shipped-emit.log" 2>&1; st=$?
  row "  and emits a .cu there" "$([ $st = 0 ] && ls "$away"/elsewhere/out3/repro/*.cu >/dev/null 2>&1 && echo ok || echo FAIL)" "$(grep -m1 '^wrote' "$logs/away-shipped-emit.log" | cut -c1-80)"
  (cd "$away/elsewhere" && "$OLDPWD/$bin" minimize "$OLDPWD/$shipped" --out out3) > "$logs/away-shipped-minimize.log" 2>&1; st=$?
  row "  and minimizes from there (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 -E '^(saved|nothing)' "$logs/away-shipped-minimize.log" | cut -c1-80)"
fi
cp -r "$away/out-bug" "$logs/away-out-bug" 2>/dev/null; rm -rf "$away"
fi
# 4. Python targets (stage `python`): the wheel (.gpu/wheels, staged by ci/gpu-pack-python.sh,
#    or target/wheels) pip-installed into a fresh virtualenv that sees the host's torch and CuPy;
#    a Python worker's start natively and under memcheck (interpreter, imports, CUDA, setup);
#    the CuPy RawKernel clean natively and under memcheck, its planted bug found; torch.softmax
#    returning its output, clean.
if want python || want pyext || want triton || want pytools || want clean; then
# replays SEED TAG: `repro SEED --python` REPLAYS (20) times, each a fresh process; a row with
# how many reproduced (exit 1 and "reproduced").
replays() {
  local n=0 k=${REPLAYS:-20}
  for i in $(seq 1 "$k"); do $bin repro "$1" --python "$py" --out "$logs/out-$2-repro" > "$logs/$2-repro-$i.log" 2>&1; [ $? = 1 ] && grep -q reproduced "$logs/$2-repro-$i.log" && n=$((n+1)); done
  row "  its seed replays" "$([ $n = "$k" ] && echo ok || echo FAIL)" "$n/$k reproduced ($(basename "$1"))"
}
wheel=$(ls .gpu/wheels/cudafuzz-*.whl target/wheels/cudafuzz-*.whl 2>/dev/null | head -n1)
pyroot=$(mktemp -d); venv="$pyroot/venv"; py="$venv/bin/python"
if [ -z "$wheel" ]; then
  row "python: pip install of the wheel" FAIL "no wheel in .gpu/wheels or target/wheels"
else
  # The host's torch and CuPy may live in a virtualenv of their own (whose packages
  # --system-site-packages does not reach): a .pth file makes them visible.
  host_site=$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  python3 -m venv "$venv" > "$logs/py-install.log" 2>&1 && echo "$host_site" > "$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/host-packages.pth" \
    && "$py" -m pip install --no-index --no-deps "$wheel" >> "$logs/py-install.log" 2>&1; st=$?
  row "python: pip install of the wheel (fresh venv)" "$([ $st = 0 ] && "$py" -m cudafuzz --version >/dev/null 2>&1 && echo ok || echo FAIL)" "$(basename "$wheel"), $("$py" --version 2>&1)"
  if want python; then
  for k in cupy_softmax torch_softmax; do
    s=$(date +%s.%N); echo | "$py" -m cudafuzz worker --target "kernels/python/$k.toml" > "$logs/start-$k.log" 2>&1; st=$?; e=$(date +%s.%N)
    s2=$(date +%s.%N); echo | compute-sanitizer --tool memcheck "$py" -m cudafuzz worker --target "kernels/python/$k.toml" > "$logs/start-memcheck-$k.log" 2>&1; st2=$?; e2=$(date +%s.%N)
    row "  worker start, $k: native / memcheck" "$([ $st = 0 ] && [ $st2 = 0 ] && grep -q '"event":"ready"' "$logs/start-$k.log" && echo ok || echo FAIL)" "$(echo "$s $e $s2 $e2" | awk '{printf "%.2f s / %.2f s (python, imports, cuInit, setup)", $2-$1, $4-$3}')"
  done
  "$py" -m cudafuzz fuzz --kernel kernels/python/cupy_softmax.toml --cases 5000 --jobs 4 --seed 1 --out "$logs/out-cupy" > "$logs/py-cupy.log" 2>&1; st=$?
  row "  cupy_softmax 5000 cases: 0 findings" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^cupy_softmax:' "$logs/py-cupy.log" | tail -n1 | cut -c1-110)"
  $bin fuzz --python "$py" --kernel kernels/python/cupy_softmax.toml --cases 300 --jobs 4 --seed 2 --sanitize memcheck --out "$logs/out-cupy-mc" > "$logs/py-cupy-memcheck.log" 2>&1; st=$?
  row "  cupy_softmax 300 cases under memcheck: 0" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^cupy_softmax:' "$logs/py-cupy-memcheck.log" | tail -n1 | cut -c1-110)"
  $bin fuzz --python "$py" --kernel kernels/python/cupy_softmax_unmasked_tail.toml --cases 2000 --jobs 4 --seed 1 --stop-after 1 --out "$logs/out-cupy-bug" > "$logs/py-cupy-bug.log" 2>&1; st=$?
  row "  cupy_softmax_unmasked_tail: found (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 -E '^NEW' "$logs/py-cupy-bug.log" | cut -c1-110)"
  $bin fuzz --python "$py" --kernel kernels/python/cupy_softmax_unmasked_tail.toml --cases 100 --jobs 2 --seed 1 --stop-after 1 --sanitize memcheck --out "$logs/out-cupy-bug-mc" > "$logs/py-cupy-bug-memcheck.log" 2>&1; st=$?
  row "  ... under memcheck: found (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(grep -m1 -E '^NEW' "$logs/py-cupy-bug-memcheck.log" | cut -c1-110)"
  "$py" -m cudafuzz fuzz --kernel kernels/python/torch_softmax.toml --cases 2000 --jobs 4 --seed 1 --out "$logs/out-torch" > "$logs/py-torch.log" 2>&1; st=$?
  row "  torch_softmax 2000 cases: 0 findings" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^torch_softmax:' "$logs/py-torch.log" | tail -n1 | cut -c1-110)"
  $bin fuzz --python "$py" --kernel kernels/python/torch_softmax.toml --cases 100 --jobs 4 --seed 2 --sanitize memcheck --out "$logs/out-torch-mc" > "$logs/py-torch-memcheck.log" 2>&1; st=$?
  row "  torch_softmax 100 cases under memcheck: 0" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^torch_softmax:' "$logs/py-torch-memcheck.log" | tail -n1 | cut -c1-110)"
  $bin contract --python "$py" --kernel kernels/python/cupy_softmax.toml --cases-per-probe 2 --out "$logs/out-cupy-contract" > "$logs/py-contract.log" 2>&1; st=$?
  row "  contract cupy_softmax: rejection = precondition" "$(grep -q 'rejected by the target' "$logs/py-contract.log" && echo ok || echo FAIL)" "exit $st: $(grep -m1 'rejected by the target' "$logs/py-contract.log" | sed 's/^ *//' | cut -c1-100)"
  seed=$(ls "$logs"/out-cupy-bug/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    replays "$seed" cupy
    $bin repro "$seed" --emit python -o "$logs/py-repro-cupy.py" > "$logs/py-emit.log" 2>&1
    "$py" "$logs/py-repro-cupy.py" > "$logs/py-emitted-run.log" 2>&1; st=$?
    row "  repro --emit python: the script reproduces" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -iE 'FAIL|finding' "$logs/py-emitted-run.log" | cut -c1-90)"
  fi
  fi
  # 5. The seed's kernel through its PyTorch extension (stage `pyext`): built once (the setup),
  #    then timed; a host-code bug planted in its wrapper.
  if want pyext; then
  s=$(date +%s.%N); echo | "$py" -m cudafuzz worker --target kernels/python/fa_s512_torch.toml > "$logs/py-fa-build.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "  fa_s512 extension built (setup)" "$([ $st = 0 ] && grep -q '"event":"ready"' "$logs/py-fa-build.log" && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s (nvcc through torch.utils.cpp_extension.load)", $2-$1}'); $(command -v ninja >/dev/null && echo ninja || echo 'no ninja on PATH')"
  s=$(date +%s.%N); CUDAFUZZ_TRACE="$logs/trace-fa.jsonl" $bin fuzz --python "$py" --kernel kernels/python/fa_s512_torch.toml --jobs 4 --seed 1 --stop-after 1 --time 120s --out "$logs/out-fa" > "$logs/py-fa.log" 2>&1; st=$?; e=$(date +%s.%N)
  row "  fa_s512_torch: 716 found and named" "$([ $st = 1 ] && grep -q 'misaligned' "$logs/py-fa.log" && echo ok || echo FAIL)" "$(grep -m1 -oE '^FOUND after [0-9.]+ s' "$logs/py-fa.log"); $(grep -m1 -E '^NEW' "$logs/py-fa.log" | cut -c1-40); $(grep -m1 -A1 -E '^NEW' "$logs/py-fa.log" | tail -n1 | sed 's/^ *//' | cut -c1-60); site $(grep -m1 -oE 'fa_s512.cu:[0-9]+' "$logs/py-fa.log"); campaign $(echo "$s $e" | awk '{printf "%.1f s", $2-$1}')"
  # FA_RUNS (1) campaigns in all, for the spread of that time.
  for r in $(seq 2 "${FA_RUNS:-1}"); do
    s=$(date +%s.%N); CUDAFUZZ_TRACE="$logs/trace-fa-$r.jsonl" $bin fuzz --python "$py" --kernel kernels/python/fa_s512_torch.toml --jobs 4 --seed "$r" --stop-after 1 --time 120s --out "$logs/out-fa-$r" > "$logs/py-fa-$r.log" 2>&1; st=$?; e=$(date +%s.%N)
    row "  fa_s512_torch again (seed $r)" "$([ $st = 1 ] && grep -q 'misaligned' "$logs/py-fa-$r.log" && echo ok || echo FAIL)" "$(grep -m1 -E '^NEW' "$logs/py-fa-$r.log" | cut -c1-40); site $(grep -m1 -oE 'fa_s512.cu:[0-9]+' "$logs/py-fa-$r.log"); campaign $(echo "$s $e" | awk '{printf "%.1f s", $2-$1}')"
  done
  seed=$(ls "$logs"/out-fa/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    replays "$seed" fa
    $bin repro "$seed" --emit python -o "$logs/py-repro-fa.py" > "$logs/py-emit-fa.log" 2>&1
    "$py" "$logs/py-repro-fa.py" > "$logs/py-emitted-fa.log" 2>&1; st=$?
    row "  fa_s512_torch --emit python reproduces" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -iE 'FAIL|finding' "$logs/py-emitted-fa.log" | cut -c1-90)"
  fi
  $bin fuzz --python "$py" --kernel kernels/python/fa_s512_torch_smem_from_seq.toml --jobs 4 --seed 1 --stop-after 1 --cases 300 --escalate none --out "$logs/out-fa-smem" > "$logs/py-fa-smem.log" 2>&1; st=$?
  row "  host-code bug (smem from seq_k): finding" "$([ $st = 1 ] && grep -q 'launch_rejected' "$logs/py-fa-smem.log" && echo ok || echo FAIL)" "$(grep -m1 -A1 -E '^NEW' "$logs/py-fa-smem.log" | tail -n1 | sed 's/^ *//' | cut -c1-100)"
  seed=$(ls "$logs"/out-fa-smem/seeds/*.json 2>/dev/null | head -n1)
  [ -n "$seed" ] && replays "$seed" fa-smem
  $bin fuzz --python "$py" --kernel kernels/python/simple_attn_sdpa.toml --cases 2000 --jobs 4 --seed 1 --out "$logs/out-sdpa" > "$logs/py-sdpa.log" 2>&1; st=$?
  row "  simple_attn judged by SDPA (Python ref)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^simple_attn_sdpa:' "$logs/py-sdpa.log" | tail -n1 | cut -c1-110)"
  # The same cases through the extension and through the native manifest, one worker each way.
  if [ "${GPU_CHECK_PYBENCH:-1}" != 0 ]; then
  timeout 300 $bin bench --python "$py" --kernel kernels/python/fa_s512_torch.toml --against kernels/attention/fa_s512.toml --align 16 --cases 300 --json "$logs/bench-fa.json" > "$logs/bench-fa.log" 2>&1; st=$?
  row "  bench: a case through Python vs native" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -m1 'cost of the same case' "$logs/bench-fa.log" | sed 's/cost of the same case: //' | cut -c1-100)"
  row "  bench: misaligned case (fault + restart)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(sed -n 's/^[a-z-]*, \([^,]*\), misaligned: fault + restart *[0-9]* *\([0-9.]*\).*/\1 \2 cases\/s/p' "$logs/bench-fa.log" | sort -u | paste -sd ';' | cut -c1-100)"

  fi
  fi
  # 6. Triton (stage `triton`): the tutorial's fused softmax clean, natively and under memcheck;
  #    each planted bug found within 60 s of the campaign's start; a seed's replays and its
  #    emitted script.
  if want triton; then
  "$py" -m cudafuzz fuzz --kernel kernels/python/triton_softmax.toml --cases 5000 --jobs 4 --seed 1 --out "$logs/out-triton" > "$logs/triton.log" 2>&1; st=$?
  row "  triton_softmax 5000 cases: 0 findings" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^triton_softmax:' "$logs/triton.log" | tail -n1 | cut -c1-110)"
  $bin fuzz --python "$py" --kernel kernels/python/triton_softmax.toml --cases ${TRITON_MEMCHECK_CASES:-300} --jobs 4 --seed 2 --sanitize memcheck --out "$logs/out-triton-mc" > "$logs/triton-memcheck.log" 2>&1; st=$?
  row "  triton_softmax under memcheck: 0" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^triton_softmax:' "$logs/triton-memcheck.log" | tail -n1 | cut -c1-110)"
  for bug in unmasked_store input_stride offsets32; do
    s=$(date +%s.%N); $bin fuzz --python "$py" --kernel kernels/python/triton_softmax_$bug.toml --jobs 4 --seed 1 --stop-after 1 --time 60s --out "$logs/out-triton-$bug" > "$logs/triton-$bug.log" 2>&1; st=$?; e=$(date +%s.%N)
    row "  triton $bug: found within 60 s" "$([ $st = 1 ] && echo ok || echo FAIL)" "$(echo "$s $e" | awk '{printf "%.1f s; ", $2-$1}')$(grep -m1 -E '^NEW' "$logs/triton-$bug.log" | cut -c1-80)"
  done
  "$py" -m pytest -q -p no:cacheprovider examples/pytest > "$logs/pytest-example.log" 2>&1; st=$?
  row "  pytest example: 1 passes, 1 fails with table" "$([ $st = 1 ] && grep -q '1 failed, 1 passed' "$logs/pytest-example.log" && grep -q 'BugsFound' "$logs/pytest-example.log" && echo ok || echo FAIL)" "$(tail -n1 "$logs/pytest-example.log" | cut -c1-100)"
  seed=$(ls "$logs"/out-triton-unmasked_store/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    replays "$seed" triton
    $bin repro "$seed" --emit python -o "$logs/triton-repro.py" > "$logs/triton-emit.log" 2>&1
    "$py" "$logs/triton-repro.py" > "$logs/triton-emitted-run.log" 2>&1; st=$?
    row "  repro --emit python: the script reproduces" "$([ $st = 1 ] && echo ok || echo FAIL)" "exit $st: $(grep -m1 -iE 'FAIL|finding' "$logs/triton-emitted-run.log" | cut -c1-90)"
  fi
  fi
  # 7. Clean Python targets at length (stage `clean`): CLEAN_CASES (5000) cases of each of
  #    CLEAN_TARGETS, natively and under memcheck (CLEAN_MODES), CLEAN_JOBS (8) workers; each
  #    campaign within CLEAN_LIMIT seconds (300), so one slow target does not hide the others,
  #    or ended by its own --time CLEAN_TIME (then it says how many cases it ran).
  if want clean; then
  for k in ${CLEAN_TARGETS:-cupy_softmax torch_softmax triton_softmax simple_attn_sdpa}; do
    for mode in ${CLEAN_MODES:-native memcheck}; do
      san=(); [ "$mode" = memcheck ] && san=(--sanitize memcheck)
      [ -n "${CLEAN_TIME:-}" ] && san+=(--time "$CLEAN_TIME")
      s=$(date +%s.%N); timeout "${CLEAN_LIMIT:-300}" $bin fuzz --python "$py" --kernel "kernels/python/$k.toml" --cases "${CLEAN_CASES:-5000}" --jobs "${CLEAN_JOBS:-8}" --seed 3 "${san[@]}" --out "$logs/out-clean-$k-$mode" > "$logs/clean-$k-$mode.log" 2>&1; st=$?; e=$(date +%s.%N)
      row "  $k ${CLEAN_CASES:-5000} cases, $mode: 0 findings" "$([ $st = 0 ] && echo ok || echo FAIL)" "exit $st, $(echo "$s $e" | awk '{printf "%.0f s", $2-$1}'); $(grep -E "^$k:" "$logs/clean-$k-$mode.log" | tail -n1 | cut -c1-100)"
    done
  done
  fi
  # 8. The other tools on Python targets (stage `pytools`): minimize a Triton seed, and a nightly
  #    gate (ci/gate-python.toml: fuzz, sweep, memcheck pass) over the Triton and CuPy targets.
  if want pytools; then
  $bin fuzz --python "$py" --kernel kernels/python/triton_softmax_unmasked_store.toml --jobs 2 --seed 3 --stop-after 1 --escalate none --out "$logs/out-pt" > "$logs/pt-fuzz.log" 2>&1
  seed=$(ls "$logs"/out-pt/seeds/*.json 2>/dev/null | head -n1)
  if [ -n "$seed" ]; then
    $bin minimize "$seed" --python "$py" --max-runs 60 --out "$logs/out-pt-min" > "$logs/pt-minimize.log" 2>&1; st=$?
    row "  minimize a Triton seed" "$([ $st = 1 ] || [ $st = 0 ] && echo ok || echo FAIL)" "exit $st: $(tail -n1 "$logs/pt-minimize.log" | cut -c1-100)"
  else
    row "  minimize a Triton seed" FAIL "no seed from $logs/pt-fuzz.log"
  fi
  timeout 200 $bin gate --config ci/gate-python.toml --python "$py" --budget 100s --out "$logs/out-gate-py" > "$logs/pt-gate.log" 2>&1; st=$?
  row "  gate over Python targets (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "exit $st: $(tail -n1 "$logs/pt-gate.log" | cut -c1-100)"
  fi
fi
rm -rf "$pyroot"
fi
# 2g. Workers sharing the GPU through MPS (stage `mps`, issue 30 step 3): the default set's
#     campaign with 8 workers under `--gpu-sharing mps` finds the same bugs on the same cases as
#     `--gpu-sharing turns`, with no harness error (a fault under MPS reaches every worker; its
#     cases run again alone), and leaves no MPS daemon behind; the bench row of 8 workers each way.
if want mps; then
  for mode in turns mps; do
    timeout 300 $bin fuzz --cases 300 --jobs 8 --seed 5 --escalate none --gpu-sharing $mode --out "$logs/out-mps-$mode" > "$logs/mps-fuzz-$mode.log" 2>&1
    grep -E '^NEW' "$logs/mps-fuzz-$mode.log" | sed -E 's/after [0-9.]+ s //' > "$logs/mps-new-$mode.txt"
  done
  errors=$(grep -E ': 300 cases in' "$logs/mps-fuzz-mps.log" | grep -vc ' 0 errors')
  same=$(cmp -s "$logs/mps-new-turns.txt" "$logs/mps-new-mps.txt" && echo yes || echo no)
  left=$(pgrep -c -f 'nvidia-cuda-mps-(control|server)')
  row "mps: same bugs as turns, 0 errors" "$([ $same = yes ] && [ "$errors" = 0 ] && [ "$left" = 0 ] && [ -s "$logs/mps-new-mps.txt" ] && echo ok || echo FAIL)" "$(wc -l < "$logs/mps-new-mps.txt") new bugs; kernels with errors: $errors; daemons left: $left"
  for mode in turns mps; do
    timeout 120 $bin bench --cases 1000 --jobs 8 --gpu-sharing $mode --out "$logs/out-mps-bench" > "$logs/mps-bench-$mode.log" 2>&1; st=$?
    row "  bench 8 workers, --gpu-sharing $mode" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E 'workers on' "$logs/mps-bench-$mode.log" | awk '{for(i=1;i<=NF;i++) if ($i ~ /^[0-9]+$/ && $(i-1) ~ /^[0-9]+$/) {print $i " cases/s"; exit}}')"
  done
fi
if [ "${GPU_CHECK_BENCH:-1}" = 0 ] || ! want bench; then
  echo "bench not run: GPU_CHECK_BENCH=0" > "$logs/bench.log"; row "bench (small cases)" SKIP "GPU_CHECK_BENCH=0"
else
  timeout 240 $bin bench --cases 1000 --jobs 4 --json "$logs/bench.json" > "$logs/bench.log" 2>&1; st=$?
  row "bench (small cases)" "$([ $st = 0 ] && echo ok || echo FAIL)" "see below"
fi

{
echo
echo "== gpu-check summary ($(date -u +%F))"
printf '%s\n' "${rows[@]}"
echo
cat "$logs/bench.log"
} 2>&1 | tee "$logs/summary.txt"
# On the device tool, $OUT comes back: one archive of every log and seed.
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-check-logs.tgz" "$logs"; cp "$logs/summary.txt" "$OUT/"; fi
