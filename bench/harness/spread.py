"""The `servers` suite: one push (or pull) spread over 1, 2 and 3 servers that export the same directory.

Each server runs in a network namespace of its own, joined to the client's by a veth pair,
and the client reaches it through `sprat relay --rate RATE` on the outside address (one capped
link per server); with `--servers-on loopback`, servers and relays are all on loopback. All servers share one key file, so the client pins one fingerprint. Rounds
are interleaved (1, 2, 3 servers, then again); each run gets a fresh destination, is checked
against the source manifest and deleted outside the clock. The report gives the median time
and rate per server count, the rate against one server, and against the caps' sum. With
`--old-sprat OLD`, OLD runs every cell too, right after the build under test, against servers of
its own (three more namespaces), and the report compares the two."""

from __future__ import annotations

import json
import os
import subprocess
import time

from . import proc, report, servers, stats, verify
from . import sets as setsmod


def start_spread_servers(h, n: int, export: str, rate: str, bin: str, tag: str) -> tuple[list[str], str]:
    """`n` servers of binary `bin` over `export`, each in its namespace (named after `tag`)
    behind a capped relay: their relay addresses and the fingerprint they share."""
    key = os.path.join(h.tmp, f"{tag}-server.key")
    addrs, fingerprint = [], ""
    for k in range(n):
        if h.plan.servers_on == "loopback":
            prefix, out_ip, listen = [], "127.0.0.1", "127.0.0.1:0"
        else:
            ns, out_ip, in_ip = servers.veth_namespace(h, k, tag)
            prefix, listen = ["ip", "netns", "exec", ns], f"{in_ip}:7400"
        log = os.path.join(h.logs, f"{tag}-serve-{k}")
        p = h.procs.start(prefix + [bin, "serve", "--root", export, "--listen", listen, "--token-file",
                                    h.token_file, "--key-file", key], log=log, env=h.sprat_env)
        lines = proc.wait_line(log + ".out", "listening on ", p, lines=2)
        if len(lines) < 2 or not lines[1].startswith("fingerprint "):
            raise servers.StartError(f"sprat serve in {ns} did not start: {proc.tail(log + '.err')}")
        fingerprint = lines[1].split(" ", 1)[1]
        to = lines[0].split()[-1]
        rlog = os.path.join(h.logs, f"{tag}-relay-{k}")
        r = h.procs.start([h.sprat, "relay", "--listen", f"{out_ip}:0", "--to", to, "--rate", rate],
                          log=rlog, env=h.sprat_env)
        got = proc.wait_line(rlog + ".out", "listening on ", r)
        if not got:
            raise servers.StartError(f"sprat relay to {ns} did not start: {proc.tail(rlog + '.err')}")
        addrs.append(got[0].split()[-1])
    return addrs, fingerprint


def run_servers(h) -> str:
    p = h.plan
    name = p.sets[0]
    ds = setsmod.resolve_set(name, quick=p.quick, seed=p.seed, tree=p.tree, tree_files=p.tree_files)
    ready = setsmod.ensure(ds, h.root, h.meta, h.sprat, h.log, refresh=p.refresh)
    manifest = verify.load_manifest(ready.manifest)
    # The servers export the harness root: the set is there, and so are the push destinations.
    export = h.root
    os.makedirs(os.path.join(export, h.dst_rel_base), exist_ok=True)
    set_rel = os.path.relpath(ready.path, export)
    builds = [("sprat", h.sprat)] + ([("sprat-old", p.old_sprat)] if p.old_sprat else [])
    started = {name: start_spread_servers(h, 3, export, p.rate, bin, tag)
               for (name, bin), tag in zip(builds, ("spread", "oldspread"))}
    counts = (1, 2, 3)
    rows = []  # (build, mode, servers, round, seconds, bytes/s, check, per-server files)
    for rnd in range(1, p.rounds + 1):
        for mode in p.modes:
            for n in counts:
                for build, bin in builds:
                    addrs, fp = started[build]
                    rel = f"{h.dst_rel_base}/{mode}-r{rnd}-n{n}-{build}"
                    dst = os.path.join(export, rel)
                    servers_url = f"sprat://{','.join(addrs[:n])}"
                    src, to = (ready.path, f"{servers_url}/{rel}") if mode == "push" else \
                        (f"{servers_url}/{set_rel}", dst)
                    cmd = [bin, "cp", "--json", "--server-fingerprint", fp, src, to]
                    t0 = time.monotonic()
                    res = subprocess.run(cmd, capture_output=True, text=True,
                                         env=dict(h.sprat_env, SPRAT_TOKEN=h.token))
                    subprocess.run(["sync"])
                    took = time.monotonic() - t0
                    c = verify.check(manifest, dst, p.verify) if res.returncode == 0 else \
                        verify.Check("FAIL", 0, 0, res.stderr.strip()[-200:])
                    shares = ""
                    try:
                        shares = " / ".join(str(s["files"]) for s in json.loads(res.stdout).get("servers", [])) or "-"
                    except ValueError:
                        pass
                    rows.append((build, mode, n, rnd, took, ready.bytes / took, c.status, shares))
                    h.log(f"round {rnd}, {build}, {mode}, {n} server(s): {took:.2f} s, "
                          f"{ready.bytes / took / 1e6:.1f} MB/s, {c.status} {c.detail} (files per server {shares})")
                    h.disposer.keep(dst, ready.bytes, h.log)
    with open(os.path.join(h.outdir, "runs.csv"), "w") as f:
        f.write("build,mode,servers,round,seconds,bytes_per_s,check,files_per_server\n")
        for build, mode, n, rnd, took, rate, check, shares in rows:
            f.write(f"{build},{mode},{n},{rnd},{took:.3f},{rate:.0f},{check},{shares}\n")
    cap = (report.rate_bits(p.rate) or 0) / 8
    where = ("Each server on loopback" if p.servers_on == "loopback"
             else "Each server in a network namespace of its own behind a veth pair")
    out = [f"Set {name}: {ready.files} files, {ready.bytes} bytes. {where} "
           f"and `sprat relay --rate {p.rate}` ({cap / 1e6:.1f} MB/s per server); every server "
           "exports the same directory. Median of the rounds; time until the data is on disk (sync in the clock)."
           + (" `sprat-old` is the build given with --old-sprat, with servers of its own." if p.old_sprat else ""),
           "", "| build | copy | servers | median s | min-max s | MB/s | rate vs 1 server | rate / sum of caps "
           "| files per server (last round) | check |",
           "|---|---|--:|--:|--|--:|--:|--:|--|--|"]
    for mode in p.modes:
        for build, _ in builds:
            one = stats.median(r[4] for r in rows if r[:3] == (build, mode, 1))
            for n in counts:
                mine = [r for r in rows if r[:3] == (build, mode, n)]
                med = stats.median(r[4] for r in mine)
                spread_s = f"{min(r[4] for r in mine):.2f}-{max(r[4] for r in mine):.2f}"
                rate = ready.bytes / med if med else float("nan")
                vs = one / med if med and one else float("nan")
                of_cap = rate / (cap * n) if cap else float("nan")
                checks = ",".join(sorted({r[6] for r in mine}))
                out.append(f"| {build} | {mode} | {n} | {med:.2f} | {spread_s} | {rate / 1e6:.1f} | {vs:.2f} "
                           f"| {of_cap:.2f} | {mine[-1][7]} | {checks} |")
    return "\n".join(out) + "\n"
