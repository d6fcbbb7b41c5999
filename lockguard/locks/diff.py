"""`diff_locks`: per package, what changed between two locks and how big the version bump is.

`LockDiff`, `Change` and `OptionChange` are part of the Report's JSON, hence pydantic models.
"""

from collections.abc import Mapping, Sequence
from typing import Literal

from packaging.version import Version
from pydantic import BaseModel, ConfigDict

from lockguard.locks.families import package_families
from lockguard.locks.model import Lock, LockOptions, Pin, bulk

ChangeKind = Literal["added", "removed", "upgraded", "downgraded", "rehashed", "unchanged"]
BumpKind = Literal["major", "minor", "patch", "pre", "local"]


class StartupFile(BaseModel):
    """A file a distribution installs that runs at every start of the environment's interpreter
    (a .pth file at the top of site-packages, a sitecustomize module)."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    file: str
    runs_code: bool  # False: a .pth whose lines only add to sys.path


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
    # Of an added or changed pin, where the candidate's environment was built (with_startup_files).
    startup_files: tuple[StartupFile, ...] = ()


class OptionChange(BaseModel):
    """An installer option that differs between locks; single values are 0- or 1-tuples."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    option: str  # "index-url", "extra-index-url", "find-links" or "other"
    old: tuple[str, ...]
    new: tuple[str, ...]
    added_lines: tuple[int, ...] = ()  # lines of the new lock holding the values `old` lacks


class LockDiff(BaseModel):
    """What changed between two locks (diff_locks): the packages that changed, how many did not,
    and the installer options that differ; part of the Report's JSON."""

    model_config = ConfigDict(frozen=True, defer_build=True)

    old_source: str
    new_source: str
    old_lock_hash: str
    new_lock_hash: str
    # The packages that changed, sorted by name (then marker), and how many did not: a diff
    # of two 100,000-pin locks that moved one package holds one change, not 100,000. (Reports
    # of schema 3 and before listed the unchanged ones too, as kind "unchanged".)
    changes: tuple[Change, ...]
    unchanged: int = 0
    option_changes: tuple[OptionChange, ...] = ()

    @property
    def changed(self) -> tuple[Change, ...]:
        """The changes other than kind "unchanged", which only a report of schema 3 or before
        still lists."""
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
    with bulk():
        return _diff(old, new)


def _diff(old: Lock, new: Lock) -> LockDiff:
    old_pins = {(p.name, p.marker): p for p in old.pins}
    new_pins = {(p.name, p.marker): p for p in new.pins}
    keys = sorted(old_pins.keys() | new_pins.keys(), key=lambda k: (k[0], k[1] or ""))
    changes = [c for c in (_change(old_pins.get(k), new_pins.get(k)) for k in keys)
               if c is not None]
    return LockDiff(
        old_source=old.source,
        new_source=new.source,
        old_lock_hash=old.lock_hash,
        new_lock_hash=new.lock_hash,
        changes=tuple(changes),
        unchanged=len(keys) - len(changes),
        option_changes=_option_changes(old.options, new.options),
    )


def _change(old: Pin | None, new: Pin | None) -> Change | None:
    """How a package changed; None when it did not (same version, same hashes, or hashes on
    one side only)."""
    if old is not None and new is not None and old.version == new.version \
            and not (old.hashes and new.hashes and old.hashes != new.hashes):
        return None
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
    # Built from values of parsed locks (model_construct: unvalidated, as they are already
    # what the fields hold): a diff of two 100,000-pin locks builds 100,000 of them.
    if old is None:
        return Change.model_construct(kind="added", **common)
    if new is None:
        return Change.model_construct(kind="removed", **common)
    before, after = old.parsed_version, new.parsed_version
    if before != after:
        kind = "upgraded" if after > before else "downgraded"
        return Change.model_construct(kind=kind, bump=bump_kind(before, after), **common)
    # Same version, other files: a re-uploaded wheel, or another build of it (a new platform's
    # wheel, a different variant from another index). Only meaningful when both sides hash.
    if old.hashes and new.hashes and old.hashes != new.hashes:
        return Change.model_construct(kind="rehashed", **common)
    return None  # the same version spelled otherwise (1.0 and 1.0.0)


def with_startup_files(diff: LockDiff,
                       shipped: Mapping[str, Sequence[tuple[str, bool]]] | None) -> LockDiff:
    """`diff` with the startup files each added or changed pin's distribution installed in the
    candidate's environment (distribution -> (file, runs code) pairs, from the environment
    build): a lock that brings in one brings code that runs before any training does."""
    if not shipped:
        return diff
    changes = tuple(
        c.model_copy(update={"startup_files": tuple(
            StartupFile(file=f, runs_code=runs) for f, runs in shipped[c.name])})
        if c.kind in ("added", "upgraded", "downgraded", "rehashed") and c.name in shipped
        else c for c in diff.changes)
    return diff.model_copy(update={"changes": changes})


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

