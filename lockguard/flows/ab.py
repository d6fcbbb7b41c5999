"""A/B: the candidate locks against baseline locks, run side by side on this machine; and
`diff`, the lock difference alone."""

from __future__ import annotations

import time
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from lockguard.compare.locate import locate_step, located
from lockguard.compare.timing import compare_timing, time_blocks
from lockguard.compare.verdicts import ScenarioVerdict, compare_runs, is_failure, with_location
from lockguard.errors import UsageError
from lockguard.flows.acceptances import accept_known
from lockguard.flows.goldens import digest
from lockguard.flows.pipeline import (
    Backend, CodeTree, Environments, Job, Outcome, Planned, Runs, pipeline, run_backend,
)
from lockguard.flows.report_parts import evidence, fleet_parts, lock_info, report_for
from lockguard.locks.diff import LockDiff, diff_locks, with_startup_files
from lockguard.locks.ref import LockRef, Pairing, pair_locks
from lockguard.names import Verdict
from lockguard.progress import QUIET, Progress
from lockguard.report import Report
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from collections.abc import Sequence
    from pathlib import Path

    from lockguard.fleet import Machine
    from lockguard.report import Evidence


def check_ab(settings: Settings, locks: list[LockRef], baseline: list[LockRef],
             scenarios: list[Scenario], progress: Progress = QUIET,
             backend: Backend | None = None,
             code: tuple[CodeTree | None, CodeTree | None] = (None, None),
             partners: dict[int, LockRef] | None = None) -> Report:
    """Check `locks` against `baseline`: each scenario run from both sides on this machine,
    alternating (with timing runs when a timing verdict is asked for), an intended change
    passing through a committed acceptance; failing verdicts bisected with --bisect. `code`:
    where each side (baseline, candidate) takes user scenarios' code from (None: the
    checkout); `partners`: pairs already made (id of a candidate → its baseline lock, as
    check --base pairs them), the rest paired by framework (locks.ref.pair_locks)."""
    old_code, new_code = code
    pairing = pair_locks(locks, baseline, partners)
    start = time.perf_counter()
    policy = settings.policy
    # Bisection builds its own backend unless one was given: its mixes share compile caches,
    # which the two sides here never do.
    given, backend = backend, run_backend(settings, backend)
    if settings.local:
        # Both sides would run the one interpreter lockguard was given: always identical.
        raise UsageError("--env local runs one interpreter, whatever the locks pin: an A/B "
                         "check (--baseline-lock, --base, propose) needs an environment per "
                         "lock (--env venv or docker)")

    def decide(p: Planned) -> list[Job]:
        old = pairing.of(p.scenario, p.lock)
        if old is None:
            return []  # nothing to compare with: judged `new`
        # Baseline and candidate of one scenario run side by side, alternating, so that both
        # see the same machine load: their timing ratio is meaningful, absolute times are not.
        return [Job(p, old, "baseline", code=old_code),
                Job(p, p.lock, "candidate", code=new_code)] * settings.repeat

    # `slower` is judged from timing runs only, and they cost K runs a side one at a time: made
    # when a timing verdict is asked for (slower in fail_on, or --timing).
    timed = settings.timing or Verdict.slower in policy.fail_on

    def timing(p: Planned, runs: Runs) -> list[Job]:
        old = pairing.of(p.scenario, p.lock)
        return timing_jobs(p, runs, old, settings, code) if old is not None and timed else []

    def locating(p: Planned, runs: Runs) -> list[Job]:
        old = pairing.of(p.scenario, p.lock)
        return locate_jobs(p, runs, old, settings, code) if old is not None else []

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence | None]:
        old = pairing.of(p.scenario, p.lock)
        if old is None:
            return ScenarioVerdict(
                scenario=p.scenario.id, framework=p.scenario.framework, verdict=Verdict.new,
                reasons=[f"the baseline locks do not pin {p.scenario.framework}"]), None
        tolerance = p.scenario.tolerance
        timing_check = (compare_timing(runs.baseline_timed, runs.candidate_timed, policy)
                        if runs.baseline_timed and runs.candidate_timed else None)
        verdict = compare_runs(runs.baseline, runs.candidate, policy=policy,
                               baseline_kind="lock", expected_device=p.device,
                               timed_together=True, tolerance=tolerance, timing=timing_check)
        verdict = _located(verdict, runs)
        if is_failure(verdict, policy) and p.lock is not None:
            # An intended change passes only through an acceptance committed with it.
            verdict = accept_known(verdict, p, runs.candidate, old.lock.lock_hash,
                                   p.lock.lock.lock_hash, settings.golden_dir, policy, tolerance)
        return verdict, evidence(p.scenario.id, ("lock", old.name, runs.baseline[0]),
                                 ("lock", p.lock.name if p.lock else "local",
                                  runs.candidate[0]),
                                 digest(new_code.planned(p) if new_code else p, settings,
                                        backend))

    outcome = pipeline(settings, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend, timing=timing, locate=locating,
                       narrow=partial(unreached, pairing=pairing)
                       if settings.skip_unreached else None)
    report = report_for(settings, outcome, command="check", mode="ab", locks=locks,
                        baseline=baseline, started=start,
                        lock_diffs=_lock_diffs(locks, pairing, outcome), progress=progress)
    if settings.bisect:
        report = _bisected(report, settings, scenarios, locks, pairing, progress, given)
        report.duration_s = time.perf_counter() - start
    return report


def timing_jobs(p: Planned, runs: Runs, old: LockRef, settings: Settings,
                code: tuple[CodeTree | None, CodeTree | None]) -> list[Job]:
    """The timing runs of `p` (its numeric `runs` done), from `old` and its own lock:
    timing_runs a side, one at a time. Steps too short to time one by one are timed in blocks,
    each run made long enough for enough of them (compare/timing.py); they judge nothing else."""
    block, steps = time_blocks([*runs.baseline, *runs.candidate], p.steps, settings.policy)
    p = replace(p, steps=steps)
    pair = [Job(p, old, "baseline", timing=True, code=code[0], time_block=block),
            Job(p, p.lock, "candidate", timing=True, code=code[1], time_block=block)]
    # A B, B A, A B, …: neither side always runs first (a warmer page cache, a CPU's clock
    # ramping up would otherwise favour one side in every pair).
    return [job for i in range(settings.timing_runs) for job in pair[::1 - 2 * (i % 2)]]


# The frameworks whose harness captures a step layer by layer (harness/_lockguard_harness/
# locate_torch.py: every module call; locate_jax.py, locate_tf.py: every parameter leaf and
# tapped layer of the bundled jax, flax, tf and keras scenarios).
LOCATABLE = frozenset({"torch", "jax", "tensorflow"})
# The frameworks whose bundled scenarios' probe forward can be captured too (torch_.train):
# their probe outputs differing alone is located in the probe (compare/locate.locate_step).
PROBE_LOCATABLE = frozenset({"torch"})
# The frameworks whose user scripts (and entries) may register values to compare at the
# located step (lockguard_capture: NEP 50's first changed dtype named by the script's own name)
# and, torch and tensorflow, a model captured module by module (lockguard_locate: a torch
# nn.Module's hooks, a Keras model's layers); harness locate_arrays.UserCapture.
LOCATABLE_SCRIPTS = frozenset({"numpy", "torch", "jax", "tensorflow"})
# The names a user script registers with (userscript.py); a script naming neither is not re-run.
REGISTERING = ("lockguard_capture", "lockguard_locate")
# The paths (Scenario.reach) a capture would change or miss: a torch hook breaks
# torch.compile's graph, and a jit/XLA or replicated step is not the program a capture re-runs.
UNHOOKABLE = frozenset({"compiler", "parallel"})


def locate_jobs(p: Planned, runs: Runs, old: LockRef, settings: Settings,
                code: tuple[CodeTree | None, CodeTree | None]) -> list[Job]:
    """The localisation runs of `p` (compare/locate.py), one a side: its first divergent step
    (of loss or gradient norm) again, the run ending there, every module call captured (for a
    PROBE_LOCATABLE bundled scenario whose probe outputs alone differ: every step, then the
    probe's forward captured). Made
    for a drift under the default, for any difference under --locate, never under --no-locate;
    for a bundled scenario of a LOCATABLE framework, and a user script or entry of a
    LOCATABLE_SCRIPTS one (its registered values and models; a user's model is not the
    harness's to hook unless registered, and a script that names none of REGISTERING is not
    re-run); never a compiled or data-parallel one (UNHOOKABLE: the
    step re-run would not be the step that drifted; its eager twin is located)."""
    locatable = LOCATABLE_SCRIPTS if p.scenario.script is not None else LOCATABLE
    if (settings.locate == "never" or p.scenario.framework not in locatable
            or p.scenario.reach in UNHOOKABLE or not runs.baseline or not runs.candidate
            or (p.scenario.script is not None and not _registers(p.scenario.script, code[1]))):
        return []
    probe = p.scenario.script is None and p.scenario.framework in PROBE_LOCATABLE
    step = locate_step(runs.baseline[0], runs.candidate[0], probe=probe)
    if step is None:
        return []
    if settings.locate == "drift":
        verdict = compare_runs(runs.baseline, runs.candidate, policy=settings.policy,
                               baseline_kind="lock", expected_device=p.device,
                               timed_together=False, tolerance=p.scenario.tolerance)
        if verdict.verdict != Verdict.drift:
            return []
    # the run ends with the located step (the probe's: after every step)
    short = replace(p, steps=min(step + 1, len(runs.candidate[0].losses)))
    return [Job(short, old, "baseline", code=code[0], locate_step=step),
            Job(short, p.lock, "candidate", code=code[1], locate_step=step)]


def _registers(script: Path, code: CodeTree | None) -> bool:
    """Whether a user script (the candidate side's; an entry's module) names lockguard_capture
    or lockguard_locate (REGISTERING): one that registers nothing would be re-run on both sides
    for no location. Read, never run."""
    try:
        text = (code.place(script) if code is not None else script).read_text(errors="replace")
    except (OSError, ValueError):
        return False
    return any(name in text for name in REGISTERING)


def _located(verdict: ScenarioVerdict, runs: Runs) -> ScenarioVerdict:
    """`verdict` with where its difference starts, when the scenario had localisation runs."""
    if not (runs.baseline_located and runs.candidate_located):
        return verdict

    return with_location(verdict, located(runs.baseline[0], runs.candidate[0],
                                          runs.baseline_located[0], runs.candidate_located[0]))


def unreached(planned: list[Planned], envs: Environments, *,
              pairing: Pairing) -> list[Planned]:
    """`planned` with each costly scenario its lock change cannot reach left out, saying why
    (Scenario.unreached), while its eager twin runs. The change is read with the startup files
    the candidate's environment installs, so the environments of those scenarios are prepared
    here (both sides, at once: the runs use them); an environment that does not tell its
    startup files (a container's) leaves nothing out, nor does a change of installer options
    (the same pins may then be other files)."""
    running = {p.scenario.id for p in planned if not p.skip_reason}
    costly = [(p, old) for p in planned
              if not p.skip_reason and p.lock is not None and p.scenario.covered_by in running
              and (old := pairing.of(p.scenario, p.lock)) is not None]
    if not costly:
        return planned
    envs.prepare_all([(ref, p.scenario.framework, p.device) for p, old in costly
                      for ref in (old, p.lock)])
    reasons: dict[str, str] = {}
    diffs: dict[tuple[int, int], LockDiff] = {}  # one diff a pair of locks
    for p, old in costly:
        assert p.lock is not None
        shipped = envs.get(p.lock, p.scenario.framework, p.device).startup_files
        change = diffs.get((id(old), id(p.lock)))
        if change is None:
            change = diffs[(id(old), id(p.lock))] = diff_locks(old.lock, p.lock.lock)
        if shipped is None or change.option_changes:
            continue
        reason = p.scenario.unreached(with_startup_files(change, shipped).changed)
        if reason:
            reasons[p.scenario.id] = reason
    return [replace(p, skip_reason=reasons[p.scenario.id]) if p.scenario.id in reasons else p
            for p in planned]


def _bisected(report: Report, settings: Settings, scenarios: list[Scenario],
              locks: list[LockRef], pairing: Pairing, progress: Progress,
              backend: Backend | None) -> Report:
    """`report` with its failing verdicts bisected (--bisect); with none failing, a note that
    there is nothing to bisect."""
    if not report.failing:
        accepted = len(report.accepted())
        report.notes.append("nothing to bisect: no verdict fails the gate"
                            + (f" ({accepted} accepted)" if accepted else ""))
        return report

    from lockguard.flows.bisect import attach_bisection

    return attach_bisection(report, settings, scenarios, locks, pairing, progress, backend)


def _lock_diffs(locks: list[LockRef], pairing: Pairing, outcome: Outcome) -> list:
    """Each candidate lock's difference from its baseline lock (the pairing's), naming the
    .pth files (and the like) the candidate's changed pins installed."""
    diffs = []
    for new in locks:
        old = pairing.partners.get(id(new))
        if old is not None:
            diffs.append(with_startup_files(diff_locks(old.lock, new.lock),
                                            outcome.startup_files.get(new.lock.lock_hash)))
    return diffs


def diff(old: LockRef, new: LockRef, fleet: Sequence[Machine] = (),
         progress: Progress = QUIET) -> Report:
    """`lockguard diff`: the difference of two locks, nothing run; with a fleet, the change
    judged against it (report_parts.fleet_parts, which may download the changed wheels): a
    change that breaks a machine, or whose wheel cannot be read, fails."""
    diffs = [diff_locks(old.lock, new.lock)]
    broken, notes = fleet_parts(fleet, diffs, [old, new], progress)
    return Report(command="diff", mode="diff",
                  locks=[lock_info(old, "baseline"), lock_info(new, "candidate")],
                  lock_diffs=diffs, rule_failures=broken, notes=notes, passed=not broken)
