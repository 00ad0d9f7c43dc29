#!/usr/bin/env bash
# Validates `sprat relay` as a WAN emulator against the theory: the round trip
# a client sees (measured by `sprat doctor` against a sprat server behind the
# relay) against the RTT asked for, and the throughput of 1, 4 and 16 TCP
# streams (iperf3 through the relay) against min(streams x window / RTT, cap).
# Writes bench/results/relay-<stamp>.{md,csv}.
#
# Usage: bench/relay-check.sh
# Environment (defaults in brackets):
#   RTTS      round trips in ms [10 30 100]
#   STREAMS   iperf3 parallel streams [1 4 16]
#   RATE      relay cap [1gbit]
#   WINDOW    relay window [auto: this host's autotuned TCP window]
#   SECONDS_PER_RUN  iperf3 -t [8], of which the first OMIT [3] (slow start) are left out
#   SPRAT     sprat binary [target/release/sprat; rebuilt unless BUILD=0]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

RTTS=${RTTS:-10 30 100}
STREAMS=${STREAMS:-1 4 16}
RATE=${RATE:-1gbit}
WINDOW=${WINDOW:-auto}
SECONDS_PER_RUN=${SECONDS_PER_RUN:-8}
OMIT=${OMIT:-3}
SPRAT=${SPRAT:-$repo/target/release/sprat}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
read -r -a rtts <<<"$RTTS"
read -r -a streams <<<"$STREAMS"
command -v iperf3 >/dev/null || die "missing iperf3 (run scripts/install-deps.sh)"
sprat_build "$SPRAT"

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$RESULTS_DIR"
CSV=$RESULTS_DIR/relay-$STAMP.csv
MD=$RESULTS_DIR/relay-$STAMP.md
exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-relay.XXXXXX)
EXIT_REMOVE+=("$TMP")
LOGS=$TMP
ROOT=$TMP/root
mkdir -p "$ROOT"
start_sprat

IPERF_PORT=$(free_port)
setsid iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$TMP/iperf3.log" 2>&1 </dev/null &
bg_register $!
wait_listen "$IPERF_PORT" $! || die "iperf3 -s did not start"

window=$("$SPRAT" doctor --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["paths"][0]["window_bytes"])')
[[ $WINDOW == auto ]] || window=$(python3 -c "
import re, sys
m = re.fullmatch(r'([0-9.]+)\s*([KMG]i?B?)?', sys.argv[1])
u = {'': 1, 'KiB': 1024, 'MiB': 1 << 20, 'GiB': 1 << 30, 'KB': 1e3, 'MB': 1e6, 'GB': 1e9}
print(int(float(m.group(1)) * u[m.group(2) or '']))" "$WINDOW")
echo "rtt_ms,measured_rtt_ms,streams,window_bytes,theory_bytes_per_s,measured_bytes_per_s" >"$CSV"
for rtt in "${rtts[@]}"; do
    delay=$(awk -v r="$rtt" 'BEGIN { printf "%g", r / 2 }')
    start_relay "$SPRAT_PORT" "$delay" --rate "$RATE" --window "$WINDOW"
    sprat_relay=$RELAY_PID
    measured=$("$SPRAT" doctor --json "sprat://127.0.0.1:$RELAY_PORT/" |
        python3 -c 'import json, statistics, sys; print("%.2f" % statistics.median(json.load(sys.stdin)["measured_rtt_ms"]))')
    bg_kill "$sprat_relay"
    start_relay "$IPERF_PORT" "$delay" --rate "$RATE" --window "$WINDOW"
    for n in "${streams[@]}"; do
        iperf3 -c 127.0.0.1 -p "$RELAY_PORT" -P "$n" -t "$SECONDS_PER_RUN" -O "$OMIT" -J >"$TMP/iperf-$rtt-$n.json"
        got=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["end"]["sum_received"]["bits_per_second"] / 8)' "$TMP/iperf-$rtt-$n.json")
        theory=$(python3 -c "
rate = {'g': 1e9, 'm': 1e6, 'k': 1e3}['$RATE'.lower().rstrip('bit')[-1]] * float('$RATE'.lower().rstrip('bit')[:-1]) / 8
print(min($n * $window / ($rtt / 1e3), rate))")
        echo "$rtt,$measured,$n,$window,$theory,$got" >>"$CSV"
        log "RTT $rtt ms (measured $measured): $n stream(s): $(awk -v g="$got" -v t="$theory" 'BEGIN { printf "%.1f MB/s, theory %.1f MB/s, ratio %.2f", g / 1e6, t / 1e6, g / t }')"
    done
    bg_kill "$RELAY_PID"
done

{
    echo "# sprat relay against the theory, $STAMP"
    echo
    machine_facts "$TMP"
    echo "- relay: \`sprat relay --delay RTT/2 --rate $RATE --window $WINDOW\` (window $window bytes per connection and direction)"
    echo "- RTT: median of \`sprat doctor sprat://RELAY/\` (the authentication exchange, then 5 requests, one after another)"
    echo "- throughput: \`iperf3 -c RELAY -P N -t $SECONDS_PER_RUN -O $OMIT\` (first $OMIT s, slow start, left out), received bytes/s"
    echo "- theory: min(N x window / RTT, cap)"
    echo
    echo "| RTT ms | measured RTT ms | streams | theory MB/s | iperf3 MB/s | measured / theory |"
    echo "|--:|--:|--:|--:|--:|--:|"
    awk -F, 'NR > 1 { printf "| %s | %s | %s | %.1f | %.1f | %.2f |\n", $1, $2, $3, $5 / 1e6, $6 / 1e6, $6 / $5 }' "$CSV"
} >"$MD"
log "wrote $CSV and $MD"
cat "$MD"
