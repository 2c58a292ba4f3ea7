#!/usr/bin/env bash
# Before/after comparison of two cudafuzz binaries on one CUDA host, in one run (so both see the
# same GPU, driver and load). Prints a summary table last; logs go to $OUT (if set) or
# ./gpu-compare-logs.
#
#   bash ci/gpu-compare.sh BEFORE AFTER STAGE...
#
# BEFORE and AFTER are cudafuzz binaries (e.g. an older build kept aside and .gpu/bin/cudafuzz).
# BEFORE_KERNELS / AFTER_KERNELS point each binary at its own kernels directory
# (CUDAFUZZ_KERNELS), for builds that read different manifest formats.
#
# Stages:
#   seeds  fixed --seed/--cases campaigns on SEED_KERNELS (default flash_fwd fa_s512 seqk_tail
#          hdim_vec_tail; manifest file names) with each binary: the saved seed files must match
#          (names, cases, signatures, findings) and be byte-identical; every difference is listed.
#   gate   ci/gate.toml for GATE_BUDGET (default 2m) must pass with each binary, and a gate
#          fuzzing fa_s512 must fail with each.
#   ttff   time to first finding, `fuzz --stop-after 1 --escalate none`, on fa_s512 and every
#          flash_fwd mutant, seeds TTFF_SEEDS (default 0..4): median per kernel and binary.
#   bench  `bench --sizes small` BENCH_RUNS times (default 3) per binary: median cases/s.
set -uo pipefail
cd "$(dirname "$0")/.."
before=$1 after=$2; shift 2
stages=("$@")
want() { printf '%s\n' "${stages[@]}" | grep -qx "$1"; }
logs=gpu-compare-logs/compare
rm -rf "$logs"; mkdir -p "$logs"
# On the device tool only what is under $OUT comes back (a few files): one archive and the
# summary, written even when the run is stopped at its time limit.
finish() {
  trap - EXIT TERM INT
  if [ -n "${OUT:-}" ]; then tar czf "$OUT/gpu-compare-logs.tgz" -C "$(dirname "$logs")" compare; cp "$logs/summary.txt" "$OUT/compare-summary.txt" 2>/dev/null || cp "$logs/rows.txt" "$OUT/compare-rows.txt"; fi
}
trap finish EXIT
trap 'finish; exit 124' TERM INT
rows=()
row() { rows+=("$(printf '%-46s %-8s %s' "$1" "$2" "$3")"); printf '%s\n' "${rows[-1]}" >> "$logs/rows.txt"; }
bin_of() { [ "$1" = before ] && echo "$before" || echo "$after"; }
kernels_of() { [ "$1" = before ] && echo "${BEFORE_KERNELS:-$PWD/kernels}" || echo "${AFTER_KERNELS:-$PWD/kernels}"; }
run_as() { # run_as SECONDS before|after ARGS...: the binary, with its own kernels directory, under a timeout
  local secs=$1 which=$2; shift 2
  CUDAFUZZ_KERNELS=$(kernels_of "$which") CUDAFUZZ_BIN=$(bin_of "$which") timeout "$secs" "$(bin_of "$which")" "$@"
}
kernel_path() { # a shipped kernel's manifest in the given kernels dir, by file name, else the name itself
  local dir=$1 k=$2 f
  f=$(find "$dir" -name "$k.toml" -not -path '*/reference/*' | head -n1)
  echo "${f:-$k}"
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$logs/gpu.txt" 2>&1
row gpu info "$(head -n1 "$logs/gpu.txt")"

if want seeds; then
  for k in ${SEED_KERNELS:-flash_fwd fa_s512 seqk_tail hdim_vec_tail}; do
    case $k in fa_s512) n=${FAULT_CASES:-60} ;; *) n=${SEED_CASES:-400} ;; esac
    for w in before after; do
      dir=$(kernels_of $w)
      start=$(date +%s)
      run_as 400 $w fuzz --kernel "$(kernel_path "$dir" "$k")" --cases $n --seed 7 --jobs 4 --out "$logs/$w-$k" \
        > "$logs/$w-$k.log" 2>&1
      echo "$w $k rc=$? $(( $(date +%s) - start )) s" >> "$logs/seeds-times.txt"
    done
    verdict=$(python3 - "$logs/before-$k" "$logs/after-$k" <<'EOF'
import json, os, sys
a, b = sys.argv[1], sys.argv[2]
def files(root):
    """Every seed file under OUT/seeds (one per bug at the top, the others under <bug>/examples/)
    and the bug index, by path relative to OUT."""
    out = {}
    for base in ["seeds"]:
        for dp, _, fs in os.walk(os.path.join(root, base)):
            for f in fs:
                p = os.path.join(dp, f)
                out[os.path.relpath(p, root)] = p
    if os.path.isfile(os.path.join(root, "bugs.json")):
        out["bugs.json"] = os.path.join(root, "bugs.json")
    return out
fa_, fb_ = files(a), files(b)
diffs, same = [], 0
for n in sorted(set(fa_) | set(fb_)):
    if n not in fa_ or n not in fb_:
        diffs.append(f"only {'after' if n in fb_ else 'before'}: {n}")
        continue
    ba, bb = open(fa_[n], "rb").read(), open(fb_[n], "rb").read()
    if ba == bb:
        same += 1
        continue
    try:
        sa, sb = json.loads(ba), json.loads(bb)
    except ValueError:
        diffs.append(f"{n}: bytes differ")
        continue
    keys = sorted(k for k in set(sa) | set(sb) if sa.get(k) != sb.get(k)) if isinstance(sa, dict) and isinstance(sb, dict) else ["(whole)"]
    diffs.append(f"{n}: bytes differ in {', '.join(keys)}")
seeds = sum(1 for n in fa_ if n != "bugs.json")
print(f"{seeds} vs {sum(1 for n in fb_ if n != 'bugs.json')} seeds, {same} files byte-identical, {len(diffs)} differences")
for d in diffs:
    print("  " + d)
EOF
)
    echo "$verdict" > "$logs/seeds-$k.txt"
    same=$(head -n1 <<< "$verdict")
    row "seeds $k" "$(grep -q ' 0 differences' <<< "$same" && echo same || echo DIFF)" "$same"
  done
fi

if want gate; then
  for w in before after; do
    dir=$(kernels_of $w)
    start=$(date +%s)
    run_as 400 $w gate --config ci/gate.toml --budget ${GATE_BUDGET:-2m} --out "$logs/gate-$w" > "$logs/gate-$w.log" 2>&1; st=$?
    row "gate ci/gate.toml $w (exit 0)" "$([ $st = 0 ] && echo ok || echo FAIL)" "rc=$st $(( $(date +%s) - start )) s; $(grep -m1 -E '^(PASSED|FAILED)' "$logs/gate-$w.log" | cut -c1-60)"
    printf '[gate]\nbudget = "20s"\nsweep_share = 0\nsanitizer_share = 0\nescalate = ["memcheck"]\n\n[self_check]\nkernel = "oob_read_k"\ncase = "%s"\n\n[[kernels]]\nkernel = "%s"\ncases = 2000\n' \
      "$PWD/ci/planted/oob_read_k.json" "$(kernel_path "$dir" fa_s512)" > "$logs/gate-fail-$w.toml"
    run_as 200 $w gate --config "$logs/gate-fail-$w.toml" --out "$logs/gate-fail-$w" > "$logs/gate-fail-$w.log" 2>&1; st=$?
    row "gate on fa_s512 $w (exit 1)" "$([ $st = 1 ] && echo ok || echo FAIL)" "rc=$st $(grep -m1 -E '^(PASSED|FAILED)' "$logs/gate-fail-$w.log" | cut -c1-60)"
  done
fi

if want ttff; then
  kernels="fa_s512 $(ls kernels/mutants/*.toml | xargs -n1 basename | sed 's/.toml$//')"
  for k in ${TTFF_KERNELS:-$kernels}; do
    for w in before after; do
      dir=$(kernels_of $w)
      times=()
      for s in ${TTFF_SEEDS:-0 1 2 3 4}; do
        run_as 120 $w fuzz --kernel "$(kernel_path "$dir" "$k")" --cases 100000 --time ${TTFF_TIME:-60s} --stop-after 1 --escalate none --jobs ${TTFF_JOBS:-4} --seed $s --out "$logs/ttff-$w-$k-$s" \
          > "$logs/ttff-$w-$k-$s.log" 2>&1
        t=$(grep -m1 -Eo 'NEW   after [0-9.]+ s \(case #[0-9]+\)' "$logs/ttff-$w-$k-$s.log" | grep -Eo '[0-9.]+ s' | head -n1 | cut -d' ' -f1)
        times+=("${t:-inf}")
        echo "$k $w seed $s: ${t:-not found} $(grep -m1 -Eo '\(case #[0-9]+\)' "$logs/ttff-$w-$k-$s.log")" >> "$logs/ttff.txt"
      done
      med=$(printf '%s\n' "${times[@]}" | sort -g | sed -n 3p)
      eval "med_$w=\$med"
    done
    ok=$(python3 -c "import sys; b,a=float('$med_before'),float('$med_after'); print('ok' if a <= max(1.5*b, b+1.0) else 'SLOWER')" 2>/dev/null || echo "?")
    row "ttff $k (median s)" "$ok" "before $med_before  after $med_after"
  done
fi

if want bench; then
  for w in before after; do
    rates=()
    for r in $(seq 1 ${BENCH_RUNS:-3}); do
      run_as 300 $w bench --sizes small --cases ${BENCH_CASES:-1000} --out "$logs/bench-$w-$r" > "$logs/bench-$w-$r.log" 2>&1
      rate=$(grep -m1 -E '^small, gpu fp64 ref, no determinism run' "$logs/bench-$w-$r.log" | awk '{print $(NF-9)}')
      rates+=("${rate:-0}")
    done
    med=$(printf '%s\n' "${rates[@]}" | sort -g | sed -n "$(( (${#rates[@]} + 1) / 2 ))p")
    eval "bench_$w=\$med"
    row "bench small $w (median cases/s)" info "${rates[*]} -> $med"
  done
  ok=$(python3 -c "b,a=float('$bench_before'),float('$bench_after'); print('ok' if a >= 0.9*b else 'SLOWER')" 2>/dev/null || echo "?")
  row "bench small after/before" "$ok" "$(python3 -c "print(f'{float(\"$bench_after\")/max(float(\"$bench_before\"),1e-9):.3f}')" 2>/dev/null)"
fi

{
echo
echo "== gpu-compare summary ($(date -u +%F)): before $before, after $after"
printf '%s\n' "${rows[@]}"
for f in "$logs"/seeds-*.txt; do [ -f "$f" ] && { echo; echo "== $(basename "$f")"; cat "$f"; }; done
} 2>&1 | tee "$logs/summary.txt"
