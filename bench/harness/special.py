"""Suites that are not copies of data sets by tools: `overhead` (the per-file overhead fit of
`sprat bench overhead`, repeated, tabled and drawn) and `relaycheck` (`sprat relay` against
the theory: the RTT `sprat doctor` sees and iperf3 throughput of N streams against
min(N x window / RTT, cap)). Both write into bench/results/SUITE-STAMP/ as the others do."""

from __future__ import annotations

import json
import os
import statistics
import subprocess

from . import proc, report, servers

SUBS = [("read", "read"), ("network", "network (memory to memory)"), ("write", "write"),
        ("end_to_end", "end to end (push over loopback)")]


def _last_json(text: str) -> dict:
    for line in reversed(text.splitlines()):
        try:
            obj = json.loads(line)
            if isinstance(obj, dict):
                return obj
        except ValueError:
            continue
    raise ValueError("no JSON object in the output")


def overhead_tables(reports: list[dict]) -> str:
    """Markdown of the fits (medians over the runs), the measured points and the predictions."""
    def med(xs):
        return statistics.median(xs) if xs else None

    out = [f"Fit of T = N x t0 + B / R (B = {reports[0]['total_bytes']} bytes in every set), medians of "
           f"{len(reports)} run(s):", "", "| subsystem | t0 per file | rate | r2 | fitted runs |", "|---|--:|--:|--:|--:|"]
    for key, name in SUBS:
        fits = [r[key] for r in reports if r.get(key)]
        if not fits:
            out.append(f"| {name} | - | - | - | 0/{len(reports)} |")
            continue
        out.append(f"| {name} | {med([f['t0_s'] * 1e6 for f in fits]):.1f} us | "
                   f"{med([f['rate_bytes_per_s'] / 1e6 for f in fits]):.0f} MB/s | {med([f['r2'] for f in fits]):.3f} | "
                   f"{len(fits)}/{len(reports)} |")
    points = sorted({run["files"] for r in reports for run in r["runs"]})
    out += ["", "Measured points (seconds, medians):", "", "| N files | " + " | ".join(n for _, n in SUBS) + " |",
            "|--:|" + "--:|" * len(SUBS)]
    for n in points:
        cells = []
        for key, _ in SUBS:
            secs = [run["seconds"] for r in reports for run in r["runs"] if run["subsystem"] == key and run["files"] == n]
            cells.append(f"{med(secs):.3f}" if secs else "-")
        out.append(f"| {n} | " + " | ".join(cells) + " |")
    preds = [p for r in reports for p in r.get("predictions", [])]
    if preds:
        out += ["", "The pipeline model from the fitted subsystems against the measured end to end:", "",
                "| N files | predicted s | measured s | measured / predicted |", "|--:|--:|--:|--:|"]
        for files, pred, meas in preds:
            out.append(f"| {files} | {pred:.3f} | {meas:.3f} | {meas / pred if pred else float('nan'):.2f} |")
    return "\n".join(out) + "\n"


def run_overhead(h, rounds: int, total: str = "256MiB", points: str = "1000,4000,16000,64000") -> str:
    work = os.path.join(h.data_dir, f"overhead-{h.stamp}")
    drop = ["--drop-caches"] if "cold" in h.plan.caches else []
    reports = []
    for r in range(1, rounds + 1):
        cmd = [h.sprat, "bench", "overhead", "--dir", work, "--total", total, "--points", points, *drop, "--json"]
        h.log(f"run {r}/{rounds}: {' '.join(cmd)}")
        subprocess.run(["rm", "-rf", work])
        res = subprocess.run(cmd, capture_output=True, text=True, env=h.sprat_env)
        subprocess.run(["rm", "-rf", work])
        if res.returncode != 0:
            raise SystemExit(f"bench/run overhead: sprat bench overhead failed: {res.stderr.strip()[-400:]}")
        reports.append(_last_json(res.stdout))
    with open(os.path.join(h.outdir, "reports.json"), "w") as f:
        json.dump(reports, f, indent=1)
    md = overhead_tables(reports)
    why = _plot_overhead(reports, os.path.join(h.outdir, "plot.png"))
    return md + ("\n![plot](plot.png)\n" if why is None else f"\n(no plot: {why})\n")


def _plot_overhead(reports: list[dict], path: str):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no matplotlib"
    colors = {"read": "tab:blue", "network": "tab:green", "write": "tab:orange", "end_to_end": "tab:red"}
    fig, ax = plt.subplots(figsize=(8, 5.5))
    for key, name in SUBS:
        runs = [run for r in reports for run in r["runs"] if run["subsystem"] == key]
        if not runs:
            continue
        ax.plot([x["files"] for x in runs], [x["seconds"] for x in runs], "o", color=colors[key])
        fit = reports[0].get(key)
        if fit:
            b = sum(x["bytes"] for x in runs) / len(runs)
            nmax = max(x["files"] for x in runs) * 1.05
            ax.plot([0, nmax], [b / fit["rate_bytes_per_s"], nmax * fit["t0_s"] + b / fit["rate_bytes_per_s"]], "-",
                    color=colors[key], label=f"{name}: t0 {fit['t0_s'] * 1e6:.1f} us, R {fit['rate_bytes_per_s'] / 1e6:.0f} MB/s")
    ax.set_xlabel("files N (same total size)")
    ax.set_ylabel("seconds")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def relay_theory(streams: int, window: int, rtt_ms: float, cap_bits: float) -> float:
    """Bytes per second N connections with `window` bytes each can move at `rtt_ms` under a cap."""
    return min(streams * window / (rtt_ms / 1e3), cap_bits / 8)


def run_relaycheck(h, streams=(1, 4, 16), seconds: int = 8, omit: int = 3) -> str:
    """RTT through the relay (sprat doctor) and iperf3 throughput of N streams against the theory."""
    srv = servers.start_sprat(h, 0)
    iport = proc.free_port()
    ip = h.procs.start(["iperf3", "-s", "-B", "127.0.0.1", "-p", str(iport)], log=os.path.join(h.logs, "iperf3"))
    if not proc.wait_listen(iport, ip):
        raise SystemExit("bench/run relaycheck: iperf3 -s did not start (scripts/install-deps.sh installs iperf3)")
    doc = subprocess.run([h.sprat, "doctor", "--json"], capture_output=True, text=True, env=h.sprat_env)
    window = int(json.loads(doc.stdout)["paths"][0]["window_bytes"])
    cap = report.rate_bits(h.plan.rate) or 1e9
    rows = []
    for rtt in [r for r in h.plan.rtts if r is not None]:
        rport, _ = servers.start_relay(h, srv.port, rtt, h.plan.rate)
        d = subprocess.run([h.sprat, "doctor", "--json", f"sprat://127.0.0.1:{rport}/"], capture_output=True,
                           text=True, env=dict(h.sprat_env, SPRAT_TOKEN=h.token))
        try:
            measured = statistics.median(json.loads(d.stdout)["measured_rtt_ms"])
        except (ValueError, KeyError):
            measured = float("nan")
        iperf_relay, _ = servers.start_relay(h, iport, rtt, h.plan.rate)
        for n in streams:
            res = subprocess.run(["iperf3", "-c", "127.0.0.1", "-p", str(iperf_relay), "-P", str(n), "-t", str(seconds),
                                  "-O", str(omit), "-J"], capture_output=True, text=True)
            try:
                got = json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"] / 8
            except (ValueError, KeyError):
                got = float("nan")
            theory = relay_theory(n, window, rtt, cap)
            rows.append((rtt, measured, n, theory, got))
            h.log(f"RTT {rtt:g} ms (measured {measured:.2f}): {n} streams {got / 1e6:.1f} MB/s, theory {theory / 1e6:.1f}")
    with open(os.path.join(h.outdir, "runs.csv"), "w") as f:
        f.write("rtt_ms,measured_rtt_ms,streams,window_bytes,theory_bytes_per_s,measured_bytes_per_s\n")
        for rtt, m, n, t, g in rows:
            f.write(f"{rtt:g},{m:.2f},{n},{window},{t:.0f},{g:.0f}\n")
    out = [f"Relay: `sprat relay --delay RTT/2 --rate {h.plan.rate}` (window {window} bytes per connection); RTT: median "
           "of `sprat doctor sprat://RELAY/`; throughput: `iperf3 -P N -t {seconds} -O {omit}`; theory: "
           "min(N x window / RTT, cap).".replace("{seconds}", str(seconds)).replace("{omit}", str(omit)), "",
           "| RTT ms | measured RTT ms | streams | theory MB/s | iperf3 MB/s | measured / theory |",
           "|--:|--:|--:|--:|--:|--:|"]
    for rtt, m, n, t, g in rows:
        out.append(f"| {rtt:g} | {m:.2f} | {n} | {t / 1e6:.1f} | {g / 1e6:.1f} | {g / t:.2f} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- namespace: the daily script

NS_STEPS = ("copy in", "move", "long recursive listing", "checksum every file (sha256)", "copy out",
            "delete (recursive)")
# One command per step and way (each its own connection and authentication); {u} is the sprat
# URL of the run's server directory, {d} that directory's path, {tree} the source, {out} the
# local copy out, {sumdir} where sftp fetches files to hash them (sftp has no checksum request).
NS_WAYS = {
    "sprat": ("{sprat} cp {conn} {tree} {u}/pkg", "{sprat} mv {conn} {u}/pkg {u}/pkg2",
              "{sprat} ls {conn} -l -R {u}/pkg2", "{sprat} sum {conn} -r --algo sha256 {u}/pkg2",
              "{sprat} cp {conn} {u}/pkg2 {out}", "{sprat} rm {conn} -r {u}/pkg2"),
    "sftp": ("sftp -b {batch1} {ssh_opts} -P {port} root@127.0.0.1", "sftp -b {batch2} {ssh_opts} -P {port} root@127.0.0.1",
             "sftp -b {batch_ls} {ssh_opts} -P {port} root@127.0.0.1",
             "sftp -q -b {batch4} {ssh_opts} -P {port} root@127.0.0.1 >/dev/null && cd {sumdir} && "
             "find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum",
             "sftp -b {batch5} {ssh_opts} -P {port} root@127.0.0.1", "sftp -b {batch_rm} {ssh_opts} -P {port} root@127.0.0.1"),
    "rsync": ("rsync -a -e {ssh_e} {tree}/ root@127.0.0.1:{d}/pkg/", "{ssh} -p {port} root@127.0.0.1 mv {d!q}/pkg {d!q}/pkg2",
              "{ssh} -p {port} root@127.0.0.1 ls -laR {d!q}/pkg2",
              "{ssh} -p {port} root@127.0.0.1 find {d!q}/pkg2 -type f -exec sha256sum {{}} +",
              "rsync -a -e {ssh_e} root@127.0.0.1:{d}/pkg2/ {out}/", "{ssh} -p {port} root@127.0.0.1 rm -rf {d!q}/pkg2"),
}


def sftp_quote(path: str) -> str:
    """A path for an sftp batch file: double quotes, with sftp's glob characters escaped."""
    for c in "\\\"*?[]":
        path = path.replace(c, "\\" + c)
    return f'"{path}"'


def _sha256_map(root: str) -> dict:
    import hashlib

    out = {}
    for d, _, files in os.walk(root):
        for n in files:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                with open(p, "rb") as f:
                    out[os.path.relpath(p, root)] = hashlib.sha256(f.read()).hexdigest()
    return out


def check_sums(text: str, want: dict) -> str:
    """Compare `HASH  PATH` lines (PATH ending in pkg2/REL or ./REL) with the source's sums."""
    import re

    got = {}
    for line in text.splitlines():
        m = re.match(r"^\\?([0-9a-f]{64}) [ *](.*)$", line)
        if not m:
            continue
        p = m.group(2)
        rel = p.split("/pkg2/", 1)[1] if "/pkg2/" in p else (p[2:] if p.startswith("./") else p)
        got[rel] = m.group(1)
    missing = sorted(set(want) - set(got))
    differ = sorted(k for k in set(want) & set(got) if want[k] != got[k])
    bad = ([f"{len(missing)} sums missing (e.g. {missing[0]})"] if missing else []) + (
        [f"{len(differ)} differ (e.g. {differ[0]})"] if differ else [])
    return "; ".join(bad) if bad else "ok"


def run_namespace(h) -> str:
    """The daily script of DESIGN.md section 1 (copy in, move, long recursive listing, checksum
    every file, copy out, recursive delete), each way through `sprat relay` at the plan's RTT."""
    from . import sets as setsmod, stats, tools as toolsmod, verify

    plan = h.plan
    tree = plan.tree or _pick_crate()
    if not tree:
        raise SystemExit("bench/run namespace: no crate of 200-600 files in ~/.cargo/registry/src; give --tree DIR")
    ds = setsmod.resolve_set("tree", tree=tree, tree_files=plan.tree_files or (40 if plan.quick else 0))
    ready = setsmod.ensure(ds, h.root, h.meta, h.sprat, h.log)
    h.log(f"tree {ready.path}: {ready.files} files, {ready.dirs} dirs ({ds.desc})")
    man = verify.load_manifest(ready.manifest)
    sums = _sha256_map(ready.path)
    rtt = next((r for r in plan.rtts if r is not None), 30.0)
    ways = [w for w in plan.tools if w in NS_WAYS] or list(NS_WAYS)
    sprat_srv = servers.start_sprat(h, 0)
    sshd = servers.start_sshd(h, 0) if any(w != "sprat" for w in ways) else None
    rport = {"sprat": servers.start_relay(h, sprat_srv.port, rtt, plan.rate)[0]}
    if sshd:
        rport["ssh"] = servers.start_relay(h, sshd.port, rtt, plan.rate)[0]
    work = os.path.join(h.root, h.dst_rel_base, "namespace")
    dirs = sorted(k for k, v in man.items() if v[0] == "d" and k != ".")
    nondirs = sorted(k for k, v in man.items() if v[0] != "d")
    rows = []
    csv_path = os.path.join(h.outdir, "runs.csv")
    report.write_csv_header(csv_path, ["stamp", "round", "order", "way", "step", "name", "seconds", "exit", "check",
                                       "load1", "note"])
    for rnd in range(1, plan.rounds + 1):
        for order, way in enumerate(stats.rotate(ways, rnd - 1), start=1):
            d = os.path.join(work, f"{way}-r{rnd}")
            out = os.path.join(h.tmp, f"out-{way}-r{rnd}")
            sumdir = os.path.join(h.tmp, f"sums-{way}-r{rnd}")
            os.makedirs(d, exist_ok=True)
            batches = {
                "batch1": f"put -rp {sftp_quote(ready.path)} {sftp_quote(d + '/pkg')}\n",
                "batch2": f"rename {sftp_quote(d + '/pkg')} {sftp_quote(d + '/pkg2')}\n",
                "batch_ls": "".join(f"ls -la {sftp_quote(d + '/pkg2' + ('/' + r if r else ''))}\n" for r in [""] + dirs),
                "batch4": f"get -r {sftp_quote(d + '/pkg2')} {sftp_quote(sumdir)}\n",
                "batch5": f"get -rp {sftp_quote(d + '/pkg2')} {sftp_quote(out)}\n",
                "batch_rm": "".join(f"rm {sftp_quote(d + '/pkg2/' + r)}\n" for r in nondirs)
                + "".join(f"rmdir {sftp_quote(d + '/pkg2/' + r)}\n" for r in sorted(dirs, key=lambda r: (-r.count('/'), r), reverse=False))
                + f"rmdir {sftp_quote(d + '/pkg2')}\n",
            }
            raw = {"sprat": h.sprat, "tree": ready.path, "d": d, "out": out, "sumdir": sumdir,
                   "u": f"sprat://127.0.0.1:{rport['sprat']}/{os.path.relpath(d, h.root)}",
                   "conn": sprat_srv.ctx(0)["conn"], "port": rport.get("ssh", "")}
            verbatim = ["conn"]
            if sshd:
                raw.update(sshd.ctx(rport["ssh"]))
                verbatim += list(sshd.verbatim)
            for k, text in batches.items():
                path = os.path.join(h.tmp, f"{way}-r{rnd}-{k}")
                with open(path, "w") as f:
                    f.write(text)
                raw[k] = path
            ctx = toolsmod.quote_ctx(raw, tuple(verbatim))
            env = dict(h.sprat_env, **sprat_srv.env)
            total = 0.0
            for step, tmpl in enumerate(NS_WAYS[way], start=1):
                cmd = toolsmod.expand(tmpl, ctx)
                base = os.path.join(h.logs, f"ns-{way}-r{rnd}-s{step}")
                with open(base + ".cmd", "w") as f:
                    f.write(cmd + "\n")
                t = proc.run_timed(cmd, out=base + ".out", err=base + ".err", env=env, timeout=plan.timeout)
                total += t.seconds
                check = _ns_check(step, t.rc, base, d, out, man, sums, ready.files)
                row = {"stamp": h.stamp, "round": rnd, "order": order, "way": way, "step": step,
                       "name": NS_STEPS[step - 1], "seconds": round(t.seconds, 4), "exit": t.rc,
                       "check": "ok" if check == "ok" else "FAIL", "load1": os.getloadavg()[0],
                       "note": "" if check == "ok" else check}
                rows.append(row)
                report.append_csv(csv_path, list(row), row)
                h.log(f"{way:<6} r{rnd} step {step} {NS_STEPS[step - 1]:<30} {t.seconds:8.3f} s {row['check']} {row['note'][:120]}")
            rows.append({"round": rnd, "way": way, "step": "total", "seconds": total, "check": "ok"})
            subprocess.run(["rm", "-rf", d, out, sumdir])
    return _ns_table(rows, ways, rtt, ready)


def _pick_crate():
    root = os.path.expanduser("~/.cargo/registry/src")
    if not os.path.isdir(root):
        return None
    cands = []
    for reg in sorted(os.listdir(root)):
        for c in sorted(os.listdir(os.path.join(root, reg))):
            cands.append(os.path.join(root, reg, c))
    for prefix in ("tokio-", "rustix-", ""):
        for c in cands:
            if os.path.basename(c).startswith(prefix):
                n = sum(len(f) for _, _, f in os.walk(c))
                if 200 <= n <= 600:
                    return c
    return None


def _ns_check(step, rc, base, d, out, man, sums, nfiles) -> str:
    from . import verify

    if rc != 0:
        try:
            with open(base + ".err", errors="replace") as f:
                tail = " | ".join(f.read().splitlines()[-2:])
        except OSError:
            tail = ""
        return f"exit {rc}: {tail}"
    if step == 1:
        c = verify.check(man, os.path.join(d, "pkg"), "count")
        return "ok" if c.status != "FAIL" else c.detail
    if step == 2:
        return "ok" if os.path.isdir(os.path.join(d, "pkg2")) and not os.path.exists(os.path.join(d, "pkg")) else "not moved"
    if step == 3:
        with open(base + ".out", errors="replace") as f:
            n = sum(1 for _ in f)
        return "ok" if n >= nfiles else f"listing has {n} lines for {nfiles} files"
    if step == 4:
        with open(base + ".out", errors="replace") as f:
            return check_sums(f.read(), sums)
    if step == 5:
        c = verify.check(man, out, "full")
        return "ok" if c.status != "FAIL" else c.detail
    return "ok" if not os.path.exists(os.path.join(d, "pkg2")) else "pkg2 still there"


def _ns_table(rows, ways, rtt, ready) -> str:
    from . import stats

    steps = [1, 2, 3, 4, 5, 6, "total"]
    names = dict(enumerate(NS_STEPS, start=1), total="all six steps")
    med = {}
    for w in ways:
        for s in steps:
            med[w, s] = stats.median(float(r["seconds"]) for r in rows
                                     if r["way"] == w and r["step"] == s and r.get("check") == "ok")
    others = [w for w in ways if w != "sprat"]
    out = [f"Tree: {ready.path} ({ready.files} files, {ready.dirs} directories); every way through `sprat relay` at "
           f"{rtt:g} ms RTT; each step one command with its own connection and authentication; medians.", "",
           "| step | " + " | ".join(f"{w} s" for w in ways) + " | " + " | ".join(f"{w} / sprat" for w in others) + " |",
           "|---|" + "--:|" * (len(ways) + len(others))]
    for s in steps:
        out.append(f"| {s}. {names[s]} | " if s != "total" else "| total | ")
        out[-1] += " | ".join(stats.fmt_secs(med[w, s]) for w in ways)
        if others:
            out[-1] += " | " + " | ".join(stats.fmt_ratio(stats.ratio(med[w, s], med.get(("sprat", s)))) for w in others)
        out[-1] += " |"
    if "sprat" in ways:
        out += ["", "Round trips per sprat step (time / RTT): " + ", ".join(
            f"{s}: {med['sprat', s] * 1000 / rtt:.1f}" for s in steps if med.get(("sprat", s)))]
    bad = [r for r in rows if r.get("check") == "FAIL"]
    if bad:
        out += ["", "Failures:", ""] + [f"- {r['way']} round {r['round']} step {r['step']}: {r['note']}" for r in bad]
    return "\n".join(out) + "\n"
