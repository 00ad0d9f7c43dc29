#!/usr/bin/env bash
# Plan a copy and run it as a Slurm array: one task per shard, then a finishing job that
# runs once every shard succeeded.
#
# Usage: scripts/slurm/submit.sh [--wait] SHARDS PLANDIR SRC DST [sbatch options...]
#   SHARDS   number of shards (array tasks)
#   PLANDIR  a new directory for the plan, on storage every node reads
#   --wait   return when the finishing job ends, with its exit code (1 if it never ran,
#            because a shard failed: the shards that did not complete are named)
# Environment: SPRAT (binary, default `sprat`), SPRAT_ARGS (more `sprat cp` options).
# Prints the two job ids. Example:
#   SPRAT_ARGS="--token-file $HOME/.sprat-token" scripts/slurm/submit.sh 8 /shared/plan \
#       /data/run sprat://dtn:7400/run --partition=dtn --time=2:00:00
set -euo pipefail

wait=()
if [[ ${1:-} == --wait ]]; then wait=(--wait); shift; fi
if [[ $# -lt 4 ]]; then sed -n '2,14p' "$0" >&2; exit 2; fi
shards=$1 plan=$2 src=$3 dst=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
sprat=${SPRAT:-sprat}

"$sprat" plan "$src" --shards "$shards" --out "$plan" >&2
export SPRAT="$sprat" SPRAT_PLAN="$plan" SPRAT_SRC="$src" SPRAT_DST="$dst" SPRAT_ARGS="${SPRAT_ARGS:-}"
array=$(sbatch --parsable --array="0-$((shards - 1))" --export=ALL \
    --output="$plan/shard-%a.log" "$@" "$here/sprat-array.sbatch")
array=${array%%;*}
echo "array job $array: $shards shards" >&2
finish=$(sbatch --parsable "${wait[@]}" --dependency="afterok:$array" --kill-on-invalid-dep=yes \
    --export=ALL,SPRAT_STEP=finish --output="$plan/finish.log" "$@" "$here/sprat-array.sbatch") || {
    status=$?
    echo "finishing job failed (exit $status): $plan/finish.log" >&2
    cat "$plan/finish.log" >&2 2>/dev/null || true
    exit "$status"
}
finish=${finish%%;*}
echo "finishing job $finish (after $array)" >&2
# `sbatch --wait` exits 0 for a finishing job that never ran (cancelled when a shard failed,
# by --kill-on-invalid-dep): ask Slurm how it ended, and name the shards that did not complete.
if ((${#wait[@]})); then
    show() { scontrol show job -o "$1" 2>/dev/null || true; }
    state=$(show "$finish" | grep -o 'JobState=[A-Z_]*' | head -n 1 | cut -d= -f2 || true)
    code=$(show "$finish" | grep -o ' ExitCode=[0-9:]*' | head -n 1 | cut -d= -f2 || true)
    if [[ -n $state && ($state != COMPLETED || $code != 0:0) ]] || [[ -z $state && ! -s $plan/finish.log ]]; then
        echo "finishing job $finish did not complete (state ${state:-unknown}, exit ${code:-unknown}): the copy is not whole" >&2
        failed=$(show "$array" | grep -v 'JobState=COMPLETED' | grep -o 'ArrayTaskId=[0-9]*' |
            cut -d= -f2 | tr '\n' ' ' || true)
        if [[ -n $failed ]]; then
            echo "shards that did not complete: ${failed% } (logs: $plan/shard-K.log); run each again" \
                "(sbatch --array=K --export=ALL,SPRAT_PLAN=$plan,SPRAT_SRC=$src,SPRAT_DST=$dst" \
                "$here/sprat-array.sbatch, or sprat cp --plan $plan --shard K SRC DST), then the" \
                "finishing step: sprat cp --plan $plan --finish SRC DST" >&2
        fi
        echo "$array $finish"
        exit 1
    fi
fi
echo "$array $finish"
