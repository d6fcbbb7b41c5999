"""The one Report model every renderer draws; no computation happens in the renderers.

A Report is built by the record/check flows (lockguard/checks.py) from pure comparison results;
`render(report, fmt)` turns it into text, json or markdown.
"""

from typing import Any, Literal

from pydantic import BaseModel, Field

from lockguard.compare import ScenarioVerdict
from lockguard.errors import printable

FORMATS = ("text", "json", "markdown")


class LockInfo(BaseModel):
    path: str
    lock_hash: str
    role: Literal["candidate", "baseline"] = "candidate"
    frameworks: list[str] = Field(default_factory=list)
    versions: dict[str, str] = Field(default_factory=dict)  # framework -> pinned version
    env: str | None = None  # the environment it ran in, when one was prepared


class ParityRow(BaseModel):
    """Step-0 loss of one scenario family across frameworks: a harness bug shows here first."""

    family: str
    step0: dict[str, float]  # scenario id -> loss at step 0
    max_rel_spread: float


class Report(BaseModel):
    command: Literal["check", "record", "diff", "propose"]
    mode: Literal["golden", "ab", "record", "diff"]
    device: str | None = None
    locks: list[LockInfo] = Field(default_factory=list)
    lock_diffs: list[dict[str, Any]] = Field(default_factory=list)  # LockDiff.model_dump(mode="json")
    verdicts: list[ScenarioVerdict] = Field(default_factory=list)
    parity: list[ParityRow] = Field(default_factory=list)
    written: list[str] = Field(default_factory=list)  # golden files written by record
    # This machine's hardware class per device checked (lockguard/hardware.py), where readable.
    hardware: dict[str, dict[str, Any]] = Field(default_factory=dict)
    notes: list[str] = Field(default_factory=list)
    passed: bool = True
    duration_s: float | None = None


def render(report: Report, fmt: str, color: bool = False) -> str:
    if fmt == "json":
        from lockguard.report import json_

        return json_.render(report)  # JSON escapes control characters itself
    report = printable_report(report)
    if fmt == "markdown":
        from lockguard.report import markdown

        return markdown.render(report)
    from lockguard.report import text

    return text.render(report, color=color)


def printable_report(report: Report) -> Report:
    """The report with every string stripped of terminal escapes: reasons quote pip, training
    logs and golden files, and none of them may drive the reader's terminal."""
    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return printable(value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {clean(k): clean(v) for k, v in value.items()}
        return value

    return Report.model_validate(clean(report.model_dump()))
