#!/usr/bin/env bash
# Namespace benchmark: the "daily script" of DESIGN.md section 1 (copy in,
# move, long recursive listing, checksum every file, copy out, recursive
# delete) on a real source tree, at 30 ms RTT through `sprat relay`, for
# sprat, OpenSSH sftp (a round trip per operation) and rsync + ssh.
#
# Usage: bench/namespace.sh [SRC]
#   QUICK=1 bench/namespace.sh       smoke run (40 files, 1 run, ~40 s)
#   bench/namespace.sh               full run (a crate of 200-600 files, 3 runs)
#
# Environment (defaults in brackets):
#   SRC        source tree [the first crate in ~/.cargo/registry/src/*/ named
#              tokio-*, rustix-*, then any, with 200-600 files]; snapshotted
#   QUICK_FILES files of the QUICK tree (the first N paths of SRC) [40]
#   DELAY      one-way delay of every relay [15ms]: RTT = 2 x DELAY
#   RUNS       rounds; each round runs the three ways once [3; QUICK: 1]
#   WAYS       ways to run: sprat sftp rsync [sprat sftp rsync]
#   SPRAT      sprat binary [target/release/sprat, (re)built unless BUILD=0;
#              a failed build falls back to the existing binary]
#   DATA_DIR   scratch on a real disk (not tmpfs) [/work/bench-data]; this
#              script works in DATA_DIR/namespace/<stamp> and removes it
#   SSH_RC     skip | run [skip]: whether root's ~/.bashrc runs for every
#              ssh command on the server (see bench/README.md)
#   STEP_TIMEOUT seconds before one step is killed (FAIL) [900]
#   RESULTS_DIR where namespace-<stamp>.md/.csv go [bench/results]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
[[ $QUICK == 1 ]] && RUNS=${RUNS:-1}
RUNS=${RUNS:-3}
QUICK_FILES=${QUICK_FILES:-40}
DELAY=${DELAY:-15ms}
WAYS=${WAYS:-sprat sftp rsync}
SPRAT=${SPRAT:-$repo/target/release/sprat}
BUILD=${BUILD:-1}
DATA_DIR=${DATA_DIR:-/work/bench-data}
SSH_RC=${SSH_RC:-skip}
STEP_TIMEOUT=${STEP_TIMEOUT:-900}
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results}
SRC=${1:-${SRC:-}}

read -r -a ways <<<"$WAYS"
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || die "RUNS must be a positive integer"
[[ $QUICK_FILES =~ ^[1-9][0-9]*$ ]] || die "QUICK_FILES must be a positive integer"
[[ $DELAY =~ ^[0-9]+(\.[0-9]+)?(ms|us|s)$ ]] || die "DELAY must look like 15ms"
[[ $SSH_RC == skip || $SSH_RC == run ]] || die "SSH_RC must be skip or run"
((${#ways[@]} > 0)) || die "WAYS is empty"
for w in "${ways[@]}"; do
    [[ $w == sprat || $w == sftp || $w == rsync ]] || die "unknown way: $w"
done
has_way() {
    local w
    for w in "${ways[@]}"; do [[ $w == "$1" ]] && return 0; done
    return 1
}
need_ssh=0
{ has_way sftp || has_way rsync; } && need_ssh=1

# ---------------------------------------------------------------- prerequisites

for c in python3 ss setsid timeout find sort sha256sum; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
done
if [[ $need_ssh == 1 ]]; then
    for c in ssh sftp ssh-keygen rsync; do
        command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh)"
    done
    [[ -x /usr/sbin/sshd ]] || die "missing /usr/sbin/sshd (run scripts/install-deps.sh)"
    [[ -x /usr/lib/openssh/sftp-server ]] || die "missing /usr/lib/openssh/sftp-server"
fi
# sprat is needed by every way: it is the relay.
if [[ $SPRAT == "$repo/target/release/sprat" && $BUILD == 1 ]]; then
    log "building sprat (cargo build --release -p sprat)"
    if ! (cd "$repo" && cargo build --release -q -p sprat); then
        [[ -x $SPRAT ]] || die "sprat does not build and there is no binary"
        log "warning: build failed; benchmarking the existing $SPRAT"
    fi
fi
[[ -x $SPRAT ]] || die "SPRAT=$SPRAT is not executable"
"$SPRAT" relay --help >/dev/null 2>&1 || die "$SPRAT has no 'relay' command (stale binary?)"

if [[ -z $SRC ]]; then
    for pat in 'tokio-*' 'rustix-*' '*'; do
        # shellcheck disable=SC2231 # $pat is a glob on purpose
        for d in "$HOME"/.cargo/registry/src/*/$pat/; do
            [[ -d $d ]] || continue
            n=$(find "$d" -type f | wc -l)
            if ((n >= 200 && n <= 600)); then
                SRC=${d%/}
                break 2
            fi
        done
    done
    [[ -n $SRC ]] || die "no crate with 200-600 files in ~/.cargo/registry/src; pass SRC=DIR"
fi
[[ -d $SRC ]] || die "SRC=$SRC is not a directory"
SRC=$(cd "$SRC" && pwd)

STAMP=$(date +%Y%m%d-%H%M%S)
mkdir -p "$DATA_DIR" "$RESULTS_DIR"
DATA_DIR=$(cd "$DATA_DIR" && pwd)
fstype=$(findmnt -no FSTYPE -T "$DATA_DIR" 2>/dev/null || stat -f -c %T "$DATA_DIR")
[[ $fstype == tmpfs || $fstype == ramfs ]] && die "DATA_DIR=$DATA_DIR is on $fstype; use a real disk"
WORK=$DATA_DIR/namespace/$STAMP # snapshot, server roots, copies out: removed at exit
LOGS=$DATA_DIR/namespace/logs/$STAMP
CSV=$RESULTS_DIR/namespace-$STAMP.csv
MD=$RESULTS_DIR/namespace-$STAMP.md
TMP=""

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    bg_kill_all
    [[ -n $TMP ]] && rm -rf "$TMP"
    rm -rf "$WORK"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$WORK/srv/sprat" "$WORK/srv/sftp" "$WORK/srv/rsync" "$WORK/local" "$LOGS"
TMP=$(mktemp -d /tmp/sprat-ns.XXXXXX)
clock_start

# Benchmark a private copy of the binary (others may rebuild target/ meanwhile).
git_rev=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo "no commit")
git -C "$repo" diff --quiet HEAD 2>/dev/null || git_rev="$git_rev + uncommitted changes"
cp "$SPRAT" "$TMP/sprat"
SPRAT_SRC=$SPRAT
SPRAT=$TMP/sprat

# ---------------------------------------------------------------- the tree

TREE_NAME=$(basename "$SRC")
TREE=$WORK/src/$TREE_NAME
mkdir -p "$WORK/src"
if [[ $QUICK == 1 ]]; then
    (cd "$SRC" && find . -type f -printf '%P\n' | LC_ALL=C sort | head -n "$QUICK_FILES") >"$TMP/quick.list"
    rsync -a --files-from="$TMP/quick.list" "$SRC/" "$TREE/"
    TREE_DESC="first $QUICK_FILES files (sorted paths) of $SRC"
else
    cp -a "$SRC" "$TREE"
    TREE_DESC="snapshot (cp -a) of $SRC"
fi
# Source facts: manifest (for verify_tree), sha256 of every file, dir list.
python3 - "$TREE" "$TMP" <<'PY'
import hashlib, json, os, stat, sys
root, tmp = sys.argv[1], sys.argv[2]
sums, dirs, nondirs = {}, [""], []
for dp, dn, fn in os.walk(root):
    rel = os.path.relpath(dp, root)
    rel = "" if rel == "." else rel
    for d in dn:
        p = os.path.join(dp, d)
        r = os.path.join(rel, d)
        if os.path.islink(p):
            nondirs.append(r)
        else:
            dirs.append(r)
    for f in fn:
        p = os.path.join(dp, f)
        r = os.path.join(rel, f)
        nondirs.append(r)
        if stat.S_ISREG(os.lstat(p).st_mode):
            h = hashlib.sha256()
            with open(p, "rb") as fh:
                h.update(fh.read())
            sums[r] = h.hexdigest()
json.dump(sums, open(os.path.join(tmp, "sha256.json"), "w"))
with open(os.path.join(tmp, "dirs.list"), "w") as f:
    f.write("".join(d + "\n" for d in sorted(dirs)))
with open(os.path.join(tmp, "nondirs.list"), "w") as f:
    f.write("".join(d + "\n" for d in sorted(nondirs)))
PY
manifest "$TREE" "$TMP/manifest.json" >/dev/null
read -r T_FILES T_BYTES T_DIRS T_LINKS T_MEDIAN <<<"$(manifest_summary "$TMP/manifest.json")"
T_ENTRIES=$((T_FILES + T_DIRS - 1 + T_LINKS)) # entries below the top directory
log "tree: $TREE_DESC: $T_FILES files, $T_DIRS dirs, $T_LINKS symlinks, $T_BYTES bytes, median file $T_MEDIAN B"
((T_FILES > 0)) || die "the tree has no files"

# ---------------------------------------------------------------- servers

# start_listener NAME CMD...: start CMD (it prints "listening on HOST:PORT"
# first on stdout) in its own session; set LISTEN_PORT.
LISTEN_PORT=""
start_listener() {
    local name=$1 i line="" pid
    shift
    setsid "$@" >"$LOGS/$name.out" 2>"$LOGS/$name.err" </dev/null &
    pid=$!
    bg_register "$pid"
    for ((i = 0; i < 1500; i++)); do
        line=$(head -n 1 "$LOGS/$name.out" 2>/dev/null || true)
        [[ $line == "listening on "* ]] && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.01
    done
    if [[ $line != "listening on "* ]]; then
        cat "$LOGS/$name.err" >&2
        die "$name did not start (first stdout line: '$line')"
    fi
    LISTEN_PORT=${line##*:}
    log "$name: pid $pid on 127.0.0.1:$LISTEN_PORT"
}

# start_relay NAME TARGET_PORT: a relay of its own with the benchmark delay.
start_relay() {
    start_listener "relay-$1" "$SPRAT" relay --listen 127.0.0.1:0 --to "127.0.0.1:$2" --delay "$DELAY"
}

declare -A RELAY
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$TMP/token"
chmod 600 "$TMP/token"
SPRAT_TOKEN=$(cat "$TMP/token")
export SPRAT_TOKEN
start_listener sprat-serve "$SPRAT" serve --root "$WORK/srv/sprat" --listen 127.0.0.1:0 --token-file "$TMP/token"
SPRAT_PORT=$LISTEN_PORT
if has_way sprat; then
    start_relay sprat "$SPRAT_PORT"
    RELAY[sprat]=$LISTEN_PORT
fi

SSH_OPTS=()
SSH_E=""
if [[ $need_ssh == 1 ]]; then
    ssh-keygen -q -t ed25519 -N '' -C sprat-bench-host -f "$TMP/host_key"
    ssh-keygen -q -t ed25519 -N '' -C sprat-bench-client -f "$TMP/client_key"
    cp "$TMP/client_key.pub" "$TMP/authorized_keys"
    # sshd refuses to start without its privilege separation directory.
    [[ -d /run/sshd ]] || { mkdir -p /run/sshd && chmod 755 /run/sshd; }
    SSHD_PORT=$(free_port)
    {
        echo "Port $SSHD_PORT"
        echo "ListenAddress 127.0.0.1"
        echo "HostKey $TMP/host_key"
        echo "PermitRootLogin prohibit-password"
        echo "PubkeyAuthentication yes"
        echo "PasswordAuthentication no"
        echo "KbdInteractiveAuthentication no"
        echo "AuthorizedKeysFile $TMP/authorized_keys"
        echo "UsePAM no"
        echo "StrictModes no"
        echo "PidFile $TMP/sshd.pid"
        echo "Subsystem sftp /usr/lib/openssh/sftp-server"
        echo "MaxStartups 100"
        echo "LogLevel ERROR"
        # Debian's bash sources ~/.bashrc for commands run by sshd when
        # SHLVL < 2; root's ~/.bashrc here runs `pyenv init` (~0.2 s per ssh
        # command). SHLVL=1 from sshd makes the shell level 2: it is skipped.
        if [[ $SSH_RC == skip ]]; then echo "SetEnv SHLVL=1"; fi
    } >"$TMP/sshd_config"
    /usr/sbin/sshd -t -f "$TMP/sshd_config" || die "sshd rejects its config ($TMP/sshd_config)"
    setsid /usr/sbin/sshd -D -f "$TMP/sshd_config" -e </dev/null >/dev/null 2>"$LOGS/sshd.err" &
    sshd_pid=$!
    bg_register "$sshd_pid"
    wait_listen "$SSHD_PORT" "$sshd_pid" || {
        cat "$LOGS/sshd.err" >&2
        die "sshd did not start"
    }
    log "sshd: pid $sshd_pid on 127.0.0.1:$SSHD_PORT"
    SSH_OPTS=(-F /dev/null -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null
        -o LogLevel=ERROR -o BatchMode=yes -o IdentitiesOnly=yes -i "$TMP/client_key")
    SSH_E="ssh$(printf ' %q' "${SSH_OPTS[@]}")"
    # Sanity check, direct (no relay).
    out=$(ssh "${SSH_OPTS[@]}" -p "$SSHD_PORT" root@127.0.0.1 'echo ok') || die "ssh to the private sshd fails"
    [[ $out == ok ]] || die "ssh prints more than asked (shell startup files?): $out"
    for w in sftp rsync; do
        if has_way "$w"; then
            start_relay "$w" "$SSHD_PORT"
            RELAY[$w]=$LISTEN_PORT
        fi
    done
fi

# ---------------------------------------------------------------- RTT

# A tiny TCP echo server behind a relay of its own: the round trip of a
# 1-byte ping on an established connection, and of connect + first ping.
python3 -u -c '
import socket, threading
s = socket.socket()
s.bind(("127.0.0.1", 0))
s.listen(64)
print("listening on 127.0.0.1:%d" % s.getsockname()[1], flush=True)
def echo(c):
    with c:
        while True:
            b = c.recv(65536)
            if not b:
                return
            c.sendall(b)
while True:
    c, _ = s.accept()
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=echo, args=(c,), daemon=True).start()
' >"$LOGS/echo.out" 2>"$LOGS/echo.err" </dev/null &
echo_pid=$!
bg_register "$echo_pid" pid
for ((i = 0; i < 500; i++)); do
    line=$(head -n 1 "$LOGS/echo.out" 2>/dev/null || true)
    [[ $line == "listening on "* ]] && break
    sleep 0.01
done
[[ $line == "listening on "* ]] || die "echo server did not start"
start_relay rtt "${line##*:}"
read -r RTT_MS CONN_MS <<<"$(python3 - "$LISTEN_PORT" <<'PY'
import socket, statistics, sys, time
port = int(sys.argv[1])
first, pings = [], []
for _ in range(5):
    t0 = time.monotonic()
    c = socket.create_connection(("127.0.0.1", port))
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"x")
    assert c.recv(1) == b"x"
    first.append(time.monotonic() - t0)
    for _ in range(4):
        t0 = time.monotonic()
        c.sendall(b"x")
        assert c.recv(1) == b"x"
        pings.append(time.monotonic() - t0)
    c.close()
print("%.2f %.2f" % (statistics.median(pings) * 1e3, statistics.median(first) * 1e3))
PY
)"
log "relay RTT: ${RTT_MS} ms per ping on an open connection, ${CONN_MS} ms connect + first reply"

# `sprat ls` of the (empty) root, direct and through the sprat relay:
# median of 5, in ms, into LS_MS. (mono_now needs the main shell.)
LS_MS=""
ls_ms() {
    local port=$1 k t0 t1 v=()
    for k in 1 2 3 4 5; do
        mono_now t0
        "$SPRAT" ls "sprat://127.0.0.1:$port/" >/dev/null
        mono_now t1
        v+=("$(elapsed "$t0" "$t1")")
    done
    LS_MS=$(printf '%s\n' "${v[@]}" | sort -g | sed -n 3p | awk '{ printf "%.1f", $1 * 1000 }')
}
ls_ms "$SPRAT_PORT"
LS_DIRECT_MS=$LS_MS
LS_RELAY_MS=""
if has_way sprat; then
    ls_ms "${RELAY[sprat]}"
    LS_RELAY_MS=$LS_MS
    log "sprat ls: ${LS_DIRECT_MS} ms direct, ${LS_RELAY_MS} ms through the relay"
fi

# ---------------------------------------------------------------- steps

# sftp batch files for the listing and the delete: one command per directory
# (listing) and per entry (delete, deepest directories last).
sftp_quote() { # "path" with sftp's quoting and glob characters escaped
    local s=$1
    s=${s//\\/\\\\}
    s=${s//\"/\\\"}
    s=${s//\*/\\*}
    s=${s//\?/\\?}
    s=${s//\[/\\[}
    s=${s//\]/\\]}
    printf '"%s"' "$s"
}
# remote path of REL below BASE
rp() { if [[ -n $2 ]]; then printf '%s/%s' "$1" "$2"; else printf '%s' "$1"; fi; }
make_sftp_batches() { # DIR: server directory of this run
    local dir=$1 rel
    : >"$TMP/sftp-ls.batch"
    while IFS= read -r rel; do
        printf 'ls -la %s\n' "$(sftp_quote "$(rp "$dir/pkg2" "$rel")")" >>"$TMP/sftp-ls.batch"
    done <"$TMP/dirs.list"
    : >"$TMP/sftp-rm.batch"
    while IFS= read -r rel; do
        printf 'rm %s\n' "$(sftp_quote "$dir/pkg2/$rel")" >>"$TMP/sftp-rm.batch"
    done <"$TMP/nondirs.list"
    # deepest first: sort by number of slashes, descending; the top dir last
    awk 'length($0) > 0 { n = gsub("/", "/"); print n "\t" $0 }' "$TMP/dirs.list" |
        sort -t$'\t' -k1,1nr -k2r | cut -f2- | while IFS= read -r rel; do
        printf 'rmdir %s\n' "$(sftp_quote "$dir/pkg2/$rel")"
    done >>"$TMP/sftp-rm.batch"
    printf 'rmdir %s\n' "$(sftp_quote "$dir/pkg2")" >>"$TMP/sftp-rm.batch"
}

# Each step: one command line for sprat and rsync+ssh, one sftp invocation
# (its own ssh connection) for sftp. The checksum step of sftp fetches every
# file and hashes it locally (sftp has no checksum request).
STEP_NAMES=("" "copy in" "move" "long recursive listing" "checksum every file (sha256)" "copy out" "delete (recursive)")

# step_cmd WAY STEP DIR URLDIR OUT SUMDIR: set CMD (an argv array).
# CUR_BASE: log file prefix of the step.
CMD=()
CUR_BASE=""
# shellcheck disable=SC2016 # the sftp checksum step's script is expanded by its own bash
step_cmd() {
    local way=$1 step=$2 dir=$3 udir=$4 out=$5 sumdir=$6 port=${RELAY[$1]}
    local u="sprat://127.0.0.1:$port/$udir"
    local h=root@127.0.0.1
    case $way in
        sprat)
            case $step in
                1) CMD=("$SPRAT" cp "$TREE" "$u/pkg") ;;
                2) CMD=("$SPRAT" mv "$u/pkg" "$u/pkg2") ;;
                3) CMD=("$SPRAT" ls -l -R "$u/pkg2") ;;
                4) CMD=("$SPRAT" sum -r --algo sha256 "$u/pkg2") ;;
                5) CMD=("$SPRAT" cp "$u/pkg2" "$out") ;;
                6) CMD=("$SPRAT" rm -r "$u/pkg2") ;;
            esac
            ;;
        sftp)
            local s=(sftp "${SSH_OPTS[@]}" -P "$port" -b)
            case $step in
                1) printf 'put -rp %s %s\n' "$(sftp_quote "$TREE")" "$(sftp_quote "$dir/pkg")" >"$TMP/sftp-1.batch" ;;
                2) printf 'rename %s %s\n' "$(sftp_quote "$dir/pkg")" "$(sftp_quote "$dir/pkg2")" >"$TMP/sftp-2.batch" ;;
                4) printf 'get -r %s %s\n' "$(sftp_quote "$dir/pkg2")" "$(sftp_quote "$sumdir")" >"$TMP/sftp-4.batch" ;;
                5) printf 'get -rp %s %s\n' "$(sftp_quote "$dir/pkg2")" "$(sftp_quote "$out")" >"$TMP/sftp-5.batch" ;;
            esac
            case $step in
                1 | 2 | 5) CMD=("${s[@]}" "$TMP/sftp-$step.batch" "$h") ;;
                3) CMD=("${s[@]}" "$TMP/sftp-ls.batch" "$h") ;;
                4) CMD=(bash -c '"${@:3}" >"$1" && cd "$2" && find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum' \
                    _ "$CUR_BASE.sftp" "$sumdir" "${s[@]}" "$TMP/sftp-4.batch" "$h") ;;
                6) CMD=("${s[@]}" "$TMP/sftp-rm.batch" "$h") ;;
            esac
            ;;
        rsync)
            local ssh=(ssh "${SSH_OPTS[@]}" -p "$port" "$h")
            case $step in
                1) CMD=(rsync -a -e "$SSH_E -p $port" "$TREE/" "$h:$dir/pkg/") ;;
                2) CMD=("${ssh[@]}" "mv $(printf '%q' "$dir/pkg") $(printf '%q' "$dir/pkg2")") ;;
                3) CMD=("${ssh[@]}" "ls -laR $(printf '%q' "$dir/pkg2")") ;;
                4) CMD=("${ssh[@]}" "find $(printf '%q' "$dir/pkg2") -type f -exec sha256sum {} +") ;;
                5) CMD=(rsync -a -e "$SSH_E -p $port" "$h:$dir/pkg2/" "$out/") ;;
                6) CMD=("${ssh[@]}" "rm -rf $(printf '%q' "$dir/pkg2")") ;;
            esac
            ;;
    esac
}

# check_sums FILE PREFIX: compare "HASH  PATH" lines (PATH minus PREFIX) with
# the source's sha256 of every file. Prints "ok" or a reason.
check_sums() {
    python3 - "$TMP/sha256.json" "$1" "$2" <<'PY'
import json, re, sys
want = json.load(open(sys.argv[1]))
prefix = sys.argv[3]
got, bad = {}, []
for line in open(sys.argv[2], errors="surrogateescape"):
    m = re.match(r"^\\?([0-9a-f]{64}) [ *](.*)$", line.rstrip("\n"))
    if not m:
        continue
    p = m.group(2)
    if not p.startswith(prefix):
        bad.append("unexpected path " + p)
        continue
    got[p[len(prefix):]] = m.group(1)
missing = sorted(set(want) - set(got))
extra = sorted(set(got) - set(want))
differ = sorted(k for k in set(want) & set(got) if want[k] != got[k])
if missing:
    bad.append("%d sums missing (e.g. %s)" % (len(missing), missing[0]))
if extra:
    bad.append("%d extra (e.g. %s)" % (len(extra), extra[0]))
if differ:
    bad.append("%d differ (e.g. %s)" % (len(differ), differ[0]))
print("; ".join(bad[:3]) if bad else "ok %d sums" % len(got))
PY
}

CHECK=""
NOTE=""
# check_step WAY STEP DIR URLDIR OUT OUTFILE SUMDIR: set CHECK (ok/meta/FAIL) and NOTE.
check_step() {
    local way=$1 step=$2 dir=$3 udir=$4 out=$5 outfile=$6 sumdir=$7 r n v
    CHECK=ok
    NOTE=""
    case $step in
        1)
            [[ -d $dir/pkg ]] || { CHECK=FAIL NOTE="$dir/pkg missing"; }
            ;;
        2)
            if [[ -e $dir/pkg || ! -d $dir/pkg2 ]]; then CHECK=FAIL NOTE="pkg still there or pkg2 missing"; fi
            ;;
        3)
            n=$(wc -l <"$outfile")
            NOTE="$n lines"
            ((n >= T_ENTRIES)) || { CHECK=FAIL NOTE="$n lines of output < $T_ENTRIES entries"; }
            ;;
        4)
            case $way in
                sprat) r=$(check_sums "$outfile" "$udir/pkg2/") ;;
                sftp) r=$(check_sums "$outfile" "./") ;;
                rsync) r=$(check_sums "$outfile" "$dir/pkg2/") ;;
            esac
            NOTE=$r
            [[ $r == ok* ]] || CHECK=FAIL
            ;;
        5)
            # Content, sizes, types, link targets; modes and mtimes (seconds).
            IFS=$'\t' read -r r _ _ v <<<"$(verify_tree "$TMP/manifest.json" "$out" full)"
            CHECK=$r
            NOTE=${v:-same content; modes and mtimes (s)}
            if [[ $way == sftp ]]; then
                if diff -r "$TREE" "$out" >"$TMP/diff.out" 2>&1; then
                    NOTE="$NOTE; diff -r: same"
                else
                    CHECK=FAIL NOTE="$NOTE; diff -r: $(head -n 1 "$TMP/diff.out")"
                fi
            fi
            # Exact comparison (mtimes to the nanosecond), for information.
            if "$SPRAT" verify "$TREE" "$out" >"$TMP/verify.out" 2>&1; then
                NOTE="$NOTE; sprat verify: identical"
            else
                # (sprat verify lists at most 50 differences)
                n=$(grep -c 'differs' "$TMP/verify.out" || true)
                ((n < 50)) || n="50 or more"
                NOTE="$NOTE; sprat verify: $n differences (e.g. $(grep -m1 'differs' "$TMP/verify.out" | sed 's/^sprat: differs: //'))"
            fi
            ;;
        6)
            if [[ -e $dir/pkg2 || -e $dir/pkg ]]; then
                CHECK=FAIL NOTE="server directory still there: $(find "$dir" | wc -l) entries left"
            else
                NOTE="gone"
            fi
            ;;
    esac
}

# shellcheck disable=SC1091
MACHINE="$(hostname), nproc $(nproc), kernel $(uname -r), $(. /etc/os-release && echo "$PRETTY_NAME"), $(awk -F': ' '/model name/ { print $2; exit }' /proc/cpuinfo), $(awk '/MemTotal/ { printf "%.0f GiB RAM", $2 / 1048576 }' /proc/meminfo), load average $(cut -d' ' -f1-3 /proc/loadavg) at the start"
COLS="stamp,round,order,way,step,name,seconds,exit,check,load1,note"
{
    echo "# namespace benchmark $STAMP: $MACHINE"
    echo "# relay: sprat relay --delay $DELAY (nominal RTT = 2 x $DELAY); measured RTT ${RTT_MS} ms (established connection), ${CONN_MS} ms (connect + first reply)"
    echo "# tree: $TREE_DESC: $T_FILES files, $T_DIRS dirs, $T_LINKS symlinks, $T_BYTES bytes"
    echo "# sprat: $SPRAT_SRC ($git_rev)"
    echo "$COLS"
} >"$CSV"

total_fail=0
for ((round = 1; round <= RUNS; round++)); do
    # Rotate the order of the ways by one each round.
    order=()
    for ((k = 0; k < ${#ways[@]}; k++)); do
        order+=("${ways[$(((k + round - 1) % ${#ways[@]}))]}")
    done
    log "round $round/$RUNS: ${order[*]}"
    pos=0
    for way in "${order[@]}"; do
        pos=$((pos + 1))
        dir=$WORK/srv/$way/r$round # fresh directory on the server side
        udir=r$round               # the same, as a sprat path
        out=$WORK/local/$way-r$round
        sumdir=$WORK/local/$way-r$round-sum
        mkdir -p "$dir"
        if [[ $way == sftp ]]; then make_sftp_batches "$dir"; fi
        sync
        tot=0
        ok=1
        line_out=""
        for step in 1 2 3 4 5 6; do
            base=$LOGS/$way-r$round-s$step
            CUR_BASE=$base
            step_cmd "$way" "$step" "$dir" "$udir" "$out" "$sumdir"
            load1=$(cut -d' ' -f1 /proc/loadavg)
            mono_now t0
            set +e
            timeout "$STEP_TIMEOUT" "${CMD[@]}" >"$base.out" 2>"$base.err" </dev/null
            rc=$?
            set -e
            mono_now t1
            secs=$(elapsed "$t0" "$t1")
            if [[ $rc == 0 ]]; then
                check_step "$way" "$step" "$dir" "$udir" "$out" "$base.out" "$sumdir"
            else
                CHECK=FAIL
                NOTE="exit $rc: $(head -c 300 "$base.err")"
                [[ $rc == 124 ]] && NOTE="timeout after ${STEP_TIMEOUT}s; $NOTE"
            fi
            [[ $CHECK == FAIL ]] && { ok=0 total_fail=$((total_fail + 1)); }
            tot=$(awk -v a="$tot" -v b="$secs" 'BEGIN { printf "%.4f", a + b }')
            printf '%s,%d,%d,%s,%d,%s,%s,%d,%s,%s,%s\n' "$STAMP" "$round" "$pos" "$way" "$step" \
                "${STEP_NAMES[$step]}" "$secs" "$rc" "$CHECK" "$load1" "$(oneline "$NOTE")" >>"$CSV"
            line_out+=" s$step=${secs}s"
            [[ $CHECK == ok ]] || log "  $way step $step: $CHECK: $NOTE"
        done
        printf '%s,%d,%d,%s,total,all six steps,%s,0,%s,,\n' "$STAMP" "$round" "$pos" "$way" "$tot" \
            "$([[ $ok == 1 ]] && echo ok || echo FAIL)" >>"$CSV"
        log "  $way:$line_out total=${tot}s"
        # Untimed cleanup of this run.
        rm -rf "$dir" "$out" "$sumdir"
    done
done


# ---------------------------------------------------------------- report

NS_WAYS="${ways[*]}" NS_STAMP=$STAMP NS_DELAY=$DELAY NS_RTT_MS=$RTT_MS NS_CONN_MS=$CONN_MS \
    NS_LS_DIRECT_MS=$LS_DIRECT_MS NS_LS_RELAY_MS=${LS_RELAY_MS:-n/a} NS_RUNS=$RUNS \
    NS_MACHINE=$MACHINE \
    NS_SPRAT="$SPRAT_SRC ($git_rev)" \
    NS_PEERS="$(ssh -V 2>&1 | head -n 1); rsync $(rsync --version | head -n 1 | awk '{ print $3 }')" \
    NS_TREE="$TREE_DESC: **$T_FILES files**, $T_DIRS directories, $T_LINKS symlinks, **$T_BYTES bytes** ($(awk -v b="$T_BYTES" 'BEGIN { printf "%.1f MB", b / 1e6 }')), median file $T_MEDIAN B" \
    NS_LOAD_END="$(cut -d' ' -f1-3 /proc/loadavg)" NS_SSH_RC=$SSH_RC NS_LOGS=$LOGS NS_CSV_REL=${CSV#"$repo"/} \
    python3 - "$CSV" "$MD" <<'PY'
import csv, os, re, statistics, sys
E = os.environ
csv_path, md_path = sys.argv[1], sys.argv[2]
rtt_ms = float(E["NS_RTT_MS"])
rows = list(csv.DictReader(l for l in open(csv_path) if not l.startswith("#")))
ways = E["NS_WAYS"].split()
label = {"sprat": "sprat", "sftp": "sftp", "rsync": "rsync+ssh"}
names = {r["step"]: r["name"] for r in rows}
steps = ["1", "2", "3", "4", "5", "6", "total"]
med, spread, fails = {}, {}, {}
for w in ways:
    for s in steps:
        rs = [r for r in rows if r["way"] == w and r["step"] == s]
        v = [float(r["seconds"]) for r in rs if r["check"] != "FAIL"]
        fails[w, s] = len(rs) - len(v)
        if v:
            med[w, s] = statistics.median(v)
            spread[w, s] = (min(v), max(v))

def sname(s):
    return "total" if s == "total" else "%s. %s" % (s, names.get(s, ""))

def cell(w, s):
    if (w, s) not in med:
        return "FAIL"
    t = "%.2f" % med[w, s]
    if fails[w, s]:
        t += " (%d FAIL)" % fails[w, s]
    return t

def ratio(w, s):
    if (w, s) in med and ("sprat", s) in med and med["sprat", s] > 0:
        return "%.1fx" % (med[w, s] / med["sprat", s])
    return "-"

others = [w for w in ways if w != "sprat"] if "sprat" in ways else []
hdr = ["step"] + ["%s s" % label[w] for w in ways] + ["%s/sprat" % label[w] for w in others]
lines = ["| " + " | ".join(hdr) + " |", "|" + "---|" * len(hdr)]
for s in steps:
    c = [sname(s)] + [cell(w, s) for w in ways] + [ratio(w, s) for w in others]
    if s == "total":
        c = ["**%s**" % x for x in c]
    lines.append("| " + " | ".join(c) + " |")
table = "\n".join(lines)

rt = ["| step | " + " | ".join(label[w] for w in ways) + " |", "|" + "---|" * (len(ways) + 1)]
for s in steps:
    rt.append("| %s | " % sname(s) + " | ".join(
        ("%.1f" % (med[w, s] * 1000 / rtt_ms)) if (w, s) in med else "-" for w in ways) + " |")
mm = ["| step | " + " | ".join(label[w] for w in ways) + " |", "|" + "---|" * (len(ways) + 1)]
for s in steps:
    mm.append("| %s | " % sname(s) + " | ".join(
        ("%.2f-%.2f" % spread[w, s]) if (w, s) in spread else "-" for w in ways) + " |")

sprat_rt = ""
if "sprat" in ways:
    sprat_rt = "Round trips per sprat step ≈ time/RTT (RTT %.1f ms): " % rtt_ms + ", ".join(
        "%s %.1f" % ("total" if s == "total" else "step " + s, med["sprat", s] * 1000 / rtt_ms)
        for s in steps if ("sprat", s) in med)

notes = []
for r in rows:
    if r["step"] == "total":
        continue
    if r["check"] != "ok" or (r["step"] == "5" and r["round"] == "1"):
        notes.append("- %s, round %s, step %s: %s: %s" % (label[r["way"]], r["round"], r["step"], r["check"], r["note"]))

m = re.match(r"([0-9.]+)(ms|us|s)$", E["NS_DELAY"])
nominal = 2 * float(m.group(1)) * {"ms": 1, "us": 1e-3, "s": 1e3}[m.group(2)]

md = f"""# Namespace benchmark: the daily script at {nominal:g} ms RTT ({E['NS_STAMP']})

- Machine: {E['NS_MACHINE']}, {E['NS_LOAD_END']} at the end
- sprat: `{E['NS_SPRAT']}`; peers: {E['NS_PEERS']}
- Tree: {E['NS_TREE']}
- Latency: each way through its own `sprat relay --delay {E['NS_DELAY']}` (nominal RTT {nominal:g} ms).
  **Measured RTT {E['NS_RTT_MS']} ms** (1-byte ping on an open TCP connection through a relay, median of 20);
  connect + first reply {E['NS_CONN_MS']} ms; `sprat ls` of an empty root: {E['NS_LS_DIRECT_MS']} ms direct,
  {E['NS_LS_RELAY_MS']} ms through the relay.
- Runs: {E['NS_RUNS']} round(s), the ways interleaved within a round (order rotating by one each round);
  median of the passing runs; the total is the median of the per-run totals (not the sum of the medians).
- Every step is one command invocation and includes its own connection setup and authentication: sprat's
  connect + token handshake; for sftp and rsync+ssh a whole ssh connection (key exchange, public-key auth,
  session, ~0.24 s of CPU here even without delay). sftp's checksum step is `get -r` of the tree plus a local
  `sha256sum` (sftp has no checksum request); its listing is one `ls -la` per directory in one batch.
- ssh server: a private `sshd -D -f CONF -e` on 127.0.0.1, ed25519 keys, default kex and ciphers;
  SSH_RC={E['NS_SSH_RC']} (skip = root's ~/.bashrc, which runs `pyenv init` for ~0.2 s, is not run for every ssh command).

{table}

{sprat_rt}

Time in round trips (median seconds / measured RTT):

{chr(10).join(rt)}

Spread (min-max seconds of the passing runs):

{chr(10).join(mm)}

Checks (the copy out of step 5 against the source in round 1, and every failure):

{chr(10).join(notes) or '- all ok'}

Raw runs: `{E['NS_CSV_REL']}`; stdout/stderr of every step: `{E['NS_LOGS']}/`.
"""
open(md_path, "w").write(md)
print(table)
print()
print(sprat_rt)
PY

log "wrote $MD and $CSV"
((total_fail == 0)) || log "warning: $total_fail step(s) FAILED (see the CSV notes and $LOGS)"
