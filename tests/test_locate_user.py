"""Where a user scenario's drift starts, for torch, jax and tensorflow scripts and entries: the
globals the harness gives them (userscript.py; locate_arrays.UserCapture: lockguard_capture's
values, lockguard_locate's models), the A/B flow's decision to re-run one (flows/ab.py, read from
the script's text, never run), and, slow, the real harness in the suite's venvs: a torch model's
module calls with their float64 referee, a Keras functional model with branches and a merge
captured layer by layer through a sub-model (its gradients and referees), a jax script's
values. numpy's own protocol test is test_locate.py's."""

from __future__ import annotations

import json
import subprocess
import textwrap
from html import escape

import numpy as np
import pytest

from conftest import DATA, FRAMEWORK_LOCKS, REPO, lockguard_python, make_project
from fakes import FakeBackend, lock
from lockguard.compare.locate import locate
from lockguard.flows.ab import check_ab
from lockguard.harness._lockguard_harness.locate_arrays import HostUserCapture, ulps
from lockguard.harness._lockguard_harness.entry_shapes import entry_run
from lockguard.harness._lockguard_harness.userscript import run_script
from lockguard.names import Verdict
from lockguard.report import render
from lockguard.results import parse_result
from lockguard.settings import Settings


class _Models(HostUserCapture):
    """HostUserCapture with a model that logs when its capture opens and closes."""

    def __init__(self, wanted):
        super().__init__(wanted, np.asarray)
        self.log = []

    def open_model(self, step, model, batch):
        self.log.append(("open", step, model))
        return model

    def close_model(self, model):
        self.log.append(("close", model))

    def record(self, step, values, models):
        return {"values": [(k, a.tolist()) for k, a, _ in values], "models": models}


def test_only_the_located_step_is_recorded_and_a_model_closes_when_a_later_step_begins():
    cap = _Models(wanted=2)
    for step in range(4):
        assert cap.lockguard_locate(step, "net") == "net"
        cap.lockguard_locate(step, "net")  # registered twice in a step: opened once
        assert cap.lockguard_capture(step, "loss", np.float32(step)) == np.float32(step)
        cap.lockguard_capture(step, "loss", np.float32(10 + step))
    assert cap.log == [("open", 2, "net"), ("close", "net")]  # closed as step 3 began
    assert cap.finish() == {"values": [("loss", 2.0), ("loss#1", 12.0)], "models": ["net"]}
    long = HostUserCapture(0, np.asarray)
    long.lockguard_capture(0, "x" * 1000, 1.0)
    long.lockguard_capture(0, "x" * 1000, 2.0)
    from lockguard.results import Capture
    calls = Capture.model_validate(long.finish()).calls  # a long name is cut, not refused
    assert [len(c.name) for c in calls[1:]] == [380, 382]
    idle = _Models(wanted=None)  # not a localisation run: both are the identity, nothing kept
    assert idle.lockguard_locate(0, "net") == "net" and idle.finish() is None and not idle.log


def test_an_entry_s_factory_registers_its_model_once_and_timed_opens_and_closes_it(
        tmp_path, monkeypatch):
    """An entry's factory, whose step function is given no step number, registers its model
    once with step None; the harness's timer (which drives the factory's loop) opens the
    capture as step 1 begins and closes it as step 1 ends; values given step None are the
    timer's step's; the globals go to the entry's own module."""
    (tmp_path / "team_train.py").write_text(textwrap.dedent("""
        SEEN = []
        def lockguard_locate(step, model, batch=None):
            return model
        def lockguard_capture(step, name, value):
            return value
        def make(seed):
            model = lockguard_locate(None, "net")
            def step(batch):
                SEEN.append(model)
                return float(lockguard_capture(None, "batch", batch))
            return step, [1.0, 2.0, 3.0, 4.0]
        """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import team_train

    class Ctx:
        steps, seed = 4, 0
        result = {"losses": [], "metrics": {}}

        def record_step(self, loss, norm, seconds):
            self.result["losses"].append(loss)

    cap = _Models(wanted=1)
    run_script(Ctx(), entry_run(team_train.make, "team_train:make"), _adapter(), capture=cap)
    assert team_train.lockguard_locate == cap.lockguard_locate
    assert cap.log == [("open", 1, "net"), ("close", "net")]
    assert Ctx.result["capture"] == {"values": [("batch", 2.0)], "models": ["net"]}
    assert len(team_train.SEEN) == 4 and Ctx.result["losses"] == [1.0, 2.0, 3.0, 4.0]


def _adapter():
    from lockguard.harness._lockguard_harness.userscript import host_array_adapter
    return host_array_adapter(lambda v: isinstance(v, np.ndarray), np.asarray)


def test_values_stand_among_a_model_s_calls_where_they_were_given():
    """A value given before the model's first call comes first, one given after its second
    call third (UserCapture.position): the first difference found is the first in time."""
    from lockguard.harness._lockguard_harness.locate_arrays import interleaved

    values = [("scale", "s", 0), ("loss", "l", 2), ("late", "z", 2)]
    assert interleaved(3, values) == [("value", ("scale", "s")), ("call", 0), ("call", 1),
                                      ("value", ("loss", "l")), ("value", ("late", "z")),
                                      ("call", 2)]
    assert interleaved(0, values[:1]) == [("value", ("scale", "s"))]

def test_a_value_that_is_not_a_real_number_is_refused_by_name():
    with pytest.raises(TypeError, match=r"lockguard_capture\(0, 'flag', …\) takes real numbers"):
        HostUserCapture(0, np.asarray).lockguard_capture(0, "flag", np.array([True]))
    with pytest.raises(TypeError, match="takes a torch nn.Module or a Keras model, got str"):
        HostUserCapture(0, np.asarray).lockguard_locate(0, "not a model")


def test_ulps_from_float64_count_in_the_output_dtype_at_the_answer():
    """float32 ULP of [1, 2) is 2**-23: 1 + 2**-23 is one ULP from 1.0; 1 + 2**-24 half of one."""
    out = np.array([1.0 + 2.0 ** -23, 1.0], dtype=np.float32)
    worst, mean = ulps(out, np.array([1.0, 1.0 + 2.0 ** -24]))
    assert (worst, mean) == (1.0, 0.75)



def test_the_flow_decides_by_the_names_the_harness_gives_and_the_frameworks_that_give_them():
    """flows/ab.py reads a script for REGISTERING, never runs it: those must be the globals
    UserCapture installs, and LOCATABLE_SCRIPTS the frameworks whose run_user hands the script
    a capture (read from the harness's source: its frameworks are not installed here)."""
    import ast

    from lockguard.flows.ab import LOCATABLE_SCRIPTS, REGISTERING
    from lockguard.harness._lockguard_harness.locate_arrays import UserCapture

    assert set(REGISTERING) == {n for n in vars(UserCapture) if n.startswith("lockguard_")}
    modules = {"torch": "torch_", "jax": "jax_", "tensorflow": "tf_", "numpy": "numpy_"}
    giving = set()
    for framework, module in modules.items():
        tree = ast.parse((REPO / "lockguard" / "harness" / "_lockguard_harness"
                          / f"{module}.py").read_text())
        [run_user] = [f for f in tree.body if isinstance(f, ast.FunctionDef)
                      and f.name == "run_user"]
        if any(isinstance(n, ast.keyword) and n.arg == "capture" for n in ast.walk(run_user)):
            giving.add(framework)
    assert giving == set(LOCATABLE_SCRIPTS)

SCRIPTS = {
    "torch": "import torch\n\ndef run(steps, seed):\n    model = torch.nn.Linear(2, 1)\n"
             "    return [float(lockguard_locate(s, model)(torch.ones(2))) for s in range(steps)]\n",
    "tensorflow": "def run(steps, seed):\n    return [lockguard_capture(s, 'loss', 1.0)"
                  " for s in range(steps)]\n",
    "jax": "def run(steps, seed):\n    return [lockguard_capture(s, 'loss', 1.0)"
           " for s in range(steps)]\n",
}
PLAIN = "def run(steps, seed):\n    return [1.0] * steps\n"


def test_torch_jax_and_tf_scripts_and_entries_are_located_when_they_register(tmp_path):
    """Each framework's script that names lockguard_capture or lockguard_locate, and an entry
    whose module does, is re-run at its first divergent step on both sides; a script naming
    neither is not (the fake backend's drift and capture)."""
    from lockguard.config import load_config
    from lockguard.scenarios import select

    tables = "".join(f'[scenario.{fw}]\nscript = "{fw}.py"\nframework = "{fw}"\n'
                     f'[scenario.{fw}-plain]\nscript = "plain.py"\nframework = "{fw}"\n'
                     for fw in SCRIPTS)
    tables += '[scenario.team]\nentry = "team.train:fit"\nframework = "torch"\n'
    files = {f"{fw}.py": text for fw, text in SCRIPTS.items()}
    files.update({"plain.py": PLAIN, "team/__init__.py": "",
                  "team/train.py": SCRIPTS["torch"].replace("def run(", "def fit(")})
    project = make_project(tmp_path / "p", f'lock = "new.txt"\nsteps = 6\n{tables}',
                           files=files)
    versions = ("torch=={}\njax=={}\ntensorflow=={}\n")
    old = lock(project, "old.txt", versions.format("2.13.0", "0.4.35", "2.20.0"))
    new = lock(project, "new.txt", versions.format("2.14.1", "0.5.0", "2.21.0"))
    config = load_config(project / "pyproject.toml")
    fake = FakeBackend()
    registering = {"torch", "jax", "tensorflow", "team"}
    ids = sorted(registering | {f"{fw}-plain" for fw in SCRIPTS})
    report = check_ab(Settings.resolve(config), [new], [old], select(config, ids), backend=fake)
    v = {v.scenario: v for v in report.verdicts}
    assert {s for s, x in v.items() if x.verdict == Verdict.drift} == set(v), v
    assert {s for s, x in v.items() if x.location is not None} == registering
    located = sorted(sid for (sid, _), n in zip(fake.runs, fake.steps) if n != 6)
    assert located == sorted(2 * list(registering))
    # the HTML report's |Δloss| chart of each, captioned with the drift's shape (the fake's
    # few-ULP drift from step 1 on), as a bundled torch scenario's is
    html = render(report, "html")
    for sid in registering:
        shape = v[sid].location.shape
        assert shape is not None and f"loss difference of {sid}" in html
        assert escape(shape.sentence()) in html, sid


# ------------------------------------------------------------------- the real harness (slow)

TORCH = """
import torch

def lockguard_capture(step, name, value):   # run by hand; lockguard replaces them
    return value

def lockguard_locate(step, model, batch=None):
    return model

def run(steps, seed, timed=iter):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 8)
    y = x[:, :1] * 2
    losses = []
    lockguard_locate(None, model)   # once: captured in the step `timed` is in when located
    for step in timed(range(steps)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(lockguard_capture(step, "loss", loss.detach()).item())
    return {"losses": losses, "outputs": model(x[:2]).detach()}
"""

KERAS = """
import keras
import numpy as np

def lockguard_locate(step, model, batch=None):   # run by hand; lockguard replaces it
    return model

def run(steps, seed):
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = (2 * x[:, :1] - x[:, 1:2]).astype(np.float32)
    i = keras.Input((8,))
    left = keras.layers.Dense(16, activation="tanh", name="left")(i)
    right = keras.layers.Dense(16, name="right")(i)
    merged = keras.layers.Add(name="merge")([left, right])
    model = keras.Model(i, keras.layers.Dense(1, name="head")(merged))
    model.compile(optimizer=keras.optimizers.SGD(0.05), loss="mse")
    losses = []
    for step in range(steps):
        lockguard_locate(step, model, (x, y))
        losses.append(float(model.train_on_batch(x, y)))
    return losses
"""

JAX = """
import jax
import jax.numpy as jnp

def lockguard_capture(step, name, value):   # run by hand; lockguard replaces it
    return value

def run(steps, seed):
    w = jax.random.normal(jax.random.PRNGKey(seed), (8, 1))
    x = jnp.linspace(-1, 1, 64).reshape(8, 8)
    loss_fn = lambda w: jnp.mean((x @ w - x[:, :1]) ** 2)
    losses = []
    for step in range(steps):
        loss, g = jax.value_and_grad(loss_fn)(w)
        w = lockguard_capture(step, "w", w - 0.1 * lockguard_capture(step, "grad", g))
        losses.append(float(loss))
    return losses
"""


def _located_run(tmp_path, framework, lock_file, script, steps, step):
    path, out = tmp_path / f"{framework}.py", tmp_path / f"{framework}.json"
    path.write_text(script)
    proc = subprocess.run([str(lockguard_python(lock_file)),
                           str(REPO / "lockguard" / "harness" / "run.py"), "--scenario", "u",
                           "--script", str(path), "--framework", framework, "--steps",
                           str(steps), "--locate-step", str(step), "--out", str(out)],
                          capture_output=True, text=True, timeout=300,
                          env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    result = parse_result(json.loads(out.read_text()), out.name)
    assert result.status == "ok", result.error
    return result


@pytest.mark.slow
def test_a_torch_script_s_registered_model_is_captured_module_by_module(tmp_path):
    """torch 2.13.0 (the suite's torch venv): a model registered once, before the loop; its
    calls of step 2 only (timed opens the capture as the step begins and closes it as the step
    ends: the probe after the loop is not recorded), each with its gradient and a float64
    referee that reproduced; the script's loss value beside them."""
    result = _located_run(tmp_path, "torch", FRAMEWORK_LOCKS["torch"], TORCH, 3, 2)
    calls = result.capture.calls
    assert [(c.name, c.type, c.parent) for c in calls] == [
        ("(model)", "Sequential", -1), ("0", "Linear", 0), ("1", "Tanh", 0),
        ("2", "Linear", 0), ("loss", "float32", -1)]
    assert all(c.grad is not None for c in calls[:4])
    assert all(c.referee.replay_exact and c.referee.max_ulp < 8 for c in calls[:4])
    assert calls[4].out.values() == [result.losses[2]]
    assert locate(result.capture, result.capture).kind == "none"


@pytest.mark.slow
def test_a_keras_functional_model_with_a_merge_is_captured_layer_by_layer(tmp_path):
    """keras 3.15.1 on tf 2.21.0: a model with two branches and an Add, registered with its
    batch: every variable, then each layer (left, right, merge, head) with the inputs it was
    given, the compiled loss's gradient at it, and a float64 clone's referee."""
    result = _located_run(tmp_path, "tensorflow", FRAMEWORK_LOCKS["tensorflow"], KERAS, 3, 1)
    calls = {c.name: c for c in result.capture.calls}
    assert list(calls) == ["(model)", "left/kernel", "left/bias", "right/kernel", "right/bias",
                           "head/kernel", "head/bias", "left", "right", "merge", "head"]
    assert calls["left"].inputs == calls["right"].inputs != calls["merge"].inputs
    for name, kind in (("left", "Dense"), ("right", "Dense"), ("merge", "Add"),
                       ("head", "Dense")):
        call = calls[name]
        assert call.type == kind and call.out.shapes == [[32, 16 if name != "head" else 1]]
        assert call.grad is not None, name
        assert call.referee.replay_exact and call.referee.max_ulp < 8, (name, call.referee)


@pytest.mark.slow
def test_a_jax_script_s_values_are_recorded_as_host_arrays(tmp_path):
    """jax 0.10.2 (the suite's jax venv): jax arrays given to lockguard_capture at step 1 are
    recorded in call order with their dtype and shape."""
    result = _located_run(tmp_path, "jax", FRAMEWORK_LOCKS["jax"], JAX, 3, 1)
    assert [(c.name, c.type, c.out.shapes) for c in result.capture.calls[1:]] == [
        ("grad", "float32", [[8, 1]]), ("w", "float32", [[8, 1]])]


@pytest.mark.slow
def test_flax_dense_layers_get_a_float64_referee_and_the_run_trains_the_same(tmp_path):
    """flax 0.12.8 on jax 0.10.2 (test_team_jax_keras's venv): flax.mlp located at step 1
    gives each Dense tap a referee that reproduced its output and lies a few ULPs from the
    float64 answer (x64 mode); the tanh tap (no layer) has none; the run's numbers are a plain
    run's."""
    lock_file = DATA / "jax-0.10.2-flax-0.12.8.txt"
    runs = []
    for locate_step in (None, 1):
        out = tmp_path / f"flax-{locate_step}.json"
        extra = [] if locate_step is None else ["--locate-step", str(locate_step)]
        proc = subprocess.run([str(lockguard_python(lock_file)),
                               str(REPO / "lockguard" / "harness" / "run.py"), "--scenario",
                               "flax.mlp", "--framework", "jax", "--steps", "3", "--out",
                               str(out), *extra], capture_output=True, text=True, timeout=300,
                              env={"PATH": "/usr/bin:/bin"})
        assert proc.returncode == 0, proc.stderr[-2000:]
        runs.append(parse_result(json.loads(out.read_text()), out.name))
    plain, located = runs
    assert (plain.losses, plain.param_digest) == (located.losses, located.param_digest)
    taps = {c.name: c for c in located.capture.calls if c.params is None}
    assert taps["tanh"].referee is None
    for name in ("Dense_0", "Dense_1"):
        referee = taps[name].referee
        assert referee.error is None and referee.replay_exact, (name, referee)
        assert 0 < referee.max_ulp < 8 and referee.mean_ulp <= referee.max_ulp, referee


TORCH_NEP50 = """
import numpy as np
import torch

def lockguard_capture(step, name, value):   # run by hand; lockguard replaces them
    return value

def lockguard_locate(step, model, batch=None):
    return model

def run(steps, seed, timed=iter):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x = torch.randn(32, 8)
    y = x[:, :1] * 2
    lockguard_locate(None, model)
    losses = []
    for step in timed(range(steps)):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        # the loss reported with a penalty worked out in numpy: a float32 scalar times a
        # Python float is float64 under numpy 1, float32 under numpy 2 (NEP 50)
        penalty = lockguard_capture(step, "penalty", np.float32(loss.item()) * 0.01)
        losses.append(loss.item() + float(penalty))
    return losses
"""


@pytest.mark.slow
def test_a_torch_script_s_nep50_drift_is_located_to_its_value_its_model_equal(tmp_path):
    """torch 2.13.0 with numpy 1.26.4 → 2.0.2 (the suite's two torch venvs): a torch user
    script whose reported loss adds a penalty worked out in numpy drifts from step 0; the A/B
    re-runs step 0 on both sides with the registered model hooked and the penalty registered,
    and names `penalty` (float64 → float32), every call of the model equal (the training
    itself did not change). In process, as the flow runs under `check --baseline-lock`."""
    from conftest import NUMERICS_ONLY
    from lockguard.config import load_config
    from lockguard.locks.ref import LockRef, load_locks, lock_target, read_lock
    from lockguard.scenarios import select

    project = make_project(tmp_path / "p", f"""
        lock = "new.txt"
        {NUMERICS_ONLY}
        [scenario.scaled]
        script = "scaled.py"
        framework = "torch"
        steps = 4
        tolerance = "exact"
        """, files={"scaled.py": TORCH_NEP50},
        locks={"old.txt": DATA / "torch-2.13.0-numpy-1.26.4.txt",
               "new.txt": FRAMEWORK_LOCKS["torch"]})
    config = load_config(project / "pyproject.toml")
    old = LockRef(project / "old.txt", read_lock(project / "old.txt", lock_target(config)))
    report = check_ab(Settings.resolve(config), load_locks(config, []), [old],
                      select(config, ["scaled"]))
    [v] = report.verdicts
    assert v.verdict == Verdict.drift, v.reasons
    where = v.location
    assert where is not None, v.reasons
    assert (where.kind, where.step, where.module, where.module_type, where.candidate_type) == (
        "forward", 0, "penalty", "float64", "float32"), where
    # the model's 4 calls (Sequential, Linear, Tanh, Linear) and the value were compared
    assert (where.compared, where.later_differing) == (5, 0), where
    assert any(r.startswith("the drift starts in penalty (float64 → float32) at step 0")
               for r in v.reasons), v.reasons
