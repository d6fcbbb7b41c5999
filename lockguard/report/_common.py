"""Wording shared by the renderers: one phrasing per fact (the lock lines behind a verdict,
the command that reproduces a check, a change, a timing, the next steps), so that every format
says the same; the Report model (report/model.py) holds the facts and no wording.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockguard.compare.compile import CompileDiff, layer_text, location_of
from lockguard.compare.figures import mib, seconds
from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.locks.diff import Change, LockDiff, OptionChange
from lockguard.locks.model import FRAMEWORK_DISTS
from lockguard.names import Verdict
from lockguard.scenarios import libraries_of, model_libraries

if TYPE_CHECKING:
    from lockguard.report.model import Bisection, FrameworkRow, FrameworkTable, MixTrial, Report
    from lockguard.results import CompileMemory

SYMBOL = {
    Verdict.identical: "=", Verdict.within_tolerance: "≈", Verdict.drift: "✗",
    Verdict.compile_fallback: "✗", Verdict.device_fallback: "✗", Verdict.slower: "!",
    Verdict.heavier: "!",
    Verdict.broken: "✗", Verdict.new: "+", Verdict.incomparable: "?", Verdict.skipped: "-",
    Verdict.other_hardware: "~", Verdict.measured: "·", Verdict.unchanged: "=",
}


# Verdicts an intended change can produce, and `lockguard accept` can adopt (a broken run or
# one on the wrong device is never an intended change).
ACCEPTABLE = {Verdict.drift, Verdict.compile_fallback, Verdict.slower, Verdict.heavier,
              Verdict.within_tolerance}


def fmt_float(value: float | None) -> str:
    """A figure for a table cell: 6 significant digits, scientific below 1e-4 so that tiny
    differences keep their digits; a dash for None."""
    if value is None:
        return "—"
    return f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"


def final_loss(v: ScenarioVerdict) -> str:
    """The final-loss cell, "old → new": 9 significant digits when the two differ (enough to
    tell float32 values apart), just the new value with no baseline, a dash with neither."""
    if v.final_loss_old is None and v.final_loss_new is None:
        return "—"
    if v.final_loss_old is None:
        return fmt_float(v.final_loss_new)
    if v.final_loss_new is not None and v.final_loss_old != v.final_loss_new:
        # Differences often hide in the last digits: show enough to round-trip a float32.
        return f"{v.final_loss_old:.9g} → {v.final_loss_new:.9g}"
    return f"{fmt_float(v.final_loss_old)} → {fmt_float(v.final_loss_new)}"


def summary_line(v: ScenarioVerdict) -> str:
    """The one most useful fact about a verdict, for the table's last column."""
    if v.verdict == Verdict.unchanged:
        return "not re-run (--rerun runs it)"  # the why, once for all: the verdict's reason
    if v.first_batch_differs is not None:
        return f"sample order changed from batch {v.first_batch_differs}"
    across = v.hardware is not None and v.verdict in (Verdict.other_hardware,
                                                      Verdict.incomparable)
    if v.first_divergent_step is not None and (across or v.verdict in (
            Verdict.drift, Verdict.within_tolerance, Verdict.compile_fallback)):
        head = f"from step {v.first_divergent_step}"
        if across:
            head = ("golden of other hardware" + ("" if v.hardware.same_inputs else
                                                  " and other inputs") + "; " + head)
        if v.losses is not None and v.losses.max_abs_index is not None:
            head += (f"; max |Δloss| {fmt_float(v.losses.max_abs)} at step "
                     f"{v.losses.max_abs_index}, rel {fmt_float(v.losses.max_rel)}")
            if v.losses.max_ulp is not None:
                head += f", {v.losses.max_ulp} ulp"
        return head
    if v.reasons:
        return v.reasons[0].splitlines()[0]
    return ""


# Marks a step-time ratio that judges nothing (timing_notes says why).
UNJUDGED = "*"


def timing(v: ScenarioVerdict) -> str:
    """The step-time cell: the timing runs' ratio and interval where there were timing runs;
    a ratio that judges nothing (runs made side by side, or steps too short to time) marked."""
    check = v.timing
    if check is not None and check.ratio is not None and check.low is not None \
            and check.verdict != "not judged":
        return f"×{check.ratio:.2f} ({check.low:.2f}–{check.high:.2f})"
    if v.step_time_ratio is None:
        return "—"
    return f"×{v.step_time_ratio:.2f}{UNJUDGED}"


def timing_notes(report: Report, marked: bool = True) -> list[str]:
    """What the step-time column can and cannot say, one line each: the scenarios whose timing
    was not judged and why, and (`marked`: for a format that shows the ratios) what an
    unjudged, marked ratio is."""
    reasons: dict[str, list[str]] = {}
    for v in report.compared:
        if v.timing is not None and v.timing.verdict == "not judged":
            reasons.setdefault(v.timing.reason, []).append(v.scenario)
    lines = [f"timing not judged for {', '.join(ids)}: {reason}"
             for reason, ids in reasons.items()]
    if marked and any(v.step_time_ratio is not None and (
            v.timing is None or v.timing.verdict == "not judged") for v in report.compared):
        lines.append(f"step time ×ratio{UNJUDGED}: from runs that judge nothing (made side by "
                     "side, or too short to time); `slower` is judged only from timing runs "
                     "(--timing, or slower in fail_on)")
    return lines


def timing_line(v: ScenarioVerdict) -> str | None:
    """What the timing runs said, in a sentence: 'step median ×1.42, 99 % CI ×1.31–×1.55, 5
    runs a side (one at a time, alternating): slower'."""
    check = v.timing
    if check is None:
        return None
    measure = (f"step ({check.block_steps} timed together)" if check.measure == "step block"
               else check.measure)
    return (f"{measure} ×{check.ratio:.2f} ({check.interval()}, one at a time, "
            f"alternating; run to run ×{check.spread:.2f}): {check.verdict}"
            if check.ratio is not None and check.spread is not None
            else f"{check.verdict} ({check.reason})")


def change_text(change: Change) -> str:
    """One package change, e.g. 'numpy 1.26.4 → 2.0.2 (upgraded, major)', and what it installs
    that runs at every interpreter start (startup_note)."""
    name = change.display_name or change.name
    note = startup_note(change)
    note = f"; {note}" if note else ""
    if change.kind == "added":
        return f"+ {name} {change.new_version}{note}"
    if change.kind == "removed":
        return f"- {name} {change.old_version}"
    if change.kind == "rehashed":
        return f"~ {name} {change.new_version} (same version, different hashes){note}"
    bump = f", {change.bump}" if change.bump else ""
    return f"{name} {change.old_version} → {change.new_version} ({change.kind}{bump}){note}"


def startup_note(change: Change) -> str | None:
    """'ships foo.pth: code that runs at every interpreter start' for a pin whose distribution
    installed such files; None for one that did not (or that was not installed here)."""
    runs = [f.file for f in change.startup_files if f.runs_code]
    paths = [f.file for f in change.startup_files if not f.runs_code]
    said = []
    if runs:
        said.append(f"ships {', '.join(runs)}: code that runs at every interpreter start")
    if paths:
        said.append(f"ships {', '.join(paths)}: adds to sys.path at every interpreter start")
    return "; ".join(said) or None


def change_short(change: Change) -> str:
    """A change in a few words, for a headline: 'numpy 1.26.4 → 2.0.2'."""
    name = change.display_name or change.name
    if change.kind in ("upgraded", "downgraded"):
        return f"{name} {change.old_version} → {change.new_version}"
    if change.kind == "removed":
        return f"- {name} {change.old_version}"
    return f"{'+' if change.kind == 'added' else '~'} {name} {change.new_version}"


def change_line(change: Change) -> str:
    """A change with its families, aligned under +/-/~ marks: '  numpy 1.26.4 → 2.0.2
    (upgraded, major) [numpy]'."""
    text = change_text(change)
    if change.kind not in ("added", "removed", "rehashed"):
        text = "  " + text
    if change.families:
        text += f" [{', '.join(change.families)}]"
    return text


def option_lines(option: OptionChange) -> list[tuple[int | None, str]]:
    """(line in the new lock, or None) and '+ --extra-index-url URL' / '- ...' for each
    installer option value added or removed; a reordering (index priority) is one '~' row."""
    def spell(value: str) -> str:
        return value if option.option == "other" else f"--{option.option} {value}"

    added = [v for v in option.new if v not in option.old]
    removed = [v for v in option.old if v not in option.new]
    lines = iter(option.added_lines)
    rows: list[tuple[int | None, str]] = [(next(lines, None), "+ " + spell(v)) for v in added]
    rows += [(None, "- " + spell(v)) for v in removed]
    if not added and not removed:
        rows.append((option.added_lines[0] if option.added_lines else None,
                     f"~ --{option.option} order: " + ", ".join(option.new)))
    return rows


def compile_rows(diff: CompileDiff) -> list[tuple[str, str, str]]:
    """The compiled path old and new side by side: (what, baseline, candidate) rows.

    Counts appear when they changed; break reasons are paired: a reason on both sides shares a
    row, a reworded one sits beside its old wording, a removed one has "—" on the right and an
    added one "—" on the left. Empty when nothing about the compiled path changed.
    """
    if not (diff.regressions or diff.improvements or diff.reworded_break_reasons or diff.notes):
        return []
    rows: list[tuple[str, str, str]] = []

    def count(label: str, old: object, new: object) -> None:
        if old != new:
            rows.append((label, _show(old), _show(new)))

    count("graph breaks", diff.graph_breaks_old, diff.graph_breaks_new)
    count("recompiles", diff.recompiles_old, diff.recompiles_new)
    count("eager fallbacks", diff.eager_fallbacks_old, diff.eager_fallbacks_new)
    count("backend", diff.backend_old, diff.backend_new)
    if diff.xla_old != diff.xla_new:
        rows.append(("XLA", _on_off(diff.xla_old), _on_off(diff.xla_new)))
    for what, changes in (("traces", diff.traces), ("compilations", diff.compilations)):
        for function, change in changes.items():
            rows.append((f"{what} of {function}", str(change.old), str(change.new)))
    rows += reason_pairs("break", diff.break_reasons_old, diff.break_reasons_new,
                         diff.reworded_break_reasons)
    rows += break_layer_rows(diff)
    rows += reason_pairs("recompile", diff.recompile_reasons_old, diff.recompile_reasons_new, [])
    if diff.compile_s_old is not None and diff.compile_s_new is not None:
        rows.append(("compile time", f"{diff.compile_s_old:.2f} s", f"{diff.compile_s_new:.2f} s"))
    sides = [_eager_compiled(m) for m in (diff.memory_old, diff.memory_new)]
    if any(sides):
        rows.append(("peak device memory, eager → compiled", sides[0] or "—", sides[1] or "—"))
    return rows


def _eager_compiled(memory: CompileMemory | None) -> str | None:
    if memory is None or memory.eager_device is None or memory.compiled_device is None:
        return None
    return f"{memory.eager_device / 2**20:.1f} → {memory.compiled_device / 2**20:.1f} MiB"


def break_layer_rows(diff: CompileDiff) -> list[tuple[str, str, str]]:
    """A row per added or removed graph break the harness placed: the layer that breaks
    (module path, class and method, the frame Dynamo stopped in) on its side."""
    reworded = {reason for pair in diff.reworded_break_reasons for reason in pair}
    rows: list[tuple[str, str, str]] = []
    for reason in diff.break_reasons_new:
        where = location_of(reason, diff.break_locations_new)
        if reason not in diff.break_reasons_old and reason not in reworded and where:
            rows.append(("+ break, layer", "—", layer_text(where)))
    for reason in diff.break_reasons_old:
        where = location_of(reason, diff.break_locations_old)
        if reason not in diff.break_reasons_new and reason not in reworded and where:
            rows.append(("- break, layer", layer_text(where), "—"))
    return rows


def reason_pairs(label: str, old: list[str], new: list[str],
                 reworded: list[list[str]]) -> list[tuple[str, str, str]]:
    """Rows of reasons: common ones first, then reworded pairs, removed and added ones."""
    if old == new:
        return []
    pairs = {o: n for o, n in reworded}
    paired_new = set(pairs.values())
    rows = [(label, r, r) for r in old if r in new]
    rows += [(label + " (reworded)", o, n) for o, n in pairs.items()]
    rows += [("- " + label, r, "—") for r in old if r not in new and r not in pairs]
    rows += [("+ " + label, "—", r) for r in new if r not in old and r not in paired_new]
    return rows


def _show(value: object) -> str:
    return "—" if value is None else str(value)


def _on_off(value: bool | None) -> str:
    return "—" if value is None else ("on" if value else "off")


def trial_line(trial: MixTrial) -> str:
    """One mix a bisection tried: '+ numpy 1.26.4 → 2.0.2: reproduces (drift; 2.1 s build,
    0.4 s run)'."""
    what = ", ".join(trial.changes) or "nothing"
    cost = []
    if trial.build_s is not None:
        cost.append(f"{trial.build_s:.1f} s build")
    if trial.run_s is not None:
        cost.append(f"{trial.run_s:.1f} s run")
    detail = "; ".join(x for x in [trial.verdict or "", ", ".join(cost)] if x)
    if trial.status in ("inconsistent", "broken") and trial.reason:
        detail = "; ".join(x for x in [detail, trial.reason] if x)
    detail = "; ".join(x for x in [detail, *trial.kept] if x)
    return f"+ {what}: {trial.status}" + (f" ({detail})" if detail else "")


def bisection_lines(bisection: Bisection) -> list[str]:
    """A bisection in a few lines: the culprit sentence, its cost, then every mix tried."""
    return ([bisection.sentence(), f"bisection: {bisection.cost()}"]
            + [f"  {trial_line(t)}" for t in bisection.trials]
            + [f"  note: {note}" for note in bisection.notes])


# ------------------------------------------------------------------------- compare-frameworks

FRAMEWORK_HEAD = ("scenario", "execution", "step 0 loss", "final loss", "1st step", "step",
                  "×fastest", "peak mem")
STEP0 = FRAMEWORK_HEAD.index("step 0 loss")


def ratio(value: float | None) -> str:
    """A ratio as "×1.23"; a dash when it was not measured."""
    return "—" if value is None else f"×{value:.2f}"


def family_title(table: FrameworkTable, family: str) -> str:
    """The heading of one family's compare-frameworks table, with its step count, saying why its
    rows can be compared at all."""
    steps = table.steps.get(family)
    return (f"{family}" + (f", {steps} steps" if steps else "")
            + ": same data and initial weights in every framework")


def step0_line(table: FrameworkTable, family: str, rows: list[FrameworkRow]) -> str | None:
    """The family's step-0 losses in one line: they agree to float rounding, or the harness
    is wrong."""
    losses = [row.step0_loss for row in rows if row.step0_loss is not None]
    if not losses:
        return None
    spread = table.step0_spread.get(family)
    if spread is None:
        return f"step 0 loss {fmt_float(losses[0])}"
    if spread == 0:
        return f"step 0 loss {fmt_float(losses[0])} in all {len(losses)} scenarios"
    return (f"step 0 loss {min(losses):.9g} to {max(losses):.9g} over {len(losses)} scenarios: "
            f"relative spread {spread:.1e}")


def framework_cells(row: FrameworkRow) -> list[str]:
    """A row of the compare-frameworks table, in FRAMEWORK_HEAD's order; what does not fit a
    cell (the verdict of a run that broke, a device peak, the compiled path's notes) is in
    row_notes."""
    return [row.scenario, row.execution, fmt_float(row.step0_loss), fmt_float(row.final_loss),
            seconds(row.first_step_s), seconds(row.step_s), ratio(row.step_vs_fastest),
            mib(row.peak_memory_bytes)]


def row_notes(row: FrameworkRow) -> list[str]:
    """What a reader must know of a row beyond its cells, one sentence each."""
    out = []
    if row.verdict != Verdict.measured:
        out.append(f"{row.scenario}: {row.verdict.value} (below): its figures are missing")
    if row.peak_device_memory_bytes is not None:
        out.append(f"{row.scenario}: peak device memory {mib(row.peak_device_memory_bytes)}")
    if row.plain is not None:
        parts = [f"{what} {ratio(value)}" for what, value in (
            ("step", row.step_vs_plain), ("first step", row.first_step_vs_plain),
            ("peak memory", row.memory_vs_plain)) if value is not None]
        if parts:
            out.append(f"{row.scenario} against {row.plain}: " + ", ".join(parts))
    out += [f"{row.scenario}: {note}" for note in row.notes]
    return out


def family_notes(table: FrameworkTable, family: str, rows: list[FrameworkRow]) -> list[str]:
    """The lines under a family's table in every format: its step-0 losses, then each row's
    notes."""
    step0 = step0_line(table, family, rows)
    return ([step0] if step0 else []) + [note for row in rows for note in row_notes(row)]


def row_line(row: FrameworkRow) -> str:
    """One row of the table as a sentence, for formats with no tables."""
    return (f"{row.execution} on {row.device}: step {seconds(row.step_s)} "
            f"({ratio(row.step_vs_fastest)} the family's fastest), first step "
            f"{seconds(row.first_step_s)}, peak memory {mib(row.peak_memory_bytes)}, step-0 loss "
            f"{fmt_float(row.step0_loss)}, final loss {fmt_float(row.final_loss)}")


def framework_summary(table: FrameworkTable) -> list[str]:
    """The compare-frameworks table in a few plain lines, for formats with no tables (a JUnit
    suite's output, an Actions notice): each family by step time, then every row's notes."""
    lines = [fastest_line(family, rows) for family, rows in table.families()]
    return lines + [note for row in table.rows for note in row_notes(row)]


def fastest_line(family: str, rows: list[FrameworkRow]) -> str:
    """One family in a sentence: its rows by steady step, fastest first."""
    timed = sorted((row for row in rows if row.step_s is not None), key=lambda r: r.step_s)
    if not timed:
        return f"{family}: no healthy run to time"
    return f"{family}: " + ", ".join(
        f"{row.scenario} {seconds(row.step_s)}"
        + ("" if row is timed[0] else f" {ratio(row.step_vs_fastest)}") for row in timed)


def sandbox_warning(report: Report) -> str | None:
    """The line every format puts first when the runs' lock code ran unsandboxed (sandbox =
    "off", or none to be had under "auto"); None when it was confined or nothing ran."""
    text = report.sandbox
    if text is None or not (text.startswith("off") or text.startswith("none")):
        return None
    return f"sandbox {text}"


def gate_lines(report: Report) -> tuple[str, list[str]] | None:
    """`check --base`: the sentence saying this change alters the gate, and what it changes;
    None when it changes nothing of it. Every format says it before anything else."""
    gate = report.gate
    headline = gate.headline() if gate is not None else None
    if headline is None:
        return None
    return headline, list(gate.changes)


def verdict_name(v: ScenarioVerdict) -> str:
    """The verdict as a reader should see it: an accepted change says so."""
    return f"{v.verdict.value} (accepted)" if v.accepted is not None else v.verdict.value


def next_steps(report: Report) -> list[str]:
    """After a failing check, what to run next: accept an intended change, find the package
    behind it. (The Markdown report says the same in its own words.)"""
    failing = [v for v in report.compared if report.fails(v)]
    if report.command != "check" or report.passed or not failing:
        return []
    named = [a for v in failing for a in ("--scenario", v.scenario)] if len(failing) <= 3 \
        else []
    out = []
    if all(v.verdict in ACCEPTABLE for v in failing) and report.mode in ("golden", "ab"):
        out.append("if the change is intended: " + " ".join(
            ["lockguard", "accept", *named, '--reason "why it is intended"'])
            + ", then commit the golden files it writes with the lock")
    if report.mode == "ab" and not report.bisection and report.invocation[1:2] == ["check"]:
        argv, skip = [], False
        for arg in report.invocation[2:]:
            if skip or arg in ("--repeat", "--bisect", "--rerun", "--allow-new"):
                skip = arg == "--repeat" and not skip
                continue
            argv.append(arg)
        out.append("to find the package change behind it: "
                   + " ".join(["lockguard", "bisect", *argv, *named]))
    return out


@dataclass(frozen=True)
class LockLine:
    """One changed line of a candidate lock, for annotations and bullets."""

    lock: str  # display path of the lock file
    line: int | None
    text: str  # e.g. "numpy 1.26.4 → 2.0.2 (upgraded, major)" or "+ --extra-index-url URL"
    short: str  # e.g. "numpy 1.26.4 → 2.0.2"
    cuda: bool = False  # an NVIDIA/CUDA runtime wheel: a headline folds them into one count


def lock_lines(report: Report, diff: LockDiff) -> list[LockLine]:
    """Every changed line of the diff's candidate lock: packages, then installer options."""
    lock = next((info for info in report.locks
                 if info.role == "candidate" and info.source == diff.new_source), None)
    path = lock.path if lock else diff.new_source
    lines = [_line(path, c) for c in sorted(diff.changed, key=importance)]
    for option in diff.option_changes:
        lines += [LockLine(path, line, text, text) for line, text in option_lines(option)]
    return lines


def culprits(report: Report, verdict: ScenarioVerdict) -> list[LockLine]:
    """The changed lock lines that can explain a scenario's verdict: those of its framework's
    family (and CUDA wheels) and of the model libraries a library scenario trains with, in the
    lock it ran from; when none changed, every changed line of that lock (any package, index or
    option can move the numbers)."""
    lock = report.lock_of(verdict)
    diff = report.diff_of(lock) if lock else None
    if lock is None or diff is None:
        return []
    mine, libraries = {verdict.framework, "cuda"}, libraries_of(verdict.scenario)
    lines = [_line(lock.path, c) for c in sorted(diff.changed, key=importance)
             if mine & set(c.families) or c.name in libraries]
    return lines or lock_lines(report, diff)


def importance(change: Change) -> tuple[int, str]:
    """How soon a change is named: a framework itself, then what belongs to a framework's
    family or is a model library, then everything else, then the CUDA runtime wheels (which
    move by the dozen with any CUDA framework)."""
    if any(change.name in dists for dists in FRAMEWORK_DISTS.values()):
        rank = 0
    elif "cuda" in change.families:
        rank = 3
    elif change.families or change.name in model_libraries():
        rank = 1
    else:
        rank = 2
    return rank, change.name


def _line(path: str, change: Change) -> LockLine:
    return LockLine(path, change.new_line, change_text(change), change_short(change),
                    cuda="cuda" in change.families)


def bisected(report: Report, verdict: ScenarioVerdict) -> list[LockLine]:
    """The lock lines a confirmed bisection found behind a scenario's verdict; empty when it
    was not bisected or nothing was confirmed."""
    found = report.bisection_of(verdict.scenario)
    lock = report.lock_of(verdict)
    diff = report.diff_of(lock) if lock else None
    if found is None or not found.found or diff is None:
        return []
    return [line for line in lock_lines(report, diff)
            if line.line is not None and line.line in found.culprit_lines]


def reproduce(report: Report, scenarios: list[str]) -> str | None:
    """The command that re-runs these scenarios as the report ran them."""
    if not report.invocation:
        return None
    argv = list(report.invocation)
    for sid in scenarios:
        argv += ["--scenario", sid]
    return shlex.join(argv)
