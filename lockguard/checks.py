"""The record, check and diff flows: plan → run → compare → Report.

Each flow validates all of its input (locks, config, goldens) before it builds or runs anything,
so bad input fails in a second with nothing written. Goldens are written only at the end of a
record, each atomically.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard.config import Config, Options, ToleranceSetting, display_path
from lockguard.envs.base import RunRequest
from lockguard.files import writable_dir
from lockguard import golden
from lockguard.golden import Golden, GoldenError, class_paths, golden_path, legacy_path
from lockguard.hardware import HardwareClass, difference, hardware_class, host_class
from lockguard.locks import check_family_rules, diff_locks, framework_version
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status
from lockguard.runner import (
    Environments, LockRef, Planned, lock_for, plan, read_lock, run_requests,
)
from lockguard.scenarios import Scenario, harness_digest, inputs_digest

if TYPE_CHECKING:
    from lockguard.compare import HardwareChange, Policy, ScenarioVerdict, Tolerance
    from lockguard.report import Evidence
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


def fingerprint_diff(old: dict, new: dict, prefix: str = "") -> dict[str, list]:
    """The fingerprint keys whose values differ, dotted (`cpu.model`): [old, new]."""
    out: dict[str, list] = {}
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out.update(fingerprint_diff(a, b, f"{prefix}{key}."))
        elif a != b:
            out[f"{prefix}{key}"] = [a, b]
    return out


def evidence(scenario: str, baseline: tuple[str, str, RunResult] | None,
             candidate: tuple[str, str, RunResult] | None,
             digest: str | None = None) -> Evidence:
    """Both sides of a scenario's comparison, each given as (kind, name, result); `digest`:
    the candidate's inputs digest, which a golden `accept` adopts from it carries."""
    from lockguard.report import Evidence, Side

    def side(role: str, given: tuple[str, str, RunResult] | None) -> Side | None:
        if given is None:
            return None
        kind, name, result = given
        return Side(role=role, kind=kind, name=name, result=result)

    diff = (fingerprint_diff(baseline[2].fingerprint, candidate[2].fingerprint)
            if baseline and candidate else {})
    mine = side("candidate", candidate)
    if mine is not None:
        mine.inputs_digest = digest
    return Evidence(scenario=scenario, baseline=side("baseline", baseline),
                    candidate=mine, fingerprint_diff=diff)


def _request(p: Planned, config: Config) -> RunRequest:
    return RunRequest(scenario=p.scenario, steps=p.steps, seed=config.seed, device=p.device,
                      threads=config.threads, timeout=config.timeout)


def _digest(p: Planned, config: Config, harness: str, kind: str) -> str:
    return inputs_digest(p.scenario, lock_hash=p.lock.lock.lock_hash if p.lock else "local",
                         steps=p.steps, seed=config.seed, device=p.device,
                         threads=config.threads, harness=harness,
                         environment=_environment(config, kind))


def _environment(config: Config, kind: str) -> str:
    """The backend and interpreter a run's environment is built with: the part of the inputs a
    lock hash does not say."""
    if kind == "docker":
        return "docker"  # the image's Python comes from its recipe, which the lock pins
    from lockguard.envs.venv import interpreter_tag

    return f"{kind} {interpreter_tag(config.python_path or sys.executable)}"


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
    runnable = [p for p in planned if not p.skip_reason]
    hosts = _Hosts()
    notes: list[str] = []
    # Before anything runs: where the goldens go must be writable, and this class's old golden
    # may be corrupt or of an old schema (it is replaced: that is what the error told the user
    # to do), but it may not be a directory, which a golden file cannot replace.
    previous: dict[str, dict[str, Golden]] = {}
    for p in runnable:
        writable_dir(gdir / p.device, "the golden directory")
        host = hosts.get(p.device)
        if host is not None:
            target = golden_path(gdir, p.device, host.id, p.scenario.id)
            if os.path.isdir(target):
                raise GoldenError(f"{target}: is a directory, not a golden file; remove it")
        previous[p.scenario.id] = _previous_goldens(gdir, p, host, notes)
    envs = Environments(config, kind, progress)
    envs.expect([(p.lock, p.scenario.framework, p.device) for p in runnable])
    jobs = [(envs.get(p.lock, p.scenario.framework, p.device), _request(p, config))
            for p in runnable]
    _prewarm()
    results = run_requests(jobs, progress)
    from lockguard.compare import Verdict, skipped
    from lockguard.report import Report

    harness = harness_digest()
    commit = golden.git_commit(config.root)
    policy = policy_for(config, opts.exact)
    verdicts: list[ScenarioVerdict] = []
    proof: list[Evidence] = []
    to_write: list[tuple[Path, RunResult, golden.Provenance, HardwareClass]] = []
    crossed: dict[tuple[str, str], list[str]] = {}
    for p, (env, _), result in zip(runnable, jobs, results):
        digest = _digest(p, config, harness, kind)
        v, gold = _compare_with_goldens(p, [result], previous[p.scenario.id],
                                        hosts.get(p.device), digest, policy, crossed)
        verdicts.append(v)
        proof.append(_golden_evidence(p, gold, result, digest))
        if result.status != Status.ok or v.verdict == Verdict.device_fallback:
            continue  # a reference must be a healthy run on the intended device
        provenance = golden.Provenance(
            lock=display_path(p.lock.path) if p.lock else None, lock_hash=_lock_hash(p),
            inputs_digest=digest, framework_version=result.framework_version, env=env.label,
            git_commit=commit)
        cls = hardware_class(result.fingerprint, p.device, result.device_name)
        to_write.append((golden_path(gdir, p.device, cls.id, p.scenario.id), result,
                         provenance, cls))
    written = [path for path, result, provenance, cls in to_write
               if golden.write(path, result, provenance, cls)]
    if len(written) < len(to_write):
        notes.append(f"{len(to_write) - len(written)} of {len(to_write)} goldens unchanged "
                     "(same results and inputs): not rewritten")
    for path, result, provenance, cls in to_write:
        legacy = legacy_path(gdir, cls.device, result.scenario)
        if os.path.isfile(legacy) or os.path.islink(legacy):
            os.unlink(legacy)
            notes.append(f"removed {display_path(legacy)} (schema 1, no hardware class): "
                         f"replaced by {display_path(path)}")
    verdicts += [skipped(p.scenario.id, p.scenario.framework, p.skip_reason)
                 for p in planned if p.skip_reason]
    broken = [v for v in verdicts if v.verdict in (Verdict.broken, Verdict.device_fallback)]
    idle = nothing_done(verdicts, "recorded")
    return Report(command="record", mode="record", device=opts.device or config.device,
                  locks=[lock_info(r, "candidate") for r in locks], verdicts=verdicts,
                  evidence=proof, parity=parity({p.scenario.id: p.scenario for p in runnable},
                                {p.scenario.id: r for p, r in zip(runnable, results)}),
                  written=[str(path) for path in written], passed=not broken and not idle,
                  notes=([idle] if idle else []) + notes + _crossed_notes(crossed),
                  hardware=_hardware_of(hosts), failing=[v.scenario for v in broken],
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
    hosts = _Hosts()
    unchanged: dict[str, HardwareClass] = {}
    to_run: list[tuple[Planned, dict[str, Golden], str]] = []
    for p in planned:
        if p.skip_reason:
            continue
        sid, host, digest = p.scenario.id, hosts.get(p.device), _digest(p, config, harness, kind)
        mine = golden_path(gdir, p.device, host.id, sid) if host is not None else None
        # Every golden read here is verified (digest, shape, class): a bad one is an error
        # before anything runs.
        mine_gold = golden.load(mine) if mine is not None else None
        # `local` runs whatever is installed, which the lock does not pin: never answered
        # from provenance.
        if mine_gold is not None and host is not None and not opts.rerun \
                and opts.repeat == 1 and kind != "local" and _unchanged(mine_gold, p, digest):
            # Same lock, harness, scenario and settings as when recorded, on this hardware
            # class: the answer is known without importing a framework or building anything.
            unchanged[sid] = host
            continue
        goldens = ({host.id: mine_gold} if mine_gold is not None and host is not None
                   else _load_goldens(gdir, p))
        if not goldens:
            legacy = legacy_path(gdir, p.device, sid)
            if os.path.lexists(legacy):
                raise GoldenError(f"{legacy}: golden of schema 1 (recorded without a hardware "
                                  f"class); re-record it (`lockguard record --scenario {sid}`)")
            if not opts.allow_new:
                where = mine or golden_path(gdir, p.device, "<hardware class>", sid)
                raise GoldenError(f"{where}: no golden recorded for scenario {sid} on any "
                                  f"hardware (run `lockguard record --scenario {sid}` first)")
        to_run.append((p, goldens, digest))

    runs: list[RunResult] = []
    if to_run:
        envs = Environments(config, kind, progress)
        envs.expect([(p.lock, p.scenario.framework, p.device) for p, *_ in to_run])
        jobs = [(envs.get(p.lock, p.scenario.framework, p.device), _request(p, config))
                for p, _, _ in to_run for _ in range(opts.repeat)]
        _prewarm()
        runs = run_requests(jobs, progress)
    from lockguard.compare import ScenarioVerdict, Verdict, gate_passes, is_failure, skipped
    from lockguard.report import Report

    verdicts: dict[str, ScenarioVerdict] = {}
    for p in planned:
        if p.skip_reason:
            verdicts[p.scenario.id] = skipped(p.scenario.id, p.scenario.framework, p.skip_reason)
        elif p.scenario.id in unchanged:
            verdicts[p.scenario.id] = ScenarioVerdict(
                scenario=p.scenario.id, framework=p.scenario.framework,
                verdict=Verdict.identical, baseline_kind="golden",
                reasons=["lock and scenario unchanged since the golden was recorded on this "
                         f"hardware class ({unchanged[p.scenario.id].id}); not re-run "
                         "(--rerun runs it)"])
    results: dict[str, RunResult] = {}
    policy = policy_for(config, opts.exact)
    crossed: dict[tuple[str, str], list[str]] = {}
    proof: list[Evidence] = []
    for i, (p, goldens, digest) in enumerate(to_run):
        mine_runs = runs[i * opts.repeat:(i + 1) * opts.repeat]
        results[p.scenario.id] = mine_runs[0]
        verdicts[p.scenario.id], gold = _compare_with_goldens(
            p, mine_runs, goldens, hosts.get(p.device), digest, policy, crossed)
        proof.append(_golden_evidence(p, gold, mine_runs[0], digest))
    ordered = [verdicts[p.scenario.id] for p in planned]
    idle = nothing_done(ordered, "compared")
    return Report(command="check", mode="golden", device=opts.device or config.device,
                  locks=[lock_info(r, "candidate") for r in locks], verdicts=ordered,
                  evidence=proof,
                  parity=parity({p.scenario.id: p.scenario for p in planned}, results),
                  notes=([idle] if idle else []) + _crossed_notes(crossed),
                  hardware=_hardware_of(hosts),
                  passed=gate_passes(ordered, policy) and not idle,
                  failing=[v.scenario for v in ordered if is_failure(v, policy)],
                  duration_s=time.perf_counter() - start)


# ------------------------------------------------------------------------ hardware classes

class _Hosts:
    """This machine's hardware class per device, read once (None where it cannot be read
    cheaply: a TPU, a GPU whose driver /proc/driver/nvidia does not show)."""

    def __init__(self) -> None:
        self._known: dict[str, HardwareClass | None] = {}

    def get(self, device: str) -> HardwareClass | None:
        if device not in self._known:
            self._known[device] = host_class(device)
        return self._known[device]

    def known(self) -> dict[str, HardwareClass]:
        return {d: c for d, c in self._known.items() if c is not None}


def _hardware_of(hosts: _Hosts) -> dict[str, dict]:
    return {device: cls.to_json() for device, cls in hosts.known().items()}


def _lock_name(p: Planned) -> str:
    if p.lock is None:
        return "local"
    return p.lock.label or display_path(p.lock.path)


def _golden_evidence(p: Planned, gold: Golden | None, result: RunResult,
                     digest: str) -> Evidence:
    baseline = (("golden", f"{display_path(gold.path)} ({gold.hardware.id})", gold.result)
                if gold is not None else None)
    return evidence(p.scenario.id, baseline, ("lock", _lock_name(p), result), digest)


def _lock_hash(p: Planned) -> str:
    return p.lock.lock.lock_hash if p.lock else "local"


def _unchanged(gold: Golden, p: Planned, digest: str) -> bool:
    """Whether a verified golden of this machine's class answers for `p` without a run."""
    result = gold.result
    return (gold.provenance.inputs_digest == digest and result.scenario == p.scenario.id
            and result.steps == p.steps and result.device == p.device)


def _load_goldens(gdir: Path, p: Planned) -> dict[str, Golden]:
    """Every hardware class's golden of `p`, each verified."""
    out = {}
    for path in class_paths(gdir, p.device, p.scenario.id):
        gold = golden.load(path)
        if gold is not None:
            out[gold.hardware.id] = gold
    return out


def _previous_goldens(gdir: Path, p: Planned, host: HardwareClass | None,
                      notes: list[str]) -> dict[str, Golden]:
    """What `record` compares a new run with: every readable golden of `p`. An unusable one is
    set aside with a note; this class's is then replaced, another class's is left alone."""
    out = {}
    for path in class_paths(gdir, p.device, p.scenario.id):
        try:
            gold = golden.load(path)
        except GoldenError as exc:
            mine = host is not None and path.parent.name == host.id
            notes.append(("replacing " if mine else "ignoring another hardware class's ")
                         + f"unusable golden: {exc}")
            continue
        if gold is not None:
            out[gold.hardware.id] = gold
    return out


def _compare_with_goldens(p: Planned, runs: list[RunResult], goldens: dict[str, Golden],
                          host: HardwareClass | None, digest: str, policy: Policy,
                          crossed: dict[tuple[str, str], list[str]]
                          ) -> tuple[ScenarioVerdict, Golden | None]:
    """The verdict of `runs` against the golden of their own hardware class, or, when there is
    none, against another class's golden, with the hardware change for compare_runs to judge."""
    from lockguard.compare import compare_runs

    here = (hardware_class(runs[0].fingerprint, p.device, runs[0].device_name)
            if runs[0].fingerprint else host)
    gold = goldens.get(here.id) if here is not None else None
    change: HardwareChange | None = None
    if gold is None and goldens:
        gold = _closest(list(goldens.values()), here, digest)
        change = _change(gold, here, digest, _lock_hash(p))
        crossed.setdefault((change.golden, change.current), []).append(p.scenario.id)
    verdict = compare_runs([gold.result] if gold else [], runs, policy=policy,
                           baseline_kind="golden", expected_device=p.device,
                           timed_together=False, tolerance=_tolerance(p.scenario.tolerance),
                           hardware=change)
    return verdict, gold


def _closest(goldens: list[Golden], here: HardwareClass | None, digest: str) -> Golden:
    """The other class's golden that says most: recorded from the same inputs, on the same CPU
    vendor, most recently (then by class id, so the choice is stable)."""
    vendor = here.id.split("-", 1)[0] if here is not None else None
    ordered = sorted(goldens, key=lambda g: g.hardware.id)
    ordered.sort(key=lambda g: g.provenance.recorded_at or "", reverse=True)
    ordered.sort(key=lambda g: (g.provenance.inputs_digest != digest,
                                g.hardware.id.split("-", 1)[0] != vendor))
    return ordered[0]


def _change(gold: Golden, here: HardwareClass | None, digest: str,
            lock_hash: str) -> HardwareChange:
    from lockguard.compare import HardwareChange

    return HardwareChange(
        golden=gold.hardware.describe(),
        current=here.describe() if here is not None else "this machine (hardware class unknown)",
        same_inputs=gold.provenance.inputs_digest == digest,
        lock_changed=gold.provenance.lock_hash != lock_hash,
        detail=difference(gold.hardware, here) if here is not None else None)


def _crossed_notes(crossed: dict[tuple[str, str], list[str]]) -> list[str]:
    return [f"goldens of {', '.join(sids)} were recorded on {old}; this machine is {new}: "
            "`lockguard record` adds goldens for this hardware class beside them"
            for (old, new), sids in crossed.items()]


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
    proof: list[Evidence] = []
    harness = harness_digest()
    for i, (p, old) in enumerate(pairs):
        mine = runs[i * 2 * opts.repeat:(i + 1) * 2 * opts.repeat]
        base, cand = mine[0::2], mine[1::2]
        results[p.scenario.id] = cand[0]
        proof.append(evidence(p.scenario.id,
                              ("lock", old.label or display_path(old.path), base[0]),
                              ("lock", _lock_name(p), cand[0]),
                              _digest(p, config, harness, kind)))
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
                  lock_diffs=diffs, verdicts=ordered, evidence=proof,
                  notes=[idle] if idle else [],
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
