"""Pinned requirement locks: parse them, fingerprint them, diff them, check framework pairings.

A *lock* here is a pip requirements file in which every package is pinned to one version, as
`pip-compile` (pip-tools) or `uv pip compile` write them:

    --index-url https://pypi.org/simple
    --extra-index-url https://download.pytorch.org/whl/cpu

    torch==2.13.0+cpu \\
        --hash=sha256:3f1c... \\
        --hash=sha256:9ab2...
        # via -r requirements.in

After the data model (`Pin`, `LockOptions`, `Lock`) come four parts, in this order:

1. parsing (`parse_lock`, `parse_lock_text`) into a `Lock` of `Pin`s, refusing anything that
   does not pin one exact version (ranges, URLs, editables, includes) with a one-line
   `LockError` that names the file and line;
2. the framework families a package belongs to (`package_families`, `Lock.frameworks`,
   `framework_version`), which decide which golden scenarios a change can affect;
3. `diff_locks`: per package, what changed between two locks and how big the version bump is;
4. `check_family_rules`: pairings between framework packages that can be checked from the lock
   alone (torch/torchvision, jax/jaxlib, tensorflow/keras, CUDA majors), before any env is built.

Everything is pure: the only I/O is `parse_lock` reading the file it is given.
"""

import hashlib
import json
import re
import shlex
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version
from pydantic import BaseModel, ConfigDict

from lockguard.errors import LockguardError

# ---------------------------------------------------------------------------------------------
# The data model
# ---------------------------------------------------------------------------------------------


class LockError(LockguardError):
    """A lock that cannot be used. `str()` is one line: `file:line: what is wrong`."""

    def __init__(self, source: str, line: int | None, reason: str) -> None:
        self.source = source
        self.line = line
        self.reason = reason
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {reason}")


class Pin(BaseModel):
    """One `name==version` line of a lock."""

    model_config = ConfigDict(frozen=True)

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


class LockOptions(BaseModel):
    """The pip options a lock carries (pip reads them from the file too; `pip_args` is for an
    installer that is handed the pins some other way)."""

    model_config = ConfigDict(frozen=True)

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


class Lock(BaseModel):
    """A parsed lock. Build one with `parse_lock` / `parse_lock_text`, which enforce the rules."""

    model_config = ConfigDict(frozen=True)

    source: str  # the path as given to parse_lock (the env builder installs from it)
    pins: tuple[Pin, ...]  # file order
    options: LockOptions = LockOptions()
    # (option as in options.other_options, its line): so a refused option can be named by line

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
            raise LockError(self.source, pins[0].line, _ambiguous(pins))
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
        pinned = self.by_name
        return {fw for fw, dists in _FRAMEWORK_DISTS.items() if any(d in pinned for d in dists)}


# ---------------------------------------------------------------------------------------------
# Parsing
# ---------------------------------------------------------------------------------------------


def parse_lock(path: Path) -> Lock:
    """Read and parse a lock file; `str(path)` becomes `Lock.source` and names it in errors."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8-sig")  # -sig: a BOM is not part of line 1
    except OSError as exc:
        raise LockError(source, None, f"cannot read the lock: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise LockError(source, None, "the lock is not UTF-8 text") from None
    return parse_lock_text(text, source)


def parse_lock_text(text: str, source: str) -> Lock:
    """Parse the text of a lock. `source` names it in errors and becomes `Lock.source`."""
    pins: list[Pin] = []
    # option name -> [(value, line)], for the options LockOptions keeps apart
    options: dict[str, list[tuple[str, int]]] = {
        "index-url": [], "extra-index-url": [], "find-links": []
    }
    other: list[str] = []
    lines: list[tuple[str, str, int]] = []
    for number, line in _logical_lines(text):
        if line.startswith("-"):
            tokens = _shlex_split(line, source, number)
            for name, value in _parse_options(tokens, source, number):
                _refuse_non_file_option(name, value, source, number)
                if name in options:
                    options[name].append((value or "", number))
                    lines.append((name, value or "", number))
                else:
                    other.append(f"--{name}={value}" if value is not None else f"--{name}")
                    lines.append(("other", other[-1], number))
        else:
            pins.append(_parse_requirement(line, source, number))

    if len(options["index-url"]) > 1:
        # pip would silently use the last one; a lock should not leave that to chance.
        (_, first), (_, again) = options["index-url"][:2]
        raise LockError(source, again, f"--index-url is given again (first on line {first})")
    if not pins:
        raise LockError(source, None, "the lock pins no packages")
    _check_duplicates(pins, source)
    _check_hashes_everywhere(pins, source)
    return Lock(
        source=source,
        pins=tuple(pins),
        options=LockOptions(
            index_url=options["index-url"][0][0] if options["index-url"] else None,
            extra_index_urls=tuple(url for url, _ in options["extra-index-url"]),
            find_links=tuple(link for link, _ in options["find-links"]),
            other_options=tuple(sorted(other)),
            lines=tuple(lines),
        ),
    )


# pip's comment rule: '#' at the start of a line or after whitespace ("pkg#egg=" is not one).
_COMMENT = re.compile(r"(^|\s+)#.*$")


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first physical line number, text without comments) per non-empty logical line.

    Joins `\\`-continued lines exactly as pip does, so that what parses here is what pip
    installs: the backslash must be the last character of the raw line, the pieces are glued
    without adding spaces, and a comment-only line ends a continuation (pip-compile writes its
    `# via` block right after the last `--hash` line).
    """
    pending: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        comment_only = _COMMENT.match(raw) is not None
        if raw.endswith("\\") and not comment_only:
            if not pending:
                start = number
            pending.append(raw[:-1])
            continue
        if pending:
            pending.append(" " + raw if comment_only else raw)
            line, first = "".join(pending), start
            pending = []
        else:
            line, first = raw, number
        line = _COMMENT.sub("", line).strip()
        if line:
            yield first, line
    if pending:  # the file ends in a backslash
        line = _COMMENT.sub("", "".join(pending)).strip()
        if line:
            yield start, line


def _shlex_split(text: str, source: str, number: int) -> list[str]:
    """Split option text like pip does (shell quoting), as a LockError on bad quoting."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise LockError(source, number, f"cannot split {text!r}: {exc}") from None


# Options a lock may carry on their own lines, and whether each takes a value.
_FILE_OPTIONS = {
    "index-url": True,
    "extra-index-url": True,
    "find-links": True,
    "trusted-host": True,
    "no-binary": True,
    "only-binary": True,
    "prefer-binary": False,
    "pre": False,
    "no-index": False,
    "require-hashes": False,
}
# Options recognised only to be refused with a precise message (all take a value), and the
# one option a requirement line may carry.
_REFUSED_OPTIONS = ("requirement", "constraint", "editable")
_TAKES_VALUE = {n for n, takes in _FILE_OPTIONS.items() if takes} | {*_REFUSED_OPTIONS, "hash"}
_SHORT_OPTIONS = {"i": "index-url", "f": "find-links", "r": "requirement", "c": "constraint",
                  "e": "editable"}


def _parse_options(tokens: list[str], source: str, number: int) -> list[tuple[str, str | None]]:
    """Turn option tokens into (long name, value) pairs: `-i URL`, `-iURL`, `--hash=x`, `--hash x`.

    Unknown options are refused here: pip would either reject them or act on them in ways a
    lock cannot record.
    """
    parsed: list[tuple[str, str | None]] = []
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        value: str | None
        if token.startswith("--"):
            name, has_value, value = token[2:].partition("=")
            if not has_value:
                value = None
        elif token.startswith("-") and token[1:2] in _SHORT_OPTIONS:
            name, value = _SHORT_OPTIONS[token[1]], token[2:] or None
        elif token.startswith("-"):
            raise LockError(source, number, f"unsupported option {token!r} in a lock")
        else:
            raise LockError(source, number, f"unexpected {token!r} (options start with '-')")
        if name not in _FILE_OPTIONS and name not in _TAKES_VALUE:
            raise LockError(source, number, f"unsupported option '--{name}' in a lock")
        if name not in _TAKES_VALUE and value is not None:
            raise LockError(source, number, f"--{name} takes no value")
        if name in _TAKES_VALUE and value is None:
            if not rest:
                raise LockError(source, number, f"--{name} needs a value")
            value = rest.pop(0)
        parsed.append((name, value))
    return parsed


def _refuse_non_file_option(name: str, value: str | None, source: str, number: int) -> None:
    """Explain why an option line that pip would accept cannot be part of a lock."""
    if name in ("requirement", "constraint"):
        flag = "-r" if name == "requirement" else "-c"
        raise LockError(
            source, number, f"'{flag} {value}': includes are not supported in a lock; inline it"
        )
    if name == "editable":
        raise LockError(
            source, number,
            f"'-e {value}' is an editable requirement, which cannot be pinned by version",
        )
    if name == "hash":
        raise LockError(
            source, number,
            "--hash must follow its requirement on the same logical line "
            "(is a trailing '\\' missing, or followed by spaces?)",
        )


# A requirement that names an archive, a directory or a repository instead of a version.
_URL_OR_PATH = re.compile(
    r"://|^(git|hg|svn|bzr)\+|^[./~]|\.(whl|zip|tar\.gz|tgz|tar\.bz2)$", re.IGNORECASE
)
_HASH = re.compile(r"^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$")


def _parse_requirement(line: str, source: str, number: int) -> Pin:
    # As pip does: the requirement runs up to the first whitespace-separated token that starts
    # with '-'; what follows are its per-requirement options (here only --hash).
    tokens = line.split()
    split_at = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    text = " ".join(tokens[:split_at])
    if text.endswith("\\"):
        raise LockError(
            source, number,
            "the '\\' is followed by spaces, so the line does not continue "
            "(pip needs the backslash last)",
        )

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if _URL_OR_PATH.search(text):
            raise LockError(source, number, _not_pinnable(text)) from None
        first_line = str(exc).splitlines()[0] if str(exc) else "invalid requirement"
        raise LockError(source, number, f"cannot parse {text!r}: {first_line}") from None
    if req.url:
        raise LockError(source, number, _not_pinnable(text))

    specifiers = list(req.specifier)
    if len(specifiers) == 1 and specifiers[0].operator == "===":
        # Arbitrary equality pins a version *string* that need not follow PEP 440, so such a
        # pin could not be ordered in a diff or checked against a family rule: refused.
        raise LockError(
            source, number,
            f"{text!r} uses arbitrary equality (===), which lockguard cannot compare; "
            "pin it with ==",
        )
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        raise LockError(source, number, f"{text!r} is not pinned (expected name==version)")

    hashes: set[str] = set()
    options = _shlex_split(" ".join(tokens[split_at:]), source, number)
    for name, value in _parse_options(options, source, number):
        if name != "hash":
            raise LockError(
                source, number, f"'--{name}' is not supported after a requirement in a lock"
            )
        digest = (value or "").lower()
        if not _HASH.match(digest):
            raise LockError(
                source, number, f"bad --hash value {value!r} (expected sha256:<64 hex digits>)"
            )
        hashes.add(digest)

    return Pin(
        name=canonicalize_name(req.name),
        display_name=req.name,
        version=specifiers[0].version,
        extras=tuple(sorted(canonicalize_name(e) for e in req.extras)),
        marker=str(req.marker) if req.marker is not None else None,
        hashes=tuple(sorted(hashes)),
        line=number,
    )


def _not_pinnable(text: str) -> str:
    return f"{text!r} is a URL, path or VCS requirement, which cannot be pinned by version"


def _check_duplicates(pins: list[Pin], source: str) -> None:
    """The same package twice is allowed only when markers choose between the pins.

    Two different markers may still overlap; proving they do not would mean solving the
    markers, so this only catches the sure cases: a pin without a marker, or the same marker.
    """
    seen: dict[str, list[Pin]] = {}
    for pin in pins:
        for earlier in seen.setdefault(pin.name, []):
            if earlier.marker is None or pin.marker is None or earlier.marker == pin.marker:
                raise LockError(
                    source, pin.line,
                    f"{pin.display_name} is pinned again (already on line {earlier.line}); "
                    "keep one pin, or give each an environment marker that selects it",
                )
        seen[pin.name].append(pin)


def _check_hashes_everywhere(pins: list[Pin], source: str) -> None:
    # pip switches to hash-checking mode as soon as one requirement has a hash, and then
    # refuses every requirement without one: catch that here, with the package named.
    if not any(pin.hashes for pin in pins):
        return
    for pin in pins:
        if not pin.hashes:
            raise LockError(
                source, pin.line,
                f"{pin.requirement!r} has no --hash although other pins have hashes "
                "(pip's hash-checking mode would refuse it)",
            )


def _ambiguous(pins: Sequence[Pin]) -> str:
    where = ", ".join(f"{p.requirement} on line {p.line}" for p in pins)
    return f"{pins[0].display_name} has different versions under different markers ({where})"


# ---------------------------------------------------------------------------------------------
# Framework families
# ---------------------------------------------------------------------------------------------

# The distributions that *are* each framework (not its companions). TensorFlow ships under
# several names with the same code and version scheme.
_TENSORFLOW_DISTS = (
    "tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tensorflow-intel", "tensorflow-macos",
    "tensorflow-aarch64", "tensorflow-rocm", "tensorflow-cpu-aws", "intel-tensorflow",
    "tf-nightly", "tf-nightly-cpu", "tf-nightly-gpu", "tf-nightly-intel", "tf-nightly-macos",
)
_FRAMEWORK_DISTS: dict[str, tuple[str, ...]] = {
    "torch": ("torch",),
    "jax": ("jax",),
    "tensorflow": _TENSORFLOW_DISTS,
    "numpy": ("numpy",),
}

_TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "triton"}
_JAX_FAMILY = {"jax", "jaxlib", "libtpu", "libtpu-nightly", "ml-dtypes"}
_JAX_PLUGIN = re.compile(r"^jax-(cuda|rocm)\d+-(plugin|pjrt)$")
_TENSORFLOW_FAMILY = {
    "intel-tensorflow", "keras", "keras-nightly", "tf-keras", "tf-keras-nightly", "tb-nightly",
    "ml-dtypes",
}


def package_families(name: str) -> tuple[str, ...]:
    """The framework families a package belongs to, sorted; empty for everything else.

    ml-dtypes is in two families (jax and tensorflow both build on it). nvidia-* wheels are
    "cuda": torch, jax and tensorflow CUDA builds all load them, so a change there concerns
    every framework that runs on a GPU.
    """
    name = canonicalize_name(name)
    families: set[str] = set()
    if name in _TORCH_FAMILY or name.startswith("pytorch-triton"):
        families.add("torch")
    if name in _JAX_FAMILY or _JAX_PLUGIN.match(name):
        families.add("jax")
    if (
        name in _TENSORFLOW_FAMILY
        or name.startswith(("tensorflow", "tf-nightly", "tensorboard"))
    ):
        families.add("tensorflow")
    if name == "numpy":
        families.add("numpy")
    if name.startswith("nvidia-"):
        families.add("cuda")
    return tuple(sorted(families))


def framework_version(lock: Lock, framework: str) -> str | None:
    """The version of a framework's main package in `lock`, or None when it is not pinned.

    For tensorflow, any of its distributions counts (tensorflow, tensorflow-cpu, tf-nightly,
    ...). A LockError when markers pin different versions, since no single answer is right.
    """
    if framework not in _FRAMEWORK_DISTS:
        raise ValueError(f"unknown framework {framework!r}; expected one of "
                         f"{', '.join(sorted(_FRAMEWORK_DISTS))}")
    by_name = lock.by_name
    pins = [pin for dist in _FRAMEWORK_DISTS[framework] for pin in by_name.get(dist, ())]
    if not pins:
        return None
    if len({pin.parsed_version for pin in pins}) > 1:
        raise LockError(lock.source, pins[0].line, _ambiguous(pins))
    return pins[0].version


# ---------------------------------------------------------------------------------------------
# Diffing two locks
# ---------------------------------------------------------------------------------------------

ChangeKind = Literal["added", "removed", "upgraded", "downgraded", "rehashed", "unchanged"]
BumpKind = Literal["major", "minor", "patch", "pre", "local"]


class Change(BaseModel):
    """What happened to one package (one pin, when markers split a package) between locks."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    name: str  # canonical
    display_name: str  # as written in the new lock (the old one when removed)
    marker: str | None = None
    kind: ChangeKind
    old_version: str | None = None
    new_version: str | None = None
    bump: BumpKind | None = None  # for upgraded / downgraded only
    families: tuple[str, ...] = ()  # see package_families
    old_line: int | None = None
    new_line: int | None = None


class OptionChange(BaseModel):
    """An installer option that differs between locks; single values are 0- or 1-tuples."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    option: str  # "index-url", "extra-index-url", "find-links" or "other"
    old: tuple[str, ...]
    new: tuple[str, ...]
    added_lines: tuple[int, ...] = ()  # lines of the new lock holding the values `old` lacks


class LockDiff(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    old_source: str
    new_source: str
    old_lock_hash: str
    new_lock_hash: str
    changes: tuple[Change, ...]  # every package of either lock, unchanged ones included
    option_changes: tuple[OptionChange, ...] = ()

    @property
    def changed(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.kind != "unchanged")

    @property
    def families_touched(self) -> set[str]:
        """Families of the changed packages. Option changes belong to no family."""
        return {family for change in self.changed for family in change.families}

    @property
    def is_empty(self) -> bool:
        """No package and no installer option changed.

        Extras are not compared: in a complete lock every package an extra pulls in is pinned
        on its own line, so `jax[cuda12]==X` and `jax==X` install the same files. (They do change
        `lock_hash`, which stays conservative.)
        """
        return not self.changed and not self.option_changes


def diff_locks(old: Lock, new: Lock) -> LockDiff:
    """Compare two locks package by package; changes are sorted by name (then marker).

    A package is identified by canonical name and marker, so moving a pin under a different
    marker shows as one removal and one addition.
    """
    old_pins = {(p.name, p.marker): p for p in old.pins}
    new_pins = {(p.name, p.marker): p for p in new.pins}
    keys = sorted(old_pins.keys() | new_pins.keys(), key=lambda k: (k[0], k[1] or ""))
    return LockDiff(
        old_source=old.source,
        new_source=new.source,
        old_lock_hash=old.lock_hash,
        new_lock_hash=new.lock_hash,
        changes=tuple(_change(old_pins.get(k), new_pins.get(k)) for k in keys),
        option_changes=_option_changes(old.options, new.options),
    )


def _change(old: Pin | None, new: Pin | None) -> Change:
    pin = new or old
    assert pin is not None
    common = {
        "name": pin.name,
        "display_name": pin.display_name,
        "marker": pin.marker,
        "families": package_families(pin.name),
        "old_version": old.version if old else None,
        "new_version": new.version if new else None,
        "old_line": old.line if old else None,
        "new_line": new.line if new else None,
    }
    if old is None:
        return Change(kind="added", **common)
    if new is None:
        return Change(kind="removed", **common)
    before, after = old.parsed_version, new.parsed_version
    if before != after:
        kind = "upgraded" if after > before else "downgraded"
        return Change(kind=kind, bump=bump_kind(before, after), **common)
    # Same version, other files: a re-uploaded wheel, or another build of it (a new platform's
    # wheel, a different variant from another index). Only meaningful when both sides hash.
    if old.hashes and new.hashes and old.hashes != new.hashes:
        return Change(kind="rehashed", **common)
    return Change(kind="unchanged", **common)


def bump_kind(old: Version | str, new: Version | str) -> BumpKind | None:
    """How big the step from `old` to `new` is, in either direction; None when equal.

    The first part of the version that differs decides: epoch or major → "major"; minor →
    "minor"; anything further in the release (micro, and beyond) → "patch"; only the
    pre/post/dev parts → "pre"; only the local tag (`+cpu` → `+cu121`) → "local".
    """
    a, b = Version(str(old)), Version(str(new))
    if a == b:
        return None
    if a.epoch != b.epoch or a.major != b.major:
        return "major"
    if a.minor != b.minor:
        return "minor"
    width = max(len(a.release), len(b.release))
    if a.release + (0,) * (width - len(a.release)) != b.release + (0,) * (width - len(b.release)):
        return "patch"
    if (a.pre, a.post, a.dev) != (b.pre, b.post, b.dev):
        return "pre"
    return "local"


def _option_changes(old: LockOptions, new: LockOptions) -> tuple[OptionChange, ...]:
    def single(value: str | None) -> tuple[str, ...]:
        return (value,) if value is not None else ()

    pairs = [
        ("index-url", single(old.index_url), single(new.index_url)),
        ("extra-index-url", old.extra_index_urls, new.extra_index_urls),
        ("find-links", old.find_links, new.find_links),
        ("other", old.other_options, new.other_options),
    ]

    def added_lines(option: str, before: tuple[str, ...], after: tuple[str, ...]
                    ) -> tuple[int, ...]:
        fresh = set(after) - set(before)
        if not fresh and set(after) == set(before):
            fresh = set(after)  # a reordering (index priority) moved every value
        return tuple(line for name, value, line in new.lines
                     if name == option and value in fresh)

    return tuple(OptionChange(option=o, old=a, new=b, added_lines=added_lines(o, a, b))
                 for o, a, b in pairs if a != b)


# ---------------------------------------------------------------------------------------------
# Family rules: pairings that must hold inside one lock
# ---------------------------------------------------------------------------------------------


class RuleViolation(BaseModel):
    model_config = ConfigDict(frozen=True, defer_build=True)

    rule: str  # one of RULES
    message: str  # one sentence naming the packages, their versions and lock lines
    lines: tuple[int, ...]


RULES: dict[str, str] = {
    "torchvision-matches-torch": "torchvision 0.(X+15) belongs to torch 2.X (torch 2.0-2.14)",
    "torchaudio-matches-torch": "torchaudio has the same major.minor as torch (torch 2.x)",
    "triton-matches-torch": "triton is the release a torch version was built against",
    "torch-variants-match": "torch, torchvision and torchaudio share one local tag (+cpu, +cu121)",
    "jaxlib-not-newer-than-jax": "jaxlib is not newer than jax",
    "jax-plugin-matches-jaxlib": "jax CUDA plugin and pjrt have jaxlib's version",
    "keras-matches-tensorflow": "keras 3 with TF 2.16+, keras 2.X with TF 2.X (2.6-2.15)",
    "tf-keras-matches-tensorflow": "tf-keras 2.X with TF 2.X",
    "cuda-major-consistent": "one CUDA major across nvidia-*-cuNN wheels, +cuNNN tags, jax plugins",
}


def check_family_rules(lock: Lock) -> list[RuleViolation]:
    """Check framework pairings that are decidable from the lock alone.

    Only pairings confirmed from the projects' own metadata or release notes are encoded;
    versions outside the known tables are skipped, never guessed. When markers split a
    package into several pins, two pins are checked together only if they can be installed
    together: one has no marker, or both have the same marker.
    """
    return [
        *_torch_rules(lock),
        *_jax_rules(lock),
        *_tensorflow_rules(lock),
        *_cuda_rule(lock),
    ]


def _at(pin: Pin) -> str:
    return f"{pin.requirement} (line {pin.line})"


def _coexist(a: Pin, b: Pin) -> bool:
    """Whether two pins may be installed together (markers are compared, not solved)."""
    return a.marker is None or b.marker is None or a.marker == b.marker


def _together(lock: Lock, pin: Pin, name: str) -> list[Pin]:
    """The pins of `name` that may be installed alongside `pin`."""
    return [other for other in lock.by_name.get(name, ()) if _coexist(pin, other)]


def _major_minor(version: Version) -> tuple[int, int]:
    return version.major, version.minor


# torchvision 0.(X+15) goes with torch 2.X: confirmed from PyTorch's compatibility tables for
# 2.0-2.9 and from this project's brief up to 2.14. Beyond that the rule is not assumed.
_TORCHVISION_OFFSET = 15
_LAST_TORCH_MINOR_WITH_KNOWN_TORCHVISION = 14

# triton (major, minor) that torch 2.X requires on Linux: 2.0-2.9 from torch's own
# `triton==` requirement; 2.11 → 3.6 (pip's "torch 2.11.0 requires triton==3.6.0"), 2.12 → 3.7
# (pytorch PRs "[release 2.12] [triton 3.7]" and "Update triton to 3.7.1 release" for 2.12.1),
# 2.13 → 3.7 (2.13.0's shipped triton 3.7.1). torch 2.10 and 2.14 could not be confirmed, so
# their triton is not checked.
_TRITON_FOR_TORCH_MINOR: dict[int, tuple[int, int]] = {
    0: (2, 0), 1: (2, 1), 2: (2, 2), 3: (2, 3), 4: (3, 0), 5: (3, 1), 6: (3, 2), 7: (3, 3),
    8: (3, 4), 9: (3, 5), 11: (3, 6), 12: (3, 7), 13: (3, 7),
}


def _torch_rules(lock: Lock) -> Iterator[RuleViolation]:
    # Only torch 2.x: the 1.x pairings follow other schemes and are not encoded. Patch levels
    # are not compared (torch 2.0.1 shipped with torchvision 0.15.2 and torchaudio 2.0.2), and
    # pip enforces them anyway: each companion wheel requires its exact torch version.
    for torch in lock.by_name.get("torch", ()):
        version = torch.parsed_version
        if version.major != 2:
            continue
        minor = version.minor
        if minor <= _LAST_TORCH_MINOR_WITH_KNOWN_TORCHVISION:
            wanted = (0, minor + _TORCHVISION_OFFSET)
            for vision in _together(lock, torch, "torchvision"):
                if _major_minor(vision.parsed_version) != wanted:
                    yield RuleViolation(
                        rule="torchvision-matches-torch",
                        message=f"{_at(vision)} does not match {_at(torch)}: torch 2.{minor} "
                                f"goes with torchvision 0.{wanted[1]}.*.",
                        lines=(torch.line, vision.line),
                    )
        for audio in _together(lock, torch, "torchaudio"):
            if _major_minor(audio.parsed_version) != (2, minor):
                yield RuleViolation(
                    rule="torchaudio-matches-torch",
                    message=f"{_at(audio)} does not match {_at(torch)}: torch 2.{minor} goes "
                            f"with torchaudio 2.{minor}.*.",
                    lines=(torch.line, audio.line),
                )
        wanted_triton = _TRITON_FOR_TORCH_MINOR.get(minor)
        # Nightly (dev) torch builds pair with nightly triton builds, outside this table.
        if wanted_triton is not None and not version.is_devrelease:
            for triton in _together(lock, torch, "triton"):
                if _major_minor(triton.parsed_version) != wanted_triton:
                    yield RuleViolation(
                        rule="triton-matches-torch",
                        message=f"{_at(triton)} does not match {_at(torch)}: torch 2.{minor} "
                                f"requires triton {wanted_triton[0]}.{wanted_triton[1]}.*.",
                        lines=(torch.line, triton.line),
                    )
        # The local tag names the build (CPU, a CUDA version, ROCm); the companions' compiled
        # operators only load into a torch of the same build.
        for name in ("torchvision", "torchaudio"):
            for companion in _together(lock, torch, name):
                if companion.parsed_version.local != version.local:
                    yield RuleViolation(
                        rule="torch-variants-match",
                        message=f"{_at(companion)} is a different build from {_at(torch)}: "
                                f"{_tag(companion)} vs {_tag(torch)}; install both from the "
                                "same index.",
                        lines=(torch.line, companion.line),
                    )


def _tag(pin: Pin) -> str:
    local = pin.parsed_version.local
    return f"'+{local}'" if local else "no local tag"


_JAX_CUDA_PLUGIN = re.compile(r"^jax-cuda\d+-(plugin|pjrt)$")


def _release(pin: Pin) -> tuple[int, ...]:
    """The numbers of a version without pre/dev/local parts: what jax and jaxlib compare."""
    return pin.parsed_version.release


def _jax_rules(lock: Lock) -> Iterator[RuleViolation]:
    # jax refuses at import a jaxlib newer than itself ("jaxlib version ... is newer than and
    # incompatible with jax version ..."). An older jaxlib can be right: jax 0.4.37 was a
    # jax-only release used with jaxlib 0.4.36, so equality is not required. How old jaxlib
    # may be differs per jax release and is not encoded.
    for jax in lock.by_name.get("jax", ()):
        for jaxlib in _together(lock, jax, "jaxlib"):
            if _release(jaxlib) > _release(jax):
                yield RuleViolation(
                    rule="jaxlib-not-newer-than-jax",
                    message=f"{_at(jaxlib)} is newer than {_at(jax)}, and jax refuses to "
                            "import with a newer jaxlib.",
                    lines=(jax.line, jaxlib.line),
                )
    # jaxlib ignores a CUDA plugin whose release numbers differ from its own (jaxlib's
    # plugin_support.check_plugin_version), silently falling back to CPU; each plugin requires
    # its pjrt at its own version. ROCm plugins are exempt from that check upstream, so here too.
    plugins = [pin for pin in lock.pins if _JAX_CUDA_PLUGIN.match(pin.name)]
    for jaxlib in lock.by_name.get("jaxlib", ()):
        for plugin in plugins:
            if not _coexist(jaxlib, plugin):
                continue
            if _release(plugin) != _release(jaxlib):
                yield RuleViolation(
                    rule="jax-plugin-matches-jaxlib",
                    message=f"{_at(plugin)} does not match {_at(jaxlib)}: jaxlib only loads "
                            "a CUDA plugin of its own version, otherwise jax runs on CPU.",
                    lines=(jaxlib.line, plugin.line),
                )


def _tensorflow_rules(lock: Lock) -> Iterator[RuleViolation]:
    # TF 2.16+ requires keras>=3; TF 2.6-2.15 require keras 2.X of their own minor (before 2.6
    # Keras lived inside TF, so older pairings are not checked). tf-keras versions follow TF's
    # minor (tf-keras 2.X requires tensorflow 2.X).
    # tensorflow and tensorflow-intel (say) are both pinned on Windows-capable locks: report
    # each mismatch once per companion pin and TF minor, not once per TF distribution.
    seen: set[tuple[str, int, int]] = set()
    for tf in (pin for name in _TENSORFLOW_DISTS for pin in lock.by_name.get(name, ())):
        version = tf.parsed_version
        if version.major != 2:
            continue
        minor = version.minor
        for keras in _together(lock, tf, "keras"):
            key = ("keras", keras.line, minor)
            if key in seen:
                continue
            seen.add(key)
            keras_version = keras.parsed_version
            if minor >= 16 and keras_version.major != 3:
                expected = "keras 3.x"
            elif 6 <= minor <= 15 and _major_minor(keras_version) != (2, minor):
                expected = f"keras 2.{minor}.*"
            else:
                continue
            yield RuleViolation(
                rule="keras-matches-tensorflow",
                message=f"{_at(keras)} does not match {_at(tf)}: TensorFlow 2.{minor} "
                        f"requires {expected}.",
                lines=(tf.line, keras.line),
            )
        for tf_keras in _together(lock, tf, "tf-keras"):
            key = ("tf-keras", tf_keras.line, minor)
            if key in seen:
                continue
            seen.add(key)
            if _major_minor(tf_keras.parsed_version) != (2, minor):
                yield RuleViolation(
                    rule="tf-keras-matches-tensorflow",
                    message=f"{_at(tf_keras)} does not match {_at(tf)}: tf-keras follows "
                            f"TensorFlow's minor version, so TensorFlow 2.{minor} needs "
                            f"tf-keras 2.{minor}.*.",
                    lines=(tf.line, tf_keras.line),
                )


_NVIDIA_CUDA_WHEEL = re.compile(r"^nvidia-.+-cu(\d+)$")
_JAX_CUDA_WHEEL = re.compile(r"^jax-cuda(\d+)-(plugin|pjrt)$")
_TORCH_CUDA_TAG = re.compile(r"^cu(\d+)\d\b")  # +cu121 → 12, +cu118 → 11, +cu92 → 9


def cuda_major(pin: Pin) -> int | None:
    """The CUDA major a pin is built for, when its name or local tag says so."""
    for pattern in (_NVIDIA_CUDA_WHEEL, _JAX_CUDA_WHEEL):
        match = pattern.match(pin.name)
        if match:
            return int(match.group(1))
    if pin.name in ("torch", "torchvision", "torchaudio"):
        match = _TORCH_CUDA_TAG.match(pin.parsed_version.local or "")
        if match:
            return int(match.group(1))
    return None


def _cuda_rule(lock: Lock) -> Iterator[RuleViolation]:
    # One process loads one CUDA runtime: cu11 and cu12 NVIDIA wheels side by side, or a
    # +cu121 torch over cu11 wheels, means some library loads against the wrong one.
    # Reported once per pair of majors, naming the first two pins that disagree.
    evidence = [(major, pin) for pin in lock.pins if (major := cuda_major(pin)) is not None]
    reported: set[tuple[int, int]] = set()
    for i, (major_a, a) in enumerate(evidence):
        for major_b, b in evidence[i + 1:]:
            pair = (min(major_a, major_b), max(major_a, major_b))
            if major_a == major_b or pair in reported:
                continue
            if not _coexist(a, b):
                continue
            reported.add(pair)
            yield RuleViolation(
                rule="cuda-major-consistent",
                message=f"CUDA {major_a} and CUDA {major_b} builds are mixed: {_at(a)} is "
                        f"built for CUDA {major_a} but {_at(b)} for CUDA {major_b}.",
                lines=(a.line, b.line),
            )
