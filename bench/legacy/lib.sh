# shellcheck shell=bash
# Helpers for sprat's benchmark scripts (bench/*.sh). Source it; don't run it.
#
# Provides: logging, a monotonic clock, timed commands, free ports, listener
# readiness, cache dropping and cache states, tracking and killing of
# background processes by PID, the sprat binary under test, data set
# generation, reuse and tree snapshots, tree manifests/verification (Python 3,
# stdlib only), JSON fields of a tool's report, machine facts.
# Functions that need the repository root read it from $repo (set it first).
# shellcheck disable=SC2154 # $repo comes from the script that sources this file

# ---------------------------------------------------------------- logging

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() {
    log "error: $*"
    exit 1
}

# One line, no CSV/markdown separators, at most 300 characters.
oneline() {
    local s=$1
    s=${s//$'\n'/ | }
    s=${s//$'\r'/ }
    s=${s//,/;}
    s=${s//\"/\'}
    s=${s//|/\/}
    printf '%s' "${s:0:300}"
}

# in_list WORD ITEM...: true if WORD is one of the ITEMs.
in_list() {
    local want=$1 item
    shift
    for item in "$@"; do
        if [[ $item == "$want" ]]; then return 0; fi
    done
    return 1
}

# ---------------------------------------------------------------- clock
# A monotonic clock served by one long-lived python3 co-process, so taking a
# timestamp costs a pipe round trip (~0.1 ms), not a process start. Falls back
# to `date +%s.%N` (wall clock) if the co-process cannot be started.

MONO_OK=0
clock_start() {
    if command -v python3 >/dev/null 2>&1; then
        coproc MONO {
            exec python3 -u -c '
import sys, time
for _ in sys.stdin:
    sys.stdout.write("%.6f\n" % time.monotonic())
    sys.stdout.flush()
'
        }
        local probe=""
        if printf '\n' >&"${MONO[1]}" && read -r -t 5 probe <&"${MONO[0]}" && [[ -n $probe ]]; then
            MONO_OK=1
            bg_register "$MONO_PID" pid
            return 0
        fi
    fi
    log "warning: no python3 monotonic clock; timing with date +%s.%N (wall clock)"
    MONO_OK=0
}

# mono_now VAR: store the current monotonic time in seconds in VAR.
# Must run in the main shell (not in $(...)): co-process fds are not inherited.
mono_now() {
    if [[ $MONO_OK == 1 ]]; then
        printf '\n' >&"${MONO[1]}"
        read -r "$1" <&"${MONO[0]}"
    else
        printf -v "$1" '%s' "$(date +%s.%N)"
    fi
}

# elapsed T0 T1: print T1-T0 with 4 decimals.
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.4f", b - a }'; }

# ---------------------------------------------------------------- processes
# Every background process we start is registered with its PID. Those started
# through `setsid` or `timeout` lead their own process group; they are killed
# as a group (negative PID), everything else by PID alone.

BG_PIDS=()
BG_KIND=()
bg_register() {
    BG_PIDS+=("$1")
    BG_KIND+=("${2:-group}")
}
bg_unregister() {
    local i
    for i in "${!BG_PIDS[@]}"; do
        if [[ ${BG_PIDS[$i]} == "$1" ]]; then
            unset "BG_PIDS[$i]" "BG_KIND[$i]"
        fi
    done
}
# bg_kill PID [KIND]: TERM, wait up to 3 s, then KILL; reap.
bg_kill() {
    local pid=$1 kind=${2:-group} target i
    target=$pid
    [[ $kind == group ]] && target=-$pid
    kill -TERM -- "$target" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 30; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    if kill -0 "$pid" 2>/dev/null; then
        kill -KILL -- "$target" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
}
bg_kill_all() {
    local i idx=("${!BG_PIDS[@]}")
    for ((i = ${#idx[@]} - 1; i >= 0; i--)); do
        bg_kill "${BG_PIDS[${idx[$i]}]}" "${BG_KIND[${idx[$i]}]}"
    done
    BG_PIDS=()
    BG_KIND=()
}

# ---------------------------------------------------------------- network

# free_port: print a TCP port on 127.0.0.1 that was free a moment ago.
free_port() {
    python3 -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])'
}

# is_listening PORT: true if something listens on TCP 127.0.0.1:PORT.
# Uses ss, never a probe connection (a one-shot `nc -l` would accept it).
is_listening() {
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q .
}

# wait_listen PORT PID [TIMEOUT_S]: wait until PORT listens; fail if PID dies.
wait_listen() {
    local port=$1 pid=$2 limit=${3:-15} i
    for ((i = 0; i < limit * 200; i++)); do
        is_listening "$port" && return 0
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.005
    done
    return 1
}

# ---------------------------------------------------------------- caches

can_drop_caches() { [[ -w /proc/sys/vm/drop_caches ]]; }
# drop_caches [WHAT]: 3 = page cache + dentries + inodes (cold), 1 = page cache.
drop_caches() {
    sync
    echo "${1:-3}" >/proc/sys/vm/drop_caches
}

# read_all DIR [PAR]: read every regular file under DIR to /dev/null in parallel.
# This is both the warm-up and the "read limit" measurement.
read_all() {
    find "$1" -type f -print0 | xargs -0 -r -P "${2:-16}" -n 256 cat >/dev/null
}

# ---------------------------------------------------------------- data sets

# gen_small DIR FILES SIZE PER_DIR: FILES files of SIZE random (incompressible)
# bytes, PER_DIR files per directory (d00000/f0000000 ...).
gen_small() {
    python3 - "$@" <<'PY'
import os, sys
root, n, size, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
os.makedirs(root, exist_ok=True)
d = None
for i in range(n):
    if i % per == 0:
        d = os.path.join(root, "d%05d" % (i // per))
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%07d" % i), "wb") as f:
        f.write(os.urandom(size))
PY
}

# Python used by manifest/verify: scan a tree into {relpath: entry}.
# entry = (type, perm, size, mtime_s, digest-or-link-target); type f/d/l/o.
_PY_SCAN='
import hashlib, json, os, stat, sys

def scan(root, hashing):
    out = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        st = os.lstat(path)
        out[rel or "."] = ("d", stat.S_IMODE(st.st_mode), 0, int(st.st_mtime), "")
        with os.scandir(path) as it:
            for e in it:
                r = os.path.join(rel, e.name) if rel else e.name
                st = e.stat(follow_symlinks=False)
                m = st.st_mode
                if stat.S_ISDIR(m):
                    stack.append(r)
                elif stat.S_ISREG(m):
                    h = ""
                    if hashing:
                        hh = hashlib.blake2b(digest_size=16)
                        with open(e.path, "rb") as f:
                            while True:
                                b = f.read(1 << 20)
                                if not b:
                                    break
                                hh.update(b)
                        h = hh.hexdigest()
                    out[r] = ("f", stat.S_IMODE(m), st.st_size, int(st.st_mtime), h)
                elif stat.S_ISLNK(m):
                    out[r] = ("l", 0, 0, 0, os.readlink(e.path))
                else:
                    out[r] = ("o", stat.S_IMODE(m), 0, int(st.st_mtime), "")
    return out

def counts(tree):
    c = {"f": 0, "d": 0, "l": 0, "o": 0, "bytes": 0}
    for t in tree.values():
        c[t[0]] += 1
        c["bytes"] += t[2]
    return c
'

# manifest DIR OUT: write DIR's manifest (with content digests) as JSON to OUT.
manifest() {
    python3 -c "$_PY_SCAN"'
tree = scan(sys.argv[1], True)
with open(sys.argv[2], "w") as f:
    json.dump(tree, f)
c = counts(tree)
print("%d files, %d dirs, %d symlinks, %d other, %d bytes" % (c["f"], c["d"], c["l"], c["o"], c["bytes"]))
' "$1" "$2"
}

# manifest_summary MANIFEST: print "FILES BYTES DIRS SYMLINKS MEDIAN_SIZE".
manifest_summary() {
    python3 -c '
import json, statistics, sys
t = json.load(open(sys.argv[1]))
sizes = [v[2] for v in t.values() if v[0] == "f"]
print(len(sizes), sum(sizes), sum(1 for v in t.values() if v[0] == "d"),
      sum(1 for v in t.values() if v[0] == "l"), int(statistics.median(sizes)) if sizes else 0)
' "$1"
}

# verify_tree MANIFEST DST LEVEL: compare DST with the source MANIFEST.
# LEVEL count: counts of files/dirs/symlinks, total bytes, same paths and sizes.
# LEVEL full:  also content digests and symlink targets; modes and mtimes
#              (seconds) are checked and reported as "meta" notes.
# Prints one line: STATUS<TAB>DST_FILES<TAB>DST_BYTES<TAB>DETAIL
# where STATUS is ok, meta (complete and equal, but modes/mtimes differ) or FAIL.
verify_tree() {
    python3 -c "$_PY_SCAN"'
src = {k: tuple(v) for k, v in json.load(open(sys.argv[1])).items()}
dst_root, level = sys.argv[2], sys.argv[3]
if not os.path.isdir(dst_root):
    print("FAIL\t0\t0\tdestination missing")
    sys.exit(0)
dst = scan(dst_root, level == "full")
cs, cd = counts(src), counts(dst)
problems, meta = [], []
for k, name in (("f", "files"), ("d", "dirs"), ("l", "symlinks"), ("o", "other"), ("bytes", "bytes")):
    if cs[k] != cd[k]:
        problems.append("%s %d/%d" % (name, cd[k], cs[k]))
missing = sorted(set(src) - set(dst))
extra = sorted(set(dst) - set(src))
if missing:
    problems.append("%d missing (e.g. %s)" % (len(missing), missing[0]))
if extra:
    problems.append("%d extra (e.g. %s)" % (len(extra), extra[0]))
bad, modes, mtimes = [], [], []
for k in sorted(set(src) & set(dst)):
    s, d = src[k], dst[k]
    if s[0] != d[0] or s[2] != d[2]:
        bad.append("%s type/size %s%d vs %s%d" % (k, d[0], d[2], s[0], s[2]))
    elif level == "full":
        if s[0] in "fl" and s[4] != d[4]:
            bad.append("%s content" % k if s[0] == "f" else "%s link target" % k)
        if s[0] in "fdo" and s[1] != d[1]:
            modes.append(k)
        if s[0] in "fo" and s[3] != d[3]:
            mtimes.append(k)
        if s[0] == "d" and s[3] != d[3]:
            mtimes.append(k + "/")
if bad:
    problems.append("%d differ (e.g. %s)" % (len(bad), bad[0]))
if modes:
    meta.append("%d modes differ (e.g. %s)" % (len(modes), modes[0]))
if mtimes:
    meta.append("%d mtimes differ (e.g. %s)" % (len(mtimes), mtimes[0]))
status = "FAIL" if problems else ("meta" if meta else "ok")
print("%s\t%d\t%d\t%s" % (status, cd["f"], cd["bytes"], "; ".join(problems + meta)))
' "$1" "$2" "$3"
}

# ---------------------------------------------------------------- timed commands

# timed_cmd LIMIT_S CMD...: run CMD under `timeout LIMIT_S`, timed with the
# monotonic clock; sets T_SECS (4 decimals) and T_RC (exit status; 124 =
# timed out). CMD runs as a registered background job that we wait for, so an
# interrupt reaches the caller's trap at once and bg_kill_all ends it.
# Redirect the call itself: `timed_cmd 600 cp -a A B >OUT 2>ERR`.
T_SECS=0
T_RC=0
# shellcheck disable=SC2034 # T_SECS and T_RC are read by the caller
timed_cmd() {
    local limit=$1 start end job
    shift
    T_RC=0
    mono_now start
    timeout "$limit" "$@" &
    job=$!
    bg_register "$job"
    wait "$job" || T_RC=$?
    mono_now end
    bg_unregister "$job"
    T_SECS=$(elapsed "$start" "$end")
}

# ---------------------------------------------------------------- cache states

# cache_prepare cold|warm DIR: put the page cache in the given state before a
# timed run on source DIR (see "Noise rules" in bench/README.md).
#   cold: sync; drop page cache, dentries and inodes.
#   warm: drop the page cache (unless WARM_DROP=0), then read DIR in full
#         (read_all with READ_PAR readers, default 16).
cache_prepare() {
    case $1 in
        cold) drop_caches 3 ;;
        warm)
            if [[ ${WARM_DROP:-1} == 1 ]]; then drop_caches 1; fi
            read_all "$2" "${READ_PAR:-16}"
            ;;
        *) die "cache_prepare: unknown cache state '$1'" ;;
    esac
}

# need_cache_control CACHE...: cold runs need root (drop_caches): die
# without it. Warm runs without it go on without the page-cache drop (sets
# WARM_DROP=0, warning).
need_cache_control() {
    if ! can_drop_caches; then
        if in_list cold "$@"; then
            die "cold cache runs need root (to write /proc/sys/vm/drop_caches); set CACHES=warm to skip them"
        fi
        if [[ ${WARM_DROP:-1} == 1 ]]; then
            log "warning: cannot drop caches; warm runs go without the page-cache drop (WARM_DROP=0)"
            WARM_DROP=0
        fi
    fi
}

# ---------------------------------------------------------------- exit

# Paths removed (rm -rf) at exit, after every registered process is killed,
# and commands (one string each, run by eval) run after that.
EXIT_REMOVE=()
EXIT_HOOKS=()
_on_exit() {
    local status=$? hook
    trap - EXIT INT TERM
    bg_kill_all
    if ((${#EXIT_REMOVE[@]} > 0)); then rm -rf -- "${EXIT_REMOVE[@]}"; fi
    for hook in "${EXIT_HOOKS[@]}"; do eval "$hook" || true; done
    exit "$status"
}
# exit_cleanup_install: at exit or on INT/TERM, kill our background processes,
# remove the paths in EXIT_REMOVE and run EXIT_HOOKS (append as things are made).
exit_cleanup_install() {
    trap _on_exit EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
}

# ---------------------------------------------------------------- the binary under test

# sprat_build BIN: when BIN is the repository's target/release/sprat and
# BUILD is 1 (default), rebuild it with cargo first; when that fails, go on
# with the existing binary (warning) if there is one. Dies unless BIN runs.
sprat_build() {
    local bin=$1
    if [[ ${BUILD:-1} == 1 && $bin == "$repo/target/release/sprat" ]]; then
        log "building sprat (cargo build --release -p sprat)"
        (cd "$repo" && cargo build --release -q -p sprat) ||
            log "warning: cargo build failed; using the existing $bin if there is one"
    fi
    [[ -x $bin ]] || die "sprat binary $bin is missing or not executable"
}

# sprat_snapshot BIN DIR: copy BIN to DIR/sprat (every run must use the same
# build while target/ may be rebuilt) and describe it: sets SPRAT_COPY and
# SPRAT_DESC (path, version, build time, sha256, commit of the work tree).
SPRAT_COPY=""
SPRAT_DESC=""
# shellcheck disable=SC2034 # SPRAT_COPY and SPRAT_DESC are read by the caller
sprat_snapshot() {
    local bin=$1 rev
    rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "no commit")
    if ! git -C "$repo" diff --quiet HEAD 2>/dev/null; then rev+=" + uncommitted changes"; fi
    SPRAT_DESC="$bin ($("$bin" --version 2>/dev/null | head -n 1 || true)), built"
    SPRAT_DESC+=" $(date -r "$bin" '+%F %T'), sha256 $(sha256sum "$bin" | cut -c1-12),"
    SPRAT_DESC+=" work tree at $rev when the run started"
    cp "$bin" "$2/sprat"
    SPRAT_COPY=$2/sprat
}

# ---------------------------------------------------------------- data sets, reused

# dataset_ensure DIR RECIPE MAKER [ARGS...]: make a data set once and reuse it.
# Its manifest is kept in $META/<name of DIR>.json and RECIPE (one line saying
# how it is made: a generator command, or the origin of a snapshot) in
# $META/<name>.origin. The set is (re)made with `MAKER ARGS... NEWDIR` when
# REFRESH=1, when DIR or the manifest is missing, or when RECIPE changed.
dataset_ensure() {
    local dir=$1 recipe=$2 name man origin
    shift 2
    name=$(basename "$dir")
    man=$META/$name.json
    origin=$META/$name.origin
    if [[ ${REFRESH:-0} != 1 && -d $dir && -s $man && $(cat "$origin" 2>/dev/null) == "$recipe" ]]; then
        return 0
    fi
    log "making data set $name: $recipe"
    rm -rf -- "$dir" "$dir.tmp" "$man" "$origin"
    mkdir -p "$(dirname "$dir")" "$META"
    "$@" "$dir.tmp"
    mv -- "$dir.tmp" "$dir"
    sync
    log "manifest of $name: $(manifest "$dir" "$man.tmp")"
    mv -- "$man.tmp" "$man"
    printf '%s\n' "$recipe" >"$origin"
}

# pick_tree MIN_FILES: print the default real tree: the first of the cargo
# registry's crate sources, /usr/share and the repository's target/ that holds
# at least MIN_FILES regular files, else the one holding the most.
pick_tree() {
    local min=$1 cand n most=-1 pick=""
    for cand in "${CARGO_HOME:-$HOME/.cargo}/registry/src" /usr/share "$repo/target"; do
        [[ -d $cand ]] || continue
        # head ends find early: its SIGPIPE is expected.
        n=$(find "$cand" -type f 2>/dev/null | head -n "$min" | wc -l) || true
        if ((n >= min)); then
            printf '%s\n' "$cand"
            return 0
        fi
        log "tree candidate $cand: only $n files (fewer than $min)"
        if ((n > most)); then most=$n pick=$cand; fi
    done
    [[ -n $pick ]] || die "no tree candidate found; give one explicitly"
    printf '%s\n' "$pick"
}

# snapshot_tree SRC NFILES NEWDIR: copy the real tree SRC into NEWDIR, whole
# (NFILES=0, cp -a) or only its first NFILES regular files by sorted path.
snapshot_tree() {
    local src=$1 nfiles=$2 dst=$3
    mkdir -p "$dst"
    if [[ $nfiles == 0 ]]; then
        cp -a "$src/." "$dst/"
        return
    fi
    (cd "$src" && find . -type f -print0 | sort -z | head -z -n "$nfiles") >"$dst.list" || true
    tar -C "$src" --null -T "$dst.list" -cf - | tar -C "$dst" -xf -
    rm -f "$dst.list"
}

# ---------------------------------------------------------------- reports

# plot_python: set PLOT_PY to a python3 that has matplotlib (the one on PATH,
# else Debian's /usr/bin/python3 with python3-matplotlib), or to "" with a
# warning (the caller then draws no plot).
PLOT_PY=""
# shellcheck disable=SC2034 # PLOT_PY is read by the caller
plot_python() {
    local p
    PLOT_PY=""
    for p in python3 /usr/bin/python3; do
        if "$p" -c 'import matplotlib' >/dev/null 2>&1; then
            PLOT_PY=$p
            return 0
        fi
    done
    log "warning: no python3 with matplotlib (apt-get install python3-matplotlib): no plot"
}

# json_fields FILE KEY...: print the values of KEYs of the JSON object in FILE
# (the whole file, else its last line that parses), one per line (empty for a
# missing key or an unreadable file): `mapfile -t VALS < <(json_fields ...)`.
json_fields() {
    python3 - "$@" 2>/dev/null <<'PY' || true
import json, sys
try:
    txt = open(sys.argv[1]).read()
except OSError:
    txt = ""
obj = None
for cand in [txt] + txt.splitlines()[::-1]:
    try:
        obj = json.loads(cand)
        break
    except ValueError:
        pass
if not isinstance(obj, dict):
    obj = {}
for k in sys.argv[2:]:
    print("" if obj.get(k) is None else " ".join(str(obj[k]).split()))
PY
}

# machine_facts DIR: one markdown line on the machine and the disk of DIR.
machine_facts() {
    local mem cpu fs
    mem=$(awk '/MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
    cpu=$(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo)
    fs=$(findmnt -no SOURCE,FSTYPE,OPTIONS -T "$1" 2>/dev/null | tr -s ' ' || stat -f -c %T "$1")
    printf -- '- machine: %s CPUs (%s), %s memory, kernel %s; disk of %s: %s\n' \
        "$(nproc)" "$cpu" "$mem" "$(uname -r)" "$1" "$fs"
}

# fs_is_ram DIR: true when DIR is on tmpfs or ramfs (not a real disk).
fs_is_ram() {
    local t
    t=$(findmnt -no FSTYPE -T "$1" 2>/dev/null || stat -f -c %T "$1")
    [[ $t == tmpfs || $t == ramfs ]]
}

# ---------------------------------------------------------------- loopback servers and tar | nc
# Shared by bench/loopback.sh and bench/peers.sh. They read the caller's
# globals: TMP (private scratch dir), LOGS (log dir), ROOT (exported root),
# SPRAT (binary), RSYNC_CHROOT (yes|no), NC (OpenBSD netcat), RUN_TIMEOUT.
# start_sprat sets SPRAT_PORT, SPRAT_PID, SPRAT_FINGERPRINT and exports
# SPRAT_TOKEN; start_rsyncd sets RSYNC_PORT (module "mod" = ROOT); run_tarnc
# sets R_RC and R_SECS.

SPRAT_PORT=""
SPRAT_PID=""
SPRAT_FINGERPRINT=""
SPRAT_SERVES=0
RSYNC_PORT=""

# start_sprat [PORT [SERVE_ARG...]]: `sprat serve` on 127.0.0.1:PORT (default
# 0: a free port), with any further arguments added to its command line (e.g.
# `--key-file FILE --no-encryption`). The token ($TMP/token) is made by the
# first call and kept by later ones, so a server restarted on the same port
# (`start_sprat "$SPRAT_PORT"`, e.g. after it was killed) admits the clients of
# the one before, retrying ones too. The first server logs to
# $LOGS/sprat-serve.{out,err}, the Nth to $LOGS/sprat-serve-N.{out,err}. Sets
# SPRAT_FINGERPRINT to the key it prints on its second line (`fingerprint
# SHA256:...`, for `sprat cp --server-fingerprint`), empty if it prints none.
# shellcheck disable=SC2034 # the ports, R_RC and R_SECS are read by the caller
start_sprat() {
    local port=${1:-0} out
    if (($# > 0)); then shift; fi
    if [[ ! -s $TMP/token ]]; then
        head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
        chmod 600 "$TMP/token"
    fi
    SPRAT_TOKEN=$(cat "$TMP/token")
    export SPRAT_TOKEN
    SPRAT_SERVES=$((SPRAT_SERVES + 1))
    out=$LOGS/sprat-serve
    ((SPRAT_SERVES == 1)) || out+=-$SPRAT_SERVES
    setsid "$SPRAT" serve --root "$ROOT" --listen "127.0.0.1:$port" --token-file "$TMP/token" "$@" \
        >"$out.out" 2>"$out.err" </dev/null &
    local pid=$! i line="" second="" after=0
    bg_register "$pid"
    for ((i = 0; i < 3000; i++)); do
        line=$(head -n 1 "$out.out" 2>/dev/null || true)
        second=$(sed -n 2p "$out.out" 2>/dev/null || true)
        # The fingerprint follows at once; a build that prints none gets 0.5 s.
        if [[ $line == "listening on "* ]]; then
            [[ -n $second ]] && break
            after=$((after + 1))
            ((after < 50)) || break
        fi
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    if [[ $line != "listening on "* ]]; then
        cat "$out.err" >&2
        die "sprat serve did not start (first stdout line: '$line')"
    fi
    SPRAT_PORT=${line##*:}
    SPRAT_PID=$pid
    SPRAT_FINGERPRINT=""
    [[ $second == "fingerprint "* ]] && SPRAT_FINGERPRINT=${second#fingerprint }
    log "sprat serve pid $pid on 127.0.0.1:$SPRAT_PORT, root $ROOT"
}

# shellcheck disable=SC2034 # the ports, R_RC and R_SECS are read by the caller
start_rsyncd() {
    RSYNC_PORT=$(free_port)
    cat >"$TMP/rsyncd.conf" <<EOF
pid file = $TMP/rsyncd.pid
log file = $LOGS/rsyncd.log
use chroot = $RSYNC_CHROOT
max connections = 0
transfer logging = no

[mod]
    path = $ROOT
    read only = no
    uid = root
    gid = root
    # Only matters with "use chroot = no", where rsync would otherwise prefix
    # /rsyncd-munged/ to every pushed symlink's target.
    munge symlinks = no
EOF
    setsid rsync --daemon --no-detach --config="$TMP/rsyncd.conf" \
        --address=127.0.0.1 --port="$RSYNC_PORT" </dev/null >/dev/null 2>"$LOGS/rsyncd.err" &
    local pid=$!
    bg_register "$pid"
    wait_listen "$RSYNC_PORT" "$pid" || {
        cat "$LOGS/rsyncd.err" "$LOGS/rsyncd.log" >&2 2>/dev/null || true
        die "rsync daemon did not start"
    }
    log "rsync daemon pid $pid on 127.0.0.1:$RSYNC_PORT, module mod = $ROOT"
}


# run_tarnc SRC DST ERR [PORT SEND_PORT]: tar | nc into a listening nc | tar
# on PORT (default: a fresh port); the sender connects to SEND_PORT (default
# PORT), e.g. a relay in front of the receiver.
# shellcheck disable=SC2034 # the ports, R_RC and R_SECS are read by the caller
run_tarnc() {
    local src=$1 dst=$2 err=$3 port=${4:-} send_port recv send rrc=0 t0 t1
    [[ -n $port ]] || port=$(free_port)
    send_port=${5:-$port}
    mkdir -p "$dst"
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout "$RUN_TIMEOUT" bash -o pipefail -c \
        '"$0" -l 127.0.0.1 "$1" </dev/null | tar -C "$2" -xf -' \
        "$NC" "$port" "$dst" 2>"$err.recv" &
    recv=$!
    bg_register "$recv"
    if ! wait_listen "$port" "$recv" 10; then
        bg_kill "$recv"
        bg_unregister "$recv"
        R_RC=98 R_SECS=0
        echo "receiver did not listen on $port" >>"$err"
        return
    fi
    R_RC=0
    mono_now t0
    # shellcheck disable=SC2016 # expanded by the inner bash
    timeout "$RUN_TIMEOUT" bash -o pipefail -c \
        'tar -C "$1" -cf - . | "$0" -N 127.0.0.1 "$2"' "$NC" "$src" "$send_port" 2>"$err" &
    send=$!
    bg_register "$send"
    wait "$send" || R_RC=$?
    bg_unregister "$send"
    if [[ $R_RC != 0 ]]; then
        bg_kill "$recv" # the sender failed: the receiver may never see EOF
    fi
    wait "$recv" || rrc=$?
    mono_now t1
    bg_unregister "$recv"
    cat "$err.recv" >>"$err"
    [[ $R_RC == 0 ]] && R_RC=$rrc
    R_SECS=$(elapsed "$t0" "$t1")
}

# start_relay TO ONE_WAY_MS [RELAY ARGS...]: a `sprat relay` on a free port of
# RELAY_HOST (default 127.0.0.1) forwarding to TO (a port of 127.0.0.1, or
# HOST:PORT) with the given one-way delay; sets RELAY_PORT, RELAY_PID
# (registered, ended at exit) and RELAY_LOG (its stdout; stderr in
# RELAY_LOG.err). Reads SPRAT and LOGS.
# shellcheck disable=SC2034 # RELAY_PORT, RELAY_PID and RELAY_LOG are read by the caller
start_relay() {
    local to=$1 delay=$2 out i line=""
    shift 2
    out=$LOGS/relay-$to-$delay.out
    [[ $to == *:* ]] || to=127.0.0.1:$to
    RELAY_LOG=$out
    setsid "$SPRAT" relay --listen "${RELAY_HOST:-127.0.0.1}:0" --to "$to" --delay "${delay}ms" "$@" \
        >"$out" 2>"$out.err" </dev/null &
    RELAY_PID=$!
    bg_register "$RELAY_PID"
    for ((i = 0; i < 500; i++)); do
        line=$(head -n 1 "$out" 2>/dev/null || true) # the child may not have opened it yet
        [[ $line == "listening on "* ]] && break
        sleep 0.01
    done
    [[ $line == "listening on "* ]] || die "sprat relay did not start: $(cat "$out.err")"
    RELAY_PORT=${line##*:}
}
