"""A torch team's own train.py (AdamW, a DataLoader, data prep in numpy) gated both ways: as
a scenario of the CLI through its entry, and by the lockguard_training fixture in its own test
suite, on one golden. The real upgrade is the PR that moves numpy 1.26.4 -> 2.0.2 under torch
2.13.0: NumPy 2's scalar promotion (NEP 50) changes the running mean the data prep keeps, and
so every loss; both ways catch it."""

from __future__ import annotations

import json

import pytest

from conftest import DATA, NUMERICS_ONLY, TORCH_LOCK, TORCH_OLD_LOCK, golden_file, make_project
from test_team_code import add_exact_and_record, cli, plugin_args

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
    golden = add_exact_and_record(project, "pkg.train:make", "torch", 10)
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


# The same training as a Lightning-style module, driven by lockguard as Lightning's automatic
# optimisation drives one, without a Trainer: a plain nn.Module with Lightning's three methods,
# and a real lightning.LightningModule (the lock pins lightning 2.6.6 beside torch 2.13.0+cpu:
# tests/data/torch-2.13.0-lightning-2.6.6.txt), each giving the numbers of the factory's loop
# above, bit for bit.
LIT = '''

class Regressor(nn.Module):
    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.seed = seed
        self.x = torch.from_numpy(features(seed))
        self.y = 2.0 * self.x[:, :1] - self.x[:, 1:2] + 0.1 * self.x[:, 2:3] ** 2
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)

    def to(self, *args, **kwargs):
        self.moved = args  # lockguard moves it to the run's device, as a Trainer does
        return super().to(*args, **kwargs)

    def training_step(self, batch, batch_idx):
        if getattr(self, "moved", None) != ("cpu",):  # the device the result reports
            raise AssertionError(f"moved to {getattr(self, 'moved', None)}, not cpu")
        xb, yb = batch
        return nn.functional.mse_loss(self(xb), yb)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.01)

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=16, shuffle=True,
                          generator=torch.Generator().manual_seed(self.seed))


def lit(seed):
    module = Regressor(seed)
    return module, module.x[:4]


import lightning


class RealRegressor(lightning.LightningModule):
    """The same module as Lightning's own class: self.log without a Trainer only warns."""

    def __init__(self, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.seed = seed
        self.x = torch.from_numpy(features(seed))
        self.y = 2.0 * self.x[:, :1] - self.x[:, 1:2] + 0.1 * self.x[:, 2:3] ** 2
        self.net = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))

    def training_step(self, batch, batch_idx):
        xb, yb = batch
        loss = nn.functional.mse_loss(self.net(xb), yb)
        self.log("train_loss", loss)
        return {"loss": loss}

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(self.parameters(), lr=1e-2, weight_decay=0.01)
        return {"optimizer": optimizer, "lr_scheduler": {
            "scheduler": torch.optim.lr_scheduler.LambdaLR(optimizer, lambda epoch: 1.0),
            "interval": "epoch"}}

    def train_dataloader(self):
        return DataLoader(TensorDataset(self.x, self.y), batch_size=16, shuffle=True,
                          generator=torch.Generator().manual_seed(self.seed))
'''

LIT_TEST = '''
import pytest


@pytest.mark.parametrize("entry", ["pkg.train:lit", "pkg.train:RealRegressor"])
def test_our_module(lockguard_training, entry):
    lockguard_training(entry)
'''


def test_a_lightning_style_torch_module_is_recorded_and_checked_both_ways(pytester):
    project = make_project(pytester.path, 'lock = "requirements.txt"\n'
                           'scenarios = ["ours", "lit", "real"]\n' + NUMERICS_ONLY,
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN + LIT,
                                  "tests/test_train.py": LIT_TEST},
                           locks={"requirements.txt": DATA / "torch-2.13.0-lightning-2.6.6.txt"})
    for entry, name in (("pkg.train:make", "ours"), ("pkg.train:lit", "lit"),
                        ("pkg.train:RealRegressor", "real")):
        added = cli(project, "scenario", "add", entry, "--framework", "torch", "--name", name,
                    "--steps", "6")
        assert added.exit_code == 0, added.output
    recorded = cli(project, "record")
    assert recorded.exit_code == 0, recorded.output
    factory, module, real = (json.loads(golden_file(project, name).read_text())["result"]
                             for name in ("ours", "lit", "real"))
    assert module["status"] == real["status"] == "ok", (module["error"], real["error"])
    # 6 steps over 4 batches a pass: the DataLoader's second epoch reshuffled, as the
    # factory's loop sees it; the probe in eval mode is the factory's no_grad probe.
    assert module["losses"] == real["losses"] == factory["losses"] and len(real["losses"]) == 6
    assert module["outputs"] == factory["outputs"]
    # The norm in float64 (torch_.grad_norm_of) beside clip_grad_norm_'s float32 one.
    assert module["grad_norms"] == real["grad_norms"]
    assert module["grad_norms"] == pytest.approx(factory["grad_norms"], rel=1e-5)
    assert real["timings"]["first_step_s"] is not None
    pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv").assert_outcomes(
        passed=2)
