"""Hardware classes: the machines on which one lock may be expected to give bit-identical results.

Two machines of one class run the same kernels, so a golden recorded on one reproduces bit for bit
on the other; across classes the low bits move (BLAS and oneDNN pick kernels by CPU vendor,
family/model and ISA features; a GPU model and its driver pick theirs), by far more than any
tolerance in bf16, and that says nothing about the dependencies being checked.

- cpu: vendor, family and model number, and the ISA features of common.KERNEL_FLAGS. The id reads
  `intel-6.207-amx-1a2b3c4d`: vendor, family.model, the widest vector tier, and 8 hex digits of
  a hash of the feature set (two VMs of one model that expose different features differ).
- cuda: the GPU model(s) and the kernel driver's major version (`nvidia-h200-drv550`). The CUDA
  runtime, cuDNN and cuBLAS are not part of it: they come from the lock (the nvidia-* wheels, a
  +cuXXX build) or the image, and a change of them is a dependency change to be judged.
- tpu: the device kind jax reports (`tpu-v4`).

Everything here is a pure function of a fingerprint, except `host_memory` (what a memory limit
of "auto" is made of) and `host_class` and `visible_gpus`, which read the host's facts through the harness's own functions
(lockguard/harness/_lockguard_harness/common.py: stdlib only, and never importing lockguard), so
that the host and a run on it land in the same class. Changing what goes into a class id changes
the ids of existing goldens: bump golden.SCHEMA_VERSION with it.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from lockguard.harness._lockguard_harness.common import KERNEL_FLAGS, cpu_info, nvidia_info

_VENDORS = {"GenuineIntel": ("intel", "Intel"), "AuthenticAMD": ("amd", "AMD"),
            "HygonGenuine": ("hygon", "Hygon"), "CentaurHauls": ("centaur", "Centaur"),
            "0x41": ("arm", "Arm"), "0x61": ("apple", "Apple"), "0xc0": ("ampere", "Ampere"),
            "0x48": ("hisilicon", "HiSilicon"), "0x4e": ("nvidia", "NVIDIA"),
            "0x51": ("qualcomm", "Qualcomm")}

# Widest vector tier first: the id's readable part and the name's summary.
_TIERS = (("amx", ("amx_tile",)), ("avx512", ("avx512f",)), ("avx2", ("avx2",)),
          ("avx", ("avx",)), ("sve2", ("sve2",)), ("sve", ("sve",)), ("neon", ("asimd",)))
_AVX512_EXTRAS = (("avx512_bf16", "BF16"), ("avx512_fp16", "FP16"), ("avx512_vnni", "VNNI"))


@dataclass(frozen=True)
class HardwareClass:
    """One class of machines that give a lock bit-identical results (module docstring): its id
    names the golden folder golden/<device>/<id>/."""

    device: str  # cpu | cuda | tpu
    id: str  # a slug, the golden directory's name: golden/<device>/<id>/<scenario>.json
    name: str  # for people: "Intel Xeon Processor (family 6 model 207; AMX, AVX-512 BF16 ...)"
    features: tuple[str, ...] = ()  # cpu: the kernel-selecting ISA features

    def describe(self) -> str:
        """The class for people, in reasons and reports: its name followed by [id]."""
        return f"{self.name} [{self.id}]"

    def to_json(self) -> dict[str, Any]:
        """A golden's "hardware" block (features as a list), what from_json reads back."""
        data = asdict(self)
        data["features"] = list(self.features)
        return data

    @classmethod
    def from_json(cls, data: Any) -> HardwareClass:
        """From a golden's "hardware" block; ValueError when it is not one."""
        if not isinstance(data, dict):
            raise ValueError("expected an object")
        fields = {k: data.get(k) for k in ("device", "id", "name")}
        bad = [k for k, v in fields.items() if not isinstance(v, str) or not v]
        features = data.get("features", [])
        if bad or not isinstance(features, list) \
                or not all(isinstance(f, str) for f in features):
            raise ValueError(f"missing or malformed {', '.join(bad) or 'features'}")
        return cls(device=fields["device"], id=fields["id"], name=fields["name"],
                   features=tuple(features))


def hardware_class(fingerprint: dict[str, Any], device: str,
                   device_name: str | None = None) -> HardwareClass:
    """The class of the machine a run with this fingerprint ran on, for `device` (the device the
    scenario was planned for: its goldens live in golden/<device>/)."""
    if device == "cuda":
        return _gpu_class(fingerprint.get("nvidia"), _gpu_model_fallback(fingerprint, device_name))
    if device == "tpu":
        backend = fingerprint.get("backend") if isinstance(fingerprint.get("backend"), dict) else {}
        kind = backend.get("device_kind") or _after_index(device_name) or "unknown"
        # A name of no letters or digits still needs a folder name inside golden_dir.
        return HardwareClass(device="tpu", id=_slug(str(kind)) or "unknown", name=str(kind))
    cpu = fingerprint.get("cpu")
    return _cpu_class(cpu if isinstance(cpu, dict) else {})


def host_class(device: str) -> HardwareClass | None:
    """This machine's class for `device`, read without running a harness; None when it cannot
    be read cheaply (a TPU; a GPU whose driver is not visible in /proc)."""
    if device == "cpu":
        return _cpu_class(cpu_info())
    if device == "cuda":
        nvidia = nvidia_info()
        if not nvidia or not nvidia.get("gpus"):
            return None
        return _gpu_class(nvidia, None)
    return None


def visible_gpus(environ: Mapping[str, str] = os.environ) -> int | None:
    """How many NVIDIA GPUs a run started from here sees: the driver's (from /proc) narrowed by
    CUDA_VISIBLE_DEVICES. None where the driver is not visible (no NVIDIA GPU, or a container
    that hides /proc/driver/nvidia): then nobody can tell without loading CUDA."""
    nvidia = nvidia_info()
    if not nvidia:
        return None
    return count_visible(len(nvidia.get("gpus") or []), environ.get("CUDA_VISIBLE_DEVICES"))


def host_memory() -> int | None:
    """Bytes of memory lockguard's processes may use on this host: the machine's (MemTotal), or
    the limit of the control group lockguard runs in where that is lower (a container, a CI
    job's slice); None where neither can be read."""
    limits = []
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    limits.append(int(line.split()[1]) * 1024)
                    break
    except (OSError, ValueError, IndexError):
        pass
    files = ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                path = path.rstrip("/")
                if controllers == "":  # cgroup v2: every level's limit applies
                    while path:
                        files.append(f"/sys/fs/cgroup{path}/memory.max")
                        path = path.rpartition("/")[0]
                elif "memory" in controllers.split(","):
                    files.append(f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
    except (OSError, ValueError):
        pass
    for name in files:
        try:
            with open(name, encoding="ascii") as f:
                text = f.read().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 1 << 60:  # "max" or v1's huge "unlimited"
            limits.append(int(text))
    return min(limits) if limits else None


def count_visible(physical: int, mask: str | None) -> int:
    """The GPUs a CUDA process sees among `physical` under CUDA_VISIBLE_DEVICES, read as the
    runtime reads it (and torch.cuda's _parse_visible_devices after it): unset, all; else a
    comma list of ordinals, each read like strtoul ("1gpu" is 1), up to the first that is not
    one ("", "-1", "x"), or of GPU-/MIG- UUIDs up to the first entry without the prefix; a
    repeated entry hides them all; an ordinal past the last GPU ends the list there. A process
    enumerates one MIG instance at most."""
    if mask is None:
        return physical
    entries = mask.split(",")
    if mask.startswith(("GPU-", "MIG-")):
        prefix, uuids = mask[:4], []
        for entry in entries:
            if entry in uuids:
                return 0
            if not entry.startswith(prefix):
                break
            uuids.append(entry)
        return min(len(uuids), 1 if prefix == "MIG-" else physical)
    ordinals: list[int] = []
    for entry in entries:
        digits = re.match(r"[+-]?\d+", entry.strip())
        ordinal = int(digits.group()) if digits else -1
        if ordinal in ordinals:
            return 0
        if ordinal < 0:
            break
        ordinals.append(ordinal)
    return next((i for i, o in enumerate(ordinals) if o >= physical), len(ordinals))


def difference(golden: HardwareClass, current: HardwareClass) -> str | None:
    """What tells two classes with the same name apart, for a report; None when the names do."""
    if golden.name != current.name:
        return None
    only_golden = sorted(set(golden.features) - set(current.features))
    only_here = sorted(set(current.features) - set(golden.features))
    parts = []
    if only_golden:
        parts.append(f"features only on the golden's machine: {', '.join(only_golden)}")
    if only_here:
        parts.append(f"only on this one: {', '.join(only_here)}")
    return "; ".join(parts) or None


# ------------------------------------------------------------------------------------- cpu

def _cpu_class(cpu: dict[str, Any]) -> HardwareClass:
    flags = cpu.get("flags")
    features = tuple(sorted(KERNEL_FLAGS.intersection(flags if isinstance(flags, list) else [])))
    vendor_id = str(cpu.get("vendor_id") or "")
    vendor, brand = _VENDORS.get(vendor_id, (_slug(vendor_id) or "", vendor_id))
    family, model = cpu.get("family"), cpu.get("model_number")
    machine = str(cpu.get("machine") or "cpu")
    if not vendor and family is None and model is None:
        # No /proc/cpuinfo (not Linux): all that is known is the architecture.
        return HardwareClass(device="cpu", id=f"{_slug(machine)}-unknown",
                             name=f"{machine} CPU (model unknown)", features=features)
    tier = next((name for name, needs in _TIERS if all(f in features for f in needs)), "base")
    digest = hashlib.sha256(",".join(features).encode()).hexdigest()[:8]
    ident = f"{vendor or _slug(machine)}-{_slug(str(family))}.{_slug(str(model))}-{tier}-{digest}"
    model_name = _clean_model(str(cpu.get("model") or "")) or f"{brand or machine} CPU"
    summary = _feature_summary(features)
    name = f"{model_name} (family {family} model {model}" + (f"; {summary})" if summary else ")")
    return HardwareClass(device="cpu", id=ident, name=name, features=features)


def _clean_model(name: str) -> str:
    name = re.sub(r"\((?:R|TM|tm|r)\)", "", name)
    name = re.sub(r"\s+@\s*[\d.]+\s*[GM]Hz", "", name)
    name = re.sub(r"\bCPU\b", "", name)
    return " ".join(name.split())


def _feature_summary(features: tuple[str, ...]) -> str:
    have = set(features)
    parts = []
    if "amx_tile" in have:
        parts.append("AMX")
    if "avx512f" in have:
        extras = [label for flag, label in _AVX512_EXTRAS if flag in have]
        parts.append("AVX-512" + (f" {' '.join(extras)}" if extras else ""))
    elif "avx2" in have:
        parts.append("AVX2" + (" FMA" if "fma" in have else ""))
    elif "avx" in have:
        parts.append("AVX")
    if "sve2" in have or "sve" in have:
        parts.append("SVE2" if "sve2" in have else "SVE")
    elif "asimd" in have:
        parts.append("NEON")
    return ", ".join(parts)


# ------------------------------------------------------------------------------------- gpu

def _gpu_class(nvidia: Any, fallback_model: str | None) -> HardwareClass:
    nvidia = nvidia if isinstance(nvidia, dict) else {}
    gpus = [str(g) for g in nvidia.get("gpus") or [] if g]
    models = sorted(set(gpus)) or ([fallback_model] if fallback_model else ["unknown GPU"])
    driver = str(nvidia.get("driver") or "")
    major = driver.split(".")[0] if driver[:1].isdigit() else "unknown"
    ident = "+".join(_slug(m) or "unknown" for m in models) + f"-drv{major}"
    name = " + ".join(models) + (f" (driver {major})" if major != "unknown" else
                                 " (driver unknown)")
    return HardwareClass(device="cuda", id=ident, name=name)


def _gpu_model_fallback(fingerprint: dict[str, Any], device_name: str | None) -> str | None:
    # Where /proc/driver/nvidia was not visible (some containers): what the framework reported.
    torch_info = fingerprint.get("torch")
    if isinstance(torch_info, dict) and isinstance(torch_info.get("gpu"), dict):
        if torch_info["gpu"].get("name"):
            return str(torch_info["gpu"]["name"])
    backend = fingerprint.get("backend")
    if isinstance(backend, dict) and backend.get("device_kind") and backend.get("platform") in (
            "gpu", "cuda"):
        return str(backend["device_kind"])
    gpu = fingerprint.get("gpu")
    if isinstance(gpu, dict) and gpu.get("device_name"):
        return str(gpu["device_name"])
    return _after_index(device_name)


def _after_index(device_name: str | None) -> str | None:
    # "cuda:0 NVIDIA H200" -> "NVIDIA H200"
    if not device_name or " " not in device_name:
        return None
    return device_name.split(" ", 1)[1]


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:40]
