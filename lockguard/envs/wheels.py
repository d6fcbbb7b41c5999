"""A lock's own wheels on this machine, to be read as files (the fleet's judge: what their
native code declares), and `pip_download`, the one download of a lock's wheels with their
hashes checked (the docker backend's wheelhouses, envs/docker/wheelhouse.py, use it too).

A wheel is taken from lockguard's cache only where it is provably the lock's:

- a venv lockguard built from this very lock (its ready marker's lock hash; the installer
  checked the lock's hashes, and the lock hash covers them);
- a wheel file whose sha256 is one the lock pins for it (a wheelhouse's, or one downloaded
  here before);
- for a pin without hashes, a wheel downloaded for the same request (name==version and the
  lock's index options) or a wheelhouse of this very lock.

Otherwise (`fetch`) it is downloaded with pip, hash-checked, into the cache entry
$LOCKGUARD_CACHE/wheels/fleet/<key> (cache.entry: whole or not at all).

Why not by name and version: a +cpu and a CUDA build of torch 2.9.0 from two indexes, or a
wheel re-uploaded with other code, share both, and reading the other one judges a wheel the
lock does not install (a stale PASS). uv's own cache (archive-v0) is not read for that reason:
its folders are named by uv's ids, not by the wheel's hash.
"""

from __future__ import annotations

import hashlib
import json
import platform
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from lockguard.cache import cache_dir, cache_root, entry
from lockguard.envs.base import READY, EnvError
from lockguard.envs.installed import normal_version, site_packages
from lockguard.files import sha256_file
from lockguard.installers import run_logged, tool_reason
from lockguard.locks.model import Lock, Pin
from lockguard.locks.target import Target, host_target, linux_target, manylinux_platforms
from lockguard.locks.writer import option_args, wheel_request
from lockguard.progress import QUIET, Progress

# The download takes wheels only (--only-binary=:all:): the lock's own format controls would
# contradict that, and a platform-restricted download refuses --no-binary.
_FORMAT_CONTROL = ("--no-binary", "--only-binary", "--prefer-binary")
FLEET_WHEELS = "fleet"  # the folder under $LOCKGUARD_CACHE/wheels the fleet's downloads go to


# A fleet machine whose glibc the fleet does not say takes any manylinux wheel (pip picks the
# newest tag a release has, as on a current distribution).
ANY_GLIBC = (2, 50)
_ARCH_NAMES = {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}  # as Linux names them


def host_arch() -> str:
    """This machine's CPU architecture as Linux's wheel tags name it (x86_64, aarch64)."""
    machine = platform.machine().lower()
    return _ARCH_NAMES.get(machine, machine)


@dataclass(frozen=True)
class Platform:
    """A Linux machine a lock's wheel is chosen for, as pip download and environment markers
    see it: its CPU architecture (x86_64, aarch64), its Python (X.Y) and glibc."""

    arch: str
    python: str
    glibc: tuple[int, int] = ANY_GLIBC

    def target(self) -> Target:
        """Its markers and supported wheel tags (locks/target.py)."""
        return linux_target(self.python, self.arch, self.glibc)

    def pip_args(self) -> list[str]:
        """pip download's options for it (platform_args)."""
        return platform_args(self.python, manylinux_platforms(self.arch, self.glibc))

    def describe(self) -> str:
        """"aarch64, Python 3.11, glibc 2.28" (the glibc only where the fleet says it)."""
        glibc = f", glibc {self.glibc[0]}.{self.glibc[1]}" if self.glibc != ANY_GLIBC else ""
        return f"{self.arch}, Python {self.python}{glibc}"


def platform_args(python: str, platforms: Sequence[str]) -> list[str]:
    """pip download's options for CPython `python` (X.Y) on `platforms` (tags, most specific
    first): another machine's wheels, not this interpreter's."""
    args = ["--implementation", "cp", "--python-version", python,
            "--abi", "cp" + python.replace(".", "")]
    for tag in platforms:
        args += ["--platform", tag]
    return args


def lock_options(lock: Lock) -> list[str]:
    """The lock's pip options (indexes, find-links, --no-index, trusted hosts) for a wheel
    download."""
    return [arg for arg in option_args(lock) if not arg.startswith(_FORMAT_CONTROL)]


def pip_download(pins: Sequence[Pin], lock: Lock, stage: Path, step,
                 platform_args: Sequence[str] = ()) -> tuple[int, list[str]]:
    """`pip download --no-deps --only-binary=:all:` of `pins` into stage/wheels, its request
    in stage/download.txt and its output in stage/download.log; `platform_args`: another
    platform's (--platform, --python-version, --abi), this interpreter's when empty. A lock
    with hashes is downloaded with --require-hashes (the request carries each pin's); a lock
    without any cannot say which bytes are its own, so pip takes what the index serves (lock
    rules and allow_unhashed decide whether such a lock is used at all). The exit code and the
    log's last lines."""
    wheels = stage / "wheels"
    wheels.mkdir(exist_ok=True)
    request = stage / "download.txt"
    request.write_text(wheel_request(pins), encoding="utf-8")
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           *platform_args, "--no-input", "--disable-pip-version-check", "--progress-bar", "off",
           "-d", str(wheels)]
    if lock.has_hashes:
        cmd.append("--require-hashes")
    cmd += lock_options(lock) + ["-r", str(request)]
    return run_logged(cmd, stage / "download.log", step)


def match_wheels(wheels: Path, pins: Sequence[Pin], lock: Lock) -> dict[str, Path]:
    """{canonical name: wheel file} of what pip_download left in `wheels`; EnvError when it
    left something else or no wheel for a pin."""
    found: dict[str, Path] = {}
    for f in sorted(wheels.iterdir()):
        if f.suffix != ".whl":
            raise EnvError(f"{lock.source}: pip download produced {f.name}, not a wheel")
        name, _, _, _ = parse_wheel_filename(f.name)
        found[canonicalize_name(name)] = f
    missing = [p.requirement for p in pins if p.name not in found]
    if missing:
        raise EnvError(f"{lock.source}: pip downloaded no wheel for {', '.join(missing)}")
    return found


def holds_here(pin: Pin) -> bool:
    """Whether the pin's marker holds for this interpreter (pip downloads nothing otherwise)."""
    return pin.marker is None or Marker(pin.marker).evaluate()


def holds_on(pin: Pin, platform: Platform) -> bool:
    """Whether the pin's marker may hold on `platform` (a fleet machine installs it there).
    The machine's Python is known to X.Y only: a marker on python_full_version is asked of
    its first and a late patch release, and holding on either is holding (judging a pin more
    is the safe side of a gate)."""
    if pin.marker is None:
        return True
    marker, markers = Marker(pin.marker), platform.target().markers
    return any(marker.evaluate({**markers, "python_full_version": f"{platform.python}.{patch}"})
               for patch in (0, 99))


def lock_wheels(lock: Lock, pins: Sequence[Pin], *, fetch: bool = False,
                progress: Progress = QUIET, platform: Platform | None = None
                ) -> tuple[dict[str, Path], str | None]:
    """The files of `pins` (of `lock`) to read: {canonical name: a dist-info folder or a .whl},
    each provably the lock's (see the module's docstring) and one that installs on `platform`
    (None: this interpreter); with `fetch`, the rest downloaded for it. Also why some could not
    be had (a failed download's one line), None when all were."""
    found = _from_venvs(lock, pins) if platform is None else {}
    rest = [p for p in pins if p.name not in found]
    if rest:
        found.update(_from_wheel_files(lock, rest, platform))
        rest = [p for p in rest if p.name not in found]
    if not rest or not fetch:
        return found, None
    try:
        found.update(_fetch(lock, rest, progress, platform))
    except (EnvError, OSError) as exc:
        return found, str(exc)
    return found, None


def _from_venvs(lock: Lock, pins: Sequence[Pin]) -> dict[str, Path]:
    """The dist-info folders of `pins` in a venv lockguard built from `lock` itself."""
    found: dict[str, Path] = {}
    wanted = {(p.name, normal_version(p.version)): p.name for p in pins}
    for marker in _ready_markers("venvs"):
        if _marker(marker).get("lock_hash") != lock.lock_hash:
            continue
        site = site_packages(marker.parent)
        for info in sorted(site.glob("*.dist-info")) if site else ():
            dist, _, version = info.name.removesuffix(".dist-info").rpartition("-")
            name = wanted.get((canonicalize_name(dist), normal_version(version)))
            if name is not None:
                found.setdefault(name, info)
    return found


def _from_wheel_files(lock: Lock, pins: Sequence[Pin], platform: Platform | None
                      ) -> dict[str, Path]:
    """The cached wheel files of `pins` that install on `platform` (None: this interpreter),
    by their tags: one whose sha256 the pin lists (a pin lists every platform's files, so the
    hash alone does not say the wheel is this platform's), or, for a pin without hashes, one
    downloaded for the same request or held by a wheelhouse of this lock."""
    target = host_target() if platform is None else platform.target()
    by_pin = {(p.name, normal_version(p.version)): p for p in pins}
    # the rank of each tag the platform supports, most preferred first (packaging.tags' order:
    # what an installer picks among a release's files that all fit)
    rank = {tag: i for i, tag in enumerate(target.tags or ())}
    best: dict[str, tuple[int, Path]] = {}
    for wheel, bound in _cached_wheels(lock):
        try:
            dist, version, _, tags = parse_wheel_filename(wheel.name)
        except InvalidWheelFilename:
            continue
        pin = by_pin.get((canonicalize_name(dist), normal_version(str(version))))
        if pin is None or not target.wheel_fits(wheel.name):
            continue
        order = min((rank.get(str(tag), len(rank)) for tag in tags), default=len(rank))
        if pin.name in best and best[pin.name][0] <= order:
            continue
        if (pin.hashes and f"sha256:{_sha256(wheel)}" in pin.hashes) or (
                not pin.hashes and pin.requirement in bound):
            best[pin.name] = (order, wheel)
    return {name: wheel for name, (_, wheel) in best.items()}


def _cached_wheels(lock: Lock) -> list[tuple[Path, set[str]]]:
    """Every cached wheel file (the wheelhouses', the fleet's downloads) and the hashless pins
    it provably answers (their requirements): a wheelhouse of this lock answers all of its
    pins, a download the requests it was made for with this lock's index options."""
    out = []
    every = {p.requirement for p in lock.pins if not p.hashes}
    options = lock_options(lock)
    for marker in _ready_markers("wheelhouses"):
        bound = every if _marker(marker).get("lock_hash") == lock.lock_hash else set()
        out += [(w, bound) for w in sorted(marker.parent.glob("wheels/*.whl"))]
    for marker in _ready_markers(f"wheels/{FLEET_WHEELS}"):
        record = _marker(marker)
        same = record.get("options") == options
        for wheel in _listed(record):
            pin = wheel.get("pin") if same and not wheel.get("hashes") else None
            out.append((marker.parent / "wheels" / Path(str(wheel.get("file"))).name,
                        {pin} if isinstance(pin, str) else set()))
    return [(w, bound) for w, bound in out if w.is_file() and not w.is_symlink()]


def _ready_markers(folder: str) -> list[Path]:
    """The ready markers of the entries in the cache's `folder`; a stage beside them
    (.<name>.stage, cache.entry's unfinished build) is no entry."""
    return [m for m in sorted(cache_root().glob(f"{folder}/*/{READY}"))
            if not m.parent.name.startswith(".")]


def _fetch(lock: Lock, pins: Sequence[Pin], progress: Progress, target: Platform | None
           ) -> dict[str, Path]:
    """`pins` downloaded for `target` (None: this interpreter) into one cache entry,
    wheels/fleet/<key of the request>."""
    options = lock_options(lock)
    where = ([sys.implementation.cache_tag, platform.machine()] if target is None
             else [target.arch, target.python, list(target.glibc)])
    request = json.dumps([[p.requirement, list(p.hashes)] for p in sorted(pins, key=_by_name)]
                         + [options, *where])
    key = hashlib.sha256(request.encode()).hexdigest()[:20]
    path = cache_dir() / "wheels" / FLEET_WHEELS / key
    what = f"{len(pins)} wheel(s) of {Path(lock.source).name}" + (
        f" for {target.describe()}" if target else "")

    def build(stage: Path) -> str:
        with progress.step(f"Downloading {what} to judge them against the fleet") as step:
            code, tail = pip_download(pins, lock, stage, step,
                                      target.pip_args() if target else ())
        if code != 0:
            reason = tool_reason("\n".join(tail), f"exit code {code}")
            raise EnvError(f"pip could not download them"
                           f"{' for ' + target.describe() if target else ''}: {reason}")
        files = match_wheels(stage / "wheels", pins, lock)
        wheels = [{"name": p.name, "pin": p.requirement, "hashes": list(p.hashes),
                   "file": files[p.name].name, "sha256": sha256_file(files[p.name])}
                  for p in pins]
        return json.dumps({"lock": lock.source, "options": options, "wheels": wheels},
                          indent=1)

    with entry(path, build, ready=lambda at: (at / READY).is_file(), marker=READY,
               what=f"the download of {what} ({path})", tell=progress.info):
        record = _marker(path / READY)
    names = {w.get("name"): Path(str(w.get("file"))).name for w in _listed(record)}
    return {p.name: path / "wheels" / names[p.name] for p in pins if p.name in names}


def _by_name(pin: Pin) -> str:
    return pin.name


def _marker(path: Path) -> dict:
    """A ready marker's JSON; {} when it cannot be read (then it binds nothing)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _listed(record: dict) -> list[dict]:
    """The wheels a fleet download's ready marker lists; those that are not a JSON object (a
    marker written by hand, or by another version) are none."""
    wheels = record.get("wheels")
    return [w for w in wheels if isinstance(w, dict)] if isinstance(wheels, list) else []


# sha256 of a wheel file, by (path, size, mtime): a check asks each changed wheel a few times
# (its lock, the fleet's notes), and a CUDA wheel is gigabytes. In-process only.
_HASHED: dict[tuple[str, int, int], str] = {}


def _sha256(path: Path) -> str:
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _HASHED:
        _HASHED[key] = sha256_file(path)
    return _HASHED[key]
