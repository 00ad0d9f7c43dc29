#!/usr/bin/env python3
"""How right is a copy's time-left estimate early on? (issue 17, point 1)

Copies two sets -- `a`: 20,000 small files then 20 large ones in name order (the order the
copy walks them), `b`: the same files, large ones first (hard links: no extra space) -- with
sprat (local, push and pull over loopback), rsync -a --info=progress2 (local) and rclone copy
(local), all held to the same --bwlimit so that a run takes 20-60 s. Each tool's estimates
are read from its own output as they appear, stamped with the time since the tool started;
for each run and each fraction p of its total time T, the estimate last shown by p*T is
compared with the time really left then: |eta - (T - t)| / (T - t).

Standalone: python3 bench/eta.py --sprat target/release/sprat --data DIR --out DIR
Writes runs.csv (every estimate seen), errors.csv and README.md (the table) into --out.
"""

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

FRACTIONS = (0.10, 0.25, 0.50)


def make_sets(sprat, data, small, small_size, large, large_size):
    """Sets a and b under `data` (made once; b hard-links a's files)."""
    a, b = data / "a", data / "b"
    if (data / "ready").exists():
        return a, b
    shutil.rmtree(data, ignore_errors=True)
    a.mkdir(parents=True)
    gen = lambda n, size, d: subprocess.run(
        [sprat, "gen", "--files", str(n), "--size", size, "--seed", "1", str(d)], check=True,
        stdout=subprocess.DEVNULL)
    gen(small, small_size, a / "1-small")
    gen(large, large_size, a / "2-large")
    for src, dst in (("1-small", "2-small"), ("2-large", "1-large")):
        for root, _, files in os.walk(a / src):
            rel = Path(root).relative_to(a / src)
            (b / dst / rel).mkdir(parents=True, exist_ok=True)
            for f in files:
                os.link(Path(root) / f, b / dst / rel / f)
    (data / "ready").touch()
    return a, b


def stamped_lines(proc, stream, split, out):
    """Reads `stream` of `proc` to the end, appending (seconds since start, line) to out."""
    buf = b""
    while True:
        chunk = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
        if not chunk:
            break
        buf += chunk
        parts = re.split(split, buf)
        buf = parts.pop()
        now = time.monotonic() - proc.started
        out.extend((now, p.decode("utf-8", "replace")) for p in parts if p.strip())
    if buf.strip():
        out.append((time.monotonic() - proc.started, buf.decode("utf-8", "replace")))


def run(cmd, env=None, stream="stdout", split=rb"\n"):
    """Runs cmd; returns (total seconds, [(t, line)]) from the chosen stream."""
    lines = []
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    proc.started = time.monotonic()
    other = proc.stderr if stream == "stdout" else proc.stdout
    keep = []
    drain = threading.Thread(target=lambda: keep.append(other.read()))
    drain.start()
    stamped_lines(proc, proc.stdout if stream == "stdout" else proc.stderr, split, lines)
    proc.wait()
    total = time.monotonic() - proc.started
    drain.join()
    if proc.returncode != 0:
        sys.exit(f"{cmd[0]} failed ({proc.returncode}): {keep[0][-2000:]!r}")
    return total, lines


def sprat_etas(lines):
    out = []
    for t, line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "progress":
            out.append((t, e.get("eta_s"), e.get("files_done"), e.get("bytes_done")))
    return out


RSYNC = re.compile(r"^\s*[\d,]+\s+\d+%\s+\S+\s+(\d+):(\d\d):(\d\d)(.*)$")


def rsync_etas(lines):
    """rsync's progress2 lines: the time is what is left, except on a line that ends a file
    (`xfr#`), where it is the time the transfer took so far."""
    out = []
    for t, line in lines:
        m = RSYNC.match(line)
        if m and "xfr#" not in m.group(4):
            h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
            out.append((t, h * 3600 + mi * 60 + s, None, None))
    return out


def rclone_etas(lines):
    out = []
    for t, line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        stats = e.get("stats")
        if isinstance(stats, dict) and "eta" in stats:
            out.append((t, stats["eta"], stats.get("transfers"), stats.get("bytes")))
    return out


def errors(total, etas):
    """For each fraction: the relative error of the estimate last shown by then (None: none)."""
    res = {}
    for p in FRACTIONS:
        at = p * total
        shown = [(t, e) for t, e, _, _ in etas if t <= at]
        if not shown or shown[-1][1] is None:
            res[p] = None
            continue
        t, eta = shown[-1]
        left = total - t
        res[p] = abs(eta - left) / left
    return res


class Server:
    """`sprat serve` on loopback exporting `root` (killed by its PID on stop)."""

    def __init__(self, sprat, root, token_file):
        self.proc = subprocess.Popen(
            [sprat, "serve", "--root", str(root), "--listen", "127.0.0.1:0",
             "--token-file", str(token_file), "--no-encryption",
             "--key-file", str(Path(token_file).parent / "server.key")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = self.proc.stdout.readline().decode()
        self.addr = line.strip().removeprefix("listening on ")

    def stop(self):
        self.proc.kill()
        self.proc.wait()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sprat", required=True)
    ap.add_argument("--data", required=True, type=Path, help="where the sets are (made if missing)")
    ap.add_argument("--scratch", type=Path, help="destinations (default: beside --data)")
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rate-mib", type=float, default=48.0, help="every tool's bandwidth limit, MiB/s")
    ap.add_argument("--small", type=int, default=20000)
    ap.add_argument("--small-size", default="16KiB")
    ap.add_argument("--large", type=int, default=20)
    ap.add_argument("--large-size", default="64MiB")
    ap.add_argument("--tools", default="sprat-local,sprat-push,sprat-pull,rsync-local,rclone-local")
    ap.add_argument("--orders", default="a,b")
    args = ap.parse_args()
    sprat = str(Path(args.sprat).resolve())
    data = args.data.resolve()
    a, b = make_sets(sprat, data, args.small, args.small_size, args.large, args.large_size)
    sets = {"a": a, "b": b}
    scratch = (args.scratch or data.parent / (data.name + "-dst")).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix="sprat-eta-"))
    token = private / "token"
    token.write_text("eta-bench-token-0123456789\n")
    os.chmod(token, 0o600)
    rate = f"{args.rate_mib}MiB/s"
    client = [sprat, "cp", "--token-file", str(token), "--no-encryption",
              "--known-servers", str(private / "known"), "--json-events", "--bwlimit", rate]
    rows, table = [], []
    for order in args.orders.split(","):
        src = sets[order]
        for tool in args.tools.split(","):
            shutil.rmtree(scratch, ignore_errors=True)
            scratch.mkdir(parents=True)
            dst = scratch / "dst"
            server = None
            if tool == "sprat-local":
                total, lines = run(client + [str(src), str(dst)])
                etas = sprat_etas(lines)
            elif tool == "sprat-push":
                server = Server(sprat, scratch, token)
                total, lines = run(client + [str(src), f"sprat://{server.addr}/dst"])
                etas = sprat_etas(lines)
            elif tool == "sprat-pull":
                server = Server(sprat, src.parent, token)
                total, lines = run(client + [f"sprat://{server.addr}/{src.name}", str(dst)])
                etas = sprat_etas(lines)
            elif tool == "rsync-local":
                kib = int(args.rate_mib * 1024)
                total, lines = run(["rsync", "-a", "--info=progress2", f"--bwlimit={kib}",
                                    f"{src}/", f"{dst}/"], split=rb"[\r\n]")
                etas = rsync_etas(lines)
            elif tool == "rclone-local":
                total, lines = run(["rclone", "copy", str(src), str(dst), "--bwlimit",
                                    f"{args.rate_mib}M", "--stats", "1s", "--stats-one-line", "-v",
                                    "--use-json-log"], stream="stderr")
                etas = rclone_etas(lines)
            else:
                sys.exit(f"unknown tool {tool}")
            if server:
                server.stop()
            errs = errors(total, etas)
            for t, e, files, nbytes in etas:
                rows.append((tool, order, f"{total:.2f}", f"{t:.2f}", "" if e is None else e,
                             "" if files is None else files, "" if nbytes is None else nbytes))
            table.append((tool, order, total, errs))
            show = "  ".join(f"{int(p*100)}%: " + ("-" if v is None else f"{v:.0%}") for p, v in errs.items())
            print(f"{tool:13} order {order}  {total:5.1f} s  {show}", flush=True)
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.rmtree(private, ignore_errors=True)
    with open(args.out / "runs.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("tool", "order", "total_s", "t_s", "eta_s", "files_done", "bytes_done"))
        w.writerows(rows)
    with open(args.out / "errors.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(("tool", "order", "total_s") + tuple(f"err_at_{int(p*100)}" for p in FRACTIONS))
        for tool, order, total, errs in table:
            w.writerow((tool, order, f"{total:.2f}") + tuple("" if v is None else f"{v:.3f}" for v in errs.values()))
    with open(args.out / "table.md", "w") as f:
        f.write("| tool | order | direction | run (s) | ETA error at 10% | at 25% | at 50% |\n")
        f.write("|---|---|---|---|---|---|---|\n")
        for tool, order, total, errs in table:
            name, direction = tool.split("-")
            cells = " | ".join("none shown" if v is None else f"{v:.0%}" for v in errs.values())
            label = "small then large" if order == "a" else "large then small"
            f.write(f"| {name} | {label} | {direction} | {total:.1f} | {cells} |\n")


if __name__ == "__main__":
    main()
