"""The `resume` suite (part B of the old bench/resync.sh): a push into a fresh destination is
cut by `kill -9` of the client or of the server once loopback has carried `--kill-at` % of
the bytes a full copy carried, then the same command runs again; what it sends again, against
what was missing, says whether sprat resumes instead of starting over.

Variants (`--modes`): client (the client killed), server (the server killed, the first run has
`--retry-for 0s` so it exits; the server is restarted on the same port), server-retry (the
server killed, the client left with its default retries; the server restarted; measured from
the restart to the client's exit). Byte counts are `lo`'s received bytes in /proc/net/dev of
the harness's own network namespace (every loopback packet once, headers included)."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import time

from . import proc, report, servers, sets as setsmod, stats, verify

VARIANTS = ("client", "server", "server-retry")
FIELDS = ["stamp", "set", "variant", "round", "seconds", "exit", "check", "wire_bytes", "src_bytes", "kill_at_s",
          "kill_at_wire", "first_exit", "complete_bytes", "partial_bytes", "missing_bytes", "report_bytes",
          "report_not_sent", "report_attempts", "full_seconds", "full_wire", "note"]


def lo_bytes() -> int | None:
    """Bytes received on lo in this network namespace, None outside the harness's namespace."""
    if os.environ.get("SPRAT_HARNESS_NETNS") != "1":
        return None
    with open("/proc/net/dev") as f:
        for line in f:
            name, _, rest = line.partition(":")
            if name.strip() == "lo":
                return int(rest.split()[0])
    return None


def resume_state(src: str, tree: dict, dst: str) -> dict:
    """What a cut push left at `dst`: complete files (final name, the source's size and mtime
    to the ns), partial files' ranges their journal `.NAME.sprat-part.log` records (header
    SPRATPT3, size u64, mtime s i64 + ns u32, the source file's version u64; SPRATPT1 of
    earlier releases without the version; records offset u64, length u64, xxh3-128) when the
    header's size and mtime match the source, missing = the rest; recorded ranges whose bytes
    differ."""
    cb = pb = total = bad = 0
    cf = pf = 0
    for k, v in tree.items():
        if v[0] != "f":
            continue
        total += v[2]
        s = os.lstat(os.path.join(src, k))
        p = os.path.join(dst, k)
        try:
            d = os.lstat(p)
            if os.path.isfile(p) and not os.path.islink(p) and d.st_size == s.st_size and d.st_mtime_ns == s.st_mtime_ns:
                cf, cb = cf + 1, cb + s.st_size
                continue
        except OSError:
            pass
        head, name = os.path.split(k)
        try:
            with open(os.path.join(dst, head, "." + name + ".sprat-part.log"), "rb") as f:
                data = f.read()
        except OSError:
            continue
        header = {b"SPRATPT1": 28, b"SPRATPT3": 36}.get(data[:8])
        if header is None or len(data) < header:
            continue
        size, sec, nsec = struct.unpack_from("<QqI", data, 8)
        if size != s.st_size or sec * 10**9 + nsec != s.st_mtime_ns:
            continue
        ranges = sorted((o, o + n) for o, n in (struct.unpack_from("<QQ", data, off)
                                                for off in range(header, len(data) - 31, 32)) if n and o + n <= size)
        have = end = 0
        for a, b in ranges:
            a = max(a, end)
            if b > a:
                have, end = have + b - a, b
        pf, pb = pf + 1, pb + have
        try:
            with open(os.path.join(src, k), "rb") as fs, open(os.path.join(dst, head, "." + name + ".sprat-part"), "rb") as fp:
                for a, b in ranges:
                    fs.seek(a)
                    fp.seek(a)
                    if fs.read(b - a) != fp.read(b - a):
                        bad += b - a
        except OSError:
            bad += have
    return {"complete_files": cf, "complete_bytes": cb, "partial_files": pf, "partial_bytes": pb,
            "missing_bytes": total - cb - pb, "bad_bytes": bad}


def quiesce(pid: int, limit: float = 60.0) -> None:
    """Wait until `pid` has used no CPU and written nothing for 1 s (a server still writing what
    a killed client had sent), at most `limit` s."""
    def sample():
        try:
            with open(f"/proc/{pid}/io") as f:
                wb = next((int(l.split()[1]) for l in f if l.startswith("write_bytes")), 0)
        except OSError:
            wb = 0
        return proc.cpu_of(pid), wb

    end, prev, since = time.monotonic() + limit, None, time.monotonic()
    while time.monotonic() < end:
        now = sample()
        if now != prev:
            prev, since = now, time.monotonic()
        elif time.monotonic() - since >= 1.0:
            return
        time.sleep(0.1)


def _report(path: str) -> dict:
    from .runner import _json_report

    return _json_report(path)


def run_resume(h) -> str:
    plan = h.plan
    kill_at = plan.kill_at
    variants = plan.modes
    tree = plan.tree or setsmod.pick_tree(repo=h.repo)
    ready = {s: setsmod.ensure(setsmod.resolve_set(s, quick=plan.quick, seed=plan.seed, tree=tree,
                                                   tree_files=plan.tree_files), h.root, h.meta, h.sprat, h.log)
             for s in plan.sets}
    srv = servers.start_sprat(h, 0)
    srv_proc = next(p for p in h.procs.procs if p.pid == srv.pid)
    env = dict(h.sprat_env, **srv.env)
    conn = srv.ctx(0)["conn"].split()
    base = os.path.join(h.root, h.dst_rel_base, "resume")
    csv_path = os.path.join(h.outdir, "runs.csv")
    report.write_csv_header(csv_path, FIELDS)
    rows = []

    def cache(src):
        if "cold" in plan.caches:
            proc.drop_caches(3)
        else:
            proc.read_tree(src)

    full = {}
    for s, r in ready.items():  # the reference: a full copy's time and loopback bytes
        dst = os.path.join(base, f"{s}-full")
        cache(r.path)
        w0 = lo_bytes()
        t = proc.run_timed(" ".join(map(proc.quote, [h.sprat, "cp", "--json", *conn, r.path,
                                                    f"sprat://127.0.0.1:{srv.port}/{os.path.relpath(dst, h.root)}"])),
                           out=os.path.join(h.logs, f"{s}-full.out"), err=os.path.join(h.logs, f"{s}-full.err"),
                           env=env, timeout=plan.timeout)
        w1 = lo_bytes()
        c = verify.check(verify.load_manifest(r.manifest), dst, "count")
        if t.rc != 0 or c.status == "FAIL":
            raise SystemExit(f"bench/run resume: the full copy of {s} failed (exit {t.rc}): {c.detail}")
        full[s] = (t.seconds, None if w0 is None else w1 - w0)
        h.log(f"{s}: full copy {t.seconds:.3f} s, {full[s][1]} bytes on lo")
        subprocess.run(["rm", "-rf", dst])
    for rnd in range(1, plan.rounds + 1):
        for var in stats.rotate(list(variants), rnd - 1):
            for s, r in ready.items():
                row, srv, srv_proc = _one(h, s, r, var, rnd, srv, srv_proc, full[s], kill_at, conn, env, base, cache)
                rows.append(row)
                report.append_csv(csv_path, FIELDS, row)
    return _table(rows, kill_at)


def _one(h, s, r, var, rnd, srv, srv_proc, full, kill_at, conn, env, base, cache):
    tag = f"{s}-{var}-r{rnd}"
    dst = os.path.join(base, tag)
    url = f"sprat://127.0.0.1:{srv.port}/{os.path.relpath(dst, h.root)}"
    first = [h.sprat, "cp", "--json", *conn, *(["--retry-for", "0s"] if var == "server" else []), r.path, url]
    row = {"stamp": h.stamp, "set": s, "variant": var, "round": rnd, "src_bytes": r.bytes,
           "full_seconds": round(full[0], 4), "full_wire": full[1]}
    notes = []
    cache(r.path)
    w0, t0 = lo_bytes(), time.monotonic()
    out1, err1 = os.path.join(h.logs, f"{tag}-first.out"), os.path.join(h.logs, f"{tag}-first.err")
    with open(out1, "wb") as o, open(err1, "wb") as e:
        client = subprocess.Popen(first, stdout=o, stderr=e, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
    victim = client.pid if var == "client" else srv.pid
    killed = False
    while client.poll() is None:
        if (w0 is not None and full[1] and lo_bytes() - w0 >= full[1] * kill_at / 100) or \
                (w0 is None and time.monotonic() - t0 >= full[0] * kill_at / 100):
            os.kill(victim, signal.SIGKILL)
            killed = True
            break
        time.sleep(0.002)
    row["kill_at_s"] = round(time.monotonic() - t0, 3)
    row["kill_at_wire"] = "" if w0 is None else lo_bytes() - w0
    if not killed:
        notes.append(f"the first run ended (exit {client.returncode}) before the kill")
        row["first_exit"] = client.returncode
    elif var == "client":
        row["first_exit"] = client.wait()
        quiesce(srv.pid)
    else:
        h.procs.stop(srv_proc)
        if var == "server":
            try:
                row["first_exit"] = client.wait(120)
            except subprocess.TimeoutExpired:
                proc.stop_group(client)
                row["first_exit"] = client.returncode
                notes.append("the client (--retry-for 0s) still ran 120 s after the server was killed: killed")
    tree = verify.load_manifest(r.manifest)
    st = resume_state(r.path, tree, dst)
    row.update(complete_bytes=st["complete_bytes"], partial_bytes=st["partial_bytes"], missing_bytes=st["missing_bytes"])
    if st["bad_bytes"]:
        notes.append(f"{st['bad_bytes']} B of journal-recorded ranges differ from the source")
    cache(r.path)
    out2, err2 = os.path.join(h.logs, f"{tag}-rerun.out"), os.path.join(h.logs, f"{tag}-rerun.err")
    if killed and var != "client":
        port = srv.port
        srv = servers.start_sprat(h, 0, listen_port=port)
        srv_proc = next(p for p in h.procs.procs if p.pid == srv.pid)
    if var == "server-retry" and killed:
        w0, t0 = lo_bytes(), time.monotonic()
        rc = client.wait()
        secs, rep_path = time.monotonic() - t0, out1
        notes.append("measured from the server's restart to the retrying client's exit")
    else:
        w0 = lo_bytes()
        rerun = [a for a in first if a not in ("--retry-for", "0s")]
        t = proc.run_timed(" ".join(map(proc.quote, rerun)), out=out2, err=err2, env=env, timeout=h.plan.timeout)
        rc, secs, rep_path = t.rc, t.seconds, out2
    row["wire_bytes"] = "" if w0 is None else lo_bytes() - w0
    rep = _report(rep_path)
    row.update(seconds=round(secs, 4), exit=rc, report_bytes=rep.get("bytes", ""),
               report_not_sent=rep.get("bytes_not_sent", ""), report_attempts=rep.get("attempts", ""))
    if st["partial_bytes"] and not rep.get("bytes_not_sent"):
        notes.append(f"the re-run resumed nothing although journals recorded {st['partial_bytes']} B")
    c = verify.check(tree, dst, h.plan.verify)
    row["check"] = "FAIL" if rc != 0 else c.status
    if c.detail or rc:
        notes.append(f"exit {rc}; {c.detail}" if rc else c.detail)
    row["note"] = "; ".join(notes)
    h.log(f"{tag}: killed at {row['kill_at_s']} s / {row['kill_at_wire']} B on lo; missing {st['missing_bytes']} B; "
          f"re-run {secs:.3f} s, {row['wire_bytes']} B on lo; {row['check']} {row['note'][:120]}")
    subprocess.run(["rm", "-rf", dst])
    os.sync()
    return row, srv, srv_proc


def _table(rows: list[dict], kill_at: int) -> str:
    def frac(a, b):
        return "-" if a in ("", None) or not b else f"{int(a) / int(b):.3f}"

    out = [f"Each push cut by `kill -9` once lo carried {kill_at}% of a full copy's bytes, then the same "
           "command again; fractions are of the set's bytes. Goal of the issue: re-run lo < 0.55 of the set and "
           "< 0.05 beyond what was missing.", "",
           "| set | variant | round | killed at s | lo at the kill | missing | re-run lo | beyond missing | "
           "report bytes | not sent | attempts | re-run s | full copy s | check | goal |",
           "|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|"]
    for r in rows:
        b = r["src_bytes"]
        beyond = "-" if r.get("wire_bytes") in ("", None) else f"{(int(r['wire_bytes']) - int(r['missing_bytes'])) / b:.3f}"
        goal = "-"
        if beyond != "-":
            goal = "met" if int(r["wire_bytes"]) / b < 0.55 and float(beyond) < 0.05 else "missed"
        out.append(f"| {r['set']} | {r['variant']} | {r['round']} | {r['kill_at_s']} | {frac(r.get('kill_at_wire'), b)} | "
                   f"{frac(r['missing_bytes'], b)} | {frac(r.get('wire_bytes'), b)} | {beyond} | {r.get('report_bytes', '')} | "
                   f"{r.get('report_not_sent', '')} | {r.get('report_attempts', '')} | {r['seconds']:.3f} | "
                   f"{r['full_seconds']:.3f} | {r['check']} | {goal} |")
    notes = [f"- {r['set']} {r['variant']} r{r['round']}: {r['note']}" for r in rows if r.get("note")]
    return "\n".join(out + ([""] + notes if notes else [])) + "\n"
