"""Tree manifests and copy checks (the same manifest format as the old bench/lib.sh, so the
manifests it left in DATA_DIR/meta are reused).

A manifest maps each relative path ("." for the root) to (type, permission bits, size, mtime
in whole seconds, blake2b-128 digest of a file or a symlink's target); type is f, d, l or o.
`check` compares a destination with a source manifest: `count` compares counts, paths, types
and sizes; `full` also contents and link targets, and reports differing modes and mtimes as
"meta" (the copy is complete but not faithful in its metadata).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import statistics
from dataclasses import dataclass


def _digest(path: str) -> str:
    h = hashlib.blake2b(digest_size=16)
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def scan(root: str, hashing: bool) -> dict:
    """Every entry under `root` (not following symlinks), as manifest entries."""
    out = {}
    stack = [""]
    while stack:
        rel = stack.pop()
        path = os.path.join(root, rel) if rel else root
        st = os.lstat(path)
        out[rel or "."] = ("d", stat.S_IMODE(st.st_mode), 0, int(st.st_mtime), "")
        with os.scandir(path) as it:
            for e in it:
                r = os.path.join(rel, e.name) if rel else e.name
                st = e.stat(follow_symlinks=False)
                m = st.st_mode
                if stat.S_ISDIR(m):
                    stack.append(r)
                elif stat.S_ISREG(m):
                    h = _digest(e.path) if hashing else ""
                    out[r] = ("f", stat.S_IMODE(m), st.st_size, int(st.st_mtime), h)
                elif stat.S_ISLNK(m):
                    out[r] = ("l", 0, 0, 0, os.readlink(e.path))
                else:
                    out[r] = ("o", stat.S_IMODE(m), 0, int(st.st_mtime), "")
    return out


def save_manifest(tree: dict, path: str) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(tree, f)
    os.replace(path + ".tmp", path)


def load_manifest(path: str) -> dict:
    with open(path) as f:
        return {k: tuple(v) for k, v in json.load(f).items()}


def rehash(root: str, tree: dict, paths: list[str]) -> None:
    """Update the entries of `paths` (files changed under `root`) in `tree`, in place."""
    for r in paths:
        p = os.path.join(root, r)
        st = os.lstat(p)
        tree[r] = ("f", stat.S_IMODE(st.st_mode), st.st_size, int(st.st_mtime), _digest(p))


def counts(tree: dict) -> dict:
    c = {"f": 0, "d": 0, "l": 0, "o": 0, "bytes": 0}
    for t in tree.values():
        c[t[0]] += 1
        c["bytes"] += t[2]
    return c


def summary(tree: dict) -> dict:
    sizes = [v[2] for v in tree.values() if v[0] == "f"]
    return {
        "files": len(sizes),
        "bytes": sum(sizes),
        "dirs": sum(1 for v in tree.values() if v[0] == "d"),
        "symlinks": sum(1 for v in tree.values() if v[0] == "l"),
        "median": int(statistics.median(sizes)) if sizes else 0,
    }


@dataclass
class Check:
    """Outcome of one check: status ok / meta / FAIL, what the destination holds, and why."""

    status: str
    files: int
    bytes: int
    detail: str


def compare(src: dict, dst: dict, level: str) -> Check:
    """Compare two manifests (pure: `dst` scanned with hashing when level is full)."""
    cs, cd = counts(src), counts(dst)
    problems, meta = [], []
    for k, name in (("f", "files"), ("d", "dirs"), ("l", "symlinks"), ("o", "other"), ("bytes", "bytes")):
        if cs[k] != cd[k]:
            problems.append(f"{name} {cd[k]}/{cs[k]}")
    missing = sorted(set(src) - set(dst))
    extra = sorted(set(dst) - set(src))
    if missing:
        problems.append(f"{len(missing)} missing (e.g. {missing[0]})")
    if extra:
        problems.append(f"{len(extra)} extra (e.g. {extra[0]})")
    bad, modes, mtimes = [], [], []
    for k in sorted(set(src) & set(dst)):
        s, d = src[k], dst[k]
        if s[0] != d[0] or s[2] != d[2]:
            bad.append(f"{k} type/size {d[0]}{d[2]} vs {s[0]}{s[2]}")
        elif level == "full":
            if s[0] in "fl" and s[4] != d[4]:
                bad.append(f"{k} content" if s[0] == "f" else f"{k} link target")
            if s[0] in "fdo" and s[1] != d[1]:
                modes.append(k)
            if s[0] in "fo" and s[3] != d[3]:
                mtimes.append(k)
            if s[0] == "d" and s[3] != d[3]:
                mtimes.append(k + "/")
    if bad:
        problems.append(f"{len(bad)} differ (e.g. {bad[0]})")
    if modes:
        meta.append(f"{len(modes)} modes differ (e.g. {modes[0]})")
    if mtimes:
        meta.append(f"{len(mtimes)} mtimes differ (e.g. {mtimes[0]})")
    status = "FAIL" if problems else ("meta" if meta else "ok")
    return Check(status, cd["f"], cd["bytes"], "; ".join(problems + meta))


def check(src_manifest: dict, dst_root: str, level: str) -> Check:
    """Compare the tree at `dst_root` with a source manifest."""
    if not os.path.isdir(dst_root):
        return Check("FAIL", 0, 0, "destination missing")
    try:
        dst = scan(dst_root, level == "full")
    except OSError as e:
        return Check("FAIL", 0, 0, f"cannot scan the destination: {e}")
    return compare(src_manifest, dst, level)
