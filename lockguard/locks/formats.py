"""Which format a lock is in (`lock_format`), and what the TOML readers share: the document
with its error lines (`TomlLock`), marker evaluation for the target platform, file hashes.

A lock's format is told by its file name (`uv.lock`, `poetry.lock`, `pylock.toml` and
`pylock.NAME.toml` as PEP 751 names them; anything else named *.txt or *.in is requirements
text), else by its content: a TOML document with `lock-version` and `packages` is a pylock, one
with `[[package]]` tables and a top-level integer `version` a uv.lock, one with
`[metadata] lock-version` and `content-hash` a poetry.lock; anything else is requirements text
(which is never valid TOML once it pins a package: `numpy==2.0.2` is no TOML key/value).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import unquote, urlsplit

from packaging.markers import InvalidMarker, Marker

from lockguard import toml
from lockguard.errors import quote
from lockguard.locks.model import LockError, LockFormat, PinFile
from lockguard.locks.target import Target

_PYLOCK_NAME = re.compile(r"^pylock\.([^.]+\.)?toml$")


def format_by_name(name: str) -> LockFormat | None:
    """The format a lock's file name says, or None when the name says nothing."""
    base = re.split(r"[/\\:]", name)[-1]  # a path, or "main:ml/uv.lock" as git refs name one
    if base == "uv.lock":
        return "uv.lock"
    if base == "poetry.lock":
        return "poetry.lock"
    if _PYLOCK_NAME.match(base):
        return "pylock.toml"
    if base.lower().endswith((".txt", ".in")):
        return "requirements.txt"
    return None


def lock_format(text: str, name: str) -> LockFormat:
    """The format of a lock: by its file name, else by its content."""
    by_name = format_by_name(name)
    if by_name is not None:
        return by_name
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError:
        return "requirements.txt"
    if "lock-version" in data and "packages" in data:
        return "pylock.toml"
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and "lock-version" in metadata and "content-hash" in metadata:
        return "poetry.lock"
    if isinstance(data.get("version"), int) and "package" in data:
        return "uv.lock"
    return "requirements.txt"


class TomlLock:
    """A TOML lock's document, and where its tables start (tomllib keeps no positions).

    Errors name `file:line` of the table at fault where one is found (the header of the n-th
    `[[package]]` is the n-th package) and always the TOML key (`package[3].wheels[0].hash`),
    so that a lock written with inline tables is still pointed into.
    """

    def __init__(self, text: str, source: str, kind: str) -> None:
        self.source = source
        self.kind = kind
        try:
            self.data: dict[str, Any] = toml.loads(text)
        except toml.TOMLDecodeError as exc:
            message = str(exc)
            found = re.search(r"\(at line (\d+), column \d+\)", message)
            line = int(found.group(1)) if found else None
            reason = re.sub(r"\s*\(at (line \d+, column \d+|end of document)\)", "", message)
            raise LockError(source, line, f"not a valid {kind} (TOML): {reason}") from None
        self._lines = text.splitlines()

    def table_lines(self, name: str) -> list[int]:
        """The line of each `[[name]]` header, in order (the n-th is the n-th table)."""
        header = re.compile(rf"^\s*\[\[\s*{re.escape(name)}\s*\]\]\s*(#.*)?$")
        return [n for n, line in enumerate(self._lines, 1) if header.match(line)]

    def key_line(self, key: str) -> int | None:
        """The first line assigning top-level `key` (`lock-version = ...`), if any."""
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        return next((n for n, line in enumerate(self._lines, 1) if pattern.match(line)), None)

    def error(self, key: str, reason: str, line: int | None = None) -> LockError:
        """A LockError naming the lock file, `line` when known, and the TOML `key` at fault
        (`package[3].wheels[0].hash: ...`), for the caller to raise."""
        return LockError(self.source, line, f"{key}: {reason}")


def get(table: Mapping[str, Any], key: str, kind: type | tuple[type, ...], where: str,
        doc: TomlLock, line: int | None, *, required: bool = False) -> Any:
    """`table[key]` checked to be of `kind` (None when absent and not required)."""
    if key not in table:
        if required:
            raise doc.error(where, f"'{key}' is missing", line)
        return None
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and bool not in _kinds(kind):
        raise doc.error(f"{where}.{key}", f"expected {_kind_name(kind)}, found "
                                          f"{type(value).__name__}", line)
    return value


def _kinds(kind: type | tuple[type, ...]) -> tuple[type, ...]:
    return kind if isinstance(kind, tuple) else (kind,)


def _kind_name(kind: type | tuple[type, ...]) -> str:
    names = {str: "a string", int: "an integer", list: "an array", dict: "a table",
             bool: "a boolean"}
    return " or ".join(names.get(k, k.__name__) for k in _kinds(kind))


def marker_holds(text: str | None, target: Target, where: str, doc: TomlLock,
                 line: int | None, *, extras: Iterable[str] = (),
                 groups: Iterable[str] | None = None) -> bool:
    """Whether a marker holds on the target. pylock.toml's markers may test `extras` and
    `dependency_groups` (PEP 751): `groups` given, they are evaluated as a lock file's."""
    if text is None or not text.strip():
        return True
    try:
        marker = Marker(text)
    except InvalidMarker as exc:
        raise doc.error(where, f"bad marker {quote(text)}: {str(exc).splitlines()[0]}",
                        line) from None
    environment: dict[str, Any] = dict(target.markers)
    try:
        if groups is not None:
            environment.update(extras=frozenset(extras), dependency_groups=frozenset(groups))
            return marker.evaluate(environment, context="lock_file")
        return any(marker.evaluate({**environment, "extra": extra})
                   for extra in (*extras, ""))
    except Exception as exc:  # an undefined variable, a comparison packaging refuses
        raise doc.error(where, f"cannot evaluate marker {quote(text)}: {exc}", line) from None


_HEX = {"sha256": 64, "sha384": 96, "sha512": 128}


def file_hash(algorithm: str, digest: Any, where: str, doc: TomlLock,
              line: int | None) -> str | None:
    """"sha256:<hex>" of one hash a lock gives, None for an algorithm pip cannot check
    (md5, blake2b: kept out, as pip would ignore them); a malformed digest is an error."""
    algorithm = algorithm.lower()
    if algorithm not in _HEX:
        return None
    if (not isinstance(digest, str) or len(digest) != _HEX[algorithm]
            or not re.fullmatch(r"[0-9a-fA-F]+", digest)):
        raise doc.error(where, f"bad {algorithm} hash {quote(digest)} (expected "
                               f"{_HEX[algorithm]} hex digits)", line)
    return f"{algorithm}:{digest.lower()}"


def colon_hash(text: Any, where: str, doc: TomlLock, line: int | None) -> str:
    """A hash written "sha256:<hex>" (uv.lock, poetry.lock), checked."""
    if not isinstance(text, str) or ":" not in text:
        raise doc.error(where, f"bad hash {quote(text)} (expected sha256:<64 hex digits>)", line)
    algorithm, _, digest = text.partition(":")
    found = file_hash(algorithm, digest, where, doc, line)
    if found is None:
        raise doc.error(where, f"hash {quote(text)}: {algorithm} cannot be checked by pip "
                               "(use sha256)", line)
    return found


def file_name(url_or_path: str) -> str:
    """The file name at the end of a URL or path (percent-escapes decoded)."""
    path = urlsplit(url_or_path).path if "://" in url_or_path else url_or_path
    return unquote(path.rstrip("/").rsplit("/", 1)[-1])


def pin_hashes(files: Iterable[PinFile]) -> tuple[str, ...]:
    """The hashes of a pin: every hash of every file, as pip-compile lists them."""
    return tuple(sorted({h for f in files for h in f.hashes}))


def require_hashes_everywhere(pins: list[tuple[str, str, int, bool]], doc: TomlLock) -> None:
    """As pip's hash-checking mode: once one package has hashes, every one must. `pins`:
    (key, requirement, line, hashed) of each package kept."""
    if not any(hashed for *_, hashed in pins):
        return
    for key, requirement, line, hashed in pins:
        if not hashed:
            raise doc.error(key, f"{requirement} has no hash although other packages have "
                                 "hashes (pip's hash-checking mode would refuse it)", line)
