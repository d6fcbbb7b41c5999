"""What goes into an image, decided without a Docker engine: the templates, the pinned bases and
the rendered recipe, named by its content.

    templates/Dockerfile.in   one template for every framework x accelerator
    templates/matrix.toml     the parameters that differ per framework and accelerator
    templates/bases.toml      the base images, pinned by digest (`lockguard images pin`)

The templates are package data of this package, found with importlib.resources; in the
repository they are images/, which templates/ links to. LOCKGUARD_IMAGES_DIR replaces them with
a directory of one's own. `ImageRecipe.tag` names an image by lock hash + rendered Dockerfile +
base digest + lockguard version, so an existing tag can be reused without a build.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import lockguard
from lockguard import envvars, toml
from lockguard.envs.base import EnvError
from lockguard.locks.model import Lock
from lockguard.names import FRAMEWORKS


ACCELERATORS = ("cpu", "cuda", "tpu")
# Where the image's venv lives; the harness runs with its interpreter.
VENV = "/opt/lockguard/venv"
VENV_PYTHON = f"{VENV}/bin/python"
# Bump when the way images are built changes in a way the template does not show.
RECIPE_FORMAT = 1
BASE_IMAGE_ENV = "LOCKGUARD_BASE_IMAGE"
IMAGES_DIR_ENV = "LOCKGUARD_IMAGES_DIR"
TEMPLATE = "Dockerfile.in"


def templates_dir() -> Path:
    """The image templates: LOCKGUARD_IMAGES_DIR when set, else this package's templates/."""
    configured = envvars.value(IMAGES_DIR_ENV)
    if configured:
        root = Path(configured)
        if not (root / TEMPLATE).is_file():
            raise EnvError(f"{root}: no {TEMPLATE} here (set {IMAGES_DIR_ENV} to the directory "
                           f"that holds lockguard's image templates)")
        return root
    packaged = resources.files(__package__) / "templates"
    if not (isinstance(packaged, Path) and (packaged / TEMPLATE).is_file()):
        raise EnvError(f"{packaged}: lockguard's image templates were not installed with it (no "
                       f"{TEMPLATE}): reinstall lockguard, or set {IMAGES_DIR_ENV} to a "
                       f"directory that holds them")
    # Resolved: in a checkout templates/ links to images/, the files one edits (and
    # `lockguard images pin` rewrites).
    return packaged.resolve()


# ---------------------------------------------------------------------------------------------
# Bases
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Base:
    """One base image: where it comes from and what its Python is."""

    name: str  # table in bases.toml ("cpu", "cuda", "tpu"), or "override"
    image: str  # repository:tag, or a local image name (override)
    digest: str  # sha256:... (registry digest; the image id of a local override)
    python: str  # X.Y
    glibc: str
    arch: str = "x86_64"
    python_setup: str = ""
    cuda: str | None = None
    cudnn: str | None = None
    local: bool = False  # a local image given by LOCKGUARD_BASE_IMAGE, not a registry pin

    @property
    def ref(self) -> str:
        """What FROM names: the pinned digest, or the local image as given."""
        if self.local:
            return self.image
        return f"{_without_tag(self.image)}@{self.digest}"


def _without_tag(image: str) -> str:
    """`docker.io/library/python:3.11-slim` -> `docker.io/library/python` (keeps a :port)."""
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    return name[:colon] if colon > slash else name


_BASE_KEYS = {"image", "digest", "python", "glibc", "arch", "python_setup", "cuda", "cudnn"}
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def bases_file() -> Path:
    """templates/bases.toml in the image templates folder (LOCKGUARD_IMAGES_DIR when set): the
    base images pinned by digest, which `lockguard images pin` rewrites."""
    return templates_dir() / "bases.toml"


def load_bases(path: Path | None = None) -> dict[str, Base]:
    """Read the pin file; one clear line naming the file and the table when it is wrong."""
    path = path or bases_file()
    data = _read_toml(path)
    bases = {}
    for name, table in data.items():
        if not isinstance(table, dict):
            raise EnvError(f"{path}: [{name}] must be a table")
        unknown = set(table) - _BASE_KEYS
        if unknown:
            raise EnvError(f"{path}: [{name}]: unknown key {sorted(unknown)[0]!r}")
        for key in ("image", "digest", "python", "glibc"):
            if not isinstance(table.get(key), str) or not table[key]:
                raise EnvError(f"{path}: [{name}]: {key!r} is missing")
        if not DIGEST.match(table["digest"]):
            raise EnvError(f"{path}: [{name}]: digest {table['digest']!r} is not sha256:<64 hex>")
        bases[name] = Base(name=name, **{k: v for k, v in table.items()})
    return bases


def base_for(accelerator: str) -> Base:
    """The pinned base of an accelerator."""
    _check_accelerator(accelerator)
    matrix = load_matrix()
    bases = load_bases()
    table = matrix["accelerator"][accelerator]["base"]
    if table not in bases:
        raise EnvError(f"{bases_file()}: no [{table}] base (matrix.toml "
                       f"[accelerator.{accelerator}] names it)")
    return bases[table]


# ---------------------------------------------------------------------------------------------
# The template
# ---------------------------------------------------------------------------------------------


def load_matrix(path: Path | None = None) -> dict:
    """matrix.toml: [accelerator.*] and [framework.*] tables, checked to be there."""
    path = path or templates_dir() / "matrix.toml"
    data = _read_toml(path)
    for section in ("accelerator", "framework"):
        if not isinstance(data.get(section), dict):
            raise EnvError(f"{path}: [{section}.*] tables are missing")
    return data


@dataclass(frozen=True)
class ImageRecipe:
    """Everything that decides an image's bytes, with the Dockerfile already rendered: two
    recipes with the same content_hash build the same image, so its tag can be reused without a
    build."""

    framework: str
    accelerator: str
    base: Base
    lock_hash: str
    dockerfile: str  # rendered
    module: str  # what the conformance check imports
    env: dict[str, str] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
        """sha256 (hex) of the lock hash, framework, accelerator, rendered Dockerfile, base
        digest and lockguard version: what the tag and the image's cache folder are named by."""
        # framework/accelerator/module too: numpy on cpu and on tpu may render the same text.
        document = {"format": RECIPE_FORMAT, "lock_hash": self.lock_hash,
                    "framework": self.framework, "accelerator": self.accelerator,
                    "module": self.module,
                    "dockerfile": self.dockerfile, "base_digest": self.base.digest,
                    "lockguard": lockguard.__version__}
        text = json.dumps(document, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()

    @property
    def repository(self) -> str:
        """The local repository name, `lockguard/<framework>-<accelerator>` (no registry: --push
        puts it below one)."""
        return f"lockguard/{self.framework}-{self.accelerator}"

    @property
    def tag(self) -> str:
        """`lockguard/<framework>-<accelerator>:<first 20 hex of content_hash>`: the
        content-addressed tag an existing image is found by."""
        return f"{self.repository}:{self.content_hash[:20]}"

    @property
    def network(self) -> str | None:
        """The build's network: none, unless the base first needs Python installed."""
        return None if self.base.python_setup else "none"

    def labels(self, lock_source: str) -> dict[str, str]:
        """The OCI and lockguard.* labels the build puts on the image (lock hash, base digest,
        versions, CUDA), so that `docker inspect` says what it was built from; `lock_source` is
        the lock file's path, of which only the name is kept."""
        base = self.base
        labels = {
            "org.opencontainers.image.title": self.repository,
            "org.opencontainers.image.description":
                f"lockguard {self.framework} on {self.accelerator}, pinned to "
                f"{Path(lock_source).name}",
            "org.opencontainers.image.version": self.content_hash[:20],
            "org.opencontainers.image.created":
                time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "org.opencontainers.image.vendor": "lockguard",
            "org.opencontainers.image.base.name": base.image,
            "org.opencontainers.image.base.digest": base.digest,
            "lockguard.lock-hash": self.lock_hash,
            "lockguard.version": lockguard.__version__,
            "lockguard.base-digest": base.digest,
            "lockguard.framework": self.framework,
            "lockguard.accelerator": self.accelerator,
            "lockguard.python": base.python,
            "lockguard.content-hash": self.content_hash,
        }
        if base.cuda:
            labels["lockguard.cuda"] = base.cuda
        if base.cudnn:
            labels["lockguard.cudnn"] = base.cudnn
        return labels


def recipe_for(framework: str, accelerator: str, lock: Lock,
               base: Base | None = None) -> ImageRecipe:
    """Render the template for one framework x accelerator on `base` (default: the pinned one)."""
    if framework not in FRAMEWORKS:
        raise EnvError(f"no image for framework {framework!r} (known: {', '.join(FRAMEWORKS)})")
    _check_accelerator(accelerator)
    root = templates_dir()
    matrix = load_matrix(root / "matrix.toml")
    base = base or base_for(accelerator)
    fw = matrix["framework"].get(framework)
    if fw is None:
        raise EnvError(f"{root / 'matrix.toml'}: no [framework.{framework}] table")
    env = {**matrix["accelerator"][accelerator].get("env", {}),
           **fw.get(accelerator, {}).get("env", {})}
    setup = ""
    if base.python_setup:
        setup = matrix.get("python_setup", {}).get(base.python_setup)
        if setup is None:
            raise EnvError(f"{root / 'matrix.toml'}: no [python_setup] {base.python_setup!r} "
                           f"(asked for by base [{base.name}])")
    env_text = "".join(f" \\\n    {k}={json.dumps(str(v))}" for k, v in sorted(env.items()))
    values = {"base": base.ref, "python_setup": setup, "python_bin": "python3", "venv": VENV,
              "env": env_text}
    dockerfile = render(_read(root / TEMPLATE), values, root / TEMPLATE)
    return ImageRecipe(framework=framework, accelerator=accelerator, base=base,
                       lock_hash=lock.lock_hash, dockerfile=dockerfile,
                       module=fw.get("module", framework), env=env)


_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")


def render(template: str, values: dict[str, str], source: Path | str = "template") -> str:
    """Fill {{name}} placeholders; a placeholder without a value is an error, not an empty hole."""
    def fill(match: re.Match) -> str:
        name = match.group(1)
        if name not in values:
            raise EnvError(f"{source}: unknown placeholder {{{{{name}}}}}")
        return values[name]

    return _PLACEHOLDER.sub(fill, template)


def _check_accelerator(accelerator: str) -> None:
    if accelerator not in ACCELERATORS:
        raise EnvError(f"no image for accelerator {accelerator!r} "
                       f"(known: {', '.join(ACCELERATORS)})")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise EnvError(f"{path}: cannot read: {exc.strerror or exc}") from None


def _read_toml(path: Path) -> dict:
    try:
        return toml.loads(_read(path))
    except toml.TOMLDecodeError as exc:
        raise EnvError(f"{path}: invalid TOML: {exc}") from None
