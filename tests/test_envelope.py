"""The noise-envelope rule (lockguard/compare/envelope.py) on hand-made runs: pure, instant."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from lockguard.compare.envelope import (
    FAMILY_ALPHA, bounds, deterministic, envelope_of, judge_envelope, representative, t_quantile,
    ulp,
)
from lockguard.compare.tolerance import Policy, Tolerance
from lockguard.compare.verdicts import compare_runs
from lockguard.names import Verdict
from lockguard.results import SCHEMA_VERSION, RunResult

EXACT = Tolerance(rtol=0, atol=0, exact=True)
F32 = Tolerance(rtol=1.3e-6, atol=1e-5)


def run(losses: list[float], outputs: list[float] | None = None, dtype: str = "float64",
        digest: str = "p") -> RunResult:
    return RunResult(schema_version=SCHEMA_VERSION, scenario="s", framework="numpy",
                     device="cpu", dtype=dtype, steps=len(losses), losses=losses,
                     outputs=outputs or [], output_shape=[len(outputs)] if outputs else [],
                     param_digest=digest)


CLEAN = [2.0, 1.5, 1.2, 1.0]


def noisy(z: float, shift: float = 0.0) -> RunResult:
    return run([v * (1 + 1e-4 * z + shift) for v in CLEAN],
               [v * (1 + 1e-4 * z) for v in CLEAN[:2]], digest=f"p{z}")


ZS = (-1.0, -0.4, 0.1, 0.6, 1.0)
BASE = [noisy(z) for z in ZS]


@pytest.mark.parametrize("dof, expected", [(1, 636.619), (2, 31.599), (4, 8.610), (5, 6.869),
                                           (10, 4.587), (30, 3.646)])
def test_t_quantile_matches_the_published_table(dof, expected):
    # Student's t, two-sided 99.9 % (any statistics textbook's table).
    assert t_quantile(1e-3, dof) == pytest.approx(expected, abs=1e-3)


def test_ulp_is_the_spacing_of_the_dtype():
    assert ulp(1.0, "float32") == 2.0 ** -23 and ulp(1.0, "float64") == math.ulp(1.0)
    assert ulp(3.0, "bfloat16") == 2.0 ** -6 and ulp(0.0, "float32") == 0.0


def test_equal_runs_are_deterministic_and_differing_ones_get_an_envelope():
    assert deterministic([run(CLEAN), run(CLEAN), run(CLEAN)])
    assert not deterministic([run(CLEAN), run(CLEAN, digest="q")])
    env = envelope_of(BASE)
    assert env.k == 5 and env.losses.min[0] == BASE[0].losses[0]
    assert env.losses.max[0] == BASE[-1].losses[0] and env.grad_norms is None
    assert env.losses.std[0] == pytest.approx(2.0 * 1e-4 * statistics.stdev(ZS), rel=1e-9)
    assert representative(BASE) is BASE[2]  # the median final loss


def test_the_band_is_the_t_prediction_interval_around_the_mean():
    env = envelope_of(BASE)
    t = t_quantile(FAMILY_ALPHA / 6, 4)
    low, high = bounds(env.losses, 5, t, F32, "float64")
    for i in range(4):
        half = t * env.losses.std[i] * math.sqrt(1 + 1 / 5)
        assert low[i] == pytest.approx(env.losses.mean[i] - half)
        assert high[i] == pytest.approx(env.losses.mean[i] + half)


def test_where_the_runs_agree_the_floor_is_the_tolerance_or_a_few_ulp():
    same = [run([1.0, 1.0 + k * 1e-4]) for k in (0, 1, 2)]
    env = envelope_of(same)
    assert env.losses.std[0] == 0
    low, high = bounds(env.losses, 3, 10.0, F32, "float32")
    assert high[0] - 1.0 == pytest.approx(F32.allowed(1.0))
    low, high = bounds(env.losses, 3, 10.0, EXACT, "float32")
    assert high[0] - 1.0 == 4 * 2.0 ** -23 and 1.0 - low[0] == 4 * 2.0 ** -24 * 2


@pytest.mark.parametrize("z", [-1.0, -0.2, 0.3, 1.0, 3.0, -3.0])
def test_a_candidate_from_the_same_noise_is_inside(z):
    check = judge_envelope(envelope_of(BASE), [noisy(z)], F32, "float64")
    assert check.inside and check.outside == 0 and check.first_outside is None
    assert check.values == 6 and check.k == 5


@pytest.mark.parametrize("shift, side", [(1e-2, "above"), (-1e-2, "below")])
def test_a_shifted_candidate_is_outside_in_both_directions(shift, side):
    check = judge_envelope(envelope_of(BASE), [noisy(0.0, shift)], F32, "float64")
    assert not check.inside and check.first_outside_step == 0 and check.outside == 4
    first = check.first_outside
    assert (first.value > first.high) == (side == "above")
    assert (first.sigma > 0) == (side == "above") and abs(first.sigma) > 50
    assert check.final_loss_sigma == pytest.approx(first.sigma, rel=0.01)


def test_only_the_final_loss_outside_names_its_step():
    moved = noisy(0.0)
    moved.losses[-1] *= 1.01
    check = judge_envelope(envelope_of(BASE), [moved], F32, "float64")
    assert not check.inside and check.first_outside_step == 3 and check.outside == 1


def test_false_alarms_stay_near_the_chosen_rate():
    """Gaussian noise, K=3: the band is wide (t for 2 dof) yet rarely wider than it must be:
    over 2000 fresh candidates the failure rate is about FAMILY_ALPHA, far below what a naive
    3σ band gives (≈ 7 %)."""
    rng = random.Random(7)
    steps, failures, naive = 10, 0, 0
    for _ in range(2000):
        base = [run([1 + 1e-3 * rng.gauss(0, 1) for _ in range(steps)]) for _ in range(3)]
        cand = run([1 + 1e-3 * rng.gauss(0, 1) for _ in range(steps)])
        env = envelope_of(base)
        failures += not judge_envelope(env, [cand], F32, "float64").inside
        naive += any(abs(x - m) > 3 * s + (mx - mn) / 2 for x, m, s, mn, mx in zip(
            cand.losses, env.losses.mean, env.losses.std, env.losses.min, env.losses.max))
    assert failures <= 8 and naive > 50


def _compare(baselines, candidates, **kw):
    return compare_runs(baselines, candidates, policy=Policy(), baseline_kind="lock",
                        expected_device="cpu", timed_together=False, **kw)


def test_compare_runs_uses_the_baselines_envelope_when_they_differ():
    v = _compare(BASE[:3], [noisy(0.5)])
    assert v.verdict == Verdict.within_tolerance and v.envelope.inside
    assert v.reasons[0].startswith("inside the noise envelope of 3 baseline runs")
    assert v.nondeterministic and v.losses is not None  # the figures against run 1 remain
    v = _compare(BASE[:3], [noisy(0.5, -0.05)])
    assert v.verdict == Verdict.drift and "below" in v.reasons[0]
    assert v.envelope.first_outside_step == 0


def test_compare_runs_with_equal_baselines_keeps_the_exact_rule():
    same = [noisy(0.0), noisy(0.0), noisy(0.0)]
    v = _compare(same, [noisy(0.5)])
    assert v.envelope is None and v.verdict == Verdict.drift  # 5e-5 is beyond float64's rtol
    assert _compare(same, [noisy(0.0)]).verdict == Verdict.identical


def test_a_golden_envelope_is_used_for_a_single_baseline_and_every_candidate_run():
    env = envelope_of(BASE)
    v = _compare([representative(BASE)], [noisy(0.2), noisy(-0.9)], envelope=env)
    assert v.verdict == Verdict.within_tolerance and v.envelope.runs == 2
    v = _compare([representative(BASE)], [noisy(0.2), noisy(0.0, 1e-2)], envelope=env)
    assert v.verdict == Verdict.drift and "(candidate run 2)" in v.reasons[0]
    # Bitwise equal to the golden's run is still identical.
    assert _compare([BASE[2]], [BASE[2]], envelope=env).verdict == Verdict.identical
