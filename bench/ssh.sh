#!/usr/bin/env bash
# sprat over ssh (`sprat cp SRC HOST:DST`) against `rsync -a` over ssh and `scp -r -p`,
# pushes to a private sshd on this host: directly on loopback, and through `sprat relay`
# at RTT_MS round trip. Sets on tmpfs: a copy of /usr/share (a source tree) and 100,000
# files of 4 KiB (`sprat gen`). Rounds are interleaved (round, set, path, tool); the
# report gives each cell's median and its ratio to sprat's.
#
# What crosses the relay: the relay (`--delay RTT/2`) stands in front of sshd, so every
# ssh connection crosses it: rsync's, scp's and, with --via-ssh, sprat's streams (tunnelled
# in its ssh connection). sprat's direct streams go to the address the one-shot server
# announces, which on one host the client would reach without the relay; so for the
# relayed "sprat" cell the remote sprat is a wrapper that listens on a fixed port of
# sshd's address (127.0.0.3) and announces the relay's address (127.0.0.2) instead, where
# the relay forwards that port too (`--ports`): the streams then cross the relay like any
# WAN path, and the relay log counts them.
#
# Usage: bench/ssh.sh            (QUICK=1: small sets, 1 round)
# Environment [defaults]: SPRAT [target/release/sprat, rebuilt unless BUILD=0],
#   RUNS [3], RTT_MS [30], SETS [tree k4], TOOLS [sprat sprat-via rsync scp],
#   RUN_TIMEOUT [600 s per run], SCP_RELAY_TIMEOUT [120 s: scp pays round trips per file],
#   DATA_DIR [/dev/shm/sprat-ssh-bench], RESULTS_DIR [bench/results/ssh-STAMP]
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/.." && pwd)
# shellcheck source=bench/lib.sh
source "$here/lib.sh"

QUICK=${QUICK:-0}
[[ $QUICK == 1 ]] && RUNS=${RUNS:-1}
RUNS=${RUNS:-3}
RTT_MS=${RTT_MS:-30}
SETS=${SETS:-tree k4}
TOOLS=${TOOLS:-sprat sprat-via rsync scp}
RUN_TIMEOUT=${RUN_TIMEOUT:-600}
SCP_RELAY_TIMEOUT=${SCP_RELAY_TIMEOUT:-120}
DATA_DIR=${DATA_DIR:-/dev/shm/sprat-ssh-bench}
STAMP=$(date +%Y%m%d-%H%M%S)
RESULTS_DIR=${RESULTS_DIR:-$repo/bench/results/ssh-$STAMP}
SPRAT=${SPRAT:-$repo/target/release/sprat}
read -r -a sets <<<"$SETS"
read -r -a tools <<<"$TOOLS"
for c in python3 rsync scp ssh ssh-keygen /usr/sbin/sshd setsid timeout; do
    command -v "$c" >/dev/null || die "missing $c (run scripts/install-deps.sh --tests)"
done

exit_cleanup_install
clock_start
sprat_build "$SPRAT"
mkdir -p "$RESULTS_DIR" "$DATA_DIR"
LOGS=$RESULTS_DIR/logs
mkdir -p "$LOGS"
sprat_snapshot "$SPRAT" "$DATA_DIR"
SPRAT=$SPRAT_COPY
EXIT_REMOVE+=("$DATA_DIR/dst" "$DATA_DIR/sshd")

# ------------------------------------------------------------------ data sets
make_set() {
    local name=$1 dir=$DATA_DIR/$1
    [[ -e $dir.complete ]] && return 0
    rm -rf "$dir"
    case $name in
    tree)
        log "copying /usr/share to $dir"
        if [[ $QUICK == 1 ]]; then cp -a /usr/share/doc "$dir"; else cp -a /usr/share "$dir"; fi
        ;;
    k4)
        local n=100000
        [[ $QUICK == 1 ]] && n=5000
        log "making $n x 4 KiB in $dir"
        "$SPRAT" gen --files "$n" --size 4KiB --seed 1 "$dir" >/dev/null
        ;;
    *) die "unknown set $name" ;;
    esac
    touch "$dir.complete"
}
for s in "${sets[@]}"; do make_set "$s"; done

# ------------------------------------------------------------------ sshd and relay
SSHD_DIR=$DATA_DIR/sshd
rm -rf "$SSHD_DIR"
mkdir -p "$SSHD_DIR" /run/sshd
ssh-keygen -q -t ed25519 -N '' -f "$SSHD_DIR/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$SSHD_DIR/client_key"
cp "$SSHD_DIR/client_key.pub" "$SSHD_DIR/authorized_keys"
SSH_PORT=$(free_port)
cat >"$SSHD_DIR/config" <<EOF
Port $SSH_PORT
ListenAddress 127.0.0.1
ListenAddress 127.0.0.3
HostKey $SSHD_DIR/host_key
AuthorizedKeysFile $SSHD_DIR/authorized_keys
PermitRootLogin yes
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile none
AllowTcpForwarding yes
MaxStartups 100
Subsystem sftp internal-sftp
EOF
setsid /usr/sbin/sshd -D -e -f "$SSHD_DIR/config" 2>"$LOGS/sshd.err" </dev/null &
bg_register $!
wait_listen "$SSH_PORT" $! || die "sshd did not start: $(cat "$LOGS/sshd.err")"
SSH_OPTS="-F /dev/null -i $SSHD_DIR/client_key -o IdentitiesOnly=yes -o StrictHostKeyChecking=no"
SSH_OPTS+=" -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR"

# The relay in front of sshd (127.0.0.3), on 127.0.0.2, also forwarding DATA_PORT.
DATA_PORT=$(free_port)
RELAY_HOST=127.0.0.2 start_relay "127.0.0.3:$SSH_PORT" $((RTT_MS / 2)) --ports "$DATA_PORT-$DATA_PORT"
RELAY_SSH_PORT=$RELAY_PORT
WRAPPER=$DATA_DIR/sprat-relayed
cat >"$WRAPPER" <<EOF
#!/bin/sh
# A one-shot server on 127.0.0.3:$DATA_PORT announcing the relay's 127.0.0.2:$DATA_PORT.
"$SPRAT" "\$@" --listen 127.0.0.3:$DATA_PORT | sed -u 's/^listening on 127\\.0\\.0\\.3:/listening on 127.0.0.2:/'
EOF
chmod +x "$WRAPPER"

# ------------------------------------------------------------------ runs
CSV=$RESULTS_DIR/runs.csv
echo "round,set,path,tool,seconds,rc,files,expected,note" >"$CSV"

# run_one ROUND SET PATH TOOL
run_one() {
    local round=$1 set=$2 path=$3 tool=$4 host port remote_sprat limit=$RUN_TIMEOUT
    local src=$DATA_DIR/$set dst=$DATA_DIR/dst out=$LOGS/$set-$path-$tool-$round
    case $path in
    direct) host=127.0.0.1 port=$SSH_PORT remote_sprat=$SPRAT ;;
    relay) host=127.0.0.2 port=$RELAY_SSH_PORT remote_sprat=$WRAPPER ;;
    esac
    rm -rf "$dst"
    local rsh="ssh -p $port $SSH_OPTS"
    local before
    before=$(grep -c -- ' -> ' "$RELAY_LOG.err" || true)
    case $tool in
    sprat) timed_cmd "$limit" "$SPRAT" cp -q -e "$rsh" --remote-sprat "$remote_sprat" \
        "$src" "$host:$dst" >"$out.out" 2>"$out.err" ;;
    sprat-via) timed_cmd "$limit" "$SPRAT" cp -q --via-ssh -e "$rsh" --remote-sprat "$SPRAT" \
        "$src" "$host:$dst" >"$out.out" 2>"$out.err" ;;
    rsync) timed_cmd "$limit" rsync -a -e "$rsh" "$src/" "$host:$dst/" >"$out.out" 2>"$out.err" ;;
    scp)
        [[ $path == relay ]] && limit=$SCP_RELAY_TIMEOUT
        # shellcheck disable=SC2086 # SSH_OPTS is a list of options
        timed_cmd "$limit" scp -r -p -P "$port" $SSH_OPTS "$src" "$host:$dst" >"$out.out" 2>"$out.err"
        ;;
    esac
    local files expected note=""
    files=$( (find "$dst" -type f 2>/dev/null || true) | wc -l)
    expected=$(find "$src" -type f | wc -l)
    if [[ $tool != scp && $T_RC == 0 ]]; then
        # Exact (content, modes, mtimes, links); scp -r follows symlinks, so it is only counted.
        "$SPRAT" verify "$src" "$dst" >/dev/null 2>"$out.verify" || note="verify failed"
    fi
    [[ $T_RC == 124 ]] && note="timed out after ${limit} s"
    [[ $T_RC != 0 && $T_RC != 124 ]] && note="exit $T_RC: $(oneline "$(tail -n 2 "$out.err")")"
    if [[ $path == relay ]]; then
        local after
        after=$(grep -c -- ' -> ' "$RELAY_LOG.err" || true)
        note+="${note:+; }relay connections: $((after - before))"
    fi
    echo "$round,$set,$path,$tool,$T_SECS,$T_RC,$files,$expected,$note" >>"$CSV"
    log "round $round $set $path $tool: ${T_SECS} s (rc $T_RC, $files/$expected files) $note"
}

for ((round = 1; round <= RUNS; round++)); do
    for set in "${sets[@]}"; do
        for path in direct relay; do
            for tool in "${tools[@]}"; do
                # scp through the relay pays round trips per file: once, capped.
                if [[ $tool == scp && $path == relay && $round -gt 1 ]]; then continue; fi
                run_one "$round" "$set" "$path" "$tool"
            done
        done
    done
done
rm -rf "$DATA_DIR/dst"

# ------------------------------------------------------------------ report
{
    echo "# sprat over ssh against rsync and scp, push, $STAMP"
    echo
    machine_facts "$DATA_DIR"
    echo "- sprat: $SPRAT_DESC"
    echo "- $(ssh -V 2>&1); $(rsync --version | head -n 1)"
    echo "- sshd: a private \`sshd\` on 127.0.0.1 and 127.0.0.3 (ed25519 keys, default ciphers); client and \"remote\" are this host; sets and destination on tmpfs ($DATA_DIR), so storage is not the limit"
    echo "- commands: \`sprat cp -q -e \"ssh -p PORT ...\" --remote-sprat SPRAT SRC HOST:DST\` (streams direct), the same with \`--via-ssh\` (streams tunnelled through ssh), \`rsync -a -e \"ssh ...\" SRC/ HOST:DST/\`, \`scp -r -p -P PORT ... SRC HOST:DST\` (OpenSSH's scp speaks SFTP; it follows symlinks, so its copies are only counted, the others checked with \`sprat verify\`)"
    echo "- relay: \`sprat relay --delay $((RTT_MS / 2))ms\` ($RTT_MS ms round trip, no rate cap) on 127.0.0.2 in front of sshd (127.0.0.3), and on one data port for the relayed sprat's direct streams (see bench/ssh.sh's header: everything crossed the relay)"
    echo "- $RUNS interleaved rounds; median seconds (runs in runs.csv, logs in logs/); scp through the relay once per set, killed after $SCP_RELAY_TIMEOUT s"
    echo
    python3 - "$CSV" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
cells = {}
for r in rows:
    cells.setdefault((r["set"], r["path"]), {}).setdefault(r["tool"], []).append(r)
tools = ["sprat", "sprat-via", "rsync", "scp"]
print("| set | path | sprat s | sprat --via-ssh s | rsync -a s | scp -r s | rsync/sprat | scp/sprat |")
print("|---|---|---|---|---|---|---|---|")
def med(rs):
    if not rs:
        return None, ""
    ok = [float(r["seconds"]) for r in rs if r["rc"] == "0"]
    if ok:
        return statistics.median(ok), ""
    r = rs[0]
    if r["rc"] == "124":
        return None, ">%.0f (killed, %s of %s files)" % (float(r["seconds"]), r["files"], r["expected"])
    return None, "failed, exit %s after %.1f s (%s of %s files)" % (
        r["rc"], float(r["seconds"]), r["files"], r["expected"])
for (s, p), t in cells.items():
    m = {k: med(t.get(k, [])) for k in tools}
    def show(k):
        v, why = m[k]
        return "%.2f" % v if v is not None else (why or "-")
    def ratio(k):
        a, b = m[k][0], m["sprat"][0]
        if a is None or b is None:
            r = t.get(k, [{}])[0]
            if r.get("rc") == "124" and b is not None:
                return "> %.0f" % (float(r["seconds"]) / b)
            return "-"
        return "%.1f" % (a / b)
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (s, p, show("sprat"), show("sprat-via"),
          show("rsync"), show("scp"), ratio("rsync"), ratio("scp")))
bad = [r for r in rows if r["note"] and "relay connections" not in r["note"] or ("verify" in r["note"])]
if bad:
    print("\nRuns with notes:\n")
    for r in bad:
        print("- round %s %s %s %s: %s" % (r["round"], r["set"], r["path"], r["tool"], r["note"]))
PY
} >"$RESULTS_DIR/README.md"
log "results: $RESULTS_DIR/README.md"
cat "$RESULTS_DIR/README.md"
