"""Why the accelerator a run asked for is not there, said precisely.

A run that asked for cuda or tpu and trained on the CPU records the cause in
fingerprint["device_fallback"], and lockguard's device_fallback verdict quotes it: "no NVIDIA
driver visible in the container" tells a CUDA image run without a GPU request (or a host
without the NVIDIA container runtime) from a GPU that is there but hidden, or a CPU-only build.
Stdlib only: read before, and whatever, the framework says.
"""

from __future__ import annotations

import ctypes
import glob
import os
import re
from typing import Optional

# What is visible, read through these three (a test swaps them for a made-up machine).
_exists = os.path.exists
_glob = glob.glob
_cdll = ctypes.CDLL


def in_container() -> bool:
    """Whether this process runs in a container (Docker's or Podman's marker file)."""
    return _exists("/.dockerenv") or _exists("/run/.containerenv")


def _where() -> str:
    return " in the container" if in_container() else ""


def _hides_every_gpu(mask: str) -> bool:
    """CUDA_VISIBLE_DEVICES as the CUDA runtime reads its first entry: empty, not a number or
    a negative one hides every GPU (GPU-/MIG- UUIDs name devices)."""
    first = mask.split(",", 1)[0].strip()
    if first.startswith(("GPU-", "MIG-")):
        return False
    match = re.match(r"[+-]?\d+", first)
    return match is None or int(match.group()) < 0


def _driver_library() -> bool:
    try:
        _cdll("libcuda.so.1")
        return True
    except OSError:
        return False


def driver_cuda_version() -> Optional[int]:
    """The CUDA version the NVIDIA driver supports, as libcuda says it (13000 for 13.0); None
    without a driver. Asked of libcuda itself: torch's private helper for it
    (torch._C._cuda_getDriverVersion) is gone from torch 2.11."""
    try:
        lib = _cdll("libcuda.so.1")
        version = ctypes.c_int(0)
        if lib.cuDriverGetVersion(ctypes.byref(version)) == 0 and version.value > 0:
            return version.value
    except (OSError, AttributeError):
        pass
    return None


def cuda_missing() -> Optional[str]:
    """Why no CUDA device can be used here, from what is visible; None when nothing visible
    explains it (then the framework's own reason is the one to give)."""
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    if mask is not None and _hides_every_gpu(mask):
        return f"CUDA_VISIBLE_DEVICES={mask!r} hides every GPU"
    kernel = _exists("/proc/driver/nvidia/version")
    library = _driver_library()
    if not kernel and not library:
        if in_container():
            return ("no NVIDIA driver visible in the container (no libcuda.so.1: the NVIDIA "
                    "runtime mounts it into containers that ask for GPUs)")
        return "no NVIDIA driver visible (no /proc/driver/nvidia, no libcuda.so.1)"
    if not library:
        return (f"the NVIDIA kernel driver is there but its library libcuda.so.1 is not "
                f"visible{_where()}")
    if kernel and not _glob("/proc/driver/nvidia/gpus/*"):
        return f"the NVIDIA driver sees no GPU{_where()}"
    return None


def tpu_missing() -> Optional[str]:
    """Why no TPU can be used here; None when TPU device nodes are visible."""
    if _glob("/dev/accel*") or _glob("/dev/vfio/[0-9]*"):
        return None
    if in_container():
        return ("no TPU device visible in the container (no /dev/accel*, no /dev/vfio/*: "
                "a container sees the TPUs passed to it)")
    return "no TPU device visible (no /dev/accel*, no /dev/vfio/*)"
