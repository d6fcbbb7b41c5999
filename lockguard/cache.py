"""The one cache directory (venvs, images, wheelhouses, tool envs) and its file locks."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

from lockguard import envvars
from lockguard.errors import LockguardError


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
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two concurrent checks never build the same entry twice.

    flock is released by the kernel when the process dies, so a killed build never leaves a
    stale lock behind (unlike lock files that are created and deleted).
    """
    ensure_dir(path.parent)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
