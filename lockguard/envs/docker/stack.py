"""The accelerator stack of a cuda or tpu image, proven from inside the image before any GPU or
TPU is seen: what the framework says it runs on equals what the lock pins, and every shared
library it will load resolves in the image.

A cuda image is the lock's own wheels on a plain glibc + Python base: torch's default-index
wheels, `jax[cuda13]` and `tensorflow[and-cuda]` depend on nvidia-* wheels that carry CUDA's
runtime, cuBLAS, cuDNN, NCCL and the rest; `jax[tpu]` brings libtpu. Only the driver
(libcuda.so.1) comes from the host, mounted by the NVIDIA container runtime when a container
asks for GPUs. So after the build, in a container without any accelerator, the stack probe
(lockguard/probes/stack.py):

1. imports the framework and has it load its stack as it does on a GPU host (torch's import,
   jax's CUDA plugin `initialize` steps, libtpu through jax's own PJRT loader), and records
   what it says: the CUDA it was built for, the cuDNN and NCCL it loaded;
2. reads /proc/self/maps: which file each loaded library came from, and which wheel installed
   it (a system copy on the base would show here, not as the lock's);
3. loads every other shared library of the stack's wheels (cuDNN's engines, cuBLAS's helpers,
   the framework's lazily loaded parts) with RTLD_NOW, so that a missing dependency or symbol
   fails now, not in the middle of a GPU run; a library whose only missing piece is the driver
   passes (the runtime brings it);
4. asks the loaded libraries their own versions (cudaRuntimeGetVersion, cudnnGetVersion,
   cublasGetProperty, ncclGetVersion: none needs a GPU).

`stack_problems` judges that report against the lock on the host: a framework without its
accelerator build, a wheel built for another CUDA major, a library that does not load, a
version the framework loaded that is not the one the lock pins (or not from the lock's wheel),
a stack requirement of the framework's own metadata (torch's nvidia-* pins, jax's plugin and
libtpu, the plugin's nvidia-* ranges) that the lock's pin does not meet. Each problem names the
wheel and the library. `AcceleratorStack` is what passes: recorded with the image and shown in
reports ("cuda 13.0 · cuDNN 9.24.0 · NCCL 2.30.7 from the lock").
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.envs.base import EnvError
from lockguard.envs.docker.engine import probe
from lockguard.envs.docker.recipe import VENV_PYTHON
from lockguard.locks.families import cuda_major
from lockguard.locks.model import Lock, Pin
from lockguard.probes import STACK

# The driver's own libraries: the NVIDIA container runtime mounts them into a container that
# asks for GPUs, so an image never holds them, and a library that needs only them passes.
DRIVER_LIBRARIES = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so",
                    "libnvidia-nvvm.so", "libcudadebugger.so")
# Libraries of the stack itself (CUDA's, NVIDIA's, the frameworks' and libtpu): one of these
# missing is the lock's fault. Anything else a stack library needs comes from the system.
STACK_PREFIXES = ("libcu", "libnv", "libnccl", "libtorch", "libc10", "libcaffe2", "libtpu",
                  "libxla", "libjax", "libtensorflow", "libtf")
MAX_SHOWN = 4  # problems named in the error line (the build log lists them all)
_MISSING = re.compile(r"([\w.+-]+\.so[\w.]*): cannot open shared object file")
_UNDEFINED = re.compile(r"undefined symbol: (\S+)")


@dataclass(frozen=True)
class AcceleratorStack:
    """What a cuda or tpu image runs on, as its framework reported it in the image."""

    accelerator: str
    framework: str
    cuda: str | None = None  # the CUDA runtime loaded: "13.0"
    cuda_build: str | None = None  # the CUDA the framework was built for
    cudnn: str | None = None  # "9.24.0"
    cublas: str | None = None
    nccl: str | None = None
    libtpu: str | None = None  # the libtpu wheel's version
    libraries: int = 0  # shared libraries the check saw loaded or loaded itself
    driver_only: tuple[str, ...] = ()  # those that need only the driver (not in an image)
    # (library, the system library it needs): optional transports that load where a host
    # provides MPI, UCX, InfiniBand... (NVSHMEM's bootstraps, cuFile's RDMA)
    optional: tuple[tuple[str, str], ...] = ()

    def summary(self) -> str:
        """'cuda 13.0 · cuDNN 9.24.0 · NCCL 2.30.7 from the lock'."""
        parts = [f"{label} {value}" for label, value in (
            ("cuda", self.cuda), ("cuDNN", self.cudnn), ("NCCL", self.nccl),
            ("libtpu", self.libtpu)) if value]
        return " · ".join(parts) + " from the lock" if parts else "no accelerator stack"

    def record(self) -> dict[str, Any]:
        """The stack as JSON-ready data for the build record (lockguard-ready.json), with its
        summary() line; stack_line words it back for `lockguard build`."""
        data = asdict(self)
        data["driver_only"] = list(self.driver_only)
        data["optional"] = dict(self.optional)
        data["summary"] = self.summary()
        return data


def stack_probe(client: Any, tag: str, module: str, accelerator: str) -> dict[str, Any]:
    """Run the stack probe in a container of `tag` (no network, no accelerator)."""
    return probe(client, tag, VENV_PYTHON, STACK, [module, accelerator],
                 what=f"checking the {accelerator} stack in {tag}")


def check_stack(client: Any, tag: str, lock: Lock, framework: str, module: str,
                accelerator: str, log: Path) -> AcceleratorStack:
    """The image's accelerator stack, or EnvError listing every problem (wheel and library)."""
    report = stack_probe(client, tag, module, accelerator)
    stack, problems = stack_problems(report, lock, framework)
    if problems:
        try:  # every problem in the log; the error line names the first few
            log.parent.mkdir(parents=True, exist_ok=True)
            with open(log, "a", encoding="utf-8") as f:
                f.write(f"\n# the {accelerator} stack check found {len(problems)} problem(s):\n"
                        + "".join(f"- {problem}\n" for problem in problems))
        except OSError:
            pass
        shown = problems[:MAX_SHOWN]
        more = f"; and {len(problems) - MAX_SHOWN} more" if len(problems) > MAX_SHOWN else ""
        raise EnvError(f"{tag}: the {accelerator} stack of {Path(lock.source).name} does not "
                       f"hold together: {'; '.join(shown)}{more} (build log: {log})")
    return stack


# ---------------------------------------------------------------------------------------------
# Judging the report against the lock (no engine: tests feed it reports)
# ---------------------------------------------------------------------------------------------


def stack_problems(report: dict[str, Any], lock: Lock,
                   framework: str) -> tuple[AcceleratorStack, list[str]]:
    """The stack the report shows, and what is wrong with it against `lock` ([] if nothing)."""
    accelerator = report.get("accelerator", "")
    if accelerator == "tpu":
        return _tpu(report, lock, framework)
    return _cuda(report, lock, framework)


def _pin(lock: Lock, *names: str) -> Pin | None:
    """The first pin of `names` (canonical), or of a -cuNN variant of one of them."""
    by_name = lock.by_name
    for name in names:
        for candidate in [name] + sorted(n for n in by_name if re.fullmatch(
                rf"{re.escape(name)}-cu\d+", n)):
            pins = by_name.get(candidate)
            if pins:
                return pins[0]
    return None


def _by_file(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    entries = list(report.get("loaded", [])) + list(report.get("libraries", []))
    return {e["file"]: e for e in entries if e.get("file")}


def _owner(entry: dict[str, Any] | None) -> str:
    if not entry:
        return "nothing in the image"
    if entry.get("dist"):
        return f"{entry['dist']}=={entry['version']}"
    return f"{entry['file']} (no wheel of the lock: a copy outside the venv)"


def _stem(filename: str) -> str:
    return filename.rsplit("/", 1)[-1].split(".so", 1)[0]


def _provider(report: dict[str, Any], soname: str) -> str:
    """Which wheel offers another version of a library the image lacks: 'libcudart.so.12 from
    nvidia-cuda-runtime-cu12==12.9.79'."""
    stem = _stem(soname)
    for entry in _by_file(report).values():
        name = entry["file"].rsplit("/", 1)[-1]
        if _stem(name) == stem and name != soname:
            return f"; the image has {name} from {_owner(entry)}"
    return ""


def _version_of(value: Any, scheme: str) -> tuple[int, ...] | None:
    """A library's integer version as (major, minor, patch)."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(int(x) for x in value[:3])
    if isinstance(value, str):
        try:
            return tuple(int(x) for x in value.split(".")[:3])
        except ValueError:
            return None
    n = int(value)
    if scheme == "cudart":  # 13000 -> 13.0
        return (n // 1000, n % 1000 // 10)
    if scheme == "cudnn":  # 92400 -> 9.24.0 (cuDNN 9); 8907 -> 8.9.7 (cuDNN 8)
        return (n // 10000, n % 10000 // 100, n % 100) if n >= 90000 else \
            (n // 1000, n % 1000 // 100, n % 100)
    if scheme == "cublas":  # 130101 -> 13.1.1 (jax's encoding)
        return (n // 10000, n % 10000 // 100, n % 100)
    if scheme == "nccl":  # 23007 -> 2.30.7
        return (n // 10000, n % 10000 // 100, n % 100)
    return None


def _show(version: tuple[int, ...] | None) -> str | None:
    return ".".join(map(str, version)) if version else None


def _release(pin: Pin, parts: int) -> tuple[int, ...]:
    return tuple(pin.parsed_version.release[:parts])


def _stack_library(report: dict[str, Any], soname: str) -> bool:
    """Whether a library belongs to the accelerator stack (the lock's wheels should hold it),
    rather than to the system: CUDA's, the frameworks', or one some wheel in the image has."""
    stem = _stem(soname)
    return stem.startswith(STACK_PREFIXES) or any(
        _stem(f) == stem for f in _by_file(report))


# The distributions of a stack, in what the framework's metadata requires: what the lock must pin
# as asked.
_STACK_DISTS = ("nvidia-", "cuda-", "libtpu", "jax-cuda", "jax-rocm", "jaxlib")
def _requirement_problems(report: dict[str, Any], lock: Lock,
                          extras: tuple[str, ...]) -> list[str]:
    """Every stack requirement the framework's (and its plugins') metadata declares must be met
    by the lock's pin: 'torch 2.14.1 requires nvidia-nccl-cu13==2.30.7; the lock pins
    nvidia-nccl-cu12==2.27.7 instead'. `extras`: those that select the accelerator's
    requirements (jax[cuda13], jax-cuda13-plugin[with-cuda], tensorflow[and-cuda], jax[tpu])."""
    env = dict(report.get("markers") or {})
    problems = []
    for dist, (version, texts) in sorted((report.get("requires") or {}).items()):
        for text in texts:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            name = canonicalize_name(req.name)
            if not name.startswith(_STACK_DISTS):
                continue
            if req.marker is not None and not any(
                    req.marker.evaluate({**env, "extra": extra}) for extra in ("", *extras)):
                continue
            wanted = f"{req.name}{req.specifier}"
            pins = lock.by_name.get(name)
            if pins:
                try:
                    ok = req.specifier.contains(Version(pins[0].version), prereleases=True)
                except InvalidVersion:
                    ok = True
                if not ok:
                    problems.append(f"{dist} {version} requires {wanted}, the lock pins "
                                    f"{pins[0].requirement}")
                continue
            stem = re.sub(r"-cu\d+$", "", name)
            other = next((p for p in lock.pins if p.name != name
                          and re.sub(r"-cu\d+$", "", p.name) == stem), None)
            problems.append(f"{dist} {version} requires {wanted}; the lock pins "
                            + (f"{other.requirement} instead" if other else "none"))
    return problems


def _library_problems(report: dict[str, Any]
                      ) -> tuple[list[str], list[str], dict[str, str], int]:
    """Libraries that do not load (wheel, library, why); those that need only the driver; the
    optional ones that need a system library ({library: what it needs})."""
    problems, driver_only, optional = [], [], {}
    entries = report.get("libraries", [])
    for entry in entries:
        error = entry.get("error")
        if not error:
            continue
        missing = _MISSING.search(error)
        name = entry["file"].rsplit("/", 1)[-1]
        if missing and missing.group(1).startswith(DRIVER_LIBRARIES):
            driver_only.append(name)
            continue
        if missing and not _stack_library(report, missing.group(1)):
            # A transport or bootstrap for a system's network stack (MPI, UCX, InfiniBand's
            # mlx5, libfabric): loaded only where the host provides it and one configures it.
            optional[name] = missing.group(1)
            continue
        if missing:
            why = f"needs {missing.group(1)}, which nothing in the image provides" \
                  f"{_provider(report, missing.group(1))}"
        elif _UNDEFINED.search(error):
            why = f"undefined symbol {_UNDEFINED.search(error).group(1)} (built against " \
                  f"another version of a library it loads)"
        else:
            why = error
        problems.append(f"{name} from {_owner(entry)} does not load: {why}")
    return problems, driver_only, optional, len(entries)


def _error_problems(report: dict[str, Any]) -> list[str]:
    """The framework's own errors, with the wheel of a library it could not find."""
    out = []
    for error in report.get("errors", []):
        missing = _MISSING.search(error)
        if missing and not missing.group(1).startswith(DRIVER_LIBRARIES):
            error += f" (nothing in the image provides {missing.group(1)}" \
                     f"{_provider(report, missing.group(1))})"
        out.append(error)
    return out


def _cuda(report: dict[str, Any], lock: Lock,
          framework: str) -> tuple[AcceleratorStack, list[str]]:
    view = report.get("view", {})
    versions = report.get("versions", {})
    problems = _error_problems(report)
    fw = f"{framework} {view.get('version') or ''}".strip()
    major, build = _cuda_build(view, framework, fw, problems)
    if major is not None:
        problems += _other_majors(report, lock, fw, major, build)
    cudart = _version_of(versions.get("cudart", view.get("cuda")), "cudart")
    cudnn = _version_of(view.get("cudnn", versions.get("cudnn")), "cudnn")
    nccl = _version_of(view.get("nccl", versions.get("nccl")), "nccl")
    cublas = _version_of(view.get("cublas", versions.get("cublas")), "cublas")
    checks = (
        ("the CUDA runtime", "libcudart", cudart, 2, ("nvidia-cuda-runtime",), "cudart"),
        ("cuDNN", "libcudnn", cudnn, 3, ("nvidia-cudnn",), "cudnn"),
        ("cuBLAS", "libcublas", cublas, 3, ("nvidia-cublas",), "cublas"),
        ("NCCL", "libnccl", nccl, 3, ("nvidia-nccl",), "nccl"),
    )
    problems += _loaded_from_lock(report, lock, fw, checks)
    if framework == "jax":
        problems += _jax_build_floor(view, lock, fw, checks)
    extras = ("with-cuda", "and-cuda") + ((f"cuda{major}",) if framework == "jax" and major
                                          else ())
    problems += _requirement_problems(report, lock, extras)
    lib_problems, driver_only, optional, count = _library_problems(report)
    problems += lib_problems
    if not problems and cudart is None and major is not None:
        problems.append(f"{fw} loaded no CUDA runtime (libcudart) in the image")
    stack = AcceleratorStack(
        accelerator="cuda", framework=framework, cuda=_show(cudart) or build,
        cuda_build=build, cudnn=_show(cudnn), cublas=_show(cublas), nccl=_show(nccl),
        libraries=count + sum(1 for e in report.get("loaded", []) if e.get("dist")),
        driver_only=tuple(sorted(set(driver_only))), optional=tuple(sorted(optional.items())))
    return stack, problems


def _cuda_build(view: dict[str, Any], framework: str, fw: str,
                problems: list[str]) -> tuple[int | None, str | None]:
    """The CUDA the framework is built for: (major, build version); a CPU-only build (or a jax
    without its CUDA plugin) is put first in `problems`."""
    major: int | None = None
    build: str | None = None
    if framework == "torch":
        build = view.get("cuda_build")
        if build is None and "version" in view:
            problems.insert(0, f"{fw} is a CPU-only build (torch.version.cuda is None): the "
                               f"lock pins no CUDA build of torch for a cuda image (torch's "
                               f"default-index Linux wheels bring the nvidia-* stack)")
    elif framework == "jax":
        plugin = view.get("plugin")
        if plugin is None and "version" in view:
            problems.insert(0, f"the lock pins no CUDA plugin for {fw} (jax[cuda13] brings "
                               f"jax-cuda13-plugin and its nvidia-* wheels)")
        elif plugin:
            major = int(plugin.rsplit("cuda", 1)[1])
        build = _show(_version_of(view.get("cuda_build"), "cudart"))
    elif framework == "tensorflow":
        build = view.get("cuda_build")
        if not view.get("is_cuda_build") and "version" in view:
            problems.insert(0, f"{fw} is not a CUDA build (tf.sysconfig.get_build_info()): "
                               f"tensorflow[and-cuda] is the CUDA build with its nvidia-* wheels")
    if build and major is None:
        major = int(str(build).split(".")[0])
    return major, build


def _other_majors(report: dict[str, Any], lock: Lock, fw: str, major: int,
                  build: str | None) -> list[str]:
    """Every wheel built for a CUDA major must be built for the framework's."""
    problems = []
    for pin in lock.pins:
        pinned = cuda_major(pin)
        if pinned is not None and pinned != major:
            libs = sorted({e["file"].rsplit("/", 1)[-1] for e in _by_file(report).values()
                           if e.get("dist") and canonicalize_name(e["dist"]) == pin.name})
            what = f" ({', '.join(libs[:3])})" if libs else ""
            problems.append(f"{pin.requirement} is built for CUDA {pinned}, {fw} for CUDA "
                            f"{build or major}{what}")
    return problems


def _loaded_from_lock(report: dict[str, Any], lock: Lock, fw: str,
                      checks: tuple[tuple[Any, ...], ...]) -> list[str]:
    """What the framework loaded must be the lock's, at the lock's version."""
    problems = []
    loaded = _by_file(report)
    versions = report.get("versions", {})
    for label, stem, have, parts, names, key in checks:
        pin = _pin(lock, *names)
        source = versions.get(f"{key}_file")
        if have is None or pin is None:
            continue
        want = _release(pin, parts)
        where = source or next((e for f, e in loaded.items() if _stem(f) == stem), None)
        if source and source.get("dist") is None:
            problems.append(f"{fw} loads {label} from {source['file']}, not from the lock's "
                            f"{pin.requirement}")
        elif have[:parts] != want:
            problems.append(f"{fw} loads {label} {_show(have)}, the lock pins {pin.requirement}"
                            f" ({stem}.so from {_owner(where)})")
    return problems


def _jax_build_floor(view: dict[str, Any], lock: Lock, fw: str,
                     checks: tuple[tuple[Any, ...], ...]) -> list[str]:
    """jax's own rule (jax_plugins.xla_cudaNN._check_cuda_versions): the CUDA runtime, cuDNN
    and cuBLAS loaded are at least the versions it was built against, patch levels aside."""
    problems = []
    for label, stem, _, _, names, key in checks[:3]:
        have = _version_of(view.get(key if key != "cudart" else "cuda"), key)
        built = _version_of(view.get(f"{key if key != 'cudart' else 'cuda'}_build"), key)
        if have and built and have[:2] < built[:2]:
            pin = _pin(lock, *names)
            problems.append(f"{fw} was built against {label} {_show(built)}, the image "
                            f"loads {_show(have)} ({stem}.so from "
                            f"{pin.requirement if pin else 'the image'})")
    return problems


def _tpu(report: dict[str, Any], lock: Lock,
         framework: str) -> tuple[AcceleratorStack, list[str]]:
    view = report.get("view", {})
    problems = _error_problems(report)
    fw = f"{framework} {view.get('version') or ''}".strip()
    pin = _pin(lock, "libtpu", "libtpu-nightly")
    if pin is None:
        problems.insert(0, f"the lock pins no libtpu for {fw} (jax[tpu] brings it)")
    problems += [p for p in _requirement_problems(report, lock, ("tpu",))
                 if pin is not None or "libtpu" not in p]
    lib_problems, driver_only, optional, count = _library_problems(report)
    problems += lib_problems
    stack = AcceleratorStack(accelerator="tpu", framework=framework,
                             libtpu=pin.version if pin else None,
                             libraries=count + sum(1 for e in report.get("loaded", []) if e.get("dist")),
                             driver_only=tuple(sorted(set(driver_only))),
                             optional=tuple(sorted(optional.items())))
    return stack, problems


def stack_line(record: dict[str, Any]) -> str:
    """A build's one line about its stack (AcceleratorStack.record()): 'cuda 13.0 · cuDNN
    9.24.0 · NCCL 2.30.7 from the lock: 42 libraries load without a GPU; ...'."""
    device = "TPU" if record.get("accelerator") == "tpu" else "GPU"
    text = (f"{record.get('summary')}: {record.get('libraries', 0)} libraries load without a "
            f"{device}")
    driver = record.get("driver_only") or []
    if driver:
        text += f"; {len(driver)} need the host's driver, mounted at run time ({driver[0]}" \
                + (", …" if len(driver) > 1 else "") + ")"
    optional = record.get("optional") or {}
    if optional:
        needs = sorted(set(optional.values()))
        text += f"; {len(optional)} optional transports need system libraries " \
                f"({', '.join(needs[:3])}{', …' if len(needs) > 3 else ''})"
    return text
