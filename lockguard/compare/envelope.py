"""Noise envelopes: what K runs of one side say about its run-to-run noise, and whether a
candidate run lies inside it (`envelope_of` → `Envelope`, `judge_envelope` → `EnvelopeCheck`).

A GPU run with atomics (or any reduction whose order depends on scheduling) is not bitwise
reproducible, so "identical" means nothing for it and a fixed tolerance is a guess. Megatron keeps
golden values with their spread over repeated runs; MLPerf checks convergence against reference
points, two-sided. Here a side run K times is *deterministic* when all K runs are bitwise equal
(exact comparison stays meaningful, nothing else changes); otherwise its per-value statistics
(min, max, mean, sample std) are the reference, and a candidate value x at index i passes when

    low_i <= x <= high_i, with
    low_i  = min(min_i - floor_i, mean_i - half_i)
    high_i = max(max_i + floor_i, mean_i + half_i)
    half_i = t(α, K-1) · s_i · sqrt(1 + 1/K)
    floor_i = max(tolerance(mean_i), 4 ulp of mean_i in the run's dtype)

`half_i` is the Student-t prediction interval for one new draw from the distribution the K runs
came from (exact for Gaussian noise; with K=3 the sample std is so uncertain that t is ~141, and
that width is the honest price of three runs). α is 0.1 % per candidate run, shared out over the
n values judged (Bonferroni: α/n each), so a candidate from the same distribution fails with
probability at most 0.1 %, however long the run. `floor_i` keeps the rule from being stricter
than the deterministic one: a value where all K runs agreed (s_i = 0) may still move by the
dtype's tolerance (or, in exact mode, by a few ULP). The test is two-sided: a loss below the
band fails as surely as one above it. Pure: no I/O, no clock.
"""

import math
import statistics
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field

from lockguard.compare.numerics import first_difference
from lockguard.compare.tolerance import Tolerance, normalise_dtype
from lockguard.results import JsonFloat, RunResult

FAMILY_ALPHA = 1e-3  # chance that a candidate run from the baseline's own distribution fails
ULP_FLOOR = 4
SERIES = ("losses", "grad_norms", "outputs")
_MANTISSA = {"float64": 52, "float32": 23, "float16": 10, "bfloat16": 7}


class Band(BaseModel):
    """Per-value statistics of one series over K runs (std: the sample std, K-1)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    min: list[JsonFloat]
    max: list[JsonFloat]
    mean: list[JsonFloat]
    std: list[JsonFloat]


class Envelope(BaseModel):
    """The run-to-run noise of K runs that were not bitwise equal."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    k: int = Field(ge=2)
    losses: Band
    grad_norms: Band | None = None
    outputs: Band | None = None

    def final_loss(self) -> tuple[float, float]:
        """(mean, std) of the final loss over the K runs."""
        return self.losses.mean[-1], self.losses.std[-1]


class Outside(BaseModel):
    """One candidate value beyond the band."""

    model_config = ConfigDict(defer_build=True)

    series: str
    index: int
    value: JsonFloat
    low: JsonFloat
    high: JsonFloat
    mean: JsonFloat
    sigma: JsonFloat | None  # (value - mean) / std; None where the K runs agreed (std 0)
    run: int = 1  # which candidate run, from 1


class EnvelopeCheck(BaseModel):
    """A candidate's runs judged against a noise envelope: what renderers show."""

    model_config = ConfigDict(defer_build=True)

    k: int  # baseline runs the envelope is made of
    runs: int  # candidate runs judged
    values: int  # values judged per candidate run
    t: float  # the Student-t factor used (see the module docstring)
    inside: bool
    outside: int = 0  # values beyond the band, over all candidate runs
    first_outside: Outside | None = None  # in the first candidate run that has one
    first_outside_step: int | None = None  # the loss step, when it is a loss
    worst_sigma: JsonFloat | None = None  # the largest |sigma| of any value (signed)
    worst: str | None = None  # where it is: "losses step 4", "outputs index 2"
    final_loss_sigma: JsonFloat | None = None  # the first candidate run's final loss
    # The loss band per step, for a chart: [low_i, high_i].
    loss_low: list[JsonFloat] = Field(default_factory=list)
    loss_high: list[JsonFloat] = Field(default_factory=list)


def run_difference(first: RunResult, other: RunResult) -> str | None:
    """Where `other` first differs bitwise from `first` (a series and index, or the parameter
    digest); None when the two runs are bitwise equal."""
    for name, unit in (("losses", "step"), ("grad_norms", "step"), ("outputs", "index")):
        index = first_difference(getattr(first, name), getattr(other, name))
        if index is not None:
            return f"{name.replace('_', ' ')} from {unit} {index}"
    if first.param_digest != other.param_digest:
        return "parameter digest"
    if first.sample_order != other.sample_order:
        return "sample order"
    return None


def deterministic(runs: Sequence[RunResult]) -> bool:
    """Whether every run is bitwise equal to the first (losses, grad norms, outputs, digest)."""
    return all(run_difference(runs[0], run) is None for run in runs[1:])


def envelope_of(runs: Sequence[RunResult]) -> Envelope:
    """The envelope of K >= 2 healthy runs of the same shape."""
    if len(runs) < 2:
        raise ValueError("an envelope needs at least two runs")
    bands: dict[str, Band | None] = {}
    for name in SERIES:
        series = [getattr(run, name) for run in runs]
        lengths = {len(values) for values in series}
        if len(lengths) != 1:
            raise ValueError(f"{name}: the runs have {sorted(lengths)} values")
        bands[name] = _band(series) if series[0] else None
    losses = bands.pop("losses")
    if losses is None:
        raise ValueError("an envelope needs losses")
    return Envelope(k=len(runs), losses=losses, **bands)


def _band(series: list[list[float]]) -> Band:
    columns = list(zip(*series))
    return Band(min=[min(c) for c in columns], max=[max(c) for c in columns],
                mean=[math.fsum(c) / len(c) for c in columns],
                std=[statistics.stdev(c) for c in columns])


def representative(runs: Sequence[RunResult]) -> RunResult:
    """The run whose final loss is the (lower) median of the K: what a golden shows as its
    curve beside the envelope."""
    ordered = sorted(runs, key=lambda run: run.losses[-1])
    return ordered[(len(ordered) - 1) // 2]


def t_quantile(alpha: float, dof: int) -> float:
    """t such that P(|T| <= t) = 1 - alpha for Student's t with `dof` degrees of freedom."""
    if not 0 < alpha < 1 or dof < 1:
        raise ValueError(f"t quantile of alpha={alpha}, dof={dof}")
    hi = 1.0
    while _t_central(hi, dof) < 1 - alpha:
        hi *= 2
    lo = 0.0
    for _ in range(200):  # bisection to float precision
        mid = (lo + hi) / 2
        if mid in (lo, hi):
            break
        lo, hi = (mid, hi) if _t_central(mid, dof) < 1 - alpha else (lo, mid)
    return hi


def _t_central(t: float, dof: int) -> float:
    """P(|T| <= t), by the closed forms for integer degrees of freedom (Abramowitz & Stegun
    26.7.3/26.7.4)."""
    theta = math.atan(t / math.sqrt(dof))
    s, c = math.sin(theta), math.cos(theta)
    term = acc = 1.0
    if dof % 2:
        if dof == 1:
            return 2 * theta / math.pi
        for k in range(1, (dof - 3) // 2 + 1):
            term *= (2 * k) / (2 * k + 1) * c * c
            acc += term
        return 2 / math.pi * (theta + s * c * acc)
    for k in range(1, (dof - 2) // 2 + 1):
        term *= (2 * k - 1) / (2 * k) * c * c
        acc += term
    return s * acc


def ulp(x: float, dtype: str) -> float:
    """The spacing of `dtype`'s values at |x| (of the smallest normal at 0)."""
    mantissa = _MANTISSA[normalise_dtype(dtype)]
    if x == 0 or not math.isfinite(x):
        return 0.0
    _, exponent = math.frexp(abs(x))
    return math.ldexp(1.0, exponent - 1 - mantissa)


def bounds(band: Band, k: int, t: float, tol: Tolerance, dtype: str
           ) -> tuple[list[float], list[float]]:
    """The [low, high] of each value (the module docstring's rule)."""
    widen = math.sqrt(1 + 1 / k)
    low, high = [], []
    for mn, mx, mean, std in zip(band.min, band.max, band.mean, band.std):
        floor = max(tol.allowed(mean), ULP_FLOOR * ulp(mean, dtype))
        half = t * std * widen
        low.append(min(mn - floor, mean - half))
        high.append(max(mx + floor, mean + half))
    return low, high


def judge_envelope(envelope: Envelope, candidates: Sequence[RunResult], tol: Tolerance,
                   dtype: str) -> EnvelopeCheck:
    """Every value of every candidate run against the envelope (the runs are healthy and of the
    envelope's shape: compare_runs checks that first)."""
    bands = [(name, band) for name in SERIES
             if (band := getattr(envelope, name)) is not None and getattr(candidates[0], name)]
    n = sum(len(band.mean) for _, band in bands)
    t = t_quantile(FAMILY_ALPHA / n, envelope.k - 1)
    limits = {name: bounds(band, envelope.k, t, tol, dtype) for name, band in bands}
    outside: list[Outside] = []
    worst: tuple[float, str] | None = None
    for number, run in enumerate(candidates, start=1):
        for name, band in bands:
            low, high = limits[name]
            for i, x in enumerate(getattr(run, name)):
                std = band.std[i]
                sigma = (x - band.mean[i]) / std if std > 0 else None
                if sigma is not None and (worst is None or abs(sigma) > abs(worst[0])):
                    unit = "index" if name == "outputs" else "step"
                    where = f"{name.replace('_', ' ')} {unit} {i}"
                    worst = (sigma, where + (f" of run {number}" if len(candidates) > 1 else ""))
                if not low[i] <= x <= high[i]:
                    outside.append(Outside(series=name, index=i, value=x, low=low[i],
                                           high=high[i], mean=band.mean[i], sigma=sigma,
                                           run=number))
    first = outside[0] if outside else None
    first_loss = next((o for o in outside if o.series == "losses"), None)
    mean, std = envelope.final_loss()
    final = candidates[0].losses[-1]
    return EnvelopeCheck(
        k=envelope.k, runs=len(candidates), values=n, t=t, inside=not outside,
        outside=len(outside), first_outside=first,
        first_outside_step=first_loss.index if first_loss else None,
        worst_sigma=worst[0] if worst else None, worst=worst[1] if worst else None,
        final_loss_sigma=(final - mean) / std if std > 0 else None,
        loss_low=limits["losses"][0], loss_high=limits["losses"][1])


def describe(check: EnvelopeCheck, role: str) -> str:
    """One sentence for the reasons: inside, or where it left the envelope and by how much."""
    of = f"the noise envelope of {check.k} {role} runs"
    rule = (f"band: min/max ± max(tolerance, {ULP_FLOOR} ULP), widened to mean ± "
            f"{check.t:.3g}·σ·√(1+1/{check.k}) (Student t, {FAMILY_ALPHA:.1%} false alarms "
            f"per run over {check.values} values)")
    final = ("" if check.final_loss_sigma is None
             else f"; final loss at {check.final_loss_sigma:+.2f}σ")
    if check.inside:
        worst = ("" if check.worst_sigma is None
                 else f"; farthest {check.worst_sigma:+.2f}σ from the mean at {check.worst}")
        runs = "the candidate run" if check.runs == 1 else f"all {check.runs} candidate runs"
        return f"inside {of}: {runs}, {check.values} values each{worst}{final} [{rule}]"
    o = check.first_outside
    assert o is not None
    unit = "index" if o.series == "outputs" else "step"
    side = "above" if o.value > o.high else "below"
    by = f"{o.sigma:+.2f}σ" if o.sigma is not None else "the runs agreed there (σ 0)"
    run = f" (candidate run {o.run})" if check.runs > 1 else ""
    return (f"outside {of} from {o.series.replace('_', ' ')} {unit} {o.index}{run}: "
            f"{o.value!r} is {side} [{o.low!r}, {o.high!r}] (mean {o.mean!r}, {by}); "
            f"{check.outside} value(s) outside{final} [{rule}]")
