"""What a venv has installed, read from its dist-info folders (files, never code): the one
reader behind bisection's consistency check (flows/bisect.py), the compile caches' closures
(envs/compile_cache.py) and the fleet's judgement of a change (dist_facts: a wheel's native
facts, from a venv's dist-info folder or a .whl file; envs/wheels.py finds the lock's own).

A dist-info folder is named `<name>-<version>.dist-info`, its name escaped as the wheel spec
says, so one directory listing gives every distribution and its version without opening a
METADATA file; a METADATA is read (by importlib.metadata) only for the distributions whose
requirements are asked for.
"""

from __future__ import annotations

import csv
import email.parser
import re
import zipfile
from dataclasses import dataclass, field
from importlib.metadata import PathDistribution
from pathlib import Path, PurePosixPath

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from lockguard.files import scratch_dir
from lockguard.native import (
    CudaCode, Facts, cuda_linked, cuda_major_needed, library_facts, manylinux_glibc,
    wheel_machine,
)


def site_packages(venv: Path) -> Path | None:
    """The venv's site-packages; None if it has none."""
    return next(iter(sorted(venv.glob("lib/python*/site-packages"))), None)


def python_version(site: Path) -> str:
    """The X.Y of the interpreter a site-packages belongs to (lib/pythonX.Y/site-packages)."""
    return site.parent.name.removeprefix("python")


def marker_environment(python: str | None) -> dict[str, str]:
    """The environment markers are evaluated in for a venv whose interpreter is Python `python`
    (X.Y; None: this one's)."""
    environment = dict(default_environment())
    if python:
        environment.update(python_version=python, python_full_version=f"{python}.0")
    return environment


def applies(requirement: Requirement, environment: dict[str, str],
            extras: tuple[str, ...]) -> bool:
    """Whether a distribution installed with `extras` requires `requirement` in `environment`:
    no marker, or its marker holds for one of the extras or for none."""
    return requirement.marker is None or any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in (*extras, ""))


def distributions(site: Path) -> dict[str, tuple[str, Path]]:
    """{canonical name: (version as the folder writes it, its METADATA)} of `site`."""
    found = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        found[canonicalize_name(name)] = (version, info / "METADATA")
    return found


def requires(metadata: Path) -> tuple[str, ...] | None:
    """A distribution's Requires-Dist as written (their markers and extras in them), read by
    importlib.metadata from the dist-info folder of `metadata`; None if its METADATA cannot be
    read (missing, not a file, not UTF-8), which importlib.metadata tells no requirement from."""
    distribution = PathDistribution(metadata.parent)
    try:
        if distribution.read_text(metadata.name) is None:
            return None
        return tuple(distribution.requires or ())
    except (OSError, UnicodeDecodeError):
        return None


def dist_facts(dist_info: Path) -> Facts:
    """What the distribution of `dist_info` (a dist-info folder, or a .whl file) declares in
    its files, read as bytes (native.py): the CUDA code of the libraries its RECORD lists,
    the CUDA major its version or requirements name (or the CUDA runtime those libraries link,
    where newer), the glibc its tags need (a wheel file's name's, _file_tags; a dist-info's
    WHEEL's Tag lines) or its libraries' symbol versions require, where newer. A RECORD path
    that leaves its site-packages, or a link, is not followed: the files are the lock's, not
    to be trusted. What could not be read (no RECORD, a
    library unreadable or too large, a wheel that is no zip or unpacks to more than
    MAX_WHEEL_BYTES) is Facts.unread, never taken as "no code": the fleet's judge fails it
    closed."""
    if dist_info.suffix == ".whl":
        return _wheel_facts(dist_info)
    name, _, version = dist_info.name.removesuffix(".dist-info").rpartition("-")
    read, unread = Libraries(), None
    libraries = _libraries(dist_info)
    if libraries is None:
        unread = "its RECORD (the list of its files) could not be read"
    for library in libraries or ():
        try:
            read = read.with_library(library, library.relative_to(dist_info.parent))
        except OSError as exc:
            unread = unread or (f"{library.relative_to(dist_info.parent)} could not be read "
                                f"({exc.strerror or exc})")
    try:
        wheel = (dist_info / "WHEEL").read_text(encoding="utf-8", errors="replace")
    except OSError:
        wheel = ""
    try:
        python = PathDistribution(dist_info).metadata.get("Requires-Python")
    except (OSError, UnicodeDecodeError):
        python = None
    return _facts(name, version, read, _tags(wheel), requires(dist_info / "METADATA") or (),
                  python, unread)


@dataclass(frozen=True)
class Libraries:
    """What a distribution's libraries declare, read one library at a time: the union of their
    CUDA code; the highest x86-64 level with the first library that needs it (1, the baseline
    said by most libraries built with -mneeded, is no need); the CUDA toolkit major each
    library that links one links, with its soname (native.cuda_linked); the newest glibc their
    symbol versions require, with the first library that requires it."""

    code: CudaCode = field(default_factory=CudaCode)
    isa: tuple[int, str] | None = None
    linked: tuple[tuple[int, str], ...] = ()
    glibc: tuple[tuple[int, int], str] | None = None

    def with_library(self, path: Path, name: PurePosixPath | Path) -> Libraries:
        """These with the library at `path` (named `name` in the distribution) read
        (native.library_facts)."""
        more = library_facts(path)
        isa = (more.level, str(name)) if more.level > max(1, self.isa[0] if self.isa else 0) \
            else self.isa
        runtime = cuda_linked(more.needed)
        linked = (*self.linked, runtime) if runtime else self.linked
        glibc = (more.glibc, str(name)) if more.glibc and (
            not self.glibc or more.glibc > self.glibc[0]) else self.glibc
        return Libraries(self.code.union(more.code), isa, linked, glibc)


def _tags(wheel: str) -> list[str]:
    """The Tag lines of a WHEEL file's text."""
    return [line.partition(":")[2].strip() for line in wheel.splitlines()
            if line.startswith("Tag:")]


def _facts(name: str, version: str, read: Libraries, tags: list[str],
           requirements: tuple[str, ...], requires_python: str | None, unread: str | None
           ) -> Facts:
    declared = cuda_major_needed(version, requirements, canonicalize_name(name))
    # The runtime its libraries load decides the driver, when newer than what it declares.
    # Libraries that disagree are one per CUDA major (bitsandbytes), of which the one that
    # matches torch's runtime is loaded: the oldest is what it needs (torch says the rest).
    runtime = min(read.linked) if len({major for major, _ in read.linked}) > 1 \
        else read.linked[0] if read.linked else None
    linked = runtime if runtime and runtime[0] > (declared or 0) else None
    # and the glibc its libraries' symbol versions require, when newer than its tag says
    tagged = manylinux_glibc(tags)
    symbols = read.glibc if read.glibc and read.glibc[0] > (tagged or (0, 0)) else None
    return Facts(name=canonicalize_name(name), version=version, cuda=read.code,
                 cuda_major=linked[0] if linked else declared, cuda_linked=linked,
                 glibc=symbols[0] if symbols else tagged, glibc_from=symbols[1] if symbols
                 else None, machine=wheel_machine(tags), x86_isa=read.isa,
                 # the lock's text: bounded, one line (a finding quotes it)
                 requires_python=" ".join(str(requires_python).split())[:100]
                 if requires_python else None, unread=unread)


MAX_MEMBER_BYTES = 8 << 30  # a wheel's library larger than this is not unpacked to be read
# All of one wheel's libraries together: torch's CUDA build unpacks about 4 GiB of them; a
# PR's index can serve a wheel whose few kilobytes say terabytes (a zip bomb).
MAX_WHEEL_BYTES = 32 << 30


def _wheel_facts(wheel: Path) -> Facts:
    """dist_facts of a wheel file (a docker wheelhouse's): its METADATA and WHEEL read from
    the archive, each shared library unpacked to a scratch file to be read, one at a time."""
    name, version = wheel.name.split("-")[:2]
    try:
        with zipfile.ZipFile(wheel) as archive:
            info = f"{name}-{version}.dist-info/"
            text = {n: archive.read(info + n).decode("utf-8", "replace")
                    for n in ("WHEEL", "METADATA") if info + n in archive.NameToInfo}
            read, unread = _wheel_libraries(archive)
    except (OSError, zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, ValueError) as exc:
        return Facts(name=canonicalize_name(name), version=version,
                     unread=f"{wheel.name} could not be read as a wheel ({exc})")
    meta = email.parser.Parser().parsestr(text.get("METADATA", ""), headersonly=True)
    return _facts(name, version, read, _file_tags(wheel) or _tags(text.get("WHEEL", "")),
                  tuple(meta.get_all("Requires-Dist") or ()), meta.get("Requires-Python"),
                  unread)


def _file_tags(wheel: Path) -> list[str]:
    """The tags a wheel file's name carries (empty when it is not a wheel's name): what an
    installer picks the file by (PEP 427), and so the platform it installs on. Its WHEEL's
    Tag lines may say less: torch 2.6.0's cp311-cp311-manylinux1_x86_64 wheel on PyPI has
    `Tag: cp311-cp311-linux_x86_64` there (the name was made manylinux after the build)."""
    try:
        return sorted(str(tag) for tag in parse_wheel_filename(wheel.name)[3])
    except InvalidWheelFilename:
        return []


def _wheel_libraries(archive: zipfile.ZipFile) -> tuple[Libraries, str | None]:
    """What an archive's shared libraries declare, each unpacked to a scratch file to be read;
    why some were not read (too large, alone or together), None when all were."""
    read, unpacked = Libraries(), 0
    libraries = [m for m in archive.infolist() if _SHARED.search(PurePosixPath(m.filename).name)
                 and ".." not in PurePosixPath(m.filename).parts
                 and not PurePosixPath(m.filename).is_absolute()]
    large = next((m for m in libraries if m.file_size > MAX_MEMBER_BYTES), None)
    if large is not None:
        return read, (f"{large.filename} is {large.file_size} bytes, more than lockguard "
                           f"unpacks to read ({MAX_MEMBER_BYTES})")
    total = sum(m.file_size for m in libraries)
    if total > MAX_WHEEL_BYTES:
        return read, (f"its libraries unpack to {total} bytes, more than lockguard "
                           f"unpacks to read ({MAX_WHEEL_BYTES})")
    with scratch_dir("wheel") as scratch:
        for member in libraries:
            target = scratch / "library.so"
            with archive.open(member) as source, open(target, "wb") as out:
                # the sizes the archive declares bound what is written: zipfile reads no
                # more of a member than its declared size (and checks its CRC at the end)
                unpacked += _copy(source, out, MAX_WHEEL_BYTES - unpacked)
            read = read.with_library(target, PurePosixPath(member.filename))
    return read, None


def _copy(source, out, limit: int) -> int:
    """Copies `source` to `out` in blocks, at most `limit` bytes (ValueError past it); the
    bytes copied."""
    done = 0
    while block := source.read(1 << 20):
        done += len(block)
        if done > limit:
            raise ValueError(f"more than {MAX_WHEEL_BYTES} bytes unpacked")
        out.write(block)
    return done


def _libraries(dist_info: Path) -> list[Path] | None:
    """The shared libraries a dist-info's RECORD lists inside its site-packages (links and
    paths that leave it not followed); None when the RECORD cannot be read."""
    site = dist_info.parent
    try:
        rows = (dist_info / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return None
    found = []
    for row in csv.reader(rows):
        path = PurePosixPath(row[0]) if row else PurePosixPath(".")
        if path.is_absolute() or ".." in path.parts or not _SHARED.search(path.name):
            continue
        file = site / path
        if not file.is_symlink():  # one missing or not a file fails to open: unread
            found.append(file)
    return found


_SHARED = re.compile(r"\.so(\.\d+)*$")


def normal_version(text: str) -> str:
    """A version as packaging normalises it (so 2.14.1 and 2.14.1.0 meet); as written when it
    is not one."""
    try:
        return str(Version(text))
    except InvalidVersion:
        return text
