"""`lockguard build` and `lockguard images pin`: the pinned container images of the project's
locks, built (or reused) one per lock and framework, optionally pushed; and the base images'
digests refreshed. Every lock is admitted (hashes, trusted indexes) before any image is built:
nothing installs what its lock does not pin."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lockguard.errors import UsageError
from lockguard.locks.ref import load_locks
from lockguard.locks.trust import require_trusted
from lockguard.progress import Progress
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.envs.images import BuiltImage, Pushed


@dataclass(frozen=True)
class Built:
    """One image of a lock, built or reused, and its stack's line (cuda/tpu images)."""

    image: BuiltImage
    stack: str | None


def build_images(settings: Settings, locks: list[str], framework: str | None, accelerator: str,
                 base_image: str | None, registry: str | None,
                 progress: Progress) -> Iterator[Built]:
    """The image of each lock (the config's, or `locks`) for `framework` (default: every
    framework the lock pins but numpy, or numpy alone), as each is built. With a `registry`
    (checked before anything is built), the caller pushes each with `push`."""
    from lockguard.envs import images

    if registry is not None:
        images.check_registry(registry)  # before anything is built
    refs = load_locks(settings.config, locks)
    for ref in refs:  # every lock before any image
        require_trusted(ref.lock, allow_unhashed=settings.allow_unhashed,
                        allow_insecure_index=settings.allow_insecure_index)
    for ref in refs:
        pinned = sorted(ref.lock.frameworks() - {"numpy"}) or sorted(ref.lock.frameworks())
        for fw in [framework] if framework else pinned:
            if fw not in ref.lock.frameworks():
                raise UsageError(f"{ref.path}: the lock does not pin {fw}")
            image = images.build(ref.lock, fw, accelerator, base_image=base_image,
                                 progress=progress)
            yield Built(image, images.stack_line(image))


def push(built: Built, registry: str) -> Pushed:
    """Tag the image below `registry`, push it and record the pushed digest."""
    from lockguard.envs import images

    return images.push(built.image, registry)


def pin_bases(progress: Progress) -> dict[str, tuple[str, str]]:
    """Refresh images/bases.toml's digests from the registry: base -> (old, new)."""
    from lockguard.envs import images

    return images.pin_bases(progress)
