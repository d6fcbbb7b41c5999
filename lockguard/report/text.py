"""The Report for a terminal: a verdict table, then the evidence for anything not identical."""

from __future__ import annotations

import io
import shutil

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lockguard.compare import Verdict
from lockguard.report import Report
from lockguard.report._common import (
    SYMBOL, change_line, compile_rows, final_loss, fmt_float, summary_line, timing,
)

STYLE = {
    Verdict.identical: "green", Verdict.within_tolerance: "green", Verdict.drift: "red",
    Verdict.compile_fallback: "red", Verdict.device_fallback: "red", Verdict.slower: "yellow",
    Verdict.broken: "bold red", Verdict.new: "cyan", Verdict.incomparable: "yellow",
    Verdict.skipped: "dim", Verdict.other_hardware: "yellow",
}


def render(report: Report, color: bool = False) -> str:
    width = max(100, shutil.get_terminal_size((120, 40)).columns) if color else 120
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color,
                      highlight=False, soft_wrap=False)
    for lock in report.locks:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(lock.versions.items()))
        console.print(f"{lock.role} lock {lock.path} ({lock.lock_hash[:12]})"
                      + (f": {versions}" if versions else ""), markup=False)
    for diff in report.lock_diffs:
        changes = [c for c in diff.get("changes", []) if c.get("kind") != "unchanged"]
        console.print(f"lock changes: {len(changes) or 'none'}")
        for change in changes:
            console.print(f"  {change_line(change)}", markup=False)
    if report.verdicts:
        table = Table(show_edge=False, pad_edge=False, box=None)
        for column in ("", "scenario", "verdict", "final loss", "step time", "evidence"):
            table.add_column(column, overflow="fold")
        for v in report.verdicts:
            style = STYLE.get(v.verdict, "")
            table.add_row(SYMBOL[v.verdict], escape(v.scenario), f"[{style}]{v.verdict.value}[/]",
                          final_loss(v), timing(v), escape(summary_line(v)))
        console.print(table)
    for v in report.verdicts:
        if v.verdict in (Verdict.identical, Verdict.skipped) or not v.reasons:
            continue
        console.print(f"\n[bold]{escape(v.scenario)}[/bold]: {v.verdict.value}")
        for reason in v.reasons:
            for i, line in enumerate(reason.splitlines()):
                console.print(("  • " if i == 0 else "    ") + line, markup=False)
        rows = compile_rows(v.compile_diff) if v.compile_diff is not None else []
        if rows:
            side = Table(show_edge=False, pad_edge=False, box=None, padding=(0, 2, 0, 0))
            for column in ("  compiled path", "baseline", "candidate"):
                side.add_column(column, overflow="fold")
            for what, old, new in rows:
                side.add_row("  " + escape(what), escape(old), escape(new))
            console.print(side)
    if report.parity:
        console.print("\nstep-0 parity across frameworks (same data and weights):")
        for row in report.parity:
            cells = ", ".join(f"{k} {fmt_float(v)}" for k, v in row.step0.items())
            console.print(f"  {row.family}: {cells} (spread {row.max_rel_spread:.1e})",
                          markup=False)
    for path in report.written:
        console.print(f"wrote {path}", markup=False)
    for note in report.notes:
        console.print(f"note: {note}", markup=False)
    if report.command != "diff":
        outcome = "[green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
        counts: dict[str, int] = {}
        for v in report.verdicts:
            counts[v.verdict.value] = counts.get(v.verdict.value, 0) + 1
        tally = ", ".join(f"{n} {k}" for k, n in counts.items())
        took = f" in {report.duration_s:.1f} s" if report.duration_s is not None else ""
        console.print(f"\n{outcome} {report.command}: {tally or 'nothing to do'}{took}")
    return out.getvalue()
