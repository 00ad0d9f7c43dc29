"""Data sets: what each name means (a `sprat gen` recipe or a snapshot of a real tree), their
directory names under DATA_DIR/root (the same names the old bench/*.sh scripts used, so sets
made by them are reused), and making them once (with a manifest) for later runs.

`resolve_set` and the recipes are pure; `ensure` makes a set on disk.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from typing import Optional

from . import verify


@dataclass(frozen=True)
class DataSet:
    """One data set: `name` as given on the command line, `dir` its directory name under the
    data root, `gen` the `sprat gen` arguments (None for a tree snapshot), `tree` the real tree
    to snapshot and `tree_files` how many of its files (0 = all)."""

    name: str
    dir: str
    desc: str
    gen: Optional[tuple[str, ...]] = None
    tree: Optional[str] = None
    tree_files: int = 0

    @property
    def recipe(self) -> str:
        """One line saying how the set is made; a set whose recipe changed is remade."""
        if self.gen is not None:
            return "sprat gen " + " ".join(self.gen)
        return str(self.tree)


# name -> (full recipe, quick recipe); a recipe is (kind, args). Sizes match the old scripts.
_GEN = {
    "small": (("files", "100000", "4KiB"), ("files", "5000", "4KiB"), "files of 4 KiB"),
    "k16": (("files", "1600", "16KiB"), ("files", "400", "16KiB"), "files of 16 KiB"),
    "k64": (("files", "10000", "64KiB"), ("files", "1000", "64KiB"), "files of 64 KiB"),
    "m1": (("files", "1000", "1MiB"), ("files", "64", "1MiB"), "files of 1 MiB"),
    "mixed": (("total", "2GiB"), ("total", "64MiB"), "GridFTP file sizes capped at 16 MiB"),
    "mixed1g": (("total", "1GiB"), ("total", "64MiB"), "GridFTP file sizes capped at 16 MiB"),
    "big": (("files", "1", "4GiB"), ("files", "1", "256MiB"), "one large file"),
}
ALIASES = {"k4": "small", "gridftp": "mixed"}
SET_NAMES = tuple(sorted(list(_GEN) + ["tree"]))

TREE_CANDIDATES_MIN = 10000


def resolve_set(
    name: str, *, quick: bool = False, seed: int = 1, tree: Optional[str] = None, tree_files: int = 0
) -> DataSet:
    """The data set called `name` (an alias such as k4 is accepted). `quick` picks the small
    smoke-run version; `tree` is the real tree of the `tree` set (required for it)."""
    key = ALIASES.get(name, name)
    if key == "tree":
        if not tree:
            raise ValueError("the tree set needs a real tree (--tree DIR)")
        n = tree_files if tree_files else (2000 if quick else 0)
        # /usr/share keeps the old scripts' names (src-tree, src-tree-firstN); another tree gets
        # its path in the name, so that it never replaces that snapshot
        slug = "" if os.path.normpath(tree) == "/usr/share" else "-" + re.sub(r"[^A-Za-z0-9.]+", "_", tree.strip("/"))
        d = f"src-tree{slug}" if n == 0 else f"src-tree{slug}-first{n}"
        what = f"snapshot of {tree}" if n == 0 else f"first {n} files (sorted paths) of {tree}"
        return DataSet(name=name, dir=d, desc=what, tree=tree, tree_files=n)
    m = re.fullmatch(r"([1-9][0-9]*)x([0-9]+(?:[KMGT]i?B|B)?)", key)
    if m:  # any uniform set: 20000x4KiB
        nfiles, size = m.groups()
        gen = ("--files", nfiles, "--size", size, "--seed", str(seed))
        d = f"src-gen-{'big' if nfiles == '1' else 'small'}-{nfiles}x{size}-seed{seed}"
        return DataSet(name=name, dir=d, desc=f"`sprat gen {' '.join(gen)}`: {int(nfiles):,} files of {size}", gen=gen)
    if key not in _GEN:
        raise ValueError(f"unknown data set '{name}' (known: {', '.join(SET_NAMES)}, aliases k4, gridftp, or NxSIZE such as 20000x4KiB)")
    full, small, what = _GEN[key]
    kind, *args = small if quick else full
    if kind == "files":
        nfiles, size = args
        gen = ("--files", nfiles, "--size", size, "--seed", str(seed))
        kind_dir = "big" if nfiles == "1" else "small"
        d = f"src-gen-{kind_dir}-{nfiles}x{size}-seed{seed}"
        desc = f"{int(nfiles):,} {what}" if nfiles != "1" else f"{what} of {size}"
    else:
        (total,) = args
        gen = ("--total", total, "--dist", "gridftp", "--max-size", "16MiB", "--seed", str(seed))
        d = f"src-gen-mixed-{total}-gridftp-max16MiB-seed{seed}"
        desc = f"{total} of {what}"
    return DataSet(name=name, dir=d, desc=f"`sprat gen {' '.join(gen)}`: {desc}", gen=gen)


def pick_tree(home: Optional[str] = None, repo: Optional[str] = None, min_files: int = TREE_CANDIDATES_MIN) -> Optional[str]:
    """The default real tree: the first of /usr/share, the cargo registry's crate sources and the
    repository's target/ with at least `min_files` files. /usr/share comes first (the old
    scripts tried the registry first, but it had too few files then, so every table of
    docs/performance.md is of /usr/share): it does not grow while cargo builds."""
    cands = ["/usr/share", os.path.join(home or os.path.expanduser("~"), ".cargo/registry/src")]
    if repo:
        cands.append(os.path.join(repo, "target"))
    for c in cands:
        if not os.path.isdir(c):
            continue
        n = 0
        for _, _, files in os.walk(c):
            n += len(files)
            if n >= min_files:
                return c
    return None


@dataclass
class Ready:
    """A set on disk: its path, manifest path and summary."""

    set: DataSet
    path: str
    manifest: str
    files: int = 0
    bytes: int = 0
    dirs: int = 0
    symlinks: int = 0
    median_size: int = 0
    # bytes the set takes on its file system: every entry's blocks (`du -s --block-size=1`)
    allocated: int = 0
    extra: dict = field(default_factory=dict)


def ensure(ds: DataSet, root: str, meta: str, sprat: str, log, refresh: bool = False, prefix: str = "") -> Ready:
    """Make `ds` under `root` unless it is there with the same recipe (REFRESH remakes it);
    keep its manifest in `meta`. `prefix` makes a private copy (e.g. `resync-`) whose files a
    suite may change."""
    name = prefix + ds.dir
    path = os.path.join(root, name)
    man = os.path.join(meta, name + ".json")
    origin = os.path.join(meta, name + ".origin")
    os.makedirs(root, exist_ok=True)
    os.makedirs(meta, exist_ok=True)
    current = None
    if os.path.exists(origin):
        with open(origin) as f:
            current = f.read().strip()
    if refresh or not os.path.isdir(path) or not os.path.exists(man) or current != ds.recipe:
        log(f"making data set {name}: {ds.recipe}")
        for p in (path, path + ".tmp"):
            shutil.rmtree(p, ignore_errors=True)
        tmp = path + ".tmp"
        if prefix:
            base = ensure(ds, root, meta, sprat, log, refresh=False)
            subprocess.run(["cp", "-a", base.path, tmp], check=True)
        elif ds.gen is not None:
            subprocess.run([sprat, "gen", *ds.gen, tmp], check=True, stdout=subprocess.DEVNULL)
        else:
            snapshot_tree(str(ds.tree), ds.tree_files, tmp)
        os.rename(tmp, path)
        os.sync()
        tree = verify.scan(path, hashing=True)
        verify.save_manifest(tree, man)
        with open(origin, "w") as f:
            f.write(ds.recipe + "\n")
    tree = verify.load_manifest(man)
    s = verify.summary(tree)
    return Ready(ds, path, man, s["files"], s["bytes"], s["dirs"], s["symlinks"], s["median"], allocated(path))


def allocated(path: str) -> int:
    """Bytes the tree at `path` takes on its file system: the blocks of every entry, hard links
    counted once, as `du -s --block-size=1` counts them."""
    seen: set = set()
    total = 0
    for d, dirs, names in os.walk(path):
        for n in [""] + dirs + names:
            try:
                st = os.lstat(os.path.join(d, n) if n else d)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def snapshot_tree(src: str, nfiles: int, dst: str) -> None:
    """Copy the real tree `src` to `dst`: whole (nfiles 0, cp -a) or its first `nfiles` regular
    files by sorted path (tar)."""
    os.makedirs(dst, exist_ok=True)
    if nfiles == 0:
        subprocess.run(["cp", "-a", src + "/.", dst + "/"], check=True)
        return
    files = []
    for d, dirs, names in os.walk(src):
        dirs.sort()
        for n in names:
            p = os.path.join(d, n)
            if os.path.isfile(p) and not os.path.islink(p):
                files.append(os.path.relpath(p, src))
    files.sort()
    lst = dst + ".list"
    with open(lst, "wb") as f:
        f.write(b"".join(os.fsencode("./" + p) + b"\0" for p in files[:nfiles]))
    subprocess.run(
        f"tar -C {_q(src)} --null -T {_q(lst)} -cf - | tar -C {_q(dst)} -xf -", shell=True, check=True
    )
    os.unlink(lst)


def _q(s: str) -> str:
    import shlex

    return shlex.quote(s)
