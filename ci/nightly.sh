#!/usr/bin/env bash
# The nightly gate on any CUDA host: `cudafuzz gate` with ci/gate.toml, reports in $OUT_DIR.
#   bash ci/nightly.sh [GATE ARGS...]       e.g. --budget 5m, --shard 2/4, --jobs 4 --gpus all
# Environment: CUDAFUZZ_GATE_OUT (default gate-out), CUDAFUZZ_GATE_BUDGET (default: the
# configuration's), CUDAFUZZ_SHARD=I/N or a Slurm array task for a sharded gate.
# Uses .gpu/bin/cudafuzz when staged (ci/gpu-pack), else `cargo run --release`.
# Appends report.md to $GITHUB_STEP_SUMMARY when set. Exits with the gate's status: 0 nothing
# new and every check passed, 1 findings or regressions, 3 no GPU, 4 environment check failed
# (compute-sanitizer missing, planted bug not caught), 2 bad configuration.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${CUDAFUZZ_GATE_OUT:-gate-out}
args=(gate --config ci/gate.toml --out "$out")
[ -n "${CUDAFUZZ_GATE_BUDGET:-}" ] && args+=(--budget "$CUDAFUZZ_GATE_BUDGET")
if [ -x .gpu/bin/cudafuzz ]; then
  cudafuzz=(.gpu/bin/cudafuzz)
else
  source ci/env.sh
  cudafuzz=(cargo run --release --quiet --)
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
"${cudafuzz[@]}" "${args[@]}" "$@"
status=$?
if [ -n "${GITHUB_STEP_SUMMARY:-}" ] && [ -f "$out/report.md" ]; then
  cat "$out/report.md" >> "$GITHUB_STEP_SUMMARY"
fi
echo "ci/nightly.sh: gate exit status $status; reports and new seeds in $out/"
exit "$status"
