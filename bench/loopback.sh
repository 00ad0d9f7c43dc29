#!/usr/bin/env bash
# Loopback benchmark: sprat push/pull against rsync (daemon) and tar | nc,
# over 127.0.0.1, cold and warm cache, with the parallel-read limit.
#
# Usage: bench/loopback.sh [SRC_TREE]
#   QUICK=1 bench/loopback.sh        smoke run (2000 files, 1 run, < 1 minute)
#   RUNS=3 bench/loopback.sh         full run (see bench/README.md)
#
# Environment (defaults in brackets):
#   SPRAT      sprat binary [target/release/sprat; (re)built with cargo
#              unless BUILD=0; a failed build falls back to an existing binary]
#   SPRAT_ARGS extra arguments for `sprat cp` (e.g. "--streams 4") []
#   DATA_DIR   data sets, server roots and destinations; same disk, not tmpfs
#              [/work/bench-data]
#   RUNS       runs per (tool, direction, cache) [3; QUICK: 1]
#   FILES      files in the "small" set [50000; QUICK: 2000]
#   SIZE       bytes per file in the "small" set [4096]
#   PER_DIR    files per directory in the "small" set [1000]
#   SRC_TREE   real source tree for the "tree" set [the first of
#              ~/.cargo/registry/src, /usr/share, target/ with at least
#              TREE_MIN_FILES (10000) files]; snapshotted into DATA_DIR
#   TREE_FILES copy only the first N files of SRC_TREE [0 = all; QUICK: 2000]
#   SETS       data sets: small tree [small tree]
#   TOOLS      tools besides the read limit: sprat rsync tarnc [sprat rsync tarnc]
#   CACHES     cold warm [cold warm]
#   VERIFY     count | full [full]: how each copy is checked
#   READ_PAR   parallelism of the read limit [16]
#   RUN_TIMEOUT seconds before one run is killed [1800]
#   RESULTS_DIR where the .csv/.md go [bench/results]
#   REFRESH=1  regenerate/re-snapshot the data sets
#   RSYNC_CHROOT  "use chroot" of the rsync daemon module [yes]
#   WARM_DROP  1: drop the page cache before pre-reading the source of a warm
#              run (see bench/README.md) [1]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    FILES=${FILES:-2000}
    TREE_FILES=${TREE_FILES:-2000}
fi
RUNS=${RUNS:-3}
FILES=${FILES:-50000}
SIZE=${SIZE:-4096}
PER_DIR=${PER_DIR:-1000}
TREE_FILES=${TREE_FILES:-0}
TREE_MIN_FILES=${TREE_MIN_FILES:-10000}
SETS=${SETS:-small tree}
TOOLS=${TOOLS:-sprat rsync tarnc}
CACHES=${CACHES:-cold warm}
VERIFY=${VERIFY:-full}
READ_PAR=${READ_PAR:-16}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
SPRAT_ARGS=${SPRAT_ARGS:-}
REFRESH=${REFRESH:-0}
# "yes": without a chroot the daemon rewrites symlinks that point outside the
# module (absolute or ../ escaping) on push, and the copy is not faithful.
RSYNC_CHROOT=${RSYNC_CHROOT:-yes}
WARM_DROP=${WARM_DROP:-1}
BUILD=${BUILD:-1}
SRC_TREE=${1:-${SRC_TREE:-}}

read -r -a sets <<<"$SETS"
read -r -a tools <<<"$TOOLS"
read -r -a caches <<<"$CACHES"
read -r -a sprat_args <<<"$SPRAT_ARGS"

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $VERIFY == count || $VERIFY == full ]] || die "VERIFY must be count or full"
for s in "${sets[@]}"; do [[ $s == small || $s == tree ]] || die "unknown set: $s"; done
for t in "${tools[@]}"; do
    [[ $t == sprat || $t == rsync || $t == tarnc ]] || die "unknown tool: $t"
done
for c in "${caches[@]}"; do [[ $c == cold || $c == warm ]] || die "unknown cache mode: $c"; done

has_tool() {
    local t
    for t in "${tools[@]}"; do [[ $t == "$1" ]] && return 0; done
    return 1
}

# ---------------------------------------------------------------- prerequisites

for c in python3 ss setsid timeout tar find xargs; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
has_tool rsync && { command -v rsync >/dev/null || die "missing rsync (run scripts/install-deps.sh)"; }
NC=nc
if has_tool tarnc; then
    if command -v nc.openbsd >/dev/null; then
        NC=nc.openbsd
    elif ! nc -h 2>&1 | grep -q OpenBSD; then
        die "need OpenBSD netcat (-N); run scripts/install-deps.sh"
    fi
fi
for c in "${caches[@]}"; do
    if [[ $c == cold ]] && ! can_drop_caches; then
        die "cold cache runs need root (write /proc/sys/vm/drop_caches); or set CACHES=warm"
    fi
done
if [[ $WARM_DROP == 1 ]] && ! can_drop_caches; then
    log "warning: cannot drop caches; warm runs without WARM_DROP"
    WARM_DROP=0
fi

if has_tool sprat; then
    if [[ $SPRAT == "$repo/target/release/sprat" && $BUILD == 1 ]]; then
        # Default binary: (re)build it so that the benchmark measures the tree.
        log "building sprat (cargo build --release -p sprat)"
        if ! (cd "$repo" && cargo build --release -q -p sprat); then
            [[ -x $SPRAT ]] || die "sprat does not build; set TOOLS to skip it"
            log "warning: build failed; benchmarking the existing $SPRAT"
        fi
    fi
    [[ -x $SPRAT ]] || die "SPRAT=$SPRAT is not executable"
fi

STAMP=$(date +%Y%m%d-%H%M%S)
ROOT=$DATA_DIR/root   # exported by `sprat serve` and the rsync daemon
LOCAL=$DATA_DIR/local # pull destinations
META=$DATA_DIR/meta   # manifests of the data sets
LOGS=$DATA_DIR/logs/$STAMP
TMP=""
mkdir -p "$ROOT/push" "$LOCAL" "$META" "$LOGS" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
fstype=$(findmnt -no FSTYPE -T "$DATA_DIR" 2>/dev/null || stat -f -c %T "$DATA_DIR")
[[ $fstype == tmpfs || $fstype == ramfs ]] && die "DATA_DIR=$DATA_DIR is on $fstype; use a real disk"

CSV=$RESULTS_DIR/loopback-$STAMP.csv
MD=$RESULTS_DIR/loopback-$STAMP.md

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    bg_kill_all
    [[ -n $TMP ]] && rm -rf "$TMP"
    # Leftover destinations of an interrupted run (the sources stay for reuse).
    rm -rf "$ROOT/push" "$LOCAL"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

TMP=$(mktemp -d /tmp/sprat-bench.XXXXXX)

# Benchmark a private copy of the binary: target/release/sprat may be rebuilt
# while the benchmark runs, and every run must use the same build.
sprat_info=""
if has_tool sprat; then
    git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "no commit")
    git -C "$repo" diff --quiet HEAD 2>/dev/null || git_rev="$git_rev + uncommitted changes"
    sprat_info="$SPRAT ($("$SPRAT" --version 2>/dev/null | head -n 1 || true)), built $(date -r "$SPRAT" '+%F %T'),"
    sprat_info+=" sha256 $(sha256sum "$SPRAT" | cut -c1-12), work tree at $git_rev when the run started"
    cp "$SPRAT" "$TMP/sprat"
    SPRAT=$TMP/sprat
fi
clock_start

# Remove destinations left by an earlier, interrupted run (untimed).
rm -rf "$ROOT/push" "$LOCAL"
mkdir -p "$ROOT/push" "$LOCAL"

# ---------------------------------------------------------------- data sets
# set_dir[S]: directory name under $ROOT; set_desc[S]: human description.

declare -A set_dir set_desc

prepare_small() {
    local name=src-small-${FILES}x${SIZE}
    local dir=$ROOT/$name man=$META/$name.json
    if [[ $REFRESH == 1 || ! -s $man || ! -d $dir ]]; then
        log "generating $FILES files of $SIZE bytes in $dir"
        rm -rf "$dir" "$dir.tmp" "$man"
        gen_small "$dir.tmp" "$FILES" "$SIZE" "$PER_DIR"
        mv "$dir.tmp" "$dir"
        sync
        log "manifest: $(manifest "$dir" "$man.tmp")"
        mv "$man.tmp" "$man"
    fi
    set_dir[small]=$name
    set_desc[small]="$FILES files of $SIZE bytes, random content, $PER_DIR files per directory"
}

prepare_tree() {
    local tree=$SRC_TREE
    if [[ -z $tree ]]; then
        # The first candidate with at least TREE_MIN_FILES files (tens of
        # thousands wanted); else the biggest one.
        local cand n best="" best_n=-1
        for cand in "${CARGO_HOME:-$HOME/.cargo}/registry/src" /usr/share "$repo/target"; do
            [[ -d $cand ]] || continue
            n=$(set +o pipefail; find "$cand" -type f 2>/dev/null | head -n "$TREE_MIN_FILES" | wc -l)
            if ((n >= TREE_MIN_FILES)); then
                best=$cand
                break
            fi
            log "tree candidate $cand has only $n files (< TREE_MIN_FILES=$TREE_MIN_FILES)"
            ((n > best_n)) && best=$cand best_n=$n
        done
        tree=$best
    fi
    [[ -d $tree ]] || die "SRC_TREE=$tree is not a directory"
    tree=$(cd "$tree" && pwd)
    local name=src-tree
    [[ $TREE_FILES != 0 ]] && name=src-tree-first$TREE_FILES
    local dir=$ROOT/$name man=$META/$name.json origin=$META/$name.origin
    if [[ $REFRESH == 1 || ! -s $man || ! -d $dir || $(cat "$origin" 2>/dev/null) != "$tree" ]]; then
        log "snapshotting $tree into $dir"
        rm -rf "$dir" "$dir.tmp" "$man" "$origin"
        mkdir -p "$dir.tmp"
        if [[ $TREE_FILES == 0 ]]; then
            cp -a "$tree/." "$dir.tmp/"
        else
            # (no pipefail here: head closing early is expected)
            (cd "$tree" && set +o pipefail && find . -type f -print0 | sort -z | head -z -n "$TREE_FILES") >"$TMP/list"
            tar -C "$tree" --null -T "$TMP/list" -cf - | tar -C "$dir.tmp" -xf -
        fi
        mv "$dir.tmp" "$dir"
        sync
        log "manifest: $(manifest "$dir" "$man.tmp")"
        mv "$man.tmp" "$man"
        printf '%s\n' "$tree" >"$origin"
    fi
    set_dir[tree]=$name
    local what="snapshot of $tree"
    [[ $TREE_FILES != 0 ]] && what="first $TREE_FILES files (sorted paths) of $tree"
    set_desc[tree]=$what
}

for s in "${sets[@]}"; do
    "prepare_$s"
done

# ---------------------------------------------------------------- servers

has_tool sprat && start_sprat
has_tool rsync && start_rsyncd

# ---------------------------------------------------------------- one run

# Results of the last run.
R_SECS="" R_RC=0 R_NOTE="" R_BOTTLENECK="" R_TOOLSECS=""

# timed CMD...: run CMD (under timeout), timed; sets R_SECS, R_RC.
# It runs as a registered background job that we wait for, so that an
# interrupt reaches our trap at once and the cleanup kills it.
timed() {
    timed_cmd "$RUN_TIMEOUT" "$@"
    R_RC=$T_RC
    R_SECS=$T_SECS
}

# run_one SET TOOL DIRECTION CACHE ROUND ORDER
run_one() {
    local set=$1 tool=$2 dir=$3 cache=$4 round=$5 order=$6
    local name=${set_dir[$set]} src dst rel tag err out
    src=$ROOT/$name
    tag=$set-$tool-$dir-$cache-r$round
    err=$LOGS/$tag.err
    out=$LOGS/$tag.out
    : >"$err"
    R_NOTE="" R_BOTTLENECK="" R_TOOLSECS=""
    case $dir in
        push) rel=push/$tag dst=$ROOT/push/$tag ;;
        pull) dst=$LOCAL/$tag ;;
        *) dst="" ;;
    esac

    local load1
    read -r load1 _ </proc/loadavg
    # Untimed preparation: cache state.
    if [[ $cache == cold ]]; then
        drop_caches 3
    else
        # Warm = the source in cache, read just now. The page cache is dropped
        # first because cached block-allocator/bitmap pages left behind by
        # deleting the previous destination made file creation 3-5x slower
        # (kernel CPU), which would measure our own deletions, not the tools.
        [[ $WARM_DROP == 1 ]] && drop_caches 1
        read_all "$src" "$READ_PAR"
    fi

    case $tool/$dir in
        read/-)
            # shellcheck disable=SC2016 # expanded by the inner bash
            timed bash -o pipefail -c \
                'find "$1" -type f -print0 | xargs -0 -r -P "$2" -n 256 cat >/dev/null' \
                _ "$src" "$READ_PAR" 2>"$err"
            ;;
        sprat/push)
            timed "$SPRAT" cp --json "${sprat_args[@]}" "$src" \
                "sprat://127.0.0.1:$SPRAT_PORT/$rel" >"$out" 2>"$err"
            ;;
        sprat/pull)
            timed "$SPRAT" cp --json "${sprat_args[@]}" \
                "sprat://127.0.0.1:$SPRAT_PORT/$name" "$dst" >"$out" 2>"$err"
            ;;
        rsync/push)
            timed rsync -a "$src/" "rsync://127.0.0.1:$RSYNC_PORT/mod/$rel/" >"$out" 2>"$err"
            ;;
        rsync/pull)
            timed rsync -a "rsync://127.0.0.1:$RSYNC_PORT/mod/$name/" "$dst/" >"$out" 2>"$err"
            ;;
        tarnc/push | tarnc/pull)
            # Same pipe both ways: the side holding the data tars out, the
            # other side listens and untars; only the destination differs.
            run_tarnc "$src" "$dst" "$err"
            ;;
        *) die "no such run: $tool/$dir" ;;
    esac

    if [[ $tool == sprat && -s $out ]]; then
        local j
        j=$(python3 -c '
import json, sys
txt = open(sys.argv[1]).read()
obj = None
try:
    obj = json.loads(txt)
except ValueError:
    for line in reversed(txt.splitlines()):
        try:
            obj = json.loads(line)
            break
        except ValueError:
            pass
if isinstance(obj, dict):
    print("%s\t%s" % (obj.get("bottleneck", ""), obj.get("seconds", "")))
' "$out" 2>/dev/null) || true
        R_BOTTLENECK=${j%%$'\t'*}
        [[ $j == *$'\t'* ]] && R_TOOLSECS=${j#*$'\t'}
    fi

    # Untimed: verify the copy, then delete it.
    local check="" dfiles="" dbytes="" detail=""
    if [[ -n $dst ]]; then
        local v
        v=$(verify_tree "$META/$name.json" "$dst" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
        IFS=$'\t' read -r check dfiles dbytes detail <<<"$v"
        rm -rf "$dst"
        sync
    fi
    if [[ $R_RC != 0 ]]; then
        check=FAIL
        detail="exit $R_RC: $(tail -n 3 "$err" 2>/dev/null)${detail:+; $detail}"
    fi
    R_NOTE=$(oneline "$detail")
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
        "$STAMP" "$set" "$cache" "$round" "$order" "$tool" "$dir" "$R_SECS" "$R_RC" \
        "${check:--}" "$dfiles" "$dbytes" "${set_files[$set]}" "${set_bytes[$set]}" \
        "$(oneline "$R_BOTTLENECK")" "$(oneline "$R_TOOLSECS")" "$load1" "$R_NOTE" >>"$CSV"
    log "$(printf '%-5s %-5s %-4s %-4s r%s  %8.3f s  %s %s' "$set" "$tool" "$dir" "$cache" \
        "$round" "$R_SECS" "${check:-}" "$R_NOTE")"
}

# ---------------------------------------------------------------- main loop

declare -A set_files set_bytes set_dirs set_links set_median
for s in "${sets[@]}"; do
    read -r f b d l m < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$f set_bytes[$s]=$b set_dirs[$s]=$d set_links[$s]=$l set_median[$s]=$m
done

echo "stamp,set,cache,round,order,tool,direction,seconds,exit,check,dst_files,dst_bytes,src_files,src_bytes,bottleneck,tool_seconds,load1,note" >"$CSV"

all_tools=(read "${tools[@]}")
ntools=${#all_tools[@]}
t_start=$SECONDS
for s in "${sets[@]}"; do
    log "set $s: ${set_files[$s]} files, ${set_bytes[$s]} bytes (${set_desc[$s]})"
    for cache in "${caches[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            # Round robin with the tool order rotated each round, and the
            # direction order flipped every other round.
            order=0
            for ((k = 0; k < ntools; k++)); do
                tool=${all_tools[$(((k + r - 1) % ntools))]}
                if [[ $tool == read ]]; then
                    dirs=(-)
                elif ((r % 2)); then
                    dirs=(push pull)
                else
                    dirs=(pull push)
                fi
                for d in "${dirs[@]}"; do
                    order=$((order + 1))
                    run_one "$s" "$tool" "$d" "$cache" "$r" "$order"
                done
            done
        done
    done
done
t_total=$((SECONDS - t_start))

# ---------------------------------------------------------------- report

mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
fsinfo=$(findmnt -no SOURCE,FSTYPE,OPTIONS -T "$DATA_DIR" 2>/dev/null || echo "$fstype")

{
    echo "# sprat loopback benchmark, $STAMP"
    echo
    echo "- machine: $(nproc) CPUs ($cpu), $mem memory, kernel $(uname -r)"
    echo "- data dir: $DATA_DIR on $fsinfo"
    if has_tool sprat; then
        echo "- sprat: $sprat_info; cp args: --json ${SPRAT_ARGS:-(defaults)}"
    fi
    echo "- peers: $(rsync --version | head -n 1 | sed 's/  */ /g'); $(tar --version | head -n 1);" \
        "$(dpkg-query -W -f='netcat-openbsd ${Version}' netcat-openbsd 2>/dev/null || echo nc)"
    echo "- rsync daemon: use chroot = $RSYNC_CHROOT, munge symlinks = no, uid/gid root; rsync -a"
    echo "- runs: $RUNS per row (medians), caches: ${caches[*]} (warm: drop page cache first = $WARM_DROP)," \
        "verify: $VERIFY, read limit parallelism: $READ_PAR"
    echo "- 1-min load average before each run (other work on this machine adds noise): mean" \
        "$(awk -F, 'NR > 1 { s += $(NF - 1); n++ } END { if (n) printf "%.2f", s / n }' "$CSV")," \
        "max $(awk -F, 'NR > 1 && $(NF - 1) > m { m = $(NF - 1) } END { printf "%.2f", m }' "$CSV")"
    echo "- wall time: ${t_total}s; raw runs: $(basename "$CSV"); logs: $LOGS"
    for s in "${sets[@]}"; do
        echo "- set **$s**: ${set_files[$s]} files, ${set_bytes[$s]} bytes, ${set_dirs[$s]} dirs," \
            "${set_links[$s]} symlinks, median file ${set_median[$s]} B — ${set_desc[$s]}"
    done
    echo
} >"$MD"

python3 - "$CSV" >>"$MD" <<'PY'
import csv, statistics, sys
from collections import OrderedDict, Counter

rows = list(csv.DictReader(open(sys.argv[1])))
groups = OrderedDict()
for r in rows:
    groups.setdefault(r["set"], OrderedDict()).setdefault((r["tool"], r["direction"], r["cache"]), []).append(r)

def med(rs):
    ok = [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]
    return statistics.median(ok) if ok else None

def fmt(x, nd=2):
    return "—" if x is None else ("%.*f" % (nd, x))

tool_rank = {"read": 0, "sprat": 1, "rsync": 2, "tarnc": 3}
tool_name = {"read": "read limit", "sprat": "sprat", "rsync": "rsync daemon", "tarnc": "tar \\| nc"}
for set_name, g in groups.items():
    any_row = next(iter(g.values()))[0]
    files, nbytes = int(any_row["src_files"]), int(any_row["src_bytes"])
    print("## %s: %d files, %.1f MB\n" % (set_name, files, nbytes / 1e6))
    print("| tool | direction | cache | median s | min–max s | files/s | MB/s | t / t_sprat | t_read / t | check | notes |")
    print("|---|---|---|--:|--:|--:|--:|--:|--:|---|---|")
    keys = sorted(g, key=lambda k: ({"cold": 0, "warm": 1}.get(k[2], 2), {"-": 0, "push": 1, "pull": 2}[k[1]], tool_rank.get(k[0], 9)))
    for k in keys:
        tool, direction, cache = k
        rs = g[k]
        m = med(rs)
        secs = [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]
        spr = med(g.get(("sprat", direction, cache), [])) if direction != "-" else None
        rd = med(g.get(("read", "-", cache), []))
        ratio = (m / spr) if (m and spr and tool != "sprat") else (1.0 if tool == "sprat" and m else None)
        of_read = (rd / m) if (rd and m) else None
        fails = sum(1 for r in rs if r["check"] == "FAIL")
        metas = sum(1 for r in rs if r["check"] == "meta")
        if direction == "-":
            check = "—"
        elif fails:
            check = "**FAIL** %d/%d" % (fails, len(rs))
        elif metas:
            check = "ok (meta differs %d/%d)" % (metas, len(rs))
        else:
            check = "ok %d/%d" % (len(rs), len(rs))
        notes = []
        bn = Counter(r["bottleneck"] for r in rs if r["bottleneck"])
        if bn:
            notes.append("bottleneck: " + ", ".join("%s×%d" % kv for kv in bn.most_common()))
        for r in rs:
            if r["note"] and r["note"] not in notes:
                notes.append(r["note"])
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            tool_name.get(tool, tool), direction, cache, fmt(m, 3),
            ("%.3f–%.3f" % (min(secs), max(secs))) if secs else "—",
            fmt(files / m if m else None, 0), fmt(nbytes / 1e6 / m if m else None, 1),
            fmt(ratio), fmt(of_read), check, "; ".join(notes)[:400]))
    print()
print("Columns: *median s* = median wall time of the runs that passed the check; *files/s* and *MB/s* "
      "(10^6 bytes) = source files and bytes / median; *t / t_sprat* = this tool's median / sprat's median, "
      "same direction and cache (> 1: sprat is faster); *t_read / t* = read-limit median / this median, "
      "same cache (1.0 = as fast as merely reading every file in parallel); *check* = runs whose copy "
      "matched the source (count and bytes; content, modes, mtimes with VERIFY=full).")
PY

log "wrote $CSV"
log "wrote $MD"
cat "$MD"
