"""Wording shared by the human-readable renderers (text, markdown): one phrasing per fact."""

from __future__ import annotations

from typing import Any

from lockguard.compare import ScenarioVerdict, Verdict

SYMBOL = {
    Verdict.identical: "=", Verdict.within_tolerance: "≈", Verdict.drift: "✗",
    Verdict.compile_fallback: "✗", Verdict.device_fallback: "✗", Verdict.slower: "!",
    Verdict.broken: "✗", Verdict.new: "+", Verdict.incomparable: "?", Verdict.skipped: "-",
}


def fmt_float(value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.6g}" if abs(value) >= 1e-4 or value == 0 else f"{value:.3e}"


def final_loss(v: ScenarioVerdict) -> str:
    if v.final_loss_old is None and v.final_loss_new is None:
        return "—"
    if v.final_loss_old is None:
        return fmt_float(v.final_loss_new)
    return f"{fmt_float(v.final_loss_old)} → {fmt_float(v.final_loss_new)}"


def summary_line(v: ScenarioVerdict) -> str:
    """The one most useful fact about a verdict, for the table's last column."""
    if v.first_divergent_step is not None and v.verdict in (
            Verdict.drift, Verdict.within_tolerance, Verdict.compile_fallback):
        head = f"from step {v.first_divergent_step}"
        if v.losses is not None and v.losses.max_abs_index is not None:
            head += (f"; max |Δloss| {fmt_float(v.losses.max_abs)} at step "
                     f"{v.losses.max_abs_index}, rel {fmt_float(v.losses.max_rel)}")
            if v.losses.max_ulp is not None:
                head += f", {v.losses.max_ulp} ulp"
        return head
    if v.reasons:
        return v.reasons[0].splitlines()[0]
    return ""


def timing(v: ScenarioVerdict) -> str:
    if v.step_time_ratio is None:
        return "—"
    return f"×{v.step_time_ratio:.2f}"


def change_line(change: dict[str, Any]) -> str:
    """One line of a LockDiff change, e.g. 'numpy 1.26.4 → 2.0.2 (upgraded, major) [numpy]'."""
    name = change.get("display_name") or change.get("name")
    old, new, kind = change.get("old_version"), change.get("new_version"), change.get("kind")
    if kind == "added":
        text = f"+ {name} {new}"
    elif kind == "removed":
        text = f"- {name} {old}"
    elif kind in ("rehashed",):
        text = f"~ {name} {new} (same version, different hashes)"
    else:
        text = f"  {name} {old} → {new} ({kind}"
        if change.get("bump"):
            text += f", {change['bump']}"
        text += ")"
    if change.get("families"):
        text += f" [{', '.join(change['families'])}]"
    return text
