"""Pure arithmetic of the reports: medians, spreads, ratios and their formatting."""

from __future__ import annotations

import math
import statistics
from typing import Iterable, Optional, Sequence


def median(values: Iterable[float]) -> Optional[float]:
    """Median of the values, None when there are none."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None
    return statistics.median(vals)


def spread(values: Iterable[float]) -> Optional[tuple[float, float]]:
    """(min, max) of the values, None when there are none."""
    vals = [v for v in values if v is not None and not math.isnan(v)]
    if not vals:
        return None
    return (min(vals), max(vals))


def ratio(num: Optional[float], den: Optional[float]) -> Optional[float]:
    """num / den, None when either is missing or den is not positive."""
    if num is None or den is None or den <= 0:
        return None
    return num / den


def paired_ratios(a: dict[int, float], b: dict[int, float]) -> list[float]:
    """Per-round ratios a[r] / b[r] for the rounds both have (in round order)."""
    out = []
    for r in sorted(set(a) & set(b)):
        q = ratio(a[r], b[r])
        if q is not None:
            out.append(q)
    return out


def fmt_secs(s: Optional[float]) -> str:
    """Seconds with 3 significant decimals for short runs, 2 for long ones; '-' if missing."""
    if s is None:
        return "-"
    if s < 10:
        return f"{s:.3f}"
    return f"{s:.2f}"


def fmt_ratio(q: Optional[float]) -> str:
    """A ratio with 2 decimals (3 when it is within 2% of 1); '-' if missing."""
    if q is None:
        return "-"
    if abs(q - 1) < 0.02:
        return f"{q:.3f}"
    if q >= 100:
        return f"{q:.0f}"
    return f"{q:.2f}"


def fmt_rate(nbytes: Optional[int], secs: Optional[float]) -> str:
    """MB/s (10^6 bytes per second), '-' if either is missing."""
    q = ratio(nbytes, secs)
    if q is None:
        return "-"
    return f"{q / 1e6:.0f}"


def human_bytes(n: int) -> str:
    """1536 -> '1.5 KiB'."""
    x = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if x < 1024 or unit == "TiB":
            return f"{x:.0f} {unit}" if unit == "B" else f"{x:.1f} {unit}"
        x /= 1024
    return f"{n} B"


def rotate(items: Sequence, by: int) -> list:
    """items rotated left by `by` (the order of round `by` + 1 in interleaved rounds)."""
    if not items:
        return []
    k = by % len(items)
    return list(items[k:]) + list(items[:k])
