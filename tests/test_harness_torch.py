"""The torch and numpy harness modules, run for real in a real virtualenv.

The venv is the one lockguard itself builds for the torch test lock (torch 2.13.0+cpu, numpy
2.0.2), cached and shared with the integration tests. Each harness run is a subprocess of `<venv>/bin/python lockguard/harness/run.py`, and its JSON is
validated against lockguard.results.RunResult before anything else is asserted.
"""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import textwrap
from pathlib import Path
from typing import Any, Dict, Tuple

import pytest

from conftest import FRAMEWORK_LOCKS, host_nvidia_driver, lockguard_python
from lockguard.results import parse_result

REPO = Path(__file__).resolve().parent.parent
HARNESS = REPO / "lockguard" / "harness"
from lockguard.harness._lockguard_harness import gen  # noqa: E402  (stdlib only: the sizes)

pytestmark = pytest.mark.slow

TORCH = "2.13.0"
NUMPY = "2.0.2"
RUN_TIMEOUT = 300


@pytest.fixture(scope="session")
def venv_python() -> Path:
    """lockguard's own venv for the torch test lock: torch 2.13.0+cpu with numpy 2.0.2."""
    return lockguard_python(FRAMEWORK_LOCKS["torch"])


def harness(python: Path, out_dir: Path, scenario: str, steps: int, *extra: str,
            env: Dict[str, str] | None = None) -> Dict[str, Any]:
    """One harness run; returns the decoded result after checking it against the contract."""
    out = out_dir / f"{scenario}-{len(list(out_dir.iterdir()))}.json"
    full_env = {**os.environ, **(env or {})}
    proc = subprocess.run(
        [str(python), str(HARNESS / "run.py"), "--scenario", scenario, "--steps", str(steps),
         "--out", str(out), *extra],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, env=full_env, cwd=out_dir)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert out.exists(), f"no result file; stderr:\n{proc.stderr[-3000:]}"
    data = json.loads(out.read_text())
    parse_result(data, str(out))  # the RunResult contract, field for field
    return data


class Runs:
    """Memoised harness runs for the session: each distinct run happens once."""

    def __init__(self, python: Path, out_dir: Path) -> None:
        self.python, self.out_dir = python, out_dir
        self._cache: Dict[Tuple[Any, ...], Dict[str, Any]] = {}

    def get(self, scenario: str, steps: int, *extra: str, again: int = 0) -> Dict[str, Any]:
        key = (scenario, steps, extra, again)
        if key not in self._cache:
            self._cache[key] = harness(self.python, self.out_dir, scenario, steps, *extra)
        return self._cache[key]


@pytest.fixture(scope="session")
def runs(venv_python: Path, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(venv_python, tmp_path_factory.mktemp("harness-runs"))


STEPS = {"torch.mlp": gen.MLP["steps"], "torch.rng": gen.MLP["steps"],
         "numpy.mlp": gen.MLP["steps"], "torch.lm": gen.LM["steps"],
         "torch.lm.bf16": gen.LM["steps"], "torch.cnn": gen.CNN["steps"],
         "torch.cnn.bf16": gen.CNN["steps"]}
SHAPES = {"torch.mlp": [gen.MLP["probe"], gen.MLP["classes"]],
          "torch.rng": [gen.MLP["probe"], gen.MLP["classes"]],
          "numpy.mlp": [gen.MLP["probe"], gen.MLP["classes"]],
          "torch.lm": [gen.LM["probe_batch"], gen.LM["seq"], gen.LM["vocab"]],
          "torch.lm.bf16": [gen.LM["probe_batch"], gen.LM["seq"], gen.LM["vocab"]],
          "torch.cnn": [gen.CNN["probe"], gen.CNN["classes"]],
          "torch.cnn.bf16": [gen.CNN["probe"], gen.CNN["classes"]]}


def assert_ok(r: Dict[str, Any]) -> None:
    assert r["status"] == "ok", r["error"]
    assert r["error"] is None


@pytest.mark.parametrize("scenario", sorted(STEPS))
def test_bundled_scenario_trains(runs: Runs, scenario: str) -> None:
    steps = STEPS[scenario]
    r = runs.get(scenario, steps)
    assert_ok(r)
    framework = scenario.split(".")[0]
    assert r["framework"] == framework
    assert r["framework_version"] == (NUMPY if framework == "numpy" else TORCH + "+cpu")
    assert r["device"] == "cpu" and r["device_name"] == "cpu"
    assert r["dtype"] == ("bfloat16" if scenario.endswith("bf16") else "float32")

    losses = r["losses"]
    assert len(losses) == steps
    assert all(math.isfinite(v) for v in losses)
    assert losses[-1] < 0.6 * losses[0], losses  # it learns
    assert sum(losses[-3:]) < sum(losses[:3])

    assert len(r["grad_norms"]) == steps
    assert all(math.isfinite(g) and g > 0 for g in r["grad_norms"])

    assert r["output_shape"] == SHAPES[scenario]
    assert len(r["outputs"]) == math.prod(SHAPES[scenario])
    assert all(math.isfinite(v) for v in r["outputs"])

    digest = r["param_digest"]
    assert isinstance(digest, str) and re.fullmatch(r"[0-9a-f]{64}", digest), digest  # sha256
    expected_names = (["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"]
                      if scenario == "torch.rng" else
                      # the cnn's BatchNorm running statistics are in its digest
                      list(gen.cnn_params(0)) + list(gen.cnn_buffers()) if "cnn" in scenario
                      else list(gen.mlp_params(0)) if "mlp" in scenario
                      else list(gen.lm_params(0)))
    assert sorted(r["param_norms"]) == sorted(expected_names)  # (JSON keys are sorted)
    assert all(v > 0 for k, v in r["param_norms"].items() if not k.endswith(("_b", "b1", "b2")))

    t = r["timings"]
    assert t["import_s"] > 0 and t["first_step_s"] > 0 and t["step_median_s"] > 0
    assert t["total_s"] >= t["import_s"]
    assert r["peak_memory_bytes"] > 0

    fp = r["fingerprint"]
    for key in ("python", "cpu", "threads", "env", "determinism", "device_requested"):
        assert key in fp, key
    assert fp["determinism"]["seed"] == 0
    if framework == "torch":
        det = fp["determinism"]
        assert det["deterministic_algorithms"] is True
        assert det["cudnn_deterministic"] is True and det["cudnn_benchmark"] is False
        assert det["num_threads"] == 1 and det["num_interop_threads"] == 1
        # true float32 on a GPU too: torch's default leaves TF32 on for cuDNN convolutions
        assert det["cudnn_allow_tf32"] is False and det["cuda_matmul_allow_tf32"] is False
        # (torch >= 2.9 reads "none" here, "inherit", which the legacy switch leaves: only the
        # switch above says TF32 is off; None: torch < 2.9 has no such setting)
        assert det["cudnn_conv_fp32_precision"] in ("none", "ieee", None)
        info = fp["torch"]
        assert info["version"] == TORCH + "+cpu" and info["cuda"] is None
        assert info["mkldnn"] in (True, False)
        assert info["attention"] == "scaled_dot_product_attention"
        assert info["parallel"] and "BLAS_INFO" in info["build"]
    else:
        assert fp["numpy_build"]["version"] == NUMPY
        assert fp["numpy_build"]["blas"]


@pytest.mark.parametrize("scenario", ["torch.mlp", "torch.lm"])
def test_two_runs_are_bit_identical(runs: Runs, scenario: str) -> None:
    first = runs.get(scenario, STEPS[scenario])
    second = runs.get(scenario, STEPS[scenario], again=1)
    assert_ok(first)
    assert_ok(second)
    for field in ("losses", "grad_norms", "outputs", "param_digest", "param_norms"):
        assert first[field] == second[field], field


def test_torch_rng_differs_from_gen_init(runs: Runs) -> None:
    gen_init = runs.get("torch.mlp", STEPS["torch.mlp"])
    torch_init = runs.get("torch.rng", STEPS["torch.rng"])
    assert torch_init["losses"][0] != gen_init["losses"][0]
    assert torch_init["param_digest"] != gen_init["param_digest"]


def test_numpy_mlp_matches_torch_mlp_at_step_zero(runs: Runs) -> None:
    t = runs.get("torch.mlp", STEPS["torch.mlp"])["losses"]
    n = runs.get("numpy.mlp", STEPS["numpy.mlp"])["losses"]
    assert n[0] == pytest.approx(t[0], rel=1e-6)
    # Same maths, same optimiser: the curves stay close, not only the first point.
    assert n[-1] == pytest.approx(t[-1], rel=1e-4)


def test_bf16_autocast_changes_the_numbers_a_little(runs: Runs) -> None:
    fp32 = runs.get("torch.lm", STEPS["torch.lm"])
    bf16 = runs.get("torch.lm.bf16", STEPS["torch.lm.bf16"])
    assert bf16["losses"][0] == pytest.approx(fp32["losses"][0], rel=1e-2)
    assert bf16["losses"] != fp32["losses"]
    assert bf16["outputs"] != fp32["outputs"]


def test_expected_cuda_falls_back_to_cpu_without_crashing(runs: Runs) -> None:
    r = runs.get("torch.mlp", 3, "--device", "cuda")
    assert_ok(r)
    assert r["device"] == "cpu"
    assert r["fingerprint"]["device_requested"] == "cuda"
    assert "CPU-only build" in r["fingerprint"]["device_fallback"]
    # The NVIDIA driver is looked up whenever cuda is expected (None without one): the one
    # this machine has, read here.
    nvidia = r["fingerprint"]["nvidia"]
    assert (nvidia["driver"] if nvidia else None) == host_nvidia_driver(), nvidia
    # No CUDA work happens, so the cuBLAS switch is left alone (it is set only on a real GPU).
    assert "CUBLAS_WORKSPACE_CONFIG" not in r["fingerprint"]["env"]
    # Same numbers as on the cpu: the fallback changed nothing but the device.
    assert r["losses"] == runs.get("torch.mlp", STEPS["torch.mlp"])["losses"][:3]


def test_torch_harness_runs_without_numpy(runs: Runs, tmp_path: Path) -> None:
    blocker = tmp_path / "no-numpy" / "numpy"
    blocker.mkdir(parents=True)
    # What an environment without numpy raises (torch itself only catches this subclass).
    (blocker / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n")
    r = harness(runs.python, runs.out_dir, "torch.mlp", 3,
                env={"PYTHONPATH": str(blocker.parent)})
    assert_ok(r)
    assert r["losses"] == runs.get("torch.mlp", STEPS["torch.mlp"])["losses"][:3]


# --------------------------------------------------------------------------- user scripts

def user_run(runs: Runs, tmp_path: Path, framework: str, body: str,
             steps: int = 5) -> Dict[str, Any]:
    script = tmp_path / "user_scenario.py"
    script.write_text(textwrap.dedent(body))
    return harness(runs.python, runs.out_dir, f"user.{framework}", steps,
                   "--script", str(script), "--framework", framework)


TORCH_USER_OK = """
    import torch

    def run(steps, seed):
        model = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x = torch.linspace(-1, 1, 12).reshape(4, 3)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            losses.append(loss)                     # tensors: converted by the harness
        return {"losses": losses, "outputs": model(x).detach(),
                "grad_norms": [1.0] * steps, "metrics": {"final": losses[-1]},
                "params": dict(model.named_parameters())}
"""


def test_user_script_dict_with_tensors(runs: Runs, tmp_path: Path) -> None:
    r = user_run(runs, tmp_path, "torch", TORCH_USER_OK)
    assert_ok(r)
    assert len(r["losses"]) == 5 and all(isinstance(v, float) for v in r["losses"])
    assert r["losses"][-1] < r["losses"][0]
    assert r["output_shape"] == [4, 2] and len(r["outputs"]) == 8
    assert r["grad_norms"] == [1.0] * 5
    assert r["metrics"]["final"] == r["losses"][-1]
    assert r["metrics"]["run_s"] > 0
    assert r["timings"]["first_step_s"] is None and r["timings"]["step_median_s"] is None
    assert len(r["param_digest"]) == 64 and sorted(r["param_norms"]) == ["bias", "weight"]
    # a user script keeps torch's own precision settings (TF32 for cuDNN convolutions)
    assert r["fingerprint"]["determinism"]["cudnn_allow_tf32"] is True


def test_a_user_scripts_own_precision_is_what_its_fingerprint_says(runs: Runs,
                                                                    tmp_path: Path) -> None:
    """The flags are read again after the script ran: one that turns TF32 off says so."""
    r = user_run(runs, tmp_path, "torch", """
        import torch
        torch.backends.cudnn.allow_tf32 = False

        def run(steps, seed):
            return [1.0 / (i + 1) for i in range(steps)]
        """)
    assert_ok(r)
    assert r["fingerprint"]["determinism"]["cudnn_allow_tf32"] is False


def test_user_script_returning_garbage_is_a_clear_crash(runs: Runs, tmp_path: Path) -> None:
    r = user_run(runs, tmp_path, "torch", """
        def run(steps, seed):
            return "all good"
    """)
    assert r["status"] == "crashed"
    last = r["error"].splitlines()[-1]
    assert "must return a list of per-step losses or a dict with 'losses'" in last
    assert "str 'all good'" in last


def test_user_script_raising_keeps_the_traceback(runs: Runs, tmp_path: Path) -> None:
    r = user_run(runs, tmp_path, "torch", """
        def helper():
            raise ValueError("boom from the user script")

        def run(steps, seed):
            helper()
    """)
    assert r["status"] == "crashed"
    assert r["error"].splitlines()[-1] == "ValueError: boom from the user script"
    assert "user_scenario.py" in r["error"] and "helper()" in r["error"]


@pytest.mark.parametrize("returned, message", [
    ("[]", "losses is empty"),
    ("[0.5, 'x']", "losses[1] must be a number, got str 'x'"),
    ("{'loss': [1.0]}", "a dict without 'losses'"),
    ("{'losses': [1.0], 'extra': 1}", "unknown keys ['extra']"),
    ("{'losses': [1.0], 'metrics': {'m': 'high'}}", "metrics['m'] must be a number"),
    ("{'losses': [1.0], 'outputs': [[1.0, 2.0], [3.0]]}", "outputs is ragged"),
    ("None", "it returned NoneType None"),
    ("{'losses': [1.0], 'batches': [[1, 2], [3]]}", "batches has 2 entries for 1 losses"),
    ("{'losses': [1.0], 'batches': [[1, 2.5]]}", "batches[0][1] must be an integer sample id"),
    ("{'losses': [1.0], 'batches': 7}", "batches must be a list of each step's sample ids"),
    ("{'losses': [1.0], 'batches_per_epoch': 2}", "batches_per_epoch must be a positive int, "
                                                  "given with batches"),
    ("{'losses': [1.0], 'batches': [[1]], 'batches_per_epoch': True}",
     "batches_per_epoch must be a positive int"),
])
def test_numpy_user_script_validation(runs: Runs, tmp_path: Path, returned: str,
                                      message: str) -> None:
    r = user_run(runs, tmp_path, "numpy", f"""
        def run(steps, seed):
            return {returned}
    """)
    assert r["status"] == "crashed"
    assert message in r["error"].splitlines()[-1]


def test_numpy_user_script_ok(runs: Runs, tmp_path: Path) -> None:
    r = user_run(runs, tmp_path, "numpy", """
        import numpy as np

        def run(steps, seed):
            w = np.random.standard_normal(3).astype(np.float32)   # seeded by the harness
            losses = []
            for _ in range(steps):
                losses.append(np.float32((w ** 2).sum()))
                w = w * np.float32(0.5)
            return {"losses": np.array(losses), "outputs": [[1, 2], [3, 4]],
                    "params": {"w": w}, "step_times": [0.01] * steps}
    """)
    assert_ok(r)
    assert len(r["losses"]) == 5 and r["losses"][-1] < r["losses"][0]
    assert r["output_shape"] == [2, 2] and r["outputs"] == [1.0, 2.0, 3.0, 4.0]
    assert r["timings"]["step_median_s"] == pytest.approx(0.01)
    assert r["framework"] == "numpy" and r["framework_version"] == NUMPY


def test_user_script_sample_ids_stay_exact_integers(runs: Runs, tmp_path: Path) -> None:
    # Hashed sample ids beyond 2**53 would collide through a float: they are read as integers.
    r = user_run(runs, tmp_path, "numpy", """
        import numpy as np

        BIG = 2 ** 60

        def run(steps, seed):
            batches = [np.array([BIG + 2 * s, BIG + 2 * s + 1], dtype=np.int64)
                       for s in range(steps)]
            return {"losses": [1.0] * steps, "batches": batches, "batches_per_epoch": 1}
    """)
    assert_ok(r)
    big = 2 ** 60
    assert r["sample_order"] == [[big + 2 * s, big + 2 * s + 1] for s in range(5)]
    assert r["batches_per_epoch"] == 1 and len(r["epoch_digests"]) == 5
