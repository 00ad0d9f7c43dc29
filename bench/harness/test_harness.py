"""Unit tests of the harness's pure parts: `python3 -m unittest discover bench/harness`
(from the repository root; no root, no network, no sprat binary needed, well under a second)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from harness import disposal, proc, progress, report, servers, sets, stats, suites, tools, verify  # noqa: E402

REPO = "/repo"



def parse_fails(test: unittest.TestCase, argv: list[str]) -> SystemExit:
    """Asserts that `suites.parse(argv)` exits (its message to stderr, hidden); returns the exit."""
    with test.assertRaises(SystemExit, msg=argv) as e:
        with open(os.devnull, "w") as devnull:
            old, sys.stderr = sys.stderr, devnull
            try:
                suites.parse(argv, REPO)
            finally:
                sys.stderr = old
    return e.exception

class Stats(unittest.TestCase):
    def test_median_odd_even_empty(self):
        self.assertEqual(stats.median([3.0, 1.0, 2.0]), 2.0)
        self.assertEqual(stats.median([4.0, 1.0, 2.0, 3.0]), 2.5)
        self.assertIsNone(stats.median([]))
        self.assertEqual(stats.median([float("nan"), 5.0]), 5.0)

    def test_ratio_and_paired(self):
        self.assertEqual(stats.ratio(3.0, 1.5), 2.0)
        self.assertIsNone(stats.ratio(None, 1.0))
        self.assertIsNone(stats.ratio(1.0, 0.0))
        self.assertEqual(stats.paired_ratios({1: 2.0, 2: 3.0, 3: 9.0}, {1: 1.0, 3: 3.0}), [2.0, 3.0])

    def test_formatting(self):
        self.assertEqual(stats.fmt_secs(1.23456), "1.235")
        self.assertEqual(stats.fmt_secs(34.567), "34.57")
        self.assertEqual(stats.fmt_secs(None), "-")
        self.assertEqual(stats.fmt_ratio(1.005), "1.005")
        self.assertEqual(stats.fmt_ratio(2.5), "2.50")
        self.assertEqual(stats.fmt_ratio(316.2), "316")
        self.assertEqual(stats.fmt_rate(100_000_000, 2.0), "50")
        self.assertEqual(stats.human_bytes(1536), "1.5 KiB")

    def test_rotate_gives_abcabc_orders(self):
        xs = ["a", "b", "c"]
        self.assertEqual([stats.rotate(xs, r) for r in range(4)],
                         [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]])
        self.assertEqual(stats.rotate([], 3), [])


class Sets(unittest.TestCase):
    def test_names_match_the_old_scripts_directories(self):
        s = sets.resolve_set("small")
        self.assertEqual(s.dir, "src-gen-small-100000x4KiB-seed1")
        self.assertEqual(s.recipe, "sprat gen --files 100000 --size 4KiB --seed 1")
        self.assertEqual(sets.resolve_set("k4").dir, s.dir)
        self.assertEqual(sets.resolve_set("mixed1g").dir, "src-gen-mixed-1GiB-gridftp-max16MiB-seed1")
        self.assertEqual(sets.resolve_set("big").dir, "src-gen-big-1x4GiB-seed1")
        self.assertEqual(sets.resolve_set("big", quick=True).dir, "src-gen-big-1x256MiB-seed1")
        self.assertEqual(sets.resolve_set("small", quick=True, seed=7).gen[-1], "7")

    def test_any_uniform_set(self):
        s = sets.resolve_set("20000x4KiB")
        self.assertEqual((s.dir, s.recipe), ("src-gen-small-20000x4KiB-seed1", "sprat gen --files 20000 --size 4KiB --seed 1"))
        self.assertEqual(sets.resolve_set("1x4GiB").dir, sets.resolve_set("big").dir)
        with self.assertRaises(ValueError):
            sets.resolve_set("0x4KiB")

    def test_tree(self):
        t = sets.resolve_set("tree", tree="/usr/share")
        self.assertEqual((t.dir, t.recipe, t.gen), ("src-tree", "/usr/share", None))
        self.assertEqual(sets.resolve_set("tree", tree="/usr/share", quick=True).dir, "src-tree-first2000")
        self.assertEqual(sets.resolve_set("tree", tree="/x/y z", tree_files=50).dir, "src-tree-x_y_z-first50")
        self.assertEqual(sets.resolve_set("tree", tree="/root/.cargo/registry/src").dir, "src-tree-root_.cargo_registry_src")
        with self.assertRaises(ValueError):
            sets.resolve_set("tree")

    def test_unknown_set(self):
        with self.assertRaisesRegex(ValueError, "unknown data set 'huge'"):
            sets.resolve_set("huge")

    def test_allocated_counts_blocks_as_du_does(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "a", "b"))
            for i, size in enumerate((0, 1, 4096, 70000)):
                with open(os.path.join(d, "a", f"f{i}"), "wb") as f:
                    f.write(b"x" * size)
            os.link(os.path.join(d, "a", "f3"), os.path.join(d, "a", "b", "hard"))
            os.symlink("f1", os.path.join(d, "a", "link"))
            du = int(subprocess.run(["du", "-s", "--block-size=1", d], capture_output=True, text=True,
                                    check=True).stdout.split()[0])
            self.assertEqual(sets.allocated(d), du)
            self.assertGreaterEqual(du, 70000 + 4096)


class Tools(unittest.TestCase):
    def test_expand_quotes_and_double_quotes(self):
        ctx = tools.quote_ctx({"src": "/a b/c", "args": "--x 1"}, verbatim=("args",))
        self.assertEqual(tools.expand("cp {args} {src} /d", ctx), "cp --x 1 '/a b/c' /d")
        self.assertEqual(tools.expand("ssh h cp {src!q}", ctx), "ssh h cp ''\"'\"'/a b/c'\"'\"''")
        with self.assertRaisesRegex(KeyError, "nope"):
            tools.expand("{nope}", ctx)

    def test_every_entry_expands_with_a_full_context(self):
        fields = ["sprat", "src", "dst", "src_rel", "dst_rel", "src_name", "host", "host2", "port", "port2",
                  "listen_port", "args", "args_remote", "conn", "conn2", "drop", "gen", "tmp", "ssh", "ssh_opts", "ssh_e",
                  "ssh_e2", "rclone_pass", "xrd_user", "calls", "remote_sprat", "alloc_4m"]
        ctx = {f: f"<{f}>" for f in fields}
        for t in tools.ENTRIES:
            for m, tmpl in list(t.modes.items()) + list(t.receiver.items()) + list(t.prepare.items()):
                tools.expand(tmpl, ctx)
            tools.expand(t.copy_at, ctx)
            self.assertTrue(set(t.modes) <= set(tools.MODES), t.name)

    def test_disk_limit_writes_the_allocated_bytes_and_reports_failures(self):
        disk = tools.registry()["disk"]
        with tempfile.TemporaryDirectory() as d:
            for reader, want in (("true", 0), ("false", 1)):
                dst = os.path.join(d, f"copy-{reader}")
                ctx = tools.quote_ctx({"sprat": reader, "src": d, "dst": dst, "alloc_4m": 2})
                rc = subprocess.run(["bash", "-o", "pipefail", "-c", tools.expand(disk.modes["local"], ctx)]).returncode
                self.assertEqual(rc, want, reader)
                self.assertEqual(os.path.getsize(os.path.join(dst, "disk-limit")), 8 << 20)
            ctx = tools.quote_ctx({"sprat": "true", "src": d, "dst": "/proc/none/x", "alloc_4m": 1})
            cmd = tools.expand(disk.modes["local"], ctx)
            self.assertNotEqual(subprocess.run(["bash", "-c", cmd], stderr=subprocess.DEVNULL).returncode, 0)

    def test_variants(self):
        reg = tools.registry()
        v = tools.parse_variant("sprat-s8=sprat --streams 8", reg)
        self.assertEqual((v.name, v.args, v.server), ("sprat-s8", ("--streams", "8"), "sprat"))
        self.assertEqual(reg["sprat-threads"].args, ("--io", "threads"))
        for bad in ("nobase", "x=", "x=nosuchtool"):
            with self.assertRaises(ValueError):
                tools.parse_variant(bad, reg)

    def test_resolve_aliases_and_unknown(self):
        reg = tools.registry()
        self.assertEqual([t.name for t in tools.resolve(["cp", "tar"], reg)], ["cpa", "tartar"])
        with self.assertRaisesRegex(ValueError, "unknown tool 'ftp'"):
            tools.resolve(["ftp"], reg)

    def test_servers_and_modes(self):
        reg = tools.registry()
        self.assertTrue(reg["sprat"].needs_server("push"))
        self.assertFalse(reg["sprat"].needs_server("local"))
        self.assertTrue(reg["tarnc"].receiver)
        self.assertFalse(reg["read"].sync)
        self.assertTrue(reg["write"].sync)

    def test_over_ssh(self):
        reg = tools.registry()
        ctx = {f: f"<{f}>" for f in ("sprat", "args", "ssh_e", "remote_sprat", "src", "dst", "host", "port", "ssh_opts")}
        self.assertEqual(tools.expand(reg["sprat-ssh"].modes["push"], ctx),
                         "<sprat> cp --json <args> -e <ssh_e> --remote-sprat <remote_sprat> <src> root@<host>:<dst>")
        via = tools.expand(reg["sprat-via-ssh"].modes["push"], ctx)
        self.assertIn("--via-ssh", via)
        self.assertIn("--remote-sprat <sprat> ", via)  # never the relayed wrapper: it would add a second --listen
        self.assertEqual(tools.expand(reg["scp"].modes["push"], ctx),
                         "scp -q -r -p -P <port> <ssh_opts> <args> <src> root@<host>:<dst>")
        for t in ("sprat-ssh", "sprat-via-ssh", "rsync-ssh", "scp"):
            self.assertEqual(reg[t].server, "sshd", t)

    def test_scp_through_a_relay_once_and_capped(self):
        reg = tools.registry()
        scp, rsync = reg["scp"], reg["rsync-ssh"]
        self.assertTrue(tools.runs_in_round(scp, None, 3))
        self.assertTrue(tools.runs_in_round(scp, 30.0, 1))
        self.assertFalse(tools.runs_in_round(scp, 30.0, 2))
        self.assertTrue(tools.runs_in_round(rsync, 30.0, 2))
        self.assertEqual(tools.time_limit(scp, 30.0, 1800), 120)
        self.assertEqual(tools.time_limit(scp, 30.0, 60), 60)
        self.assertEqual(tools.time_limit(scp, None, 1800), 1800)
        self.assertEqual(tools.time_limit(rsync, 30.0, 1800), 1800)


class Proc(unittest.TestCase):
    def test_ppid_of_and_has_children(self):
        self.assertEqual(proc.ppid_of("42 (a) b) c) S 7 42 42 0"), 7)
        self.assertIsNone(proc.ppid_of("garbage"))
        with open("/proc/self/stat") as f:
            self.assertEqual(proc.ppid_of(f.read()), os.getppid())
        p = subprocess.Popen(["sleep", "5"])
        try:
            self.assertTrue(proc.has_children(os.getpid()))
            self.assertFalse(proc.wait_childless([os.getpid()], timeout=0.05))
        finally:
            p.kill()
            p.wait()
        self.assertTrue(proc.wait_childless([os.getpid()], timeout=1))

    def test_warm_memory_touches_what_it_may_and_leaves_nothing(self):
        with tempfile.TemporaryDirectory() as d:
            if proc.mem_available() > (2 << 30):
                self.assertEqual(proc.warm_memory(3 << 20, where=d), 3 << 20)
            self.assertEqual(os.listdir(d), [])
            self.assertEqual(proc.warm_memory(0, where=d), 0)
            self.assertEqual(proc.warm_memory(1 << 20, where=os.path.join(d, "missing")), 0)


class Disposal(unittest.TestCase):
    def test_to_delete_frees_the_oldest_first_and_only_what_is_needed(self):
        kept = [("a", 5), ("b", 3), ("c", 7)]
        self.assertEqual(disposal.to_delete(kept, spare=10, reserve=10), [])
        self.assertEqual(disposal.to_delete(kept, spare=4, reserve=9), ["a"])
        self.assertEqual(disposal.to_delete(kept, spare=4, reserve=10), ["a", "b"])
        self.assertEqual(disposal.to_delete(kept, spare=0, reserve=100), ["a", "b", "c"])
        self.assertEqual(disposal.to_delete([], spare=0, reserve=1), [])
        # Bytes and files: whichever runs short decides.
        kept = [("a", 5, 100), ("b", 3, 1000), ("c", 7, 10)]
        self.assertEqual(disposal.to_delete(kept, spare=(100, 5000), reserve=(10, 5000)), [])
        self.assertEqual(disposal.to_delete(kept, spare=(100, 4500), reserve=(10, 5000)), ["a", "b"])
        self.assertEqual(disposal.to_delete(kept, spare=(4, 9000), reserve=(9, 5000)), ["a"])
        self.assertGreater(disposal.spare_files(tempfile.gettempdir()), 0)

    def test_a_tmpfs_has_no_more_spare_than_the_memory_still_available(self):
        with tempfile.TemporaryDirectory() as tmp:
            st = os.stat(tmp)
            dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
            meminfo = os.path.join(tmp, "meminfo")
            with open(meminfo, "w") as f:
                f.write("MemTotal:       24000000 kB\nMemAvailable:       1024 kB\n")
            on_disk = disposal.spare_bytes(tmp)
            self.assertGreater(on_disk, 1 << 20)
            for fstype, expect in (("tmpfs", 1 << 20), ("ext4", None)):
                mountinfo = os.path.join(tmp, f"mountinfo-{fstype}")
                with open(mountinfo, "w") as f:
                    f.write(f"36 25 {dev} / /somewhere rw,relatime shared:1 - {fstype} {fstype}-dev rw\n")
                self.assertEqual(disposal.fs_type(tmp, mountinfo), fstype)
                spare = disposal.spare_bytes(tmp, mountinfo=mountinfo, meminfo=meminfo)
                if expect is None:
                    self.assertGreater(spare, 1 << 20)
                else:
                    self.assertEqual(spare, expect)
            self.assertIsNone(disposal.mem_available(os.path.join(tmp, "missing")))
            self.assertIsNone(disposal.fs_type(tmp, os.path.join(tmp, "missing")))

    def test_keep_deletes_only_when_the_disk_runs_short(self):
        with tempfile.TemporaryDirectory() as tmp:
            paths = []
            for name in ("one", "two"):
                path = os.path.join(tmp, name)
                os.makedirs(path)
                with open(os.path.join(path, "f"), "wb") as f:
                    f.write(b"x" * 100)
                paths.append(path)
            roomy = disposal.Disposer(margin=0)
            roomy.keep(paths[0], 100)
            self.assertTrue(os.path.isdir(paths[0]))
            self.assertEqual(roomy.deleted, 0)
            spare = disposal.spare_bytes(os.path.join(tmp, "not", "yet"))
            self.assertGreater(spare, 0)
            logged = []
            short = disposal.Disposer(margin=spare * 4)  # more than this disk will ever have spare
            short.keep(paths[1], 100, logged.append)
            self.assertFalse(os.path.exists(paths[1]))
            self.assertEqual((short.deleted, short.kept, len(logged)), (1, [], 1))
            # Short of inodes alone.
            os.makedirs(paths[1])
            few = disposal.Disposer(margin=0, file_margin=disposal.spare_files(tmp) * 4)
            few.keep(paths[1], 100, nfiles=1)
            self.assertEqual((few.deleted, os.path.exists(paths[1])), (1, False))
            roomy.delete_all()
            self.assertFalse(os.path.exists(paths[0]))

    def test_stale_suites_are_the_idle_destination_directories(self):
        with tempfile.TemporaryDirectory() as d:
            self.assertEqual(disposal.stale_suites(os.path.join(d, "none")), [])
            for name, age in (("20261128-000000", 7200), ("20261128-010000", 60)):
                os.makedirs(os.path.join(d, name, "copy"))
                t = 1_800_000_000 - age
                os.utime(os.path.join(d, name), (t, t))
            with open(os.path.join(d, "a-file"), "w"):
                pass
            os.utime(os.path.join(d, "a-file"), (0, 0))
            self.assertEqual(disposal.stale_suites(d, now=1_800_000_000), [os.path.join(d, "20261128-000000")])
            disp = disposal.Disposer(meta=d)
            disp.remove(disposal.stale_suites(d, now=1_800_000_000))
            self.assertEqual(sorted(os.listdir(d)), ["20261128-010000", "a-file", disposal.STAMP])

    def test_journal_less_ext4_reads_mountinfo_and_jbd2(self):
        with tempfile.TemporaryDirectory() as tmp:
            dev = os.stat(tmp).st_dev
            mountinfo, jbd2 = os.path.join(tmp, "mountinfo"), os.path.join(tmp, "jbd2")
            os.makedirs(jbd2)

            def mounted(fstype: str) -> None:
                with open(mountinfo, "w") as f:
                    f.write("22 27 0:21 / /proc rw,relatime - proc proc rw\n"
                            f"27 1 {os.major(dev)}:{os.minor(dev)} / / rw,relatime - {fstype} /dev/fakedisk rw\n")

            mounted("ext4")
            self.assertTrue(disposal.journal_less_ext4(tmp, mountinfo, jbd2))
            os.makedirs(os.path.join(jbd2, "fakedisk-8"))
            self.assertFalse(disposal.journal_less_ext4(tmp, mountinfo, jbd2))
            os.rmdir(os.path.join(jbd2, "fakedisk-8"))
            mounted("xfs")
            self.assertFalse(disposal.journal_less_ext4(tmp, mountinfo, jbd2))

    def test_wait_out_deletions_only_after_a_recorded_recent_one(self):
        with tempfile.TemporaryDirectory() as tmp:
            slept, logged = [], []
            self.assertEqual(disposal.wait_out_deletions(tmp, tmp, logged.append, sleep=slept.append), 0.0)
            d = disposal.Disposer(meta=tmp)
            path = os.path.join(tmp, "copy")
            os.makedirs(path)
            d.kept.append((path, 1))
            d.delete_all()
            self.assertFalse(os.path.exists(path))
            with open(os.path.join(tmp, disposal.STAMP)) as f:
                last = float(f.read())
            later = last + disposal.RECENT_S + 1
            self.assertEqual(disposal.wait_out_deletions(tmp, tmp, logged.append, now=lambda: later,
                                                         sleep=slept.append), 0.0)
            # 60 s after the deletion; during the wait another suite finishes deleting (the
            # record moves 100 s on), so a second wait follows.
            clock = [last + 60]

            def sleep(s):
                slept.append(s)
                clock[0] += s
                if len(slept) == 1:
                    with open(os.path.join(tmp, disposal.STAMP), "w") as f:
                        f.write(f"{last + 100:.0f}\n")

            left = disposal.wait_out_deletions(tmp, tmp, logged.append, now=lambda: clock[0], sleep=sleep)
            if disposal.journal_less_ext4(tmp):
                self.assertEqual(slept, [disposal.RECENT_S - 60, 100])
                self.assertEqual((left, len(logged)), (disposal.RECENT_S + 40, 2))
            else:
                self.assertEqual((left, slept, logged), (0.0, [], []))


class Servers(unittest.TestCase):
    def test_relayed_wrapper_announces_the_relay(self):
        w = servers.relayed_sprat_wrapper("/t/my sprat", 4242)
        self.assertTrue(w.startswith("#!/bin/sh\n"))
        self.assertIn("'/t/my sprat' \"$@\" --listen 127.0.0.3:4242 | ", w)
        # the sed program, run on the server's first line, rewrites only the listening address
        sed = w.split("sed -u ", 1)[1].strip()
        prog = shlex.split(sed)[0]
        out = subprocess.run(["sed", prog], input="listening on 127.0.0.3:4242\nfingerprint SHA256:x\n",
                             capture_output=True, text=True, check=True).stdout
        self.assertEqual(out, "listening on 127.0.0.2:4242\nfingerprint SHA256:x\n")

    def test_relay_connections_counts_forwarded_ones_only(self):
        log = ("sprat relay: 127.0.0.2:0 -> 127.0.0.3:22: RTT 30.0 ms, no rate cap per direction (shared), "
               "window 4 MiB per connection\n"
               "sprat relay: 127.0.0.1:5 -> 127.0.0.2:40 -> 127.0.0.3:22\n"
               "sprat relay: connection 1: injecting Faults\n"
               "sprat relay: 127.0.0.1:6 -> 127.0.0.2:41 -> 127.0.0.3:41\n"
               "sprat relay: cannot connect to 127.0.0.3:41: refused\n")
        self.assertEqual(servers.relay_connections(log), 2)
        self.assertEqual(servers.relay_connections(""), 0)


class Suites(unittest.TestCase):
    def test_brief_example(self):
        p = suites.parse(["peers", "--sets", "tree,small", "--tools", "sprat,rsyncd,tarnc,gridftp", "--rounds", "3"], REPO)
        self.assertEqual(p.sets, ["tree", "small"])
        self.assertEqual(p.tools, ["sprat", "rsyncd", "tarnc", "gridftp"])
        self.assertEqual((p.rounds, p.baseline, p.modes), (3, "sprat", ["push"]))
        self.assertEqual(p.sprat, "/repo/target/release/sprat")
        self.assertEqual(len(p.cells()), 2 * 1 * 2 * 1)

    def test_defaults_of_a_suite(self):
        p = suites.parse(["wan"], REPO)
        self.assertEqual(p.rtts, [0.2, 10.0, 30.0, 100.0])
        self.assertEqual(p.caches, ["warm"])
        self.assertEqual(p.data_dir, "/dev/shm/sprat-harness")
        self.assertTrue(p.netns)
        self.assertFalse(suites.parse(["local"], REPO).netns)

    def test_ssh_suite(self):
        p = suites.parse(["ssh", "--quick", "--rounds", "1"], REPO)
        self.assertEqual(p.tools, ["sprat-ssh", "sprat-via-ssh", "rsync-ssh", "scp"])
        self.assertEqual((p.sets, p.modes, p.caches, p.rtts), (["tree", "small"], ["push"], ["warm"], [None, 30.0]))
        self.assertEqual((p.baseline, p.limits, p.rate, p.data_dir), ("sprat-ssh", [], "0", "/dev/shm/sprat-harness"))
        self.assertEqual(suites.parse(["ssh", "--rate", "1gbit"], REPO).rate, "1gbit")
        self.assertEqual(suites.parse(["wan"], REPO).rate, "1gbit")

    def test_options(self):
        p = suites.parse(["local", "--cache", "cold", "--rtts", "none,30", "--limits", "none",
                          "--variant", "s1=sprat --streams 1", "--old-sprat", "/old", "--sprat-args", "--io threads"], REPO)
        self.assertEqual(p.caches, ["cold"])
        self.assertEqual(p.rtts, [None, 30.0])
        self.assertEqual(p.limits, [])
        self.assertEqual(p.tools[-2:], ["s1", "sprat-old"])
        self.assertEqual(p.sprat_args, ["--io", "threads"])
        reg = suites.tool_registry(p)
        self.assertEqual(reg["sprat-old"].bin, "/old")
        self.assertEqual(reg["sprat-old"].server, "sprat-old")
        # With --tools too (once, even when named there).
        p = suites.parse(["wan", "--tools", "sprat", "--old-sprat", "/old"], REPO)
        self.assertEqual(p.tools, ["sprat", "sprat-old"])
        p = suites.parse(["wan", "--tools", "sprat-old,sprat", "--old-sprat", "/old"], REPO)
        self.assertEqual(p.tools, ["sprat-old", "sprat"])

    def test_bad_input_exits_2(self):
        for argv in (["nosuite"], ["local", "--rounds", "0"], ["local", "--cache", "hot"],
                     ["local", "--tools", "ftp"], ["local", "--sets", "huge"], ["local", "--modes", "noop-push"],
                     ["local", "--rtts", "x"], ["local", "--limits", "sprat"]):
            with self.subTest(argv=argv):
                self.assertEqual(parse_fails(self, argv).code, 2)


def _row(tool, rnd, secs, kind="copy", check="ok", exit="0", **kw):
    r = {"set": "small", "mode": "push", "cache": "cold", "rtt_ms": "", "round": str(rnd), "tool": tool,
         "kind": kind, "seconds": str(secs), "check": check, "exit": exit, "src_files": "10", "src_bytes": "1000000"}
    r.update(kw)
    return r


class Report(unittest.TestCase):
    def rows(self):
        return [_row("read", 1, 0.5, kind="read", check="-"), _row("write", 1, 0.8, kind="write", check="-"),
                _row("sprat", 1, 1.0), _row("rsyncd", 1, 3.0), _row("sprat", 2, 2.0), _row("rsyncd", 2, 3.0),
                _row("read", 2, 0.7, kind="read", check="-"), _row("write", 2, 1.0, kind="write", check="-"),
                _row("rsyncd", 3, 99.0, check="FAIL", exit="1", note="exit 1: boom")]

    def test_summarize_medians_limits_and_failures(self):
        (c,) = report.summarize(self.rows())
        self.assertEqual(c.median("sprat"), 1.5)
        self.assertEqual(c.median("rsyncd"), 3.0)  # the failed run does not count
        self.assertEqual(c.median("write"), 0.9)
        self.assertEqual(report.limit_of(c, {"read": "read", "write": "write"}, None, False), (0.9, "write"))
        self.assertEqual(report.check_summary(c.checks["rsyncd"]), "FAIL 1/3")
        self.assertIn("boom", c.notes["rsyncd"])

    def test_limit_includes_the_cap_through_a_relay(self):
        (c,) = report.summarize(self.rows())
        # 1 MB at 1 Mbit/s = 8 s: slower than every storage limit
        self.assertEqual(report.limit_of(c, {"read": "read"}, 1e6, True), (8.0, "cap"))
        self.assertEqual(report.rate_bits("1gbit"), 1e9)
        self.assertEqual(report.rate_bits("100mbit"), 1e8)
        self.assertIsNone(report.rate_bits("fast"))

    def test_markdown_table(self):
        md = report.markdown(report.summarize(self.rows()), ["sprat", "rsyncd"], {"read": "read", "write": "write"},
                             "sprat", None)
        lines = md.splitlines()
        self.assertEqual(lines[0], "| set | mode | cache | t_limit s (which) | sprat s | t_limit / sprat | rsyncd / sprat |")
        self.assertEqual(lines[2], "| small | push | cold | 0.900 (write) | 1.500 | 0.60 | 2.00 (FAIL 1/3) |")
        self.assertIn("| small | push | cold | rsyncd | 3.000 | 3.000-3.000 | 0 | 3.00, 1.50 | - | - | - | - | FAIL 1/3 |",
                      md)

    def test_markdown_gives_median_cpu_and_peak_memory(self):
        rows = self.rows()
        for r, (cpu, crss, srss) in zip([r for r in rows if r["tool"] == "sprat"], [(0.5, 100, 40), (0.7, 300, "")]):
            r.update(client_cpu=cpu, server_cpu=1.0, client_rss_mib=crss, server_rss_mib=srss)
        md = report.markdown(report.summarize(rows), ["sprat", "rsyncd"], {}, "sprat", None)
        # A run whose server's memory is unknown (a forking server) leaves it out of the median.
        self.assertIn("| small | push | cold | sprat | 1.500 | 1.000-2.000 | 1 | - | 0.60 | 1.00 | 200 | 40 | ok |", md)

    def test_copy_limit_has_its_own_column_and_does_not_set_t_limit(self):
        rows = self.rows() + [_row("rw", 1, 1.2, kind="rw", check="-"), _row("rw", 2, 1.4, kind="rw", check="-")]
        kinds = {"read": "read", "write": "write", "rw": "rw"}
        (c,) = report.summarize(rows)
        self.assertEqual(report.limit_of(c, kinds, None, False), (0.9, "write"))
        lines = report.markdown([c], ["sprat", "rsyncd"], kinds, "sprat", None).splitlines()
        self.assertEqual(lines[0], "| set | mode | cache | t_limit s (which) | sprat s | t_limit / sprat | "
                                   "rw limit / sprat | rsyncd / sprat |")
        self.assertEqual(lines[2], "| small | push | cold | 0.900 (write) | 1.500 | 0.60 | 0.87 | 2.00 (FAIL 1/3) |")

    def test_csv_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "runs.csv")
            report.write_csv_header(p, ["tool", "note"])
            report.append_csv(p, ["tool", "note"], {"tool": "a", "note": "x,\ny"})
            self.assertEqual(report.read_csv(p), [{"tool": "a", "note": "x, | y"}])


class Verify(unittest.TestCase):
    def test_compare(self):
        src = {".": ("d", 0o755, 0, 1, ""), "f": ("f", 0o644, 3, 5, "h1"), "l": ("l", 0, 0, 0, "t")}
        self.assertEqual(verify.compare(src, dict(src), "full").status, "ok")
        meta = dict(src, f=("f", 0o600, 3, 6, "h1"))
        c = verify.compare(src, meta, "full")
        self.assertEqual(c.status, "meta")
        self.assertIn("1 modes differ", c.detail)
        self.assertEqual(verify.compare(src, meta, "count").status, "ok")
        bad = dict(src, f=("f", 0o644, 3, 5, "h2"))
        self.assertEqual(verify.compare(src, bad, "full").status, "FAIL")
        missing = {k: v for k, v in src.items() if k != "l"}
        self.assertIn("1 missing (e.g. l)", verify.compare(src, missing, "count").detail)

    def test_scan_a_real_tree(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "a"))
            with open(os.path.join(d, "a", "f"), "wb") as f:
                f.write(b"xyz")
            os.symlink("f", os.path.join(d, "a", "l"))
            t = verify.scan(d, hashing=True)
            self.assertEqual(sorted(t), [".", "a", "a/f", "a/l"])
            self.assertEqual(t["a/l"][4], "f")
            self.assertEqual(verify.summary(t)["files"], 1)
            self.assertEqual(verify.check(t, d, "full").status, "ok")
            self.assertEqual(verify.check(t, os.path.join(d, "nope"), "full").status, "FAIL")


class Special(unittest.TestCase):
    def test_relay_theory(self):
        from harness import special

        self.assertEqual(special.relay_theory(1, 4 << 20, 100, 1e9), (4 << 20) / 0.1)
        self.assertEqual(special.relay_theory(16, 4 << 20, 10, 1e9), 1e9 / 8)

    def test_sftp_quote_and_sums(self):
        from harness import special

        self.assertEqual(special.sftp_quote('/a b/c*"d'), '"/a b/c\\*\\"d"')
        h = "ab" * 32
        self.assertEqual(special.check_sums(f"{h}  /x/pkg2/a/b\n{h}  ./c\n", {"a/b": h, "c": h}), "ok")
        self.assertIn("1 sums missing", special.check_sums(f"{h}  ./c\n", {"a/b": h, "c": h}))
        self.assertIn("1 differ", special.check_sums(f"{'cd' * 32}  ./c\n", {"c": h}))

    def test_overhead_tables(self):
        from harness import special

        rep = {"total_bytes": 100, "read": {"t0_s": 1e-5, "rate_bytes_per_s": 5e8, "r2": 0.99},
               "runs": [{"subsystem": "read", "files": 10, "bytes": 100, "seconds": 0.5}], "predictions": [[10, 0.4, 0.5]]}
        md = special.overhead_tables([rep])
        self.assertIn("| read | 10.0 us | 500 MB/s | 0.990 | 1/1 |", md)
        self.assertIn("| network (memory to memory) | - | - | - | 0/1 |", md)
        self.assertIn("| 10 | 0.400 | 0.500 | 1.25 |", md)


class Resume(unittest.TestCase):
    def test_resume_state_reads_journals(self):
        import struct

        from harness import resume

        with tempfile.TemporaryDirectory() as d:
            src, dst = os.path.join(d, "s"), os.path.join(d, "d")
            os.makedirs(src)
            os.makedirs(dst)
            for n, data in (("done", b"x" * 10), ("half", b"0123456789abcdef")):
                with open(os.path.join(src, n), "wb") as f:
                    f.write(data)
            st = os.stat(os.path.join(src, "done"))
            with open(os.path.join(dst, "done"), "wb") as f:
                f.write(b"x" * 10)
            os.utime(os.path.join(dst, "done"), ns=(st.st_atime_ns, st.st_mtime_ns))
            hs = os.stat(os.path.join(src, "half"))
            with open(os.path.join(dst, ".half.sprat-part"), "wb") as f:
                f.write(b"01234567" + b"\0" * 8)
            with open(os.path.join(dst, ".half.sprat-part.log"), "wb") as f:
                f.write(b"SPRATPT3" + struct.pack("<QqIQ", 16, hs.st_mtime_ns // 10**9, hs.st_mtime_ns % 10**9, 77))
                f.write(struct.pack("<QQ", 0, 8) + b"h" * 16)
                f.write(b"torn")
            tree = verify.scan(src, hashing=False)
            got = resume.resume_state(src, tree, dst)
            self.assertEqual((got["complete_bytes"], got["partial_bytes"], got["missing_bytes"], got["bad_bytes"]),
                             (10, 8, 8, 0))

    def test_lo_bytes_only_in_the_harness_namespace(self):
        from harness import resume

        old = os.environ.pop("SPRAT_HARNESS_NETNS", None)
        try:
            self.assertIsNone(resume.lo_bytes())
        finally:
            if old is not None:
                os.environ["SPRAT_HARNESS_NETNS"] = old



class Progress(unittest.TestCase):
    def test_eta_errors_last_estimate_by_each_fraction(self):
        # T = 100: at 10% the last estimate is t=8 -> 80 (left 92), at 25% t=20 -> 85 (left 80),
        # at 50% t=45 -> None (no value shown then)
        etas = [(1.0, 200.0, 1, 10), (8.0, 80.0, 2, 20), (20.0, 85.0, 3, 30), (45.0, None, 4, 40), (60.0, 40.0, 5, 50)]
        e = progress.eta_errors(100.0, etas)
        self.assertAlmostEqual(e[0.10], 12 / 92)
        self.assertAlmostEqual(e[0.25], 5 / 80)
        self.assertIsNone(e[0.50])

    def test_eta_errors_none_shown_and_exact(self):
        self.assertEqual(progress.eta_errors(10.0, []), {0.10: None, 0.25: None, 0.50: None})
        self.assertEqual(progress.eta_errors(10.0, [(2.0, 8.0, None, None)])[0.25], 0.0)
        self.assertIsNone(progress.eta_errors(10.0, [(2.0, 8.0, None, None)])[0.10])

    def test_split_stamped_keeps_partial_lines(self):
        buf, got = progress.split_stamped(b"", b"a\rb\n  \nc", 1.5, rb"[\r\n]")
        self.assertEqual((buf, got), (b"c", [(1.5, "a"), (1.5, "b")]))
        buf, got = progress.split_stamped(buf, b"d\n", 2.0, rb"\n")
        self.assertEqual((buf, got), (b"", [(2.0, "cd")]))

    def test_rsync_progress2(self):
        lines = [(1.0, "        229,376   0%    1.00MB/s    0:16:31 (xfr#14, ir-chk=1000/1014)"),
                 (2.0, "     32,768,000  12%   23.44MB/s    0:00:09  "),
                 (3.0, "    671,088,640  67%   24.00MB/s    1:02:03"),
                 (4.0, "sending incremental file list"), (5.0, "1-small/f0001")]
        self.assertEqual(progress.rsync_etas(lines), [(2.0, 9, None, None), (3.0, 3723, None, None)])

    def test_rclone_json_stats(self):
        lines = [(1.0, '{"level":"info","msg":"x","stats":{"bytes":1024,"eta":null,"transfers":0}}'),
                 (2.0, '{"level":"info","msg":"y","stats":{"bytes":4096,"eta":12,"transfers":3}}'),
                 (3.0, '{"level":"info","msg":"no stats"}'), (4.0, "not json")]
        self.assertEqual(progress.rclone_etas(lines), [(1.0, None, 0, 1024), (2.0, 12, 3, 4096)])

    def test_sprat_json_events(self):
        lines = [(1.0, '{"event":"progress","eta_s":5.5,"files_done":10,"bytes_done":100}'),
                 (2.0, '{"event":"done","seconds":3}'), (3.0, "garbage"), (4.0, "[1, 2]")]
        self.assertEqual(progress.sprat_etas(lines), [(1.0, 5.5, 10, 100)])

    def test_eta_table_medians_and_labels(self):
        rs = [{"order": "a", "tool": "sprat-push", "total": 40.0, "errors": {0.1: 1.44, 0.25: 0.09, 0.5: None}, "check": "ok"},
              {"order": "b", "tool": "rsync-local", "total": 43.7, "errors": {0.1: 0.37, 0.25: 0.47, 0.5: 0.73}, "check": "ok"},
              {"order": "b", "tool": "rclone-local", "total": 1.0, "errors": {0.1: None, 0.25: None, 0.5: None}, "check": "FAIL"}]
        t = progress.eta_table(rs).splitlines()
        self.assertEqual(t[2], "| sprat | small then large | push | 40.0 | 144% | 9% | none shown |")
        self.assertEqual(t[3], "| rsync | large then small | local | 43.7 | 37% | 47% | 73% |")
        self.assertIn("FAIL", t[4])

    def test_overhead_lines_paired_ratios(self):
        def row(tool, mode, rnd, secs, cpu):
            return {"set": "small", "mode": mode, "cache": "warm", "tool": tool, "round": rnd, "seconds": secs,
                    "client_cpu": cpu, "exit": 0, "check": "ok", "kind": "copy"}
        rows = [row("progress-off", "local", 1, 10.0, 5.0), row("progress-on", "local", 1, 11.0, 6.0),
                row("progress-on", "local", 2, 12.0, 6.0), row("progress-off", "local", 2, 10.0, 4.0),
                row("progress-on", "local", 3, 99.0, 9.0) | {"check": "FAIL"}]
        out = progress.overhead_lines(rows).splitlines()
        self.assertEqual(len(out), 3)
        self.assertIn("10.00 / 11.50", out[2])
        self.assertIn("1.150 (1.100-1.200)", out[2])
        self.assertIn("4.50 / 6.00", out[2])
        self.assertIn("1.350", out[2])

    def test_suites_parse(self):
        p = suites.parse(["eta"], REPO)
        self.assertEqual(p.tools, ["sprat-local", "sprat-push", "sprat-pull", "rsync-local", "rclone-local"])
        self.assertEqual((p.modes, p.rounds, p.bwlimit_mib), (["a", "b"], 1, 48.0))
        p = suites.parse(["eta", "--quick", "--sets", "200x16KiB,2x4MiB", "--modes", "b", "--bwlimit-mib", "24"], REPO)
        self.assertEqual((p.sets, p.modes, p.bwlimit_mib), (["200x16KiB", "2x4MiB"], ["b"], 24.0))
        self.assertEqual(progress._parts(p), ("200x16KiB", "2x4MiB"))
        self.assertEqual(progress._parts(suites.parse(["eta"], REPO)), ("20000x16KiB", "20x32MiB"))
        for bad in (["eta", "--tools", "cpa"], ["eta", "--modes", "push"], ["eta", "--sets", "small,big"],
                    ["eta", "--sets", "1x1KiB"], ["local", "--bwlimit-mib", "4"], ["eta", "--limits", "read"]):
            parse_fails(self, bad)
        p = suites.parse(["progress-overhead"], REPO)
        self.assertEqual((p.sets, p.tools, p.modes, p.baseline, p.rounds, p.limits),
                         (["small"], ["progress-off", "progress-on"], ["local", "push"], "progress-off", 5, []))
        p = suites.parse(["servers"], REPO)
        self.assertEqual((p.sets, p.rate, p.data_dir, p.suite.special), (["k64"], "200mbit", "/dev/shm/sprat-harness", True))
        self.assertEqual(p.modes, ["push", "pull"])
        p = suites.parse(["servers", "--sets", "small", "--rate", "80mbit", "--modes", "pull"], REPO)
        self.assertEqual((p.sets, p.rate, p.modes), (["small"], "80mbit", ["pull"]))
        for bad in (["servers", "--tools", "rsyncd"], ["servers", "--limits", "read"], ["servers", "--modes", "third"]):
            parse_fails(self, bad)
        reg = tools.registry()
        self.assertEqual(reg["progress-on"].args, ("--progress",))
        self.assertFalse(reg["progress-on"].sync or reg["progress-off"].sync)

    def test_eta_templates_expand(self):
        raw = {"sprat": "/s", "src": "/r/a", "dst": "/r/d x", "src_rel": "a", "dst_rel": "d x", "rate_mib": "24",
               "rate_kib": 24576, "host": "127.0.0.1", "port": 9, "conn": "--no-encryption"}
        ctx = tools.quote_ctx(raw, ("conn",))
        cmds = {n: tools.expand(t.cmd, ctx) for n, t in progress.ETA_TOOLS.items()}
        self.assertEqual(cmds["sprat-push"], "/s cp --json-events --bwlimit 24MiB/s --no-encryption /r/a sprat://127.0.0.1:9/'d x'")
        self.assertEqual(cmds["rsync-local"], "rsync -a --info=progress2 --bwlimit=24576 /r/a/ '/r/d x'/")
        self.assertIn("--bwlimit 24M ", cmds["rclone-local"])

if __name__ == "__main__":
    unittest.main()
