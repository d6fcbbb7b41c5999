"""The Report as JUnit XML, for CI systems that show test results (one testsuite).

One testcase per scenario (classname: its framework); a scenario that fails the gate carries a
<failure> with the evidence, a skipped one <skipped> with why. A family-rule failure, and a gate
that failed with no scenario to blame (nothing compared), are testcases too, so that no tool
shows a failed gate as green. The locks' hashes and framework versions are properties.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import TYPE_CHECKING

from lockguard.names import Verdict
from lockguard.report.model import Report
from lockguard.report._common import (
    bisection_lines, change_text, culprits, final_loss, framework_summary, row_line, startup_note,
    summary_line, timing_line,
)

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict


def _property(parent: ET.Element, name: str, value: str) -> None:
    ET.SubElement(parent, "property", name=name, value=value)


def render(report: Report) -> str:
    """The report as a JUnit XML document, a testcase per scenario and per family-rule failure;
    a failed gate with nothing to blame still gets a failing testcase, so no CI shows it green."""
    suites = ET.Element("testsuites", name="lockguard")
    suite = ET.SubElement(suites, "testsuite", name=f"lockguard {report.command}")
    _suite_properties(ET.SubElement(suite, "properties"), report)
    tests = failures = skipped = 0
    for v in report.verdicts:
        outcome = _testcase(suite, report, v)
        tests += 1
        failures += outcome == "failure"
        skipped += outcome == "skipped"
    for rule in report.rule_failures:
        tests += 1
        failures += 1
        where = f"{rule.lock}:{','.join(map(str, rule.lines))}" if rule.lines else rule.lock
        case = ET.SubElement(suite, "testcase", classname="lock", name=f"{where} {rule.rule}")
        failure = ET.SubElement(case, "failure", type="family_rule", message=rule.message)
        failure.text = f"{where}: {rule.rule}: {rule.message}"
    if not report.passed and failures == 0:
        # The gate failed with no scenario to blame, e.g. nothing was compared.
        tests += 1
        failures += 1
        case = ET.SubElement(suite, "testcase", classname="lockguard", name="gate")
        failure = ET.SubElement(case, "failure", type="gate",
                                message=report.notes[0] if report.notes else "the gate failed")
        failure.text = "\n".join(report.notes)
    _suite_out(suite, report)
    _counts(suites, suite, report, tests, failures, skipped)
    ET.indent(suites)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(
        suites, encoding="unicode") + "\n"


def _suite_properties(props: ET.Element, report: Report) -> None:
    """The run as a whole: version, mode, device, git base, gate, each lock's versions, and
    the changed pins whose code runs at every interpreter start."""
    _property(props, "lockguard.version", report.lockguard_version)
    _property(props, "mode", report.mode)
    if report.device:
        _property(props, "device", report.device)
    if report.sandbox is not None:
        _property(props, "sandbox", report.sandbox)
    if report.base is not None:
        _property(props, "base.ref", report.base.ref)
        _property(props, "base.merge_base", report.base.merge_base)
    if report.gate is not None:
        _property(props, "gate.judged_by", report.gate.judged_by)
        for i, change in enumerate(report.gate.changes, 1):
            _property(props, f"gate.change.{i}", change)
    for lock in report.locks:
        key = f"lock.{lock.role}.{lock.name}"
        _property(props, f"{key}.hash", lock.lock_hash)
        for framework, version in sorted(lock.versions.items()):
            _property(props, f"{key}.{framework}", version)
    for diff in report.lock_diffs:
        for change in diff.changed:
            if startup_note(change):  # code a changed pin runs at every interpreter start
                _property(props, f"startup.{change.name}", change_text(change))


def _testcase(suite: ET.Element, report: Report, v: ScenarioVerdict) -> str:
    """One scenario's testcase; "failure", "skipped" or "passed"."""
    case = ET.SubElement(suite, "testcase", classname=v.framework, name=v.scenario)
    seconds = _seconds(report, v)
    if seconds is not None:
        case.set("time", f"{seconds:.3f}")
    case_props = ET.SubElement(case, "properties")
    _property(case_props, "verdict", v.verdict.value)
    if v.accepted is not None:
        _property(case_props, "accepted", v.accepted.sentence())
    said = timing_line(v)
    if said:
        _property(case_props, "timing", said)
    for role, lock in (("baseline", report.lock_of(v, "baseline")),
                       ("candidate", report.lock_of(v))):
        if lock is not None:
            _property(case_props, f"{role}.lock", lock.name)
            _property(case_props, f"{role}.lock_hash", lock.lock_hash)
            if v.framework in lock.versions:
                _property(case_props, f"{role}.{v.framework}", lock.versions[v.framework])
    if v.verdict == Verdict.skipped:
        ET.SubElement(case, "skipped", message=v.reasons[0] if v.reasons else "skipped")
        return "skipped"
    evidence = _evidence(report, v, case_props)
    if report.fails(v):
        headline = summary_line(v)
        failure = ET.SubElement(
            case, "failure", type=v.verdict.value,
            message=f"{v.verdict.value}: {headline}" if headline else v.verdict.value)
        failure.text = evidence
        return "failure"
    out = ET.SubElement(case, "system-out")
    out.text = f"{v.verdict.value}; final loss {final_loss(v)}\n{evidence}".rstrip()
    row = report.framework_row(v.scenario)
    if row is not None:
        out.text += "\n" + row_line(row)
    return "passed"


def _seconds(report: Report, v: ScenarioVerdict) -> float | None:
    """How long the scenario's kept runs trained (both sides' total_s, as the harness timed
    them); None when it did not run here (skipped, answered from its golden)."""
    found = report.evidence_of(v.scenario)
    if found is None:
        return None
    times = [side.result.timings.total_s for side in (found.baseline, found.candidate)
             if side is not None and side.kind != "golden"]
    times = [t for t in times if t is not None]
    return sum(times) if times else None


def _evidence(report: Report, v: ScenarioVerdict, case_props: ET.Element) -> str:
    """A scenario's reasons, error, culprit lock lines and bisection, as one text."""
    evidence = "\n".join(v.reasons)
    if v.error:
        evidence += "\n\n" + v.error
    behind = culprits(report, v)
    if behind:
        evidence += "\n\nlock lines: " + "; ".join(
            f"{c.lock}:{c.line} {c.text}" if c.line else f"{c.lock} {c.text}"
            for c in behind)
    bisection = report.bisection_of(v.scenario)
    if bisection is not None:
        evidence += "\n\n" + "\n".join(bisection_lines(bisection))
        _property(case_props, "bisection.culprit", "; ".join(bisection.culprit))
        _property(case_props, "bisection.builds", str(bisection.builds))
    return evidence


def _suite_out(suite: ET.Element, report: Report) -> None:
    """The suite's one system-out: its warnings (e.g. a lock installed unchecked,
    locks/trust.py), then the compare-frameworks summary."""
    suite_out = [n for n in report.notes if n.startswith("warning: ")]
    if report.frameworks is not None:
        table = report.frameworks
        suite_out += ([""] if suite_out else []) + framework_summary(table) + ["", *table.caveats]
    if suite_out:
        ET.SubElement(suite, "system-out").text = "\n".join(suite_out)


def _counts(suites: ET.Element, suite: ET.Element, report: Report, tests: int, failures: int,
            skipped: int) -> None:
    counts = {"tests": str(tests), "failures": str(failures), "errors": "0",
              "skipped": str(skipped)}
    if report.duration_s is not None:
        counts["time"] = f"{report.duration_s:.3f}"
    for element in (suite, suites):
        for key, value in counts.items():
            if element is suites and key == "skipped":
                continue  # not an attribute of <testsuites> in the common schema
            element.set(key, value)
