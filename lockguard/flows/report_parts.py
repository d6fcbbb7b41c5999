"""What every flow puts into its Report beside the verdicts: the gate policy from config, lock
descriptions, the family-rule report, cross-framework parity, evidence, the "nothing ran" rule."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lockguard.config import Config, ToleranceSetting
from lockguard.files import display_path
from lockguard.locks.families import framework_version
from lockguard.locks.rules import check_family_rules
from lockguard.results import RunResult, Status
from lockguard.scenarios import Scenario

if TYPE_CHECKING:
    from lockguard.compare.tolerance import Policy, Tolerance
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.locks.ref import LockRef
    from lockguard.report import Evidence, LockInfo, ParityRow, Report

# compare and report (pydantic models, rich) are imported where used, and warmed up in the
# background while training runs (pipeline._prewarm).


def tolerance_of(setting: ToleranceSetting | None) -> Tolerance | None:
    from lockguard.compare.tolerance import Tolerance

    if setting is None:
        return None
    if setting == "exact":
        return Tolerance(rtol=0.0, atol=0.0, exact=True)
    return setting  # already a Tolerance: config validated it


def policy_for(config: Config, exact: bool = False) -> Policy:
    from lockguard.compare.tolerance import DEFAULT_FAIL_ON, Policy
    from lockguard.names import Verdict

    fail_on = (frozenset(Verdict(v) for v in config.fail_on) if config.fail_on is not None
               else DEFAULT_FAIL_ON)
    return Policy(exact=exact or config.tolerance == "exact",
                  tolerance=tolerance_of(config.tolerance), fail_on=fail_on,
                  slower_ratio=config.slower_ratio, slower_min_step_s=config.slower_min_step_s,
                  heavier_ratio=config.heavier_ratio, heavier_min_bytes=config.heavier_min_bytes,
                  fail_on_improvement=config.fail_on_improvement)


def lock_info(ref: LockRef, role: str) -> LockInfo:
    from lockguard.report import LockInfo

    frameworks = sorted(ref.lock.frameworks())
    versions = {f: v for f in frameworks if (v := framework_version(ref.lock, f))}
    lock = ref.lock
    return LockInfo(path=display_path(ref.path), lock_hash=lock.lock_hash, role=role,
                    frameworks=frameworks, versions=versions, source=lock.source,
                    label=ref.label,
                    format=lock.format if lock.format != "requirements.txt" else None,
                    environment=lock.environment, left_out=lock.left_out)


def trust_notes(config: Config, locks: list[LockRef]) -> list[str]:
    """The warnings every report of a run carries for a lock let through by an opt-in
    (allow_unhashed, allow_insecure_index; locks/trust.py)."""
    from lockguard.locks.trust import warnings

    return [w for ref in locks
            for w in warnings(ref.lock, ref.name, allow_unhashed=config.allow_unhashed,
                              allow_insecure_index=config.allow_insecure_index)]


def family_rule_report(command: str, locks: list[LockRef]) -> Report | None:
    """A failing report when a lock breaks a framework family rule, before anything is built:
    a mismatched torch/torchvision pair is known in a second, not after a 20-minute build."""
    broken = [(ref, v) for ref in locks for v in check_family_rules(ref.lock)]
    if not broken:
        return None
    from lockguard.report import Report, RuleFailure

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
        rows.append(ParityRow(family=family if dtype == "float32" else f"{family} ({dtype})",
                              step0=step0, max_rel_spread=relative_spread(list(step0.values()))))
    return rows


def relative_spread(values: list[float]) -> float:
    """How far values that should agree spread: (max - min) / |first|."""
    return (max(values) - min(values)) / (abs(values[0]) or 1.0)


def nothing_done(verdicts: list[ScenarioVerdict], what: str) -> str | None:
    """Why a record or check that ran no scenario must not pass: a gate passes only what it
    compared. None when something ran."""
    from lockguard.names import Verdict

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
    from lockguard.report import Evidence, Side

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
