#!/usr/bin/env bash
# Builds the cudafuzz wheel (maturin; the extension module `cudafuzz._native` and the `cudafuzz`
# script) and installs it into a fresh virtualenv at target/pyenv, with numpy and pytest for the
# plumbing tests. Prints the interpreter last; ci/test.sh exports it as CUDAFUZZ_TEST_PYTHON.
#   bash ci/python-env.sh [--release]     (the wheel lands in target/wheels/)
set -euo pipefail
cd "$(dirname "$0")/.."
venv=target/pyenv
if [ ! -x "$venv/bin/python" ]; then
  python3 -m venv "$venv"
fi
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check "maturin>=1.5,<2" numpy pytest
rm -f target/wheels/cudafuzz-*.whl
(cd python && "../$venv/bin/maturin" build --quiet ${1:-} --out ../target/wheels)
wheel=$(ls target/wheels/cudafuzz-*.whl)
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
"$venv/bin/python" -c "import cudafuzz; print('python-env: cudafuzz', cudafuzz.__version__, 'installed from', '$wheel', file=__import__('sys').stderr)"
echo "$PWD/$venv/bin/python"
