"""The Docker engine, through the docker SDK: connecting, the base image, and short Python
probes in throwaway containers.

This is the edge where the SDK's exceptions (and those of the HTTP stack under it) become
EnvError, picked by class: `connect` for an engine that does not answer, each call site for what
its failure means. The SDK is imported when first used, here and nowhere else in lockguard, so
that commands which never touch Docker do not pay for importing it, and an install without the
`docker` extra works until the docker backend is asked for (then: one line, exit 2).
"""

from __future__ import annotations

import json
import os
import uuid
from types import ModuleType
from typing import Any

from lockguard import envvars
from lockguard.cache import cache_dir
from lockguard.envs.base import EnvError
from lockguard.envs.docker.recipe import BASE_IMAGE_ENV, Base, base_for
from lockguard.envs.docker.wheelhouse import Target
from lockguard.files import write_text
from lockguard.probes import PLATFORM_INFO, Probe
from lockguard.progress import QUIET, Progress

DEFAULT_SOCKET = "unix:///var/run/docker.sock"
CLIENT_TIMEOUT = 3600  # seconds without a byte from the engine (a big wheel installs silently)
NO_SDK = "the docker backend needs lockguard[docker]: pip install 'lockguard[docker]'"


def sdk() -> ModuleType:
    """The docker SDK (the `docker` extra), or EnvError saying how to install it."""
    try:
        import docker
        import docker.errors
        import docker.types
    except ImportError:
        raise EnvError(NO_SDK) from None
    return docker


def sdk_errors() -> ModuleType:
    """docker.errors: ImageNotFound, APIError, ContainerError, DockerException."""
    return sdk().errors


def _unreachable() -> tuple[type[BaseException], ...]:
    """What the SDK raises when no engine answers: its own errors, OSError, and the errors of
    the HTTP stack under it (requests' derive from OSError; urllib3's do not)."""
    from requests.exceptions import RequestException
    from urllib3.exceptions import HTTPError

    return (sdk_errors().DockerException, OSError, RequestException, HTTPError)


def connect() -> Any:
    """A docker SDK client for DOCKER_HOST (or the default socket) that has answered a ping."""
    docker = sdk()
    try:
        client = docker.from_env(timeout=CLIENT_TIMEOUT)
        client.ping()
    except _unreachable() as exc:
        raise EnvError(no_engine_message(exc)) from None
    return client


def no_engine_message(exc: BaseException) -> str:
    """The one-line EnvError text when no Docker engine answers: where lockguard looked
    (DOCKER_HOST or the default socket), why it failed, and how to start one."""
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


def api_reason(exc: BaseException) -> str:
    """The first line of what the engine said, for a one-line error."""
    text = getattr(exc, "explanation", None) or str(exc)
    return text.splitlines()[0][:200] if text else type(exc).__name__


def gpu_request() -> list[Any]:
    """Every GPU, as a device request (what `docker run --gpus all` sends)."""
    return [sdk().types.DeviceRequest(count=-1, capabilities=[["gpu"]])]


def run_once(client: Any, image: str, args: list[str], **kwargs: Any) -> bytes:
    """`client.containers.run(image, args, remove=True, **kwargs)`, the container removed also
    when it never started: the SDK removes it only after a start, so a start the engine refuses
    (a GPU request without the NVIDIA runtime, a missing entrypoint) left it behind, Created,
    holding its image."""
    name = f"lockguard-{uuid.uuid4().hex[:16]}"
    try:
        return client.containers.run(image, args, name=name, remove=True, **kwargs)
    except sdk_errors().APIError:
        try:
            client.containers.get(name).remove(force=True)
        except sdk_errors().APIError:
            pass  # never created (no such image), or already gone
        raise


def remove_quietly(client: Any, ref: str) -> None:
    """Remove an image if the engine lets us; only disk space is at stake if it does not."""
    try:
        client.images.remove(ref, noprune=False)
    except sdk_errors().APIError:
        pass  # in use by a concurrent build, or already gone


# ---------------------------------------------------------------------------------------------
# The base image
# ---------------------------------------------------------------------------------------------


def resolve_base(client: Any, accelerator: str, base_image: str | None = None) -> Base:
    """The accelerator's pinned base, or a local image (argument, or LOCKGUARD_BASE_IMAGE).

    A local override is addressed by its image id: rebuilding it changes every tag built on it.
    """
    pinned = base_for(accelerator)
    override = base_image or envvars.value(BASE_IMAGE_ENV)
    if not override:
        return pinned
    try:
        image = client.images.get(override)
    except sdk_errors().ImageNotFound:
        source = "given" if base_image else f"set by {BASE_IMAGE_ENV}"
        raise EnvError(f"base image {override} ({source}) is not present on the Docker engine: "
                       f"build or load it first (`docker images` lists what is there)") from None
    return Base(name="override", image=override, digest=image.id, python="", glibc="",
                arch=pinned.arch, python_setup="", cuda=pinned.cuda, cudnn=pinned.cudnn,
                local=True)


def ensure_base(client: Any, base: Base, progress: Progress = QUIET) -> None:
    """Make sure the base is on the engine: present, or pulled by digest; else a clear error."""
    errors = sdk_errors()
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
        raise EnvError(
            f"base image {base.ref} is not present on the Docker engine and could not be pulled "
            f"({api_reason(exc)}): pull it where a registry is reachable and `docker save | "
            f"docker load` it here, or set {BASE_IMAGE_ENV} to a local image that has python3"
        ) from None


def target_of(client: Any, base: Base) -> Target:
    """The base's Python as pip needs it: probed in the image (cached per image id), or, for
    bases that get Python during the build, what bases.toml declares."""
    if base.python_setup:
        return Target.declared(base)
    image = client.images.get(base.ref)
    cached = cache_dir() / "images" / "bases" / f"{image.id.replace(':', '-')}.json"
    if cached.is_file():
        return Target.from_probe(json.loads(cached.read_text(encoding="utf-8")))
    data = probe(client, base.ref, "python3", PLATFORM_INFO, [],
                 what=f"probing base image {base.ref}")
    target = Target.from_probe(data)
    write_text(cached, json.dumps(data))
    return target


# ---------------------------------------------------------------------------------------------
# Probes
# ---------------------------------------------------------------------------------------------


def probe(client: Any, image: str, python: str, program: Probe, args: list[str], *,
          what: str) -> dict[str, Any]:
    """Run a probe (`python -c` its program, args) in a throwaway container without network;
    the last JSON line it prints."""
    errors = sdk_errors()
    try:
        out = run_once(client, image, [*args], entrypoint=[python, "-c", program.program()],
                       network_mode="none", stdout=True, stderr=False)
    except errors.ContainerError as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else ""
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        raise EnvError(f"{what}: {python} exited with code {exc.exit_status}: {tail}") from None
    except errors.APIError as exc:
        text = exc.explanation or str(exc)
        if "executable file not found" in text or "no such file" in text.lower():
            raise EnvError(f"{what}: the image has no {python} (give its base a python_setup "
                           f"in bases.toml)") from None
        raise EnvError(f"{what}: {api_reason(exc)}") from None
    return _last_json(out.decode(errors="replace"), what)


def _last_json(output: str, what: str) -> dict[str, Any]:
    for line in reversed(output.strip().splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                break
    raise EnvError(f"{what}: no JSON in the output: {output.strip()[-200:]!r}")
