"""A torch team's own train.py (AdamW, a DataLoader, data prep in numpy) gated both ways: as
a scenario of the CLI through its entry, and by the lockguard_training fixture in its own test
suite, on one golden. The real upgrade is the PR that moves numpy 1.26.4 -> 2.0.2 under torch
2.13.0: NumPy 2's scalar promotion (NEP 50) changes the running mean the data prep keeps, and
so every loss; both ways catch it."""

from __future__ import annotations

import json

import pytest

from conftest import NUMERICS_ONLY, TORCH_LOCK, TORCH_OLD_LOCK, golden_file, make_project
from test_team_code import cli, plugin_args

pytestmark = pytest.mark.slow
pytest_plugins = ["pytester"]

TRAIN = '''
"""The team's training: a small regression MLP, AdamW, a shuffling DataLoader."""

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def features(seed, n=64, width=8):
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((n, width)).astype(np.float32)
    # A streaming preprocessor's running mean in numpy scalars: `0.1 * v` (a Python float
    # times a float32 scalar) is float64 before NumPy 2 and float32 after it (NEP 50).
    means = []
    for column in raw.T:
        mean = np.float32(0.0)
        for v in column:
            mean = mean * np.float32(0.9) + 0.1 * v
        means.append(mean)
    return raw - np.array(means, dtype=np.float32)


def make(seed):
    torch.manual_seed(seed)
    x = torch.from_numpy(features(seed))
    y = 2.0 * x[:, :1] - x[:, 1:2] + 0.1 * x[:, 2:3] ** 2
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.01)
    loader = DataLoader(TensorDataset(x, y), batch_size=16, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))

    def step(batch):
        xb, yb = batch
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(xb), yb)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
        opt.step()
        return {"loss": loss.detach(), "grad_norm": norm}

    def probe():
        with torch.no_grad():
            return model(x[:4])

    return step, loader, probe
'''

TEST = '''
def test_our_training(lockguard_training):
    lockguard_training("pkg.train:make")
'''


def test_a_numpy_upgrade_under_a_torch_teams_training_is_caught_both_ways(pytester):
    project = make_project(pytester.path, 'lock = "requirements.txt"\n'
                           'scenarios = ["ours"]\n' + NUMERICS_ONLY,
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "tests/test_train.py": TEST},
                           locks={"requirements.txt": TORCH_OLD_LOCK})  # numpy 1.26.4
    added = cli(project, "scenario", "add", "pkg.train:make", "--framework", "torch",
                "--name", "ours", "--steps", "10")
    assert added.exit_code == 0, added.output
    with (project / "pyproject.toml").open("a") as config:
        config.write('tolerance = "exact"\n')  # the scenario's table is the file's last

    recorded = cli(project, "record")
    assert recorded.exit_code == 0, recorded.output
    golden = json.loads(golden_file(project, "ours").read_text())["result"]
    assert golden["status"] == "ok" and len(golden["losses"]) == 10
    assert len(golden["grad_norms"]) == 10 and golden["output_shape"] == [4, 1]
    assert golden["losses"][-1] < golden["losses"][0]  # it trained
    # The fixture, run as the gate runs (the lock's venv), passes on the CLI's golden.
    pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv").assert_outcomes(
        passed=1)

    # The upgrade: the PR moves numpy to 2.0.2, torch unchanged.
    (project / "requirements.txt").write_text(TORCH_LOCK.read_text())
    checked = cli(project, "check", "--format", "json")
    assert checked.exit_code == 1, checked.output
    [verdict] = json.loads(checked.stdout)["verdicts"]
    assert verdict["verdict"] == "drift", verdict
    # "losses beyond tolerance from step N": the fixture says the step the gate says.
    where = next(r for r in verdict["reasons"] if r.startswith("losses")).split(":")[0]
    caught = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv")
    caught.assert_outcomes(failed=1)
    caught.stdout.fnmatch_lines(["*ours: drift*", f"*{where}*", "*ULP*"])
