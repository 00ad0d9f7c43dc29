"""Suites (presets of sets, tools, modes, caches and round trips) and the command line.

`parse` turns argv into a `Plan` (pure: no I/O beyond reading the environment's defaults),
so the command line is unit-tested; the runner and the reports take the Plan.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
from dataclasses import dataclass, field
from typing import Optional

from . import sets as setsmod
from . import tools as toolsmod


@dataclass(frozen=True)
class Suite:
    """A preset: what `bench/run SUITE` runs when no option says otherwise."""

    name: str
    doc: str
    sets: tuple[str, ...]
    tools: tuple[str, ...]
    modes: tuple[str, ...]
    caches: tuple[str, ...] = ("cold", "warm")
    rtts: tuple[Optional[float], ...] = (None,)
    limits: tuple[str, ...] = ("read", "write")
    baseline: str = "sprat"
    rounds: int = 3
    tmpfs: bool = False
    netns: bool = True
    resync: bool = False
    special: bool = False
    rate: str = "1gbit"
    # any file system will do (tmpfs too): the suite measures a ratio or a bandwidth-limited copy
    any_fs: bool = False


SUITES = {
    s.name: s
    for s in (
        Suite("peers", "push over loopback: sprat against its peers, with the read, write and network limits",
              sets=("small", "k64", "m1", "mixed"),
              tools=("sprat", "rsyncd", "tarnc", "gridftp", "xrootd", "rclone-sftp"),
              modes=("push",), limits=("read", "write", "net")),
        Suite("loopback", "push and pull over loopback against an rsync daemon and tar | nc",
              sets=("small", "tree"), tools=("sprat", "rsyncd", "tarnc"), modes=("push", "pull")),
        Suite("third", "third-party copies: sprat between two servers, globus-url-copy between two "
              "GridFTP servers, rsync from one ssh host to another",
              sets=("small", "tree"), tools=("sprat", "gridftp", "rsync-ssh"), modes=("third",)),
        Suite("local", "local copies on one disk: sprat cp against cp -a, tar | tar, rsync -a and rclone",
              sets=("small", "mixed", "tree"), tools=("sprat", "cpa", "tartar", "rsync", "rclone"),
              modes=("local",), netns=False),
        Suite("ablation", "local copies by sprat with one storage technique changed at a time",
              sets=("small", "tree"),
              tools=("sprat", "sprat-threads", "sprat-physical", "sprat-rename", "sprat-batch1m",
                     "sprat-batch16m", "sprat-durable"),
              modes=("local",), caches=("cold",), limits=("read", "read-cat"), rounds=4, netns=False),
        Suite("wan", "push through `sprat relay` (1 Gbit/s, one-way delay RTT/2) on tmpfs",
              sets=("mixed1g", "small", "big"), tools=("sprat", "rsyncd", "tarnc", "gridftp"),
              modes=("push",), caches=("warm",), rtts=(0.2, 10.0, 30.0, 100.0), limits=("read", "write"),
              tmpfs=True),
        Suite("ssh", "push over ssh (HOST:PATH) to a private sshd: sprat (streams direct, and --via-ssh) "
              "against rsync -a over ssh and scp -r -p, on loopback and through `sprat relay` at 30 ms (no rate "
              "cap) in front of sshd, which sprat's direct streams cross too; scp through the relay: round 1 "
              "only, killed after 120 s",
              sets=("tree", "small"), tools=("sprat-ssh", "sprat-via-ssh", "rsync-ssh", "scp"), modes=("push",),
              caches=("warm",), rtts=(None, 30.0), limits=(), baseline="sprat-ssh", tmpfs=True, rate="0"),
        Suite("encryption", "TLS against plain TCP: sprat and sprat --no-encryption in the same rounds",
              sets=("tree", "mixed1g"), tools=("sprat", "sprat-plain"), modes=("push", "pull"),
              caches=("warm",), limits=(), baseline="sprat-plain", rounds=5),
        Suite("resync", "re-sync of a complete destination: no-op push and pull, and a push after 1% "
              "of the files changed, against an rsync daemon",
              sets=("small", "tree"), tools=("sprat", "rsyncd"), modes=("noop-push", "noop-pull", "touch-push"),
              limits=(), resync=True),
        Suite("eta", "how right the time left is early on: sprat --json-events (local, push, pull), rsync "
              "--info=progress2 and rclone at one --bwlimit, small files then large ones (order a) and the reverse (b); "
              "ETA error at 10/25/50% of each run",
              sets=(), tools=("sprat-local", "sprat-push", "sprat-pull", "rsync-local", "rclone-local"),
              modes=("a", "b"), caches=("warm",), limits=(), rounds=1, special=True, any_fs=True),
        Suite("progress-overhead", "what live progress costs: fresh copies without and with --progress (stderr to "
              "the log), local and push over loopback, paired rounds; wall and client CPU ratios",
              sets=("small",), tools=("progress-off", "progress-on"), modes=("local", "push"), caches=("warm",),
              limits=(), baseline="progress-off", rounds=5, any_fs=True),
        Suite("overhead", "per-file overhead of every subsystem: `sprat bench overhead` (cold), fits, points, plot",
              sets=(), tools=(), modes=("push",), caches=("cold",), limits=(), rounds=1, netns=False, special=True),
        Suite("namespace", "the daily script (copy in, move, long recursive listing, checksum every file, copy "
              "out, recursive delete) through `sprat relay`: sprat against sftp and rsync + ssh",
              sets=(), tools=("sprat", "sftp", "rsync"), modes=("push",), caches=("warm",), rtts=(30.0,), limits=(),
              special=True),
        Suite("resume", "a push cut by kill -9 of the client or the server at half its bytes, then run again: "
              "what the re-run sends against what was missing",
              sets=("small", "big"), tools=(), modes=("client", "server", "server-retry"), caches=("cold",),
              limits=(), rounds=1, special=True),
        Suite("servers", "one push and one pull spread over 1, 2 and 3 servers exporting one directory, each in a "
              "network namespace of its own behind a veth pair and `sprat relay --rate RATE`: rate against one server",
              sets=("k64",), tools=(), modes=("push", "pull"), caches=("warm",), limits=(), rounds=3, tmpfs=True,
              special=True, rate="200mbit"),
        Suite("relaycheck", "`sprat relay` against the theory: RTT seen by `sprat doctor`, iperf3 with 1, 4 and 16 "
              "streams against min(N x window / RTT, cap)",
              sets=(), tools=(), modes=("push",), caches=("warm",), rtts=(10.0, 30.0, 100.0), limits=(), rounds=1,
              special=True),
    )
}
RESYNC_MODES = {"noop-push": "push", "noop-pull": "pull", "touch-push": "push"}


@dataclass
class Plan:
    """Everything one invocation runs, resolved from the suite and the options."""

    suite: Suite
    argv: list[str]
    sets: list[str]
    tools: list[str]
    limits: list[str]
    modes: list[str]
    caches: list[str]
    rtts: list[Optional[float]]
    rounds: int
    baseline: str
    sprat: str
    sprat_args: list[str]
    data_dir: str
    results_dir: str
    verify: str
    timeout: float
    quick: bool
    seed: int
    tree: Optional[str]
    tree_files: int
    refresh: bool
    rate: str
    touch_pct: float
    netns: bool
    dry_run: bool
    calls: int = 50
    kill_at: int = 50
    servers_on: str = "veth"
    variants: list[str] = field(default_factory=list)
    old_sprat: Optional[str] = None
    bwlimit_mib: float = 48.0
    warm_memory: bool = True

    def cells(self) -> list[tuple[str, str, str, Optional[float]]]:
        """(set, mode, cache, rtt) of every table row, in the order they run within a round."""
        return [(s, m, c, r) for s in self.sets for m in self.modes for c in self.caches for r in self.rtts]


def _csv(s: str) -> list[str]:
    return [x for x in (p.strip() for p in s.split(",")) if x]


def _rtts(s: str) -> list[Optional[float]]:
    out: list[Optional[float]] = []
    for x in _csv(s):
        if x in ("none", "-"):
            out.append(None)
            continue
        try:
            v = float(x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--rtts: '{x}' is not a number of milliseconds") from None
        if v < 0:
            raise argparse.ArgumentTypeError(f"--rtts: '{x}' is negative")
        out.append(v)
    return out


def parser(repo: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="bench/run",
        description="sprat's benchmark harness: interleaved rounds of every tool on every cell, "
        "medians, ratios, CSV + markdown + PNG in bench/results/SUITE-STAMP/.",
        epilog="suites:\n" + "\n".join(f"  {s.name:<11} {s.doc}" for s in SUITES.values())
        + "\n\ntools: " + ", ".join(sorted(toolsmod.registry()))
        + "\nsets: " + ", ".join(setsmod.SET_NAMES) + " (aliases k4 = small, gridftp = mixed)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("suite", choices=sorted(SUITES), help="what to run (see below)")
    p.add_argument("--sets", type=_csv, help="data sets, comma-separated (default: the suite's)")
    p.add_argument("--tools", type=_csv, help="tools, comma-separated (default: the suite's)")
    p.add_argument("--limits", type=_csv, help="limits measured beside the tools: read, read-cat, write, net; "
                   "'none' for none (default: the suite's)")
    p.add_argument("--modes", type=_csv, help="push, pull, local, third; resync: noop-push, noop-pull, touch-push")
    p.add_argument("--cache", "--caches", dest="caches", type=_csv, help="cold, warm (default: the suite's)")
    p.add_argument("--rtts", type=_rtts, help="round trips in ms through `sprat relay`, comma-separated; "
                   "'none' = no relay (default: the suite's)")
    p.add_argument("--rate", help="the relay's bandwidth cap, 0 = none [the suite's: 1gbit; ssh: 0; servers: 200mbit]")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default: the suite's)")
    p.add_argument("--baseline", help="the tool the ratios are taken against [sprat]")
    p.add_argument("--sprat", default=os.path.join(repo, "target/release/sprat"),
                   help="the sprat binary under test [target/release/sprat]")
    p.add_argument("--sprat-args", default="", help="extra `sprat cp` arguments of every sprat tool")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=BASE [ARGS]",
                   help="an extra tool: BASE with extra client arguments, e.g. 'sprat-s8=sprat --streams 8'")
    p.add_argument("--old-sprat", help="another sprat binary, run as the tool sprat-old")
    p.add_argument("--data-dir", help="data sets and destinations [/work/bench-data; wan, ssh, servers: /dev/shm/sprat-harness]")
    p.add_argument("--results-dir", default=os.path.join(repo, "bench/results"), help="[bench/results]")
    p.add_argument("--verify", choices=("count", "full"), default="full",
                   help="check of every copy: count (paths, types, sizes) or full (+ contents, modes, mtimes)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds before one run is killed (FAIL) [1800]")
    p.add_argument("--quick", action="store_true", help="the small versions of the sets (smoke runs)")
    p.add_argument("--seed", type=int, default=1, help="seed of `sprat gen` [1]")
    p.add_argument("--tree", help="the real tree of the `tree` set [the first of /usr/share, ~/.cargo/registry/src and target/ with 10,000 files or more]")
    p.add_argument("--tree-files", type=int, default=0, help="only the first N files of the tree [all; quick 2000]")
    p.add_argument("--refresh", action="store_true", help="remake the data sets")
    p.add_argument("--touch-pct", type=float, default=1.0, help="resync: percent of files changed per touch round [1]")
    p.add_argument("--calls", type=int, default=50, help="mode ls: sequential `sprat ls` calls per run [50]")
    p.add_argument("--kill-at", type=int, default=50, help="resume: percent of a full copy's loopback bytes at the kill [50]")
    p.add_argument("--servers-on", choices=("veth", "loopback"), default="veth",
                   help="servers: each server in a network namespace of its own behind a veth pair, or all on "
                        "loopback (where larger socket buffers let streams take batches further ahead) [veth]")
    p.add_argument("--bwlimit-mib", type=float, help="eta: every tool's bandwidth limit in MiB/s [48; quick 8]")
    p.add_argument("--no-netns", action="store_true", help="stay in the host's network namespace")
    p.add_argument("--no-warm-memory", action="store_true",
                   help="do not touch and free twice the set's size (+512 MiB) of memory in /dev/shm, and as "
                   "much in huge pages, before each run (on a VM that gives idle memory back to its host, "
                   "the first touch of a page costs a host fault: which tool pays it would depend on what "
                   "ran before)")
    p.add_argument("--dry-run", action="store_true", help="print the plan and every command, run nothing")
    return p


def parse(argv: list[str], repo: str) -> Plan:
    """The Plan of a command line; argparse errors exit 2 with a one-line message."""
    p = parser(repo)
    a = p.parse_args(argv)
    suite = SUITES[a.suite]
    extra_tools = [v.split("=", 1)[0] for v in a.variant]
    if a.old_sprat:
        extra_tools.append("sprat-old")
    # --variant and --old-sprat add their tools to --tools too (naming them there is optional).
    tools = list(a.tools) if a.tools is not None else list(suite.tools)
    tools += [t for t in extra_tools if t not in tools]
    limits = a.limits if a.limits is not None else list(suite.limits)
    if limits == ["none"]:
        limits = []
    modes = a.modes or list(suite.modes)
    caches = a.caches or list(suite.caches)
    rtts = a.rtts if a.rtts else list(suite.rtts)
    rounds = a.rounds if a.rounds is not None else suite.rounds
    if rounds < 1:
        p.error("--rounds must be at least 1")
    if not 1 <= a.kill_at <= 99:
        p.error("--kill-at must be a percentage, 1-99")
    for c in caches:
        if c not in ("cold", "warm"):
            p.error(f"--cache: unknown cache state '{c}' (cold, warm)")
    allowed = tuple(RESYNC_MODES) if suite.resync else toolsmod.MODES
    if suite.name == "resume":
        allowed = ("client", "server", "server-retry")
    if suite.name == "servers":
        allowed = ("push", "pull")
    if suite.name == "eta":
        from .progress import ETA_TOOLS, ORDERS

        allowed = tuple(ORDERS)
        for t in tools:
            if t not in ETA_TOOLS:
                p.error(f"--tools: '{t}' is not a tool of suite eta ({', '.join(ETA_TOOLS)})")
        for s in a.sets or []:
            if not re.fullmatch(r"[1-9][0-9]*x[0-9]+(?:[KMGT]i?B|B)?", s):
                p.error(f"--sets: eta takes two NxSIZE parts, small then large (e.g. 20000x16KiB,20x32MiB), not '{s}'")
        if a.sets is not None and len(a.sets) != 2:
            p.error("--sets: eta takes two NxSIZE parts, small then large (e.g. 20000x16KiB,20x32MiB)")
    if a.bwlimit_mib is not None and (suite.name != "eta" or a.bwlimit_mib <= 0):
        p.error("--bwlimit-mib: only suite eta takes it, and it must be positive")
    for m in modes:
        if m not in allowed:
            p.error(f"--modes: '{m}' is not a mode of suite {suite.name} ({', '.join(allowed)})")
    for s in (a.sets or []) if suite.name != "eta" else []:
        try:
            setsmod.resolve_set(s, tree="/")
        except ValueError as e:
            p.error(f"--sets: {e}")
    reg = toolsmod.registry()
    try:
        for v in a.variant:
            t = toolsmod.parse_variant(v, reg)
            reg[t.name] = t
        if a.old_sprat:
            reg["sprat-old"] = toolsmod.old_sprat(reg["sprat"], a.old_sprat)
        if not suite.special:
            toolsmod.resolve(tools + limits, reg)
    except ValueError as e:
        p.error(str(e))
    for l in limits:
        if reg[toolsmod.ALIASES.get(l, l)].kind == "copy":
            p.error(f"--limits: '{l}' is a tool, not a limit")
    if suite.special and (a.limits or (a.sets and suite.name not in ("resume", "eta", "servers"))
                          or (a.modes and suite.name not in ("resume", "eta", "servers"))
                          or (a.tools and suite.name not in ("namespace", "eta"))):
        p.error(f"suite {suite.name} takes none of --limits, --sets, --modes, --tools but "
                + {"resume": "--sets and --modes", "namespace": "--tools", "eta": "--sets, --modes and --tools",
                   "servers": "--sets and --modes"}.get(
                    suite.name, "the common options"))
    if suite.name == "namespace":
        for w in tools:
            if w not in ("sprat", "sftp", "rsync"):
                p.error(f"--tools: namespace runs the ways sprat, sftp and rsync, not '{w}'")
    baseline = a.baseline or suite.baseline
    if baseline not in tools:
        baseline = tools[0] if tools else ""
    data_dir = a.data_dir or ("/dev/shm/sprat-harness" if suite.tmpfs else "/work/bench-data")
    return Plan(
        suite=suite, argv=list(argv), sets=a.sets or list(suite.sets), tools=tools, limits=limits,
        modes=modes, caches=caches, rtts=rtts, rounds=rounds, baseline=baseline, sprat=a.sprat,
        sprat_args=shlex.split(a.sprat_args), data_dir=data_dir, results_dir=a.results_dir,
        verify=a.verify, timeout=a.timeout, quick=a.quick, seed=a.seed, tree=a.tree,
        tree_files=a.tree_files, refresh=a.refresh, rate=a.rate or suite.rate, touch_pct=a.touch_pct,
        netns=suite.netns and not a.no_netns, dry_run=a.dry_run, calls=a.calls, kill_at=a.kill_at,
        servers_on=a.servers_on, variants=a.variant,
        old_sprat=a.old_sprat,
        bwlimit_mib=a.bwlimit_mib or (8.0 if a.quick else 48.0),
        warm_memory=not a.no_warm_memory,
    )


def tool_registry(plan: Plan) -> dict:
    """The registry with the plan's --variant and --old-sprat tools added."""
    reg = toolsmod.registry()
    for v in plan.variants:
        t = toolsmod.parse_variant(v, reg)
        reg[t.name] = t
    if plan.old_sprat:
        reg["sprat-old"] = toolsmod.old_sprat(reg["sprat"], plan.old_sprat)
    return reg
