"""What every flow puts into its Report beside the verdicts: lock descriptions, the family-rule
report, cross-framework parity, evidence, the "nothing ran" rule, and `report_for`, the one place
a flow that ran scenarios turns its outcome into a Report."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lockguard import integrity
from lockguard.compare.verdicts import gate_passes, is_failure
from lockguard.envs.installed import dist_facts
from lockguard.envs.wheels import (
    ANY_GLIBC, Platform, holds_here, holds_on, host_arch, lock_wheels,
)
from lockguard.files import display_path
from lockguard.fleet import (
    Finding, Machine, change_text, grouped, judge_changes, listed, stack_line,
)
from lockguard.locks.families import framework_version, package_families
from lockguard.locks.diff import Change, LockDiff
from lockguard.locks.rules import check_family_rules
from lockguard.locks.trust import warnings
from lockguard.locks.model import Lock, Pin
from lockguard.names import Verdict
from lockguard.progress import QUIET, Progress
from lockguard.report import LockInfo, Report, RuleFailure, ParityRow, Evidence, Side
from lockguard.results import RunResult, Status
from lockguard.scenarios import Scenario

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.flows.pipeline import Outcome
    from lockguard.locks.ref import LockRef
    from lockguard.settings import Settings

# compare and report (pydantic models, rich) are imported where used: not on the way to a
# check that runs nothing (before any training, pipeline._hold_the_judge imports them).


def lock_info(ref: LockRef, role: str) -> LockInfo:
    """How a report names a lock it read: `role` is "baseline" or "candidate"; the format is
    left out for a requirements.txt, the default."""
    frameworks = sorted(ref.lock.frameworks())
    versions = {f: v for f in frameworks if (v := framework_version(ref.lock, f))}
    lock = ref.lock
    return LockInfo(path=display_path(ref.path), lock_hash=lock.lock_hash, role=role,
                    frameworks=frameworks, versions=versions, source=lock.source,
                    label=ref.label,
                    format=lock.format if lock.format != "requirements.txt" else None,
                    environment=lock.environment, left_out=lock.left_out)


def trust_notes(settings: Settings, locks: Sequence[LockRef]) -> list[str]:
    """The warnings every report of a run carries for a lock let through by an opt-in
    (allow_unhashed, allow_insecure_index; locks/trust.py)."""
    return [w for ref in locks
            for w in warnings(ref.lock, ref.name, allow_unhashed=settings.allow_unhashed,
                              allow_insecure_index=settings.allow_insecure_index)]


def cuda_notes(settings: Settings, locks: Sequence[LockRef]) -> list[str]:
    """For a cpu gate, a line per lock that pins torch's CUDA build (what PyPI serves by
    default): what it costs and how to lock the CPU build instead (docs/ci.md)."""
    if settings.report_device != "cpu":
        return []
    out = []
    for name, lock in {ref.name: ref.lock for ref in locks}.items():
        cuda = [p for p in lock.pins if "cuda" in package_families(p.name)]
        if cuda and lock.pin("torch") is not None:
            out.append(f"{name} pins torch's CUDA build ({len(cuda)} CUDA wheels, gigabytes "
                       "an environment in the cache) for a cpu gate: lock the CPU build "
                       "(`uv pip compile --torch-backend cpu`, or `--extra-index-url "
                       "https://download.pytorch.org/whl/cpu` in its requirements input)")
    return out


def fleet_parts(machines: Sequence[Machine], diffs: Sequence[LockDiff],
                locks: Sequence[LockRef] = (), progress: Progress = QUIET
                ) -> tuple[list[RuleFailure], list[str]]:
    """The lock changes of `diffs` judged against the fleet (fleet.py), the one way diff, check
    and propose judge it: each change that breaks a fleet entry is a rule failure of the
    candidate lock ("fleet-<entry>": it fails the gate whenever a fleet is configured), a
    PTX-only coverage is a note. Each machine is judged by the wheels it installs: the pins
    whose markers hold on its platform (platform_of), read where they are provably the lock's
    (envs/wheels.py: by its hashes, never by name and version alone, and by the tags of the
    machine's platform) or downloaded for that platform, hash-checked; a wheel that cannot be
    had or read fails closed (rule "fleet", naming it and the machines).
    `locks`: both sides' LockRefs (a diff finds its locks by their hashes); a failure names
    its lock as the report does (a checkout's temporary path under check --base is not what
    the user knows)."""
    if not machines:
        return [], []
    failures, notes = [], []
    shown = {ref.lock.source: display_path(ref.path) for ref in locks}
    by_hash = {ref.lock.lock_hash: ref.lock for ref in locks}
    platforms = {m.name: platform_of(m) for m in machines}
    for diff in diffs:
        new_lock, old_lock = by_hash.get(diff.new_lock_hash), by_hash.get(diff.old_lock_hash)
        if new_lock is None:  # every flow passes the LockRefs of the diffs it judges
            raise AssertionError(f"fleet_parts: the candidate of a lock diff "
                                 f"({diff.new_source}) is not among the run's locks")
        where = shown.get(diff.new_source, diff.new_source)
        # The frameworks first: a line names torch before the dozen nvidia-* wheels it pulls.
        changes = sorted((c for c in diff.changed if c.new_version and c.kind in
                          ("added", "upgraded", "downgraded", "rehashed")),
                         key=lambda c: "cuda" in c.families)
        pairs = [(c, p) for c in changes if (p := _pin(new_lock, c.name, c.marker))]
        findings, unread = _judge_on_each(pairs, new_lock, old_lock, machines, platforms,
                                          progress)
        for f, message in grouped(findings):
            if f.broken:
                failures.append(RuleFailure(lock=where, rule=f"fleet-{f.machine}",
                                            message=message))
            else:
                notes.append(f"fleet: {message}")
        failures += [RuleFailure(lock=where, rule="fleet", message=m) for m in unread]
        notes += [f"fleet: {p.display_name} {p.version} not judged against the fleet: its "
                  "marker holds on no fleet machine" for _, p in pairs
                  if not any(holds_on(p, platforms[m.name]) for m in machines)]
        stack = stack_line((p.name, p.version) for p in new_lock.pins
                           if any(holds_on(p, platforms[m.name]) for m in machines))
        if stack and any("cuda" in c.families for c in changes):
            notes.append(f"fleet: the CUDA stack of {where}: {stack}")
    return failures, notes


def platform_of(machine: Machine) -> Platform:
    """The platform a fleet machine installs wheels for: its `cpu`'s architecture (aarch64,
    or x86_64 for an x86-64 level; this machine's where the fleet does not say), its `python`
    (this interpreter's where not said), its `glibc` (any where not said)."""
    arch = machine.arch or host_arch()
    python = machine.python or sys.version_info[:2]
    return Platform(arch, f"{python[0]}.{python[1]}", machine.glibc or ANY_GLIBC)


def _judge_on_each(pairs: Sequence[tuple[Change, Pin]], new_lock: Lock, old_lock: Lock | None,
                   machines: Sequence[Machine], platforms: dict[str, Platform],
                   progress: Progress) -> tuple[list[Finding], list[str]]:
    """The changes (with the candidate's pins) judged on each machine by the files of the
    wheels it installs; and a line per set of changes not judged (no wheel, unread files),
    naming the machines. A machine of this machine's architecture and Python reads the files
    found or fetched for this interpreter; another architecture or Python (a release may ship
    no wheel for it, or one built otherwise), or a pin whose marker holds there and not here,
    reads that platform's."""
    here = (host_arch(), f"{sys.version_info[0]}.{sys.version_info[1]}") \
        if sys.platform == "linux" else None
    wanted: dict[Platform | None, dict[str, tuple[Change, Pin]]] = {}
    chosen: dict[str, list[tuple[Change, Platform | None]]] = {}
    for machine in machines:
        platform = platforms[machine.name]
        for c, p in pairs:
            if holds_on(p, platform):
                source = None if (platform.arch, platform.python) == here and holds_here(p) \
                    else platform
                wanted.setdefault(source, {})[c.name] = (c, p)
                chosen.setdefault(machine.name, []).append((c, source))
    facts = {}  # (source, name) -> (old Facts | None, new Facts | None, why not had)
    for source, changed in wanted.items():
        pins = [p for _, p in changed.values()]
        old_pins = [p for c, _ in changed.values()
                    if old_lock and (p := _pin(old_lock, c.name, c.marker))]
        new_files, why = lock_wheels(new_lock, pins, fetch=True, progress=progress,
                                     platform=source)
        old_files = lock_wheels(old_lock, old_pins, platform=source)[0] if old_lock else {}
        for name in changed:
            facts[source, name] = (dist_facts(old_files[name]) if name in old_files else None,
                                   dist_facts(new_files[name]) if name in new_files else None,
                                   why)
    findings, missing = [], {}
    for machine in machines:
        on = chosen.get(machine.name, [])
        found, unread = judge_changes([(_what(c), *facts[s, c.name][:2]) for c, s in on],
                                      [machine])
        findings += found
        whys = {_what(c): facts[s, c.name][2] for c, s in on}
        for what, why in unread:
            missing.setdefault((why or whys[what] or "its wheel could not be had"), {}
                               ).setdefault(what, []).append(machine.name)
    return findings, [_unread_line(why, changes) for why, changes in missing.items()]


def _unread_line(why: str, changes: dict[str, list[str]]) -> str:
    """The rule failure's message for changes not judged for one reason: the changes (the
    first four), the machines, the reason."""
    machines = sorted({m for ms in changes.values() for m in ms})
    return (f"{listed(list(changes))} not judged against the fleet (for "
            f"{', '.join(machines)}): {why} (a wheel lockguard cannot read fails closed)")


def _what(change: Change) -> str:
    """A change as a fleet finding names it (fleet.change_text)."""
    return change_text(change.display_name, change.old_version, change.new_version or "",
                       rehashed=change.kind == "rehashed")


def _pin(lock: Lock, name: str, marker: str | None) -> Pin | None:
    """The pin of `name` under `marker` in `lock` (markers split a package into several)."""
    return next((p for p in lock.by_name.get(name, ()) if p.marker == marker), None)


def report_for(settings: Settings, outcome: Outcome, *, command: str, mode: str,
               locks: Sequence[LockRef], started: float, baseline: Sequence[LockRef] = (),
               done: str = "compared", notes: Sequence[str] = (),
               failing: Sequence[ScenarioVerdict] | None = None, with_parity: bool = True,
               validate: bool = True, progress: Progress = QUIET, **fields: Any) -> Report:
    """The Report that ends a flow which ran scenarios through the pipeline: headed with the
    settings' device, the locks (`baseline` ones first) and the outcome's verdicts and
    evidence; its notes are "nothing was `done`" when nothing ran, then `notes`, then the
    trust warnings of every lock. It passes when the gate's policy passes every verdict and
    something ran; `failing` (the verdicts that fail it, when the flow decides that itself,
    as record does) replaces the policy's judgement. `with_parity`: with the cross-framework
    step-0 rows; `validate`: False builds a report made only of lockguard's own values
    without the model validator (an unrun golden answer); `progress`: where the fleet's
    downloads show. Other Report fields come as `fields`."""
    integrity.verify()  # the judge that ran is the one that started (exit 2 otherwise)
    verdicts = outcome.verdicts
    idle = nothing_done(verdicts, done)
    if failing is None:
        passed = gate_passes(verdicts, settings.policy) and not idle
        failing = [v for v in verdicts if is_failure(v, settings.policy)]
    else:
        passed = not failing and not idle
    if with_parity:
        fields["parity"] = parity({p.scenario.id: p.scenario for p in outcome.planned},
                                  outcome.results)
    broken, fleet_notes = fleet_parts(settings.config.fleet_machines(),
                                      fields.get("lock_diffs", ()), [*baseline, *locks],
                                      progress)
    if broken:  # the change breaks a fleet machine: whatever the trainings here said
        fields["rule_failures"] = [*fields.get("rule_failures", []), *broken]
        passed = False
    notes = [*notes, *fleet_notes]
    build = Report if validate else Report.model_construct
    return build(command=command, mode=mode, device=settings.report_device,
                 locks=[lock_info(r, "baseline") for r in baseline]
                 + [lock_info(r, "candidate") for r in locks],
                 verdicts=verdicts, evidence=outcome.evidence, sandbox=outcome.sandbox,
                 notes=([idle] if idle else []) + list(notes)
                 + trust_notes(settings, [*baseline, *locks]) + cuda_notes(settings, locks),
                 passed=passed, failing=[v.scenario for v in failing],
                 duration_s=time.perf_counter() - started, **fields)


def family_rule_report(command: str, locks: list[LockRef]) -> Report | None:
    """A failing report when a lock breaks a framework family rule, before anything is built:
    a mismatched torch/torchvision pair is known in a second, not after a 20-minute build."""
    broken = [(ref, v) for ref in locks for v in check_family_rules(ref.lock)]
    if not broken:
        return None

    mode = {"check": "golden", "compare-frameworks": "frameworks"}.get(command, "record")
    return Report(command=command, mode=mode,
                  locks=[lock_info(r, "candidate") for r in locks], passed=False,
                  rule_failures=[RuleFailure(lock=display_path(ref.path), rule=v.rule,
                                             message=v.message, lines=list(v.lines))
                                 for ref, v in broken])


def parity(scenarios: dict[str, Scenario], results: dict[str, RunResult]) -> list[ParityRow]:
    """Step-0 loss per family and dtype across frameworks, from the candidate runs of this check.

    Scenarios of one family start from the same data and weights, so their first loss should
    agree to float rounding in every framework: a harness bug shows up here first. Optimisers
    differ by design only from step 1 on, so only step 0 is compared.
    """
    groups: dict[tuple[str, str], dict[str, float]] = {}
    for sid, r in results.items():
        sc = scenarios[sid]
        if sc.family and r.status == Status.ok and r.losses:
            groups.setdefault((sc.family, sc.dtype), {})[sid] = r.losses[0]
    rows = []
    for (family, dtype), step0 in groups.items():
        if len({scenarios[s].framework for s in step0}) < 2:
            continue
        rows.append(ParityRow(family=family if dtype == "float32" else f"{family} ({dtype})",
                              step0=step0, max_rel_spread=relative_spread(list(step0.values()))))
    return rows


def relative_spread(values: list[float]) -> float:
    """How far values that should agree spread: (max - min) / |first|."""
    return (max(values) - min(values)) / (abs(values[0]) or 1.0)


def nothing_done(verdicts: list[ScenarioVerdict], what: str) -> str | None:
    """Why a record or check that ran no scenario must not pass: a gate passes only what it
    compared. None when something ran."""
    if any(v.verdict != Verdict.skipped for v in verdicts):
        return None
    reasons = sorted({r for v in verdicts for r in v.reasons})
    return (f"nothing was {what}: " + (f"all {len(verdicts)} selected scenarios were skipped ("
            + "; ".join(reasons) + ")" if verdicts else "no scenario was selected"))


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
    def side(role: str, given: tuple[str, str, RunResult] | None,
             digest: str | None = None) -> Side | None:
        if given is None:
            return None
        kind, name, result = given
        return Side(role=role, kind=kind, name=name, result=result, inputs_digest=digest)

    diff = (fingerprint_diff(baseline[2].fingerprint, candidate[2].fingerprint)
            if baseline and candidate else {})
    return Evidence(scenario=scenario, baseline=side("baseline", baseline),
                    candidate=side("candidate", candidate, digest), fingerprint_diff=diff)
