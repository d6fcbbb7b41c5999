"""Framework families: which framework a package belongs to (`package_families`), the version
of each framework a lock pins (`framework_version`, by the model's `FRAMEWORK_DISTS`), and the CUDA
major a pin is built for (`cuda_major`). These decide which golden scenarios a change can affect
and which pairings the family rules check.
"""

import re

from packaging.utils import canonicalize_name

from lockguard.locks.model import FRAMEWORK_DISTS, Lock, LockError, Pin, ambiguous
from lockguard.native import named_cuda_major

_TORCH_FAMILY = {"torch", "torchvision", "torchaudio", "triton"}
_JAX_FAMILY = {"jax", "jaxlib", "libtpu", "libtpu-nightly", "ml-dtypes"}
_JAX_PLUGIN = re.compile(r"^jax-(cuda|rocm)\d+-(plugin|pjrt)$")
# NVIDIA's CUDA Python packages that CUDA builds depend on beside the nvidia-* wheels (torch
# 2.14's CUDA build requires cuda-toolkit and cuda-bindings, which require cuda-pathfinder).
_CUDA_PYTHON = {"cuda-bindings", "cuda-pathfinder", "cuda-toolkit", "cuda-python", "cuda-core"}
_TENSORFLOW_FAMILY = {
    "intel-tensorflow", "keras", "keras-nightly", "tf-keras", "tf-keras-nightly", "tb-nightly",
    "ml-dtypes",
}


def package_families(name: str) -> tuple[str, ...]:
    """The framework families a package belongs to, sorted; empty for everything else.

    ml-dtypes is in two families (jax and tensorflow both build on it). nvidia-* wheels and
    NVIDIA's CUDA Python packages (cuda-toolkit, cuda-bindings, cuda-pathfinder) are "cuda":
    torch, jax and tensorflow CUDA builds load them, so a change there concerns every framework
    that runs on a GPU.
    """
    name = canonicalize_name(name)
    families: set[str] = set()
    if name in _TORCH_FAMILY or name.startswith("pytorch-triton"):
        families.add("torch")
    if name in _JAX_FAMILY or _JAX_PLUGIN.match(name):
        families.add("jax")
    if (
        name in _TENSORFLOW_FAMILY
        or name.startswith(("tensorflow", "tf-nightly", "tensorboard"))
    ):
        families.add("tensorflow")
    if name == "numpy":
        families.add("numpy")
    if name.startswith("nvidia-") or name in _CUDA_PYTHON:
        families.add("cuda")
    return tuple(sorted(families))


def framework_version(lock: Lock, framework: str) -> str | None:
    """The version of a framework's main package in `lock`, or None when it is not pinned.

    For tensorflow, any of its distributions counts (tensorflow, tensorflow-cpu, tf-nightly,
    ...). A LockError when markers pin different versions, since no single answer is right.
    """
    if framework not in FRAMEWORK_DISTS:
        raise ValueError(f"unknown framework {framework!r}; expected one of "
                         f"{', '.join(sorted(FRAMEWORK_DISTS))}")
    by_name = lock.by_name
    pins = [pin for dist in FRAMEWORK_DISTS[framework] for pin in by_name.get(dist, ())]
    if not pins:
        return None
    if len({pin.parsed_version for pin in pins}) > 1:
        raise LockError(lock.source, pins[0].line, ambiguous(pins))
    return pins[0].version



def cuda_major(pin: Pin) -> int | None:
    """The CUDA major a pin is built for, when its name, version or local tag says so
    (native.named_cuda_major: the one reading of a CUDA wheel's name)."""
    return named_cuda_major(pin.name, pin.version)



# What a costly bundled scenario reaches beyond the path its eager twin covers (scenarios.py's
# `reach` and `covered_by`): besides its framework's family and the CUDA wheels, these packages.
# A change that moves none of them is seen by the twin (which trains the same data and model
# with the same framework) as fully as by the costly one, so an A/B may leave the costly one
# out (flows/ab.py). Each list is the path's own imports: torch's requirements and the optional
# packages torch.compile imports when installed (tests/test_relevance.py holds them against the
# installed torch); the data stack; the model libraries and what they require.
REACHES: dict[str, frozenset[str]] = {
    "compiler": frozenset({
        "filelock", "typing-extensions", "setuptools", "sympy", "mpmath", "networkx", "jinja2",
        "markupsafe", "fsspec", "optree", "tabulate", "z3-solver", "pydot", "einops", "scipy",
        "packaging", "psutil", "matplotlib", "colorama", "redis", "objgraph", "pytest", "jax",
        "jaxlib", "torch-xla", "torchrec", "flash-attn", "halide", "apache-tvm", "tvm",
        # GPU kernel libraries inductor's backends import (by module and by distribution)
        "cutlass", "cutlass-api", "cutlass-cppgen", "cutlass-library", "nvidia-cutlass",
        "nvidia-cutlass-dsl", "pycute", "ck4inductor", "origami", "nvmatmulheuristics"}),
    "parallel": frozenset(),  # torch's gloo and NCCL, XLA's and TF's collectives: the framework
    "data": frozenset({"numpy"}),
    "library": frozenset({
        "numpy", "pillow", "torchvision", "timm", "transformers", "flax", "keras",
        "huggingface-hub", "hf-xet", "safetensors", "tokenizers", "regex", "pyyaml",
        "packaging", "filelock", "fsspec", "requests", "tqdm", "typer-slim", "optax", "chex",
        "orbax-checkpoint", "msgpack", "tensorstore", "treescope", "rich", "typing-extensions",
        "h5py", "namex", "optree", "absl-py", "ml-dtypes", "einops", "scipy", "toolz", "etils"}),
}
# What each reach is called where a report says why a scenario did not run.
REACH_WORDS = {"compiler": "compiler package", "parallel": "package of its parallel path",
               "data": "package of its data pipeline", "library": "package of its model library"}


def reaches(reach: str, framework: str, name: str) -> bool:
    """Whether a change to package `name` can reach a scenario of `framework` through the path
    `reach` names (REACHES) beyond what its eager twin trains."""
    families = package_families(name)
    return framework in families or "cuda" in families or canonicalize_name(name) in REACHES[reach]
