"""The record, check and diff flows: plan → run → compare → Report.

Each flow validates all of its input (locks, config, goldens) before it builds or runs anything,
so bad input fails in a second with nothing written. Goldens are written only at the end of a
record, each atomically.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard.config import Config, Options, ToleranceSetting, display_path
from lockguard.envs.base import RunRequest
from lockguard.files import writable_dir
from lockguard import golden
from lockguard.golden import Golden, GoldenError, golden_path
from lockguard.locks import check_family_rules, diff_locks, framework_version
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status
from lockguard.runner import (
    Environments, LockRef, Planned, lock_for, plan, read_lock, run_requests,
)
from lockguard.scenarios import Scenario, harness_digest, inputs_digest

if TYPE_CHECKING:
    from lockguard.compare import Policy, ScenarioVerdict, Tolerance
    from lockguard.report import LockInfo, ParityRow, Report

# compare and report (pydantic models, rich) are imported where used, and warmed up in the
# background while training runs: lockguard's own start-up must not sit in front of the runs.


def _prewarm() -> None:
    """Import what comparing and reporting need while the harness processes train."""
    def work() -> None:
        import lockguard.report.text  # noqa: F401 - pulls in compare and rich

        RunResult.model_rebuild()
    threading.Thread(target=work, daemon=True).start()


# ------------------------------------------------------------------------------------ policy

def _tolerance(setting: ToleranceSetting | None) -> Tolerance | None:
    from lockguard.compare import Tolerance

    if setting is None:
        return None
    if setting == "exact":
        return Tolerance(rtol=0.0, atol=0.0, exact=True)
    return Tolerance(rtol=setting.rtol, atol=setting.atol)


def policy_for(config: Config, exact: bool = False) -> Policy:
    from lockguard.compare import DEFAULT_FAIL_ON, Policy, Verdict

    fail_on = (frozenset(Verdict(v) for v in config.fail_on) if config.fail_on is not None
               else DEFAULT_FAIL_ON)
    return Policy(exact=exact or config.tolerance == "exact", tolerance=_tolerance(config.tolerance),
                  fail_on=fail_on, slower_ratio=config.slower_ratio,
                  slower_min_step_s=config.slower_min_step_s,
                  fail_on_improvement=config.fail_on_improvement)


# ----------------------------------------------------------------------------- report parts

def lock_info(ref: LockRef, role: str) -> LockInfo:
    from lockguard.report import LockInfo

    frameworks = sorted(ref.lock.frameworks())
    versions = {f: v for f in frameworks if (v := framework_version(ref.lock, f))}
    return LockInfo(path=display_path(ref.path), lock_hash=ref.lock.lock_hash, role=role,
                    frameworks=frameworks, versions=versions, source=ref.lock.source,
                    label=ref.label)


def parity(scenarios: dict[str, Scenario], results: dict[str, RunResult]) -> list[ParityRow]:
    """Step-0 loss per family and dtype across frameworks, from the candidate runs of this check.

    Scenarios of one family start from the same data and weights, so their first loss should
    agree to float rounding in every framework: a harness bug shows up here first. Optimisers
    differ by design only from step 1 on, so only step 0 is compared.
    """
    from lockguard.report import ParityRow

    groups: dict[tuple[str, str], dict[str, float]] = {}
    for sid, r in results.items():
        sc = scenarios[sid]
        if sc.family and r.status == Status.ok and r.losses:
            groups.setdefault((sc.family, sc.dtype), {})[sid] = r.losses[0]
    rows = []
    for (family, dtype), step0 in groups.items():
        if len({scenarios[s].framework for s in step0}) < 2:
            continue
        values = list(step0.values())
        rows.append(ParityRow(family=family if dtype == "float32" else f"{family} ({dtype})",
                              step0=step0,
                              max_rel_spread=(max(values) - min(values)) / (abs(values[0]) or 1.0)))
    return rows


def nothing_done(verdicts: list[ScenarioVerdict], what: str) -> str | None:
    """Why a record or check that ran no scenario must not pass: a gate passes only what it
    compared. None when something ran."""
    from lockguard.compare import Verdict

    if any(v.verdict != Verdict.skipped for v in verdicts):
        return None
    reasons = sorted({r for v in verdicts for r in v.reasons})
    return (f"nothing was {what}: " + (f"all {len(verdicts)} selected scenarios were skipped ("
            + "; ".join(reasons) + ")" if verdicts else "no scenario was selected"))


# ------------------------------------------------------------------------------------ flows

def family_rule_report(command: str, locks: list[LockRef]) -> Report | None:
    """A failing report when a lock breaks a framework family rule, before anything is built:
    a mismatched torch/torchvision pair is known in a second, not after a 20-minute build."""
    broken = [(ref, v) for ref in locks for v in check_family_rules(ref.lock)]
    if not broken:
        return None
    from lockguard.report import Report, RuleFailure

    return Report(command=command, mode="golden" if command == "check" else "record",
                  locks=[lock_info(r, "candidate") for r in locks], passed=False,
                  rule_failures=[RuleFailure(lock=display_path(ref.path), rule=v.rule,
                                             message=v.message, lines=list(v.lines))
                                 for ref, v in broken])


def _request(p: Planned, config: Config) -> RunRequest:
    return RunRequest(scenario=p.scenario, steps=p.steps, seed=config.seed, device=p.device,
                      threads=config.threads, timeout=config.timeout)


def _digest(p: Planned, config: Config, harness: str) -> str:
    return inputs_digest(p.scenario, lock_hash=p.lock.lock.lock_hash if p.lock else "local",
                         steps=p.steps, seed=config.seed, device=p.device,
                         threads=config.threads, harness=harness)


def _golden_dir(config: Config) -> Path:
    return config.resolve(config.golden_dir)


def record(config: Config, locks: list[LockRef], scenarios: list[Scenario], opts: Options,
           progress: Progress = QUIET) -> Report:
    start = time.perf_counter()
    if (failed := family_rule_report("record", locks)) is not None:
        return failed
    kind = opts.env or config.env
    planned = plan(config, scenarios, locks, device=opts.device, steps=opts.steps,
                   local=kind == "local")
    gdir = _golden_dir(config)
    writable_dir(gdir, "golden_dir")  # known now, not after every training ran
    previous: dict[str, Golden | None] = {
        p.scenario.id: golden.load(golden_path(gdir, p.device, p.scenario.id))
        for p in planned if not p.skip_reason}
    runnable = [p for p in planned if not p.skip_reason]
    envs = Environments(config, kind, progress)
    envs.expect([(p.lock, p.scenario.framework, p.device) for p in runnable])
    jobs = [(envs.get(p.lock, p.scenario.framework, p.device), _request(p, config))
            for p in runnable]
    _prewarm()
    results = run_requests(jobs, progress)
    from lockguard.compare import Verdict, compare_runs, skipped
    from lockguard.report import Report

    harness = harness_digest()
    commit = golden.git_commit(config.root)
    policy = policy_for(config, opts.exact)
    verdicts: list[ScenarioVerdict] = []
    to_write: list[tuple[Path, RunResult, dict]] = []
    for p, (env, _), result in zip(runnable, jobs, results):
        old = previous[p.scenario.id]
        v = compare_runs([old.result] if old else [], [result], policy=policy,
                         baseline_kind="golden", expected_device=p.device, timed_together=False,
                         tolerance=_tolerance(p.scenario.tolerance))
        verdicts.append(v)
        if result.status != Status.ok or v.verdict == Verdict.device_fallback:
            continue  # a reference must be a healthy run on the intended device
        provenance = {"lock": display_path(p.lock.path) if p.lock else None,
                      "lock_hash": p.lock.lock.lock_hash if p.lock else "local",
                      "inputs_digest": _digest(p, config, harness),
                      "framework_version": result.framework_version,
                      "env": env.label,
                      "git_commit": commit,
                      "fingerprint": result.fingerprint}
        to_write.append((golden_path(gdir, p.device, p.scenario.id), result, provenance))
    for path, result, provenance in to_write:
        golden.write(path, result, provenance)
    verdicts += [skipped(p.scenario.id, p.scenario.framework, p.skip_reason)
                 for p in planned if p.skip_reason]
    broken = [v for v in verdicts if v.verdict in (Verdict.broken, Verdict.device_fallback)]
    idle = nothing_done(verdicts, "recorded")
    return Report(command="record", mode="record", device=opts.device or config.device,
                  locks=[lock_info(r, "candidate") for r in locks], verdicts=verdicts,
                  notes=[idle] if idle else [],
                  parity=parity({p.scenario.id: p.scenario for p in runnable},
                                {p.scenario.id: r for p, r in zip(runnable, results)}),
                  written=[str(path) for path, _, _ in to_write], passed=not broken and not idle,
                  failing=[v.scenario for v in broken],
                  duration_s=time.perf_counter() - start)


def check(config: Config, locks: list[LockRef], scenarios: list[Scenario], opts: Options,
          baseline: list[LockRef] | None = None, progress: Progress = QUIET) -> Report:
    # Only the locks under check: a baseline that broke a rule is what is being replaced.
    if (failed := family_rule_report("check", locks)) is not None:
        return failed
    if baseline:
        return check_ab(config, locks, baseline, scenarios, opts, progress)
    return _check_golden(config, locks, scenarios, opts, progress)


def _check_golden(config: Config, locks: list[LockRef], scenarios: list[Scenario],
                  opts: Options, progress: Progress) -> Report:
    start = time.perf_counter()
    kind = opts.env or config.env
    planned = plan(config, scenarios, locks, device=opts.device, steps=opts.steps,
                   local=kind == "local")
    gdir = _golden_dir(config)
    harness = harness_digest()
    unchanged: set[str] = set()
    to_run: list[tuple[Planned, Golden | None]] = []
    for p in planned:
        if p.skip_reason:
            continue
        path = golden_path(gdir, p.device, p.scenario.id)
        raw = golden.read_raw(path)  # corrupt → GoldenError before anything runs
        if raw is None and not opts.allow_new:
            raise GoldenError(f"{path}: no golden recorded for scenario {p.scenario.id} "
                              f"(run `lockguard record --scenario {p.scenario.id}` first)")
        if raw is not None and not opts.rerun and opts.repeat == 1 \
                and raw["provenance"].get("inputs_digest") == _digest(p, config, harness):
            # Same lock, harness, scenario and settings as when recorded: the answer is known
            # without importing a framework or building an environment.
            unchanged.add(p.scenario.id)
            continue
        to_run.append((p, golden.from_raw(path, raw) if raw is not None else None))

    runs: list[RunResult] = []
    if to_run:
        envs = Environments(config, kind, progress)
        envs.expect([(p.lock, p.scenario.framework, p.device) for p, _ in to_run])
        jobs = [(envs.get(p.lock, p.scenario.framework, p.device), _request(p, config))
                for p, _ in to_run for _ in range(opts.repeat)]
        _prewarm()
        runs = run_requests(jobs, progress)
    from lockguard.compare import (
        ScenarioVerdict, Verdict, compare_runs, gate_passes, is_failure, skipped,
    )
    from lockguard.report import Report

    verdicts: dict[str, ScenarioVerdict] = {}
    for p in planned:
        if p.skip_reason:
            verdicts[p.scenario.id] = skipped(p.scenario.id, p.scenario.framework, p.skip_reason)
        elif p.scenario.id in unchanged:
            verdicts[p.scenario.id] = ScenarioVerdict(
                scenario=p.scenario.id, framework=p.scenario.framework,
                verdict=Verdict.identical, baseline_kind="golden",
                reasons=["lock and scenario unchanged since the golden was recorded (not re-run;"
                         " --rerun runs it)"])
    results: dict[str, RunResult] = {}
    if to_run:
        policy = policy_for(config, opts.exact)
        for i, (p, gold) in enumerate(to_run):
            mine = runs[i * opts.repeat:(i + 1) * opts.repeat]
            results[p.scenario.id] = mine[0]
            verdicts[p.scenario.id] = compare_runs(
                [gold.result] if gold else [], mine, policy=policy, baseline_kind="golden",
                expected_device=p.device, timed_together=False,
                tolerance=_tolerance(p.scenario.tolerance))
    ordered = [verdicts[p.scenario.id] for p in planned]
    policy = policy_for(config, opts.exact)
    idle = nothing_done(ordered, "compared")
    return Report(command="check", mode="golden", device=opts.device or config.device,
                  locks=[lock_info(r, "candidate") for r in locks], verdicts=ordered,
                  parity=parity({p.scenario.id: p.scenario for p in planned}, results),
                  notes=[idle] if idle else [], passed=gate_passes(ordered, policy) and not idle,
                  failing=[v.scenario for v in ordered if is_failure(v, policy)],
                  duration_s=time.perf_counter() - start)


def check_ab(config: Config, locks: list[LockRef], baseline: list[LockRef],
              scenarios: list[Scenario], opts: Options, progress: Progress) -> Report:
    start = time.perf_counter()
    kind = opts.env or config.env
    planned = plan(config, scenarios, locks, device=opts.device, steps=opts.steps,
                   local=kind == "local")
    envs = Environments(config, kind, progress)
    pairs = [(p, old) for p in planned if not p.skip_reason
             and (old := lock_for(p.scenario, baseline)) is not None]
    envs.expect([(ref, p.scenario.framework, p.device) for p, old in pairs
                 for ref in (old, p.lock)])
    # Baseline and candidate of one scenario run side by side, alternating, so that both see
    # the same machine load: their timing ratio is meaningful, absolute times are not.
    jobs = []
    for p, old in pairs:
        for _ in range(opts.repeat):
            jobs.append((envs.get(old, p.scenario.framework, p.device), _request(p, config)))
            jobs.append((envs.get(p.lock, p.scenario.framework, p.device), _request(p, config)))
    if jobs:
        _prewarm()
    runs = run_requests(jobs, progress) if jobs else []
    from lockguard.compare import (
        ScenarioVerdict, Verdict, compare_runs, gate_passes, is_failure, skipped,
    )
    from lockguard.report import Report

    verdicts: dict[str, ScenarioVerdict] = {}
    for p in planned:
        if p.skip_reason:
            verdicts[p.scenario.id] = skipped(p.scenario.id, p.scenario.framework, p.skip_reason)
        elif lock_for(p.scenario, baseline) is None:
            verdicts[p.scenario.id] = ScenarioVerdict(
                scenario=p.scenario.id, framework=p.scenario.framework, verdict=Verdict.new,
                reasons=[f"the baseline locks do not pin {p.scenario.framework}"])
    policy = policy_for(config, opts.exact)
    results: dict[str, RunResult] = {}
    for i, (p, _) in enumerate(pairs):
        mine = runs[i * 2 * opts.repeat:(i + 1) * 2 * opts.repeat]
        base, cand = mine[0::2], mine[1::2]
        results[p.scenario.id] = cand[0]
        verdicts[p.scenario.id] = compare_runs(
            base, cand, policy=policy, baseline_kind="lock", expected_device=p.device,
            timed_together=True, tolerance=_tolerance(p.scenario.tolerance))
    ordered = [verdicts[p.scenario.id] for p in planned]
    diffs = []
    for new in locks:
        old = next((b for b in baseline if b.lock.frameworks() & new.lock.frameworks()), None)
        if old is not None:
            diffs.append(diff_locks(old.lock, new.lock))
    idle = nothing_done(ordered, "compared")
    return Report(command="check", mode="ab", device=opts.device or config.device,
                  locks=[lock_info(r, "baseline") for r in baseline]
                  + [lock_info(r, "candidate") for r in locks],
                  lock_diffs=diffs, verdicts=ordered, notes=[idle] if idle else [],
                  parity=parity({p.scenario.id: p.scenario for p in planned}, results),
                  passed=gate_passes(ordered, policy) and not idle,
                  failing=[v.scenario for v in ordered if is_failure(v, policy)],
                  duration_s=time.perf_counter() - start)


def diff(old: LockRef, new: LockRef) -> Report:
    from lockguard.report import Report

    return Report(command="diff", mode="diff",
                  locks=[lock_info(old, "baseline"), lock_info(new, "candidate")],
                  lock_diffs=[diff_locks(old.lock, new.lock)])


# ------------------------------------------------------------------------------ proposals

def propose(config: Config, locks: list[LockRef], upgrades: list[str],
            scenarios: list[Scenario], opts: Options, *, resolver: str = "pip-tools",
            inputs: Path | None = None, progress: Progress = QUIET) -> Report:
    """Resolve the locks with `upgrades` into the cache and A/B-check them against the current
    locks. The user's files are only read."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    from lockguard import resolve
    from lockguard.cache import cache_dir
    from lockguard.config import ConfigError

    wanted: dict[str, str] = {}
    for spec in upgrades:
        try:
            wanted[spec] = canonicalize_name(Requirement(spec).name)
        except InvalidRequirement as exc:
            raise ConfigError(f"upgrade {spec!r}: {exc}") from None
    candidates, baseline, notes = [], [], []
    for ref in locks:
        mine = [spec for spec, name in wanted.items() if name in ref.lock.by_name]
        if not mine:
            continue
        source = inputs or ref.inputs or ref.path.with_suffix(".in")
        if not source.is_file():
            raise ConfigError(f"{source}: requirements input of {display_path(ref.path)} not "
                              "found (pass --inputs, or set `inputs` on the lock in config)")
        proposal = resolve.propose_lock(source, ref.path, mine, cache_dir(), resolver,
                                        progress=progress.info)
        notes.append(f"proposed lock for {display_path(ref.path)}: {proposal}")
        candidates.append(LockRef(proposal, read_lock(proposal), ref.device))
        baseline.append(ref)
    unpinned = [spec for spec, name in wanted.items()
                if not any(name in ref.lock.by_name for ref in locks)]
    if unpinned:
        raise ConfigError(f"no lock pins {', '.join(unpinned)}: propose upgrades what a lock pins")
    mine = [s for s in scenarios if lock_for(s, candidates) is not None]
    report = check(config, candidates, mine, opts, baseline, progress)
    return report.model_copy(update={"command": "propose", "notes": notes + report.notes})
