"""Processes, clocks and caches: background processes tracked by PID (each in its own session,
ended as a group by PID at exit), readiness of listeners (ss, never a probe connection), free
ports, a timed shell command with its CPU time, cache states and the final sync."""

from __future__ import annotations

import mmap
import os
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass
from typing import Mapping, Optional

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Procs:
    """Background processes started by the harness; `stop_all` ends them (newest first)."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen] = []

    def start(self, cmd, *, log: str, env: Optional[Mapping[str, str]] = None, shell: bool = False,
              stdout: Optional[str] = None) -> subprocess.Popen:
        out = open(stdout or log + ".out", "wb")
        err = open(log + ".err", "wb")
        p = subprocess.Popen(
            ["bash", "-o", "pipefail", "-c", cmd] if shell else cmd,
            stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True,
            env=dict(env) if env is not None else None,
        )
        out.close()
        err.close()
        self.procs.append(p)
        return p

    def stop(self, p: subprocess.Popen) -> None:
        stop_group(p)
        if p in self.procs:
            self.procs.remove(p)

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            stop_group(p)
        self.procs.clear()


def stop_group(p: subprocess.Popen, grace: float = 3.0) -> None:
    """TERM the process group led by `p` (its own session), KILL it after `grace` s, reap it."""
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            p.wait(grace)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
    else:
        try:  # the leader is gone; its group may not be
            os.killpg(p.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def is_listening(port: int, netns: Optional[str] = None) -> bool:
    cmd = ["ss", "-Hltn", f"sport = :{port}"]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    r = subprocess.run(cmd, capture_output=True, text=True)
    return bool(r.stdout.strip())


def wait_listen(port: int, p: subprocess.Popen, timeout: float = 15.0, netns: Optional[str] = None) -> bool:
    """True once something listens on `port`; False if `p` exits first or on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if is_listening(port, netns):
            return True
        if p.poll() is not None:
            return False
        time.sleep(0.005)
    return False


def wait_line(path: str, prefix: str, p: subprocess.Popen, timeout: float = 30.0, lines: int = 1) -> list[str]:
    """The first `lines` lines of the file `path` once its first line starts with `prefix`
    (a server printing `listening on HOST:PORT`); [] if `p` exits first or on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            with open(path) as f:
                got = f.read().splitlines()
        except OSError:
            got = []
        if got and got[0].startswith(prefix) and len(got) >= lines:
            return got[:lines]
        if p.poll() is not None:
            return []
        time.sleep(0.01)
    return got[:lines] if got and got[0].startswith(prefix) else []


def tail(path: str, n: int = 3) -> str:
    """The last `n` lines of a log file on one line (for an error message); "" if unreadable."""
    try:
        with open(path, errors="replace") as f:
            return " | ".join(f.read().splitlines()[-n:])
    except OSError:
        return ""


def cpu_of(pid: int) -> float:
    """User + system CPU seconds of a live process and its reaped children (/proc/PID/stat)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # fields[0] is the state (field 3): utime, stime, cutime, cstime are fields 14-17.
    return sum(int(x) for x in fields[11:15]) / CLK_TCK


def reset_peak_rss(pid: int) -> None:
    """Starts the peak resident memory of the live process `pid` afresh (`5` into
    /proc/PID/clear_refs resets its VmHWM), so that `peak_rss_kib` tells one run's."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def peak_rss_kib(pid: int) -> Optional[int]:
    """The peak resident memory (VmHWM, KiB) of the live process `pid` since it started or
    since `reset_peak_rss`; None if it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def ppid_of(stat_text: str) -> Optional[int]:
    """The parent's PID in the text of /proc/PID/stat (after the command's closing paren)."""
    try:
        return int(stat_text.rsplit(")", 1)[1].split()[1])
    except (IndexError, ValueError):
        return None


def has_children(pid: int) -> bool:
    """Whether a live process has child processes (a scan of /proc)."""
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                if ppid_of(f.read()) == pid:
                    return True
        except OSError:
            continue
    return False


def wait_childless(pids: list[int], timeout: float = 5.0) -> bool:
    """Wait until none of `pids` has children (sshd's per-connection sessions, which reach the
    server's CPU time only once reaped); False on timeout."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if not any(has_children(p) for p in pids):
            return True
        time.sleep(0.02)
    return False


# ---------------------------------------------------------------- caches and sync

def can_drop_caches() -> bool:
    return os.access("/proc/sys/vm/drop_caches", os.W_OK)


def drop_caches(what: int = 3) -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write(f"{what}\n")


def mem_available() -> int:
    """MemAvailable of /proc/meminfo, in bytes (0 if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def warm_memory(nbytes: int, where: str = "/dev/shm") -> int:
    """Write `nbytes` (at most what memory and `where` leave, with 1 GiB spare) into a file in
    `where` (a tmpfs) and delete it, after touching and freeing as much in huge pages
    (`_touch_huge`); returns the bytes touched. A virtual machine that gives
    its idle memory back to the host (free page reporting) makes the next first touch of each
    page cost a fault in the host, about 2.5 s of system time per GiB here against 0.2-0.4 s for
    memory freed a moment before: which a tool gets depends on what ran before it. Touched and
    freed just before a run, the pages the run takes are of the fast kind for every tool."""
    try:
        st = os.statvfs(where)
    except OSError:
        return 0
    room = min(mem_available(), st.f_bavail * st.f_frsize) - (1 << 30)
    nbytes = max(0, min(nbytes, room))
    if nbytes == 0:
        return 0
    _touch_huge(nbytes)
    fd, path = tempfile.mkstemp(prefix="warm-memory-", dir=where)
    try:
        with os.fdopen(fd, "wb", buffering=0) as f:
            done = 0
            while done < nbytes:
                done += f.write(_MIB_OF_ONES[: nbytes - done])
    finally:
        os.unlink(path)
    return nbytes


_MIB_OF_ONES = b"\1" * (1 << 20)


def _touch_huge(nbytes: int) -> None:
    """Touches `nbytes` of anonymous memory in transparent huge pages (where the kernel gives
    them) and frees it: the 2 MiB blocks a file's large page-cache folios are carved from come
    back fast too, not only the 4 KiB pages the tmpfs file of `warm_memory` gets. A server
    writing 1 MiB files in one `pwrite` each took 1.5-1.9 s of CPU for 1,000 of them on a fresh
    process with only the tmpfs file touched, 0.7-0.8 s with this as well (2026-11-27)."""
    try:
        m = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    except (OSError, ValueError):
        return
    try:
        if hasattr(mmap, "MADV_HUGEPAGE"):
            m.madvise(mmap.MADV_HUGEPAGE)
        while m.tell() < nbytes:
            m.write(_MIB_OF_ONES[: nbytes - m.tell()])
    finally:
        m.close()


def syncfs(path: str) -> None:
    """sync the file system holding `path` (syncfs(2) through `sync -f`)."""
    target = path
    while not os.path.exists(target) and target not in ("/", ""):
        target = os.path.dirname(target)
    subprocess.run(["sync", "-f", target or "/"], check=False)


def read_tree(src: str) -> None:
    """Read every file of `src` (the warm-up of a warm run)."""
    subprocess.run(f"find {quote(src)} -type f -print0 | xargs -0 -r -P 16 -n 256 cat >/dev/null",
                   shell=True, check=False)


def stat_trees(*trees: str) -> None:
    """Read the directories of `trees` and stat every entry (the warm-up of a warm re-sync:
    what a re-sync reads is metadata)."""
    subprocess.run(["find", *trees, "-printf", "%s\n"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                   check=False)


def quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


# ---------------------------------------------------------------- one timed command

@dataclass
class Timed:
    seconds: float
    sync_seconds: float
    rc: int
    cpu: float
    timed_out: bool
    rss_kib: int = 0  # the command's largest peak resident memory (its own or a child's), 0: unknown


def run_timed(cmd: str, *, out: str, err: str, env: Mapping[str, str], timeout: float,
              receiver: Optional[subprocess.Popen] = None, sync_path: Optional[str] = None) -> Timed:
    """Run the shell command `cmd` (bash -o pipefail), timed with the monotonic clock from its
    start until it has exited, `receiver` (a process started before, e.g. `nc -l | tar -x`)
    has exited too, and then `sync -f sync_path` has returned. `cpu` is the user + system
    time of the command and its children (wait4), `rss_kib` their largest peak resident
    memory (GNU time, where installed)."""
    # A child forked from this (large) Python process keeps its peak resident memory across
    # exec: GNU time, a small process by then, tells the command's own (none without it).
    rss_file = out + ".rss"
    wrap = [GNU_TIME, "-f", "%M", "-o", rss_file] if os.access(GNU_TIME, os.X_OK) else []
    with open(out, "wb") as o, open(err, "ab") as e:
        t0 = time.monotonic()
        p = subprocess.Popen(wrap + ["bash", "-o", "pipefail", "-c", cmd], stdin=subprocess.DEVNULL, stdout=o,
                             stderr=e, env=dict(env), start_new_session=True)
        rc, cpu, timed_out = _wait(p, t0 + timeout)
        if receiver is not None:
            if rc != 0:
                stop_group(receiver)  # the sender failed: the receiver may never see EOF
            rrc, _, rto = _wait(receiver, t0 + timeout)
            timed_out = timed_out or rto
            rc = rc or rrc
        t1 = time.monotonic()
        if sync_path:
            syncfs(sync_path)
        t2 = time.monotonic()
    return Timed(t2 - t0, t2 - t1, rc, cpu, timed_out, _rss_of(rss_file) if wrap else 0)


GNU_TIME = "/usr/bin/time"


def _rss_of(path: str) -> int:
    """The peak resident memory (KiB) GNU time wrote last in `path` (0 if none: the command
    was killed, or the file is missing), and the file removed."""
    try:
        with open(path) as f:
            lines = [line.strip() for line in f if line.strip()]
        os.unlink(path)
        return int(lines[-1]) if lines and lines[-1].isdigit() else 0
    except OSError:
        return 0


def _wait(p: subprocess.Popen, deadline: float) -> tuple[int, float, bool]:
    """Wait for `p` (blocking wait4, so the clock stops when it exits); a timer kills its group
    at `deadline` (monotonic). Returns (exit code, CPU seconds, timed out)."""
    fired = threading.Event()

    def kill() -> None:
        fired.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(max(0.0, deadline - time.monotonic()), kill)
    timer.start()
    try:
        _, status, ru = os.wait4(p.pid, 0)
    finally:
        timer.cancel()
    p.returncode = os.waitstatus_to_exitcode(status)
    rc = p.returncode if p.returncode >= 0 else 128 - p.returncode
    if fired.is_set():
        rc = 124
    return rc, ru.ru_utime + ru.ru_stime, fired.is_set()
