"""One scenario's verdict: `compare_runs` puts numerics, compile diagnostics, devices and
timings together into a `ScenarioVerdict`; `is_failure` / `gate_passes` apply the policy.

Like the rest of lockguard.compare this is a pure function of RunResult objects and a Policy:
no I/O, no clock, no framework import. The report layer serialises what comes back with
``model_dump(mode="json")``.
"""

import statistics
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from lockguard.compare.compile import CompileDiff, accuracy_failure, compare_compile
from lockguard.compare.envelope import (
    Envelope, EnvelopeCheck, describe, deterministic, envelope_of, judge_envelope, run_difference,
)
from lockguard.compare.figures import median, mib
from lockguard.compare.locate import Location
from lockguard.compare.numerics import SeriesDiff, compare_series, first_difference
from lockguard.compare.timing import TimingCheck, measure_of
from lockguard.compare.tolerance import Policy, Tolerance, effective_tolerance, normalise_dtype
from lockguard.errors import tail
from lockguard.names import PRECEDENCE, Verdict
from lockguard.results import JsonFloat, RunResult, Status

_RANK = {verdict: rank for rank, verdict in enumerate(PRECEDENCE)}


class HardwareChange(BaseModel):
    """The golden was recorded on another hardware class than this run's (lockguard/hardware.py):
    what the caller knows about the two, for compare_runs to word and judge."""

    model_config = ConfigDict(defer_build=True)

    golden: str  # the golden's class, for people: "Intel Xeon ... [intel-6.207-...]"
    current: str  # this run's class
    same_inputs: bool  # lock, harness, scenario and settings as when the golden was recorded
    lock_changed: bool  # the golden's lock hash differs from this run's lock
    detail: str | None = None  # what tells two same-named classes apart (ISA features)


class Accepted(BaseModel):
    """An acceptance committed with the change that passes this failing verdict: the golden
    `lockguard accept` wrote for it, bound to the baseline and candidate locks and to the
    numbers the candidate produced (lockguard/flows/acceptances.py finds it)."""

    model_config = ConfigDict(defer_build=True)

    reason: str
    author: str
    accepted_at: str
    commit: str | None = None  # where the project was when it was accepted
    golden: str  # the golden file that holds it
    how: str  # why it applies: the same numbers, or within tolerance of them on another class

    def sentence(self) -> str:
        """The acceptance in one line for reports and JUnit properties: reason, author, when,
        the commit if known, and why it applies."""
        return (f"accepted: {self.reason} ({self.author}, {self.accepted_at}"
                + (f", commit {self.commit[:12]}" if self.commit else "") + f"; {self.how})")


class ScenarioVerdict(BaseModel):
    """What comparing one scenario's candidate run with its baseline (a golden or the old lock's
    run) found: the verdict, its reasons (the first explains it) and every figure behind them."""

    model_config = ConfigDict(defer_build=True)

    scenario: str
    framework: str
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list)  # one sentence each, most important first
    baseline_kind: Literal["golden", "lock"] | None = None
    first_divergent_step: int | None = None  # first step whose loss differs at all (bitwise)
    losses: SeriesDiff | None = None
    tolerance: Tolerance | None = None  # what the series were judged by, when they were compared
    grad_norms: SeriesDiff | None = None
    outputs: SeriesDiff | None = None
    param_digest_equal: bool | None = None
    final_loss_old: JsonFloat | None = None
    final_loss_new: JsonFloat | None = None
    step_time_ratio: float | None = None  # only when timed_together
    first_step_ratio: float | None = None  # only when timed_together; includes compilation
    compile_diff: CompileDiff | None = None
    compile_time_ratio: float | None = None  # only when timed_together: compile_s new / old
    # Only when timed_together: the training's peak memory, candidate / baseline (medians).
    memory_ratio: float | None = None  # host (RunResult.peak_memory_bytes)
    device_memory_ratio: float | None = None  # accelerator (RunResult.peak_device_memory_bytes)
    expected_device: str | None = None
    found_device: str | None = None
    improvement: bool = False
    error: str | None = None
    nondeterministic: bool = False
    hardware: HardwareChange | None = None  # set when the golden is of another hardware class
    # Set when the baseline is a noise envelope (a golden recorded with --repeat whose runs
    # differed, or an A/B baseline run --repeat K times that was not bitwise reproducible).
    envelope: EnvelopeCheck | None = None
    # Data-pipeline scenarios: the first step whose batch holds other samples, or the same ones
    # in another order (the sample order is exact: no tolerance, whatever the hardware).
    first_batch_differs: int | None = None
    # A failing verdict the change carries an acceptance for: it passes the gate, saying why.
    accepted: Accepted | None = None
    # What the check's timing runs say (A/B with timing runs only): the ratio's interval.
    timing: TimingCheck | None = None
    # Where the drift starts (A/B, --locate or a drift of a torch scenario): the first module
    # whose weights, output or gradient differs at the first divergent step (compare/locate.py).
    location: Location | None = None



# --------------------------------------------------------------------------------------------
# Putting it together


def with_location(verdict: ScenarioVerdict, location: Location | None) -> ScenarioVerdict:
    """`verdict` with where its drift starts (compare/locate.py) and that in words after its
    reasons (the first still explains the verdict)."""
    if location is None:
        return verdict
    drift = verdict.verdict == Verdict.drift
    return verdict.model_copy(update={"location": location, "reasons": [
        *verdict.reasons, *location.sentences(drift=drift)]})


class _Findings:
    """Reasons gathered while comparing, each tagged with the verdict it argues for (or none).

    The verdict is the highest-precedence tag; the reasons come out in precedence order, the
    untagged notes last, so the first reason always explains the verdict.
    """

    def __init__(self) -> None:
        self._items: list[tuple[Verdict | None, str]] = []

    def add(self, verdict: Verdict, reason: str) -> None:
        self._items.append((verdict, reason))

    def note(self, reason: str) -> None:
        self._items.append((None, reason))

    def merge(self, other: "_Findings", notes_only: bool = False) -> None:
        self._items += [(tag, reason) for tag, reason in other._items
                        if not notes_only or tag is None]

    def has(self, verdict: Verdict) -> bool:
        return any(tag == verdict for tag, _ in self._items)

    def verdict(self) -> Verdict:
        tags = [tag for tag, _ in self._items if tag is not None]
        if not tags:
            raise AssertionError("compare_runs always records at least one verdict")
        return min(tags, key=_RANK.__getitem__)

    def reasons(self) -> list[str]:
        def rank(item: tuple[Verdict | None, str]) -> int:
            return len(PRECEDENCE) if item[0] is None else _RANK[item[0]]

        return [reason for _, reason in sorted(self._items, key=rank)]  # sorted() is stable


NO_BASELINE = "no baseline to compare with: `lockguard record` stores one"


def compare_runs(
    baselines: list[RunResult],
    candidates: list[RunResult],
    *,
    policy: Policy,
    baseline_kind: Literal["golden", "lock"] | None,
    expected_device: str | None,
    timed_together: bool,
    tolerance: Tolerance | None = None,
    hardware: HardwareChange | None = None,
    envelope: Envelope | None = None,
    alone: tuple[Verdict, str] = (Verdict.new, NO_BASELINE),
    timing: TimingCheck | None = None,
) -> ScenarioVerdict:
    """One scenario's verdict: candidate runs (>= 1) against baseline runs (a golden, or the
    old lock's runs; none for a new scenario).

    `hardware`: the baseline golden was recorded on another hardware class. A difference is then
    never a dependency verdict: `other_hardware` when only the hardware changed, `incomparable`
    when the inputs changed too (the two cannot be told apart); the figures are still given, for
    information, and bitwise equality is still `identical`.

    `tolerance` is the scenario's own override; it beats policy.tolerance, which beats the
    dtype default. Timings and peak memory are only compared when `timed_together` (both sides
    measured in this check, on this machine). Numerics use the first run of each side; further runs are
    only checked for being bitwise reproducible — except against a noise envelope
    (compare/envelope.py): `envelope` (a golden's), or the baseline runs' own when they are not
    bitwise equal. Then every candidate run is judged against it, two-sided: inside is
    `within_tolerance`, outside `drift` (bitwise equal to the first baseline stays `identical`).
    A golden of another hardware class is never judged by its envelope.

    `alone`: the verdict and reason of a healthy candidate with no baseline (`new`, unless the
    flow compares nothing by design: compare-frameworks' `measured`).

    `timing`: what the check's timing runs say (compare/timing.py); only it makes `slower`. The
    numeric runs' step-time ratio (one run a side, beside other trainings) is shown, not judged.
    """
    if not candidates:
        raise ValueError("compare_runs needs at least one candidate run")
    candidate = candidates[0]
    # What was found, by ScenarioVerdict field; the verdict is built once, from it and the findings.
    found: dict[str, Any] = dict(
        scenario=candidate.scenario,
        framework=candidate.framework,
        baseline_kind=baseline_kind,
        expected_device=expected_device,
        found_device=candidate.device,
        final_loss_new=candidate.losses[-1] if candidate.losses else None,
        hardware=hardware if baselines else None,
    )
    findings = _Findings()

    broken = next((run for run in candidates if run.status != Status.ok), None)
    if broken is not None:
        findings.add(Verdict.broken, _broken_reason(broken, "candidate", candidates))
        found["error"] = tail(broken.error, 20) or None
    _check_expected_device(candidates, expected_device, findings)
    miscompile = accuracy_failure(candidate.compile) if broken is None else None
    if miscompile is not None:
        findings.add(Verdict.compile_fallback, miscompile)
    if broken is None and not baselines:
        findings.add(*alone)
    if broken is not None or not baselines:
        return _finish(found, findings)

    _compare_sides(baselines, candidates, found, findings, policy=policy, tolerance=tolerance,
                   hardware=hardware, envelope=envelope, timed_together=timed_together,
                   timing=timing)
    return _finish(found, findings)


def _compare_sides(baselines: list[RunResult], candidates: list[RunResult],
                   found: dict[str, Any], findings: _Findings, *, policy: Policy,
                   tolerance: Tolerance | None, hardware: HardwareChange | None,
                   envelope: Envelope | None, timed_together: bool,
                   timing: TimingCheck | None) -> None:
    """compare_runs with healthy runs on both sides: comparability, compile diagnostics, the
    sample order, the numbers (exactly, by tolerance or against a noise envelope),
    reproducibility, and timings and memory when both sides were measured here."""
    candidate = candidates[0]
    baseline = baselines[0]
    found["final_loss_old"] = baseline.losses[-1] if baseline.losses else None
    if not _check_comparable(baselines, candidate, findings):
        if hardware is not None:
            findings.note(_hardware_sentence(hardware, candidate.scenario))
        return

    if baseline.compile is not None and candidate.compile is not None:
        compile_diff = compare_compile(baseline.compile, candidate.compile)
        _compile_findings(compile_diff, findings)
        found.update(compile_diff=compile_diff, improvement=compile_diff.improvement)
    elif baseline.compile is not None:
        findings.note("the candidate reported no compile diagnostics, the baseline did")

    # The order first: when a pipeline reorders, that is the cause of what the losses show.
    # Every candidate run's: a noise envelope judges numbers, never an order.
    found.update(_compare_order(baseline, candidates, findings))
    tol = effective_tolerance(policy, tolerance, candidate.dtype)
    found["tolerance"] = tol
    if envelope is None and hardware is None and len(baselines) > 1 \
            and not deterministic(baselines):
        envelope = envelope_of(baselines)
    if envelope is not None and hardware is None:
        found.update(_compare_envelope(baseline, candidates, envelope, tol, findings))
    else:
        found.update(_compare_numerics(baseline, candidate, tol, findings, hardware))

    for runs, role in ((baselines, "baseline"), (candidates, "candidate")):
        reason = _nondeterminism(runs, role, judged=found.get("envelope") is not None)
        if reason is not None:
            found["nondeterministic"] = True
            findings.note(reason)

    if timed_together:
        found.update(_compare_timings(baselines, candidates, policy, findings, timing))
        found.update(_compare_memory(baselines, candidates, policy, findings))


def skipped(scenario: str, framework: str, reason: str) -> ScenarioVerdict:
    """A scenario that was not run at all, with why."""
    return ScenarioVerdict(
        scenario=scenario, framework=framework, verdict=Verdict.skipped, reasons=[reason]
    )


def is_failure(verdict: ScenarioVerdict, policy: Policy) -> bool:
    """Whether this verdict fails the gate under `policy`."""
    if verdict.accepted is not None:
        return False  # an intended change, bound to these locks and numbers
    if verdict.verdict in policy.fail_on:
        return True
    # An improvement means the golden no longer describes the stack; teams that want goldens
    # kept exact make that a failure until someone re-records.
    return policy.fail_on_improvement and verdict.improvement


def gate_passes(verdicts: Iterable[ScenarioVerdict], policy: Policy) -> bool:
    """True when no verdict fails under `policy`."""
    return not any(is_failure(verdict, policy) for verdict in verdicts)


# --------------------------------------------------------------------------------------------
# The steps of compare_runs


def _finish(found: dict[str, Any], findings: _Findings) -> ScenarioVerdict:
    return ScenarioVerdict(**found, verdict=findings.verdict(), reasons=findings.reasons())


def _broken_reason(run: RunResult, role: str, runs: list[RunResult]) -> str:
    what = {
        Status.crashed: "crashed",
        Status.nan: "produced NaN",
        Status.timeout: "timed out",
        Status.invalid: "returned an invalid result",
    }[run.status]
    if len(runs) == 1:
        which = f"the {role} run"
    else:
        which = f"{role} run {runs.index(run) + 1} of {len(runs)}"
    last_line = tail(run.error, 1).strip()
    return f"{which} {what}" + (f": {last_line}" if last_line else "")


def _check_expected_device(
    candidates: list[RunResult], expected_device: str | None, findings: _Findings
) -> None:
    if expected_device is None:
        return
    for run in candidates:
        if run.device is None and run.status != Status.ok:
            continue  # crashed before it could say where it ran; "broken" already says it all
        if run.device != expected_device:
            found = run.device or "an unreported device"
            findings.add(Verdict.device_fallback,
                         f"expected {expected_device}, ran on {found}" + _fallback_cause(run))
            return


def _fallback_cause(run: RunResult) -> str:
    """Why the run landed elsewhere, as the harness saw it ("no NVIDIA driver visible in the
    container"), and the accelerator stack of the image it ran in, which did load."""
    cause = run.fingerprint.get("device_fallback")
    image = run.fingerprint.get("image")
    stack = image.get("stack") if isinstance(image, dict) else None
    summary = stack.get("summary") if isinstance(stack, dict) else None
    text = f": {cause}" if isinstance(cause, str) and cause else ""
    if isinstance(summary, str) and summary:
        text += f" (image {image.get('tag')}: {summary})"
    return text


def _check_comparable(
    baselines: list[RunResult], candidate: RunResult, findings: _Findings
) -> bool:
    """Record why the first baseline and `candidate` cannot be compared; True if they can."""
    baseline = baselines[0]
    broken = next((run for run in baselines if run.status != Status.ok), None)
    if broken is not None:
        reason = _broken_reason(broken, "baseline", baselines)
        findings.add(Verdict.incomparable, f"{reason}; there is nothing sound to compare with")
        return False
    problems: list[str] = []
    if baseline.scenario != candidate.scenario:
        problems.append(
            f"the baseline is of scenario {baseline.scenario!r}, not {candidate.scenario!r}"
        )
    if baseline.framework != candidate.framework:
        problems.append(
            f"the baseline ran {baseline.framework}, the candidate {candidate.framework}"
        )
    if baseline.device and candidate.device and baseline.device != candidate.device:
        if baseline.device != "cpu" and candidate.device == "cpu":
            # An accelerator run that lands on the CPU is a fallback, whatever was expected.
            if not findings.has(Verdict.device_fallback):
                findings.add(
                    Verdict.device_fallback,
                    f"the baseline ran on {baseline.device}, the candidate on cpu",
                )
            return False
        problems.append(
            f"the baseline ran on {baseline.device}, the candidate on {candidate.device}"
        )
    if baseline.steps != candidate.steps:
        problems.append(f"the baseline ran {baseline.steps} steps, the candidate {candidate.steps}")
    if normalise_dtype(baseline.dtype) != normalise_dtype(candidate.dtype):
        problems.append(f"the baseline ran in {baseline.dtype}, the candidate in {candidate.dtype}")
    for run, role in ((baseline, "baseline"), (candidate, "candidate")):
        if not run.losses:
            problems.append(f"the {role} recorded no losses")
    for name in ("losses", "grad_norms", "outputs"):
        old, new = getattr(baseline, name), getattr(candidate, name)
        if old and new and len(old) != len(new):
            label = name.replace("_", " ")
            problems.append(f"the baseline has {len(old)} {label}, the candidate {len(new)}")
    for problem in problems:
        findings.add(Verdict.incomparable, problem)
    return not problems


def _compile_findings(diff: CompileDiff, findings: _Findings) -> None:
    if diff.regressions:
        findings.add(
            Verdict.compile_fallback, "compiled path regressed: " + "; ".join(diff.regressions)
        )
    if diff.improvements:
        findings.note("improved: " + "; ".join(diff.improvements) + "; re-record the golden")
    for old, new in diff.reworded_break_reasons:
        findings.note(f"graph break reworded at the same site (not counted): {old} → {new}")
    for note in diff.notes:
        findings.note(note)


def _compare_numerics(
    baseline: RunResult,
    candidate: RunResult,
    tol: Tolerance,
    findings: _Findings,
    hardware: HardwareChange | None = None,
) -> dict[str, Any]:
    """The verdict's numeric fields; what they argue for goes to `findings`."""
    dtype = candidate.dtype
    series: dict[str, SeriesDiff | None] = {
        "losses": compare_series("losses", baseline.losses, candidate.losses, tol, dtype=dtype),
        "grad_norms": None,
        "outputs": None,
    }
    for name in ("grad_norms", "outputs"):
        old, new = getattr(baseline, name), getattr(candidate, name)
        if old and new:
            series[name] = compare_series(name, old, new, tol, dtype=dtype)
        elif old or new:
            side = "baseline" if old else "candidate"
            findings.note(f"only the {side} recorded {name.replace('_', ' ')}; not compared")
    digest_equal: bool | None = None
    if baseline.param_digest is not None and candidate.param_digest is not None:
        digest_equal = baseline.param_digest == candidate.param_digest

    pairs = [
        (series["losses"], baseline.losses, candidate.losses, "step"),
        (series["grad_norms"], baseline.grad_norms, candidate.grad_norms, "step"),
        (series["outputs"], baseline.outputs, candidate.outputs, "index"),
    ]
    differences: list[tuple[Verdict, str]] = []
    for diff, old, new, unit in pairs:
        if diff is None:
            continue
        first = first_difference(old, new)
        if first is None:
            continue
        verdict = Verdict.drift if diff.mismatched else Verdict.within_tolerance
        differences.append((verdict, _series_reason(diff, first, unit, tol)))
    if digest_equal is False:
        # Parameters have no tolerance to check, only their digest; in exact mode that is a
        # drift, otherwise the series above decide.
        verdict = Verdict.drift if tol.exact else Verdict.within_tolerance
        differences.append((verdict, "the trained parameters differ bitwise (parameter digest)"))
    if not differences:
        compared = [d.name.replace("_", " ") for d, *_ in pairs if d is not None]
        if digest_equal:
            compared.append("parameter digest")
        findings.add(
            Verdict.identical,
            f"bitwise identical over {candidate.steps} steps: " + ", ".join(compared),
        )
        if hardware is not None:
            findings.note(f"golden recorded on {hardware.golden}, running on {hardware.current}:"
                          " bitwise identical all the same")
    elif hardware is None:
        for verdict, reason in differences:
            findings.add(verdict, reason)
    else:
        # Across hardware classes a tolerance proves nothing (bf16 moves beyond it between
        # CPUs): the difference is shown for information and judged by what else changed.
        verdict = Verdict.other_hardware if hardware.same_inputs else Verdict.incomparable
        findings.add(verdict, _hardware_sentence(hardware, candidate.scenario))
        for _, reason in differences:
            findings.add(verdict, f"for information: {reason}")
    return {"first_divergent_step": first_difference(baseline.losses, candidate.losses),
            **series, "param_digest_equal": digest_equal}


def _compare_order(baseline: RunResult, candidates: list[RunResult],
                   findings: _Findings) -> dict[str, Any]:
    """A data pipeline's sample order, batch by batch, in every candidate run: any difference
    is `drift` at the first batch that differs (a model that sees other data trains
    differently, whatever the loss curve shows so far)."""
    old = baseline.sample_order
    for number, candidate in enumerate(candidates, start=1):
        new = candidate.sample_order
        if not old and not new:
            continue
        if not old or not new:
            findings.note(f"only the {'candidate' if new else 'baseline'} recorded its sample "
                          "order")
            return {}
        first = next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), None)
        if first is not None:
            which = "" if len(candidates) == 1 else f" in candidate run {number}"
            return _order_drift(baseline, candidate, first, which, findings)
    return {}


def _order_drift(baseline: RunResult, candidate: RunResult, first: int, which: str,
                 findings: _Findings) -> dict[str, Any]:
    old, new = baseline.sample_order, candidate.sample_order
    per = candidate.batches_per_epoch
    where = f"batch {first}" + (f" (epoch {first // per}, batch {first % per} of it)"
                                if per else "")
    what = "the same samples in another order" if sorted(old[first]) == sorted(new[first]) \
        else "other samples"
    epochs = [i for i, (a, b) in enumerate(zip(baseline.epoch_digests,
                                               candidate.epoch_digests)) if a != b]
    findings.add(Verdict.drift,
                 f"the sample order changed{which} from {where}: {what}, sample ids "
                 f"{_ids(old[first])} → {_ids(new[first])}"
                 + (f"; epoch order digests differ in epoch(s) "
                    f"{', '.join(map(str, epochs))}" if epochs else ""))
    return {"first_batch_differs": first}


def _ids(ids: list[int], shown: int = 8) -> str:
    return "[" + ", ".join(map(str, ids[:shown])) + (", …" if len(ids) > shown else "") + "]"


def _hardware_sentence(hardware: HardwareChange, scenario: str) -> str:
    """Why a difference from another hardware class's golden is not a dependency verdict, and
    what to do about it."""
    detail = f" ({hardware.detail})" if hardware.detail else ""
    ab = ("or check A/B (`lockguard check --base REF` or `--baseline-lock OLD`), which runs both"
          " locks on this machine")
    if hardware.same_inputs:
        return (f"golden recorded on {hardware.golden}, running on {hardware.current}{detail}:"
                " only the hardware changed since the golden (same lock, scenario and settings),"
                " so the numbers below moved with the machine, not with a dependency; remedy:"
                f" `lockguard record --scenario {scenario}` records a golden for this hardware"
                f" class beside the other, {ab}")
    changed = "the lock" if hardware.lock_changed else "the scenario, harness or settings"
    return (f"golden recorded on {hardware.golden}, running on {hardware.current}{detail}, and"
            f" {changed} changed too: a hardware change and a dependency change cannot be told"
            " apart; remedy: record a golden for this hardware class from the unchanged inputs"
            f" (on the base branch: `lockguard record --scenario {scenario}`), {ab}")


def _series_reason(diff: SeriesDiff, first_bitwise: int, unit: str, tol: Tolerance) -> str:
    label = diff.name.replace("_", " ")
    if diff.mismatched:
        where = f"{unit} {diff.first_index}"
        if first_bitwise != diff.first_index:
            where += f" (first bitwise difference at {unit} {first_bitwise})"
        head = f"{label} beyond tolerance from {where}: {diff.mismatched} / {diff.size} mismatched"
    else:
        head = f"{label} first differ at {unit} {first_bitwise}, within tolerance"
    return f"{head}; {_figures(diff, unit, tol)}"


def _figures(diff: SeriesDiff, unit: str, tol: Tolerance) -> str:
    if diff.max_abs_index is None:
        return "the values differ only in the sign of zero"
    abs_allowed = "" if tol.exact else f" (up to {tol.atol} allowed)"
    rel_allowed = "" if tol.exact else f" (up to {tol.rtol} allowed)"
    text = (
        f"greatest absolute difference {diff.max_abs} at {unit} {diff.max_abs_index}{abs_allowed},"
        f" greatest relative difference {diff.max_rel} at {unit} {diff.max_rel_index}{rel_allowed}"
    )
    if diff.max_ulp is not None:
        text += f", up to {diff.max_ulp} ULP"
    return text


def _nondeterminism(runs: list[RunResult], role: str, judged: bool = False) -> str | None:
    """Why repeated runs of one side are not bitwise equal to its first run, or None. `judged`:
    the numerics went through the noise envelope, which used every run."""
    first = runs[0]
    for number, run in enumerate(runs[1:], start=2):
        where = run_difference(first, run)
        if where is not None:
            used = ("every run was judged by the noise envelope" if judged
                    else "numerics use run 1")
            return (
                f"the {len(runs)} {role} runs are not bitwise reproducible: run {number} differs"
                f" from run 1 ({where}); the harness or the framework is not deterministic,"
                f" {used}"
            )
    return None


def _compare_envelope(
    baseline: RunResult,
    candidates: list[RunResult],
    envelope: Envelope,
    tol: Tolerance,
    findings: _Findings,
) -> dict[str, Any]:
    """The numeric fields against a noise envelope: the series figures are still those of the
    first runs (for the curves and the first divergent step), the verdict is the envelope's."""
    candidate = candidates[0]
    first_pass = _Findings()
    fields = _compare_numerics(baseline, candidate, tol, first_pass)
    if first_pass.has(Verdict.identical) and len(candidates) == 1:
        findings.merge(first_pass)
        return fields
    findings.merge(first_pass, notes_only=True)
    shape = [name for name in ("losses", "grad_norms", "outputs")
             if (band := getattr(envelope, name)) is not None
             and any(len(getattr(run, name)) not in (0, len(band.mean)) for run in candidates)]
    if shape:
        findings.add(Verdict.incomparable, "the noise envelope and the candidate differ in "
                     f"length: {', '.join(shape)}")
        return fields
    check = judge_envelope(envelope, candidates, tol, candidate.dtype)
    findings.add(Verdict.within_tolerance if check.inside else Verdict.drift,
                 describe(check, "baseline"))
    return {**fields, "envelope": check}


def _compare_timings(
    baselines: list[RunResult],
    candidates: list[RunResult],
    policy: Policy,
    findings: _Findings,
    timing: TimingCheck | None,
) -> dict[str, Any]:
    """The verdict's timing ratios; what they argue for goes to `findings`: `slower` only from
    the timing runs (compare/timing.py); the numeric runs' ratio is a figure, not a verdict.

    Steady steps are their median, except a data pipeline's (both sides report a mean): its
    workers deliver in bursts, so the median step may be one that never waited."""
    measure, figures = measure_of([*baselines, *candidates])
    step_time_ratio = _median_ratio(figures[:len(baselines)], figures[len(baselines):])
    limit = policy.slower_ratio
    if timing is not None:
        step_time_ratio = timing.ratio if timing.ratio is not None else step_time_ratio
        if timing.verdict == "slower":
            findings.add(Verdict.slower, timing.reason)
        elif timing.verdict in ("inconclusive", "faster") or (
                timing.verdict == "not judged" and timing.runs):
            findings.note(timing.reason)
    elif step_time_ratio is not None and step_time_ratio > limit:
        findings.note(f"{'steady-state steps' if measure != 'run() call' else 'run() calls'} "
                      f"took ×{step_time_ratio:.2f} the baseline's in this check's one run a "
                      "side, beside other trainings: not judged (timing runs judge `slower`: "
                      "add it to fail_on, or pass --timing)")
    first_step_ratio = _median_ratio(
        [run.timings.first_step_s for run in baselines],
        [run.timings.first_step_s for run in candidates],
    )
    compile_time_ratio = _median_ratio(
        [run.compile.compile_s if run.compile else None for run in baselines],
        [run.compile.compile_s if run.compile else None for run in candidates],
    )
    # Only where something compiled: a first step that compiles nothing is one more step, as
    # noisy as any in runs made beside other trainings.
    if first_step_ratio is not None and first_step_ratio > limit \
            and compile_time_ratio is not None:
        # The first step includes compilation: worth saying, not worth a verdict of its own.
        findings.note(
            f"the first step (including compilation) takes {first_step_ratio:.2f}×"
            " the baseline's: compile time regressed"
        )
    if compile_time_ratio is not None and compile_time_ratio > limit:
        findings.note(
            f"compilation takes {compile_time_ratio:.2f}× the baseline's"
            " (time in the compiler backend; a cold compiler cache on one side also shows here)"
        )
    return {"step_time_ratio": step_time_ratio, "first_step_ratio": first_step_ratio,
            "compile_time_ratio": compile_time_ratio, "timing": timing}


def _compare_memory(
    baselines: list[RunResult],
    candidates: list[RunResult],
    policy: Policy,
    findings: _Findings,
) -> dict[str, float | None]:
    """The verdict's peak memory ratios, host and accelerator; what they argue for goes to
    `findings`. A peak that rose by less than policy.heavier_min_bytes is noise, whatever its
    ratio: small trainings move by whole allocator arenas between identical runs."""
    ratios: dict[str, float | None] = {}
    for field, key, what in (("peak_memory_bytes", "memory_ratio", "host"),
                             ("peak_device_memory_bytes", "device_memory_ratio", "device")):
        old = median([getattr(run, field) for run in baselines])
        new = median([getattr(run, field) for run in candidates])
        ratio = _median_ratio([old], [new])
        ratios[key] = ratio
        limit = policy.heavier_ratio
        if old is None or new is None or new - old < policy.heavier_min_bytes:
            continue
        # A baseline whose training raised no peak (0: the framework's import peaked higher,
        # where the peak cannot be reset) has no ratio; the rise alone then decides.
        if ratio is not None and ratio <= limit:
            continue
        findings.add(
            Verdict.heavier,
            f"the training's peak {what} memory is {mib(new)} against the baseline's"
            f" {mib(old)}: " + (f"{ratio:.2f}× (limit {limit:.2f}×)" if ratio is not None
                                 else f"up {mib(new - old)} from none"),
        )
    return ratios


def _median_ratio(old: list[float | None], new: list[float | None]) -> float | None:
    # Medians over repeats damp one noisy run; a missing or zero baseline gives no ratio.
    old_values = [value for value in old if value is not None]
    new_values = [value for value in new if value is not None]
    if not old_values or not new_values:
        return None
    old_median = statistics.median(old_values)
    if old_median <= 0:
        return None
    return statistics.median(new_values) / old_median
