"""The one cache directory (venvs, images, wheelhouses, tool envs), its file locks, and the one
way an entry of it is built (`entry`: lock, ready?, stage, check, marker last, publish)."""

from __future__ import annotations

import contextlib
import fcntl
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO

from lockguard import envvars, process
from lockguard.errors import LockguardError, one_line
from lockguard.files import publish_dir, write_text


class CacheError(LockguardError):
    """The cache directory cannot be used (a file where a folder should be, no space, ...)."""


def cache_root() -> Path:
    """LOCKGUARD_CACHE (`~` expanded: a CI template's env: does not), or ~/.cache/lockguard;
    not created."""
    configured = envvars.value("LOCKGUARD_CACHE")
    return Path(configured).expanduser() if configured else Path.home() / ".cache" / "lockguard"


def cache_dir() -> Path:
    """The cache root, created on first use."""
    return ensure_dir(cache_root())


def entry_lock(path: Path) -> Path:
    """The lock file held while the cache entry at `path` (a venv, an image record) is built
    or written into: beside it, never inside (a rebuild removes the entry whole)."""
    return path.with_name(f"{path.name}.lock")


def ensure_dir(path: Path) -> Path:
    """`path` as a directory, created if missing; a one-line CacheError when it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        blocker = next((p for p in (path, *path.parents) if p.exists() and not p.is_dir()),
                       path)
        raise CacheError(f"{path}: cannot use as lockguard's cache: {blocker} is not a "
                         "directory (set LOCKGUARD_CACHE to a directory)") from None
    except OSError as exc:
        raise CacheError(f"{path}: cannot use as lockguard's cache: "
                         f"{exc.strerror or exc}") from None
    return path


@contextlib.contextmanager
def file_lock(path: Path, what: str = "", tell: Callable[[str], None] | None = None
              ) -> Iterator[None]:
    """An exclusive advisory lock, so two concurrent checks never build the same entry twice.

    flock is released by the kernel when the process dies, so a killed build never leaves a
    stale lock behind (unlike lock files that are created and deleted). The wait for another
    lockguard's build lasts as long as that build, but no longer than an interrupt
    (process.Interrupted); once it has lasted WAIT_TOLD_S, `tell` (a progress line) is told
    that lockguard waits for another to finish `what` ("the venv of torch.txt (<path>)"), so
    that a check held up by another's build says so rather than seeming to hang.
    """
    ensure_dir(path.parent)
    with open(path, "a+") as handle:
        _acquire(handle, path, what, tell)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# Longer than a reader holds a lock to look at a finished entry; shorter than any build.
WAIT_TOLD_S = 1.0


def _acquire(handle: IO[str], path: Path, what: str,
             tell: Callable[[str], None] | None) -> None:
    """flock, polled: a thread blocked in flock(2) cannot be woken by Ctrl-C, which only the
    main thread receives, and the command's end waits for its threads (a training's rebuild
    waiting on another lockguard's build held an interrupted check until that build ended).
    The interrupt is asked first each time, so a lock freed after it is not taken; the backoff
    stops at 50 ms, so a long waiter still gets its turn among newer ones."""
    delay = 0.005
    told_at = time.monotonic() + WAIT_TOLD_S
    while True:
        if process.interrupted():
            raise process.Interrupted()
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:  # ENOLCK: a file system without locks (NFS without its daemon)
            raise CacheError(f"{path}: cannot lock lockguard's cache: {exc.strerror or exc} "
                             "(set LOCKGUARD_CACHE to a directory on a local disk)") from None
        if tell is not None and time.monotonic() >= told_at:
            tell(one_line(f"Waiting for another lockguard to finish {what}"))
            tell = None  # once
        process.wait_interrupted(delay)
        delay = min(delay * 2, 0.05)


# ---------------------------------------------------------------------------------------------
# A cache entry: built once, whole or not at all
# ---------------------------------------------------------------------------------------------


@contextlib.contextmanager
def entry(path: Path, build: Callable[[Path], str], *, ready: Callable[[Path], bool],
          marker: str, check: Callable[[Path], None] | None = None, in_place: bool = False,
          discard: Callable[[Path], None] | None = None, what: str = "",
          tell: Callable[[str], None] | None = None) -> Iterator[bool]:
    """The one choreography of a cache entry (a venv, a wheelhouse, an image's record, a
    proposal): under its file lock (`entry_lock`), `ready(path)` or else `build(stage)`, then
    `check(stage)`, then the marker `stage/marker` written last with what `build` returned,
    then the stage published at `path` in one rename. Yields whether it built, the lock still
    held (what the caller reads of the entry under it, no other lockguard rebuilds meanwhile).

    The stage is a folder beside `path`, so a reader never sees half an entry and a failed or
    interrupted build leaves nothing: `discard(stage)` (default: the folder removed) runs on
    any failure, Ctrl-C included, and the error goes on. `in_place` builds at `path` itself,
    for what bakes its own absolute path in (a venv's scripts and pyvenv.cfg) or lives
    elsewhere (an image in the engine): its marker is removed before the build and written
    last, so an unfinished build is never taken for a finished one.
    """
    with file_lock(entry_lock(path), what, tell):
        if ready(path):
            yield False
            return
        stage = path if in_place else stage_of(path)
        try:
            _clear(stage, marker, in_place)
            text = build(stage)
            if check is not None:
                check(stage)
            write_text(stage / marker, text)
            if not in_place:
                publish_dir(stage, path)
        except BaseException:
            (discard or _remove)(stage)
            raise
        yield True


def stage_of(path: Path) -> Path:
    """Where the entry at `path` is built before it is published: a hidden folder beside it
    (the same file system, so publishing is a rename), one at a time under the entry's lock."""
    return path.with_name(f".{path.name}.stage")


def _clear(stage: Path, marker: str, in_place: bool) -> None:
    """An entry built in place loses its marker first (what else it holds, the build decides);
    a stage starts empty (one a killed build left is removed: the lock says none is building)."""
    if in_place:
        (stage / marker).unlink(missing_ok=True)
        return
    _remove(stage)
    stage.mkdir(parents=True)


def _remove(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
