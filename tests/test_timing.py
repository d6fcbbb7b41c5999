"""`slower` you can believe: the timing statistics (compare/timing.py) — false alarms and power
over thousands of simulated checks — and the A/B flow's timing runs on the fake backend (one at a
time, alternating, after the numeric runs). Real A/B checks of a slowed dependency are in
tests/test_timing_real.py."""

from __future__ import annotations

import math
import random
from types import SimpleNamespace

import pytest

from fakes import FakeBackend, lock
from lockguard.compare.timing import MIN_RUNS, compare_timing, time_blocks
from lockguard.compare.tolerance import Policy
from lockguard.config import Config, Options
from lockguard.flows.ab import check_ab
from lockguard.names import Verdict
from lockguard.results import SCHEMA_VERSION, RunResult, Status
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
POLICY = Policy()  # slower_ratio ×1.30, steps under 2 ms not judged


def timed(step_s: float, run_s: float | None = None) -> RunResult:
    return RunResult(schema_version=SCHEMA_VERSION, scenario="s", framework="numpy", steps=3,
                     status=Status.ok, losses=[1.0, 0.5, 0.25],
                     timings={"step_median_s": step_s} if run_s is None else {},
                     metrics={"run_s": run_s} if run_s is not None else {})


def figure(step_s: float) -> SimpleNamespace:
    """What compare_timing reads of a run, without building a RunResult (thousands per test)."""
    return SimpleNamespace(timings=SimpleNamespace(step_mean_s=None, step_median_s=step_s,
                                                   block_median_s=None, block_steps=None),
                           metrics={})


def simulate(rng: random.Random, ratio: float, sigma: float, k: int, load: float = 0.0,
             step: float = 0.01) -> str:
    """One check: k interleaved pairs; each process's figure is log-normal around its side's
    true step; `load` is a slow drift of the machine's load that both runs of a pair share."""
    baselines, candidates = [], []
    for _ in range(k):
        shared = math.exp(load * rng.gauss(0.0, 1.0))
        baselines.append(figure(step * shared * math.exp(sigma * rng.gauss(0.0, 1.0))))
        candidates.append(figure(step * ratio * shared * math.exp(sigma * rng.gauss(0.0, 1.0))))
    return compare_timing(baselines, candidates, POLICY).verdict


@pytest.mark.parametrize("sigma,load,most", [(0.02, 0.0, 0), (0.1, 0.0, 2), (0.25, 0.0, 4),
                                             (0.1, 0.5, 2), (0.25, 0.8, 4), (0.5, 0.0, 8)])
def test_the_same_stack_is_almost_never_called_slower(sigma, load, most):
    """4000 same-lock checks of 5 runs a side, at noise from quiet (2 %) past this machine's
    (×1.7 run to run over 5 runs is sigma ≈ 0.23) to ×3 (sigma 0.5), with and without a shared
    load drift: at most 0.1 % `slower` up to sigma 0.25, 0.2 % beyond — under 2 % for 20
    scenario checks at this machine's noise."""
    rng = random.Random(f"{sigma}-{load}")
    verdicts = [simulate(rng, 1.0, sigma, 5, load) for _ in range(4000)]
    assert verdicts.count("slower") <= most, verdicts.count("slower")


def test_quiet_same_stack_checks_say_not_slower():
    rng = random.Random("quiet")
    verdicts = [simulate(rng, 1.0, 0.03, 5) for _ in range(1000)]
    assert verdicts.count("same") >= 990  # quiet enough to claim it, so it is claimed


@pytest.mark.parametrize("sigma,least", [(0.02, 500), (0.1, 500), (0.25, 480)])
def test_four_times_the_work_is_slower(sigma, least):
    """A dependency doing 4× the work per step: `slower` every time at the noise a real step
    of milliseconds has here (sigma ≤ 0.1), ≥ 96 % at sigma 0.25."""
    rng = random.Random(f"4x-{sigma}")
    verdicts = [simulate(rng, 4.0, sigma, 5, load=0.3) for _ in range(500)]
    assert verdicts.count("slower") >= least, verdicts.count("slower")


def test_a_modest_slowdown_is_found_when_quiet_and_inconclusive_when_noisy():
    rng = random.Random("1.5x")
    quiet = [simulate(rng, 1.5, 0.03, 5) for _ in range(500)]
    assert quiet.count("slower") == 500
    noisy = [simulate(rng, 1.5, 0.5, 5) for _ in range(500)]
    # Too noisy to claim: mostly inconclusive, hardly ever "same" (a claim it is not slower).
    assert noisy.count("same") <= 5 and noisy.count("inconclusive") > 250


def test_the_interval_and_its_wording():
    a = [timed(0.010), timed(0.011), timed(0.0105), timed(0.0098), timed(0.0102)]
    b = [timed(0.041), timed(0.043), timed(0.040), timed(0.042), timed(0.0415)]
    check = compare_timing(a, b, POLICY)
    assert check.verdict == "slower" and check.runs == 5 and check.measure == "step median"
    assert check.low < check.ratio < check.high and check.low > 3.5 and check.high < 4.6
    assert check.reason.startswith("steady-state steps take ×4.0")
    assert "the baseline's (99 % CI ×" in check.reason and "5 runs a side" in check.reason
    assert check.spread == pytest.approx(max(0.011 / 0.0098, 0.043 / 0.040))


def test_what_is_not_judged():
    short = compare_timing([timed(0.001)] * 5, [timed(0.004)] * 5, POLICY)
    assert short.verdict == "not judged" and "too short" in short.reason
    few = compare_timing([timed(0.01)] * (MIN_RUNS - 1), [timed(0.04)] * (MIN_RUNS - 1), POLICY)
    assert few.verdict == "not judged" and "at least" in few.reason
    # A user script that shows no steps is timed by its run() call.
    calls = compare_timing([timed(0, run_s=1.0 + i / 100) for i in range(5)],
                           [timed(0, run_s=4.0 + i / 100) for i in range(5)], POLICY)
    assert calls.measure == "run() call" and calls.verdict == "slower"
    assert calls.reason.startswith("run() calls take ×")


def blocks(step_s: float, k: int) -> RunResult:
    return RunResult(schema_version=SCHEMA_VERSION, scenario="s", framework="numpy", steps=3,
                     status=Status.ok, losses=[1.0, 0.5, 0.25],
                     timings={"step_median_s": step_s, "block_median_s": step_s * k,
                              "block_steps": k})


def test_steps_too_short_to_time_one_by_one_are_timed_in_blocks():
    """A 0.1 ms step is under the 2 ms a step must last to be timed (interpreter overhead and
    scheduler noise): the timing runs time 50 at a time (5 ms a block), 15 blocks a run."""
    assert time_blocks([timed(0.0001), timed(0.00012)], 30, POLICY) == (50, 751)
    assert time_blocks([timed(0.01)], 30, POLICY) == (0, 30)  # long enough as it is
    assert time_blocks([timed(0, run_s=1.0)], 30, POLICY) == (0, 30)  # no steps to time
    slower = compare_timing([blocks(0.0001 * (1 + i / 50), 50) for i in range(5)],
                            [blocks(0.0004 * (1 + i / 50), 50) for i in range(5)], POLICY)
    assert slower.measure == "step block" and slower.verdict == "slower"
    assert slower.reason.startswith("steady-state steps (timed 50 at a time) take ×4.00")
    assert slower.baseline_s == pytest.approx(0.000104)  # a step's, not a block's
    same = compare_timing([blocks(0.0001, 50)] * 5, [blocks(0.0001, 50)] * 5, POLICY)
    assert same.verdict == "same"
    # Blocks that still last under 2 ms are not judged either.
    short = compare_timing([blocks(0.00001, 50)] * 5, [blocks(0.00001, 50)] * 5, POLICY)
    assert short.verdict == "not judged" and short.reason.endswith("even 50 at a time")


# ------------------------------------------------------------------------------ the flow


def project(tmp_path, fail_on: list[str] | None = None) -> Config:
    return Config(root=tmp_path, golden_dir="golden", steps=6, timing_runs=5,
                  fail_on=fail_on)


def test_timing_runs_only_when_a_timing_verdict_is_asked_for(tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==1.26.4\nsix==1.16.0\n")
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.01})
    report = check_ab(Settings.resolve(project(tmp_path)), [new], [old], NUMPY, backend=fake)
    assert len(fake.runs) == 2 and report.verdicts[0].timing is None
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.01})
    report = check_ab(Settings.resolve(project(tmp_path), Options(timing=True)), [new], [old],
                      NUMPY, backend=fake)
    assert len(fake.runs) == 2 + 2 * 5
    [v] = report.verdicts
    assert v.verdict == Verdict.identical and v.timing.verdict == "same"
    # slower in fail_on asks for them too.
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.01})
    check_ab(Settings.resolve(project(tmp_path, ["drift", "slower"])), [new], [old], NUMPY,
             backend=fake)
    assert len(fake.runs) == 12


def test_timing_runs_alternate_one_at_a_time_after_the_numeric_runs(tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.01, ("numpy.mlp", "2.0.2"): 0.04},
                       timing_noise=0.2, run_s=0.01)
    report = check_ab(Settings.resolve(project(tmp_path, ["drift", "slower"])), [new], [old], NUMPY,
                      backend=fake)
    versions = [version for _, version in fake.runs]
    # A B, B A, … after the numeric pair: each pair adjacent, neither side always first.
    assert versions[2:] == ["1.26.4", "2.0.2", "2.0.2", "1.26.4"] * 2 + ["1.26.4", "2.0.2"]
    # The numeric pair may run side by side; no timing run starts while another runs.
    assert fake.overlaps[2:] == [0] * 10, fake.overlaps
    [v] = report.verdicts
    # The numbers moved too (another numpy): drift comes first, slower is a reason beside it.
    assert v.verdict == Verdict.drift and not report.passed
    assert v.timing.verdict == "slower" and v.timing.runs == 5
    [said] = [r for r in v.reasons if r.startswith("steady-state steps take ×")]
    assert "99 % CI" in said and v.step_time_ratio == pytest.approx(v.timing.ratio)


def test_a_check_of_short_steps_times_them_in_blocks(tmp_path):
    """numpy.mlp's steps of about 0.2 ms: its timing runs time about 25 together (5 ms), 15
    blocks a run, and `slower` speaks for it."""
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.0002, ("numpy.mlp", "2.0.2"): 0.0008},
                       timing_noise=0.05)
    report = check_ab(Settings.resolve(project(tmp_path), Options(timing=True)), [new], [old],
                      NUMPY, backend=fake)
    [v] = report.verdicts
    block = v.timing.block_steps
    assert v.timing.verdict == "slower" and 20 <= block <= 25, v.timing  # the noise's share
    proof = report.evidence[0]
    assert proof.candidate.result.steps == 6  # the numeric run's, judged as ever
    assert fake.steps[:2] == [6, 6] and fake.steps[2:] == [1 + 15 * block] * 10


def test_a_noisy_numeric_ratio_is_shown_never_judged(tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(step_s={("numpy.mlp", "1.26.4"): 0.01, ("numpy.mlp", "2.0.2"): 0.03})
    report = check_ab(Settings.resolve(project(tmp_path)), [new], [old], NUMPY, backend=fake)
    [v] = report.verdicts
    assert v.verdict == Verdict.drift  # the numbers differ; timing made no verdict
    assert v.step_time_ratio == pytest.approx(3.0)
    assert any("not judged" in r and "--timing" in r for r in v.reasons)
