"""lockguard's own files, held still while it judges: a check whose judge changed under it
fails (exit 2) instead of reporting what the changed judge says.

A training runs a lock's code, and the sandbox (lockguard/sandbox.py) keeps it from writing
lockguard's install; this is the second wall, for a sandbox that is off or missing and for
anything else that writes there during a check. Before the first training, the modules that
judge and report are imported (flows/pipeline.py) and every file of the package is hashed;
before the verdict is reported the package is hashed again, and a file added, removed or
changed is named. Bytecode caches are left out: the interpreter writes them as modules are
first imported, and one it loads is checked against its source's size and mtime.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from lockguard.errors import LockguardError

PACKAGE = Path(__file__).resolve().parent
_taken: dict[str, str] | None = None


class JudgeChanged(LockguardError):
    """A file of lockguard's own package changed between the first training and the verdict."""


def _files() -> dict[str, str]:
    found: dict[str, str] = {}
    for directory, subdirectories, names in os.walk(PACKAGE):
        subdirectories[:] = sorted(d for d in subdirectories if d != "__pycache__")
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, PACKAGE)] = hashlib.sha256(f.read()).hexdigest()
            except OSError:
                found[os.path.relpath(path, PACKAGE)] = "unreadable"
    return found


def take() -> None:
    """Hash lockguard's package now (once per process: the first training's start)."""
    global _taken
    if _taken is None:
        _taken = _files()


def verify() -> None:
    """JudgeChanged naming the first file of lockguard's package that differs from when
    `take` hashed it; nothing when `take` was never called (no training ran)."""
    if _taken is None:
        return
    now = _files()
    changed = sorted(name for name in _taken.keys() | now.keys()
                     if _taken.get(name) != now.get(name))
    if changed:
        what = "added" if changed[0] not in _taken else (
            "removed" if changed[0] not in now else "changed")
        more = f" and {len(changed) - 1} more" if len(changed) > 1 else ""
        raise JudgeChanged(f"{PACKAGE / changed[0]}{more} {what} during this check: the judge "
                           "changed under it, so its verdict is not given (reinstall lockguard, "
                           "and run checks sandboxed: sandbox = \"required\")")
