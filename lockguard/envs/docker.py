"""The docker backend: one image per framework x accelerator x lock, built and run on an engine.

    prepare(lock, framework=, accelerator=) -> DockerEnv      (builds the image if needed)
    build_image(lock, framework, accelerator) -> BuiltImage  (`lockguard build`)
    pin_images() -> {base: (old, new)}                        (`lockguard images pin`)

What an image holds is decided in lockguard/images.py (template, base pins, wheelhouse, tag);
this module talks to the engine. Builds use the docker SDK, so the classic builder (no BuildKit):
the lock's wheels are downloaded on the host (hashes checked, cached per lock and platform) and
reach the image through the build context, in an install stage whose layers are removed after the
build; the build itself runs with no network. The tag is content-addressed
(`lockguard/<framework>-<accelerator>:<hash>`): an existing tag whose conformance was recorded is
reused without a build. After a build, the packages in the image must equal the lock.

Cache layout, beside the venvs: $LOCKGUARD_CACHE/images/<hash>/ holds build.log and
`lockguard-ready.json` (the image id whose conformance was checked), <hash>.lock the file lock,
<hash>.compile-cache/ the compiler caches that runs mount. Base probes live in images/bases/.

Runs go through the `docker run` command line and envs.base.execute, like every other backend's
process: network none, read-only root, the harness and the user script mounted read-only, the
output directory read-write; GPUs by device request (`--gpus`), TPUs by device mounts.
"""

from __future__ import annotations

import errno
import glob
import json
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockguard import images
from lockguard.cache import cache_dir, file_lock
from lockguard.files import write_text
from lockguard.envs.base import (
    EnvError, RunRequest, compile_cache_env, execute, harness_args, harness_env,
)
from lockguard.images import VENV_PYTHON, Base, ImageRecipe, Target
from lockguard.locks import Lock
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status
from lockguard.scenarios import HARNESS_DIR

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
CLIENT_TIMEOUT = 3600  # seconds without a byte from the engine (a big wheel installs silently)
READY = images.READY
# Inside the container.
HARNESS_MOUNT = "/lockguard/harness"
OUT_MOUNT = "/lockguard/out"
USER_MOUNT = "/lockguard/user"
CACHE_MOUNT = "/lockguard/cache"
# Variables that change numerics: set on the host, they reach the container as they reach a venv.
FORWARDED_ENV = ("CUBLAS_WORKSPACE_CONFIG", "XLA_FLAGS", "TF_DETERMINISTIC_OPS",
                 "TF_ENABLE_ONEDNN_OPTS", "JAX_ENABLE_X64", "JAX_PLATFORMS",
                 "KMP_DETERMINISTIC_REDUCTION", "OPENBLAS_CORETYPE")


# ---------------------------------------------------------------------------------------------
# The engine
# ---------------------------------------------------------------------------------------------


def connect():
    """A docker SDK client for DOCKER_HOST (or the default socket) that has answered a ping."""
    import docker
    from docker.errors import DockerException

    try:
        client = docker.from_env(timeout=CLIENT_TIMEOUT)
        client.ping()
    except (DockerException, OSError) as exc:
        raise EnvError(no_engine_message(exc)) from None
    except Exception as exc:  # requests' ConnectionError and friends
        if type(exc).__module__.startswith(("requests", "urllib3")):
            raise EnvError(no_engine_message(exc)) from None
        raise
    return client


def no_engine_message(exc: BaseException) -> str:
    host = os.environ.get("DOCKER_HOST")
    where = f"DOCKER_HOST={host}" if host else f"{DEFAULT_SOCKET} (DOCKER_HOST is not set)"
    text = str(exc)
    if "Permission denied" in text or "PermissionError" in text:
        why = "permission denied: add your user to the docker group, or run as root"
    elif "No such file" in text or "FileNotFoundError" in text:
        why = "no socket there"
    elif "Connection refused" in text or "ConnectionRefused" in text:
        why = "connection refused"
    else:
        why = text.splitlines()[0][:160] if text else type(exc).__name__
    return (f"no Docker engine answers at {where}: {why}. Start one (`sudo systemctl start "
            f"docker`, or `sudo dockerd &`) or point DOCKER_HOST at a running engine")


def _errors():
    from docker import errors

    return errors


# ---------------------------------------------------------------------------------------------
# Bases
# ---------------------------------------------------------------------------------------------


def resolve_base(client, accelerator: str, base_image: str | None = None) -> Base:
    """The accelerator's pinned base, or a local image (argument, or LOCKGUARD_BASE_IMAGE).

    A local override is addressed by its image id: rebuilding it changes every tag built on it.
    """
    pinned = images.base_for(accelerator)
    override = base_image or os.environ.get(images.BASE_IMAGE_ENV)
    if not override:
        return pinned
    try:
        image = client.images.get(override)
    except _errors().ImageNotFound:
        source = "given" if base_image else f"set by {images.BASE_IMAGE_ENV}"
        raise EnvError(f"base image {override} ({source}) is not present on the Docker engine: "
                       f"build or load it first (`docker images` lists what is there)") from None
    return Base(name="override", image=override, digest=image.id, python="", glibc="",
                arch=pinned.arch, python_setup="", cuda=pinned.cuda, cudnn=pinned.cudnn,
                local=True)


def ensure_base(client, base: Base, progress: Progress = QUIET) -> None:
    """Make sure the base is on the engine: present, or pulled by digest; else a clear error."""
    errors = _errors()
    try:
        client.images.get(base.ref)
        return
    except errors.ImageNotFound:
        pass
    if base.local:
        raise EnvError(f"base image {base.ref} disappeared from the Docker engine")
    try:
        with progress.step(f"Pulling base image {base.ref}"):
            client.images.pull(base.ref)
    except errors.APIError as exc:
        reason = (exc.explanation or str(exc)).splitlines()[0][:200]
        raise EnvError(
            f"base image {base.ref} is not present on the Docker engine and could not be pulled "
            f"({reason}): pull it where a registry is reachable and `docker save | docker load` "
            f"it here, or set {images.BASE_IMAGE_ENV} to a local image that has python3"
        ) from None


def target_of(client, base: Base) -> Target:
    """The base's Python as pip needs it: probed in the image (cached per image id), or, for
    bases that get Python during the build, what bases.toml declares."""
    if base.python_setup:
        return Target.declared(base)
    image = client.images.get(base.ref)
    cached = cache_dir() / "images" / "bases" / f"{image.id.replace(':', '-')}.json"
    if cached.is_file():
        return Target.from_probe(json.loads(cached.read_text(encoding="utf-8")))
    output = _run_python(client, base.ref, "python3", images.PROBE, [],
                         what=f"probing base image {base.ref}")
    data = _last_json(output, f"probing base image {base.ref}")
    target = Target.from_probe(data)
    write_text(cached, json.dumps(data))
    return target


def _run_python(client, image: str, python: str, code: str, args: list[str], *,
                what: str) -> str:
    """Run `python -c code args` in a throwaway container without network; its stdout."""
    errors = _errors()
    try:
        out = client.containers.run(image, [*args], entrypoint=[python, "-c", code],
                                    network_mode="none", remove=True, stdout=True, stderr=False)
    except errors.ContainerError as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        raise EnvError(f"{what}: {python} exited with code {exc.exit_status}: {tail}") from None
    except errors.APIError as exc:
        text = exc.explanation or str(exc)
        if "executable file not found" in text or "no such file" in text.lower():
            raise EnvError(f"{what}: the image has no {python} (give its base a python_setup "
                           f"in images/bases.toml)") from None
        raise EnvError(f"{what}: {text.splitlines()[0][:200]}") from None
    return out.decode(errors="replace")


def _last_json(output: str, what: str) -> dict:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    raise EnvError(f"{what}: no JSON in the output: {output.strip()[-200:]!r}")


# ---------------------------------------------------------------------------------------------
# Building
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuiltImage:
    tag: str
    id: str  # the image id: sha256 of its config, what the fingerprint records
    recipe: ImageRecipe
    reused: bool  # an existing image was reused, nothing was built
    seconds: float  # this call's wall time
    size: int  # bytes, as the engine reports
    log: Path  # the build log (of the build that made it, if it was made here)


def image_dir(recipe: ImageRecipe) -> Path:
    return cache_dir() / "images" / recipe.content_hash[:20]


def build_image(lock: Lock, framework: str, accelerator: str, *, base_image: str | None = None,
                client=None, progress: Progress = QUIET) -> BuiltImage:
    """Build (or reuse) the image of `lock` for one framework and accelerator."""
    started = time.perf_counter()
    client = client or connect()
    base = resolve_base(client, accelerator, base_image)
    recipe = images.recipe(framework, accelerator, lock, base)
    root = cache_dir() / "images"
    key = recipe.content_hash[:20]
    with file_lock(root / f"{key}.lock"):
        image = _reusable(client, recipe, lock, progress)
        reused = image is not None
        if image is None:
            image = _build(client, recipe, lock, progress)
    return BuiltImage(tag=recipe.tag, id=image.id, recipe=recipe, reused=reused,
                      seconds=time.perf_counter() - started,
                      size=int(image.attrs.get("Size") or 0),
                      log=image_dir(recipe) / "build.log")


def _reusable(client, recipe: ImageRecipe, lock: Lock, progress: Progress):
    """The existing image under the recipe's tag, if it passes (or already passed) conformance."""
    try:
        image = client.images.get(recipe.tag)
    except _errors().ImageNotFound:
        return None
    record = image_dir(recipe) / READY
    if record.is_file():
        try:
            if json.loads(record.read_text(encoding="utf-8")).get("image_id") == image.id:
                return image
        except (OSError, ValueError):
            pass
    # Tagged but not checked here (another cache dir, or the tag was moved): check it now.
    with progress.step(f"Checking existing image {recipe.tag} against {Path(lock.source).name}"):
        check_conformance(client, recipe.tag, lock, recipe.module, image_dir(recipe) / "build.log")
    _write_record(recipe, lock, image.id, None)
    return image


def _build(client, recipe: ImageRecipe, lock: Lock, progress: Progress):
    started = time.perf_counter()
    directory = image_dir(recipe)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / READY).unlink(missing_ok=True)
    log = directory / "build.log"
    ensure_base(client, recipe.base, progress)
    target = target_of(client, recipe.base)
    house = images.wheelhouse(lock, target, progress)
    context = directory / "context"
    try:
        labels = recipe.labels(lock.source)
        labels["lockguard.python"] = target.python
        _write_context(context, recipe, house, labels)
        install_stage = _stream_build(client, recipe, context, log, progress)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise EnvError(f"disk full while preparing the build context of {recipe.tag} in "
                           f"{context}: free space there or point LOCKGUARD_CACHE elsewhere"
                           ) from None
        raise
    finally:
        shutil.rmtree(context, ignore_errors=True)
    if install_stage:
        _remove_quietly(client, install_stage)  # the wheels' layer: not part of the image
    try:
        with progress.step(f"Checking {recipe.tag} against {Path(lock.source).name}"):
            check_conformance(client, recipe.tag, lock, recipe.module, log)
    except EnvError:
        _remove_quietly(client, recipe.tag)  # a non-conforming image is never reused
        raise
    image = client.images.get(recipe.tag)
    _write_record(recipe, lock, image.id, time.perf_counter() - started)
    return image


def _write_context(context: Path, recipe: ImageRecipe, house: Path,
                   labels: dict[str, str]) -> None:
    if context.exists():
        shutil.rmtree(context)
    (context / "wheels").mkdir(parents=True)
    # The labels go in as one LABEL instruction (the API's labels= makes the classic builder
    # commit one layer per label). They are not part of the content hash: all but the creation
    # time follow from what is.
    label_line = "LABEL " + " \\\n      ".join(
        f"{json.dumps(k)}={json.dumps(v)}" for k, v in sorted(labels.items()))
    (context / "Dockerfile").write_text(recipe.dockerfile.rstrip("\n") + "\n" + label_line + "\n",
                                        encoding="utf-8")
    shutil.copyfile(house / "requirements.txt", context / "requirements.txt")
    for wheel in (house / "wheels").iterdir():
        try:
            os.link(wheel, context / "wheels" / wheel.name)  # same cache dir: no copy
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise
            shutil.copyfile(wheel, context / "wheels" / wheel.name)


_STEP = re.compile(r"^Step \d+/\d+ : (\w+)\s*(.*)$", re.IGNORECASE)
_LAYER = re.compile(r"^ ---> ([0-9a-f]{12,64})\s*$")


def _stream_build(client, recipe: ImageRecipe, context: Path, log: Path,
                  progress: Progress) -> str | None:
    """Run the classic builder, streaming its lines to the log and the spinner.

    Returns the id of the install stage's last layer, to be removed after the build.
    """
    errors = _errors()
    stage = None  # name of the stage being built
    last_layer = None
    install_layer = None
    error = None
    with open(log, "w", encoding="utf-8") as f, \
            progress.step(f"Building {recipe.tag} on {recipe.base.ref}") as step:
        f.write(f"# {recipe.tag}\n# base {recipe.base.ref}\n# network "
                f"{recipe.network or 'default'}\n")
        try:
            stream = client.api.build(
                path=str(context), tag=recipe.tag, rm=True, forcerm=True, pull=False,
                decode=True, network_mode=recipe.network)
            for chunk in stream:
                if "error" in chunk:
                    error = str(chunk.get("error") or "").strip()
                    f.write(f"ERROR: {error}\n")
                    break
                text = chunk.get("stream")
                if not text:
                    continue
                f.write(text)
                for line in text.splitlines():
                    if line.strip():
                        step.update(line.strip())
                    m = _STEP.match(line)
                    if m and m.group(1).upper() == "FROM":
                        if stage == "install":
                            install_layer = last_layer
                        words = m.group(2).split()
                        stage = words[-1].lower() if len(words) >= 3 and \
                            words[-2].lower() == "as" else None
                    layer = _LAYER.match(line)
                    if layer:
                        last_layer = layer.group(1)
        except errors.APIError as exc:
            error = (exc.explanation or str(exc)).strip()
            f.write(f"ERROR: {error}\n")
    if error is not None:
        if "no space left on device" in error.lower():
            raise EnvError(f"disk full in the Docker engine's storage while building "
                           f"{recipe.tag} (`docker system prune` frees space; build log: {log})")
        first = error.splitlines()[0][:300] if error else "unknown error"
        raise EnvError(f"building {recipe.tag} failed: {first} (build log: {log})")
    return install_layer


def _remove_quietly(client, ref: str) -> None:
    try:
        client.images.remove(ref, noprune=False)
    except _errors().APIError:
        pass  # in use by a concurrent build, or already gone: only disk space is at stake


def _write_record(recipe: ImageRecipe, lock: Lock, image_id: str, seconds: float | None) -> None:
    record = {"tag": recipe.tag, "image_id": image_id, "lock_hash": lock.lock_hash,
              "lock": lock.source, "base": recipe.base.ref, "base_digest": recipe.base.digest,
              "built_s": round(seconds, 1) if seconds is not None else None,
              "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_text(image_dir(recipe) / READY, json.dumps(record, indent=1))


# ---------------------------------------------------------------------------------------------
# Conformance: the image holds exactly the lock
# ---------------------------------------------------------------------------------------------

# Runs with the image's venv interpreter: what is installed, what markers see, and whether the
# framework imports at all (a wheel that installs but cannot load on the base fails the build).
CONFORMANCE = images.PLATFORM_INFO + r"""
import importlib, importlib.metadata as md
report = platform_info()
report["dists"] = {d.metadata["Name"]: d.version for d in md.distributions() if d.metadata["Name"]}
try:
    importlib.import_module(sys.argv[1])
    report["import_error"] = None
except BaseException as exc:
    first = (str(exc).splitlines() or [""])[0][:200]
    report["import_error"] = "%s: %s" % (type(exc).__name__, first)
print(json.dumps(report))
"""


def installed_in(client, tag: str, module: str) -> dict[str, Any]:
    """Run the conformance probe in an image: {"dists": {name: version}, "import_error", ...}."""
    output = _run_python(client, tag, VENV_PYTHON, CONFORMANCE, [module],
                         what=f"checking the packages in {tag}")
    return _last_json(output, f"checking the packages in {tag}")


def check_conformance(client, tag: str, lock: Lock, module: str, log: Path) -> None:
    """The packages in the image must equal the lock's (for the image's platform) exactly."""
    from packaging.utils import canonicalize_name

    report = installed_in(client, tag, module)
    target = Target.from_probe(report)
    installed = {canonicalize_name(n): v for n, v in report["dists"].items()}
    problems = images.conformance_problems(images.expected_pins(lock, target), installed)
    if problems:
        raise EnvError(f"{tag} does not match {lock.source}: {'; '.join(problems)} "
                       f"(build log: {log})")
    if report.get("import_error"):
        raise EnvError(f"{tag}: `import {module}` fails in the image: {report['import_error']} "
                       f"(build log: {log})")


# ---------------------------------------------------------------------------------------------
# Accelerators
# ---------------------------------------------------------------------------------------------

_CUDA_VERSION = re.compile(r"CUDA Version:\s*(\d+)\.(\d+)")


def driver_cuda(nvidia_smi_output: str) -> tuple[int, int] | None:
    """The CUDA version the driver supports, from nvidia-smi's header."""
    m = _CUDA_VERSION.search(nvidia_smi_output)
    return (int(m.group(1)), int(m.group(2))) if m else None


def required_cuda(recipe: ImageRecipe, lock: Lock) -> tuple[tuple[int, int] | None, str]:
    """The CUDA the image needs from the driver, and where that requirement comes from.

    The base's CUDA (its runtime refuses older drivers) counts in full; a framework's CUDA
    wheels (torch +cu128, nvidia-cuda-runtime-cu12) by major version only, since CUDA's minor
    version compatibility lets a 12.8 runtime run on any 12.x driver.
    """
    need: tuple[int, int] | None = None
    source = ""
    if recipe.base.cuda:
        major, minor = (int(x) for x in recipe.base.cuda.split(".")[:2])
        need, source = (major, minor), f"base image CUDA {recipe.base.cuda}"
    for pin in lock.pins:
        major = None
        if pin.name in ("torch", "torchvision", "torchaudio") and "+cu" in pin.version:
            digits = pin.version.split("+cu", 1)[1]
            major = int(digits[:-1]) if len(digits) >= 2 and digits.isdigit() else None
        m = re.match(r"nvidia-cuda-runtime-cu(\d+)$", pin.name)
        if m:
            major = int(m.group(1))
        if major is not None and (need is None or (major, 0) > need):
            need, source = (major, 0), f"{pin.requirement} (CUDA {major})"
    return need, source


def check_driver(driver: tuple[int, int] | None, need: tuple[int, int] | None, source: str,
                 tag: str) -> None:
    if need is None:
        return
    if driver is None:
        raise EnvError(f"{tag}: could not read the driver's CUDA version from nvidia-smi")
    if driver < need:
        raise EnvError(f"the GPU driver supports CUDA {driver[0]}.{driver[1]}, but {tag} needs "
                       f"CUDA {need[0]}.{need[1]} ({source}): upgrade the driver, or lock a "
                       f"framework build (and base) for an older CUDA")


def check_gpu(client, recipe: ImageRecipe, lock: Lock) -> str:
    """Ask for the GPUs by device request, run nvidia-smi, and check the driver's CUDA."""
    import docker

    errors = _errors()
    try:
        out = client.containers.run(
            recipe.tag, [], entrypoint=["nvidia-smi"], network_mode="none", remove=True,
            device_requests=[docker.types.DeviceRequest(count=-1, capabilities=[["gpu"]])])
    except errors.ContainerError as exc:
        raise EnvError(f"nvidia-smi failed in {recipe.tag} (exit {exc.exit_status}): is a GPU "
                       f"there and its driver loaded?") from None
    except errors.APIError as exc:
        text = (exc.explanation or str(exc)).splitlines()[0][:200]
        if "device driver" in text or "nvidia" in text.lower():
            raise EnvError(f"the Docker engine cannot give containers a GPU ({text}): install "
                           f"the NVIDIA Container Toolkit and restart dockerd") from None
        raise EnvError(f"starting a GPU container from {recipe.tag}: {text}") from None
    text = out.decode(errors="replace")
    need, source = required_cuda(recipe, lock)
    check_driver(driver_cuda(text), need, source, recipe.tag)
    return text


def tpu_devices() -> list[str]:
    """The TPU device nodes to pass through: /dev/accel* (v2-v4), /dev/vfio/* (v5e and later)."""
    return sorted(glob.glob("/dev/accel*")) + sorted(glob.glob("/dev/vfio/*"))


# ---------------------------------------------------------------------------------------------
# Running
# ---------------------------------------------------------------------------------------------


class DockerEnv:
    def __init__(self, image: BuiltImage, lock_hash: str, accelerator: str,
                 docker_cli: str, client=None) -> None:
        self.image = image
        self.tag = image.tag
        self.lock_hash = lock_hash
        self.accelerator = accelerator
        self.docker_cli = docker_cli
        self.label = f"docker {image.tag}"
        self.compile_cache = image_dir(image.recipe).with_suffix(".compile-cache")
        self._client = client

    def docker_argv(self, request: RunRequest, out_dir: Path, name: str) -> list[str]:
        """The `docker run` command line of one harness run."""
        out_name = f"{request.scenario.id}.json"
        self.compile_cache.mkdir(parents=True, exist_ok=True)
        argv = [self.docker_cli, "run", "--rm", "--name", name, "--init",
                "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,exec",
                "--shm-size", "1g", "--user", f"{os.getuid()}:{os.getgid()}",
                "--label", "lockguard.run=1", "--workdir", "/tmp",
                "-v", f"{HARNESS_DIR.resolve()}:{HARNESS_MOUNT}:ro",
                "-v", f"{out_dir.resolve()}:{OUT_MOUNT}:rw",
                "-v", f"{self.compile_cache.resolve()}:{CACHE_MOUNT}:rw"]
        script = None
        if request.scenario.script is not None:
            path = Path(request.scenario.script).resolve()
            argv += ["-v", f"{path.parent}:{USER_MOUNT}:ro"]
            script = f"{USER_MOUNT}/{path.name}"
        for key, value in self.container_env().items():
            argv += ["-e", f"{key}={value}"]
        argv += self.device_args()
        argv += [self.tag, VENV_PYTHON,
                 *harness_args(request, HARNESS_MOUNT, f"{OUT_MOUNT}/{out_name}", script)]
        return argv

    def container_env(self) -> dict[str, str]:
        # What harness_env sets for every backend, plus the host's numerics variables; never the
        # host's whole environment (paths and tokens have no business in the container).
        caches = compile_cache_env(CACHE_MOUNT)
        env = harness_env({**caches, "HOME": "/tmp", "USER": "lockguard", "LOGNAME": "lockguard"})
        keep = ("PYTHONHASHSEED", "PYTHONNOUSERSITE", "PYTHONDONTWRITEBYTECODE",
                "TF_CPP_MIN_LOG_LEVEL", *caches, "HOME", "USER", "LOGNAME", *FORWARDED_ENV)
        return {k: env[k] for k in keep if k in env}

    def device_args(self) -> list[str]:
        if self.accelerator == "cuda":
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            return ["--gpus", f'"device={visible}"' if visible else "all"]
        if self.accelerator == "tpu":
            args = []
            for device in tpu_devices():
                args += ["--device", device]
            # libtpu pins host memory for DMA.
            return args + ["--ulimit", "memlock=-1:-1"]
        return []

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        out = out_dir / f"{request.scenario.id}.json"
        name = f"lockguard-{uuid.uuid4().hex[:16]}"
        result = execute(self.docker_argv(request, out_dir, name), request, out,
                         env=harness_env())
        if result.status == Status.timeout:
            self._kill(name)  # killing the docker client does not stop the container
        result.fingerprint["image"] = {
            "tag": self.tag, "id": self.image.id, "lock_hash": self.lock_hash,
            "base": self.image.recipe.base.ref, "base_digest": self.image.recipe.base.digest,
            "accelerator": self.accelerator}
        return result

    def _kill(self, name: str) -> None:
        try:
            client = self._client or connect()
            client.containers.get(name).kill()
        except Exception:  # noqa: BLE001 - already gone, or no engine: nothing left to stop
            pass


def image_framework(lock: Lock, framework: str) -> str:
    """Whose image a scenario runs in. numpy scenarios (bundled or user scripts) run in the
    image of the framework their lock is for: a torch lock's numpy is in the torch image, and
    a second image of the same lock would only cost a build."""
    if framework == "numpy":
        others = sorted(lock.frameworks() - {"numpy"})
        if others:
            return others[0]
    return framework


def prepare(lock: Lock, *, framework: str, accelerator: str = "cpu", config=None,
            progress: Progress = QUIET, base_image: str | None = None) -> DockerEnv:
    """The env for `lock`'s `framework` on `accelerator`: its image built or reused, the
    accelerator checked (cuda: GPU request and driver CUDA; tpu: device nodes)."""
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise EnvError("the docker backend runs containers with the `docker` command, which is "
                       "not on PATH (install the Docker CLI, e.g. apt-get install docker.io)")
    client = connect()
    image = build_image(lock, image_framework(lock, framework), accelerator,
                        base_image=base_image, client=client, progress=progress)
    if accelerator == "cuda":
        check_gpu(client, image.recipe, lock)
    elif accelerator == "tpu" and not tpu_devices():
        raise EnvError("no TPU device nodes on this host (/dev/accel*, /dev/vfio/*): the tpu "
                       "images run on a TPU VM")
    return DockerEnv(image, lock.lock_hash, accelerator, docker_cli, client)


def pin_images(progress: Progress = QUIET, path: Path | None = None
               ) -> dict[str, tuple[str, str]]:
    """`lockguard images pin`: refresh images/bases.toml's digests from the registry."""
    client = connect()
    errors = _errors()

    def resolve(image: str) -> str:
        try:
            return client.images.get_registry_data(image).id
        except errors.APIError as exc:
            reason = (exc.explanation or str(exc)).splitlines()[0][:200]
            raise EnvError(f"cannot reach the registry for {image} ({reason}): the pins in "
                           f"{path or images.bases_file()} are unchanged") from None

    return images.pin_bases(resolve, path, progress)
