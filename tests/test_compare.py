"""lockguard.compare: verdicts, their precedence, and the figures behind them.

Every test builds RunResult objects directly; nothing runs a framework.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from lockguard.compare.compile import CompileDiff, compare_compile
from lockguard.compare.numerics import (
    SeriesDiff, bitwise_equal, compare_series, first_difference, ulp_at, ulp_distance,
)
from lockguard.compare.tolerance import DEFAULT_FAIL_ON, Policy, Tolerance, default_tolerance
from lockguard.compare.timing import TimingCheck, compare_timing
from lockguard.compare.verdicts import (
    ScenarioVerdict, compare_runs, gate_passes, is_failure, skipped,
)
from lockguard.names import PRECEDENCE, Verdict
from lockguard.results import SCHEMA_VERSION, CompileDiagnostics, RunResult, Status, Timings

LOSSES = [2.0, 1.5, 1.25, 1.0, 0.875, 0.75]
F32 = default_tolerance("float32")


def run(**fields: object) -> RunResult:
    """A healthy CPU torch run of scenario "mlp"; `fields` override what a test is about."""
    data: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "scenario": "mlp",
        "framework": "torch",
        "device": "cpu",
        "losses": list(LOSSES),
        "grad_norms": [0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625],
        "outputs": [0.1, -0.2, 0.3, -0.4],
        "param_digest": "sha256:aaaa",
    }
    data.update(fields)
    data.setdefault("steps", len(data["losses"]))  # type: ignore[arg-type]
    return RunResult.model_validate(data)


def with_loss(index: int, value: float, **fields: object) -> RunResult:
    """A run whose loss at `index` is `value` (and whose parameters therefore differ)."""
    losses = list(LOSSES)
    losses[index] = value
    return run(losses=losses, param_digest="sha256:bbbb", **fields)


def compare(
    baselines: list[RunResult],
    candidates: list[RunResult],
    *,
    policy: Policy | None = None,
    expected_device: str | None = None,
    timed_together: bool = False,
    tolerance: Tolerance | None = None,
    timing: TimingCheck | None = None,
) -> ScenarioVerdict:
    return compare_runs(
        baselines,
        candidates,
        policy=policy or Policy(),
        baseline_kind="golden",
        expected_device=expected_device,
        timed_together=timed_together,
        tolerance=tolerance,
        timing=timing,
    )


def timing_runs(old: float, new: float, policy: Policy | None = None, k: int = 5,
                **fields: object) -> TimingCheck:
    """What k timing runs a side say of steps of `old` and `new` seconds (±1 % run to run)."""
    wobble = [1.0, 1.01, 0.99, 1.005, 0.995, 1.0][:k]
    return compare_timing([timed(old * w, **fields) for w in wobble],
                          [timed(new * w, **fields) for w in reversed(wobble)],
                          policy or Policy())


def f32_above(x: float, ulps: int = 1) -> float:
    """The float32 value `ulps` representable steps above the positive float32 `x`."""
    import struct

    bits = struct.unpack("<I", struct.pack("<f", x))[0] + ulps
    return struct.unpack("<f", struct.pack("<I", bits))[0]


# --------------------------------------------------------------------------------------------
# Tolerances


@pytest.mark.parametrize(
    ("dtype", "rtol", "atol"),
    [
        ("float32", 1.3e-6, 1e-5),
        ("float64", 1e-7, 1e-7),
        ("float16", 1e-3, 1e-5),
        ("bfloat16", 1.6e-2, 1e-5),
        ("torch.bfloat16", 1.6e-2, 1e-5),
        ("half", 1e-3, 1e-5),
        ("double", 1e-7, 1e-7),
        ("int8", 1.3e-6, 1e-5),  # unknown: float32's
    ],
)
def test_default_tolerance_follows_torch_testing(dtype: str, rtol: float, atol: float) -> None:
    tol = default_tolerance(dtype)
    assert (tol.rtol, tol.atol, tol.exact) == (rtol, atol, False)


def test_tolerance_is_relative_to_the_baseline() -> None:
    tol = Tolerance(rtol=0.5, atol=0.0)
    # |3.01 - 2| = 1.01 exceeds 0.5 * |2| but not 0.5 * |3.01|: only the baseline scales.
    assert compare_series("x", [2.0], [3.01], tol).mismatched == 1
    assert compare_series("x", [3.01], [2.0], tol).mismatched == 0


# --------------------------------------------------------------------------------------------
# Values: bitwise equality, ULPs, first difference


def test_bitwise_equal_tells_zeros_apart_and_matches_nans() -> None:
    assert bitwise_equal(1.5, 1.5)
    assert not bitwise_equal(0.0, -0.0)
    assert bitwise_equal(math.nan, math.nan)
    assert not bitwise_equal(math.nan, 1.0)
    assert not bitwise_equal(1.0, math.nan)


def test_ulp_distance_float32() -> None:
    assert ulp_distance(1.0, f32_above(1.0), "float32") == 1
    assert ulp_distance(f32_above(1.0, 5), 1.0, "float32") == 5
    assert ulp_distance(1.0, 1.5, "float32") == 2**22
    assert ulp_distance(0.0, -0.0, "float32") == 0
    smallest = f32_above(0.0)  # the smallest positive subnormal
    assert ulp_distance(smallest, -smallest, "float32") == 2  # across zero
    assert ulp_distance(3.4028234663852886e38, math.inf, "float32") == 1


def test_ulp_distance_bfloat16_counts_in_the_top_16_bits() -> None:
    step = 2.0**-7  # bfloat16 keeps 7 mantissa bits
    assert ulp_distance(1.0, 1.0 + step, "bfloat16") == 1
    assert ulp_distance(1.0, 1.0 + step, "float32") == 2**16
    assert ulp_distance(-1.0, -1.0 - 3 * step, "bfloat16") == 3


def test_ulp_distance_float64_and_float16() -> None:
    assert ulp_distance(1.0, math.nextafter(1.0, 2.0), "float64") == 1
    assert ulp_distance(1.0, math.nextafter(1.0, 2.0), "float32") == 0  # same float32
    assert ulp_distance(1.0, 1.0 + 2.0**-10, "float16") == 1


def test_ulp_at_is_the_gap_above_a_magnitude_in_each_dtype() -> None:
    assert ulp_at(1.0, "float32") == 2.0**-23 == f32_above(1.0) - 1.0
    assert ulp_at(1.9, "float32") == 2.0**-23 and ulp_at(-2.0, "float32") == 2.0**-22
    assert ulp_at(1.0, "float64") == math.ulp(1.0)
    assert ulp_at(1.0, "bfloat16") == 2.0**-7 and ulp_at(1.0, "float16") == 2.0**-10
    # below the least normal exponent the gap stays the subnormals'
    assert ulp_at(0.0, "float32") == ulp_at(2.0**-140, "float32") == f32_above(0.0) == 2.0**-149
    assert ulp_at(3.0, "int8") == ulp_at(3.0, "float32")  # other dtypes measured as float32


def test_ulp_distance_rejects_nan_and_out_of_range() -> None:
    with pytest.raises(ValueError, match="NaN"):
        ulp_distance(math.nan, 1.0, "float32")
    with pytest.raises(ValueError, match="out of range"):
        ulp_distance(1e300, 1.0, "float32")


def test_first_difference() -> None:
    assert first_difference([1.0, 2.0], [1.0, 2.0]) is None
    assert first_difference([1.0, 2.0, 3.0], [1.0, 2.5, 3.5]) == 1
    assert first_difference([0.0], [-0.0]) == 0
    assert first_difference([math.nan], [math.nan]) is None
    assert first_difference([1.0, 2.0], [1.0]) == 1


# --------------------------------------------------------------------------------------------
# One series


def test_compare_series_figures_and_message_like_torch_testing() -> None:
    old = [1.0] * 20
    new = list(old)
    new[7], new[9], new[12] = 1.5, 1.25, 1.125
    diff = compare_series("losses", old, new, F32)
    assert (diff.size, diff.mismatched, diff.first_index) == (20, 3, 7)
    assert (diff.max_abs, diff.max_abs_index) == (0.5, 7)
    assert (diff.max_rel, diff.max_rel_index) == (0.5, 7)
    assert diff.max_ulp == 2**22
    assert diff.message == (
        "Mismatched elements: 3 / 20 (15.0%)\n"
        "Greatest absolute difference: 0.5 at index 7 (up to 1e-05 allowed)\n"
        "Greatest relative difference: 0.5 at index 7 (up to 1.3e-06 allowed)\n"
        "Greatest ULP difference: 4194304 at index 7 (float32)"
    )


def test_compare_series_greatest_abs_and_rel_can_sit_at_different_indexes() -> None:
    diff = compare_series("x", [100.0, 1.0], [101.0, 1.5], F32)
    assert (diff.max_abs, diff.max_abs_index) == (1.0, 0)
    assert (diff.max_rel, diff.max_rel_index) == (0.5, 1)


def test_compare_series_within_tolerance_still_reports_figures() -> None:
    diff = compare_series("losses", [1.0, 1.0], [1.0, f32_above(1.0)], F32)
    assert diff.mismatched == 0 and diff.first_index is None
    assert diff.max_abs_index == 1 and diff.max_ulp == 1
    assert diff.message.startswith("All 2 values within tolerance; 1 differ bitwise.")


def test_compare_series_identical() -> None:
    diff = compare_series("losses", LOSSES, list(LOSSES), F32)
    assert diff.mismatched == 0 and diff.max_abs == 0.0 and diff.max_abs_index is None
    assert diff.max_ulp == 0
    assert diff.message == "All 6 values are bitwise equal."


def test_compare_series_exact_counts_every_bitwise_difference() -> None:
    exact = Tolerance(rtol=1.0, atol=1.0, exact=True)
    diff = compare_series("losses", [1.0, 0.0], [f32_above(1.0), -0.0], exact)
    assert diff.mismatched == 2 and diff.first_index == 0
    assert "exact equality required" in diff.message


def test_compare_series_negative_zero_is_within_tolerance_but_not_equal() -> None:
    diff = compare_series("x", [0.0], [-0.0], F32)
    assert diff.mismatched == 0
    assert diff.max_abs == 0.0 and diff.max_abs_index is None and diff.max_ulp == 0
    assert "sign of zero" in diff.message


def test_compare_series_nan() -> None:
    assert compare_series("x", [math.nan], [math.nan], F32).mismatched == 0
    diff = compare_series("x", [1.0, 0.5], [1.0, math.nan], Tolerance(rtol=10.0, atol=10.0))
    assert diff.mismatched == 1 and diff.first_index == 1
    assert diff.max_abs == math.inf and diff.max_abs_index == 1
    assert diff.max_ulp == 0  # only the finite pair could be measured
    assert "NaN against a number at index 1: baseline 0.5, candidate nan" in diff.message


def test_compare_series_infinity_must_match_exactly() -> None:
    huge = Tolerance(rtol=1e9, atol=1e9)
    assert compare_series("x", [math.inf], [math.inf], huge).mismatched == 0
    assert compare_series("x", [1e30], [math.inf], huge).mismatched == 1
    assert compare_series("x", [math.inf], [1e30], huge).mismatched == 1


def test_compare_series_rejects_different_lengths() -> None:
    with pytest.raises(ValueError, match="2 baseline values against 1"):
        compare_series("x", [1.0, 2.0], [1.0], F32)


def test_series_diff_serialises_to_strict_json() -> None:
    diff = compare_series("x", [0.0, 1.0], [1.0, math.nan], F32)
    data = diff.model_dump(mode="json")
    assert data["max_abs"] == "inf" and data["max_rel"] == "inf"
    json.dumps(data, allow_nan=False)  # raises on a bare inf/nan
    assert SeriesDiff.model_validate(data).max_abs == math.inf


# --------------------------------------------------------------------------------------------
# compare_runs: each verdict


def test_no_baseline_is_new() -> None:
    v = compare([], [run()])
    assert v.verdict == Verdict.new
    assert "no baseline" in v.reasons[0]
    assert v.final_loss_new == 0.75 and v.final_loss_old is None


def test_identical() -> None:
    v = compare([run()], [run()])
    assert v.verdict == Verdict.identical
    assert v.first_divergent_step is None
    assert v.param_digest_equal is True
    assert v.losses is not None and v.grad_norms is not None and v.outputs is not None
    assert v.reasons == [
        "bitwise identical over 6 steps: losses, grad norms, outputs, parameter digest"
    ]


def test_identical_without_digests() -> None:
    v = compare([run(param_digest=None)], [run(param_digest=None)])
    assert v.verdict == Verdict.identical and v.param_digest_equal is None


def test_within_tolerance_reports_the_first_bitwise_difference() -> None:
    candidate = with_loss(3, f32_above(1.0, 2))
    v = compare([run()], [candidate])
    assert v.verdict == Verdict.within_tolerance
    assert v.first_divergent_step == 3
    assert v.losses is not None and v.losses.mismatched == 0
    assert v.reasons[0].startswith("losses first differ at step 3, within tolerance;")
    assert "up to 2 ULP" in v.reasons[0]


def test_digest_differs_with_equal_series_is_within_tolerance_not_identical() -> None:
    v = compare([run()], [run(param_digest="sha256:bbbb")])
    assert v.verdict == Verdict.within_tolerance
    assert v.param_digest_equal is False
    assert v.reasons == ["the trained parameters differ bitwise (parameter digest)"]


def test_drift_names_first_divergent_and_first_beyond_tolerance_steps() -> None:
    losses = list(LOSSES)
    losses[1] = f32_above(1.5)  # differs, within tolerance
    losses[4] = 0.9  # beyond
    v = compare([run()], [run(losses=losses)])
    assert v.verdict == Verdict.drift
    assert v.first_divergent_step == 1
    assert v.losses is not None and v.losses.first_index == 4
    assert v.reasons[0].startswith(
        "losses beyond tolerance from step 4 (first bitwise difference at step 1):"
        " 1 / 6 mismatched; greatest absolute difference"
    )
    assert "(up to 1e-05 allowed)" in v.reasons[0]


def test_drift_in_grad_norms_alone() -> None:
    v = compare([run()], [run(grad_norms=[0.5, 0.25, 0.125, 0.0625, 0.03125, 0.5])])
    assert v.verdict == Verdict.drift
    assert v.first_divergent_step is None  # the losses themselves did not move
    assert v.reasons[0].startswith("grad norms beyond tolerance from step 5")


def test_drift_in_outputs_uses_indexes() -> None:
    v = compare([run()], [run(outputs=[0.1, -0.2, 0.3, 0.4])])
    assert v.verdict == Verdict.drift
    assert v.reasons[0].startswith("outputs beyond tolerance from index 3")


def test_candidate_crash_is_broken_with_the_error_tail() -> None:
    error = "\n".join(f"frame {i}" for i in range(30)) + "\nRuntimeError: boom"
    v = compare([run()], [run(status=Status.crashed, error=error, losses=[], steps=6)])
    assert v.verdict == Verdict.broken
    assert v.reasons == ["the candidate run crashed: RuntimeError: boom"]
    assert v.error is not None
    assert v.error.endswith("RuntimeError: boom") and "frame 10" not in v.error


@pytest.mark.parametrize(("status", "words"), [("nan", "produced NaN"), ("timeout", "timed out")])
def test_nan_and_timeout_are_broken(status: str, words: str) -> None:
    v = compare([run()], [run(status=status)])
    assert v.verdict == Verdict.broken
    assert words in v.reasons[0]


def test_broken_without_baseline_is_broken_not_new() -> None:
    assert compare([], [run(status="crashed")]).verdict == Verdict.broken


def test_one_broken_repeat_breaks_the_scenario() -> None:
    v = compare([run()], [run(), run(status="timeout")])
    assert v.verdict == Verdict.broken
    assert v.reasons[0] == "candidate run 2 of 2 timed out"


def test_broken_baseline_is_incomparable() -> None:
    v = compare([run(status="crashed", error="OSError: gone")], [run()])
    assert v.verdict == Verdict.incomparable
    assert v.reasons[0].startswith("the baseline run crashed: OSError: gone")


@pytest.mark.parametrize(
    ("candidate", "reason"),
    [
        (run(losses=LOSSES[:4]), "the baseline ran 6 steps, the candidate 4"),
        (run(dtype="bfloat16"), "the baseline ran in float32, the candidate in bfloat16"),
        (run(losses=[], steps=6), "the candidate recorded no losses"),
        (run(outputs=[0.1, 0.2]), "the baseline has 4 outputs, the candidate 2"),
        (run(device="tpu"), "the baseline ran on cpu, the candidate on tpu"),
        (run(framework="jax"), "the baseline ran torch, the candidate jax"),
    ],
)
def test_incomparable(candidate: RunResult, reason: str) -> None:
    v = compare([run()], [candidate])
    assert v.verdict == Verdict.incomparable
    assert reason in v.reasons
    assert v.losses is None  # nothing compared


def test_expected_device_missed_is_device_fallback() -> None:
    v = compare([run()], [run()], expected_device="cuda")
    assert v.verdict == Verdict.device_fallback
    assert v.reasons[0] == "expected cuda, ran on cpu"
    assert (v.expected_device, v.found_device) == ("cuda", "cpu")
    assert v.reasons[1].startswith("bitwise identical")  # numerics still compared (cpu vs cpu)


def test_expected_device_met() -> None:
    v = compare([run(device="cuda")], [run(device="cuda")], expected_device="cuda")
    assert v.verdict == Verdict.identical


def test_baseline_on_accelerator_candidate_on_cpu_is_device_fallback() -> None:
    v = compare([run(device="cuda")], [run(losses=[9.0] * 6)])
    assert v.verdict == Verdict.device_fallback
    assert v.reasons == ["the baseline ran on cuda, the candidate on cpu"]
    assert v.losses is None  # cuda numbers against cpu numbers say nothing about the lock


def test_device_fallback_is_said_once() -> None:
    v = compare([run(device="cuda")], [run()], expected_device="cuda")
    assert v.reasons == ["expected cuda, ran on cpu"]


def test_skipped() -> None:
    v = skipped("mlp", "jax", "jax is not in the lock")
    assert (v.verdict, v.reasons, v.scenario, v.framework) == (
        Verdict.skipped,
        ["jax is not in the lock"],
        "mlp",
        "jax",
    )


# --------------------------------------------------------------------------------------------
# Exact mode and tolerance overrides


def test_exact_policy_turns_a_one_ulp_change_into_drift() -> None:
    candidate = with_loss(2, f32_above(1.25))
    assert compare([run()], [candidate]).verdict == Verdict.within_tolerance
    v = compare([run()], [candidate], policy=Policy(exact=True))
    assert v.verdict == Verdict.drift
    assert v.losses is not None and "exact equality required" in v.losses.message


def test_exact_policy_drifts_on_a_digest_difference_alone() -> None:
    v = compare([run()], [run(param_digest="sha256:bbbb")], policy=Policy(exact=True))
    assert v.verdict == Verdict.drift


def test_exact_policy_drifts_on_negative_zero() -> None:
    base = run(losses=[1.0, 0.0])
    assert compare([base], [run(losses=[1.0, -0.0])]).verdict == Verdict.within_tolerance
    v = compare([base], [run(losses=[1.0, -0.0])], policy=Policy(exact=True))
    assert v.verdict == Verdict.drift and v.first_divergent_step == 1


def test_nan_in_both_losses_is_identical() -> None:
    losses = [1.0, math.nan]
    assert compare([run(losses=losses)], [run(losses=list(losses))]).verdict == Verdict.identical


def test_tolerance_per_dtype() -> None:
    base = run(losses=[1.0, 1.0], dtype="bfloat16")
    candidate = run(losses=[1.0, 1.0078125], dtype="bfloat16", param_digest="sha256:b")
    assert compare([base], [candidate]).verdict == Verdict.within_tolerance
    as_float32 = {"dtype": "float32"}
    base32 = base.model_copy(update=as_float32)
    candidate32 = candidate.model_copy(update=as_float32)
    assert compare([base32], [candidate32]).verdict == Verdict.drift


def test_scenario_tolerance_beats_policy_tolerance_beats_default() -> None:
    candidate = with_loss(0, 2.1)  # 5% off
    loose, tight = Tolerance(rtol=0.1, atol=0.0), Tolerance(rtol=0.01, atol=0.0)
    assert compare([run()], [candidate]).verdict == Verdict.drift
    assert compare([run()], [candidate], policy=Policy(tolerance=loose)).verdict == (
        Verdict.within_tolerance
    )
    v = compare([run()], [candidate], policy=Policy(tolerance=loose), tolerance=tight)
    assert v.verdict == Verdict.drift


# --------------------------------------------------------------------------------------------
# Compile diagnostics


def test_graph_break_is_compile_fallback_and_outranks_drift() -> None:
    old = CompileDiagnostics(graph_breaks=0, break_reasons=[])
    new = CompileDiagnostics(graph_breaks=1, break_reasons=["Data-dependent branching"])
    v = compare([run(compile=old)], [with_loss(5, 0.5, compile=new)])
    assert v.verdict == Verdict.compile_fallback
    assert v.compile_diff is not None and v.compile_diff.regressed
    assert v.compile_diff.lines == ["graph breaks 0 → 1", "+ break: Data-dependent branching"]
    assert v.reasons[0] == (
        "compiled path regressed: graph breaks 0 → 1; + break: Data-dependent branching"
    )
    assert v.reasons[1].startswith("losses beyond tolerance")  # drift still listed


@pytest.mark.parametrize(
    ("old", "new", "line"),
    [
        (dict(recompiles=1), dict(recompiles=3), "recompiles 1 → 3"),
        (dict(eager_fallbacks=None), dict(eager_fallbacks=2), "eager fallbacks 0 → 2"),
        (dict(traces={"step": 1}), dict(traces={"step": 2}), "traces of step 1 → 2"),
        (dict(compilations={}), dict(compilations={"loss": 1}), "compilations of loss 0 → 1"),
        (dict(xla=True), dict(xla=False), "XLA on → off"),
        (dict(backend="inductor"), dict(backend="eager"), "backend inductor → eager"),
        (dict(break_reasons=["a"]), dict(break_reasons=["a", "b"]), "+ break: b"),
    ],
)
def test_compile_regressions(old: dict, new: dict, line: str) -> None:
    diff = compare_compile(CompileDiagnostics(**old), CompileDiagnostics(**new))
    assert diff.regressed and not diff.improvement
    assert diff.lines == [line]
    v = compare([run(compile=old)], [run(compile=new)])
    assert v.verdict == Verdict.compile_fallback


def test_xla_lost_flag() -> None:
    assert compare_compile(CompileDiagnostics(xla=True), CompileDiagnostics(xla=False)).xla_lost
    assert not compare_compile(CompileDiagnostics(xla=True), CompileDiagnostics(xla=None)).xla_lost


def test_unreported_counts_are_not_compared() -> None:
    diff = compare_compile(CompileDiagnostics(graph_breaks=2), CompileDiagnostics())
    assert diff.lines == [] and not diff.regressed and not diff.improvement


def test_compile_improvement_keeps_the_numeric_verdict() -> None:
    old = CompileDiagnostics(graph_breaks=2, break_reasons=["print()", "item()"])
    new = CompileDiagnostics(graph_breaks=1, break_reasons=["item()"])
    v = compare([run(compile=old)], [run(compile=new)])
    assert v.verdict == Verdict.identical
    assert v.improvement is True
    assert v.reasons[1] == "improved: graph breaks 2 → 1; - break: print(); re-record the golden"
    assert not is_failure(v, Policy())
    assert is_failure(v, Policy(fail_on_improvement=True))
    assert gate_passes([v], Policy())
    assert not gate_passes([v], Policy(fail_on_improvement=True))


def test_regression_and_improvement_together() -> None:
    diff = compare_compile(
        CompileDiagnostics(graph_breaks=1, break_reasons=["x"]),
        CompileDiagnostics(graph_breaks=1, break_reasons=["y"]),
    )
    assert diff.regressed and diff.improvement
    assert diff.lines == ["+ break: y", "- break: x"]


def test_compile_diff_dumps_its_summary() -> None:
    diff = compare_compile(CompileDiagnostics(xla=False), CompileDiagnostics(xla=True))
    data = diff.model_dump(mode="json")
    assert data["improvement"] is True and data["lines"] == ["XLA off → on"]
    assert CompileDiff.model_validate(data).improvements == ["XLA off → on"]


# --------------------------------------------------------------------------------------------
# Repeats


def test_nondeterministic_candidates() -> None:
    v = compare([run()], [run(), run(), with_loss(4, 0.8751)])
    assert v.nondeterministic is True
    assert v.verdict == Verdict.identical  # numerics use the first run
    assert v.reasons[1].startswith(
        "the 3 candidate runs are not bitwise reproducible: run 3 differs from run 1"
        " (losses from step 4)"
    )


def test_nondeterministic_baselines() -> None:
    v = compare([run(), run(param_digest="sha256:cccc")], [run()])
    assert v.nondeterministic is True
    assert any("baseline runs are not bitwise reproducible" in r for r in v.reasons)


def test_reproducible_repeats_are_deterministic() -> None:
    assert compare([run(), run()], [run(), run()]).nondeterministic is False


# --------------------------------------------------------------------------------------------
# Timings


def timed(step: float, first: float = 1.0, **fields: object) -> RunResult:
    return run(timings=Timings(step_median_s=step, first_step_s=first), **fields)


def test_timings_are_ignored_unless_timed_together() -> None:
    v = compare([timed(1.0)], [timed(10.0, first=10.0)])
    assert v.step_time_ratio is None and v.first_step_ratio is None
    assert v.verdict == Verdict.identical


def test_the_numeric_runs_ratio_is_shown_never_judged() -> None:
    v = compare(
        [timed(1.0), timed(2.0), timed(9.0)],  # one noisy run must not decide the figure
        [timed(2.0), timed(3.0), timed(3.5)],
        timed_together=True,
    )
    assert v.step_time_ratio == 1.5
    assert v.verdict == Verdict.identical and v.timing is None
    assert any("took ×1.50 the baseline's in this check's one run a side" in r
               and "not judged" in r for r in v.reasons)


def test_slower_is_judged_by_the_timing_runs() -> None:
    check = timing_runs(1.0, 1.5)
    v = compare([timed(1.0)], [timed(1.1)], timed_together=True, timing=check)
    assert v.verdict == Verdict.slower and v.timing == check
    assert v.step_time_ratio == pytest.approx(check.ratio)
    assert v.reasons[0].startswith("steady-state steps take ×1.50 the baseline's (99 % CI ×1.4")
    assert v.reasons[0].endswith(", 5 runs a side; limit ×1.30)")


def test_not_slower_within_the_ratio() -> None:
    v = compare([timed(1.0)], [timed(1.25)], timed_together=True,
                timing=timing_runs(1.0, 1.25))
    assert v.verdict == Verdict.identical and v.timing.verdict == "same"
    policy = Policy(slower_ratio=1.2)
    v = compare([timed(1.0)], [timed(1.25)], timed_together=True, policy=policy,
                timing=timing_runs(1.0, 1.25, policy))
    assert v.verdict == Verdict.slower


def test_steps_too_short_to_time_are_never_slower() -> None:
    v = compare([timed(0.0005)], [timed(0.003)], timed_together=True,
                timing=timing_runs(0.0005, 0.003))
    assert v.verdict == Verdict.identical and v.timing.verdict == "not judged"
    assert any("too short to time" in r for r in v.reasons)
    policy = Policy(slower_min_step_s=0.0)
    v = compare([timed(0.0005)], [timed(0.003)], timed_together=True, policy=policy,
                timing=timing_runs(0.0005, 0.003, policy))
    assert v.verdict == Verdict.slower


def test_drift_outranks_slower_and_both_are_said() -> None:
    v = compare([timed(1.0)], [timed(2.0, losses=[9.0] * 6)], timed_together=True,
                timing=timing_runs(1.0, 2.0))
    assert v.verdict == Verdict.drift
    assert any(r.startswith("steady-state steps take ×2.00") for r in v.reasons)


def test_slow_first_step_is_a_reason_not_a_verdict() -> None:
    compiled = dict(compile=CompileDiagnostics(graphs=1, compile_s=1.0))
    v = compare([timed(1.0, first=2.0, **compiled)], [timed(1.0, first=5.0, **compiled)],
                timed_together=True)
    assert v.first_step_ratio == 2.5
    assert v.verdict == Verdict.identical
    assert v.reasons[1] == (
        "the first step (including compilation) takes 2.50× the baseline's:"
        " compile time regressed"
    )


def test_missing_timings_give_no_ratio() -> None:
    v = compare([run()], [timed(5.0)], timed_together=True)
    assert v.step_time_ratio is None and v.verdict == Verdict.identical


MIB = 1 << 20


def peak(host: float | None, device: float | None = None, **fields: object) -> RunResult:
    """A run whose training peaked at `host` (and `device`) MiB."""
    return run(peak_memory_bytes=None if host is None else int(host * MIB),
               peak_device_memory_bytes=None if device is None else int(device * MIB), **fields)


def test_memory_is_ignored_unless_measured_together() -> None:
    # Against a golden of another run (another machine, another day) memory proves nothing.
    v = compare([peak(100)], [peak(400, 400)])
    assert v.memory_ratio is None and v.device_memory_ratio is None
    assert v.verdict == Verdict.identical


def test_heavier_names_both_peaks_and_the_ratio() -> None:
    v = compare([peak(100)], [peak(150)], timed_together=True)
    assert v.memory_ratio == 1.5 and v.device_memory_ratio is None
    assert v.verdict == Verdict.heavier
    assert v.reasons[0] == ("the training's peak host memory is 150.0 MiB against the"
                            " baseline's 100.0 MiB: 1.50× (limit 1.20×)")


def test_heavier_uses_medians_over_repeats() -> None:
    v = compare([peak(1000), peak(1000), peak(3000)],  # one noisy run must not decide
                [peak(1100), peak(1150), peak(4000)], timed_together=True)
    assert v.memory_ratio == 1.15 and v.verdict == Verdict.identical
    v = compare([peak(1000), peak(1000), peak(3000)], [peak(1300), peak(1250), peak(10)],
                timed_together=True)
    assert v.memory_ratio == 1.25 and v.verdict == Verdict.heavier


def test_not_heavier_within_the_ratio() -> None:
    v = compare([peak(1000)], [peak(1190)], timed_together=True)
    assert v.memory_ratio == pytest.approx(1.19) and v.verdict == Verdict.identical
    v = compare([peak(1000)], [peak(1190)], timed_together=True,
                policy=Policy(heavier_ratio=1.1))
    assert v.verdict == Verdict.heavier
    assert compare([peak(100)], [peak(50)], timed_together=True).verdict == Verdict.identical


def test_a_rise_below_the_floor_is_never_heavier() -> None:
    # A small training doubles by noise alone; the ratio is still reported.
    small = Policy().heavier_min_bytes / MIB / 4
    v = compare([peak(small)], [peak(small * 3)], timed_together=True)
    assert v.memory_ratio == pytest.approx(3.0) and v.verdict == Verdict.identical
    v = compare([peak(small)], [peak(small * 3)], timed_together=True,
                policy=Policy(heavier_min_bytes=0))
    assert v.verdict == Verdict.heavier


def test_device_memory_is_judged_apart_from_host_memory() -> None:
    v = compare([peak(100, 1000)], [peak(100, 2000)], timed_together=True)
    assert (v.memory_ratio, v.device_memory_ratio) == (1.0, 2.0)
    assert v.verdict == Verdict.heavier
    assert v.reasons[0] == ("the training's peak device memory is 2000.0 MiB against the"
                            " baseline's 1000.0 MiB: 2.00× (limit 1.20×)")
    both = compare([peak(100, 1000)], [peak(200, 2000)], timed_together=True)
    assert [r.split(" memory")[0] for r in both.reasons[:2]] == [
        "the training's peak host", "the training's peak device"]


def test_missing_or_zero_memory_gives_no_ratio() -> None:
    for old, new in ((None, 500), (500, None), (0, 40)):
        v = compare([peak(old)], [peak(new)], timed_together=True)
        assert v.memory_ratio is None and v.verdict == Verdict.identical


def test_a_baseline_that_raised_no_peak_is_judged_by_the_rise_alone() -> None:
    # 0: the framework's import peaked higher than the baseline's training (where the peak
    # cannot be reset); a candidate rising past the floor is still heavier.
    v = compare([peak(0)], [peak(500)], timed_together=True)
    assert v.memory_ratio is None and v.verdict == Verdict.heavier
    assert v.reasons[0] == ("the training's peak host memory is 500.0 MiB against the"
                            " baseline's 0.0 MiB: up 500.0 MiB from none")


def test_drift_and_slower_outrank_heavier_and_all_are_said() -> None:
    heavy_slow = dict(peak_memory_bytes=400 * MIB)
    v = compare([timed(1.0, peak_memory_bytes=100 * MIB)], [timed(2.0, **heavy_slow)],
                timed_together=True, timing=timing_runs(1.0, 2.0))
    assert v.verdict == Verdict.slower
    assert v.reasons[1].startswith("the training's peak host memory is 400.0 MiB")
    v = compare([peak(100)], [peak(400, losses=[9.0] * 6)], timed_together=True)
    assert v.verdict == Verdict.drift
    assert any(r.startswith("the training's peak host memory") for r in v.reasons)


# --------------------------------------------------------------------------------------------
# Precedence and the gate


def test_precedence_order() -> None:
    assert PRECEDENCE[:3] == (Verdict.broken, Verdict.device_fallback, Verdict.incomparable)
    assert PRECEDENCE.index(Verdict.compile_fallback) < PRECEDENCE.index(Verdict.drift)
    assert PRECEDENCE.index(Verdict.drift) < PRECEDENCE.index(Verdict.slower)
    assert PRECEDENCE.index(Verdict.slower) < PRECEDENCE.index(Verdict.heavier)
    assert PRECEDENCE.index(Verdict.heavier) < PRECEDENCE.index(Verdict.within_tolerance)
    assert PRECEDENCE.index(Verdict.within_tolerance) < PRECEDENCE.index(Verdict.identical)
    assert set(PRECEDENCE) == set(Verdict)


def test_broken_outranks_device_fallback() -> None:
    v = compare([run(device="cuda")], [run(status="crashed", error="x")], expected_device="cuda")
    assert v.verdict == Verdict.broken
    assert v.reasons == ["the candidate run crashed: x", "expected cuda, ran on cpu"]


def test_broken_without_a_device_adds_no_device_reason() -> None:
    v = compare([run()], [run(status="crashed", device=None)], expected_device="cuda")
    assert v.reasons == ["the candidate run crashed"]


def test_device_fallback_outranks_incomparable() -> None:
    v = compare([run()], [run(losses=LOSSES[:3])], expected_device="cuda")
    assert v.verdict == Verdict.device_fallback
    assert v.reasons[1] == "the baseline ran 6 steps, the candidate 3"


def test_incomparable_outranks_compile_fallback() -> None:
    v = compare(
        [run(compile=CompileDiagnostics(graph_breaks=0))],
        [run(dtype="float16", compile=CompileDiagnostics(graph_breaks=3))],
    )
    assert v.verdict == Verdict.incomparable


def test_gate() -> None:
    ok = compare([run()], [run()])
    drift = compare([run()], [run(losses=[9.0] * 6)])
    slow = compare([timed(1.0)], [timed(2.0)], timed_together=True,
                   timing=timing_runs(1.0, 2.0))
    assert gate_passes([ok, slow], Policy())
    assert not gate_passes([ok, drift], Policy())
    assert is_failure(drift, Policy()) and not is_failure(ok, Policy())
    assert not gate_passes([slow], Policy(fail_on=DEFAULT_FAIL_ON | {Verdict.slower}))
    # Gated like `slower`: reported, failing only where fail_on names it.
    heavy = compare([peak(100)], [peak(300)], timed_together=True)
    assert heavy.verdict == Verdict.heavier and gate_passes([ok, heavy], Policy())
    assert not gate_passes([heavy], Policy(fail_on=DEFAULT_FAIL_ON | {Verdict.heavier}))
    assert gate_passes([heavy], Policy(fail_on=DEFAULT_FAIL_ON | {Verdict.slower}))
    assert gate_passes([drift], Policy(fail_on=frozenset()))
    assert gate_passes([], Policy())


def test_default_fail_on() -> None:
    # A gate passes only what it compared: incomparable fails by default.
    assert DEFAULT_FAIL_ON == {
        Verdict.drift,
        Verdict.compile_fallback,
        Verdict.device_fallback,
        Verdict.broken,
        Verdict.incomparable,
    }


def test_policy_reads_verdict_names_and_dumps_them_in_a_stable_order() -> None:
    policy = Policy.model_validate({"fail_on": ["slower", "drift", "broken"]})
    assert policy.fail_on == {Verdict.slower, Verdict.drift, Verdict.broken}
    assert policy.model_dump(mode="json")["fail_on"] == ["broken", "drift", "slower"]


def test_scenario_verdict_dumps_to_strict_json() -> None:
    v = compare([run()], [run(losses=[1.0, 2.0, 3.0, 4.0, 5.0, math.nan])])
    text = json.dumps(v.model_dump(mode="json"), allow_nan=False)
    assert json.loads(text)["final_loss_new"] == "nan"
    assert ScenarioVerdict.model_validate_json(v.model_dump_json()).verdict == Verdict.drift


def test_tolerance_is_validated_in_one_place_with_the_config_s_bounds():
    from pydantic import ValidationError

    from lockguard.config import parse_config

    for bad in ({"rtol": -1e-5, "atol": 0.0}, {"rtol": math.inf, "atol": 0.0},
                {"rtol": 0.0, "atol": math.nan}, {"rtol": 0.0, "atol": 0.0, "btol": 1}):
        with pytest.raises(ValidationError):
            Tolerance(**bad)
    config = parse_config({"tolerance": {"rtol": 1e-5, "atol": 1e-6}}, "t.toml", Path("."))
    assert config.tolerance == Tolerance(rtol=1e-5, atol=1e-6)


def test_compare_is_pure_it_imports_no_io_module():
    import ast

    io_modules = {"os", "pathlib", "subprocess", "shutil", "json", "io", "tempfile", "socket",
                  "lockguard.files", "lockguard.process", "lockguard.cache", "lockguard.golden"}
    package = Path(__file__).resolve().parent.parent / "lockguard" / "compare"
    for path in sorted(package.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                assert name not in io_modules, f"{path.name} imports {name}"


# ------------------------------------------------------------------------------ sample order

ORDER = [[0, 1], [2, 3], [1, 0], [3, 2], [0, 2], [1, 3]]


def test_the_same_sample_order_is_identical() -> None:
    v = compare([run(sample_order=ORDER, batches_per_epoch=2)],
                [run(sample_order=ORDER, batches_per_epoch=2)])
    assert v.verdict == Verdict.identical and v.first_batch_differs is None


def test_another_sample_order_is_drift_at_the_first_batch_that_differs() -> None:
    reordered = ORDER[:3] + [[2, 3]] + ORDER[4:]  # batch 3: the same samples as batch 1
    v = compare([run(sample_order=ORDER, batches_per_epoch=2, epoch_digests=["a", "b", "c"])],
                [run(sample_order=reordered, batches_per_epoch=2,
                     epoch_digests=["a", "x", "c"])])
    # Even with bitwise-equal losses: a model fed other data is not the same training.
    assert v.verdict == Verdict.drift and v.first_batch_differs == 3
    assert v.reasons[0] == ("the sample order changed from batch 3 (epoch 1, batch 1 of it): "
                            "the same samples in another order, sample ids [3, 2] → [2, 3]; "
                            "epoch order digests differ in epoch(s) 1")
    other = compare([run(sample_order=ORDER)], [run(sample_order=[[5, 1]] + ORDER[1:])])
    assert other.first_batch_differs == 0
    assert other.reasons[0] == ("the sample order changed from batch 0: other samples, sample "
                                "ids [0, 1] → [5, 1]")


def test_a_sample_order_on_one_side_only_is_said_not_judged() -> None:
    v = compare([run()], [run(sample_order=ORDER)])
    assert v.verdict == Verdict.identical
    assert "only the candidate recorded its sample order" in v.reasons


def test_results_without_an_order_keep_their_json() -> None:
    assert "sample_order" not in run().model_dump(mode="json")
    dumped = run(sample_order=ORDER, batches_per_epoch=2).model_dump(mode="json")
    assert dumped["sample_order"] == ORDER and dumped["batches_per_epoch"] == 2


def test_every_candidate_runs_order_is_compared() -> None:
    """With --repeat, a run that delivers another order is drift, even when the numbers of
    every run sit inside a noise envelope."""
    same = run(sample_order=ORDER, batches_per_epoch=2)
    other = run(sample_order=ORDER[:4] + [[2, 0], [1, 3]], batches_per_epoch=2)
    v = compare([same], [same, other])
    assert v.verdict == Verdict.drift and v.first_batch_differs == 4
    assert v.reasons[0].startswith("the sample order changed in candidate run 2 from batch 4 "
                                   "(epoch 2, batch 0 of it): the same samples in another order")
    from lockguard.compare.envelope import deterministic, run_difference

    assert run_difference(same, other) == "sample order" and not deterministic([same, other])


@pytest.mark.parametrize("value, shown", [(None, "—"), (0.0004, "0.4 ms"), (0.99949, "999 ms"),
                                          (0.99962, "1.00 s"), (1.5, "1.50 s")])
def test_seconds_choose_the_unit_after_rounding(value, shown) -> None:
    from lockguard.compare.figures import seconds

    assert seconds(value) == shown


def test_a_data_pipeline_is_judged_slower_on_its_mean_step() -> None:
    """Two workers: one step in two waits. The medians (a step that did not wait) are equal;
    the means carry every wait."""
    def pipeline(median: float, mean: float) -> RunResult:
        return run(sample_order=ORDER, timings={"step_median_s": median, "step_mean_s": mean})

    check = compare_timing([pipeline(0.005, 0.006)] * 5, [pipeline(0.005, 0.1)] * 5, Policy())
    assert check.measure == "step mean" and check.verdict == "slower"
    v = compare_runs([pipeline(0.005, 0.006)], [pipeline(0.005, 0.1)], policy=Policy(),
                     baseline_kind="lock", expected_device=None, timed_together=True,
                     timing=check)
    assert v.verdict == Verdict.slower and v.step_time_ratio == pytest.approx(0.1 / 0.006)
    assert v.reasons[0].startswith("steps (mean, a data pipeline's) take ×16.67"), v.reasons


def test_a_difference_exactly_at_the_tolerance_passes_and_one_ulp_more_does_not():
    """|new - old| <= atol + rtol * |old|, as torch.testing: the boundary is inside. Values exact
    in binary, so the sums are too: 1.5 against 1.0 with atol 0.5 (and with rtol 0.5), then the
    next double above 1.5."""
    for tol in (Tolerance(rtol=0.0, atol=0.5), Tolerance(rtol=0.5, atol=0.0),
                Tolerance(rtol=0.25, atol=0.25)):
        at = compare_series("losses", [1.0], [1.5], tol, dtype="float64")
        assert at.mismatched == 0, (tol, at)
        over = compare_series("losses", [1.0], [math.nextafter(1.5, 2.0)], tol, dtype="float64")
        assert over.mismatched == 1, (tol, over)
