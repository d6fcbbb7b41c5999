"""The docker backend's Env: harness runs in a lock's image, through the `docker run` command
line and envs.base.execute, like every other backend's process.

Runs use network none, a read-only root, the harness and the user script mounted read-only, the
output directory read-write; GPUs by device request (`--gpus`), TPUs by device mounts. The SDK
builds images (engine.py, build.py) and the CLI runs them: a run is then a process whose
timeout, output and exit status are handled once, in envs.base, for every backend.
"""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path
from typing import Any

from lockguard.envs.base import (
    EnvError, RunRequest, compile_cache_env, execute, harness_args, harness_env,
)
from lockguard.envs.docker import accelerators, engine
from lockguard.envs.docker.build import BuiltImage, build_image, image_dir
from lockguard.envs.docker.recipe import VENV_PYTHON
from lockguard.envs.harness import HARNESS_DIR
from lockguard.locks.model import Lock
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status

# Inside the container.
HARNESS_MOUNT = "/lockguard/harness"
OUT_MOUNT = "/lockguard/out"
USER_MOUNT = "/lockguard/user"
CACHE_MOUNT = "/lockguard/cache"
# Variables that change numerics: set on the host, they reach the container as they reach a venv.
FORWARDED_ENV = ("CUBLAS_WORKSPACE_CONFIG", "XLA_FLAGS", "TF_DETERMINISTIC_OPS",
                 "TF_ENABLE_ONEDNN_OPTS", "JAX_ENABLE_X64", "JAX_PLATFORMS",
                 "KMP_DETERMINISTIC_REDUCTION", "OPENBLAS_CORETYPE")


class DockerEnv:
    def __init__(self, image: BuiltImage, lock_hash: str, accelerator: str,
                 docker_cli: str, client: Any = None) -> None:
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
        out_name = f"{request.scenario_id}.json"
        self.compile_cache.mkdir(parents=True, exist_ok=True)
        argv = [self.docker_cli, "run", "--rm", "--name", name, "--init",
                "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,exec",
                "--shm-size", "1g", "--user", f"{os.getuid()}:{os.getgid()}",
                "--label", "lockguard.run=1", "--workdir", "/tmp",
                "-v", f"{HARNESS_DIR.resolve()}:{HARNESS_MOUNT}:ro",
                "-v", f"{out_dir.resolve()}:{OUT_MOUNT}:rw",
                "-v", f"{self.compile_cache.resolve()}:{CACHE_MOUNT}:rw"]
        script = None
        if request.script is not None:
            path = Path(request.script).resolve()
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
            for device in accelerators.tpu_devices():
                args += ["--device", device]
            # libtpu pins host memory for DMA.
            return args + ["--ulimit", "memlock=-1:-1"]
        return []

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        out = out_dir / f"{request.scenario_id}.json"
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
            client = self._client or engine.connect()
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


def prepare(lock: Lock, *, framework: str, accelerator: str = "cpu",
            progress: Progress = QUIET, base_image: str | None = None) -> DockerEnv:
    """The env for `lock`'s `framework` on `accelerator`: its image built or reused, the
    accelerator checked (cuda: GPU request and driver CUDA; tpu: device nodes)."""
    engine.sdk()  # before anything else: an install without the docker extra says so first
    docker_cli = shutil.which("docker")
    if docker_cli is None:
        raise EnvError("the docker backend runs containers with the `docker` command, which is "
                       "not on PATH (install the Docker CLI, e.g. apt-get install docker.io)")
    client = engine.connect()
    image = build_image(lock, image_framework(lock, framework), accelerator,
                        base_image=base_image, client=client, progress=progress)
    if accelerator == "cuda":
        accelerators.check_gpu(client, image.recipe, lock)
    elif accelerator == "tpu" and not accelerators.tpu_devices():
        raise EnvError("no TPU device nodes on this host (/dev/accel*, /dev/vfio/*): the tpu "
                       "images run on a TPU VM")
    return DockerEnv(image, lock.lock_hash, accelerator, docker_cli, client)
