"""Suites about live progress (issue 17, point 1):

- `eta`: how right a copy's time-left estimate is early on. Two orders of the same files --
  `a`: many small files then a few large ones in name order (the order the copy walks them),
  `b`: the same files (hard links) large ones first -- copied by every ETA tool (sprat local,
  push and pull over loopback with `--json-events`; `rsync -a --info=progress2`; `rclone copy`
  with its JSON stats), all held to the same bandwidth limit. Each tool's estimates are read
  from its own output as they appear, stamped with the time since it started; for a run of
  total time T and a fraction p, the estimate last shown by p*T is compared with the time
  really left then: |eta - (T - t)| / (T - t).
- `progress-overhead` is an ordinary suite of the runner (tools `progress-off` and
  `progress-on` in tools.py); `overhead_lines` adds its paired wall and CPU ratios.

The parsing and the error computation are pure and unit-tested (test_harness.py); `run_eta`
does the I/O (the old standalone bench/eta.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Iterable, Optional

from . import proc, report, servers, stats, tools as toolsmod, verify

FRACTIONS = (0.10, 0.25, 0.50)
ORDERS = {"a": "small then large", "b": "large then small"}


# ---------------------------------------------------------------- the ETA tools (declarative)

@dataclass(frozen=True)
class EtaTool:
    """One way of copying that shows a time left. `cmd` is a shell template (fields as in
    tools.py plus `{rate_mib}` and `{rate_kib}`, the bandwidth limit); `parse` names the
    function reading its estimates from the lines of `stream`, which are split at `split`
    (a regex over bytes); `server`: it talks to `sprat serve` on loopback."""

    name: str
    label: str
    direction: str
    cmd: str
    parse: str
    stream: str = "stdout"
    split: bytes = rb"\n"
    server: bool = False
    needs: tuple[str, ...] = ()


_SPRAT_ETA = "{sprat} cp --json-events --bwlimit {rate_mib}MiB/s"
ETA_TOOLS = {t.name: t for t in (
    EtaTool("sprat-local", "sprat cp --json-events (local)", "local", _SPRAT_ETA + " {src} {dst}", "sprat"),
    EtaTool("sprat-push", "sprat cp --json-events, push over loopback (plain TCP)", "push",
            _SPRAT_ETA + " {conn} {src} sprat://{host}:{port}/{dst_rel}", "sprat", server=True),
    EtaTool("sprat-pull", "sprat cp --json-events, pull over loopback (plain TCP)", "pull",
            _SPRAT_ETA + " {conn} sprat://{host}:{port}/{src_rel} {dst}", "sprat", server=True),
    EtaTool("rsync-local", "rsync -a --info=progress2 (local)", "local",
            "rsync -a --info=progress2 --bwlimit={rate_kib} {src}/ {dst}/", "rsync", split=rb"[\r\n]",
            needs=("rsync",)),
    EtaTool("rclone-local", "rclone copy --stats 1s --stats-one-line -v --use-json-log (local)", "local",
            "rclone copy {src} {dst} --bwlimit {rate_mib}M --stats 1s --stats-one-line -v --use-json-log",
            "rclone", stream="stderr", needs=("rclone",)),
)}


# ---------------------------------------------------------------- pure parts

Sample = tuple  # (t since start, eta seconds or None, files done or None, bytes done or None)


def split_stamped(buf: bytes, chunk: bytes, now: float, split: bytes) -> tuple[bytes, list[tuple[float, str]]]:
    """Append `chunk` to the partial line `buf`; return the new partial line and the complete,
    non-blank lines stamped `now`."""
    parts = re.split(split, buf + chunk)
    rest = parts.pop()
    return rest, [(now, p.decode("utf-8", "replace")) for p in parts if p.strip()]


def _json_objects(lines: Iterable[tuple[float, str]]) -> Iterable[tuple[float, dict]]:
    """The lines that hold a JSON object, parsed (others skipped), with their stamps."""
    for t, line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if isinstance(e, dict):
            yield t, e


def sprat_etas(lines: Iterable[tuple[float, str]]) -> list[Sample]:
    """sprat's `--json-events` progress events: eta_s, files_done, bytes_done."""
    return [(t, e.get("eta_s"), e.get("files_done"), e.get("bytes_done"))
            for t, e in _json_objects(lines) if e.get("event") == "progress"]


RSYNC = re.compile(r"^\s*[\d,]+\s+\d+%\s+\S+\s+(\d+):(\d\d):(\d\d)(.*)$")


def rsync_etas(lines: Iterable[tuple[float, str]]) -> list[Sample]:
    """rsync's progress2 lines: the time is what is left, except on a line that ends a file
    (`xfr#`), where it is the time the transfer took so far (skipped)."""
    out = []
    for t, line in lines:
        m = RSYNC.match(line)
        if m and "xfr#" not in m.group(4):
            h, mi, s = int(m.group(1)), int(m.group(2)), int(m.group(3))
            out.append((t, h * 3600 + mi * 60 + s, None, None))
    return out


def rclone_etas(lines: Iterable[tuple[float, str]]) -> list[Sample]:
    """rclone's JSON log lines (`--use-json-log`): stats.eta (null while unknown), transfers, bytes."""
    out = []
    for t, e in _json_objects(lines):
        stats_ = e.get("stats")
        if isinstance(stats_, dict) and "eta" in stats_:
            out.append((t, stats_["eta"], stats_.get("transfers"), stats_.get("bytes")))
    return out


PARSERS = {"sprat": sprat_etas, "rsync": rsync_etas, "rclone": rclone_etas}


def eta_errors(total: float, etas: list[Sample], fractions=FRACTIONS) -> dict[float, Optional[float]]:
    """For each fraction p: |eta - (T - t)| / (T - t) of the estimate last shown by p*T
    (None: none shown by then, or the last one shown had no value)."""
    res: dict[float, Optional[float]] = {}
    for p in fractions:
        at = p * total
        shown = [(s[0], s[1]) for s in etas if s[0] <= at]
        if not shown or shown[-1][1] is None:
            res[p] = None
            continue
        t, eta = shown[-1]
        left = total - t
        res[p] = abs(eta - left) / left if left > 0 else None
    return res


def fmt_err(v: Optional[float]) -> str:
    return "none shown" if v is None else f"{v:.0%}"


def eta_table(results: list[dict]) -> str:
    """The table of bench/eta.py: one row per (order, tool), in run order; with several rounds
    the median of each error over the rounds (and of the run time)."""
    keyed: dict[tuple, list[dict]] = {}
    for r in results:
        keyed.setdefault((r["order"], r["tool"]), []).append(r)
    out = ["| tool | order | direction | run (s) | ETA error at 10% | at 25% | at 50% |", "|---|---|---|---|---|---|---|"]
    for (order, tool), rs in keyed.items():
        good = [r for r in rs if r["check"] != "FAIL"]
        name, direction = tool.split("-", 1)
        if not good:
            out.append(f"| {name} | {ORDERS.get(order, order)} | {direction} | FAIL | - | - | - |")
            continue
        total = stats.median(r["total"] for r in good)
        cells = []
        for p in FRACTIONS:
            vals = [r["errors"][p] for r in good if r["errors"][p] is not None]
            cells.append(fmt_err(stats.median(vals)) if vals else "none shown")
        out.append(f"| {name} | {ORDERS.get(order, order)} | {direction} | {total:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


def overhead_lines(rows: list[dict], off: str = "progress-off", on: str = "progress-on") -> str:
    """bench/progress_overhead.py's summary per cell: median wall off / on, the median of the
    per-round ratios on/off (min, max), and the same for the client's CPU time."""
    cells: dict[tuple, dict] = {}
    for r in rows:
        if r.get("kind", "copy") != "copy" or str(r.get("exit", "")) not in ("0", "") or r.get("check") == "FAIL":
            continue
        if r.get("tool") not in (off, on) or r.get("seconds") in ("", None):
            continue
        c = cells.setdefault((r["set"], r["mode"], r["cache"]), {off: {}, on: {}})
        cpu = r.get("client_cpu")
        c[r["tool"]][int(r["round"])] = (float(r["seconds"]), float(cpu) if cpu not in ("", None) else None)
    out = ["| set | mode | cache | median wall off / on (s) | median of the rounds' ratios on/off (min-max) | "
           "client CPU off / on (s) | median CPU ratio |", "|---|---|---|--:|--:|--:|--:|"]
    for (s, m, cache), c in cells.items():
        wall = stats.paired_ratios({k: v[0] for k, v in c[on].items()}, {k: v[0] for k, v in c[off].items()})
        cpu = stats.paired_ratios({k: v[1] for k, v in c[on].items() if v[1]},
                                  {k: v[1] for k, v in c[off].items() if v[1]})
        moff = stats.median(v[0] for v in c[off].values())
        mon = stats.median(v[0] for v in c[on].values())
        coff = stats.median(v[1] for v in c[off].values() if v[1] is not None)
        con = stats.median(v[1] for v in c[on].values() if v[1] is not None)
        w = f"{stats.median(wall):.3f} ({min(wall):.3f}-{max(wall):.3f})" if wall else "-"
        out.append(f"| {s} | {m} | {cache} | {stats.fmt_secs(moff)} / {stats.fmt_secs(mon)} | {w} | "
                   f"{'-' if coff is None else f'{coff:.2f}'} / {'-' if con is None else f'{con:.2f}'} | "
                   f"{f'{stats.median(cpu):.3f}' if cpu else '-'} |")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- the eta suite (I/O)

def _parts(plan) -> tuple[str, str]:
    """(small, large) parts of the sets, as NxSIZE set names."""
    if plan.sets:
        if len(plan.sets) != 2:
            raise SystemExit("bench/run eta: --sets takes two NxSIZE parts, small then large "
                             "(e.g. 20000x16KiB,20x32MiB)")
        return plan.sets[0], plan.sets[1]
    return ("500x16KiB", "2x8MiB") if plan.quick else ("20000x16KiB", "20x32MiB")


def make_orders(h, small: str, large: str) -> dict[str, tuple[str, dict]]:
    """Sets a and b (hard links to the two generated parts): order -> (path, manifest)."""
    from . import sets as setsmod

    parts = {}
    for key, name in (("small", small), ("large", large)):
        ds = setsmod.resolve_set(name, seed=h.plan.seed)
        parts[key] = setsmod.ensure(ds, h.root, h.meta, h.sprat, h.log, refresh=h.plan.refresh)
    base = os.path.join(h.root, f"eta-{parts['small'].set.dir}+{parts['large'].set.dir}")
    layout = {"a": (("1-small", "small"), ("2-large", "large")), "b": (("1-large", "large"), ("2-small", "small"))}
    out = {}
    for order, dirs in layout.items():
        path = os.path.join(base, order)
        man = os.path.join(h.meta, f"eta-{os.path.basename(base)}-{order}.json")
        if h.plan.refresh or not os.path.exists(man) or not os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
            for d, key in dirs:
                src = parts[key].path
                for root, _, files in os.walk(src):
                    rel = os.path.relpath(root, src)
                    os.makedirs(os.path.join(path, d, rel), exist_ok=True)
                    for f in files:
                        os.link(os.path.join(root, f), os.path.join(path, d, rel, f))
            verify.save_manifest(verify.scan(path, hashing=True), man)
        out[order] = (path, verify.load_manifest(man))
        s = verify.summary(out[order][1])
        h.log(f"order {order} ({ORDERS[order]}): {s['files']} files, {s['bytes']} bytes in {path}")
    return out


def run_stamped(cmd: str, stream: str, split: bytes, env: dict, err_path: str, timeout: float):
    """Run the shell command `cmd`; return (seconds, exit code, [(t since start, line)]) of its
    `stream` (stdout or stderr; the other goes to err_path). Killed (exit 124) after `timeout`."""
    with open(err_path, "wb") as other:
        pipes = {"stdout": subprocess.PIPE, "stderr": other} if stream == "stdout" else \
            {"stdout": other, "stderr": subprocess.PIPE}
        t0 = time.monotonic()
        p = subprocess.Popen(["bash", "-o", "pipefail", "-c", cmd], stdin=subprocess.DEVNULL, env=env,
                             start_new_session=True, **pipes)
        fired = threading.Event()

        def kill():
            fired.set()
            proc.stop_group(p, grace=1.0)

        timer = threading.Timer(timeout, kill)
        timer.start()
        src = p.stdout if stream == "stdout" else p.stderr
        buf, lines = b"", []
        try:
            while True:
                chunk = src.read1(65536)
                if not chunk:
                    break
                buf, got = split_stamped(buf, chunk, time.monotonic() - t0, split)
                lines += got
            p.wait()
        finally:
            timer.cancel()
        total = time.monotonic() - t0
        if buf.strip():
            lines.append((total, buf.decode("utf-8", "replace")))
    return total, (124 if fired.is_set() else p.returncode), lines


def run_eta(h) -> str:
    """The eta suite: every round, every order, every tool (rotated by one each round)."""
    plan = h.plan
    tools = [ETA_TOOLS[t] for t in plan.tools]
    orders = make_orders(h, *_parts(plan))
    rate = plan.bwlimit_mib
    unavailable = {t.name: f"{', '.join(c for c in t.needs if shutil.which(c) is None)} not installed"
                   for t in tools if any(shutil.which(c) is None for c in t.needs)}
    srv = None
    if any(t.server for t in tools):
        srv = servers.start_sprat(h, 0, extra=("--no-encryption",))
        h.log(f"server sprat on {srv.host}:{srv.port} pid {srv.pid}")
    runs_csv = os.path.join(h.outdir, "runs.csv")
    samples_csv = os.path.join(h.outdir, "samples.csv")
    run_fields = ["stamp", "round", "order", "tool", "direction", "seconds", "exit", "check", "dst_files", "dst_bytes",
                  "samples", "err_at_10", "err_at_25", "err_at_50", "load1", "note"]
    sample_fields = ["round", "tool", "order", "total_s", "t_s", "eta_s", "files_done", "bytes_done"]
    report.write_csv_header(runs_csv, run_fields)
    report.write_csv_header(samples_csv, sample_fields)
    results = []
    for rnd in range(1, plan.rounds + 1):
        for order in plan.modes:
            src, man = orders[order]
            for t in stats.rotate(tools, rnd - 1):
                if t.name in unavailable:
                    h.log(f"{t.name}: skipped ({unavailable[t.name]})")
                    continue
                dst_rel = f"{h.dst_rel_base}/eta-{t.name}-{order}-r{rnd}"
                dst = os.path.join(h.root, dst_rel)
                raw = {"sprat": h.sprat, "src": src, "dst": dst, "src_rel": os.path.relpath(src, h.root),
                       "dst_rel": dst_rel, "rate_mib": f"{rate:g}", "rate_kib": int(rate * 1024),
                       "host": "127.0.0.1", "port": "", "conn": ""}
                env = dict(h.sprat_env, RCLONE_CONFIG=h.empty_rclone_conf)
                if t.server:
                    raw.update(host=srv.host, port=srv.port, **srv.ctx(srv.port))
                    env.update(srv.env)
                cmd = toolsmod.expand(t.cmd, toolsmod.quote_ctx(raw, ("conn",)))
                base = os.path.join(h.logs, f"eta-{t.name}-{order}-r{rnd}")
                with open(base + ".cmd", "w") as f:
                    f.write(cmd + "\n")
                total, rc, lines = run_stamped(cmd, t.stream, t.split, env, base + ".other", plan.timeout)
                etas = PARSERS[t.parse](lines)
                errs = eta_errors(total, etas)
                c = verify.check(man, dst, plan.verify)
                check = "FAIL" if rc else c.status
                note = f"exit {rc}" if rc else c.detail
                h.disposer.keep(dst, c.bytes, h.log)
                row = {"stamp": h.stamp, "round": rnd, "order": order, "tool": t.name, "direction": t.direction,
                       "seconds": round(total, 3), "exit": rc, "check": check, "dst_files": c.files,
                       "dst_bytes": c.bytes, "samples": len(etas), "load1": os.getloadavg()[0], "note": note or ""}
                for p in FRACTIONS:
                    row[f"err_at_{int(p * 100)}"] = "" if errs[p] is None else round(errs[p], 4)
                report.append_csv(runs_csv, run_fields, row)
                for ts, e, files, nbytes in etas:
                    report.append_csv(samples_csv, sample_fields, {
                        "round": rnd, "tool": t.name, "order": order, "total_s": f"{total:.2f}", "t_s": f"{ts:.2f}",
                        "eta_s": "" if e is None else e, "files_done": "" if files is None else files,
                        "bytes_done": "" if nbytes is None else nbytes})
                results.append({"order": order, "tool": t.name, "total": total, "errors": errs, "check": check})
                show = "  ".join(f"{int(p * 100)}%: " + ("-" if v is None else f"{v:.0%}") for p, v in errs.items())
                h.log(f"{t.name:13} order {order} r{rnd} {total:6.1f} s  {show}  {len(etas)} estimates  {check} {note or ''}")
    small, large = _parts(plan)
    body = [f"- sets: `a` = `1-small/` ({small}) then `2-large/` ({large}) in name order; `b` = the same files "
            "(hard links) as `1-large/` then `2-small/`",
            f"- every tool held to {rate:g} MiB/s (sprat `--bwlimit {rate:g}MiB/s`, rsync `--bwlimit={int(rate * 1024)}`, "
            f"rclone `--bwlimit {rate:g}M`); warm cache; {plan.rounds} round(s), tools rotated by one each round; "
            f"copies checked ({plan.verify}) and deleted, untimed",
            "- error at p = |eta - (T - t)| / (T - t) of the estimate last shown by p*T (T: the run's time from its "
            "start to its exit, t: when the estimate was read); rsync: progress2 lines not ending a file; rclone: "
            "`stats.eta`; sprat: `eta_s` of its progress events", "", "Tools:", ""]
    body += [f"- {t.name}: {t.label}" + (f" — skipped: {unavailable[t.name]}" if t.name in unavailable else "")
             for t in tools]
    body += ["", eta_table(results), "Every estimate read: samples.csv; every run: runs.csv."]
    return "\n".join(body) + "\n"
