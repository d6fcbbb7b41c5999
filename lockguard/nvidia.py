"""NVIDIA's published facts that lockguard judges a lock's CUDA stack by, one table each, each
with its source: what GPU names are (compute capabilities), which driver runs which CUDA
release, which CUDA release writes which PTX ISA, and which CUDA libraries' wheels carry the
toolkit's major in their version. Data only: native.py reads the wheels, fleet.py judges.

When NVIDIA publishes a release, it is added here. A PTX ISA between two the table knows is
judged by the newer (its driver is at least the one that ISA needs: never understated); one
newer than the table knows fails closed (fleet.py).
"""

from __future__ import annotations

# Compute capability (times ten) per GPU, from NVIDIA's "CUDA GPUs - Compute Capability" table
# (developer.nvidia.com/cuda-gpus). Keys are matched against a name with its spaces, dashes and
# vendor words ("NVIDIA", "Tesla", "GeForce", "Quadro") removed, longest key first, so
# "Tesla V100-SXM2-32GB" is V100 and "A100 80GB PCIe" is A100, not A10.
GPU_ARCHS: dict[str, int] = {
    "K80": 37, "M60": 52, "P100": 60, "P40": 61, "P4": 61, "V100": 70, "TITANV": 70,
    "T4": 75, "RTX2080TI": 75, "RTX2080": 75, "RTX6000": 75, "RTX8000": 75,
    "A100": 80, "A30": 80, "A800": 80, "A10": 86, "A10G": 86, "A16": 86, "A2": 86, "A40": 86,
    "RTXA6000": 86, "RTXA5000": 86, "RTX3090": 86, "RTX3080": 86,
    "L4": 89, "L40": 89, "L40S": 89, "RTX6000ADA": 89, "RTX4090": 89, "RTX4080": 89,
    "H100": 90, "H800": 90, "H200": 90, "H20": 90, "GH200": 90,
    "B200": 100, "GB200": 100, "B300": 103, "GB300": 103,
    "RTX5090": 120, "RTX5080": 120, "RTXPRO6000": 120, "GB10": 121,
}

# The oldest Linux driver each CUDA major runs on with minor version compatibility (any
# 12.x runtime on a 12.x driver): NVIDIA's CUDA Toolkit Release Notes, table "CUDA Toolkit and
# Minimum Required Driver Version for CUDA Minor Version Compatibility". cuDNN's support
# matrix (docs.nvidia.com/deeplearning/cudnn, "Support Matrix") asks the same per CUDA major
# of the cuDNN 9 build (nvidia-cudnn-cu12: r525, -cu13: r580), and so does NCCL's.
MIN_DRIVER: dict[int, tuple[int, ...]] = {11: (450, 80, 2), 12: (525, 60, 13), 13: (580, 65, 6)}

# The Linux driver each CUDA release ships with (its GA; the same table's "CUDA Toolkit and
# Corresponding Driver Versions"): what a driver must be to JIT-compile the PTX that release
# writes. Minor version compatibility runs a newer minor's SASS on an older driver of the same
# major, but not its PTX ("Minor Version Compatibility": PTX JIT is among its limits).
TOOLKIT_DRIVER: dict[tuple[int, int], tuple[int, ...]] = {
    (11, 8): (520, 61, 5), (12, 0): (525, 60, 13), (12, 1): (530, 30, 2),
    (12, 2): (535, 54, 3), (12, 3): (545, 23, 6), (12, 4): (550, 54, 14),
    (12, 5): (555, 42, 2), (12, 6): (560, 28, 3), (12, 8): (570, 26),
    (12, 9): (575, 51, 3), (13, 0): (580, 65, 6),
}

# The CUDA release that introduced each PTX ISA version (the PTX ISA manual, "Release
# Notes": PTX ISA 8.5 is CUDA 12.5's, which 12.6 still writes). A fatbin's PTX entry records
# its ISA version (native.py): read on real wheels, CUDA 13.0's cuBLAS and cuRAND PTX is 9.0.
PTX_ISA: dict[tuple[int, int], tuple[int, int]] = {
    (7, 8): (11, 8), (8, 0): (12, 0), (8, 1): (12, 1), (8, 2): (12, 2), (8, 3): (12, 3),
    (8, 4): (12, 4), (8, 5): (12, 5), (8, 7): (12, 8), (8, 8): (12, 9), (9, 0): (13, 0),
}

# The CUDA toolkit components whose PyPI wheels are named without a -cuNN suffix since CUDA 13
# (nvidia-cublas 13.1.1.3, nvidia-cuda-runtime 13.0.96, cuda-toolkit 13.0.3) and whose
# version's major is the toolkit's major (the CUDA Toolkit Release Notes' "CUDA Toolkit Major
# Component Versions"). Others are versioned on their own (cuFFT 12.0, cuSPARSE 12.x and
# cuRAND 10.4 ship with CUDA 13.0): their major says nothing of CUDA's.
TOOLKIT_VERSIONED = frozenset({
    "nvidia-cublas", "nvidia-cuda-runtime", "nvidia-cuda-nvrtc", "nvidia-cuda-cupti",
    "nvidia-cuda-nvcc", "nvidia-cuda-crt", "nvidia-nvjitlink", "nvidia-nvtx", "nvidia-nvvm",
    "cuda-toolkit", "cuda-bindings",
})

# The CUDA toolkit libraries whose soname's major is the toolkit's (libcudart.so.12 in every
# CUDA 12.x, libcublas.so.13 in 13.x: the CUDA Toolkit Release Notes' component versions, and
# the files of the nvidia-*-cu12 and CUDA 13 wheels). cuFFT (libcufft.so.11 in CUDA 12,
# .so.12 in 13), cuRAND, cuSPARSE and cuSOLVER number their sonames on their own.
CUDA_SONAMES = frozenset({
    "libcudart", "libcublas", "libcublasLt", "libnvrtc", "libnvJitLink", "libcupti",
})

# The CUDA libraries a lock's stack is described by in a fleet note, by distribution name
# without its -cuNN suffix.
STACK_LIBRARIES = {"nvidia-cudnn": "cuDNN", "nvidia-cublas": "cuBLAS", "nvidia-nccl": "NCCL"}


def ptx_release(isa: tuple[int, int]) -> tuple[int, int] | None:
    """The CUDA release that writes PTX ISA `isa`; for an ISA the table skips (8.6, written by
    no release it lists), the oldest release it knows above it: the driver that release needs
    is at least the one the ISA needs, never less. None below the table (older than any
    driver the table knows) or above it (fleet.py fails that closed)."""
    if isa < min(PTX_ISA):
        return None
    known = [v for v in PTX_ISA if v >= isa]
    return PTX_ISA[min(known)] if known else None
