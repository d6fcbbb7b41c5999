"""What every harness module shares: the run context, timings, fingerprint, result writing,
seeding, best-effort probes, and the exact maths on numpy host arrays.

Stdlib only (this runs inside target environments). The host-array helpers take numpy arrays that
a framework module made; numpy itself is never imported here. The JSON written here must match
lockguard/results.py's RunResult (schema_version 1) field for field.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import random
import resource
import statistics
import sys
import time
import warnings
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

SCHEMA_VERSION = 1

# Environment variables that change numerics or threading; recorded in every fingerprint.
RECORDED_ENV = (
    "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "OPENBLAS_CORETYPE",
    "CUBLAS_WORKSPACE_CONFIG", "XLA_FLAGS", "TF_DETERMINISTIC_OPS", "TF_ENABLE_ONEDNN_OPTS",
    "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES", "JAX_PLATFORMS", "JAX_ENABLE_X64",
    "TORCHINDUCTOR_CACHE_DIR", "TF_CPP_MIN_LOG_LEVEL", "KMP_DETERMINISTIC_REDUCTION",
)


class Context:
    """One harness run: its arguments, and the result being filled in."""

    def __init__(self, scenario: str, framework: str, steps: int, seed: int, device: str,
                 threads: int, script: Optional[str] = None) -> None:
        self.scenario = scenario
        self.framework = framework
        self.steps = steps
        self.seed = seed
        self.device = device  # expected device class: cpu | cuda | tpu
        self.threads = threads
        self.script = script
        self.started = time.perf_counter()
        self._step_times: List[float] = []
        self.result: Dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "scenario": scenario,
            "framework": framework,
            "framework_version": None,
            "device": None,
            "device_name": None,
            "dtype": "float32",
            "steps": steps,
            "seed": seed,
            "fingerprint": base_fingerprint(threads),
            "losses": [],
            "grad_norms": [],
            "outputs": [],
            "output_shape": [],
            "param_digest": None,
            "param_norms": {},
            "metrics": {},
            "compile": None,
            "timings": {"import_s": None, "first_step_s": None, "step_median_s": None,
                        "total_s": None},
            "peak_memory_bytes": None,
            "status": "ok",
            "error": None,
        }

    def record_step(self, loss: float, grad_norm: Optional[float], seconds: float) -> None:
        self.result["losses"].append(float(loss))
        if grad_norm is not None:
            self.result["grad_norms"].append(float(grad_norm))
        self._step_times.append(seconds)

    def set_outputs(self, values: List[float], shape: List[int]) -> None:
        self.result["outputs"] = [float(v) for v in values]
        self.result["output_shape"] = [int(s) for s in shape]

    def set_params(self, named_bytes: List[tuple], norms: Dict[str, float]) -> None:
        """named_bytes: [(name, raw little-endian bytes)] in the scenario's fixed order."""
        digest = hashlib.sha256()
        for name, raw in named_bytes:
            digest.update(name.encode() + b"\0")
            digest.update(raw)
        self.result["param_digest"] = digest.hexdigest()
        self.result["param_norms"] = {k: float(v) for k, v in norms.items()}

    def finish(self) -> Dict[str, Any]:
        times = self._step_times
        timings = self.result["timings"]
        if times:
            timings["first_step_s"] = times[0]
            if len(times) > 1:
                timings["step_median_s"] = statistics.median(times[1:])
        timings["total_s"] = time.perf_counter() - self.started
        self.result["peak_memory_bytes"] = peak_rss_bytes()
        if self.result["status"] == "ok":
            bad = [i for i, v in enumerate(self.result["losses"]) if not math.isfinite(v)]
            if bad:
                self.result["status"] = "nan"
                self.result["error"] = f"loss is {self.result['losses'][bad[0]]} at step {bad[0]}"
        return self.result


def peak_rss_bytes() -> int:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


def cpu_info() -> Dict[str, Any]:
    info: Dict[str, Any] = {"machine": platform.machine(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return info
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and "model" not in info:
            info["model"] = value.strip()
        elif key == "flags" and "flags" not in info:
            # Only the flags that select different numeric kernels are worth comparing.
            wanted = {"avx", "avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni",
                      "amx_bf16", "amx_tile", "f16c", "sse4_2"}
            info["flags"] = sorted(wanted.intersection(value.split()))
    return info


def installed_version(dist: str) -> Optional[str]:
    """A distribution's version without importing it (numpy must not be imported needlessly)."""
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:
        return None


def base_fingerprint(threads: int) -> Dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu_info(),
        "threads": threads,
        "numpy": installed_version("numpy"),
        "env": recorded_env(),
    }


def nvidia_driver() -> Dict[str, str]:
    """The NVIDIA driver's version and the newest CUDA it supports, as nvidia-smi shows them:
    neither torch nor jax reports the driver, and a driver upgrade changes kernels too.
    Read through NVML (what nvidia-smi reads; CUDA_VISIBLE_DEVICES does not hide it), else the
    version from /proc/driver/nvidia/version; {} where there is no NVIDIA driver."""
    found = attempt(_nvml_driver, {}) or {}
    if "driver" not in found:
        try:
            with open("/proc/driver/nvidia/version", encoding="utf-8", errors="replace") as f:
                version = proc_driver_version(f.read())
        except OSError:
            version = None
        if version:
            found["driver"] = version
    return found


def _nvml_driver() -> Dict[str, str]:
    import ctypes

    nvml = ctypes.CDLL("libnvidia-ml.so.1")
    if nvml.nvmlInit_v2() != 0:
        return {}
    try:
        found: Dict[str, str] = {}
        buf = ctypes.create_string_buffer(96)
        if nvml.nvmlSystemGetDriverVersion(buf, ctypes.c_uint(len(buf))) == 0:
            found["driver"] = buf.value.decode("ascii", "replace")
        cuda = ctypes.c_int()
        get_cuda = attempt(lambda: nvml.nvmlSystemGetCudaDriverVersion_v2) or attempt(
            lambda: nvml.nvmlSystemGetCudaDriverVersion)  # the _v2 name is newer
        if get_cuda is not None and get_cuda(ctypes.byref(cuda)) == 0 and cuda.value > 0:
            found["cuda"] = cuda_version_text(cuda.value)
        return found
    finally:
        nvml.nvmlShutdown()


def cuda_version_text(version: int) -> str:
    """CUDA's integer version (major * 1000 + minor * 10) as "major.minor": 13000 -> "13.0"."""
    return f"{version // 1000}.{version % 1000 // 10}"


def proc_driver_version(text: str) -> Optional[str]:
    """The driver version in /proc/driver/nvidia/version's "NVRM version: ... Kernel Module
    [for x86_64]  580.95.05  <build date>" line."""
    for line in text.splitlines():
        if line.startswith("NVRM version:"):
            for word in line.split("Kernel Module", 1)[-1].split():
                if word[:1].isdigit() and "." in word:
                    return word
    return None


def recorded_env() -> Dict[str, str]:
    """The RECORDED_ENV variables set now (a module re-reads them after its framework import)."""
    return {k: os.environ[k] for k in RECORDED_ENV if k in os.environ}


def attempt(fn: Callable[[], Any], default: Any = None) -> Any:
    """fn(), or `default` when it raises: feature detection and fingerprint details across
    framework versions (missing APIs give the default; deprecation warnings are silenced)."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return fn()
    except Exception:  # noqa: BLE001 - best effort by design
        return default


def seed_host_rngs(seed: int, numpy: Any = None) -> None:
    """Seed Python's `random` and, given the numpy module, numpy's legacy global RNG."""
    random.seed(seed)
    if numpy is not None:
        numpy.random.seed(seed)


# --------------------------------------------------------------------------- numpy host arrays

def host_floats(a: Any) -> Tuple[List[float], List[int]]:
    """A numpy array's values as Python floats, row-major, and its shape. float64 holds every
    float32 / float16 / bfloat16 value exactly."""
    f = a.astype("float64")
    return f.ravel().tolist(), list(f.shape)


def le_bytes(a: Any) -> bytes:
    """A numpy array's bytes, C order, little-endian, in its own dtype: what digests hash."""
    return a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()


def sum_squares(a: Any) -> float:
    """Exact sum of squares of a numpy array: float64 squares of float32 values are exact and
    math.fsum rounds the total once."""
    return math.fsum(v * v for v in a.astype("float64").ravel().tolist())


def global_norm(arrays: Iterable[Any]) -> float:
    """The L2 norm over several numpy arrays (each array's sum of squares rounded once)."""
    return math.sqrt(math.fsum(sum_squares(a) for a in arrays))


def error_tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def write_result(path: str, result: Dict[str, Any]) -> None:
    """Write atomically so that lockguard never reads half a result."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, path)
