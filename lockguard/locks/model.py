"""The data model of a lock: `Pin`, `PinFile`, `LockOptions`, `Lock`, and `LockError`.

A *lock* pins every package of an environment to one version. lockguard reads four formats
into this one model (lockguard.locks.parser chooses the reader and enforces the rules):

- a pip requirements file, as `pip-compile` (pip-tools) or `uv pip compile` write it:

      --index-url https://pypi.org/simple
      torch==2.13.0+cpu \\
          --hash=sha256:3f1c... \\
          --hash=sha256:9ab2...
          # via -r requirements.in

- `pylock.toml` (PEP 751), `uv.lock` and `poetry.lock`: each package with its version, the
  files it may be installed from (`PinFile`: name, url where the format records one, hashes)
  and the index it comes from. These hold several platforms at once; a reader keeps what this
  machine's installer would install (`Lock.environment` says for which platform) and drops
  the rest, so a Lock always describes one environment.

Nothing above lockguard.locks knows a format: everything works on the model, and
lockguard.locks.writer writes it back for an installer.
"""

import contextlib
import functools
import gc
import hashlib
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from packaging.utils import canonicalize_name
from packaging.version import Version

from lockguard.errors import LockguardError


class LockError(LockguardError):
    """A lock that cannot be used. `str()` is one line: `file:line: what is wrong`."""

    def __init__(self, source: str, line: int | None, reason: str) -> None:
        self.source = source
        self.line = line
        self.reason = reason
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")


# The lock formats lockguard reads, by the name their file usually has.
LockFormat = Literal["requirements.txt", "pylock.toml", "uv.lock", "poetry.lock"]
LOCK_FORMATS: tuple[LockFormat, ...] = ("requirements.txt", "pylock.toml", "uv.lock",
                                        "poetry.lock")

# The distributions that *are* each framework (not its companions). TensorFlow ships under
# several names with the same code and version scheme. Here, with the model, because
# `Lock.frameworks` needs them; lockguard.locks.families builds the family rules on them.
TENSORFLOW_DISTS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
    "tensorflow-aarch64", "tensorflow-rocm", "tensorflow-cpu-aws", "intel-tensorflow",
    "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu", "tf-nightly-intel", "tf-nightly-macos",
)
FRAMEWORK_DISTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "jax": ("jax",),
    "tensorflow": TENSORFLOW_DISTS,
    "numpy": ("numpy",),
}


# In memory only (the Report carries a lock's hash, versions and diff, never the Lock): plain
# frozen dataclasses. keyword-only, as the parser builds them.
@dataclass(frozen=True, kw_only=True)
class PinFile:
    """One file a TOML lock names for a pin: a wheel or an sdist."""

    name: str  # the file name, e.g. numpy-2.0.2-cp311-cp311-manylinux_2_17_x86_64.whl
    url: str | None = None  # where to download it (pylock.toml, uv.lock); None: from the index
    hashes: tuple[str, ...] = ()  # sorted, "sha256:<hex>"

    @property
    def is_wheel(self) -> bool:
        """Whether the file is a wheel (.whl, any case), installable without running build code;
        anything else is an sdist."""
        return self.name.lower().endswith(".whl")


@dataclass(frozen=True, kw_only=True)
class Pin:
    """One pinned package of a lock: a `name==version` line, or a TOML lock's package."""

    name: str  # canonical (PEP 503): lower case, runs of -_. become "-"
    display_name: str  # as written in the lock, for messages
    version: str  # as written; compare through `parsed_version`, never as strings
    extras: tuple[str, ...] = ()  # sorted, canonical
    marker: str | None = None  # normalised by packaging, e.g. 'python_version < "3.12"'
    hashes: tuple[str, ...] = ()  # sorted, "sha256:<hex>"; a TOML lock's: its files' hashes
    line: int  # first physical line of the requirement (a TOML lock: of its package's table)
    # TOML locks: the files the lock names for this version (each platform's wheels, the
    # sdist), in file order, and the index it comes from; a requirements lock names neither.
    files: tuple[PinFile, ...] = ()
    index: str | None = None

    @functools.cached_property
    def parsed_version(self) -> Version:
        """The version as packaging's Version, parsed once: what versions are compared and
        ordered by (as strings, "2.10" sorts before "2.9")."""
        return _version(self.version)

    @property
    def requirement(self) -> str:
        """The pin as a requirement string, for messages: `torch==2.13.0+cpu`."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.display_name}{extras}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """The pip options a lock carries. A TOML lock's indexes are here too (its first index is
    `index_url`, any other an extra one), so that an installer handed the pins as
    requirements finds them (lockguard.locks.writer writes them as installer arguments)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()  # file order: uv gives earlier indexes priority
    find_links: tuple[str, ...] = ()  # file order
    # Every other accepted option, as "--name=value" or "--name", sorted: --trusted-host,
    # --no-binary, --only-binary, --prefer-binary, --pre, --no-index, --require-hashes.
    other_options: tuple[str, ...] = ()
    # (option, value, line) for each option above: where a report points when one changes.
    # "other" options carry their "--name=value" spelling as the value. Not part of lock_hash.
    lines: tuple[tuple[str, str, int], ...] = ()


@dataclass(frozen=True, kw_only=True)
class Lock:
    """A parsed lock. Build one with `parse_lock` / `parse_lock_text`, which enforce the rules."""

    source: str  # the path as given to parse_lock (the env builder installs from it)
    pins: tuple[Pin, ...]  # file order
    options: LockOptions = field(default_factory=LockOptions)
    format: LockFormat = "requirements.txt"
    # A lock that holds several platforms (uv.lock, poetry.lock, a pylock.toml with markers):
    # the one it was narrowed to, as its installer would ("cpython 3.11.7 linux x86_64"), and
    # how many of its packages are not installed there (other platforms, groups or extras,
    # the project's own code). None: the lock is read as written.
    environment: str | None = None
    left_out: int = 0

    # Derived once per lock (a frozen value): a diff, a hash and a family rule each read them,
    # and a lock may hold 100,000 pins.
    @functools.cached_property
    def by_name(self) -> dict[str, tuple[Pin, ...]]:
        """Pins per canonical name. Several only when each carries an environment marker."""
        grouped: dict[str, tuple[Pin, ...]] = {}
        for pin in self.pins:
            grouped[pin.name] = grouped.get(pin.name, ()) + (pin,)
        return grouped

    def pin(self, name: str) -> Pin | None:
        """The one pin of `name`; a LockError if markers select between several versions."""
        pins = self.by_name.get(canonicalize_name(name), ())
        if len(pins) > 1 and len({p.parsed_version for p in pins}) > 1:
            raise LockError(self.source, pins[0].line, ambiguous(pins))
        return pins[0] if pins else None

    @property
    def has_hashes(self) -> bool:
        """Whether the lock uses hash-checking mode (then every pin has hashes)."""
        return any(pin.hashes for pin in self.pins)

    @functools.cached_property
    def lock_hash(self) -> str:
        """sha256 (hex) of what the lock installs, blind to layout.

        Hashed: a JSON document (sorted keys, no whitespace) holding a format number; each pin
        as [canonical name, normalised version (packaging's str(Version)), sorted canonical
        extras, normalised marker or null, sorted hashes], the pins sorted by (name, marker);
        the index url; the extra index urls and find-links in file order (uv gives earlier
        indexes priority); and the other options, sorted.

        A TOML lock's pin also holds its files as sorted [file name, sorted hashes] pairs:
        which file has which hash is what an installer on each platform downloads, so two
        swapped entries are another lock (a requirements lock names no file: its pins are as
        before).

        Not hashed: comments (including `# via` blocks), blank lines, whitespace, line
        continuations, the order of pins, files and hashes, the spelling of names, the source
        path, and where a TOML lock downloads a file from (its url, a package's index): the
        hashes fix the bytes.
        """
        with bulk():
            return self._hash()

    def _hash(self) -> str:
        pins = sorted(self.pins, key=lambda p: (p.name, p.marker or ""))
        document = {
            "format": 1,
            # (tuples are JSON arrays: the same document as lists)
            "pins": [[p.name, _normal(p.version), p.extras, p.marker, p.hashes]
                     # A TOML lock names which file has which hash: swapping two entries
                     # changes what an installer on another platform downloads.
                     # (case aside: an index spells PySocks-…whl as pysocks-…whl)
                     + ([sorted([f.name.lower(), sorted(f.hashes)] for f in p.files)]
                        if p.files else [])
                     for p in pins],
            "index_url": self.options.index_url,
            "extra_index_urls": list(self.options.extra_index_urls),
            "find_links": list(self.options.find_links),
            "other_options": sorted(self.options.other_options),
        }
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def frameworks(self) -> set[str]:
        """Which of torch, jax, tensorflow and numpy this lock pins (by their main package)."""
        pinned = self.by_name
        return {fw for fw, dists in FRAMEWORK_DISTS.items() if any(d in pinned for d in dists)}


@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Build many lock values at once with the cyclic garbage collector paused: pins, changes
    and hash documents hold no reference cycles, and the collector's repeated scans of a heap
    growing by 100,000 of them cost more than the building (a 100,000-pin diff: 60 %)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@functools.lru_cache(maxsize=1 << 16)
def _version(text: str) -> Version:
    """packaging's Version of `text`, parsed once per distinct string (locks repeat them)."""
    return Version(text)


@functools.lru_cache(maxsize=1 << 16)
def _normal(text: str) -> str:
    """The normalised spelling of version `text` (packaging's str(Version))."""
    return str(_version(text))


def ambiguous(pins: Sequence[Pin]) -> str:
    """Why no single version of a package can be named: markers pin several."""
    where = ", ".join(f"{p.requirement} on line {p.line}" for p in pins)
    return f"{pins[0].display_name} has different versions under different markers ({where})"

