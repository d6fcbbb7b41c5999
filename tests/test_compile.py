"""Compile fallbacks end to end: a real dependency upgrade that makes the compiled path worse.

The tests write two versions of a tiny local package as real wheels (conftest.build_wheels,
with fixed timestamps so that the bytes, hence the pinned hashes and the cached environments,
are the same from one test run to the next), serve them from a find-links folder
beside the locks, and pin them with --hash in locks that also hold a real framework lock. Version
1.0 of the package is pure tensor math; version 2.0 adds what the compiler cannot trace. A user
scenario that compiles a model using the package must come out `compile_fallback` in A/B, naming
the new break (or retrace), with the lock diff showing that package as the only change; the
same lock on both sides must be clean.

The harness-level tests run the bundled compiled scenario and cheap user scripts directly in the
torch dev venv of test_harness_torch.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import textwrap
from pathlib import Path

import pytest

from conftest import FRAMEWORK_LOCKS, TORCH_LOCK, make_project, prepared_venv, run_cli
from conftest import build_wheels as build_local_wheels
from lockguard.report import Report, render
from test_harness_torch import harness, venv_python  # noqa: F401 - fixture

pytestmark = pytest.mark.slow

PACKAGE = "lg-testlayer"
MODULE = "lg_testlayer"


# --------------------------------------------------------------------------------------------
# Local package wheels and locks


def build_wheels(sources: dict[str, str], wheels: Path) -> dict[str, Path]:
    """Real wheels of `lg-testlayer`, version -> wheel; each version's lg_testlayer/__init__.py
    is its source."""
    return {version: build_local_wheels({PACKAGE: (version, source, (), MODULE)},
                                        wheels)[PACKAGE]
            for version, source in sources.items()}


def lock_with_package(base: str, wheel: Path, version: str) -> str:
    """`base` (a real hashed framework lock) plus the local package, pinned by hash."""
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    return (base.rstrip() + "\n\n# the local package under test, from the folder beside the lock\n"
            f"--find-links wheels\n{PACKAGE}=={version} \\\n    --hash=sha256:{digest}\n")


def package_project(root: Path, base_lock: str, v1: str, v2: str, config: str,
                    files: dict[str, str]) -> Path:
    """A project with locks v1.txt / v2.txt (the base lock + lg-testlayer 1.0 / 2.0)."""
    wheels = build_wheels({"1.0": v1, "2.0": v2}, root / "wheels")
    locks = {version: lock_with_package(base_lock, wheel, version)
             for version, wheel in wheels.items()}
    project = make_project(root, config, files=files)
    (project / "v1.txt").write_text(locks["1.0"])
    (project / "v2.txt").write_text(locks["2.0"])
    return project


def ab(project: Path, baseline: str, scenario: str, *extra: str) -> tuple[int, dict]:
    """`check` of `scenario` with `baseline` (v1.txt or v2.txt) against v2.txt: the exit code
    (0 or 1, else the test fails here) and the JSON report."""
    # --rerun: v2.txt against itself runs both sides (else it is answered at once).
    proc = run_cli("check", "--rerun", "--baseline-lock", baseline, "--lock", "v2.txt",
                   "--scenario", scenario, "--format", "json", *extra, cwd=project)
    assert proc.returncode in (0, 1), proc.stdout + proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def only_change(report: dict) -> dict:
    [diff] = report["lock_diffs"]
    changes = [c for c in diff["changes"] if c["kind"] != "unchanged"]
    assert len(changes) == 1, changes
    return changes[0]


# --------------------------------------------------------------------------------------------
# torch: a graph break arrives with an upgrade of a layer package

TORCH_V1 = """\
    import torch
    from torch import nn


    class ScaledTanh(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            h = self.lin(x)
            return torch.tanh(h) * 1.5
    """

TORCH_V2 = """\
    import torch
    from torch import nn


    class ScaledTanh(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.lin = nn.Linear(d, d)

        def forward(self, x):
            h = self.lin(x)
            # 2.0: clip outliers first; counting them is a data-dependent .item()
            if (h.abs() > 1e4).sum().item() > 0:
                h = h.clamp(-1e4, 1e4)
            return torch.tanh(h) * 1.5
    """

# Where Dynamo stops in 2.0: the line of its .item()
ITEM_LINE = textwrap.dedent(TORCH_V2).splitlines().index(
    "        if (h.abs() > 1e4).sum().item() > 0:") + 1

TORCH_SCRIPT = """\
    import time

    import torch
    from torch import nn

    from lg_testlayer import ScaledTanh


    def run(steps, seed):
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), ScaledTanh(16), nn.Linear(16, 2))
        compiled = torch.compile(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(32, 8), torch.randn(32, 2)
        losses, times = [], []
        for _ in range(steps):
            start = time.perf_counter()
            opt.zero_grad(set_to_none=True)
            loss = ((compiled(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            times.append(time.perf_counter() - start)
        return {"losses": losses, "step_times": times, "params": dict(model.named_parameters())}
    """


# The same layer twice, deep in a model: the break is placed in blocks.0.mlp, of two
TORCH_BLOCKS_SCRIPT = """\
    import torch
    from torch import nn

    from lg_testlayer import ScaledTanh


    class Block(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.norm = nn.LayerNorm(d)
            self.mlp = ScaledTanh(d)

        def forward(self, x):
            return x + self.mlp(self.norm(x))


    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(8, 16)
            self.blocks = nn.ModuleList([Block(16), Block(16)])
            self.head = nn.Linear(16, 2)

        def forward(self, x):
            h = self.inp(x)
            for block in self.blocks:
                h = block(h)
            return self.head(h)


    def run(steps, seed):
        torch.manual_seed(seed)
        model = Net()
        # Dynamo breaks the graph before any backend sees it: the eager backend spares the test
        # inductor's code generation on both sides.
        compiled = torch.compile(model, backend="eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(32, 8), torch.randn(32, 2)
        losses = []
        for _ in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = ((compiled(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return {"losses": losses, "params": dict(model.named_parameters())}
    """


@pytest.fixture(scope="module")
def torch_project(tmp_path_factory) -> Path:
    return package_project(
        tmp_path_factory.mktemp("torch-compile") / "p",
        TORCH_LOCK.read_text(), TORCH_V1, TORCH_V2,
        """
        lock = "v2.txt"
        [scenario.layer]
        script = "train_layer.py"
        framework = "torch"
        steps = 4
        [scenario.blocks]
        script = "train_blocks.py"
        framework = "torch"
        steps = 2
        """, {"train_layer.py": TORCH_SCRIPT, "train_blocks.py": TORCH_BLOCKS_SCRIPT})


def test_torch_graph_break_from_an_upgrade_is_compile_fallback(torch_project: Path) -> None:
    code, report = ab(torch_project, "v1.txt", "layer")
    [v] = report["verdicts"]
    assert code == 1 and v["verdict"] == "compile_fallback", v["reasons"]
    diff = v["compile_diff"]
    assert (diff["graph_breaks_old"], diff["backend_old"], diff["backend_new"]) == (
        0, "inductor", "inductor")
    assert diff["graph_breaks_new"] >= 1
    [added] = diff["added_break_reasons"]
    assert added.startswith("lg_testlayer/__init__.py:forward: ") and "item()" in added, added
    assert diff["break_reasons_old"] == [] and diff["break_reasons_new"] == [added]
    assert v["reasons"][0].startswith("compiled path regressed: graph breaks 0 → ")
    # The break placed in the layer that breaks, the second module of the Sequential; the
    # reason's site prefix left out (the place says it).
    layer = ("graph break introduced in 1 (ScaledTanh.forward,"
             f" lg_testlayer/__init__.py:{ITEM_LINE}): ")
    assert layer + added.split(": ", 1)[1] in v["reasons"][0], v["reasons"]
    change = only_change(report)
    assert (change["name"], change["old_version"], change["new_version"]) == (
        PACKAGE, "1.0", "2.0")
    # Compile time is measured on both sides, and the first step apart from the steady state.
    assert diff["compile_s_old"] > 0 and diff["compile_s_new"] > 0
    assert v["first_step_ratio"] is not None and v["compile_time_ratio"] is not None
    # The human report puts the break-reason diff old | new side by side.
    text = render(Report.model_validate(report), "text")
    side_by_side = " ".join(re.split(r"compiled path +baseline +candidate", text)[1].split())
    assert f"+ break — {added}" in side_by_side


def test_torch_graph_break_is_placed_in_the_layer_that_breaks(torch_project: Path) -> None:
    """The upgrade's break named where it is: the module path in the model, its class and
    method, and the frame in the dependency where Dynamo stopped, in the regression and the
    side-by-side rows. The check flow is called directly (this checkout's code, as run_cli
    runs the installed lockguard), with the same locks, venvs and wheels as the test above."""
    from lockguard.config import load_config
    from lockguard.flows.check import BaselineLocks, check
    from lockguard.locks.ref import LockRef, lock_target, read_lock
    from lockguard.report._common import compile_rows
    from lockguard.scenarios import select
    from lockguard.settings import Settings

    config = load_config(torch_project / "pyproject.toml")
    old, new = (LockRef(torch_project / name, read_lock(torch_project / name,
                                                        lock_target(config)))
                for name in ("v1.txt", "v2.txt"))
    report = check(Settings.resolve(config), [new], select(config, ["blocks"]),
                   BaselineLocks((old,)))
    [v] = report.verdicts
    assert v.verdict == "compile_fallback", v.reasons
    diff = v.compile_diff
    [added] = diff.added_break_reasons
    [where] = [w for w in diff.break_locations_new if w.reason == added]
    line = ITEM_LINE
    assert (where.module, where.module_class, where.method, where.modules) == (
        "blocks.0.mlp", "ScaledTanh", "forward", 2)
    assert (where.file, where.line, where.function) == (
        "lg_testlayer/__init__.py", line, "forward")
    layer = f"blocks.0.mlp (ScaledTanh.forward, lg_testlayer/__init__.py:{line}; 1 of 2" \
            " ScaledTanh modules)"
    assert f"graph break introduced in {layer}: " in v.reasons[0], v.reasons
    assert ("+ break, layer", "—", layer) in compile_rows(diff)
    assert diff.break_locations_old == []


def test_torch_same_lock_on_both_sides_is_clean(torch_project: Path) -> None:
    code, report = ab(torch_project, "v2.txt", "layer")
    [v] = report["verdicts"]
    assert code == 0 and v["verdict"] in ("identical", "within_tolerance"), v["reasons"]
    assert v["compile_diff"]["regressions"] == []
    assert v["compile_diff"]["graph_breaks_new"] >= 1  # the break is there, on both sides


# --------------------------------------------------------------------------------------------
# The harness: bundled compiled scenario and user scripts, in lockguard's torch venv


def _inductor_env() -> dict[str, str]:
    # The compile cache lockguard keeps for that venv: warm across test runs, as re-checks are.
    from lockguard.envs.base import compile_cache_env
    from lockguard.locks.parser import parse_lock

    env = prepared_venv(parse_lock(FRAMEWORK_LOCKS["torch"]))
    return compile_cache_env(str(env.compile_cache), env.shared_cache)


@pytest.mark.parametrize("family, steps", [("mlp", 8), ("lm", 4)])
def test_bundled_compile_diagnostics_and_accuracy(venv_python: Path, tmp_path: Path,
                                                  family: str, steps: int) -> None:
    compiled = harness(venv_python, tmp_path, f"torch.{family}.compile", steps,
                       env=_inductor_env())
    eager = harness(venv_python, tmp_path, f"torch.{family}", steps)
    c = compiled["compile"]
    assert eager["compile"] is None
    assert (c["backend"], c["graphs"], c["unique_graphs"], c["graph_breaks"], c["recompiles"],
            c["eager_fallbacks"], c["counted_by"]) == ("inductor", 1, 1, 0, 0, 0, "backend")
    assert c["break_reasons"] == c["recompile_reasons"] == c["fallback_reasons"] == []
    assert c["dynamo"]["unique_graphs"] == 1  # dynamo's own counter agrees
    assert c["compile_s"] > 0
    t = compiled["timings"]
    assert t["first_step_s"] > 10 * t["step_median_s"]  # compilation is in the first step only
    acc = c["accuracy"]
    assert acc["ok"] and acc["k"] == 2.0 and set(acc["series"]) == {"losses", "outputs"}
    # The eager twin trained in the compiled run's process is the eager scenario, bit for bit:
    # compiled vs eager there is compiled vs torch.mlp here.
    worst = max(abs(a - b) for a, b in zip(compiled["losses"], eager["losses"]))
    assert acc["series"]["losses"]["compiled_vs_eager_max_abs"] == worst
    assert worst < 1e-5
    # The training's peak memory is the compiled run's, compiler included (taken before the
    # twins ran); eager vs compiled is a device comparison, and the cpu has none.
    assert compiled["peak_memory_bytes"] > 0 and compiled["peak_device_memory_bytes"] is None
    assert "memory" not in c


def test_torchs_precompiled_header_folder_is_the_compile_caches(venv_python: Path,
                                                               tmp_path: Path) -> None:
    """torch keeps inductor's precompiled headers below TMPDIR whatever its cache setting says;
    in the environment of a venv run (its own TMPDIR, envs/base.own_temp_dir) the folder torch
    computes is the compile cache's, so the headers outlive the run."""
    import shutil
    import subprocess
    import tempfile

    from lockguard.envs.base import compile_cache_env, harness_env, own_temp_dir

    # A run's folder is as short as lockguard's scratch folders (pytest's tmp_path is too long
    # for a socket below it, where own_temp_dir keeps the TMPDIR it was given).
    out_dir = Path(tempfile.mkdtemp(prefix="lg-"))
    try:
        env = own_temp_dir(out_dir, harness_env(compile_cache_env(str(tmp_path / "cache"))))
        assert env["TMPDIR"] == str(out_dir / "tmp")
        proc = subprocess.run([str(venv_python), "-c", "import os, torch._inductor.codecache "
                               "as c; print(os.path.realpath(c._HEADER_DIR))"],
                              capture_output=True, text=True, env=env, timeout=300)
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip() == str((tmp_path / "cache" / "inductor" /
                                       "precompiled_headers").resolve())


RECOMPILE_SCRIPT = """\
    import torch
    from torch import nn


    def exploding_backend(gm, example_inputs):
        raise RuntimeError("backend exploded")


    def run(steps, seed):
        torch._dynamo.config.suppress_errors = True  # errors become silent eager fallbacks
        torch._dynamo.config.recompile_limit = 3
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
        net = torch.compile(model, backend="eager")
        broken = torch.compile(lambda t: (t * 2).sum(), backend=exploding_backend)

        @torch.compile(backend="eager")
        def scale(x, tag):  # a new string every step: a recompile every step, up to the limit
            return x * len(tag)

        losses = []
        for step in range(steps):
            x = torch.randn(4 + step, 8)  # a new batch size: one recompile, then dynamic
            loss = scale(net(x), "t" * (step + 1)).pow(2).mean() + broken(x) * 0
            losses.append(loss.item())
        return losses
    """


def test_user_script_recompiles_and_silent_fallbacks(venv_python: Path, tmp_path: Path) -> None:
    script = tmp_path / "recompiling.py"
    script.write_text(textwrap.dedent(RECOMPILE_SCRIPT))
    r = harness(venv_python, tmp_path, "recompiling", 6, "--script", str(script),
                "--framework", "torch")
    c = r["compile"]
    assert r["status"] == "ok" and c["compile_calls"] == 3
    assert c["recompiles"] >= 3
    assert "recompiling.py:scale: tag == 'tt'" in c["recompile_reasons"]
    assert any("size mismatch at index 0. expected 4, actual 5" in reason
               for reason in c["recompile_reasons"])
    assert c["eager_fallbacks"] == 2  # the exploding backend, and scale past the limit
    assert set(c["fallback_reasons"]) == {
        "backend exploding_backend failed: RuntimeError: backend exploded",
        "recompiling.py:scale: hit the recompile_limit (3): runs eagerly from then on"}
    assert c["backend"] == "eager"  # the backend that compiled graphs: "eager" was asked for


# --------------------------------------------------------------------------------------------
# JAX: an upgrade makes a jitted step retrace every call

DATA = Path(__file__).resolve().parent / "data"

JAX_V1 = """\
    import jax
    import jax.numpy as jnp


    def lr_at(step):
        return 0.1 / (1.0 + 0.5 * step)


    def _loss(params, x, y):
        w, b = params
        return jnp.mean((jnp.tanh(x @ w + b) - y) ** 2)


    @jax.jit
    def sgd_step(params, x, y, lr):
        loss, grads = jax.value_and_grad(_loss)(params, x, y)
        return loss, tuple(p - lr * g for p, g in zip(params, grads))


    def train_step(params, x, y, step):
        return sgd_step(params, x, y, lr_at(step))
    """

# 2.0 makes the learning rate a static argument: a new Python float every step, a new trace
# (and compilation) every step.
JAX_V2 = JAX_V1.replace("""    @jax.jit
    def sgd_step""", """    @functools.partial(jax.jit, static_argnames=("lr",))
    def sgd_step""").replace("    import jax\n", "    import functools\n\n    import jax\n", 1)

JAX_SCRIPT = """\
    import jax.numpy as jnp
    import numpy as np

    from lg_testlayer import train_step


    def run(steps, seed):
        rng = np.random.default_rng(seed)
        x = jnp.asarray(rng.standard_normal((16, 4)), dtype=jnp.float32)
        y = jnp.asarray(rng.standard_normal((16, 2)), dtype=jnp.float32)
        params = (jnp.asarray(rng.standard_normal((4, 2)) * 0.5, dtype=jnp.float32),
                  jnp.zeros((2,), jnp.float32))
        losses = []
        for step in range(steps):
            loss, params = train_step(params, x, y, step)
            losses.append(float(loss))
        return losses
    """


# --------------------------------------------------------------------------------------------
# TensorFlow: an upgrade makes a tf.function retrace every call

TF_V1 = """\
    import tensorflow as tf


    def lr_at(step):
        return 0.1 / (1.0 + 0.5 * step)


    @tf.function
    def sgd_step(w, x, y, lr):
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean((tf.tanh(tf.matmul(x, w)) - y) ** 2)
        w.assign_sub(lr * tape.gradient(loss, w))
        return loss


    def train_step(w, x, y, step):
        return sgd_step(w, x, y, tf.constant(lr_at(step), tf.float32))
    """

# 2.0 passes the learning rate as a Python float: tf.function traces once per new value.
TF_V2 = TF_V1.replace("sgd_step(w, x, y, tf.constant(lr_at(step), tf.float32))",
                      "sgd_step(w, x, y, lr_at(step))")

TF_SCRIPT = """\
    import numpy as np
    import tensorflow as tf

    from lg_testlayer import train_step


    def run(steps, seed):
        rng = np.random.default_rng(seed)
        x = tf.constant(rng.standard_normal((16, 4)), tf.float32)
        y = tf.constant(rng.standard_normal((16, 2)), tf.float32)
        w = tf.Variable(tf.constant(rng.standard_normal((4, 2)) * 0.5, tf.float32))
        return [float(train_step(w, x, y, step)) for step in range(steps)]
    """


# --------------------------------------------------------------------------------------------
# The JAX and TF retrace upgrades: one test shape, two frameworks

RETRACE = {  # framework: (test lock, v1 source, v2 source, scenario id, script)
    "jax": ("jax-0.10.2.txt", JAX_V1, JAX_V2, "jaxstep", JAX_SCRIPT),
    "tensorflow": ("tf-2.21.0.txt", TF_V1, TF_V2, "tfstep", TF_SCRIPT),
}


@pytest.fixture(scope="module", params=sorted(RETRACE))
def retrace_project(request, tmp_path_factory) -> tuple[Path, str]:
    framework = request.param
    lock, v1, v2, scenario, script = RETRACE[framework]
    project = package_project(
        tmp_path_factory.mktemp(f"{framework}-retrace") / "p", (DATA / lock).read_text(), v1, v2,
        f"""
        lock = "v2.txt"
        [scenario.{scenario}]
        script = "train.py"
        framework = "{framework}"
        steps = 4
        """, {"train.py": script})
    return project, scenario


def test_retrace_from_an_upgrade_is_compile_fallback(retrace_project: tuple[Path, str]) -> None:
    project, scenario = retrace_project
    code, report = ab(project, "v1.txt", scenario)
    [v] = report["verdicts"]
    assert code == 1 and v["verdict"] == "compile_fallback", v["reasons"]
    assert v["compile_diff"]["traces"]["sgd_step"] == {"old": 1, "new": 4}
    assert "traces of sgd_step 1 → 4" in v["reasons"][0]
    change = only_change(report)
    assert (change["name"], change["old_version"], change["new_version"]) == (
        PACKAGE, "1.0", "2.0")
    text = render(Report.model_validate(report), "text")
    side_by_side = " ".join(re.split(r"compiled path +baseline +candidate", text)[1].split())
    assert "traces of sgd_step 1 4" in side_by_side


def test_retrace_same_lock_on_both_sides_is_clean(retrace_project: tuple[Path, str]) -> None:
    project, scenario = retrace_project
    code, report = ab(project, "v2.txt", scenario)
    [v] = report["verdicts"]
    assert code == 0 and v["verdict"] in ("identical", "within_tolerance"), v["reasons"]
    assert v["compile_diff"]["regressions"] == []
