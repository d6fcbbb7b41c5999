"""`lockguard propose`: resolve the locks with upgrades into the cache and A/B-check them
against the current locks. The user's files are only read."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lockguard.cache import cache_dir
from lockguard.config import ConfigError
from lockguard.files import display_path
from lockguard.flows.check import BaselineLocks, check
from lockguard.flows.pipeline import Backend
from lockguard.locks import relock, resolvers
from lockguard.locks.ref import LockRef, lock_for, lock_target, read_lock
from lockguard.progress import QUIET, Progress
from lockguard.report import Report
from lockguard.sandbox import resolve as sandbox_for
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox


def propose(settings: Settings, locks: list[LockRef], upgrades: list[str],
            scenarios: list[Scenario], *, resolver: str | None = None,
            inputs: Path | None = None, progress: Progress = QUIET,
            backend: Backend | None = None) -> Report:
    """Resolve the locks with `upgrades` into the cache and A/B-check them against the current
    locks. The user's files are only read. `resolver` None: each lock's own (the tool its
    header names, uv otherwise). A line of a lock's inputs that rules an upgrade out is read
    as asking for it (as a bot's pull request would edit it), and a note says so."""
    wanted: dict[str, str] = {}
    for spec in upgrades:
        try:
            wanted[spec] = canonicalize_name(Requirement(spec).name)
        except InvalidRequirement as exc:
            raise ConfigError(f"upgrade {spec!r}: {exc}") from None
    # The resolver may build an sdist for its metadata, whatever env the runs use.
    confined = sandbox_for(settings.sandbox)
    confined.require()
    candidates, baseline, notes = [], [], []
    for ref in locks:
        mine = [spec for spec, name in wanted.items() if name in ref.lock.by_name]
        if not mine:
            continue
        proposal = _proposal(ref, mine, inputs, resolver, progress, confined)
        target = lock_target(settings.config)
        proposed = LockRef(proposal.path, read_lock(proposal.path, target), ref.device)
        if all(_versions(proposed, wanted[spec]) == _versions(ref, wanted[spec])
               for spec in mine):
            # The lock already satisfies what was asked (numpy>=2 with numpy 2.2.6 pinned):
            # nothing to build or run for it. A resolution that differs otherwise (every
            # wheel's hash where the lock kept one, a header) proposes nothing asked for.
            notes.append(f"already satisfied: {display_path(ref.path)} pins "
                         + ", ".join(ref.lock.by_name[wanted[spec]][0].requirement
                                     for spec in mine)
                         + f" ({' '.join(mine)}): nothing to propose")
            continue
        notes.append(f"proposed lock for {display_path(ref.path)} ({proposal.resolver}): "
                     f"{proposal.path}")
        notes.extend(proposal.relaxed)
        candidates.append(proposed)
        baseline.append(ref)
    unpinned = [spec for spec, name in wanted.items()
                if not any(name in ref.lock.by_name for ref in locks)]
    if unpinned:
        raise ConfigError(f"no lock pins {', '.join(unpinned)}: propose upgrades what a lock pins")
    if not candidates:
        return Report(command="propose", mode="ab", notes=notes, passed=True)
    mine = [s for s in scenarios if lock_for(s, candidates) is not None]
    report = check(settings, candidates, mine, BaselineLocks(tuple(baseline)), progress, backend)
    return report.model_copy(update={"command": "propose", "notes": notes + report.notes})


def poetry_command(upgrades: list[str]) -> str:
    """The Poetry command that writes a poetry.lock with `upgrades`: `poetry update` takes
    package names only (a version there is an error), so an exact version is added as the
    project's requirement (`poetry add --lock NAME==VERSION`, which also updates the lock);
    only names: `poetry update --lock NAME...`."""
    versioned = [spec for spec in upgrades if str(Requirement(spec).specifier)]
    if versioned:
        return "poetry add --lock " + " ".join(f"'{spec}'" for spec in upgrades)
    return "poetry update --lock " + " ".join(upgrades)


def _proposal(ref: LockRef, upgrades: list[str], inputs: Path | None, resolver: str | None,
              progress: Progress, sandbox: Sandbox | None):
    """The lock of `ref` with `upgrades`, resolved by the tool that writes its format: a
    uv.lock by `uv lock`, a pylock.toml by `uv pip compile`, requirements text by its header's
    resolver (locks/relock.py, locks/resolvers/)."""
    if ref.lock.format == "uv.lock":
        return relock.propose_uv_lock(ref.path, upgrades, cache_dir(), progress=progress.info,
                                      sandbox=sandbox)
    if ref.lock.format == "pylock.toml":
        return relock.propose_pylock(ref.path, inputs or ref.inputs, upgrades, cache_dir(),
                                     progress=progress.info, sandbox=sandbox)
    if ref.lock.format == "poetry.lock":
        raise ConfigError(f"{display_path(ref.path)}: propose does not resolve a poetry.lock "
                          "(Poetry is no dependency of lockguard): run "
                          f"`{poetry_command(upgrades)}` and check it with --baseline-lock")
    source = inputs or ref.inputs or ref.path.with_suffix(".in")
    if not source.is_file():
        raise ConfigError(f"{source}: requirements input of {display_path(ref.path)} not "
                          "found (pass --inputs, or set `inputs` on the lock in config)")
    return resolvers.propose(source, ref.path, upgrades, cache_dir(),
                             resolver,  # type: ignore[arg-type]
                             progress=progress.info, sandbox=sandbox)


def _versions(ref: LockRef, name: str) -> list:
    """The versions `ref` pins `name` at (one a marker), compared as versions."""
    return sorted(pin.parsed_version for pin in ref.lock.by_name.get(name, ()))
