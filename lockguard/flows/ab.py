"""A/B: the candidate locks against baseline locks, run side by side on this machine; and
`diff`, the lock difference alone."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from lockguard.config import Config, Options
from lockguard.errors import UsageError
from lockguard.flows.goldens import digest
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, env_kind, pipeline
from lockguard.locks.ref import LockRef, lock_for
from lockguard.flows.report_parts import evidence, lock_info, nothing_done, parity, policy_for, \
    tolerance_of, trust_notes
from lockguard.locks.diff import diff_locks, with_startup_files
from lockguard.progress import QUIET, Progress
from lockguard.scenarios import Scenario, harness_digest

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.report import Evidence, Report


def check_ab(config: Config, locks: list[LockRef], baseline: list[LockRef],
             scenarios: list[Scenario], opts: Options, progress: Progress = QUIET,
             backend: Backend | None = None) -> Report:
    start = time.perf_counter()
    policy = policy_for(config, opts.exact)
    harness, kind = harness_digest(), env_kind(config, opts)
    if kind == "local":
        # Both sides would run the one interpreter lockguard was given: always identical.
        raise UsageError("--env local runs one interpreter, whatever the locks pin: an A/B "
                         "check (--baseline-lock, --base, propose) needs an environment per "
                         "lock (--env venv or docker)")

    def decide(p: Planned) -> list[Job]:
        old = lock_for(p.scenario, baseline)
        if old is None:
            return []  # nothing to compare with: judged `new`
        # Baseline and candidate of one scenario run side by side, alternating, so that both
        # see the same machine load: their timing ratio is meaningful, absolute times are not.
        return [Job(p, old, "baseline"), Job(p, p.lock, "candidate")] * opts.repeat

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence | None]:
        from lockguard.compare.verdicts import ScenarioVerdict, compare_runs
        from lockguard.names import Verdict

        old = lock_for(p.scenario, baseline)
        if old is None:
            return ScenarioVerdict(
                scenario=p.scenario.id, framework=p.scenario.framework, verdict=Verdict.new,
                reasons=[f"the baseline locks do not pin {p.scenario.framework}"]), None
        verdict = compare_runs(runs.baseline, runs.candidate, policy=policy,
                               baseline_kind="lock", expected_device=p.device,
                               timed_together=True, tolerance=tolerance_of(p.scenario.tolerance))
        return verdict, evidence(p.scenario.id, ("lock", old.name, runs.baseline[0]),
                                 ("lock", p.lock.name if p.lock else "local",
                                  runs.candidate[0]), digest(p, config, harness, kind))

    outcome = pipeline(config, opts, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend)
    from lockguard.compare.verdicts import gate_passes, is_failure
    from lockguard.report import Report

    diffs = []
    for new in locks:
        old = next((b for b in baseline if b.lock.frameworks() & new.lock.frameworks()), None)
        if old is not None:
            # Naming the .pth files (and the like) the candidate's changed pins installed.
            diffs.append(with_startup_files(diff_locks(old.lock, new.lock),
                                            outcome.startup_files.get(new.lock.lock_hash)))
    idle = nothing_done(outcome.verdicts, "compared")
    report = Report(command="check", mode="ab", device=opts.device or config.device,
                  locks=[lock_info(r, "baseline") for r in baseline]
                  + [lock_info(r, "candidate") for r in locks],
                  lock_diffs=diffs, verdicts=outcome.verdicts, evidence=outcome.evidence,
                  notes=([idle] if idle else []) + trust_notes(config, baseline + locks),
                  parity=parity({p.scenario.id: p.scenario for p in outcome.planned},
                                outcome.results),
                  passed=gate_passes(outcome.verdicts, policy) and not idle,
                  failing=[v.scenario for v in outcome.verdicts if is_failure(v, policy)],
                  duration_s=time.perf_counter() - start)
    if opts.bisect and report.failing:
        from lockguard.flows.bisect import attach_bisection

        report = attach_bisection(report, config, opts, scenarios, locks, baseline, policy,
                                  progress, backend)
        report.duration_s = time.perf_counter() - start
    return report


def diff(old: LockRef, new: LockRef) -> Report:
    from lockguard.report import Report

    return Report(command="diff", mode="diff",
                  locks=[lock_info(old, "baseline"), lock_info(new, "candidate")],
                  lock_diffs=[diff_locks(old.lock, new.lock)])
