#!/usr/bin/env python3
"""Does live progress slow a copy down? (issue 17, point 1: the count of the source runs beside
the copy.) Paired runs of a fresh copy of many small files -- local, and a push over loopback
-- without progress and with `--progress` (the count and the display; stderr to /dev/null),
in alternating order; prints each pair and the median time and median ratio.

Standalone: python3 bench/progress_overhead.py --sprat target/release/sprat --data DIR
(DIR gets 100,000 files of 4 KiB, made once with `sprat gen`.)
"""

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path


def timed(cmd):
    """(wall seconds, CPU seconds of the client: user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.monotonic()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.monotonic() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sprat", required=True)
    ap.add_argument("--data", required=True, type=Path)
    ap.add_argument("--files", type=int, default=100_000)
    ap.add_argument("--size", default="4KiB")
    ap.add_argument("--pairs", type=int, default=5)
    ap.add_argument("--modes", default="local,push")
    args = ap.parse_args()
    sprat = str(Path(args.sprat).resolve())
    src = args.data.resolve() / "src"
    if not (args.data / "ready").exists():
        shutil.rmtree(args.data, ignore_errors=True)
        subprocess.run([sprat, "gen", "--files", str(args.files), "--size", args.size, "--seed", "1",
                        str(src)], check=True, stdout=subprocess.DEVNULL)
        (args.data / "ready").touch()
    dst_root = args.data.resolve() / "dst"
    private = Path(tempfile.mkdtemp(prefix="sprat-overhead-"))
    token = private / "token"
    token.write_text("overhead-bench-token\n")
    os.chmod(token, 0o600)
    server = None
    for mode in args.modes.split(","):
        if mode == "push":
            dst_root.mkdir(parents=True, exist_ok=True)
            server = subprocess.Popen(
                [sprat, "serve", "--root", str(dst_root), "--listen", "127.0.0.1:0", "--token-file",
                 str(token), "--key-file", str(private / "server.key")],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            addr = server.stdout.readline().decode().strip().removeprefix("listening on ")
            dst = f"sprat://{addr}/d"
            base = [sprat, "cp", "--token-file", str(token), "--known-servers", str(private / "known")]
        else:
            dst = str(dst_root / "d")
            base = [sprat, "cp"]
        times = {"off": [], "on": []}
        cpu = {"off": [], "on": []}
        for i in range(args.pairs):
            order = ("off", "on") if i % 2 == 0 else ("on", "off")
            for which in order:
                shutil.rmtree(dst_root / "d", ignore_errors=True)
                extra = ["--progress"] if which == "on" else []
                wall, used = timed(base + extra + [str(src), dst])
                times[which].append(wall)
                cpu[which].append(used)
            print(f"{mode} pair {i + 1}: off {times['off'][-1]:.2f} s ({cpu['off'][-1]:.2f} s CPU), "
                  f"on {times['on'][-1]:.2f} s ({cpu['on'][-1]:.2f} s CPU)", flush=True)
        ratios = [on / off for on, off in zip(times["on"], times["off"])]
        print(f"{mode}: median off {statistics.median(times['off']):.2f} s, on "
              f"{statistics.median(times['on']):.2f} s, median ratio on/off "
              f"{statistics.median(ratios):.3f} (min {min(ratios):.3f}, max {max(ratios):.3f}); client CPU "
              f"median off {statistics.median(cpu['off']):.2f} s, on {statistics.median(cpu['on']):.2f} s, "
              f"median ratio {statistics.median([a / b for a, b in zip(cpu['on'], cpu['off'])]):.3f}", flush=True)
        if server:
            server.kill()
            server.wait()
            server = None
    shutil.rmtree(dst_root, ignore_errors=True)
    shutil.rmtree(private, ignore_errors=True)


if __name__ == "__main__":
    main()
