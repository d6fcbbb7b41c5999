"""What `lockguard init` writes besides the config: the GitHub workflow that uses the action, and
the scenario template that trains the team's own model. One place for each, so that the
workflow follows the action's inputs (action.yml) and the example gate
(.github/workflows/lock-gate.yml): tests/test_init.py holds them together.

Texts only; init/plan.py decides what goes in them and where they are written.
"""

from __future__ import annotations

import json

# Where the action is published; the workflow names it (`lockguard init --action` for another).
ACTION = "your-org/lockguard@v1"
WORKFLOW_PATH = ".github/workflows/lockguard.yml"

# The push trigger's paths: those of the example gate (lock-gate.yml), which re-runs the
# scenarios on the main branch only when a lock, the config or a golden changed.
PUSH_PATHS = ("**/requirements*.txt", "**/*.lock", "**/pylock*.toml", "**/pyproject.toml",
              "**/lockguard.toml", "**/golden/**")

_WORKFLOW = """\
# lockguard: the gate on the ML dependency locks (written by `lockguard init`).
#
# On a pull request (and in a merge queue) the action A/B-checks the locks at the merge base
# against the branch's and fails on drift, a compile or device fallback or a broken run (the
# config's fail_on; slower and heavier are reported); a pull request that changes no lock (nor
# scenario code) passes at once, from git alone, so this check can be
# a required one (no `paths:` filter on pull requests: a path-filtered required check waits
# forever on the pull requests it skips). It writes the job summary, annotates the changed lock
# lines, keeps one pull-request comment up to date and uploads the reports with the evidence
# that `lockguard accept --from` reads. A push to {branch_name} re-runs the scenarios against the
# goldens when a lock changed, which warms the cache that pull requests restore.
name: lockguard

on:
  pull_request:
    # edited: a pull request retargeted to another base branch is judged again, by that
    # branch's gate (the default types leave the old check on the head commit). A title
    # edit re-runs it too: a job skipped by an `if:` would count as passed.
    types: [opened, synchronize, reopened, edited]
  merge_group:
  push:
    branches: [{branch}]
    paths: [{paths}]
  workflow_dispatch:

permissions:
  contents: read
  pull-requests: write  # the comment; a fork's pull request gets a read-only token and none

concurrency:
  group: lockguard-${{{{ github.ref }}}}
  cancel-in-progress: true

jobs:
  gate:
    runs-on: ubuntu-latest
    timeout-minutes: 90
    steps:
      - uses: actions/checkout@v5
      - uses: {action}
        with:
{inputs}"""


def workflow(*, action: str, branch: str, python: str, working_directory: str) -> str:
    """The workflow file: the example gate's triggers and permissions, the action with the
    inputs this project needs (its folder in the repository, the Python its goldens were
    recorded with)."""
    inputs = {"python-version": python}
    if working_directory not in ("", "."):
        inputs = {"working-directory": working_directory, **inputs}
    # JSON strings are YAML double-quoted scalars: any branch name or path stays one value.
    lines = "".join(f"          {key}: {json.dumps(value)}\n" for key, value in inputs.items())
    quoted = [json.dumps(p) for p in PUSH_PATHS]
    half = (len(quoted) + 1) // 2
    paths = ", ".join(quoted[:half]) + ",\n            " + ", ".join(quoted[half:])
    return _WORKFLOW.format(action=action, branch=json.dumps(branch), branch_name=branch,
                            paths=paths, inputs=lines)


# ------------------------------------------------------------------------- scenario template

SCENARIO_ID = "my_model"
SCENARIO_PATH = "scenarios/my_model.py"

_HEAD = '''\
"""A lockguard scenario for your own model: a few training steps of it under the lock checked.

Written by `lockguard init`; yours to edit. lockguard runs run(steps, seed) in an environment
built from the lock alone and compares what it returns (each step's loss, the outputs on a
fixed batch, the trained parameters, the step times) between the old lock and the new one, and
with the goldens. Determinism is switched on{instrumented}.

To do:
1. build_model() below: return YOUR model, built with your own code ({package}).
2. batch(): inputs and targets your model takes (the example's shapes are made up).
3. Keep it small (seconds, not minutes) and deterministic from `seed`. Then add "{sid}" to
   `scenarios` in the lockguard config and run `lockguard record --scenario {sid}`.

Good to know:
- Only the lock's packages are installed where this runs, not your project: your code is
  imported from the project's folder, which the line below puts on sys.path. What it imports
  must be in the lock. Under `env = "docker"` only this file's folder is mounted in the
  container: copy what it needs beside it.
- `lockguard check` answers from the goldens while the lock, lockguard's harness and the
  files in this folder are unchanged; a change to your package alone is not seen there:
  `lockguard check --rerun` runs it anyway. (The pull-request gate, `check --base`, always
  runs both sides.)
- On a GPU (`--device cuda`) move the model and the batches to the device here.
- The returned dict's keys: lockguard's docs/scenarios.md, "User scenarios".
"""

import sys
import time
from pathlib import Path

# Your project's code, importable as in your own tests.
sys.path.insert(0, str({code_root}))

'''

_IMPORT = "import {package}  # noqa: E402  your own code: build the model from it below\n"
_NO_PACKAGE = ("# import your_package  # lockguard init found no package of yours in the project: "
               "import your model's module here\n")

_RAISE = '    raise NotImplementedError(f"{{__file__}}: build_model() must return your model")\n'

_SHAPES = '''
# The example batch's shapes: make them your model's.
BATCH = 32
FEATURES = 16
CLASSES = 4
'''

_TORCH = '''\
import torch  # noqa: E402
{imports}{shapes}LEARNING_RATE = 1e-2

def build_model(seed: int) -> torch.nn.Module:
    """YOUR model, its weights initialised from `seed` (torch's RNG is seeded with it)."""
    # Replace the next line with your model, e.g. `return {example}.Net()`:
{raise_}

def batch(step: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets for `step`, the same in every run; step -1 is the fixed batch whose
    outputs are compared after training."""
    generator = torch.Generator().manual_seed(seed * 100_003 + step + 1)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    targets = torch.randint(0, CLASSES, (BATCH,), generator=generator)
    return inputs, targets


def loss_fn(outputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Your training loss."""
    return torch.nn.functional.cross_entropy(outputs, targets)


def run(steps: int, seed: int) -> dict:
    torch.manual_seed(seed)
    model = build_model(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=LEARNING_RATE)
    losses, step_times = [], []
    for step in range(steps):
        inputs, targets = batch(step, seed)
        start = time.perf_counter()
        optimizer.zero_grad()
        loss = loss_fn(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        step_times.append(time.perf_counter() - start)
    with torch.no_grad():
        outputs = model(batch(-1, seed)[0])
    return {{"losses": losses, "outputs": outputs, "params": dict(model.named_parameters()),
            "step_times": step_times}}
'''

_JAX = '''\
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
{imports}{shapes}LEARNING_RATE = 1e-2

def build_model(seed: int):
    """YOUR model as (params, apply): its parameters (a pytree of arrays) initialised from
    `seed` (e.g. with jax.random.PRNGKey(seed)), and apply(params, inputs) -> outputs."""
    # Replace the next line with your model, e.g. `return {example}.init(seed), {example}.apply`:
{raise_}

def batch(step: int, seed: int):
    """Inputs and targets for `step`, the same in every run; step -1 is the fixed batch whose
    outputs are compared after training."""
    rng = np.random.default_rng([seed, step + 1])
    inputs = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
    targets = rng.integers(0, CLASSES, BATCH)
    return jnp.asarray(inputs), jnp.asarray(targets)


def loss_fn(outputs, targets):
    """Your training loss."""
    logp = jax.nn.log_softmax(outputs)
    return -jnp.mean(jnp.take_along_axis(logp, targets[:, None], axis=1))


def run(steps: int, seed: int) -> dict:
    params, apply = build_model(seed)

    # Plain SGD: use your optimiser (optax, ...) when the lock pins it.
    @jax.jit
    def train_step(params, inputs, targets):
        loss, grads = jax.value_and_grad(lambda p: loss_fn(apply(p, inputs), targets))(params)
        return jax.tree_util.tree_map(lambda p, g: p - LEARNING_RATE * g, params, grads), loss

    losses, step_times = [], []
    for step in range(steps):
        inputs, targets = batch(step, seed)
        start = time.perf_counter()
        params, loss = train_step(params, inputs, targets)
        losses.append(float(loss))  # waits for the step
        step_times.append(time.perf_counter() - start)
    outputs = apply(params, batch(-1, seed)[0])
    leaves = jax.tree_util.tree_leaves_with_path(params)
    return {{"losses": losses, "outputs": outputs, "step_times": step_times,
            "params": {{jax.tree_util.keystr(path): leaf for path, leaf in leaves}}}}
'''

_TENSORFLOW = '''\
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
{imports}{shapes}LEARNING_RATE = 1e-2

def build_model(seed: int) -> tf.keras.Model:
    """YOUR model, built (its weights created) and initialised from `seed` (the Python, numpy
    and TensorFlow RNGs are seeded with it)."""
    # Replace the next line with your model, e.g. `return {example}.build_model()`:
{raise_}

def batch(step: int, seed: int):
    """Inputs and targets for `step`, the same in every run; step -1 is the fixed batch whose
    outputs are compared after training."""
    rng = np.random.default_rng([seed, step + 1])
    inputs = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
    targets = rng.integers(0, CLASSES, BATCH)
    return tf.constant(inputs), tf.constant(targets)


def loss_fn(outputs, targets):
    """Your training loss."""
    return tf.reduce_mean(tf.keras.losses.sparse_categorical_crossentropy(
        targets, outputs, from_logits=True))


def run(steps: int, seed: int) -> dict:
    tf.keras.utils.set_random_seed(seed)
    model = build_model(seed)
    optimizer = tf.keras.optimizers.Adam(learning_rate=LEARNING_RATE)

    @tf.function
    def train_step(inputs, targets):
        with tf.GradientTape() as tape:
            loss = loss_fn(model(inputs, training=True), targets)
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        return loss

    losses, step_times = [], []
    for step in range(steps):
        inputs, targets = batch(step, seed)
        start = time.perf_counter()
        losses.append(float(train_step(inputs, targets)))
        step_times.append(time.perf_counter() - start)
    outputs = model(batch(-1, seed)[0], training=False)
    return {{"losses": losses, "outputs": outputs, "step_times": step_times,
            "params": {{f"{{i}}:{{v.name}}": v for i, v in enumerate(model.trainable_variables)}}}}
'''

_NUMPY = '''\
import numpy as np  # noqa: E402
{imports}{shapes}

def build_model(seed: int):
    """YOUR model as (params, train_step, predict): params a dict of arrays initialised from
    `seed`; train_step(params, inputs, targets) -> loss, one training step that updates params
    in place; predict(params, inputs) -> outputs."""
    # Replace the next line with your model, e.g. `return {example}.build(seed)`:
{raise_}

def batch(step: int, seed: int):
    """Inputs and targets for `step`, the same in every run; step -1 is the fixed batch whose
    outputs are compared after training."""
    rng = np.random.default_rng([seed, step + 1])
    inputs = rng.standard_normal((BATCH, FEATURES), dtype=np.float32)
    targets = rng.integers(0, CLASSES, BATCH)
    return inputs, targets


def run(steps: int, seed: int) -> dict:
    params, train_step, predict = build_model(seed)
    losses, step_times = [], []
    for step in range(steps):
        inputs, targets = batch(step, seed)
        start = time.perf_counter()
        losses.append(float(train_step(params, inputs, targets)))
        step_times.append(time.perf_counter() - start)
    outputs = predict(params, batch(-1, seed)[0])
    return {{"losses": losses, "outputs": outputs, "params": params, "step_times": step_times}}
'''

_INSTRUMENTED = {"torch": "; torch.compile calls are counted",
                 "jax": "; jax.jit traces are counted",
                 "tensorflow": "; tf.function tracings are counted", "numpy": ""}
_BODIES = {"torch": _TORCH, "jax": _JAX, "tensorflow": _TENSORFLOW, "numpy": _NUMPY}


def scenario_template(framework: str, package: str | None, src_layout: bool) -> str:
    """The scenario file for `framework`, importing `package` (the project's own, None when
    none was found) from the project's folder (its src/ with a src layout)."""
    code_root = 'Path(__file__).resolve().parents[1]' + (' / "src"' if src_layout else "")
    head = _HEAD.format(instrumented=_INSTRUMENTED[framework], package=package or "your package",
                        sid=SCENARIO_ID, code_root=code_root)
    imports = _IMPORT.format(package=package) if package else _NO_PACKAGE
    body = _BODIES[framework].format(imports=imports, shapes=_SHAPES, raise_=_RAISE.format(),
                                     example=package or "your_package")
    return head + body
