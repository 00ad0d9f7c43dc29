#!/usr/bin/env bash
# What TLS costs: sprat with its default encryption (TLS 1.3, rustls) against
# plain TCP (`--no-encryption` on both sides), interleaved in the same rounds,
# over 127.0.0.1 inside a network namespace of its own (only `lo`): push and
# pull over loopback, warm cache (and cold for the sets in COLD_SETS), and push
# through `sprat relay --rate 1gbit`; then the per-connection cost: CALLS
# sequential `sprat ls sprat://127.0.0.1:PORT/` against one server, encrypted
# against plain. Ratios enc_time / plain_time per cell; the issue's goal is
# < 1.10 over loopback and no measurable cost at 1 Gbit/s.
# Writes bench/results/encryption-<stamp>.{md,csv}.
#
# Usage: bench/encryption.sh [SRC_TREE]
#   QUICK=1 bench/encryption.sh      smoke run (2000 files, 64 MiB, 1 round, 10 calls, ~2 minutes)
#   bench/encryption.sh              full run (see bench/README.md; about an hour)
#   SETS=mixed MODES=relay RUNS=9 bench/encryption.sh
#
# Environment (defaults in brackets):
#   SPRAT       sprat binary [target/release/sprat; rebuilt unless BUILD=0]
#   SETS        tree mixed [tree mixed]
#   MODES       push pull relay (relay = push through `sprat relay`) [push pull relay]
#   CACHES      warm cold [warm cold]; cold runs only for the sets in COLD_SETS
#               and never through the relay
#   COLD_SETS   sets that also get cold runs [tree]
#   RUNS        rounds [5; QUICK: 1]
#   CALLS       `sprat ls` calls per way and round for the handshake cost [50; QUICK: 10]
#   LS_RUNS     rounds of those calls [3; QUICK: 1]; 0 skips the handshake part
#   RATE        the relay's cap [1gbit]
#   SRC_TREE    real tree to snapshot for "tree" [the first of
#               ~/.cargo/registry/src, /usr/share, target/ with at least
#               TREE_MIN_FILES files]
#   TREE_MIN_FILES [20000: tens of thousands of files]
#   TREE_FILES  only the first N files of the tree [0 = all; QUICK: 2000]
#   MIXED_TOTAL, MIXED_MAX  the "mixed" set: `sprat gen --total MIXED_TOTAL
#               --dist gridftp --max-size MIXED_MAX` [1GiB, 16MiB; QUICK: 64MiB]
#   SEED        `sprat gen --seed` [1]
#   VERIFY      count | full: how each copy is checked [count]
#   SPRAT_ARGS  extra `sprat cp` arguments, both ways []
#   NETNS       1: run in a network namespace of its own (`unshare -n`) [1]
#   RUN_TIMEOUT seconds before one run is killed [1800]
#   DATA_DIR    data sets, server root, destinations; a real disk [/work/bench-data]
#   RESULTS_DIR [bench/results]
#   REFRESH=1   remake the data sets
#   WARM_DROP   1: drop the page cache before pre-reading a warm run's source [1]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    CALLS=${CALLS:-10}
    LS_RUNS=${LS_RUNS:-1}
    TREE_FILES=${TREE_FILES:-2000}
    MIXED_TOTAL=${MIXED_TOTAL:-64MiB}
fi
SETS=${SETS:-tree mixed}
MODES=${MODES:-push pull relay}
CACHES=${CACHES:-warm cold}
COLD_SETS=${COLD_SETS:-tree}
RUNS=${RUNS:-5}
CALLS=${CALLS:-50}
LS_RUNS=${LS_RUNS:-3}
RATE=${RATE:-1gbit}
TREE_MIN_FILES=${TREE_MIN_FILES:-20000}
TREE_FILES=${TREE_FILES:-0}
SRC_TREE=${1:-${SRC_TREE:-}}
MIXED_TOTAL=${MIXED_TOTAL:-1GiB}
MIXED_MAX=${MIXED_MAX:-16MiB}
SEED=${SEED:-1}
VERIFY=${VERIFY:-count}
SPRAT_ARGS=${SPRAT_ARGS:-}
NETNS=${NETNS:-1}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
REFRESH=${REFRESH:-0}
WARM_DROP=${WARM_DROP:-1}

read -r -a sets <<<"$SETS"
read -r -a modes <<<"$MODES"
read -r -a caches <<<"$CACHES"
read -r -a cold_sets <<<"$COLD_SETS"
read -r -a sprat_args <<<"$SPRAT_ARGS"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $CALLS =~ ^[1-9][0-9]*$ ]] || die "CALLS must be a positive integer"
[[ $LS_RUNS =~ ^[0-9]+$ ]] || die "LS_RUNS must be a number"
[[ $VERIFY == count || $VERIFY == full ]] || die "VERIFY must be count or full"
for s in "${sets[@]}"; do in_list "$s" tree mixed || die "unknown set: $s"; done
for m in "${modes[@]}"; do in_list "$m" push pull relay || die "unknown mode: $m"; done
for c in "${caches[@]}"; do in_list "$c" warm cold || die "unknown cache state: $c"; done
for c in python3 ss setsid timeout find xargs uptime; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
need_cache_control "${caches[@]}"

# ---------------------------------------------------------------- network namespace
# Build first (cargo may need the network), then run the rest in a network
# namespace of its own with only `lo` up: nothing else reaches the servers.
if [[ $NETNS == 1 && -z ${ENCRYPTION_IN_NETNS:-} ]]; then
    sprat_build "$SPRAT"
    for c in unshare ip; do command -v "$c" >/dev/null || die "NETNS=1 needs $c (or NETNS=0)"; done
    log "re-running in a network namespace of its own (unshare -n)"
    # shellcheck disable=SC2016 # expanded by the inner bash
    exec unshare --net -- env ENCRYPTION_IN_NETNS=1 BUILD=0 \
        bash -c 'ip link set lo up && exec "$0" "$@"' "$here/encryption.sh" "$@"
fi
[[ $NETNS == 1 ]] || sprat_build "$SPRAT"

# ---------------------------------------------------------------- directories

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DATA_DIR" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
fs_is_ram "$DATA_DIR" && die "DATA_DIR=$DATA_DIR is on tmpfs/ramfs; use a real disk"
ROOT=$DATA_DIR/root             # exported by both servers
META=$DATA_DIR/meta             # manifests of the data sets
PUSH=$ROOT/encryption           # push destinations (through the servers)
LOCAL=$DATA_DIR/encryption-local # pull destinations
LOGS=$DATA_DIR/logs/encryption-$STAMP
CSV=$RESULTS_DIR/encryption-$STAMP.csv
MD=$RESULTS_DIR/encryption-$STAMP.md

exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-encryption.XXXXXX)
# Destinations left by an interrupted run go too (the sources stay for reuse).
EXIT_REMOVE+=("$TMP" "$PUSH" "$LOCAL")
rm -rf -- "$PUSH" "$LOCAL"
mkdir -p "$ROOT" "$META" "$LOGS" "$PUSH" "$LOCAL"
sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY
clock_start
# The servers' key and the clients' known-servers file stay in the scratch
# directory: the benchmark never touches the user's files.
export XDG_CONFIG_HOME=$TMP/config XDG_STATE_HOME=$TMP/state

# load_now: "L1 L5 L15" of uptime, for the report.
load_now() { uptime | sed 's/.*load average: *//; s/,//g'; }
declare -A load_at
load_at[start]=$(load_now)
log "load average at the start: ${load_at[start]}"

# ---------------------------------------------------------------- data sets

declare -A set_dir set_desc set_files set_bytes
gen_set() { # ARGS... NEWDIR: sprat gen, its report kept in the logs
    "$SPRAT" gen "$@" >>"$LOGS/gen.out" 2>&1 || {
        cat "$LOGS/gen.out" >&2
        die "sprat gen $* failed"
    }
}
if in_list tree "${sets[@]}"; then
    tree=$SRC_TREE
    [[ -n $tree ]] || tree=$(pick_tree "$TREE_MIN_FILES")
    [[ -d $tree ]] || die "SRC_TREE=$tree is not a directory"
    tree=$(cd "$tree" && pwd)
    # Same names and origin files as bench/loopback.sh and bench/local.sh: shared.
    set_dir[tree]="src-tree"
    set_desc[tree]="snapshot of $tree"
    if [[ $TREE_FILES != 0 ]]; then
        set_dir[tree]=src-tree-first$TREE_FILES
        set_desc[tree]="first $TREE_FILES files (sorted paths) of $tree"
    fi
    dataset_ensure "$ROOT/${set_dir[tree]}" "$tree" snapshot_tree "$tree" "$TREE_FILES"
fi
if in_list mixed "${sets[@]}"; then
    # Same name and recipe as bench/local.sh's "mixed" set: shared.
    args=(--total "$MIXED_TOTAL" --dist gridftp --max-size "$MIXED_MAX" --seed "$SEED")
    set_dir[mixed]=src-gen-mixed-$MIXED_TOTAL-gridftp-max$MIXED_MAX-seed$SEED
    set_desc[mixed]="\`sprat gen ${args[*]}\`: GridFTP file sizes capped at $MIXED_MAX"
    dataset_ensure "$ROOT/${set_dir[mixed]}" "sprat gen ${args[*]}" gen_set "${args[@]}"
fi
declare -A set_dirs set_links set_median
for s in "${sets[@]}"; do
    read -r f b d l m < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$f set_bytes[$s]=$b set_dirs[$s]=$d set_links[$s]=$l set_median[$s]=$m
    log "set $s: $f files, $b bytes in $ROOT/${set_dir[$s]}"
done

# ---------------------------------------------------------------- servers and relays
# Two servers over the same root and key: "enc" as shipped (TLS only), "plain"
# with --no-encryption; each with a relay of its own in front for the relay
# cells (one path, no delay, the RATE cap).

declare -A port_of relay_of server_pid relay_pid
start_sprat 0 --key-file "$TMP/server.key"
port_of[enc]=$SPRAT_PORT server_pid[enc]=$SPRAT_PID
FINGERPRINT=$SPRAT_FINGERPRINT
[[ $FINGERPRINT == SHA256:* ]] || die "sprat serve printed no fingerprint (is $SPRAT older than TLS?)"
start_sprat 0 --key-file "$TMP/server.key" --no-encryption
port_of[plain]=$SPRAT_PORT server_pid[plain]=$SPRAT_PID
if in_list relay "${modes[@]}"; then
    for e in enc plain; do
        start_relay "${port_of[$e]}" 0 --rate "$RATE"
        relay_of[$e]=$RELAY_PORT relay_pid[$e]=$RELAY_PID
    done
fi
for e in enc plain; do # setsid execs: the PID is the server's own
    [[ $(cat "/proc/${server_pid[$e]}/comm") == sprat ]] || die "server PID ${server_pid[$e]} is not sprat"
done
# client_args WAY: the `sprat cp`/`sprat ls` options of an encrypted or plain client.
client_args() {
    if [[ $1 == enc ]]; then
        printf '%s\n' --server-fingerprint "$FINGERPRINT"
    else
        printf '%s\n' --no-encryption
    fi
}

# ---------------------------------------------------------------- CPU time
# On a shared machine wall times swing with the other work; the CPU time each
# side used swings much less, and shows where encryption's cost lands.

HZ=$(getconf CLK_TCK)
# proc_cpu PID: user + system CPU seconds the process PID (all its threads) used so far.
proc_cpu() { awk -v hz="$HZ" '{ sub(/^.*\) /, ""); printf "%.2f", ($12 + $13) / hz }' "/proc/$1/stat"; }
# children_cpu VAR: user + system CPU seconds of this shell's waited-for children
# so far (`times`, which must run in this shell, not in a subshell).
children_cpu() {
    times >"$TMP/times"
    printf -v "$1" '%s' "$(awk 'NR == 2 {
        t = 0
        for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); t += a[1] * 60 + a[2] }
        printf "%.3f", t }' "$TMP/times")"
}
# cpu_delta A B: B - A, 3 decimals.
cpu_delta() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", b - a }'; }

# ---------------------------------------------------------------- one copy

echo "stamp,set,mode,cache,way,round,order,seconds,exit,check,dst_files,dst_bytes,src_files,src_bytes,tool_seconds,encryption,bottleneck,client_cpu,server_cpu,relay_cpu,load1,note" >"$CSV"

# run_copy SET MODE CACHE WAY ROUND ORDER: one timed copy into a fresh
# destination, checked and deleted afterwards (untimed).
run_copy() {
    local set=$1 mode=$2 cache=$3 way=$4 round=$5 order=$6
    local name=${set_dir[$1]} src tag dst out err port load1 v check dfiles dbytes detail
    local -a cargs
    src=$ROOT/$name
    tag=$set-$mode-$cache-$way-r$round
    out=$LOGS/$tag.out
    err=$LOGS/$tag.err
    mapfile -t cargs < <(client_args "$way")
    local t0 t1 t2 c0 c1 s0 s1 r0="" r1=""
    mono_now t0
    cache_prepare "$cache" "$src"
    read -r load1 _ </proc/loadavg
    children_cpu c0
    s0=$(proc_cpu "${server_pid[$way]}")
    [[ $mode == relay ]] && r0=$(proc_cpu "${relay_pid[$way]}")
    case $mode in
        push | relay)
            port=${port_of[$way]}
            [[ $mode == relay ]] && port=${relay_of[$way]}
            dst=$PUSH/$tag
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "${cargs[@]}" "${sprat_args[@]}" "$src" \
                "sprat://127.0.0.1:$port/encryption/$tag" >"$out" 2>"$err"
            ;;
        pull)
            dst=$LOCAL/$tag
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "${cargs[@]}" "${sprat_args[@]}" \
                "sprat://127.0.0.1:${port_of[$way]}/$name" "$dst" >"$out" 2>"$err"
            ;;
    esac
    children_cpu c1
    s1=$(proc_cpu "${server_pid[$way]}")
    [[ $mode == relay ]] && r1=$(proc_cpu "${relay_pid[$way]}")
    mono_now t1
    local -a report
    mapfile -t report < <(json_fields "$out" seconds encryption bottleneck)
    local tool_secs=${report[0]:-} encryption=${report[1]:-} bottleneck=${report[2]:-}
    v=$(verify_tree "$META/$name.json" "$dst" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
    IFS=$'\t' read -r check dfiles dbytes detail <<<"$v"
    rm -rf -- "$dst"
    sync
    mono_now t2
    # The report must say the connections were protected as asked.
    if [[ $T_RC == 0 ]]; then
        if [[ $way == enc && $encryption != TLS* ]] || [[ $way == plain && $encryption != none ]]; then
            check=FAIL
            detail="report says encryption '$encryption'${detail:+; $detail}"
        fi
    else
        check=FAIL
        detail="exit $T_RC: $(tail -n 3 "$err" 2>/dev/null)${detail:+; $detail}"
    fi
    local ccpu scpu rcpu=""
    ccpu=$(cpu_delta "$c0" "$c1")
    scpu=$(cpu_delta "$s0" "$s1")
    [[ $mode == relay ]] && rcpu=$(cpu_delta "$r0" "$r1")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
        "$STAMP" "$set" "$mode" "$cache" "$way" "$round" "$order" "$T_SECS" "$T_RC" "$check" \
        "$dfiles" "$dbytes" "${set_files[$set]}" "${set_bytes[$set]}" "$tool_secs" \
        "$(oneline "$encryption")" "$(oneline "$bottleneck")" "$ccpu" "$scpu" "$rcpu" \
        "$load1" "$(oneline "$detail")" >>"$CSV"
    log "$(printf '%-5s %-5s %-4s %-5s r%s %8.3f s  cpu client %s server %s%s  load %s  %s %s  (untimed: %s s)' \
        "$set" "$mode" "$cache" "$way" "$round" "$T_SECS" "$ccpu" "$scpu" "${rcpu:+ relay $rcpu}" \
        "$load1" "$check" "$(oneline "$detail")" "$(cpu_delta "$T_SECS" "$(elapsed "$t0" "$t2")")")"
}

# ---------------------------------------------------------------- copies

t_start=$SECONDS
for s in "${sets[@]}"; do
    # This set's cells: MODE/CACHE; cold ones only for COLD_SETS, never through the relay.
    cells=()
    for c in "${caches[@]}"; do
        [[ $c == cold ]] && ! in_list "$s" "${cold_sets[@]}" && continue
        for m in "${modes[@]}"; do
            [[ $c == cold && $m == relay ]] && continue
            cells+=("$m/$c")
        done
    done
    load_at[$s-start]=$(load_now)
    log "set $s: cells ${cells[*]}, $RUNS rounds; load ${load_at[$s-start]}"
    n=${#cells[@]}
    for ((r = 1; r <= RUNS; r++)); do
        # Cells rotated by one each round; within a cell encrypted and plain
        # back to back, the first of the two alternating between rounds.
        order=0
        for ((k = 0; k < n; k++)); do
            cell=${cells[$(((k + r - 1) % n))]}
            if ((r % 2)); then ways=(enc plain); else ways=(plain enc); fi
            for w in "${ways[@]}"; do
                order=$((order + 1))
                run_copy "$s" "${cell%/*}" "${cell#*/}" "$w" "$r" "$order"
            done
        done
    done
    load_at[$s-end]=$(load_now)
done

# ---------------------------------------------------------------- handshakes
# CALLS sequential `sprat ls sprat://127.0.0.1:PORT/` against one server, each
# timed from its start to its exit (process start, TCP connect, TLS handshake
# or none, token handshake, one listing); encrypted and plain in blocks,
# alternating which goes first.

if ((LS_RUNS > 0)); then
    load_at[ls-start]=$(load_now)
    log "handshakes: $LS_RUNS rounds of $CALLS calls per way; load ${load_at[ls-start]}"
    for ((r = 1; r <= LS_RUNS; r++)); do
        if ((r % 2)); then ways=(enc plain); else ways=(plain enc); fi
        for w in "${ways[@]}"; do
            mapfile -t cargs < <(client_args "$w")
            for ((i = 1; i <= CALLS; i++)); do
                read -r load1 _ </proc/loadavg
                out=$LOGS/ls-$w-r$r.out
                children_cpu c0
                s0=$(proc_cpu "${server_pid[$w]}")
                timed_cmd 60 "$SPRAT" ls "${cargs[@]}" "sprat://127.0.0.1:${port_of[$w]}/" >"$out" 2>"$LOGS/ls-$w-r$r.err"
                children_cpu c1
                s1=$(proc_cpu "${server_pid[$w]}")
                check=ok detail=""
                if [[ $T_RC != 0 ]]; then
                    check=FAIL
                    detail="exit $T_RC: $(tail -n 2 "$LOGS/ls-$w-r$r.err")"
                elif ! grep -qx encryption "$out"; then
                    check=FAIL
                    detail="the listing lacks encryption/"
                fi
                printf '%s,ls,ls,-,%s,%s,%s,%s,%s,%s,,,,,,,,%s,%s,,%s,%s\n' "$STAMP" "$w" "$r" "$i" \
                    "$T_SECS" "$T_RC" "$check" "$(cpu_delta "$c0" "$c1")" "$(cpu_delta "$s0" "$s1")" \
                    "$load1" "$(oneline "$detail")" >>"$CSV"
            done
            log "ls $w r$r: $CALLS calls, last $T_SECS s"
        done
    done
    load_at[ls-end]=$(load_now)
fi
t_total=$((SECONDS - t_start))
load_at[end]=$(load_now)
log "load average at the end: ${load_at[end]}"

# ---------------------------------------------------------------- report

{
    echo "# What encryption costs sprat, $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC; cp args: --json ${SPRAT_ARGS:-(defaults)}"
    echo "- servers: \`sprat serve --key-file KEY\` (enc: TLS only, as shipped) and" \
        "\`sprat serve --key-file KEY --no-encryption\` (plain), same root; clients:" \
        "\`sprat cp --server-fingerprint SHA256:...\` (enc) and \`sprat cp --no-encryption\` (plain)"
    echo "- network: a namespace of its own (NETNS=$NETNS), 127.0.0.1; relay cells: \`sprat relay" \
        "--delay 0ms --rate $RATE\` (window auto) in front of each server"
    echo "- $RUNS rounds (medians); each round runs every cell enc and plain back to back, the cells" \
        "rotated by one and the enc/plain order flipped each round; fresh destination per run," \
        "checked ($VERIFY) and deleted untimed; warm = page cache dropped, then the source read" \
        "(WARM_DROP=$WARM_DROP); cold = \`sync; echo 3 > /proc/sys/vm/drop_caches\`"
    echo "- load average (1/5/15 min): start ${load_at[start]}, end ${load_at[end]}"
    for s in "${sets[@]}"; do
        echo "  - set $s: start ${load_at[$s-start]}, end ${load_at[$s-end]}"
    done
    if ((LS_RUNS > 0)); then
        echo "  - handshakes: start ${load_at[ls-start]}, end ${load_at[ls-end]}"
    fi
    echo "- wall time: ${t_total}s; raw runs: $(basename "$CSV"); logs: $LOGS"
    for s in "${sets[@]}"; do
        echo "- set **$s**: ${set_files[$s]} files, ${set_bytes[$s]} bytes, ${set_dirs[$s]} dirs," \
            "${set_links[$s]} symlinks, median file ${set_median[$s]} B — ${set_desc[$s]}"
    done
    echo
} >"$MD"

python3 - "$CSV" "$RATE" >>"$MD" <<'PY'
import csv, statistics, sys
from collections import OrderedDict

rows = list(csv.DictReader(open(sys.argv[1])))
rate = sys.argv[2]
copies = [r for r in rows if r["set"] != "ls"]
calls = [r for r in rows if r["set"] == "ls"]

def med(xs):
    return statistics.median(xs) if xs else None

def secs(rs):
    return [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]

def f(x, nd=3):
    return "—" if x is None else "%.*f" % (nd, x)

mode_name = {"push": "push, loopback", "pull": "pull, loopback", "relay": "push, relay %s" % rate}

def cpu(rs, key):
    return [float(r[key]) for r in rs if r["check"] != "FAIL" and r[key] != ""]

def spread(xs):
    return "%.2f (%.2f–%.2f)" % (med(xs), min(xs), max(xs)) if xs else "—"

groups = OrderedDict()
for r in copies:
    groups.setdefault(r["set"], OrderedDict()).setdefault((r["mode"], r["cache"]), []).append(r)
for s, g in groups.items():
    r0 = next(iter(g.values()))[0]
    files, nbytes = int(r0["src_files"]), int(r0["src_bytes"])
    print("## %s: %d files, %.1f MB\n" % (s, files, nbytes / 1e6))
    print("| path | cache | enc s: median (min–max) | plain s: median (min–max) | enc / plain | per round: median (min–max) "
          "| enc MB/s | plain MB/s | CPU s enc: client + server | CPU s plain: client + server | CPU enc / plain | check | goal |")
    print("|---|---|--:|--:|--:|---|--:|--:|--:|--:|--:|---|---|")
    order = {"push": 0, "pull": 1, "relay": 2}
    cpu_rows = []
    for (mode, cache) in sorted(g, key=lambda k: ({"warm": 0, "cold": 1}[k[1]], order[k[0]])):
        rs = g[(mode, cache)]
        enc = [r for r in rs if r["way"] == "enc"]
        pla = [r for r in rs if r["way"] == "plain"]
        se, sp = secs(enc), secs(pla)
        me, mp = med(se), med(sp)
        ratio = me / mp if me and mp else None
        per_round = []
        for rnd in sorted({r["round"] for r in rs}, key=int):
            a = secs([r for r in enc if r["round"] == rnd])
            b = secs([r for r in pla if r["round"] == rnd])
            if a and b:
                per_round.append(a[0] / b[0])
        pr = ("%.3f (%.3f–%.3f)" % (med(per_round), min(per_round), max(per_round))) if per_round else "—"
        ce = [c + v for c, v in zip(cpu(enc, "client_cpu"), cpu(enc, "server_cpu"))]
        cp = [c + v for c, v in zip(cpu(pla, "client_cpu"), cpu(pla, "server_cpu"))]
        fails = sum(1 for r in rs if r["check"] == "FAIL")
        check = ("**FAIL** %d/%d" % (fails, len(rs))) if fails else "ok %d/%d" % (len(rs), len(rs))
        if ratio is None:
            goal = "—"
        elif mode == "relay":
            # "No measurable cost": the enc median within the plain runs' own spread.
            goal = "met" if me <= max(sp) else "not met (enc median above every plain run)"
        else:
            goal = "met (< 1.10)" if ratio < 1.10 else "**not met** (>= 1.10)"
        print("| %s | %s | %s | %s | **%s** | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            mode_name[mode], cache, spread(se), spread(sp), f(ratio), pr,
            f(nbytes / 1e6 / me if me else None, 1), f(nbytes / 1e6 / mp if mp else None, 1),
            "%.2f + %.2f" % (med(cpu(enc, "client_cpu")), med(cpu(enc, "server_cpu"))) if ce else "—",
            "%.2f + %.2f" % (med(cpu(pla, "client_cpu")), med(cpu(pla, "server_cpu"))) if cp else "—",
            f(med(ce) / med(cp) if ce and cp and med(cp) else None), check, goal))
        if ce and cp:
            cpu_rows.append((mode_name[mode], cache, med(ce) - med(cp), nbytes))
        if mode == "relay":
            re, rp = cpu(enc, "relay_cpu"), cpu(pla, "relay_cpu")
            if re and rp:
                cpu_rows.append(("relay process", cache, med(re) - med(rp), None))
    print()
    for name, cache, extra, nb in cpu_rows:
        if nb:
            print("- %s, %s: encryption adds %.2f CPU s (client + server), %.2f ns per byte moved" % (
                name, cache, extra, extra / nb * 1e9))
        else:
            print("- the relay itself, %s: %+.2f CPU s enc against plain (it forwards bytes either way)" % (cache, extra))
    notes = sorted({"%s %s %s r%s: %s" % (r["mode"], r["cache"], r["way"], r["round"], r["note"])
                    for rs in g.values() for r in rs if r["check"] == "FAIL"})
    for n in notes:
        print("- FAIL: " + n)
    suites = sorted({r["encryption"] for rs in g.values() for r in rs if r["encryption"]})
    if suites:
        print("- reported encryption: " + "; ".join(suites))
    loads = [float(r["load1"]) for rs in g.values() for r in rs]
    print("- 1-min load average at the start of the runs: median %.1f, min %.1f, max %.1f" % (
        med(loads), min(loads), max(loads)))
    print()

if calls:
    print("## Per-connection cost: sequential `sprat ls sprat://127.0.0.1:PORT/`\n")
    print("| way | calls | median ms per call | min ms | p90 ms | total s per %d calls: median of rounds "
          "| CPU ms per call: client + server (mean) | check |" % max(int(r["order"]) for r in calls))
    print("|---|--:|--:|--:|--:|--:|--:|---|")
    m, mc = {}, {}
    for way in ("enc", "plain"):
        rs = [r for r in calls if r["way"] == way]
        xs = sorted(secs(rs))
        if not xs:
            continue
        m[way] = med(xs)
        totals = [sum(secs([r for r in rs if r["round"] == rnd])) for rnd in sorted({r["round"] for r in rs})]
        fails = sum(1 for r in rs if r["check"] == "FAIL")
        ok = [r for r in rs if r["check"] != "FAIL"]
        # CPU per call: the mean over all calls (the server's is counted in 10 ms ticks).
        mc[way] = (sum(cpu(ok, "client_cpu")) / len(ok), sum(cpu(ok, "server_cpu")) / len(ok))
        print("| %s | %d | %.2f | %.2f | %.2f | %.3f | %.2f + %.2f | %s |" % (
            way, len(rs), m[way] * 1e3, xs[0] * 1e3, xs[int(0.9 * (len(xs) - 1))] * 1e3, med(totals),
            mc[way][0] * 1e3, mc[way][1] * 1e3, ("**FAIL** %d" % fails) if fails else "ok"))
    print()
    if "enc" in m and "plain" in m:
        print("TLS adds %.2f ms per connection (median enc - median plain; %.2fx) and %.2f ms of CPU (client + server); "
              "each call is a process start, a TCP connection, the TLS handshake (enc), the token handshake and "
              "one listing.\n" % ((m["enc"] - m["plain"]) * 1e3, m["enc"] / m["plain"],
                                  (sum(mc["enc"]) - sum(mc["plain"])) * 1e3))

print("Columns: *enc / plain* = the enc median / the plain median (> 1: encryption costs time); *per round* = "
      "the ratio of the two back-to-back runs of each round; *MB/s* = source bytes (10^6) / median; *CPU s* = "
      "medians of the user + system CPU time of the client (`sprat cp`) and of the server during the run "
      "(the relay's not included); *goal*: "
      "< 1.10 over loopback; through the relay, no measurable cost = the enc median within the plain runs' "
      "range. Runs that failed their check or whose report named the wrong encryption are left out.")
PY

log "wrote $CSV"
log "wrote $MD"
cat "$MD"
