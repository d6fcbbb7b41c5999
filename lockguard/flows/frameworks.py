"""`lockguard compare-frameworks`: the bundled model families trained in every framework the
locks pin, on this machine, one run at a time — step-0 parity, final loss, first-step (compile)
and steady step time, peak memory, and each compiled path beside its plain twin.

Every framework's scenario of a family starts from the same data and initial weights (the shared
generator), so step 0 agrees to float rounding and what differs after it is the framework: the
question "which framework trains this model faster on our machines" answered by measurement,
with the caveats that bound the answer stated in the report itself.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from lockguard.compare.figures import median
from lockguard.compare.verdicts import compare_runs
from lockguard.config import ConfigError
from lockguard.flows.goldens import Hosts
from lockguard.flows.pipeline import Backend, Job, Planned, Runs, pipeline
from lockguard.flows.report_parts import (
    evidence, family_rule_report, relative_spread, report_for,
)
from lockguard.locks.families import framework_version
from lockguard.locks.ref import LockRef
from lockguard.names import MODEL_FAMILIES, Verdict
from lockguard.progress import QUIET, Progress
from lockguard.report import FrameworkRow, FrameworkTable
from lockguard.results import RunResult, Status
from lockguard.scenarios import Scenario, bundled
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.report import Evidence, Report

FAMILIES = MODEL_FAMILIES
MEASURED = ("measured on this machine; frameworks are set side by side, not judged against "
            "each other")


def comparison_scenarios(families: list[str], frameworks: list[str]) -> list[Scenario]:
    """The bundled float32 scenarios of `families` (all when empty) in `frameworks` (all when
    empty), family by family. Mixed-precision and own-RNG scenarios are other math: left out."""
    wanted = families or list(FAMILIES)
    for family in wanted:
        if family not in FAMILIES:
            raise ConfigError(f"--family {family!r}: unknown model family "
                              f"(one of {', '.join(FAMILIES)})")
    chosen = [s for s in bundled() if s.family in wanted and s.dtype == "float32"
              and (not frameworks or s.framework in frameworks)]
    return sorted(chosen, key=lambda s: wanted.index(s.family or ""))  # stable: bundled order


def compare_frameworks(settings: Settings, locks: list[LockRef], scenarios: list[Scenario],
                       progress: Progress = QUIET, backend: Backend | None = None) -> Report:
    """Train `scenarios` (comparison_scenarios) from `locks`, one run at a time, repeats in
    rounds, and set the frameworks side by side in the report's table."""
    start = time.perf_counter()
    if (failed := family_rule_report("compare-frameworks", locks)) is not None:
        return failed
    policy = settings.policy
    hosts = Hosts()
    runs_of: dict[str, list[RunResult]] = {}

    def decide(p: Planned) -> list[Job]:
        hosts.get(p.device)
        return [Job(p, p.lock)] * settings.repeat

    def judge(p: Planned, runs: Runs) -> tuple[ScenarioVerdict, Evidence]:
        runs_of[p.scenario.id] = runs.candidate
        verdict = compare_runs([], runs.candidate, policy=policy, baseline_kind=None,
                               expected_device=p.device, timed_together=False,
                               alone=(Verdict.measured, MEASURED))
        return verdict, evidence(p.scenario.id, None,
                                 ("lock", p.lock.name if p.lock else "local", runs.candidate[0]))

    # One run at a time: two trainings sharing the cores and the memory bandwidth slow each
    # other unevenly, and the step times are the point here; repeats in rounds, so that a
    # change in the machine's load over the minutes this takes touches every framework alike.
    outcome = pipeline(settings, scenarios, locks, decide=decide, judge=judge,
                       progress=progress, backend=backend, jobs=1, rounds=True)
    verdicts = {v.scenario: v for v in outcome.verdicts}
    measured = [_measure(p, verdicts[p.scenario.id], runs_of[p.scenario.id])
                for p in outcome.planned if p.scenario.id in runs_of]
    devices = sorted({p.device for p in outcome.planned if not p.skip_reason})
    table = _table(measured, outcome.planned, settings, ", ".join(devices)) \
        if measured else None
    return report_for(settings, outcome, command="compare-frameworks", mode="frameworks",
                      locks=locks, started=start, done="measured", with_parity=False,
                      frameworks=table, hardware=hosts.known())


# ------------------------------------------------------------------------------------ table

def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def _measure(p: Planned, verdict: ScenarioVerdict, runs: list[RunResult]) -> dict[str, Any]:
    """One scenario's own figures (FrameworkRow fields): the first run's losses (every run
    trains the same math), the medians of the runs' times and peaks."""
    sc = p.scenario
    ok = [r for r in runs if r.status == Status.ok]
    first = ok[0] if ok else runs[0]
    peak = median([r.peak_memory_bytes for r in ok])
    device_peak = median([r.peak_device_memory_bytes for r in ok])
    return dict(
        family=sc.family or "", scenario=sc.id, framework=sc.framework,
        version=first.framework_version or (framework_version(p.lock.lock, sc.framework)
                                            if p.lock else None),
        execution=sc.execution or "eager", device=p.device,
        verdict=verdict.verdict, runs=len(runs),
        step0_loss=first.losses[0] if ok and first.losses else None,
        final_loss=first.losses[-1] if ok and first.losses else None,
        import_s=median([r.timings.import_s for r in ok]),
        first_step_s=median([r.timings.first_step_s for r in ok]),
        step_s=median([r.timings.step_median_s for r in ok]),
        peak_memory_bytes=int(peak) if peak is not None else None,
        peak_device_memory_bytes=int(device_peak) if device_peak is not None else None,
        notes=_path_notes(first, sc.execution or "") if ok else [])


def _path_notes(run: RunResult, execution: str) -> list[str]:
    """What the compiled path actually did, where it did not do all it was asked: the figures of
    a torch.compile that fell back are eager's, and the reader must know."""
    c = run.compile
    if c is None:
        return []
    notes = []
    if c.backend == "eager" or c.eager_fallbacks:
        notes.append("fell back to eager"
                     + (f" in {c.eager_fallbacks} frame(s)" if c.eager_fallbacks else "")
                     + ": these figures are (partly) eager's")
    if c.graph_breaks:
        notes.append(f"{c.graph_breaks} graph break(s)")
    if c.recompiles:
        notes.append(f"{c.recompiles} recompile(s)")
    retraced = {name: n for name, n in {**c.traces, **c.compilations}.items() if n > 1}
    if retraced:
        notes.append("traced more than once: "
                     + ", ".join(f"{name} ×{n}" for name, n in sorted(retraced.items())))
    if "XLA" in execution and c.xla is False:
        notes.append("XLA was not used")
    return notes


def _table(measured: list[dict[str, Any]], planned: list[Planned], settings: Settings,
           device: str) -> FrameworkTable:
    """The rows, each with its figures relative to its family and to its plain twin, and the
    caveats."""
    by_id = {m["scenario"]: m for m in measured}
    twins = {p.scenario.id: p.scenario.plain_twin for p in planned}
    rows = []
    for m in measured:
        peers = [other for other in measured
                 if (other["family"], other["device"]) == (m["family"], m["device"])]
        fastest = min((other["step_s"] for other in peers if other["step_s"]), default=None)
        relative: dict[str, Any] = {"step_vs_fastest": _ratio(m["step_s"], fastest)}
        plain = by_id.get(twins.get(m["scenario"]) or "")
        if plain is not None:
            relative.update(
                plain=plain["scenario"], step_vs_plain=_ratio(m["step_s"], plain["step_s"]),
                first_step_vs_plain=_ratio(m["first_step_s"], plain["first_step_s"]),
                memory_vs_plain=_ratio(m["peak_memory_bytes"], plain["peak_memory_bytes"]))
        rows.append(FrameworkRow(**m, **relative))
    steps = {p.scenario.family or "": p.steps for p in planned if not p.skip_reason}
    step0: dict[str, list[float]] = {}
    for row in rows:
        if row.step0_loss is not None:
            step0.setdefault(row.family, []).append(row.step0_loss)
    spread = {family: relative_spread(values) for family, values in step0.items()
              if len(values) > 1}
    return FrameworkTable(device=device, threads=settings.threads, repeat=settings.repeat,
                          steps=steps, step0_spread=spread, rows=rows,
                          caveats=caveats(settings, rows))


def caveats(settings: Settings, rows: list[FrameworkRow]) -> list[str]:
    """What the figures do and do not say, in the report beside them."""
    floor = settings.policy.heavier_min_bytes / 2**20
    out = [
        "Same model, data and initial weights in every framework (step 0 agrees to float "
        "rounding); each framework runs its own optimiser code for the same update, so the "
        "losses part by rounding from step 1 on: final losses are shown, not judged.",
        f"Same math, not tuned per framework: bundled sizes, float32, {settings.threads} "
        "thread(s), default settings. A framework's own best configuration may be faster.",
        "Step: the median training step after the first. First step: includes compiling or "
        "tracing; a warm compile cache (torch inductor's on a second run) makes it shorter. "
        + (f"Medians of {settings.repeat} runs each" if settings.repeat > 1 else "One run each")
        + ", one at a time on this machine; ×fastest is the step against the family's fastest.",
        "Peak memory: how far the training raised the process's resident memory above its "
        "level after importing the framework (compile caches and allocator pools count). "
        f"Below {floor:.0f} MiB (heavier_min_bytes) figures move by a few MiB run to run.",
    ]
    if any(row.peak_device_memory_bytes is not None for row in rows):
        out.append("Device memory: torch's max_memory_allocated on the accelerator; JAX and "
                   "TensorFlow do not report a peak here.")
    return out
