#!/usr/bin/env bash
# WAN benchmark: push through `sprat relay` (user-space delay and a shared
# bandwidth cap; this kernel has no netem) at several round trips, sprat with
# automatic settings against an rsync daemon, tar | nc and GridFTP through the
# same relay. Data sets: a 1 GiB GridFTP-distribution set (capped at 16 MiB),
# 100,000 x 4 KiB and one 4 GiB file. Sources and destinations live on tmpfs,
# so storage is far faster than the cap and the cap is the limit; the read and
# write limits (`sprat bench read|write`) of each set are measured too.
# Writes bench/results/wan-<stamp>.{md,csv,png}.
#
# Usage: bench/wan.sh
#   QUICK=1 bench/wan.sh     smoke run (small sets, RTT 0.2 and 30 ms, 1 run)
#
# Environment (defaults in brackets):
#   SPRAT        sprat binary [target/release/sprat; rebuilt unless BUILD=0]
#   SPRAT_ARGS   extra arguments of `sprat cp` []
#   RTTS         round trips in ms [0.2 10 30 100]
#   RATE         relay bandwidth cap [1gbit]
#   SETS         gridftp k4 big [all three]
#   TOOLS        sprat rsync tarnc gridftp [all four; gridftp needs root]
#   GRIDFTP_ARGS globus-url-copy options [-r -cd -pp -cc 16 -p 4]
#   RUNS         runs per (set, RTT, tool) [3; QUICK: 1]
#   RUN_TIMEOUT  seconds before one run is killed [600]
#   DATA_DIR     sets and destinations, on tmpfs [/dev/shm/sprat-wan]
#   RESULTS_DIR  [bench/results]
#   REPORT_FROM  CSV files of earlier runs (same sets): no new runs, one report of them all
#
# GridFTP: globus-url-copy opens its data channels to the address and port of
# the server's PASV reply, so a relay of the control port alone would not see
# them. globus-gridftp-server therefore runs in a network namespace of its own
# (a veth pair: 10.231.N.2 inside, 10.231.N.1 outside; no NAT), with
# -data-interface set to the outside address and -port-range to a port range;
# its passive listeners bind every address of the namespace. On the outside
# address only the relay listens: on its control port and, with
# `--ports FIRST-LAST`, on that range, forwarded to the same ports inside, all
# over the same links. So control and data connections both cross the relay
# (its stderr logs each one; the CSV notes count them per run). The namespace
# and the server are removed at exit.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    RTTS=${RTTS:-0.2 30}
fi
RUNS=${RUNS:-3}
RTTS=${RTTS:-0.2 10 30 100}
RATE=${RATE:-1gbit}
SETS=${SETS:-gridftp k4 big}
TOOLS=${TOOLS:-sprat rsync tarnc gridftp}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
DATA_DIR=${DATA_DIR:-/dev/shm/sprat-wan}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
SPRAT_ARGS=${SPRAT_ARGS:-}
GRIDFTP_ARGS=${GRIDFTP_ARGS:--r -cd -pp -cc 16 -p 4}
RSYNC_CHROOT=${RSYNC_CHROOT:-yes}

read -r -a rtts <<<"$RTTS"
read -r -a sets <<<"$SETS"
read -r -a tools <<<"$TOOLS"
read -r -a sprat_args <<<"$SPRAT_ARGS"
read -r -a gridftp_args <<<"$GRIDFTP_ARGS"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
for s in "${sets[@]}"; do in_list "$s" gridftp k4 big || die "unknown set: $s"; done
for t in "${tools[@]}"; do in_list "$t" sprat rsync tarnc gridftp || die "unknown tool: $t"; done
for c in python3 ss setsid timeout tar rsync; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
NC=nc
if command -v nc.openbsd >/dev/null; then NC=nc.openbsd; fi
"$NC" -h 2>&1 | grep -q OpenBSD || die "tar | nc needs OpenBSD netcat (scripts/install-deps.sh)"
if in_list gridftp "${tools[@]}"; then
    for c in globus-gridftp-server globus-url-copy ip; do
        command -v "$c" >/dev/null || die "gridftp needs $c (run scripts/install-deps.sh)"
    done
    [[ $(id -u) == 0 ]] || die "gridftp needs root (a network namespace); leave it out of TOOLS"
fi

sprat_build "$SPRAT"
STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DATA_DIR" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
ROOT=$DATA_DIR/root
PUSH=$ROOT/wan-push
META=$DATA_DIR/meta
LOGS=$DATA_DIR/logs/wan-$STAMP
mkdir -p "$ROOT" "$META" "$LOGS"
CSV=$RESULTS_DIR/wan-$STAMP.csv
MD=$RESULTS_DIR/wan-$STAMP.md
PNG=$RESULTS_DIR/wan-$STAMP.png
exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-wan.XXXXXX)
EXIT_REMOVE+=("$TMP" "$PUSH")
rm -rf -- "$PUSH"
mkdir -p "$PUSH"
sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY
clock_start

# ---------------------------------------------------------------- data sets

declare -A set_dir set_gen set_files set_bytes
define_set() { # SET DIR GEN_ARGS...
    local s=$1 d=$2
    shift 2
    set_dir[$s]=$d
    set_gen[$s]="$*"
}
if [[ $QUICK == 1 ]]; then
    define_set gridftp gridftp-64MiB --total 64MiB --dist gridftp --max-size 16MiB --seed 1
    define_set k4 k4-2000 --files 2000 --size 4KiB --seed 1
    define_set big big-256MiB --files 1 --size 256MiB --seed 1
else
    define_set gridftp gridftp-1GiB --total 1GiB --dist gridftp --max-size 16MiB --seed 1
    define_set k4 k4-100000 --files 100000 --size 4KiB --seed 1
    define_set big big-4GiB --files 1 --size 4GiB --seed 1
fi
for s in "${sets[@]}"; do
    read -r -a gen_args <<<"${set_gen[$s]}"
    dataset_ensure "$ROOT/${set_dir[$s]}" "sprat gen ${set_gen[$s]}" \
        "$SPRAT" gen "${gen_args[@]}" >>"$LOGS/gen.out"
    read -r f b _ _ _ < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$f set_bytes[$s]=$b
done

# Storage limits of each set on this tmpfs (the cap should be the limit).
declare -A read_limit write_limit
for s in "${sets[@]}"; do
    "$SPRAT" bench read --json "$ROOT/${set_dir[$s]}" >"$TMP/read.json"
    rm -rf -- "$DATA_DIR/wlimit"
    "$SPRAT" bench write --json "$ROOT/${set_dir[$s]}" "$DATA_DIR/wlimit" >"$TMP/write.json"
    rm -rf -- "$DATA_DIR/wlimit"
    read_limit[$s]=$(json_fields "$TMP/read.json" seconds)
    write_limit[$s]=$(json_fields "$TMP/write.json" seconds)
    log "set $s: read limit ${read_limit[$s]} s, write limit ${write_limit[$s]} s"
done

# ---------------------------------------------------------------- servers and relays

# GridFTP's server in a namespace of its own (see the header): sets GFTP_NS,
# GFTP_OUT (the address the relay listens on and the server announces),
# GFTP_IN (the server's), GFTP_PORT (its control port) and GFTP_FIRST..GFTP_LAST
# (its passive ports).
GFTP_PORT=2811
start_gridftp_ns() {
    local n link=sgw$$ first="" last pid i used
    used=" $(ip -4 -o addr show) $(ip -4 route show) "
    for ((n = 1; n < 255; n++)); do # a /24 that no address or route of this host uses
        [[ $used == *[[:space:]]10.231.$n.* ]] || break
    done
    ((n < 255)) || die "gridftp: no free 10.231.N.0/24"
    GFTP_NS=sprat-wan-gftp-$$ GFTP_OUT=10.231.$n.1 GFTP_IN=10.231.$n.2
    ip netns add "$GFTP_NS" || die "gridftp: cannot add network namespace $GFTP_NS"
    EXIT_HOOKS+=("ip link del ${link}o 2>/dev/null" "ip netns del $GFTP_NS")
    {
        ip link add "${link}o" type veth peer name "${link}i" &&
            ip link set "${link}i" netns "$GFTP_NS" &&
            ip addr add "$GFTP_OUT/24" dev "${link}o" && ip link set "${link}o" up &&
            ip netns exec "$GFTP_NS" ip addr add "$GFTP_IN/24" dev "${link}i" &&
            ip netns exec "$GFTP_NS" ip link set "${link}i" up &&
            ip netns exec "$GFTP_NS" ip link set lo up
    } || die "gridftp: cannot set up the veth pair ${link}o/${link}i"
    # 128 passive ports below the ephemeral range, none listening on this host.
    for ((i = 0; i < 50; i++)); do
        first=$((20000 + RANDOM % 96 * 128)) last=$((first + 127))
        ss -Hltn "( sport >= :$first and sport <= :$last )" | grep -q . || break
        first=""
    done
    [[ -n $first ]] || die "gridftp: no free range of 128 ports"
    GFTP_FIRST=$first GFTP_LAST=$last
    setsid ip netns exec "$GFTP_NS" globus-gridftp-server -aa -anonymous-user root -allow-root \
        -p "$GFTP_PORT" -data-interface "$GFTP_OUT" -port-range "$first,$last" \
        -d error -l "$LOGS/gridftp.log" </dev/null >"$LOGS/gridftp.out" 2>&1 &
    pid=$!
    bg_register "$pid"
    for ((i = 0; i < 1500; i++)); do
        ip netns exec "$GFTP_NS" ss -Hltn "sport = :$GFTP_PORT" | grep -q . && break
        kill -0 "$pid" 2>/dev/null || i=1500
        sleep 0.01
    done
    ((i < 1500)) || die "globus-gridftp-server did not start: $(oneline "$(tail -n 3 "$LOGS/gridftp.out")")"
    log "globus-gridftp-server pid $pid in namespace $GFTP_NS on $GFTP_IN:$GFTP_PORT," \
        "passive ports $first-$last announced on $GFTP_OUT"
}

start_sprat
start_rsyncd
TARNC_PORT=$(free_port)
if in_list gridftp "${tools[@]}"; then start_gridftp_ns; fi

# run_one SET TOOL RTT ROUND PORT: one timed push through the relay at PORT.
run_one() {
    local set=$1 tool=$2 rtt=$3 round=$4 port=$5
    local name=${set_dir[$set]} src tag dst err out v check detail extra=""
    src=$ROOT/$name
    tag=$set-$tool-rtt$rtt-r$round
    dst=$PUSH/$tag
    err=$LOGS/$tag.err
    out=$LOGS/$tag.out
    : >"$err"
    case $tool in
        sprat)
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "${sprat_args[@]}" "$src" \
                "sprat://127.0.0.1:$port/wan-push/$tag" >"$out" 2>"$err"
            R_SECS=$T_SECS R_RC=$T_RC
            extra=$(python3 -c '
import json, sys
p = json.load(open(sys.argv[1])).get("path") or {}
print("rtt %.1f ms; streams %s->%s; tail %.2f s, idle %.2f s" % (p.get("rtt_ms", 0),
      p.get("streams_start"), p.get("streams_max"), p.get("tail_s", 0), p.get("tail_idle_s", 0)))
' "$out" 2>/dev/null || true)
            ;;
        rsync)
            timed_cmd "$RUN_TIMEOUT" rsync -a "$src/" \
                "rsync://127.0.0.1:$port/mod/wan-push/$tag/" >"$out" 2>"$err"
            R_SECS=$T_SECS R_RC=$T_RC
            ;;
        tarnc) run_tarnc "$src" "$dst" "$err" "$TARNC_PORT" "$port" ;;
        gridftp)
            local seen
            seen=$(wc -l <"$GFTP_RELAY_LOG.err")
            timed_cmd "$RUN_TIMEOUT" globus-url-copy "${gridftp_args[@]}" "file://$src/" \
                "ftp://$GFTP_OUT:$port$dst/" >"$out" 2>"$err"
            R_SECS=$T_SECS R_RC=$T_RC
            # The relay logs "FROM -> LISTENER -> TO" per connection it accepted.
            extra=$(tail -n +$((seen + 1)) "$GFTP_RELAY_LOG.err" | awk -v ctl="$GFTP_OUT:$port" '
                $4 == "->" && $6 == "->" { if ($5 == ctl) c++; else d++ }
                END { printf "relay: %d control + %d data connections", c, d }')
            ;;
    esac
    v=$(verify_tree "$META/$name.json" "$dst" count) || v=$'FAIL\t0\t0\tverifier crashed'
    IFS=$'\t' read -r check _ _ detail <<<"$v"
    rm -rf -- "$dst"
    if [[ $R_RC != 0 ]]; then
        check=FAIL
        detail="exit $R_RC: $(tail -n 2 "$err" 2>/dev/null)"
    fi
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' "$STAMP" "$set" "$rtt" "$round" "$tool" \
        "$R_SECS" "$R_RC" "$check" "${set_files[$set]}" "${set_bytes[$set]}" \
        "$(oneline "$extra")" "$(oneline "$detail")" >>"$CSV"
    log "$(printf '%-7s rtt %-5s %-6s r%s %8.2f s  %s %s %s' "$set" "$rtt" "$tool" "$round" \
        "$R_SECS" "$check" "$extra" "$(oneline "$detail")")"
}

# sprat_path: sprat's path report; for gridftp, the relay's connection counts.
echo "stamp,set,rtt_ms,round,tool,seconds,exit,check,src_files,src_bytes,sprat_path,note" >"$CSV"
t_start=$SECONDS
if [[ -n ${REPORT_FROM:-} ]]; then
    read -r -a from <<<"$REPORT_FROM"
    for f in "${from[@]}"; do tail -n +2 "$f" >>"$CSV"; done
    rtts=()
    log "report of ${from[*]}"
fi
for rtt in "${rtts[@]}"; do
    delay=$(awk -v r="$rtt" 'BEGIN { printf "%g", r / 2 }')
    RELAY_PIDS=()
    declare -A port_of=()
    start_relay "$SPRAT_PORT" "$delay" --rate "$RATE"
    RELAY_PIDS+=("$RELAY_PID")
    port_of[sprat]=$RELAY_PORT
    start_relay "$RSYNC_PORT" "$delay" --rate "$RATE"
    RELAY_PIDS+=("$RELAY_PID")
    port_of[rsync]=$RELAY_PORT
    start_relay "$TARNC_PORT" "$delay" --rate "$RATE"
    RELAY_PIDS+=("$RELAY_PID")
    port_of[tarnc]=$RELAY_PORT
    if in_list gridftp "${tools[@]}"; then
        RELAY_HOST=$GFTP_OUT start_relay "$GFTP_IN:$GFTP_PORT" "$delay" --rate "$RATE" \
            --ports "$GFTP_FIRST-$GFTP_LAST"
        RELAY_PIDS+=("$RELAY_PID")
        port_of[gridftp]=$RELAY_PORT
        GFTP_RELAY_LOG=$RELAY_LOG
    fi
    "$SPRAT" doctor "sprat://127.0.0.1:${port_of[sprat]}/" --rate "$RATE" >"$LOGS/doctor-$rtt.txt" 2>&1 || true
    log "RTT $rtt ms: $(grep -m1 'measured round trips' "$LOGS/doctor-$rtt.txt" || echo 'no RTT measured')"
    for s in "${sets[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            nt=${#tools[@]}
            for ((k = 0; k < nt; k++)); do
                t=${tools[$(((k + r - 1) % nt))]}
                run_one "$s" "$t" "$rtt" "$r" "${port_of[$t]}"
            done
        done
    done
    for pid in "${RELAY_PIDS[@]}"; do bg_kill "$pid"; done
done
t_total=$((SECONDS - t_start))

# ---------------------------------------------------------------- report

{
    echo "# sprat through a WAN relay (push), $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC"
    echo "- relay: \`sprat relay --delay RTT/2 --rate $RATE\` (window: this host's autotuned TCP window; see bench/README.md), one per server and RTT"
    echo "- commands: \`sprat cp --json ${SPRAT_ARGS:+$SPRAT_ARGS }SRC sprat://RELAY/DST\` (automatic streams and buffers);" \
        "\`rsync -a SRC/ rsync://RELAY/mod/DST/\` (daemon, use chroot = $RSYNC_CHROOT);" \
        "\`tar -C SRC -cf - . | nc -N RELAY\` into \`nc -l | tar -C DST -xf -\`;" \
        "\`globus-url-copy $GRIDFTP_ARGS file://SRC/ ftp://RELAY/DST/\`"
    echo "- GridFTP: \`globus-gridftp-server -aa\` in a network namespace of its own, \`-data-interface\` the relay's address and \`-port-range\` a range the relay also forwards (\`sprat relay --ports\`), so control and data connections share the relay's path (its notes count both)"
    echo "- sources and destinations on tmpfs ($DATA_DIR), warm; runs: $RUNS per row, order rotated; copies checked by count, paths and sizes; wall time ${t_total}s"
    for s in "${sets[@]}"; do
        echo "- set **$s**: \`sprat gen ${set_gen[$s]}\`: ${set_files[$s]} files, ${set_bytes[$s]} bytes;" \
            "read limit ${read_limit[$s]} s, write limit ${write_limit[$s]} s"
    done
    echo
} >"$MD"

python3 - "$CSV" "$RATE" "${sets[*]}" >>"$MD" <<PY
import csv, statistics, sys
from collections import OrderedDict
rows = list(csv.DictReader(open(sys.argv[1])))
rate_txt = sys.argv[2].lower()
mult = {"gbit": 1e9, "mbit": 1e6, "kbit": 1e3}
cap = next((float(rate_txt[:-len(u)]) * m / 8 for u, m in mult.items() if rate_txt.endswith(u)), None)
limits = {$(for s in "${sets[@]}"; do printf '"%s": (%s, %s), ' "$s" "${read_limit[$s]:-0}" "${write_limit[$s]:-0}"; done)}
by = OrderedDict()
for r in rows:
    by.setdefault((r["set"], r["rtt_ms"]), OrderedDict()).setdefault(r["tool"], []).append(r)
def med(rs):
    g = [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]
    return statistics.median(g) if g else None
def f(x, nd=2):
    return "—" if x is None else "%.*f" % (nd, x)
print("| set | RTT ms | t_limit s | sprat s | sprat MB/s | sprat / limit | rsync / sprat | tar\\\\|nc / sprat | GridFTP / sprat | sprat streams, tail |")
print("|---|--:|--:|--:|--:|--:|--:|--:|--:|---|")
for (s, rtt), tools in by.items():
    first = next(iter(tools.values()))[0]
    nbytes = int(first["src_bytes"])
    rd, wr = limits.get(s, (0, 0))
    t_limit = max(nbytes / cap if cap else 0, rd, wr)
    sp = med(tools.get("sprat", []))
    notes = [r["sprat_path"] for r in tools.get("sprat", []) if r["sprat_path"]]
    fails = sum(r["check"] == "FAIL" for rs in tools.values() for r in rs)
    def peer(t):
        m = med(tools.get(t, []))
        return f(m / sp if sp and m else None)
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        s, rtt, f(t_limit), f(sp), f(nbytes / 1e6 / sp if sp else None, 1),
        f(t_limit / sp if sp else None), peer("rsync"), peer("tarnc"), peer("gridftp"),
        (notes[len(notes) // 2] if notes else "") + ("; %d FAILED runs" % fails if fails else "")))
print()
print("*t_limit* = the slowest of bytes / cap, the read limit and the write limit (tmpfs): the least time any tool could take; "
      "*sprat / limit* = t_limit / t_sprat (1.0 = at the limit; goal >= 0.8); peer columns = t_peer / t_sprat (> 1: sprat is faster). Medians of the runs that passed the check.")
print()
print("Median seconds of every tool (— : not run or no run passed the check):")
print()
print("| set | RTT ms | t_limit s | sprat s | rsync s | tar\\\\|nc s | GridFTP s | GridFTP connections (relay log) |")
print("|---|--:|--:|--:|--:|--:|--:|---|")
for (s, rtt), tools in by.items():
    nbytes = int(next(iter(tools.values()))[0]["src_bytes"])
    rd, wr = limits.get(s, (0, 0))
    notes = [r["sprat_path"] for r in tools.get("gridftp", []) if r["sprat_path"]]
    print("| %s | %s | %s | %s |" % (s, rtt, f(max(nbytes / cap if cap else 0, rd, wr)),
          " | ".join(f(med(tools.get(t, []))) for t in ("sprat", "rsync", "tarnc", "gridftp")))
          + " %s |" % (notes[len(notes) // 2] if notes else ""))
PY

plot_python
if [[ -n $PLOT_PY ]]; then
    "$PLOT_PY" - "$CSV" "$PNG" <<'PY' || log "warning: plot failed"
import csv, statistics, sys
from collections import defaultdict
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
rows = list(csv.DictReader(open(sys.argv[1])))
sets = []
for r in rows:
    if r["set"] not in sets:
        sets.append(r["set"])
fig, axes = plt.subplots(1, len(sets), figsize=(5.5 * len(sets), 4.2), squeeze=False)
for ax, s in zip(axes[0], sets):
    pts = defaultdict(list)
    for r in rows:
        if r["set"] == s and r["check"] != "FAIL":
            pts[(r["tool"], float(r["rtt_ms"]))].append(int(r["src_bytes"]) / 1e6 / float(r["seconds"]))
    for tool in ("sprat", "rsync", "tarnc", "gridftp"):
        xs = sorted(rtt for (t, rtt) in pts if t == tool)
        if not xs:
            continue
        ax.plot(xs, [statistics.median(pts[(tool, x)]) for x in xs], marker="o",
                label={"tarnc": "tar | nc", "gridftp": "GridFTP"}.get(tool, tool))
    ax.set_xscale("log")
    ax.set_xlabel("round trip (ms, log)")
    ax.set_ylabel("throughput (MB/s)")
    ax.set_title(s)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
PY
    [[ -s $PNG ]] && echo "![throughput against round trip]($(basename "$PNG"))" >>"$MD"
fi
log "wrote $CSV and $MD"
cat "$MD"
