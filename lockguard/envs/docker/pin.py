"""`lockguard images pin`: refresh the base images' digests in bases.toml from a registry.

`pin_bases` is handed the lookup (image tag -> digest), so the rewrite itself needs no engine;
`pin_images` asks the Docker engine's registry client.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from pathlib import Path

from lockguard.envs.base import EnvError
import lockguard.envs.docker.engine as engine
from lockguard.envs.docker.recipe import DIGEST, Base, bases_file, load_bases
from lockguard.files import write_text
from lockguard.progress import QUIET, Progress


def write_bases(bases: dict[str, Base], path: Path | None = None) -> None:
    """Rewrite the digests in the pin file in place (comments and layout kept), atomically."""
    path = path or bases_file()
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    table = None
    out = []
    for line in lines:
        header = re.match(r"^\[([A-Za-z0-9_-]+)\]\s*$", line)
        if header:
            table = header.group(1)
        elif table in bases and re.match(r"^digest\s*=", line):
            line = f'digest = "{bases[table].digest}"\n'
        out.append(line)
    write_text(path, "".join(out))


def pin_bases(resolve: Callable[[str], str], path: Path | None = None,
              progress: Progress = QUIET) -> dict[str, tuple[str, str]]:
    """Refresh every base's digest with `resolve(image tag) -> digest`; write the pin file.

    Returns {table: (old digest, new digest)}. Nothing is written unless every base resolved.
    """
    path = path or bases_file()
    bases = load_bases(path)
    changes = {}
    updated = {}
    for name, base in bases.items():
        with progress.step(f"Resolving {base.image}"):
            digest = resolve(base.image)
        if not DIGEST.match(digest):
            raise EnvError(f"{base.image}: the registry answered {digest!r}, not a sha256 digest")
        changes[name] = (base.digest, digest)
        updated[name] = dataclasses.replace(base, digest=digest)
    write_bases(updated, path)
    return changes


def pin_images(progress: Progress = QUIET, path: Path | None = None
               ) -> dict[str, tuple[str, str]]:
    """`lockguard images pin`: refresh bases.toml's digests from the registry."""
    client = engine.connect()
    errors = engine.sdk_errors()

    def lookup(image: str) -> str:
        try:
            return client.images.get_registry_data(image).id
        except errors.APIError as exc:
            raise EnvError(f"cannot reach the registry for {image} ({engine.api_reason(exc)}): "
                           f"the pins in {path or bases_file()} are unchanged") from None

    return pin_bases(lookup, path, progress)
