"""`lockguard check`: the candidate locks against a baseline -- the stored goldens, baseline
locks (A/B), or the locks at a git merge base (resolved into baseline locks, flows/git_base.py).

The golden check answers from provenance when nothing that shapes a run changed since its golden
was recorded on this hardware class: no framework is imported, nothing is built or run.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Union

from lockguard import golden
from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.flows.goldens import (
    Crossings, Hosts, compare_with_goldens, digest, load_goldens, unchanged,
)
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, pipeline, run_backend
from lockguard.flows.report_parts import family_rule_report, report_for
from lockguard.golden import Golden, GoldenError, golden_path, legacy_path
from lockguard.hardware import HardwareClass
from lockguard.locks.ref import LockRef
from lockguard.names import Verdict
from lockguard.progress import QUIET, Progress
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.flows.git_base import Gate
    from lockguard.report import Evidence, Report


# ------------------------------------------------------------------------------ the baseline

@dataclass(frozen=True)
class Goldens:
    """Check against the goldens stored in golden_dir, recorded by `lockguard record`."""


@dataclass(frozen=True)
class BaselineLocks:
    """Check A/B against these locks (`--baseline-lock`, propose's current locks), each
    scenario run from both sides on this machine."""

    refs: tuple[LockRef, ...]


@dataclass(frozen=True)
class MergeBase:
    """Check A/B against the locks at a git merge base (`--base GITREF`), judged by the gate
    `open_gate` read; check_base resolves it into baseline and candidate locks."""

    gate: Gate


Baseline = Union[Goldens, BaselineLocks, MergeBase]
GOLDENS = Goldens()


def check(settings: Settings, locks: list[LockRef], scenarios: list[Scenario],
          baseline: Baseline = GOLDENS, progress: Progress = QUIET,
          backend: Backend | None = None) -> Report:
    """Check `locks` (with a merge base: the gate's own, and `locks` is not read) against
    `baseline`; `settings` are the judging configuration's (a merge base's, with
    `--policy base`)."""
    if isinstance(baseline, MergeBase):
        from lockguard.flows.git_base import check_base

        return check_base(settings, baseline.gate, scenarios, progress, backend)
    # Only the locks under check: a baseline that broke a rule is what is being replaced.
    if (failed := family_rule_report("check", locks)) is not None:
        return failed
    if isinstance(baseline, BaselineLocks) and baseline.refs:
        if {r.lock.lock_hash for r in locks} == {r.lock.lock_hash for r in baseline.refs} \
                and not settings.rerun:
            return same_locks(settings, locks, list(baseline.refs), scenarios, progress,
                              backend)

        from lockguard.flows.ab import check_ab

        return check_ab(settings, locks, list(baseline.refs), scenarios, progress, backend)
    return check_golden(settings, locks, scenarios, progress, backend)


def same_locks(settings: Settings, locks: list[LockRef], baseline: list[LockRef],
               scenarios: list[Scenario], progress: Progress = QUIET,
               backend: Backend | None = None) -> Report:
    """An A/B whose candidate locks install exactly what its baseline locks do (the same lock
    hashes: pins, hashes and options; comments and layout aside), answered at once: nothing
    is built or run, and each scenario that would have run is `unchanged`, never
    `identical`. (--rerun runs both sides: the same lock twice measures determinism.)"""
    start = time.perf_counter()

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence | None]:
        return ScenarioVerdict(
            scenario=p.scenario.id, framework=p.scenario.framework, verdict=Verdict.unchanged,
            baseline_kind="lock",
            reasons=["the candidate lock installs exactly what the baseline lock does (the "
                     "same lock hash): not run"]), None

    outcome = pipeline(settings, scenarios, locks, decide=lambda p: [], judge=judge,
                       progress=progress, backend=backend)
    return report_for(settings, outcome, command="check", mode="ab", locks=locks,
                      baseline=baseline, started=start,
                      notes=["the candidate locks are the baseline locks (the same lock "
                             "hashes): nothing was built or run (--rerun runs both sides "
                             "anyway: a check of the training's determinism)"])


def check_golden(settings: Settings, locks: list[LockRef], scenarios: list[Scenario],
                 progress: Progress = QUIET, backend: Backend | None = None) -> Report:
    """Check `locks` against the stored goldens: unchanged inputs answer from the golden's
    provenance without running; the rest run and are compared with every golden of their
    device (this hardware class's first)."""
    start = time.perf_counter()
    backend = run_backend(settings, backend)
    gdir = settings.golden_dir
    hosts, crossed = Hosts(), Crossings()
    policy = settings.policy
    answered: dict[str, HardwareClass] = {}  # scenario -> class whose golden answers unrun
    goldens: dict[str, tuple[dict[str, Golden], str]] = {}
    older: list[str] = []  # passing scenarios whose golden names another lock than this one

    def decide(p: Planned) -> list[Job]:
        sid, host, inputs = p.scenario.id, hosts.get(p.device), digest(p, settings, backend)
        mine = golden_path(gdir, p.device, host.id, sid) if host is not None else None
        # Every golden read here is verified (digest, shape, class): a bad one is an error
        # before anything runs.
        mine_gold = golden.load(mine) if mine is not None else None
        # `local` runs whatever is installed, which the lock does not pin: never answered
        # from provenance.
        if mine_gold is not None and host is not None and not settings.rerun \
                and settings.repeat == 1 and not settings.local \
                and unchanged(mine_gold, p, inputs):
            # Same lock, harness, scenario and settings as when recorded, on this hardware
            # class: the answer is known without importing a framework or building anything.
            answered[sid] = host
            return []
        found = ({host.id: mine_gold} if mine_gold is not None and host is not None
                 else load_goldens(gdir, p))
        if not found:
            legacy = legacy_path(gdir, p.device, sid)
            if os.path.lexists(legacy):
                raise GoldenError(f"{legacy}: golden of schema 1 (recorded without a hardware "
                                  f"class); re-record it (`lockguard record --scenario {sid}`)")
            if not settings.allow_new:
                where = mine or golden_path(gdir, p.device, "<hardware class>", sid)
                raise GoldenError(f"{where}: no golden recorded for scenario {sid} on any "
                                  f"hardware (run `lockguard record --scenario {sid}` first)")
        goldens[sid] = (found, inputs)
        return [Job(p, p.lock)] * settings.repeat

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence | None]:
        sid = p.scenario.id
        if sid in answered:
            # Made of lockguard's own values: nothing to validate (see `assemble` below).
            return ScenarioVerdict.model_construct(
                scenario=sid, framework=p.scenario.framework, verdict=Verdict.unchanged,
                baseline_kind="golden",
                reasons=["lock and scenario unchanged since the golden was recorded on this "
                         f"hardware class ({answered[sid].id}); not re-run "
                         "(--rerun runs it)"]), None
        found, inputs = goldens[sid]
        verdict = compare_with_goldens(p, runs.candidate, found, hosts.get(p.device), inputs,
                                       policy, crossed)
        if _of_an_older_lock(p, found, hosts.get(p.device), verdict[0]):
            older.append(sid)  # its answer holds, but every check re-runs it until recorded
        return verdict

    outcome = pipeline(settings, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend)
    # A check answered wholly from provenance ran nothing, and its report holds only values
    # lockguard made itself: it skips the Report validator, whose one-off build (every nested
    # model, RunResults included) would be a fifth of the unchanged-lock answer. Rendering it
    # as JSON still goes through the model's serializer.
    ran_nothing = bool(answered) and set(answered) == {v.scenario for v in outcome.verdicts}
    notes = crossed.notes() + ([
        f"the goldens of {', '.join(sorted(older))} were recorded with another lock: they "
        "still hold, but every check runs them again until `lockguard record` records them "
        "with this one (after a merged lock bump, say)"] if older else [])
    if settings.locate == "always":
        # A golden keeps a run's numbers, not an environment to re-run a step in.
        notes.append("--locate compares two environments' runs of one step: it applies to an "
                     "A/B check (--baseline-lock, --base, propose), not to one against the "
                     "goldens; nothing was located")
    return report_for(settings, outcome, command="check", mode="golden", locks=locks,
                      started=start, notes=notes, hardware=hosts.known(),
                      validate=not ran_nothing)


def _of_an_older_lock(p: Planned, found: dict[str, Golden], host: HardwareClass | None,
                      verdict: ScenarioVerdict) -> bool:
    """Whether `p` passed against this hardware class's golden, which names another lock than
    the one it ran from (the lock moved, the numbers did not)."""
    mine = found.get(host.id) if host is not None else None
    return (mine is not None and p.lock is not None
            and mine.provenance.lock_hash != p.lock.lock.lock_hash
            and verdict.verdict in (Verdict.identical, Verdict.within_tolerance))
