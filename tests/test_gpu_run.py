"""benchmarks/gpu/: the GPU run script is sound without a GPU.

The run itself needs a GPU host (benchmarks/gpu/README.md); its dry run (`run.sh --dry-run`) takes
longer than a test should here, so these tests cover what decides the run's verdicts: the shell
scripts parse and pass shellcheck, the summary's assertions and spreads are computed right from
the files a run leaves, `collect` refuses what must not land in golden/, and the harness reads an
NVIDIA driver version the way the fingerprint needs it.
"""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, tool

GPU = REPO / "benchmarks" / "gpu"
SCRIPTS = sorted(GPU.glob("*.sh"))


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gpurun = _load("gpurun", GPU / "gpurun.py")
from lockguard.harness._lockguard_harness import common as harness_common  # noqa: E402


def test_the_scripts_are_there_and_parse():
    assert {p.name for p in SCRIPTS} >= {"run.sh", "prepare.sh", "collect.sh"}
    for script in SCRIPTS:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"


def test_the_scripts_pass_shellcheck():
    proc = subprocess.run([tool("shellcheck"), *map(str, SCRIPTS)], capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_gpurun_help_runs_with_the_stdlib_alone():
    # collect runs with any python3 beside the repo: argument parsing must not need lockguard.
    proc = subprocess.run([sys.executable, "-I", str(GPU / "gpurun.py"), "--help"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "summarize" in proc.stdout


def test_select_leaves_out_what_the_plan_skips_on_this_host(tmp_path, monkeypatch, capsys):
    """One GPU: the data-parallel scenarios (a worker a GPU) are not measured, and said so."""
    from lockguard.flows import pipeline

    config = tmp_path / "lockguard.toml"
    config.write_text('lock = "host-numpy.txt"\n')
    (tmp_path / "host-numpy.txt").write_text("numpy==2.4.6\n")
    monkeypatch.setattr(pipeline, "visible_gpus", lambda: 1)

    def select(device: str) -> tuple[int, list[str], str]:
        code = gpurun.main(["select", "--config", str(config), "--device", device,
                            "--scenario", "torch.mlp", "--scenario", "torch.ddp",
                            "--scenario", "jax.dp"])
        out, err = capsys.readouterr()
        return code, out.split(), err

    assert select("cpu") == (0, ["torch.mlp", "torch.ddp", "jax.dp"], "")
    code, ids, err = select("cuda")
    assert (code, ids) == (0, ["torch.mlp"])
    assert err.splitlines() == [
        f"not measured on cuda: {sid}: trains on 2 GPUs at once (a worker a GPU); this host "
        "shows 1" for sid in ("torch.ddp", "jax.dp")]


# ----------------------------------------------------------------------------- spreads

def test_spread_of_identical_runs_is_zero():
    s = gpurun.spread([[1.0, 0.5, 0.25]] * 3)
    assert s["bitwise_identical"] is True and s["first_differing"] is None
    assert s["max_abs"] == 0.0 and s["per_step_abs"] == [0.0, 0.0, 0.0]


def test_spread_names_the_first_differing_step_and_the_widest_gap():
    runs = [[1.0, 0.5, 0.25, 0.125], [1.0, 0.5, 0.2500001, 0.125], [1.0, 0.5, 0.25, 0.1251]]
    s = gpurun.spread(runs)
    assert s["bitwise_identical"] is False
    assert s["first_differing"] == 2 and s["differing"] == 2
    assert s["per_step_abs"][:2] == [0.0, 0.0]
    assert s["max_abs"] == pytest.approx(0.0001) and s["max_rel"] == pytest.approx(0.0001 / 0.125)


def test_spread_tells_signed_zeros_apart_and_unequal_lengths():
    assert gpurun.spread([[0.0], [-0.0]])["bitwise_identical"] is False
    s = gpurun.spread([[1.0, 2.0], [1.0]])
    assert s["bitwise_identical"] is False and s["lengths"] == [1, 2]


def _run(sid="torch.mlp", device="cuda", losses=(1.0, 0.5), digest="d", status="ok",
         **timings):
    return {"scenario": sid, "framework": sid.split(".")[0], "device": device, "status": status,
            "losses": list(losses), "grad_norms": [2.0, 1.0], "outputs": [0.1, 0.2],
            "param_digest": digest, "fingerprint": {"determinism": {
                "cuda_matmul_allow_tf32": False, "cudnn_allow_tf32": False}},
            "timings": {"import_s": 2.0, "first_step_s": 1.0, "step_median_s": 0.01,
                        "total_s": 5.0, **timings}}


def test_determinism_uses_ok_runs_and_the_parameter_digest():
    same = gpurun.determinism([_run(), _run(), _run(status="crashed", losses=(9.0,))])
    assert same["runs"] == 2 and same["bitwise_identical"] is True
    digest = gpurun.determinism([_run(), _run(digest="other")])
    assert digest["bitwise_identical"] is False and digest["param_digests_equal"] is False
    assert gpurun.determinism([_run()])["bitwise_identical"] is None  # one run proves nothing


def test_timing_medians_and_ratios():
    accel = gpurun.timing([_run(step_median_s=0.001), _run(step_median_s=0.003),
                           _run(step_median_s=0.002)])
    cpu = gpurun.timing([_run(device="cpu", step_median_s=0.02)])
    assert accel["step_median_s"] == 0.002 and accel["runs"] == 3
    r = gpurun.ratios(accel, cpu)
    assert r["step_median_s"] == pytest.approx(0.1) and r["import_s"] == pytest.approx(1.0)
    assert gpurun.ratios(accel, gpurun.timing([]))["step_median_s"] is None


# ----------------------------------------------------------------- fallback assertion

def test_tf32_must_be_off_in_every_torch_run():
    runs = {"torch.mlp": [_run(), _run()], "jax.mlp": [_run("jax.mlp")]}
    assert gpurun.tf32_assertion(runs) == (True, "off for matmuls and cuDNN in all 2 torch runs")
    # torch's own default, as the first H200 run recorded it: cuDNN's convolutions in TF32
    runs["torch.cnn"] = [_run("torch.cnn")]
    runs["torch.cnn"][0]["fingerprint"]["determinism"]["cudnn_allow_tf32"] = True
    assert gpurun.tf32_assertion(runs) == (False, "torch.cnn: matmul False, cuDNN True")
    assert gpurun.tf32_assertion({"jax.mlp": [_run("jax.mlp")]}) == (
        False, "no torch timing run to read")
    runs["torch.cnn"][0]["fingerprint"]["determinism"]["cudnn_allow_tf32"] = None  # it raised
    assert gpurun.tf32_assertion(runs) == (
        False, "torch.cnn: matmul False, cuDNN unreadable (mixed TF32 APIs?)")


def _break_report(cpu: dict, gpu: dict) -> dict:
    def one(sid, peak, **compile_):
        reasons = ["lg_testlayer.py:forward: Tensor.item() (data-dependent)"] * compile_.pop("n", 1)
        return {"scenario": sid, "candidate": {"result": {
            "scenario": sid, "status": "ok", "peak_device_memory_bytes": peak,
            "compile": {"graph_breaks": len(reasons), "graphs": 2, "recompiles": 0,
                        "break_reasons": reasons, **compile_}}}}
    return {"evidence": [one("break-cpu", 0, **cpu), one("break-cuda", 2_000_000, **gpu)]}


def test_the_graph_break_must_be_the_same_on_both_devices():
    found = gpurun.graph_break_summary(_break_report({}, {}))
    assert (found["break-cpu"]["on_cuda"], found["break-cuda"]["on_cuda"]) == (False, True)
    ok, detail = gpurun.graph_break_assertion(0, found, dry_run=False)
    assert ok, detail
    assert detail == ("exit 0; cpu 1 break(s), 2 graph(s); gpu 1 break(s), 2 graph(s); "
                      "lg_testlayer.py:forward: Tensor.item() (data-dependent)")
    two = gpurun.graph_break_summary(_break_report({}, {"n": 2, "graphs": 3}))
    ok, detail = gpurun.graph_break_assertion(0, two, dry_run=False)
    assert not ok and "graph_breaks: 1 vs 2" in detail and "graphs: 2 vs 3" in detail
    none = gpurun.graph_break_summary(_break_report({"n": 0}, {"n": 0}))
    assert gpurun.graph_break_assertion(0, none, dry_run=False)[0] is False  # no break at all
    assert gpurun.graph_break_assertion(1, found, dry_run=False)[0] is False
    assert gpurun.graph_break_assertion(None, {}, dry_run=False) == (False, "exit None; runs: none")
    cpu_only = gpurun.graph_break_summary(_break_report({}, {}))
    cpu_only["break-cuda"]["on_cuda"] = False  # the GPU script fell back to the CPU
    assert gpurun.graph_break_assertion(0, cpu_only, dry_run=False)[0] is False
    assert gpurun.graph_break_assertion(0, cpu_only, dry_run=True)[0] is True


def _report(*verdicts):
    return {"verdicts": [{"scenario": s, "framework": s.split(".")[0], "verdict": v,
                          "found_device": d} for s, v, d in verdicts]}


SCEN = ["torch.mlp", "jax.mlp"]


def test_fallback_needs_exit_1_and_device_fallback_for_every_scenario():
    good = _report(("torch.mlp", "device_fallback", "cpu"), ("jax.mlp", "device_fallback", "cpu"))
    assert gpurun.fallback_assertion(1, good, SCEN)[0] is True
    assert gpurun.fallback_assertion(0, good, SCEN)[0] is False
    broken = _report(("torch.mlp", "device_fallback", "cpu"), ("jax.mlp", "broken", "cpu"))
    ok, detail = gpurun.fallback_assertion(1, broken, SCEN)
    assert ok is False and "jax.mlp: broken on cpu" in detail
    assert gpurun.fallback_assertion(2, None, SCEN)[0] is False
    partial = _report(("torch.mlp", "device_fallback", "cpu"))
    assert gpurun.fallback_assertion(1, partial, SCEN) == (
        False, "exit 1; no verdict for jax.mlp")


# ------------------------------------------------------------------------- summarize

def _work(tmp_path: Path, fallback_verdict: str, fallback_rc: int) -> tuple[Path, Path]:
    work, out = tmp_path / "work", tmp_path / "out"
    out.mkdir(parents=True)
    (work / "runs" / "accel").mkdir(parents=True)
    (work / "runs" / "cpu").mkdir(parents=True)
    (work / "scenarios.txt").write_text("torch.mlp\njax.mlp\n")
    phases = [("install", 0), ("record", 0), ("check", 0), ("fallback", fallback_rc),
              ("measure-accel", 0), ("measure-cpu", 0)]
    (work / "settings.json").write_text(json.dumps({"accel_repeat": 3, "cpu_repeat": 1}))
    (work / "phases.tsv").write_text("".join(f"{n}\t{rc}\t1.5\t\n" for n, rc in phases))
    for name, verdict, device in (("record", "new", "cuda"), ("check", "identical", "cuda"),
                                  ("fallback", fallback_verdict, "cpu")):
        (out / f"{name}.json").write_text(json.dumps(_report(
            ("torch.mlp", verdict, device), ("jax.mlp", verdict, device))))
    for sid in ("torch.mlp", "jax.mlp"):
        for i in (1, 2, 3):
            (work / "runs" / "accel" / f"{sid}.{i}.json").write_text(json.dumps(
                _run(sid, losses=(1.0, 0.5 + (i == 3) * 1e-7 * (sid == "jax.mlp")))))
        (work / "runs" / "cpu" / f"{sid}.1.json").write_text(json.dumps(
            _run(sid, device="cpu", step_median_s=0.05)))
    return work, out


def _summarize(work: Path, out: Path) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, str(GPU / "gpurun.py"), "summarize", "--work",
                           str(work), "--out", str(out), "--device", "cuda"],
                          capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr
    return proc.returncode, json.loads((out / "gpu.json").read_text())


def test_summarize_a_good_gpu_run(tmp_path):
    work, out = _work(tmp_path, "device_fallback", 1)
    with open(work / "phases.tsv", "a") as f:
        f.write("graph-break\t0\t20.0\t\n")
    (work / "graph-break.json").write_text(json.dumps(_break_report({}, {})))
    rc, doc = _summarize(work, out)
    assert rc == 0 and doc["ok"] is True, doc["assertions"]
    assert {a["name"] for a in doc["assertions"]} >= {
        "TF32 off in the torch runs", "torch.compile graph break on the GPU as on the CPU"}
    assert doc["graph_break"]["break-cuda"]["graph_breaks"] == 1
    assert doc["dry_run"] is False and doc["device"] == "cuda"
    torch_mlp, jax_mlp = doc["scenarios"]["torch.mlp"], doc["scenarios"]["jax.mlp"]
    assert torch_mlp["determinism"]["bitwise_identical"] is True
    assert jax_mlp["determinism"]["bitwise_identical"] is False
    assert jax_mlp["determinism"]["losses"]["first_differing"] == 1
    assert torch_mlp["accel_over_cpu"]["step_median_s"] == pytest.approx(0.01 / 0.05)
    assert torch_mlp["accel"]["runs"] == 3 and torch_mlp["cpu"]["runs"] == 1
    assert doc["phases"]["fallback"] == {"rc": 1, "wall_s": 1.5}


def test_summarize_fails_when_hiding_the_gpu_does_not_fall_back(tmp_path):
    rc, doc = _summarize(*_work(tmp_path, "identical", 0))
    assert rc == 1 and doc["ok"] is False
    failed = [a["name"] for a in doc["assertions"] if not a["ok"]]
    assert failed == ["hidden GPU gives device_fallback"]


def test_summarize_fails_when_a_timing_run_lands_on_another_device(tmp_path):
    work, out = _work(tmp_path, "device_fallback", 1)
    (work / "runs" / "accel" / "jax.mlp.2.json").write_text(json.dumps(_run("jax.mlp", "cpu")))
    rc, doc = _summarize(work, out)
    assert rc == 1
    [failed] = [a for a in doc["assertions"] if not a["ok"]]
    assert failed["name"] == "timing runs, accelerator side (--device cuda)"
    assert "jax.mlp ok on cpu" in failed["detail"]


def test_summarize_fails_when_a_timing_phase_was_cut_short(tmp_path):
    """measure writes each run as it ends: a phase killed by its timeout keeps some runs, and
    their medians must not pass for the whole (the first H200 run's CPU side ran out)."""
    work, out = _work(tmp_path, "device_fallback", 1)
    phases = (work / "phases.tsv").read_text().replace("measure-cpu\t0", "measure-cpu\t124")
    (work / "phases.tsv").write_text(phases)
    (work / "runs" / "cpu" / "jax.mlp.1.json").unlink()
    rc, doc = _summarize(work, out)
    assert rc == 1
    [failed] = [a for a in doc["assertions"] if not a["ok"]]
    assert failed == {"name": "timing runs, cpu side (--device cpu)", "ok": False,
                      "detail": "exit 124, 1 of 2 runs"}


def test_float32_convolutions_are_judged_from_the_compiled_twins_accuracy():
    def report(error):
        return {"evidence": [{"scenario": "torch.cnn.compile", "candidate": {"result": {
            "device": "cuda", "compile": {"accuracy": {"series": {"outputs": {
                "eager_vs_fp64": error}}}}}}}]}
    assert gpurun.fp32_conv_assertion(report(2.3e-7)) == (
        True, "torch.cnn.compile on cuda: outputs 2.3e-07 from float64 (limit 1e-05)")
    assert gpurun.fp32_conv_assertion(report(8.7e-4))[0] is False  # TF32, as on the first run
    assert gpurun.fp32_conv_assertion(report(None))[0] is False
    assert gpurun.fp32_conv_assertion(None) == (False, "no torch.cnn.compile run in the record "
                                                       "report")


def test_the_graph_break_project_trains_the_compile_tests_layer(tmp_path):
    """One source for the layer whose .item() breaks the graph: tests/test_compile.py, read."""
    from test_compile import TORCH_V2

    gpurun.main(["graph-break-project", "--dir", str(tmp_path), "--timeout", "60"])
    assert (tmp_path / "lg_testlayer.py").read_text() == textwrap.dedent(TORCH_V2)
    cuda = (tmp_path / "train_cuda.py").read_text()
    assert 'DEVICE = "cuda" if torch.cuda.is_available() else "cpu"' in cuda
    assert 'DEVICE = "cpu"' in (tmp_path / "train_cpu.py").read_text()
    compile(cuda, "train_cuda.py", "exec")
    assert "timeout = 60" in (tmp_path / "lockguard.toml").read_text()


def _docker_work(tmp_path: Path, fallback_reason: str) -> tuple[Path, Path]:
    """A GPU run with the docker phases (run.sh step 6): images built, recorded on the GPU
    with their stack in the fingerprint, and the no-GPU check with `fallback_reason`."""
    work, out = _work(tmp_path, "device_fallback", 1)
    with open(work / "phases.tsv", "a") as f:
        f.write("docker-build\t0\t600.0\t\ndocker-record\t0\t40.0\t\n"
                "docker-fallback\t1\t30.0\t\n")
    stack = {"summary": "cuda 13.0 · cuDNN 9.24.0 · NCCL 2.30.7 from the lock"}
    record = _report(("torch.mlp", "new", "cuda"))
    record["evidence"] = [{"scenario": "torch.mlp", "candidate": {"result": {
        "scenario": "torch.mlp", "fingerprint": {"image": {
            "tag": "lockguard/torch-cuda:abc", "stack": stack}}}}}]
    fallback = _report(("torch.mlp", "device_fallback", "cpu"))
    fallback["verdicts"][0]["reasons"] = [f"expected cuda, ran on cpu: {fallback_reason}"]
    (out / "docker-record.json").write_text(json.dumps(record))
    (out / "docker-fallback.json").write_text(json.dumps(fallback))
    return work, out


def test_summarize_the_docker_phases(tmp_path):
    work, out = _docker_work(tmp_path / "good", "no NVIDIA driver visible in the container (…)")
    proc = subprocess.run([sys.executable, str(GPU / "gpurun.py"), "summarize", "--work",
                           str(work), "--out", str(out), "--device", "cuda", "--docker"],
                          capture_output=True, text=True)
    doc = json.loads((out / "gpu.json").read_text())
    assert proc.returncode == 0 and doc["ok"] is True, doc["assertions"]
    names = [a["name"] for a in doc["assertions"] if a["name"].startswith("docker")]
    assert len(names) == 3
    assert doc["docker"]["stacks"] == {"lockguard/torch-cuda:abc": {
        "summary": "cuda 13.0 · cuDNN 9.24.0 · NCCL 2.30.7 from the lock"}}
    assert "docker lockguard/torch-cuda:abc: cuda 13.0" in proc.stdout
    # a fallback that does not say the container saw no driver fails the run
    work, out = _docker_work(tmp_path / "bad", "torch.cuda.is_available() is False")
    proc = subprocess.run([sys.executable, str(GPU / "gpurun.py"), "summarize", "--work",
                           str(work), "--out", str(out), "--device", "cuda", "--docker"],
                          capture_output=True, text=True)
    doc = json.loads((out / "gpu.json").read_text())
    failed = [a for a in doc["assertions"] if not a["ok"]]
    assert proc.returncode == 1 and [a["name"] for a in failed] == [
        "docker: no GPU asked for gives device_fallback with its cause"]
    assert "torch.mlp: device_fallback" in failed[0]["detail"]


# --------------------------------------------------------------------------- collect

def _returned(tmp_path: Path, members: dict[str, bytes], dry_run: bool = False) -> Path:
    files = tmp_path / "files"
    files.mkdir()
    (files / "gpu.json").write_text(json.dumps({"dry_run": dry_run,
                                                "device": "cpu" if dry_run else "cuda",
                                                "ok": True}))
    with tarfile.open(files / "golden.tar.gz", "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return files


def _collect(files: Path, repo: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(GPU / "collect.sh"), str(files), "--repo", str(repo)],
                          capture_output=True, text=True)


def test_collect_brings_goldens_and_results_into_the_repo(tmp_path):
    repo = tmp_path / "repo"
    files = _returned(tmp_path, {"./cuda/torch.mlp.json": b"{}\n",
                                 "./cuda/h200/jax.mlp.json": b"{\"a\": 1}\n"})
    proc = _collect(files, repo)
    assert proc.returncode == 0, proc.stderr
    assert (repo / "golden" / "cuda" / "torch.mlp.json").read_bytes() == b"{}\n"
    assert (repo / "golden" / "cuda" / "h200" / "jax.mlp.json").is_file()
    assert json.loads((repo / "benchmarks" / "results" / "gpu.json").read_text())["ok"] is True


@pytest.mark.parametrize("members, dry_run, message", [
    ({"./cuda/torch.mlp.json": b"{}"}, True, "dry run"),
    ({"./cpu/torch.mlp.json": b"{}"}, False, "a cpu golden"),
    ({"./cuda/../../evil.json": b"{}"}, False, "not a relative path"),
    ({"./cuda/notes.txt": b"x"}, False, "expected <device class>"),
])
def test_collect_refuses_and_writes_nothing(tmp_path, members, dry_run, message):
    repo = tmp_path / "repo"
    proc = _collect(_returned(tmp_path, members, dry_run), repo)
    assert proc.returncode == 2 and message in proc.stderr
    assert not repo.exists()


# ------------------------------------------------------------- harness: NVIDIA driver

def test_driver_version_from_proc_text():
    proprietary = ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19 "
                   "01:15:15 UTC 2023\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n")
    open_module = ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  "
                   "Release Build  (dvs-builder@U16-I3-B14-1-1)  Thu Sep 25 01:25:34 UTC 2025\n")
    assert harness_common.parse_nvidia(proprietary, [])["driver"] == "535.104.05"
    assert harness_common.parse_nvidia(open_module, [])["driver"] == "580.95.05"
    assert harness_common.parse_nvidia("GCC version: 12.2.0\n", [])["driver"] is None
