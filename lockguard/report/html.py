"""The Report as one self-contained HTML page: no script, no request, readable on a phone.

Order: the lock changes (packages, indexes, installer options), the verdicts, then per scenario
its evidence: both loss curves overlaid, the difference |Δ| per step on a log scale with the
band the tolerance allows and the first divergent step marked (a drift of a few ULP vanishes in
an overlay; the Δ plot shows it), the series figures, outputs and parameter digests, compile
diagnostics side by side, device, timings and memory, and the fingerprints folded away.

Everything shown comes from the Report; what is worked out here is drawing (|Δ| per step, the
band's height per step from the Report's tolerance, axis scales). A Content-Security-Policy
forbids every fetch, so a hostile string that escaped escaping still could not load anything.
"""

from __future__ import annotations

import json
import math
import re
from html import escape

from lockguard.compare.compile import accuracy_text
from lockguard.compare.numerics import SeriesDiff
from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.names import Verdict
from lockguard.report._common import (
    change_text, compile_rows, culprits, family_notes, family_title, final_loss, fmt_float,
    framework_cells, FRAMEWORK_HEAD, gate_lines, mib, option_lines, reproduce, sandbox_warning,
    seconds, summary_line, timing, timing_line, timing_notes, verdict_name,
)
from lockguard.report.model import Bisection, Evidence, Report, Side
from lockguard.report.svg import Line, Mark, chart
from lockguard.results import RunResult

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"
NO_EVIDENCE = "no per-step data in this report"

STYLE = """
:root{color-scheme:light dark;--fg:#1f2328;--bg:#fff;--muted:#59636e;--line:#d1d9e0;
--soft:#f6f8fa;--bad:#cf222e;--good:#1a7f37;--warn:#9a6700;--base:#0969da;--cand:#e16f24;
--delta:#8250df;--band:rgba(26,127,55,.18)}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--bg:#0d1117;--muted:#9198a1;
--line:#3d444d;--soft:#151b23;--bad:#f85149;--good:#3fb950;--warn:#d29922;--base:#4493f8;
--cand:#f0883e;--delta:#ab7df8;--band:rgba(63,185,80,.22)}}
*{box-sizing:border-box}
body{font:16px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;max-width:62rem;padding:0 .75rem 2rem;
overflow-wrap:break-word}
h1{font-size:1.35rem;margin:1rem 0 .25rem}h2{font-size:1.15rem;margin:1.75rem 0 .5rem;
border-bottom:1px solid var(--line)}h3{font-size:1rem;margin:1rem 0 .35rem}
.meta,figcaption,.note{color:var(--muted);font-size:.85rem}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;font-size:.88rem;margin:.25rem 0;width:100%}
.digest,.prose{overflow-wrap:anywhere}
th,td{border-bottom:1px solid var(--line);padding:.3rem .5rem;text-align:left;vertical-align:top}
th{background:var(--soft)}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.85em}
pre{white-space:pre-wrap;background:var(--soft);padding:.5rem;border-radius:4px;margin:.25rem 0}
ul.reasons li{white-space:pre-wrap}
.bad{color:var(--bad);font-weight:600}.good{color:var(--good)}.warn{color:var(--warn)}
details{margin:.5rem 0}summary{cursor:pointer;color:var(--muted)}
.charts{display:grid;grid-template-columns:repeat(auto-fit,minmax(min(100%,24rem),1fr));
gap:.75rem}
figure{margin:.5rem 0}
svg.chart{display:block;width:100%;height:auto}
.plot{fill:none;stroke:var(--line)}.grid{stroke:var(--line);stroke-width:.5}
.tick,.legend{font-size:12px;fill:var(--muted)}
.curve{fill:none;stroke-width:1.8;stroke-linejoin:round}
.curve.baseline{stroke:var(--base)}.curve.candidate{stroke:var(--cand);stroke-dasharray:6 4}
.curve.delta{stroke:var(--delta)}.band{fill:var(--band)}
.key.baseline{fill:var(--base)}.key.candidate{fill:var(--cand)}.key.delta{fill:var(--delta)}
.key.band{fill:var(--band)}
.curve.envelope{stroke:var(--base);stroke-width:1;stroke-dasharray:1 3}.key.envelope{fill:var(--base)}
.mark{stroke-width:1.4;stroke-dasharray:3 3}.mark.first{stroke:var(--bad)}
.mark.beyond{stroke:var(--warn)}
td code{overflow-wrap:anywhere}
@media (max-width:40rem){
table.stack,table.stack tbody,table.stack tr,table.stack td{display:block;width:100%}
table.stack thead{display:none}
table.stack tr{border-bottom:1px solid var(--line);padding:.35rem 0}
table.stack td{border:0;padding:.05rem .25rem;overflow-wrap:anywhere}
table.stack td[data-label]::before{content:attr(data-label) ": ";color:var(--muted);
font-size:.8rem}}
"""


def e(value: object) -> str:
    """Any value as HTML text: reasons quote pip, training logs and golden files."""
    return escape(str(value), quote=True)


def render(report: Report) -> str:
    """The report as one self-contained HTML page (no script; its CSP forbids every fetch), the
    loss curves of each scenario drawn as inline SVG."""
    title = f"lockguard {report.command}"
    if report.mode == "frameworks":
        title += ": measured" if report.passed else ": a run failed"
    elif report.command != "diff":
        title += ": pass" if report.passed else ": fail"
    body = [_header(report, title), *_unconfined(report), *_gate(report), *_locks(report)]
    if report.frameworks is not None:
        body += _frameworks(report)
    if report.command != "diff":
        body += _summary(report)
        body += [html for i, v in enumerate(report.ordered())
                 for html in _scenario(report, v, i)]
    body += _footer(report)
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{e(title)}</title>\n<style>{STYLE}</style></head>\n<body>\n"
            + "\n".join(body) + "\n</body></html>\n")


def _table(head: list[str] | None, rows: list[list[str]]) -> str:
    """A table; cells are HTML already. On a phone a headed table becomes one block per row,
    each cell labelled by its column (no sideways scrolling); wider, a box of its own that
    scrolls sideways if it must."""
    if not head:
        body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
        return f'<div class="scroll"><table>{body}</table></div>'
    labels = [e(re.sub(r"<[^>]*>", "", h)) for h in head]
    top = "<thead><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr></thead>"
    body = "".join("<tr>" + "".join(
        f'<td data-label="{label}">{c}</td>' if label else f"<td>{c}</td>"
        for label, c in zip(labels, row)) + "</tr>" for row in rows)
    return f'<div class="scroll"><table class="stack">{top}<tbody>{body}</tbody></table></div>'


def _verdict_css(report: Report, v: ScenarioVerdict) -> str:
    if report.fails(v):
        return "bad"
    return "good" if v.verdict in (Verdict.identical, Verdict.unchanged, Verdict.within_tolerance,
                                   Verdict.measured) else "warn"


def _header(report: Report, title: str) -> str:
    outcome = ('<span class="good">PASS</span>' if report.passed
               else '<span class="bad">FAIL</span>')
    if report.command == "diff":
        outcome = "lock diff"
    meta = [f"mode {e(report.mode)}"]
    if report.device:
        meta.append(f"device {e(report.device)}")
    if report.base is not None:
        meta.append(f"base <code>{e(report.base.ref)}</code> at "
                    f"<code>{e(report.base.merge_base[:12])}</code>")
    if report.duration_s is not None:
        meta.append(f"{report.duration_s:.1f} s")
    if report.sandbox is not None and sandbox_warning(report) is None:
        meta.append(f"sandbox: {e(report.sandbox)}")
    meta.append(f"lockguard {e(report.lockguard_version)}")
    failing = [v for v in report.compared if report.fails(v)]
    line = ""
    if report.mode == "frameworks":
        # Measurements set side by side, not a gate: say what was measured, and only a run
        # that could not be measured as failing.
        measured = sum(v.verdict == Verdict.measured for v in report.compared)
        line = (f"<p>{measured} of {len(report.compared)} scenarios measured on this machine"
                + (f"; {len(failing)} could not be ({e(', '.join(v.scenario for v in failing))})"
                   if failing else "") + "</p>")
        outcome = ('<span class="good">measured</span>' if report.passed
                   else '<span class="bad">a run failed</span>')
    elif report.command != "diff":
        tally = ", ".join(f"{n} {k.value}" for k, n in report.tally())
        line = (f"<p>{len(failing)} of {len(report.compared)} compared scenarios fail the gate"
                + (f" ({e(tally)})" if tally else "") + "</p>")
    return (f"<header><h1>lockguard {e(report.command)}: {outcome}</h1>{line}"
            f'<p class="meta">{" · ".join(meta)}</p></header>')


def _unconfined(report: Report) -> list[str]:
    unconfined = sandbox_warning(report)
    if unconfined is None:
        return []
    return [f'<section id="sandbox"><p class="warn">⚠ {e(unconfined)}</p></section>']


def _gate(report: Report) -> list[str]:
    gate = gate_lines(report)
    if gate is None:
        return []
    items = "".join(f'<li class="prose">{e(change)}</li>' for change in gate[1])
    return [f'<section id="gate"><p class="warn">⚠ {e(gate[0])}:</p><ul>{items}</ul></section>']


def _locks(report: Report) -> list[str]:
    title = "Locks" if report.mode == "frameworks" else "Lock changes"
    out = [f'<section id="locks"><h2>{title}</h2>']
    if report.locks:
        rows = [[e(lock.role), f"<code>{e(lock.name)}</code>",
                 f"<code>{e(lock.lock_hash[:12])}</code>",
                 e(", ".join(f"{k} {v}" for k, v in sorted(lock.versions.items()))
                   + (f" ({lock.read_as})" if lock.read_as else ""))]
                for lock in report.locks]
        out.append(_table(["role", "lock", "hash", "frameworks"], rows))
    for failure in report.rule_failures:
        where = failure.lock + (":" + ",".join(map(str, failure.lines)) if failure.lines else "")
        out.append(f'<p class="bad">✗ <code>{e(where)}</code> {e(failure.rule)}: '
                   f"{e(failure.message)}</p>")
    for diff in report.lock_diffs:
        lock = next((i for i in report.locks if i.source == diff.new_source), None)
        rows = [[e(c.new_line or ""), e(change_text(c)), e(", ".join(c.families))]
                for c in diff.changed]
        rows += [[e(line or ""), e(text), "installer option"]
                 for o in diff.option_changes for line, text in option_lines(o)]
        name = lock.name if lock else diff.new_source
        out.append(f"<h3><code>{e(name)}</code>: {len(rows) or 'no'} "
                   f"change{'' if len(rows) == 1 else 's'}</h3>")
        if rows:
            out.append(_table(["line", "change", "families"], rows))
    if not report.lock_diffs and not report.rule_failures and report.mode != "frameworks":
        out.append('<p class="note">no lock diff in this report</p>')
    out.append("</section>")
    return out


def _summary(report: Report) -> list[str]:
    out = ['<section id="verdicts"><h2>Verdicts</h2>']
    rows = []
    for i, v in enumerate(report.ordered()):
        css = _verdict_css(report, v)
        gate = "fails the gate" if report.fails(v) else "passes"
        if report.mode == "frameworks":
            gate = "could not be measured" if report.fails(v) else ""
        figures = f"final loss {final_loss(v)} · step time {timing(v)}"
        rows.append([f'<a href="#s{i}">{e(v.scenario)}</a> <small>{e(v.framework)}</small><br>'
                     f'<span class="{css}">{e(verdict_name(v))}</span> <small>{gate}</small>',
                     f'<span class="prose">{e(summary_line(v))}<br><small>{e(figures)}</small>'
                     "</span>"])
    if rows:
        out.append(_table(["scenario, verdict", "evidence"], rows))
    for count, reason in report.skipped_groups():
        out.append(f'<p class="note">{count} skipped: {e(reason)}</p>')
    out += [f'<p class="note">{e(line)}</p>' for line in timing_notes(report)]
    out += [f'<p class="note">note: {e(note)}</p>' for note in report.notes]
    command = reproduce(report, [v.scenario for v in report.compared if report.fails(v)])
    if command and not report.passed:
        out.append(f"<p>Reproduce locally:</p><pre>{e(command)}</pre>")
    out.append("</section>")
    return out


def _scenario(report: Report, v: ScenarioVerdict, index: int) -> list[str]:
    ev = report.evidence_of(v.scenario)
    css = _verdict_css(report, v)
    out = [f'<section id="s{index}"><h2>{e(v.scenario)} <span class="{css}">'
           f"{e(verdict_name(v))}</span></h2>"]
    if ev is not None:
        out.append('<p class="meta">' + " · ".join(
            f"{s.role}: {e(s.kind)} <code>{e(s.name)}</code>"
            for s in (ev.baseline, ev.candidate) if s is not None) + "</p>")
    if v.reasons:
        out.append('<ul class="reasons">' + "".join(f"<li>{e(r)}</li>" for r in v.reasons)
                   + "</ul>")
    behind = culprits(report, v)
    if behind:
        out.append("<p>Lock lines behind it: " + "; ".join(
            f"<code>{e(c.lock)}{':' + str(c.line) if c.line else ''}</code> {e(c.text)}"
            for c in behind) + "</p>")
    if v.error:
        out.append(f"<pre>{e(v.error)}</pre>")
    out += _bisection(report.bisection_of(v.scenario))
    out.append(_curves(v, ev))
    out += _numbers(v, ev)
    out += _compile(v, ev)
    out += _machine(v, ev)
    out += _fingerprints(ev)
    out.append("</section>")
    return out


def _bisection(found: Bisection | None) -> list[str]:
    if found is None:
        return []
    rows = [[e(", ".join(t.changes) or "nothing"), e(t.status), e(t.verdict or "—"),
             e(f"{t.build_s:.1f} s" if t.build_s is not None else "—"),
             e(f"{t.run_s:.1f} s" if t.run_s is not None else "—"),
             e("; ".join(([t.reason] if t.status in ("inconsistent", "broken") and t.reason
                          else []) + t.kept))]
            for t in found.trials]
    return ([f"<h3>Bisection</h3><p><strong>{e(found.sentence())}</strong></p>",
             f'<p class="meta">{e(found.cost())}</p>']
            + ([_table(["mix: baseline +", "status", "verdict", "build", "run", "why"], rows)]
               if rows else [])
            + [f'<p class="meta">{e(note)}</p>' for note in found.notes])


def _finite(values: list[float]) -> list[float | None]:
    return [x if math.isfinite(x) else None for x in values]


def _curves(v: ScenarioVerdict, ev: Evidence | None) -> str:
    sides = [s for s in _sides(ev) if s.result.losses]
    if not sides:
        missing = NO_EVIDENCE if ev is None else "neither side recorded losses"
        return f'<p class="note">{missing}</p>'
    marks = []
    if v.first_divergent_step is not None:
        marks.append(Mark(v.first_divergent_step,
                          f"first divergent step {v.first_divergent_step}", "first"))
    beyond = v.losses.first_index if v.losses is not None else None
    if beyond is not None and beyond != v.first_divergent_step:
        marks.append(Mark(beyond, f"first step beyond tolerance {beyond}", "beyond"))
    lines = [Line(s.role, _finite(s.result.losses), s.role) for s in sides]
    envelope = v.envelope if v.envelope is not None and v.envelope.loss_low else None
    if envelope is not None:
        # A nondeterministic baseline: the band its K runs allow, as judged (compare/envelope).
        lines += [Line("envelope low", _finite(envelope.loss_low), "envelope"),
                  Line("envelope high", _finite(envelope.loss_high), "envelope")]
    figures = [_figure(chart(f"loss of {v.scenario}", lines, marks=marks),
                       "loss per step: " + ", ".join(
                           f"{s.role} ({s.kind}) {'solid' if s.role == 'baseline' else 'dashed'}"
                           for s in sides)
                       + (f"; dotted: the noise envelope of {envelope.k} baseline runs"
                          if envelope is not None else "") + _marks_caption(marks))]
    if len(sides) == 2:  # baseline, candidate
        figures.append(_delta_figure(v, *sides, marks))
    return '<div class="charts">' + "".join(figures) + "</div>"


def _delta_figure(v: ScenarioVerdict, baseline: Side, candidate: Side,
                  marks: list[Mark]) -> str:
    old, new = baseline.result.losses, candidate.result.losses
    if len(old) != len(new):
        return _figure("", f"the sides ran {len(old)} and {len(new)} steps: "
                           "no difference curve")
    delta = [abs(b - a) for a, b in zip(old, new)]  # NaN or inf leave a gap
    tol = v.tolerance
    band = [tol.allowed(a) for a in old] if tol is not None and not tol.exact else None
    if tol is None:
        allowed = "no tolerance in this report"
    elif tol.exact:
        allowed = "exact: any difference fails"
    else:
        allowed = (f"shaded: allowed atol + rtol·|baseline| (atol {tol.atol:g}, "
                   f"rtol {tol.rtol:g})")
    svg = chart(f"loss difference of {v.scenario}", [Line("|Δ loss|", _finite(delta), "delta")],
                log=True, band=band, band_label="allowed", marks=marks)
    shape = v.location.shape if v.location is not None else None
    return _figure(svg, f"|candidate − baseline| per step, log scale; {allowed}; bitwise equal "
                        "steps lie on the bottom edge" + _marks_caption(marks)
                   + (f"; {shape.sentence()}" if shape is not None else ""))


def _marks_caption(marks: list[Mark]) -> str:
    return "".join(f"; {'red' if m.css == 'first' else 'amber'} line: {m.label}" for m in marks)


def _figure(svg: str, caption: str) -> str:
    return f"<figure>{svg}<figcaption>{e(caption)}</figcaption></figure>"


def _series_row(diff: SeriesDiff | None, label: str) -> list[str] | None:
    if diff is None:
        return None
    at = f" at {diff.max_abs_index}" if diff.max_abs_index is not None else ""
    return [e(label), f"{diff.mismatched} / {diff.size}",
            e("—" if diff.first_index is None else diff.first_index),
            e(fmt_float(diff.max_abs) + at), e(fmt_float(diff.max_rel)),
            e("—" if diff.max_ulp is None else diff.max_ulp)]


def _numbers(v: ScenarioVerdict, ev: Evidence | None) -> list[str]:
    out = []
    rows = [r for r in (_series_row(v.losses, "losses"), _series_row(v.grad_norms, "grad norms"),
                        _series_row(v.outputs, "outputs")) if r is not None]
    if rows:
        tol = v.tolerance
        spell = ("—" if tol is None else "exact" if tol.exact
                 else f"atol {tol.atol:g}, rtol {tol.rtol:g}")
        out.append("<h3>Numerics</h3>" + _table(
            ["series", "beyond tolerance", "first beyond", "max |Δ|", "max rel", "max ULP"], rows)
            + f'<p class="note">tolerance: {e(spell)}; first bitwise difference in the losses: '
              f"{e('none' if v.first_divergent_step is None else v.first_divergent_step)}</p>")
    sides = _sides(ev)
    if sides:
        digest = [[e(s.role), f'<code class="digest">{e(s.result.param_digest or "—")}</code>',
                   e(s.result.output_shape or "—"),
                   e(", ".join(fmt_float(x) for x in s.result.outputs[:6])
                     + (" …" if len(s.result.outputs) > 6 else ""))] for s in sides]
        same = {True: "equal", False: "differ", None: "not compared"}[v.param_digest_equal]
        out.append("<h3>Outputs and parameters</h3>" + _table(
            ["side", "parameter digest", "output shape", "outputs (first)"], digest)
            + f'<p class="note">parameter digests {same}</p>')
    return out


def _sides(ev: Evidence | None) -> list[Side]:
    return [s for s in (ev.baseline, ev.candidate) if s is not None] if ev else []


def _compile(v: ScenarioVerdict, ev: Evidence | None) -> list[str]:
    rows = compile_rows(v.compile_diff) if v.compile_diff is not None else []
    sides = [s for s in _sides(ev) if s.result.compile is not None]
    if not rows and not sides:
        return []
    out = ["<h3>Compiled path</h3>"]
    if rows:
        out.append(_table(["what changed", "baseline", "candidate"],
                          [[e(what), f"<code>{e(old)}</code>", f"<code>{e(new)}</code>"]
                           for what, old, new in rows]))
    elif v.compile_diff is not None:
        out.append('<p class="note">the compiled path did not change</p>')
    if sides:
        dumps = [s.result.compile.model_dump(exclude_defaults=True) for s in sides]
        for d, side in zip(dumps, sides):
            if side.result.compile.accuracy is not None:  # a sentence, not its JSON
                d["accuracy"] = accuracy_text(side.result.compile.accuracy)
        keys = list(dict.fromkeys(k for d in dumps for k in d))
        table = _table(["", *[e(s.role) for s in sides]],
                       [[e(k), *[f"<code>{e(_show(d.get(k)))}</code>" for d in dumps]]
                        for k in keys])
        out.append(f"<details><summary>compile diagnostics side by side</summary>{table}"
                   "</details>")
    return out


def _show(value: object) -> str:
    if value is None:
        return "—"
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)


def _machine(v: ScenarioVerdict, ev: Evidence | None) -> list[str]:
    rows = [["expected device", e(v.expected_device or "—"), ""],
            ["ran on", e(v.found_device or "—"), ""]]  # the verdict's: a fallback shows here
    ratios = [("step time (median)", v.step_time_ratio), ("first step", v.first_step_ratio),
              ("compile time", v.compile_time_ratio), ("peak memory (training)", v.memory_ratio),
              ("peak device memory", v.device_memory_ratio)]
    rows += [[e(name), f"×{ratio:.2f}", "candidate / baseline, same machine"]
             for name, ratio in ratios if ratio is not None]
    said = timing_line(v)
    if said:
        rows.append(["timing runs", e(timing(v)), f'<span class="prose">{e(said)}</span>'])
    out = ["<h3>Device, timing, memory</h3>", _table(None, rows)]
    sides = _sides(ev)
    if sides:
        device = any(s.result.peak_device_memory_bytes is not None for s in sides)
        out.append(_table(["side", "device", "first step", "step median", "peak memory"]
                          + (["peak device memory"] if device else []),
                          [_side_row(s.role, s.result, device) for s in sides]))
        memory = [s.result.peak_memory_bytes for s in sides]
        # Measured together, the verdict's own ratio (medians over repeats) is in the table above.
        # A golden may hold another measure (goldens recorded before the training's own peak
        # was measured): a ratio only between figures taken the same way.
        same = len({s.result.fingerprint.get("memory_measure") for s in sides}) == 1
        if v.memory_ratio is None and len(sides) == 2 and same and memory[0] \
                and memory[1] is not None:
            out.append(f'<p class="note">peak memory ×{memory[1] / memory[0]:.2f} '
                       "(candidate / baseline)</p>")
    return out


def _side_row(role: str, result: RunResult, device: bool = False) -> list[str]:
    t = result.timings
    return [e(role), e(result.device_name or result.device or "—"), seconds(t.first_step_s),
            seconds(t.step_median_s), mib(result.peak_memory_bytes)] \
        + ([mib(result.peak_device_memory_bytes)] if device else [])


def _fingerprints(ev: Evidence | None) -> list[str]:
    sides = _sides(ev)
    if not sides:
        return []
    out = []
    if ev is not None and ev.fingerprint_diff:
        rows = [[f"<code>{e(k)}</code>", f"<code>{e(_show(old))}</code>",
                 f"<code>{e(_show(new))}</code>"] for k, (old, new) in ev.fingerprint_diff.items()]
        out.append(f"<details><summary>environment fingerprint: {len(rows)} "
                   f"difference{'' if len(rows) == 1 else 's'}</summary>"
                   + _table(["key", "baseline", "candidate"], rows) + "</details>")
    for s in sides:
        text = json.dumps(s.result.fingerprint, indent=1, sort_keys=True, ensure_ascii=False)
        out.append(f"<details><summary>{e(s.role)} fingerprint</summary><pre>{e(text)}</pre>"
                   "</details>")
    return out


def _frameworks(report: Report) -> list[str]:
    """compare-frameworks: a table per model family, compiled paths against their plain twins,
    what a compiled path did not do, and the caveats."""
    table = report.frameworks
    assert table is not None
    out = ['<section id="frameworks"><h2>Frameworks on this machine</h2>',
           f'<p class="meta">device {e(table.device)} · {table.threads} thread(s) · '
           f"{table.repeat} run(s) per scenario, one at a time</p>"]
    index = {v.scenario: i for i, v in enumerate(report.ordered())}
    for family, rows in table.families():
        cells = []
        for row in rows:
            shown = [e(c) for c in framework_cells(row)]
            if row.scenario in index:
                shown[0] = f'<a href="#s{index[row.scenario]}">{shown[0]}</a>'
            shown.insert(1, e(f"{row.framework} {row.version or ''}".strip()))
            cells.append(shown)
        out.append(f"<h3>{e(family_title(table, family))}</h3>")
        out.append(_table([FRAMEWORK_HEAD[0], "framework", *FRAMEWORK_HEAD[1:]], cells))
        extra = family_notes(table, family, rows)
        if extra:
            out.append("<ul>" + "".join(f"<li>{e(x)}</li>" for x in extra) + "</ul>")
    out.append("<details><summary>What these figures say (caveats)</summary><ul>"
               + "".join(f"<li>{e(c)}</li>" for c in table.caveats) + "</ul></details>")
    out.append("</section>")
    return out


def _footer(report: Report) -> list[str]:
    out = []
    if report.parity:
        rows = [[e(row.family), e(", ".join(f"{k} {fmt_float(x)}" for k, x in row.step0.items())),
                 f"{row.max_rel_spread:.1e}"] for row in report.parity]
        out.append("<details><summary>step-0 parity across frameworks</summary>"
                   + _table(["family", "step-0 loss", "spread"], rows) + "</details>")
    if report.written:
        out.append(f"<details><summary>{len(report.written)} golden(s) written</summary><ul>"
                   + "".join(f"<li><code>{e(p)}</code></li>" for p in report.written)
                   + "</ul></details>")
    return out
