"""The Report for a terminal or a CI log: the verdict table, then the evidence.

The table fits the width it is given (the terminal's; 80 columns works): the evidence column
takes what is left and wraps, instead of pushing the table wider. Colour only when asked for
(a terminal without NO_COLOR; see lockguard/cli.py).
"""

from __future__ import annotations

import io
import textwrap

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from lockguard.names import QUIET_VERDICTS, Verdict
from lockguard.report.model import Report
from lockguard.report._common import (
    FRAMEWORK_HEAD, STEP0, SYMBOL, bisection_lines, change_line, compile_rows, family_notes,
    family_title, final_loss, fmt_float, framework_cells, gate_lines, option_lines,
    sandbox_warning, summary_line, timing, timing_notes, verdict_name,
)

STYLE = {
    Verdict.identical: "green", Verdict.within_tolerance: "green", Verdict.drift: "red",
    Verdict.compile_fallback: "red", Verdict.device_fallback: "red", Verdict.slower: "yellow",
    Verdict.heavier: "yellow",
    Verdict.broken: "bold red", Verdict.new: "cyan", Verdict.incomparable: "yellow",
    Verdict.skipped: "dim", Verdict.other_hardware: "yellow", Verdict.measured: "green",
    Verdict.unchanged: "green",
}

EVIDENCE_MIN = 24  # the narrowest evidence column the table is shown with
DEFAULT_WIDTH = 100  # a log with no terminal behind it (CI): wide enough, never unbounded
MIN_WIDTH = 40


def render(report: Report, color: bool = False, width: int | None = None) -> str:
    """The report for a terminal or a CI log, the table fitted to `width` columns (the default
    when None, never under MIN_WIDTH); ANSI colour only with `color`."""
    width = max(MIN_WIDTH, width or DEFAULT_WIDTH)
    out = io.StringIO()
    console = Console(file=out, width=width, force_terminal=color, no_color=not color,
                      highlight=False, soft_wrap=False, emoji=False)
    _header(console, report, width)
    if report.frameworks is not None:
        _frameworks(console, report)
    elif report.compared:
        _verdicts(console, report, width)
    for count, reason in report.skipped_groups():
        _plain(console, f"-  {count} skipped: {reason}")
    for line in timing_notes(report):
        _plain(console, f"   {line}")
    _explanations(console, report, width)
    _closing(console, report)
    text = out.getvalue()
    if not color:  # the table pads its last column; a log should not carry the spaces
        text = "\n".join(line.rstrip() for line in text.split("\n"))
    return text


def _plain(console: Console, text: str) -> None:
    console.print(text, markup=False)


def _wrapped(console: Console, text: str, width: int, first: str = "  • ") -> None:
    """`text` wrapped here, not by rich, so that continuation lines keep the indent."""
    for j, piece in enumerate(textwrap.wrap(text, width - 4, break_on_hyphens=False) or [""]):
        _plain(console, (first if j == 0 else "    ") + piece)


def _header(console: Console, report: Report, width: int) -> None:
    """What judged the run (the gate), the locks, what changed in them, the rules broken."""
    unconfined = sandbox_warning(report)
    if unconfined is not None:
        console.print(f"[bold yellow]⚠ {escape(unconfined)}[/]")
    gate = gate_lines(report)
    if gate is not None:
        console.print(f"[bold yellow]⚠ {escape(gate[0])}:[/]")
        for change in gate[1]:
            _wrapped(console, change, width)
    for lock in report.locks:
        versions = ", ".join(f"{k} {v}" for k, v in sorted(lock.versions.items()))
        _plain(console, f"{lock.role} lock {lock.name} ({lock.lock_hash[:12]})"
               + (f": {versions}" if versions else "")
               + (f" [{lock.read_as}]" if lock.read_as else ""))
    if report.sandbox is not None and unconfined is None:
        _plain(console, f"sandbox: {report.sandbox}")
    for diff in report.lock_diffs:
        options = [row for o in diff.option_changes for row in option_lines(o)]
        changed = diff.changed
        console.print(f"lock changes: {len(changed) + len(options) or 'none'}")
        for change in changed:
            _plain(console, f"  {change_line(change)}"
                   + (f" (line {change.new_line})" if change.new_line else ""))
        for line, text in options:
            _plain(console, f"  {text}" + (f" (line {line})" if line else ""))
    for failure in report.rule_failures:
        where = failure.lock + (":" + ",".join(map(str, failure.lines)) if failure.lines else "")
        _plain(console, f"✗ {where}: {failure.rule}: {failure.message}")


def _explanations(console: Console, report: Report, width: int) -> None:
    """Each verdict worth a word: its reasons, and its compiled paths side by side."""
    for v in report.ordered():
        if v.verdict in QUIET_VERDICTS or not v.reasons:
            continue
        console.print(f"\n[bold]{escape(v.scenario)}[/bold]: {escape(verdict_name(v))}")
        for reason in v.reasons:
            for i, line in enumerate(reason.splitlines()):
                _wrapped(console, line, width, "  • " if i == 0 else "    ")
        rows = compile_rows(v.compile_diff) if v.compile_diff is not None else []
        if rows:
            side = Table(show_edge=False, pad_edge=False, box=None, padding=(0, 2, 0, 0))
            for column in ("  compiled path", "baseline", "candidate"):
                side.add_column(column, overflow="fold")
            for what, old, new in rows:
                side.add_row("  " + escape(what), escape(old), escape(new))
            console.print(side)


def _closing(console: Console, report: Report) -> None:
    """Bisections, step-0 parity, caveats, files written, notes, and the one-line outcome."""
    for bisection in report.bisection:
        _plain(console, "")
        for line in bisection_lines(bisection):
            _plain(console, line)
    if report.parity:
        console.print("\nstep-0 parity across frameworks (same data and weights):")
        for row in report.parity:
            cells = ", ".join(f"{k} {fmt_float(v)}" for k, v in row.step0.items())
            _plain(console, f"  {row.family}: {cells} (spread {row.max_rel_spread:.1e})")
    if report.frameworks is not None:
        _caveats(console, report)
    for path in report.written:
        _plain(console, f"wrote {path}")
    for note in report.notes:
        _plain(console, f"note: {note}")
    if report.command != "diff":
        outcome = "[green]PASS[/]" if report.passed else "[bold red]FAIL[/]"
        tally = ", ".join(f"{n} {verdict.value}" for verdict, n in report.tally())
        if report.accepted():
            tally += f" ({len(report.accepted())} accepted)"
        # A check that ran nothing took no time worth a figure.
        ran = report.evidence or report.command != "check"
        took = f" in {report.duration_s:.1f} s" if report.duration_s is not None and ran else ""
        console.print(f"\n{outcome} {report.command}: {escape(tally) or 'nothing to do'}{took}")


def _verdicts(console: Console, report: Report, width: int) -> None:
    """The verdict table; where its columns cannot fit the width without cutting words, the
    same cells as one block per scenario, wrapped (never cropped) at any width."""
    table = Table(show_edge=False, pad_edge=False, box=None, expand=False)
    table.add_column("", no_wrap=True)
    table.add_column("scenario", overflow="fold", max_width=28)
    table.add_column("verdict", overflow="fold")
    table.add_column("final loss", overflow="fold", max_width=26)
    table.add_column("step time", no_wrap=True)
    table.add_column("evidence", overflow="fold", ratio=1, min_width=16)
    rows = []
    for v in report.compared:
        style = STYLE.get(v.verdict, "")
        symbol = SYMBOL.get(v.verdict, "?")
        if v.accepted is not None:
            style, symbol = "green", "✓"
        rows.append((symbol, v.scenario, style, verdict_name(v), final_loss(v), timing(v),
                     summary_line(v)))
        table.add_row(symbol, escape(v.scenario), f"[{style}]{escape(verdict_name(v))}[/]",
                      final_loss(v), timing(v), escape(summary_line(v)))
    # The table only where every column fits whole beside a readable evidence column; below
    # that rich would crop cells (seen at 60 columns: "identical o"), so each scenario becomes a
    # block of wrapped lines instead.
    needed = (1 + max(len("scenario"), *(len(r[1]) for r in rows))
              + max(len("verdict"), *(len(r[3]) for r in rows))
              + max(5, *(len(w) for r in rows for w in r[4].split()))
              + max(len("step time"), *(len(r[5]) for r in rows)) + EVIDENCE_MIN + 2 * 5)
    if needed <= width:
        console.print(table)
        return
    for symbol, scenario, style, verdict, loss, step, evidence in rows:
        console.print(f"{symbol}  [bold]{escape(scenario)}[/bold]  [{style}]{escape(verdict)}[/]"
                      + (f"  step time {escape(step)}" if step != "—" else ""),
                      soft_wrap=False)
        for line in ([f"final loss {loss}"] if loss != "—" else []) + [evidence]:
            for piece in textwrap.wrap(line, max(8, width - 3), break_on_hyphens=False,
                                       break_long_words=True):
                console.print("   " + piece, markup=False)


def _frameworks(console: Console, report: Report) -> None:
    """compare-frameworks: a table per model family, its compiled paths against their plain
    twins, what a compiled path did not do, and the caveats."""
    table = report.frameworks
    assert table is not None
    for family, rows in table.families():
        console.print(f"\n[bold]{escape(family_title(table, family))}[/bold]")
        # 80 columns: the execution path under the scenario's name, the step-0 losses on a line
        # of their own; the name column wraps, the figures never do (nor are they cut).
        grid = Table(show_edge=False, pad_edge=False, box=None, expand=False)
        grid.add_column("scenario", overflow="fold", ratio=1)
        for name in FRAMEWORK_HEAD[STEP0 + 1:]:
            grid.add_column(name, no_wrap=True, justify="right")
        for row in rows:
            cells = [escape(c) for c in framework_cells(row)]
            style = STYLE.get(row.verdict, "") if row.verdict != Verdict.measured else ""
            name = f"[{style}]{cells[0]}[/]" if style else cells[0]
            grid.add_row(f"{name}\n  [dim]{cells[1]}[/]", *cells[STEP0 + 1:])
        console.print(grid)
        for line in family_notes(table, family, rows):
            for i, piece in enumerate(textwrap.wrap(line, max(20, console.width - 4))):
                console.print(("  " if i == 0 else "    ") + escape(piece))


def _caveats(console: Console, report: Report) -> None:
    table = report.frameworks
    assert table is not None
    console.print("\ncaveats:")
    for caveat in table.caveats:
        for i, piece in enumerate(textwrap.wrap(caveat, max(20, console.width - 4))):
            console.print(("  • " if i == 0 else "    ") + escape(piece))
