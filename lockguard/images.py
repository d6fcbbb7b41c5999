"""What goes into a lockguard container image, decided without a Docker engine.

    images/Dockerfile.in   one template for every framework x accelerator
    images/matrix.toml     the parameters that differ per framework and accelerator
    images/bases.toml      the base images, pinned by digest (`lockguard images pin` refreshes it)

This module renders the template (`recipe`), names the result by its content (`ImageRecipe.tag`:
lock hash + rendered Dockerfile + base digest + lockguard version), works out which wheels the
image's Python takes (`Target`, `expected_pins`) and downloads them on the host with their hashes
checked into a cached wheelhouse (`wheelhouse`). Talking to the engine (building, checking,
running) is lockguard/envs/docker.py's job; refreshing digests from a registry is `pin_bases`,
which is handed a resolver so that this module stays engine-free.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.markers import Marker
from packaging.utils import canonicalize_name, parse_wheel_filename

import lockguard
from lockguard.cache import cache_dir, file_lock
from lockguard.files import write_text
from lockguard.envs.base import EnvError
from lockguard.locks import Lock, Pin
from lockguard.progress import QUIET, Progress

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

FRAMEWORKS = ("torch", "jax", "tensorflow", "numpy")
ACCELERATORS = ("cpu", "cuda", "tpu")
# Where the image's venv lives; the harness runs with its interpreter.
VENV = "/opt/lockguard/venv"
VENV_PYTHON = f"{VENV}/bin/python"
# Bump when the way images are built changes in a way the template does not show.
RECIPE_FORMAT = 1
# Distributions a fresh venv brings with it: allowed in an image although the lock lacks them.
INSTALLER_DISTS = frozenset({"pip", "setuptools", "wheel"})
BASE_IMAGE_ENV = "LOCKGUARD_BASE_IMAGE"
IMAGES_DIR_ENV = "LOCKGUARD_IMAGES_DIR"
READY = "lockguard-ready.json"


def images_dir() -> Path:
    """The images/ directory: LOCKGUARD_IMAGES_DIR, or the one beside the lockguard package."""
    configured = os.environ.get(IMAGES_DIR_ENV)
    root = Path(configured) if configured else Path(lockguard.__file__).parent.parent / "images"
    if not (root / "Dockerfile.in").is_file():
        raise EnvError(f"{root}: no images/Dockerfile.in here (set {IMAGES_DIR_ENV} to the "
                       f"directory that holds lockguard's image templates)")
    return root


# ---------------------------------------------------------------------------------------------
# Bases and the pin file
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
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def bases_file() -> Path:
    return images_dir() / "bases.toml"


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
        if not _DIGEST.match(table["digest"]):
            raise EnvError(f"{path}: [{name}]: digest {table['digest']!r} is not sha256:<64 hex>")
        bases[name] = Base(name=name, **{k: v for k, v in table.items()})
    return bases


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
        if not _DIGEST.match(digest):
            raise EnvError(f"{base.image}: the registry answered {digest!r}, not a sha256 digest")
        changes[name] = (base.digest, digest)
        updated[name] = Base(**{**base.__dict__, "digest": digest})
    write_bases(updated, path)
    return changes


def base_for(accelerator: str) -> Base:
    """The pinned base of an accelerator."""
    _check_accelerator(accelerator)
    matrix = load_matrix()
    bases = load_bases()
    table = matrix["accelerator"][accelerator]["base"]
    if table not in bases:
        raise EnvError(f"{bases_file()}: no [{table}] base (images/matrix.toml "
                       f"[accelerator.{accelerator}] names it)")
    return bases[table]


# ---------------------------------------------------------------------------------------------
# The template
# ---------------------------------------------------------------------------------------------


def load_matrix(path: Path | None = None) -> dict:
    path = path or images_dir() / "matrix.toml"
    data = _read_toml(path)
    for section in ("accelerator", "framework"):
        if not isinstance(data.get(section), dict):
            raise EnvError(f"{path}: [{section}.*] tables are missing")
    return data


@dataclass(frozen=True)
class ImageRecipe:
    framework: str
    accelerator: str
    base: Base
    lock_hash: str
    dockerfile: str  # rendered
    module: str  # what the conformance check imports
    env: dict[str, str] = field(default_factory=dict)

    @property
    def content_hash(self) -> str:
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
        return f"lockguard/{self.framework}-{self.accelerator}"

    @property
    def tag(self) -> str:
        return f"{self.repository}:{self.content_hash[:20]}"

    @property
    def network(self) -> str | None:
        """The build's network: none, unless the base first needs Python installed."""
        return None if self.base.python_setup else "none"

    def labels(self, lock_source: str) -> dict[str, str]:
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


def recipe(framework: str, accelerator: str, lock: Lock, base: Base | None = None) -> ImageRecipe:
    """Render the template for one framework x accelerator on `base` (default: the pinned one)."""
    if framework not in FRAMEWORKS:
        raise EnvError(f"no image for framework {framework!r} (known: {', '.join(FRAMEWORKS)})")
    _check_accelerator(accelerator)
    root = images_dir()
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
    dockerfile = render(_read(root / "Dockerfile.in"), values, root / "Dockerfile.in")
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


# ---------------------------------------------------------------------------------------------
# The image's platform, and the lock's pins that apply to it
# ---------------------------------------------------------------------------------------------

# Runs with the base's python3 (stdlib only): what pip needs to pick wheels, and what
# environment markers see (packaging's default_environment, spelt out).
PLATFORM_INFO = r"""
import json, os, platform, sys
def _v(info):
    s = "%d.%d.%d" % (info.major, info.minor, info.micro)
    return s if info.releaselevel == "final" else s + info.releaselevel[0] + str(info.serial)
def platform_info():
    return {"python": "%d.%d" % sys.version_info[:2], "glibc": platform.libc_ver()[1],
        "arch": platform.machine(), "implementation": sys.implementation.name,
        "markers": {"implementation_name": sys.implementation.name,
            "implementation_version": _v(sys.implementation.version), "os_name": os.name,
            "platform_machine": platform.machine(), "platform_release": platform.release(),
            "platform_system": platform.system(), "platform_version": platform.version(),
            "python_full_version": platform.python_version(),
            "platform_python_implementation": platform.python_implementation(),
            "python_version": "%d.%d" % sys.version_info[:2], "sys_platform": sys.platform}}
"""
PROBE = PLATFORM_INFO + "print(json.dumps(platform_info()))\n"


@dataclass(frozen=True)
class Target:
    """The Python of an image, as pip download and environment markers need it."""

    python: str  # X.Y
    glibc: str
    arch: str
    implementation: str = "cpython"
    markers: dict[str, str] = field(default_factory=dict, hash=False, compare=False)

    @classmethod
    def from_probe(cls, data: dict) -> "Target":
        if data.get("implementation") != "cpython":
            raise EnvError(f"the base's Python is {data.get('implementation')}, not CPython")
        if not data.get("glibc"):
            raise EnvError("the base image has no glibc (musl bases are not supported)")
        return cls(python=data["python"], glibc=data["glibc"], arch=data["arch"],
                   markers=data.get("markers", {}))

    @classmethod
    def declared(cls, base: Base) -> "Target":
        """For bases without Python yet: what bases.toml says it will be."""
        markers = {"implementation_name": "cpython", "implementation_version": base.python,
                   "os_name": "posix", "platform_machine": base.arch, "platform_release": "",
                   "platform_system": "Linux", "platform_version": "",
                   "python_full_version": base.python + ".0",
                   "platform_python_implementation": "CPython", "python_version": base.python,
                   "sys_platform": "linux"}
        return cls(python=base.python, glibc=base.glibc, arch=base.arch, markers=markers)

    @property
    def abi(self) -> str:
        return "cp" + self.python.replace(".", "")

    def platforms(self) -> list[str]:
        """Every platform tag this glibc and arch accept, most specific first."""
        major, minor = (int(x) for x in self.glibc.split(".")[:2])
        tags = [f"manylinux_{major}_{m}_{self.arch}" for m in range(minor, 16, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{name}_{self.arch}" for m, name in legacy.items() if minor >= m]
        return tags + [f"linux_{self.arch}"]

    def describe(self) -> str:
        return f"{self.abi}, manylinux_{self.glibc.replace('.', '_')}_{self.arch}"

    @property
    def key(self) -> str:
        return f"{self.abi}-{self.glibc}-{self.arch}"


def expected_pins(lock: Lock, target: Target) -> list[Pin]:
    """The lock's pins whose markers hold on the target (all of them for most locks)."""
    env = target.markers
    return [p for p in lock.pins if p.marker is None or Marker(p.marker).evaluate(env)]


# ---------------------------------------------------------------------------------------------
# The wheelhouse: the lock's wheels for one target, downloaded on the host, hashes checked
# ---------------------------------------------------------------------------------------------


def wheelhouse_key(lock: Lock, target: Target) -> str:
    return hashlib.sha256(f"{lock.lock_hash}\0{target.key}".encode()).hexdigest()[:20]


def wheelhouse(lock: Lock, target: Target, progress: Progress = QUIET) -> Path:
    """A directory holding requirements.txt (pins with sha256) and wheels/ for this target.

    Cached under $LOCKGUARD_CACHE/wheelhouses/<lock hash + target>; built under a file lock and
    marked ready only when complete, like the venvs.
    """
    key = wheelhouse_key(lock, target)
    root = cache_dir() / "wheelhouses"
    path = root / key
    with file_lock(root / f"{key}.lock"):
        if not (path / READY).is_file():
            try:
                _download(path, lock, target, progress)
            except OSError as exc:
                shutil.rmtree(path, ignore_errors=True)
                if exc.errno == errno.ENOSPC:
                    raise EnvError(f"disk full while downloading the wheels of {lock.source} "
                                   f"into {root}: free space there or point LOCKGUARD_CACHE "
                                   f"elsewhere") from None
                raise
    return path


def _download(path: Path, lock: Lock, target: Target, progress: Progress) -> None:
    # Shared with the venv backend: streaming pip's lines to a log and the spinner, and
    # picking the line of pip's output that says why it failed.
    from lockguard.envs.venv import pip_reason, run_logged

    if path.exists():
        shutil.rmtree(path)  # an earlier download was interrupted
    pins = expected_pins(lock, target)
    tmp = Path(tempfile.mkdtemp(prefix=f"{path.name}.", dir=path.parent))
    try:
        wheels = tmp / "wheels"
        wheels.mkdir()
        request = tmp / "download.txt"
        request.write_text("".join(_requirement_line(p) for p in pins), encoding="utf-8")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--implementation", "cp", "--python-version", target.python,
               "--abi", target.abi, "--no-input", "--disable-pip-version-check",
               "--progress-bar", "off", "-d", str(wheels)]
        for platform_tag in target.platforms():
            cmd += ["--platform", platform_tag]
        if lock.has_hashes:
            cmd.append("--require-hashes")
        cmd += _index_args(lock) + ["-r", str(request)]
        with progress.step(f"Downloading {len(pins)} wheel(s) of {Path(lock.source).name} "
                           f"for {target.describe()}") as step:
            code, tail = run_logged(cmd, tmp / "download.log", step)
        if code != 0:
            text = "\n".join(tail)
            if "No space left on device" in text:
                raise OSError(errno.ENOSPC, "No space left on device")
            reason = pip_reason(tail) or f"exit code {code}"
            if "No matching distribution" in text or "Could not find a version" in text:
                raise EnvError(f"{lock.source}: no wheel for the image's platform "
                               f"({target.describe()}): {reason}")
            raise EnvError(f"{lock.source}: pip could not download the lock's wheels for "
                           f"{target.describe()}: {reason} (log: {path}.failed.log)")
        files = _match_wheels(wheels, pins, lock)
        # What the image installs: each pin with the hash of the very file downloaded (the
        # lock's own hashes were checked by pip above; a hashless lock gets them here).
        lines = [f"{p.display_name}=={p.version} --hash=sha256:{_sha256(files[p.name])}\n"
                 for p in pins]
        (tmp / "requirements.txt").write_text("".join(lines), encoding="utf-8")
        info = {"lock_hash": lock.lock_hash, "lock": lock.source, "target": target.key,
                "wheels": sorted(f.name for f in files.values()),
                "bytes": sum(f.stat().st_size for f in files.values()),
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        (tmp / READY).write_text(json.dumps(info, indent=1), encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        log = tmp / "download.log"
        if log.is_file():
            shutil.copyfile(log, f"{path}.failed.log")
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _requirement_line(pin: Pin) -> str:
    # Extras add nothing with --no-deps (their packages are pins of their own in a lock).
    hashes = "".join(f" --hash={h}" for h in pin.hashes)
    return f"{pin.display_name}=={pin.version}{hashes}\n"


def _index_args(lock: Lock) -> list[str]:
    opts = lock.options
    args: list[str] = []
    if opts.index_url is not None:
        args += ["--index-url", opts.index_url]
    for url in opts.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in opts.find_links:
        args += ["--find-links", link]
    if "--no-index" in opts.other_options:
        args.append("--no-index")
    return args


def _match_wheels(wheels: Path, pins: list[Pin], lock: Lock) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for f in sorted(wheels.iterdir()):
        if f.suffix != ".whl":
            raise EnvError(f"{lock.source}: pip download produced {f.name}, not a wheel")
        name, _, _, _ = parse_wheel_filename(f.name)
        found[canonicalize_name(name)] = f
    missing = [p.requirement for p in pins if p.name not in found]
    if missing:
        raise EnvError(f"{lock.source}: pip downloaded no wheel for {', '.join(missing)}")
    return found


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# ---------------------------------------------------------------------------------------------
# Conformance: the installed packages against the lock
# ---------------------------------------------------------------------------------------------


def conformance_problems(expected: list[Pin], installed: dict[str, str]) -> list[str]:
    """Differences between the pins and {canonical name: version} installed; [] if they agree.

    Versions compare as versions (2.0 == 2.0.0); an installed package the lock does not pin is
    allowed only if it is the installer's own (pip, setuptools, wheel).
    """
    from packaging.version import InvalidVersion, Version

    problems = []
    wanted = {p.name: p for p in expected}
    for name, pin in sorted(wanted.items()):
        have = installed.get(name)
        if have is None:
            problems.append(f"missing {pin.requirement}")
            continue
        try:
            same = Version(have) == pin.parsed_version
        except InvalidVersion:
            same = have == pin.version
        if not same:
            problems.append(f"{pin.display_name}: lock {pin.version}, image {have}")
    for name, version in sorted(installed.items()):
        if name not in wanted and name not in INSTALLER_DISTS:
            problems.append(f"extra {name}=={version}")
    return problems


# ---------------------------------------------------------------------------------------------


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
        return tomllib.loads(_read(path))
    except tomllib.TOMLDecodeError as exc:
        raise EnvError(f"{path}: invalid TOML: {exc}") from None
