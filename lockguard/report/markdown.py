"""The Report as GitHub-flavoured Markdown, for a PR comment and the job summary, phone first.

The first line is a headline sentence (how many scenarios failed and how, and which lock
change); then the failing scenarios as short bullets that wrap on a narrow screen, the tally,
the locks and their changes, the command that reproduces it; the evidence of each scenario
comes folded in <details>. A hidden marker lets a bot find its comment and update it in place.
GitHub refuses a comment over 65,536 characters: the details are cut first, with a note.
"""

from __future__ import annotations

import math
import re

from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.names import QUIET_VERDICTS, Verdict
from lockguard.report.model import Report
from lockguard.report._common import (
    ACCEPTABLE, change_text, compile_rows, culprits, family_notes, family_title, final_loss,
    fmt_float, framework_cells, FRAMEWORK_HEAD, gate_lines, importance, lock_lines, LockLine,
    option_lines,
    sandbox_warning, reproduce, STEP0, summary_line, timing_line, timing_notes, trial_line,
    verdict_name,
)

MARKER = "<!-- lockguard-report -->"
# GitHub's limit is 65,536 characters; measured in UTF-8 bytes here, which are never fewer
# than characters or UTF-16 units, with room left for a bot's own wrapping.
LIMIT = 65_000

ICON = {
    Verdict.identical: "✅", Verdict.within_tolerance: "✅", Verdict.drift: "❌",
    Verdict.compile_fallback: "❌", Verdict.device_fallback: "❌", Verdict.slower: "⚠️",
    Verdict.heavier: "⚠️",
    Verdict.broken: "💥", Verdict.new: "🆕", Verdict.incomparable: "❓", Verdict.skipped: "➖",
    Verdict.other_hardware: "🖥️", Verdict.measured: "📏", Verdict.unchanged: "✅",
}

# "1 of 3 scenarios <verb>"
VERB = {
    Verdict.identical: "identical", Verdict.within_tolerance: "moved within tolerance",
    Verdict.drift: "drifted", Verdict.compile_fallback: "fell back from the compiled path",
    Verdict.device_fallback: "ran on the wrong device", Verdict.slower: "got slower",
    Verdict.heavier: "got heavier in memory",
    Verdict.broken: "broke", Verdict.new: "have no baseline",
    Verdict.incomparable: "could not be compared", Verdict.skipped: "skipped",
    Verdict.other_hardware: "moved with the hardware only", Verdict.measured: "measured",
    Verdict.unchanged: "unchanged since their goldens (not re-run)",
}

NAMED = 5  # at most this many --scenario options in a suggested command

# Verdicts an intended upgrade produces: `lockguard accept` makes its results the new goldens.


_MARKUP = re.compile(r"([\\`*_\[\]<>|~])")


def _text(text: str) -> str:
    """Plain text in Markdown: nothing in it becomes markup, a link, a table or HTML."""
    return _MARKUP.sub(r"\\\1", " ".join(text.split()).replace("&", "&amp;"))


def _code(text: str) -> str:
    """Inline code that survives any backticks inside it."""
    text = " ".join(text.split())
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _cell_code(text: str) -> str:
    """A table cell in code font: HTML <code>, since a backtick span cannot hold every reason
    (backticks, pipes) and a pipe would split the cell."""
    if text == "—":
        return text
    escaped = (" ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;")
               .replace(">", "&gt;").replace("`", "&#96;").replace("|", "&#124;"))
    return f"<code>{escaped}</code>"


def _block(lines: list[str], lang: str = "") -> list[str]:
    body = "\n".join(lines)
    fence = "```"
    while fence in body:
        fence += "`"
    return [fence + lang, *lines, fence]


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def _changes(lines: list[LockLine]) -> str:
    """The lock changes behind a headline, in a few words, the frameworks first (lock_lines'
    order) and the CUDA runtime wheels folded into one count: 'torch 2.9.1 → 2.10.0, numpy
    2.3.4 → 2.3.5, and 14 CUDA runtime wheels'."""
    texts = list(dict.fromkeys(line.short for line in lines if not line.cuda))
    cuda = len({line.short for line in lines if line.cuda})
    parts = texts[:2] + ([f"{len(texts) - 2} more"] if len(texts) > 2 else [])
    if cuda:
        parts.append(f"{cuda} CUDA runtime wheel{'s' if cuda > 1 else ''}")
    shown = ", ".join(parts[:-1]) + (" and " if len(parts) > 1 else "") + parts[-1] \
        if parts else ""
    return _text(shown)


def _worded(text: str) -> str:
    """A change or option line with its leading +/- as a word: "added six 1.17.0"."""
    if text.startswith("+ "):
        return "added " + text[2:]
    if text.startswith("- "):
        return "removed " + text[2:]
    return text


def _verb(verdict: Verdict) -> str:
    return VERB.get(verdict, verdict.value)


def headline(report: Report) -> str:
    """The comment's first line, a sentence with ✅ or ❌: how many scenarios failed and how, and
    which lock change did it (or what passed, with the tally)."""
    name = "lockguard" if report.command in ("check", "diff") else f"lockguard {report.command}"
    if report.command == "diff":
        n = sum(len(d.changed) + len(d.option_changes) for d in report.lock_diffs)
        return f"🔍 {name}: {_plural(n, 'lock change')}"
    compared = report.compared
    failing = [v for v in compared if report.fails(v)]
    if report.rule_failures:
        f = report.rule_failures[0]
        more = f" and {len(report.rule_failures) - 1} more" if len(report.rule_failures) > 1 else ""
        return f"❌ {name}: {_text(f.lock)} breaks the {_text(f.rule)} rule{more}"
    if failing:
        kinds = report.failing_tally()
        of = f"{len(failing)} of {_plural(len(compared), 'scenario')}"
        if len(kinds) == 1:
            what = f"{of} {_verb(kinds[0][0])}"
        else:
            what = f"{of} failed: " + ", ".join(f"{n} {_verb(k)}" for k, n in kinds)
        causes = _changes([line for v in failing for line in culprits(report, v)])
        return f"❌ {name}: {what}" + (f" ({causes})" if causes else "")
    if not report.passed:
        return f"❌ {name}: {_text(report.notes[0]) if report.notes else 'the gate failed'}"
    if not compared:
        return f"✅ {name}: {_text(report.notes[-1]) if report.notes else 'nothing to check'}"
    tally = ", ".join(f"{n} {_verb(k)}" for k, n in report.tally() if k != Verdict.skipped)
    if report.accepted():
        tally += f"; {_plural(len(report.accepted()), 'accepted change')}"
    causes = _changes([line for d in report.lock_diffs for line in lock_lines(report, d)])
    what = {"record": "recorded", "compare-frameworks": "measured"}.get(report.command, "passed")
    return (f"✅ {name}: {_plural(len(compared), 'scenario')} {what}"
            + (f" with {causes}" if causes else "") + f" ({tally})")


def _bullet(report: Report, v: ScenarioVerdict) -> str:
    icon = ICON.get(v.verdict, "•")
    evidence = summary_line(v)
    if v.accepted is not None:
        icon = "☑️"
    text = f"- {icon} **{_text(v.scenario)}** ({_text(v.framework)}): {_text(verdict_name(v))}"
    if evidence:
        text += f" — {_text(evidence)}"
    loss = final_loss(v)
    if loss != "—" and "→" in loss and v.verdict != Verdict.identical:
        text += f"; final loss {_text(loss)}"
    bisection = report.bisection_of(v.scenario)
    if bisection is not None:
        text += f"\n  - bisected: {_text(bisection.sentence())}"
    return text


def _details(report: Report, v: ScenarioVerdict) -> list[str]:
    lines = ["", f"<details><summary>{_text(v.scenario)}: {_text(verdict_name(v))}</summary>",
             ""]
    lines += _chart(report, v)
    lines += [f"- {_text(reason.splitlines()[0])}" for reason in v.reasons if reason.strip()]
    behind = culprits(report, v)
    if behind:
        lines += ["", "Lock lines behind it: " + "; ".join(
            _text(f"{c.lock}:{c.line} {c.text}" if c.line else f"{c.lock} {c.text}")
            for c in behind)]
    if v.error:
        lines += ["", *_block(v.error.splitlines())]
    bisection = report.bisection_of(v.scenario)
    if bisection is not None:
        lines += ["", f"Bisection: {_text(bisection.cost())}", ""]
        lines += [f"- {_text(trial_line(t).removeprefix('+ '))}" for t in bisection.trials]
        lines += [f"- note: {_text(note)}" for note in bisection.notes]
    rows = compile_rows(v.compile_diff) if v.compile_diff is not None else []
    if rows:
        lines += ["", "| compiled path | baseline | candidate |", "|---|---|---|"]
        lines += [f"| {_text(what)} | {_cell_code(old)} | {_cell_code(new)} |"
                  for what, old, new in rows]
    ratios = []
    if v.step_time_ratio is not None:
        ratios.append(f"step time ×{v.step_time_ratio:.2f}")
    if v.first_step_ratio is not None:
        ratios.append(f"first step ×{v.first_step_ratio:.2f}")
    if v.compile_time_ratio is not None:
        ratios.append(f"compile time ×{v.compile_time_ratio:.2f}")
    if ratios:
        lines += ["", "Timing (candidate / baseline, same machine): " + ", ".join(ratios)]
    said = timing_line(v)
    if said:
        lines += ["", f"Timing runs: {_text(said)}"]
    memory = [f"{what} ×{ratio:.2f}" for what, ratio in (
        ("host", v.memory_ratio), ("device", v.device_memory_ratio)) if ratio is not None]
    if memory:
        lines += ["", "Peak memory of the training (candidate / baseline, same machine): "
                  + ", ".join(memory)]
    lines += ["", "</details>"]
    return lines


def _head(report: Report, failing: list[ScenarioVerdict], limit_bullets: int | None) -> list[str]:
    lines = [headline(report), ""]
    unconfined = sandbox_warning(report)
    if unconfined is not None:
        lines += [f"> ⚠️ **{_text(unconfined)}**", ""]
    gate = gate_lines(report)
    if gate is not None:
        lines += [f"> ⚠️ **{_text(gate[0])}:**", ">"]
        lines += [f"> - {_text(change)}" for change in gate[1]]
        lines.append("")
    for f in report.rule_failures:
        where = f"{f.lock}:{','.join(map(str, f.lines))}" if f.lines else f.lock
        lines.append(f"- ❌ {_code(where)} {_text(f.rule)}: {_text(f.message)}")
    shown = failing if limit_bullets is None else failing[:limit_bullets]
    lines += [_bullet(report, v) for v in shown]
    if len(shown) < len(failing):
        lines.append(f"- … and {len(failing) - len(shown)} more failing scenarios "
                     "(the JSON report has them all)")
    notable = report.notable()
    if notable:
        if failing or report.rule_failures:
            lines += ["", "Also worth a look:"]
        more = notable if limit_bullets is None else notable[:limit_bullets]
        lines += [_bullet(report, v) for v in more]
        if len(more) < len(notable):
            lines.append(f"- … and {len(notable) - len(more)} more")
    tally = " · ".join(f"{n} {k.value}" for k, n in report.tally() if k != Verdict.skipped)
    if tally:
        lines += ["", f"**Tally:** {tally}"]
    for count, reason in report.skipped_groups():
        lines.append(f"{'' if tally else chr(10)}{count} skipped: {_text(reason)}")
    # The step times are not shown here: only why a timing was not judged.
    lines += [f"<sub>{_text(line)}</sub>" for line in timing_notes(report, marked=False)]
    if report.locks:
        lines += ["", "**Locks**"]
        for lock in report.locks:
            versions = ", ".join(f"{k} {v}" for k, v in sorted(lock.versions.items()))
            lines.append(f"- {lock.role} {_code(lock.name)} {_code(lock.lock_hash[:12])}"
                         + (f": {_text(versions)}" if versions else "")
                         + (f" ({_text(lock.read_as)})" if lock.read_as else ""))
    for diff in report.lock_diffs:
        ordered = sorted(diff.changed, key=importance)
        cuda = [c for c in ordered if "cuda" in c.families]
        rows = [(c.new_line, change_text(c)) for c in ordered if c not in cuda]
        rows += [row for o in diff.option_changes for row in option_lines(o)]
        lock = next((info for info in report.locks if info.source == diff.new_source), None)
        where = f" in {_code(lock.name)}" if lock else ""
        count = len(rows) + len(cuda)
        lines += ["", f"**Lock changes**{where}: {count or 'none'}"]
        # A leading "+ "/"- " would nest a Markdown list: said in words.
        lines += [f"- {_text(_worded(text))}" + (f" (line {line})" if line else "")
                  for line, text in rows]
        if cuda:
            lines.append(f"- {len(cuda)} CUDA runtime wheel{'s' if len(cuda) > 1 else ''}: "
                         + _text(", ".join(_worded(change_text(c)) for c in cuda)))
    # Name the scenarios when a few failed; many are quicker to re-run all together.
    named = [v.scenario for v in failing] if len(failing) <= NAMED else []
    command = reproduce(report, named) if failing else None
    if command:
        lines += ["", "**Reproduce locally**", "", *_block([command], "sh")]
    acceptable = [v.scenario for v in failing if v.verdict in ACCEPTABLE]
    if (report.command == "check" and report.mode in ("golden", "ab") and acceptable
            and len(acceptable) == len(failing)):
        accept = (["lockguard", "accept"] + [a for s in named for a in ("--scenario", s)]
                  + ['--reason "why the change is intended"'])
        lines += ["", "If the change is intended, accept it: run the same check locally and "
                  "then this (or add `--from DIR` with this run's downloaded artefacts), and "
                  "commit the golden files it writes with the lock — the gate then passes "
                  "these numbers, for these locks only:", "", *_block([" ".join(accept)], "sh")]
    for note in report.notes:
        lines += ["", f"> {_text(note)}"]
    return lines


def _closing(report: Report) -> list[str]:
    lines: list[str] = []
    if report.parity:
        lines += ["", "<details><summary>Step-0 parity across frameworks</summary>", ""]
        for row in report.parity:
            cells = ", ".join(f"{_text(k)} {fmt_float(v)}" for k, v in row.step0.items())
            lines.append(f"- {_text(row.family)}: {cells} (spread {row.max_rel_spread:.1e})")
        lines += ["", "</details>"]
    if report.written:
        lines += ["", f"<details><summary>{_plural(len(report.written), 'golden')} written"
                  "</summary>", "", *[f"- {_code(p)}" for p in report.written], "",
                  "</details>"]
    took = f" in {report.duration_s:.1f} s" if report.duration_s is not None else ""
    made = f"lockguard {report.lockguard_version} · {report.command} ({report.mode}){took}"
    if report.base is not None:
        made += f" · base {_code(report.base.ref)} at {_code(report.base.merge_base[:12])}"
    lines += ["", f"<sub>{made}</sub>"]
    return lines


def _frameworks(report: Report) -> list[str]:
    """compare-frameworks: a table per model family (its step-0 losses in one line under it),
    compiled paths against their plain twins, and the caveats folded."""
    table = report.frameworks
    if table is None:
        return []
    head = [h for i, h in enumerate(FRAMEWORK_HEAD) if i != STEP0]
    lines: list[str] = []
    for family, rows in table.families():
        lines += ["", f"**{_text(family_title(table, family))}**", "",
                  "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        for row in rows:
            cells = [_text(c) for i, c in enumerate(framework_cells(row)) if i != STEP0]
            lines.append("| " + " | ".join(cells) + " |")
        extra = family_notes(table, family, rows)
        if extra:
            lines += [""] + [f"- {_text(line)}" for line in extra]
    lines += ["", "<details><summary>What these figures say (caveats)</summary>", ""]
    lines += [f"- {_text(caveat)}" for caveat in table.caveats]
    return lines + ["", "</details>"]


CHART_POINTS = 40  # steps a chart shows at most (evenly picked, the last one included)


def _chart(report: Report, v: ScenarioVerdict) -> list[str]:
    """Both sides' loss per step as a chart GitHub draws (a Mermaid xychart): the two curves
    where they part visibly, else |Δloss| (at 1e-7 two curves are one line)."""
    ev = report.evidence_of(v.scenario)
    if ev is None or ev.baseline is None or ev.candidate is None:
        return []
    old, new = ev.baseline.result.losses, ev.candidate.result.losses
    n = min(len(old), len(new))
    if n < 2 or not all(math.isfinite(x) for x in (*old[:n], *new[:n])):
        return []
    steps = sorted({round(i * (n - 1) / (CHART_POINTS - 1)) for i in range(CHART_POINTS)}
                   if n > CHART_POINTS else range(n))
    delta = [abs(new[i] - old[i]) for i in steps]
    spread = max(max(abs(old[i]) for i in steps), 1e-300)
    apart = max(delta) / spread > 1e-3
    if not apart and max(delta) == 0:
        return []
    series = [[old[i] for i in steps], [new[i] for i in steps]] if apart else [delta]
    exponent, rows = _scaled(series)
    unit = f" ×1e{exponent}" if exponent else ""
    what = "loss per step: baseline, then candidate" if apart else "|Δloss| per step"
    lines = ["```mermaid", "xychart-beta", f'    title "{_quoted(v.scenario)}: {what}"',
             f'    x-axis "step" [{", ".join(str(i) for i in steps)}]',
             f'    y-axis "{"loss" if apart else "|Δloss|"}{unit}"']
    lines += [f"    line [{', '.join(row)}]" for row in rows]
    return lines + ["```", ""]


def _scaled(series: list[list[float]]) -> tuple[int, list[list[str]]]:
    """Values as plain decimals (Mermaid reads no exponents), scaled by a power of ten so the
    largest has a few digits before the point; the exponent is said on the axis."""
    top = max(abs(x) for row in series for x in row) or 1.0
    exponent = math.floor(math.log10(top))
    exponent = 0 if -2 <= exponent <= 3 else exponent
    factor = 10.0 ** -exponent
    return exponent, [[f"{x * factor:.6f}".rstrip("0").rstrip(".") or "0" for x in row]
                      for row in series]


def _quoted(text: str) -> str:
    return text.replace('"', "'")


def _all_scenarios(report: Report) -> list[str]:
    compared = report.compared
    lines = ["", f"<details><summary>All {_plural(len(compared), 'scenario')}</summary>", ""]
    for v in compared:
        loss = final_loss(v)
        lines.append(f"- {ICON.get(v.verdict, '•')} {_text(v.scenario)} ({_text(v.framework)}):"
                     f" {v.verdict.value}" + (f", final loss {_text(loss)}" if loss != "—" else ""))
    lines += ["", "</details>"]
    return lines


def _size(lines: list[str]) -> int:
    return sum(len(line.encode("utf-8")) + 1 for line in lines)


def _cut_note(cut: int, total: int) -> list[str]:
    return ["", f"> {cut} of {total} folded sections were cut to stay under GitHub's "
            "65,536-character comment limit; `--report json=PATH` keeps them all."]


def render(report: Report, limit: int = LIMIT) -> str:
    """The report as Markdown for a PR comment or job summary, at most `limit` bytes (GitHub
    refuses a comment over 65,536 characters): the folded details are cut first, with a note."""
    ordered = report.ordered()
    failing = [v for v in ordered if report.fails(v)]
    # Folded sections, most severe first (the last ones are cut first), built only as far as
    # they fit: a report of thousands of scenarios need not render them all.
    makers = [lambda v=v: _details(report, v) for v in ordered
              if v.verdict not in QUIET_VERDICTS and (v.reasons or v.error)]
    if any(v.verdict in (Verdict.identical, Verdict.unchanged) for v in report.compared):
        makers.append(lambda: _all_scenarios(report))
    tail = _closing(report) + ["", MARKER]
    bullets: int | None = None  # all of them, unless even they do not fit
    while True:
        head = _head(report, failing, bullets) + _frameworks(report)
        budget = limit - _size(head) - _size(tail) - _size(_cut_note(len(makers), len(makers)))
        if budget >= 0 or bullets == 0:
            break
        bullets = 50 if bullets is None else bullets // 2  # thousands of failing scenarios
    kept: list[list[str]] = []
    used = 0
    for make in makers:
        section = make()
        used += _size(section)
        if used > budget:
            break
        kept.append(section)
    cut = len(makers) - len(kept)
    body = head + (_cut_note(cut, len(makers)) if cut else []) \
        + [line for section in kept for line in section] + tail
    body = [line for i, line in enumerate(body) if line or (i and body[i - 1])]
    text = "\n".join(body) + "\n"
    if len(text.encode("utf-8")) > limit:  # one enormous note or reason: cut hard
        end = "\n…\n\n" + MARKER + "\n"
        room = limit - len(end.encode("utf-8"))
        text = text.encode("utf-8")[:room].decode("utf-8", "ignore") + end
    return text
