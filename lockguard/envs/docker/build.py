"""Building an image: the wheelhouse into a build context, the classic builder's stream into a
log, the install stage removed afterwards, the conformance check, and the build record.

Builds use the docker SDK, so the classic builder (no BuildKit): the lock's wheels reach the
image through the build context, in an install stage whose layers are removed after the build;
the build itself runs with no network. The tag is content-addressed
(`lockguard/<framework>-<accelerator>:<hash>`): an existing tag whose conformance was recorded
is reused without a build.

A cuda or tpu image is also checked for its accelerator stack (stack.py: the framework's CUDA,
cuDNN and NCCL, or libtpu, are the lock's, and every library of the stack loads), in a
container without any accelerator; what it found is part of the build record.

Cache layout, beside the venvs: $LOCKGUARD_CACHE/images/<hash>/ holds build.log and
`lockguard-ready.json` (the image id whose conformance was checked, and its accelerator
stack), <hash>.lock the file lock,
<hash>.compile-cache/ the compiler caches that runs mount. Base probes live in images/bases/.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockguard.cache import cache_dir, entry
from lockguard.envs.base import READY, EnvError
import lockguard.envs.docker.engine as engine
from lockguard.envs.docker.conformance import check_conformance
from lockguard.envs.docker.recipe import ImageRecipe, recipe_for
from lockguard.envs.docker.stack import check_stack
from lockguard.envs.docker.wheelhouse import wheelhouse_for
from lockguard.locks.model import Lock
from lockguard.progress import QUIET, Progress


@dataclass(frozen=True)
class BuiltImage:
    """An image ready to run trainings in, built here or reused from an earlier build whose
    conformance was recorded; what `lockguard build` reports and the docker backend runs in."""

    tag: str
    id: str  # the image id: sha256 of its config, what the fingerprint records
    recipe: ImageRecipe
    reused: bool  # an existing image was reused, nothing was built
    seconds: float  # this call's wall time
    size: int  # bytes, as the engine reports
    log: Path  # the build log (of the build that made it, if it was made here)
    # The accelerator stack the build proved (AcceleratorStack.record()); None for cpu images
    # and images with no stack to prove (numpy).
    stack: dict[str, Any] | None = None


def image_dir(recipe: ImageRecipe) -> Path:
    """The cache folder of one recipe's image ($LOCKGUARD_CACHE/images/<hash prefix>/): its
    build log, its conformance record and pushed-*.json records."""
    return cache_dir() / "images" / recipe.content_hash[:20]


def build_image(lock: Lock, framework: str, accelerator: str, *, base_image: str | None = None,
                client: Any = None, progress: Progress = QUIET) -> BuiltImage:
    """Build (or reuse) the image of `lock` for one framework and accelerator."""
    started = time.perf_counter()
    client = client or engine.connect()
    base = engine.resolve_base(client, accelerator, base_image)
    recipe = recipe_for(framework, accelerator, lock, base)
    found: tuple[Any, dict[str, Any] | None] | None = None
    reused = True

    def recorded(_directory: Path) -> bool:
        nonlocal found
        found = _recorded(client, recipe)
        return found is not None

    def build(_directory: Path) -> str:
        # The record of an existing image checked now, or of one built and checked.
        nonlocal found, reused
        image, stack, seconds = (_checked_existing(client, recipe, lock, progress)
                                 or _build(client, recipe, lock, progress))
        found, reused = (image, stack), seconds is None
        return _record(recipe, lock, image.id, seconds, stack)

    # In place: the image lives in the engine; its folder keeps the build log a failure names.
    with entry(image_dir(recipe), build, ready=recorded, marker=READY, in_place=True,
               discard=lambda _directory: None, what=f"the image {recipe.tag}",
               tell=progress.info):
        assert found is not None
        image, stack = found
    return BuiltImage(tag=recipe.tag, id=image.id, recipe=recipe, reused=reused,
                      seconds=time.perf_counter() - started,
                      size=int(image.attrs.get("Size") or 0),
                      log=image_dir(recipe) / "build.log", stack=stack)


def has_stack(recipe: ImageRecipe) -> bool:
    """Whether the image has an accelerator stack to prove: cuda and tpu images of a framework
    (numpy has no accelerator backend; its scenarios on cuda run on the CPU, saying so)."""
    return recipe.accelerator in ("cuda", "tpu") and recipe.framework != "numpy"


def _check(client: Any, recipe: ImageRecipe, lock: Lock, log: Path,
           progress: Progress) -> dict[str, Any] | None:
    """Conformance (the image holds exactly the lock), then the accelerator stack."""
    check_conformance(client, recipe.tag, lock, recipe.module, log, imports=not has_stack(recipe))
    if not has_stack(recipe):
        return None
    with progress.step(f"Checking the {recipe.accelerator} stack of {recipe.tag} (no "
                       f"accelerator needed)"):
        stack = check_stack(client, recipe.tag, lock, recipe.framework, recipe.module,
                            recipe.accelerator, log)
    return stack.record()


def _tagged(client: Any, recipe: ImageRecipe) -> Any:
    """The image under the recipe's tag, or None."""
    try:
        return client.images.get(recipe.tag)
    except engine.sdk_errors().ImageNotFound:
        return None


def _recorded(client: Any, recipe: ImageRecipe) -> tuple[Any, dict[str, Any] | None] | None:
    """The existing image under the recipe's tag and its stack, if its checks were recorded
    here (the entry's ready predicate)."""
    image = _tagged(client, recipe)
    record = image_dir(recipe) / READY
    if image is None or not record.is_file():
        return None
    try:
        data = json.loads(record.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    # A record without a stack (from before stacks were checked) does not count for a
    # cuda/tpu image: it is checked now.
    if data.get("image_id") == image.id and (
            data.get("stack") is not None or not has_stack(recipe)):
        return image, data.get("stack")
    return None


def _checked_existing(client: Any, recipe: ImageRecipe, lock: Lock, progress: Progress
                      ) -> tuple[Any, dict[str, Any] | None, None] | None:
    """An image tagged but not checked here (another cache dir, or the tag was moved), with its
    stack, checked now; None when nothing is tagged."""
    image = _tagged(client, recipe)
    if image is None:
        return None
    image_dir(recipe).mkdir(parents=True, exist_ok=True)
    with progress.step(f"Checking existing image {recipe.tag} against {Path(lock.source).name}"):
        stack = _check(client, recipe, lock, image_dir(recipe) / "build.log", progress)
    return image, stack, None


def _build(client: Any, recipe: ImageRecipe, lock: Lock,
           progress: Progress) -> tuple[Any, dict[str, Any] | None, float]:
    """Build the recipe's image and check it: (image, its stack, seconds)."""
    started = time.perf_counter()
    directory = image_dir(recipe)
    directory.mkdir(parents=True, exist_ok=True)
    log = directory / "build.log"
    engine.ensure_base(client, recipe.base, progress)
    target = engine.target_of(client, recipe.base)
    house = wheelhouse_for(lock, target, progress)
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
        engine.remove_quietly(client, install_stage)  # the wheels' layer: not part of the image
    try:
        with progress.step(f"Checking {recipe.tag} against {Path(lock.source).name}"):
            stack = _check(client, recipe, lock, log, progress)
    except EnvError:
        engine.remove_quietly(client, recipe.tag)  # a non-conforming image is never reused
        raise
    return client.images.get(recipe.tag), stack, time.perf_counter() - started


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


class StageTracker:
    """Follows the classic builder's output lines to the last layer of the install stage.

    The classic builder keeps no stage names: a stage ends where the next FROM starts, and its
    last layer is the last ` ---> <id>` line before that.
    """

    def __init__(self) -> None:
        self.stage: str | None = None  # name of the stage being built
        self.last_layer: str | None = None
        self.install_layer: str | None = None

    def feed(self, line: str) -> None:
        """Take the builder's output one line at a time; once a FROM ends the install stage,
        `install_layer` holds that stage's last layer."""
        step = _STEP.match(line)
        if step and step.group(1).upper() == "FROM":
            if self.stage == "install":
                self.install_layer = self.last_layer
            words = step.group(2).split()
            self.stage = words[-1].lower() if len(words) >= 3 and \
                words[-2].lower() == "as" else None
        layer = _LAYER.match(line)
        if layer:
            self.last_layer = layer.group(1)


def _stream_build(client: Any, recipe: ImageRecipe, context: Path, log: Path,
                  progress: Progress) -> str | None:
    """Run the classic builder, streaming its lines to the log and the spinner.

    Returns the id of the install stage's last layer, to be removed after the build.
    """
    stages = StageTracker()
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
                    stages.feed(line)
        except engine.sdk_errors().APIError as exc:
            error = (exc.explanation or str(exc)).strip()
            f.write(f"ERROR: {error}\n")
    if error is not None:
        if "no space left on device" in error.lower():
            raise EnvError(f"disk full in the Docker engine's storage while building "
                           f"{recipe.tag} (`docker system prune` frees space; build log: {log})")
        first = error.splitlines()[0][:300] if error else "unknown error"
        raise EnvError(f"building {recipe.tag} failed: {first} (build log: {log})")
    return stages.install_layer


def _record(recipe: ImageRecipe, lock: Lock, image_id: str, seconds: float | None,
            stack: dict[str, Any] | None) -> str:
    """The build record (the image's ready marker): what was checked, of which image."""
    record = {"tag": recipe.tag, "image_id": image_id, "lock_hash": lock.lock_hash,
              "lock": lock.source, "base": recipe.base.ref, "base_digest": recipe.base.digest,
              "built_s": round(seconds, 1) if seconds is not None else None,
              "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
              "stack": stack}
    return json.dumps(record, indent=1)
