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
import shutil
import zipfile
from importlib.metadata import PathDistribution
from pathlib import Path, PurePosixPath

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.files import scratch_dir
from lockguard.native import (
    CudaCode, Facts, cuda_code, cuda_major_needed, manylinux_glibc, wheel_machine, x86_isa_needed,
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
    the CUDA major its version or requirements name, the glibc its WHEEL tags need. A RECORD
    path that leaves its site-packages, or a link, is not followed: the files are the lock's,
    not to be trusted."""
    if dist_info.suffix == ".whl":
        return _wheel_facts(dist_info)
    name, _, version = dist_info.name.removesuffix(".dist-info").rpartition("-")
    code, isa = CudaCode(), None
    for library in _libraries(dist_info):
        try:
            code = code.union(cuda_code(library))
            isa = _higher(isa, x86_isa_needed(library), library.relative_to(dist_info.parent))
        except OSError:
            continue  # unreadable: it declares nothing we can judge by
    try:
        wheel = (dist_info / "WHEEL").read_text(encoding="utf-8", errors="replace")
    except OSError:
        wheel = ""
    try:
        python = PathDistribution(dist_info).metadata.get("Requires-Python")
    except (OSError, UnicodeDecodeError):
        python = None
    return _facts(name, version, code, wheel, requires(dist_info / "METADATA") or (), isa,
                  python)


def _higher(isa: tuple[int, str] | None, level: int, library: PurePosixPath | Path
            ) -> tuple[int, str] | None:
    """The x86-64 level a distribution needs so far, with the first library that needs it:
    `isa`, or `level` (1 the baseline, said by most libraries built with -mneeded, is no
    need)."""
    return (level, str(library)) if level > max(1, isa[0] if isa else 0) else isa


def _facts(name: str, version: str, code: CudaCode, wheel: str, requirements: tuple[str, ...],
           isa: tuple[int, str] | None, requires_python: str | None) -> Facts:
    tags = [line.partition(":")[2].strip() for line in wheel.splitlines()
            if line.startswith("Tag:")]
    return Facts(name=canonicalize_name(name), version=version, cuda=code,
                 cuda_major=cuda_major_needed(version, requirements, canonicalize_name(name)),
                 glibc=manylinux_glibc(tags), machine=wheel_machine(tags), x86_isa=isa,
                 # the lock's text: bounded, one line (a finding quotes it)
                 requires_python=" ".join(str(requires_python).split())[:100]
                 if requires_python else None)


MAX_MEMBER_BYTES = 8 << 30  # a wheel's library larger than this is not unpacked to be read


def _wheel_facts(wheel: Path) -> Facts:
    """dist_facts of a wheel file (a docker wheelhouse's): its METADATA and WHEEL read from
    the archive, each shared library unpacked to a scratch file to be read, one at a time."""
    name, version = wheel.name.split("-")[:2]
    code, isa = CudaCode(), None
    with zipfile.ZipFile(wheel) as archive, scratch_dir("wheel") as scratch:
        info = f"{name}-{version}.dist-info/"
        text = {n: archive.read(info + n).decode("utf-8", "replace")
                for n in ("WHEEL", "METADATA") if info + n in archive.NameToInfo}
        meta = email.parser.Parser().parsestr(text.get("METADATA", ""), headersonly=True)
        for member in archive.infolist():
            path = PurePosixPath(member.filename)
            if (".." in path.parts or path.is_absolute() or not _SHARED.search(path.name)
                    or member.file_size > MAX_MEMBER_BYTES):
                continue
            target = scratch / "library.so"
            with archive.open(member) as source, open(target, "wb") as out:
                shutil.copyfileobj(source, out, 1 << 20)
            code = code.union(cuda_code(target))
            isa = _higher(isa, x86_isa_needed(target), path)
    return _facts(name, version, code, text.get("WHEEL", ""),
                  tuple(meta.get_all("Requires-Dist") or ()), isa, meta.get("Requires-Python"))


def _libraries(dist_info: Path) -> list[Path]:
    site = dist_info.parent
    try:
        rows = (dist_info / "RECORD").read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    found = []
    for row in csv.reader(rows):
        path = PurePosixPath(row[0]) if row else PurePosixPath(".")
        if path.is_absolute() or ".." in path.parts or not _SHARED.search(path.name):
            continue
        file = site / path
        if not file.is_symlink() and file.is_file():
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
