"""Where a drift starts (compare/locate.py): two sides' captures of one step compared module by
module, the drift's shape, the capture's validation on arrival, and the A/B flow that re-runs the
first divergent step on the fake backend (tests/fakes.py capture_for). Every expected figure is
worked out by hand: in float32, 2.0 + k·2**-22 is k ULPs above 2.0 (the ULP of [2, 4) is 2**-22).
The harness's real capture: torch's in test_model_libraries.py (slow), jax's at the end of this
file (slow: jax 0.5.0's random streams)."""

from __future__ import annotations

import copy
import hashlib
import json
import math
import struct
import subprocess
import sys
import textwrap

import pytest

from conftest import DATA, NUMERICS_ONLY, REPO, make_project
from fakes import FakeBackend, capture_for, fake_shift, lock
from lockguard.compare.locate import drift_shape, locate, locate_step
from lockguard.compare.verdicts import with_location
from lockguard.config import Config, Options
from lockguard.flows.ab import LOCATABLE, PROBE_LOCATABLE, check_ab
from lockguard.flows.check import check
from lockguard.flows.record import record
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


def test_a_module_whose_class_changed_says_the_implementation_changed():
    """transformers 4.46.3's GPT-2 runs GPT2SdpaAttention where 4.40.2 ran GPT2Attention, under
    the same module name: the calls pair by name, and the location carries both classes. A
    values capture's types are dtypes: another dtype is a promotion, not other code."""
    new = capture_for(NEW, 3)
    new["calls"][2]["type"] = "SdpaLinear"
    loc = locate(cap(OLD), Capture.model_validate(new))
    assert (loc.module, loc.module_type, loc.candidate_type) == ("fc2", "Linear", "SdpaLinear")
    assert loc.sentences()[0].startswith(
        "the drift starts in fc2 (Linear → SdpaLinear: the implementation changed) at step 3")
    for old_type, new_type in (("float64", "float32"), ("parameter float32[3]", "Linear")):
        a, b = capture_for(OLD, 3), capture_for(NEW, 3)
        a["calls"][2]["type"], b["calls"][2]["type"] = old_type, new_type
        where = locate(Capture.model_validate(a), Capture.model_validate(b)).sentences()[0]
        assert f"fc2 ({old_type} → {new_type}) at step 3" in where, where


def test_a_located_amplified_drift_says_everything_after_is_that_difference_amplified(
        project, tmp_path):
    """Issue 46's sentence: the first module, its ULPs, and "everything after is that
    difference amplified" when the loss difference grew from a tiny first one; not said of a
    steady or systematic drift. In every report format (the reasons carry it)."""
    old_losses = [2.0] * 5
    grown = [2.0, 2.0 + ULP2, 2.0 + 2.0 ** -18, 2.0 + 2.0 ** -14, 2.0 + 2.0 ** -10]
    loc = locate(cap(OLD, 1), cap(NEW, 1))
    loc.shape = drift_shape(old_losses, grown, "float32")
    where, *rest = loc.sentences()
    assert where.startswith("the drift starts in fc2 (Linear) at step 1: its forward output "
                            f"differs by max {abs(fake_shift(OLD) - fake_shift(NEW))} ulp")
    assert where.endswith("compared differ too (downstream), and everything after is that "
                          "difference amplified")
    assert rest[-1].startswith("one first difference amplified by training: 1 ulp of loss at "
                               "step 1")
    # Where the call's inputs already differed, the first difference came in with them: no
    # "that difference amplified"; and a difference within tolerance is no drift.
    loc.same_inputs = False
    assert "on inputs that differ" in loc.sentences()[0]
    assert "everything after" not in loc.sentences()[0]
    loc.same_inputs = None
    assert loc.sentences(drift=False)[0].startswith("the difference starts in fc2 (Linear)")
    loc.shape = drift_shape(old_losses, [2.0] + [2.0 + ULP2] * 4, "float32")
    assert loc.shape.kind == "steady" and "amplified" not in loc.sentences()[0]
    old, new = sides(tmp_path)
    report = check_ab(Settings.resolve(project, Options(locate=False)), [new], [old], TORCH_MLP,
                      backend=FakeBackend())
    loc.shape = drift_shape(old_losses, grown, "float32")
    report = report.model_copy(update={"verdicts": [
        with_location(v, loc) if v.scenario == "torch.mlp" else v for v in report.verdicts]})
    for fmt in FORMATS:
        # the text format wraps its lines
        assert "and everything after is that difference amplified" in " ".join(
            render(report, fmt).split()), fmt


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
    # 2.0 + 2**-30 rounds to 2.0 in float32 (a float64 loss against a float32 one: NEP 50's)
    below = drift_shape(old, [2.0 + 2.0 ** -30, 2.0 + 2.0 ** -20] + [2.0 + 2.0 ** -10] * 3,
                        "float32")
    assert (below.kind, below.first_ulp) == ("amplified", 0)
    assert below.sentence().startswith("one first difference amplified by training: under 1 "
                                       "ulp of loss at step 0")


def test_the_located_step_is_the_first_loss_or_gradient_norm_difference():
    def run(losses, norms):
        return RunResult(schema_version=SCHEMA_VERSION, scenario="torch.mlp",
                         framework="torch", steps=len(losses), losses=losses, grad_norms=norms)

    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 2, 4], [1, 5, 1])) == 1
    assert locate_step(run([1, 2, 3], [1, 1, 1]), run([1, 2, 3], [1, 1, 1])) is None
    # the probe outputs alone differ: the probe (step = steps), where the harness captures it
    a, b = run([1, 2, 3], [1, 1, 1]), run([1, 2, 3], [1, 1, 1])
    a.outputs, b.outputs = [0.5, 0.25], [0.5, 0.75]
    assert locate_step(a, b, probe=True) == 3 and locate_step(a, b) is None
    assert locate_step(a, a, probe=True) is None
    # runs of other lengths: their probes follow other trainings, nothing to locate
    assert locate_step(a, run([1, 2, 3, 4], [1, 1, 1, 1]), probe=True) is None


@pytest.mark.parametrize("change, message", [
    (lambda c: c["calls"][1].update(parent=2), "field capture: Value error, call 1 runs inside"),
    (lambda c: c["calls"][0]["out"].update(sample="@@@@"), "is not base64"),
    (lambda c: c["calls"][0]["out"].update(sample="AAAA"), "whole float32 values"),
    (lambda c: c.update(sample=2), "keeps more than 2 values"),
    (lambda c: c["calls"][0].update(inputs="x" * 64), "inputs"),
    # names a report prints: one line, no terminal escape sequences
    (lambda c: c["calls"][2].update(type="Linear\n- forged"), "type"),
    (lambda c: c["calls"][2].update(name="fc2\x1b]8;;http://x\x07"), "name"),
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


def test_a_difference_in_the_probe_alone_is_located_in_the_probe(project, tmp_path):
    """Equal losses and gradient norms, other probe outputs (transformers 4.40.2 -> 4.46.3's
    GPT-2 on the CPU): the localisation runs train every step and capture the probe's forward;
    the sentence says so. A jax scenario's probe is not captured (PROBE_LOCATABLE): not
    re-run."""
    old, new = sides(tmp_path)
    fake = FakeBackend()
    fake.behaviour = {("torch.mlp", v): "probe-only" for v in (OLD, NEW)}
    report = check_ab(Settings.resolve(project), [new], [old], TORCH_MLP, backend=fake)
    mlp = {v.scenario: v for v in report.verdicts}["torch.mlp"]
    assert mlp.verdict == Verdict.drift and mlp.first_divergent_step is None, mlp.reasons
    where = mlp.location
    assert where is not None and where.probe and where.shape is None, mlp.reasons
    assert (where.kind, where.module, where.step) == ("forward", "fc2", 6)
    assert any(r.startswith("the drift starts in fc2 (Linear) in the probe (the eval-mode forward "
                            "after the 6 training steps, whose losses and gradient norms are "
                            "equal on both sides): its forward output differs by max")
               for r in mlp.reasons), mlp.reasons
    assert sorted(fake.steps) == [6] * 6  # the localisation runs train all 6 steps
    for fmt in FORMATS:  # the text format wraps its lines
        assert "fc2 (Linear) in the probe (the eval-mode forward" in " ".join(
            render(report, fmt).split()), fmt
    assert '"probe": true' in render(report, "json")
    assert PROBE_LOCATABLE <= LOCATABLE
    jax_old = lock(tmp_path, "jax-old.txt", "jax==0.9.2\njaxlib==0.9.2\n")
    jax_new = lock(tmp_path, "jax-new.txt", "jax==0.10.2\njaxlib==0.10.2\n")
    fake = FakeBackend()
    fake.behaviour = {("jax.mlp", v): "probe-only" for v in ("0.9.2", "0.10.2")}
    jax = [s for s in bundled() if s.id == "jax.mlp"]
    report = check_ab(Settings.resolve(project), [jax_new], [jax_old], jax, backend=fake)
    assert report.verdicts[0].verdict == Verdict.drift and report.verdicts[0].location is None
    assert sorted(fake.steps) == [6, 6]  # its two runs, no localisation


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


def test_locate_against_the_goldens_says_it_located_nothing(project, tmp_path):
    # A golden holds numbers, not an environment: --locate is an A/B's, and says so.
    _, new = sides(tmp_path)
    assert record(Settings.resolve(project), [new], TORCH_MLP, backend=FakeBackend()).passed
    asked = check(Settings.resolve(project, Options(locate=True, rerun=True)), [new], TORCH_MLP,
                  backend=FakeBackend())
    assert any(n.startswith("--locate compares two environments' runs") for n in asked.notes)
    plain = check(Settings.resolve(project, Options(rerun=True)), [new], TORCH_MLP,
                  backend=FakeBackend())
    assert not any("--locate" in n for n in plain.notes)


def test_a_compiled_or_data_parallel_scenario_is_not_located(project, tmp_path):
    # Hooks would break torch.compile's graph: the step re-run would not be the drifted one.
    old, new = sides(tmp_path)
    chosen = [s for s in bundled() if s.id in ("torch.mlp.compile", "torch.ddp")]
    assert {s.reach for s in chosen} == {"compiler", "parallel"}
    fake = FakeBackend()
    report = check_ab(Settings.resolve(project, Options(locate=True, all_scenarios=True)),
                      [new], [old], chosen, backend=fake)
    assert {v.verdict for v in report.verdicts} == {Verdict.drift}
    assert all(v.location is None for v in report.verdicts)
    assert 2 not in fake.steps  # no step re-run


# --------------------------------------------------- jax, flax, tf and keras: leaves and taps

def _layers(shift_ulps: int, b1: float = 0.5) -> tuple[dict, list]:
    """A two-layer step as locate_jax.py / locate_tf.py hand it to locate_arrays.record: the
    leaves (w1, b1) and the taps fc1 → fc2, fc2's second value `shift_ulps` ULPs above 2.0."""
    import numpy as np

    leaves = {"w1": np.array([[1.0, 2.0]], dtype=np.float32),
              "b1": np.array([b1], dtype=np.float32)}
    x = np.array([0.25, 0.5], dtype=np.float32)
    fc1 = np.array([1.5, 2.5], dtype=np.float32)
    fc2 = np.array([1.0, 2.0 + shift_ulps * ULP2, 3.0], dtype=np.float32)
    ones = np.ones(3, dtype=np.float32)
    return leaves, [("fc1", "Linear", fc1, [x], np.array([0.5, 0.5], dtype=np.float32)),
                    ("fc2", "Linear", fc2, [fc1], ones)]


def test_a_jax_or_tf_capture_names_the_first_differing_leaf_then_the_first_layer():
    """locate_arrays.record (the harness's, run here on numpy) in the contract the host reads:
    a parameter leaf that differs at step 0 is an initialisation change (jax 0.5.0's random
    streams), named by its leaf; with equal leaves, fc2's output 5 ULPs apart on equal inputs
    (2.0 + 5·2**-22 is 5 float32 ULPs above 2.0)."""
    from lockguard.harness._lockguard_harness import locate_arrays, locate_jax, locate_tf

    def captured(step, shift, b1=0.5):
        leaves, taps = _layers(shift, b1)
        return Capture.model_validate(locate_arrays.record(step, "jax.rng", leaves, taps))

    init = locate(captured(0, 0), captured(0, 0, b1=0.75))
    assert (init.kind, init.module, init.module_type, init.step) == (
        "weights", "b1", "parameter float32[1]", 0)
    assert init.sentences()[0] == ("the weights of b1 (parameter float32[1]) differ before the "
                                   "first step: an initialisation change, not a kernel change")
    kernel = locate(captured(2, 0), captured(2, 5))
    assert (kernel.kind, kernel.module, kernel.max_ulp, kernel.numel) == ("forward", "fc2", 5, 3)
    assert kernel.same_inputs is True and kernel.later_differing == 0
    assert [c.grad_order for c in captured(2, 0).calls] == [None, None, None, 1, 0]
    assert locate(captured(2, 5), captured(2, 5)).kind == "none"
    # a float64 value against the float32 one it rounds to: the digests differ, the float32
    # samples agree (NEP 50's EMA); the sentence says where the difference lies
    leaves, taps = _layers(0)
    wide = [taps[0], ("fc2", "Linear", taps[1][2].astype("float64"), taps[1][3], taps[1][4])]
    nep50 = locate(captured(0, 0), Capture.model_validate(
        locate_arrays.record(0, "jax.rng", leaves, wide)))
    assert (nep50.module, nep50.max_ulp, nep50.module_type) == ("fc2", None, "Linear")
    assert nep50.sentences()[0].startswith(
        "the drift starts in fc2 (Linear) at step 0: its forward output differs beyond its "
        "first 3 of 3 values as float32 (they agree) on equal inputs")
    # outside a capture a tap hands back what it was given: the training's program unchanged
    marker = object()
    assert locate_jax.tap("fc1", "Linear", marker) is marker
    assert locate_tf.tap("fc1", "Linear", marker) is marker


def test_a_layer_tapped_twice_is_paired_by_its_occurrence():
    from lockguard.harness._lockguard_harness.locate_arrays import occurrence

    assert [occurrence("blk", ["blk"] * n) for n in range(3)] == ["blk", "blk#1", "blk#2"]
    assert occurrence("blk", ["blk.attn", "other"]) == "blk"


def test_jax_and_keras_drifts_are_located_in_the_ab_flow(project, tmp_path):
    """The bundled jax, flax and Keras scenarios are located as torch's are (flows/ab.py
    LOCATABLE); a user script's is not (its model is not the harness's to tap)."""
    libraries = "numpy==1.26.4\nkeras==3.15.1\nflax==0.12.8\noptax==0.2.5\n"
    old = lock(tmp_path, "old.txt", f"jax==0.4.35\ntensorflow==2.20.0\n{libraries}")
    new = lock(tmp_path, "new.txt", f"jax==0.5.0\ntensorflow==2.21.0\n{libraries}")
    scenarios = [s for s in bundled()
                 if s.id in ("jax.rng", "flax.mlp", "keras.cnn", "tf.keras")]
    fake = FakeBackend()
    report = check_ab(Settings.resolve(project), [new], [old], scenarios, backend=fake)
    for v in report.verdicts:
        assert v.verdict == Verdict.drift and v.location is not None, v
        assert v.location.module == "fc2" and v.location.step == v.first_divergent_step
    # per scenario a run a side of 6 steps, then one a side to the first divergent step
    assert len(report.verdicts) == 4
    assert sorted(fake.steps).count(6) == 8 and len(fake.steps) == 16


# A NEP 50 user scenario that registers its intermediates (numpy_.py's lockguard_capture): the
# EMA's `0.1 * raw` is float64 under numpy 1's value-based casting, float32 under NEP 50.
NEP50_SCRIPT = textwrap.dedent("""
    import math

    import numpy as np


    def lockguard_capture(step, name, value):  # run by hand; the harness replaces it
        return value


    def run(steps, seed):
        ema = np.float32(0.0)
        losses = []
        for step in range(steps):
            raw = lockguard_capture(step, "raw", np.float32(2.0 * math.exp(-0.05 * step)))
            ema = lockguard_capture(step, "ema", ema * np.float32(0.9) + 0.1 * raw)
            losses.append(float(ema))
        return losses
    """)


def test_a_numpy_script_registers_the_values_of_the_located_step_only(tmp_path):
    """The real harness (run.py, numpy_.py) on this interpreter's numpy (2.x: NEP 50): the
    registered values of step 2 alone, in call order, each with its dtype as its type."""
    script, out = tmp_path / "nep50.py", tmp_path / "r.json"
    script.write_text(NEP50_SCRIPT)
    proc = subprocess.run([sys.executable, str(REPO / "lockguard" / "harness" / "run.py"),
                           "--scenario", "nep50", "--script", str(script), "--framework",
                           "numpy", "--steps", "4", "--locate-step", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = parse_result(json.loads(out.read_text()), "r.json")
    assert result.status == "ok" and len(result.losses) == 4, result.error
    calls = result.capture.calls
    assert [(c.name, c.type) for c in calls] == [
        ("(model)", "user script"), ("raw", "float32"), ("ema", "float32")]
    assert result.capture.step == 2
    # raw at step 2 is float32(2·e^-0.1), as the script computes it; kept as its float32 bits
    expected = struct.unpack("<f", struct.pack("<f", 2.0 * math.exp(-0.05 * 2)))[0]
    assert calls[1].out.values() == [expected] and calls[2].out.values() == [result.losses[2]]


def test_a_numpy_script_is_located_only_when_it_registers_values(tmp_path):
    """A numpy user scenario that names lockguard_capture is re-run at its first divergent step
    on both sides (the fake's capture names fc2); one that registers nothing is not re-run."""
    from lockguard.config import load_config
    from lockguard.scenarios import select

    plain = "def run(steps, seed):\n    return [1.0] * steps\n"
    project = make_project(tmp_path / "p", """
        lock = "new.txt"
        steps = 6
        [scenario.nep50]
        script = "nep50.py"
        framework = "numpy"
        [scenario.plain]
        script = "plain.py"
        framework = "numpy"
        """, files={"nep50.py": NEP50_SCRIPT, "plain.py": plain})
    old = lock(project, "old.txt", "numpy==1.26.4\n")
    new = lock(project, "new.txt", "numpy==2.0.2\n")
    config = load_config(project / "pyproject.toml")
    fake = FakeBackend()
    report = check_ab(Settings.resolve(config), [new], [old], select(config, []), backend=fake)
    v = {v.scenario: v for v in report.verdicts}
    assert v["nep50"].verdict == v["plain"].verdict == Verdict.drift
    assert v["nep50"].location is not None and v["nep50"].location.module == "fc2"
    assert v["plain"].location is None
    # the localisation runs (shorter than 6 steps): nep50's, one a side
    assert [sid for (sid, _), n in zip(fake.runs, fake.steps) if n != 6] == ["nep50", "nep50"]


@pytest.mark.slow
def test_jax_0_5_rng_change_is_located_as_an_initialisation_change(tmp_path):
    """jax 0.4.35 → 0.5.0 (numpy 1.26.4 → 2.0.2 along) changes jax.random's streams: jax.rng's
    weights, drawn from PRNGKey(seed), differ before the first step. The A/B re-runs step 0 on
    both sides with every leaf and layer captured (harness locate_jax.py) and names the first
    leaf, w1, as an initialisation change, not a kernel change; the drift is systematic. The
    locks are test_bisect's coupled case's, so CI has their venvs built already. In process
    (real venvs), as the flow runs under `check --baseline-lock`."""
    from lockguard.config import load_config
    from lockguard.locks.ref import LockRef, load_locks, lock_target, read_lock
    from lockguard.scenarios import select

    project = make_project(tmp_path / "p", f'lock = "new.txt"\n{NUMERICS_ONLY}\n', locks={
        "old.txt": DATA / "jax-0.4.35-numpy-1.26.4.txt",
        "new.txt": DATA / "jax-0.5.0-numpy-2.0.2.txt"})
    config = load_config(project / "pyproject.toml")
    old = LockRef(project / "old.txt", read_lock(project / "old.txt", lock_target(config)))
    report = check_ab(Settings.resolve(config), load_locks(config, []), [old],
                      select(config, ["jax.rng"]))
    [v] = report.verdicts
    assert v.verdict == Verdict.drift and v.first_divergent_step == 0, v.reasons
    where = v.location
    assert where is not None, v.reasons
    assert (where.kind, where.step, where.module, where.module_type) == (
        "weights", 0, "w1", "parameter float32[32, 16]"), where
    assert where.shape is not None and where.shape.kind == "systematic", where.shape
    assert ("the weights of w1 (parameter float32[32, 16]) differ before the first step: an "
            "initialisation change, not a kernel change") in v.reasons


@pytest.mark.slow
def test_numpy_2_nep50_is_located_to_the_first_value_whose_dtype_changed(tmp_path):
    """numpy 1.26.4 → 2.0.2 with a user scenario that registers its values: the A/B re-runs the
    first divergent step on both sides and names `ema` (float64 → float32), `raw` being equal.
    numpy-only locks: two small venvs."""
    from lockguard.config import load_config
    from lockguard.locks.ref import LockRef, load_locks, lock_target, read_lock
    from lockguard.scenarios import select

    project = make_project(tmp_path / "p", f"""
        lock = "new.txt"
        {NUMERICS_ONLY}
        [scenario.nep50]
        script = "nep50.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"nep50.py": NEP50_SCRIPT},
        locks={"old.txt": DATA / "numpy-1.26.4.txt", "new.txt": DATA / "numpy-2.0.2.txt"})
    config = load_config(project / "pyproject.toml")
    old = LockRef(project / "old.txt", read_lock(project / "old.txt", lock_target(config)))
    report = check_ab(Settings.resolve(config), load_locks(config, []), [old],
                      select(config, ["nep50"]))
    [v] = report.verdicts
    assert v.verdict == Verdict.drift, v.reasons
    where = v.location
    assert where is not None, v.reasons
    assert (where.kind, where.module, where.module_type, where.candidate_type) == (
        "forward", "ema", "float64", "float32"), where
    assert where.step == v.first_divergent_step and where.later_differing == 0
    assert any(r.startswith(f"the drift starts in ema (float64 → float32) at step {where.step}")
               for r in v.reasons), v.reasons


def test_the_sentence_says_how_the_outputs_differ_when_no_ulp_was_measured():
    """Three cases the ULPs cannot tell (worked out from the captures built here): the samples
    equal with the digests not (the difference lies past the sample), an output on one side
    only, and a root module whose inputs already differ (not "on equal inputs")."""
    old = capture_for(OLD, 3)
    beyond = copy.deepcopy(old)
    beyond["calls"][2]["out"]["digest"] = hashlib.sha256(b"past the sample").hexdigest()
    loc = locate(Capture.model_validate(old), Capture.model_validate(beyond))
    assert (loc.module, loc.max_ulp, loc.sampled, loc.numel) == ("fc2", None, 3, 3)
    assert ("its forward output differs beyond its first 3 of 3 values as float32 (they agree) "
            "on equal inputs;") in loc.sentences()[0]
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
    assert ("its forward output differs beyond its first 3 of 3 values as float32 (they agree) "
            "on inputs that differ;") in loc.sentences()[0]
