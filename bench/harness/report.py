"""Reports of one invocation: the CSV of every run, the markdown tables (medians, ratios
against the baseline and against the limits, checks) and a PNG plot. `summarize` and
`markdown` are pure functions of the rows, unit-tested; `plot` needs matplotlib."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Iterable, Optional

from . import stats


def write_csv_header(path: str, fields: list[str]) -> None:
    with open(path, "w", newline="") as f:
        csv.writer(f).writerow(fields)


def append_csv(path: str, fields: list[str], row: dict) -> None:
    with open(path, "a", newline="") as f:
        csv.writer(f).writerow([_clean(row.get(k, "")) for k in fields])


def read_csv(path: str) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _clean(v) -> str:
    s = str(v)
    return s.replace("\n", " | ").replace("\r", " ")[:400]


def rate_bits(rate: str) -> Optional[float]:
    """'1gbit' -> 1e9 bits per second; None if it does not parse."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([kmgt]?)(bit|bps)?\s*", rate.lower())
    if not m:
        return None
    mult = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m.group(2)]
    return float(m.group(1)) * mult


@dataclass
class Cell:
    """One table row: a (set, mode, cache, RTT) and every tool's and limit's runs in it."""

    set: str
    mode: str
    cache: str
    rtt: str
    src_files: int = 0
    src_bytes: int = 0
    secs: dict = field(default_factory=dict)  # tool -> {round: seconds} of good runs
    checks: dict = field(default_factory=dict)  # tool -> list of check statuses
    notes: dict = field(default_factory=dict)  # tool -> first note of a bad or meta run
    # tool -> list of (client_cpu, server_cpu, bottleneck, client_rss_mib, server_rss_mib)
    extra: dict = field(default_factory=dict)

    def median(self, tool: str) -> Optional[float]:
        return stats.median(self.secs.get(tool, {}).values())


def _good(row: dict) -> bool:
    return str(row.get("exit", "")) in ("0", "") and row.get("check") not in ("FAIL", "SKIP") and row.get("seconds") not in ("", None)


def summarize(rows: Iterable[dict]) -> list[Cell]:
    """Group runs into cells, in first-seen order; limits (run once per set and cache) are
    copied into every cell of their set and cache."""
    cells: dict[tuple, Cell] = {}
    limits: dict[tuple, list[dict]] = {}
    for r in rows:
        if r.get("kind", "copy") != "copy":
            limits.setdefault((r["set"], r["cache"]), []).append(r)
            continue
        key = (r["set"], r["mode"], r["cache"], str(r.get("rtt_ms", "")))
        c = cells.get(key)
        if c is None:
            c = cells[key] = Cell(*key, src_files=int(r.get("src_files") or 0), src_bytes=int(r.get("src_bytes") or 0))
        _add(c, r)
    for c in cells.values():
        for r in limits.get((c.set, c.cache), []):
            _add(c, r)
    return list(cells.values())


def _add(c: Cell, r: dict) -> None:
    t = r["tool"]
    c.checks.setdefault(t, []).append(r.get("check", ""))
    if _good(r):
        c.secs.setdefault(t, {})[int(r["round"])] = float(r["seconds"])
        c.extra.setdefault(t, []).append((r.get("client_cpu", ""), r.get("server_cpu", ""), r.get("bottleneck", ""),
                                          r.get("client_rss_mib", ""), r.get("server_rss_mib", "")))
    if r.get("note") and t not in c.notes and r.get("check") in ("FAIL", "meta", "SKIP"):
        c.notes[t] = f"{r.get('check')}: {r['note']}"


def limit_of(c: Cell, kinds: dict, rate: Optional[float], rtt_relay: bool) -> tuple[Optional[float], str]:
    """t_limit of a cell and what sets it: the slowest of the fastest read limit, the write
    limit, the network limit and bytes / cap (through a relay). The copy limit (`rw`: read and
    write at once) is not a candidate: `markdown` gives it a column of its own."""
    cands = []
    reads = [(c.median(t), t) for t, k in kinds.items() if k == "read" and c.median(t) is not None]
    if reads:
        cands.append(min(reads))
    for t, k in kinds.items():
        if k in ("write", "net") and c.median(t) is not None:
            cands.append((c.median(t), t))
    if rtt_relay and rate and c.src_bytes:
        cands.append((c.src_bytes * 8 / rate, "cap"))
    if not cands:
        return None, ""
    return max(cands)


def check_summary(statuses: list[str]) -> str:
    if not statuses:
        return "-"
    if all(s == "SKIP" for s in statuses):
        return "skipped"
    bad = sum(1 for s in statuses if s == "FAIL")
    meta = sum(1 for s in statuses if s == "meta")
    if bad:
        return f"FAIL {bad}/{len(statuses)}"
    if meta:
        return f"meta {meta}/{len(statuses)}"
    return "ok"


def markdown(cells: list[Cell], tools: list[str], kinds: dict, baseline: str, rate: Optional[float]) -> str:
    """The main table (baseline seconds, t_limit / baseline, each tool / baseline) and the
    medians table (every tool and limit: median, min-max, MB/s, checks)."""
    show_rtt = any(c.rtt for c in cells)
    others = [t for t in tools if t != baseline]
    shared = [t for t, k in kinds.items() if k == "rw"]
    head = ["set", "mode", "cache"] + (["RTT ms"] if show_rtt else []) + [
        "t_limit s (which)", f"{baseline} s", f"t_limit / {baseline}"] + [f"{t} limit / {baseline}" for t in shared] + [
        f"{t} / {baseline}" for t in others]
    out = ["| " + " | ".join(head) + " |", "|" + "---|" * (3 + show_rtt) + "--:|" * (len(head) - 3 - show_rtt)]
    for c in cells:
        tl, which = limit_of(c, kinds, rate, bool(c.rtt))
        b = c.median(baseline)
        row = [c.set, c.mode, c.cache] + ([c.rtt] if show_rtt else [])
        row += [f"{stats.fmt_secs(tl)} ({which})" if tl else "-", stats.fmt_secs(b), stats.fmt_ratio(stats.ratio(tl, b))]
        row += [stats.fmt_ratio(stats.ratio(c.median(t), b)) for t in shared]
        for t in others:
            q = stats.fmt_ratio(stats.ratio(c.median(t), b))
            chk = check_summary(c.checks.get(t, []))
            if chk not in ("ok", "-"):
                q += f" ({chk})"
            row.append(q)
        out.append("| " + " | ".join(row) + " |")
    out += ["", "Medians of every tool and limit (seconds, min-max over the good rounds, MB/s of the median, "
            "per-round ratios to the baseline, checks):", ""]
    out += ["| set | mode | cache | " + ("RTT ms | " if show_rtt else "") + "tool | median s | min-max s | MB/s | "
            f"per round / {baseline} | client CPU s | server CPU s | client MiB | server MiB | check |",
            "|---|---|---|" + ("---|" if show_rtt else "") + "---|--:|--:|--:|---|--:|--:|--:|--:|---|"]
    for c in cells:
        for t in [t for t, k in kinds.items() if k != "copy"] + tools:
            if t not in c.checks:
                continue
            sp = stats.spread(c.secs.get(t, {}).values())
            per = stats.paired_ratios(c.secs.get(t, {}), c.secs.get(baseline, {})) if t != baseline else []
            ex = c.extra.get(t, [])
            ccpu, scpu, crss, srss = (stats.median(float(x[i]) for x in ex if len(x) > i and x[i] not in ("", None))
                                      for i in (0, 1, 3, 4))
            out.append("| " + " | ".join(
                [c.set, c.mode, c.cache] + ([c.rtt] if show_rtt else []) + [
                    t, stats.fmt_secs(c.median(t)),
                    f"{stats.fmt_secs(sp[0])}-{stats.fmt_secs(sp[1])}" if sp else "-",
                    stats.fmt_rate(c.src_bytes, c.median(t)),
                    ", ".join(f"{q:.2f}" for q in per) or "-",
                    f"{ccpu:.2f}" if ccpu is not None else "-", f"{scpu:.2f}" if scpu is not None else "-",
                    f"{crss:.0f}" if crss is not None else "-", f"{srss:.0f}" if srss is not None else "-",
                    check_summary(c.checks.get(t, []))]) + " |")
    notes = [f"- {c.set} {c.mode} {c.cache}{' ' + c.rtt + ' ms' if c.rtt else ''} {t}: {n}"
             for c in cells for t, n in c.notes.items()]
    if notes:
        out += ["", "Notes (first failed, skipped or meta-differing run of each tool and cell):", ""] + notes
    return "\n".join(out) + "\n"


def plot(cells: list[Cell], tools: list[str], kinds: dict, path: str, title: str) -> Optional[str]:
    """Throughput (MB/s of the medians): lines against RTT when the cells have RTTs, else
    grouped bars per cell. Returns None, or why no plot was drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no matplotlib (apt-get install python3-matplotlib; bench/run uses /usr/bin/python3)"
    names = [t for t, k in kinds.items() if k != "copy"] + tools
    fig, ax = plt.subplots(figsize=(10, 5.5))
    if any(c.rtt for c in cells):
        groups: dict = {}
        for c in cells:
            groups.setdefault((c.set, c.mode, c.cache), []).append(c)
        for (s, m, ca), cs in groups.items():
            for t in tools:
                pts = [(float(c.rtt), c.src_bytes / c.median(t) / 1e6) for c in cs if c.rtt and c.median(t)]
                if pts:
                    pts.sort()
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{t} ({s})")
        ax.set_xscale("log")
        ax.set_xlabel("RTT (ms)")
    else:
        width = 0.8 / max(1, len(names))
        for i, t in enumerate(names):
            ys = [(c.src_bytes / c.median(t) / 1e6) if c.median(t) else 0 for c in cells]
            ax.bar([j + i * width for j in range(len(cells))], ys, width, label=t)
        ax.set_xticks([j + 0.4 - width / 2 for j in range(len(cells))])
        ax.set_xticklabels([f"{c.set}\n{c.mode} {c.cache}" for c in cells], fontsize=8)
    ax.set_ylabel("MB/s (median)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
