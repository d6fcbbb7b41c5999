"""The docker backend: one image per framework x accelerator x lock, built and run on an engine.

    DockerBackend().prepare(lock, framework, accelerator, progress) -> DockerEnv
                                                   (builds the image if needed; a check's)
    build_image(lock, framework, accelerator) -> BuiltImage  (`lockguard build`)
    pin_images() -> {base: (old, new)}                        (`lockguard images pin`)

One module per concern, each importing only those above it:

    recipe.py        templates/ (bases.toml, matrix.toml, Dockerfile.in), Base, ImageRecipe: the
                     rendered Dockerfile, its content hash, tag and labels; no engine
    wheelhouse.py    Target (the image's Python and platform), the lock's wheels for it, downloaded
                     on the host with hashes checked
    engine.py        connect, SDK errors -> EnvError, the base image, probes in throwaway containers
    conformance.py   the image holds exactly the lock, and the framework imports
    stack.py         cuda/tpu images: the framework's CUDA, cuDNN, NCCL (or libtpu) are the
                     lock's and every library of the stack loads, proven without a GPU
    build.py         build_image: build context, the classic builder's stream, install-stage
                     cleanup, the build record
    accelerators.py  the driver's CUDA against the image's, TPU device nodes, whether a run
                     asks for them
    backend.py       DockerEnv (`docker run` of the harness) and DockerBackend (the
                     envs.base.ImageBackend that lockguard.envs.backend_for hands the flows:
                     a check's environments, and `lockguard build`'s and `images pin`'s images)
    pin.py           `lockguard images pin`
"""

from lockguard.envs.docker.recipe import (
    ACCELERATORS, BASE_IMAGE_ENV, FRAMEWORKS, IMAGES_DIR_ENV, Base, ImageRecipe, base_for,
    recipe_for, templates_dir,
)
from lockguard.envs.docker.wheelhouse import Target, wheelhouse_for
from lockguard.envs.docker.engine import connect, resolve_base, target_of
from lockguard.envs.docker.stack import AcceleratorStack, stack_line
from lockguard.envs.docker.build import BuiltImage, build_image
from lockguard.envs.docker.backend import DockerBackend, DockerEnv, image_framework
from lockguard.envs.docker.pin import pin_images

__all__ = [
    "ACCELERATORS", "BASE_IMAGE_ENV", "FRAMEWORKS", "IMAGES_DIR_ENV", "AcceleratorStack",
    "Base", "BuiltImage",
    "DockerBackend", "DockerEnv", "ImageRecipe", "Target", "base_for", "build_image", "connect", "image_framework",
    "pin_images", "recipe_for", "resolve_base", "stack_line", "target_of",
    "templates_dir",
    "wheelhouse_for",
]
