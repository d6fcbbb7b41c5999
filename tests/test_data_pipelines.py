"""Data-pipeline scenarios: the exact sample order of every batch, compared batch by batch.

Bundled: torch.data (DataLoader, seeded RandomSampler, 2 worker processes, collate), tf.data
(shuffle, map, batch, prefetch, deterministic) and jax.data (a numpy pipeline with a prefetch
thread) train the MLP from the framework's own pipeline; each must be identical under the same
lock. A real change is caught: a local package (real wheels pinned by hash beside the real torch
lock, test_compile.py's helpers) provides the sampler of a user scenario's DataLoader; its 2.0
forgets to move to the next epoch's permutation, so from the first batch of epoch 1 on the model
sees another order — `drift` at exactly that batch. A 2.0 whose samples take longer to load
makes the pipeline `slower`. The harness is checked against the sample order computed here by
hand where the shuffle is a published algorithm (numpy's Generator.permutation).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import (DATA, NUMERICS_ONLY, TORCH_LOCK, lockguard_python, run_cli,
                      scenario_args, three_framework_project)
from test_compile import ab, only_change, package_project
from test_harness_torch import harness

pytestmark = pytest.mark.slow

BUNDLED = ["torch.data", "jax.data", "tf.data"]

SAMPLER_V1 = """\
    import torch


    class EpochSampler(torch.utils.data.Sampler):
        \"\"\"A fresh permutation per epoch, seeded by (seed, epoch).\"\"\"

        def __init__(self, n, seed):
            self.n, self.seed, self.epoch = n, seed, 0

        def __len__(self):
            return self.n

        def __iter__(self):
            order = torch.Generator().manual_seed(self.seed * 1000 + self.epoch)
            self.epoch += 1
            return iter(torch.randperm(self.n, generator=order).tolist())


    def load(x):
        return x
    """

# 2.0 draws epoch 0 as 1.0 does, then repeats it: it no longer moves to the next epoch.
SAMPLER_V2_ORDER = SAMPLER_V1.replace("            self.epoch += 1\n", "")
# 2.0 draws the same order, and loading a sample takes 50 ms more (on the worker processes).
SAMPLER_V2_SLOW = SAMPLER_V1.replace("""    def load(x):
        return x""", """    def load(x):
        import time
        time.sleep(0.05)
        return x""")

SCRIPT = """\
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, Dataset

    import lg_testlayer

    N, BATCH = 48, 8


    class Samples(Dataset):
        def __init__(self):
            self.x = torch.linspace(-1, 1, N * 4).reshape(N, 4)
            self.y = (self.x.sum(1) > 0).long()

        def __len__(self):
            return N

        def __getitem__(self, i):
            return lg_testlayer.load(self.x[i]), self.y[i], i


    def endless(loader):
        while True:
            yield from loader


    def run(steps, seed):
        torch.manual_seed(seed)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(Samples(), batch_size=BATCH,
                            sampler=lg_testlayer.EpochSampler(N, seed), num_workers=2,
                            persistent_workers=True)
        batches = endless(loader)
        losses, order, times = [], [], []
        for _ in range(steps):
            import time
            start = time.perf_counter()
            x, y, ids = next(batches)
            time.sleep(0.005)  # a training step of 5 ms: over slower_min_step_s on both sides
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
            order.append(ids.tolist())
            times.append(time.perf_counter() - start)
        batches.close()
        return {"losses": losses, "batches": order, "batches_per_epoch": N // BATCH,
                "params": dict(model.named_parameters()), "step_times": times}
    """

LOADER = """
    [scenario.loader]
    script = "train_loader.py"
    framework = "torch"
    steps = 12
    """
CONFIG = """
    lock = "v2.txt"
    """ + LOADER
# The slower loader's: `slower` in fail_on, so the check makes its timing runs. (The order tests
# leave it out: their verdicts are the order's, and that the same lock is never `slower` is
# test_timing_real's, alone on the machine.)
TIMED_CONFIG = """
    lock = "v2.txt"
    fail_on = ["drift", "compile_fallback", "device_fallback", "broken", "incomparable",
               "slower"]
    timing_runs = 3  # the fewest that draw an interval: a ×16 slower loader needs no more
    """ + LOADER


@pytest.fixture(scope="module")
def reordering(tmp_path_factory) -> Path:
    return package_project(tmp_path_factory.mktemp("order") / "p", TORCH_LOCK.read_text(),
                           SAMPLER_V1, SAMPLER_V2_ORDER, CONFIG,
                           {"train_loader.py": SCRIPT})


def test_a_sampler_that_draws_differently_is_drift_at_the_first_batch_that_differs(reordering):
    code, report = ab(reordering, "v1.txt", "loader")
    [v] = report["verdicts"]
    assert code == 1 and v["verdict"] == "drift", v["reasons"]
    # 6 batches an epoch: 2.0 repeats epoch 0, so batch 6 is the first to differ.
    assert v["first_batch_differs"] == 6
    assert v["reasons"][0].startswith(
        "the sample order changed from batch 6 (epoch 1, batch 0 of it): the same samples in "
        "another order, sample ids ") or v["reasons"][0].startswith(
        "the sample order changed from batch 6 (epoch 1, batch 0 of it): other samples"), v
    assert "epoch order digests differ in epoch(s) 1" in v["reasons"][0]
    [evidence] = report["evidence"]
    old = evidence["baseline"]["result"]["sample_order"]
    new = evidence["candidate"]["result"]["sample_order"]
    assert old[:6] == new[:6] and old[6] != new[6] and new[6:] == new[:6]
    # The losses of the batches before it are bitwise the same: the order is the whole change.
    assert v["first_divergent_step"] == 6
    change = only_change(report)
    assert (change["name"], change["old_version"], change["new_version"]) == (
        "lg-testlayer", "1.0", "2.0")


def test_the_same_lock_keeps_its_order(reordering):
    code, report = ab(reordering, "v2.txt", "loader")
    [v] = report["verdicts"]
    assert code == 0 and v["verdict"] == "identical", v["reasons"]
    assert v["first_batch_differs"] is None


# Not `exclusive`: the slower side's batches wait on sleeps (its mean step some twenty times the
# baseline's), which another test's load on the cores does not shorten, nor does it stretch the
# baseline's 5 ms steps anywhere near that far.
def test_a_pipeline_that_loads_slower_is_slower(tmp_path):
    project = package_project(tmp_path / "p", TORCH_LOCK.read_text(), SAMPLER_V1,
                              SAMPLER_V2_SLOW, TIMED_CONFIG, {"train_loader.py": SCRIPT})
    code, report = ab(project, "v1.txt", "loader")
    [v] = report["verdicts"]
    # 8 samples of 50 ms on 2 workers: 200 ms a batch, against 5 ms steps. Judged on the mean
    # step: with 2 workers one step in two waits, and a median of steps that did not wait said
    # `identical` in a CI run.
    # `slower` in fail_on: the check made its timing runs (5 a side, one at a time).
    assert v["verdict"] == "slower" and code == 1, v["reasons"]
    assert v["step_time_ratio"] > 2, v["step_time_ratio"]
    assert v["reasons"][0].startswith("steps (mean, a data pipeline's) take ×"), v["reasons"]
    assert v["timing"]["measure"] == "step mean" and v["timing"]["low"] > 1.14
    assert v["first_batch_differs"] is None and v["param_digest_equal"] is True


# --------------------------------------------------------------------------------------------
# The bundled pipelines


@pytest.fixture(scope="module")
def bundled_project(tmp_path_factory) -> Path:
    return three_framework_project(tmp_path_factory.mktemp("bundled") / "p", NUMERICS_ONLY)


def test_bundled_pipelines_are_identical_under_the_same_lock(bundled_project):
    """Also the same-lock A/B of each framework (torch, jax and tensorflow, one environment a
    side): identical, with a step time ratio."""
    proc = run_cli("check", "--rerun", *scenario_args(BUNDLED),
                   "--baseline-lock", "torch.txt", "--baseline-lock", "jax.txt",
                   "--baseline-lock", "tf.txt", "--format", "json",
                   cwd=bundled_project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert {v["scenario"]: v["verdict"] for v in report["verdicts"]} == {
        sid: "identical" for sid in BUNDLED}
    for ev in report["evidence"]:
        run = ev["candidate"]["result"]
        order = run["sample_order"]
        # 2 epochs of 12 batches of 8: each epoch a permutation of the 96 samples, reshuffled.
        assert len(order) == 24 and all(len(batch) == 8 for batch in order), ev["scenario"]
        epochs = [sorted(i for batch in order[e:e + 12] for i in batch) for e in (0, 12)]
        assert epochs == [list(range(96))] * 2, ev["scenario"]
        assert order[:12] != order[12:], ev["scenario"]
        assert run["batches_per_epoch"] == 12 and len(run["epoch_digests"]) == 2
        assert run["timings"]["step_median_s"] > 0
    assert all(v["step_time_ratio"] is not None for v in report["verdicts"])


def test_jax_data_order_is_numpys_generator_permutation(tmp_path):
    """The order jax.data records is numpy's Generator.permutation, computed here independently
    in the environment lockguard built for the lock."""
    python = lockguard_python(DATA / "jax-0.10.2.txt")
    recorded = harness(python, tmp_path, "jax.data", 24, "--seed", "0")["sample_order"]
    expected = subprocess.run(
        [str(python), "-c", "import numpy as np, json; g = np.random.default_rng(0); "
         "print(json.dumps([g.permutation(96).tolist() for _ in range(2)]))"],
        capture_output=True, text=True, timeout=120)
    perms = json.loads(expected.stdout)
    assert recorded == [perm[b * 8:(b + 1) * 8] for perm in perms for b in range(12)]
