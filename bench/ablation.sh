#!/usr/bin/env bash
# Which storage techniques pay: local copies by `sprat cp` with one technique
# changed at a time (io_uring vs pread threads, FIEMAP physical order, O_TMPFILE
# vs temporary name + rename, batch size, durability), and optionally an older
# sprat binary, on the data sets of bench/local.sh, cold cache, fresh
# destination per run, interleaved rounds with rotating order, medians.
#
# Usage: bench/ablation.sh                 (after bench/local.sh made the data sets)
#   SETS="small tree" RUNS=5 OLD_SPRAT=/path/to/older/sprat bench/ablation.sh
#
# Environment (defaults in brackets):
#   SPRAT      binary under test [target/release/sprat, rebuilt unless BUILD=0]
#   OLD_SPRAT  an older binary to compare as the variant "old" (its defaults) []
#   SETS       small tree mixed: the bench/local.sh data sets to use [small tree]
#   VARIANTS   names from the table below [all]
#   RUNS       rounds [5]
#   DATA_DIR   where bench/local.sh keeps its data sets [/work/bench-data]
#   RESULTS_DIR [bench/results]
#
# Variants (each differs from the default in one thing):
#   default    the defaults: io_uring batch reads, inode order, O_TMPFILE + link, 4 MiB batches
#   threads    --io threads         (pread, one batch per reader thread)
#   physical   --read-order physical (FIEMAP order within a batch)
#   rename     --publish rename  (hidden temporary name + rename per file)
#   batch1m    --batch-size 1MiB --batch-files 256
#   batch16m   --batch-size 16MiB --batch-files 4096
#   durable    --durable             (a group-committed syncfs per batch)
#   old        OLD_SPRAT with its defaults
# and two read limits, for reference (no destination):
#   findcat    find SRC -type f -print0 | xargs -0 -r -P 16 -n 256 cat > /dev/null
#   benchread  sprat bench read --threads 16 SRC (scanner order, inode order within directories)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

RUNS=${RUNS:-5}
SETS=${SETS:-small tree}
DATA_DIR=${DATA_DIR:-/work/bench-data}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}
OLD_SPRAT=${OLD_SPRAT:-}
default_variants="default threads physical rename batch1m batch16m durable findcat benchread"
[[ -n $OLD_SPRAT ]] && default_variants+=" old"
VARIANTS=${VARIANTS:-$default_variants}
read -r -a sets <<<"$SETS"
read -r -a variants <<<"$VARIANTS"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"

# variant_cmd NAME SRC DST: the command line of a variant (printed, one word per line).
variant_cmd() {
    local bin=$SPRAT_COPY
    case $1 in
        default) printf '%s\n' "$bin" cp --json "$2" "$3" ;;
        threads) printf '%s\n' "$bin" cp --json --io threads "$2" "$3" ;;
        physical) printf '%s\n' "$bin" cp --json --read-order physical "$2" "$3" ;;
        rename) printf '%s\n' "$bin" cp --json --publish rename "$2" "$3" ;;
        batch1m) printf '%s\n' "$bin" cp --json --batch-size 1MiB --batch-files 256 "$2" "$3" ;;
        batch16m) printf '%s\n' "$bin" cp --json --batch-size 16MiB --batch-files 4096 "$2" "$3" ;;
        durable) printf '%s\n' "$bin" cp --json --durable "$2" "$3" ;;
        old)
            [[ -n $OLD_SPRAT ]] || die "variant old needs OLD_SPRAT"
            printf '%s\n' "$OLD_COPY" cp --json "$2" "$3"
            ;;
        findcat)
            # shellcheck disable=SC2016 # $1 is expanded by the inner sh
            printf '%s\n' sh -c 'find "$1" -type f -print0 | xargs -0 -r -P 16 -n 256 cat >/dev/null' sh "$2" ;;
        benchread) printf '%s\n' "$bin" bench read --json --threads 16 "$2" ;;
        *) die "unknown variant: $1" ;;
    esac
}

# set_dir NAME: the source directory bench/local.sh made for a set.
set_dir() {
    local pattern
    case $1 in
        small) pattern='src-gen-small-*' ;;
        mixed) pattern='src-gen-mixed-*' ;;
        tree) pattern='src-tree' ;;
        *) die "unknown set: $1" ;;
    esac
    # The largest matching set (a QUICK run leaves smaller ones).
    find "$DATA_DIR/root" -maxdepth 1 -name "$pattern" -type d -print 2>/dev/null |
        while read -r d; do printf '%s %s\n' "$(find "$d" -type f | wc -l)" "$d"; done |
        sort -n | tail -n 1 | cut -d' ' -f2-
}

need_cache_control cold
sprat_build "$SPRAT"
STAMP=$(date +%Y%m%d-%H%M%S)
WORK=$DATA_DIR/ablation/$STAMP
LOGS=$DATA_DIR/logs/ablation-$STAMP
mkdir -p "$WORK" "$LOGS" "$RESULTS_DIR"
exit_cleanup_install
EXIT_REMOVE+=("$WORK")
clock_start
sprat_snapshot "$SPRAT" "$WORK"
OLD_COPY=""
if [[ -n $OLD_SPRAT ]]; then
    cp "$OLD_SPRAT" "$WORK/sprat-old"
    OLD_COPY=$WORK/sprat-old
fi
CSV=$RESULTS_DIR/ablation-$STAMP.csv
MD=$RESULTS_DIR/ablation-$STAMP.md
echo "set,round,variant,seconds,exit,files,bottleneck,load1" >"$CSV"

for set in "${sets[@]}"; do
    src=$(set_dir "$set")
    [[ -n $src && -d $src ]] || die "no data set '$set' under $DATA_DIR/root: run bench/local.sh first"
    nsrc=$(find "$src" -type f | wc -l)
    log "set $set: $src ($nsrc files)"
    n=${#variants[@]}
    for ((r = 1; r <= RUNS; r++)); do
        for ((k = 0; k < n; k++)); do
            v=${variants[$(((k + r) % n))]}
            dst=$WORK/$set-$v-r$r
            mapfile -t cmd < <(variant_cmd "$v" "$src" "$dst")
            drop_caches 3
            load1=$(cut -d' ' -f1 /proc/loadavg)
            timed_cmd 1800 "${cmd[@]}" >"$LOGS/$set-$v-r$r.out" 2>"$LOGS/$set-$v-r$r.err"
            if [[ $v == findcat || $v == benchread ]]; then
                files=$nsrc # nothing is written
            else
                files=$(find "$dst" -type f 2>/dev/null | wc -l)
            fi
            mapfile -t f < <(json_fields "$LOGS/$set-$v-r$r.out" bottleneck)
            if [[ $T_RC != 0 || $files != "$nsrc" ]]; then
                log "FAIL $set $v r$r: exit $T_RC, $files of $nsrc files"
            fi
            echo "$set,$r,$v,$T_SECS,$T_RC,$files,${f[0]:-},$load1" >>"$CSV"
            rm -rf -- "$dst"
            sync
        done
        log "set $set: round $r of $RUNS done"
    done
done

python3 - "$CSV" "$MD" "$SPRAT_DESC" "$OLD_SPRAT" <<'PY'
import csv, os, statistics, sys
path, md, desc, old = sys.argv[1:5]
rows = list(csv.DictReader(open(path)))
out = ["# sprat storage ablation, %s" % os.path.basename(path)[len("ablation-"):-len(".csv")], "",
       "- machine: %d CPUs, kernel %s" % (os.cpu_count(), os.uname().release),
       "- sprat: %s" % desc]
if old:
    out.append("- old: %s (its own defaults)" % old)
out += ["- cold cache (sync; drop_caches 3) before every run, fresh destination, rounds interleaved;"
        " medians of passing runs (exit 0 and every file there)",
        "- *t / t_default* > 1: the variant is slower than the defaults", ""]
for s in dict.fromkeys(r["set"] for r in rows):
    sub = [r for r in rows if r["set"] == s]
    runs = {}
    for r in sub:
        runs.setdefault(r["variant"], []).append(r)
    want = max(int(r["files"]) for r in sub)
    ok = {v: [float(r["seconds"]) for r in rs if r["exit"] == "0" and int(r["files"]) == want]
          for v, rs in runs.items()}
    med = {v: statistics.median(t) if t else None for v, t in ok.items()}
    out += ["## %s (%d files)" % (s, want), "",
            "| variant | median s | min-max s | t / t_default | runs ok | bottleneck (most runs) |",
            "|---|--:|--:|--:|--:|---|"]
    for v, rs in runs.items():
        t = ok[v]
        b = [r["bottleneck"] for r in rs if r["bottleneck"]]
        ratio = "%.2f" % (med[v] / med["default"]) if med.get("default") and med[v] else "-"
        out.append("| %s | %s | %s | %s | %d/%d | %s |" % (
            v, "%.3f" % med[v] if t else "FAIL", "%.3f-%.3f" % (min(t), max(t)) if t else "-",
            ratio, len(t), len(rs), max(set(b), key=b.count) if b else ""))
    out.append("")
open(md, "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
log "results: $MD and $CSV"
