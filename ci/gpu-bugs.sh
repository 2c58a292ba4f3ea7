#!/usr/bin/env bash
# gpu-bugs.sh: the GPU figures of issue 20 (one bug, one finding; bugs behind bugs; sanitizer
# runs that keep time). Every command's output lines are time-stamped (seconds since it started).
#
#   bash ci/gpu-bugs.sh [faulting] [stop] [sanitize] [gate] [main]   (no argument: all)
#
#   faulting  `cudafuzz fuzz --kernel fa_s512 --jobs 4 --time 30s` (plus FAULTING_ARGS): cases/s
#             over the whole process (start-up included), worker starts, cases steered, bugs; the
#             per-case trace (CUDAFUZZ_TRACE) is kept as trace-faulting.jsonl.
#   stop      `cudafuzz fuzz --kernel M --jobs 4 --stop-after 1 --time $STOP_TIME` (default 60s) on each shipped mutant
#             (kernels/mutants/*.toml, or MUTANTS): seconds from the first NEW line (printed after
#             its escalation) to the process's exit; the limit is 2 s.
#   sanitize  `cudafuzz fuzz --kernel K --sanitize memcheck --time 60s` on flash_fwd, simple_attn
#             and a mutant (SAN_MUTANT, default seqk_tail): wall time (limit 66 s), the first NEW
#             line's time, and from CUDAFUZZ_TRACE the longest wait between two batches' results
#             (a finding is printed at most that long after its case started).
#   gate      `cudafuzz gate --config ci/gate-one-bug.toml --budget 3m`: exactly one new bug.
#   main      the README's main command, `cudafuzz fuzz --jobs 4 --time 60s`, over MAIN_KERNELS
#             (default: every kernel it fuzzes; a 10-minute host limit may need two halves), then
#             `cudafuzz triage` over its output: the bug table.
#
# Needs a GPU and the cudafuzz binary ($CUDAFUZZ, else .gpu/bin/cudafuzz, else
# target/release/cudafuzz). Logs go to $OUT (default gpu-bugs-logs); the table comes last.
set -uo pipefail
cd "$(dirname "$0")/.."
bin=${CUDAFUZZ:-$( [ -x .gpu/bin/cudafuzz ] && echo .gpu/bin/cudafuzz || echo target/release/cudafuzz )}
logs=${OUT:-gpu-bugs-logs}
mkdir -p "$logs"
stages=("$@")
[ ${#stages[@]} -eq 0 ] && stages=(faulting stop sanitize gate main)
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
rows=()
row() { rows+=("$(printf '| %s | %s | %s | %s |' "$@")"); echo "${rows[-1]}"; }

# Runs a command with every output line stamped with the seconds since it started, and a last
# line "EXIT <status>".
stamped() {
  local log=$1; shift
  { "$@" 2>&1; echo "EXIT $?"; } | python3 -u -c '
import sys, time
t0 = time.time()
for line in sys.stdin:
    print(f"{time.time() - t0:9.3f} {line}", end="", flush=True)
' > "$log"
}
at() { grep -m1 -E "^ *[0-9.]+ $2" "$1" | awk '{print $1}'; }
exit_of() { grep -E '^ *[0-9.]+ EXIT ' "$1" | tail -n1 | awk '{print $3}'; }
summary() { grep -E "^ *[0-9.]+ [A-Za-z0-9_]+: [0-9]+ cases" "$1" | tail -n1 | cut -c11-; }

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n1 > "$logs/gpu.txt"
echo "GPU: $(cat "$logs/gpu.txt"); $(date -u +%Y-%m-%dT%H:%MZ); $bin"

if want faulting; then
  log="$logs/faulting-fa_s512.log"
  rm -f "$logs/trace-faulting.jsonl"
  CUDAFUZZ_TRACE="$logs/trace-faulting.jsonl" stamped "$log" "$bin" fuzz --kernel fa_s512 --jobs 4 --time 30s --out "$logs/out-faulting" ${FAULTING_ARGS:-}
  end=$(at "$log" EXIT)
  s=$(summary "$log")
  n=$(echo "$s" | grep -Eo '[0-9]+ cases' | head -n1 | grep -Eo '[0-9]+')
  rate=$(awk "BEGIN{printf \"%.1f\", ${n:-0}/$end}")
  row "faulting fa_s512 --jobs 4 --time 30s" "$n cases in $end s = **$rate cases/s** (process)" "$(echo "$s" | grep -Eo '[0-9]+ passed, [0-9]+ failed')" "$(echo "$s" | grep -Eo '[0-9]+ new bugs|[0-9]+ steered past known bugs|[0-9]+ worker starts' | paste -sd ';' -)"
fi

if want stop; then
  mutants=(${MUTANTS:-$(ls kernels/mutants/*.toml)})
  for m in "${mutants[@]}"; do
    k=$(basename "$m" .toml)
    log="$logs/stop-$k.log"
    stamped "$log" "$bin" fuzz --kernel "$m" --jobs 4 --stop-after 1 --time "${STOP_TIME:-60s}" --out "$logs/out-stop-$k"
    new=$(at "$log" NEW)
    end=$(at "$log" EXIT)
    if [ -n "$new" ]; then
      lag=$(awk "BEGIN{printf \"%.2f\", $end-$new}")
      ok=$(awk "BEGIN{print ($end-$new <= 2.0) ? \"ok\" : \"LATE\"}")
    else
      lag="-"; ok="no bug"
    fi
    row "stop $k" "first NEW at ${new:-none} s, exit at $end s (rc $(exit_of "$log"))" "**$lag s** after the bug: $ok" "$(summary "$log" | grep -Eo '[0-9]+ new bugs|[0-9]+ worker starts' | paste -sd ';' -)"
  done
fi

if want sanitize; then
  for k in flash_fwd simple_attn ${SAN_MUTANT:-kernels/mutants/seqk_tail.toml}; do
    name=$(basename "$k" .toml)
    log="$logs/sanitize-$name.log"
    trace="$logs/trace-sanitize-$name.jsonl"
    rm -f "$trace"
    CUDAFUZZ_TRACE="$trace" stamped "$log" "$bin" fuzz --kernel "$k" --sanitize memcheck --time 60s --out "$logs/out-sanitize-$name"
    end=$(at "$log" EXIT)
    ok=$(awk "BEGIN{print ($end <= 66.0) ? \"ok\" : \"LATE\"}")
    new=$(at "$log" NEW)
    gap=$(python3 -c '
import json, sys
ms = [0] + [json.loads(l)["ms"] for l in open(sys.argv[1])]
print(f"{max(b - a for a, b in zip(ms, ms[1:])) / 1000:.1f}")' "$trace" 2>/dev/null || echo "?")
    row "sanitize $name --time 60s" "exit at **$end s** (limit 66): $ok, rc $(exit_of "$log")" "first NEW at ${new:--} s; longest wait for a batch **$gap s**" "$(summary "$log" | grep -Eo '[0-9]+ cases in [0-9.]+ s|[0-9]+ new bugs' | paste -sd ';' -)"
  done
fi

if want gate; then
  log="$logs/gate-one-bug.log"
  stamped "$log" "$bin" gate --config ci/gate-one-bug.toml --budget 3m --out "$logs/out-gate"
  head=$(grep -E 'PASSED|FAILED' "$log" | tail -n1 | cut -c11-)
  row "gate one planted OOB read (oob_read_k)" "$head" "rc $(exit_of "$log")" "$(grep -c 'NEW BUG' "$log") NEW BUG lines"
fi

if want main; then
  kernels=(${MAIN_KERNELS:-})
  args=()
  for k in "${kernels[@]}"; do args+=(--kernel "$k"); done
  tag=${MAIN_TAG:-all}
  log="$logs/main-$tag.log"
  stamped "$log" "$bin" fuzz --jobs 4 --time 60s "${args[@]}" --out "$logs/out-main-$tag"
  "$bin" triage "$logs/out-main-$tag" > "$logs/main-$tag-triage.log" 2>&1
  bugs=$(grep -cE '^ *[0-9.]+ NEW ' "$log")
  row "main fuzz --jobs 4 --time 60s ($tag)" "**$bugs bugs** (NEW lines), exit at $(at "$log" EXIT) s" "rc $(exit_of "$log")" "$(grep -E '^ *[0-9.]+ [A-Za-z0-9_]+: [0-9]+ cases' "$log" | sed -E 's/^ *[0-9.]+ ([A-Za-z0-9_]+): .*; ([0-9]+) new bugs.*/\1 \2/' | paste -sd ',' -)"
fi

echo
echo "| check | result | figure | details |"
echo "| --- | --- | --- | --- |"
printf '%s\n' "${rows[@]}"
