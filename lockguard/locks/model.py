"""The data model of a lock: `Pin`, `LockOptions`, `Lock`, and `LockError`.

A *lock* here is a pip requirements file in which every package is pinned to one version, as
`pip-compile` (pip-tools) or `uv pip compile` write them:

    --index-url https://pypi.org/simple
    --extra-index-url https://download.pytorch.org/whl/cpu

    torch==2.13.0+cpu \\
        --hash=sha256:3f1c... \\
        --hash=sha256:9ab2...
        # via -r requirements.in

Build a `Lock` with lockguard.locks.parser, which enforces the rules.
"""

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field

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


# In memory only (the Report carries a lock's hash, versions and diff, never the Lock): plain
# frozen dataclasses. keyword-only, as the parser builds them.
@dataclass(frozen=True, kw_only=True)
class Pin:
    """One `name==version` line of a lock."""

    name: str  # canonical (PEP 503): lower case, runs of -_. become "-"
    display_name: str  # as written in the lock, for messages
    version: str  # as written; compare through `parsed_version`, never as strings
    extras: tuple[str, ...] = ()  # sorted, canonical
    marker: str | None = None  # normalised by packaging, e.g. 'python_version < "3.12"'
    hashes: tuple[str, ...] = ()  # sorted, "sha256:<hex>"
    line: int  # first physical line of the requirement in the lock

    @property
    def parsed_version(self) -> Version:
        return Version(self.version)

    @property
    def requirement(self) -> str:
        """The pin as a requirement string, for messages: `torch==2.13.0+cpu`."""
        extras = f"[{','.join(self.extras)}]" if self.extras else ""
        return f"{self.display_name}{extras}=={self.version}"


@dataclass(frozen=True, kw_only=True)
class LockOptions:
    """The pip options a lock carries (pip reads them from the file too; `pip_args` is for an
    installer that is handed the pins some other way)."""

    index_url: str | None = None
    extra_index_urls: tuple[str, ...] = ()  # file order: uv gives earlier indexes priority
    find_links: tuple[str, ...] = ()  # file order
    # Every other accepted option, as "--name=value" or "--name", sorted: --trusted-host,
    # --no-binary, --only-binary, --prefer-binary, --pre, --no-index, --require-hashes.
    other_options: tuple[str, ...] = ()
    # (option, value, line) for each option above: where a report points when one changes.
    # "other" options carry their "--name=value" spelling as the value. Not part of lock_hash.
    lines: tuple[tuple[str, str, int], ...] = ()

    def pip_args(self) -> list[str]:
        """These options as pip (or uv pip) command-line arguments."""
        args: list[str] = []
        if self.index_url is not None:
            args += ["--index-url", self.index_url]
        for url in self.extra_index_urls:
            args += ["--extra-index-url", url]
        for link in self.find_links:
            args += ["--find-links", link]
        return args + list(self.other_options)


@dataclass(frozen=True, kw_only=True)
class Lock:
    """A parsed lock. Build one with `parse_lock` / `parse_lock_text`, which enforce the rules."""

    source: str  # the path as given to parse_lock (the env builder installs from it)
    pins: tuple[Pin, ...]  # file order
    options: LockOptions = field(default_factory=LockOptions)

    @property
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

    @property
    def lock_hash(self) -> str:
        """sha256 (hex) of what the lock installs, blind to layout.

        Hashed: a JSON document (sorted keys, no whitespace) holding a format number; each pin
        as [canonical name, normalised version (packaging's str(Version)), sorted canonical
        extras, normalised marker or null, sorted hashes], the pins sorted by (name, marker);
        the index url; the extra index urls and find-links in file order (uv gives earlier
        indexes priority); and the other options, sorted.

        Not hashed: comments (including `# via` blocks), blank lines, whitespace, line
        continuations, the order of pins and hashes, the spelling of names, the source path.
        """
        pins = sorted(self.pins, key=lambda p: (p.name, p.marker or ""))
        document = {
            "format": 1,
            "pins": [
                [p.name, str(p.parsed_version), list(p.extras), p.marker, list(p.hashes)]
                for p in pins
            ],
            "index_url": self.options.index_url,
            "extra_index_urls": list(self.options.extra_index_urls),
            "find_links": list(self.options.find_links),
            "other_options": sorted(self.options.other_options),
        }
        canonical = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def frameworks(self) -> set[str]:
        """Which of torch, jax, tensorflow and numpy this lock pins (by their main package)."""
        from lockguard.locks.families import FRAMEWORK_DISTS  # families builds on this model

        pinned = self.by_name
        return {fw for fw, dists in FRAMEWORK_DISTS.items() if any(d in pinned for d in dists)}



def ambiguous(pins: Sequence[Pin]) -> str:
    """Why no single version of a package can be named: markers pin several."""
    where = ", ".join(f"{p.requirement} on line {p.line}" for p in pins)
    return f"{pins[0].display_name} has different versions under different markers ({where})"

