#!/usr/bin/env bash
# Runs sprat's fuzz targets (fuzz/, cargo-fuzz and libFuzzer). docs/fuzzing.md says what each
# target covers.
#
#   scripts/fuzz.sh list               the targets
#   scripts/fuzz.sh TARGET SECONDS     fuzz TARGET for SECONDS, growing fuzz/corpus/TARGET
#   scripts/fuzz.sh cmin TARGET        minimise fuzz/corpus/TARGET in place (keep it small)
#   scripts/fuzz.sh build [TARGET]     build one target (or all)
#
# Extra libFuzzer options can follow SECONDS (e.g. -max_len=65536). Crashes are written to
# fuzz/artifacts/TARGET/ (not committed); replay one with
# `scripts/fuzz.sh run-one TARGET FILE`, then fix it with a regression test in crates/proto.
# The last lines libFuzzer prints (stat::number_of_executed_units, cov:, ft:, corp:) are the
# figures of a run. Run it under `nice -n 19` on a shared machine.
#
# cargo-fuzz needs a nightly compiler (-Z flags for the sanitizer and coverage
# instrumentation). No toolchain can be downloaded on this project's machines, so this uses
# the `nightly` toolchain if rustup already has one, and otherwise the stable toolchain with
# RUSTC_BOOTSTRAP=1 (which unlocks the same -Z flags on a stable compiler).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(frame batch namespace handshake client_stream server_stream server_engine)

usage() {
    echo "usage: scripts/fuzz.sh list | TARGET SECONDS [LIBFUZZER-OPTION...] | cmin TARGET | build [TARGET] | run-one TARGET FILE" >&2
    exit 2
}

known_target() {
    local t
    for t in "${TARGETS[@]}"; do
        [[ $t == "$1" ]] && return 0
    done
    echo "fuzz.sh: unknown target '$1' (scripts/fuzz.sh list names them)" >&2
    exit 2
}

# The proto targets are safe Rust: no sanitizer, many more executions per second. The engine
# target reaches the store's unsafe code (io_uring, FIEMAP), so it runs under AddressSanitizer,
# built into its own target directory.
sanitizer_args() {
    if [[ $1 == server_engine ]]; then
        echo "--sanitizer=address --target-dir=fuzz/target/asan"
    else
        echo "--sanitizer=none --target-dir=fuzz/target/plain"
    fi
}

setup() {
    if ! command -v cargo-fuzz >/dev/null 2>&1; then
        echo "fuzz.sh: installing cargo-fuzz" >&2
        cargo install cargo-fuzz --locked
    fi
    if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
        CARGO=(cargo +nightly)
    else
        echo "fuzz.sh: no nightly toolchain; using stable with RUSTC_BOOTSTRAP=1" >&2
        export RUSTC_BOOTSTRAP=1
        CARGO=(cargo)
    fi
}

[[ $# -ge 1 ]] || usage
case $1 in
list)
    printf '%s\n' "${TARGETS[@]}"
    ;;
build)
    setup
    if [[ $# -ge 2 ]]; then chosen=("$2"); else chosen=("${TARGETS[@]}"); fi
    for t in "${chosen[@]}"; do
        known_target "$t"
        # shellcheck disable=SC2046
        "${CARGO[@]}" fuzz build $(sanitizer_args "$t") "$t"
    done
    ;;
cmin)
    [[ $# -eq 2 ]] || usage
    known_target "$2"
    setup
    mkdir -p "fuzz/corpus/$2"
    # shellcheck disable=SC2046
    "${CARGO[@]}" fuzz cmin $(sanitizer_args "$2") "$2" "fuzz/corpus/$2"
    ;;
run-one)
    [[ $# -eq 3 ]] || usage
    known_target "$2"
    setup
    # shellcheck disable=SC2046
    "${CARGO[@]}" fuzz run $(sanitizer_args "$2") "$2" "$3"
    ;;
*)
    [[ $# -ge 2 ]] || usage
    target=$1
    seconds=$2
    shift 2
    known_target "$target"
    [[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || {
        echo "fuzz.sh: SECONDS must be a positive whole number, not '$seconds'" >&2
        exit 2
    }
    setup
    mkdir -p "fuzz/corpus/$target" "fuzz/artifacts/$target"
    # The engine's server keeps threads (sessions, their pipelines) running past the input
    # that started them, by design: LeakSanitizer would count what they still hold as leaked.
    extra=()
    [[ $target == server_engine ]] && extra=(-detect_leaks=0)
    echo "fuzz.sh: $target for ${seconds}s from $(date -u +%FT%TZ)" >&2
    # shellcheck disable=SC2046
    "${CARGO[@]}" fuzz run $(sanitizer_args "$target") "$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
        "${extra[@]}" "$@"
    ;;
esac
