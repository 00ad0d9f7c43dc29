"""Servers on loopback, one function per kind (`KINDS`), and `sprat relay` in front of them.

Each start function returns a `Server`: its process, address, exported root, and `ctx(port)`,
the template fields a tool's command needs to reach it through `port` (the server's own port,
or a relay's): fingerprints, tokens, ssh options, passwords.
"""

from __future__ import annotations

import os
import random
import shlex
import subprocess
from dataclasses import dataclass, field
from typing import Callable, Optional

from . import proc


@dataclass
class Server:
    kind: str
    host: str
    port: int
    root: str
    pid: Optional[int]
    ctx: Callable[[int], dict] = field(default=lambda port: {})
    verbatim: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    relay_ok: bool = True
    # Starts this server's relay (h, rtt_ms, rate) -> Relay, when the default (`start_relay`
    # on 127.0.0.1 to the server's port) is not enough; see `start_sshd`.
    relay: Optional[Callable] = None
    # Serves each connection in a child process (sshd): its CPU time counts once it is reaped.
    children: bool = False
    # Serves every session in its own process (sprat): its peak resident memory during a run
    # is the server's (a forking server's children take theirs with them).
    one_process: bool = False


@dataclass
class Relay:
    """A `sprat relay` in front of a server: where tools connect, the template fields that
    differ through it, and its log (stderr: one `A -> B -> C` line per forwarded connection)."""

    host: str
    port: int
    pid: int
    log: str
    ctx: dict = field(default_factory=dict)


class StartError(Exception):
    """A server that did not come up; the tools needing it are skipped with this reason."""


def start_sprat(h, i: int, extra: tuple[str, ...] = (), kind: str = "sprat", listen_port: int = 0,
                bin: Optional[str] = None) -> Server:
    """`sprat serve` on 127.0.0.1 (a free port, or `listen_port` to restart one where it was), of
    the binary under test or `bin`."""
    log = os.path.join(h.logs, f"{kind}-serve-{i}")
    while os.path.exists(log + ".out"):
        log += "+"
    p = h.procs.start([bin or h.sprat, "serve", "--root", h.root, "--listen", f"127.0.0.1:{listen_port}", "--token-file",
                       h.token_file, *extra], log=log, env=h.sprat_env)
    lines = proc.wait_line(log + ".out", "listening on ", p, lines=1)
    if not lines:
        raise StartError(f"sprat serve did not start: {proc.tail(log + '.err')}")
    port = int(lines[0].rsplit(":", 1)[1])
    fp = ""
    if "--no-encryption" not in extra:
        got = proc.wait_line(log + ".out", "listening on ", p, lines=2, timeout=2)
        if len(got) == 2 and got[1].startswith("fingerprint "):
            fp = got[1].split(" ", 1)[1]
    conn = "--no-encryption" if "--no-encryption" in extra else (f"--server-fingerprint {fp}" if fp else "")
    return Server(kind, "127.0.0.1", port, h.root, p.pid, ctx=lambda port: {"conn": conn},
                  verbatim=("conn",), env={"SPRAT_TOKEN": h.token}, one_process=True)


def start_rsyncd(h, i: int) -> Server:
    port = proc.free_port()
    conf = os.path.join(h.tmp, f"rsyncd-{i}.conf")
    with open(conf, "w") as f:
        f.write(f"pid file = {h.tmp}/rsyncd-{i}.pid\nlog file = {h.logs}/rsyncd-{i}.log\nuse chroot = yes\n"
                f"max connections = 0\ntransfer logging = no\n\n[mod]\n    path = {h.root}\n    read only = no\n"
                "    uid = root\n    gid = root\n    munge symlinks = no\n")
    p = h.procs.start(["rsync", "--daemon", "--no-detach", f"--config={conf}", "--address=127.0.0.1",
                       f"--port={port}"], log=os.path.join(h.logs, f"rsyncd-{i}"))
    if not proc.wait_listen(port, p):
        raise StartError(f"rsync daemon did not start: {proc.tail(os.path.join(h.logs, f'rsyncd-{i}.err'))}")
    return Server("rsyncd", "127.0.0.1", port, h.root, p.pid)


def start_tarnc(h, i: int) -> Server:
    # No process: the receiver (nc -l | tar -x) is started per run on this port.
    return Server("tarnc", "127.0.0.1", proc.free_port(), h.root, None)


def start_gridftp(h, i: int) -> Server:
    port = proc.free_port()
    uid = ["-anonymous-user", "root", "-allow-root"] if os.geteuid() == 0 else []
    log = os.path.join(h.logs, f"gridftp-{i}")
    p = h.procs.start(["globus-gridftp-server", "-aa", *uid, "-p", str(port), "-control-interface", "127.0.0.1",
                       "-data-interface", "127.0.0.1", "-d", "error", "-l", log + ".log"], log=log)
    if not proc.wait_listen(port, p):
        raise StartError(f"globus-gridftp-server did not start: {proc.tail(log + '.err')}")
    # Data channels go to the address of the PASV reply, not through a relay in front of the
    # control port (the legacy bench/wan.sh ran the server in a namespace behind a veth pair).
    return Server("gridftp", "127.0.0.1", port, h.root, p.pid, relay_ok=False)


def start_xrootd(h, i: int) -> Server:
    user = "xrootd"
    port = proc.free_port()
    root = os.path.join(h.data_dir, "xrootd-root")
    work = os.path.join(h.logs, f"xrootd-{i}")
    os.makedirs(os.path.join(root, "harness-dst"), exist_ok=True)
    os.makedirs(work, exist_ok=True)
    run_as = []
    if os.geteuid() == 0:
        if subprocess.run(["id", user], capture_output=True).returncode != 0:
            raise StartError(f"xrootd will not run as root and user {user} does not exist")
        subprocess.run(["chown", "-R", f"{user}:", root, work], check=True)
        run_as = ["-R", user]
    with open(os.path.join(work, "xrootd.cfg"), "w") as f:
        f.write(f"all.export /\noss.localroot {root}\nxrd.port {port}\nxrd.allow host localhost\n"
                f"xrootd.trace off\nall.adminpath {work}\nall.pidpath {work}\n")
    p = h.procs.start(["xrootd", "-c", os.path.join(work, "xrootd.cfg"), "-p", str(port), "-n", f"harness{i}",
                       "-l", os.path.join(work, "xrootd.log"), *run_as], log=work + "/xrootd")
    if not proc.wait_listen(port, p):
        raise StartError(f"xrootd did not start: {proc.tail(work + '/xrootd.err')}")
    h.cleanup.append(root)
    return Server("xrootd", "127.0.0.1", port, root, p.pid, ctx=lambda port: {"xrd_user": user})


def start_rclone(h, i: int) -> Server:
    port = proc.free_port()
    password = os.urandom(12).hex()
    obscured = subprocess.run(["rclone", "obscure", password], capture_output=True, text=True,
                              check=True).stdout.strip()
    log = os.path.join(h.logs, f"rclone-serve-{i}")
    p = h.procs.start(["rclone", "--config", h.empty_rclone_conf, "serve", "sftp", h.root, "--addr",
                       f"127.0.0.1:{port}", "--user", "sprat", "--pass", password], log=log)
    if not proc.wait_listen(port, p):
        raise StartError(f"rclone serve sftp did not start: {proc.tail(log + '.err')}")
    return Server("rclone", "127.0.0.1", port, h.root, p.pid, ctx=lambda port: {"rclone_pass": obscured})


def start_sshd(h, i: int) -> Server:
    d = os.path.join(h.tmp, f"sshd-{i}")
    os.makedirs(d, exist_ok=True)
    for k in ("host_key", "client_key"):
        if not os.path.exists(os.path.join(d, k)):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", os.path.join(d, k)], check=True)
    with open(os.path.join(d, "client_key.pub")) as f, open(os.path.join(d, "authorized_keys"), "w") as g:
        g.write(f.read())
    os.makedirs("/run/sshd", mode=0o755, exist_ok=True)
    port = proc.free_port()
    conf = os.path.join(d, "sshd_config")
    with open(conf, "w") as f:
        f.write(f"Port {port}\nListenAddress 127.0.0.1\nListenAddress {SSHD_BEHIND_RELAY}\nHostKey {d}/host_key\nPermitRootLogin prohibit-password\n"
                f"PubkeyAuthentication yes\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
                f"AuthorizedKeysFile {d}/authorized_keys\nUsePAM no\nStrictModes no\nPidFile {d}/sshd.pid\n"
                "Subsystem sftp /usr/lib/openssh/sftp-server\nMaxStartups 100\nLogLevel ERROR\n"
                # root's ~/.bashrc runs `pyenv init` (~0.2 s per command) unless SHLVL says nested
                "SetEnv SHLVL=1\n")
    p = h.procs.start(["/usr/sbin/sshd", "-D", "-f", conf, "-e"], log=os.path.join(h.logs, f"sshd-{i}"))
    if not proc.wait_listen(port, p):
        raise StartError(f"sshd did not start: {proc.tail(os.path.join(h.logs, f'sshd-{i}.err'))}")
    opts = ["-F", "/dev/null", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-i", f"{d}/client_key"]
    ssh_opts = " ".join(shlex.quote(o) for o in opts)

    def ctx(port: int) -> dict:
        return {"ssh_opts": ssh_opts, "ssh": "ssh " + ssh_opts,
                "ssh_e": shlex.quote("ssh " + " ".join(opts) + f" -p {port}"), "remote_sprat": h.sprat}

    return Server("sshd", "127.0.0.1", port, h.root, p.pid, ctx=ctx, verbatim=("ssh_opts", "ssh", "ssh_e"), children=True,
                  relay=lambda h, rtt, rate: _sshd_relay(h, port, rtt, rate))


# The relay in front of sshd listens on RELAY_HOST and forwards to sshd's second address,
# SSHD_BEHIND_RELAY, so that nothing reaches the relay's side of the host by accident.
RELAY_HOST = "127.0.0.2"
SSHD_BEHIND_RELAY = "127.0.0.3"


def relayed_sprat_wrapper(sprat: str, port: int, listen_host: str = SSHD_BEHIND_RELAY,
                          announce_host: str = RELAY_HOST) -> str:
    """The script run as `--remote-sprat` through the relay (bench only): the one-shot server
    listens on `listen_host:port` and announces `announce_host:port`, the relay's address, where
    the relay forwards that port too. On one host the client would otherwise reach the server's
    own address without crossing the relay; a real remote is reached only across the WAN."""
    lh = listen_host.replace(".", "\\.")
    return ("#!/bin/sh\n"
            f"# bench/harness: a one-shot server on {listen_host}:{port} announcing {announce_host}:{port}\n"
            f"{shlex.quote(sprat)} \"$@\" --listen {listen_host}:{port} "
            f"| sed -u 's/^listening on {lh}:/listening on {announce_host}:/'\n")


def _sshd_relay(h, ssh_port: int, rtt_ms: float, rate: str) -> Relay:
    """`sprat relay` on RELAY_HOST in front of sshd's SSHD_BEHIND_RELAY, also forwarding one data
    port for the one-shot server of the wrapper (`remote_sprat`), so that every connection of a
    run crosses the relay: ssh's, and sprat's direct data streams."""
    data_port = proc.free_port(SSHD_BEHIND_RELAY)
    wrapper = os.path.join(h.tmp, f"sprat-relayed-{rtt_ms:g}ms")
    with open(wrapper, "w") as f:
        f.write(relayed_sprat_wrapper(h.sprat, data_port))
    os.chmod(wrapper, 0o755)
    log = os.path.join(h.logs, f"relay-sshd-{rtt_ms:g}ms")
    p = h.procs.start([h.sprat, "relay", "--listen", f"{RELAY_HOST}:0", "--to", f"{SSHD_BEHIND_RELAY}:{ssh_port}",
                       "--delay", f"{rtt_ms / 2:g}ms", "--rate", rate, "--ports", f"{data_port}-{data_port}"],
                      log=log, env=h.sprat_env)
    lines = proc.wait_line(log + ".out", "listening on ", p)
    if not lines:
        raise StartError(f"sprat relay in front of sshd did not start: {proc.tail(log + '.err')}")
    return Relay(RELAY_HOST, int(lines[0].rsplit(":", 1)[1]), p.pid, log + ".err", ctx={"remote_sprat": wrapper})


KINDS = {
    "sprat": start_sprat,
    "sprat-plain": lambda h, i: start_sprat(h, i, ("--no-encryption",), kind="sprat-plain"),
    # --old-sprat: the old build's own server, so that an A/B of two builds covers both sides.
    "sprat-old": lambda h, i: start_sprat(h, i, kind="sprat-old", bin=h.plan.old_sprat),
    "rsyncd": start_rsyncd,
    "tarnc": start_tarnc,
    "gridftp": start_gridftp,
    "xrootd": start_xrootd,
    "rclone": start_rclone,
    "sshd": start_sshd,
}


def start_relay(h, to_port: int, rtt_ms: float, rate: str) -> tuple[int, int]:
    """`sprat relay` on a free port of 127.0.0.1 forwarding to `to_port` with RTT/2 one way and
    the given cap; returns (port, pid)."""
    log = os.path.join(h.logs, f"relay-{to_port}-{rtt_ms:g}ms")
    p = h.procs.start([h.sprat, "relay", "--listen", "127.0.0.1:0", "--to", f"127.0.0.1:{to_port}", "--delay",
                       f"{rtt_ms / 2:g}ms", "--rate", rate], log=log, env=h.sprat_env)
    lines = proc.wait_line(log + ".out", "listening on ", p)
    if not lines:
        raise StartError(f"sprat relay did not start: {proc.tail(log + '.err')}")
    return int(lines[0].rsplit(":", 1)[1]), p.pid


def relay_for(h, srv: Server, rtt_ms: float, rate: str) -> Relay:
    """The relay of `srv` at `rtt_ms`: its own (`Server.relay`) or `start_relay`'s."""
    if srv.relay is not None:
        return srv.relay(h, rtt_ms, rate)
    port, pid = start_relay(h, srv.port, rtt_ms, rate)
    return Relay("127.0.0.1", port, pid, os.path.join(h.logs, f"relay-{srv.port}-{rtt_ms:g}ms.err"))


def relay_connections(log_text: str) -> int:
    """Connections a relay forwarded, from its stderr: one `sprat relay: FROM -> AT -> TO` line
    each (three addresses, nothing else; the start-up line has more words)."""
    n = 0
    for line in log_text.splitlines():
        words = line.split()
        if len(words) == 7 and words[:2] == ["sprat", "relay:"] and words[3] == words[5] == "->":
            n += 1
    return n


def veth_namespace(h, n: int, tag: str) -> tuple[str, str, str]:
    """A network namespace of its own joined to this one by a veth pair: (name, outside
    address, inside address), 10.231.N.1 outside and 10.231.N.2 inside for a free N, no NAT,
    `lo` up inside. Removed at exit."""
    used = subprocess.run(["ip", "-4", "-o", "addr", "show"], capture_output=True, text=True).stdout
    used += subprocess.run(["ip", "-4", "route", "show"], capture_output=True, text=True).stdout
    net = next((k for k in range(1 + 10 * n, 255) if f"10.231.{k}." not in used), None)
    if net is None:
        raise StartError(f"no free 10.231.N.0/24 for the {tag} namespace")
    ns, link = f"sprat-harness-{tag}-{os.getpid()}-{n}", f"s{tag[:3]}{os.getpid() % 10000}x{n}"
    out_ip, in_ip = f"10.231.{net}.1", f"10.231.{net}.2"
    steps = [["ip", "netns", "add", ns],
             ["ip", "link", "add", link + "o", "type", "veth", "peer", "name", link + "i"],
             ["ip", "link", "set", link + "i", "netns", ns],
             ["ip", "addr", "add", out_ip + "/24", "dev", link + "o"], ["ip", "link", "set", link + "o", "up"],
             ["ip", "netns", "exec", ns, "ip", "addr", "add", in_ip + "/24", "dev", link + "i"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", link + "i", "up"],
             ["ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up"]]
    h.exit_hooks += [["ip", "link", "del", link + "o"], ["ip", "netns", "del", ns]]
    for st in steps:
        r = subprocess.run(st, capture_output=True, text=True)
        if r.returncode != 0:
            raise StartError(f"{tag} namespace: {' '.join(st)}: {r.stderr.strip()}")
    return ns, out_ip, in_ip


def start_gridftp_behind_relay(h, n: int, rtt_ms: float, rate: str) -> Server:
    """GridFTP through `sprat relay`: globus-url-copy opens its data channels to the address and
    port of the server's passive reply, so a relay in front of the control port alone would not
    see them. The server runs in a network namespace of its own behind a veth pair (10.231.N.2
    inside, 10.231.N.1 outside, no NAT), announcing the outside address (`-data-interface`) and a
    range of 128 passive ports; on the outside address only the relay listens, on a control port
    and (`--ports`) on that range, forwarding both to the same ports inside over the same links.
    One such server per RTT (two relays cannot hold one port range). Removed at exit."""
    ns, out_ip, in_ip = veth_namespace(h, n, "gftp")
    first = None
    for _ in range(50):  # 128 passive ports below the ephemeral range, none listening here
        cand = 20000 + random.randrange(96) * 128
        if not subprocess.run(["ss", "-Hltn", f"( sport >= :{cand} and sport <= :{cand + 127} )"],
                              capture_output=True, text=True).stdout.strip():
            first = cand
            break
    if first is None:
        raise StartError("no free range of 128 ports for GridFTP's passive mode")
    ctl = 2811
    log = os.path.join(h.logs, f"gridftp-rtt{rtt_ms:g}")
    p = h.procs.start(["ip", "netns", "exec", ns, "globus-gridftp-server", "-aa", "-anonymous-user", "root",
                       "-allow-root", "-p", str(ctl), "-data-interface", out_ip, "-port-range",
                       f"{first},{first + 127}", "-d", "error", "-l", log + ".log"], log=log)
    if not proc.wait_listen(ctl, p, netns=ns):
        raise StartError(f"globus-gridftp-server (namespace {ns}) did not start: {proc.tail(log + '.err')}")
    rlog = os.path.join(h.logs, f"relay-gridftp-{rtt_ms:g}ms")
    r = h.procs.start([h.sprat, "relay", "--listen", f"{out_ip}:0", "--to", f"{in_ip}:{ctl}", "--delay",
                       f"{rtt_ms / 2:g}ms", "--rate", rate, "--ports", f"{first}-{first + 127}"], log=rlog,
                      env=h.sprat_env)
    lines = proc.wait_line(rlog + ".out", "listening on ", r)
    if not lines:
        raise StartError(f"sprat relay for GridFTP did not start: {proc.tail(rlog + '.err')}")
    port = int(lines[0].rsplit(":", 1)[1])
    return Server("gridftp", out_ip, port, h.root, p.pid)
