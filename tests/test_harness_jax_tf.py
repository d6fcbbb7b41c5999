"""The jax and tensorflow harness modules, run for real in real virtualenvs.

Each framework runs in the venv lockguard itself builds for the test lock of that framework
(tests/data/jax-0.10.2.txt, tests/data/tf-2.21.0.txt), cached and shared with the integration
tests. Each harness
run is a subprocess of `<venv>/bin/python lockguard/harness/run.py`; its JSON is validated against
lockguard.results.RunResult before anything else is asserted. Runs are shared between tests
(memoised per session), so every scenario runs once, and twice where no other test re-runs it
(the reproducibility pair).

The first loss of the gen-initialised scenarios is checked against a float64 numpy forward pass
written here from gen's data and weights (not against any harness module).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import textwrap
from pathlib import Path
from typing import Any, Dict, Tuple

import numpy as np
import pytest

from conftest import FRAMEWORK_LOCKS, host_nvidia_driver, lockguard_python
from test_frameworks import SUITE as FRAMEWORKS_SUITE
from lockguard.compare.locate import locate
from lockguard.results import parse_result


REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "lockguard" / "harness"
from lockguard.harness._lockguard_harness import gen  # noqa: E402  (stdlib only)

pytestmark = pytest.mark.slow

RUN_TIMEOUT = 300
STEPS = {"mlp": 8, "lm": 5, "cnn": 6}
SCENARIOS = {  # id: (framework, family, output shape, dtype)
    "jax.mlp": ("jax", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "jax.rng": ("jax", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "jax.lm": ("jax", "lm", [gen.LM["probe_batch"], gen.LM["seq"], gen.LM["vocab"]], "float32"),
    "jax.lm.bf16": ("jax", "lm", [gen.LM["probe_batch"], gen.LM["seq"], gen.LM["vocab"]],
                    "bfloat16"),
    "tf.mlp": ("tensorflow", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "tf.mlp.xla": ("tensorflow", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "tf.keras": ("tensorflow", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "tf.lm": ("tensorflow", "lm", [gen.LM["probe_batch"], gen.LM["seq"], gen.LM["vocab"]],
              "float32"),
    "tf.rng": ("tensorflow", "mlp", [gen.MLP["probe"], gen.MLP["classes"]], "float32"),
    "jax.cnn": ("jax", "cnn", [gen.CNN["probe"], gen.CNN["classes"]], "float32"),
    "jax.cnn.bf16": ("jax", "cnn", [gen.CNN["probe"], gen.CNN["classes"]], "bfloat16"),
    "tf.cnn": ("tensorflow", "cnn", [gen.CNN["probe"], gen.CNN["classes"]], "float32"),
    "tf.cnn.xla": ("tensorflow", "cnn", [gen.CNN["probe"], gen.CNN["classes"]], "float32"),
    "tf.cnn.bf16": ("tensorflow", "cnn", [gen.CNN["probe"], gen.CNN["classes"]], "bfloat16"),
}


def _venv(framework: str) -> Path:
    return lockguard_python(FRAMEWORK_LOCKS[framework])


@pytest.fixture(scope="session")
def pythons() -> Dict[str, Path]:
    return {}


@pytest.fixture(scope="session")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("harness-jax-tf")


@pytest.fixture(scope="session")
def runs(pythons: Dict[str, Path], run_dir: Path):
    """harness(scenario, repeat=0, device="cpu", script=None, framework=None, steps=None,
    locate_step=None) -> result dict."""
    memo: Dict[Tuple[Any, ...], Dict[str, Any]] = {}

    def harness(scenario: str, repeat: int = 0, device: str = "cpu", script: Path | None = None,
                framework: str | None = None, steps: int | None = None,
                locate_step: int | None = None) -> Dict[str, Any]:
        fw = framework or SCENARIOS[scenario][0]
        if steps is None:
            steps = STEPS[SCENARIOS[scenario][1]] if scenario in SCENARIOS else 4
        key = (scenario, repeat, device, str(script), fw, steps, locate_step)
        if key in memo:
            return memo[key]
        if fw not in pythons:
            pythons[fw] = _venv(fw)
        out = run_dir / f"{scenario}-{repeat}-{device}-{len(memo)}.json"
        extra = ["--device", device]
        if script is not None:
            extra += ["--script", str(script), "--framework", fw]
        if locate_step is not None:
            extra += ["--locate-step", str(locate_step)]
        env = {k: v for k, v in os.environ.items()
               if k not in ("XLA_FLAGS", "JAX_PLATFORMS", "PYTHONPATH", "TF_ENABLE_ONEDNN_OPTS")}
        env["TF_CPP_MIN_LOG_LEVEL"] = "2"
        env["TMPDIR"] = str(run_dir)  # autograph's files, which the harness's fast exit leaves
        proc = subprocess.run(
            [str(pythons[fw]), str(HARNESS / "run.py"), "--scenario", scenario,
             "--steps", str(steps), "--out", str(out), *extra],
            capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, cwd=run_dir)
        assert proc.returncode == 0, proc.stderr[-3000:]
        data = json.loads(out.read_text())
        parse_result(data, str(out))  # the RunResult contract
        memo[key] = data
        return data

    return harness


def _ok(result: Dict[str, Any]) -> Dict[str, Any]:
    assert result["status"] == "ok", result["error"]
    return result


# --------------------------------------------------------------------------- numpy references

def _np(t: gen.Tensor) -> Any:
    shape, flat = t
    return np.array(flat, dtype=np.float64).reshape(shape)


def _xent(logits: Any, labels: Any) -> float:
    shift = logits - logits.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(shift).sum(axis=-1))
    return float(np.mean(logz - shift[np.arange(len(labels)), labels]))


def mlp_first_loss(seed: int) -> float:
    p = {k: _np(t) for k, t in gen.mlp_params(seed).items()}
    x_t, labels, _ = gen.mlp_data(seed)
    h = np.tanh(_np(x_t) @ p["w1"].T + p["b1"])
    return _xent(h @ p["w2"].T + p["b2"], np.array(labels))


def lm_first_loss(seed: int) -> float:
    c = gen.LM
    p = {k: _np(t) for k, t in gen.lm_params(seed).items()}
    inputs, targets, _ = gen.lm_data(seed)
    tokens = np.array(inputs)
    b, t = tokens.shape
    d, heads = c["d"], c["heads"]
    hd = d // heads
    erf = np.vectorize(math.erf)

    def ln(x: Any, w: Any, bias: Any) -> Any:
        mu = x.mean(-1, keepdims=True)
        var = ((x - mu) ** 2).mean(-1, keepdims=True)
        return (x - mu) / np.sqrt(var + 1e-5) * w + bias

    h = p["tok_emb"][tokens] + p["pos_emb"][:t]
    mask = np.triu(np.ones((t, t), dtype=bool), 1)
    for layer in range(c["layers"]):
        q_ = f"l{layer}."
        qkv = ln(h, p[q_ + "ln1_w"], p[q_ + "ln1_b"]) @ p[q_ + "qkv_w"].T + p[q_ + "qkv_b"]
        q, k, v = (z.reshape(b, t, heads, hd).transpose(0, 2, 1, 3)
                   for z in np.split(qkv, 3, axis=-1))
        s = q @ k.transpose(0, 1, 3, 2) / math.sqrt(hd)
        s = np.where(mask, -np.inf, s)
        s = np.exp(s - s.max(-1, keepdims=True))
        att = ((s / s.sum(-1, keepdims=True)) @ v).transpose(0, 2, 1, 3).reshape(b, t, d)
        h = h + att @ p[q_ + "proj_w"].T + p[q_ + "proj_b"]
        m = ln(h, p[q_ + "ln2_w"], p[q_ + "ln2_b"]) @ p[q_ + "fc1_w"].T + p[q_ + "fc1_b"]
        m = 0.5 * m * (1 + erf(m / math.sqrt(2)))
        h = h + m @ p[q_ + "fc2_w"].T + p[q_ + "fc2_b"]
    logits = ln(h, p["lnf_w"], p["lnf_b"]) @ p["head_w"].T
    return _xent(logits.reshape(b * t, -1), np.array(targets).reshape(-1))


# --------------------------------------------------------------------------- bundled scenarios

@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_scenario_runs_and_learns(runs, scenario: str) -> None:
    framework, family, shape, dtype = SCENARIOS[scenario]
    r = _ok(runs(scenario))
    steps = STEPS[family]
    assert r["framework"] == framework and r["device"] == "cpu" and r["dtype"] == dtype
    assert r["framework_version"] == ("0.10.2" if framework == "jax" else "2.21.0")
    assert len(r["losses"]) == steps and len(r["grad_norms"]) == steps
    assert all(math.isfinite(v) for v in r["losses"] + r["grad_norms"])
    assert all(g > 0 for g in r["grad_norms"])
    assert r["losses"][-1] < r["losses"][0] - 0.05, r["losses"]
    assert r["output_shape"] == shape and len(r["outputs"]) == math.prod(shape)
    assert all(math.isfinite(v) for v in r["outputs"])
    assert len(r["param_digest"]) == 64
    names = (list(gen.cnn_params(0)) + list(gen.cnn_buffers()) if family == "cnn"
             else list(gen.mlp_params(0) if family == "mlp" else gen.lm_params(0)))
    assert sorted(r["param_norms"]) == sorted(names)  # JSON keys are sorted
    assert r["compile"]["traces"] == {"train_step": 1}
    if framework == "tensorflow":
        assert r["compile"]["xla"] is scenario.endswith(".xla")
        det = r["fingerprint"]["determinism"]
        assert det["op_determinism"] is True and det["TF_DETERMINISTIC_OPS"] == "1"
        assert det["intra_op_threads"] == 1 and det["inter_op_threads"] == 1
        assert r["fingerprint"]["tf_build"]["is_cuda_build"] is False
    else:
        assert r["compile"]["compilations"] == {"train_step": 1}
        assert r["fingerprint"]["jaxlib"] == "0.10.2"
        det = r["fingerprint"]["determinism"]
        assert det["jax_default_matmul_precision"] == "highest"
        assert det["cpu_eigen_single_threaded"] is True and not det["gpu_deterministic_ops"]
        assert r["fingerprint"]["env"]["JAX_PLATFORMS"] == "cpu"
    t = r["timings"]
    assert t["import_s"] > 0.1 and t["first_step_s"] > 0 and t["step_median_s"] > 0


# Run to run: the scenarios of test_frameworks' three-framework check are re-run against their
# goldens there (check --rerun, every one bit for bit); the others run twice here.
@pytest.mark.parametrize("scenario", [s for s in SCENARIOS if s not in FRAMEWORKS_SUITE])
def test_two_runs_are_bitwise_identical(runs, scenario: str) -> None:
    a, b = _ok(runs(scenario, 0)), _ok(runs(scenario, 1))
    for field in ("losses", "grad_norms", "outputs", "param_digest", "param_norms"):
        assert a[field] == b[field], f"{scenario}: {field} differs between two runs"


@pytest.mark.parametrize("scenario", ["jax.mlp", "tf.mlp", "tf.mlp.xla", "tf.keras"])
def test_first_mlp_loss_matches_numpy(runs, scenario: str) -> None:
    expected = mlp_first_loss(0)
    got = _ok(runs(scenario))["losses"][0]
    assert abs(got - expected) <= 1e-6 * abs(expected), (got, expected)


@pytest.mark.parametrize("scenario", ["jax.lm", "tf.lm"])
def test_first_lm_loss_matches_numpy(runs, scenario: str) -> None:
    expected = lm_first_loss(0)
    got = _ok(runs(scenario))["losses"][0]
    assert abs(got - expected) <= 1e-6 * abs(expected), (got, expected)


def test_bf16_is_close_to_float32_but_not_equal(runs) -> None:
    f32, bf16 = _ok(runs("jax.lm"))["losses"][0], _ok(runs("jax.lm.bf16"))["losses"][0]
    assert f32 != bf16 and abs(f32 - bf16) <= 1e-2 * f32


@pytest.mark.parametrize("scenario", ["jax.rng", "tf.rng"])
def test_framework_rng_gives_other_weights(runs, scenario: str) -> None:
    r, ref = _ok(runs(scenario)), _ok(runs("jax.mlp"))
    assert r["losses"][0] != ref["losses"][0]
    assert r["param_digest"] != ref["param_digest"]


@pytest.mark.parametrize("scenario", ["jax.mlp", "tf.mlp"])
def test_cuda_requested_without_gpu_runs_on_cpu(runs, scenario: str) -> None:
    r = _ok(runs(scenario, device="cuda"))
    assert r["device"] == "cpu" and r["fingerprint"]["device_expected"] == "cuda"
    nvidia = r["fingerprint"]["nvidia"]  # looked up whenever cuda is expected: this machine's
    assert (nvidia["driver"] if nvidia else None) == host_nvidia_driver(), nvidia
    assert r["losses"] == runs(scenario)["losses"]  # same CPU numerics


# --------------------------------------------------------------------------- user scripts

JAX_SCRIPT = """
    import jax
    import jax.numpy as jnp

    @jax.jit
    def step(w, x):
        loss, g = jax.value_and_grad(lambda w: jnp.mean((x @ w - 1.0) ** 2))(w)
        return w - 0.1 * g, loss

    def run(steps, seed):
        w = jax.random.normal(jax.random.PRNGKey(seed), (4, 1))
        x = jnp.linspace(-1.0, 1.0, 32).reshape(8, 4)
        losses = []
        for _ in range(steps):
            w, loss = step(w, x)
            losses.append(loss)
        return {"losses": losses, "outputs": x @ w, "params": {"w": w},
                "metrics": {"final": losses[-1]}}
"""

TF_SCRIPT = """
    import tensorflow as tf

    x = tf.reshape(tf.linspace(-1.0, 1.0, 32), (8, 4))

    class Fit:
        def __init__(self):
            self.w = tf.Variable(tf.ones((4, 1)))

        @tf.function  # a method: TF traces it through a per-instance copy
        def step(self):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((x @ self.w - 1.0) ** 2)
            self.w.assign_sub(0.1 * tape.gradient(loss, self.w))
            return loss

    def run(steps, seed):
        fit = Fit()
        losses = [fit.step() for _ in range(steps)]
        return {"losses": losses, "outputs": x @ fit.w, "params": {"w": fit.w}}
"""


@pytest.mark.parametrize("framework,source", [("jax", JAX_SCRIPT), ("tensorflow", TF_SCRIPT)])
def test_user_script(runs, run_dir: Path, framework: str, source: str) -> None:
    script = run_dir / f"user_{framework}.py"
    script.write_text(textwrap.dedent(source))
    r = _ok(runs("user.fit", script=script, framework=framework, steps=6))
    assert len(r["losses"]) == 6 and r["losses"][-1] < r["losses"][0]
    assert r["output_shape"] == [8, 1] and len(r["param_digest"]) == 64
    assert r["compile"]["traces"] == {"step" if framework == "jax" else "Fit.step": 1}
    assert r["metrics"]["run_s"] > 0
    if framework == "jax":
        assert r["compile"]["compilations"] == {"step": 1}
        assert r["metrics"]["final"] == r["losses"][-1]
    else:
        assert r["compile"]["xla"] is False


def test_user_script_returning_garbage_is_a_clear_crash(runs, run_dir: Path) -> None:
    script = run_dir / "user_garbage.py"
    script.write_text("def run(steps, seed):\n    return {'losses': ['high', 'low']}\n")
    r = runs("user.garbage", script=script, framework="jax", steps=2)
    assert r["status"] == "crashed"
    assert "losses[0] must be a number, got str 'high'" in r["error"]


# --------------------------------------------------------------------------- localisation runs

@pytest.mark.parametrize("scenario, framework, family, taps", [
    ("jax.lm", "jax", "lm", ["emb", "l0.ln1", "l0.qkv", "l0.attn", "l0.proj", "l0.ln2",
                             "l0.fc1", "l0.gelu", "l0.fc2"]),
    ("tf.cnn", "tensorflow", "cnn", ["conv1", "bn1", "conv2", "bn2", "conv3", "bn3", "fc"]),
    ("keras.cnn", "tensorflow", "cnn", ["conv2d", "batch_normalization", "re_lu",
                                        "max_pooling2d", "conv2d_1", "batch_normalization_1",
                                        "re_lu_1", "global_average_pooling2d", "dropout",
                                        "dense"]),
])
def test_a_located_run_captures_every_leaf_and_layer_and_trains_the_same(
        runs, scenario: str, framework: str, family: str, taps: list) -> None:
    """locate_jax.py / locate_tf.py in a real run (--locate-step 1): every parameter leaf, then
    the tapped layers (jax.lm's block, tf.cnn's convolutions and norms, each layer of keras.cnn
    by its Keras name), each with an output and a gradient; the run's own numbers are those
    of a run without it (the taps and the capture change nothing the step computes: keras'
    dropout RNG and BatchNorm's statistics are put back)."""
    steps = STEPS[family]
    plain = _ok(runs(scenario, framework=framework, steps=steps))
    located = _ok(runs(scenario, framework=framework, steps=steps, locate_step=1))
    for key in ("losses", "grad_norms", "outputs", "param_digest"):
        assert located[key] == plain[key], key
    capture = parse_result(located, "located").capture
    assert capture.step == 1 and not capture.truncated
    leaves = [c.name for c in capture.calls if c.params is not None]
    assert sorted(leaves) == sorted(plain["param_norms"])  # the digest's names
    layers = [c for c in capture.calls[1:] if c.params is None]
    assert [c.name for c in layers][:len(taps)] == taps
    assert all(c.out is not None and c.grad is not None for c in layers), layers
    assert locate(capture, capture).kind == "none"


def test_each_keras_layer_of_a_located_run_has_a_float64_referee(runs) -> None:
    """locate_tf.py's referee on keras.cnn's located run (the run above: no run of its own):
    every layer replayed on a copy of its inputs reproduces its output bit for bit and lies a
    few ULPs of float32 from its float64 clone, but the dropout, whose replay draws a new mask
    (not believed: the host says the referee is unavailable)."""
    located = _ok(runs("keras.cnn", framework="tensorflow", steps=STEPS["cnn"], locate_step=1))
    layers = [c for c in parse_result(located, "located").capture.calls[1:] if c.params is None]
    referees = {c.name: c.referee for c in layers}
    assert referees["dropout"].replay_exact is False
    for name, referee in referees.items():
        if name != "dropout":
            assert referee.error is None and referee.replay_exact, (name, referee)
            assert referee.max_ulp < 64, (name, referee)  # float32 against float64
