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
from typing import Any, Callable, Dict, Iterable, Iterator, List, NamedTuple, Optional, Tuple

from .gen import order_digest

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
                 threads: int, script: Optional[str] = None, time_block: int = 0,
                 locate_step: Optional[int] = None) -> None:
        self.scenario = scenario
        # A localisation run (lockguard's --locate): the step whose module calls are recorded
        # in result["capture"] (locate_torch.py); None in every other run.
        self.locate_step = locate_step
        # A timing run of steps too short to time one by one: the steady steps are also timed
        # in blocks of this many (finish's block_median_s).
        self.time_block = time_block
        self.framework = framework
        self.steps = steps
        self.seed = seed
        self.device = device  # expected device class: cpu | cuda | tpu
        self.threads = threads
        self.script = script
        self.started = time.perf_counter()
        self._step_times: List[float] = []
        self._memory: Optional[TrainingMemory] = None
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
            "fingerprint": base_fingerprint(threads, device),
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
            "peak_device_memory_bytes": None,
            "status": "ok",
            "error": None,
        }

    def start_training(self) -> None:
        """Mark where the training starts: host memory is measured from here (run.py calls
        this after the framework's import and setup, before the scenario or user script)."""
        self._memory = TrainingMemory()

    def end_training(self) -> None:
        """Take the training's peak host memory now (finish() does, if nobody did before):
        what a scenario runs after its training in this process, such as the eager and fp64
        twins of a compiled scenario, is not part of it."""
        if self._memory is not None:
            self.result["peak_memory_bytes"] = self._memory.peak_growth()
            self.result["fingerprint"]["memory_measure"] = self._memory.method
            self._memory = None

    def record_step(self, loss: float, grad_norm: Optional[float], seconds: float) -> None:
        self.result["losses"].append(float(loss))
        if grad_norm is not None:
            self.result["grad_norms"].append(float(grad_norm))
        self._step_times.append(seconds)

    def record_batch(self, ids: Iterable[Any], per_epoch: Optional[int] = None) -> None:
        """The sample ids of this step's batch, in the order the pipeline delivered them;
        `per_epoch`: batches in an epoch, for the per-epoch order digests."""
        self.result.setdefault("sample_order", []).append([int(i) for i in ids])
        if per_epoch:
            self.result["batches_per_epoch"] = int(per_epoch)

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
                if self.result.get("sample_order"):
                    # A pipeline's workers deliver in bursts (with 2 workers one step in two
                    # waits): the median can be a step that never waited; the mean has them all.
                    timings["step_mean_s"] = statistics.fmean(times[1:])
            k = self.time_block
            if k > 1 and len(times) - 1 >= k:
                steady = times[1:]
                timings["block_median_s"] = statistics.median(
                    sum(steady[i:i + k]) for i in range(0, len(steady) - k + 1, k))
                timings["block_steps"] = k
        timings["total_s"] = time.perf_counter() - self.started
        self.end_training()
        order, per = self.result.get("sample_order"), self.result.get("batches_per_epoch")
        if order and per:
            self.result["epoch_digests"] = [order_digest(order[e:e + per])
                                            for e in range(0, len(order), per)]
        if self.result["status"] == "ok":
            bad = [i for i, v in enumerate(self.result["losses"]) if not math.isfinite(v)]
            if bad:
                self.result["status"] = "nan"
                self.result["error"] = f"loss is {self.result['losses'][bad[0]]} at step {bad[0]}"
        return self.result


class Batches(NamedTuple):
    """A scenario's inputs per step, endlessly: ((inputs...), the sample ids of a data
    pipeline's batch, or None where the inputs are one fixed batch); batches per epoch."""
    iterator: Iterator[Tuple[Tuple[Any, ...], Optional[List[int]]]]
    per_epoch: Optional[int] = None


class TrainingMemory:
    """The peak host memory of the training: how far the resident set rose above what it was
    when the training started.

    The process's own peak (ru_maxrss, VmHWM) is no measure of the training: it includes the
    framework's import, which reaches hundreds of MiB for torch or tensorflow and is mostly
    shared libraries, so a training that allocates 64 MiB more would move it by a few percent,
    or not at all when the import peaked higher. So on Linux the peak is reset when the training
    starts (writing "5" to /proc/self/clear_refs sets VmHWM to the current VmRSS, Linux >= 4.0),
    and the figure is VmHWM at the end minus VmRSS at the start: what the scenario, its data,
    its model and its dependencies' allocations needed at their worst. Two processes measured
    this way compare A/B as a ratio.

    Where the peak cannot be reset (no /proc, or clear_refs not writable in a sandbox) the
    figure is how far the training raised the process's lifetime peak (ru_maxrss): 0 when the
    import peaked higher; `method` says which measure was taken.
    """

    def __init__(self) -> None:
        self.method = "rss_growth" if _reset_peak_rss() else "maxrss_growth"
        self.start = _status_bytes("VmRSS") if self.method == "rss_growth" else None
        if self.start is None:
            self.method = "maxrss_growth"
            self.start = _maxrss_bytes()

    def peak_growth(self) -> int:
        peak = _status_bytes("VmHWM") if self.method == "rss_growth" else None
        if peak is None:
            peak = _maxrss_bytes()
        return max(0, peak - self.start)


def _reset_peak_rss() -> bool:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


def _status_bytes(field: str) -> Optional[int]:
    """A memory figure of /proc/self/status ("VmHWM:  123456 kB"), in bytes; None without it."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key == field:
                    number, _, unit = value.strip().partition(" ")
                    return int(number) * (1024 if unit.strip() == "kB" else 1)
    except (OSError, ValueError):
        return None
    return None


def _maxrss_bytes() -> int:
    # ru_maxrss is KiB on Linux (bytes on macOS).
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak if sys.platform == "darwin" else peak * 1024


# The ISA features that make BLAS / oneDNN / XLA / numpy pick other kernels (and so other low
# bits): oneDNN's avx2_vnni / avx512_core[_vnni|_bf16|_fp16|_amx] tiers, numpy's AVX512_SKX...SPR
# dispatch targets, OpenBLAS's sbgemm, XLA's LLVM target features; Arm's NEON/SVE equivalents.
# An explicit list, not a prefix rule: a kernel that learns to name one more flag must not move
# a machine into another hardware class (lockguard/hardware.py hashes this set).
KERNEL_FLAGS = frozenset({
    "sse4_1", "sse4_2", "avx", "avx2", "fma", "fma4", "f16c",
    "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512ifma", "avx512vbmi",
    "avx512_vbmi2", "avx512_bitalg", "avx512_vpopcntdq", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "avx_vnni", "amx_tile", "amx_int8", "amx_bf16", "amx_fp16",
    "asimd", "asimdhp", "asimddp", "asimdfhm", "fphp", "sve", "sve2", "svebf16", "svei8mm",
    "bf16", "i8mm", "sme", "sme2",
})

# /proc/cpuinfo keys of the first processor, and the names the fingerprint gives them.
_CPUINFO_KEYS = {
    "vendor_id": "vendor_id", "cpu family": "family", "model": "model_number",
    "model name": "model", "CPU implementer": "vendor_id", "CPU part": "model_number",
    "CPU architecture": "family",
}


def cpu_info() -> Dict[str, Any]:
    """The CPU as the kernels that run on it see it: vendor, family and model number (OpenBLAS,
    MKL and oneDNN dispatch on these), model name, and the KERNEL_FLAGS it has. Reads only the
    first processor's block of /proc/cpuinfo (cheap on machines with hundreds of cores): the
    host computes its hardware class with this same function (lockguard/hardware.py)."""
    info: Dict[str, Any] = {"machine": platform.machine(), "cores": os.cpu_count()}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            text = f.read(1 << 16)
    except OSError:
        return info
    info.update(parse_cpuinfo(text))
    return info


def parse_cpuinfo(text: str) -> Dict[str, Any]:
    """The first processor's vendor, family, model number, model name and KERNEL_FLAGS."""
    info: Dict[str, Any] = {}
    for line in text.splitlines():
        if not line.strip():
            if "flags" in info:
                break  # the end of the first processor's block
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        name = _CPUINFO_KEYS.get(key)
        if name is not None and name not in info:
            info[name] = int(value) if name == "family" and value.isdigit() else value
        elif key in ("flags", "Features") and "flags" not in info:
            info["flags"] = sorted(KERNEL_FLAGS.intersection(value.split()))
    number = info.get("model_number")
    if isinstance(number, str) and number.isdigit():
        info["model_number"] = int(number)
    return info


def nvidia_info() -> Optional[Dict[str, Any]]:
    """The NVIDIA kernel driver's version and the GPUs' model names, from /proc/driver/nvidia:
    no library loaded, so the host reads the same facts as cheaply for its hardware class
    (lockguard/hardware.py). None where there is no NVIDIA driver (or it is not visible)."""
    base = "/proc/driver/nvidia"
    try:
        with open(os.path.join(base, "version"), encoding="utf-8", errors="replace") as f:
            version = f.read(4096)
    except OSError:
        return None
    infos = []
    try:
        buses = sorted(os.listdir(os.path.join(base, "gpus")))
    except OSError:
        buses = []
    for bus in buses:
        try:
            with open(os.path.join(base, "gpus", bus, "information"), encoding="utf-8",
                      errors="replace") as f:
                infos.append(f.read(4096))
        except OSError:
            continue
    return parse_nvidia(version, infos)


def parse_nvidia(version: str, informations: List[str]) -> Dict[str, Any]:
    """The driver version from /proc/driver/nvidia/version and the model of each GPU from its
    gpus/<bus>/information text."""
    # "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar ..." (or "Open Kernel
    # Module for x86_64  550.54.15 ..."): the first dotted number is the driver version.
    first = version.splitlines()[0] if version else ""
    driver = next((t for t in first.split() if t[:1].isdigit() and "." in t
                   and t.replace(".", "").isdigit()), None) if first.startswith("NVRM") else None
    gpus: List[str] = []
    for text in informations:
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model":
                gpus.append(" ".join(value.split()))
                break
    return {"driver": driver, "gpus": gpus}


def installed_version(dist: str) -> Optional[str]:
    """A distribution's version without importing it (numpy must not be imported needlessly)."""
    try:
        from importlib import metadata
        return metadata.version(dist)
    except Exception:
        return None


def record_libraries(ctx: "Context", names: Iterable[str], **details: Any) -> None:
    """A library scenario's fingerprint: the installed version of each library it builds with
    (and of the packages that decide how, such as huggingface-hub for transformers), and what
    the library chose at run time (`details`: an attention implementation, a backend)."""
    fp = ctx.result["fingerprint"]
    fp["libraries"] = {name: installed_version(name) for name in names}
    if details:
        fp["library_choices"] = {k: (v if isinstance(v, (str, int, float, bool, type(None)))
                                     else str(v)) for k, v in details.items()}


def base_fingerprint(threads: int, device: str = "cpu") -> Dict[str, Any]:
    fingerprint = {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu_info(),
        "threads": threads,
        # The CPUs this process may run on, of how many: timings depend on both.
        "cpu_affinity": attempt(lambda: len(os.sched_getaffinity(0))),
        "cpu_count": os.cpu_count(),
        "numpy": installed_version("numpy"),
        "env": recorded_env(),
    }
    if device == "cuda":
        # The GPU models and the kernel driver, read the way the host reads them for its
        # hardware class; the framework modules add the CUDA runtime and cuDNN they loaded.
        fingerprint["nvidia"] = nvidia_info()
    return fingerprint


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
