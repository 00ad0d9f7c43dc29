#!/usr/bin/env bash
# Per-file overhead of every subsystem, drawn: runs
#   sprat bench overhead --dir DIR --drop-caches --json
# RUNS times (for one total size and several numbers of files N it times read,
# network (memory to memory), write and end to end (a push to a server on
# loopback) and fits T = N * t0 + B / R to each), keeps the JSON reports and
# draws the measured points with their fitted lines.
# Writes bench/results/overhead-<stamp>.json (a JSON array: one report per
# run), overhead-<stamp>.md (fit table, points, model predictions) and
# overhead-<stamp>.png (seconds against N, one colour per subsystem).
#
# Usage: bench/overhead.sh
#   RUNS=3 bench/overhead.sh
#
# Environment (defaults in brackets):
#   SPRAT       sprat binary [target/release/sprat; rebuilt with cargo unless
#               BUILD=0; a failed build falls back to an existing binary]
#   RUNS        invocations of `sprat bench overhead` [1]
#   DATA_DIR    where the scratch directory goes [/work/bench-data]
#   DIR         scratch directory on the storage to measure: the data sets,
#               their copies and the server's root are made (and removed) in a
#               fresh overhead-<stamp>/ below it [$DATA_DIR]
#   TOTAL       total size of every data set [256MiB]
#   POINTS      numbers of files, comma-separated [1000,4000,16000,64000]
#   DROP        1: --drop-caches before each storage run (cold; needs root),
#               0: warm [1]
#   RESULTS_DIR where the .json/.md/.png go [bench/results]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

RUNS=${RUNS:-1}
DATA_DIR=${DATA_DIR:-/work/bench-data}
DIR=${DIR:-$DATA_DIR}
TOTAL=${TOTAL:-256MiB}
POINTS=${POINTS:-1000,4000,16000,64000}
DROP=${DROP:-1}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SPRAT=${SPRAT:-$repo/target/release/sprat}

[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $DROP == 0 || $DROP == 1 ]] || die "DROP must be 0 or 1"
[[ $POINTS =~ ^[0-9]+(,[0-9]+)+$ ]] || die "POINTS must be at least two numbers, comma-separated"
command -v python3 >/dev/null || die "missing python3 (run scripts/install-deps.sh)"
drop_arg=()
if [[ $DROP == 1 ]]; then
    can_drop_caches || die "DROP=1 (cold) needs root to write /proc/sys/vm/drop_caches; DROP=0 runs warm"
    drop_arg=(--drop-caches)
fi
plot_python

sprat_build "$SPRAT"
STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DIR" "$RESULTS_DIR"
DIR=$(cd "$DIR" && pwd)
fs_is_ram "$DIR" && log "warning: DIR=$DIR is on tmpfs/ramfs: the storage figures are memory's"
WORK=$DIR/overhead-$STAMP
JSON=$RESULTS_DIR/overhead-$STAMP.json
MD=$RESULTS_DIR/overhead-$STAMP.md
PNG=$RESULTS_DIR/overhead-$STAMP.png

exit_cleanup_install
TMP=$(mktemp -d /tmp/sprat-overhead.XXXXXX)
EXIT_REMOVE+=("$TMP" "$WORK") # scratch only: the results stay
sprat_snapshot "$SPRAT" "$TMP"
SPRAT=$SPRAT_COPY

t_start=$SECONDS
for ((r = 1; r <= RUNS; r++)); do
    log "run $r/$RUNS: sprat bench overhead --dir $WORK --total $TOTAL --points $POINTS ${drop_arg[*]:+${drop_arg[*]} }--json"
    rm -rf -- "$WORK"
    # Runs in the foreground (not timed here: the report has every run's seconds).
    "$SPRAT" bench overhead --dir "$WORK" --total "$TOTAL" --points "$POINTS" "${drop_arg[@]}" \
        --json >"$TMP/run-$r.json" 2>"$TMP/run-$r.err" ||
        die "sprat bench overhead failed (run $r): $(tail -n 5 "$TMP/run-$r.err")"
    rm -rf -- "$WORK"
done
t_total=$((SECONDS - t_start))

# One JSON array of the RUNS reports (each the object `sprat bench overhead --json` prints).
python3 - "$JSON" "$TMP"/run-*.json <<'PY'
import json, sys
reports = []
for path in sys.argv[2:]:
    lines = [l for l in open(path).read().splitlines() if l.strip()]
    reports.append(json.loads(lines[-1]))
json.dump(reports, open(sys.argv[1], "w"), indent=1)
PY

{
    echo "# sprat per-file overhead (sprat bench overhead), $STAMP"
    echo
    machine_facts "$DIR"
    echo "- sprat: $SPRAT_DESC"
    echo "- command: \`sprat bench overhead --dir DIR --total $TOTAL --points $POINTS ${drop_arg[*]:+${drop_arg[*]} }--json\`," \
        "$RUNS run(s), ${t_total}s in all; DIR on the disk of $DIR"
    echo "- raw reports: $(basename "$JSON"); plot: $(basename "$PNG")"
    echo
} >"$MD"

python3 - "$JSON" >>"$MD" <<'PY'
import json, statistics, sys
reports = json.load(open(sys.argv[1]))
subs = [("read", "read"), ("network", "network (memory to memory)"), ("write", "write"),
        ("end_to_end", "end to end (push over loopback)")]

def med(xs):
    return statistics.median(xs) if xs else None

def rng(xs, fmt):
    return "" if len(xs) < 2 else " (%s–%s)" % (fmt % min(xs), fmt % max(xs))

print("## Fit of T = N * t0 + B / R (B = %d bytes in every set)\n" % reports[0]["total_bytes"])
print("| subsystem | t0 (µs per file) | R (MB/s) | r2 | fitted runs |")
print("|---|--:|--:|--:|--:|")
for key, name in subs:
    fits = [r[key] for r in reports if r.get(key)]
    if not fits:
        print("| %s | — | — | — | 0/%d (no fit) |" % (name, len(reports)))
        continue
    t0 = [f["t0_s"] * 1e6 for f in fits]
    rate = [f["rate_bytes_per_s"] / 1e6 for f in fits]
    r2 = [f["r2"] for f in fits]
    print("| %s | %.1f%s | %.1f%s | %.3f%s | %d/%d |" % (
        name, med(t0), rng(t0, "%.1f"), med(rate), rng(rate, "%.1f"), med(r2), rng(r2, "%.3f"),
        len(fits), len(reports)))
print()
between = [r.get("end_to_end_between_max_and_sum") for r in reports]
print("End-to-end t0 between the largest subsystem's and their sum: %s.\n" %
      ", ".join("—" if b is None else ("yes" if b else "no") for b in between))
if len(reports) > 1:
    print("Medians over %d runs; the range in brackets.\n" % len(reports))

print("## Measured points (seconds)\n")
points = sorted({run["files"] for r in reports for run in r["runs"]})
print("| N files | file size (B) | " + " | ".join(n for _, n in subs) + " |")
print("|--:|--:|" + "--:|" * len(subs))
for n in points:
    cells = []
    size = None
    for key, _ in subs:
        secs = [run["seconds"] for r in reports for run in r["runs"]
                if run["subsystem"] == key and run["files"] == n]
        sizes = [run["bytes"] // max(1, run["files"]) for r in reports for run in r["runs"]
                 if run["subsystem"] == key and run["files"] == n]
        size = size or (sizes[0] if sizes else None)
        cells.append("%.3f" % med(secs) if secs else "—")
    print("| %d | %s | %s |" % (n, size if size is not None else "—", " | ".join(cells)))
print()

preds = [p for r in reports for p in r.get("predictions", [])]
if preds:
    print("## Pipeline model from the fitted subsystems against the measured end to end\n")
    print("| N files | predicted s | measured s | measured / predicted |")
    print("|--:|--:|--:|--:|")
    for files, pred, meas in preds:
        print("| %d | %.3f | %.3f | %.2f |" % (files, pred, meas, meas / pred if pred else float("nan")))
    print()
PY

if [[ -n $PLOT_PY ]]; then
    if MPLBACKEND=Agg "$PLOT_PY" - "$JSON" "$PNG" "$STAMP" 2>"$TMP/plot.err" <<'PY'; then
import json, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

reports = json.load(open(sys.argv[1]))
subs = [("read", "read"), ("network", "network"), ("write", "write"), ("end_to_end", "end to end")]
colors = {"read": "tab:blue", "network": "tab:green", "write": "tab:orange", "end_to_end": "tab:red"}
fig, ax = plt.subplots(figsize=(8, 5.5))
for key, name in subs:
    runs = [run for r in reports for run in r["runs"] if run["subsystem"] == key]
    if not runs:
        continue
    ax.plot([run["files"] for run in runs], [run["seconds"] for run in runs], "o",
            color=colors[key], alpha=0.8)
    nmax = max(run["files"] for run in runs)
    labelled = False
    for i, r in enumerate(reports):
        fit = r.get(key)
        if not fit:
            continue
        own = [run for run in r["runs"] if run["subsystem"] == key]
        b = sum(run["bytes"] for run in own) / max(1, len(own))
        grid = [0, nmax * 1.05]  # a straight line: slope t0, intercept B/R at N = 0
        label = None
        if not labelled:
            label = "%s: t0 = %.1f µs, R = %.0f MB/s, r² = %.3f%s" % (
                name, fit["t0_s"] * 1e6, fit["rate_bytes_per_s"] / 1e6, fit["r2"],
                "" if len(reports) == 1 else " (run %d of %d)" % (i + 1, len(reports)))
        ax.plot(grid, [n * fit["t0_s"] + b / fit["rate_bytes_per_s"] for n in grid], "-",
                color=colors[key], alpha=0.4 if labelled else 1.0, label=label)
        labelled = True
    if not labelled:
        ax.plot([], [], "o", color=colors[key], label="%s: no fit" % name)
ax.set_xlabel("number of files N (total size B = %.0f MiB in every set)" % (reports[0]["total_bytes"] / 2**20))
ax.set_xlim(left=0)
ax.set_ylabel("seconds")
ax.set_title("sprat bench overhead %s: points measured, lines T = N·t0 + B/R fitted" % sys.argv[3])
ax.set_ylim(bottom=0)
ax.grid(True, which="both", alpha=0.3)
ax.legend(fontsize=8, loc="upper left")
fig.tight_layout()
fig.savefig(sys.argv[2], dpi=110)
PY
        echo "![seconds against number of files, with the fitted lines]($(basename "$PNG"))" >>"$MD"
    else
        log "warning: plot failed: $(tail -n 3 "$TMP/plot.err")"
    fi
fi

log "wrote $JSON"
log "wrote $MD"
[[ -s $PNG ]] && log "wrote $PNG"
cat "$MD"
