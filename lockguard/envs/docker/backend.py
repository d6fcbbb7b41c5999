"""The docker backend's Env: harness runs in a lock's image, through the `docker run` command
line and envs.base.execute, like every other backend's process.

Runs use network none, a read-only root, the harness and the user script mounted read-only, the
output directory read-write; GPUs by device request (`--gpus`), TPUs by device mounts. A cuda
image whose run asks for no GPU (CUDA_VISIBLE_DEVICES set to hide them all, as CUDA reads it;
for a tpu image, TPU_VISIBLE_CHIPS set empty) starts without the request: its stack loads, the
training runs on the CPU, and the result says why (a device_fallback naming the cause). The
container sees the allowlist's container variables only (lockguard/allowlist.py), and a run's
memory limit is the container's (`--memory`, swap included): one the kernel's OOM killer ended
is told by the engine's `oom` event and reported as over the limit. The SDK
builds images (engine.py, build.py) and the CLI runs them: a run is then a process whose
timeout, output and exit status are handled once, in envs.base, for every backend.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lockguard import envvars
from lockguard.allowlist import container_env, docker_client_env
from lockguard.envs.base import (
    HARNESS_SETTINGS, EnvError, ImageBackend, RunRequest, compile_cache_env, compile_cache_for,
    execute, failed_result, harness_args, memory_error, require_writable_cache,
    variables_identity,
)
import lockguard.envs.docker.accelerators as accelerators
from lockguard.envs.docker.build import BuiltImage, build_image, image_dir
import lockguard.envs.docker.engine as engine
from lockguard.envs.docker.pin import pin_images
from lockguard.envs.docker.push import Pushed, check_registry, push_image
from lockguard.envs.docker.recipe import BASE_IMAGE_ENV, VENV_PYTHON, templates_dir
from lockguard.envs.docker.stack import stack_line
from lockguard.envs.harness import HARNESS_DIR
from lockguard.locks.model import Lock
from lockguard.locks.trust import require_trusted
from lockguard.progress import Progress
from lockguard.results import RunResult, Status

# Inside the container.
HARNESS_MOUNT = "/lockguard/harness"
OUT_MOUNT = "/lockguard/out"
USER_MOUNT = "/lockguard/user"
CACHE_MOUNT = "/lockguard/cache"


class DockerEnv:
    """A lock's image for one framework and accelerator, each run a `docker run` of it."""

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
        self.startup_files = None  # inside the image: not read from here

    def site_packages(self) -> Path | None:
        """None: the image's files are not read from here."""
        return None

    def docker_argv(self, request: RunRequest, out_dir: Path, name: str) -> list[str]:
        """The `docker run` command line of one harness run."""
        out_name = f"{request.scenario_id}.json"
        compile_cache = compile_cache_for(self.compile_cache, request)
        compile_cache.mkdir(parents=True, exist_ok=True)
        argv = [self.docker_cli, "run", "--rm", "--name", name, "--init",
                "--network", "none", "--read-only", "--tmpfs", "/tmp:rw,exec",
                "--shm-size", "1g", "--user", f"{os.getuid()}:{os.getgid()}",
                "--label", "lockguard.run=1", "--workdir", "/tmp",
                "-v", f"{HARNESS_DIR.resolve()}:{HARNESS_MOUNT}:ro",
                "-v", f"{out_dir.resolve()}:{OUT_MOUNT}:rw",
                "-v", f"{compile_cache.resolve()}:{CACHE_MOUNT}:rw"]
        script = root = None
        if request.script is not None:
            path = Path(request.script).resolve()
            # The project is mounted (what a sandboxed venv run reads too): an entry imports
            # from its folder or its src/, and a scenario's `data` lies in it.
            mounted = Path(next(p for p in (request.project, request.entry_root, path.parent)
                                if p is not None)).resolve()
            argv += ["-v", f"{mounted}:{USER_MOUNT}:ro", *_hide_git(mounted)]
            script = f"{USER_MOUNT}/{path.relative_to(mounted).as_posix()}"
            if request.entry_root is not None:
                inside = Path(request.entry_root).resolve().relative_to(mounted).as_posix()
                root = USER_MOUNT if inside == "." else f"{USER_MOUNT}/{inside}"
        for key, value in self.container_env().items():
            argv += ["-e", f"{key}={value}"]
        if request.memory_limit:
            # The engine holds the container to it, swap included (no swapping past it).
            argv += ["--memory", str(request.memory_limit),
                     "--memory-swap", str(request.memory_limit)]
        argv += self.device_args()
        argv += [self.tag, VENV_PYTHON,
                 *harness_args(request, HARNESS_MOUNT, f"{OUT_MOUNT}/{out_name}", script,
                              root)]
        return argv

    def container_env(self) -> dict[str, str]:
        """The variables a run's container is given."""
        # The allowlist's container families (the host's numerics variables), what every
        # harness run is given, and the container's own paths: the training allowlist's other
        # variables are host facts (paths, the host's device numbering) with no meaning there.
        return {**container_env(), **HARNESS_SETTINGS, **compile_cache_env(CACHE_MOUNT),
                "HOME": "/tmp", "USER": "lockguard", "LOGNAME": "lockguard"}

    def device_args(self) -> list[str]:
        """The `docker run` options that give the container its accelerator, if it asks."""
        if self.accelerator == "cuda":
            if not accelerators.gpus_requested():
                return []
            visible = os.environ.get("CUDA_VISIBLE_DEVICES")
            return ["--gpus", f'"device={visible}"' if visible else "all"]
        if self.accelerator == "tpu":
            if not accelerators.tpus_requested():
                return []
            args = []
            for device in accelerators.tpu_devices():
                args += ["--device", device]
            # libtpu pins host memory for DMA.
            return args + ["--ulimit", "memlock=-1:-1"]
        return []

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        """The harness in a container of the image; the image's identity in the result's
        fingerprint."""
        out = out_dir / f"{request.scenario_id}.json"
        name = f"lockguard-{uuid.uuid4().hex[:16]}"
        started = time.time()
        result = execute(self.docker_argv(request, out_dir, name), request, out,
                         env=docker_client_env())
        if result.status == Status.timeout:
            self._kill(name)  # killing the docker client does not stop the container
        elif (result.status == Status.crashed and request.memory_limit
              and self._oom_killed(name, started)):
            result = failed_result(request, Status.crashed,
                                   f"{result.error or ''}\n{memory_error(request)}: the "
                                   "kernel's OOM killer stopped the container")
        result.fingerprint["image"] = {
            "tag": self.tag, "id": self.image.id, "lock_hash": self.lock_hash,
            "base": self.image.recipe.base.ref, "base_digest": self.image.recipe.base.digest,
            "accelerator": self.accelerator}
        if self.image.stack is not None:
            result.fingerprint["image"]["stack"] = self.image.stack
        return result

    def _oom_killed(self, name: str, since: float) -> bool:
        """Whether the engine saw container `name` run out of memory (its `oom` event: the
        container itself is gone, --rm)."""
        try:
            client = self._client or engine.connect()
            # `until` bounds the stream: the events up to a second from now, then it ends.
            events = client.events(since=int(since) - 1, until=int(time.time()) + 1,
                                   filters={"container": name, "event": "oom"}, decode=True)
            return any(True for _ in events)
        except Exception:  # noqa: BLE001 - no engine or no events: the crash stays as it was
            return False

    def _kill(self, name: str) -> None:
        try:
            client = self._client or engine.connect()
            client.containers.get(name).kill()
        except Exception:  # noqa: BLE001 - already gone, or no engine: nothing left to stop
            pass


def _hide_git(mounted: Path) -> list[str]:
    """The `docker run` options that hide the mounted project's `.git` (its config holds a
    checkout's credentials), as the venv sandbox leaves it out (sandbox.project_access): an
    empty read-only tmpfs over a folder, /dev/null over a file (a worktree's or submodule's
    pointer). None when it has none."""
    git = mounted / ".git"
    if git.is_dir():
        return ["--tmpfs", f"{USER_MOUNT}/.git:ro,size=4k"]
    if git.exists():
        return ["-v", f"/dev/null:{USER_MOUNT}/.git:ro"]
    return []


def image_framework(lock: Lock, framework: str) -> str:
    """Whose image a scenario runs in. numpy scenarios (bundled or user scripts) run in the
    image of the framework their lock is for: a torch lock's numpy is in the torch image, and
    a second image of the same lock would only cost a build."""
    if framework == "numpy":
        others = sorted(lock.frameworks() - {"numpy"})
        if others:
            return others[0]
    return framework


class DockerBackend(ImageBackend):
    """The docker backend: an image per lock, framework and accelerator, built with wheels
    only. A lock is admitted only with hashes and an https index unless `allow_unhashed` /
    `allow_insecure_index` opt in (locks/trust.py). Its images are also built, pushed and
    pinned apart from a check (`lockguard build`, `lockguard images pin`): the methods after
    `prepare`."""

    def __init__(self, *, allow_unhashed: bool = False,
                 allow_insecure_index: bool = False) -> None:
        self.allow_unhashed = allow_unhashed
        self.allow_insecure_index = allow_insecure_index

    def identity(self) -> str:
        """"docker", what an image is built from beside its lock (the image templates: the
        pinned bases, the Dockerfile; a base LOCKGUARD_BASE_IMAGE names instead) and the
        variables its containers see (base.variables_identity of container_env)."""
        templates = hashlib.sha256()
        for path in sorted(p for p in templates_dir().rglob("*") if p.is_file()):
            templates.update(path.relative_to(templates_dir()).as_posix().encode() + b"\0"
                             + path.read_bytes() + b"\0")
        base = envvars.value(BASE_IMAGE_ENV) or ""
        return (f"docker templates {templates.hexdigest()[:16]} base {base!r} vars "
                f"{variables_identity(container_env())}")

    def admit(self, locks: Sequence[Lock]) -> None:
        """A writable cache, then each lock trusted, in order."""
        require_writable_cache()
        for lock in locks:
            self._admit(lock)

    def _admit(self, lock: Lock) -> None:
        require_trusted(lock, allow_unhashed=self.allow_unhashed,
                        allow_insecure_index=self.allow_insecure_index)

    def scope(self, framework: str, device: str) -> str:
        """An image per framework and accelerator."""
        return f"{framework}/{device}"

    def prepare(self, lock: Lock | None, framework: str, device: str,
                progress: Progress) -> DockerEnv:
        """The env for `lock`'s `framework` on the `device` accelerator, the lock admitted
        again first (a backend a flow wraps, bisect's, is prepared lock by lock): its image
        built or reused, the accelerator checked (cuda: GPU request and driver CUDA; tpu:
        device nodes) unless the run asks for none (accelerators.gpus_requested,
        tpus_requested)."""
        assert lock is not None, "the docker backend builds a lock's image"
        self._admit(lock)
        engine.sdk()  # before anything else: an install without the docker extra says so first
        docker_cli = shutil.which("docker")
        if docker_cli is None:
            raise EnvError("the docker backend runs containers with the `docker` command, which "
                           "is not on PATH (install the Docker CLI, e.g. apt-get install "
                           "docker.io)")
        client = engine.connect()
        image = build_image(lock, image_framework(lock, framework), device, client=client,
                            progress=progress)
        if device == "cuda" and accelerators.gpus_requested():
            accelerators.check_gpu(client, image.recipe, lock)
        elif device == "tpu" and accelerators.tpus_requested() \
                and not accelerators.tpu_devices():
            raise EnvError("no TPU device nodes on this host (/dev/accel*, /dev/vfio/*): the tpu "
                           "images run on a TPU VM (with TPU_VISIBLE_CHIPS= the image runs "
                           "without one, a device_fallback)")
        return DockerEnv(image, lock.lock_hash, device, docker_cli, client)

    # ----------------------------------------------------------- the images, apart from checks

    def check_registry(self, registry: str) -> str:
        """REGISTRY as --push takes it (push.check_registry), refused before any build."""
        return check_registry(registry)

    def build_image(self, lock: Lock, framework: str, accelerator: str, *,
                    base_image: str | None, progress: Progress) -> BuiltImage:
        """The lock's pinned image for `framework` on `accelerator`, built or reused."""
        return build_image(lock, framework, accelerator, base_image=base_image,
                           progress=progress)

    def stack_line(self, image: BuiltImage) -> str | None:
        """A cuda or tpu image's stack, as a line; None for an image without one."""
        return stack_line(image.stack) if image.stack is not None else None

    def push(self, image: BuiltImage, registry: str) -> Pushed:
        """Tag the image below `registry`, push it and record the pushed digest beside its
        build record."""
        return push_image(engine.connect(), image.tag, image.id, registry,
                          image_dir(image.recipe))

    def pin_bases(self, progress: Progress) -> dict[str, tuple[str, str]]:
        """Refresh images/bases.toml's digests from the registry: base -> (old, new)."""
        return pin_images(progress)
