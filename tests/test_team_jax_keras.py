"""The factory shape (`make(seed) -> (step, batches, probe)`) drives a flax TrainState step and a
Keras model's train_on_batch as it drives a torch step: each team's own training, registered with
`lockguard scenario add`, recorded by the CLI and checked by the lockguard_training fixture on
that golden (the lock's venv), bitwise. The flax team's upgrade, jax 0.10.0 -> 0.10.2 under flax
0.12.8 (tests/data/jax-0.10.0-flax-0.12.8.txt, compiled by uv from the 0.10.2 lock's pins), moves
its numbers (1 ULP from step 3 on the machine it was written on): caught both ways, under
`tolerance = "exact"`. The Keras team's, keras 3.14.1 -> 3.15.1 under TF 2.21.0
(tests/data/tf-2.21.0-keras-3.14.1.txt, compiled by uv from the 2.21.0 lock's other pins),
changes the losses train_on_batch returns (TF 2.20.0 -> 2.21.0 leaves this model identical):
caught both ways too. The Keras training is also driven through Model.fit (the factory
returning the compiled model and fit's arguments), with train_on_batch's numbers."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, NUMERICS_ONLY, golden_file, make_project
from test_team_code import add_exact_and_record, plugin_args
from test_team_torch import cli

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

FLAX = '''
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import linen as nn
from flax.training import train_state


class MLP(nn.Module):
    @nn.compact
    def __call__(self, x):
        return nn.Dense(1)(nn.tanh(nn.Dense(16)(x)))


def make(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = 2 * x[:, :1] - x[:, 1:2]
    model = MLP()
    state = train_state.TrainState.create(apply_fn=model.apply, tx=optax.adamw(1e-2),
                                          params=model.init(jax.random.PRNGKey(seed), x[:1]))

    @jax.jit
    def train_step(state, xb, yb):
        def loss_fn(params):
            return jnp.mean((state.apply_fn(params, xb) - yb) ** 2)
        loss, grads = jax.value_and_grad(loss_fn)(state.params)
        return state.apply_gradients(grads=grads), loss, optax.global_norm(grads)

    def step(batch):
        nonlocal state
        state, loss, norm = train_step(state, *batch)
        return {"loss": loss, "grad_norm": norm}

    batches = [(x[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    return step, batches, lambda: state.apply_fn(state.params, x[:4])
'''

KERAS = '''
import keras
import numpy as np
import tensorflow as tf


def make(seed):
    keras.utils.set_random_seed(seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((64, 8)).astype(np.float32)
    y = 2 * x[:, :1] - x[:, 1:2]
    model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="tanh"),
                              keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.AdamW(1e-2), loss="mse")
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    return (lambda batch: model.train_on_batch(*batch)), data, lambda: model(x[:4])
'''

# The same Keras training in the Model.fit shape: the factory returns the compiled model and
# fit's arguments; lockguard drives fit batch by batch (harness entry_shapes.drive_keras).
KERAS_FIT = KERAS.replace(
    "    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)\n"
    "    return (lambda batch: model.train_on_batch(*batch)), data, lambda: model(x[:4])\n",
    '    return {"model": model, "x": x, "y": y, "batch_size": 16, "shuffle": False, '
    '"probe": x[:4]}\n')

TEST = '''
import pytest


@pytest.mark.parametrize("entry", ["pkg.flax_train:make", "pkg.keras_train:make",
                                   "pkg.keras_fit:make"])
def test_our_training(lockguard_training, entry):
    report = lockguard_training(entry)
    assert [v.verdict for v in report.verdicts] == ["identical"]  # bitwise, on the CLI's golden
'''


def test_a_flax_and_a_keras_teams_trainings_share_one_golden_both_ways(pytester):
    assert KERAS_FIT != KERAS
    project = make_project(pytester.path, 'locks = ["jax.txt", "tf.txt"]\n'
                           'scenarios = ["flax-ours", "keras-ours", "keras-fit"]\n'
                           + NUMERICS_ONLY,
                           files={"pkg/__init__.py": "", "pkg/flax_train.py": FLAX,
                                  "pkg/keras_train.py": KERAS, "pkg/keras_fit.py": KERAS_FIT,
                                  "tests/test_train.py": TEST},
                           locks={"jax.txt": DATA / "jax-0.10.2-flax-0.12.8.txt",
                                  "tf.txt": DATA / "tf-2.21.0.txt"})
    for entry, framework, name in (("pkg.flax_train:make", "jax", "flax-ours"),
                                   ("pkg.keras_train:make", "tensorflow", "keras-ours"),
                                   ("pkg.keras_fit:make", "tensorflow", "keras-fit")):
        added = cli(project, "scenario", "add", entry, "--framework", framework, "--name", name,
                    "--steps", "6")
        assert added.exit_code == 0, added.output
    recorded = cli(project, "record")
    assert recorded.exit_code == 0, recorded.output
    flax = json.loads(golden_file(project, "flax-ours").read_text())["result"]
    keras = json.loads(golden_file(project, "keras-ours").read_text())["result"]
    assert len(flax["losses"]) == len(flax["grad_norms"]) == 6 and flax["output_shape"] == [4, 1]
    assert len(keras["losses"]) == 6 and keras["output_shape"] == [4, 1]
    assert flax["losses"][-1] < flax["losses"][0] and keras["losses"][-1] < keras["losses"][0]
    # Model.fit, stopped after 6 batches of its second epoch, trains as train_on_batch does on
    # the same batches: each batch's loss as Keras logs it, the probe, bit for bit.
    fit = json.loads(golden_file(project, "keras-fit").read_text())["result"]
    assert fit["losses"] == keras["losses"] and fit["outputs"] == keras["outputs"]
    assert fit["grad_norms"] == [] and fit["timings"]["first_step_s"] is not None
    run = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv")
    run.assert_outcomes(passed=3)


def caught_both_ways(pytester, module: str, source: str, framework: str, old: str,
                     new: str) -> str | None:
    """The gate's check and the fixture, on one golden of pkg/<module>.py's make recorded
    under the lock `old`, judge the PR that moves it to `new` alike: drift from the same step
    exactly when the new lock's numbers differ from the golden's bit for bit (read here from
    the check's own evidence), so that a machine that gives equal numbers on both is judged
    identical by both. Returns where the drift starts, as the gate says it (None: identical)."""
    test = f"def test_our_training(lockguard_training):\n" \
           f"    lockguard_training('pkg.{module}:make')\n"
    project = make_project(pytester.path, 'lock = "requirements.txt"\n'
                           'scenarios = ["ours"]\n' + NUMERICS_ONLY,
                           files={"pkg/__init__.py": "", f"pkg/{module}.py": source,
                                  "tests/test_train.py": test},
                           locks={"requirements.txt": DATA / old})
    golden = add_exact_and_record(project, f"pkg.{module}:make", framework, 8)
    pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv").assert_outcomes(
        passed=1)

    (project / "requirements.txt").write_text((DATA / new).read_text())  # the upgrade
    checked = cli(project, "check", "--format", "json")
    report = json.loads(checked.stdout)
    [verdict] = report["verdicts"]
    [evidence] = report["evidence"]
    result = evidence["candidate"]["result"]
    moved = any(result[key] != golden[key] for key in ("losses", "grad_norms", "outputs"))
    caught = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv")
    if not moved:
        assert (checked.exit_code, verdict["verdict"]) == (0, "identical"), checked.output
        caught.assert_outcomes(passed=1)
        return None
    assert (checked.exit_code, verdict["verdict"]) == (1, "drift"), checked.output
    where = next(r for r in verdict["reasons"] if "differ" in r or "beyond" in r).split(":")[0]
    caught.assert_outcomes(failed=1)
    caught.stdout.fnmatch_lines(["*ours: drift*", f"*{where}*", "*ULP*"])
    return where


def test_a_jax_upgrade_under_a_flax_teams_training_is_caught_both_ways(pytester):
    """jax and jaxlib 0.10.0 -> 0.10.2, flax and optax unchanged: 1 ULP from step 3 on the
    machine it was written on."""
    caught_both_ways(pytester, "flax_train", FLAX, "jax", "jax-0.10.0-flax-0.12.8.txt",
                     "jax-0.10.2-flax-0.12.8.txt")


def test_a_keras_upgrade_under_a_keras_teams_training_is_caught_both_ways(pytester):
    """keras 3.14.1 -> 3.15.1 under TensorFlow 2.21.0 (every other pin equal): Keras 3.15's
    train_on_batch resets the model's metrics first, so the loss it returns is the batch's own
    and no longer the running mean since the first call. The weights train alike (the probe's
    outputs are equal), and every loss after the first moves, on any machine: the team's
    loss curve changed, and both ways say so from step 1."""
    where = caught_both_ways(pytester, "keras_train", KERAS, "tensorflow",
                             "tf-2.21.0-keras-3.14.1.txt", "tf-2.21.0.txt")
    assert where is not None and "step 1" in where, where
