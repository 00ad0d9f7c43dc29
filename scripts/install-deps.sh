#!/usr/bin/env bash
# Install the system packages that sprat's benchmarks and scripts need.
#
# Target: Debian 12 (bookworm), run as root (or with sudo available).
# Idempotent: only packages whose command is missing are installed, and
# `apt-get update` runs at most once, only when something is missing.
#
# Usage: scripts/install-deps.sh [--tests] [--lint]
#   --tests  only what the test suite needs (scripts/test.sh runs this)
#   --lint   also install shellcheck (to lint the shell scripts)
set -euo pipefail

want_lint=0
only_tests=0
for arg in "$@"; do
    case "$arg" in
        --lint) want_lint=1 ;;
        --tests) only_tests=1 ;;
        -h | --help)
            sed -n '2,11p' "$0"
            exit 0
            ;;
        *)
            echo "install-deps: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

need=()

# need_cmd COMMAND PACKAGE: queue PACKAGE unless COMMAND is already on PATH.
need_cmd() {
    if ! command -v "$1" >/dev/null 2>&1; then
        need+=("$2")
    fi
}

# need_pkg PACKAGE: queue PACKAGE unless dpkg says it is installed.
need_pkg() {
    if ! dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; then
        need+=("$1")
    fi
}

# What the tests need: peers they compare against and tools that make their fixtures.
need_cmd rsync rsync          # peer: rsync daemon on loopback; tests compare filters against it
need_cmd ssh openssh-client   # tests of `sprat cp HOST:/path` run a private sshd on loopback
need_cmd ssh-keygen openssh-client
need_pkg openssh-server
need_pkg netcat-openbsd       # ... and reach it with `nc -U` from a network namespace (unshare -n, ip)
need_cmd unshare util-linux
need_cmd ip iproute2
need_cmd setfacl acl          # tests of -A make POSIX ACLs with setfacl and read them with getfacl
need_cmd setfattr attr        # tests of -X make extended attributes with setfattr
need_cmd mkfs.xfs xfsprogs    # tests of --reflink clone large files on an XFS image
need_cmd bindfs bindfs          # tests copy onto a FUSE file system (no O_TMPFILE) that bindfs mirrors
need_cmd python3 python3
need_cmd slurmctld slurmctld  # tests of scripts/slurm run a single-host Slurm (with munge)
need_cmd slurmd slurmd
need_cmd sbatch slurm-client
need_cmd munged munge

if [[ $only_tests == 0 ]]; then
need_cmd rsync rsync          # peer: rsync daemon on loopback
need_pkg netcat-openbsd       # peer: tar | nc (needs OpenBSD nc for -N)
need_cmd rclone rclone        # peer of bench/run local and peers: rclone copy
need_pkg globus-gridftp-server-progs # peer of bench/run peers: globus-gridftp-server
need_cmd globus-url-copy globus-gass-copy-progs # its client
need_pkg xrootd-server        # peer of bench/run peers: xrootd (runs as the package's user xrootd)
need_cmd xrdcp xrootd-client  # its client
need_cmd hyperfine hyperfine  # ad-hoc micro benchmarks
need_pkg time                 # bench/run: each client's peak resident memory (/usr/bin/time -f %M)
need_cmd iperf3 iperf3        # bench/run relaycheck: TCP throughput through the WAN relay
need_cmd ssh openssh-client   # peers of bench/run (sftp, rsync-ssh): sftp, rsync over ssh
need_cmd sftp openssh-client
need_cmd ssh-keygen openssh-client
need_pkg openssh-server       # bench/run and bench/legacy/namespace.sh run a private sshd (/usr/sbin/sshd) on loopback
need_cmd python3 python3      # data set generator, timer, verification, report
need_pkg python3-matplotlib   # bench/run draws its plots (with Debian's python3)
need_cmd ss iproute2          # readiness checks for listeners
need_cmd tar tar
need_cmd xargs findutils
need_cmd timeout coreutils
need_cmd setsid util-linux
fi
if [[ $want_lint == 1 ]]; then
    need_cmd shellcheck shellcheck
fi

if ((${#need[@]} == 0)); then
    echo "install-deps: all present"
    exit 0
fi

sudo_cmd=()
if [[ $(id -u) != 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        sudo_cmd=(sudo)
    else
        echo "install-deps: need root (or sudo) to install: ${need[*]}" >&2
        exit 1
    fi
fi

# One entry per package (several commands come from one package).
mapfile -t need < <(printf '%s\n' "${need[@]}" | awk '!seen[$0]++')
echo "install-deps: installing ${need[*]}"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
# apt's chatter goes to a log that is shown only if a step fails.
apt() {
    if ! "${sudo_cmd[@]}" env DEBIAN_FRONTEND=noninteractive apt-get "$@" >"$log" 2>&1; then
        cat "$log" >&2
        echo "install-deps: apt-get $1 failed" >&2
        exit 1
    fi
}
apt update -qq
apt install -y -qq --no-install-recommends "${need[@]}"
echo "install-deps: done"
