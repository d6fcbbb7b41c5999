"""`lockguard build` and `lockguard images pin`: the pinned container images of the project's
locks, built (or reused) one per lock and framework, optionally pushed; and the base images'
digests refreshed. Every lock is admitted (hashes, trusted indexes) before any image is built:
nothing installs what its lock does not pin.

The images are the docker backend's (envs.base.ImageBackend), reached through
envs.backend_for as a check reaches its backend: no flow imports a backend's module."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from lockguard.envs import ImageBackend, backend_for
from lockguard.errors import UsageError
from lockguard.locks.ref import load_locks
from lockguard.progress import Progress
from lockguard.settings import Settings


@dataclass(frozen=True)
class Built:
    """One image of a lock, built or reused (the backend's: its tag, id, size, reused, seconds
    and log), and its stack's line (cuda/tpu images)."""

    image: Any
    stack: str | None


def image_backend(settings: Settings | None = None) -> ImageBackend:
    """The backend that builds images (docker), with the project's trust opt-ins."""
    backend = backend_for("docker",
                          allow_unhashed=settings.allow_unhashed if settings else False,
                          allow_insecure_index=settings.allow_insecure_index if settings
                          else False)
    assert isinstance(backend, ImageBackend), "the docker backend builds images"
    return backend


def build_images(settings: Settings, locks: list[str], framework: str | None, accelerator: str,
                 base_image: str | None, registry: str | None,
                 progress: Progress) -> Iterator[Built]:
    """The image of each lock (the config's, or `locks`) for `framework` (default: every
    framework the lock pins but numpy, or numpy alone), as each is built. With a `registry`
    (checked before anything is built), the caller pushes each with `push`."""
    images = image_backend(settings)
    if registry is not None:
        images.check_registry(registry)  # before anything is built
    refs = load_locks(settings.config, locks)
    images.admit([ref.lock for ref in refs])  # every lock before any image
    for ref in refs:
        pinned = sorted(ref.lock.frameworks() - {"numpy"}) or sorted(ref.lock.frameworks())
        for fw in [framework] if framework else pinned:
            if fw not in ref.lock.frameworks():
                raise UsageError(f"{ref.path}: the lock does not pin {fw}")
            image = images.build_image(ref.lock, fw, accelerator, base_image=base_image,
                                       progress=progress)
            yield Built(image, images.stack_line(image))


def push(built: Built, registry: str) -> Any:
    """Tag the image below `registry`, push it and record the pushed digest (the record's
    `ref` and `record`)."""
    return image_backend().push(built.image, registry)


def pin_bases(progress: Progress) -> dict[str, tuple[str, str]]:
    """Refresh images/bases.toml's digests from the registry: base -> (old, new)."""
    return image_backend().pin_bases(progress)
