"""Where the locks of a run come from: `LockRef` (a parsed lock and what the configuration says
of it), `lock_paths` and `load_locks` (the --lock options, else the config's `lock`/`locks`),
`read_lock` (one file, any format) and `lock_for` (the lock a scenario runs from; why none:
`no_lock_reason`).

Each lock is read for the platform the environments are built for: the config's `python`,
else the interpreter running lockguard (lockguard.locks.target).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from packaging.utils import canonicalize_name

from lockguard.config import ConfigError
from lockguard.files import display_path
from lockguard.locks.model import Lock
from lockguard.locks.parser import parse_lock
from lockguard.locks.target import Target, target_for

if TYPE_CHECKING:
    from lockguard.config import Config


@dataclass(frozen=True)
class LockRef:
    """A parsed lock with what the configuration says of it; what flows pass around instead of a
    bare Lock, so that reports can name it."""

    path: Path
    lock: Lock
    device: str | None = None  # expected device of this lock's environment, from config
    inputs: Path | None = None  # the requirements.in it is compiled from, when configured
    label: str | None = None  # what reports call a lock read from git: main@1a2b3c4d:path

    @property
    def name(self) -> str:
        """What reports and errors call this lock: its git label (main@1a2b3c4d:path) when read
        from git, else its path relative to the working directory."""
        return self.label or display_path(self.path)


def lock_paths(config: Config, cli_locks: list[str]
               ) -> list[tuple[Path, str | None, Path | None]]:
    """(path, expected device, requirements.in) of each lock, without reading the locks:
    --lock options (relative to the working directory) or the config's (relative to it)."""
    if cli_locks:
        refs = [(Path(p), None, None) for p in cli_locks]
    else:
        refs = [(config.resolve(e.path), e.device, config.resolve(e.inputs) if e.inputs else None)
                for e in config.lock_entries()]
    if not refs:
        raise ConfigError("no lock given: pass --lock PATH or set `lock` in [tool.lockguard]")
    return refs


def lock_target(config: Config | None) -> Target:
    """The platform the locks of `config` are read for: its `python`'s, else this one's."""
    return target_for(config.python_path if config is not None else None)


def load_locks(config: Config, cli_locks: list[str]) -> list[LockRef]:
    """The locks to check, read and parsed (see lock_paths for where they come from)."""
    target = lock_target(config)
    return [LockRef(path=path, lock=read_lock(path, target), device=device, inputs=inputs)
            for path, device, inputs in lock_paths(config, cli_locks)]


def read_lock(path: Path, target: Target | None = None) -> Lock:
    """The lock at `path`, parsed (any format; a multi-platform one narrowed to `target`,
    default this interpreter): "lock file not found", or what else stands there (a FIFO, a
    directory), or the line at fault -- LockError naming the file either way."""
    return parse_lock(path, target)


class _HasFramework(Protocol):
    @property
    def framework(self) -> str: ...


def _requires(scenario: _HasFramework) -> tuple[str, ...]:
    # A library scenario (torchvision.resnet18) also needs its libraries pinned; others need
    # nothing beside their framework.
    return tuple(getattr(scenario, "requires", ()))


def _pins(lock: Lock, names: tuple[str, ...]) -> bool:
    return all(canonicalize_name(name) in lock.by_name for name in names)


def lock_for(scenario: _HasFramework, locks: list[LockRef]) -> LockRef | None:
    """The first lock that pins the scenario's framework (frameworks never share an env) and,
    for a library scenario, every library it requires: the one place that decides which lock
    a scenario runs from, so plan, A/B, bisect and propose agree."""
    for ref in locks:
        if scenario.framework in ref.lock.frameworks() and _pins(ref.lock, _requires(scenario)):
            return ref
    return None


@dataclass(frozen=True)
class Pairing:
    """Which baseline lock each candidate lock is compared with, decided once for an A/B: every
    consumer (the runs, the lock diffs, bisection, acceptances) asks `of`."""

    baseline: tuple[LockRef, ...]
    partners: dict[int, LockRef]  # id(candidate) -> its baseline lock

    def of(self, scenario: _HasFramework, candidate: LockRef | None) -> LockRef | None:
        """The baseline lock `scenario` is compared against when it runs from `candidate`:
        the candidate's partner when that pins what the scenario needs, else the first
        baseline lock that does (a framework moved from one lock into another)."""
        partner = self.partners.get(id(candidate)) if candidate is not None else None
        if partner is not None and lock_for(scenario, [partner]) is not None:
            return partner
        return lock_for(scenario, list(self.baseline))


def pair_locks(candidates: Sequence[LockRef], baseline: Sequence[LockRef],
               given: dict[int, LockRef] | None = None) -> Pairing:
    """The pairing of an A/B: the partners `given` (check --base: by git's rename or the path),
    then, for each other candidate, the first baseline lock that pins a framework it pins,
    numpy not counted (every lock may pin it), else one that pins numpy."""
    partners = dict(given or {})
    for new in candidates:
        if id(new) in partners:
            continue
        pinned = new.lock.frameworks()
        partner = next((old for shared in (pinned - {"numpy"}, pinned) if shared
                        for old in baseline if old.lock.frameworks() & shared), None)
        if partner is not None:
            partners[id(new)] = partner
    return Pairing(tuple(baseline), partners)


def no_lock_reason(scenario: _HasFramework, locks: list[LockRef]) -> str:
    """Why lock_for found no lock for `scenario`: its framework pinned nowhere, or its library
    not beside it ("no lock pins torchvision")."""
    mine = [ref for ref in locks if scenario.framework in ref.lock.frameworks()]
    if not mine:
        pinned = sorted({f for ref in locks for f in ref.lock.frameworks()})
        return (f"no lock pins {scenario.framework} (locks pin: "
                f"{', '.join(pinned) or 'no framework'})")
    missing = [name for name in _requires(scenario)
               if not any(_pins(ref.lock, (name,)) for ref in mine)]
    return (f"no lock pins {' and '.join(missing or _requires(scenario))} beside "
            f"{scenario.framework}")
