"""The environment backends, behind one seam (envs/base.py), the way httpx's transports are:

    base.py     Backend: identity() · admit(locks) · scope(framework, device) ·
                prepare(lock, framework, device, progress) -> Env;  Env.run(RunRequest) ->
                RunResult; RunRequest; running the harness process once for every backend
    venv.py     VenvBackend: a cached virtualenv per lock (the default)
    local.py    LocalBackend: the interpreter as it is
    docker/     DockerBackend (docker/backend.py): an image per lock, framework, accelerator;
                it also builds, pushes and pins images apart from a check (base.ImageBackend:
                `lockguard build`, `lockguard images pin`)

`backend_for(kind, ...)` chooses one from BACKENDS, the registry (pre-commit's all_languages,
nox's ALL_VENVS); the flows know only this package and envs.base, never a backend's module. A
new backend (an accelerator host, a remote runner) is a module here that implements Backend,
its entry in BACKENDS and its name in names.ENV_KINDS (tests/test_layers.py holds the two
equal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockguard.envs.base import Backend, Env, EnvError, ImageBackend, RunRequest

if TYPE_CHECKING:
    from pathlib import Path

    from lockguard.sandbox import Sandbox

__all__ = ["BACKENDS", "Backend", "BackendOptions", "Env", "EnvError", "ImageBackend",
           "RunRequest", "backend_for"]


@dataclass(frozen=True, kw_only=True)
class BackendOptions:
    """The project's settings a backend is made with (backend_for's keywords); each backend
    takes those it has a use for."""

    python: str | None = None
    installer: str = "uv"
    allow_sdist: bool = False
    allow_unhashed: bool = False
    allow_insecure_index: bool = False
    sandbox: Sandbox | None = None
    share_compile_caches: bool = False
    share_bytecode: bool = True
    project: Path | None = None


# Each backend's module is imported only when it is asked for: a check run in venvs never
# loads the docker backend (nor its SDK), and the other way round.

def _venv(o: BackendOptions) -> Backend:
    from lockguard.envs.venv import VenvBackend

    return VenvBackend(o.python, o.installer, allow_sdist=o.allow_sdist,
                       allow_unhashed=o.allow_unhashed,
                       allow_insecure_index=o.allow_insecure_index, sandbox=o.sandbox,
                       share_compile_caches=o.share_compile_caches,
                       share_bytecode=o.share_bytecode, project=o.project)


def _docker(o: BackendOptions) -> Backend:
    from lockguard.envs.docker.backend import DockerBackend

    return DockerBackend(allow_unhashed=o.allow_unhashed,
                         allow_insecure_index=o.allow_insecure_index)


def _local(o: BackendOptions) -> Backend:
    from lockguard.envs.local import LocalBackend

    return LocalBackend(o.python, o.sandbox)


# kind (names.ENV_KINDS, in its order) -> the backend made with a project's options.
BACKENDS: dict[str, Callable[[BackendOptions], Backend]] = {
    "venv": _venv, "docker": _docker, "local": _local}


def backend_for(kind: str, *, python: str | None = None, installer: str = "uv",
                allow_sdist: bool = False, allow_unhashed: bool = False,
                allow_insecure_index: bool = False, sandbox: Sandbox | None = None,
                share_compile_caches: bool = False, share_bytecode: bool = True,
                project: Path | None = None) -> Backend:
    """The backend `kind` (names.ENV_KINDS) names, with the project's settings: `python` the
    interpreter venvs are built with and local runs use (None: the one running lockguard),
    `installer` uv or pip, and the opt-ins to sdists, unhashed locks and plain-http indexes.
    `sandbox`: what the runs of the venv and local backends are confined to (a container is
    the docker backend's); `project`: whose checks use the venvs (`lockguard cache` says so).
    The venv backend's two shortcuts, one switch each (docs/performance.md, "Shortcuts"):
    `share_compile_caches`: venvs whose compilers are pinned alike share one compile cache
    (envs/compile_cache.py), which only bisection's mixes ask for (flows/bisect.py): the two
    sides of an A/B never read what the other's code compiled; `share_bytecode`: a venv's
    .pyc are linked from the store of those lockguard compiled for the same bytes
    (envs/bytecode.py), the config's `share_bytecode`. Nothing is checked or built here
    (Backend.admit, Backend.prepare do that)."""
    make = BACKENDS.get(kind)
    if make is None:
        raise ValueError(f"unknown environment kind {kind!r} (expected "
                         f"{', '.join(BACKENDS)})")
    return make(BackendOptions(
        python=python, installer=installer, allow_sdist=allow_sdist,
        allow_unhashed=allow_unhashed, allow_insecure_index=allow_insecure_index,
        sandbox=sandbox, share_compile_caches=share_compile_caches,
        share_bytecode=share_bytecode, project=project))
