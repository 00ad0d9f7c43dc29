#!/usr/bin/env bash
# Build a static `sprat` binary: one file that runs on any x86-64 Linux, no shared libraries.
#
# With the x86_64-unknown-linux-musl target installed (`rustup target add
# x86_64-unknown-linux-musl`), it links against musl (ring's C and assembly are compiled with
# musl-gcc when it is there: `apt-get install musl-tools`). Without it, it links glibc
# statically (`-C target-feature=+crt-static` on the gnu target; a static-pie binary).
# Owner names in a static glibc binary: users and groups in /etc/passwd and /etc/group resolve
# without any shared library (checked in a chroot holding only the binary and those files);
# names that only other NSS sources know (LDAP, sssd, systemd-userdb) need glibc to load their
# modules at run time, which works only where the glibc is the build host's version; otherwise
# such an owner is kept by number, as an unknown name is (musl reads only the files, and
# nscd). Where such names matter, use the dynamic binary of `cargo install`, or --numeric-ids.
#
# Usage: scripts/build-static.sh [--musl | --glibc]
#   (default: musl if the target is installed, else glibc)
# Prints the path of the binary on its last line. CARGO_TARGET_DIR is honoured.
set -euo pipefail

cd "$(dirname "$0")/.."
musl=x86_64-unknown-linux-musl
gnu=x86_64-unknown-linux-gnu

want=auto
for arg in "$@"; do
    case "$arg" in
        --musl) want=musl ;;
        --glibc) want=glibc ;;
        -h | --help)
            sed -n '2,17p' "$0"
            exit 0
            ;;
        *)
            echo "build-static: unknown argument: $arg" >&2
            exit 2
            ;;
    esac
done

have_musl=0
if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx "$musl"; then
    have_musl=1
fi
if [[ $want == musl && $have_musl == 0 ]]; then
    echo "build-static: the $musl target is not installed (rustup target add $musl)" >&2
    exit 1
fi
if [[ $want == auto ]]; then
    if [[ $have_musl == 1 ]]; then want=musl; else want=glibc; fi
fi

# A binary to hand out: no debug information (the release profile keeps some for profiling).
export CARGO_PROFILE_RELEASE_DEBUG=0
export CARGO_PROFILE_RELEASE_STRIP=symbols

if [[ $want == musl ]]; then
    target=$musl
    if command -v musl-gcc >/dev/null 2>&1; then
        export CC_x86_64_unknown_linux_musl=musl-gcc
    fi
    echo "build-static: building for $target (musl, static)" >&2
else
    target=$gnu
    # --target keeps build scripts and proc macros dynamic; only the binary is static.
    export CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS="${CARGO_TARGET_X86_64_UNKNOWN_LINUX_GNU_RUSTFLAGS:-} -C target-feature=+crt-static"
    echo "build-static: the $musl target is not installed: building a static glibc binary" \
        "(owner names go through the build host's glibc NSS modules, see --help)" >&2
fi

cargo build --release --locked -p sprat --target "$target" >&2

target_dir=${CARGO_TARGET_DIR:-target}
bin="$target_dir/$target/release/sprat"
[[ -x $bin ]] || {
    echo "build-static: no binary at $bin" >&2
    exit 1
}

# Static means: no program interpreter and no shared libraries.
if command -v file >/dev/null 2>&1; then
    file -L "$bin" >&2
    if file -L "$bin" | grep -q 'dynamically linked'; then
        echo "build-static: $bin is dynamically linked" >&2
        exit 1
    fi
fi
if ldd "$bin" >/dev/null 2>&1 && ! ldd "$bin" 2>&1 | grep -q 'statically linked'; then
    ldd "$bin" >&2
    echo "build-static: $bin needs shared libraries" >&2
    exit 1
fi
"$bin" --version >&2
realpath "$bin"
