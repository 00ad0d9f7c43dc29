"""Which finished copies to delete, and when: each destination is kept until the suite ends
unless the disk runs short, because deleting it between runs slows the runs that follow.

On an ext4 without a journal (this machine's root disk is one), the inode allocator skips
every free inode whose deletion time is under 60 s old (360 s while its inode-table block is
dirty), checking each one in the buffer cache, from the start of the group, for every new
inode. A copy of 100,000 small files made right after another such copy was deleted, as the
harness did until 2026-11-27, took 5-12x as long on a fresh image (docs/performance.md, "Runs
that follow a deletion"), and by how much depended on where each tool's files landed: noise
and bias in every small-file cell, limits included. With a journal the check is off.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field

GiB = 1 << 30


def spare_bytes(path: str) -> int:
    """Bytes an unprivileged writer may still use on the file system of `path` (or of the
    nearest existing parent)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def to_delete(kept: list[tuple[str, int]], spare: int, reserve: int) -> list[str]:
    """The oldest of the `kept` copies (path, bytes; oldest first) to delete so that at least
    `reserve` bytes are spare, given `spare` now; none if there are already; all if even that
    is not enough."""
    out: list[str] = []
    for path, nbytes in kept:
        if spare >= reserve:
            break
        out.append(path)
        spare += nbytes
    return out


@dataclass
class Disposer:
    """Copies kept for deletion at the end (`Harness.close` removes their common parent).
    `keep(path, nbytes, next_bytes)` keeps a checked copy, first deleting the oldest kept ones
    if the disk would no longer hold the next copy of `next_bytes` with `margin` to spare."""

    margin: int = 4 * GiB
    kept: list[tuple[str, int]] = field(default_factory=list)
    deleted: int = 0

    def keep(self, path: str, nbytes: int, next_bytes: int, log=None) -> None:
        self.kept.append((path, nbytes))
        reserve = 2 * next_bytes + self.margin
        gone = to_delete(self.kept, spare_bytes(path), reserve)
        if not gone:
            return
        for p in gone:
            subprocess.run(["rm", "-rf", "--", p], check=False)
        os.sync()
        self.kept = self.kept[len(gone):]
        self.deleted += len(gone)
        if log:
            log(f"deleted {len(gone)} finished copies to keep {reserve / GiB:.1f} GiB spare: the next run "
                "may create files where many were just deleted")

    def delete_all(self) -> None:
        for p, _ in self.kept:
            shutil.rmtree(p, ignore_errors=True)
        self.kept.clear()
