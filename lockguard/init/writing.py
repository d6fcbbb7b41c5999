"""What `lockguard init` does, its last stage (`apply`): write the files a Plan holds (each
atomically), record the missing goldens through the record flow as `lockguard record` does,
and say what comes next: what a lock pull request will cost here (`cost_lines`), what to
commit, what to edit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockguard.config import load_config
from lockguard.files import write_text
from lockguard.flows.pipeline import default_workers
from lockguard.flows.record import record
from lockguard.init.plan import Plan, new_config_text
from lockguard.init.project import shown
import lockguard.init.templates as templates
from lockguard.locks.diff import Change
from lockguard.progress import QUIET, Progress
from lockguard.scenarios import bundled
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.report import Report


@dataclass
class Done:
    """What `apply` did, for the command line to print: the files written or left as they
    were, the record flow's report, and what to do next."""

    lines: list[str]  # what was written, or left as it was
    report: Report | None  # the record flow's, when goldens were recorded
    next_steps: list[str]


def apply(p: Plan, progress: Progress = QUIET) -> Done:
    """Write what `p` holds, each file atomically, then record the missing goldens."""
    s = p.survey
    lines: list[str] = []
    if p.config_text is not None:
        write_text(s.config_target, new_config_text(s, p.config_text))
        load_config(s.config_target)  # as every command will read it
        lines.append(f"wrote {shown(s.config_target, s.project)}")
    template = s.project / s.template
    if p.template_text is not None:
        write_text(template, p.template_text)
        lines.append(f"wrote {shown(template, s.project)}")
    elif p.choices.template:
        lines.append(f"already there: {shown(template, s.project)} (left as it is)")
    if p.workflow_text is not None:
        write_text(p.workflow_path, p.workflow_text)
        lines.append(f"wrote {shown(p.workflow_path, s.project)}")
    elif p.choices.workflow:
        lines.append(f"already there: {s.workflow_found or shown(p.workflow_path, s.project)} "
                     "(left as it is)")
    report = None
    if p.to_record:
        config = load_config(s.config_file or s.config_target)
        # A new project's own settings, resolved here (see plan._unrecorded): init takes no
        # run options, and the config was written just now.
        report = record(Settings.resolve(config), p.locks, p.to_record, progress)
    elif p.choices.record:
        lines.append("goldens: already recorded on this machine")
    return Done(lines, report, _next_steps(p, report))


def cost_lines(report: Report, budget_s: float, workers: int,
               users: set[str] = frozenset()) -> list[str]:
    """What a lock pull request will cost on this machine, from what `record` measured: each
    scenario's seconds, the A/B's (both sides of each, `workers` at a time), and, over
    `budget_s`, a selection that keeps within it (the `users`' own scenarios always in it,
    the cheapest bundled ones next), the rest left to a scheduled check."""
    seconds = {e.scenario: e.candidate.result.timings.total_s for e in report.evidence
               if e.candidate is not None and e.candidate.result.timings.total_s is not None}
    if not seconds:
        return []
    ab = 2 * sum(seconds.values()) / max(1, workers)
    each = ", ".join(f"{sid} {t:.0f} s" for sid, t in sorted(seconds.items(),
                                                              key=lambda kv: -kv[1]))
    lines = [f"a lock pull request's A/B here: about {ab:.0f} s ({len(seconds)} scenarios, both "
             f"sides, {workers} at a time; record measured {each})"]
    # What a PR that moves only numpy runs: what the A/B leaves out of such a change
    # (Scenario.unreached) while its eager twin runs.
    numpy_only = [Change(name="numpy", display_name="numpy", kind="upgraded")]
    left_out = {s.id for s in bundled() if s.id in seconds and s.covered_by in seconds
                and s.unreached(numpy_only)}
    if left_out:
        light = 2 * sum(t for sid, t in seconds.items() if sid not in left_out) / max(1, workers)
        lines.append("one that moves only numpy (or another package no compiler or parallel "
                     f"path imports): about {light:.0f} s, leaving out "
                     f"{', '.join(sorted(left_out))}")
    if ab <= budget_s:
        return lines
    kept, total = [], 0.0
    for sid, t in sorted(seconds.items(), key=lambda kv: (kv[0] not in users, kv[1])):
        cost = 2 * t / max(1, workers)
        if sid in users or total + cost <= budget_s:
            kept.append(sid)
            total += cost
    left = sorted(set(seconds) - set(kept))
    lines.append(f"over the {budget_s:.0f} s budget: `scenarios = [{', '.join(map(repr, kept))}]`"
                 f" keeps a lock PR to about {total:.0f} s here; run the others ("
                 f"{', '.join(left)}) on a schedule (`lockguard check --scenario ...`)")
    return lines


def _next_steps(p: Plan, report: Report | None) -> list[str]:
    s = p.survey
    steps = []
    if report is not None and report.passed:
        steps += cost_lines(report, p.choices.budget_s, default_workers(),
                            set(p.config.scenario))
    if report is not None and not report.passed:
        steps.append("some goldens were not recorded (see above): fix what the report says, "
                     "then run `lockguard init` again or `lockguard record`")
    written = [s.config_target] if p.config_text is not None else []
    written += [s.project / s.template] if p.template_text is not None else []
    written += [p.workflow_path] if p.workflow_text is not None else []
    if report is not None:
        written.append(p.config.resolve(p.config.golden_dir))
    if written:
        paths = " ".join(shown(path, s.project) for path in written)
        steps.append(f"commit them: git add {paths} && git commit -m \"Add lockguard\"")
    if p.choices.entry and s.training is not None and p.config_text is not None:
        steps.append(f"your tests can judge the same golden: `def test_training("
                     f"lockguard_training): lockguard_training(\"{s.training.entry}\")`")
    if p.template_text is not None:
        steps.append(f"edit {s.template.as_posix()} to train your own model, add "
                     f"\"{templates.SCENARIO_ID}\" to `scenarios`, then `lockguard record "
                     f"--scenario {templates.SCENARIO_ID}`")
    if p.workflow_text is not None and p.choices.action == templates.ACTION:
        steps.append(f"the workflow uses {templates.ACTION}: make `uses:` name the lockguard "
                     "action you install from (or run `lockguard init --action OWNER/REPO@REF`)")
    if p.workflow_text is None and p.choices.workflow and s.workflow_found:
        steps.append(f"{s.workflow_found} already runs lockguard: no workflow written")
    if p.unrecorded and report is None:
        ids = " ".join(f"--scenario {sc.id}" for sc in p.unrecorded)
        steps.append(f"record the goldens on this machine: `lockguard record {ids}`")
    steps.append(f"try the gate: on a branch that changes a lock, `lockguard check --base "
                 f"origin/{s.branch}`; against the goldens, `lockguard check`")
    return steps + p.notes
