"""The Report as GitHub-flavoured markdown, for PR comments and job summaries."""

from __future__ import annotations

from lockguard.compare import Verdict
from lockguard.report import Report
from lockguard.report._common import (
    SYMBOL, change_line, compile_rows, final_loss, fmt_float, summary_line, timing,
)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """A table cell in code font (reasons hold backticks, underscores, asterisks)."""
    if text == "—":
        return text
    return "<code>" + _cell(text).replace("&", "&amp;").replace("<", "&lt;").replace(
        ">", "&gt;").replace("`", "&#96;") + "</code>"


def render(report: Report) -> str:
    lines: list[str] = []
    title = {"check": "lockguard check", "record": "lockguard record", "diff": "lockguard diff",
             "propose": "lockguard propose"}[report.command]
    if report.command != "diff":
        title += ": **PASS**" if report.passed else ": **FAIL**"
    lines += [f"### {title}", ""]
    for lock in report.locks:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(lock.versions.items()))
        lines.append(f"- {lock.role} lock `{lock.path}` (`{lock.lock_hash[:12]}`)"
                     + (f": {versions}" if versions else ""))
    for diff in report.lock_diffs:
        changes = [c for c in diff.get("changes", []) if c.get("kind") != "unchanged"]
        lines += ["", f"**Lock changes** ({len(changes)})", "", "```diff"]
        lines += [change_line(c) for c in changes] or ["(none)"]
        lines.append("```")
    if report.verdicts:
        lines += ["", "| | scenario | verdict | final loss | step time | evidence |",
                  "|---|---|---|---|---|---|"]
        for v in report.verdicts:
            lines.append(f"| {SYMBOL[v.verdict]} | `{v.scenario}` | {v.verdict.value} | "
                         f"{_cell(final_loss(v))} | {timing(v)} | {_cell(summary_line(v))} |")
    details = [v for v in report.verdicts
               if v.verdict not in (Verdict.identical, Verdict.skipped) and v.reasons]
    for v in details:
        lines += ["", f"<details><summary><code>{v.scenario}</code>: {v.verdict.value}</summary>",
                  "", "```"]
        lines += v.reasons
        lines.append("```")
        rows = compile_rows(v.compile_diff) if v.compile_diff is not None else []
        if rows:
            lines += ["", "| compiled path | baseline | candidate |", "|---|---|---|"]
            lines += [f"| {_cell(what)} | {_code(old)} | {_code(new)} |" for what, old, new in rows]
        lines += ["", "</details>"]
    if report.parity:
        lines += ["", "Step-0 parity across frameworks:", ""]
        for row in report.parity:
            cells = ", ".join(f"`{k}` {fmt_float(v)}" for k, v in row.step0.items())
            lines.append(f"- {row.family}: {cells} (spread {row.max_rel_spread:.1e})")
    for note in report.notes:
        lines += ["", f"> {note}"]
    return "\n".join(lines) + "\n"
