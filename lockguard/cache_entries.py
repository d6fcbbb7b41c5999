"""What lockguard's cache holds, entry by entry, and how it is pruned (`lockguard cache`).

An entry is what one build made and what goes with it: a venv with its lock file, logs and
compile cache; a docker wheelhouse; the evidence of one check; a proposal's resolved lock; a
bisection's shared compile cache. Each has a size (the blocks of its files, each file once),
what removing it frees (the blocks of files no other entry links: a venv's files are hardlinks
of uv's cache, so removing the venv alone frees little), and a last use: a venv records each
check that prepares it (`USED`: when, and the project's folder), the others their latest
change. The installers' caches and the bytecode store are entries too, removed only when a
size cannot be reached otherwise: what they hold is fetched or compiled again as needed.

A stage a killed build left (`cache.stage_of`: `.NAME.stage` beside the entry it was to become)
is an entry too, "unfinished build", which every prune removes whatever it was asked, once its
entry's lock says no build is under way: it holds half of something nothing will read.

`prune` removes the least recently used first, and never an entry in use: a venv a running
check holds (VenvEnv keeps a shared lock on `<venv>.use` while its process lives; prune asks
for it exclusively, without waiting), nor the evidence a project's `accept` would read (its
last check's).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from lockguard.cache import cache_root, entry_lock, stage_of
from lockguard.envs.base import READY
from lockguard.envs.bytecode import LOG_FILE as BYTECODE_LOG
from lockguard.evidence import LEDGER, LAST_CHECK

UNFINISHED = "unfinished build"  # the kind of a stage a killed build left
# The folders whose entries are built through a stage beside them (cache.entry, not in place).
STAGED = ("wheelhouses", "proposals", "tools", "wheels/fleet")  # fleet: envs/wheels.py
USED = "lockguard-used.json"  # in a venv: {"at": epoch seconds, "project": folder}
IN_USE = ".use"  # beside a venv: the lock a check holds shared while it runs in it


@dataclass(frozen=True)
class Entry:
    """One entry of the cache (module docstring)."""

    kind: str  # venv | compile cache | wheelhouse | evidence | proposal | installer cache | ...
    name: str  # what it is for people: the lock it was built from, the tool, the check
    paths: tuple[Path, ...]  # everything removing it removes (its folder first)
    size: int  # bytes on disk, each file once
    frees: int  # bytes removing it frees
    used: float  # when last used (epoch seconds)
    project: str | None = None  # the folder of the project that last used it, where known
    last_resort: bool = False  # removed only to reach a size (installer caches, bytecode)
    kept: str | None = None  # why prune never removes it ("in use", "the last check's")
    # (device, inode) -> [links below its paths, the file's links in all, bytes on disk]:
    # what removing entries together frees (prune), each file counted once (total)
    files: dict[tuple[int, int], list[int]] = field(default_factory=dict, repr=False,
                                                     compare=False)


def entries(root: Path | None = None) -> list[Entry]:
    """Every entry of the cache at `root` (default: lockguard's), most recently used first."""
    root = cache_root() if root is None else root
    found: list[Entry] = []
    venvs = root / "venvs"
    for path in _dirs(venvs):
        if path.name.endswith(".compile-cache"):
            if path.name.startswith("compilers-"):
                found.append(_entry("compile cache", "shared by a bisection's mixes", (path,)))
            continue
        found.append(_venv(path))
    for path in _dirs(root / "wheelhouses"):
        found.append(_entry("wheelhouse", path.name, (path,)))
    for path in _dirs(root / "proposals"):
        locks = sorted(p.name for p in path.iterdir() if p.is_file() and not
                       p.name.startswith(("lockguard-", ".")))
        found.append(_entry("proposal", ", ".join(locks) or path.name, (path,)))

    for project in _dirs(root / "artifacts"):
        latest = _last_check(project)
        for run in _dirs(project):
            if run.name == LEDGER:
                continue  # what each check's report hashed to: a few bytes, kept
            found.append(_entry("evidence", f"check {run.name}", (run,),
                                kept="the project's last check (accept reads it)"
                                if run.name == latest else None))
    found.extend(_abandoned_stages(root))
    for name in ("uv", "pip"):
        if (root / "wheels" / name).is_dir():
            found.append(_entry("installer cache", f"{name}'s downloads",
                                (root / "wheels" / name,), last_resort=True))
    if (root / "wheels" / "fleet").is_dir():  # envs/wheels.py: the wheels the fleet's judge read
        found.append(_entry("fleet wheels", "the fleet's downloads", (root / "wheels" / "fleet",),
                            last_resort=True))
    for name, what in (("bytecode", "bytecode store"), ("resolvers", "resolvers' caches")):
        if (root / name).is_dir():
            found.append(_entry(what, name, (root / name,), last_resort=True))
    return sorted(found, key=lambda e: -e.used)


def total(found: list[Entry]) -> int:
    """Bytes the entries take together, a file linked from several counted once."""
    return sum(b for _, _, b in {k: v for e in found for k, v in e.files.items()}.values())


class _Removal:
    """Entries removed together, and the bytes that frees: a file's blocks once every link to
    it is among them (uv's cache and the venvs linking its files, say)."""

    def __init__(self) -> None:
        self.links: dict[tuple[int, int], int] = {}
        self.freed = 0

    def add(self, e: Entry) -> None:
        for key, (inside, links, size) in e.files.items():
            before = self.links.get(key, 0)
            self.links[key] = before + inside
            if before < links <= before + inside:
                self.freed += size


@dataclass(frozen=True)
class Pruned:
    """What a prune removed (or would, on a dry run), what it kept that it was asked to
    remove and why, and the bytes it freed."""

    removed: list[Entry]
    kept: list[tuple[Entry, str]]
    freed: int


def prune(found: list[Entry], *, older_than_s: float | None = None, keep: int | None = None,
          max_size: int | None = None, dry_run: bool = False,
          now: float | None = None) -> Pruned:
    """Remove, least recently used first: the entries unused for `older_than_s`, the venvs
    beyond the `keep` most recently used, then whatever it takes to bring the cache under
    `max_size` bytes (the installers' caches last). Never an entry in use."""
    now = time.time() if now is None else now
    order = sorted(found, key=lambda e: e.used)  # least recently used first
    chosen: dict[int, Entry] = {}
    if older_than_s is not None:
        for e in order:
            if now - e.used > older_than_s and not e.last_resort:
                chosen[id(e)] = e
    for e in order:
        if e.kind == UNFINISHED:
            chosen[id(e)] = e  # never read by anything: removed by every prune
    if keep is not None:
        venvs = [e for e in reversed(order) if e.kind == "venv"]  # most recent first
        for e in venvs[keep:]:
            chosen[id(e)] = e
    planned = _Removal()
    for e in chosen.values():
        if e.kept is None:
            planned.add(e)
    if max_size is not None:
        size = total(found)
        for e in [*[e for e in order if not e.last_resort], *[e for e in order if e.last_resort]]:
            if size - planned.freed <= max_size:
                break
            if id(e) not in chosen and e.kept is None:
                chosen[id(e)] = e
                planned.add(e)
    removed, kept = [], []
    done = _Removal()
    for e in chosen.values():
        why = e.kept or (None if dry_run else _remove(e))
        if why is None:
            removed.append(e)
            done.add(e)
        else:
            kept.append((e, why))
    return Pruned(removed, kept, done.freed)


def record_use(venv: Path, project: Path | None) -> None:
    """Note that a check used the venv at `venv` now (for `lockguard cache` and prune)."""
    try:
        (venv / USED).write_text(json.dumps({"at": time.time(),
                                             "project": str(project) if project else None}))
    except OSError:
        pass  # a read-only cache still runs: only its listing is less precise


def hold(venv: Path):
    """A shared lock on the venv at `venv` held for as long as the returned file stays open
    (a check keeps it for its process's life): prune leaves the venv alone meanwhile."""
    handle = open(venv.with_name(venv.name + IN_USE), "a+")  # noqa: SIM115 - kept open
    try:
        fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        pass  # held exclusively by a prune removing it: the check's build lock settles that
    return handle


# ---------------------------------------------------------------------------------------------

def _dirs(folder: Path) -> Iterator[Path]:
    try:
        with os.scandir(folder) as found:
            # A stage (cache.stage_of) is an entry being built, under its entry's lock.
            yield from (Path(e.path) for e in found if e.is_dir(follow_symlinks=False)
                        and not (e.name.startswith(".") and e.name.endswith(".stage")))
    except OSError:
        return


def _abandoned_stages(root: Path) -> Iterator[Entry]:
    """The stages under `root`'s staged folders, each an UNFINISHED entry; one whose entry's
    lock is held is a build under way, kept."""
    for folder in STAGED:
        try:
            with os.scandir(root / folder) as found:
                stages = [Path(e.path) for e in found if e.is_dir(follow_symlinks=False)
                          and e.name.startswith(".") and e.name.endswith(".stage")]
        except OSError:
            continue
        for stage in stages:
            target = _staged(stage)
            yield _entry(UNFINISHED, f"{folder}/{target.name} (left by an interrupted build)",
                         (stage,), kept="being built" if _locked(entry_lock(target)) else None)


def _staged(stage: Path) -> Path:
    """The entry the stage at `stage` was to become (cache.stage_of's inverse)."""
    target = stage.with_name(stage.name.removeprefix(".").removesuffix(".stage"))
    return target if stage_of(target) == stage else stage


def _venv(path: Path) -> Entry:
    name, used, project = path.name, None, None
    try:
        ready = json.loads((path / READY).read_text())
        name = str(ready.get("lock") or name)
    except (OSError, ValueError):
        name = f"{path.name} (unfinished build)"
    try:
        mark = json.loads((path / USED).read_text())
        used, project = float(mark["at"]), mark.get("project")
    except (OSError, ValueError, KeyError, TypeError):
        pass
    # Its lock files stay: another lockguard may be waiting on them.
    parts = (path, *[p for p in (path.with_name(path.name + s) for s in (
        ".compile-cache", ".build", ".uv.log", ".venv.log", ".install.log", ".uv-clean.log",
        "." + BYTECODE_LOG)) if os.path.lexists(p)])
    in_use = _in_use(path)
    return _entry("venv", name, parts, used=used, project=project,
                  kept="in use by a running check" if in_use else None)


def _entry(kind: str, name: str, paths: tuple[Path, ...], *, used: float | None = None,
           project: str | None = None, last_resort: bool = False,
           kept: str | None = None) -> Entry:
    files, latest = _measure(paths)
    size = sum(b for _, _, b in files.values())
    frees = sum(b for inside, links, b in files.values() if inside >= links)
    return Entry(kind, name, paths, size, frees, used if used is not None else latest,
                 project, last_resort, kept, files)


def _measure(paths: tuple[Path, ...]) -> tuple[dict[tuple[int, int], list[int]], float]:
    """({(device, inode): [links below `paths`, links in all, bytes on disk]} of the files
    below `paths`; the latest change among them)."""
    seen: dict[tuple[int, int], list[int]] = {}  # inode -> [links inside, nlink, bytes]
    latest = 0.0
    stack = [str(p) for p in paths]
    while stack:
        path = stack.pop()
        try:
            st = os.lstat(path)
        except OSError:
            continue
        latest = max(latest, st.st_mtime)
        if os.path.isdir(path) and not os.path.islink(path):
            try:
                with os.scandir(path) as found:
                    stack.extend(e.path for e in found)
            except OSError:
                pass
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            seen[key][0] += 1
        else:
            seen[key] = [1, st.st_nlink, st.st_blocks * 512]
    return seen, latest


def _last_check(project: Path) -> str | None:
    try:
        return Path((project / LAST_CHECK).read_text().strip()).name or None
    except OSError:
        return None


def _in_use(venv: Path) -> bool:
    """Whether a check holds the venv (its shared lock), asked without waiting."""
    return _locked(venv.with_name(venv.name + IN_USE))


def _locked(lock: Path) -> bool:
    """Whether another holds the flock file `lock` (shared or exclusive), asked without
    waiting; a lock file that cannot be opened is held by no one."""
    try:
        with open(lock, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
    except OSError:
        return False
    return False


def _remove(e: Entry) -> str | None:
    """Remove an entry's paths (a venv or a stage under its entry's build lock, held
    exclusively without waiting); why not, when it cannot be."""
    if e.kind in ("venv", UNFINISHED):
        target = e.paths[0] if e.kind == "venv" else _staged(e.paths[0])
        lock = entry_lock(target)
        try:
            handle = open(lock, "a+")  # noqa: SIM115 - closed below
        except OSError as exc:
            return f"cannot lock it: {exc.strerror or exc}"
        try:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return "being built or checked by another lockguard"
            if e.kind == "venv" and _in_use(e.paths[0]):
                return "in use by a running check"
            _delete(e.paths)
        finally:
            handle.close()
        return None
    _delete(e.paths)
    return None


def _delete(paths: tuple[Path, ...]) -> None:
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            try:
                os.unlink(path)
            except OSError:
                pass
