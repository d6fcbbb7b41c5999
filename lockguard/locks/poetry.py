"""`parse_poetry_lock`: a `poetry.lock` as a Lock, narrowed to the target platform.

Poetry 2 writes `[metadata] lock-version = "2.1"`, in which every package records the groups
that need it and the markers under which it is installed (`markers`: one string, or one per
group). That is what `poetry install` (and `poetry export`) decide from for one platform, and
what is read here: a package is kept when its markers hold on the target (an optional package
only comes with an extra: `extra == "name"` never holds, as no extra is asked for); every group
counts, as `poetry install` installs them all unless told otherwise.

`lock-version` 2.0 (Poetry 1.x) records neither: which packages a platform installs is known
only with the project's pyproject.toml, so such a lock is refused, saying how to rewrite it.
A package's files are named without a URL: they come from its source's index (`[package.source]`
of type `legacy`), else from PyPI; a git, url, file or directory source is refused.
"""

from __future__ import annotations

from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.errors import quote
from lockguard.locks.formats import (
    TomlLock, colon_hash, get, marker_holds, pin_hashes, require_hashes_everywhere,
)
from lockguard.locks.model import Lock, LockOptions, Pin, PinFile
from lockguard.locks.target import Target

SUPPORTED = ("2.1",)


def parse_poetry_lock(text: str, source: str, target: Target) -> Lock:
    """A poetry.lock's `text` as a Lock of the packages installed on `target` (module
    docstring); LockError naming `source`:line and key when it cannot be used (lock-version
    other than 2.1, an unpinnable source, no package for this platform, a missing hash)."""
    doc = TomlLock(text, source, "poetry.lock")
    metadata = get(doc.data, "metadata", dict, "metadata", doc, None)
    version_line = doc.key_line("lock-version")
    version = get(metadata or {}, "lock-version", str, "metadata", doc, version_line)
    if version is None:
        raise doc.error("metadata.lock-version", "missing: a poetry.lock names its lock-version",
                        None)
    if version not in SUPPORTED:
        if version.startswith("1.") or version == "2.0":
            why = (f"{version} (Poetry 1.x) records no markers per package, so which packages "
                   "this platform installs cannot be read from the lock alone; rewrite it "
                   "with Poetry 2 (`poetry lock`), which writes 2.1")
        else:
            why = f"{version} is not a lock version lockguard reads ({', '.join(SUPPORTED)})"
        raise doc.error("metadata.lock-version", why, version_line)

    tables = get(doc.data, "package", list, "package", doc, None) or []
    lines = doc.table_lines("package")
    pins: list[Pin] = []
    kept: list[tuple[str, str, int, bool]] = []
    seen: dict[str, str] = {}
    indexes: list[str] = []
    left_out = 0
    for i, table in enumerate(tables):
        key = f"package[{i}]"
        line = lines[i] if i < len(lines) else 1
        if not isinstance(table, dict):
            raise doc.error(key, "expected a table", line)
        name = get(table, "name", str, key, doc, line, required=True)
        key = f"{key} ({name})"
        if not _installed(table, target, key, doc, line):
            left_out += 1
            continue
        version = get(table, "version", str, key, doc, line, required=True)
        try:
            Version(version)
        except InvalidVersion:
            raise doc.error(f"{key}.version", f"{quote(version)} is not a version", line) from None
        index = _index(table, key, doc, line)
        if index is not None and index not in indexes:
            indexes.append(index)
        canonical = canonicalize_name(name)
        if canonical in seen:
            raise doc.error(key, f"{name} is locked again ({seen[canonical]}) and both "
                                 f"markers hold on {target.describe()}", line)
        seen[canonical] = key
        files = _files(table, key, doc, line)
        pins.append(Pin(name=canonical, display_name=name, version=version,
                        hashes=pin_hashes(files), line=line, files=files, index=index))
        kept.append((key, f"{name}=={version}", line, bool(files) and all(f.hashes for f in files)))
    if not pins:
        raise doc.error("package", f"no package is installed on {target.describe()}"
                        if tables else "the lock pins no packages", None)
    require_hashes_everywhere(kept, doc)
    # Packages without a source come from PyPI, Poetry's default; an explicit source's
    # packages name theirs. As installer arguments: the sources as extra indexes, which uv
    # searches before the default one.
    return Lock(source=source, pins=tuple(pins), format="poetry.lock",
                options=LockOptions(extra_index_urls=tuple(indexes)),
                environment=target.describe(), left_out=left_out)


def _installed(table: dict[str, Any], target: Target, key: str, doc: TomlLock,
               line: int) -> bool:
    markers = table.get("markers")
    optional = get(table, "optional", bool, key, doc, line) or False
    if markers is None:
        return not optional
    if isinstance(markers, str):
        return marker_holds(markers, target, f"{key}.markers", doc, line)
    if isinstance(markers, dict):  # one per group: installed when any group's holds
        return any(marker_holds(m if isinstance(m, str) else None, target,
                                f"{key}.markers.{group}", doc, line)
                   for group, m in markers.items())
    raise doc.error(f"{key}.markers", "expected a string or a table", line)


def _index(table: dict[str, Any], key: str, doc: TomlLock, line: int) -> str | None:
    source = get(table, "source", dict, key, doc, line)
    if source is None:
        return None
    kind = get(source, "type", str, f"{key}.source", doc, line, required=True)
    url = get(source, "url", str, f"{key}.source", doc, line)
    if kind == "legacy" and url:
        return url
    raise doc.error(f"{key}.source", f"comes from a {kind} source ({url or '?'}), not an "
                                     "index: a source lockguard cannot pin or install without "
                                     "building it", line)


def _files(table: dict[str, Any], key: str, doc: TomlLock, line: int) -> tuple[PinFile, ...]:
    entries = get(table, "files", list, key, doc, line) or []
    files = []
    for j, entry in enumerate(entries):
        where = f"{key}.files[{j}]"
        if not isinstance(entry, dict):
            raise doc.error(where, "expected a table", line)
        name = get(entry, "file", str, where, doc, line, required=True)
        digest = entry.get("hash")
        hashes = (colon_hash(digest, f"{where}.hash", doc, line),) if digest else ()
        files.append(PinFile(name=name, hashes=hashes))
    return tuple(files)
