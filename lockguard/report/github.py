"""The Report as GitHub Actions workflow commands: annotations on the lock lines of a PR.

A scenario that fails the gate is an `::error` at each changed line of its candidate lock that
belongs to its framework's family (every changed line of that lock when none does); a verdict
that passes but is worth a look (slower, new, within tolerance) is a `::warning` there; a
family-rule failure is an `::error` at the lines of the pins it names. An added or changed
index or installer option is a `::warning` at its line.

GitHub places an annotation by a path from the repository root, whatever directory the step ran
in: the report's lock paths (relative to where lockguard ran) are joined to `Report.workdir`
(where that was, from the repository root), so a project in ml/ annotates ml/requirements.txt.
A lock outside the repository (a proposal in the cache) gets no file, so the annotation shows
on the run.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.files import repo_root, repo_workdir
from lockguard.names import Verdict
from lockguard.report._common import (
    bisected, change_text, culprits, framework_summary, gate_lines, LockLine, option_lines,
    sandbox_warning, startup_note, summary_line, verdict_name,
)
from lockguard.report.model import Report


def _data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _prop(text: str) -> str:
    return _data(text).replace(":", "%3A").replace(",", "%2C")


def command(level: str, message: str, *, file: str | None = None, line: int | None = None,
            title: str | None = None) -> str:
    """One workflow command line, escaped as the runner (actions/toolkit) expects."""
    props = []
    if file:
        props.append(f"file={_prop(file)}")
        if line:
            props.append(f"line={line}")
    if title:
        props.append(f"title={_prop(title)}")
    return f"::{level}{(' ' + ','.join(props)) if props else ''}::{_data(message)}"


class _Paths:
    """A report's paths as paths from the repository root, or None where they leave it."""

    def __init__(self, report: Report) -> None:
        self.workdir = report.workdir if report.workdir is not None else repo_workdir()

    def __call__(self, path: str) -> str | None:
        if posixpath.isabs(path):
            # Only meaningful where the report was made; a path of another machine is under no
            # root here, and gets no file.
            root = repo_root()
            resolved = Path(path).resolve()
            if root is None or root not in resolved.parents:
                return None
            return resolved.relative_to(root).as_posix()
        joined = posixpath.normpath(posixpath.join(self.workdir, path))
        return None if joined == ".." or joined.startswith("../") else joined


def _message(v: ScenarioVerdict, culprits: list[LockLine]) -> str:
    lines = [f"{v.scenario} ({v.framework}): {verdict_name(v)}"]
    lines += v.reasons
    if culprits:
        lines.append("changed here: " + "; ".join(c.text for c in culprits))
    return "\n".join(lines)


def _scenario(report: Report, v: ScenarioVerdict, level: str, where: _Paths) -> list[str]:
    evidence = summary_line(v)
    title = f"lockguard: {v.scenario} {verdict_name(v)}" + (f": {evidence}" if evidence else "")
    behind = bisected(report, v) or culprits(report, v)
    message = _message(v, behind)
    bisection = report.bisection_of(v.scenario)
    if bisection is not None:
        message += "\n" + bisection.sentence()
    lines = [(where(c.lock), c.line) for c in behind if c.line is not None]
    lines = [(file, line) for file, line in lines if file]
    if not lines:
        lock = report.lock_of(v)
        file = where(lock.path) if lock else None
        return [command(level, message, file=file, title=title)]
    return [command(level, message, file=file, line=line, title=title) for file, line in lines]


def render(report: Report) -> str:
    """The report as workflow command lines (`::error`, `::warning`), one annotation each,
    placed on the lock lines and config file they concern (module docstring)."""
    where = _Paths(report)
    out: list[str] = []
    unconfined = sandbox_warning(report)
    if unconfined is not None:
        out.append(command("warning", "the lock's code ran with lockguard's own access: it "
                           "could have changed what judged it (docs/environments.md)",
                           title=f"lockguard: {unconfined}"))
    gate = gate_lines(report)
    if gate is not None:
        # Said first, on the configuration file: the policy change a reviewer must see.
        config = report.gate.config if report.gate is not None else None
        out.append(command("warning", "\n".join(gate[1]), file=where(config) if config else None,
                           title=f"lockguard: {gate[0]}"))
    for rule in report.rule_failures:
        title = f"lockguard: {rule.rule}"
        file = where(rule.lock)
        for line in rule.lines or [None]:
            out.append(command("error", rule.message, file=file, line=line, title=title))
    for v in report.ordered():
        if report.fails(v):
            out += _scenario(report, v, "error", where)
    for v in report.notable():
        out += _scenario(report, v, "warning", where)
    for diff in report.lock_diffs:
        lock = next((info for info in report.locks if info.source == diff.new_source), None)
        file = where(lock.path) if lock else None
        for change in diff.changed:
            if startup_note(change):
                out.append(command(
                    "warning", change_text(change), file=file, line=change.new_line,
                    title="lockguard: a changed pin installs code run at interpreter start"))
        for option in diff.option_changes:
            for line, text in option_lines(option):
                out.append(command(
                    "warning", f"{text}: the lock installs from other sources or with other "
                    "installer options; every package may come from there",
                    file=file, line=line, title="lockguard: installer option changed"))
    for note in report.notes:
        if note.startswith("warning: "):  # e.g. a lock installed unchecked (locks/trust.py)
            out.append(command("warning", note.removeprefix("warning: "),
                               title="lockguard: warning"))
    if report.frameworks is not None:
        out.append(command("notice", "\n".join(framework_summary(report.frameworks)),
                           title="lockguard compare-frameworks: steady step time"))
    if not report.passed and not any(line.startswith("::error") for line in out):
        out.append(command("error", "\n".join(report.notes) or "the gate failed",
                           title=f"lockguard {report.command} failed"))
    return "\n".join(out) + ("\n" if out else "")


def step_outputs(report: Report) -> str:
    """The report as step outputs (`name=value` lines for $GITHUB_OUTPUT), what the composite
    action exposes: passed, how many scenarios fail the gate and how many were compared, and
    the count of every verdict (0 when none has it) under its name with hyphens."""
    counts = dict(report.tally())
    lines = [f"passed={'true' if report.passed else 'false'}",
             f"failing={len(report.failing)}",
             f"compared={len(report.compared)}",
             f"rule-failures={len(report.rule_failures)}"]
    lines += [f"{v.value.replace('_', '-')}={counts.get(v, 0)}" for v in Verdict]
    return "\n".join(lines) + "\n"


def append_step_summary(path: Path, markdown: str) -> None:
    """Add a report to the job summary (the file GITHUB_STEP_SUMMARY names). Appended, not
    replaced: the runner and other steps append to this file too (GitHub's documented
    protocol), so it is the one file lockguard does not write atomically."""
    with open(path, "a", encoding="utf-8") as f:
        f.write("\n" + markdown)
