"""`parse_pylock`: a `pylock.toml` (PEP 751) as a Lock, narrowed to the target platform.

As PEP 751 tells an installer to: `lock-version` 1.x (another major is refused; a newer minor
is read), `environments` (one must hold here), `requires-python` (must include the target's
Python), then the packages whose `marker` holds, with `extras` empty and `dependency_groups`
the lock's `default-groups`. Each kept package must name a `version` and come from an index as
files with hashes (a wheel or an sdist: `wheels`, `sdist`); a `vcs`, `directory` or `archive`
package is a source, not a version, and is refused as a URL requirement is in requirements
text; an editable `directory` (the project itself, as `uv export` lists it) is the project's
code, not a pin, and is left out. Two kept packages of one name are an error (the lock's
markers overlap).

The structure is PEP 751's as `packaging.pylock` reads it (`Pylock.from_dict`: required keys,
types, versions, specifiers, markers, names, hashes), its error naming the key and the line of
its table; what lockguard adds is the narrowing to a target and what it can pin and install.

`uv pip compile -o pylock.toml`, `uv export --format pylock.toml`, `pip lock` and PDM write
these files; `uv pip install -r pylock.toml` installs them (lockguard.locks.writer writes the
narrowed lock back in this format for it).
"""

from __future__ import annotations

import os
import re
from typing import Any

from packaging.pylock import Pylock, PylockValidationError
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.errors import quote
from lockguard.locks.formats import (
    TomlLock, file_hash, file_name, get, marker_holds, pin_hashes, require_hashes_everywhere,
)
from lockguard.locks.model import Lock, LockOptions, Pin, PinFile
from lockguard.locks.target import Target

SUPPORTED_MAJOR = 1


def parse_pylock(text: str, source: str, target: Target) -> Lock:
    """A pylock.toml's `text` as a Lock of the packages installed on `target` (module
    docstring); LockError naming `source`:line and key when it cannot be used (another major
    lock-version, no environment that holds, a vcs/directory/archive package, a missing hash)."""
    doc = TomlLock(text, source, "pylock.toml")
    _lock_version(doc)
    _validate(doc)
    environments, groups = _header(doc, target)
    packages = get(doc.data, "packages", list, "packages", doc, doc.key_line("packages"),
                   required=True)
    lines = doc.table_lines("packages")
    pins: list[Pin] = []
    kept: list[tuple[str, str, int, bool]] = []
    seen: dict[str, str] = {}
    indexes: list[str] = []
    marked = environments is not None
    left_out = 0
    for i, package in enumerate(packages):
        line = lines[i] if i < len(lines) else (lines[-1] if lines else 1)
        key, pin, has_marker = _package(package, f"packages[{i}]", line, doc, target, groups,
                                        source, seen)
        marked = marked or has_marker
        if pin is None:
            left_out += 1
            continue
        if pin.index is not None and pin.index not in indexes:
            indexes.append(pin.index)
        pins.append(pin)
        kept.append((key, f"{pin.display_name}=={pin.version}", line, bool(pin.hashes)))
    if not pins:
        raise doc.error("packages", f"no package is installed on {target.describe()}"
                        if packages else "the lock pins no packages", doc.key_line("packages"))
    require_hashes_everywhere(kept, doc)
    return Lock(source=source, pins=tuple(pins), format="pylock.toml",
                options=LockOptions(index_url=indexes[0] if indexes else None,
                                    extra_index_urls=tuple(indexes[1:])),
                environment=target.describe() if marked else None, left_out=left_out)


def _validate(doc: TomlLock) -> None:
    """The document against PEP 751 as packaging reads it; a LockError naming the key at fault
    and the line of its table (the n-th `[[packages]]` for `packages[n]...`)."""
    try:
        # A newer minor is read (PEP 751), lock-version checked already: packaging's warning
        # that it does not know that minor is not the user's business.
        Pylock.from_dict({**doc.data, "lock-version": f"{SUPPORTED_MAJOR}.0"})
    except PylockValidationError as exc:
        context = exc.context or "pylock.toml"
        # one line: a marker's error draws a caret under the marker on the lines after
        reason = exc.message.splitlines()[0] if exc.message.strip() else "invalid"
        raise doc.error(_named(doc, context), f"{reason} (PEP 751)",
                        _line_of(doc, context)) from None


def _named(doc: TomlLock, context: str) -> str:
    """`packages[0].wheels[0].hashes` as `packages[0] (numpy).wheels[0].hashes`: the key with
    the package it is in, as lockguard's own checks name it."""
    match = re.match(r"packages\[(\d+)\]", context)
    packages = doc.data.get("packages")
    if not match or not isinstance(packages, list) or int(match[1]) >= len(packages):
        return context
    name = packages[int(match[1])].get("name") if isinstance(
        packages[int(match[1])], dict) else None
    return (f"{match[0]} ({name}){context[match.end():]}" if isinstance(name, str)
            else context)


def _line_of(doc: TomlLock, context: str) -> int | None:
    """The line of the table or key a dotted `context` (`packages[2].wheels[0].hashes`) names:
    the n-th `[[packages]]` header, else the top-level key's line."""
    match = re.match(r"packages\[(\d+)\]", context)
    if match:
        lines = doc.table_lines("packages")
        if int(match[1]) < len(lines):
            return lines[int(match[1])]
    return doc.key_line(re.split(r"[.\[]", context, maxsplit=1)[0])


def _lock_version(doc: TomlLock) -> None:
    """`lock-version` first, in lockguard's words: missing (not a pylock), not a version, or
    another major than lockguard reads (a newer minor is read, as PEP 751 says)."""
    data = doc.data
    version_line = doc.key_line("lock-version")
    version = get(data, "lock-version", str, "lock-version", doc, version_line)
    if version is None:
        raise doc.error("lock-version", "missing: a pylock.toml names its lock-version "
                                        "(PEP 751), so this is not one", 1)
    try:
        major = Version(version).major
    except InvalidVersion:
        raise doc.error("lock-version", f"{quote(version)} is not a version",
                        version_line) from None
    if major != SUPPORTED_MAJOR:
        raise doc.error("lock-version", f"{version} is not a lock version lockguard reads "
                                        f"({SUPPORTED_MAJOR}.x, PEP 751)", version_line)


def _header(doc: TomlLock, target: Target) -> tuple[list | None, list]:
    """The lock's own keys checked against this platform: (environments, default-groups)."""
    data = doc.data
    environments = get(data, "environments", list, "environments", doc,
                       doc.key_line("environments"))
    if environments is not None:
        line = doc.key_line("environments")
        if not any(marker_holds(m if isinstance(m, str) else None, target,
                                f"environments[{i}]", doc, line)
                   for i, m in enumerate(environments)):
            raise doc.error("environments", f"this platform ({target.describe()}) is none of "
                                            f"the lock's environments: {environments}", line)
    _check_python(get(data, "requires-python", str, "requires-python", doc,
                      doc.key_line("requires-python")), target, "requires-python", doc,
                  doc.key_line("requires-python"))
    groups = get(data, "default-groups", list, "default-groups", doc,
                 doc.key_line("default-groups")) or []
    return environments, groups


def _package(package: object, key: str, line: int, doc: TomlLock, target: Target,
             groups: list, source: str, seen: dict[str, str]
             ) -> tuple[str, Pin | None, bool]:
    """One [[packages]] table: (its key for messages, its Pin or None when it is not installed
    on this platform, whether it has a marker)."""
    name = get(package, "name", str, key, doc, line, required=True)
    key = f"{key} ({name})"
    marker = get(package, "marker", str, key, doc, line)
    if not marker_holds(marker, target, f"{key}.marker", doc, line, groups=groups):
        return key, None, marker is not None
    _check_python(get(package, "requires-python", str, key, doc, line), target,
                  f"{key}.requires-python", doc, line)
    directory = package.get("directory")
    if isinstance(directory, dict) and directory.get("editable"):
        # The project itself (`uv export` lists it): its code, not a pin, as a uv.lock's own
        # package is.
        return key, None, marker is not None
    for kind in ("vcs", "directory", "archive"):
        if kind in package:
            raise doc.error(key, f"installs from a {kind}, not a version from an index "
                                 "(a source lockguard cannot pin or install without "
                                 "building it)", line)
    version = get(package, "version", str, key, doc, line)
    if version is None:
        raise doc.error(key, "names no version (lockguard compares pinned versions)", line)
    files = _files(package, key, doc, line, source)
    if not files:
        raise doc.error(key, "names neither wheels nor an sdist to install", line)
    canonical = canonicalize_name(name)
    if canonical in seen:
        raise doc.error(key, f"{name} is locked again ({seen[canonical]}) and both "
                             f"markers hold on {target.describe()}", line)
    seen[canonical] = key
    index = get(package, "index", str, key, doc, line)
    return key, Pin(name=canonical, display_name=name, version=version,
                    hashes=pin_hashes(files), line=line, files=files, index=index), \
        marker is not None


def _check_python(spec: str | None, target: Target, key: str, doc: TomlLock,
                  line: int | None) -> None:
    if spec is None:
        return
    if not SpecifierSet(spec).contains(target.python_version(), prereleases=True):
        raise doc.error(key, f"{spec} excludes this platform's Python "
                             f"({target.python_version()})", line)


def _files(package: dict[str, Any], key: str, doc: TomlLock, line: int,
           source: str) -> tuple[PinFile, ...]:
    entries: list[tuple[str, Any]] = []
    sdist = get(package, "sdist", dict, key, doc, line)
    if sdist is not None:
        entries.append((f"{key}.sdist", sdist))
    wheels = get(package, "wheels", list, key, doc, line) or []
    entries += [(f"{key}.wheels[{j}]", wheel) for j, wheel in enumerate(wheels)]
    files = []
    for where, entry in entries:
        url = get(entry, "url", str, where, doc, line)
        path = get(entry, "path", str, where, doc, line)
        if url is None:
            # Relative to the lock's folder (PEP 751); absolute here, as the lock is installed
            # from a copy written elsewhere.
            url = path if os.path.isabs(path) else os.path.normpath(
                os.path.join(os.path.dirname(os.path.abspath(source)), path))
        name = get(entry, "name", str, where, doc, line) or file_name(url)
        hashes = get(entry, "hashes", dict, where, doc, line) or {}
        found = [file_hash(algorithm, digest, f"{where}.hashes", doc, line)
                 for algorithm, digest in hashes.items()]
        checked = tuple(sorted(h for h in found if h is not None))
        if not checked:
            raise doc.error(f"{where}.hashes", f"{name}: none of {sorted(hashes)} is a hash "
                                               "pip can check (sha256)", line)
        files.append(PinFile(name=name, url=url, hashes=checked))
    return tuple(files)
