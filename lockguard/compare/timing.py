"""Timing verdicts a shared 2-core runner can believe.

A step time measured once per side, beside other trainings, says little: the same environment's
steady step moved by ×1.7 from run to run here. So `slower` is judged only from the *timing runs*
of an A/B check (lockguard/flows/ab.py): K processes a side, baseline and candidate interleaved
(A B, B A, A B, … — each pair's order alternates, so neither side always runs first), one at a
time and alone, after the check's numeric runs warmed every cache (compiled kernels included).
Each process gives one figure — its median steady step (a data pipeline's mean step; a user
script's run() call when it shows no steps) — and each adjacent pair (A_i, B_i) shared the
machine's load of the moment, so the ratio is estimated from the paired log-ratios
d_i = ln(B_i / A_i): the point estimate exp(mean d), and Student's t interval of it
(CONFIDENCE, K − 1 degrees of freedom).

    slower         the point estimate is at least `slower_ratio` and the whole interval is
                   above √slower_ratio (×1.14 for ×1.30): slower, and clearly by more than
                   noise. Simulated, 5 runs a side: same-stack checks call it slower at most
                   0.2 % of the time even at ×3 run-to-run noise (0.07 % at this machine's ×1.7),
                   a ×4 slowdown 97–100 % (tests/test_timing.py)
    faster         the point estimate is at most 1 / `slower_ratio` and the interval is below 1
    same           the interval's upper end is below `slower_ratio`: not slower beyond the limit
    inconclusive   anything else: the interval reaches past the limit without excluding 1 —
                   the noise is too high to say either way, and that is what is said
    not judged     fewer than MIN_RUNS processes a side, or steps shorter than
                   `slower_min_step_s` (interpreter overhead and scheduler noise) even when
                   timed in blocks

Steps shorter than `slower_min_step_s` are timed in blocks: the timing runs run the scenario
longer and time BLOCK_FACTOR × that many seconds' worth of steps together (time_blocks, from
the numeric runs' step time); the figure is then the median block, per step.

Pure: no I/O, no clock. The interval and the spread are shown in every report format.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from lockguard.compare.envelope import t_quantile
from lockguard.compare.figures import seconds
from lockguard.compare.tolerance import Policy
from lockguard.results import RunResult

CONFIDENCE = 0.99  # of the ratio's interval: a same-lock check may not cry `slower`
MIN_RUNS = 3  # processes a side below which no interval is drawn

Measure = Literal["step block", "step median", "step mean", "run() call"]
# Steps shorter than slower_min_step_s are timed in blocks (time_blocks): a block lasts at least
# BLOCK_FACTOR times that, and a timing run holds BLOCKS of them.
BLOCK_FACTOR = 2.5
BLOCKS = 15
MAX_BLOCK = 10_000  # steps: a step of under a microsecond is no training worth timing
TimingVerdict = Literal["slower", "faster", "same", "inconclusive", "not judged"]


class TimingCheck(BaseModel):
    """What the timing runs of one scenario say, for the verdict and every report."""

    model_config = ConfigDict(defer_build=True)

    measure: Measure
    runs: int  # processes a side (pairs)
    block_steps: int | None = None  # "step block": the steps timed together
    baseline_s: float | None = None  # median of the baseline processes' figures
    candidate_s: float | None = None
    ratio: float | None = None  # candidate / baseline: exp of the mean paired log-ratio
    low: float | None = None  # CONFIDENCE interval of the ratio
    high: float | None = None
    confidence: float = CONFIDENCE
    spread: float | None = None  # run to run: max / min of one side's figures (the wider)
    verdict: TimingVerdict
    reason: str

    def interval(self) -> str:
        """'99 % CI ×1.31–×1.55, 6 runs a side'."""
        ci = (f"{self.confidence:.0%} CI ×{self.low:.2f}–×{self.high:.2f}, ".replace("%", " %")
              if self.low is not None and self.high is not None else "")
        return f"{ci}{self.runs} runs a side"


@functools.lru_cache(maxsize=None)
def _t(dof: int) -> float:
    return t_quantile(1 - CONFIDENCE, dof)


def time_blocks(numeric: Sequence[RunResult], steps: int, policy: Policy) -> tuple[int, int]:
    """(block, steps) for a scenario's timing runs, from its numeric runs' steady step: (0, its
    own steps) when a step is long enough to time one by one (or none shows); else steps timed
    together so that a block lasts BLOCK_FACTOR × slower_min_step_s, and steps enough for
    BLOCKS blocks after the first step."""
    medians = [r.timings.step_median_s for r in numeric if r.timings.step_median_s]
    if not medians or min(medians) >= policy.slower_min_step_s:
        return 0, steps
    block = min(MAX_BLOCK, math.ceil(BLOCK_FACTOR * policy.slower_min_step_s / min(medians)))
    return block, max(steps, 1 + BLOCKS * block)


def measure_of(runs: Sequence[RunResult]) -> tuple[Measure, list[float | None]]:
    """Which figure of each run is compared, per step: a timing run's blocks of short steps
    (their median, over the steps in a block), else a data pipeline's mean step (its workers
    deliver in bursts: the median step may be one that never waited), else the median steady
    step, else, for a user script that shows no steps, the wall time of its run() call."""
    if all(r.timings.block_median_s is not None and r.timings.block_steps for r in runs):
        return "step block", [r.timings.block_median_s / r.timings.block_steps  # type: ignore
                              for r in runs]
    if all(r.timings.step_mean_s is not None for r in runs):
        return "step mean", [r.timings.step_mean_s for r in runs]
    if all(r.timings.step_median_s is not None for r in runs):
        return "step median", [r.timings.step_median_s for r in runs]
    return "run() call", [r.metrics.get("run_s") for r in runs]


def compare_timing(baselines: Sequence[RunResult], candidates: Sequence[RunResult],
                   policy: Policy) -> TimingCheck:
    """The timing verdict of interleaved timing runs (baselines[i] ran just before
    candidates[i])."""
    measure, figures = measure_of([*baselines, *candidates])
    old, new = figures[:len(baselines)], figures[len(baselines):]
    pairs = [(a, b) for a, b in zip(old, new) if a is not None and b is not None
             and a > 0 and b > 0]
    k = len(pairs)
    if k == 0:
        return TimingCheck(measure=measure, runs=0, verdict="not judged",
                           reason="no timing figure on both sides")
    a_s = [a for a, _ in pairs]
    b_s = [b for _, b in pairs]
    base, cand = statistics.median(a_s), statistics.median(b_s)
    spread = max(max(a_s) / min(a_s), max(b_s) / min(b_s))
    logs = [math.log(b / a) for a, b in pairs]
    ratio = math.exp(statistics.fmean(logs))
    block = baselines[0].timings.block_steps if measure == "step block" else None
    found = dict(measure=measure, runs=k, baseline_s=base, candidate_s=cand, ratio=ratio,
                 spread=spread, block_steps=block)
    if measure != "run() call" and base * (block or 1) < policy.slower_min_step_s:
        return TimingCheck(**found, verdict="not judged",
                           reason=f"steps of {seconds(base)} are too short to time (under "
                                  f"{seconds(policy.slower_min_step_s)}: interpreter overhead "
                                  "and scheduler noise)"
                                  + (f", even {block} at a time" if block else ""))
    if k < MIN_RUNS:
        return TimingCheck(**found, verdict="not judged",
                           reason=f"{k} timing run(s) a side; at least {MIN_RUNS} are needed "
                                  "for an interval")
    half = _t(k - 1) * statistics.stdev(logs) / math.sqrt(k)
    low, high = math.exp(math.log(ratio) - half), math.exp(math.log(ratio) + half)
    check = TimingCheck(**found, low=low, high=high, verdict="same", reason="")
    limit = policy.slower_ratio
    what = {"step block": f"steady-state steps (timed {block} at a time)",
            "step median": "steady-state steps", "step mean": "steps (mean, a data pipeline's)",
            "run() call": "run() calls"}[measure]
    took = f"{what} take ×{ratio:.2f} the baseline's ({check.interval()}"
    if ratio >= limit and low > math.sqrt(limit):
        verdict, reason = "slower", f"{took}; limit ×{limit:.2f})"
    elif ratio <= 1 / limit and high < 1:
        verdict, reason = "faster", f"{took}): faster"
    elif high >= limit:
        verdict, reason = "inconclusive", (
            f"timing inconclusive: {took}, run to run ×{spread:.2f}): too noisy here to tell "
            f"×{limit:.2f} from ×1")
    else:
        verdict, reason = "same", f"{took}): not slower"
    return check.model_copy(update={"verdict": verdict, "reason": reason})
