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
