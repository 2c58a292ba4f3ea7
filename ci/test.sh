#!/usr/bin/env bash
# The test command (README): lints, host tests, proptest suites with their committed regressions,
# the NVRTC build of every shipped kernel, and short runs of the host fuzz targets. Installs what
# it needs (NVRTC + CUDA headers from PyPI wheels, cargo-fuzz) on first use. Every step is named
# as it starts and ends with its verdict; a test that cannot run here (no GPU, say) prints
# `SKIP <test>: <reason>`, and the list of them comes last. A GPU host runs the GPU tests with
# ci/gpu-check.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh
started=$(date +%s)
step() { echo; echo "== [$(( $(date +%s) - started )) s] $*"; }

step "1/6 lints: cargo fmt --check, clippy -D warnings, rustdoc -D warnings, rust-version"
bash ci/lint.sh

step "2/6 the Python wheel (maturin) into target/pyenv, for the Python-target tests"
CUDAFUZZ_TEST_PYTHON=$(bash ci/python-env.sh | tail -n1)
export CUDAFUZZ_TEST_PYTHON

step "3/6 unit, integration and property tests (nextest)"
# Where this script installed NVRTC, the wheel and python3 is here, tests that need them must
# run, not skip.
export CUDAFUZZ_REQUIRE="${CUDAFUZZ_REQUIRE:-nvrtc,python3,g++,cudafuzz-python}"
export CUDAFUZZ_SKIP_LOG="$PWD/target/test-skips.txt"
mkdir -p target && : > "$CUDAFUZZ_SKIP_LOG"
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --success-output never --failure-output final
else
  cargo test --no-fail-fast
fi

step "4/6 NVRTC build of every kernel x parameters x dtype x {sm_80, sm_89, sm_90} (no GPU needed)"
cargo run --quiet --release -- build

step "5/6 host fuzz targets (stable Rust, -s none): build"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
RUSTC_BOOTSTRAP=1 cargo fuzz build -s none
bin="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release"  # cargo fuzz builds for the host triple
# The parsers of user files start from the files this repository ships (libFuzzer adds to the
# corpus directory; it is git-ignored).
mkdir -p fuzz/corpus/manifest_parse fuzz/corpus/gate_config target/fuzz-logs
find kernels -name '*.toml' -exec cp {} fuzz/corpus/manifest_parse/ \;
cp ci/gate.toml fuzz/corpus/gate_config/
seconds=${CUDAFUZZ_FUZZ_SECONDS:-20}
step "5/6 host fuzz targets: ${seconds} s each"
for target in case_decode seed_parse sanitizer_xml manifest_parse gate_config; do
  mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
  log="target/fuzz-logs/$target.log"
  echo "fuzz $target: running for ${seconds} s (log: $log)"
  set +e
  "$bin/$target" "fuzz/corpus/$target" -max_total_time="$seconds" -rss_limit_mb=4096 -artifact_prefix="fuzz/artifacts/$target/" > "$log" 2>&1
  st=$?
  set -e
  runs=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n1)
  if [ $st -eq 0 ]; then
    echo "fuzz $target: ok (${runs:-no run count}, 0 crashes)"
  else
    echo "fuzz $target: FAILED with exit $st; the last lines of its log:"
    tail -n 40 "$log"
    exit 1
  fi
done
# The GPU target builds everywhere; without a GPU it must say so and exit 3 before running any
# input (so libFuzzer saves no artifact), not pass silently.
rm -rf target/kernel-nogpu && mkdir -p target/kernel-nogpu
set +e
"$bin/kernel" -runs=1 -artifact_prefix=target/kernel-nogpu/ > target/kernel-nogpu.log 2>&1
st=$?
set -e
if cudafuzz_gpu=$(nvidia-smi -L 2>/dev/null) && [ -n "$cudafuzz_gpu" ]; then
  echo "fuzz kernel: GPU present ($cudafuzz_gpu); run it with ci/gpu-kernels.sh cargofuzz"
elif [ $st -eq 3 ] && grep -q "no GPU" target/kernel-nogpu.log && [ -z "$(ls target/kernel-nogpu)" ]; then
  echo "fuzz kernel: ok (no GPU here, so it said so and exited 3 before any input: $(grep -m1 'no GPU' target/kernel-nogpu.log))"
else
  echo "fuzz kernel: FAILED: expected exit 3 with a 'no GPU' message and no artifact, got $st:"; ls target/kernel-nogpu; tail -n 20 target/kernel-nogpu.log; exit 1
fi

step "6/6 tests skipped on this machine, with their reasons"
if [ -s "$CUDAFUZZ_SKIP_LOG" ]; then
  sort "$CUDAFUZZ_SKIP_LOG" | uniq
  echo "($(sort -u "$CUDAFUZZ_SKIP_LOG" | wc -l) skipped; a GPU host runs them with ci/gpu-check.sh)"
else
  echo "none"
fi
echo
echo "== ci/test.sh: all green in $(( $(date +%s) - started )) s"
