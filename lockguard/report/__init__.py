"""Reports: the one Report model (report/model.py), one renderer per format, and reading a
JSON report back.

`render(report, fmt)` turns a Report into text, json, markdown, html, junit or github
annotations; no computation happens in the renderers (report/_common.py holds the wording they
share). The JSON form is a versioned contract (`schema_version`): `lockguard report
REPORT.json` re-renders it later without running anything, and refuses a version it does not
know (`load_report`).
"""

import dataclasses
import json
from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from lockguard import __version__
from lockguard.errors import printable, redact
from lockguard.files import ReadError, parse_json, read_bytes
from lockguard.report.model import (  # noqa: F401 - the package's face
    MAX_REPORT_BYTES, READABLE_VERSIONS, SCHEMA_VERSION, Bisection, Evidence, FrameworkRow,
    FrameworkTable, GatePolicy, GitBase, LockInfo, MixTrial, ParityRow, Report, ReportError,
    RuleFailure, ShardInfo, Side,
)

def render(report: Report, fmt: str, color: bool = False, width: int | None = None) -> str:
    """The report as text in `fmt` (text, json, markdown, html, junit, github), every string
    made safe to show first (credentials masked; escapes removed except in JSON, which escapes
    them itself); ValueError for another format. `color` and `width` are the text format's."""
    if fmt == "json":
        from lockguard.report import json_

        # JSON escapes control characters itself; credentials are masked in every format.
        return json_.render(printable_report(report, redact))
    report = printable_report(report)
    if fmt == "markdown":
        from lockguard.report import markdown

        return markdown.render(report)
    if fmt == "html":
        from lockguard.report import html

        return html.render(report)
    if fmt == "junit":
        from lockguard.report import junit

        return junit.render(report)
    if fmt == "github":
        from lockguard.report import github

        return github.render(report)
    if fmt != "text":
        raise ValueError(f"unknown report format {fmt!r}")
    from lockguard.report import text

    return text.render(report, color=color, width=width)


def printable_report(report: Report, shown: Callable[[str], str] = printable) -> Report:
    """The report with every string as it may be shown (`shown`, by default errors.printable:
    no terminal escapes, no credentials): reasons quote pip, training logs, golden files and
    index URLs, and none of them may drive the reader's terminal or leak a password."""
    # Copied model by model, not dumped and validated again: a report that skipped
    # validation (an unchanged check's) must not build the Report validator just to be shown.
    # What needs no cleaning is returned as it is (the same object), and a container is only
    # copied when something in it changed: a lock diff of 100,000 packages holds 100,000
    # models whose strings are all clean already.
    def clean(value: Any) -> Any:
        if isinstance(value, Enum):
            return value  # the verdict names (str enums) are lockguard's own
        if isinstance(value, str):
            shown_value = shown(value)
            return value if shown_value == value else shown_value
        if isinstance(value, BaseModel):
            fields = {name: getattr(value, name) for name in type(value).model_fields}
            cleaned = {name: clean(v) for name, v in fields.items()}
            extra = value.__pydantic_extra__
            extra_clean = clean(dict(extra)) if extra else extra
            if all(cleaned[n] is fields[n] for n in fields) and (
                    not extra or all(extra_clean[k] is v and k in extra_clean
                                     for k, v in extra.items())):
                return value
            copy = value.model_copy(update=cleaned)
            if extra:  # what extra="allow" models carry (compile details)
                object.__setattr__(copy, "__pydantic_extra__", extra_clean)
            return copy
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value) if f.init}
            cleaned = {name: clean(v) for name, v in fields.items()}
            if all(cleaned[n] is fields[n] for n in fields):
                return value
            return dataclasses.replace(value, **cleaned)
        if isinstance(value, (list, tuple)):
            items = [clean(v) for v in value]
            return value if all(a is b for a, b in zip(items, value)) else type(value)(items)
        if isinstance(value, dict):
            pairs = [(clean(k), clean(v)) for k, v in value.items()]
            if all(k2 is k and v2 is v for (k2, v2), (k, v) in zip(pairs, value.items())):
                return value
            return dict(pairs)
        return value

    return clean(report)


def load_report(path: Path) -> Report:
    """A JSON report written by `--format json` / `--report json=PATH`, validated in full."""
    try:
        data = read_bytes(Path(path), "JSON report", MAX_REPORT_BYTES)
    except ReadError as exc:
        raise ReportError(str(exc)) from None
    try:
        raw = parse_json(data.decode("utf-8"), path)
    except UnicodeDecodeError:
        raise ReportError(f"{path}: not a lockguard JSON report (not UTF-8 text)") from None
    except ReadError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise ReportError(f"{where}: not a lockguard JSON report ({exc.reason})") from None
    if not isinstance(raw, dict) or "verdicts" not in raw or "command" not in raw:
        raise ReportError(f"{path}: not a lockguard JSON report (no command and verdicts)")
    version = raw.get("schema_version")
    if version not in READABLE_VERSIONS:
        made_by = raw.get("lockguard_version")
        raise ReportError(
            f"{path}: report schema_version {version!r}"
            + (f" (lockguard {made_by})" if made_by else "")
            + f" is not one this lockguard {__version__} reads "
            f"({', '.join(map(str, READABLE_VERSIONS))}); "
            "re-render it with the lockguard that wrote it")
    try:
        return Report.model_validate({**raw, "schema_version": SCHEMA_VERSION})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ReportError(f"{path}: invalid report at {where}: {first['msg']}") from None
