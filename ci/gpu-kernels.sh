#!/usr/bin/env bash
# GPU check of the shipped kernels (issue "Kernels"): flash_fwd correctness and agreement with
# PyTorch SDPA, the fa_s512 failure matrix, the mutant zoo's time to first finding, and
# compute-sanitizer probes. Uses binaries staged in .gpu/ by ../shared/tools/gpu-pack.
#   bash ci/gpu-kernels.sh [STAGE...]    stages: probe flash flash100k sdpa fa_s512 mutants bench
#                                        sanitizer (GPU sanitizer tests + throughput) escalate
# Default: every stage but flash100k and bench. Logs go to gpu-kernel-logs/ (and $OUT as a tarball);
# a summary table is printed last.
set -uo pipefail
cd "$(dirname "$0")/.."
logs=gpu-kernel-logs
rm -rf "$logs"; mkdir -p "$logs"
bin=.gpu/bin/cudafuzz
[ -x "$bin" ] || { echo "gpu-kernels: no $bin: run ../shared/tools/gpu-pack first" >&2; exit 4; }
stages=("$@"); [ ${#stages[@]} -gt 0 ] || stages=(probe flash sdpa fa_s512 mutants)
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
jobs=${JOBS:-12}
rows=()
row() { rows+=("$(printf '%-40s %-6s %s' "$1" "$2" "$3")"); }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
row gpu info "$(head -n1 "$logs/gpu.txt")"

# Campaign summary line and the first finding's time of a fuzz log.
summary() { grep -E "^$2: [0-9]+ cases" "$1" | tail -n1 | sed -E 's/ in ([0-9.]+ s).*passed, ([0-9]+) failed, ([0-9]+) errors; ([0-9]+) distinct.*/ \1 fail=\2 err=\3 distinct=\4/'; }
first() { grep -m1 -Eo 'NEW   after [0-9.]+ s' "$1" | grep -Eo '[0-9.]+ s' || echo "-"; }

if want probe; then
  # compute-sanitizer on a plain CUDA program with one planted bug per tool (XML fixtures).
  p="$logs/probe"; mkdir -p "$p"
  if nvcc -lineinfo -arch=sm_90 -o "$p/probe" kernels/tools/sanitizer_probe.cu -lcuda > "$p/nvcc.log" 2>&1; then
    compute-sanitizer --version > "$p/version.txt" 2>&1
    for spec in memcheck:oob:--padding=512 memcheck:oob-nopad: memcheck:misaligned: racecheck:race: initcheck:uninit: synccheck:sync: \
                memcheck:clean: racecheck:clean: initcheck:clean: synccheck:clean:; do
      IFS=: read -r tool mode opt <<< "$spec"
      m=${mode%-nopad}
      timeout 60 compute-sanitizer --tool "$tool" $opt --xml --save "$p/$tool-$mode.xml" --error-exitcode 99 \
        "$p/probe" "$m" "$p/$tool-$mode.xml" > "$p/$tool-$mode.txt" 2>&1
      st=$?
      n=$(grep -c '<record>' "$p/$tool-$mode.xml" 2>/dev/null || echo 0)
      row "sanitizer $tool $mode" "rc=$st" "$n records"
      timeout 60 compute-sanitizer --tool "$tool" $opt "$p/probe" "$m" > "$p/$tool-$mode.text.txt" 2>&1
    done
    # The harness's own worker under memcheck: a driver-API cubin (file and line from -lineinfo).
    $bin case example --kernel oob_write > "$p/case.json" 2>/dev/null
    timeout 120 compute-sanitizer --tool memcheck --padding 4096 --xml --save "$p/worker-oob.xml" --error-exitcode 99 \
      $bin run --kernel oob_write --no-determinism --out "$p/out" "$p/case.json" > "$p/worker-oob.txt" 2>&1
    row "sanitizer memcheck cudafuzz run oob_write" "rc=$?" "$(grep -c '<record>' "$p/worker-oob.xml" 2>/dev/null || echo 0) records"
  else
    row "sanitizer probe build" FAIL "see probe/nvcc.log"
  fi
fi

if want flash; then
  for k in flash_fwd flash_fwd_hd128 flash_fwd_hd64; do
    timeout 100 $bin fuzz --kernel kernels/attention/$k.toml --cases 100000 --time ${FLASH_TIME:-30s} --jobs $jobs --seed 1 \
      --out "$logs/out-$k" > "$logs/fuzz-$k.log" 2>&1; st=$?
    row "fuzz $k (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(summary "$logs/fuzz-$k.log" "$k")"
  done
fi

if want flash100k; then
  # FLASH_SET: manifest:draws[:time] (one campaign each, seed FLASH_SEED), e.g. "flash_fwd:30000:60s".
  for spec in ${FLASH_SET:-flash_fwd:34000 flash_fwd_hd128:33000 flash_fwd_hd64:33000}; do
    IFS=: read -r k n t <<< "$spec"
    timeout 420 $bin fuzz --kernel kernels/attention/$k.toml --cases "$n" ${t:+--time $t} --jobs $jobs --seed ${FLASH_SEED:-7} \
      --out "$logs/out100k-$k" > "$logs/fuzz100k-$k.log" 2>&1; st=$?
    row "fuzz $k $n cases (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(summary "$logs/fuzz100k-$k.log" "$k")"
  done
fi

if want sdpa; then
  PYTHONUNBUFFERED=1 timeout 120 python3 kernels/tools/flash_fwd_sdpa.py agree 40 > "$logs/sdpa-agree.log" 2>&1; st=$?
  row "flash_fwd vs torch SDPA" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep -E '^agree:' "$logs/sdpa-agree.log" | tail -n1)"
fi

if want fa_s512; then
  # The seed's failure matrix. Faulting cases cost a worker restart each (~0.5 s, serialised in
  # the driver), so the four always-failing configurations get fewer repetitions by default.
  start=$(date +%s)
  timeout 240 $bin sweep --kernel fa_s512 --repeat ${SWEEP_REPEAT:-100} --classes aligned,misaligned,q-pitch+1,tail,causal \
    --jobs $jobs --no-determinism --json "$logs/fa_s512-matrix.json" --out "$logs/out-sweep" > "$logs/fa_s512-matrix.txt" 2> "$logs/fa_s512-sweep.log"
  row "sweep fa_s512 baseline" "rc=$?" "$(( $(date +%s) - start )) s, table below"
  start=$(date +%s)
  timeout 240 $bin sweep --kernel fa_s512_128_32_8 --kernel fa_s512_80_64_8 --kernel fa_s512_80_64_4 --kernel fa_s512_64_64_8 \
    --repeat ${SWEEP_REPEAT_OTHERS:-20} --classes aligned,misaligned --jobs $jobs --no-determinism \
    --json "$logs/fa_s512-others.json" --out "$logs/out-sweep2" > "$logs/fa_s512-others.txt" 2> "$logs/fa_s512-sweep2.log"
  row "sweep fa_s512 other configurations" "rc=$?" "$(( $(date +%s) - start )) s, table below"
fi

if want mutants; then
  for t in kernels/mutants/*.toml; do
    k=$(basename "$t" .toml)
    timeout 100 $bin fuzz --kernel "$t" --cases 100000 --time ${MUTANT_TIME:-15s} --stop-after 1 --jobs $jobs --seed 1 \
      --out "$logs/out-mut-$k" > "$logs/mut-$k.log" 2>&1; st=$?
    sig=$(grep -m1 -A1 '^NEW' "$logs/mut-$k.log" | tail -n1 | sed 's/^ *//' | cut -c1-70)
    row "mutant $k" "$([ $st = 1 ] && echo found || echo MISSED)" "$(first "$logs/mut-$k.log") ${sig}"
  done
fi

if want sanitizer; then
  # The harness under compute-sanitizer: per-tool planted bugs, clean kernels, batch attribution.
  # First the worker alone under each tool with the harness's options (does the tool start?).
  for tool in memcheck racecheck initcheck synccheck; do
    opts=""; [ $tool = memcheck ] && opts="--padding=4096 --report-api-errors=explicit --leak-check=no"
    [ $tool = racecheck ] && opts="--racecheck-report=analysis"
    timeout 60 compute-sanitizer --tool $tool $opts --xml --save "$logs/start-$tool.xml" --log-file "$logs/start-$tool.log" \
      --error-exitcode=99 $bin worker --gpu 0 < /dev/null > "$logs/start-$tool.out" 2>&1
    row "worker starts under $tool" "rc=$?" "$(head -c 60 "$logs/start-$tool.out" | tr '\n' ' ')"
  done
  for t in .gpu/tests/gpu_sanitizer-*; do
    timeout 400 "$t" --test-threads=2 --nocapture > "$logs/gpu-sanitizer-tests.log" 2>&1; st=$?
    row "gpu_sanitizer tests" "$([ $st = 0 ] && echo ok || echo FAIL)" "$(grep '^test result' "$logs/gpu-sanitizer-tests.log" | tail -n1 | cut -c1-60)"
    while read -r line; do row "  ${line#test }" "" ""; done < <(grep -E '^test .* \.\.\. (ok|FAILED)' "$logs/gpu-sanitizer-tests.log" | sed 's/ \.\.\. / /')
    while read -r line; do row "  $line" "" ""; done < <(grep -E 'sanitizer process\(es\), flagged' "$logs/gpu-sanitizer-tests.log")
  done
  for tool in memcheck racecheck; do
    timeout 200 $bin bench --cases ${SAN_CASES:-200} --jobs ${SAN_JOBS:-4} --sanitize $tool --json "$logs/bench-$tool.json" --out "$logs/out-bench-$tool" > "$logs/bench-$tool.log" 2>&1
    row "bench --sanitize $tool (persistent)" "rc=$?" "see below"
    timeout 120 $bin bench --cases ${SAN_CASES_1:-20} --sanitize $tool --sanitize-batch 1 --json "$logs/bench-$tool-1.json" --out "$logs/out-bench-$tool-1" > "$logs/bench-$tool-1.log" 2>&1
    row "bench --sanitize $tool (process per case)" "rc=$?" "see below"
  done
fi

if want escalate; then
  # Each fa_s512 configuration: time to the first native finding, then memcheck names the line.
  for k in fa_s512 fa_s512_128_32_8 fa_s512_80_64_8 fa_s512_80_64_4 fa_s512_64_64_8 kernels/mutants/no_sync.toml kernels/mutants/seqk_tail.toml; do
    n=$(basename $k .toml)
    timeout 100 $bin fuzz --kernel $k --cases 10000 --time 30s --stop-after 1 --jobs 4 --seed 1 --escalate memcheck,racecheck \
      --out "$logs/out-esc-$n" > "$logs/esc-$n.log" 2>&1
    row "fuzz+sanitizer $n" "$(first "$logs/esc-$n.log")" "$(grep -m1 'named by' "$logs/esc-$n.log" | grep -Eo '[a-z_0-9]+[.]cu[h]?:[0-9]+ in [a-z_0-9]+' | head -n1)"
  done
fi

if want bench; then
  PYTHONUNBUFFERED=1 timeout 300 python3 kernels/tools/flash_fwd_sdpa.py bench --json "$logs/flash-bench.json" > "$logs/flash-bench.log" 2>&1
  row "flash_fwd TFLOP/s vs SDPA" "rc=$?" "table below"
fi

{
echo
echo "== gpu-kernels summary ($(date -u +%F))"
printf '%s\n' "${rows[@]}"
for f in fa_s512-matrix fa_s512-others; do [ -f "$logs/$f.txt" ] && { echo; cat "$logs/$f.txt"; }; done
[ -f "$logs/flash-bench.log" ] && { echo; tail -n 30 "$logs/flash-bench.log"; }
for f in "$logs"/bench-*.log; do [ -f "$f" ] && { echo; echo "== $f"; tail -n 8 "$f"; }; done
} 2>&1 | tee "$logs/summary.txt"
if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-kernel-logs.tgz" "$logs"; cp "$logs/summary.txt" "$OUT/"; fi
