"""The `servers` suite: one push (or pull) spread over 1, 2 and 3 servers that export the same directory.

Each server runs in a network namespace of its own, joined to the client's by a veth pair,
and the client reaches it through `sprat relay --rate RATE` on the outside address (one capped
link per server). All servers share one key file, so the client pins one fingerprint. Rounds
are interleaved (1, 2, 3 servers, then again); each run gets a fresh destination, is checked
against the source manifest and deleted outside the clock. The report gives the median time
and rate per server count, the rate against one server, and against the caps' sum."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time

from . import proc, report, servers, stats, verify
from . import sets as setsmod


def start_spread_servers(h, n: int, export: str, rate: str) -> tuple[list[str], str]:
    """`n` servers over `export`, each in its namespace behind a capped relay: their relay
    addresses and the fingerprint they share."""
    key = os.path.join(h.tmp, "spread-server.key")
    addrs, fingerprint = [], ""
    for k in range(n):
        ns, out_ip, in_ip = servers.veth_namespace(h, k, "spread")
        log = os.path.join(h.logs, f"spread-serve-{k}")
        p = h.procs.start(["ip", "netns", "exec", ns, h.sprat, "serve", "--root", export, "--listen",
                           f"{in_ip}:7400", "--token-file", h.token_file, "--key-file", key], log=log,
                          env=h.sprat_env)
        lines = proc.wait_line(log + ".out", "listening on ", p, lines=2)
        if len(lines) < 2 or not lines[1].startswith("fingerprint "):
            raise servers.StartError(f"sprat serve in {ns} did not start: {proc.tail(log + '.err')}")
        fingerprint = lines[1].split(" ", 1)[1]
        rlog = os.path.join(h.logs, f"spread-relay-{k}")
        r = h.procs.start([h.sprat, "relay", "--listen", f"{out_ip}:0", "--to", f"{in_ip}:7400", "--rate", rate],
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
    addrs, fp = start_spread_servers(h, 3, export, p.rate)
    counts = (1, 2, 3)
    rows = []  # (mode, servers, round, seconds, bytes/s, check, per-server files)
    for rnd in range(1, p.rounds + 1):
        for mode in p.modes:
            for n in counts:
                rel = f"{h.dst_rel_base}/{mode}-r{rnd}-n{n}"
                dst = os.path.join(export, rel)
                servers_url = f"sprat://{','.join(addrs[:n])}"
                src, to = (ready.path, f"{servers_url}/{rel}") if mode == "push" else (f"{servers_url}/{set_rel}", dst)
                cmd = [h.sprat, "cp", "--json", "--server-fingerprint", fp, src, to]
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
                rows.append((mode, n, rnd, took, ready.bytes / took, c.status, shares))
                h.log(f"round {rnd}, {mode}, {n} server(s): {took:.2f} s, {ready.bytes / took / 1e6:.1f} MB/s, "
                      f"{c.status} {c.detail} (files per server {shares})")
                shutil.rmtree(dst, ignore_errors=True)
    with open(os.path.join(h.outdir, "runs.csv"), "w") as f:
        f.write("mode,servers,round,seconds,bytes_per_s,check,files_per_server\n")
        for mode, n, rnd, took, rate, check, shares in rows:
            f.write(f"{mode},{n},{rnd},{took:.3f},{rate:.0f},{check},{shares}\n")
    cap = (report.rate_bits(p.rate) or 0) / 8
    out = [f"Set {name}: {ready.files} files, {ready.bytes} bytes. Each server in a network namespace of its own "
           f"behind a veth pair and `sprat relay --rate {p.rate}` ({cap / 1e6:.1f} MB/s per server); every server "
           "exports the same directory. Median of the rounds; time until the data is on disk (sync in the clock).",
           "", "| copy | servers | median s | MB/s | rate vs 1 server | rate / sum of caps | files per server (last round) | check |",
           "|---|--:|--:|--:|--:|--:|--|--|"]
    for mode in p.modes:
        one = stats.median(r[3] for r in rows if r[0] == mode and r[1] == 1)
        for n in counts:
            mine = [r for r in rows if r[0] == mode and r[1] == n]
            med = stats.median(r[3] for r in mine)
            rate = ready.bytes / med if med else float("nan")
            vs = one / med if med and one else float("nan")
            of_cap = rate / (cap * n) if cap else float("nan")
            checks = ",".join(sorted({r[5] for r in mine}))
            out.append(f"| {mode} | {n} | {med:.2f} | {rate / 1e6:.1f} | {vs:.2f} | {of_cap:.2f} | {mine[-1][6]} | {checks} |")
    return "\n".join(out) + "\n"
