"""`parse_uv_lock`: a uv project's `uv.lock` as a Lock, narrowed to the target platform.

A uv.lock is universal: one resolution for every platform the project supports, each package
listing its dependencies with the markers under which they apply. What `uv sync` (and
`uv export`, its installable form) installs for one platform is a walk of that graph: from the
project's own package (the workspace's members when the root is no package), through its
dependencies and its `dev` dependency group (uv's default groups), following an edge only when
its marker holds on the target and adding a package's optional dependencies where an edge
asks for its extras. The project's own packages (virtual, editable or workspace members) are
its code, not pins, and are left out as `uv export --no-emit-project` leaves them; a package
from git, a URL or a local directory is a source lockguard cannot pin, and is refused.

Only `version = 1` is read (the format uv has written since 0.5); `revision` changes nothing
lockguard reads.
"""

from __future__ import annotations

import os
from typing import Any

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.errors import quote
from lockguard.locks.formats import (
    TomlLock, colon_hash, file_name, get, marker_holds, pin_hashes, require_hashes_everywhere,
)
from lockguard.locks.model import Lock, LockOptions, Pin, PinFile
from lockguard.locks.target import Target

SUPPORTED_VERSIONS = (1,)
DEFAULT_GROUPS = ("dev",)  # uv's default-groups unless the project sets others
_PROJECT_SOURCES = ("virtual", "editable")
_UNPINNABLE_SOURCES = ("git", "url", "path", "directory")


class _Package:
    def __init__(self, index: int, table: dict[str, Any], line: int, doc: TomlLock) -> None:
        self.key = f"package[{index}]"
        self.line = line
        self.table = table
        self.name = get(table, "name", str, self.key, doc, line, required=True)
        self.canonical = canonicalize_name(self.name)
        self.key = f"{self.key} ({self.name})"
        self.version = get(table, "version", str, self.key, doc, line)
        self.source = get(table, "source", dict, self.key, doc, line) or {}
        kinds = [k for k in self.source if k != "subdirectory"]
        self.source_kind = kinds[0] if kinds else None


def parse_uv_lock(text: str, source: str, target: Target) -> Lock:
    """A uv.lock's `text` as a Lock of the packages `uv sync` installs on `target` (module
    docstring); LockError naming `source`:line and key when it cannot be used (another version,
    a git/url/path source, requires-python excluding the target, a missing hash)."""
    doc = TomlLock(text, source, "uv.lock")
    _check_header(doc, target)
    packages, roots, own = _packages(doc)
    reached = _reached(doc, packages, roots, target)
    pins: list[Pin] = []
    kept: list[tuple[str, str, int, bool]] = []
    indexes: list[str] = []
    seen: dict[str, _Package] = {}
    for package in packages:  # file order
        if id(package) not in reached or id(package) in own:
            continue
        pin = _pin(package, doc, source, target, seen)
        if pin.index not in indexes:
            indexes.append(pin.index)
        pins.append(pin)
        kept.append((package.key, f"{package.name}=={package.version}", package.line,
                     all(f.hashes for f in pin.files) and bool(pin.files)))
    if not pins:
        raise doc.error("package", f"the project installs no package on "
                                   f"{target.describe()}", None)
    require_hashes_everywhere(kept, doc)
    registry = [i for i in indexes if "://" in i]
    return Lock(source=source, pins=tuple(pins), format="uv.lock",
                options=LockOptions(index_url=registry[0] if registry else None,
                                    extra_index_urls=tuple(registry[1:]),
                                    find_links=tuple(i for i in indexes if "://" not in i)),
                environment=target.describe(),
                left_out=sum(1 for p in packages if id(p) not in reached and id(p) not in own))


def _check_header(doc: TomlLock, target: Target) -> None:
    """The format version lockguard reads, and a requires-python that admits this Python."""
    data = doc.data
    version_line = doc.key_line("version")
    version = get(data, "version", int, "version", doc, version_line)
    if version is None:
        raise doc.error("version", "missing: a uv.lock names its format version", 1)
    if version not in SUPPORTED_VERSIONS:
        raise doc.error("version", f"{version} is not a uv.lock version lockguard reads "
                                   f"({', '.join(map(str, SUPPORTED_VERSIONS))})", version_line)
    python_line = doc.key_line("requires-python")
    requires_python = get(data, "requires-python", str, "requires-python", doc, python_line)
    if requires_python is not None:
        try:
            allowed = SpecifierSet(requires_python)
        except InvalidSpecifier:
            raise doc.error("requires-python", f"{quote(requires_python)} is not a version "
                                               "specifier", python_line) from None
        if not allowed.contains(target.python_version(), prereleases=True):
            raise doc.error("requires-python", f"{requires_python} excludes this platform's "
                                               f"Python ({target.python_version()})",
                            python_line)


def _packages(doc: TomlLock) -> tuple[list[_Package], list[_Package], set[int]]:
    """Every [[package]] table, the project's own (the roots the install starts from), and
    the ids of the workspace's packages (never pins)."""
    tables = get(doc.data, "package", list, "package", doc, None) or []
    lines = doc.table_lines("package")
    packages = []
    for i, table in enumerate(tables):
        line = lines[i] if i < len(lines) else 1
        if not isinstance(table, dict):
            raise doc.error(f"package[{i}]", "expected a table", line)
        packages.append(_Package(i, table, line, doc))
    if not packages:
        raise doc.error("package", "the lock pins no packages", None)
    manifest = get(doc.data, "manifest", dict, "manifest", doc, None)
    members = {canonicalize_name(m) for m in (manifest or {}).get("members", [])
               if isinstance(m, str)}
    roots = [p for p in packages if p.source_kind in _PROJECT_SOURCES
             and p.source.get(p.source_kind) == "."]
    if not roots:
        roots = [p for p in packages if p.canonical in members]
    if not roots:
        raise doc.error("package", "no package is the project itself (source virtual or "
                                   "editable \".\"): not a uv project's lock", None)
    own = {id(p) for p in packages if p.source_kind in _PROJECT_SOURCES
           or p.canonical in members}
    return packages, roots, own


def _reached(doc: TomlLock, packages: list[_Package], roots: list[_Package],
             target: Target) -> dict[int, _Package]:
    """The packages an install of the roots reaches on `target`: the dependency edges whose
    markers hold, the default groups of the roots, and the extras asked along the way."""
    by_name: dict[str, list[_Package]] = {}
    for p in packages:
        by_name.setdefault(p.canonical, []).append(p)
    reached: dict[int, _Package] = {}
    extras_of: dict[int, set[str]] = {}
    todo: list[tuple[_Package, tuple[str, ...], bool]] = [(r, (), True) for r in roots]
    while todo:
        package, extras, is_root = todo.pop()
        first = id(package) not in reached
        reached[id(package)] = package
        wanted = set(extras) - extras_of.setdefault(id(package), set())
        if not first and not wanted:
            continue
        extras_of[id(package)] |= wanted
        for where, edge in _edges(doc, package, first, is_root, wanted):
            if not isinstance(edge, dict):
                raise doc.error(where, "expected a table", package.line)
            if not marker_holds(get(edge, "marker", str, where, doc, package.line), target,
                                f"{where}.marker", doc, package.line):
                continue
            dep = _resolve(edge, by_name, where, doc, package.line)
            dep_extras = get(edge, "extra", list, where, doc, package.line) or []
            todo.append((dep, tuple(str(e) for e in dep_extras), False))
    return reached


def _edges(doc: TomlLock, package: _Package, first: bool, is_root: bool,
           wanted: set[str]) -> list[tuple[str, Any]]:
    """A package's dependency edges not followed yet: its dependencies (the first time), a
    root's default groups, and the edges of the extras newly asked of it."""
    edges: list[tuple[str, Any]] = []
    if first:
        deps = get(package.table, "dependencies", list, package.key, doc, package.line) or []
        edges += [(f"{package.key}.dependencies[{j}]", d) for j, d in enumerate(deps)]
        if is_root:
            groups = get(package.table, "dev-dependencies", dict, package.key, doc,
                         package.line) or {}
            for group in DEFAULT_GROUPS:
                edges += [(f"{package.key}.dev-dependencies.{group}[{j}]", d)
                          for j, d in enumerate(groups.get(group, []))]
    optional = get(package.table, "optional-dependencies", dict, package.key, doc,
                   package.line) or {}
    for extra in sorted(wanted):
        edges += [(f"{package.key}.optional-dependencies.{extra}[{j}]", d)
                  for j, d in enumerate(optional.get(extra, []))]
    return edges


def _pin(package: _Package, doc: TomlLock, source: str, target: Target,
         seen: dict[str, _Package]) -> Pin:
    """A reached package as a Pin: from an index, reached once, with a version."""
    if package.source_kind in _UNPINNABLE_SOURCES or package.source_kind is None:
        kind = package.source_kind or "no source"
        raise doc.error(package.key, f"comes from a {kind} "
                                     f"({package.source.get(kind, '')}), not an index: "
                                     "a source lockguard cannot pin or install without "
                                     "building it", package.line)
    if package.canonical in seen:
        raise doc.error(package.key, f"{package.name} is reached again "
                                     f"({seen[package.canonical].key}) on "
                                     f"{target.describe()}", package.line)
    seen[package.canonical] = package
    if package.version is None:
        raise doc.error(package.key, "names no version", package.line)
    try:
        Version(package.version)
    except InvalidVersion:
        raise doc.error(f"{package.key}.version", f"{quote(package.version)} is not a version",
                        package.line) from None
    files = _files(package, doc, source)
    return Pin(name=package.canonical, display_name=package.name, version=package.version,
               hashes=pin_hashes(files), line=package.line, files=files,
               index=str(package.source.get("registry")))


def _resolve(edge: dict[str, Any], by_name: dict[str, list[_Package]], where: str,
             doc: TomlLock, line: int) -> _Package:
    """The package an edge names: by name, and by version and source where several share it."""
    name = get(edge, "name", str, where, doc, line, required=True)
    candidates = by_name.get(canonicalize_name(name), [])
    version = edge.get("version")
    source = edge.get("source")
    if version is not None:
        candidates = [p for p in candidates if p.version == version]
    if source is not None:
        candidates = [p for p in candidates if p.source == source]
    if len(candidates) != 1:
        what = "no package" if not candidates else f"{len(candidates)} packages"
        raise doc.error(where, f"{what} of the lock match{'es' if what == 'no package' else ''}"
                               f" the dependency on {name}" + (f" {version}" if version else ""),
                        line)
    return candidates[0]


def _files(package: _Package, doc: TomlLock, source: str) -> tuple[PinFile, ...]:
    entries: list[tuple[str, Any]] = []
    sdist = get(package.table, "sdist", dict, package.key, doc, package.line)
    if sdist is not None:
        entries.append((f"{package.key}.sdist", sdist))
    wheels = get(package.table, "wheels", list, package.key, doc, package.line) or []
    entries += [(f"{package.key}.wheels[{j}]", w) for j, w in enumerate(wheels)]
    files = []
    for where, entry in entries:
        if not isinstance(entry, dict):
            raise doc.error(where, "expected a table", package.line)
        url = get(entry, "url", str, where, doc, package.line)
        path = get(entry, "path", str, where, doc, package.line)
        if url is None and path is None:
            raise doc.error(where, "names neither a url nor a path", package.line)
        if url is None:
            url = path if os.path.isabs(path) else os.path.normpath(
                os.path.join(os.path.dirname(os.path.abspath(source)), path))
        digest = entry.get("hash")
        hashes = (colon_hash(digest, f"{where}.hash", doc, package.line),) \
            if digest is not None else ()
        files.append(PinFile(name=file_name(url), url=url, hashes=hashes))
    if not files:
        raise doc.error(package.key, "names neither wheels nor an sdist to install",
                        package.line)
    return tuple(files)
