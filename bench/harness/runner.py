"""The rounds: prepare sets, servers and relays, then for every round every cell (set, mode,
cache, RTT) with every tool in an order rotated by one each round; each run is timed until its
data is on disk, checked against the source manifest, untimed, and its destination kept until the
suite ends (`disposal`: deleting it would slow the next run)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import time
from typing import Optional

from . import disposal, proc, servers, sets as setsmod, stats, tools as toolsmod, verify
from .suites import RESYNC_MODES, Plan, tool_registry

CSV_FIELDS = ["stamp", "suite", "set", "mode", "cache", "rtt_ms", "round", "order", "tool", "kind", "seconds",
              "sync_seconds", "exit", "check", "dst_files", "dst_bytes", "src_files", "src_bytes", "tool_seconds",
              "client_cpu", "server_cpu", "client_rss_mib", "server_rss_mib", "bottleneck", "encryption", "report_bytes", "up_to_date", "streams",
              "path_rtt_ms", "tail_s", "relay_conns", "load1", "note"]


class Harness:
    """State of one invocation (see module doc). `log` prints a timestamped line."""

    def __init__(self, plan: Plan, repo: str, stamp: str, log, outdir: str) -> None:
        self.plan, self.repo, self.stamp, self.log, self.outdir = plan, repo, stamp, log, outdir
        self.data_dir = os.path.abspath(plan.data_dir)
        self.root = os.path.join(self.data_dir, "root")
        self.meta = os.path.join(self.data_dir, "meta")
        self.logs = os.path.join(self.data_dir, "logs", f"{plan.suite.name}-{stamp}")
        self.tmp = os.path.join(self.data_dir, "tmp", f"harness-{stamp}")
        self.dst_rel_base = f"harness-dst/{stamp}"
        self.procs = proc.Procs()
        self.cleanup: list[str] = []
        self.disposer = disposal.Disposer(meta=self.meta)
        self.exit_hooks: list[list[str]] = []
        self.reg = tool_registry(plan)
        self.servers: dict[tuple[str, int], servers.Server] = {}
        self.relays: dict[tuple[str, int, float], servers.Relay] = {}
        self.unavailable: dict[str, str] = {}
        self.ready: dict[str, setsmod.Ready] = {}
        self.rows: list[dict] = []
        self.sprat = plan.sprat
        self.token = os.urandom(32).hex()

    # ------------------------------------------------------------ set-up

    def setup(self) -> None:
        self.setup_base()
        self.setup_sets_and_servers()

    def setup_base(self) -> None:
        """Directories, the copy of the binary under test, the token, the cache checks."""
        p = self.plan
        if not os.access(p.sprat, os.X_OK):
            raise SystemExit(f"bench/run: --sprat {p.sprat}: missing or not executable "
                             "(nice cargo build --release -p sprat)")
        if p.old_sprat and not os.access(p.old_sprat, os.X_OK):
            raise SystemExit(f"bench/run: --old-sprat {p.old_sprat}: missing or not executable")
        for d in (self.root, self.meta, self.logs, self.tmp, self.outdir):
            os.makedirs(d, exist_ok=True)
        for d in disposal.stale_suites(os.path.join(self.root, "harness-dst")):
            self.log(f"deleting {d}: copies of a suite that stopped before deleting them")
            self.disposer.remove([d])
        disposal.wait_out_deletions(self.meta, self.data_dir, self.log)
        self.cleanup += [self.tmp, os.path.join(self.root, self.dst_rel_base)]
        # every run uses the same build, whatever happens to target/ meanwhile
        self.sprat = os.path.join(self.tmp, "sprat")
        shutil.copy2(p.sprat, self.sprat)
        self.token_file = os.path.join(self.tmp, "token")
        with open(self.token_file, "w") as f:
            f.write(self.token)
        os.chmod(self.token_file, 0o600)
        self.empty_rclone_conf = os.path.join(self.tmp, "rclone-empty.conf")
        open(self.empty_rclone_conf, "w").close()
        self.sprat_env = dict(os.environ, XDG_CONFIG_HOME=os.path.join(self.tmp, "xdg-config"),
                              XDG_STATE_HOME=os.path.join(self.tmp, "xdg-state"), RUST_LOG="sprat=warn")
        fs = _fstype(self.data_dir)
        if p.suite.tmpfs and not p.suite.any_fs and fs not in ("tmpfs", "ramfs"):
            self.log(f"warning: --data-dir {self.data_dir} is on {fs}, not tmpfs: storage may be the limit")
        if not p.suite.tmpfs and not p.suite.any_fs and fs in ("tmpfs", "ramfs"):
            raise SystemExit(f"bench/run: --data-dir {self.data_dir} is on {fs}; suite {p.suite.name} measures a real disk")
        if "cold" in p.caches and not proc.can_drop_caches():
            raise SystemExit("bench/run: cold cache runs need root (/proc/sys/vm/drop_caches); use --cache warm")

    def setup_sets_and_servers(self) -> None:
        p = self.plan
        tree = p.tree
        if "tree" in p.sets and not tree:
            tree = setsmod.pick_tree(repo=self.repo)
            if not tree:
                raise SystemExit("bench/run: no real tree found for the tree set; give one with --tree DIR")
        for s in p.sets:
            ds = setsmod.resolve_set(s, quick=p.quick, seed=p.seed, tree=tree, tree_files=p.tree_files)
            self.ready[s] = setsmod.ensure(ds, self.root, self.meta, self.sprat, self.log, refresh=p.refresh,
                                           prefix="resync-" if p.suite.resync else "")
            r = self.ready[s]
            self.log(f"set {s}: {r.files} files, {r.bytes} bytes, {r.dirs} dirs, {r.symlinks} symlinks ({ds.desc})")
        for t in self._all_tools():
            missing = [c for c in t.needs if shutil.which(c) is None]
            if missing:
                self.unavailable[t.name] = f"{', '.join(missing)} not installed (scripts/install-deps.sh)"
        self._start_servers()

    def _all_tools(self) -> list[toolsmod.Tool]:
        return toolsmod.resolve(self.plan.limits + self.plan.tools, self.reg)

    def _modes(self) -> list[str]:
        return [RESYNC_MODES.get(m, m) for m in self.plan.modes]

    def _start_servers(self) -> None:
        modes = self._modes()
        instances = 2 if "third" in modes else 1
        for t in self._all_tools():
            if t.name in self.unavailable or not any(t.needs_server(m) and t.supports(m) for m in modes):
                continue
            for i in range(instances):
                key = (t.server, i)
                if key in self.servers:
                    continue
                try:
                    srv = servers.KINDS[t.server](self, i)
                    self.servers[key] = srv
                    self.log(f"server {t.server}#{i} on {srv.host}:{srv.port}" + (f" pid {srv.pid}" if srv.pid else ""))
                except (servers.StartError, OSError, subprocess.CalledProcessError) as e:
                    self._server_failed(t.server, str(e))
                    break
                for n, rtt in enumerate(self.plan.rtts):
                    if rtt is None or i > 0:
                        continue
                    try:
                        if srv.relay_ok:
                            self.relays[(t.server, i, rtt)] = servers.relay_for(self, srv, rtt, self.plan.rate)
                        elif t.server == "gridftp":
                            self.servers[(t.server, f"rtt{rtt}")] = servers.start_gridftp_behind_relay(
                                self, n, rtt, self.plan.rate)
                    except (servers.StartError, OSError) as e:
                        self._server_failed(t.server, str(e))

    def _server_failed(self, kind: str, why: str) -> None:
        for t in self._all_tools():
            if t.server == kind:
                self.unavailable.setdefault(t.name, why)
        self.log(f"skipped: tools of server {kind}: {why}")

    # ------------------------------------------------------------ context of one run

    def context(self, tool: toolsmod.Tool, set_name: str, mode: str, cache: str, rtt: Optional[float],
                dst_rel: str) -> tuple[dict, dict, dict, Optional[str]]:
        """(template fields shell-quoted, the same unquoted, environment, reason the cell cannot
        run or None)."""
        r = self.ready[set_name]
        src_rel = os.path.relpath(r.path, self.root)
        raw: dict = {"sprat": tool.bin or self.sprat, "src_rel": src_rel, "dst_rel": dst_rel,
                     "src_name": os.path.basename(r.path), "tmp": self.tmp, "host": "127.0.0.1",
                     "host2": "127.0.0.1", "listen_port": "", "port": "", "port2": "",
                     "drop": "--drop-caches" if cache == "cold" else "", "conn": "", "conn2": "",
                     "calls": self.plan.calls, "alloc_4m": max(1, -(-r.allocated // (4 << 20)))}
        verbatim = ["drop", "conn", "conn2", "args", "args_remote", "gen"]
        env = dict(self.sprat_env)
        args = list(tool.args)
        if any("{sprat} cp" in t for t in tool.modes.values()):
            args = self.plan.sprat_args + args
        raw["args"] = " ".join(proc.quote(a) for a in args)
        raw["args_remote"] = " ".join(proc.quote(proc.quote(a)) for a in args)  # for a command ssh runs
        raw["gen"] = " ".join(proc.quote(a) for a in (r.set.gen or ()))
        if tool.gen_only and r.set.gen is None:
            return {}, {}, env, "not a generated set"
        raw["src"] = r.path
        raw["dst"] = os.path.join(self.root, dst_rel)
        if tool.needs_server(mode):
            srv = self.servers.get((tool.server, 0))
            if srv is None:
                return {}, {}, env, self.unavailable.get(tool.name, "server not started")
            port = srv.port
            host = srv.host
            relay_ctx: dict = {}
            if rtt is not None and not srv.relay_ok:
                srv = self.servers.get((tool.server, f"rtt{rtt}"))
                if srv is None:
                    return {}, {}, env, f"{tool.server} cannot go through the relay (data channels bypass it)"
                port, host = srv.port, srv.host
            elif rtt is not None:
                relay = self.relays.get((tool.server, 0, rtt))
                if relay is None:
                    return {}, {}, env, "no relay"
                port, host, relay_ctx = relay.port, relay.host, relay.ctx
            raw["host"] = host
            raw.update(srv.ctx(port))
            raw.update(relay_ctx)
            verbatim += list(srv.verbatim)
            env.update(srv.env)
            raw["listen_port"], raw["port"] = srv.port, port
            if mode in ("push", "third"):
                raw["dst"] = os.path.join(srv.root, dst_rel)
            if mode == "pull":
                raw["src"] = os.path.join(srv.root, src_rel)
            if mode == "third":
                srv2 = self.servers.get((tool.server, 1))
                if srv2 is None:
                    return {}, {}, env, "second server not started"
                c2 = srv2.ctx(srv2.port)
                raw["port2"] = srv2.port
                raw["dst"] = os.path.join(srv2.root, dst_rel)
                if "conn" in c2:
                    raw["conn2"] = c2["conn"]
                if "ssh_e" in c2:
                    raw["ssh_e2"] = servers.shlex.split(c2["ssh_e"])[0]
        ctx = toolsmod.quote_ctx(raw, tuple(verbatim))
        if "ssh_e2" in raw:
            ctx["ssh_e2"] = proc.quote(raw["ssh_e2"])
        env.update({k: toolsmod.expand(v, raw) for k, v in tool.env.items()})
        return ctx, raw, env, None

    # ------------------------------------------------------------ the rounds

    def tools_for(self, mode: str) -> list[toolsmod.Tool]:
        return [t for t in toolsmod.resolve(self.plan.tools, self.reg) if t.supports(RESYNC_MODES.get(mode, mode))]

    def run(self, write_row) -> None:
        p = self.plan
        limits = toolsmod.resolve(p.limits, self.reg)
        for rnd in range(1, p.rounds + 1):
            self.log(f"round {rnd} of {p.rounds}")
            if p.suite.resync:
                self._resync_setup()
            seen_limits: set = set()
            for (s, mode, cache, rtt) in p.cells():
                lineup = self.tools_for(mode)
                if (s, cache) not in seen_limits:  # the limits do not depend on mode or RTT: once per set and cache
                    seen_limits.add((s, cache))
                    lineup = list(limits) + lineup
                if mode == "touch-push":
                    self._touch(s, rnd)
                lineup = [t for t in lineup if toolsmod.runs_in_round(t, rtt, rnd)]
                for k, t in enumerate(stats.rotate(lineup, rnd - 1)):
                    write_row(self.run_one(s, mode, cache, rtt, t, rnd, k + 1))

    def run_one(self, s: str, mode: str, cache: str, rtt: Optional[float], t: toolsmod.Tool, rnd: int,
                order: int) -> dict:
        p = self.plan
        r = self.ready[s]
        base_mode = RESYNC_MODES.get(mode, mode)
        tmode = base_mode if t.supports(base_mode) else next(iter(t.modes))
        rtt_s = "" if rtt is None else f"{rtt:g}"
        tag = f"{s}-{mode}-{cache}{'-' + rtt_s + 'ms' if rtt_s else ''}-{t.name}-r{rnd}"
        resync = p.suite.resync and t.kind == "copy"
        dst_rel = self._resync_dst(s, t, base_mode) if resync else f"{self.dst_rel_base}/{tag}"
        row = {"stamp": self.stamp, "suite": p.suite.name, "set": s, "mode": mode, "cache": cache, "rtt_ms": rtt_s,
               "round": rnd, "order": order, "tool": t.name, "kind": t.kind, "src_files": r.files,
               "src_bytes": r.bytes, "load1": os.getloadavg()[0]}
        if t.name in self.unavailable:
            return dict(row, check="SKIP", note=self.unavailable[t.name])
        ctx, raw, env, why = self.context(t, s, tmode, cache, None if t.kind in ("read", "write", "rw") else rtt, dst_rel)
        if why:
            return dict(row, check="SKIP", note=why)
        cmd = toolsmod.expand(t.modes[tmode], ctx)
        dst = None
        if t.kind == "copy" and tmode not in toolsmod.NO_COPY_MODES:
            dst = toolsmod.expand(t.copy_at, raw)
        elif t.kind in ("write", "rw"):
            dst = raw["dst"]
        logbase = os.path.join(self.logs, tag)
        with open(logbase + ".cmd", "w") as f:
            f.write(cmd + "\n")
        if t.kind in ("copy", "write", "rw") and tmode not in toolsmod.NO_COPY_MODES:
            os.makedirs(os.path.dirname(raw["dst"]), exist_ok=True)  # tools differ in making parents
        prep = t.prepare.get(tmode)
        if prep:
            subprocess.run(["bash", "-c", toolsmod.expand(prep, ctx)], check=False)
        # cache state, untimed
        src = r.path
        if tmode in toolsmod.NO_COPY_MODES:
            pass  # reads no data set
        elif cache == "cold":
            proc.drop_caches(3)
        elif p.suite.resync:
            # Both trees' metadata, inodes included: `-printf ""` read the directories but
            # stat'ed nothing, so whether a destination's inodes were still cached depended on
            # the runs before (a server's no-op listing of 1,000,000 files took 1.7 or 6-7 CPU-s).
            proc.stat_trees(src, os.path.join(self.root, dst_rel))
        else:
            if proc.can_drop_caches():
                proc.drop_caches(1)
            proc.read_tree(src)
        if p.warm_memory and tmode not in toolsmod.NO_COPY_MODES:
            proc.warm_memory(2 * r.bytes + (512 << 20))
        receiver = None
        if tmode in t.receiver:
            receiver = self.procs.start(toolsmod.expand(t.receiver[tmode], ctx), log=logbase + ".recv", shell=True)
            if not proc.wait_listen(int(ctx["listen_port"]), receiver, 10):
                self.procs.stop(receiver)
                return dict(row, exit=98, check="FAIL", note="receiver did not listen")
        srvs = [srv for (kind, i), srv in self.servers.items()
                if kind == t.server and srv.pid and (i in (0, 1) or i == f"rtt{rtt}")]
        srv_pids = [srv.pid for srv in srvs]
        cpu0 = sum(proc.cpu_of(pid) for pid in srv_pids)
        rss_pids = [srv.pid for srv in srvs if srv.one_process]
        for pid in rss_pids:
            proc.reset_peak_rss(pid)
        relay = self.relays.get((t.server, 0, rtt)) if rtt is not None and t.kind not in ("read", "write", "rw") else None
        conns0 = self._relay_conns(relay)
        limit = toolsmod.time_limit(t, rtt, p.timeout)
        timed = proc.run_timed(cmd, out=logbase + ".out", err=logbase + ".err", env=env, timeout=limit,
                               receiver=receiver, sync_path=dst if t.sync else None)
        if relay is not None:
            row["relay_conns"] = self._relay_conns(relay) - conns0
        if receiver is not None and receiver in self.procs.procs:
            self.procs.procs.remove(receiver)
        # untimed: a session may end after its client (sprat's one-shot server exits once the
        # client's ssh has closed its stdin, a relay's delay later)
        proc.wait_childless([srv.pid for srv in srvs if srv.children])
        server_cpu = sum(proc.cpu_of(pid) for pid in srv_pids) - cpu0
        row.update(seconds=round(timed.seconds, 4), sync_seconds=round(timed.sync_seconds, 4), exit=timed.rc,
                   client_cpu=round(timed.cpu, 3), server_cpu=round(server_cpu, 3) if srv_pids else "",
                   client_rss_mib=round(timed.rss_kib / 1024, 1) if timed.rss_kib else "")
        peaks = [proc.peak_rss_kib(pid) for pid in rss_pids]
        if rss_pids and None not in peaks:
            row["server_rss_mib"] = round(sum(peaks) / 1024, 1)
        rep = _json_report(logbase + ".out")
        for k in ("bottleneck", "encryption"):
            if rep.get(k) is not None:
                row[k] = str(rep[k])
        if rep.get("seconds") is not None:
            row["tool_seconds"] = rep["seconds"]
        row["report_bytes"], row["up_to_date"] = rep.get("bytes", ""), rep.get("up_to_date", "")
        path = rep.get("path") if isinstance(rep.get("path"), dict) else {}
        if path:
            row["streams"] = f"{path.get('streams_start')}->{path.get('streams_end')}"
            row["path_rtt_ms"], row["tail_s"] = path.get("rtt_ms", ""), path.get("tail_s", "")
        notes = []
        if t.timing == "report":
            if isinstance(rep.get("seconds"), (int, float)):
                row["seconds"] = round(float(rep["seconds"]) + timed.sync_seconds, 4)
            elif timed.rc == 0:
                row["exit"] = 97
                notes.append("no seconds in the JSON report")
        # untimed: check the copy, then delete it (a resync destination is kept)
        if tmode in toolsmod.NO_COPY_MODES:
            row["check"] = "-" if not row.get("exit") else "FAIL"
        elif t.kind == "copy" and dst:
            c = verify.check(self.manifest(s), dst, p.verify)
            row.update(check=c.status, dst_files=c.files, dst_bytes=c.bytes)
            if c.detail:
                notes.append(c.detail)
        elif t.kind in ("read", "write", "rw", "net"):
            row["check"] = "-"
        if t.kind in ("write", "rw") and dst:
            self.disposer.keep(dst, r.bytes, self.log, nfiles=r.files)
        if row.get("exit"):
            row["check"] = "FAIL"
            if timed.timed_out:
                err = proc.tail(logbase + ".err")
                notes.insert(0, f"killed at its time limit, {limit:g} s, with {row.get('dst_files', '?')} of "
                             f"{r.files} files copied" + (f": {err}" if err else ""))
            else:
                notes.insert(0, f"exit {row['exit']}: {proc.tail(logbase + '.err')}")
        if t.kind == "copy" and not resync and tmode not in toolsmod.NO_COPY_MODES:
            self.disposer.keep(raw["dst"], r.bytes, self.log, nfiles=r.files)
        row["note"] = "; ".join(notes)
        self.log(f"{s:<8} {mode:<10} {cache:<4} {rtt_s + ' ms' if rtt_s else '':<8} {t.name:<14} r{rnd} "
                 f"{row['seconds']:9.3f} s  {row.get('check', '')} {row['note'][:160]}")
        return row

    @staticmethod
    def _relay_conns(relay: Optional[servers.Relay]) -> int:
        if relay is None:
            return 0
        try:
            with open(relay.log, errors="replace") as f:
                return servers.relay_connections(f.read())
        except OSError:
            return 0

    def manifest(self, s: str) -> dict:
        if not hasattr(self, "_manifests"):
            self._manifests: dict = {}
        if s not in self._manifests:
            self._manifests[s] = verify.load_manifest(self.ready[s].manifest)
        return self._manifests[s]

    # ------------------------------------------------------------ resync

    def _resync_dst(self, s: str, t: toolsmod.Tool, direction: str) -> str:
        return f"harness-resync/{self.ready[s].set.dir}-{t.name}-{direction}"

    def _resync_setup(self) -> None:
        """Untimed: bring every destination up to date (the first round fills them)."""
        for s in self.plan.sets:
            for m in sorted({RESYNC_MODES[m] for m in self.plan.modes}):
                for t in self.tools_for(m):
                    if t.name in self.unavailable:
                        continue
                    ctx, raw, env, why = self.context(t, s, m, "warm", None, self._resync_dst(s, t, m))
                    if why:
                        continue
                    os.makedirs(raw["dst"], exist_ok=True)
                    cmd = toolsmod.expand(t.modes[m], ctx)
                    rc = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], env=env, stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL).returncode
                    if rc != 0:
                        self.log(f"warning: resync set-up of {s} {m} {t.name} exited {rc}")

    def _touch(self, s: str, rnd: int) -> None:
        """Rewrite touch_pct % of the set's files (same size, new random bytes, new mtime),
        spread evenly over the sorted paths, other files each round; update the manifest."""
        r = self.ready[s]
        man = self.manifest(s)
        files = sorted(k for k, v in man.items() if v[0] == "f")
        n = max(1, int(len(files) * self.plan.touch_pct / 100))
        step = max(1, len(files) // n)
        picked = files[(rnd - 1) % step::step][:n]
        for rel in picked:
            path = os.path.join(r.path, rel)
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                f.write(random.randbytes(size))
        time.sleep(0.01)
        verify.rehash(r.path, man, picked)
        verify.save_manifest(man, r.manifest)
        self.log(f"touched {len(picked)} files of {s}")

    def stop(self) -> None:
        """Stops the servers and relays and runs the exit hooks (the copies stay)."""
        self.procs.stop_all()
        for cmd in self.exit_hooks:
            subprocess.run(cmd, capture_output=True)
        self.exit_hooks = []

    def dispose(self) -> None:
        """Deletes the copies kept until now and the suite's scratch directories."""
        if self.disposer.kept:
            self.log(f"deleting {len(self.disposer.kept)} finished copies")
        self.disposer.delete_all()
        for d in self.cleanup:
            shutil.rmtree(d, ignore_errors=True)

    def close(self) -> None:
        self.stop()
        self.dispose()


def _json_report(path: str) -> dict:
    """The tool's JSON report: the whole output, else its last line that parses."""
    try:
        with open(path, errors="replace") as f:
            txt = f.read()
    except OSError:
        return {}
    for cand in [txt] + txt.splitlines()[::-1]:
        try:
            obj = json.loads(cand)
            if isinstance(obj, dict):
                return obj
        except ValueError:
            continue
    return {}


def _fstype(path: str) -> str:
    r = subprocess.run(["stat", "-f", "-c", "%T", path], capture_output=True, text=True)
    return r.stdout.strip()
