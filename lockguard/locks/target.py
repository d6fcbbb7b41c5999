"""The platform a lock is read for: `Target`, the marker environment and wheel tags of the
interpreter the environments are built with.

A uv.lock, a poetry.lock or a pylock.toml with markers holds several platforms; its installer
keeps the packages whose markers hold for the interpreter it installs into and takes, of each,
a wheel whose tags that interpreter supports. lockguard reads such a lock for the interpreter
its venvs use: this one (`host_target`), or the config's `python` (`target_for`, which asks
that interpreter once, in a subprocess, for its markers; its wheel tags are then unknown and
the installer is the one to say when no wheel fits).
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import default_environment
from packaging.tags import compatible_tags, cpython_tags, sys_tags
from packaging.utils import InvalidWheelFilename, parse_wheel_filename

from lockguard import process
from lockguard.files import scratch_dir
from lockguard.locks.model import LockError
from lockguard.probes import PLATFORM_INFO


@dataclass(frozen=True)
class Target:
    """What a marker and a wheel are judged against."""

    markers: Mapping[str, str]  # packaging.markers' environment of the interpreter
    tags: tuple[str, ...] | None  # its supported wheel tags ("cp311-cp311-manylinux_2_17_x86_64"),
    # most specific first; None when unknown (another interpreter than the one running lockguard)

    def describe(self) -> str:
        """The platform for people: "cpython 3.11.7 linux x86_64"."""
        m = self.markers
        return (f"{m.get('implementation_name', '?')} {m.get('python_full_version', '?')} "
                f"{m.get('sys_platform', '?')} {m.get('platform_machine', '?')}")

    def python_version(self) -> str:
        """The interpreter's full version ("3.11.7"), what a lock's requires-python is checked
        against; "" when the markers do not say."""
        return self.markers.get("python_full_version", "")

    def wheel_fits(self, filename: str) -> bool | None:
        """Whether a wheel of this name installs here (None: the tags are not known)."""
        if self.tags is None:
            return None

        try:
            _, _, _, tags = parse_wheel_filename(filename)
        except InvalidWheelFilename:
            return False
        supported = _tag_set(self.tags)
        return any(str(tag) in supported for tag in tags)


@functools.lru_cache(maxsize=8)
def _tag_set(tags: tuple[str, ...]) -> frozenset[str]:
    return frozenset(tags)


@functools.lru_cache(maxsize=1)
def host_target() -> Target:
    """The interpreter running lockguard."""
    return Target(markers=dict(default_environment()),
                  tags=tuple(str(tag) for tag in sys_tags()))


def manylinux_platforms(arch: str, glibc: tuple[int, int]) -> list[str]:
    """Every Linux platform tag a glibc (major, minor) on `arch` accepts, most specific first
    (PEP 600's manylinux_X_Y, then the legacy aliases, then linux_<arch>): what pip download's
    --platform is given for another machine (a docker image's, a fleet machine's)."""
    major, minor = glibc
    tags = [f"manylinux_{major}_{m}_{arch}" for m in range(minor, 16, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += [f"{name}_{arch}" for m, name in legacy.items() if minor >= m]
    return tags + [f"linux_{arch}"]


def linux_markers(python: str, arch: str) -> dict[str, str]:
    """The marker environment of CPython `python` (X.Y) on Linux on `arch`, as far as those
    say it (the kernel's release and version are unknown: empty)."""
    return {"implementation_name": "cpython", "implementation_version": python,
            "os_name": "posix", "platform_machine": arch, "platform_release": "",
            "platform_system": "Linux", "platform_version": "",
            "python_full_version": python + ".0",
            "platform_python_implementation": "CPython", "python_version": python,
            "sys_platform": "linux"}


@functools.lru_cache(maxsize=16)  # asked once a pin and machine: its tags are thousands
def linux_target(python: str, arch: str, glibc: tuple[int, int]) -> Target:
    """The Target of CPython `python` (X.Y) on a Linux machine of `arch` with `glibc`: its
    markers and the wheel tags such an interpreter supports, most specific first."""
    version = tuple(int(p) for p in python.split("."))
    abi = "cp" + python.replace(".", "")
    platforms = manylinux_platforms(arch, glibc)
    tags = [*cpython_tags(version, [abi], platforms),
            *compatible_tags(version, abi, platforms)]
    return Target(markers=linux_markers(python, arch), tags=tuple(str(t) for t in tags))


def target_for(python: str | None) -> Target:
    """The platform of `python` (an interpreter's path; None or this one: `host_target`)."""
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        return host_target()
    return _other_target(str(Path(python).resolve()))


@functools.lru_cache(maxsize=8)
def _other_target(python: str) -> Target:
    with scratch_dir("markers") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        try:
            # packaging.markers.default_environment, asked of an interpreter that may not
            # have packaging.
            done = process.run(PLATFORM_INFO.argv(python), log=out, stderr_log=err, timeout=120)
        except process.ProcessError as exc:
            raise LockError(f"python = {python!r}", None, str(exc)) from None
        try:
            markers = json.loads(out.read_text(encoding="utf-8"))["markers"]
        except (OSError, ValueError, TypeError, KeyError):
            markers = None
        if done.code != 0 or not isinstance(markers, dict):
            raise LockError(f"python = {python!r}", None,
                            "cannot tell its platform (it does not run as a Python "
                            f"interpreter: {done.describe()})")
    return Target(markers={str(k): str(v) for k, v in markers.items()}, tags=None)
