"""Where a drift starts (compare/locate.py), the rules mutation testing found no test for
(benchmarks/bench_mutation.py): how repeated calls pair, which of several differing calls is
named, the ULPs over a sample, what the sentences say, and the drift shape's boundaries.
Captures are built here call by call; every expected value is worked out by hand. In float32,
2.0 + k·2**-22 is k ULPs above 2.0 (the ULP of [2, 4) is 2**-22)."""

from __future__ import annotations

import base64
import hashlib
import struct

from lockguard.compare.locate import (
    GROWTH, SYSTEMATIC_ULPS, TINY_ULPS, DriftShape, drift_shape, locate, locate_step, located,
)
from lockguard.results import SCHEMA_VERSION, Capture, RunResult

ULP2 = 2.0 ** -22  # float32's ULP between 2 and 4


def tensor(values: list[float], numel: int | None = None, salt: bytes = b"") -> dict:
    """A captured float32 tensor; `salt` makes its digest differ with the same sampled values
    (a difference beyond the sample), `numel` a tensor larger than its sample."""
    raw = struct.pack(f"<{len(values)}f", *values)
    return {"digest": hashlib.sha256(raw + salt).hexdigest(), "dtype": "float32",
            "shapes": [[numel or len(values)]], "numel": numel or len(values),
            "sample": base64.b64encode(raw).decode("ascii")}


def call(name: str, parent: int, out: dict | None = None, *, type: str = "Linear",
         inputs: str = "same", params: str | None = None, grad: dict | None = None,
         grad_order: int | None = None, referee: dict | None = None) -> dict:
    return {"name": name, "type": type, "parent": parent,
            "inputs": hashlib.sha256(inputs.encode()).hexdigest(),
            "params": hashlib.sha256(params.encode()).hexdigest() if params else None,
            "out": out, "grad": grad, "grad_order": grad_order, "referee": referee}


def capture(*calls: dict, step: int = 3, truncated: bool = False) -> Capture:
    return Capture.model_validate({"step": step, "calls": list(calls), "truncated": truncated,
                                   "sample": 512})


SAME = tensor([1.0, 2.0])


# ------------------------------------------------------------------------------ pairing

def test_a_module_run_again_pairs_by_its_occurrence_and_the_rest_is_unpaired():
    old = capture(call("(model)", -1, SAME), call("block", 0, SAME), call("block", 0, SAME),
                  call("gone", 0, SAME))
    new = capture(call("(model)", -1, SAME), call("block", 0, SAME), call("new", 0, SAME),
                  call("block", 0, SAME), call("block", 0, SAME))
    loc = locate(old, new)
    # baseline-only keys first, then the candidate's: its third "block" is occurrence 2
    assert loc.unpaired == ["gone", "new", "block#2"]
    assert (loc.kind, loc.compared) == ("none", 3)


def test_the_second_run_of_a_module_is_compared_with_the_second_run():
    old = capture(call("(model)", -1, SAME), call("block", 0, SAME),
                  call("block", 0, tensor([1.0, 2.0])))
    new = capture(call("(model)", -1, SAME), call("block", 0, SAME),
                  call("block", 0, tensor([1.0, 2.0 + 3 * ULP2])))
    loc = locate(old, new)
    assert (loc.kind, loc.module, loc.max_ulp, loc.unpaired) == ("forward", "block", 3, [])


def test_one_truncated_side_is_enough_to_say_so():
    loc = locate(capture(call("a", -1, SAME)), capture(call("a", -1, SAME), truncated=True))
    assert loc.truncated is True
    assert loc.sentences()[-1] == ("the capture was truncated: calls after the first 2000 "
                                   "were not compared")
    assert locate(capture(call("a", -1, SAME)), capture(call("a", -1, SAME))).truncated is False


def test_six_unpaired_calls_are_all_named_a_seventh_is_an_ellipsis():
    def unpaired(n: int) -> str:
        new = capture(call("a", -1, SAME), *(call(f"m{k}", 0, SAME) for k in range(n)))
        return locate(capture(call("a", -1, SAME)), new).sentences()[-1]

    assert unpaired(6) == "module calls on one side only: m0, m1, m2, m3, m4, m5"
    assert unpaired(7) == "module calls on one side only: m0, m1, m2, m3, m4, m5 …"


# ------------------------------------------------------------------------ which call is named

def test_the_outer_modules_weights_are_named_first_and_a_later_step_says_an_update_moved_them():
    old = capture(call("(model)", -1, SAME, params="w0"), call("fc", 0, SAME, params="w1"),
                  step=2)
    new = capture(call("(model)", -1, SAME, params="moved"), call("fc", 0, SAME, params="also"),
                  step=2)
    loc = locate(old, new)
    assert (loc.kind, loc.module, loc.step) == ("weights", "(model)", 2)
    assert loc.sentences()[0] == ("the weights of (model) (Linear) differ entering step 2: an "
                                  "earlier update moved them")


def test_a_child_finishes_before_its_parent_and_siblings_in_call_order():
    """(model) runs block, which runs inner, then other: they finish inner, block, other,
    (model). With every output differing on equal inputs, inner is named; every call but its
    ancestors (block, (model)) counts as later: other."""
    moved = tensor([1.0, 2.0 + ULP2])
    old = capture(call("(model)", -1, SAME), call("block", 0, SAME), call("inner", 1, SAME),
                  call("other", 0, SAME))
    new = capture(call("(model)", -1, moved), call("block", 0, moved), call("inner", 1, moved),
                  call("other", 0, moved))
    loc = locate(old, new)
    assert (loc.module, loc.first_output, loc.later_differing, loc.compared) == \
        ("inner", None, 1, 4)


def test_of_two_differing_siblings_the_first_called_is_named():
    moved = tensor([1.0, 2.0 + ULP2])
    old = capture(call("(model)", -1, SAME), call("a", 0, SAME), call("b", 0, SAME))
    new = capture(call("(model)", -1, SAME), call("a", 0, moved), call("b", 0, moved))
    loc = locate(old, new)
    assert (loc.module, loc.later_differing) == ("a", 1)


def test_a_root_whose_inputs_differ_is_named_itself_with_its_inputs_unequal():
    old = capture(call("(model)", -1, SAME, inputs="x"))
    new = capture(call("(model)", -1, tensor([1.0, 2.0 + 2 * ULP2]), inputs="y"))
    loc = locate(old, new)
    assert (loc.module, loc.same_inputs, loc.max_ulp) == ("(model)", False, 2)


def test_an_output_on_one_side_only_differs_and_has_no_ulps():
    old = capture(call("(model)", -1, SAME), call("fc", 0, None))
    new = capture(call("(model)", -1, SAME), call("fc", 0, SAME))
    loc = locate(old, new)
    assert (loc.kind, loc.module, loc.max_ulp, loc.sampled, loc.numel) == \
        ("forward", "fc", None, None, None)
    assert locate(old, old).kind == "none"  # no output on either side is no difference


def test_with_every_output_equal_the_gradient_first_in_backward_order_is_named():
    g, moved = tensor([0.5]), tensor([0.5 + 2.0 ** -24])
    old = capture(call("(model)", -1, SAME, grad=g, grad_order=0),
                  call("a", 0, SAME, grad=g, grad_order=2),
                  call("b", 0, SAME, grad=g, grad_order=1))
    new = capture(call("(model)", -1, SAME, grad=g, grad_order=0),
                  call("a", 0, SAME, grad=moved, grad_order=2),
                  call("b", 0, SAME, grad=moved, grad_order=1))
    loc = locate(old, new)
    assert (loc.kind, loc.module, loc.max_ulp, loc.later_differing) == ("gradient", "b", 1, 1)
    assert loc.sentences()[0] == (
        "the drift starts in b (Linear) at step 3: its gradient (backward) differs by max 1 ulp "
        "on equal inputs; 1 other module call(s) of the 3 compared differ too (downstream)")


# ------------------------------------------------------------------------------- the ULPs

def test_the_ulps_are_the_worst_over_the_shorter_sample_skipping_what_cannot_be_measured():
    old = tensor([float("nan"), 2.0, 2.0, 2.0, 9.0], numel=10)
    new = tensor([1.0, 2.0 + 5 * ULP2, 2.0 + ULP2, 2.0 + 7 * ULP2])
    loc = locate(capture(call("a", -1, old)), capture(call("a", -1, new)))
    # NaN against 1.0 has no ULP distance; 5, 1, 7 ULPs: the worst is 7; 4 values compared
    assert (loc.max_ulp, loc.sampled, loc.numel) == (7, 4, 10)


def test_a_difference_near_zero_is_also_measured_at_the_outputs_scale():
    """GPT-2's attention output under SDPA: a component near zero differs by many of its own
    ULPs and a few at the scale of the output; the sentence gives both. The scale is the
    sample's root mean square, here sqrt((1 + 9 + 2**-40) / 3) ≈ 1.83, whose float32 ULP is
    2**-23: a difference of 2**-40 at 2**-20 is 8 own ULPs (2**-43 each) and 2**-17 at scale;
    one of 3 ULPs at 3.0, above the scale, is measured in its own ULPs (2**-22): 3."""
    old = tensor([1.0, 2.0 ** -20, 3.0])
    near_zero = locate(capture(call("a", -1, old)),
                       capture(call("a", -1, tensor([1.0, 2.0 ** -20 + 2.0 ** -40, 3.0]))))
    assert (near_zero.max_ulp, near_zero.scaled_ulp) == (8, 2.0 ** -17)
    assert "differs by max 8 ulp (7.6e-06 ulp at the output's scale) on equal inputs" \
        in near_zero.sentences()[0]
    large = locate(capture(call("a", -1, old)),
                   capture(call("a", -1, tensor([1.0, 2.0 ** -20, 3.0 + 3 * ULP2]))))
    # a value above the scale is measured in its own ULPs: the same, and said once
    assert (large.max_ulp, large.scaled_ulp) == (3, 3.0)
    assert "differs by max 3 ulp on equal inputs" in large.sentences()[0]


def test_a_difference_beyond_the_sample_is_said_so():
    old = tensor([1.0, 2.0], numel=5)
    new = tensor([1.0, 2.0], numel=5, salt=b"the fifth value differs")
    loc = locate(capture(call("a", -1, old), step=1), capture(call("a", -1, new), step=1))
    assert (loc.max_ulp, loc.sampled, loc.numel) == (None, 2, 5)
    assert ("its forward output differs beyond its first 2 of 5 values as float32 (they agree) "
            "on equal inputs") in loc.sentences()[0]


def test_another_candidate_class_is_shown_beside_the_baselines():
    old = capture(call("a", -1, SAME, type="Attention"))
    new = capture(call("a", -1, tensor([1.0, 3.0]), type="SdpaAttention"))
    loc = locate(old, new)
    assert loc.candidate_type == "SdpaAttention"
    assert loc.sentences()[0].startswith(
        "the drift starts in a (Attention → SdpaAttention: the implementation changed) at")
    same = locate(old, capture(call("a", -1, tensor([1.0, 3.0]), type="Attention")))
    assert same.candidate_type is None
    assert same.sentences()[0].startswith("the drift starts in a (Attention) at")


# ---------------------------------------------------------------------------- the referee

def refereed(old: dict, new: dict, inputs: str = "same") -> list[str]:
    return locate(capture(call("a", -1, SAME, referee=old)),
                  capture(call("a", -1, tensor([1.0, 3.0]), referee=new,
                               inputs=inputs))).sentences()


def test_the_referee_prefers_the_smaller_worst_then_the_smaller_mean():
    exact = {"replay_exact": True}
    assert refereed({**exact, "max_ulp": 2.0, "mean_ulp": 0.5},
                    {**exact, "max_ulp": 2.0, "mean_ulp": 0.5})[1] == (
        "float64 referee, on the same inputs: candidate 2 ulp from float64 (mean 0.5), baseline "
        "2 ulp (mean 0.5): the candidate is at least as accurate")
    assert refereed({**exact, "max_ulp": 2.0, "mean_ulp": 0.25},
                    {**exact, "max_ulp": 2.0, "mean_ulp": 0.5})[1].endswith(
        "the baseline is closer to the exact answer")
    assert refereed({**exact, "max_ulp": 3.0, "mean_ulp": 0.25},
                    {**exact, "max_ulp": 2.0, "mean_ulp": 0.5}, inputs="other")[1] == (
        "float64 referee, each on its own inputs (they differ): candidate 2 ulp from float64 "
        "(mean 0.5), baseline 3 ulp (mean 0.25): the candidate is at least as accurate")


def test_a_referee_that_failed_or_measured_nothing_is_not_believed():
    good = {"replay_exact": True, "max_ulp": 1.0, "mean_ulp": 1.0}
    assert refereed({"error": "no float64 kernel"}, good)[1] == \
        "float64 referee unavailable: no float64 kernel"
    assert refereed(good, {"replay_exact": True, "error": "out of memory"})[1] == \
        "float64 referee unavailable: out of memory"
    assert refereed(good, {"replay_exact": True})[1] == (
        "float64 referee unavailable: the module's replay did not reproduce its output")
    # one side without a referee, or a location that is not a forward output: no sentence
    assert len(refereed(good, None)) == 1


# -------------------------------------------------------------------------- the drift shape

def loss(ulps: float) -> float:
    return 2.0 + ulps * ULP2


def test_the_constants_are_the_documented_ones():
    assert (TINY_ULPS, GROWTH, SYSTEMATIC_ULPS) == (16, 10.0, 1000)


def test_a_tiny_first_difference_is_at_most_16_ulps_and_grown_is_at_least_tenfold():
    old = [2.0] * 4
    # 16 ULPs at step 1, exactly ten times that by the last step: amplified
    assert drift_shape(old, [2.0, loss(16), loss(16), loss(160)], "float32").kind == "amplified"
    # 17 ULPs is not tiny; a growth of 159/16 is less than tenfold
    assert drift_shape(old, [2.0, loss(17), loss(17), loss(170)], "float32").kind == "steady"
    assert drift_shape(old, [2.0, loss(16), loss(16), loss(159)], "float32").kind == "steady"


def test_only_the_last_three_steps_count_as_grown():
    old = [2.0] * 6
    # growth from step 1: 1, 1, 10, 1, 1 ULPs: the tenfold step is third from the end
    grown = [2.0, loss(1), loss(1), loss(10), loss(1), loss(1)]
    assert drift_shape(old, grown, "float32").kind == "amplified"
    early = [2.0, loss(1), loss(10), loss(1), loss(1), loss(1)]  # fourth from the end
    assert drift_shape(old, early, "float32").kind == "steady"


def test_systematic_is_more_than_1000_ulps_at_the_first_divergent_step():
    old = [2.0] * 3
    assert drift_shape(old, [2.0, loss(1000), loss(1000)], "float32").kind == "steady"
    shape = drift_shape(old, [2.0, loss(1001), loss(1)], "float32")
    assert (shape.kind, shape.first_step, shape.first_ulp) == ("systematic", 1, 1001)
    assert shape.sentence().startswith("a systematic change: the loss differs by 1001 ulp "
                                       "already at step 1")


def test_a_first_difference_that_has_no_ulps_is_steady_and_a_longer_run_alone_has_no_shape():
    nan = drift_shape([2.0, 2.0], [2.0, float("nan")], "float32")
    assert (nan.kind, nan.first_ulp) == ("steady", None)
    assert drift_shape([2.0, 2.0], [2.0, 2.0, 3.0], "float32") is None


def test_the_shapes_in_words():
    steady = drift_shape([2.0] * 3, [2.0, loss(100), loss(100)], "float32")
    # 100 · 2**-22 = 2.384...e-05
    assert steady.sentence() == ("a steady difference: |Δloss| 2.38e-05 at step 1, 2.38e-05 by "
                                 "the last step (not amplified)")
    amplified = drift_shape([2.0] * 3, [2.0, loss(1), 2.0 + 2.0 ** -10], "float32")
    assert amplified.sentence() == ("one first difference amplified by training: 1 ulp of loss "
                                    "at step 1, |Δloss| 2.38e-07 → 0.000977 by the last step")
    empty = DriftShape(kind="steady", first_step=0, first_ulp=None)
    assert empty.sentence() == ("a steady difference: |Δloss| 0 at step 0, 0 by the last step "
                                "(not amplified)")


# ------------------------------------------------------------------ the step and the runs

def run(losses: list[float], norms: list[float] | None = None,
        capture: Capture | None = None) -> RunResult:
    return RunResult(schema_version=SCHEMA_VERSION, scenario="torch.mlp", framework="torch",
                     steps=len(losses), losses=losses, grad_norms=norms or [], capture=capture)


def test_the_located_step_is_the_earlier_of_the_two_and_never_past_the_shorter_run():
    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 2, 4], [5, 1, 1])) == 0
    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 5, 3], [1, 1, 6])) == 1
    # only a length differs: no step of both runs to re-run
    assert locate_step(run([1, 2]), run([1, 2, 3])) is None


def test_located_needs_both_captures_and_takes_the_shape_from_the_full_runs():
    side = capture(call("a", -1, SAME))
    full_old, full_new = run([2.0, 2.0, 2.0]), run([2.0, loss(2000), loss(2000)])
    assert located(full_old, full_new, run([2.0]), run([2.0], capture=side)) is None
    assert located(full_old, full_new, run([2.0], capture=side), run([2.0])) is None
    loc = located(full_old, full_new, run([2.0], capture=side), run([2.0], capture=side))
    assert loc.kind == "none" and loc.shape.kind == "systematic"


def test_a_location_read_without_its_counts_has_the_documented_defaults():
    """(seed 3 survivors: the defaults of `truncated`, `later_differing` and `compared`.) A
    report's location written without them (an older lockguard's) reads as not truncated,
    nothing later, nothing compared."""
    from lockguard.compare.locate import Location

    loc = Location.model_validate({"step": 1, "kind": "forward", "module": "fc",
                                   "module_type": "Linear", "max_ulp": 4})
    assert (loc.truncated, loc.later_differing, loc.compared, loc.unpaired) == (False, 0, 0, [])
    assert loc.sentences() == [
        "the drift starts in fc (Linear) at step 1: its forward output differs by max 4 ulp on "
        "equal inputs; 0 other module call(s) of the 0 compared differ too (downstream)"]
