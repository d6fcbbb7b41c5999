"""The Report as JSON: the machine-readable contract for CI and scripts."""

from __future__ import annotations

import json

from lockguard.report.model import Report


def render(report: Report) -> str:
    return json.dumps(report.model_dump(mode="json"), indent=2) + "\n"
