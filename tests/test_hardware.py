"""Hardware classes, the golden store's layout and digest, and verdicts across classes.

Fast: synthetic /proc texts and RunResults, plus one real harness run with the test
interpreter's numpy to show that a run's fingerprint and the host land in the same class.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from conftest import REPO
from lockguard import golden
from lockguard.compare.tolerance import DEFAULT_FAIL_ON, Policy
from lockguard.compare.verdicts import HardwareChange, compare_runs, is_failure
from lockguard.names import Verdict
from lockguard.golden import GoldenError, class_paths, golden_path
from lockguard.hardware import (HardwareClass, count_visible, difference, hardware_class,
                                host_class)
from lockguard.harness._lockguard_harness.common import parse_cpuinfo, parse_nvidia
from lockguard.results import RunResult

SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
cpu family\t: 6
model\t\t: 143
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
stepping\t: 8
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 aes avx f16c avx2 sha_ni avx512f avx512dq \
avx512cd avx512bw avx512vl avx512_vnni avx512_bf16 avx512_fp16 amx_bf16 amx_tile amx_int8

processor\t: 1
vendor_id\t: GenuineIntel
flags\t\t: fpu
"""

EPYC = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9B14 96-Core Processor
flags\t\t: fpu sse sse2 ssse3 fma sse4_1 sse4_2 avx f16c avx2 avx512f avx512dq avx512cd \
avx512bw avx512vl avx512_vnni avx512_bf16
"""

GRAVITON = """processor\t: 0
BogoMIPS\t: 243.75
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp asimddp sve \
svebf16 i8mm bf16
CPU implementer\t: 0x41
CPU architecture: 8
CPU variant\t: 0x1
CPU part\t: 0xd40
"""


def cpu(text: str, **extra) -> HardwareClass:
    return hardware_class({"cpu": {"machine": "x86_64", **parse_cpuinfo(text), **extra}}, "cpu")


def test_cpu_classes_tell_vendors_models_and_kernel_features_apart():
    spr, epyc = cpu(SAPPHIRE_RAPIDS), cpu(EPYC)
    assert re.fullmatch(r"intel-6\.143-amx-[0-9a-f]{8}", spr.id), spr.id
    assert re.fullmatch(r"amd-25\.17-avx512-[0-9a-f]{8}", epyc.id), epyc.id
    assert spr.name == "Intel Xeon Platinum 8481C (family 6 model 143; AMX, AVX-512 BF16 FP16 VNNI)"
    assert epyc.name.startswith("AMD EPYC 9B14 96-Core Processor (family 25 model 17;")
    # Only the first processor's block is read.
    assert "amx_tile" in spr.features and "fpu" not in spr.features
    # Flags no numeric kernel dispatches on do not split a class; one that does, does.
    assert cpu(SAPPHIRE_RAPIDS.replace(" aes", "").replace(" sha_ni", "")).id == spr.id
    no_fp16 = cpu(SAPPHIRE_RAPIDS.replace(" avx512_fp16", ""))
    assert no_fp16.id != spr.id and no_fp16.name != spr.name
    assert cpu(SAPPHIRE_RAPIDS.replace("model\t\t: 143", "model\t\t: 207")).id != spr.id
    # Same name, other features (a VM hiding some): the report says which.
    hidden = cpu(SAPPHIRE_RAPIDS.replace(" avx512_vnni", ""))
    assert "avx512_vnni" in (difference(spr, hidden) or "") or hidden.name != spr.name
    for cls in (spr, epyc, cpu(GRAVITON)):
        assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", cls.id) and len(cls.id) < 80


def test_arm_and_unknown_cpus_have_classes_too():
    graviton = cpu(GRAVITON, machine="aarch64")
    assert graviton.id.startswith("arm-8.0xd40-sve-") and "SVE" in graviton.name
    unknown = hardware_class({"cpu": {"machine": "arm64"}}, "cpu")
    assert unknown.id == "arm64-unknown"


def test_gpu_class_is_model_and_driver_major_not_the_cuda_runtime():
    info = "Model: \t\t NVIDIA H200\nIRQ:   \t\t 0\nGPU UUID: \t GPU-1\n"
    for version in ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 "
                    "22:23:56 UTC 2024\nGCC version: gcc 12\n",
                    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  550.54.15  "
                    "Release Build  (dvs-builder@U16)  Tue Mar  5\n"):
        nvidia = parse_nvidia(version, [info, info])
        assert nvidia == {"driver": "550.54.15", "gpus": ["NVIDIA H200", "NVIDIA H200"]}
        cls = hardware_class({"nvidia": nvidia, "torch": {"cuda": "12.4"}}, "cuda")
        assert (cls.id, cls.name) == ("nvidia-h200-drv550", "NVIDIA H200 (driver 550)")
        other_cuda = hardware_class({"nvidia": nvidia, "torch": {"cuda": "12.8"}}, "cuda")
        assert other_cuda == cls
    # Where /proc/driver/nvidia is not visible (some containers): what torch reported.
    fallback = hardware_class({"torch": {"gpu": {"name": "NVIDIA A100-SXM4-80GB"}}}, "cuda")
    assert fallback.id == "nvidia-a100-sxm4-80gb-drvunknown"


def test_a_run_lands_in_the_hosts_class(tmp_path):
    """The harness (stdlib + numpy, never lockguard) and the host compute the class through the
    same function: a real numpy.mlp run's fingerprint gives this machine's class."""
    out = tmp_path / "r.json"
    proc = subprocess.run([sys.executable, str(REPO / "lockguard" / "harness" / "run.py"),
                           "--scenario", "numpy.mlp", "--steps", "1", "--out", str(out)],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": ""})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    fingerprint = json.loads(out.read_text())["fingerprint"]
    assert {"vendor_id", "family", "model_number", "flags"} <= set(fingerprint["cpu"])
    assert hardware_class(fingerprint, "cpu") == host_class("cpu")


# ------------------------------------------------------------------------------ golden store

def result(**fields) -> RunResult:
    base = dict(schema_version=1, scenario="s", framework="numpy", steps=3, device="cpu",
                fingerprint={"cpu": {"machine": "x86_64", **parse_cpuinfo(EPYC)}},
                losses=[1.0, 0.5, 0.25], param_digest="sha256:aa")
    return RunResult(**{**base, **fields})


def test_golden_round_trip_and_any_edit_is_an_error(tmp_path):
    res = result()
    cls = hardware_class(res.fingerprint, "cpu")
    path = golden_path(tmp_path, "cpu", cls.id, "s")
    golden.write(path, res, golden.Provenance(inputs_digest="d", lock_hash="h"), cls)
    loaded = golden.load(path)
    assert loaded.result == res and loaded.hardware == cls
    assert [p.name for p in class_paths(tmp_path, "cpu", "s")] == ["s.json"]
    recorded = path.read_text()
    assert recorded.startswith('{\n "digest": "sha256:')
    # A CRLF checkout (git autocrlf) still verifies.
    path.write_bytes(recorded.replace("\n", "\r\n").encode())
    assert golden.load(path).result == res
    for edit in (lambda d: d["result"]["losses"].__setitem__(0, 1.5),
                 lambda d: d["provenance"].__setitem__("lock_hash", "other"),
                 lambda d: d["hardware"].__setitem__("name", "Intel"),
                 lambda d: d.__setitem__("result", {})):
        changed = json.loads(recorded)
        edit(changed)
        path.write_text(json.dumps(changed, indent=1))
        with pytest.raises(GoldenError, match="edited since it was recorded"):
            golden.load(path)
    path.write_text(recorded)
    assert golden.load(path) is not None
    path.write_text(recorded.replace('"losses": [\n   1.0', '"losses": [\n   1.0 '))
    with pytest.raises(GoldenError, match="edited since it was recorded"):
        golden.load(path)


@pytest.mark.parametrize("device, cls, sid", [
    ("cpu", "c", "../x"), ("cpu", "c", "/etc/x"), ("cpu", "..", "x"), ("..", "c", "x"),
    ("cpu", "c/../..", "x"), ("cpu", "c", "a/../../b"), ("cpu", "c", "x\0y"),
])
def test_goldens_never_leave_golden_dir(tmp_path, device, cls, sid):
    with pytest.raises(GoldenError, match="golden_dir"):
        golden_path(tmp_path / "golden", device, cls, sid)


# ---------------------------------------------------------------------------- verdicts

def change(same_inputs: bool) -> HardwareChange:
    return HardwareChange(golden="AMD EPYC [amd-25.17-x]", current="Intel Xeon [intel-6.207-y]",
                          same_inputs=same_inputs, lock_changed=not same_inputs)


def verdict(old: RunResult, new: RunResult, hardware: HardwareChange | None):
    return compare_runs([old], [new], policy=Policy(), baseline_kind="golden",
                        expected_device="cpu", timed_together=False, hardware=hardware)


def test_across_hardware_bitwise_equal_is_identical_and_names_both():
    v = verdict(result(), result(), change(True))
    assert v.verdict == Verdict.identical
    assert any("AMD EPYC" in r and "Intel Xeon" in r for r in v.reasons)


@pytest.mark.parametrize("moved", [
    {"losses": [1.0, 0.5, 0.2500001]},  # within float32 tolerance
    {"losses": [1.0, 0.5, 0.3]},  # far beyond it, as bf16 goes between CPUs
    {"param_digest": "sha256:bb"},
])
def test_across_hardware_a_difference_is_never_a_dependency_verdict(moved):
    old, new = result(), result(**moved)
    assert verdict(old, new, None).verdict in (Verdict.within_tolerance, Verdict.drift)
    same = verdict(old, new, change(True))
    assert same.verdict == Verdict.other_hardware and not is_failure(same, Policy())
    assert Verdict.other_hardware not in DEFAULT_FAIL_ON
    assert "AMD EPYC" in same.reasons[0] and "lockguard record --scenario s" in same.reasons[0]
    assert all(r.startswith("for information: ") for r in same.reasons[1:])
    assert same.hardware.same_inputs is True
    both = verdict(old, new, change(False))
    assert both.verdict == Verdict.incomparable
    assert "cannot be told apart" in both.reasons[0] and "--baseline-lock" in both.reasons[0]


def test_across_hardware_a_broken_run_is_still_broken():
    v = verdict(result(), result(status="crashed", error="boom"), change(True))
    assert v.verdict == Verdict.broken


def test_inputs_digest_names_the_environment_and_a_scripts_neighbours(tmp_path):
    """The shortcut answers only for the same inputs: a cp312 venv installs other wheels than a
    cp311 one, and a user script imports the modules beside it."""
    from lockguard.scenarios import Scenario, inputs_digest

    (tmp_path / "s.py").write_text("from helper import f\ndef run(steps, seed): return f(steps)\n")
    (tmp_path / "helper.py").write_text("def f(n): return [1.0] * n\n")
    s = Scenario(id="s", framework="numpy", description="", steps=3, script=tmp_path / "s.py")

    def digest(environment="venv cpython 3.11.7 x86_64"):
        return inputs_digest(s, lock_hash="h", steps=3, seed=0, device="cpu", threads=1,
                             harness="x", environment=environment)

    first = digest()
    assert digest() == first
    assert digest("venv cpython 3.12.1 x86_64") != first
    (tmp_path / "helper.py").write_text("def f(n): return [2.0] * n\n")
    assert digest() != first


@pytest.mark.parametrize("mask, shown", [
    (None, 2), ("", 0), ("-1", 0), ("x,0", 0), ("0", 1), ("1,0", 2), (" 1 , 0", 2),
    ("0,1,2", 2), ("0,7,1", 1), ("7", 0), ("1,-1,0", 1), ("1gpu", 1), ("+1", 1),
    ("0,0", 0), ("1,0,1", 0),
    ("GPU-5d2c8e1f-aaaa", 1), ("GPU-a,GPU-b,GPU-c", 2), ("GPU-a,0", 1), ("GPU-a,GPU-a", 0),
    ("MIG-a,MIG-b", 1), ("0,GPU-a", 1),
])
def test_visible_gpus_read_cuda_visible_devices_as_cuda_does(mask, shown):
    """Over 2 physical GPUs, as torch.cuda's _parse_visible_devices and device count read the
    variable: ordinals like strtoul up to the first that is none, UUIDs up to the first without
    their prefix, a repeat hides every GPU, an ordinal past the last ends the list, one MIG."""
    assert count_visible(2, mask) == shown
