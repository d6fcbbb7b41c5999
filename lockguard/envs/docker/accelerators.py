"""Accelerators seen from a container: the GPU driver's CUDA against what an image needs, the
TPU device nodes to pass through, and whether a run asks for them at all.

A run asks for the GPUs unless CUDA_VISIBLE_DEVICES hides every one (read as CUDA reads it:
"", "-1", ...), and for the TPUs unless TPU_VISIBLE_CHIPS is set empty: then a cuda or tpu
image starts without them, on any host, and trains on the CPU, recording why.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any

from lockguard.envs.base import EnvError
import lockguard.envs.docker.engine as engine
from lockguard.envs.docker.recipe import ImageRecipe
from lockguard.hardware import count_visible
from lockguard.locks.families import cuda_major
from lockguard.locks.model import Lock

_CUDA_VERSION = re.compile(r"CUDA Version:\s*(\d+)\.(\d+)")


def driver_cuda(nvidia_smi_output: str) -> tuple[int, int] | None:
    """The CUDA version the driver supports, from nvidia-smi's header."""
    m = _CUDA_VERSION.search(nvidia_smi_output)
    return (int(m.group(1)), int(m.group(2))) if m else None


def required_cuda(recipe: ImageRecipe, lock: Lock) -> tuple[tuple[int, int] | None, str]:
    """The CUDA the image needs from the driver, and where that requirement comes from.

    The base's CUDA (its runtime refuses older drivers) counts in full; a framework's CUDA
    wheels (torch +cu128, nvidia-*-cu12, jax-cuda12-plugin) by major version only, since CUDA's
    minor version compatibility lets a 12.8 runtime run on any 12.x driver.
    """
    need: tuple[int, int] | None = None
    source = ""
    if recipe.base.cuda:
        major, minor = (int(x) for x in recipe.base.cuda.split(".")[:2])
        need, source = (major, minor), f"base image CUDA {recipe.base.cuda}"
    for pin in lock.pins:
        major = cuda_major(pin)
        if major is not None and (need is None or (major, 0) > need):
            need, source = (major, 0), f"{pin.requirement} (CUDA {major})"
    return need, source


def check_driver(driver: tuple[int, int] | None, need: tuple[int, int] | None, source: str,
                 tag: str) -> None:
    """Refuse a driver older than what the image needs (`required_cuda`)."""
    if need is None:
        return
    if driver is None:
        raise EnvError(f"{tag}: could not read the driver's CUDA version from nvidia-smi")
    if driver < need:
        raise EnvError(f"the GPU driver supports CUDA {driver[0]}.{driver[1]}, but {tag} needs "
                       f"CUDA {need[0]}.{need[1]} ({source}): upgrade the driver, or lock a "
                       f"framework build (and base) for an older CUDA")


def check_gpu(client: Any, recipe: ImageRecipe, lock: Lock) -> str:
    """Ask for the GPUs by device request, run nvidia-smi, and check the driver's CUDA."""
    errors = engine.sdk_errors()
    try:
        out = engine.run_once(client, recipe.tag, [], entrypoint=["nvidia-smi"],
                              network_mode="none", device_requests=engine.gpu_request())
    except errors.ContainerError as exc:
        raise EnvError(f"nvidia-smi failed in {recipe.tag} (exit {exc.exit_status}): is a GPU "
                       f"there and its driver loaded?") from None
    except errors.APIError as exc:
        text = engine.api_reason(exc)
        if "device driver" in text or "nvidia" in text.lower():
            raise EnvError(f"the Docker engine cannot give containers a GPU ({text}): install "
                           f"the NVIDIA Container Toolkit and restart dockerd (with "
                           f"CUDA_VISIBLE_DEVICES= the image runs without a GPU, a "
                           f"device_fallback)") from None
        raise EnvError(f"starting a GPU container from {recipe.tag}: {text}") from None
    text = out.decode(errors="replace")
    need, source = required_cuda(recipe, lock)
    check_driver(driver_cuda(text), need, source, recipe.tag)
    return text


def gpus_requested() -> bool:
    """Whether a cuda run asks the engine for GPUs: not when CUDA_VISIBLE_DEVICES hides every
    one (whatever their number)."""
    mask = os.environ.get("CUDA_VISIBLE_DEVICES")
    return mask is None or count_visible(1 << 16, mask) > 0


def tpus_requested() -> bool:
    """Whether a tpu run passes the TPU device nodes: not when TPU_VISIBLE_CHIPS is set empty."""
    mask = os.environ.get("TPU_VISIBLE_CHIPS")
    return mask is None or mask.strip() != ""


def tpu_devices() -> list[str]:
    """The TPU device nodes to pass through: /dev/accel* (v2-v4), /dev/vfio/* (v5e and later)."""
    return sorted(glob.glob("/dev/accel*")) + sorted(glob.glob("/dev/vfio/*"))
