"""The entry point behind `bench/run`: parse the command line, enter a private network
namespace (`unshare -n`, loopback only) when the suite talks over the network, run the rounds
and write bench/results/SUITE-STAMP/{runs.csv,report.md,plot.png,command.txt}."""

from __future__ import annotations

import datetime
import hashlib
import os
import platform
import shlex
import signal
import subprocess
import sys
import time

from . import report, runner, stats, suites, tools as toolsmod

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def _git(*args: str) -> str:
    r = subprocess.run(["git", "-C", REPO, *args], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else ""


def commit_desc() -> str:
    rev = _git("rev-parse", "--short", "HEAD") or "no commit"
    if _git("status", "--porcelain", "--untracked-files=no"):
        rev += " + uncommitted changes"
    return rev


def binary_desc(path: str) -> str:
    try:
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()[:12]
        ver = subprocess.run([path, "--version"], capture_output=True, text=True).stdout.strip()
        built = datetime.datetime.fromtimestamp(os.path.getmtime(path)).strftime("%F %T")
        return f"{path} ({ver}), built {built}, sha256 {digest}"
    except OSError as e:
        return f"{path} ({e})"


def machine_desc(path: str) -> str:
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), "")
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / 1048576
    except (OSError, ValueError, StopIteration):
        mem = 0
    fs = subprocess.run(["findmnt", "-no", "SOURCE,FSTYPE,OPTIONS", "-T", path], capture_output=True,
                        text=True).stdout.strip()
    return (f"{os.cpu_count()} CPUs ({cpu}), {mem:.1f} GiB memory, kernel {platform.release()}; "
            f"disk of {path}: {' '.join(fs.split())}")


def enter_netns(argv: list[str]) -> None:
    """Re-run this command in a network namespace of its own (only `lo`, brought up), so that
    other processes' traffic is not on the loopback the benchmark uses."""
    env = dict(os.environ, SPRAT_HARNESS_NETNS="1")
    inner = "ip link set lo up && exec \"$0\" \"$@\""
    cmd = ["unshare", "-n", "--", "sh", "-c", inner, sys.executable, "-c",
           "import sys; sys.path.insert(0, sys.argv[1]); from harness.cli import main; sys.exit(main(sys.argv[2:]))",
           os.path.join(REPO, "bench"), *argv]
    os.execvpe("unshare", cmd, env)


def main(argv: list[str]) -> int:
    plan = suites.parse(argv, REPO)
    if plan.dry_run:
        print(describe(plan))
        return 0
    if plan.netns and os.environ.get("SPRAT_HARNESS_NETNS") != "1":
        if os.geteuid() == 0 and shutil_which("unshare"):
            enter_netns(argv)
        log("warning: not root (or no unshare): running in the host's network namespace")
    def stopped(signum, _frame):
        log(f"stopped by {signal.Signals(signum).name}")
        sys.exit(128 + signum)

    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, stopped)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    outdir = os.path.join(plan.results_dir, f"{plan.suite.name}-{stamp}")
    h = runner.Harness(plan, REPO, stamp, log, outdir)
    csv_path = os.path.join(outdir, "runs.csv")
    load0 = os.getloadavg()
    t0 = time.monotonic()
    if plan.suite.special:
        return run_special(h, argv, stamp, outdir, load0)
    try:
        h.setup()
        with open(os.path.join(outdir, "command.txt"), "w") as f:
            f.write(command_line(argv) + "\n")
        report.write_csv_header(csv_path, runner.CSV_FIELDS)

        def write_row(row: dict) -> None:
            h.rows.append(row)
            report.append_csv(csv_path, runner.CSV_FIELDS, row)

        h.run(write_row)
    except KeyboardInterrupt:
        log("interrupted: the report covers the runs done so far")
    finally:
        h.stop()
    # The report before the copies are deleted: that takes minutes on a disk with `discard`.
    try:
        if not h.rows:
            return 1
        md = write_report(h, argv, stamp, outdir, load0, time.monotonic() - t0)
        print(md)
        log(f"results in {outdir}")
        return 0 if all(r.get("check") != "FAIL" for r in h.rows) else 1
    finally:
        h.dispose()


def run_special(h: runner.Harness, argv: list[str], stamp: str, outdir: str, load0) -> int:
    from . import special

    t0 = time.monotonic()
    try:
        h.setup_base()
        with open(os.path.join(outdir, "command.txt"), "w") as f:
            f.write(command_line(argv) + "\n")
        if h.plan.suite.name == "resume":
            from . import resume

            body = resume.run_resume(h)
        elif h.plan.suite.name == "eta":
            from . import progress

            body = progress.run_eta(h)
        elif h.plan.suite.name == "servers":
            from . import spread

            body = spread.run_servers(h)
        elif h.plan.suite.name == "namespace":
            body = special.run_namespace(h)
        elif h.plan.suite.name == "overhead":
            if h.plan.quick:
                body = special.run_overhead(h, h.plan.rounds, total="32MiB", points="500,2000")
            else:
                body = special.run_overhead(h, h.plan.rounds)
        else:
            body = special.run_relaycheck(h, streams=(1, 4) if h.plan.quick else (1, 4, 16),
                                          seconds=3 if h.plan.quick else 8, omit=1 if h.plan.quick else 3)
    finally:
        h.close()
    md = "\n".join(header(h, argv, stamp, load0, time.monotonic() - t0)) + "\n" + body
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(md)
    print(md)
    log(f"results in {outdir}")
    return 0


def header(h: runner.Harness, argv: list[str], stamp: str, load0, elapsed: float) -> list[str]:
    plan = h.plan
    load1 = os.getloadavg()
    return [f"# {plan.suite.name}: {plan.suite.doc}", "",
            "```sh", command_line(argv), "```", "",
            f"- stamp {stamp}; sprat commit {commit_desc()}; binary {binary_desc(plan.sprat)}",
            f"- machine: {machine_desc(h.data_dir)}",
            f"- load average at the start {load0[0]:.2f}, at the end {load1[0]:.2f}; {elapsed / 60:.1f} minutes", ""]


def shutil_which(c: str):
    import shutil

    return shutil.which(c)


def command_line(argv: list[str]) -> str:
    return "bench/run " + " ".join(shlex.quote(a) for a in argv)


def describe(plan: suites.Plan) -> str:
    if plan.suite.name == "eta":
        from . import progress

        return "\n".join([f"suite eta: {plan.suite.doc}",
                          f"sets {','.join(progress._parts(plan))}; orders {', '.join(plan.modes)}; {plan.rounds} rounds; "
                          f"--bwlimit {plan.bwlimit_mib:g} MiB/s; data in {plan.data_dir}", "tools:"]
                         + [f"  {t:<13} {progress.ETA_TOOLS[t].direction:<5} {progress.ETA_TOOLS[t].cmd}" for t in plan.tools])
    reg = suites.tool_registry(plan)
    lines = [f"suite {plan.suite.name}: {plan.suite.doc}",
             f"sets {', '.join(plan.sets)}{' (quick)' if plan.quick else ''}; modes {', '.join(plan.modes)}; "
             f"caches {', '.join(plan.caches)}; RTTs {', '.join('-' if r is None else f'{r:g} ms' for r in plan.rtts)}; "
             f"{plan.rounds} rounds; baseline {plan.baseline}; data in {plan.data_dir}; "
             f"network namespace: {'yes' if plan.netns else 'no'}", "tools:"]
    for t in toolsmod.resolve(plan.limits + plan.tools, reg):
        for m, tmpl in t.modes.items():
            if m in [suites.RESYNC_MODES.get(x, x) for x in plan.modes] or t.kind != "copy":
                lines.append(f"  {t.name:<14} {m:<5} {tmpl}")
                if t.kind != "copy":
                    break
    lines.append(f"cells per round: {len(plan.cells())}")
    return "\n".join(lines)


def write_report(h: runner.Harness, argv: list[str], stamp: str, outdir: str, load0, elapsed: float) -> str:
    plan = h.plan
    reg = h.reg
    kinds = {t: reg[toolsmod.ALIASES.get(t, t)].kind for t in plan.limits}
    cells = report.summarize(h.rows)
    rate = report.rate_bits(plan.rate) if any(r is not None for r in plan.rtts) else None
    lines = header(h, argv, stamp, load0, elapsed)[:-1] + [
             f"- {plan.rounds} interleaved rounds (order rotated by one each round); caches: cold = `sync; echo 3 > "
             "/proc/sys/vm/drop_caches` before each run, warm = page cache dropped then the source read in full; "
             "every run is timed until its data is on disk (`sync -f` of the destination inside the timed part); "
             f"fresh destination per run, checked ({plan.verify}), untimed, and kept until the suite ends "
             "(deleting it would slow the next runs on a journal-less ext4)"
             + ("; before each run, twice the set's size + 512 MiB of memory touched and freed in /dev/shm and "
                "as much in huge pages "
                "(untimed: pages a VM's host took back are slow to touch again)" if plan.warm_memory else ""),
             f"- ratios: t_tool / t_{plan.baseline} of the medians (> 1: {plan.baseline} is faster); t_limit / "
             f"t_{plan.baseline} (1 = at the limit); t_limit = the slowest of the fastest read limit, the write "
             "limit, the network limit" + (f" and bytes / {plan.rate}" if rate else ""), "", "Data sets:", ""]
    for s, r in h.ready.items():
        lines.append(f"- {s}: {r.files:,} files, {stats.human_bytes(r.bytes)}, {r.dirs:,} directories, "
                     f"{r.symlinks:,} symlinks, median file {r.median_size:,} B; {r.set.desc}")
    lines += ["", "Tools:", ""]
    for t in toolsmod.resolve(plan.limits + plan.tools, reg):
        why = h.unavailable.get(t.name)
        lines.append(f"- {t.name}: {t.label}" + (f" — skipped: {why}" if why else ""))
    lines += ["", report.markdown(cells, plan.tools, kinds, plan.baseline, rate)]
    if plan.suite.name == "progress-overhead":
        from . import progress

        lines += ["Paired rounds (as bench/progress_overhead.py printed them): wall and client CPU (user + system "
                  "of `sprat cp` and its children, wait4) without and with `--progress`:", "",
                  progress.overhead_lines(h.rows)]
    why = report.plot(cells, plan.tools, kinds, os.path.join(outdir, "plot.png"),
                      f"{plan.suite.name} {stamp} ({command_line(argv)})")
    lines.append("![plot](plot.png)" if why is None else f"(no plot: {why})")
    md = "\n".join(lines) + "\n"
    with open(os.path.join(outdir, "report.md"), "w") as f:
        f.write(md)
    return md
