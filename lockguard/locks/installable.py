"""Whether a lock installs on its target from wheels: `require_wheels`.

A TOML lock names every file of each pin (lockguard.locks.model.PinFile), so a pin with no
wheel this platform takes is known before anything is downloaded: with only an sdist left, the
installer would build it, running its code on this machine (refused unless `allow_sdist`);
with nothing left, no installer can install it. Requirements text names no files: there the
installer says so (lockguard.envs.venv names the lock line from its output).
"""

from __future__ import annotations

from lockguard.locks.model import Lock, LockError
from lockguard.locks.target import Target


def require_wheels(lock: Lock, target: Target, *, allow_sdist: bool) -> None:
    """Refuse `lock` (LockError naming its file:line) when a pin it names files for has no
    wheel `target` installs and may not (or cannot) be built from its sdist. Nothing is
    checked where the target's wheel tags are unknown (another interpreter)."""
    if target.tags is None:
        return
    for pin in lock.pins:
        if not pin.files:
            continue
        wheels = [f for f in pin.files if f.is_wheel]
        if any(target.wheel_fits(f.name) for f in wheels):
            continue
        has_sdist = any(not f.is_wheel for f in pin.files)
        if has_sdist and allow_sdist:
            continue
        seen = f"none of its {len(wheels)} wheels" if wheels else "it has no wheel"
        if has_sdist:
            why = ("only its sdist is left, and building it would run its code on this "
                   "machine (set allow_sdist = true in [tool.lockguard] to allow it)")
        else:
            why = "no installer can install it here"
        raise LockError(lock.source, pin.line, f"{pin.requirement}: {seen} installs on "
                                               f"{target.describe()}; {why}")
