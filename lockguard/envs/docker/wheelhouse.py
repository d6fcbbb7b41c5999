"""The wheels an image installs: the target platform, and the lock's wheels for it downloaded on
the host with their hashes checked, into a cached wheelhouse.

`Target` is the image's Python as pip download and environment markers see it (probed in the
base by the probe lockguard/probes/platform_info.py, or declared in bases.toml for bases that
get Python during the build);
`expected_pins` the lock's pins whose markers hold there; `wheelhouse_for` downloads them
(`pip download --only-binary=:all:` for the target's platform) into
$LOCKGUARD_CACHE/wheelhouses/<lock hash + target>, built under a file lock and marked ready only
when complete, like the venvs. The image's build installs from it with --no-index.
"""

from __future__ import annotations

import errno
import hashlib
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from packaging.markers import Marker

from lockguard.cache import cache_dir, entry
from lockguard.envs.base import READY, EnvError
from lockguard.envs.docker.recipe import Base
from lockguard.files import sha256_file
from lockguard.envs.wheels import match_wheels, pip_download, platform_args
from lockguard.installers import tool_reason
from lockguard.locks.model import Lock, Pin
from lockguard.locks.target import linux_markers, manylinux_platforms
from lockguard.locks.writer import wheel_request
from lockguard.progress import QUIET, Progress

@dataclass(frozen=True)
class Target:
    """The Python of an image, as pip download and environment markers need it."""

    python: str  # X.Y
    glibc: str
    arch: str
    implementation: str = "cpython"
    markers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_probe(cls, data: dict) -> "Target":
        """The target from the platform_info probe's JSON output in the base image; EnvError
        when that Python is not CPython or the base has no glibc, for which no wheels can be
        picked."""
        if data.get("implementation") != "cpython":
            raise EnvError(f"the base's Python is {data.get('implementation')}, not CPython")
        if not data.get("glibc"):
            raise EnvError("the base image has no glibc (musl bases are not supported)")
        return cls(python=data["python"], glibc=data["glibc"], arch=data["arch"],
                   markers=data.get("markers", {}))

    @classmethod
    def declared(cls, base: Base) -> "Target":
        """For bases without Python yet: what bases.toml says it will be."""
        markers = linux_markers(base.python, base.arch)
        return cls(python=base.python, glibc=base.glibc, arch=base.arch, markers=markers)

    @property
    def abi(self) -> str:
        """The CPython ABI tag pip download is given, "cp311" for Python 3.11."""
        return "cp" + self.python.replace(".", "")

    def platforms(self) -> list[str]:
        """Every platform tag this glibc and arch accept, most specific first."""
        major, minor = (int(x) for x in self.glibc.split(".")[:2])
        return manylinux_platforms(self.arch, (major, minor))

    def describe(self) -> str:
        """The target for people, in progress and error lines: "cp311, manylinux_2_36_x86_64"."""
        return f"{self.abi}, manylinux_{self.glibc.replace('.', '_')}_{self.arch}"

    @property
    def key(self) -> str:
        """The target in one word, "cp311-2.36-x86_64": what a wheelhouse is keyed by besides
        the lock, and what its ready record names."""
        return f"{self.abi}-{self.glibc}-{self.arch}"


def expected_pins(lock: Lock, target: Target) -> list[Pin]:
    """The lock's pins whose markers hold on the target (all of them for most locks)."""
    env = target.markers
    return [p for p in lock.pins if p.marker is None or Marker(p.marker).evaluate(env)]


# ---------------------------------------------------------------------------------------------
# The wheelhouse
# ---------------------------------------------------------------------------------------------


def wheelhouse_key(lock: Lock, target: Target) -> str:
    """The wheelhouse's folder name under $LOCKGUARD_CACHE/wheelhouses/: 20 hex of sha256 over
    the lock hash and the target's key, so another lock or platform never reuses a wheelhouse."""
    return hashlib.sha256(f"{lock.lock_hash}\0{target.key}".encode()).hexdigest()[:20]


def wheelhouse_for(lock: Lock, target: Target, progress: Progress = QUIET) -> Path:
    """A directory holding requirements.txt (pins with sha256) and wheels/ for this target.

    Cached under $LOCKGUARD_CACHE/wheelhouses/<lock hash + target>: a cache entry
    (cache.entry), downloaded into a stage beside it and published whole with its ready
    marker; a failed download's log is kept as <wheelhouse>.failed.log.
    """
    key = wheelhouse_key(lock, target)
    root = cache_dir() / "wheelhouses"
    path = root / key

    def keep_log(stage: Path) -> None:
        log = stage / "download.log"
        if log.is_file():
            shutil.copyfile(log, f"{path}.failed.log")
        shutil.rmtree(stage, ignore_errors=True)

    try:
        with entry(path, lambda stage: _download(stage, path, lock, target, progress),
                   ready=lambda at: (at / READY).is_file(), marker=READY, discard=keep_log,
                   what=f"the wheelhouse of {Path(lock.source).name} ({path})",
                   tell=progress.info):
            pass
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise EnvError(f"disk full while downloading the wheels of {lock.source} "
                           f"into {root}: free space there or point LOCKGUARD_CACHE "
                           f"elsewhere") from None
        raise
    return path


def _download(tmp: Path, path: Path, lock: Lock, target: Target, progress: Progress) -> str:
    """Download the lock's wheels for `target` into the stage `tmp` of the wheelhouse `path`;
    the ready marker's text (what it holds)."""
    pins = expected_pins(lock, target)
    args = platform_args(target.python, target.platforms())
    with progress.step(f"Downloading {len(pins)} wheel(s) of {Path(lock.source).name} "
                       f"for {target.describe()}") as step:
        code, tail = pip_download(pins, lock, tmp, step, args)
    if code != 0:
        text = "\n".join(tail)
        if "No space left on device" in text:
            raise OSError(errno.ENOSPC, "No space left on device")
        reason = tool_reason("\n".join(tail), f"exit code {code}")
        if "No matching distribution" in text or "Could not find a version" in text:
            raise EnvError(f"{lock.source}: no wheel for the image's platform "
                           f"({target.describe()}): {reason}")
        raise EnvError(f"{lock.source}: pip could not download the lock's wheels for "
                       f"{target.describe()}: {reason} (log: {path}.failed.log)")
    files = match_wheels(tmp / "wheels", pins, lock)
    # What the image installs: each pin with the hash of the very file downloaded (the
    # lock's own hashes were checked by pip above; a hashless lock gets them here).
    exact = [replace(p, hashes=(f"sha256:{sha256_file(files[p.name])}",)) for p in pins]
    (tmp / "requirements.txt").write_text(wheel_request(exact), encoding="utf-8")
    info = {"lock_hash": lock.lock_hash, "lock": lock.source, "target": target.key,
            "wheels": sorted(f.name for f in files.values()),
            "bytes": sum(f.stat().st_size for f in files.values()),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return json.dumps(info, indent=1)
