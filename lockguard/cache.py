"""The one cache directory (venvs, images, wheelhouses, tool envs) and its file locks."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """LOCKGUARD_CACHE, or ~/.cache/lockguard. Created on first use."""
    root = Path(os.environ.get("LOCKGUARD_CACHE") or Path.home() / ".cache" / "lockguard")
    root.mkdir(parents=True, exist_ok=True)
    return root


@contextlib.contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock, so two concurrent checks never build the same entry twice.

    flock is released by the kernel when the process dies, so a killed build never leaves a
    stale lock behind (unlike lock files that are created and deleted).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
