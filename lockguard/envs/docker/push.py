"""`lockguard build --push REGISTRY`: tag the pinned image for a registry, push it, record the
digest the registry answered.

An image's tag is content-addressed already (lockguard/<framework>-<accelerator>:<hash>), so the
pushed name is the same tag below the registry: REGISTRY/lockguard/torch-cpu:<hash>. A runner
that pulls it gets exactly the image the lock pins; the digest (what the registry computed over
the manifest) is recorded in the image's cache folder, pushed-<registry hash>.json, and printed,
so that a workflow can pass `name@sha256:…` on. Nothing is pushed unless asked.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockguard.envs.base import EnvError
import lockguard.envs.docker.engine as engine
from lockguard.errors import UsageError, one_line
from lockguard.files import write_text

# host[:port][/namespace…], lower case as registries require; no scheme, tag or digest.
_REGISTRY = re.compile(r"[a-z0-9]+(?:[.-][a-z0-9]+)*(?::[0-9]{1,5})?"
                       r"(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*")


class PushError(EnvError):
    """The registry refused the push, or answered without a digest."""


@dataclass(frozen=True)
class Pushed:
    """An image pushed by `lockguard build --push`: its name below the registry, the manifest
    digest the registry answered, and the JSON record written in the image's cache folder."""

    image: str  # registry/lockguard/torch-cpu:<hash>
    digest: str  # sha256:… of the manifest, as the registry answered
    record: Path

    @property
    def ref(self) -> str:
        """The digest-pinned name, `REGISTRY/lockguard/torch-cpu@sha256:…`, that a workflow
        should pull: unlike the tag, it cannot be moved to another image."""
        return f"{self.image.rsplit(':', 1)[0]}@{self.digest}"


def check_registry(registry: str) -> str:
    """REGISTRY as --push takes it, or a usage error saying what is wrong with it."""
    if "://" in registry:
        raise UsageError(f"--push {one_line(registry, 100)}: a registry without a scheme, "
                         "e.g. ghcr.io/your-org or localhost:5000")
    value = registry.rstrip("/")
    if not _REGISTRY.fullmatch(value):
        raise UsageError(f"--push {one_line(registry, 100)}: not a registry name "
                         "(host[:port][/namespace], lower case, no tag or digest), "
                         "e.g. ghcr.io/your-org")
    return value


def target(registry: str, tag: str) -> tuple[str, str]:
    """(repository, tag) of the local tag `lockguard/torch-cpu:<hash>` below REGISTRY."""
    repository, _, version = tag.rpartition(":")
    return f"{registry}/{repository}", version


def push_image(client: Any, tag: str, image_id: str, registry: str, record_dir: Path) -> Pushed:
    """Tag the local image `tag` below `registry` and push it; the pushed digest, recorded."""
    registry = check_registry(registry)
    repository, version = target(registry, tag)
    try:
        client.images.get(tag).tag(repository, version)
        events = client.api.push(repository, tag=version, stream=True, decode=True)
        digest = None
        for event in events:
            if event.get("error"):
                raise PushError(f"pushing {repository}:{version}: "
                                f"{one_line(str(event['error']), 200)}")
            digest = (event.get("aux") or {}).get("Digest") or digest
    except engine.sdk_errors().APIError as exc:
        raise PushError(f"pushing {repository}:{version}: {engine.api_reason(exc)}") from None
    if not digest or not re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        raise PushError(f"pushing {repository}:{version}: the registry answered no digest")
    record = record_dir / f"pushed-{hashlib.sha256(registry.encode()).hexdigest()[:12]}.json"
    write_text(record, json.dumps({
        "image": f"{repository}:{version}", "digest": digest,
        "ref": f"{repository}@{digest}", "image_id": image_id, "local_tag": tag,
        "pushed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=1) + "\n")
    return Pushed(image=f"{repository}:{version}", digest=digest, record=record)
