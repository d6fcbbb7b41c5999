"""The Report as JSON: the machine-readable contract for CI and scripts."""

from __future__ import annotations

import json

from lockguard.report.model import Report


def render(report: Report) -> str:
    """The report's JSON (indented, newline-terminated): the versioned contract that
    `lockguard report` and load_report read back."""
    return json.dumps(report.model_dump(mode="json"), indent=2) + "\n"
