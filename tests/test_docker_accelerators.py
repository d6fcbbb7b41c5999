"""CUDA and TPU images from the lock's own wheels (lockguard/envs/docker/stack.py).

First the judgement of a stack report against a lock (no engine): a sound torch CUDA stack, a
wheel built for another CUDA major, a library that is missing or built against another, a
system copy shadowing the lock's, a CPU-only build, jax's plugin and libtpu. Then the reason a
fallback gives, the run's accelerator request, and the harness's causes.

Then real images (marked `docker`, `slow` and `accelerator_images`: multi-GB builds, minutes
cold, seconds once the engine has them): `lockguard build` of a torch 2.14.1 CUDA image, a
jax[cuda13] image and a jax[tpu] image from real locks (tests/data, README there) on the cpu
images' base, each stack proven in the build; runs without an accelerator that are a
device_fallback naming the cause in every report format; and a lock whose CUDA runtime wheel is
swapped for CUDA 12's, which the stack check refuses naming the wheel and the library.

The wheelhouses and images live in the normal cache and engine (LOCKGUARD_CACHE, the engine's
images): a second run reuses them. The suite leaves these builds out (pyproject's addopts);
`pytest -m accelerator_images` runs them.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest

import lockguard.envs.docker as dk
from lockguard.compare.tolerance import Policy
from lockguard.compare.verdicts import compare_runs
from lockguard.envs.base import EnvError
from lockguard.envs.docker import accelerators
from lockguard.envs.docker.build import image_dir
from lockguard.envs.docker.recipe import VENV_PYTHON, load_bases
from lockguard.envs.docker.stack import AcceleratorStack, stack_line, stack_problems
from lockguard.envs.harness import HARNESS_DIR
from lockguard.locks.families import cuda_major
from lockguard.locks.parser import parse_lock, parse_lock_text
from lockguard.names import Verdict
from lockguard.results import SCHEMA_VERSION, RunResult, Status

from conftest import make_project, prepared_image, run_cli

DATA = Path(__file__).resolve().parent / "data"
TORCH_CUDA = DATA / "torch-2.14.1-cuda.txt"
JAX_CUDA = DATA / "jax-0.10.2-cuda13.txt"
JAX_TPU = DATA / "jax-0.10.2-tpu.txt"
NO_DRIVER = "no NVIDIA driver visible in the container"
NO_TPU = "no TPU device visible in the container"
HASH = "--hash=sha256:" + "0" * 64  # a swapped pin in a hashed lock (never downloaded here)


def pinned(lock, name: str) -> str:
    return lock.by_name[name][0].version


def release(version: str, parts: int) -> str:
    return ".".join(version.split(".")[:parts])


# ---------------------------------------------------------------------------------------------
# Judging a stack report (no engine)
# ---------------------------------------------------------------------------------------------


def torch_report(lock, **changes) -> dict:
    """What STACK_PROBE reports in a sound torch 2.14.1 CUDA image of `lock` (its shape as the
    real probe prints it; the versions from the lock)."""
    def v(name):
        return pinned(lock, name)

    def owned(file, dist, **extra):
        return {"file": file, "dist": dist, "version": v(dist) if dist else None, **extra}

    cudnn = [int(x) for x in v("nvidia-cudnn-cu13").split(".")[:3]]
    nccl = v("nvidia-nccl-cu13")
    runtime = [int(x) for x in v("nvidia-cuda-runtime").split(".")[:2]]
    # torch's own Requires-Dist on the stack, as the real wheel declares it
    requires = {"torch": ["2.14.1", [
        f"{name}=={v(name)}; platform_system == \"Linux\""
        for name in ("nvidia-cudnn-cu13", "nvidia-nccl-cu13", "nvidia-nvshmem-cu13")]
        + ["filelock", 'optree>=0.13.0; extra == "optree"']]}
    report = {
        "module": "torch", "accelerator": "cuda", "errors": [], "requires": requires,
        "markers": {"platform_system": "Linux", "sys_platform": "linux",
                    "python_version": "3.11", "platform_machine": "x86_64"},
        "view": {"version": "2.14.1+cu130", "cuda_build": "13.0",
                 "cudnn": cudnn[0] * 10000 + cudnn[1] * 100 + cudnn[2], "nccl": nccl},
        "loaded": [owned("nvidia/cu13/lib/libcudart.so.13", "nvidia-cuda-runtime"),
                   owned("nvidia/cudnn/lib/libcudnn.so.9", "nvidia-cudnn-cu13"),
                   owned("nvidia/nccl/lib/libnccl.so.2", "nvidia-nccl-cu13"),
                   owned("nvidia/cu13/lib/libcublas.so.13", "nvidia-cublas"),
                   owned("/usr/lib/x86_64-linux-gnu/libc.so.6", None)],
        "libraries": [owned("nvidia/cudnn/lib/libcudnn_ops.so.9", "nvidia-cudnn-cu13",
                            error=None),
                      owned("torch/lib/libcaffe2_nvrtc.so", None, error=(
                          "libcuda.so.1: cannot open shared object file: No such file or "
                          "directory")),
                      owned("nvidia/nvshmem/lib/nvshmem_bootstrap_mpi.so.3",
                            "nvidia-nvshmem-cu13", error="libmpi.so.40: cannot open shared "
                            "object file: No such file or directory")],
        "versions": {"cudart": runtime[0] * 1000 + runtime[1] * 10,
                     "cudart_file": owned("nvidia/cu13/lib/libcudart.so.13",
                                          "nvidia-cuda-runtime"),
                     "cudnn_file": owned("nvidia/cudnn/lib/libcudnn.so.9", "nvidia-cudnn-cu13"),
                     "nccl_file": owned("nvidia/nccl/lib/libnccl.so.2", "nvidia-nccl-cu13"),
                     "cublas": [int(x) for x in v("nvidia-cublas").split(".")[:3]],
                     "cublas_file": owned("nvidia/cu13/lib/libcublas.so.13", "nvidia-cublas")},
    }
    for key, value in changes.items():
        report[key] = value
    return report


def swapped(lock_path: Path, old: str, new_line: str) -> str:
    """The lock's text with one pin (and its hash lines) replaced by `new_line`."""
    out, skipping = [], False
    for line in lock_path.read_text().splitlines(keepends=True):
        if line.startswith(f"{old}=="):
            out.append(new_line)
            skipping = True
            continue
        if skipping and line.startswith((" ", "\t")):
            continue
        skipping = False
        out.append(line)
    text = "".join(out)
    assert new_line in text
    return text


def test_a_sound_torch_cuda_stack_is_the_lock():
    lock = parse_lock(TORCH_CUDA)
    stack, problems = stack_problems(torch_report(lock), lock, "torch")
    assert problems == []
    runtime = release(pinned(lock, "nvidia-cuda-runtime"), 2)
    cudnn = release(pinned(lock, "nvidia-cudnn-cu13"), 3)
    nccl = release(pinned(lock, "nvidia-nccl-cu13"), 3)
    assert (stack.cuda, stack.cudnn, stack.nccl) == (runtime, cudnn, nccl)
    assert stack.summary() == f"cuda {runtime} · cuDNN {cudnn} · NCCL {nccl} from the lock"
    # the driver's library is the host's to bring; an MPI bootstrap needs the system's MPI
    assert stack.driver_only == ("libcaffe2_nvrtc.so",)
    assert dict(stack.optional) == {"nvshmem_bootstrap_mpi.so.3": "libmpi.so.40"}
    record = stack.record()
    assert record["summary"] == stack.summary() and record["optional"]
    line = stack_line(record)
    assert line.startswith(stack.summary() + ": 7 libraries load without a GPU")
    assert "1 need the host's driver" in line and "libmpi.so.40" in line


def test_a_wheel_built_for_another_cuda_major_is_named_with_its_library():
    """nvidia-nccl-cu13 swapped for nvidia-nccl-cu12: the same libnccl.so.2 soname loads, and
    the version torch reports is the pin's, but the wheel is CUDA 12's."""
    lock = parse_lock_text(swapped(TORCH_CUDA, "nvidia-nccl-cu13",
                                   f"nvidia-nccl-cu12==2.27.7 {HASH}\n"), str(TORCH_CUDA))
    report = torch_report(parse_lock(TORCH_CUDA))
    for entry in report["loaded"] + [report["versions"]["nccl_file"]]:
        if entry["file"].endswith("libnccl.so.2"):
            entry.update(dist="nvidia-nccl-cu12", version="2.27.7")
    report["view"]["nccl"] = "2.27.7"
    _, problems = stack_problems(report, lock, "torch")
    nccl = pinned(parse_lock(TORCH_CUDA), "nvidia-nccl-cu13")
    assert problems == ["nvidia-nccl-cu12==2.27.7 is built for CUDA 12, torch 2.14.1+cu130 "
                        "for CUDA 13.0 (libnccl.so.2)",
                        f"torch 2.14.1 requires nvidia-nccl-cu13=={nccl}; the lock pins "
                        "nvidia-nccl-cu12==2.27.7 instead"]


def test_a_missing_runtime_names_the_wheel_that_has_another():
    """The CUDA runtime wheel swapped for CUDA 12's: torch cannot import (libcudart.so.13),
    and the error says which wheel holds which libcudart instead."""
    lock = parse_lock_text(swapped(TORCH_CUDA, "nvidia-cuda-runtime",
                                   f"nvidia-cuda-runtime-cu12==12.9.79 {HASH}\n"),
                           str(TORCH_CUDA))
    report = torch_report(parse_lock(TORCH_CUDA), loaded=[], versions={}, errors=[
        "import torch: OSError: libcudart.so.13: cannot open shared object file: No such file "
        "or directory"])
    report["view"] = {"version": "2.14.1+cu130", "cuda_build": "13.0"}
    report["libraries"].append({"file": "nvidia/cuda_runtime/lib/libcudart.so.12",
                                "dist": "nvidia-cuda-runtime-cu12", "version": "12.9.79",
                                "error": None})
    report["libraries"].append({"file": "nvidia/cusparselt/lib/libcusparseLt.so.0",
                                "dist": "nvidia-cusparselt-cu13", "version": "0.8.1",
                                "error": "libcudart.so.13: cannot open shared object file: No "
                                         "such file or directory"})
    _, problems = stack_problems(report, lock, "torch")
    has = "the image has libcudart.so.12 from nvidia-cuda-runtime-cu12==12.9.79"
    assert problems[0] == ("import torch: OSError: libcudart.so.13: cannot open shared object "
                           "file: No such file or directory (nothing in the image provides "
                           f"libcudart.so.13; {has})")
    assert ("nvidia-cuda-runtime-cu12==12.9.79 is built for CUDA 12, torch 2.14.1+cu130 for "
            "CUDA 13.0 (libcudart.so.12)") in problems
    assert ("libcusparseLt.so.0 from nvidia-cusparselt-cu13==0.8.1 does not load: needs "
            f"libcudart.so.13, which nothing in the image provides; {has}") in problems


def test_a_system_copy_or_another_version_is_not_the_lock():
    lock = parse_lock(TORCH_CUDA)
    cudnn = pinned(lock, "nvidia-cudnn-cu13")
    # a cuDNN on the base's library path, found before the wheel's
    system = torch_report(lock)
    system["versions"]["cudnn_file"] = {"file": "/usr/lib/x86_64-linux-gnu/libcudnn.so.9",
                                        "dist": None, "version": None}
    _, problems = stack_problems(system, lock, "torch")
    assert problems == ["torch 2.14.1+cu130 loads cuDNN from /usr/lib/x86_64-linux-gnu/"
                        f"libcudnn.so.9, not from the lock's nvidia-cudnn-cu13=={cudnn}"]
    # the framework reports another version than the lock pins
    older = torch_report(lock)
    older["view"]["cudnn"] = 91900
    _, problems = stack_problems(older, lock, "torch")
    assert problems == [f"torch 2.14.1+cu130 loads cuDNN 9.19.0, the lock pins "
                        f"nvidia-cudnn-cu13=={cudnn} (libcudnn.so from "
                        f"nvidia-cudnn-cu13=={cudnn})"]


def test_an_undefined_symbol_fails_naming_the_wheel():
    lock = parse_lock(TORCH_CUDA)
    report = torch_report(lock)
    report["libraries"][0]["error"] = ("/x/nvidia/cudnn/lib/libcudnn_ops.so.9: undefined "
                                       "symbol: cublasLtMatmulAlgoGetHeuristic, version "
                                       "libcublasLt.so.12")
    _, problems = stack_problems(report, lock, "torch")
    cudnn = pinned(lock, "nvidia-cudnn-cu13")
    assert problems == [f"libcudnn_ops.so.9 from nvidia-cudnn-cu13=={cudnn} does not load: "
                        "undefined symbol cublasLtMatmulAlgoGetHeuristic, (built against "
                        "another version of a library it loads)"]


def test_a_cpu_only_framework_has_no_cuda_stack():
    lock = parse_lock(DATA / "torch-2.13.0.txt")
    report = {"module": "torch", "accelerator": "cuda", "view": {
        "version": "2.13.0+cpu", "cuda_build": None}, "errors": [], "loaded": [],
        "libraries": [], "versions": {}}
    _, problems = stack_problems(report, lock, "torch")
    assert problems == ["torch 2.13.0+cpu is a CPU-only build (torch.version.cuda is None): the "
                        "lock pins no CUDA build of torch for a cuda image (torch's "
                        "default-index Linux wheels bring the nvidia-* stack)"]
    jax = {"module": "jax", "accelerator": "cuda", "view": {"version": "0.10.2",
                                                           "plugin": None}}
    _, problems = stack_problems(jax, parse_lock(DATA / "jax-0.10.2.txt"), "jax")
    assert problems == ["the lock pins no CUDA plugin for jax 0.10.2 (jax[cuda13] brings "
                        "jax-cuda13-plugin and its nvidia-* wheels)"]


def test_jax_cuda_versions_follow_jax_s_own_rule():
    lock = parse_lock(JAX_CUDA)
    runtime = [int(x) for x in pinned(lock, "nvidia-cuda-runtime").split(".")[:2]]
    cudnn = [int(x) for x in pinned(lock, "nvidia-cudnn-cu13").split(".")[:3]]
    plugin = ["0.10.2", ['nvidia-cudnn-cu13<10.0,>=9.12.0.46; sys_platform == "linux" and '
                         'extra == "with-cuda"', "jax-cuda13-pjrt==0.10.2"]]
    report = {"module": "jax", "accelerator": "cuda", "errors": [], "loaded": [],
              "libraries": [], "versions": {}, "markers": {"sys_platform": "linux"},
              "requires": {"jax": ["0.10.2", [
                  'jax-cuda13-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda13"',
                  'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda12"']],
                  "jax-cuda13-plugin": plugin}, "view": {
                  "version": "0.10.2", "plugin": "xla_cuda13", "pjrt": "xla_cuda_plugin.so",
                  "cuda": runtime[0] * 1000 + runtime[1] * 10, "cuda_build": 13000,
                  "cudnn": cudnn[0] * 10000 + cudnn[1] * 100 + cudnn[2], "cudnn_build": 90800}}
    stack, problems = stack_problems(report, lock, "jax")
    assert problems == [] and stack.cuda_build == "13.0"
    assert stack.cudnn == release(pinned(lock, "nvidia-cudnn-cu13"), 3)
    plugin[1][0] = plugin[1][0].replace(">=9.12.0.46", ">=9.99")
    _, problems = stack_problems(report, lock, "jax")
    assert problems == [f"jax-cuda13-plugin 0.10.2 requires nvidia-cudnn-cu13<10.0,>=9.99, the "
                        f"lock pins nvidia-cudnn-cu13=={pinned(lock, 'nvidia-cudnn-cu13')}"]
    plugin[1][0] = plugin[1][0].replace(">=9.99", ">=9.12.0.46")
    report["view"]["cudnn_build"] = cudnn[0] * 10000 + (cudnn[1] + 1) * 100
    _, problems = stack_problems(report, lock, "jax")
    assert problems == [f"jax 0.10.2 was built against cuDNN {cudnn[0]}.{cudnn[1] + 1}.0, the "
                        f"image loads {'.'.join(map(str, cudnn))} (libcudnn.so from "
                        f"nvidia-cudnn-cu13=={pinned(lock, 'nvidia-cudnn-cu13')})"]


def test_tpu_stack_is_libtpu_as_jax_asks_for_it():
    lock = parse_lock(JAX_TPU)
    libtpu = pinned(lock, "libtpu")
    report = {"module": "jax", "accelerator": "tpu", "errors": [], "loaded": [],
              "versions": {}, "view": {"version": "0.10.2", "pjrt": "libtpu"},
              "libraries": [{"file": "libtpu/libtpu.so", "dist": "libtpu", "version": libtpu,
                             "error": None}],
              "markers": {"sys_platform": "linux"},
              "requires": {"jax": ["0.10.2", [
                  f"libtpu=={release(libtpu, 3)}.*; extra == \"tpu\"",
                  'jaxlib<=0.10.2,>=0.10.2; extra == "tpu"',
                  'jax-cuda12-plugin[with-cuda]<=0.10.2,>=0.10.2; extra == "cuda12"']]}}
    stack, problems = stack_problems(report, lock, "jax")
    assert problems == [] and stack.summary() == f"libtpu {libtpu} from the lock"
    report["requires"]["jax"][1][0] = 'libtpu==0.0.41.*; extra == "tpu"'
    _, problems = stack_problems(report, lock, "jax")
    assert problems == [f"jax 0.10.2 requires libtpu==0.0.41.*, the lock pins libtpu=={libtpu}"]
    _, problems = stack_problems(report, parse_lock(DATA / "jax-0.10.2.txt"), "jax")
    assert problems[0] == "the lock pins no libtpu for jax 0.10.2 (jax[tpu] brings it)"


def test_cuda_13_toolkit_wheels_carry_their_major_in_the_version():
    lock = parse_lock(TORCH_CUDA)
    majors = {p.name: cuda_major(p) for p in lock.pins if cuda_major(p) is not None}
    assert majors["nvidia-cuda-runtime"] == majors["nvidia-cublas"] == 13
    assert majors["nvidia-cudnn-cu13"] == majors["nvidia-nccl-cu13"] == 13
    # cuFFT, cuSPARSE and cuRAND number themselves: they say nothing about CUDA's major
    assert not {"nvidia-cufft", "nvidia-cusparse", "nvidia-curand"} & set(majors)
    assert set(majors.values()) == {13}


# ---------------------------------------------------------------------------------------------
# The run's accelerator request, the fallback's reason, the harness's causes (no engine)
# ---------------------------------------------------------------------------------------------


def _env(accelerator: str) -> dk.DockerEnv:
    lock = parse_lock(TORCH_CUDA)
    base = dk.Base(name="cuda", image="docker.io/library/python:3.11-slim-bookworm",
                   digest="sha256:" + "a" * 64, python="3.11", glibc="2.36")
    recipe = dk.recipe_for("torch", accelerator, lock, base)
    built = dk.BuiltImage(tag=recipe.tag, id="sha256:" + "d" * 64, recipe=recipe, reused=True,
                          seconds=0.0, size=0, log=Path("/dev/null"))
    return dk.DockerEnv(built, recipe.lock_hash, accelerator, "docker")


@pytest.mark.parametrize("mask, requested", [(None, True), ("0", True), ("GPU-1a2b", True),
                                             ("", False), ("-1", False), ("none", False)])
def test_a_run_asks_for_gpus_unless_cuda_visible_devices_hides_them(monkeypatch, mask,
                                                                    requested):
    if mask is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", mask)
    assert accelerators.gpus_requested() is requested
    assert ("--gpus" in _env("cuda").device_args()) is requested


def test_a_tpu_run_passes_no_device_when_tpu_visible_chips_is_empty(monkeypatch):
    monkeypatch.setattr(accelerators, "tpu_devices", lambda: ["/dev/accel0"])
    monkeypatch.delenv("TPU_VISIBLE_CHIPS", raising=False)
    assert _env("tpu").device_args()[:2] == ["--device", "/dev/accel0"]
    monkeypatch.setenv("TPU_VISIBLE_CHIPS", "")
    assert _env("tpu").device_args() == [] and not accelerators.tpus_requested()


def test_the_cpu_cuda_and_tpu_images_share_one_base():
    """The default cuda base is the cpu one: the CUDA user space is the lock's wheels. The
    system-CUDA base stays in bases.toml as an option, never chosen by default."""
    cpu, cuda, tpu = (dk.base_for(a) for a in ("cpu", "cuda", "tpu"))
    assert cpu.ref == cuda.ref == tpu.ref and cuda.cuda is None and not cuda.python_setup
    bases = load_bases()
    assert bases["nvidia-cuda"].cuda and "nvidia/cuda" in bases["nvidia-cuda"].image
    assert "nvidia/cuda" not in dk.recipe_for("torch", "cuda", parse_lock(TORCH_CUDA)).dockerfile


def compare(baselines, candidates, expected_device):
    return compare_runs(baselines, candidates, policy=Policy(), baseline_kind="golden",
                        expected_device=expected_device, timed_together=False)


def _run(**fields) -> RunResult:
    data = dict(schema_version=SCHEMA_VERSION, scenario="torch.mlp", framework="torch",
                framework_version="2.14.1", device="cpu", steps=3, losses=[1.0, 0.5, 0.25],
                status=Status.ok)
    data.update(fields)
    return RunResult(**data)


def test_a_fallback_says_its_cause_and_the_image_stack():
    stack = AcceleratorStack(accelerator="cuda", framework="torch", cuda="13.0",
                             cudnn="9.24.0", nccl="2.30.7").record()
    fingerprint = {"device_fallback": f"{NO_DRIVER} (no /proc/driver/nvidia, no libcuda.so.1)",
                   "image": {"tag": "lockguard/torch-cuda:abc", "stack": stack}}
    v = compare([_run()], [_run(fingerprint=fingerprint)], expected_device="cuda")
    assert v.verdict == Verdict.device_fallback
    assert v.reasons[0] == (f"expected cuda, ran on cpu: {NO_DRIVER} (no /proc/driver/nvidia, "
                            "no libcuda.so.1) (image lockguard/torch-cuda:abc: cuda 13.0 · "
                            "cuDNN 9.24.0 · NCCL 2.30.7 from the lock)")


def _harness_devices():
    sys.path.insert(0, str(HARNESS_DIR))
    try:
        return importlib.import_module("_lockguard_harness.devices")
    finally:
        sys.path.remove(str(HARNESS_DIR))


def test_the_harness_tells_the_causes_apart(monkeypatch):
    devices = _harness_devices()
    present: set[str] = set()
    monkeypatch.setattr(devices, "_exists", lambda p: p in present)
    monkeypatch.setattr(devices, "_glob", lambda pattern: [
        p for p in present if p.startswith(pattern.split("*")[0].split("[")[0])])
    monkeypatch.setattr(devices, "_driver_library", lambda: "libcuda.so.1" in present)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert devices.cuda_missing() == "no NVIDIA driver visible (no /proc/driver/nvidia, no " \
                                     "libcuda.so.1)"
    present.add("/.dockerenv")
    assert devices.cuda_missing().startswith(NO_DRIVER + " (")
    assert devices.tpu_missing().startswith(NO_TPU + " (")
    present |= {"/proc/driver/nvidia/version", "libcuda.so.1"}
    assert devices.cuda_missing() == "the NVIDIA driver sees no GPU in the container"
    present.add("/proc/driver/nvidia/gpus/0000:01:00.0")
    assert devices.cuda_missing() is None  # a GPU is there: the framework's reason counts
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert devices.cuda_missing() == "CUDA_VISIBLE_DEVICES='' hides every GPU"
    present.add("/dev/accel0")
    assert devices.tpu_missing() is None


def test_the_harness_asks_libcuda_for_the_driver_cuda_version(monkeypatch):
    # torch 2.11 has no torch._C._cuda_getDriverVersion: the first H200 run recorded None.
    devices = _harness_devices()

    class LibCuda:
        def __init__(self, version: int, rc: int = 0) -> None:
            self.version, self.rc = version, rc

        def cuDriverGetVersion(self, out) -> int:  # noqa: N802 - the driver API's name
            out._obj.value = self.version
            return self.rc

    def machine(lib):
        def cdll(name: str):
            assert name == "libcuda.so.1"
            if lib is None:
                raise OSError("libcuda.so.1: cannot open shared object file")
            return lib
        return cdll

    monkeypatch.setattr(devices, "_cdll", machine(LibCuda(13000)))
    assert devices.driver_cuda_version() == 13000
    monkeypatch.setattr(devices, "_cdll", machine(LibCuda(13000, rc=3)))  # CUDA_ERROR_NOT_INITIALIZED
    assert devices.driver_cuda_version() is None
    monkeypatch.setattr(devices, "_cdll", machine(object()))  # a library without the call
    assert devices.driver_cuda_version() is None
    monkeypatch.setattr(devices, "_cdll", machine(None))
    assert devices.driver_cuda_version() is None
    assert devices._driver_library() is False


# ---------------------------------------------------------------------------------------------
# Real images on a real engine
# ---------------------------------------------------------------------------------------------

def _build(lock: Path, framework: str, accelerator: str) -> tuple[dk.BuiltImage, str]:
    """`lockguard build` as a user runs it (no --base-image: the engine fixture's
    LOCKGUARD_BASE_IMAGE is what the cpu images need too), then the image it made."""
    proc = run_cli("build", "--lock", str(lock), "--framework", framework, "--accelerator",
                   accelerator, cwd=lock.parent, timeout=3600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    image = dk.build_image(parse_lock(lock), framework, accelerator)
    assert image.reused and image.tag in proc.stdout and image.stack is not None
    return image, proc.stdout


@pytest.fixture(scope="module")
def torch_cuda(engine):
    return _build(TORCH_CUDA, "torch", "cuda")


@pytest.fixture(scope="module")
def jax_cuda(engine):
    return _build(JAX_CUDA, "jax", "cuda")


@pytest.fixture(scope="module")
def jax_tpu(engine):
    return _build(JAX_TPU, "jax", "tpu")


def _no_cuda_outside_the_venv(engine, tag: str) -> None:
    found = engine.containers.run(tag, ["sh", "-c", "find / -xdev \\( -name 'libcudart*' -o "
                                        "-name 'libcudnn*' -o -name 'libnccl*' -o -name "
                                        "'libtpu*' \\) -not -path '/opt/lockguard/venv/*' "
                                        "| wc -l"], remove=True, network_mode="none")
    assert found.decode().strip() == "0"


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_torch_cuda_image_is_the_lock_on_the_cpu_base(engine, torch_cuda):
    image, out = torch_cuda
    lock = parse_lock(TORCH_CUDA)
    stack = image.stack
    runtime = release(pinned(lock, "nvidia-cuda-runtime"), 2)
    cudnn = release(pinned(lock, "nvidia-cudnn-cu13"), 3)
    nccl = release(pinned(lock, "nvidia-nccl-cu13"), 3)
    assert (stack["cuda"], stack["cuda_build"], stack["cudnn"], stack["nccl"]) == (
        runtime, "13.0", cudnn, nccl)
    assert stack["cublas"] == release(pinned(lock, "nvidia-cublas"), 3)
    summary = f"cuda {runtime} · cuDNN {cudnn} · NCCL {nccl} from the lock"
    assert stack["summary"] == summary and f"  {summary}: " in out
    assert stack["libraries"] > 30 and "libcaffe2_nvrtc.so" in stack["driver_only"]
    # built on the cpu images' base, with nothing CUDA outside the lock's wheels
    assert image.recipe.base == dk.resolve_base(engine, "cpu") and image.recipe.base.cuda is None
    _no_cuda_outside_the_venv(engine, image.tag)
    record = json.loads((image_dir(image.recipe) / "lockguard-ready.json").read_text())
    assert record["stack"] == stack and record["image_id"] == image.id


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_a_cuda_run_without_a_gpu_is_a_device_fallback_in_every_format(engine, torch_cuda,
                                                                       tmp_path):
    """CUDA_VISIBLE_DEVICES="" asks for no GPU: the image starts without one, torch.mlp
    trains on the CPU, and every report format says why (never a crash, never a pass)."""
    image, _ = torch_cuda
    project = make_project(tmp_path / "p", """
        lock = "torch.txt"
        env = "docker"
        device = "cuda"
        scenarios = ["torch.mlp"]
        steps = 3
        """, locks={"torch.txt": TORCH_CUDA})
    report = tmp_path / "report.json"
    proc = run_cli("record", "--format", "json", "-o", str(report), cwd=project,
                   env={"CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(report.read_text())
    [verdict] = data["verdicts"]
    cause = f"expected cuda, ran on cpu: {NO_DRIVER}"
    assert verdict["verdict"] == "device_fallback" and verdict["reasons"][0].startswith(cause)
    assert f"(image {image.tag}: {image.stack['summary']})" in verdict["reasons"][0]
    [evidence] = data["evidence"]
    result = evidence["candidate"]["result"]
    assert result["status"] == "ok" and len(result["losses"]) == 3  # it trained, on the CPU
    assert result["fingerprint"]["image"]["stack"]["summary"] == image.stack["summary"]
    assert not (project / "golden").exists() or not list((project / "golden").rglob("*.json"))
    for fmt in ("text", "markdown", "html", "junit", "github"):
        shown = run_cli("report", str(report), "--format", fmt, cwd=project)
        assert shown.returncode == 1, (fmt, shown.stderr)
        assert NO_DRIVER in shown.stdout, fmt
        assert "device_fallback" in shown.stdout or "wrong device" in shown.stdout, fmt


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_asking_for_a_gpu_the_engine_cannot_give_is_one_line(engine, torch_cuda, tmp_path,
                                                            monkeypatch):
    if "nvidia" in (engine.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime: GPUs can be asked for here")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    project = make_project(tmp_path / "p", """
        lock = "torch.txt"
        env = "docker"
        device = "cuda"
        scenarios = ["torch.mlp"]
        steps = 3
        """, locks={"torch.txt": TORCH_CUDA})
    proc = run_cli("check", "--allow-new", cwd=project)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("\n") == 1 and "NVIDIA Container Toolkit" in proc.stderr
    assert "CUDA_VISIBLE_DEVICES=" in proc.stderr  # and how to run the image without a GPU
    # the refused GPU container is not left behind, Created, holding the image
    assert not engine.containers.list(all=True, filters={"ancestor": torch_cuda[0].tag,
                                                         "status": "created"})


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_a_lock_with_a_cuda_12_runtime_fails_the_stack_check(engine, torch_cuda, tmp_path):
    """The torch 2.14.1 lock with nvidia-cuda-runtime (CUDA 13) swapped for
    nvidia-cuda-runtime-cu12: an image holding exactly that lock (made here from the real one
    by swapping the wheel, rather than a second multi-GB build) fails the check that every
    build and every reuse of an unchecked tag runs, naming the wheel and the library."""
    image, _ = torch_cuda
    target = dk.target_of(engine, image.recipe.base)
    wheel_lock = parse_lock_text("nvidia-cuda-runtime-cu12==12.9.79\n",
                                 str(tmp_path / "cu12.txt"))
    house = dk.wheelhouse_for(wheel_lock, target)  # from the package index, cached
    pin_line = (house / "requirements.txt").read_text()
    lock = parse_lock_text(swapped(TORCH_CUDA, "nvidia-cuda-runtime", pin_line),
                           str(tmp_path / "torch-cu12-runtime.txt"))
    recipe = dk.recipe_for("torch", "cuda", lock, image.recipe.base)
    context = tmp_path / "context"
    context.mkdir()
    [wheel] = list((house / "wheels").iterdir())
    (context / wheel.name).write_bytes(wheel.read_bytes())
    pip = f"{VENV_PYTHON} -m pip --disable-pip-version-check"
    (context / "Dockerfile").write_text(
        f"FROM {image.tag}\nCOPY {wheel.name} /tmp/\n"
        f"RUN {pip} uninstall -y -q nvidia-cuda-runtime && {pip} install -q --no-index "
        f"--no-deps /tmp/{wheel.name} && rm /tmp/{wheel.name}\n")
    derived, _ = engine.images.build(path=str(context), tag=recipe.tag, network_mode="none",
                                     rm=True)
    try:
        with pytest.raises(EnvError) as err:
            dk.build_image(lock, "torch", "cuda", client=engine)
    finally:
        engine.images.remove(derived.id, force=True)
    message = str(err.value)
    assert "\n" not in message and "stack of torch-cu12-runtime.txt does not hold" in message
    assert ("nothing in the image provides libcudart.so.13; the image has libcudart.so.12 from "
            "nvidia-cuda-runtime-cu12==12.9.79") in message
    log = (image_dir(recipe) / "build.log").read_text()
    assert ("nvidia-cuda-runtime-cu12==12.9.79 is built for CUDA 12, torch 2.14.1+cu130 for "
            "CUDA 13.0 (libcudart.so.12)") in log


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_jax_cuda_image_proves_its_stack_and_falls_back_saying_why(engine, jax_cuda,
                                                                  tmp_path, monkeypatch):
    image, out = jax_cuda
    lock = parse_lock(JAX_CUDA)
    stack = image.stack
    assert stack["cuda"] == release(pinned(lock, "nvidia-cuda-runtime"), 2)
    assert stack["cudnn"] == release(pinned(lock, "nvidia-cudnn-cu13"), 3)
    assert stack["nccl"] == release(pinned(lock, "nvidia-nccl-cu13"), 3)
    assert stack["cuda_build"].startswith("13.") and f"  {stack['summary']}: " in out
    assert image.recipe.base == dk.resolve_base(engine, "cpu")
    _no_cuda_outside_the_venv(engine, image.tag)
    _falls_back(jax_cuda[0], "cuda", "CUDA_VISIBLE_DEVICES", NO_DRIVER, tmp_path, monkeypatch)


@pytest.mark.docker
@pytest.mark.slow
@pytest.mark.accelerator_images
def test_jax_tpu_image_proves_libtpu_and_falls_back_saying_why(engine, jax_tpu, tmp_path,
                                                              monkeypatch):
    image, out = jax_tpu
    lock = parse_lock(JAX_TPU)
    assert image.stack["libtpu"] == pinned(lock, "libtpu")
    assert image.stack["summary"] == f"libtpu {pinned(lock, 'libtpu')} from the lock"
    assert f"  {image.stack['summary']}: " in out and "without a TPU" in out
    assert image.recipe.base == dk.resolve_base(engine, "cpu")
    if not accelerators.tpu_devices():  # asking for the TPU here: one clear error
        monkeypatch.delenv("TPU_VISIBLE_CHIPS", raising=False)
        with pytest.raises(EnvError, match="no TPU device nodes on this host"):
            prepared_image(lock, "jax", "tpu")
    _falls_back(image, "tpu", "TPU_VISIBLE_CHIPS", NO_TPU, tmp_path, monkeypatch)


def _falls_back(image: dk.BuiltImage, device: str, variable: str, cause: str, tmp_path: Path,
                monkeypatch) -> None:
    """jax.mlp asked for `device` with the accelerator hidden: trains on the CPU, says why."""
    from lockguard.scenarios import bundled

    monkeypatch.setenv(variable, "")
    lock = parse_lock(JAX_CUDA if device == "cuda" else JAX_TPU)
    env = prepared_image(lock, "jax", device)
    assert env.device_args() == []
    scenario = [s for s in bundled() if s.id == "jax.mlp"][0]
    request = scenario.request(steps=3, seed=0, device=device, threads=1, timeout=600)
    result = env.run(request, tmp_path)
    assert result.status == Status.ok, result.error
    assert result.device == "cpu" and len(result.losses) == 3
    assert result.fingerprint["device_fallback"].startswith(cause)
    assert result.fingerprint["image"]["stack"] == image.stack
    verdict = compare([result], [result], expected_device=device)
    assert verdict.verdict == Verdict.device_fallback and cause in verdict.reasons[0]
