"""Where a drift starts (compare/locate.py): two sides' captures of one step compared module by
module, the drift's shape, the capture's validation on arrival, and the A/B flow that re-runs the
first divergent step on the fake backend (tests/fakes.py capture_for). Every expected figure is
worked out by hand: in float32, 2.0 + k·2**-22 is k ULPs above 2.0 (the ULP of [2, 4) is 2**-22).
The harness's real capture is tested in test_model_libraries.py (slow)."""

from __future__ import annotations

import copy
import hashlib

import pytest

from fakes import FakeBackend, capture_for, fake_shift, lock
from lockguard.compare.locate import drift_shape, locate, locate_step
from lockguard.config import Config, Options
from lockguard.flows.ab import check_ab
from lockguard.names import FORMATS, Verdict
from lockguard.report import render
from lockguard.results import Capture, ResultError, RunResult, SCHEMA_VERSION, parse_result
from lockguard.scenarios import bundled
from lockguard.settings import Settings

ULP2 = 2.0 ** -22  # float32's ULP between 2 and 4
OLD, NEW = "2.13.0", "2.14.1"


def cap(version: str, step: int = 3) -> Capture:
    return Capture.model_validate(capture_for(version, step))


def test_the_first_module_whose_output_differs_on_equal_inputs_is_named_with_its_ulps():
    a, b = fake_shift(OLD), fake_shift(NEW)
    assert a != b  # the two versions move fc2 differently
    loc = locate(cap(OLD), cap(NEW))
    assert (loc.kind, loc.module, loc.module_type, loc.step) == ("forward", "fc2", "Linear", 3)
    assert loc.max_ulp == abs(a - b) and loc.sampled == 3 and loc.numel == 3
    assert loc.first_output is None and loc.same_inputs is True
    # fc1's gradient differs after it; the model's output is fc2's own, its parent, not later
    assert loc.later_differing == 1 and loc.compared == 3
    assert loc.sentences()[0].startswith(
        f"the drift starts in fc2 (Linear) at step 3: its forward output differs by max "
        f"{abs(a - b)} ulp on equal inputs")


def test_equal_captures_locate_nothing():
    loc = locate(cap(OLD), cap(OLD))
    assert loc.kind == "none" and loc.module is None
    assert "no module's weights, output or gradient differs" in loc.sentences()[0]


def test_a_module_whose_inputs_already_differ_hands_the_blame_to_its_enclosing_call():
    """GPT-2's eager → sdpa: the attention's own code (no submodule) changed, so its c_proj is
    the first call whose output differs, on inputs that differ: the attention is named."""
    old, new = capture_for(OLD, 4), capture_for(OLD, 4)
    proj = {"name": "h.0.attn.c_proj", "type": "Conv1D", "parent": 1,
            "inputs": hashlib.sha256(b"a").hexdigest(), "out": new["calls"][2]["out"]}
    old["calls"][1:] = [{**new["calls"][1], "name": "h.0.attn", "type": "GPT2Attention"},
                        dict(proj)]
    changed = capture_for(NEW, 4)["calls"][2]["out"]
    new["calls"][1:] = [{**new["calls"][1], "name": "h.0.attn", "type": "GPT2SdpaAttention",
                         "out": changed},
                        {**proj, "inputs": hashlib.sha256(b"b").hexdigest(), "out": changed}]
    loc = locate(Capture.model_validate(old), Capture.model_validate(new))
    assert (loc.module, loc.first_output, loc.kind) == ("h.0.attn", "h.0.attn.c_proj", "forward")
    assert (loc.module_type, loc.candidate_type) == ("GPT2Attention", "GPT2SdpaAttention")


def test_weights_that_differ_at_step_0_are_an_initialisation_change():
    new = capture_for(NEW, 0)
    new["calls"][2]["params"] = hashlib.sha256(b"other init").hexdigest()
    loc = locate(Capture.model_validate(capture_for(OLD, 0)), Capture.model_validate(new))
    assert (loc.kind, loc.module) == ("weights", "fc2")
    assert "differ before the first step: an initialisation change" in loc.sentences()[0]


def test_with_every_output_equal_the_first_gradient_in_backward_order_is_named():
    old, new = capture_for(OLD, 2), capture_for(OLD, 2)
    new["calls"][1]["grad"] = capture_for(NEW, 2)["calls"][1]["grad"]
    loc = locate(Capture.model_validate(old), Capture.model_validate(new))
    assert (loc.kind, loc.module) == ("gradient", "fc1")
    # 0.5 + k·2**-24 is k ULPs above 0.5 (the ULP of [0.5, 1) is 2**-24)
    assert loc.max_ulp == abs(fake_shift(NEW) - fake_shift(OLD))


def test_the_referee_says_which_side_is_closer_to_float64():
    loc = locate(cap(OLD), cap(NEW))
    a, b = fake_shift(OLD) / 4, fake_shift(NEW) / 4
    sentence = loc.sentences()[1]
    assert sentence.startswith("float64 referee, on the same inputs: candidate ")
    assert sentence.endswith("the candidate is at least as accurate" if b <= a
                             else "the baseline is closer to the exact answer")


def test_a_referee_whose_replay_did_not_reproduce_is_not_believed():
    new = capture_for(NEW, 3)
    new["calls"][2]["referee"]["replay_exact"] = False
    loc = locate(cap(OLD), Capture.model_validate(new))
    assert loc.sentences()[1] == ("float64 referee unavailable: the module's replay did not "
                                  "reproduce its output")


def test_drift_shapes_amplified_systematic_and_steady():
    old = [2.0] * 5
    grown = [2.0, 2.0 + ULP2, 2.0 + 2.0 ** -18, 2.0 + 2.0 ** -14, 2.0 + 2.0 ** -10]
    shape = drift_shape(old, grown, "float32")
    assert (shape.kind, shape.first_step, shape.first_ulp) == ("amplified", 1, 1)
    assert shape.growth == [ULP2, 2.0 ** -18, 2.0 ** -14, 2.0 ** -10]
    assert shape.sentence().startswith("one first difference amplified by training: 1 ulp")
    # 0.125 above 2.0 is 0.125 / 2**-22 = 2**19 ULPs at step 0
    assert drift_shape(old, [2.125] * 5, "float32").kind == "systematic"
    assert drift_shape(old, [2.0] + [2.0 + ULP2] * 4, "float32").kind == "steady"
    assert drift_shape(old, old, "float32") is None


def test_the_located_step_is_the_first_loss_or_gradient_norm_difference():
    def run(losses, norms):
        return RunResult(schema_version=SCHEMA_VERSION, scenario="torch.mlp",
                         framework="torch", steps=len(losses), losses=losses, grad_norms=norms)

    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 2, 4], [1, 5, 1])) == 1
    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 2, 3], [1, 1, 1])) is None


@pytest.mark.parametrize("change, message", [
    (lambda c: c["calls"][1].update(parent=2), "field capture: Value error, call 1 runs inside"),
    (lambda c: c["calls"][0]["out"].update(sample="@@@@"), "is not base64"),
    (lambda c: c["calls"][0]["out"].update(sample="AAAA"), "whole float32 values"),
    (lambda c: c.update(sample=2), "keeps more than 2 values"),
    (lambda c: c["calls"][0].update(inputs="x" * 64), "inputs"),
])
def test_a_hostile_capture_is_refused_on_arrival(change, message):
    data = {"schema_version": SCHEMA_VERSION, "scenario": "torch.mlp", "framework": "torch",
            "steps": 4, "losses": [1.0] * 4, "capture": copy.deepcopy(capture_for(OLD, 3))}
    change(data["capture"])
    with pytest.raises(ResultError, match=message.replace("(", r"\(")):
        parse_result(data, "result.json")


# ------------------------------------------------------------------------------- the A/B flow

TORCH_MLP = [s for s in bundled() if s.id in ("torch.mlp", "numpy.mlp")]


@pytest.fixture
def project(tmp_path) -> Config:
    return Config(root=tmp_path, golden_dir="golden", steps=6)


def sides(tmp_path):
    return (lock(tmp_path, "old.txt", f"torch=={OLD}\nnumpy==1.26.4\n"),
            lock(tmp_path, "new.txt", f"torch=={NEW}\nnumpy==1.26.4\n"))


def test_a_torch_drift_is_located_by_re_running_its_first_divergent_step(project, tmp_path):
    old, new = sides(tmp_path)
    fake = FakeBackend()
    report = check_ab(Settings.resolve(project), [new], [old], TORCH_MLP, backend=fake)
    v = {v.scenario: v for v in report.verdicts}
    mlp = v["torch.mlp"]
    assert mlp.verdict == Verdict.drift and mlp.first_divergent_step == 1
    assert mlp.location is not None and mlp.location.module == "fc2"
    assert mlp.location.step == 1 and mlp.location.max_ulp == abs(fake_shift(OLD)
                                                                  - fake_shift(NEW))
    # the fake's losses differ by a few parts in a million from step 1: not amplified
    assert mlp.location.shape is not None and mlp.location.shape.first_step == 1
    assert any(r.startswith("the drift starts in fc2 (Linear) at step 1") for r in mlp.reasons)
    # 2 runs a side of 6 steps each, then one a side of 2 steps (steps 0 and 1); numpy is
    # identical and not located
    assert sorted(fake.steps) == [2, 2, 6, 6, 6, 6]
    assert v["numpy.mlp"].verdict == Verdict.identical and v["numpy.mlp"].location is None


def test_no_locate_re_runs_nothing_and_locate_needs_a_difference(project, tmp_path):
    old, new = sides(tmp_path)
    fake = FakeBackend()
    report = check_ab(Settings.resolve(project, Options(locate=False)), [new], [old], TORCH_MLP,
                      backend=fake)
    assert all(v.location is None for v in report.verdicts) and sorted(fake.steps) == [6] * 4
    same = FakeBackend()
    report = check_ab(Settings.resolve(project, Options(locate=True)), [old], [old], TORCH_MLP,
                      backend=same)
    assert all(v.location is None for v in report.verdicts) and sorted(same.steps) == [6] * 4


def test_the_location_is_in_every_report_format(project, tmp_path):
    old, new = sides(tmp_path)
    report = check_ab(Settings.resolve(project), [new], [old], TORCH_MLP, backend=FakeBackend())
    for fmt in FORMATS:
        text = render(report, fmt)
        assert "the drift starts in fc2" in text, fmt
    assert '"location"' in render(report, "json")


def test_the_sentence_says_how_the_outputs_differ_when_no_ulp_was_measured():
    """Three cases the ULPs cannot tell (worked out from the captures built here): the samples
    equal with the digests not (the difference lies past the sample), an output on one side
    only, and a root module whose inputs already differ (not "on equal inputs")."""
    old = capture_for(OLD, 3)
    beyond = copy.deepcopy(old)
    beyond["calls"][2]["out"]["digest"] = hashlib.sha256(b"past the sample").hexdigest()
    loc = locate(Capture.model_validate(old), Capture.model_validate(beyond))
    assert (loc.module, loc.max_ulp, loc.sampled, loc.numel) == ("fc2", None, 3, 3)
    assert "its forward output differs beyond the 3 values sampled (of 3) on equal inputs;" \
        in loc.sentences()[0]
    missing = copy.deepcopy(old)
    missing["calls"][2]["out"] = None
    assert "its forward output differs (present on one side only) on equal inputs;" \
        in locate(Capture.model_validate(missing), Capture.model_validate(old)).sentences()[0]
    fed = copy.deepcopy(beyond)
    fed["calls"][0]["inputs"] = hashlib.sha256(b"another batch").hexdigest()
    fed["calls"][0]["out"]["digest"] = beyond["calls"][2]["out"]["digest"]
    fed["calls"][2]["out"] = old["calls"][2]["out"]
    loc = locate(Capture.model_validate(old), Capture.model_validate(fed))
    assert (loc.module, loc.same_inputs) == ("(model)", False)
    assert "its forward output differs beyond the 3 values sampled (of 3) on inputs that " \
        "differ;" in loc.sentences()[0]
