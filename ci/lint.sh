#!/usr/bin/env bash
# Lints CI enforces (ci/test.sh runs this first): formatting, clippy and rustdoc with zero
# warnings, for the workspace (the crate and the Python extension) and the fuzz package, and the
# `rust-version` that Cargo.toml claims equal to the highest one the locked dependencies declare.
set -euo pipefail
cd "$(dirname "$0")/.."
echo "lint: cargo fmt --check"
cargo fmt --all --check
(cd fuzz && cargo fmt --check)
echo "lint: cargo clippy --all-targets -- -D warnings"
cargo clippy --quiet --workspace --all-targets -- -D warnings
(cd fuzz && RUSTC_BOOTSTRAP=1 cargo clippy --quiet --all-targets -- -D warnings)
echo "lint: cargo doc --no-deps (warnings denied)"
RUSTDOCFLAGS="-D warnings" cargo doc --quiet --no-deps --workspace
echo "lint: rust-version"
cargo fetch --quiet
python3 ci/msrv.py
