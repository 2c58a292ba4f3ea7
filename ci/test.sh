#!/usr/bin/env bash
# The test command (README): host tests, proptest suites with their committed regressions, the
# NVRTC build of every shipped kernel, and short runs of the host fuzz targets. Installs what it
# needs (NVRTC + CUDA headers from PyPI wheels, cargo-fuzz) on first use. GPU tests skip with a
# printed reason on machines without a GPU; run ci/gpu-check.sh and ci/gpu-kernels.sh on a CUDA
# host for those.
set -euo pipefail
cd "$(dirname "$0")/.."
source ci/env.sh

echo "== unit, integration and property tests"
# GPU tests are #[ignore = "needs a GPU"]: nextest counts them as skipped here. A GPU host runs
# them with ci/gpu-check.sh (--include-ignored, CUDAFUZZ_REQUIRE_GPU=1).
if cargo nextest --version >/dev/null 2>&1; then
  cargo nextest run --no-fail-fast --success-output never --failure-output final
else
  cargo test --no-fail-fast
fi

echo "== NVRTC build of every kernel x parameters x dtype x {sm_80, sm_89, sm_90} (no GPU needed)"
cargo run --quiet -- build

echo "== host fuzz targets (stable Rust, -s none, bounded)"
if ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked
fi
# The parsers of user files start from the files this repository ships (libFuzzer adds to the
# corpus directory; it is git-ignored).
mkdir -p fuzz/corpus/manifest_parse fuzz/corpus/gate_config
find kernels -name '*.toml' -exec cp {} fuzz/corpus/manifest_parse/ \;
cp ci/gate.toml fuzz/corpus/gate_config/
for target in case_decode seed_parse sanitizer_xml manifest_parse gate_config; do
  RUSTC_BOOTSTRAP=1 cargo fuzz run -s none "$target" -- -max_total_time="${CUDAFUZZ_FUZZ_SECONDS:-20}" -rss_limit_mb=4096 2>&1 | tail -n 3
done
# The GPU target builds everywhere; without a GPU it must say so and exit 3 before running any
# input (so libFuzzer saves no artifact), not pass silently. Run the binary itself: `cargo fuzz
# run` turns every non-zero status of the target into its own status 1.
RUSTC_BOOTSTRAP=1 cargo fuzz build -s none kernel
kernel="fuzz/target/$(rustc -vV | sed -n 's/^host: //p')/release/kernel"  # cargo fuzz builds for the host triple
rm -rf target/kernel-nogpu && mkdir -p target/kernel-nogpu
set +e
"$kernel" -runs=1 -artifact_prefix=target/kernel-nogpu/ > target/kernel-nogpu.log 2>&1
st=$?
set -e
if cudafuzz_gpu=$(nvidia-smi -L 2>/dev/null) && [ -n "$cudafuzz_gpu" ]; then
  echo "kernel target: GPU present ($cudafuzz_gpu); run it with ci/gpu-kernels.sh cargofuzz"
elif [ $st -eq 3 ] && grep -q "no GPU" target/kernel-nogpu.log && [ -z "$(ls target/kernel-nogpu)" ]; then
  echo "kernel target: skipped: $(grep -m1 'no GPU' target/kernel-nogpu.log)"
else
  echo "kernel target: expected exit 3 with a 'no GPU' message and no artifact, got $st:"; ls target/kernel-nogpu; tail -n 20 target/kernel-nogpu.log; exit 1
fi
echo "== ci/test.sh: all green"
