#!/usr/bin/env bash
# The project's test command (the README's quick start and CI run exactly this).
# Checks formatting and lints, then runs every unit and integration test; integration tests
# start real `sprat serve` processes on 127.0.0.1 and mount small tmpfs file systems (as root).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh --tests
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo build --workspace --locked
# The benchmark harness's pure parts (statistics, tables, sets, templates, arguments).
python3 -m unittest discover -s bench/harness -q
if command -v cargo-nextest >/dev/null 2>&1; then
  cargo nextest run --workspace --locked --no-fail-fast
else
  cargo test --workspace --locked --no-fail-fast
fi
