"""`lockguard accept`: adopt a check's candidate results as goldens, on purpose, saying why.

Nothing in lockguard re-baselines by itself: a check that drifted keeps failing until someone
accepts the change. `accept` reads the last check's report (its artefacts, lockguard/evidence.py,
or a report named with --from), shows per scenario what will change, and writes the candidate
runs as goldens of their hardware class, with the reason, the author, the commit, the lock and
the report in the golden's provenance (golden.Acceptance). Only healthy runs become goldens: a
crashed, NaN, invalid, nondeterministic or device-fallback candidate is refused, naming why.

A golden adopted here carries the candidate's inputs digest, so the next `check` of the same
lock answers from it without a run, as after a `record`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from lockguard import evidence, gitref, golden
from lockguard.config import Config
from lockguard.errors import LockguardError, one_line, tail
from lockguard.files import display_path
from lockguard.golden import Acceptance, GoldenError, Provenance
from lockguard.hardware import HardwareClass, hardware_class
from lockguard.locks.parser import parse_lock
from lockguard.names import Verdict
from lockguard.report import Report
from lockguard.results import RunResult, Status, verify
from lockguard.settings import Settings


class AcceptError(LockguardError):
    """What `accept` refuses to adopt, or cannot find; nothing is written."""


@dataclass(frozen=True)
class Adoption:
    """One scenario's candidate run, about to become the golden at `path`."""

    scenario: str
    framework: str
    verdict: str
    reasons: list[str]
    path: Path
    hardware: HardwareClass
    result: RunResult
    provenance: Provenance
    replaces: str  # what is at `path` now, for people


def report_path(given: Path | None, root: Path) -> Path:
    """The report to accept from: --from (an artefact directory or a JSON report), else the
    project's last check."""
    if given is None:
        return evidence.last_check(root) / "report.json"
    return given / "report.json" if given.is_dir() else given


def plan(report: Report, source: Path, settings: Settings, names: list[str], reason: str,
         author: str, verified: bool = False) -> tuple[list[Adoption], list[str]]:
    """What accepting `names` (default: every compared scenario that did not come out
    identical) from `report` writes, and notes; AcceptError for anything that cannot be
    adopted, before anything is written. `verified`: the report is what a check of this
    project wrote here (`vouched`); otherwise its goldens are adopted as unverified."""
    if report.command != "check":
        hint = {"propose": "a proposal's lock lives in lockguard's cache: write it to your "
                           "project (lockguard lock -P ...), check it, then accept",
                "record": "its results are already goldens"}.get(report.command, "")
        raise AcceptError(f"{source}: a `{report.command}` report, not a check's"
                          + (f" ({hint})" if hint else ""))
    chosen = _select(report, source, names)
    if not chosen:
        return [], [f"nothing to accept: every scenario {source} compared came out identical"]
    notes: list[str] = []
    if not verified:
        notes.append(f"{source} was not written by a check of this project on this machine "
                     "(downloaded artefacts?): its goldens are adopted as unverified — no check "
                     "answers from them without running the scenario and comparing, and an "
                     "acceptance passes a pull request only for the numbers its own run "
                     "produces")
    gdir, root = settings.golden_dir, settings.config.root
    commit = gitref.head_commit(root)
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    checked_locks: dict[str, str | None] = {}
    out = []
    for verdict in chosen:
        sid = verdict.scenario
        ev = report.evidence_of(sid)
        side = ev.candidate if ev is not None else None
        if side is None:
            raise AcceptError(f"scenario {sid}: {source} holds no run of it (the check answered "
                              "it from its golden, or skipped it): nothing to adopt")
        result = side.result
        device = verdict.expected_device or result.device or "cpu"
        problem = _unhealthy(verdict.verdict, verdict.nondeterministic, result, device)
        if problem:
            raise AcceptError(f"scenario {sid}: {problem}; a golden must be a healthy run on "
                              f"its device (leave it out with --scenario, or fix it and check "
                              "again); nothing written")
        lock = report.lock_of(verdict)
        if lock is not None and lock.label is None and lock.path not in checked_locks:
            checked_locks[lock.path] = _lock_moved(lock.path, lock.lock_hash, root)
        if lock is not None and checked_locks.get(lock.path):
            raise AcceptError(f"scenario {sid}: {checked_locks[lock.path]}; run `lockguard "
                              "check` again and accept that")
        cls = hardware_class(result.fingerprint, device, result.device_name)
        path = golden.golden_path(gdir, device, cls.id, sid)
        _replaceable(path, sid)
        # An A/B check: bound to both locks, so that `check --base` passes this change, and
        # only this one (lockguard/flows/acceptances.py).
        old_lock = report.lock_of(verdict, "baseline") if report.mode == "ab" else None
        provenance = Provenance(
            lock=lock.path if lock else None, lock_label=lock.label if lock else None,
            lock_hash=lock.lock_hash if lock else None, inputs_digest=side.inputs_digest,
            framework_version=result.framework_version, git_commit=commit,
            acceptance=Acceptance(reason=reason, author=author, accepted_at=now,
                                  report_id=report.id, verdict=verdict.verdict.value,
                                  baseline=ev.baseline.name if ev.baseline else None,
                                  baseline_lock_hash=old_lock.lock_hash if old_lock else None,
                                  result_digest=golden.result_digest(result),
                                  verified=verified))
        if side.inputs_digest is None:
            notes.append(f"{sid}: the report does not say the run's inputs digest (an older "
                         "lockguard wrote it): the next check runs it once")
        out.append(Adoption(sid, verdict.framework, verdict.verdict.value, verdict.reasons,
                            path, cls, result, provenance, _current(path)))
    return out, notes


def vouched(report: Report, source: Path, config: Config) -> bool:
    """Whether the report is what a check of this project wrote on this machine (the digest
    it recorded outside the artefacts, lockguard/evidence.py); AcceptError when it was
    changed since. False for a report this machine never wrote (a CI download)."""
    try:
        data = source.read_bytes()
    except OSError as exc:
        raise AcceptError(f"{source}: cannot read: {exc.strerror or exc}") from None
    vouched = evidence.vouched(config.root, report.id, data)
    if vouched is False:
        raise AcceptError(f"{source}: changed since check {report.id} wrote it (its digest, kept "
                          "in lockguard's cache, does not match): not what a run produced; "
                          "nothing written")
    return bool(vouched)


def _select(report: Report, source: Path, names: list[str]):
    compared = report.compared
    if not names:
        return [v for v in compared
                if v.verdict not in (Verdict.identical, Verdict.unchanged) or report.fails(v)]
    known = {v.scenario: v for v in report.verdicts}
    chosen = {}
    for name in names:
        # An id, or a prefix such as "torch" (as --scenario everywhere else).
        matches = [v for sid, v in known.items() if sid == name or sid.startswith(name + ".")]
        if not matches:
            raise AcceptError(f"--scenario {one_line(repr(name), 80)}: not in {source} (it has "
                              f"{', '.join(known) or 'no scenarios'})")
        for v in matches:
            if v.verdict == Verdict.skipped:
                raise AcceptError(f"scenario {v.scenario}: skipped in {source} "
                                  f"({'; '.join(v.reasons) or 'not run'}): nothing to adopt")
            chosen[v.scenario] = v
    return list(chosen.values())


def _unhealthy(verdict: Verdict, nondeterministic: bool, result: RunResult,
               device: str) -> str | None:
    if result.status != Status.ok:
        return (f"its run is {result.status.value}"
                + (f" ({one_line(tail(result.error, 1), 200)})" if result.error else ""))
    checked = verify(result, scenario=result.scenario, framework=result.framework,
                     steps=result.steps)
    if checked.status != Status.ok:
        return f"its run is unusable: {checked.error}"
    if verdict == Verdict.device_fallback or result.device != device:
        return f"it ran on {result.device or 'an unknown device'}, not on {device}"
    if verdict == Verdict.broken:
        return "its verdict is broken"
    if nondeterministic:
        return "its repeated runs disagreed with each other (nondeterministic)"
    return None


def _lock_moved(shown: str, lock_hash: str, root: Path) -> str | None:
    """Why the lock a check ran from is no longer the lock on disk, or None (also when it
    cannot be found: the report's path is relative to where the check ran)."""
    for path in (Path(shown), root / shown):
        if path.is_file():
            if parse_lock(path).lock_hash != lock_hash:
                return f"{display_path(path)} changed since the check ran"
            return None
    return None


def _replaceable(path: Path, sid: str) -> None:
    """Refuse, before anything is written, a golden path that a file cannot take, and a golden
    that one adopted run would make poorer: a noise envelope recorded from repeated runs."""
    if path.is_dir():
        raise AcceptError(f"{path}: is a directory, not a golden file; remove it; nothing "
                          "written")
    try:
        old = golden.load(path)
    except GoldenError:
        return  # unusable: replacing it is what its error asks for
    if old is not None and old.envelope is not None:
        repeats = old.provenance.repeats or "K"
        raise AcceptError(f"scenario {sid}: its golden holds the noise envelope of {repeats} "
                          f"runs, which one adopted run cannot replace; re-record it "
                          f"(`lockguard record --repeat {repeats} --scenario {sid}`); "
                          "nothing written")


def _current(path: Path) -> str:
    try:
        old = golden.load(path)
    except GoldenError:
        return "an unusable golden"
    if old is None:
        return "no golden (a new file)"
    final = old.result.losses[-1] if old.result.losses else None
    return f"the golden of {old.provenance.recorded_at or 'unknown date'} (final loss {final!r})"


def describe(adoptions: list[Adoption], source: Path) -> str:
    """What will change, per scenario: for people, before they confirm."""
    lines = [f"Accepting from {source}:"]
    for a in adoptions:
        new = a.result.losses[-1] if a.result.losses else None
        lines.append(f"  {a.scenario} ({a.framework}): {a.verdict}"
                     + (f" — {one_line(a.reasons[0], 160)}" if a.reasons else ""))
        lines.append(f"    {display_path(a.path)}: replaces {a.replaces}")
        lines.append(f"    final loss now {new!r} ({a.result.framework} "
                     f"{a.result.framework_version or '?'}, hardware class {a.hardware.id})")
    return "\n".join(lines) + "\n"


def adopt(adoptions: list[Adoption]) -> list[tuple[Adoption, bool]]:
    """Write each golden (golden.write leaves one holding the same reference untouched);
    (adoption, written) each."""
    return [(a, golden.write(a.path, a.result, a.provenance, a.hardware)) for a in adoptions]
