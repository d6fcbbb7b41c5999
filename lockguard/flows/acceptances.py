"""Acceptances committed with a change: how an intended upgrade passes the pull-request gate.

`lockguard accept` after an A/B check writes the candidate's run as the golden of its hardware
class, with an `Acceptance` that binds it to the change: the baseline lock's hash, the candidate
lock's (the provenance's `lock_hash`), the verdict, and a digest of the candidate's numbers
(`golden.result_digest`). An A/B check passes a failing verdict only when the checkout carries
such a golden for the scenario:

- the same baseline and candidate locks (a lock bumped again is another change: it fails again);
- the same verdict;
- the numbers this run produced: bitwise (the digest) on the hardware class it was accepted on;
  on another class, within the scenario's tolerance of the accepted numbers, since the low bits
  of one lock differ between CPU classes (if the numbers move beyond that, it fails again).

A golden is read only for a scenario that failed, so a passing check reads none.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from lockguard import golden
from lockguard.compare.verdicts import compare_runs, Accepted
from lockguard.files import display_path
from lockguard.golden import Golden, GoldenError, class_paths
from lockguard.hardware import hardware_class
from lockguard.names import Verdict

if TYPE_CHECKING:
    from lockguard.compare.tolerance import Policy, Tolerance
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.flows.pipeline import Planned
    from lockguard.results import RunResult


def accept_known(verdict: ScenarioVerdict, p: Planned, candidates: list[RunResult],
                 baseline_hash: str, candidate_hash: str, golden_dir: Path, policy: Policy,
                 tolerance: Tolerance | None) -> ScenarioVerdict:
    """`verdict`, marked accepted (and passing) when the checkout carries an acceptance of
    exactly this change; unchanged otherwise."""
    found = find(p, candidates, baseline_hash, candidate_hash, verdict.verdict, golden_dir,
                 policy, tolerance)
    if found is None:
        return verdict
    return verdict.model_copy(update={"accepted": found,
                                      "reasons": [found.sentence(), *verdict.reasons]})


def find(p: Planned, candidates: list[RunResult], baseline_hash: str, candidate_hash: str,
         verdict: Verdict, golden_dir: Path, policy: Policy,
         tolerance: Tolerance | None) -> Accepted | None:
    """The acceptance of this change that this run's numbers meet, or None."""
    if not candidates or not candidates[0].fingerprint:
        return None
    first = candidates[0]
    here = hardware_class(first.fingerprint, p.device, first.device_name)
    bound = [g for g in _goldens(golden_dir, p.device, p.scenario.id)
             if _binds(g, baseline_hash, candidate_hash, verdict)]
    # This run's own hardware class first: there the numbers must be the accepted ones, bit
    # for bit.
    bound.sort(key=lambda g: g.hardware.id != here.id)
    for gold in bound:
        acc = gold.provenance.acceptance
        assert acc is not None
        if gold.hardware.id == here.id:
            if all(golden.result_digest(c) == acc.result_digest for c in candidates):
                return _accepted(gold, "the candidate's numbers are the accepted ones, bit for "
                                       "bit")
            continue
        if _close(gold.result, candidates, p.device, policy, tolerance):
            return _accepted(gold, f"accepted on hardware class {gold.hardware.id}; this run on "
                                   f"{here.id} is within the scenario's tolerance of those "
                                   "numbers")
    return None


def _goldens(golden_dir: Path, device: str, scenario: str) -> list[Golden]:
    out = []
    try:
        paths = class_paths(golden_dir, device, scenario)
    except GoldenError:
        return []
    for path in paths:
        try:
            gold = golden.load(path)
        except GoldenError:
            continue  # an unusable file holds no acceptance; a golden check says why
        if gold is not None:
            out.append(gold)
    return out


def _binds(gold: Golden, baseline_hash: str, candidate_hash: str, verdict: Verdict) -> bool:
    acc = gold.provenance.acceptance
    return (acc is not None and acc.baseline_lock_hash == baseline_hash
            and gold.provenance.lock_hash == candidate_hash and acc.verdict == verdict.value
            and acc.result_digest is not None
            and golden.result_digest(gold.result) == acc.result_digest)


def _close(accepted: RunResult, candidates: list[RunResult], device: str, policy: Policy,
           tolerance: Tolerance | None) -> bool:
    same = compare_runs([accepted], candidates, policy=policy, baseline_kind="golden",
                        expected_device=device, timed_together=False, tolerance=tolerance)
    return same.verdict in (Verdict.identical, Verdict.within_tolerance)


def _accepted(gold: Golden, how: str) -> Accepted:
    acc = gold.provenance.acceptance
    assert acc is not None
    return Accepted(reason=acc.reason, author=acc.author, accepted_at=acc.accepted_at,
                    commit=gold.provenance.git_commit, golden=display_path(gold.path), how=how)
