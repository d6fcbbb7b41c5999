"""`lockguard record`: run every scenario under its lock and keep the results as goldens.

Everything that can refuse (a golden directory that cannot be written, a golden path taken by a
directory) is checked before anything is built; goldens are written only at the end, each
atomically, and only healthy runs on the intended device become references.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard import gitref, golden
from lockguard.compare.envelope import deterministic, envelope_of, representative
from lockguard.files import display_path, file_kind, writable_dir
from lockguard.flows.goldens import (
    Crossings, Hosts, compare_with_goldens, digest, lock_hash, previous_goldens,
)
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, pipeline, run_backend
from lockguard.flows.report_parts import family_rule_report, report_for
from lockguard.golden import Golden, GoldenError, golden_path, legacy_path
from lockguard.hardware import HardwareClass, hardware_class
from lockguard.locks.ref import LockRef
from lockguard.names import Verdict
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.compare.envelope import Envelope
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.report import Evidence, Report


FIRST = "its first golden: no earlier one on any hardware class to compare with"


def record(settings: Settings, locks: list[LockRef], scenarios: list[Scenario],
           progress: Progress = QUIET, backend: Backend | None = None) -> Report:
    """Run `scenarios` from `locks` and write each healthy result on its intended device as
    the golden of this hardware class (only those whose results or inputs changed)."""
    start = time.perf_counter()
    if (failed := family_rule_report("record", locks)) is not None:
        return failed
    backend = run_backend(settings, backend)
    gdir = settings.golden_dir
    hosts, crossed = Hosts(), Crossings()
    notes: list[str] = []
    policy = settings.policy
    commit = gitref.head_commit(settings.config.root)
    previous: dict[str, dict[str, Golden]] = {}
    to_write: list[tuple[Path, RunResult, golden.Provenance, HardwareClass,
                         Envelope | None]] = []

    def decide(p: Planned) -> list[Job]:
        host = hosts.get(p.device)
        _check_target(gdir, p, host)
        previous[p.scenario.id] = previous_goldens(gdir, p, host, notes)
        return [Job(p, p.lock)] * settings.repeat

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence]:
        result, envelope = _reference(runs.candidate)
        inputs = digest(p, settings, backend)
        verdict, proof = compare_with_goldens(p, runs.candidate, previous[p.scenario.id],
                                              hosts.get(p.device), inputs, policy, crossed,
                                              alone=(Verdict.new, FIRST))
        # A reference must be made of healthy runs on the intended device.
        healthy = all(run.status == Status.ok for run in runs.candidate)
        if healthy and verdict.verdict != Verdict.device_fallback:
            cls = hardware_class(result.fingerprint, p.device, result.device_name)
            provenance = _provenance(p, result, inputs, runs.envs["candidate"], commit)
            if len(runs.candidate) > 1:
                provenance.repeats = len(runs.candidate)
                provenance.deterministic = envelope is None
                verdict.reasons.append(
                    f"recorded from {len(runs.candidate)} runs: "
                    + ("bitwise equal, the golden is compared exactly" if envelope is None else
                       "not bitwise equal, the golden keeps their noise envelope "
                       "(per-step min/max/mean/std) and the run of median final loss"))
            to_write.append((golden_path(gdir, p.device, cls.id, p.scenario.id), result,
                             provenance, cls, envelope))
        return verdict, proof

    outcome = pipeline(settings, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend)
    written = _write_goldens(gdir, to_write, notes)

    broken = [v for v in outcome.verdicts
              if v.verdict in (Verdict.broken, Verdict.device_fallback)]
    return report_for(settings, outcome, command="record", mode="record", locks=locks,
                      started=start, done="recorded", notes=notes + crossed.notes(),
                      failing=broken, written=[str(path) for path in written],
                      hardware=hosts.known())


def _check_target(gdir: Path, p: Planned, host: HardwareClass | None) -> None:
    """Refuse, before any run, a golden that could not be written for `p` on this machine's
    class `host` (None: unknown, so its device's directory is checked)."""
    # Where the goldens go must be writable, and this class's old golden may be corrupt or
    # of an old schema (it is replaced: that is what the error told the user to do), but it
    # may not be a directory, which a golden file cannot replace. All known before any run:
    # this machine's class directory (not only the device's), and that it stays inside
    # golden_dir (golden_path refuses a symlink out).
    if host is not None:
        target = golden_path(gdir, p.device, host.id, p.scenario.id)
        writable_dir(target.parent, "the golden directory")
        kind = _kind(target)
        if kind is not None:  # a FIFO would block the write, a directory refuse it
            raise GoldenError(f"{target}: is {kind}, not a golden file; remove it")
    else:
        writable_dir(gdir / p.device, "the golden directory")


def _write_goldens(gdir: Path, to_write: list[tuple[Path, RunResult, golden.Provenance,
                                                    HardwareClass, Envelope | None]],
                   notes: list[str]) -> list[Path]:
    """Write the goldens `to_write` (each atomically) and remove the schema-1 goldens they
    replace, saying so in `notes`; the paths actually written."""
    # A golden whose results and inputs did not change is left as it is (timings and dates
    # aside), so that a golden diff in a pull request is the real change.
    written = [path for path, result, provenance, cls, envelope in to_write
               if golden.write(path, result, provenance, cls, envelope)]
    if len(written) < len(to_write):
        notes.append(f"{len(to_write) - len(written)} of {len(to_write)} goldens unchanged "
                     "(same results and inputs): not rewritten")
    for path, result, _, cls, _ in to_write:
        legacy = legacy_path(gdir, cls.device, result.scenario)
        if os.path.isfile(legacy) or os.path.islink(legacy):
            os.unlink(legacy)
            notes.append(f"removed {display_path(legacy)} (schema 1, no hardware class): "
                         f"replaced by {display_path(path)}")
    return written


def _kind(path: Path) -> str | None:
    """What stands at `path` if it is neither absent nor a regular file."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None  # absent, or a dangling link: written as a new file
    return None if stat.S_ISREG(mode) else file_kind(mode)


def _reference(runs: list[RunResult]) -> tuple[RunResult, Envelope | None]:
    """What a golden keeps of `record --repeat K`'s runs: the run itself when they are bitwise
    equal, else the run of median final loss and the envelope of all K."""
    if len(runs) == 1 or any(r.status != Status.ok for r in runs) or deterministic(runs):
        return runs[0], None
    return representative(runs), envelope_of(runs)


def _provenance(p: Planned, result: RunResult, inputs: str, env: str,
                commit: str | None) -> golden.Provenance:
    return golden.Provenance(lock=display_path(p.lock.path) if p.lock else None,
                             lock_label=p.lock.label if p.lock else None,
                             lock_hash=lock_hash(p), inputs_digest=inputs,
                             framework_version=result.framework_version, env=env,
                             git_commit=commit)
