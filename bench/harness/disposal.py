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
import subprocess
import time
from dataclasses import dataclass, field
from typing import Optional

GiB = 1 << 30
# How long a deleted inode stays "recent" at most: 60 s, plus 300 s while its block is dirty.
RECENT_S = 360
STAMP = "last-deletion"


def mounts_of(path: str, mountinfo: str = "/proc/self/mountinfo") -> list[tuple[str, str]]:
    """The (file system type, source) of each line of `mountinfo` for the device `path` is on."""
    try:
        dev = os.stat(path).st_dev
        with open(mountinfo) as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    want = f"{os.major(dev)}:{os.minor(dev)}"
    out = []
    for line in lines:
        fields = line.split()
        if len(fields) < 10 or fields[2] != want or "-" not in fields:
            continue
        after = fields[fields.index("-") + 1:]
        if len(after) >= 2:
            out.append((after[0], after[1]))
    return out


def journal_less_ext4(path: str, mountinfo: str = "/proc/self/mountinfo", jbd2: str = "/proc/fs/jbd2") -> bool:
    """Whether `path` is on an ext4 mounted without a journal (no jbd2 entry for its device)."""
    try:
        journals = {name.rsplit("-", 1)[0] for name in os.listdir(jbd2)} if os.path.isdir(jbd2) else set()
    except OSError:
        return False
    for fstype, source in mounts_of(path, mountinfo):
        if fstype == "ext4":
            return os.path.basename(source) not in journals
    return False


def wait_out_deletions(meta: str, data: str, log, now=None, sleep=time.sleep) -> float:
    """Before a suite on a journal-less ext4: sleep until the last deletion of finished copies
    (ours, recorded in `meta`) is `RECENT_S` old, reading the record again after each sleep (a
    suite still deleting its copies updates it when it is done). `now`: a clock (seconds).
    Returns the seconds slept."""
    clock = now or time.time
    slept = 0.0
    while True:
        try:
            with open(os.path.join(meta, STAMP)) as f:
                last = float(f.read().strip() or 0)
        except (OSError, ValueError):
            return slept
        left = RECENT_S - (clock() - last)
        if left <= 0 or not journal_less_ext4(data):
            return slept
        log(f"waiting {left:.0f} s: finished copies were deleted {RECENT_S - left:.0f} s ago on this journal-less "
            "ext4, and new files would be slow to create until their inodes are no longer recent")
        sleep(left)
        slept += left


def fs_type(path: str, mountinfo: str = "/proc/self/mountinfo") -> Optional[str]:
    """The type of the file system `path` is on (`ext4`, `tmpfs`...); None if unknown."""
    mounts = mounts_of(path, mountinfo)
    return mounts[0][0] if mounts else None


def mem_available(meminfo: str = "/proc/meminfo") -> Optional[int]:
    """Bytes of memory the kernel could still give (`MemAvailable`); None if unknown."""
    try:
        with open(meminfo) as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def spare_bytes(path: str, mountinfo: str = "/proc/self/mountinfo", meminfo: str = "/proc/meminfo") -> int:
    """Bytes an unprivileged writer may still use on the file system of `path` (or of the
    nearest existing parent). On a tmpfs, no more than the memory still available: its size
    is a limit, not a reservation, and the copies kept there take the memory the servers,
    relays and tools need (a wan suite once ran out of memory with 17 GB of copies in
    /dev/shm, and the kernel killed two relays)."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    st = os.statvfs(path)
    spare = st.f_bavail * st.f_frsize
    if fs_type(path, mountinfo) == "tmpfs":
        available = mem_available(meminfo)
        if available is not None:
            spare = min(spare, available)
    return spare


def spare_files(path: str) -> int:
    """Inodes an unprivileged writer may still use on the file system of `path` (or of the
    nearest existing parent); a tmpfs runs out of them (`nr_inodes`) long before its bytes
    when it holds many copies of a set of small files."""
    while not os.path.exists(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return os.statvfs(path).f_favail


def to_delete(kept: list, spare, reserve) -> list[str]:
    """The oldest of the `kept` copies (path, bytes[, files]; oldest first) to delete so that
    at least `reserve` bytes (and files: pass tuples) are spare, given `spare` now; none if
    there are already; all if even that is not enough."""
    spare = list(spare) if isinstance(spare, tuple) else [spare]
    reserve = list(reserve) if isinstance(reserve, tuple) else [reserve]
    out: list[str] = []
    for path, *sizes in kept:
        if all(s >= r for s, r in zip(spare, reserve)):
            break
        out.append(path)
        spare = [s + n for s, n in zip(spare, list(sizes) + [0] * len(spare))]
    return out


def stale_suites(dst_base: str, idle_s: float = 3600, now: Optional[float] = None) -> list[str]:
    """The suites' destination directories under `dst_base` (`harness-dst/STAMP`) that nothing
    changed for `idle_s`: left by a suite stopped before it deleted its copies (a running suite
    adds a copy every few seconds)."""
    try:
        names = sorted(os.listdir(dst_base))
    except OSError:
        return []
    now = time.time() if now is None else now
    out = []
    for n in names:
        d = os.path.join(dst_base, n)
        try:
            if os.path.isdir(d) and not os.path.islink(d) and now - os.lstat(d).st_mtime >= idle_s:
                out.append(d)
        except OSError:
            continue
    return out


@dataclass
class Disposer:
    """Copies kept until the suite ends (`delete_all`, from `Harness.close`). `keep(path,
    nbytes)` keeps a checked copy of `nbytes`, first deleting the oldest kept ones if the disk
    would no longer hold two more such copies with `margin` to spare."""

    margin: int = 4 * GiB
    file_margin: int = 100_000
    meta: Optional[str] = None  # where the time of the last deletion is recorded
    kept: list[tuple[str, int]] = field(default_factory=list)
    deleted: int = 0

    def keep(self, path: str, nbytes: int, log=None, nfiles: int = 0) -> None:
        self.kept.append((path, nbytes, nfiles))
        reserve = (2 * nbytes + self.margin, 2 * nfiles + self.file_margin)
        gone = to_delete(self.kept, (spare_bytes(path), spare_files(path)), reserve)
        if not gone:
            return
        self.remove(gone)
        self.kept = self.kept[len(gone):]
        self.deleted += len(gone)
        if log:
            log(f"deleted {len(gone)} finished copies to keep {reserve[0] / GiB:.1f} GiB and {reserve[1]:,} "
                "inodes spare: the next run may create files where many were just deleted")

    def delete_all(self) -> None:
        if self.kept:
            self.remove([p for p, *_ in self.kept])
            self.kept.clear()

    def remove(self, paths: list[str]) -> None:
        """Deletes `paths`, syncs, and records when (see `wait_out_deletions`): before it
        starts too, so that a deletion cut short still makes the next suite wait."""
        self._stamp()
        for p in paths:
            subprocess.run(["rm", "-rf", "--", p], check=False)
        os.sync()
        self._stamp()

    def _stamp(self) -> None:
        if self.meta:
            with open(os.path.join(self.meta, STAMP), "w") as f:
                f.write(f"{time.time():.0f}\n")
