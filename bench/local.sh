#!/usr/bin/env bash
# Local benchmark: copies of trees of many small files within one disk (no
# network): sprat cp against cp -a, tar | tar, rsync -a and rclone copy, cold
# and warm cache, with the read limit (every file read in parallel) and the
# write limit (`sprat bench write`: the tree written from memory) measured on
# the same data in the same run. Prints a markdown table per set and cache,
# writes bench/results/local-<stamp>.{md,csv,png}.
#
# Usage: bench/local.sh [SRC_TREE]
#   QUICK=1 bench/local.sh            smoke run (2000 files / 64 MiB, 1 run, a few minutes)
#   bench/local.sh                    full run (see bench/README.md)
#   SETS=small TOOLS="sprat cp" QUICK=1 bench/local.sh
#
# Environment (defaults in brackets):
#   SPRAT       sprat binary [target/release/sprat; (re)built with cargo
#               unless BUILD=0; a failed build falls back to an existing binary]
#   SPRAT_ARGS  extra arguments for `sprat cp` []
#   DATA_DIR    data sets and destinations, one real disk (not tmpfs) [/work/bench-data]
#   SETS        data sets: small mixed tree [small mixed tree]
#   TOOLS       copiers besides the limits: sprat cp tar rsync rclone [all five]
#   CACHES      cold warm [cold warm]
#   RUNS        runs per (set, tool, cache) [3; QUICK: 1]
#   FILES, SIZE the "small" set: FILES files of SIZE [100000, 4KiB; QUICK: 2000 files]
#   MIXED_TOTAL, MIXED_MAX  the "mixed" set: GridFTP sizes capped at MIXED_MAX,
#               MIXED_TOTAL in all [2GiB, 16MiB; QUICK: 64MiB total]
#   SEED        seed of `sprat gen` [1]
#   SRC_TREE    real tree for the "tree" set [as bench/loopback.sh: the first of
#               ~/.cargo/registry/src, /usr/share, target/ with TREE_MIN_FILES files]
#   TREE_FILES  take only the first N files (sorted paths) of it [0 = all; QUICK: 2000]
#   TREE_MIN_FILES  [10000]
#   RCLONE_ARGS options of `rclone copy` [see RCLONE_DEFAULT below and bench/README.md]
#   VERIFY      count | full [full]: how each copy is checked against the source
#   READ_PAR    parallelism of the read limit [16]
#   RUN_TIMEOUT seconds before one run is killed (FAIL) [3600]
#   WARM_DROP   1: drop the page cache before pre-reading a warm run's source [1]
#   REFRESH=1   remake the data sets
#   DEPS        1: run scripts/install-deps.sh first (installs missing peers) [1]
#   RESULTS_DIR where the .md/.csv/.png go [bench/results]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
if [[ $QUICK == 1 ]]; then
    RUNS=${RUNS:-1}
    FILES=${FILES:-2000}
    MIXED_TOTAL=${MIXED_TOTAL:-64MiB}
    TREE_FILES=${TREE_FILES:-2000}
fi
RUNS=${RUNS:-3}
FILES=${FILES:-100000}
SIZE=${SIZE:-4KiB}
MIXED_TOTAL=${MIXED_TOTAL:-2GiB}
MIXED_MAX=${MIXED_MAX:-16MiB}
SEED=${SEED:-1}
TREE_FILES=${TREE_FILES:-0}
TREE_MIN_FILES=${TREE_MIN_FILES:-10000}
SETS=${SETS:-small mixed tree}
TOOLS=${TOOLS:-sprat cp tar rsync rclone}
CACHES=${CACHES:-cold warm}
VERIFY=${VERIFY:-full}
READ_PAR=${READ_PAR:-16}
RUN_TIMEOUT=${RUN_TIMEOUT:-3600}
WARM_DROP=${WARM_DROP:-1}
REFRESH=${REFRESH:-0}
DEPS=${DEPS:-1}
BUILD=${BUILD:-1}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
SPRAT_ARGS=${SPRAT_ARGS:-}
# --links: symlinks stay symlinks (local to local); --create-empty-src-dirs:
# empty directories are copied; --local-no-check-updated: no re-stat of each
# source file after reading it; --transfers/--checkers 16: parallelism for
# many small files (defaults 4/8); --no-check-dest --retries 1: the
# destination is new and empty, so rclone neither lists it nor compares with
# it, and a failed run is not silently re-run. See bench/README.md.
RCLONE_DEFAULT="--links --create-empty-src-dirs --local-no-check-updated --transfers 16 --checkers 16 --no-check-dest --retries 1"
RCLONE_ARGS=${RCLONE_ARGS:-$RCLONE_DEFAULT}
SRC_TREE=${1:-${SRC_TREE:-}}

read -r -a sets <<<"$SETS"
read -r -a tools <<<"$TOOLS"
read -r -a caches <<<"$CACHES"
read -r -a sprat_args <<<"$SPRAT_ARGS"
read -r -a rclone_args <<<"$RCLONE_ARGS"

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $FILES =~ ^[1-9][0-9]*$ ]] || die "FILES must be a positive integer"
[[ $TREE_FILES =~ ^[0-9]+$ ]] || die "TREE_FILES must be a number"
[[ $VERIFY == count || $VERIFY == full ]] || die "VERIFY must be count or full"
((${#sets[@]} > 0)) || die "SETS is empty"
for s in "${sets[@]}"; do [[ $s =~ ^(small|mixed|tree)$ ]] || die "unknown set: $s"; done
for t in "${tools[@]}"; do [[ $t =~ ^(sprat|cp|tar|rsync|rclone)$ ]] || die "unknown tool: $t"; done
for c in "${caches[@]}"; do [[ $c =~ ^(cold|warm)$ ]] || die "unknown cache state: $c"; done

has_tool() { in_list "$1" "${tools[@]}"; }

# ---------------------------------------------------------------- prerequisites

if [[ $DEPS == 1 ]]; then
    "$repo/scripts/install-deps.sh" >&2 || log "warning: scripts/install-deps.sh failed; going on with what is installed"
fi
for c in python3 timeout tar find xargs sort; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
for t in cp rsync rclone; do
    if has_tool "$t"; then command -v "$t" >/dev/null || die "missing $t (run scripts/install-deps.sh)"; fi
done
need_cache_control "${caches[@]}"
# The plot needs matplotlib: the python3 on PATH, else Debian's (python3-matplotlib).
PLOT_PY=""
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import matplotlib' >/dev/null 2>&1; then
        PLOT_PY=$p
        break
    fi
done
[[ -n $PLOT_PY ]] || log "warning: no python3 with matplotlib (apt-get install python3-matplotlib): no plot"

# sprat makes the data sets and measures the write limit, so it is always needed.
sprat_build "$SPRAT"

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DATA_DIR" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
fs_is_ram "$DATA_DIR" && die "DATA_DIR=$DATA_DIR is on tmpfs/ramfs; use a real disk"
ROOT=$DATA_DIR/root                # data sets (shared with bench/loopback.sh)
META=$DATA_DIR/meta                # their manifests
WORK=$DATA_DIR/local-bench/$STAMP # destinations of this run: same file system, removed at exit
LOGS=$DATA_DIR/logs/local-$STAMP
CSV=$RESULTS_DIR/local-$STAMP.csv
MD=$RESULTS_DIR/local-$STAMP.md
PNG=$RESULTS_DIR/local-$STAMP.png

exit_cleanup_install
mkdir -p "$ROOT" "$META" "$LOGS"
EXIT_REMOVE+=("$WORK")
mkdir -p "$WORK"
TMP=$(mktemp -d /tmp/sprat-local.XXXXXX)
EXIT_REMOVE+=("$TMP")
sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY
: >"$TMP/rclone.conf" # an empty config: no user settings leak into the runs
clock_start

# The write limit needs `sprat bench write` (being added); without it the
# row is "n/a" and t_limit is the read limit alone.
WRITE_LIMIT=1
WRITE_NA_NOTE=""
bw_rc=0
"$SPRAT" bench write --help >"$TMP/bw.out" 2>"$TMP/bw.err" || bw_rc=$?
if ((bw_rc != 0)); then
    WRITE_LIMIT=0
    if ((bw_rc == 2)) && grep -qi 'unrecognized subcommand' "$TMP/bw.err"; then
        WRITE_NA_NOTE="this sprat has no 'bench write' subcommand"
    else
        WRITE_NA_NOTE="'sprat bench write --help' failed (exit $bw_rc): $(head -n 1 "$TMP/bw.err")"
    fi
    log "WARNING: $WRITE_NA_NOTE: the write limit is n/a and t_limit is the read limit alone"
fi

# ---------------------------------------------------------------- data sets

declare -A set_dir set_desc

gen_set() { # ARGS... NEWDIR: sprat gen, its report kept in the logs
    "$SPRAT" gen "$@" >>"$LOGS/gen.out" 2>&1 || {
        cat "$LOGS/gen.out" >&2
        die "sprat gen $* failed"
    }
}

prepare_small() {
    local args=(--files "$FILES" --size "$SIZE" --seed "$SEED")
    set_dir[small]=src-gen-small-${FILES}x$SIZE-seed$SEED
    set_desc[small]="\`sprat gen ${args[*]}\`: $FILES files of $SIZE, incompressible"
    dataset_ensure "$ROOT/${set_dir[small]}" "sprat gen ${args[*]}" gen_set "${args[@]}"
}

prepare_mixed() {
    local args=(--total "$MIXED_TOTAL" --dist gridftp --max-size "$MIXED_MAX" --seed "$SEED")
    set_dir[mixed]=src-gen-mixed-$MIXED_TOTAL-gridftp-max$MIXED_MAX-seed$SEED
    set_desc[mixed]="\`sprat gen ${args[*]}\`: GridFTP file sizes capped at $MIXED_MAX, $MIXED_TOTAL in all"
    dataset_ensure "$ROOT/${set_dir[mixed]}" "sprat gen ${args[*]}" gen_set "${args[@]}"
}

prepare_tree() {
    local tree=$SRC_TREE
    [[ -n $tree ]] || tree=$(pick_tree "$TREE_MIN_FILES")
    [[ -d $tree ]] || die "SRC_TREE=$tree is not a directory"
    tree=$(cd "$tree" && pwd)
    # Same names and origin files as bench/loopback.sh: the snapshot is shared.
    set_dir[tree]="src-tree"
    set_desc[tree]="snapshot of $tree"
    if [[ $TREE_FILES != 0 ]]; then
        set_dir[tree]=src-tree-first$TREE_FILES
        set_desc[tree]="first $TREE_FILES files (sorted paths) of $tree"
    fi
    dataset_ensure "$ROOT/${set_dir[tree]}" "$tree" snapshot_tree "$tree" "$TREE_FILES"
}

for s in "${sets[@]}"; do "prepare_$s"; done

declare -A set_files set_bytes set_dirs set_links set_median
for s in "${sets[@]}"; do
    read -r nf nb nd nl nm < <(manifest_summary "$META/${set_dir[$s]}.json")
    set_files[$s]=$nf set_bytes[$s]=$nb set_dirs[$s]=$nd set_links[$s]=$nl set_median[$s]=$nm
done

# ---------------------------------------------------------------- one run

export -f read_all # for the timed read limit in a child bash

# run_one SET TOOL CACHE ROUND ORDER: one timed copy (or limit), then,
# untimed, verification, deletion of the destination and a CSV line.
run_one() {
    local set=$1 tool=$2 cache=$3 round=$4 order=$5
    local src=$ROOT/${set_dir[$set]} man=$META/${set_dir[$set]}.json
    local tag=$set-$tool-$cache-r$round
    local dst=$WORK/$tag out=$LOGS/$tag.out err=$LOGS/$tag.err
    local secs wall rc=0 check="-" dfiles="" dbytes="" detail="" bottleneck="" toolsecs="" load1
    read -r load1 _ </proc/loadavg

    if [[ $tool == write && $WRITE_LIMIT == 0 ]]; then
        printf '%s,%s,%s,%s,%s,%s,,,,n/a,,,%s,%s,,,%s,%s\n' "$STAMP" "$set" "$cache" "$round" "$order" \
            "$tool" "${set_files[$set]}" "${set_bytes[$set]}" "$load1" "$(oneline "$WRITE_NA_NOTE")" >>"$CSV"
        return
    fi

    cache_prepare "$cache" "$src" # untimed
    : >"$err"
    case $tool in
        read)
            dst=""
            # shellcheck disable=SC2016 # expanded by the inner bash
            timed_cmd "$RUN_TIMEOUT" bash -o pipefail -c 'read_all "$1" "$2"' _ "$src" "$READ_PAR" \
                >"$out" 2>"$err"
            ;;
        write)
            local bw=(--json)
            [[ $cache == cold ]] && bw+=(--drop-caches)
            timed_cmd "$RUN_TIMEOUT" "$SPRAT" bench write "${bw[@]}" "$src" "$dst" >"$out" 2>"$err"
            ;;
        sprat) timed_cmd "$RUN_TIMEOUT" "$SPRAT" cp --json "${sprat_args[@]}" "$src" "$dst" >"$out" 2>"$err" ;;
        cp) timed_cmd "$RUN_TIMEOUT" cp -a "$src" "$dst" >"$out" 2>"$err" ;;
        tar)
            mkdir "$dst"
            # shellcheck disable=SC2016 # expanded by the inner bash
            timed_cmd "$RUN_TIMEOUT" bash -o pipefail -c 'tar -C "$1" -cf - . | tar -C "$2" -xf -' \
                _ "$src" "$dst" >"$out" 2>"$err"
            ;;
        rsync) timed_cmd "$RUN_TIMEOUT" rsync -a "$src/" "$dst/" >"$out" 2>"$err" ;;
        rclone)
            timed_cmd "$RUN_TIMEOUT" env RCLONE_CONFIG="$TMP/rclone.conf" \
                rclone copy "${rclone_args[@]}" "$src" "$dst" >"$out" 2>"$err"
            ;;
        *) die "no such tool: $tool" ;;
    esac
    wall=$T_SECS secs=$T_SECS rc=$T_RC

    local vals=()
    if [[ $tool == sprat ]]; then
        mapfile -t vals < <(json_fields "$out" bottleneck seconds)
        bottleneck=${vals[0]:-} toolsecs=${vals[1]:-}
    elif [[ $tool == write ]]; then
        # The write limit's time is the write alone, as the tool reports it
        # (loading the tree and dropping caches are not timed).
        mapfile -t vals < <(json_fields "$out" seconds)
        toolsecs=${vals[0]:-}
        if [[ $toolsecs =~ ^[0-9.eE+-]+$ ]]; then
            secs=$(awk -v s="$toolsecs" 'BEGIN { printf "%.4f", s }')
        elif ((rc == 0)); then
            rc=97
            echo "no \"seconds\" in the JSON report" >>"$err"
        fi
    fi

    # Untimed: verify the copy, then delete it.
    if [[ -n $dst ]]; then
        local v
        v=$(verify_tree "$man" "$dst" "$VERIFY") || v=$'FAIL\t0\t0\tverifier crashed'
        IFS=$'\t' read -r check dfiles dbytes detail <<<"$v"
        rm -rf "$dst"
        sync
    fi
    if ((rc != 0)); then
        check=FAIL
        local why="exit $rc"
        if ((rc == 124)); then why+=" (timeout after ${RUN_TIMEOUT}s)"; fi
        detail="$why: $(tail -n 3 "$err")${detail:+; $detail}"
    fi
    printf '%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s\n' \
        "$STAMP" "$set" "$cache" "$round" "$order" "$tool" "$secs" "$wall" "$rc" "$check" \
        "$dfiles" "$dbytes" "${set_files[$set]}" "${set_bytes[$set]}" \
        "$(oneline "$bottleneck")" "$(oneline "$toolsecs")" "$load1" "$(oneline "$detail")" >>"$CSV"
    log "$(printf '%-5s %-6s %-4s r%s  %8.3f s  %s %s' "$set" "$tool" "$cache" "$round" "$secs" \
        "$check" "$(oneline "$detail")")"
}

# ---------------------------------------------------------------- main loop

echo "stamp,set,cache,round,order,tool,seconds,wall_seconds,exit,check,dst_files,dst_bytes,src_files,src_bytes,bottleneck,tool_seconds,load1,note" >"$CSV"

all=(read write "${tools[@]}")
n=${#all[@]}
t_start=$SECONDS
for s in "${sets[@]}"; do
    log "set $s: ${set_files[$s]} files, ${set_bytes[$s]} bytes, ${set_dirs[$s]} dirs, ${set_links[$s]} symlinks (${set_desc[$s]})"
    for cache in "${caches[@]}"; do
        for ((r = 1; r <= RUNS; r++)); do
            # Interleaved rounds: every tool once per round, the order rotated by one each round.
            for ((k = 0; k < n; k++)); do
                run_one "$s" "${all[$(((k + r - 1) % n))]}" "$cache" "$r" "$((k + 1))"
            done
        done
    done
done
t_total=$((SECONDS - t_start))

# ---------------------------------------------------------------- report

peer_versions() {
    local v
    v="$(tar --version | head -n 1)" # tar also makes the QUICK tree snapshot
    if has_tool cp; then v+="; $(cp --version | head -n 1)"; fi
    if has_tool rsync; then v+="; $(rsync --version | head -n 1 | sed 's/  */ /g')"; fi
    if has_tool rclone; then v+="; $(rclone version 2>/dev/null | head -n 1)"; fi
    printf '%s' "$v"
}
write_na=""
[[ $WRITE_LIMIT == 0 ]] && write_na=" — **n/a: $WRITE_NA_NOTE**"

{
    echo "# sprat local copy benchmark, $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC; cp options: ${SPRAT_ARGS:-(defaults)}"
    echo "- peers: $(peer_versions)"
    echo "- commands: \`sprat cp --json SRC DST\`; \`cp -a SRC DST\`; \`tar -C SRC -cf - . | tar -C DST -xf -\`;" \
        "\`rsync -a SRC/ DST/\`; \`rclone copy $RCLONE_ARGS SRC DST\`"
    echo "- limits: read = \`find SRC -type f -print0 | xargs -0 -r -P $READ_PAR -n 256 cat > /dev/null\`;" \
        "write = \`sprat bench write --json [--drop-caches] SRC DST\` (its own \"seconds\": the write alone)$write_na"
    echo "- runs: $RUNS per row (medians), caches: ${caches[*]} (warm: page cache dropped first = $WARM_DROP," \
        "then the source read in full), verify: $VERIFY, fresh destination per run on the same file system"
    echo "- 1-min load average before each run (other work on this machine adds noise): mean" \
        "$(awk -F, 'NR > 1 { s += $17; n++ } END { if (n) printf "%.2f", s / n }' "$CSV")," \
        "max $(awk -F, 'NR > 1 && $17 > m { m = $17 } END { printf "%.2f", m }' "$CSV")"
    echo "- wall time ${t_total} s; every run in $(basename "$CSV"), its output in $LOGS"
    echo
    echo "| set | files | bytes | directories | symlinks | median file | what |"
    echo "|---|--:|--:|--:|--:|--:|---|"
    for s in "${sets[@]}"; do
        printf '| %s | %s | %s | %s | %s | %s B | %s |\n' "$s" "${set_files[$s]}" "${set_bytes[$s]}" \
            "${set_dirs[$s]}" "${set_links[$s]}" "${set_median[$s]}" "${set_desc[$s]}"
    done
    echo
} >"$MD"

python3 - "$CSV" >>"$MD" <<'PY'
import csv
import statistics
import sys
from collections import Counter, OrderedDict

with open(sys.argv[1], newline="") as fh:
    rows = list(csv.DictReader(fh))
for r in rows:
    # `sprat bench write` writes plain files and sets no mtimes, by design.
    if r["tool"] == "write" and r["check"] == "meta" and "modes" not in r["note"]:
        r["check"], r["note"] = "ok", "mtimes not set (by design)"
order = ["read", "write", "sprat", "cp", "tar", "rsync", "rclone"]
label = {"read": "read limit", "write": "write limit", "sprat": "sprat", "cp": "cp -a",
         "tar": "tar \\| tar", "rsync": "rsync -a", "rclone": "rclone copy"}
peers = ["tar", "rsync", "rclone"]  # the "other peers" (cp -a has its own ratio)
groups = OrderedDict()
for r in rows:
    groups.setdefault((r["set"], r["cache"]), OrderedDict()).setdefault(r["tool"], []).append(r)

def passed(rs):
    return [float(r["seconds"]) for r in rs if r["check"] not in ("FAIL", "n/a") and r["seconds"]]

def med(rs):
    v = passed(rs)
    return statistics.median(v) if v else None

def check_cell(tool, st, n):
    """The check column from the counts of each run's status."""
    if st["n/a"]:
        return "n/a"
    if st["FAIL"]:
        return "**FAIL** %d/%d" % (st["FAIL"], n)
    if tool == "read":
        return "—"  # nothing written, nothing to verify
    return "ok (meta differs %d/%d)" % (st["meta"], n) if st["meta"] else "ok %d/%d" % (n, n)

def f(x, nd=2):
    return "—" if x is None else "%.*f" % (nd, x)

def div(a, b):
    return a / b if (a is not None and b) else None

summary, meta_tools = [], OrderedDict()
for (set_name, cache), g in groups.items():
    r0 = next(iter(g.values()))[0]
    files, nbytes = int(r0["src_files"]), int(r0["src_bytes"])
    m = {t: med(rs) for t, rs in g.items()}
    lim_r, lim_w = m.get("read"), m.get("write")
    t_limit = max(x for x in (lim_r, lim_w) if x is not None) if (lim_r or lim_w) else None
    limit_from = "write" if (lim_w is not None and (lim_r is None or lim_w >= lim_r)) else "read"
    spr = m.get("sprat")
    print("## %s, %s cache: %d files, %.1f MB\n" % (set_name, cache, files, nbytes / 1e6))
    print("| tool | cache | median s | min–max s | files/s | MB/s | t / t_sprat | t_limit / t | check | notes |")
    print("|---|---|--:|--:|--:|--:|--:|--:|---|---|")
    for t in sorted(g, key=lambda t: order.index(t) if t in order else 99):
        rs, mt = g[t], m[t]
        secs = passed(rs)
        is_limit = t in ("read", "write")
        st = Counter(r["check"] for r in rs)
        check = check_cell(t, st, len(rs))
        notes = []
        if st["meta"] and not is_limit:
            meta_tools.setdefault(t, set()).update(
                k for r in rs if r["check"] == "meta" for k in ("modes", "mtimes") if k in r["note"])
        if is_limit and mt is not None and t == limit_from:
            notes.append("= t_limit")
        bn = Counter(r["bottleneck"] for r in rs if r["bottleneck"])
        if bn:
            notes.append("bottleneck: " + ", ".join("%s×%d" % kv for kv in bn.most_common()))
        if t == "write":
            tw = [float(r["wall_seconds"]) for r in rs if r["check"] not in ("FAIL", "n/a") and r["wall_seconds"]]
            if tw:
                notes.append("process wall %.2f s (load + drop untimed)" % statistics.median(tw))
        for r in rs:
            if r["note"] and r["note"] not in notes:
                notes.append(r["note"])
        ratio = None if is_limit else div(mt, spr)
        print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            label.get(t, t), cache, f(mt, 3), ("%.3f–%.3f" % (min(secs), max(secs))) if secs else "—",
            f(div(files, mt), 0), f(div(nbytes / 1e6, mt), 1), f(ratio),
            "—" if is_limit else f(div(t_limit, mt)), check, "; ".join(notes)[:400]))
    cp = div(m.get("cp"), spr)
    others = [(m[p], p) for p in peers if m.get(p) is not None]
    best = min(others) if others else None
    lim = div(t_limit, spr)
    lim_txt = ("%s limit %.3f s" % (limit_from, t_limit)) if t_limit is not None else "—"
    if lim_w is None and lim_r is not None:
        lim_txt += ", write limit n/a"
    print()
    print("Goal ratios (%s, %s): **cp -a / sprat = %s**; **fastest other peer%s / sprat = %s**; "
          "**t_limit / sprat = %s** (t_limit = %s)\n" % (
              set_name, cache, f(cp), " (%s)" % label[best[1]] if best else "",
              f(div(best[0], spr) if best else None), f(lim), lim_txt))
    summary.append((set_name, cache, cp, (label[best[1]], div(best[0], spr)) if best else None, lim, lim_txt))

print("## Goal ratios\n")
print("| set | cache | cp -a / sprat | fastest other peer / sprat | t_limit / sprat | t_limit |")
print("|---|---|--:|--:|--:|---|")
for set_name, cache, cp, best, lim, lim_txt in summary:
    print("| %s | %s | %s | %s | %s | %s |" % (
        set_name, cache, f(cp), "%s (%s)" % (f(best[1]), best[0]) if best else "—", f(lim), lim_txt))
print()
if meta_tools:
    print("Complete copies whose metadata differ (\"meta differs\"): " + "; ".join(
        "%s (%s)" % (label[t], " and ".join(sorted(k)) or "see notes") for t, k in meta_tools.items()) + ".\n")
print("Columns: *median s* = median wall time of the runs that passed the check (the write limit: the "
      "write alone, as `sprat bench write` reports it); *files/s*, *MB/s* (10^6 bytes) = source files and "
      "bytes / median; *t / t_sprat* = this median / sprat's median, same set and cache (> 1: sprat is "
      "faster); *t_limit / t* = t_limit / this median, where t_limit = max(read-limit median, write-limit "
      "median) of the same set and cache, i.e. the time at min(read rate, write rate) (1.00 = as fast as "
      "the slower of reading and writing alone); *check* = verification against the source manifest "
      "(FAIL: wrong, incomplete or non-zero exit, left out of the medians; meta differs: complete and "
      "equal, but modes or mtimes lost). Goal ratios: cp -a / sprat and fastest other peer (tar, rsync, "
      "rclone) / sprat (> 1: sprat is faster); t_limit / sprat (1.00: sprat at the limit).")
PY

if [[ -n $PLOT_PY ]]; then
    if MPLBACKEND=Agg "$PLOT_PY" - "$CSV" "$PNG" "$STAMP" 2>"$LOGS/plot.err" <<'PY'; then
import csv, statistics, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

rows = list(csv.DictReader(open(sys.argv[1])))
sets = list(dict.fromkeys(r["set"] for r in rows))
caches = [c for c in ("cold", "warm") if any(r["cache"] == c for r in rows)]
order = ["read", "write", "sprat", "cp", "tar", "rsync", "rclone"]
label = {"read": "read\nlimit", "write": "write\nlimit", "sprat": "sprat", "cp": "cp -a",
         "tar": "tar|tar", "rsync": "rsync -a", "rclone": "rclone"}
color = {"cold": "#3b6fb6", "warm": "#e0892b"}

def med(set_name, tool, cache):
    v = [float(r["seconds"]) for r in rows if r["set"] == set_name and r["tool"] == tool
         and r["cache"] == cache and r["check"] not in ("FAIL", "n/a") and r["seconds"]]
    return statistics.median(v) if v else None

fig, axes = plt.subplots(1, len(sets), figsize=(5.2 * len(sets), 4.6), squeeze=False)
for ax, set_name in zip(axes[0], sets):
    r0 = next(r for r in rows if r["set"] == set_name)
    files, nbytes = int(r0["src_files"]), int(r0["src_bytes"])
    by_mb = nbytes / max(files, 1) >= 64 * 1024  # big files: MB/s says more than files/s
    unit, amount = ("MB/s", nbytes / 1e6) if by_mb else ("files/s", files)
    tools = [t for t in order if any(r["set"] == set_name and r["tool"] == t for r in rows)]
    w = 0.8 / max(len(caches), 1)
    for i, cache in enumerate(caches):
        xs, hs = [], []
        for j, t in enumerate(tools):
            m = med(set_name, t, cache)
            x = j + (i - (len(caches) - 1) / 2) * w
            if m is None:
                ax.text(x, 0, "n/a" if t == "write" else "FAIL", ha="center", va="bottom",
                        fontsize=7, rotation=90)
                continue
            xs.append(x)
            hs.append(amount / m)
        bars = ax.bar(xs, hs, w, color=color[cache])
        for b, t in zip(bars, [t for t in tools if med(set_name, t, cache) is not None]):
            if t in ("read", "write"):
                b.set_hatch("//")
                b.set_alpha(0.55)
        for x, h in zip(xs, hs):
            ax.text(x, h, "%.0f" % h if h >= 10 else "%.1f" % h, ha="center", va="bottom", fontsize=7)
        lims = [m for m in (med(set_name, "read", cache), med(set_name, "write", cache)) if m]
        if lims:  # rate at t_limit = min(read rate, write rate)
            ax.axhline(amount / max(lims), color=color[cache], linestyle="--", linewidth=1)
    ax.set_xticks(range(len(tools)))
    ax.set_xticklabels([label[t] for t in tools], fontsize=8)
    ax.set_ylabel(unit)
    ax.set_title("%s: %d files, %.0f MB" % (set_name, files, nbytes / 1e6), fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    handles = [Patch(color=color[c], label=c) for c in caches]
    handles.append(Patch(facecolor="white", edgecolor="black", hatch="//", label="limits"))
    handles += [Line2D([], [], color=color[c], linestyle="--", label="%s: min(read, write)" % c)
                for c in caches]
    ax.legend(handles=handles, fontsize=7)
fig.suptitle("sprat local copies %s\nmedians of passing runs; dashed: the slower of the two limits"
             % sys.argv[3], fontsize=9)
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
PY
        log "wrote $PNG"
    else
        log "warning: the plot failed (see $LOGS/plot.err)"
        PNG=""
    fi
else
    PNG=""
fi
[[ -n $PNG ]] && printf '\nPlot: %s\n' "$(basename "$PNG")" >>"$MD"

log "wrote $CSV"
log "wrote $MD"
cat "$MD"
