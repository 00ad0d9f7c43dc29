#!/usr/bin/env bash
# Peer comparison over loopback, push only (local tree -> server on
# 127.0.0.1): sprat against an rsync daemon, tar | nc, GridFTP
# (globus-gridftp-server + globus-url-copy), XRootD (xrootd + xrdcp) and rclone
# (rclone serve sftp + rclone copy), with
# the read limit and sprat's network limit, on data sets of several file
# sizes, cold and warm cache. Writes bench/results/peers-<stamp>.{md,csv,png}.
#
# Usage: bench/peers.sh
#   QUICK=1 bench/peers.sh     smoke run (each set ~2000 files or 64 MiB, 1 run)
#   bench/peers.sh             full run (see bench/README.md; takes long)
#
# Environment (defaults in brackets):
#   SPRAT       sprat binary [target/release/sprat; rebuilt with cargo unless
#               BUILD=0; a failed build falls back to an existing binary]
#   SPRAT_ARGS  extra arguments for `sprat cp` []
#   DATA_DIR    data sets, server roots and destinations; same disk, not tmpfs
#               [/work/bench-data]
#   SETS        k4 k64 m1 gridftp [all four]:
#                 k4      sprat gen --files 100000 --size 4KiB   [QUICK: 2000 files]
#                 k64     sprat gen --files 10000 --size 64KiB   [QUICK: 1000 files]
#                 m1      sprat gen --files 1000 --size 1MiB     [QUICK: 64 files]
#                 gridftp sprat gen --total 2GiB --dist gridftp --max-size 16MiB
#                         [QUICK: --total 64MiB]
#   SEED        seed of `sprat gen` [1]
#   TOOLS       read netlimit sprat rsync tarnc gridftp xrootd rclone [all]
#               (read = parallel-read limit, netlimit = `sprat bench network`)
#   CACHES      cold warm [cold warm]
#   RUNS        runs per (set, tool, cache) [3; QUICK: 1]
#   VERIFY      count | full [full]: how each copy is checked
#   READ_PAR    parallelism of the read limit [16]
#   GRIDFTP_ARGS  globus-url-copy options [-r -cd -pp -cc 16 -p 4]
#   XRDCP_ARGS    xrdcp options [--parallel 16 -r -s]
#   XRD_USER    user the xrootd server runs as when started by root [xrootd]
#   RCLONE_ARGS rclone copy options [--transfers 32 --checkers 32 --no-check-dest
#               --retries 1]. The server is `rclone serve sftp DST_ROOT --addr
#               127.0.0.1:PORT --user sprat --pass RANDOM` (faster here than
#               `rclone serve webdav`, which wrote one file at a time: 100 x 4 KiB
#               took 4.4 s against 1.1 s over sftp); the client's remote is in a
#               private config file (type sftp, that host, port, user and
#               password; nothing else), so no user settings leak into the runs.
#               --no-check-dest: the destination is new and empty, so rclone
#               neither lists nor stats it; hash check after upload left on.
#   RUN_TIMEOUT seconds before one run is killed [1800; QUICK: 300]
#   RESULTS_DIR where the .md/.csv/.png go [bench/results]
#   REFRESH=1   regenerate the data sets
#   RSYNC_CHROOT "use chroot" of the rsync daemon module [yes]
#   WARM_DROP   1: drop the page cache before pre-reading a warm run's source [1]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    RUN_TIMEOUT=${RUN_TIMEOUT:-300}
fi
RUNS=${RUNS:-3}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
SETS=${SETS:-k4 k64 m1 gridftp}
SEED=${SEED:-1}
TOOLS=${TOOLS:-read netlimit sprat rsync tarnc gridftp xrootd rclone}
CACHES=${CACHES:-cold warm}
VERIFY=${VERIFY:-full}
READ_PAR=${READ_PAR:-16}
GRIDFTP_ARGS=${GRIDFTP_ARGS:--r -cd -pp -cc 16 -p 4}
XRDCP_ARGS=${XRDCP_ARGS:---parallel 16 -r -s}
XRD_USER=${XRD_USER:-xrootd}
RCLONE_ARGS=${RCLONE_ARGS:---transfers 32 --checkers 32 --no-check-dest --retries 1}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
SPRAT_ARGS=${SPRAT_ARGS:-}
RSYNC_CHROOT=${RSYNC_CHROOT:-yes}
WARM_DROP=${WARM_DROP:-1}

read -r -a sets <<<"$SETS"
read -r -a tools <<<"$TOOLS"
read -r -a caches <<<"$CACHES"
read -r -a sprat_args <<<"$SPRAT_ARGS"
read -r -a gridftp_args <<<"$GRIDFTP_ARGS"
read -r -a xrdcp_args <<<"$XRDCP_ARGS"
read -r -a rclone_args <<<"$RCLONE_ARGS"

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $VERIFY == count || $VERIFY == full ]] || die "VERIFY must be count or full"
for s in "${sets[@]}"; do in_list "$s" k4 k64 m1 gridftp || die "unknown set: $s"; done
for t in "${tools[@]}"; do
    in_list "$t" read netlimit sprat rsync tarnc gridftp xrootd rclone || die "unknown tool: $t"
done
for c in "${caches[@]}"; do in_list "$c" cold warm || die "unknown cache mode: $c"; done
has_tool() { in_list "$1" "${tools[@]}"; }

# ---------------------------------------------------------------- prerequisites
# A peer whose programs are missing is skipped (with its reason in the report),
# not fatal: the others still run.

for c in python3 ss setsid timeout tar find xargs; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
need_cache_control "${caches[@]}"

declare -A skipped
skip_tool() { # TOOL REASON
    skipped[$1]=$2
    log "skipped: $1: $2"
}
NC=nc
if has_tool tarnc; then
    if command -v nc.openbsd >/dev/null; then
        NC=nc.openbsd
    elif ! nc -h 2>&1 | grep -q OpenBSD; then
        skip_tool tarnc "no OpenBSD netcat (needs -N; run scripts/install-deps.sh)"
    fi
fi
has_tool rsync && ! command -v rsync >/dev/null && skip_tool rsync "rsync not installed (run scripts/install-deps.sh)"
if has_tool gridftp; then
    for c in globus-gridftp-server globus-url-copy; do
        command -v "$c" >/dev/null || skip_tool gridftp "$c not installed (run scripts/install-deps.sh)"
    done
fi
if has_tool xrootd; then
    for c in xrootd xrdcp; do
        command -v "$c" >/dev/null || skip_tool xrootd "$c not installed (run scripts/install-deps.sh)"
    done
    if [[ $(id -u) == 0 ]] && ! id "$XRD_USER" >/dev/null 2>&1; then
        skip_tool xrootd "xrootd refuses to run as root and user XRD_USER=$XRD_USER does not exist"
    fi
fi
has_tool rclone && ! command -v rclone >/dev/null && skip_tool rclone "rclone not installed (run scripts/install-deps.sh)"
# The plot needs matplotlib: the python3 on PATH, else Debian's (python3-matplotlib).
PLOT_PY=""
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' >/dev/null 2>&1; then
        PLOT_PY=$p
        break
    fi
done
[[ -n $PLOT_PY ]] || log "warning: no python3 with matplotlib (apt-get install python3-matplotlib): no plot"

sprat_build "$SPRAT" # sprat makes the data sets, so it is needed in any case

STAMP=$(date +%Y%m%d-%H%M%S)
DATA_DIR=$(mkdir -p "$DATA_DIR" && cd "$DATA_DIR" && pwd)
fs_is_ram "$DATA_DIR" && die "DATA_DIR=$DATA_DIR is on tmpfs/ramfs; use a real disk"
ROOT=$DATA_DIR/root           # data sets; exported by sprat serve, the rsync daemon, GridFTP
PUSH=$ROOT/peers-push         # destinations of sprat, rsync, tar | nc, GridFTP, rclone
XRD_ROOT=$DATA_DIR/xrootd-root # oss.localroot of xrootd (owned by XRD_USER)
META=$DATA_DIR/meta
LOGS=$DATA_DIR/logs/peers-$STAMP
mkdir -p "$ROOT" "$META" "$LOGS" "$RESULTS_DIR"
CSV=$RESULTS_DIR/peers-$STAMP.csv
MD=$RESULTS_DIR/peers-$STAMP.md
PNG=$RESULTS_DIR/peers-$STAMP.png

exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-peers.XXXXXX)
# Leftover destinations of an interrupted run go at exit (the sources stay).
EXIT_REMOVE+=("$TMP" "$PUSH" "$XRD_ROOT")
rm -rf -- "$PUSH" "$XRD_ROOT"
mkdir -p "$PUSH"

sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY
clock_start

# ---------------------------------------------------------------- data sets
# set_dir[S]: directory under $ROOT; set_gen[S]: `sprat gen` arguments (also
# those of `sprat bench network`, the network limit of the same files).

declare -A set_dir set_gen
define_set() { # SET DIR GEN_ARGS...
    local s=$1 d=$2
    shift 2
    set_dir[$s]=$d
    set_gen[$s]="$*"
}
q() { if [[ $QUICK == 1 ]]; then printf '%s' "$1"; else printf '%s' "$2"; fi; }
n=$(q 2000 100000)
define_set k4 "src-gen-small-${n}x4KiB-seed$SEED" --files "$n" --size 4KiB --seed "$SEED"
n=$(q 1000 10000)
define_set k64 "src-gen-small-${n}x64KiB-seed$SEED" --files "$n" --size 64KiB --seed "$SEED"
n=$(q 64 1000)
define_set m1 "src-gen-small-${n}x1MiB-seed$SEED" --files "$n" --size 1MiB --seed "$SEED"
n=$(q 64MiB 2GiB)
define_set gridftp "src-gen-mixed-$n-gridftp-max16MiB-seed$SEED" \
    --total "$n" --dist gridftp --max-size 16MiB --seed "$SEED"

declare -A set_files set_bytes set_median
for s in "${sets[@]}"; do
    read -r -a gen_args <<<"${set_gen[$s]}"
    # Same directory names and recipes as bench/local.sh: the sets are shared.
    dataset_ensure "$ROOT/${set_dir[$s]}" "sprat gen ${set_gen[$s]}" \
        "$SPRAT" gen "${gen_args[@]}" >>"$LOGS/gen.out"
    read -r f b _ _ m < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$f set_bytes[$s]=$b set_median[$s]=$m
done

# ---------------------------------------------------------------- servers

GRIDFTP_PORT=""
XRD_PORT=""

# GridFTP: anonymous clear-text access, control and data channels on
# 127.0.0.1; the server forks one process per connection (its process group
# is killed at exit). Anonymous users map to root, hence -allow-root.
start_gridftp() {
    GRIDFTP_PORT=$(free_port)
    local uid=()
    [[ $(id -u) == 0 ]] && uid=(-anonymous-user root -allow-root)
    setsid globus-gridftp-server -aa "${uid[@]}" -p "$GRIDFTP_PORT" \
        -control-interface 127.0.0.1 -data-interface 127.0.0.1 \
        -d error -l "$LOGS/gridftp.log" </dev/null >"$LOGS/gridftp.out" 2>&1 &
    local pid=$!
    bg_register "$pid"
    if ! wait_listen "$GRIDFTP_PORT" "$pid"; then
        skip_tool gridftp "globus-gridftp-server did not start: $(oneline "$(tail -n 3 "$LOGS/gridftp.out")")"
        return 0
    fi
    log "globus-gridftp-server pid $pid on 127.0.0.1:$GRIDFTP_PORT"
}

# XRootD: no authentication, everything under XRD_ROOT exported. xrootd will
# not run as root: as root it is started with -R XRD_USER, which owns its
# root and work directory. It listens on every interface (no bind option);
# xrd.allow admits loopback clients only.
start_xrootd() {
    XRD_PORT=$(free_port)
    local work=$LOGS/xrootd run_as=()
    mkdir -p "$XRD_ROOT/peers-push" "$work"
    if [[ $(id -u) == 0 ]]; then
        chown -R "$XRD_USER:" "$XRD_ROOT" "$work"
        run_as=(-R "$XRD_USER")
    fi
    cat >"$work/xrootd.cfg" <<EOF
all.export /
oss.localroot $XRD_ROOT
xrd.port $XRD_PORT
xrd.allow host localhost
xrootd.trace off
all.adminpath $work
all.pidpath $work
EOF
    setsid xrootd -c "$work/xrootd.cfg" -p "$XRD_PORT" -n sprat-peers -l "$work/xrootd.log" \
        "${run_as[@]}" </dev/null >"$work/xrootd.out" 2>&1 &
    local pid=$!
    bg_register "$pid"
    if ! wait_listen "$XRD_PORT" "$pid"; then
        skip_tool xrootd "xrootd did not start: $(oneline "$(tail -n 3 "$work/xrootd.out")")"
        return 0
    fi
    log "xrootd pid $pid on port $XRD_PORT (loopback clients only), localroot $XRD_ROOT"
}

# rclone: `rclone serve sftp` with the push directory as its root, password
# authentication (a random password), 127.0.0.1 only. The client's remote
# "peer" is defined in a private config file (nothing else in it).
RCLONE_PORT=""
RCLONE_CONF=""
start_rclone() {
    RCLONE_PORT=$(free_port)
    local pass
    pass=$(head -c 18 /dev/urandom | od -An -tx1 | tr -d ' \n')
    RCLONE_CONF=$TMP/rclone.conf
    : >"$TMP/rclone-server.conf" # the server's config: empty
    {
        echo "[peer]"
        echo "type = sftp"
        echo "host = 127.0.0.1"
        echo "port = $RCLONE_PORT"
        echo "user = sprat"
        echo "pass = $(rclone obscure "$pass")"
        # What rclone would otherwise probe over ssh on the first connection
        # (and fail to save, the remote being given on the command line).
        echo "shell_type = unix"
        echo "md5sum_command = md5sum"
        echo "sha1sum_command = sha1sum"
    } >"$RCLONE_CONF"
    chmod 600 "$RCLONE_CONF"
    setsid rclone --config "$TMP/rclone-server.conf" serve sftp "$PUSH" --addr "127.0.0.1:$RCLONE_PORT" \
        --user sprat --pass "$pass" </dev/null >"$LOGS/rclone-serve.out" 2>&1 &
    local pid=$!
    bg_register "$pid"
    if ! wait_listen "$RCLONE_PORT" "$pid"; then
        skip_tool rclone "rclone serve sftp did not start: $(oneline "$(tail -n 3 "$LOGS/rclone-serve.out")")"
        return 0
    fi
    log "rclone serve sftp pid $pid on 127.0.0.1:$RCLONE_PORT, root $PUSH"
}

if has_tool sprat || has_tool netlimit; then start_sprat; fi
if has_tool rsync && [[ -z ${skipped[rsync]:-} ]]; then start_rsyncd; fi
if has_tool gridftp && [[ -z ${skipped[gridftp]:-} ]]; then start_gridftp; fi
if has_tool xrootd && [[ -z ${skipped[xrootd]:-} ]]; then start_xrootd; fi
if has_tool rclone && [[ -z ${skipped[rclone]:-} ]]; then start_rclone; fi

# ---------------------------------------------------------------- one run

R_SECS="" R_RC=0
export -f read_all # the read limit runs it in a timed child bash

# run_one SET TOOL CACHE ROUND ORDER
run_one() {
    local set=$1 tool=$2 cache=$3 round=$4 order=$5
    local name=${set_dir[$set]} src tag err out dst="" copy="" toolsecs="" load1
    src=$ROOT/$name
    tag=$set-$tool-$cache-r$round
    err=$LOGS/$tag.err
    out=$LOGS/$tag.out
    : >"$err"
    read -r load1 _ </proc/loadavg
    case $tool in
        sprat | rsync | tarnc | gridftp | rclone) dst=$PUSH/$tag copy=$dst ;;
        xrootd)
            # xrdcp -r needs an existing target directory and copies SRC
            # into it as DST/<name of SRC>; made here, untimed.
            dst=$XRD_ROOT/peers-push/$tag copy=$dst/$name
            mkdir -p "$dst"
            if [[ $(id -u) == 0 ]]; then chown "$XRD_USER:" "$dst"; fi
            ;;
    esac

    cache_prepare "$cache" "$src"
    case $tool in
        read)
            # shellcheck disable=SC2016 # expanded by the inner bash
            timed_cmd "$RUN_TIMEOUT" bash -o pipefail -c 'read_all "$1" "$2"' _ "$src" "$READ_PAR" 2>"$err"
            ;;
        netlimit)
            read -r -a gen_args <<<"${set_gen[$set]}"
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" bench network --json "${gen_args[@]}" \
                "sprat://127.0.0.1:$SPRAT_PORT/" >"$out" 2>"$err"
            ;;
        sprat)
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "${sprat_args[@]}" "$src" \
                "sprat://127.0.0.1:$SPRAT_PORT/peers-push/$tag" >"$out" 2>"$err"
            ;;
        rsync)
            timed_cmd "$RUN_TIMEOUT" rsync -a "$src/" \
                "rsync://127.0.0.1:$RSYNC_PORT/mod/peers-push/$tag/" >"$out" 2>"$err"
            ;;
        tarnc)
            run_tarnc "$src" "$dst" "$err"
            T_SECS=$R_SECS T_RC=$R_RC
            ;;
        gridftp)
            timed_cmd "$RUN_TIMEOUT" globus-url-copy "${gridftp_args[@]}" "file://$src/" \
                "ftp://127.0.0.1:$GRIDFTP_PORT$dst/" >"$out" 2>"$err"
            ;;
        xrootd)
            timed_cmd "$RUN_TIMEOUT" xrdcp "${xrdcp_args[@]}" "$src" \
                "root://127.0.0.1:$XRD_PORT//peers-push/$tag/" >"$out" 2>"$err"
            ;;
        rclone)
            timed_cmd "$RUN_TIMEOUT" rclone --config "$RCLONE_CONF" copy "${rclone_args[@]}" \
                "$src" "peer:$tag" >"$out" 2>"$err"
            ;;
        *) die "no such tool: $tool" ;;
    esac
    R_SECS=$T_SECS R_RC=$T_RC
    if [[ $tool == sprat || $tool == netlimit ]]; then
        toolsecs=$(json_fields "$out" seconds)
    fi

    # Untimed: verify the copy against the source manifest, then delete it.
    local check="" dfiles="" dbytes="" detail=""
    if [[ -n $copy ]]; then
        local v
        v=$(verify_tree "$META/$name.json" "$copy" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
        IFS=$'\t' read -r check dfiles dbytes detail <<<"$v"
        rm -rf -- "$dst"
        sync
    fi
    if [[ $R_RC != 0 ]]; then
        check=FAIL
        detail="exit $R_RC: $(tail -n 3 "$err" 2>/dev/null)${detail:+; $detail}"
    fi
    detail=$(oneline "$detail")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
        "$STAMP" "$set" "$cache" "$round" "$order" "$tool" "$R_SECS" "$R_RC" "${check:--}" \
        "$dfiles" "$dbytes" "${set_files[$set]}" "${set_bytes[$set]}" "$(oneline "$toolsecs")" \
        "$load1" "$detail" >>"$CSV"
    log "$(printf '%-7s %-8s %-4s r%s  %8.3f s  %s %s' "$set" "$tool" "$cache" "$round" \
        "$R_SECS" "${check:-}" "$detail")"
}

# ---------------------------------------------------------------- main loop

echo "stamp,set,cache,round,order,tool,seconds,exit,check,dst_files,dst_bytes,src_files,src_bytes,tool_seconds,load1,note" >"$CSV"

active=()
for t in "${tools[@]}"; do
    [[ -z ${skipped[$t]:-} ]] && active+=("$t")
done
nt=${#active[@]}
t_start=$SECONDS
for s in "${sets[@]}"; do
    log "set $s: ${set_files[$s]} files, ${set_bytes[$s]} bytes (sprat gen ${set_gen[$s]})"
    for cache in "${caches[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            # Interleaved rounds: every tool once per round, the order rotated.
            for ((k = 0; k < nt; k++)); do
                run_one "$s" "${active[$(((k + r - 1) % nt))]}" "$cache" "$r" "$((k + 1))"
            done
        done
    done
done
t_total=$((SECONDS - t_start))

# ---------------------------------------------------------------- report

versions() {
    local v
    v="$(rsync --version 2>/dev/null | head -n 1 | sed 's/  */ /g'); $(tar --version | head -n 1)"
    v+="; $(dpkg-query -W -f='netcat-openbsd ${Version}' netcat-openbsd 2>/dev/null || echo nc)"
    v+="; $(dpkg-query -W -f='globus-gridftp-server-progs ${Version}, ' globus-gridftp-server-progs 2>/dev/null || true)"
    v+="$(dpkg-query -W -f='globus-gass-copy-progs ${Version}' globus-gass-copy-progs 2>/dev/null || true)"
    v+="; $(dpkg-query -W -f='xrootd-server ${Version}, ' xrootd-server 2>/dev/null || true)"
    v+="$(dpkg-query -W -f='xrootd-client ${Version}' xrootd-client 2>/dev/null || true)"
    v+="; $(rclone version 2>/dev/null | head -n 1 || echo 'rclone ?')"
    printf '%s' "$v"
}

{
    echo "# sprat peer comparison over loopback (push), $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC"
    echo "- peers: $(versions)"
    echo "- commands (SRC = data set, DST = fresh directory per run, deleted untimed):"
    echo "  - sprat: \`sprat cp --json ${SPRAT_ARGS:+$SPRAT_ARGS }SRC sprat://127.0.0.1:PORT/DST\` (\`sprat serve\`, token)"
    echo "  - rsync daemon: \`rsync -a SRC/ rsync://127.0.0.1:PORT/mod/DST/\` (use chroot = $RSYNC_CHROOT, uid/gid root)"
    echo "  - tar | nc: \`tar -C SRC -cf - . | nc -N 127.0.0.1 PORT\` into \`nc -l 127.0.0.1 PORT | tar -C DST -xf -\`"
    echo "  - GridFTP: \`globus-url-copy $GRIDFTP_ARGS file://SRC/ ftp://127.0.0.1:PORT/DST/\`" \
        "(\`globus-gridftp-server -aa -anonymous-user root -allow-root -control-interface 127.0.0.1 -data-interface 127.0.0.1\`)"
    echo "  - XRootD: \`xrdcp $XRDCP_ARGS SRC root://127.0.0.1:PORT//DST/\` (\`xrootd -R $XRD_USER\`, \`all.export /\`," \
        "no auth, \`xrd.allow host localhost\`; DST made beforehand, untimed; the copy is DST/<name of SRC>)"
    echo "  - read limit: \`find SRC -type f -print0 | xargs -0 -r -P $READ_PAR -n 256 cat >/dev/null\`;" \
        "network limit: \`sprat bench network --json <gen args of the set> sprat://127.0.0.1:PORT/\`" \
        "(the same files made up in memory, pushed through the same server, verified and dropped there)"
    echo "  - rclone: \`rclone copy $RCLONE_ARGS SRC peer:DST\` (remote peer = type sftp, 127.0.0.1:PORT, user and" \
        "password, in a private config file; server \`rclone serve sftp PUSHROOT --addr 127.0.0.1:PORT --user sprat --pass RANDOM\`)"
    for t in "${!skipped[@]}"; do echo "- **skipped: $t: ${skipped[$t]}**"; done
    echo "- runs: $RUNS per row (medians of the runs that passed the check), caches: ${caches[*]}" \
        "(warm: page cache dropped first = $WARM_DROP, then the source read in full), verify: $VERIFY"
    echo "- 1-min load average before each run: mean" \
        "$(awk -F, 'NR > 1 { s += $15; n++ } END { if (n) printf "%.2f", s / n }' "$CSV")," \
        "max $(awk -F, 'NR > 1 && $15 > m { m = $15 } END { printf "%.2f", m }' "$CSV")"
    echo "- wall time: ${t_total}s; raw runs: $(basename "$CSV"); logs: $LOGS"
    for s in "${sets[@]}"; do
        echo "- set **$s**: \`sprat gen ${set_gen[$s]}\`: ${set_files[$s]} files, ${set_bytes[$s]} bytes," \
            "median file ${set_median[$s]} B"
    done
    echo
} >"$MD"

python3 - "$CSV" >>"$MD" <<'PY'
import csv, statistics, sys
from collections import OrderedDict

runs = list(csv.DictReader(open(sys.argv[1])))
by = OrderedDict()
for r in runs:
    by.setdefault((r["set"], r["cache"]), OrderedDict()).setdefault(r["tool"], []).append(r)
label = {"read": "read limit", "netlimit": "network limit", "sprat": "sprat", "rsync": "rsync daemon",
         "tarnc": "tar \\| nc", "gridftp": "GridFTP", "xrootd": "XRootD", "rclone": "rclone (sftp)"}
order = list(label)
peers = [p for p in ["rsync", "tarnc", "gridftp", "xrootd", "rclone"] if any(p in t for t in by.values())]

def median_of(rs):
    good = [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]
    return statistics.median(good) if good else None

def num(x, nd):
    return "—" if x is None else "%.*f" % (nd, x)

summary = []
for (s, cache), tools in by.items():
    first = next(iter(tools.values()))[0]
    nfiles, nbytes = int(first["src_files"]), int(first["src_bytes"])
    t_sprat = median_of(tools.get("sprat", []))
    print("## %s, %s cache: %d files, %.1f MB\n" % (s, cache, nfiles, nbytes / 1e6))
    print("| tool | median s | files/s | MB/s | t / t_sprat | check | notes |")
    print("|---|--:|--:|--:|--:|---|---|")
    line = {"set": s, "cache": cache}
    for tool in sorted(tools, key=lambda t: order.index(t) if t in order else 99):
        rs = tools[tool]
        m = median_of(rs)
        line[tool] = m
        bad = sum(r["check"] == "FAIL" for r in rs)
        meta = sum(r["check"] == "meta" for r in rs)
        if tool in ("read", "netlimit"):
            check = "—" if not bad else "**FAIL** %d/%d" % (bad, len(rs))
        elif bad:
            check = "**FAIL** %d/%d" % (bad, len(rs))
        elif meta:
            check = "meta differs %d/%d (count, content ok)" % (meta, len(rs))
        else:
            check = "ok %d/%d" % (len(rs), len(rs))
        notes = []
        for r in rs:
            if r["tool_seconds"]:
                try:
                    notes.append("own seconds %.3f" % float(r["tool_seconds"]))
                except ValueError:
                    notes.append("own seconds %s" % r["tool_seconds"])
            if r["note"] and r["note"] not in notes:
                notes.append(r["note"])
        ratio = m / t_sprat if (m and t_sprat) else None
        print("| %s | %s | %s | %s | %s | %s | %s |" % (
            label.get(tool, tool), num(m, 3), num(nfiles / m if m else None, 0),
            num(nbytes / 1e6 / m if m else None, 1), num(ratio, 2), check, "; ".join(notes)[:300]))
    print()
    line["mb"] = nbytes / 1e6
    summary.append(line)

print("## Summary: sprat against each peer (t_peer / t_sprat; > 1: sprat is faster)\n")
print("| set | cache | sprat MB/s | " + " | ".join(label[p] for p in peers) + " | sprat / network limit | sprat / read limit |")
print("|---|---|--:|" + "--:|" * len(peers) + "--:|--:|")
for l in summary:
    sp = l.get("sprat")
    cells = [num(l[p] / sp, 2) if (sp and l.get(p)) else "—" for p in peers]
    print("| %s | %s | %s | %s | %s | %s |" % (
        l["set"], l["cache"], num(l["mb"] / sp if sp else None, 1), " | ".join(cells),
        num(sp / l["netlimit"], 2) if (sp and l.get("netlimit")) else "—",
        num(sp / l["read"], 2) if (sp and l.get("read")) else "—"))
print()
print("Columns: *median s* = median wall time of the runs whose copy passed the check (FAIL runs left out); "
      "*files/s*, *MB/s* (10^6 bytes) = source files and bytes / median; *t / t_sprat* = this median / sprat's, "
      "same set and cache; *check* = copies verified against the source manifest (ok: count, paths, sizes, "
      "content, modes, mtimes; meta differs: all files complete and equal but modes or mtimes not kept); "
      "*sprat / network limit* and *sprat / read limit* = sprat's time over the limit's (1.0 = at the limit).")
PY

if [[ -n $PLOT_PY ]]; then
    "$PLOT_PY" - "$CSV" "$PNG" <<'PY' || log "warning: plot failed"
import csv, statistics, sys
from collections import defaultdict
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

rows = list(csv.DictReader(open(sys.argv[1])))
secs = defaultdict(list)
size, nbytes = {}, {}
for r in rows:
    size[r["set"]] = int(r["src_bytes"]) / max(1, int(r["src_files"]))
    nbytes[r["set"]] = int(r["src_bytes"])
    if r["check"] != "FAIL":
        secs[(r["cache"], r["tool"], r["set"])].append(float(r["seconds"]))
caches = [c for c in ("cold", "warm") if any(k[0] == c for k in secs)]
tools = []
for r in rows:
    if r["tool"] not in tools:
        tools.append(r["tool"])
names = {"read": "read limit", "netlimit": "network limit (sprat bench network)", "sprat": "sprat",
         "rsync": "rsync daemon", "tarnc": "tar | nc", "gridftp": "GridFTP", "xrootd": "XRootD",
         "rclone": "rclone (sftp)"}
fig, axes = plt.subplots(1, max(1, len(caches)), figsize=(6.5 * max(1, len(caches)), 4.8), squeeze=False)
for ax, cache in zip(axes[0], caches):
    for tool in tools:
        pts = sorted((size[s], nbytes[s] / 1e6 / statistics.median(v), s)
                     for (c, t, s), v in secs.items() if c == cache and t == tool and v)
        # Uniform sets as a line; the GridFTP distribution (mixed sizes) as a
        # star of the same colour at its mean file size.
        line = [p for p in pts if p[2] != "gridftp"]
        mixed = [p for p in pts if p[2] == "gridftp"]
        style = "--" if tool in ("read", "netlimit") else "-"
        h = ax.plot([p[0] for p in line], [p[1] for p in line], style, marker="o", label=names.get(tool, tool))
        if mixed:
            ax.plot([p[0] for p in mixed], [p[1] for p in mixed], "*", markersize=12,
                    color=h[0].get_color(), label=None if line else names.get(tool, tool))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("mean file size (bytes, log); star: GridFTP size distribution")
    ax.set_ylabel("throughput (MB/s, log)")
    ax.set_title("push over loopback, %s cache" % cache)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
PY
    [[ -s $PNG ]] && echo "![throughput against file size]($(basename "$PNG"))" >>"$MD"
fi

log "wrote $CSV"
log "wrote $MD"
[[ -s $PNG ]] && log "wrote $PNG"
cat "$MD"
