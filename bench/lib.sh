# shellcheck shell=bash
# Helpers for sprat's benchmark scripts (bench/*.sh). Source it; don't run it.
#
# Provides: logging, a monotonic clock, free ports, listener readiness,
# cache dropping, tracking and killing of background processes by PID,
# data set generation and tree manifests/verification (Python 3, stdlib only).

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
