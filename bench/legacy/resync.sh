#!/usr/bin/env bash
# Re-sync and resume benchmark (issue 15, "long transfers that survive
# anything"), over 127.0.0.1 inside a network namespace of its own, so that
# the loopback byte counters count this benchmark's traffic alone.
#
#   A. Re-sync against rsync: a destination made complete beforehand
#      (untimed), then timed re-runs, cold and warm cache, interleaved rounds,
#      medians: a no-op push (`sprat cp SRC sprat://...` against `rsync -a SRC/
#      rsync://.../mod/DST/`, both walking both trees), a no-op pull, and a
#      push after 1% of the source files were rewritten (same size, new
#      mtime; other files each round). Ratios rsync_time / sprat_time.
#   B. Kill at half, then re-run: a push into a fresh destination is cut at
#      about half of its bytes by `kill -9` of the client, or of the server
#      (restarted on the same port and root), then the same `sprat cp` runs
#      again; measured: the bytes the re-run moved (loopback counter), what
#      was missing at the destination before it, its time; the destination is
#      then checked against the source. Goal of the issue: the re-run sends
#      < 55% of the data set's bytes and < 5% beyond what was missing.
#
# Usage: bench/resync.sh [SRC_TREE]
#   QUICK=1 bench/resync.sh          smoke run (5000 files, 256 MiB, 1 round, a few minutes)
#   bench/resync.sh                  full run (see bench/README.md; ~30-40 minutes)
#   PARTS=B VARIANTS=client bench/resync.sh
#
# Environment (defaults in brackets):
#   SPRAT       sprat binary [target/release/sprat; rebuilt unless BUILD=0]
#   PARTS       A B [A B]
#   SETS_A      small tree [small tree]
#   SETS_B      files big [files big]
#   VARIANTS    B's interruptions: client server server-retry [all three]
#   RUNS        rounds of A per scenario and cache [3; QUICK: 1]
#   RUNS_B      runs of each B variant [1]
#   CACHES      A's cache states: cold warm [cold warm]
#   B_CACHE     cold | warm: caches before B's first run and re-run [cold]
#   FILES       A's small set: FILES x 4 KiB [100000; QUICK: 5000]
#   TREE_FILES  A's tree: only the first N files of the tree [0 = all; QUICK: 5000]
#   SRC_TREE    real tree to snapshot for A [the first of ~/.cargo/registry/src,
#               /usr/share, target/ with at least TREE_MIN_FILES (10000) files]
#   B_FILES     B's files set: B_FILES x 4 KiB [100000; QUICK: 5000]
#   B_BIG       B's big set: one file of this size [4GiB; QUICK: 256MiB]
#   TOUCH_PCT   percent of A's source files rewritten before each touch round [1]
#   KILL_AT     percent of a full copy's loopback bytes at which B kills [50]
#   CHECK_PARTIAL 1: before B's re-run, compare the ranges journals record with
#               the source, byte for byte (untimed; reads them twice) [1]
#   SPRAT_LOG   RUST_LOG of every sprat process: warnings on stderr, kept in
#               the logs (sprat's default, off, hides e.g. a failed listing of
#               the destination, after which a push silently sends everything)
#               [sprat=warn,sprat_engine=warn]
#   SEED        `sprat gen --seed` [1]
#   VERIFY      count | full: the checks of whole destinations [full]
#   NETNS       1: run in a network namespace of its own (`unshare -n`; needs
#               root), counting loopback bytes; 0: no byte counts, B kills at
#               KILL_AT percent of a full copy's time [1]
#   KEEP_DST    1: keep A's destinations for the next invocation (re-synced,
#               untimed, before it measures) [1]
#   TRASH_WAIT  1: delete B's destinations before exiting; 0: in the
#               background, after the script [0]
#   RUN_TIMEOUT seconds before one command is killed [1800]
#   DATA_DIR    data sets, server root, destinations; a real disk [/work/bench-data]
#   RESULTS_DIR [bench/results]
#   REFRESH=1   remake the data sets
#   RSYNC_CHROOT  "use chroot" of the rsync daemon module [yes]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    FILES=${FILES:-5000}
    TREE_FILES=${TREE_FILES:-5000}
    B_FILES=${B_FILES:-5000}
    B_BIG=${B_BIG:-256MiB}
fi
PARTS=${PARTS:-A B}
SETS_A=${SETS_A:-small tree}
SETS_B=${SETS_B:-files big}
VARIANTS=${VARIANTS:-client server server-retry}
RUNS=${RUNS:-3}
RUNS_B=${RUNS_B:-1}
CACHES=${CACHES:-cold warm}
B_CACHE=${B_CACHE:-cold}
FILES=${FILES:-100000}
SIZE=4KiB
TREE_FILES=${TREE_FILES:-0}
TREE_MIN_FILES=${TREE_MIN_FILES:-10000}
SRC_TREE=${1:-${SRC_TREE:-}}
B_FILES=${B_FILES:-100000}
B_BIG=${B_BIG:-4GiB}
TOUCH_PCT=${TOUCH_PCT:-1}
KILL_AT=${KILL_AT:-50}
export CHECK_PARTIAL=${CHECK_PARTIAL:-1}
SPRAT_LOG=${SPRAT_LOG:-sprat=warn,sprat_engine=warn}
export RUST_LOG=$SPRAT_LOG
SEED=${SEED:-1}
VERIFY=${VERIFY:-full}
NETNS=${NETNS:-1}
KEEP_DST=${KEEP_DST:-1}
TRASH_WAIT=${TRASH_WAIT:-0}
RUN_TIMEOUT=${RUN_TIMEOUT:-1800}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
REFRESH=${REFRESH:-0}
RSYNC_CHROOT=${RSYNC_CHROOT:-yes}

read -r -a parts <<<"$PARTS"
read -r -a sets_a <<<"$SETS_A"
read -r -a sets_b <<<"$SETS_B"
read -r -a variants <<<"$VARIANTS"
read -r -a caches <<<"$CACHES"
in_list A "${parts[@]}" || sets_a=()
in_list B "${parts[@]}" || sets_b=()
[[ $RUNS =~ ^[1-9][0-9]*$ && $RUNS_B =~ ^[1-9][0-9]*$ ]] || die "RUNS and RUNS_B must be positive integers"
for p in "${parts[@]}"; do in_list "$p" A B || die "unknown part: $p"; done
for s in "${sets_a[@]}"; do in_list "$s" small tree || die "unknown set of A: $s"; done
for s in "${sets_b[@]}"; do in_list "$s" files big || die "unknown set of B: $s"; done
for v in "${variants[@]}"; do in_list "$v" client server server-retry || die "unknown variant: $v"; done
for c in "${caches[@]}" "$B_CACHE"; do in_list "$c" cold warm || die "unknown cache state: $c"; done
[[ $VERIFY == count || $VERIFY == full ]] || die "VERIFY must be count or full"
[[ $KILL_AT =~ ^[1-9][0-9]?$ ]] || die "KILL_AT must be a percentage, 1-99"
for c in python3 ss setsid timeout find rsync; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
can_drop_caches || die "this benchmark drops caches (cold runs): run it as root"

# ---------------------------------------------------------------- network namespace
# Build first (cargo may need the network), then run the rest of the script in
# a network namespace of its own with only `lo` up: its counters in
# /proc/net/dev (not /sys/class/net, which shows the namespace that mounted
# /sys) then count the bytes of this benchmark's connections and nothing else.
if [[ $NETNS == 1 && -z ${RESYNC_IN_NETNS:-} ]]; then
    sprat_build "$SPRAT"
    for c in unshare ip; do command -v "$c" >/dev/null || die "NETNS=1 needs $c (or NETNS=0)"; done
    log "re-running in a network namespace of its own (unshare -n)"
    # shellcheck disable=SC2016 # expanded by the inner bash
    exec unshare --net -- env RESYNC_IN_NETNS=1 BUILD=0 \
        bash -c 'ip link set lo up && exec "$0" "$@"' "$here/resync.sh" "$@"
fi
[[ $NETNS == 1 ]] || sprat_build "$SPRAT"
BUILD=0


# lo_bytes VAR: bytes received on lo in this namespace (each loopback packet,
# headers included, is counted once, whichever way it went), or "" (NETNS=0).
lo_bytes() {
    local _lo_if _lo_rx _lo_rest
    printf -v "$1" '%s' ""
    [[ $NETNS == 1 ]] || return 0
    while IFS=$' \t:' read -r _lo_if _lo_rx _lo_rest; do
        if [[ $_lo_if == lo ]]; then
            printf -v "$1" '%s' "$_lo_rx"
            return 0
        fi
    done </proc/net/dev
}

# mono_us VAR: the monotonic clock in integer microseconds.
mono_us() {
    local _mu
    mono_now _mu
    _mu=$(printf '%.6f' "$_mu")
    printf -v "$1" '%s' "$((10#${_mu/./}))"
}

# diff_or_empty A B: B - A, or "" when either is empty.
diff_or_empty() { if [[ -n $1 && -n $2 ]]; then echo $(($2 - $1)); fi; }

# ---------------------------------------------------------------- directories

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DATA_DIR" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
fs_is_ram "$DATA_DIR" && die "DATA_DIR=$DATA_DIR is on tmpfs/ramfs; use a real disk"
ROOT=$DATA_DIR/root             # exported by `sprat serve` and the rsync daemon
META=$DATA_DIR/meta             # manifests of the data sets
LOCAL=$DATA_DIR/resync-local    # A's pull copies
TRASH=$DATA_DIR/trash/resync-$STAMP
LOGS=$DATA_DIR/logs/resync-$STAMP
mkdir -p "$ROOT" "$META" "$LOGS" "$LOCAL" "$TRASH"
CSV=$RESULTS_DIR/resync-$STAMP.csv
MD=$RESULTS_DIR/resync-$STAMP.md

# trash DIR: move DIR out of the way at once (deleting 100,000 files takes
# ~100 s on this disk); the trash is emptied at exit, in the background
# unless TRASH_WAIT=1, never while a timed command runs.
trash() { if [[ -e $1 ]]; then mv -- "$1" "$TRASH/$(basename "$1").$RANDOM"; fi; }
trash_empty() {
    if [[ $KEEP_DST != 1 ]]; then
        local d
        for d in "$ROOT"/resync/* "$LOCAL"/*; do trash "$d"; done
    fi
    if [[ $TRASH_WAIT == 1 ]]; then
        log "deleting $TRASH"
        rm -rf -- "$TRASH"
    else
        log "deleting $TRASH in the background"
        setsid nohup nice -n 19 rm -rf -- "$TRASH" </dev/null >/dev/null 2>&1 &
    fi
}

exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-resync.XXXXXX)
EXIT_REMOVE+=("$TMP")
EXIT_HOOKS+=(trash_empty)
# B's destinations are fresh each run: whatever an interrupted run left goes.
trash "$ROOT/resume"
mkdir -p "$ROOT/resync" "$ROOT/resume"
sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY
clock_start

# ---------------------------------------------------------------- data sets
# A rewrites files of its sets (touch rounds), so they are its own (resync-*),
# their manifests kept current after every touch. B's are shared with
# bench/local.sh and bench/peers.sh (same names and recipes), read only.

declare -A set_dir set_desc set_files set_bytes
gen_set() { # ARGS... NEWDIR
    "$SPRAT" gen "$@" >>"$LOGS/gen.out" 2>&1 || {
        cat "$LOGS/gen.out" >&2
        die "sprat gen $* failed"
    }
}
# A set whose touch was interrupted (marker left) gets a new manifest.
dataset_current() {
    local name=$1
    if [[ -e $META/$name.touching ]]; then
        log "a touch of $name was interrupted: remaking its manifest"
        manifest "$ROOT/$name" "$META/$name.json.tmp" >/dev/null
        mv -- "$META/$name.json.tmp" "$META/$name.json"
        rm -f -- "$META/$name.touching"
    fi
}
if in_list small "${sets_a[@]}"; then
    args=(--files "$FILES" --size "$SIZE" --seed "$SEED")
    set_dir[small]=resync-gen-small-${FILES}x$SIZE-seed$SEED
    set_desc[small]="\`sprat gen ${args[*]}\`, private to this benchmark (its touch rounds rewrite files)"
    dataset_ensure "$ROOT/${set_dir[small]}" "sprat gen ${args[*]}; touched by bench/resync.sh" \
        gen_set "${args[@]}"
fi
if in_list tree "${sets_a[@]}"; then
    tree=$SRC_TREE
    [[ -n $tree ]] || tree=$(pick_tree "$TREE_MIN_FILES")
    [[ -d $tree ]] || die "SRC_TREE=$tree is not a directory"
    tree=$(cd "$tree" && pwd)
    set_dir[tree]=resync-tree
    set_desc[tree]="snapshot of $tree"
    if [[ $TREE_FILES != 0 ]]; then
        set_dir[tree]=resync-tree-first$TREE_FILES
        set_desc[tree]="first $TREE_FILES files (sorted paths) of $tree"
    fi
    set_desc[tree]+=", private to this benchmark (its touch rounds rewrite files)"
    dataset_ensure "$ROOT/${set_dir[tree]}" "$tree" snapshot_tree "$tree" "$TREE_FILES"
fi
if in_list files "${sets_b[@]}"; then
    args=(--files "$B_FILES" --size 4KiB --seed "$SEED")
    set_dir[files]=src-gen-small-${B_FILES}x4KiB-seed$SEED
    set_desc[files]="\`sprat gen ${args[*]}\`"
    dataset_ensure "$ROOT/${set_dir[files]}" "sprat gen ${args[*]}" gen_set "${args[@]}"
fi
if in_list big "${sets_b[@]}"; then
    args=(--files 1 --size "$B_BIG" --seed "$SEED")
    set_dir[big]=src-gen-big-1x$B_BIG-seed$SEED
    set_desc[big]="\`sprat gen ${args[*]}\`: one file"
    dataset_ensure "$ROOT/${set_dir[big]}" "sprat gen ${args[*]}" gen_set "${args[@]}"
fi
for s in "${sets_a[@]}" "${sets_b[@]}"; do
    dataset_current "${set_dir[$s]}"
    read -r f b _ _ _ < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$f set_bytes[$s]=$b
    log "set $s: $f files, $b bytes in $ROOT/${set_dir[$s]}"
done

# ---------------------------------------------------------------- helpers in Python

# touch_files SET: rewrite TOUCH_PCT percent of SET's regular files in place
# (new random content of the same size, so a new mtime; empty files get a new
# mtime), spread evenly over the sorted paths with another offset each time;
# files with several hard links are left out. Updates the set's manifest and
# writes the rewritten paths to $TMP/touched-SET.list.
TOUCHES=0
touch_files() {
    local s=$1 name=${set_dir[$1]}
    TOUCHES=$((TOUCHES + 1))
    : >"$META/$name.touching"
    python3 - "$META/$name.json" "$ROOT/$name" "$TOUCH_PCT" "$TOUCHES" "$TMP/touched-$s.list" <<'PY'
import hashlib, json, os, sys
man, root, pct, nth, out = sys.argv[1], sys.argv[2], float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
tree = json.load(open(man))
files = []
for k in sorted(tree):
    if tree[k][0] == "f" and os.lstat(os.path.join(root, k)).st_nlink == 1:
        files.append(k)
n = max(1, round(len(files) * pct / 100))
stride = len(files) / n
off = (nth * 0.6180339887) % 1.0  # golden-ratio steps: another spread each time
picked = sorted({files[min(len(files) - 1, int((i + off) * stride))] for i in range(n)})
for k in picked:
    p = os.path.join(root, k)
    size = os.lstat(p).st_size
    data = os.urandom(size)
    if size:
        with open(p, "r+b") as f:
            f.write(data)
    else:
        os.utime(p)
    st = os.lstat(p)
    e = tree[k]
    tree[k] = ["f", e[1], st.st_size, int(st.st_mtime), hashlib.blake2b(data, digest_size=16).hexdigest()]
with open(man + ".tmp", "w") as f:
    json.dump(tree, f)
os.replace(man + ".tmp", man)
with open(out, "w") as f:
    f.write("".join(k + "\n" for k in picked))
PY
    rm -f -- "$META/$name.touching"
}

# check_paths SRC DST LIST: compare the files of LIST (relative paths) at DST
# with SRC: type, size, content, mtime to the nanosecond. Prints
# STATUS<TAB>DETAIL, STATUS ok, meta (mtimes differ) or FAIL.
check_paths() {
    python3 - "$@" <<'PY'
import os, sys
src, dst, lst = sys.argv[1:4]
paths = [l.rstrip("\n") for l in open(lst) if l.strip()]
bad, meta = [], []
for k in paths:
    a, b = os.path.join(src, k), os.path.join(dst, k)
    try:
        sa, sb = os.lstat(a), os.lstat(b)
    except OSError as e:
        bad.append("%s: %s" % (k, e.strerror))
        continue
    if sa.st_size != sb.st_size:
        bad.append("%s: size %d vs %d" % (k, sb.st_size, sa.st_size))
    elif open(a, "rb").read() != open(b, "rb").read():
        bad.append("%s: content" % k)
    elif sa.st_mtime_ns != sb.st_mtime_ns:
        meta.append(k)
if bad:
    print("FAIL\t%d/%d touched files differ (e.g. %s)" % (len(bad), len(paths), bad[0]))
elif meta:
    print("meta\t%d/%d touched files: mtime differs (e.g. %s)" % (len(meta), len(paths), meta[0]))
else:
    print("ok\t%d touched files equal" % len(paths))
PY
}

# resume_state SRC MANIFEST DST: what a cut transfer left at DST. A file is
# complete when DST has it under its final name with the source's size and
# mtime (to the nanosecond: the check that skips it on a re-run); of a file
# that is not, the ranges recorded in its journal `.NAME.sprat-part.log`
# (header: "SPRATPT1", size u64, mtime s i64, ns u32; then records: offset
# u64, length u64, xxh3-128), when the header matches the source, count as
# present; the bytes of those ranges in the partial file `.NAME.sprat-part`
# are compared with the source's. Prints, tab-separated: complete_files
# complete_bytes partial_files partial_bytes missing_bytes bad_ranges bad_bytes
# (recorded ranges whose bytes differ from the source) other_names (names at
# DST the source does not have, partial files and journals excepted)
# example_other.
resume_state() {
    python3 - "$@" <<'PY'
import json, os, struct, sys
src, man, dst = sys.argv[1:4]
tree = json.load(open(man))
cf = cb = pf = pb = total = bad_ranges = bad_bytes = 0
for k, v in tree.items():
    if v[0] != "f":
        continue
    total += v[2]
    s = os.lstat(os.path.join(src, k))
    try:
        d = os.lstat(os.path.join(dst, k))
        if os.path.isfile(os.path.join(dst, k)) and not os.path.islink(os.path.join(dst, k)) \
                and d.st_size == s.st_size and d.st_mtime_ns == s.st_mtime_ns:
            cf += 1
            cb += s.st_size
            continue
    except OSError:
        pass
    head, name = os.path.split(k)
    log = os.path.join(dst, head, "." + name + ".sprat-part.log")
    try:
        data = open(log, "rb").read()
    except OSError:
        continue
    if len(data) < 28 or data[:8] != b"SPRATPT1":
        continue
    size, sec, nsec = struct.unpack_from("<QqI", data, 8)
    if size != s.st_size or sec * 10**9 + nsec != s.st_mtime_ns:
        continue
    ranges = []
    for off in range(28, len(data) - 31, 32):
        o, n = struct.unpack_from("<QQ", data, off)
        if n and o + n <= size:
            ranges.append((o, o + n))
    ranges.sort()
    have, end = 0, 0
    for a, b in ranges:
        a = max(a, end)
        if b > a:
            have += b - a
            end = b
    pf += 1
    pb += have
    # Do the recorded ranges of the partial file hold the source's bytes?
    if os.environ.get("CHECK_PARTIAL", "1") != "1":
        continue
    try:
        with open(os.path.join(src, k), "rb") as fs, \
                open(os.path.join(dst, head, "." + name + ".sprat-part"), "rb") as fp:
            for a, b in ranges:
                fs.seek(a)
                fp.seek(a)
                at = a
                while at < b:
                    n = min(b - at, 8 << 20)
                    if fs.read(n) != fp.read(n):
                        bad_ranges += 1
                        bad_bytes += b - a
                        break
                    at += n
    except OSError:
        bad_ranges += len(ranges)
        bad_bytes += have
others = []
for dirpath, dirnames, filenames in os.walk(dst):
    for n in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
        rel = os.path.relpath(os.path.join(dirpath, n), dst)
        if rel not in tree and not (n.startswith(".") and (n.endswith(".sprat-part") or n.endswith(".sprat-part.log"))):
            others.append(rel)
print("%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s" % (cf, cb, pf, pb, total - cb - pb, bad_ranges, bad_bytes,
                                          len(others), others[0] if others else ""))
PY
}

# quiesce PID: wait until process PID has used no CPU and written nothing for
# 1 s (at most 60 s): a server still writing what a killed client had sent.
quiesce() {
    local pid=$1 i same=0 now prev="" a b u s
    for ((i = 0; i < 600 && same < 10; i++)); do
        now=""
        if read -r a <"/proc/$pid/stat" 2>/dev/null; then
            a=${a##*) }
            read -r _ _ _ _ _ _ _ _ _ _ _ u s _ <<<"$a"
            now="$u $s"
        fi
        b=$(grep -E '^(rchar|wchar)' "/proc/$pid/io" 2>/dev/null | tr '\n' ' ') || true
        now+=" $b"
        if [[ $now == "$prev" ]]; then same=$((same + 1)); else same=0; fi
        prev=$now
        sleep 0.1
    done
}

# ---------------------------------------------------------------- CSV

CSV_COLS=(stamp part set scenario cache round order tool direction seconds exit check
    wire_bytes src_files src_bytes report_bytes report_not_sent report_up_to_date
    report_attempts report_seconds kill_at_s kill_at_wire first_exit complete_bytes partial_bytes
    missing_bytes load1 note)
(IFS=,; echo "${CSV_COLS[*]}") >"$CSV"
declare -A R
# csv_row: one line of the columns in R (reset by the caller).
csv_row() {
    local c line=""
    R[note]=$(oneline "${R[note]:-}")
    R[check]=$(oneline "${R[check]:-}")
    for c in "${CSV_COLS[@]}"; do line+=${line:+,}${R[$c]:-}; done
    printf '%s\n' "$line" >>"$CSV"
}
# sprat_report FILE: the report fields of `sprat cp --json` into R.
sprat_report() {
    local vals
    mapfile -t vals < <(json_fields "$1" bytes bytes_not_sent up_to_date attempts seconds)
    R[report_bytes]=${vals[0]:-} R[report_not_sent]=${vals[1]:-}
    R[report_up_to_date]=${vals[2]:-} R[report_attempts]=${vals[3]:-} R[report_seconds]=${vals[4]:-}
}
new_row() { # PART SET SCENARIO CACHE ROUND TOOL DIRECTION
    R=([stamp]=$STAMP [part]=$1 [set]=$2 [scenario]=$3 [cache]=$4 [round]=$5 [tool]=$6
        [direction]=$7 [src_files]=${set_files[$2]} [src_bytes]=${set_bytes[$2]})
    local l
    read -r l _ </proc/loadavg
    R[load1]=$l
}

# ---------------------------------------------------------------- servers

start_sprat
if ((${#sets_a[@]} > 0)); then start_rsyncd; fi

# ---------------------------------------------------------------- A: re-sync against rsync

# a_cmd SET TOOL DIRECTION [EXTRA]: sets A_SRC, A_DST and A_CMD (EXTRA: one
# more option, e.g. --delete for the untimed copy that makes DST complete).
a_cmd() {
    local name=${set_dir[$1]} tool=$2 dir=$3 extra=${4:-} rel
    A_SRC=$ROOT/$name
    if [[ $dir == push ]]; then
        rel=resync/$name-$tool
        A_DST=$ROOT/$rel
        case $tool in
            sprat) A_CMD=("$SPRAT" cp --json ${extra:+"$extra"} "$A_SRC" "sprat://127.0.0.1:$SPRAT_PORT/$rel") ;;
            rsync) A_CMD=(rsync -a ${extra:+"$extra"} "$A_SRC/" "rsync://127.0.0.1:$RSYNC_PORT/mod/$rel/") ;;
        esac
    else
        A_DST=$LOCAL/$name-$tool
        case $tool in
            sprat) A_CMD=("$SPRAT" cp --json ${extra:+"$extra"} "sprat://127.0.0.1:$SPRAT_PORT/$name" "$A_DST") ;;
            rsync) A_CMD=(rsync -a ${extra:+"$extra"} "rsync://127.0.0.1:$RSYNC_PORT/mod/$name/" "$A_DST/") ;;
        esac
    fi
}

# a_timed SET SCENARIO TOOL DIRECTION CACHE ROUND ORDER: one timed re-run.
a_timed() {
    local set=$1 scen=$2 tool=$3 dir=$4 cache=$5 round=$6 tag w0 w1 v st detail
    a_cmd "$set" "$tool" "$dir"
    tag=$set-$scen-$tool-$dir-$cache-r$round
    new_row A "$set" "$scen" "$cache" "$round" "$tool" "$dir"
    R[order]=$7
    if [[ $cache == cold ]]; then
        drop_caches 3
    else
        # Warm for a re-sync: every entry of both trees stat'ed just before.
        find "$A_SRC" "$A_DST" -printf '%s\n' >/dev/null
    fi
    lo_bytes w0
    timed_cmd "$RUN_TIMEOUT" "${A_CMD[@]}" >"$LOGS/$tag.out" 2>"$LOGS/$tag.err"
    lo_bytes w1
    R[seconds]=$T_SECS R[exit]=$T_RC R[wire_bytes]=$(diff_or_empty "$w0" "$w1")
    [[ $tool == sprat ]] && sprat_report "$LOGS/$tag.out"
    st=ok detail=""
    if [[ $scen == touch ]]; then
        v=$(check_paths "$A_SRC" "$A_DST" "$TMP/touched-$set.list") || v=$'FAIL\tchecker crashed'
        IFS=$'\t' read -r st detail <<<"$v"
    fi
    if [[ $T_RC != 0 ]]; then
        st=FAIL
        detail="exit $T_RC: $(tail -n 2 "$LOGS/$tag.err")${detail:+; $detail}"
    fi
    R[check]=$st R[note]=$detail
    csv_row
    log "$(printf 'A %-5s %-5s %-5s %-4s %-4s r%s %8.3f s  wire %12s B  %s %s' "$set" "$scen" \
        "$tool" "$dir" "$cache" "$round" "$T_SECS" "${R[wire_bytes]:-n/a}" "$st" "$(oneline "$detail")")"
}

# a_verify SET PHASE CELL...: check whole destinations (untimed) against the
# current manifest; one CSV line each (scenario verify-PHASE).
a_verify() {
    local set=$1 phase=$2 cell v st dfiles dbytes detail
    shift 2
    for cell in "$@"; do
        a_cmd "$set" "${cell%/*}" "${cell#*/}"
        v=$(verify_tree "$META/${set_dir[$set]}.json" "$A_DST" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
        IFS=$'\t' read -r st dfiles dbytes detail <<<"$v"
        new_row A "$set" "verify-$phase" - - "${cell%/*}" "${cell#*/}"
        R[check]=$st R[note]="$VERIFY: $dfiles files, $dbytes bytes${detail:+; $detail}"
        csv_row
        log "A $set verify after $phase: ${cell%/*} ${cell#*/}: $st $detail"
    done
}

run_a() {
    local set=$1 cell tool dir k r n cache v st detail
    local cells=(sprat/push rsync/push sprat/pull rsync/pull)
    log "A: set $set: making the destinations complete (untimed)"
    for cell in "${cells[@]}"; do
        tool=${cell%/*} dir=${cell#*/}
        a_cmd "$set" "$tool" "$dir" --delete
        new_row A "$set" setup - 1 "$tool" "$dir"
        R[note]="$([[ -d $A_DST ]] && echo "existing destination re-synced" || echo "fresh copy")"
        timed_cmd "$RUN_TIMEOUT" "${A_CMD[@]}" >"$LOGS/$set-setup-$tool-$dir.out" 2>"$LOGS/$set-setup-$tool-$dir.err"
        R[seconds]=$T_SECS R[exit]=$T_RC
        v=$(verify_tree "$META/${set_dir[$set]}.json" "$A_DST" count) || v=$'FAIL\t0\t0\tverifier crashed'
        IFS=$'\t' read -r st _ _ detail <<<"$v"
        [[ $T_RC == 0 ]] || st=FAIL detail="exit $T_RC: $(tail -n 2 "$LOGS/$set-setup-$tool-$dir.err") $detail"
        R[check]=$st R[note]+="${detail:+; $detail}"
        csv_row
        log "A $set setup $tool $dir: $T_SECS s, $st ${R[note]}"
        [[ $st != FAIL ]] || die "could not make $A_DST complete: $detail"
    done
    # No-op re-runs, every cell once per round, the order rotated each round.
    for cache in "${caches[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            n=${#cells[@]}
            for ((k = 0; k < n; k++)); do
                cell=${cells[$(((k + r - 1) % n))]}
                a_timed "$set" noop "${cell%/*}" "${cell#*/}" "$cache" "$r" "$((k + 1))"
            done
        done
    done
    a_verify "$set" noop "${cells[@]}"
    # Re-runs after TOUCH_PCT % of the files were rewritten (again each round).
    cells=(sprat/push rsync/push)
    for cache in "${caches[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            touch_files "$set"
            n=${#cells[@]}
            for ((k = 0; k < n; k++)); do
                cell=${cells[$(((k + r - 1) % n))]}
                a_timed "$set" touch "${cell%/*}" "${cell#*/}" "$cache" "$r" "$((k + 1))"
            done
        done
    done
    a_verify "$set" touch "${cells[@]}"
}

# ---------------------------------------------------------------- B: kill at half, then re-run

declare -A FULL_S FULL_WIRE

b_prepare_cache() {
    if [[ $B_CACHE == cold ]]; then drop_caches 3; else read_all "$1"; fi
}

# b_full SET: a full copy into a fresh destination, once: the reference for
# "half" (its loopback bytes, or its time with NETNS=0) and for the re-runs.
b_full() {
    local set=$1 name=${set_dir[$1]} tag w0 w1 v st detail
    tag=$set-full
    new_row B "$set" full "$B_CACHE" 1 sprat push
    b_prepare_cache "$ROOT/$name"
    lo_bytes w0
    timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "$ROOT/$name" "sprat://127.0.0.1:$SPRAT_PORT/resume/$tag" \
        >"$LOGS/B-$tag.out" 2>"$LOGS/B-$tag.err"
    lo_bytes w1
    R[seconds]=$T_SECS R[exit]=$T_RC R[wire_bytes]=$(diff_or_empty "$w0" "$w1")
    sprat_report "$LOGS/B-$tag.out"
    v=$(verify_tree "$META/$name.json" "$ROOT/resume/$tag" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
    IFS=$'\t' read -r st _ _ detail <<<"$v"
    [[ $T_RC == 0 ]] || st=FAIL detail="exit $T_RC: $(tail -n 2 "$LOGS/B-$tag.err") $detail"
    R[check]=$st R[note]=$detail
    csv_row
    trash "$ROOT/resume/$tag"
    [[ $st != FAIL ]] || die "B: the full copy of $set failed: $detail"
    FULL_S[$set]=$T_SECS FULL_WIRE[$set]=${R[wire_bytes]}
    log "B $set full copy: $T_SECS s, ${R[wire_bytes]:-n/a} bytes on lo, $st"
}

# b_run SET VARIANT ROUND: cut a push at about KILL_AT % by kill -9 of the
# client (client) or of the server (server: the client has --retry-for 0s and
# exits; server-retry: default retries, the client resumes by itself once the
# server is back), then re-run and measure.
b_run() {
    local set=$1 var=$2 round=$3 name=${set_dir[$1]} tag rel dst src url cpid
    local w0 w t0 t tk target_w="" target_t="" rc=0 killed=1 v st detail state victim
    local first_extra=()
    tag=$set-$var-r$round
    rel=resume/$tag dst=$ROOT/resume/$tag src=$ROOT/$name
    url=sprat://127.0.0.1:$SPRAT_PORT/$rel
    new_row B "$set" "$var" "$B_CACHE" "$round" sprat push
    [[ $var == server ]] && first_extra=(--retry-for 0s)
    b_prepare_cache "$src"

    # The interrupted run, killed at about KILL_AT %.
    lo_bytes w0
    mono_us t0
    if [[ -n $w0 && -n ${FULL_WIRE[$set]} ]]; then
        target_w=$((w0 + FULL_WIRE[$set] * KILL_AT / 100))
    else
        target_t=$((t0 + $(printf '%.0f' "$(awk -v s="${FULL_S[$set]}" -v p="$KILL_AT" 'BEGIN { print s * p * 10000 }')")))
    fi
    "$SPRAT" cp --json "${first_extra[@]}" "$src" "$url" >"$LOGS/B-$tag-first.out" 2>"$LOGS/B-$tag-first.err" </dev/null &
    cpid=$!
    bg_register "$cpid" pid
    # Poll, and kill -9 the moment the mark is passed (measure afterwards).
    victim=$cpid
    [[ $var == client ]] || victim=$SPRAT_PID
    while :; do
        if ! kill -0 "$cpid" 2>/dev/null; then
            killed=0
            break
        fi
        if [[ -n $target_w ]]; then
            lo_bytes w
            if ((w >= target_w)); then
                ss -Htn state established >"$LOGS/B-$tag-ss.txt" 2>/dev/null || true
                kill -KILL "$victim" 2>/dev/null || true
                break
            fi
        else
            mono_us t
            if ((t >= target_t)); then
                ss -Htn state established >"$LOGS/B-$tag-ss.txt" 2>/dev/null || true
                kill -KILL "$victim" 2>/dev/null || true
                break
            fi
        fi
        sleep 0.002
    done
    mono_us tk
    lo_bytes w
    R[kill_at_s]=$(awk -v a="$t0" -v b="$tk" 'BEGIN { printf "%.3f", (b - a) / 1e6 }')
    R[kill_at_wire]=$(diff_or_empty "$w0" "$w")
    detail=""
    if ((killed == 0)); then
        wait "$cpid" || rc=$?
        bg_unregister "$cpid"
        R[first_exit]=$rc
        detail="the first run ended (exit $rc) before the kill;"
        log "B $tag: the first run ended before it could be killed (exit $rc)"
    elif [[ $var == client ]]; then
        wait "$cpid" || rc=$?
        bg_unregister "$cpid"
        R[first_exit]=$rc
        # The server may still be writing what it had received.
        quiesce "$SPRAT_PID"
    else
        wait "$SPRAT_PID" 2>/dev/null || true
        bg_unregister "$SPRAT_PID"
        if [[ $var == server ]]; then
            for ((t = 0; t < 1200; t++)); do
                kill -0 "$cpid" 2>/dev/null || break
                sleep 0.1
            done
            if kill -0 "$cpid" 2>/dev/null; then
                kill -KILL "$cpid" 2>/dev/null || true
                detail+="the client (--retry-for 0s) was still running 120 s after the server was killed: killed;"
            fi
            wait "$cpid" || rc=$?
            bg_unregister "$cpid"
            R[first_exit]=$rc
        fi
    fi
    # Bytes queued in the kernel's socket buffers just before the kill (ss, a
    # few ms before it): received by the server's sockets but not yet read by
    # sprat serve (Recv-Q), and not yet sent by the client's (Send-Q).
    if [[ -s $LOGS/B-$tag-ss.txt ]]; then
        detail+=" $(awk -v p=":$SPRAT_PORT" '
            { if (substr($3, length($3) - length(p) + 1) == p) rq += $1;
              if (substr($4, length($4) - length(p) + 1) == p) sq += $2 }
            END { printf "at the kill: server sockets Recv-Q %d B, client sockets Send-Q %d B;", rq, sq }' \
            "$LOGS/B-$tag-ss.txt")"
    fi
    log "B $tag: killed the $([[ $var == client ]] && echo client || echo server) at ${R[kill_at_s]} s," \
        "${R[kill_at_wire]:-n/a} bytes on lo (full copy: ${FULL_S[$set]} s, ${FULL_WIRE[$set]:-n/a} bytes)"

    # What is at the destination now.
    state=$(resume_state "$src" "$META/$name.json" "$dst") || state=$'0\t0\t0\t0\t0\t0\t0\t0\tscan failed'
    local cf cb pf pb mb badr badb other other_eg
    IFS=$'\t' read -r cf cb pf pb mb badr badb other other_eg <<<"$state"
    R[complete_bytes]=$cb R[partial_bytes]=$pb R[missing_bytes]=$mb
    detail+=" before the re-run: $cf complete files, $pf partial files, $other other names${other_eg:+ (e.g. $other_eg)};"
    if ((badr > 0)); then
        detail+=" $badr journal-recorded ranges ($badb B) of partial files differ from the source;"
        log "B $tag: WARNING: $badr ranges ($badb B) that journals record differ from the source"
    fi
    log "B $tag: at the destination: $cf complete files ($cb B), $pf partial files ($pb B verified)," \
        "missing $mb B, $other other names"

    # Keep the journals, for a look afterwards (the destination goes to the trash).
    if ((pf > 0)); then
        mkdir -p "$LOGS/B-$tag-journals"
        find "$dst" -name '.*.sprat-part.log' -exec cp --parents -t "$LOGS/B-$tag-journals" {} + 2>/dev/null || true
    fi

    # The re-run: the same command, default options.
    b_prepare_cache "$src"
    rc=0
    if [[ $var == server-retry && $killed == 1 ]]; then
        lo_bytes w0
        mono_now t
        start_sprat "$SPRAT_PORT"
        wait "$cpid" || rc=$?
        mono_now tk
        bg_unregister "$cpid"
        lo_bytes w
        R[seconds]=$(elapsed "$t" "$tk") R[exit]=$rc
        R[first_exit]=-
        sprat_report "$LOGS/B-$tag-first.out"
        detail+=" measured: the retrying client from the server's restart to its exit ($(grep -c 'attempt .* failed' "$LOGS/B-$tag-first.err" || true) failed attempts logged);"
        cp "$LOGS/B-$tag-first.out" "$LOGS/B-$tag-rerun.out"
    else
        [[ $var == server && $killed == 1 ]] && start_sprat "$SPRAT_PORT"
        lo_bytes w0
        timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "$src" "$url" >"$LOGS/B-$tag-rerun.out" 2>"$LOGS/B-$tag-rerun.err"
        lo_bytes w
        R[seconds]=$T_SECS R[exit]=$T_RC
        rc=$T_RC
        sprat_report "$LOGS/B-$tag-rerun.out"
    fi
    R[wire_bytes]=$(diff_or_empty "$w0" "$w")
    local warned
    # (A retrying client's attempts while the server is down warn that they
    # cannot list the destination: "Connection refused"; those are left out.)
    warned=$(grep -h 'WARN' "$LOGS/B-$tag-rerun.err" "$LOGS/B-$tag-first.err" 2>/dev/null |
        grep -v 'Connection refused' | head -n 1 || true)
    [[ -z $warned ]] || detail+=" sprat warned: ${warned#* WARN };"
    if ((pb > 0)) && [[ ${R[report_not_sent]:-0} == 0 ]]; then
        detail+=" the re-run resumed nothing although the journals recorded $pb bytes;"
        log "B $tag: WARNING: the re-run resumed nothing although the journals recorded $pb bytes"
    fi

    # Untimed: is the destination the source?
    v=$(verify_tree "$META/$name.json" "$dst" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
    IFS=$'\t' read -r st _ _ v <<<"$v"
    if [[ $rc != 0 ]]; then
        st=FAIL
        v="exit $rc: $(tail -n 2 "$LOGS/B-$tag-rerun.err" "$LOGS/B-$tag-first.err" 2>/dev/null)${v:+; $v}"
    fi
    R[check]=$st R[note]="$detail after: $VERIFY check ${v:-equal}"
    csv_row
    log "B $tag: re-run $(printf '%.3f' "${R[seconds]}") s, ${R[wire_bytes]:-n/a} bytes on lo" \
        "(report: bytes ${R[report_bytes]}, not sent ${R[report_not_sent]}, attempts ${R[report_attempts]}), $st $v"
    trash "$dst"
}

# ---------------------------------------------------------------- main

t_start=$SECONDS
for set_a in "${sets_a[@]}"; do run_a "$set_a"; done
for set_b in "${sets_b[@]}"; do
    b_full "$set_b"
    for ((round_b = 1; round_b <= RUNS_B; round_b++)); do
        for variant in "${variants[@]}"; do b_run "$set_b" "$variant" "$round_b"; done
    done
done
t_total=$((SECONDS - t_start))

# ---------------------------------------------------------------- report

{
    echo "# sprat re-sync and resume (issue 15), $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC"
    echo "- peer: $(rsync --version | head -n 1 | sed 's/  */ /g'), daemon on 127.0.0.1 (\`use chroot = $RSYNC_CHROOT\`, uid/gid root)"
    if [[ $NETNS == 1 ]]; then
        echo "- network: a namespace of its own (\`unshare -n\`, only \`lo\` up); *lo B* = bytes received on lo (/proc/net/dev) during the command: every loopback packet once, both directions, headers included"
    else
        echo "- network: the host's (NETNS=0): no byte counts; B kills at $KILL_AT% of a full copy's time"
    fi
    echo "- A: \`sprat cp --json SRC sprat://127.0.0.1:PORT/resync/NAME-sprat\` against \`rsync -a SRC/ rsync://127.0.0.1:PORT/mod/resync/NAME-rsync/\` (push) and \`sprat cp --json sprat://127.0.0.1:PORT/NAME LOCAL\` against \`rsync -a rsync://127.0.0.1:PORT/mod/NAME/ LOCAL/\` (pull); each tool has its own destination, made complete first (untimed, with \`--delete\`); $RUNS round(s) per scenario and cache, the order rotated each round; cold = \`sync; echo 3 > drop_caches\` before each run, warm = every entry of both trees stat'ed (\`find SRC DST\`) before each run; touch = $TOUCH_PCT% of the source's files rewritten in place (same size, new random content, new mtime; other files each round) before each round"
    echo "- B: \`sprat cp --json SRC sprat://127.0.0.1:PORT/resume/TAG\` into a fresh destination, $B_CACHE cache; killed with \`kill -9\` when lo had carried $KILL_AT% of a full copy's bytes; client = the client killed; server = the server killed (first run with \`--retry-for 0s\`, so it exits), restarted on the same port and root, then the same command again; server-retry = the server killed, the client (default \`--retry-for 10min\`) left running, the server restarted on the same port: measured from the restart to the client's exit. Re-runs use the default options; the destination is then checked ($VERIFY) against the source"
    echo "- 1-min load average before each run (another engineer's builds share the machine): mean" \
        "$(awk -F, 'NR > 1 && $27 != "" { s += $27; n++ } END { if (n) printf "%.2f", s / n }' "$CSV")," \
        "max $(awk -F, 'NR > 1 && $27 > m { m = $27 } END { printf "%.2f", m }' "$CSV")"
    echo "- wall time ${t_total}s; raw runs: $(basename "$CSV"); logs: $LOGS"
    for s in "${sets_a[@]}" "${sets_b[@]}"; do
        echo "- set **$s**: ${set_files[$s]} files, ${set_bytes[$s]} bytes — ${set_desc[$s]}"
    done
    echo
} >"$MD"

python3 - "$CSV" "$KILL_AT" >>"$MD" <<'PY'
import csv, statistics, sys
from collections import OrderedDict
rows = list(csv.DictReader(open(sys.argv[1])))
kill_at = sys.argv[2]

def med(xs):
    return statistics.median(xs) if xs else None

def f(x, nd=3):
    return "—" if x is None else "%.*f" % (nd, x)

def mb(x):
    return "—" if x in (None, "") else "%.2f" % (float(x) / 1e6)

a = [r for r in rows if r["part"] == "A"]
if a:
    print("## A. Re-sync against rsync\n")
    print("Medians of the runs that passed (exit 0; touched files equal at the destination); "
          "*rsync / sprat* = rsync's median / sprat's median (> 1: sprat is faster), "
          "*per round* = the same ratio within each round; *lo* = bytes on loopback (median).\n")
    sets = list(OrderedDict.fromkeys(r["set"] for r in a))
    for s in sets:
        rs = [r for r in a if r["set"] == s]
        print("### %s: %s files, %.1f MB\n" % (s, rs[0]["src_files"], int(rs[0]["src_bytes"]) / 1e6))
        print("| scenario | direction | cache | sprat s (min–max) | rsync s (min–max) | rsync / sprat | per round | sprat lo MB | rsync lo MB | sprat sent MB | check |")
        print("|---|---|---|--:|--:|--:|---|--:|--:|--:|---|")
        cells = OrderedDict()
        for r in rs:
            if r["scenario"] in ("noop", "touch"):
                cells.setdefault((r["scenario"], r["direction"], r["cache"]), []).append(r)
        for (scen, d, cache), cr in cells.items():
            def ok(tool):
                return [r for r in cr if r["tool"] == tool and r["check"] != "FAIL"]
            def secs(tool):
                return [float(r["seconds"]) for r in ok(tool)]
            sp, rp = secs("sprat"), secs("rsync")
            ms, mr = med(sp), med(rp)
            per = []
            for rnd in sorted(set(r["round"] for r in cr), key=int):
                a1 = [float(r["seconds"]) for r in ok("sprat") if r["round"] == rnd]
                b1 = [float(r["seconds"]) for r in ok("rsync") if r["round"] == rnd]
                if a1 and b1:
                    per.append("%.2f" % (b1[0] / a1[0]))
            wire = lambda tool: med([int(r["wire_bytes"]) for r in ok(tool) if r["wire_bytes"]])
            sent = med([int(r["report_bytes"]) for r in ok("sprat") if r["report_bytes"]])
            fails = [r for r in cr if r["check"] == "FAIL"]
            verify = [r for r in rs if r["scenario"] == "verify-" + scen and r["direction"] == d]
            vtxt = ", ".join("%s %s" % (r["tool"], r["check"]) for r in verify)
            check = ("**FAIL** %d/%d" % (len(fails), len(cr))) if fails else "ok %d/%d" % (len(cr), len(cr))
            if any(r["check"] == "FAIL" for r in verify):
                check += "; **end check FAIL**"
            rng = lambda xs: "%.3f (%.3f–%.3f)" % (med(xs), min(xs), max(xs)) if xs else "—"
            print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
                {"noop": "no-op", "touch": "1% touched"}.get(scen, scen), d, cache, rng(sp), rng(rp),
                "**%.2f**" % (mr / ms) if ms and mr else "—", " ".join(per),
                mb(wire("sprat")), mb(wire("rsync")), mb(sent), check))
        print()
        for r in rs:
            if r["scenario"].startswith("verify") or r["scenario"] == "setup":
                print("- %s %s %s: %s%s%s" % (r["scenario"], r["tool"], r["direction"], r["check"],
                      (" in %.1f s" % float(r["seconds"])) if r["seconds"] else "", ("; " + r["note"]) if r["note"] else ""))
        for r in rs:
            if r["scenario"] in ("noop", "touch") and r["check"] == "FAIL":
                print("- FAIL %s %s %s %s r%s: %s" % (r["scenario"], r["tool"], r["direction"], r["cache"], r["round"], r["note"]))
        print()

b = [r for r in rows if r["part"] == "B"]
if b:
    print("## B. Kill at half, then re-run\n")
    print("| set | variant | run | killed at s (lo % of a full copy) | first exit | missing before MB (% of set) | re-run lo MB (% of set) | beyond missing (% of set) | report bytes / not sent MB | attempts | re-run s (last attempt s) | full copy s | check | goal < 55% and < 5% |")
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|")
    full = {r["set"]: r for r in b if r["scenario"] == "full"}
    for r in b:
        if r["scenario"] == "full":
            continue
        total = int(r["src_bytes"])
        fr = full.get(r["set"], {})
        pct = lambda x: "—" if x in (None, "") else "%.1f%%" % (100.0 * float(x) / total)
        kill_pct = ""
        if r["kill_at_wire"] and fr.get("wire_bytes"):
            kill_pct = " (%.0f%%)" % (100.0 * int(r["kill_at_wire"]) / int(fr["wire_bytes"]))
        beyond = None
        if r["wire_bytes"] and r["missing_bytes"]:
            beyond = int(r["wire_bytes"]) - int(r["missing_bytes"])
        goal = "—"
        if r["wire_bytes"]:
            g1 = int(r["wire_bytes"]) < 0.55 * total
            g2 = beyond is not None and beyond < 0.05 * total
            goal = "%s / %s" % ("yes" if g1 else "**no**", "yes" if g2 else "**no**")
        print("| %s | %s | %s | %s%s | %s | %s (%s) | %s (%s) | %s | %s / %s | %s | %s (%s) | %s | %s | %s |" % (
            r["set"], r["scenario"], r["round"], r["kill_at_s"], kill_pct, r["first_exit"],
            mb(r["missing_bytes"]), pct(r["missing_bytes"]), mb(r["wire_bytes"]), pct(r["wire_bytes"]),
            pct(beyond), mb(r["report_bytes"]), mb(r["report_not_sent"]), r["report_attempts"] or "—",
            f(float(r["seconds"]) if r["seconds"] else None),
            f(float(r["report_seconds"])) if r["report_seconds"] else "—",
            f(float(fr["seconds"])) if fr.get("seconds") else "—",
            r["check"], goal))
    print()
    print("*missing before* = the data set's bytes minus those of files complete at their final names (same size and "
          "mtime as the source) minus the ranges the journals of partial large files record; *re-run lo* = bytes on "
          "loopback while the re-run ran (both directions, headers included); *beyond missing* = re-run lo minus missing; "
          "*report bytes / not sent* = the re-run's `bytes` and `bytes_not_sent` (`sprat cp --json`); *re-run s* = wall time "
          "of the re-run (server-retry: from the server's restart to the retrying client's exit, so it includes the rest of "
          "the client's wait before its next attempt); *last attempt s* = the `seconds` of the re-run's report; *goal* = re-run lo "
          "< 55%% of the set / beyond missing < 5%% of the set. Full copies (reference, %s cache):\n" %
          (b[0]["cache"]))
    for r in b:
        if r["scenario"] == "full":
            print("- %s: %.3f s, %s MB on lo, %s%s" % (r["set"], float(r["seconds"]), mb(r["wire_bytes"]), r["check"],
                  ("; " + r["note"]) if r["note"] else ""))
    print()
    print("Notes per run:\n")
    for r in b:
        if r["scenario"] != "full":
            print("- %s %s r%s: %s" % (r["set"], r["scenario"], r["round"], r["note"]))
PY

log "wrote $CSV"
log "wrote $MD"
cat "$MD"
