"""Container images as a capability of their own: what `lockguard build` and `lockguard images
pin` ask of the docker backend (build or reuse a lock's image, push it, refresh the pinned
bases), behind one face, so that the flows import no backend's module."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lockguard.envs.docker import BuiltImage
    from lockguard.envs.docker.push import Pushed
    from lockguard.locks.model import Lock
    from lockguard.progress import Progress


def check_registry(registry: str) -> str:
    """A registry to push to, refused before anything is built when it is not one."""
    from lockguard.envs.docker.push import check_registry as check

    return check(registry)


def build(lock: Lock, framework: str, accelerator: str, *, base_image: str | None,
          progress: Progress) -> BuiltImage:
    """The lock's pinned image for `framework` on `accelerator`, built or reused."""
    from lockguard.envs import docker

    return docker.build_image(lock, framework, accelerator, base_image=base_image,
                              progress=progress)


def stack_line(image: BuiltImage) -> str | None:
    """A cuda or tpu image's stack, as a line ("cuda 13.0 · cuDNN 9.x · NCCL 2.x ...")."""
    from lockguard.envs import docker

    return docker.stack_line(image.stack) if image.stack is not None else None


def push(image: BuiltImage, registry: str) -> Pushed:
    """Tag the image below `registry`, push it and record the pushed digest."""
    from lockguard.envs.docker import engine
    from lockguard.envs.docker.build import image_dir
    from lockguard.envs.docker.push import push_image

    return push_image(engine.connect(), image.tag, image.id, registry, image_dir(image.recipe))


def pin_bases(progress: Progress) -> dict[str, tuple[str, str]]:
    """Refresh images/bases.toml's digests from the registry: base -> (old, new)."""
    from lockguard.envs import docker

    return docker.pin_images(progress)
