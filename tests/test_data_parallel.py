"""Data-parallel scenarios on the CPU: the frameworks' own gradient synchronisation path.

Bundled: torch.ddp (DistributedDataParallel over gloo, 2 processes), jax.dp (a jitted step over 2
host devices, the batch sharded) and tf.dp (MirroredStrategy over 2 logical CPUs) each train the
MLP on halves of its batch with all-reduced gradients; each is identical under the same lock,
and each really ran distributed. A real change of the reduction is caught: a local package
(real wheels pinned by hash beside the real torch lock, test_compile.py's helpers) provides the
DDP communication hook of a user scenario whose 2 ranks hold 40 and 24 samples; its 1.0
all-reduces the sum and then divides by the ranks (a mean of the ranks' means), its 2.0 weighs
each rank by its samples (the mean over all samples): `drift` from step 1, the first step
trained on the reduced gradients; the same lock on both sides is identical.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import NUMERICS_ONLY, TORCH_LOCK, run_cli, scenario_args, three_framework_project
from test_compile import ab, only_change, package_project

pytestmark = pytest.mark.slow

BUNDLED = ["torch.ddp", "jax.dp", "tf.dp"]

# The ranks hold 40 and 24 of the batch's 64 samples. 1.0 all-reduces the sum of the ranks'
# gradients and divides by the number of ranks (a mean of the ranks' means); 2.0 weighs each
# rank by its samples before the sum: the mean over the samples, another gradient.
REDUCE_SUM_THEN_DIVIDE = """\
    import torch.distributed as dist


    def reduce(state, bucket):
        world = dist.get_world_size()
        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        return future.then(lambda f: f.value()[0].div_(world))
    """

REDUCE_MEAN = """\
    import torch.distributed as dist


    def reduce(state, bucket):
        buffer = bucket.buffer().mul_(state["samples"] / state["total"])
        future = dist.all_reduce(buffer, async_op=True).get_future()
        return future.then(lambda f: f.value()[0])
    """

SCRIPT = """\
    import multiprocessing
    import os
    import tempfile

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    import lg_testlayer

    WORLD, SPLIT, TOTAL = 2, 40, 64  # rank 0 takes the first 40 samples, rank 1 the rest


    def train(rank, init, steps, seed, out):
        dist.init_process_group("gloo", init_method=init, rank=rank, world_size=WORLD)
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                                    torch.nn.Linear(16, 3))
        data = torch.Generator().manual_seed(seed + 1)
        x, y = torch.randn(TOTAL, 8, generator=data), torch.randint(0, 3, (TOTAL,),
                                                                    generator=data)
        mine = slice(0, SPLIT) if rank == 0 else slice(SPLIT, TOTAL)
        ddp = DistributedDataParallel(model)
        ddp.register_comm_hook({"samples": len(y[mine]), "total": TOTAL}, lg_testlayer.reduce)
        opt = torch.optim.SGD(model.parameters(), lr=0.5)
        losses = []
        for _ in range(steps):
            loss = F.cross_entropy(ddp(x[mine]), y[mine])
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        del ddp
        dist.destroy_process_group()
        if out is not None:
            out.update(losses=losses, params=dict(model.named_parameters()))


    def other_rank(rank, init, steps, seed):
        train(rank, init, steps, seed, None)
        os._exit(0)  # a forked rank leaves without tearing down gloo (see torch_._ddp)


    def run(steps, seed):
        init = "file://" + os.path.join(tempfile.mkdtemp(), "init")
        other = multiprocessing.get_context("fork").Process(
            target=other_rank, args=(1, init, steps, seed))
        other.start()
        out = {}
        train(0, init, steps, seed, out)
        other.join(120)
        assert other.exitcode == 0, other.exitcode
        return out
    """

CONFIG = """
    lock = "v2.txt"
    [scenario.ddp]
    script = "train_ddp.py"
    framework = "torch"
    steps = 8
    """


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return package_project(tmp_path_factory.mktemp("ddp") / "p", TORCH_LOCK.read_text(),
                           REDUCE_SUM_THEN_DIVIDE, REDUCE_MEAN, CONFIG,
                           {"train_ddp.py": SCRIPT})


def test_a_reduction_that_weighs_the_ranks_otherwise_is_drift(project):
    code, report = ab(project, "v1.txt", "ddp")
    [v] = report["verdicts"]
    assert code == 1 and v["verdict"] == "drift", v["reasons"]
    # Step 0's loss is computed before any gradient is reduced: the same on both sides.
    assert v["first_divergent_step"] == 1, v
    assert v["param_digest_equal"] is False
    change = only_change(report)
    assert (change["name"], change["old_version"], change["new_version"]) == (
        "lg-testlayer", "1.0", "2.0")


def test_the_same_reduction_is_identical(project):
    code, report = ab(project, "v2.txt", "ddp")
    [v] = report["verdicts"]
    assert code == 0 and v["verdict"] == "identical", v["reasons"]


def test_bundled_data_parallel_scenarios_are_identical_and_distributed(tmp_path):
    project = three_framework_project(tmp_path / "p", NUMERICS_ONLY)
    proc = run_cli("check", "--rerun", *scenario_args(BUNDLED),
                   "--baseline-lock", "torch.txt", "--baseline-lock", "jax.txt",
                   "--baseline-lock", "tf.txt", "--format", "json",
                   cwd=project)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert {v["scenario"]: v["verdict"] for v in report["verdicts"]} == {
        sid: "identical" for sid in BUNDLED}
    runs = {ev["scenario"]: ev["candidate"]["result"] for ev in report["evidence"]}
    ddp = runs["torch.ddp"]["fingerprint"]["distributed"]
    assert ddp == {"backend": "gloo", "world_size": 2, "hook": "default_hooks.allreduce_hook"}
    # The all-reduce is timed apart where the framework lets it: torch's comm hook.
    sync = runs["torch.ddp"]["timings"]["sync_median_s"]
    assert 0 < sync < runs["torch.ddp"]["timings"]["step_median_s"]
    assert runs["jax.dp"]["fingerprint"]["distributed"]["devices"] == ["cpu:0", "cpu:1"]
    tf_devices = runs["tf.dp"]["fingerprint"]["distributed"]["devices"]
    assert [d.rsplit("/", 1)[-1] for d in tf_devices] == ["device:CPU:0", "device:CPU:1"]
    # jax and tf all-reduce the loss too: step 0 is the whole batch's loss in both (to float
    # rounding); torch.ddp records rank 0's own loss, on its half.
    jax0, tf0 = runs["jax.dp"]["losses"][0], runs["tf.dp"]["losses"][0]
    assert abs(jax0 - tf0) < 1e-6 * jax0, (jax0, tf0)


def test_expected_cuda_without_a_gpu_falls_back_with_its_two_workers(tmp_path):
    """--device cuda on a host that shows no GPU: each scenario runs anyway, on its 2 CPU
    workers (the host split as on the CPU), and says so: device_fallback, not a crash."""
    project = three_framework_project(tmp_path / "p", "steps = 3")
    proc = run_cli("check", *scenario_args(BUNDLED), "--device", "cuda", "--allow-new",
                   "--format", "json", cwd=project, env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr
    report = json.loads(proc.stdout)
    assert {v["scenario"]: (v["verdict"], v["found_device"]) for v in report["verdicts"]} == {
        sid: ("device_fallback", "cpu") for sid in BUNDLED}
    runs = {ev["scenario"]: ev["candidate"]["result"] for ev in report["evidence"]}
    assert runs["torch.ddp"]["fingerprint"]["distributed"]["backend"] == "gloo"
    assert runs["jax.dp"]["fingerprint"]["distributed"]["devices"] == ["cpu:0", "cpu:1"]
    assert len(runs["tf.dp"]["fingerprint"]["distributed"]["devices"]) == 2
