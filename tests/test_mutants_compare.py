"""lockguard.compare where mutation testing found no test that would fail
(benchmarks/bench_mutation.py): each test pins one rule a surviving mutant broke. As in
tests/test_compare.py, runs are built by hand and every expected value is written out here."""
from __future__ import annotations

from lockguard.compare.timing import TimingCheck
from lockguard.compare.tolerance import Policy
from lockguard.compare.verdicts import Accepted, compare_runs
from lockguard.names import Verdict
from lockguard.results import CompileDiagnostics
from test_compare import compare, run


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
