"""The git gate: `check --base REF`, A/B between the locks at the merge base and on disk.

Kept apart from the other flows so that the common answer — no lock changed — needs only the config
and git: nothing is parsed, built, imported or run.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard import gitref
from lockguard.config import Config
from lockguard.files import display_path
from lockguard.progress import QUIET, Progress

if TYPE_CHECKING:
    from lockguard.config import Options
    from lockguard.flows.pipeline import Backend
    from lockguard.report import Report
    from lockguard.scenarios import Scenario


def check_base(config: Config, lock_paths: list[Path], scenarios: list[Scenario],
               opts: Options, base_ref: str, progress: Progress = QUIET,
               backend: Backend | None = None) -> Report:
    """A/B between the locks at the merge base with `base_ref` and the locks on disk.

    When no lock changed, the answer comes from git alone: nothing is parsed, built or run.
    """
    from lockguard.report import GitBase, Report

    start = time.perf_counter()
    changes = gitref.changed_locks(config.root, base_ref, lock_paths)
    base_sha = changes[0].base_commit[:12] if changes else "?"
    base = GitBase.model_construct(ref=base_ref, merge_base=changes[0].base_commit) \
        if changes else None
    notes = []
    dirty = gitref.dirty_paths(config.root, lock_paths)
    if dirty:
        notes.append("checking what is on disk: uncommitted changes in "
                     + ", ".join(display_path(p) for p in dirty))
    moved = [c for c in changes if c.status != "unchanged"]
    if not moved:
        notes.append(f"no lock changed since {base_ref} (merge base {base_sha}): nothing to check")
        # Nothing ran: lockguard's own values, not validated (as flows/check.py's shortcut).
        return Report.model_construct(command="check", mode="ab", notes=notes, passed=True,
                                      base=base, duration_s=time.perf_counter() - start)
    from lockguard.flows.ab import check_ab
    from lockguard.locks.ref import LockRef, lock_for, read_lock
    from lockguard.flows.report_parts import family_rule_report
    from lockguard.locks.parser import parse_lock_text

    candidates, baseline = [], []
    for change in moved:
        where = f"{base_ref}:{display_path(change.path)}"
        if change.status == "removed":
            notes.append(f"{display_path(change.path)} was removed since {base_ref}")
            continue
        new = LockRef(change.path, read_lock(change.path))
        if change.status == "added":
            notes.append(f"{display_path(change.path)} was added since {base_ref}: "
                         "its scenarios have no baseline")
            candidates.append(new)
            continue
        old_lock = parse_lock_text(change.base_text or "", where)  # errors name the ref
        if old_lock.lock_hash == new.lock.lock_hash:
            notes.append(f"{display_path(change.path)}: only comments or layout changed since "
                         f"{base_ref}")
            continue
        candidates.append(new)
        label = f"{short_ref(base_ref)}@{change.base_commit[:7]}:{display_path(change.path)}"
        baseline.append(LockRef(Path(where), old_lock, label=label))
    if not candidates:
        return Report(command="check", mode="ab", notes=notes, passed=True, base=base,
                      duration_s=time.perf_counter() - start)
    # Only scenarios whose framework a changed lock pins: the rest cannot have moved.
    mine = [s for s in scenarios if lock_for(s, candidates) is not None]
    # Always A/B, also when only added locks remain: their scenarios are `new`, not errors.
    report = (family_rule_report("check", candidates)
              or check_ab(config, candidates, baseline, mine, opts, progress, backend))
    report.notes = notes + report.notes
    report.base = base
    return report


def short_ref(ref: str) -> str:
    """How a reader names the base branch: origin/main and refs/heads/main are `main`."""
    for prefix in ("refs/heads/", "refs/remotes/", "refs/"):
        if ref.startswith(prefix):
            ref = ref[len(prefix):]
            break
    return ref.removeprefix("origin/")

