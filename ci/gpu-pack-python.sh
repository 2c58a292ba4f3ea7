#!/usr/bin/env bash
# Stages the release wheel in .gpu/wheels/ (after ci/gpu-pack has staged the
# binaries), so that ci/gpu-check.sh's `python` stage can pip-install it on a GPU host that has
# no Rust toolchain.
set -euo pipefail
cd "$(dirname "$0")/.."
bash ci/python-env.sh --release > /dev/null
mkdir -p .gpu/wheels
rm -f .gpu/wheels/cudafuzz-*.whl
cp target/wheels/cudafuzz-*.whl .gpu/wheels/
ls -l .gpu/wheels/
