"""Tools as declarative entries: which server a tool needs, the shell command of each mode
(push, pull, local, third party), a receiver started before the clock (tar | nc), untimed
preparation, where its copy lands, how its time is taken and what it needs installed.

Templates are shell text with `{name}` fields filled from a run's context (see
`runner.context`): every value is already shell-quoted; `{name!q}` quotes it once more, for a
command that a remote shell (ssh) parses again. `expand` is pure and unit-tested.
"""

from __future__ import annotations

import shlex
import string
from dataclasses import dataclass, field, replace
from typing import Mapping, Optional

MODES = ("push", "pull", "local", "third", "ls")
REMOTE_MODES = ("push", "pull", "third", "ls")
# Modes that copy nothing: no destination, no check, no sync (`ls`: {calls} sequential
# `sprat ls` calls, the cost of a connection and one request).
NO_COPY_MODES = ("ls",)


@dataclass(frozen=True)
class Tool:
    """One tool. `modes` maps a mode to its command template; `server` names the server kind
    its remote modes talk to (`servers.KINDS`); `receiver` maps a mode to a command started and
    listening before the clock starts and waited for before it stops; `prepare` runs untimed
    before the clock (e.g. mkdir); `copy_at` is where the copy lands (to verify it).
    `kind` is copy, read (a read limit), write (a write limit), rw (both at once: the copy
    limit of one host) or net (a network limit);
    `timing` is wall (the harness's clock) or report (the `seconds` of the tool's JSON report,
    plus the final sync). `sync`: the timed part ends with a sync of the destination's file
    system, so that no tool wins by leaving data unwritten. `needs`: commands that must be on
    PATH. `env`: environment templates. `bin`: the sprat binary (None = the one under test)."""

    name: str
    label: str
    modes: Mapping[str, str]
    server: Optional[str] = None
    receiver: Mapping[str, str] = field(default_factory=dict)
    prepare: Mapping[str, str] = field(default_factory=dict)
    copy_at: str = "{dst}"
    kind: str = "copy"
    timing: str = "wall"
    sync: bool = True
    json_report: bool = False
    needs: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    bin: Optional[str] = None
    gen_only: bool = False
    note: str = ""
    # Through a relay (an RTT): killed after this many seconds (None: --timeout), and run in
    # the first round only when `relay_once` (scp pays round trips per file: hours at 30 ms).
    relay_timeout: Optional[float] = None
    relay_once: bool = False

    def supports(self, mode: str) -> bool:
        return mode in self.modes

    def needs_server(self, mode: str) -> bool:
        return self.server is not None and mode in REMOTE_MODES


class _Quoting(string.Formatter):
    """str.format with one extra conversion: `!q` shell-quotes the (already quoted) value again."""

    def convert_field(self, value, conversion):
        if conversion == "q":
            return shlex.quote(str(value))
        return super().convert_field(value, conversion)


def runs_in_round(tool: Tool, rtt: Optional[float], rnd: int) -> bool:
    """Whether `tool` runs in round `rnd` (1-based) of a cell at `rtt` (None: no relay)."""
    return not (tool.relay_once and rtt is not None and rnd > 1)


def time_limit(tool: Tool, rtt: Optional[float], timeout: float) -> float:
    """Seconds before a run of `tool` at `rtt` is killed: --timeout, or less through a relay."""
    if rtt is not None and tool.relay_timeout is not None:
        return min(timeout, tool.relay_timeout)
    return timeout


def expand(template: str, ctx: Mapping[str, str]) -> str:
    """Fill a template; a field missing from `ctx` is an error naming it."""
    try:
        return _Quoting().vformat(template, (), ctx)
    except KeyError as e:
        raise KeyError(f"template field {e} is not known in: {template}") from None


def quote_ctx(raw: Mapping[str, object], verbatim: tuple[str, ...] = ()) -> dict[str, str]:
    """Shell-quote every value of `raw` except those named in `verbatim` (already shell text)."""
    out = {}
    for k, v in raw.items():
        out[k] = str(v) if k in verbatim else shlex.quote(str(v))
    return out


def variant(base: Tool, name: str, args: tuple[str, ...] = (), label: str = "", bin: Optional[str] = None) -> Tool:
    """A tool that is `base` with extra client arguments (or another sprat binary)."""
    return replace(base, name=name, label=label or f"{base.label} {' '.join(args)}".strip(),
                   args=base.args + tuple(args), bin=bin if bin is not None else base.bin)


def old_sprat(base: Tool, bin: str) -> Tool:
    """`--old-sprat`: `base` run with another sprat binary, client and server (its own `sprat serve`)."""
    return replace(variant(base, "sprat-old", label="sprat (old build)", bin=bin), server="sprat-old")


# ---------------------------------------------------------------- the entries

SPRAT_CP = "{sprat} cp --json {args}"
_SPRAT_REMOTE = {
    "push": SPRAT_CP + " {conn} {src} sprat://{host}:{port}/{dst_rel}",
    "pull": SPRAT_CP + " {conn} sprat://{host}:{port}/{src_rel} {dst}",
    "third": SPRAT_CP + " {conn} {conn2} sprat://{host}:{port}/{src_rel} sprat://{host2}:{port2}/{dst_rel}",
}
SSH_E = "{ssh_e}"
GUC = "globus-url-copy -r -cd -pp -cc 16 -p 4 {args}"
RCLONE_SFTP = ":sftp,host={host},port={port},user=sprat,pass={rclone_pass},shell_type=unix,md5sum_command=md5sum,sha1sum_command=sha1sum:"
RCLONE_REMOTE_ARGS = "--transfers 32 --checkers 32 --no-check-dest --retries 1"
RCLONE_LOCAL_ARGS = ("--links --create-empty-src-dirs --local-no-check-updated --transfers 16 "
                     "--checkers 16 --no-check-dest --retries 1")

SPRAT = Tool(
    name="sprat", label="sprat", server="sprat", json_report=True,
    modes={**_SPRAT_REMOTE, "local": SPRAT_CP + " {src} {dst}",
           "ls": "for i in $(seq {calls}); do {sprat} ls {conn} sprat://{host}:{port}/ >/dev/null || exit 1; done"},
)

ENTRIES: list[Tool] = [
    # ---- limits
    Tool(name="read", label="read limit (sprat bench read, 16 threads)", kind="read", sync=False,
         modes={m: "{sprat} bench read --threads 16 {src} >/dev/null" for m in MODES[:4]}),
    Tool(name="read-cat", label="read limit (find | xargs -P 16 cat)", kind="read", sync=False,
         modes={m: "find {src} -type f -print0 | xargs -0 -r -P 16 -n 256 cat >/dev/null" for m in MODES[:4]}),
    Tool(name="write", label="write limit (sprat bench write)", kind="write", timing="report",
         modes={m: "{sprat} bench write --json {drop} {src} {dst}" for m in MODES[:4]}),
    Tool(name="rw", label="copy limit (sprat bench copy: the read and write limits at once)", kind="rw",
         timing="report", modes={m: "{sprat} bench copy --json {drop} {src} {dst}" for m in MODES[:4]}),
    # One disk for source and copy: whatever reads the source and writes the copy shares the
    # disk's bandwidth (on this VM's disk, reading and writing at once take about the time of
    # both apart). `disk` reads the source as `read` does while the destination's file system
    # takes the source's allocated bytes as one sequential O_DIRECT write, the cheapest way to
    # put that many bytes on it (a plain write where O_DIRECT is refused, e.g. tmpfs).
    Tool(name="disk", label="one-disk copy limit (the read limit while the destination's disk takes the "
         "source's allocated bytes in one sequential O_DIRECT write)", kind="rw",
         modes={m: "{sprat} bench read --threads 16 {src} >/dev/null & r=$!; mkdir -p {dst} && "
                   "{{ dd if=/dev/zero of={dst}/disk-limit bs=4M count={alloc_4m} oflag=direct status=none 2>/dev/null "
                   "|| dd if=/dev/zero of={dst}/disk-limit bs=4M count={alloc_4m} status=none; }}; d=$?; "
                   "wait $r && exit $d" for m in MODES[:4]}),
    Tool(name="net", label="network limit (sprat bench network, memory to memory)", kind="net",
         timing="report", sync=False, server="sprat", gen_only=True,
         modes={m: "{sprat} bench network --json {conn} {gen} sprat://{host}:{port}/" for m in ("push", "pull")}),
    # ---- sprat
    SPRAT,
    replace(SPRAT, name="sprat-plain", label="sprat --no-encryption", server="sprat-plain"),
    # ---- peers over the network
    Tool(name="rsyncd", label="rsync daemon", server="rsyncd", needs=("rsync",),
         modes={"push": "rsync -a {args} {src}/ rsync://{host}:{port}/mod/{dst_rel}/",
                "pull": "rsync -a {args} rsync://{host}:{port}/mod/{src_rel}/ {dst}/"}),
    Tool(name="tarnc", label="tar | nc", server="tarnc", needs=("tar", "nc.openbsd"),
         prepare={"push": "mkdir -p {dst}", "pull": "mkdir -p {dst}"},
         receiver={m: "nc.openbsd -l {host} {listen_port} </dev/null | tar -C {dst} -xf -" for m in ("push", "pull")},
         modes={m: "tar -C {src} -cf - . | nc.openbsd -N {host} {port}" for m in ("push", "pull")}),
    Tool(name="gridftp", label="GridFTP (globus-url-copy -pp -cc 16)", server="gridftp",
         needs=("globus-url-copy", "globus-gridftp-server"),
         modes={"push": GUC + " file://{src}/ ftp://{host}:{port}{dst}/",
                "pull": GUC + " ftp://{host}:{port}{src}/ file://{dst}/",
                "third": GUC + " ftp://{host}:{port}{src}/ ftp://{host2}:{port2}{dst}/"}),
    Tool(name="xrootd", label="XRootD (xrdcp --parallel 16)", server="xrootd", needs=("xrdcp", "xrootd"),
         prepare={"push": "mkdir -p {dst} && chown {xrd_user}: {dst}"}, copy_at="{dst}/{src_name}",
         modes={"push": "xrdcp --parallel 16 -r -s {args} {src} root://{host}:{port}//{dst_rel}/"}),
    Tool(name="rclone-sftp", label="rclone (rclone serve sftp)", server="rclone", needs=("rclone",),
         env={"RCLONE_CONFIG": "{tmp}/rclone-empty.conf"},
         modes={"push": f"rclone copy {RCLONE_REMOTE_ARGS} {{args}} {{src}} {RCLONE_SFTP}{{dst_rel}}",
                "pull": f"rclone copy {RCLONE_REMOTE_ARGS} {{args}} {RCLONE_SFTP}{{src_rel}} {{dst}}"}),
    Tool(name="rsync-ssh", label="rsync over ssh", server="sshd", needs=("rsync", "ssh"),
         modes={"push": "rsync -a {args} -e " + SSH_E + " {src}/ root@{host}:{dst}/",
                "pull": "rsync -a {args} -e " + SSH_E + " root@{host}:{src}/ {dst}/",
                # host A runs rsync to host B (ssh from A to B): the data never crosses the client
                "third": "{ssh} -p {port} root@{host} rsync -a {args_remote} -e {ssh_e2!q} {src!q}/ root@{host2}:{dst!q}/"}),
    # HOST:PATH over the sshd: the one-shot server (`sprat serve --one-shot`) started through ssh,
    # its streams direct, or tunnelled in the ssh connection (--via-ssh). {remote_sprat} is the
    # binary under test, or through a relay the wrapper that announces the relay's address
    # (servers.relayed_sprat_wrapper), so that the direct streams cross the relay too.
    Tool(name="sprat-ssh", label="sprat over ssh (HOST:PATH, streams direct)", server="sshd", json_report=True,
         modes={"push": SPRAT_CP + " -e {ssh_e} --remote-sprat {remote_sprat} {src} root@{host}:{dst}",
                "pull": SPRAT_CP + " -e {ssh_e} --remote-sprat {remote_sprat} root@{host}:{src} {dst}"}),
    Tool(name="sprat-via-ssh", label="sprat over ssh --via-ssh (streams in the ssh connection)", server="sshd",
         json_report=True,
         modes={"push": SPRAT_CP + " --via-ssh -e {ssh_e} --remote-sprat {sprat} {src} root@{host}:{dst}",
                "pull": SPRAT_CP + " --via-ssh -e {ssh_e} --remote-sprat {sprat} root@{host}:{src} {dst}"}),
    # OpenSSH's scp speaks SFTP and follows symlinks (a tree with links FAILs the check).
    Tool(name="scp", label="scp -r -p (OpenSSH, SFTP)", server="sshd", needs=("scp",), relay_timeout=120,
         relay_once=True,
         modes={"push": "scp -q -r -p -P {port} {ssh_opts} {args} {src} root@{host}:{dst}",
                "pull": "scp -q -r -p -P {port} {ssh_opts} {args} root@{host}:{src} {dst}"}),
    Tool(name="sftp", label="sftp (OpenSSH)", server="sshd", needs=("sftp",),
         modes={"push": "echo \"put -rp {src} {dst}\" | sftp -q -b - {ssh_opts} -P {port} root@{host} >/dev/null",
                "pull": "echo \"get -rp {src} {dst}\" | sftp -q -b - {ssh_opts} -P {port} root@{host} >/dev/null"}),
    # ---- local peers
    Tool(name="cpa", label="cp -a", needs=("cp",), modes={"local": "cp -a {args} {src} {dst}"}),
    Tool(name="tartar", label="tar | tar", needs=("tar",),
         modes={"local": "mkdir -p {dst} && tar -C {src} -cf - . | tar -C {dst} -xf -"}),
    Tool(name="rsync", label="rsync -a", needs=("rsync",), modes={"local": "rsync -a {args} {src}/ {dst}/"}),
    Tool(name="rclone", label="rclone copy", needs=("rclone",), env={"RCLONE_CONFIG": "{tmp}/rclone-empty.conf"},
         modes={"local": f"rclone copy {RCLONE_LOCAL_ARGS} {{args}} {{src}} {{dst}}"}),
]
# One technique changed at a time (the old bench/ablation.sh).
ENTRIES += [
    variant(SPRAT, "sprat-threads", ("--io", "threads")),
    variant(SPRAT, "sprat-physical", ("--read-order", "physical")),
    variant(SPRAT, "sprat-rename", ("--publish", "rename")),
    variant(SPRAT, "sprat-batch1m", ("--batch-size", "1MiB", "--batch-files", "256")),
    variant(SPRAT, "sprat-batch16m", ("--batch-size", "16MiB", "--batch-files", "4096")),
    variant(SPRAT, "sprat-durable", ("--durable",)),
    variant(SPRAT, "sprat-checksum", ("-c",)),
]
# Live progress off and on (suite progress-overhead, the old bench/progress_overhead.py): a fresh
# copy without the final sync in the timed part, as that script timed it (the count's cost is
# the client's, and the writeback would only add noise to the ratio).
ENTRIES += [
    replace(SPRAT, name="progress-off", label="sprat cp (no progress; not synced in the timed part)", sync=False),
    replace(SPRAT, name="progress-on", label="sprat cp --progress (stderr to the run's log; not synced in the timed part)",
            sync=False, args=("--progress",)),
]
ALIASES = {"cp": "cpa", "tar": "tartar", "rsync-daemon": "rsyncd", "read-limit": "read", "write-limit": "write",
           "copy-limit": "rw", "disk-limit": "disk"}


def registry(extra: tuple[Tool, ...] = ()) -> dict[str, Tool]:
    out = {t.name: t for t in ENTRIES}
    for t in extra:
        out[t.name] = t
    return out


def parse_variant(spec: str, reg: Mapping[str, Tool]) -> Tool:
    """`NAME=BASE ARGS...` (e.g. `sprat-s8=sprat --streams 8`): BASE with extra client args."""
    if "=" not in spec:
        raise ValueError(f"--variant '{spec}': expected NAME=BASE [ARGS...]")
    name, rest = spec.split("=", 1)
    words = shlex.split(rest)
    if not name or not words:
        raise ValueError(f"--variant '{spec}': expected NAME=BASE [ARGS...]")
    base = reg.get(ALIASES.get(words[0], words[0]))
    if base is None:
        raise ValueError(f"--variant '{spec}': unknown base tool '{words[0]}'")
    return variant(base, name, tuple(words[1:]))


def resolve(names: list[str], reg: Mapping[str, Tool]) -> list[Tool]:
    out = []
    for n in names:
        t = reg.get(ALIASES.get(n, n))
        if t is None:
            raise ValueError(f"unknown tool '{n}' (known: {', '.join(sorted(reg))})")
        out.append(t)
    return out
