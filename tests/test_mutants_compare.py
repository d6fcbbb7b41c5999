"""lockguard.compare where mutation testing found no test that would fail
(benchmarks/bench_mutation.py): each test pins one rule a surviving mutant broke. As in
tests/test_compare.py, runs are built by hand and every expected value is written out here."""
from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from lockguard.compare.compile import (
    CompileDiff, _fmt_err, _reworded, _saves_device_memory, accuracy_failure, compare_compile,
)
from lockguard.compare.envelope import (
    Envelope, EnvelopeCheck, Outside, describe, envelope_of, judge_envelope, representative,
    t_quantile,
)
from lockguard.compare.numerics import compare_series, ulp_distance
from lockguard.compare.timing import TimingCheck, compare_timing, measure_of, time_blocks
from lockguard.compare.tolerance import Policy, Tolerance, default_tolerance
from lockguard.compare.verdicts import Accepted, compare_runs
from lockguard.names import Verdict
from lockguard.results import CompileDiagnostics, CompileMemory, Timings
from test_compare import compare, run, timed


def test_an_acceptance_reads_with_its_commit_cut_to_twelve_digits():
    fields = dict(reason="numpy 2 rounds differently", author="ana",
                  accepted_at="2026-01-02T03:04:05Z", golden="golden/cpu/x/numpy.mlp.json",
                  how="the same numbers")
    assert Accepted(**fields, commit="0123456789abcdef0123").sentence() == (
        "accepted: numpy 2 rounds differently (ana, 2026-01-02T03:04:05Z, commit 0123456789ab;"
        " the same numbers)")
    assert Accepted(**fields).sentence() == (
        "accepted: numpy 2 rounds differently (ana, 2026-01-02T03:04:05Z; the same numbers)")


def test_a_broken_candidate_keeps_the_last_twenty_lines_of_its_error():
    error = "\n".join(f"line {i}" for i in range(1, 26)) + "\n"
    v = compare([run()], [run(status="crashed", error=error)])
    assert v.verdict == Verdict.broken
    assert v.error == "\n".join(f"line {i}" for i in range(6, 26))


def test_a_broken_candidate_is_not_also_judged_a_miscompile():
    """Its compile check failed too, but a broken run's numbers are no evidence: broken is the
    only finding, the accuracy failure is not reported."""
    miscompiled = CompileDiagnostics.model_validate({"graph_breaks": 0, "accuracy": {
        "rule": "rmse(compiled, fp64) <= 2 * rmse(eager, fp64) + 1e-05", "k": 2.0,
        "ok": False, "series": {"losses": {"compiled_vs_fp64": 0.5, "eager_vs_fp64": 0.0,
                                           "limit": 1e-05, "ok": False}}}})
    healthy = compare([run()], [run(compile=miscompiled)])
    assert healthy.verdict == Verdict.compile_fallback  # the same diagnostics, a healthy run
    v = compare([run()], [run(compile=miscompiled, status="crashed", error="boom")])
    assert v.verdict == Verdict.broken
    assert not any("fp64" in r for r in v.reasons), v.reasons


def test_the_final_losses_are_each_sides_last():
    v = compare([run(losses=[4.0, 3.0, 2.0])], [run(losses=[4.0, 3.0, 1.0])])
    assert (v.final_loss_old, v.final_loss_new) == (2.0, 1.0)


def test_a_device_fallback_names_the_images_stack_only_when_it_says_one():
    def fell_back(summary):
        fingerprint = {"device_fallback": "no NVIDIA driver visible in the container",
                       "image": {"tag": "lockguard/torch:abc", "stack": {"summary": summary}}}
        return compare([run(device="cuda")], [run(device="cpu", fingerprint=fingerprint)],
                       expected_device="cuda")

    v = fell_back("CUDA 12.4, cuDNN 9")
    assert v.verdict == Verdict.device_fallback
    assert ("expected cuda, ran on cpu: no NVIDIA driver visible in the container (image "
            "lockguard/torch:abc: CUDA 12.4, cuDNN 9)") in v.reasons
    v = fell_back("")
    assert "expected cuda, ran on cpu: no NVIDIA driver visible in the container" in v.reasons


def test_a_reworded_break_is_said_old_then_new():
    old = CompileDiagnostics(graph_breaks=1, break_reasons=["m.py:forward: Tensor.item"])
    new = CompileDiagnostics(graph_breaks=1, break_reasons=["m.py:forward: Unsupported item()"])
    v = compare([run(compile=old)], [run(compile=new)])
    assert ("graph break reworded at the same site (not counted): m.py:forward: Tensor.item"
            " → m.py:forward: Unsupported item()") in v.reasons


def test_a_series_only_one_side_recorded_is_said_and_not_compared():
    v = compare([run()], [run(grad_norms=[])])
    assert "only the baseline recorded grad norms; not compared" in v.reasons
    assert v.grad_norms is None
    v = compare([run(outputs=[])], [run()])
    assert "only the candidate recorded outputs; not compared" in v.reasons
    v = compare([run(outputs=[])], [run(outputs=[])])
    assert not any("recorded outputs" in r for r in v.reasons)


def test_timing_not_judged_without_runs_says_nothing():
    """A timing check that ran no process ("not judged", 0 runs) has nothing to report; one
    that ran and could not judge says why."""
    def timing(runs):
        return TimingCheck(measure="step median", runs=runs, verdict="not judged",
                           reason="why it was not judged")

    v = compare([run()], [run()], timed_together=True, timing=timing(0))
    assert "why it was not judged" not in v.reasons
    v = compare([run()], [run()], timed_together=True, timing=timing(3))
    assert "why it was not judged" in v.reasons


def test_compare_runs_is_what_the_helper_calls():
    """The helper above is compare_runs with a golden baseline: a sanity check of the
    fixtures the tests here share with test_compare.py."""
    v = compare_runs([run()], [run()], policy=Policy(), baseline_kind="golden",
                     expected_device=None, timed_together=False)
    assert v.verdict == Verdict.identical


# --------------------------------------------------------------------------------------------
# The noise envelope (compare/envelope.py)

@pytest.mark.parametrize("alpha, dof, expected", [
    # Student's t, two-sided, odd degrees of freedom from 7 on (the series of A&S 26.7.4 runs
    # past its first term only there): any textbook's table.
    (0.05, 7, 2.365), (0.05, 9, 2.262), (1e-3, 7, 5.408), (1e-3, 9, 4.781), (1e-3, 15, 4.073),
])
def test_t_quantile_for_odd_degrees_of_freedom(alpha, dof, expected):
    assert t_quantile(alpha, dof) == pytest.approx(expected, abs=1e-3)


def test_an_envelope_is_of_two_runs_at_least():
    band = {"min": [1.0], "max": [1.0], "mean": [1.0], "std": [0.0]}
    assert Envelope(k=2, losses=band).k == 2
    with pytest.raises(ValidationError, match="greater than or equal to 2"):
        Envelope(k=1, losses=band)


def test_a_check_read_without_its_count_has_nothing_outside():
    check = EnvelopeCheck(k=2, runs=1, values=1, t=1.0, inside=True)
    assert check.outside == 0 and check.first_outside is None


def test_the_representative_run_is_the_lower_median_by_final_loss():
    a, b, c = (run(losses=x, grad_norms=[], outputs=[]) for x in
               ([1.0, 3.0], [2.0, 1.0], [3.0, 2.0]))
    # final losses 3, 1, 2: the median is c's (first losses would pick b)
    assert representative([a, b, c]) is c
    d = run(losses=[0.5, 4.0], grad_norms=[], outputs=[])
    # four: finals 1, 2, 3, 4, the lower median is 2 (c), not 3 (a)
    assert representative([d, a, b, c]) is c


def envelope_runs():
    """Three baseline runs: losses [1, 2 | 2.5 | 3] (step 1: mean 2.5, σ 0.5), outputs
    [0, 0, 1 | 2 | 3] (index 2: mean 2, σ 1)."""
    return [run(losses=[1.0, 2.0 + 0.5 * j], grad_norms=[], outputs=[0.0, 0.0, 1.0 + j])
            for j in range(3)]


def test_the_worst_value_is_named_by_series_unit_and_index():
    envelope = envelope_of(envelope_runs())
    candidate = run(losses=[1.0, 2.5], grad_norms=[], outputs=[0.0, 0.0, 5.0])
    check = judge_envelope(envelope, [candidate], default_tolerance("float32"), "float32")
    # outputs index 2: (5 - 2) / 1 = 3σ; losses step 1: 0σ; the σ-0 values have no sigma
    assert check.inside and check.values == 5 and check.runs == 1
    assert check.worst_sigma == 3.0 and check.worst == "outputs index 2"
    two = judge_envelope(envelope, [run(losses=[1.0, 3.5], grad_norms=[], outputs=[0.0] * 3),
                                    candidate], default_tolerance("float32"), "float32")
    # run 1: losses step 1 at +2σ, outputs index 2 at -2σ; run 2's 3σ is the worst
    assert (two.worst_sigma, two.worst) == (3.0, "outputs index 2 of run 2")


def test_describe_inside_says_how_many_runs_and_the_farthest_value():
    check = EnvelopeCheck(k=3, runs=1, values=5, t=2.0, inside=True, worst_sigma=3.0,
                          worst="outputs index 2")
    assert describe(check, "baseline").startswith(
        "inside the noise envelope of 3 baseline runs: the candidate run, 5 values each; "
        "farthest +3.00σ from the mean at outputs index 2 [band: ")
    two = check.model_copy(update={"runs": 2, "worst_sigma": None, "worst": None})
    assert describe(two, "baseline").startswith(
        "inside the noise envelope of 3 baseline runs: all 2 candidate runs, 5 values each "
        "[band: ")


def test_describe_outside_names_the_run_only_among_several():
    first = Outside(series="losses", index=1, value=9.0, low=1.0, high=4.0, mean=2.5,
                    sigma=13.0, run=1)
    check = EnvelopeCheck(k=3, runs=1, values=5, t=2.0, inside=False, outside=1,
                          first_outside=first)
    assert describe(check, "baseline").startswith(
        "outside the noise envelope of 3 baseline runs from losses step 1: 9.0 is above "
        "[1.0, 4.0] (mean 2.5, +13.00σ); 1 value(s) outside [band: ")
    second = check.model_copy(update={
        "runs": 2, "first_outside": first.model_copy(update={"run": 2})})
    assert describe(second, "baseline").startswith(
        "outside the noise envelope of 3 baseline runs from losses step 1 (candidate run 2): ")


def test_an_outside_value_is_of_the_first_run_unless_told():
    o = Outside(series="losses", index=0, value=1.0, low=0.0, high=0.5, mean=0.25, sigma=None)
    assert o.run == 1


@pytest.mark.parametrize("alpha, dof", [(0.05, 0), (0.0, 3), (1.0, 3)])
def test_t_quantile_refuses_what_has_none(alpha, dof):
    with pytest.raises(ValueError, match=f"alpha={alpha}, dof={dof}"):
        t_quantile(alpha, dof)


# --------------------------------------------------------------------------------------------
# The compiled path (compare/compile.py)

def test_a_compile_diff_of_nothing_lost_nothing():
    diff = compare_compile(CompileDiagnostics(graph_breaks=1), CompileDiagnostics(graph_breaks=1))
    assert diff.regressed is False and diff.improvement is False and diff.xla_lost is False
    dumped = diff.model_dump(mode="json")
    assert (dumped["regressed"], dumped["improvement"], dumped["lines"]) == (False, False, [])
    assert CompileDiff().xla_lost is False


def test_eager_fallbacks_count_from_zero_only_where_the_baseline_said_none():
    same = compare_compile(CompileDiagnostics(eager_fallbacks=2),
                           CompileDiagnostics(eager_fallbacks=2))
    assert same.regressions == []
    new = compare_compile(CompileDiagnostics(), CompileDiagnostics(eager_fallbacks=2))
    assert new.regressions == ["eager fallbacks 0 → 2"]
    neither = compare_compile(CompileDiagnostics(), CompileDiagnostics())
    assert neither.regressions == [] and neither.improvements == []


def test_a_backend_is_compared_only_where_both_runs_name_one():
    old, new = CompileDiagnostics(backend="inductor"), CompileDiagnostics(backend=None)
    assert compare_compile(old, new).lines == []
    assert compare_compile(new, old).lines == []
    assert compare_compile(old, CompileDiagnostics(backend="aot_eager")).regressions == [
        "backend inductor → aot_eager"]


def test_compiling_saves_device_memory_only_below_eager():
    assert _saves_device_memory(CompileMemory(compiled_device=100, eager_device=100)) is False
    assert _saves_device_memory(CompileMemory(compiled_device=99, eager_device=100)) is True
    assert _saves_device_memory(CompileMemory(compiled_device=99)) is None


def test_a_removed_reason_without_a_site_does_not_stop_the_pairing():
    assert _reworded(["no site here", "m.py:f: a"], ["m.py:f: b"]) == [["m.py:f: a",
                                                                      "m.py:f: b"]]


def test_accuracy_figures_read_three_digits_and_anything_else_as_it_is():
    assert _fmt_err(0.123456) == "0.123" and _fmt_err(12345) == "1.23e+04"
    assert _fmt_err(True) == "True" and _fmt_err("not measured") == "not measured"


# --------------------------------------------------------------------------------------------
# Timing runs (compare/timing.py)


def steps_of(*seconds_: float | None, **timings: object) -> list:
    return [run(timings=Timings(step_median_s=s, **timings)) for s in seconds_]


def test_an_interval_needs_three_timing_runs_a_side():
    two = compare_timing(steps_of(1.0, 1.0), steps_of(1.0, 1.0), Policy())
    assert (two.verdict, two.runs) == ("not judged", 2)
    assert two.reason == "2 timing run(s) a side; at least 3 are needed for an interval"
    three = compare_timing(steps_of(1.0, 1.0, 1.0), steps_of(1.0, 1.0, 1.0), Policy())
    assert (three.verdict, three.runs) == ("same", 3)


def test_a_zero_or_missing_figure_leaves_its_pair_out():
    check = compare_timing(steps_of(0.0, 1.0, 1.0, 1.0), steps_of(1.0, 1.0, 1.0, 0.0),
                           Policy())
    assert check.runs == 2  # the first and the last pair have a 0 on one side
    none = compare_timing([run()], [run()], Policy())  # no step figure, no run() time
    assert (none.measure, none.runs, none.verdict, none.reason) == (
        "run() call", 0, "not judged", "no timing figure on both sides")


def test_the_ratios_interval_is_students_t_over_k_minus_one():
    """Pairs at ×e^0.1, ×e^0.2, ×e^0.3: mean log 0.2, σ 0.1, k 3; t(99 %, 2 dof) = 9.925
    (the textbook table): half width 9.925 × 0.1 / √3 = 0.57302."""
    old = steps_of(1.0, 1.0, 1.0)
    new = steps_of(*(math.exp(x) for x in (0.1, 0.2, 0.3)))
    check = compare_timing(old, new, Policy())
    assert check.ratio == pytest.approx(math.exp(0.2), rel=1e-12)
    assert check.low == pytest.approx(math.exp(0.2 - 0.57302), rel=1e-4)
    assert check.high == pytest.approx(math.exp(0.2 + 0.57302), rel=1e-4)
    assert check.verdict == "inconclusive"  # high 2.17 >= the 1.3 limit


def test_faster_includes_exactly_one_over_the_limit():
    """Every pair at ×0.5 (no spread: the interval is the point) under a ×2 limit."""
    check = compare_timing(steps_of(1.0, 1.0, 1.0), steps_of(0.5, 0.5, 0.5),
                           Policy(slower_ratio=2.0))
    assert (check.ratio, check.low, check.high) == (0.5, 0.5, 0.5)
    assert check.verdict == "faster"


def test_blocks_are_the_measure_only_with_their_step_count():
    unblocked = steps_of(0.1, 0.1, block_median_s=0.5, block_steps=None)
    assert measure_of(unblocked) == ("step median", [0.1, 0.1])
    blocked = steps_of(0.1, 0.1, block_median_s=0.5, block_steps=10)
    assert measure_of(blocked) == ("step block", [0.05, 0.05])


def test_a_block_holds_ten_thousand_steps_at_most():
    # a 1 ns step: 2.5 × 2 ms / 1 ns = 5,000,000 steps a block, capped at 10,000; a timing run
    # holds 15 blocks after its first step
    assert time_blocks(steps_of(1e-9), 20, Policy()) == (10_000, 1 + 15 * 10_000)
    # a 0.1 ms step: 2.5 × 2 ms / 0.1 ms = 50 steps a block
    assert time_blocks(steps_of(1e-4), 20, Policy()) == (50, 751)


# --------------------------------------------------------------------------------------------
# Value by value (compare/numerics.py)

def test_bfloat16_ulps_cross_zero_through_the_sign_bit():
    # 1.0 in bfloat16 is float32's top half, 0x3F80 = 16256 steps above 0; -1.0 as many below
    assert ulp_distance(1.0, -1.0, "bfloat16") == 2 * 0x3F80
    assert ulp_distance(-1.0, -2.0, "bfloat16") == 0x80  # one exponent: 2^7 mantissa steps


def test_no_ulp_line_where_no_pair_was_measured_or_none_differs_by_one():
    nan = compare_series("losses", [float("nan")], [1.0], default_tolerance("float32"))
    assert nan.max_ulp is None and "ULP" not in nan.message
    zeros = compare_series("losses", [0.0], [-0.0], default_tolerance("float32"))
    assert zeros.max_ulp == 0
    assert (zeros.max_abs, zeros.max_abs_index, zeros.max_rel, zeros.max_rel_index) == (
        0.0, None, 0.0, None)
    same = compare_series("losses", [1.0, 2.0], [1.0, 2.0], default_tolerance("float32"))
    assert (same.max_abs, same.max_rel, same.max_rel_index) == (0.0, 0.0, None)
    assert zeros.message.splitlines() == ["All 1 values within tolerance; 1 differ bitwise.",
                                          "The values differ only in the sign of zero."]


def test_one_timing_run_is_too_few_not_nothing():
    one = compare_timing(steps_of(1.0), steps_of(1.0), Policy())
    assert (one.runs, one.reason) == (
        1, "1 timing run(s) a side; at least 3 are needed for an interval")


def test_a_miscompile_names_the_rule_it_broke():
    def miscompiled(rule):
        return CompileDiagnostics.model_validate({"graph_breaks": 0, "accuracy": {
            "rule": rule, "k": 2.0, "ok": False,
            "series": {"losses": {"compiled_vs_fp64": 0.5, "eager_vs_fp64": 0.0,
                                  "limit": 1e-05, "ok": False}}}})

    assert accuracy_failure(miscompiled("rmse(c) <= 2 rmse(e)")) == (
        "miscompile: the compiled run is farther from the fp64 reference than eager allows: "
        "losses 0.5 from fp64 where eager is 0 (limit 1e-05) [rmse(c) <= 2 rmse(e)]")
    assert accuracy_failure(miscompiled("")).endswith(
        " [compiled at most k× farther from fp64 than eager]")


def test_slower_includes_exactly_the_limit_and_faster_needs_one_over_it():
    """No spread: the interval is the point. ×2 under a ×2 limit (low 2 > √2) is slower; ×0.8
    under it is neither faster (above 1/2) nor inconclusive: the same."""
    at = compare_timing(steps_of(1.0, 1.0, 1.0), steps_of(2.0, 2.0, 2.0),
                        Policy(slower_ratio=2.0))
    assert (at.ratio, at.verdict) == (2.0, "slower")
    between = compare_timing(steps_of(1.0, 1.0, 1.0), steps_of(0.8, 0.8, 0.8),
                             Policy(slower_ratio=2.0))
    assert between.verdict == "same"


def test_one_ulp_is_said():
    from test_compare import f32_above

    diff = compare_series("losses", [1.0], [f32_above(1.0)], default_tolerance("float32"))
    assert diff.max_ulp == 1
    assert "Greatest ULP difference: 1 at index 0 (float32)" in diff.message.splitlines()


# --------------------------------------------------------------------------------------------
# Tolerances and the policy (compare/tolerance.py)


@pytest.mark.parametrize("fields", [
    {"rtol": 1e-3, "atol": float("inf")}, {"rtol": 1e-3, "atol": float("nan")},
    {"rtol": float("inf"), "atol": 1e-5}, {"rtol": 1e-3, "atol": -1e-5},
])
def test_a_tolerance_is_finite_and_not_negative(fields):
    with pytest.raises(ValidationError):
        Tolerance(**fields)


def test_exact_allows_nothing_whatever_rtol_and_atol_say():
    assert Tolerance(rtol=0.5, atol=0.25, exact=True).allowed(-4.0) == 0.0
    assert Tolerance(rtol=0.5, atol=0.25).allowed(-4.0) == 2.25  # 0.25 + 0.5 × |-4|


@pytest.mark.parametrize("fields", [{"heavier_ratio": 1.0}, {"heavier_ratio": 0.5},
                                    {"heavier_min_bytes": -1}, {"slower_ratio": 0.0},
                                    {"slower_min_step_s": -0.001}])
def test_a_policy_refuses_limits_that_mean_nothing(fields):
    with pytest.raises(ValidationError):
        Policy(**fields)
    assert Policy(heavier_ratio=1.01, heavier_min_bytes=0).heavier_ratio == 1.01


def test_a_tolerance_is_frozen_and_the_policys_defaults_are_the_documented_ones():
    tol = Tolerance(rtol=1e-3, atol=1e-5)
    with pytest.raises(ValidationError):
        tol.rtol = 1.0
    assert hash(tol) == hash(Tolerance(rtol=1e-3, atol=1e-5))
    policy = Policy()
    assert (policy.slower_ratio, policy.slower_min_step_s, policy.heavier_ratio,
            policy.heavier_min_bytes) == (1.30, 0.002, 1.20, 48 * 1024 * 1024)
    # a ratio below 1 is a strict gate, not a meaningless one: accepted
    assert Policy(slower_ratio=0.5).slower_ratio == 0.5


def test_faster_needs_the_whole_interval_below_one():
    """Ten pairs alternating ×e^-0.9 and ×e^0.1: ratio e^-0.4 = 0.670 (below 1/1.3), σ of
    the logs 0.527, t(99 %, 9 dof) = 3.250: the interval reaches e^(-0.4 + 0.542) = 1.15, above
    1 and below the 1.3 limit: the same, neither faster nor inconclusive."""
    new = steps_of(*(math.exp(-0.9 if i % 2 else 0.1) for i in range(10)))
    check = compare_timing(steps_of(*[1.0] * 10), new, Policy())
    assert check.ratio == pytest.approx(math.exp(-0.4), rel=1e-12)
    assert check.high == pytest.approx(math.exp(-0.4 + 3.250 * 0.52705 / math.sqrt(10)),
                                       rel=1e-3)
    assert 1 < check.high < 1.3 and check.verdict == "same"


def test_the_numeric_runs_ratio_names_steps_or_run_calls():
    v = compare([timed(1.0)], [timed(2.0)], timed_together=True)
    assert any(r.startswith("steady-state steps took ×2.00 the baseline's in this check's one "
                            "run a side") for r in v.reasons), v.reasons


def test_an_envelope_of_one_run_is_refused_so():
    with pytest.raises(ValueError, match="^an envelope needs at least two runs$"):
        envelope_of(envelope_runs()[:1])


def test_the_first_of_equally_far_values_is_the_worst_and_the_band_has_two_sides():
    envelope = envelope_of(envelope_runs())
    # losses step 1: (3.5 - 2.5) / 0.5 = +2σ, outputs index 2: (0 - 2) / 1 = -2σ: a tie
    candidate = run(losses=[1.0, 3.5], grad_norms=[], outputs=[0.0, 0.0, 0.0])
    check = judge_envelope(envelope, [candidate], default_tolerance("float32"), "float32")
    assert (check.worst_sigma, check.worst) == (2.0, "losses step 1")
    assert len(check.loss_low) == len(check.loss_high) == 2
    assert check.loss_low[0] < 1.0 < check.loss_high[0]  # every run's 1.0, a floor around it
    assert check.loss_low[1] < 2.0 and check.loss_high[1] > 3.0  # beyond the runs' min, max


def test_compiling_that_no_longer_saves_device_memory_is_a_reason_of_the_verdict():
    """(seed 3 survivor: verdicts.py's loop over the compile diff's notes emptied.) 8 MiB
    compiled against 16 MiB eager before, 24 MiB against 16 MiB now: said, not a failure."""
    mib = 2 ** 20
    old = CompileDiagnostics(memory=CompileMemory(compiled_device=8 * mib, eager_device=16 * mib))
    new = CompileDiagnostics(memory=CompileMemory(compiled_device=24 * mib,
                                                  eager_device=16 * mib))
    v = compare([run(compile=old)], [run(compile=new)])
    assert ("compiling no longer saves device memory: the compiled training peaks at 24.0 MiB"
            " against 16.0 MiB eager (baseline: 8.0 MiB against 16.0 MiB)") in v.reasons
    assert v.verdict == Verdict.identical


def test_a_value_exactly_on_the_bands_edge_is_inside():
    """(seed 3 survivors: envelope.py's `low <= x <= high` made `<` on either side.) Two runs
    of losses 1.0 each (σ 0, so no t·σ widening), tolerance atol 0.5 (above 4 float32 ULPs of
    1.0, 2**-21): the band is [0.5, 1.5] exactly; 0.5 and 1.5 are in it, 0.25 is not."""
    from lockguard.compare.envelope import Band

    flat = Band(min=[1.0, 1.0], max=[1.0, 1.0], mean=[1.0, 1.0], std=[0.0, 0.0])
    envelope = Envelope(k=2, losses=flat)
    tol = Tolerance(rtol=0.0, atol=0.5)
    edges = judge_envelope(envelope, [run(losses=[0.5, 1.5], grad_norms=[])], tol, "float32")
    assert (edges.inside, edges.outside) == (True, 0)
    assert (edges.loss_low, edges.loss_high) == ([0.5, 0.5], [1.5, 1.5])
    out = judge_envelope(envelope, [run(losses=[0.25, 1.5], grad_norms=[])], tol, "float32")
    assert (out.inside, out.outside, out.first_outside_step) == (False, 1, 0)


def test_a_step_of_exactly_the_slower_floor_is_timed_one_by_one():
    """(seed 3 survivor: timing.py's `min(medians) >= slower_min_step_s` made `>`.) The floor
    is 2 ms: a 2 ms step is long enough to time alone (0, its own 20 steps); a 1 ms step is
    timed in blocks of 2.5 × 2 / 1 = 5 steps, 1 + 15 × 5 = 76 steps in all."""
    assert time_blocks(steps_of(0.002), 20, Policy()) == (0, 20)
    assert time_blocks(steps_of(0.001), 20, Policy()) == (5, 76)
    # the shortest of the runs decides
    assert time_blocks(steps_of(0.5, 0.001), 20, Policy()) == (5, 76)


# --------------------------------------------------------------------------------------------
# Survivors of the fourth fresh sample (seed 4)

def test_a_hardware_change_says_which_input_changed_with_it():
    """(verdicts.py's `"the lock" if hardware.lock_changed` negated.) A golden from another
    class whose lock also differs names the lock; one whose lock is the same names the rest."""
    from lockguard.compare.verdicts import HardwareChange

    def first_reason(lock_changed: bool) -> str:
        change = HardwareChange(golden="AMD [a]", current="Intel [i]", same_inputs=False,
                                lock_changed=lock_changed)
        v = compare_runs([run()], [run(losses=[9.0] * 6)], policy=Policy(),
                         baseline_kind="golden", expected_device="cpu", timed_together=False,
                         hardware=change)
        return v.reasons[0]

    assert first_reason(True).startswith("golden recorded on AMD [a], running on Intel [i], "
                                         "and the lock changed too: ")
    assert first_reason(False).startswith("golden recorded on AMD [a], running on Intel [i], "
                                          "and the scenario, harness or settings changed too: ")


def test_an_accepted_failing_verdict_does_not_fail_the_gate():
    """(verdicts.py `is_failure`'s `return False` for an acceptance made True.)"""
    from lockguard.compare.verdicts import is_failure

    drift = compare([run()], [run(losses=[9.0] * 6)])
    assert drift.verdict == Verdict.drift and is_failure(drift, Policy())
    accepted = drift.model_copy(update={"accepted": Accepted(
        reason="intended", author="ana", accepted_at="2026-01-02T03:04:05Z",
        golden="golden/x.json", how="bit for bit")})
    assert is_failure(accepted, Policy()) is False


def test_a_location_is_added_after_the_reasons_and_none_leaves_the_verdict_alone():
    """(verdicts.py `with_location`'s `if location is None` negated.)"""
    from lockguard.compare.locate import Location
    from lockguard.compare.verdicts import with_location

    drift = compare([run()], [run(losses=[9.0] * 6)])
    assert with_location(drift, None) is drift
    loc = Location(step=2, kind="none")
    located = with_location(drift, loc)
    assert located.location == loc and located.reasons[:-1] == drift.reasons
    assert located.reasons[-1].startswith("step 2 re-run with every module captured: no "
                                          "module's weights, output or gradient differs")


def test_a_fallback_cause_is_shown_only_when_the_harness_wrote_one_in_words():
    """(verdicts.py `isinstance(cause, str) and cause` made `or`.) A cause that is not text (a
    number, as a damaged fingerprint might hold) is left out; an empty one too."""
    from lockguard.compare.verdicts import _fallback_cause

    assert _fallback_cause(run(fingerprint={"device_fallback": 7})) == ""
    assert _fallback_cause(run(fingerprint={"device_fallback": ""})) == ""
    assert _fallback_cause(run(fingerprint={"device_fallback": "no driver"})) == ": no driver"


def test_a_float16_ulp_at_one_is_two_to_the_minus_ten():
    """(envelope.py's float16 mantissa 10 made 9.) float16 keeps 10 mantissa bits: its values
    next to 1.0 are 2**-10 apart; float32's 2**-23, bfloat16's 2**-7, float64's 2**-52."""
    from lockguard.compare.envelope import ulp

    assert ulp(1.0, "float16") == 2.0 ** -10
    assert ulp(1.5, "float16") == 2.0 ** -10  # the same binade [1, 2)
    assert ulp(1.0, "float32") == 2.0 ** -23
    assert ulp(1.0, "bfloat16") == 2.0 ** -7
    assert ulp(1.0, "float64") == 2.0 ** -52


def test_the_run_to_run_spread_is_the_wider_sides_max_over_min():
    """(timing.py's candidate spread `max / min` made `max * min`.) Baselines 0.1 s each
    (×1), candidates 0.1, 0.2, 0.1 s (×2): the spread is ×2."""
    check = compare_timing(steps_of(0.1, 0.1, 0.1), steps_of(0.1, 0.2, 0.1), Policy())
    assert check.spread == 2.0
    check = compare_timing(steps_of(0.1, 0.3, 0.1), steps_of(0.1, 0.2, 0.1), Policy())
    assert check.spread == pytest.approx(3.0)


def test_a_step_of_exactly_the_floor_is_judged():
    """(timing.py's `base < slower_min_step_s` made `<=`.) Steps of exactly 2 ms on both sides
    are long enough: judged, the same (ratio ×1, no spread)."""
    check = compare_timing(steps_of(0.002, 0.002, 0.002), steps_of(0.002, 0.002, 0.002),
                           Policy())
    assert (check.verdict, check.ratio, check.low, check.high) == ("same", 1.0, 1.0, 1.0)
    short = compare_timing(steps_of(0.001, 0.001, 0.001), steps_of(0.001, 0.001, 0.001),
                           Policy())
    assert short.verdict == "not judged" and "too short to time" in short.reason


def test_float64_ulps_across_a_binade_and_through_zero():
    """(numerics.py's float64 width 64 made 63: bit 62, the exponent's top, read as a sign.)
    Between 1.0 and 2.0 lie 2**52 float64 steps; 1.0 is 0x3FF0000000000000 steps above 0, so
    -1.0 to 1.0 is twice that."""
    assert ulp_distance(1.0, 2.0, "float64") == 2 ** 52
    assert ulp_distance(-1.0, 1.0, "float64") == 2 * 0x3FF0000000000000
