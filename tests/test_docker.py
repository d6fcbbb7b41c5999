"""The docker backend: templates, pins, tags and conformance (no engine needed), then real
builds and runs on a real Docker engine (marked `docker`).

The engine tests need dockerd; the session fixture (`engine`, tests/conftest.py) starts it with
.ci/docker-setup.sh when it is not answering (root only), and makes the base image the templates
are pointed at (through LOCKGUARD_BASE_IMAGE, never by editing images/) with debootstrap: Debian
bookworm, python3.11, imported as lockguard-test/python:3.11-bookworm and reused while it exists. There is no registry
here, so nothing is pulled. Without an engine they skip, saying why — except under CI, where an
engine is part of the contract and its absence fails the run.

Images, wheelhouses and venvs live in the normal cache (LOCKGUARD_CACHE or ~/.cache/lockguard),
so a second run reuses them; the numpy image is removed and rebuilt once per session so that a
real build is always tested.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import lockguard.envs.docker as dk
from lockguard.envs.base import EnvError, RunRequest
from lockguard.envvars import EnvVarError
from lockguard.envs.docker import accelerators, wheelhouse
from lockguard.envs.docker.backend import HARNESS_MOUNT, OUT_MOUNT, USER_MOUNT
from lockguard.envs.docker.build import StageTracker
from lockguard.envs.docker.conformance import (
    INSTALLER_DISTS, check_conformance, conformance_problems, installed_in,
)
from lockguard.envs.docker.engine import no_engine_message
from lockguard.envs.docker.pin import pin_bases
from lockguard.envs.docker.recipe import VENV_PYTHON, load_bases, render
from lockguard.envs.harness import HARNESS_DIR
from lockguard.locks.parser import parse_lock, parse_lock_text
from lockguard.results import Status
from lockguard.scenarios import Scenario, bundled

from conftest import TEST_BASE, prepared_image, prepared_venv

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
NUMPY_LOCK = DATA / "docker-numpy.lock"
TORCH_LOCK = REPO / "tests" / "data" / "torch-2.13.0.txt"
USER_SCRIPT = DATA / "docker_numpy_scenario.py"
PROBE_SCRIPT = DATA / "docker_probe_scenario.py"


def fake_base(**changes) -> dk.Base:
    fields = dict(name="cpu", image="docker.io/library/python:3.11-slim-bookworm",
                  digest="sha256:" + "a" * 64, python="3.11", glibc="2.36")
    fields.update(changes)
    return dk.Base(**fields)


def numpy_lock():
    return parse_lock(NUMPY_LOCK)


# ---------------------------------------------------------------------------------------------
# Templates, pins and tags: no engine
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("framework", dk.FRAMEWORKS)
@pytest.mark.parametrize("accelerator", dk.ACCELERATORS)
def test_every_framework_and_accelerator_renders_from_one_template(framework, accelerator):
    recipe = dk.recipe_for(framework, accelerator, numpy_lock())
    text = recipe.dockerfile
    assert "{{" not in text and "}}" not in text
    base = dk.base_for(accelerator)
    assert f"FROM {base.ref} AS base" in text
    assert "@sha256:" in base.ref  # pinned bases are always used by digest
    assert "--no-index" in text and "--require-hashes" in text
    assert recipe.tag.startswith(f"lockguard/{framework}-{accelerator}:")
    assert len(recipe.tag.rsplit(":", 1)[1]) == 20
    # every accelerator builds on the plain Python base, with no network: a cuda image's CUDA
    # is the lock's nvidia-* wheels (tests/test_docker_accelerators.py)
    assert "apt-get" not in text and recipe.network == "none" and recipe.base.cuda is None
    if accelerator == "cuda":
        assert "NVIDIA_VISIBLE_DEVICES" in text
    if (framework, accelerator) == ("torch", "tpu"):
        assert 'PJRT_DEVICE="TPU"' in text
    assert len(list((REPO / "images").glob("Dockerfile*"))) == 1  # one template, not nine


def test_pin_file_pins_every_base_by_digest():
    bases = load_bases()
    assert set(bases) >= {"cpu", "cuda", "tpu", "nvidia-cuda"}
    for base in bases.values():
        assert base.digest.startswith("sha256:") and len(base.digest) == 71
        assert base.ref.endswith(base.digest) and ":" not in base.ref.split("/")[-1].split("@")[0]
    # the system-CUDA base stays available, never the default
    assert "cudnn" in bases["nvidia-cuda"].image and bases["nvidia-cuda"].cuda
    assert all("slim" in bases[name].image for name in ("cpu", "cuda", "tpu"))


def test_tag_is_content_addressed():
    lock = numpy_lock()
    a = dk.recipe_for("numpy", "cpu", lock, fake_base())
    assert dk.recipe_for("numpy", "cpu", lock, fake_base()).tag == a.tag
    # lock, base digest, framework, accelerator and lockguard's version each move the tag
    other_lock = parse_lock_text("numpy==2.3.4\n", "other.lock")
    assert dk.recipe_for("numpy", "cpu", other_lock, fake_base()).tag != a.tag
    assert dk.recipe_for("numpy", "cpu", lock, fake_base(digest="sha256:" + "b" * 64)).tag != a.tag
    assert dk.recipe_for("numpy", "tpu", lock, fake_base()).content_hash != a.content_hash
    labels = a.labels(str(NUMPY_LOCK))
    assert labels["lockguard.lock-hash"] == lock.lock_hash
    assert labels["lockguard.base-digest"] == "sha256:" + "a" * 64
    assert labels["org.opencontainers.image.base.digest"] == "sha256:" + "a" * 64
    assert {"org.opencontainers.image.title", "org.opencontainers.image.created",
            "lockguard.version"} <= set(labels)


def test_template_placeholder_without_value_is_an_error():
    with pytest.raises(EnvError, match="unknown placeholder"):
        render("FROM {{base}}\nRUN {{nope}}\n", {"base": "x"})


def test_images_dir_can_be_pointed_elsewhere(tmp_path, monkeypatch):
    for name in ("Dockerfile.in", "matrix.toml", "bases.toml"):
        shutil.copy(REPO / "images" / name, tmp_path / name)
    (tmp_path / "Dockerfile.in").write_text(
        (tmp_path / "Dockerfile.in").read_text() + "# custom\n")
    monkeypatch.setenv(dk.IMAGES_DIR_ENV, str(tmp_path))
    custom = dk.recipe_for("numpy", "cpu", numpy_lock())
    monkeypatch.delenv(dk.IMAGES_DIR_ENV)
    assert custom.dockerfile.endswith("# custom\n")
    assert custom.tag != dk.recipe_for("numpy", "cpu", numpy_lock()).tag
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(dk.IMAGES_DIR_ENV, str(tmp_path / "empty"))
    with pytest.raises(EnvError, match="Dockerfile.in"):
        dk.templates_dir()
    monkeypatch.setenv(dk.IMAGES_DIR_ENV, str(tmp_path / "nowhere"))  # lockguard/envvars.py
    with pytest.raises(EnvVarError, match="LOCKGUARD_IMAGES_DIR=.*must name a directory"):
        dk.templates_dir()


def test_pin_rewrites_digests_and_keeps_the_file(tmp_path):
    pins = tmp_path / "bases.toml"
    shutil.copy(REPO / "images" / "bases.toml", pins)
    before = pins.read_text()
    new = "sha256:" + "c" * 64
    changes = pin_bases(lambda image: new, pins)
    assert set(changes) == {"cpu", "cuda", "tpu", "nvidia-cuda"}
    assert all(c[1] == new for c in changes.values())
    after = pins.read_text()
    assert all(b.digest == new for b in load_bases(pins).values())
    # comments and every other key kept: only the digest lines differ
    changed = [(x, y) for x, y in zip(before.splitlines(), after.splitlines()) if x != y]
    assert len(before.splitlines()) == len(after.splitlines())
    assert changed and all(x.startswith("digest =") for x, _ in changed)


def test_pin_without_registry_changes_nothing(tmp_path):
    pins = tmp_path / "bases.toml"
    shutil.copy(REPO / "images" / "bases.toml", pins)
    before = pins.read_text()

    def unreachable(image):
        raise EnvError(f"cannot reach the registry for {image} (no such host): the pins in "
                       f"{pins} are unchanged")

    with pytest.raises(EnvError, match="cannot reach the registry"):
        pin_bases(unreachable, pins)
    assert pins.read_text() == before


def test_bad_pin_file_is_one_clear_line(tmp_path):
    pins = tmp_path / "bases.toml"
    pins.write_text('[cpu]\nimage = "python:3.11"\ndigest = "latest"\npython = "3.11"\n'
                    'glibc = "2.36"\n')
    with pytest.raises(EnvError, match=r"\[cpu\]: digest 'latest' is not sha256"):
        load_bases(pins)


def test_target_platforms_and_markers():
    target = dk.Target.declared(fake_base(python="3.12", glibc="2.39"))
    assert target.abi == "cp312"
    tags = target.platforms()
    assert tags[0] == "manylinux_2_39_x86_64" and "manylinux_2_17_x86_64" in tags
    assert "manylinux2014_x86_64" in tags and "manylinux_2_16_x86_64" not in tags
    lock = parse_lock_text('numpy==2.3.5\ntomli==2.0.1 ; python_version < "3.11"\n', "m.lock")
    assert [p.name for p in wheelhouse.expected_pins(lock, target)] == ["numpy"]
    old = dk.Target.declared(fake_base(python="3.10"))
    assert [p.name for p in wheelhouse.expected_pins(lock, old)] == ["numpy", "tomli"]


def test_conformance_lists_every_difference():
    lock = parse_lock_text("numpy==2.3.5\nsix==1.17.0\nFoo-Bar==1.0\n", "x.lock")
    pins = list(lock.pins)
    assert conformance_problems(
        pins, {"numpy": "2.3.5", "six": "1.17.0", "foo-bar": "1.0.0", "pip": "24.0",
               "setuptools": "65.5.0"}) == []
    problems = conformance_problems(pins, {"numpy": "2.3.4", "foo-bar": "1.0",
                                                  "evil": "9", "pip": "24.0"})
    assert problems == ["numpy: lock 2.3.5, image 2.3.4", "missing six==1.17.0",
                        "extra evil==9"]


def test_driver_cuda_check():
    smi = "| NVIDIA-SMI 535.104.05   Driver Version: 535.104.05   CUDA Version: 12.2     |"
    assert accelerators.driver_cuda(smi) == (12, 2)
    assert accelerators.driver_cuda("no gpu here") is None
    cu128 = parse_lock_text("torch==2.14.1+cu128\n", "t.lock")
    # on the optional system-CUDA base, the base's CUDA counts in full
    recipe = dk.recipe_for("torch", "cuda", cu128, load_bases()["nvidia-cuda"])
    need, source = accelerators.required_cuda(recipe, cu128)
    assert need == (12, int(recipe.base.cuda.split(".")[1])) and "base image CUDA" in source
    with pytest.raises(EnvError, match=r"driver supports CUDA 12\.2, but .* needs CUDA 12\.6"):
        accelerators.check_driver((12, 2), (12, 6), "base image CUDA 12.6", recipe.tag)
    accelerators.check_driver((12, 8), (12, 6), "base image CUDA 12.6", recipe.tag)
    cu13 = parse_lock_text("torch==2.14.1+cu130\n", "t.lock")
    need, source = accelerators.required_cuda(recipe, cu13)
    assert need == (13, 0) and "torch==2.14.1+cu130" in source
    with pytest.raises(EnvError, match="upgrade the driver"):
        accelerators.check_driver((12, 9), need, source, recipe.tag)
    # the family rules' reading of a pin's CUDA major: jax's plugins and nvidia wheels count too
    jax13 = parse_lock_text("jax==0.10.2\njax-cuda13-plugin==0.10.2\n", "j.lock")
    need, source = accelerators.required_cuda(dk.recipe_for("jax", "cuda", jax13), jax13)
    assert need == (13, 0) and "jax-cuda13-plugin==0.10.2" in source
    # on the default base, only the lock's wheels need a CUDA: torch 2.14.1's nvidia-* are 13's
    lock = parse_lock(DATA / "torch-2.14.1-cuda.txt")
    need, source = accelerators.required_cuda(dk.recipe_for("torch", "cuda", lock), lock)
    assert need == (13, 0) and source.endswith("(CUDA 13)")


def _env_for(accelerator: str) -> dk.DockerEnv:
    recipe = dk.recipe_for("numpy", accelerator, numpy_lock(), fake_base())
    built = dk.BuiltImage(tag=recipe.tag, id="sha256:" + "d" * 64, recipe=recipe, reused=True,
                          seconds=0.0, size=0, log=Path("/dev/null"))
    return dk.DockerEnv(built, recipe.lock_hash, accelerator, "docker")


def test_run_command_is_isolated(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_TEST_SECRET", "s3cret")
    monkeypatch.setenv("XLA_FLAGS", "--xla_cpu_enable_fast_math=false")
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    env = _env_for("cpu")
    scenario = Scenario(id="user.np", framework="numpy", description="", steps=3,
                        script=USER_SCRIPT)
    request = scenario.request(steps=3, seed=0, device="cpu", threads=1, timeout=9)
    argv = env.docker_argv(request, tmp_path, "lockguard-x")
    text = " ".join(argv)
    assert argv[:2] == ["docker", "run"] and "--rm" in argv
    assert argv[argv.index("--network") + 1] == "none" and "--read-only" in argv
    assert f"{HARNESS_DIR.resolve()}:{HARNESS_MOUNT}:ro" in argv
    assert f"{tmp_path.resolve()}:{OUT_MOUNT}:rw" in argv
    assert f"{USER_SCRIPT.parent}:{USER_MOUNT}:ro" in argv
    assert f"{USER_MOUNT}/{USER_SCRIPT.name}" in argv
    assert f"{OUT_MOUNT}/user.np.json" in argv
    assert "s3cret" not in text and "LOCKGUARD_TEST_SECRET" not in text
    assert "XLA_FLAGS=--xla_cpu_enable_fast_math=false" in argv  # numerics variables do travel
    assert "PYTHONHASHSEED=0" in argv
    assert "--gpus" not in argv and env.device_args() == []
    assert argv[argv.index(env.tag) + 1] == VENV_PYTHON


def test_an_entry_runs_from_its_project_mounted_whole(tmp_path, monkeypatch):
    """An entry ("pkg.train:make") imports from its project's folder: that folder is the one
    mounted (read-only), and the harness is told the mount as its --root."""
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "project"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text("def make(seed): ...\n")
    scenario = Scenario(id="ours", framework="numpy", description="", steps=3,
                        script=project / "pkg" / "train.py", entry="pkg.train:make",
                        root=project)
    request = scenario.request(steps=3, seed=0, device="cpu", threads=1, timeout=9)
    argv = _env_for("cpu").docker_argv(request, tmp_path, "lockguard-x")
    assert f"{project.resolve()}:{USER_MOUNT}:ro" in argv
    harness = argv[argv.index("--entry"):]
    assert harness[:4] == ["--entry", "pkg.train:make", "--root", USER_MOUNT]
    assert "--script" not in argv


def test_run_command_asks_for_accelerators(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert _env_for("cuda").device_args() == ["--gpus", "all"]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,2")
    assert _env_for("cuda").device_args() == ["--gpus", '"device=0,2"']
    monkeypatch.setattr(accelerators, "tpu_devices", lambda: ["/dev/accel0", "/dev/vfio/0"])
    assert _env_for("tpu").device_args() == ["--device", "/dev/accel0", "--device",
                                             "/dev/vfio/0", "--ulimit", "memlock=-1:-1"]


def test_no_engine_says_where_and_how(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/docker.sock")
    with pytest.raises(EnvError) as missing:
        dk.connect()
    message = str(missing.value)
    assert f"DOCKER_HOST=unix://{tmp_path}/docker.sock" in message
    assert "no socket there" in message and "dockerd" in message and "\n" not in message
    # a socket file nobody listens on: a dead daemon
    dead = socket.socket(socket.AF_UNIX)
    dead.bind(str(tmp_path / "dead.sock"))
    dead.close()
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/dead.sock")
    with pytest.raises(EnvError, match="connection refused. Start one"):
        prepared_image(numpy_lock(), "numpy")
    monkeypatch.delenv("DOCKER_HOST")
    assert "(DOCKER_HOST is not set)" in no_engine_message(FileNotFoundError(2, "x"))


def test_without_the_docker_extra_the_backend_says_how_to_install_it(tmp_path):
    """The SDK is the `docker` extra: a lean install runs everything else, and the docker
    backend, asked for, is one line and exit 2 (here the SDK is hidden from the CLI's
    interpreter; test_packaging installs the wheel without it)."""
    from conftest import make_project

    project = make_project(tmp_path / "p", 'lock = "numpy.lock"\nenv = "docker"',
                           locks={"numpy.lock": NUMPY_LOCK})

    def without_sdk(*args: str) -> subprocess.CompletedProcess[str]:
        hide = "import sys; sys.modules['docker'] = None; from lockguard.cli import main; main()"
        return subprocess.run([sys.executable, "-c", hide, *args], cwd=project,
                              capture_output=True, text=True, timeout=300,
                              env={**os.environ, "LOCKGUARD_CACHE": str(tmp_path / "cache")})

    for args in (["check", "--allow-new"], ["build", "--framework", "numpy"],
                 ["images", "pin"]):
        proc = without_sdk(*args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert proc.stderr == ("lockguard: error: the docker backend needs lockguard[docker]: "
                               "pip install 'lockguard[docker]'\n"), args
    proc = without_sdk("plan")  # builds nothing: no SDK needed
    assert proc.returncode == 0 and "docker image numpy/cpu" in proc.stdout, proc.stderr


def test_disk_full_while_downloading_is_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path))

    def full(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(wheelhouse, "_download", full)
    target = dk.Target.declared(fake_base())
    with pytest.raises(EnvError, match=r"disk full while downloading the wheels .*LOCKGUARD_CACHE"):
        dk.wheelhouse_for(numpy_lock(), target)


def _fake_wheel(directory: Path, name: str) -> None:
    import zipfile

    info = "tinypkg-1.0.dist-info"
    with zipfile.ZipFile(directory / name, "w") as z:
        z.writestr("tinypkg/__init__.py", "")
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: tinypkg\nVersion: 1.0\n")
        z.writestr(f"{info}/WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: "
                                    "true\nTag: py3-none-any\n")
        z.writestr(f"{info}/RECORD", "")


def test_wheel_missing_for_the_image_platform(tmp_path, monkeypatch):
    """pip download's reason, with the image's platform: here the only wheel is for macOS."""
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    links = tmp_path / "links"
    links.mkdir()
    _fake_wheel(links, "tinypkg-1.0-cp311-cp311-macosx_11_0_arm64.whl")
    lock_file = tmp_path / "tiny.lock"
    lock_file.write_text(f"--no-index\n--find-links {links}\ntinypkg==1.0\n")
    target = dk.Target.declared(fake_base())
    with pytest.raises(EnvError) as err:
        dk.wheelhouse_for(parse_lock(lock_file), target)
    message = str(err.value)
    assert "no wheel for the image's platform (cp311, manylinux_2_36_x86_64)" in message
    assert "tinypkg==1.0" in message and "\n" not in message
    # nothing half-made is left to be mistaken for a wheelhouse
    assert not any(p.is_dir() for p in (tmp_path / "cache" / "wheelhouses").iterdir())


def test_wheelhouse_for_a_hashless_lock_records_hashes(tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    links = tmp_path / "links"
    links.mkdir()
    _fake_wheel(links, "tinypkg-1.0-py3-none-any.whl")
    lock_file = tmp_path / "tiny.lock"
    lock_file.write_text(f"--no-index\n--find-links {links}\ntinypkg==1.0\n")
    house = dk.wheelhouse_for(parse_lock(lock_file), dk.Target.declared(fake_base()))
    digest = hashlib.sha256((links / "tinypkg-1.0-py3-none-any.whl").read_bytes()).hexdigest()
    assert (house / "requirements.txt").read_text() == f"tinypkg==1.0 --hash=sha256:{digest}\n"
    assert [p.name for p in (house / "wheels").iterdir()] == ["tinypkg-1.0-py3-none-any.whl"]
    # a second call is the cache
    again = dk.wheelhouse_for(parse_lock(lock_file), dk.Target.declared(fake_base()))
    assert again == house


def test_download_takes_the_lock_index_options_but_not_its_format_controls(tmp_path):
    lock_file = tmp_path / "opts.lock"
    lock_file.write_text("--index-url https://idx.example/simple\n"
                         "--extra-index-url https://more.example/simple\n"
                         "--find-links /wheels\n--trusted-host idx.example\n"
                         "--only-binary :all:\n--prefer-binary\nnumpy==2.3.5\n")
    from lockguard.envs.wheels import lock_options

    args = lock_options(parse_lock(lock_file))
    assert args == ["--index-url", "https://idx.example/simple",
                    "--extra-index-url", "https://more.example/simple",
                    "--find-links", "/wheels", "--trusted-host=idx.example"]


def test_build_stream_finds_the_install_stage_last_layer():
    """From the classic builder's own lines (a real build log's): the install stage ends at the
    next FROM, and its last layer is what is removed after the build."""
    stages = StageTracker()
    for line in ["Step 1/9 : FROM lockguard-test/python:3.11-bookworm AS base",
                 " ---> ab811b62efcf", "Step 2/9 : RUN python3 -m venv /opt/lockguard/venv",
                 " ---> Using cache", " ---> 6068b03ea77c", "Step 3/9 : FROM base AS install",
                 " ---> 6068b03ea77c",
                 "Step 4/9 : COPY wheels/ /lockguard/wheels/", " ---> b1bdecbdcd0f",
                 "Step 5/9 : RUN /opt/lockguard/venv/bin/python -m pip install ...",
                 " ---> Running in d4a69f1a626a", "Successfully installed numpy-2.3.5",
                 " ---> e580f6dfbc35", "Step 6/9 : FROM base", " ---> 6068b03ea77c",
                 "Step 7/9 : COPY --from=install /opt/lockguard/venv /opt/lockguard/venv",
                 " ---> 097df2a7c4bb"]:
        stages.feed(line)
    assert stages.install_layer == "e580f6dfbc35"
    assert stages.stage is None and stages.last_layer == "097df2a7c4bb"


# ---------------------------------------------------------------------------------------------
# A real engine
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def numpy_image(engine):
    """The numpy image, built for real once (an old one is removed first), while this module
    has the engine to itself (conftest._engine_to_itself)."""
    lock = numpy_lock()
    recipe = dk.recipe_for("numpy", "cpu", lock, dk.resolve_base(engine, "cpu"))
    try:
        engine.images.remove(recipe.tag)
    except Exception:  # noqa: BLE001 - not there
        pass
    built = dk.build_image(lock, "numpy", "cpu", client=engine)
    assert not built.reused
    return built


def _request(scenario: Scenario, steps: int | None = None, timeout: float = 300) -> RunRequest:
    return scenario.request(steps=steps or scenario.steps, seed=0, device="cpu", threads=1,
                            timeout=timeout)


def _user(script: Path, framework: str = "numpy", steps: int = 12) -> Scenario:
    return Scenario(id=f"user.{script.stem}", framework=framework, description="", steps=steps,
                    script=script)


@pytest.mark.docker
def test_built_image_holds_the_lock_and_its_labels(engine, numpy_image):
    image = engine.images.get(numpy_image.tag)
    assert image.id == numpy_image.id
    labels = image.labels
    lock = numpy_lock()
    assert labels["lockguard.lock-hash"] == lock.lock_hash
    assert labels["lockguard.base-digest"] == engine.images.get(TEST_BASE).id
    assert labels["lockguard.version"] and labels["org.opencontainers.image.created"]
    assert labels["lockguard.python"] == "3.11"
    report = installed_in(engine, numpy_image.tag, "numpy")
    assert report["dists"]["numpy"] == "2.3.5" and report["import_error"] is None
    assert set(report["dists"]) - {"numpy"} <= INSTALLER_DISTS
    # the wheels' layer went with the install stage: no .whl anywhere in the image
    found = engine.containers.run(numpy_image.tag, ["sh", "-c", "find / -xdev -name '*.whl' "
                                                    "-path '*lockguard*' | wc -l"],
                                  remove=True, network_mode="none")
    assert found.decode().strip() == "0"
    log = numpy_image.log.read_text()
    assert "Successfully tagged" in log and "network none" in log
    # ... and the install stage itself is gone from the engine
    assert not engine.images.list(all=True, filters={"label": "lockguard.stage=install"})


@pytest.mark.docker
def test_the_stack_probe_runs_bundled_in_an_image(engine, numpy_image):
    """The stack probe and its sibling (platform_info) as `python -c` their bundled program in a
    real container of the image's venv (tests/test_probes.py runs each branch on the host)."""
    from lockguard.envs.docker.stack import stack_probe

    report = stack_probe(engine, numpy_image.tag, "numpy", "cuda")
    assert report["view"] == {"version": "2.3.5"} and report["errors"] == []
    assert report["requires"] == {"numpy": ["2.3.5", []]} and report["libraries"] == []
    assert report["markers"] == installed_in(engine, numpy_image.tag, "numpy")["markers"]
    assert report["markers"]["python_version"] == "3.11"
    # numpy's own extension modules, loaded from the venv's site-packages by its import.
    assert any(e["file"].startswith("numpy/") and e["dist"] == "numpy" for e in report["loaded"])


@pytest.mark.docker
def test_second_build_is_a_cache_hit(engine, numpy_image):
    start = time.perf_counter()
    again = dk.build_image(numpy_lock(), "numpy", "cpu")
    wall = time.perf_counter() - start
    assert again.reused and again.id == numpy_image.id and again.tag == numpy_image.tag
    assert wall < 2.0, f"cache hit took {wall:.2f} s"


@pytest.mark.docker
def test_container_results_equal_the_venv(engine, numpy_image, tmp_path):
    """Same lock, same harness: bitwise-equal losses, gradients, outputs and parameters.

    Only the fingerprint's interpreter differs (the image's Debian python3.11 is 3.11.2, the
    venv's is the host's), and the image id is recorded.
    """
    lock = numpy_lock()
    in_docker = prepared_image(lock, "numpy")
    in_venv = prepared_venv(lock)
    scenarios = [_user(USER_SCRIPT)] + [s for s in bundled() if s.id == "numpy.mlp"]
    assert len(scenarios) == 2
    (tmp_path / "d").mkdir()
    (tmp_path / "v").mkdir()
    for scenario in scenarios:
        a = in_docker.run(_request(scenario), tmp_path / "d")
        b = in_venv.run(_request(scenario), tmp_path / "v")
        assert a.status == Status.ok, a.error
        assert b.status == Status.ok, b.error
        assert a.losses and a.losses == b.losses
        assert a.grad_norms == b.grad_norms and a.outputs == b.outputs
        assert a.param_digest == b.param_digest and a.framework_version == b.framework_version
        assert a.fingerprint["image"]["id"] == numpy_image.id
        assert a.fingerprint["image"]["tag"] == numpy_image.tag
        assert a.fingerprint["cpu"] == b.fingerprint["cpu"]


@pytest.mark.docker
def test_runs_are_sandboxed(engine, numpy_image, tmp_path):
    env = prepared_image(numpy_lock(), "numpy")
    result = env.run(_request(_user(PROBE_SCRIPT, steps=2)), tmp_path)
    assert result.status == Status.ok, result.error
    m = result.metrics
    assert m["network"] == 0.0 and m["interfaces"] == 1.0  # only lo
    assert m["harness_writable"] == 0.0 and m["root_writable"] == 0.0
    assert m["uid"] == float(os.getuid())
    assert (tmp_path / f"user.{PROBE_SCRIPT.stem}.json").is_file()  # written through the mount


GIT_PEEK = """\
import os


def run(steps, seed):
    here = os.path.dirname(os.path.abspath(__file__))

    def read(name):
        try:
            with open(os.path.join(here, name)) as f:
                return float("secret" in f.read())
        except OSError:
            return -1.0

    git = os.path.join(here, ".git")
    listed = os.listdir(git) if os.path.isdir(git) else []
    return {"losses": [float(seed)] * steps,
            "metrics": {"git_config": read(".git/config"), "git_file": read(".git"),
                        "git_entries": float(len(listed)), "data": read("data.txt")}}
"""


@pytest.mark.parametrize("kind", ["folder", "file"])
def test_the_projects_git_is_hidden_from_the_container(tmp_path, monkeypatch, kind):
    """The project is mounted whole but for `.git` (a worktree's is a file), as the venv
    sandbox leaves it out: its config holds a checkout's credentials."""
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "project"
    project.mkdir()
    (project / "peek.py").write_text(GIT_PEEK)
    if kind == "folder":
        (project / ".git").mkdir()
    else:
        (project / ".git").write_text("gitdir: /elsewhere\n")
    request = _user(project / "peek.py", steps=2).request(
        steps=2, seed=0, device="cpu", threads=1, timeout=9, project=project)
    argv = _env_for("cpu").docker_argv(request, tmp_path, "lockguard-x")
    hidden = (["--tmpfs", f"{USER_MOUNT}/.git:ro,size=4k"] if kind == "folder"
              else ["-v", f"/dev/null:{USER_MOUNT}/.git:ro"])
    at = argv.index(f"{project.resolve()}:{USER_MOUNT}:ro")
    assert argv[at + 1:at + 3] == hidden
    (project / ".git").rename(project / "git")  # none: nothing to hide
    argv = _env_for("cpu").docker_argv(request, tmp_path, "lockguard-x")
    assert not [arg for arg in argv if f"{USER_MOUNT}/.git" in arg]


@pytest.mark.docker
def test_a_run_in_the_container_cannot_read_the_projects_git(engine, tmp_path):
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    (project / ".git" / "config").write_text("[credential]\n\thelper = secret\n")
    (project / "data.txt").write_text("secret\n")  # the rest of the project: readable
    (project / "peek.py").write_text(GIT_PEEK)
    request = _user(project / "peek.py", steps=2).request(
        steps=2, seed=0, device="cpu", threads=1, timeout=300, project=project)
    (tmp_path / "out").mkdir()
    result = prepared_image(numpy_lock(), "numpy").run(request, tmp_path / "out")
    assert result.status == Status.ok, result.error
    seen = {k: v for k, v in result.metrics.items() if k != "run_s"}
    assert seen == {"git_config": -1.0, "git_file": -1.0, "git_entries": 0.0, "data": 1.0}


@pytest.mark.docker
def test_timeout_stops_the_container(engine, numpy_image, tmp_path):
    env = prepared_image(numpy_lock(), "numpy")
    result = env.run(_request(_user(PROBE_SCRIPT, steps=600), timeout=8), tmp_path)
    assert result.status == Status.timeout
    assert result.fingerprint["image"]["id"] == numpy_image.id
    deadline = time.time() + 20
    while engine.containers.list(filters={"label": "lockguard.run=1", "ancestor": env.tag}):
        assert time.time() < deadline, "the container outlived its timeout"
        time.sleep(0.5)


@pytest.mark.docker
def test_conformance_fails_on_a_tampered_lock(engine, numpy_image, tmp_path):
    tampered = tmp_path / "tampered.lock"
    tampered.write_text("numpy==2.3.4\nsix==1.17.0\n")
    with pytest.raises(EnvError) as err:
        check_conformance(engine, numpy_image.tag, parse_lock(tampered), "numpy",
                          numpy_image.log)
    message = str(err.value)
    assert "numpy: lock 2.3.4, image 2.3.5" in message and "missing six==1.17.0" in message
    assert str(numpy_image.log) in message


@pytest.mark.docker
def test_tampered_image_under_the_tag_is_refused(engine, numpy_image, tmp_path):
    """An image moved under lockguard's tag (here: one extra distribution) is checked again
    rather than trusted, and the difference is listed."""
    repo, tag = numpy_image.tag.rsplit(":", 1)
    site = "/opt/lockguard/venv/lib/python3.11/site-packages/evil-1.0.dist-info"
    (tmp_path / "Dockerfile").write_text(
        f"FROM {numpy_image.tag}\n"
        f"RUN mkdir -p {site} && printf 'Metadata-Version: 2.1\\nName: evil\\nVersion: 1.0\\n' "
        f"> {site}/METADATA\n")
    evil, _ = engine.images.build(path=str(tmp_path), tag=numpy_image.tag, network_mode="none",
                                  rm=True)
    try:
        with pytest.raises(EnvError, match=r"does not match .*extra evil==1\.0"):
            dk.build_image(numpy_lock(), "numpy", "cpu")
    finally:
        engine.images.get(numpy_image.id).tag(repo, tag)  # put the real one back
        engine.images.remove(evil.id, force=True)
    assert dk.build_image(numpy_lock(), "numpy", "cpu").id == numpy_image.id


@pytest.mark.docker
def test_missing_base_is_a_clear_error(engine, monkeypatch):
    monkeypatch.setenv(dk.BASE_IMAGE_ENV, "lockguard-test/absent:0")
    with pytest.raises(EnvError, match=r"base image lockguard-test/absent:0 .* is not present"):
        dk.build_image(numpy_lock(), "numpy", "cpu")
    # the pinned base, which this engine does not have and cannot pull (no registry here)
    monkeypatch.delenv(dk.BASE_IMAGE_ENV)
    base = dk.base_for("cpu")
    try:
        engine.images.get(base.ref)
        pytest.skip(f"{base.ref} is present on this engine")
    except Exception:  # noqa: BLE001
        pass
    with pytest.raises(EnvError) as err:
        dk.build_image(parse_lock_text("numpy==2.3.5\n", str(NUMPY_LOCK)), "numpy", "cpu")
    message = str(err.value)
    assert f"base image {base.ref} is not present" in message and "could not be pulled" in message
    assert dk.BASE_IMAGE_ENV in message and "\n" not in message


@pytest.mark.docker
def test_images_pin_without_registry(engine, tmp_path):
    pins = tmp_path / "bases.toml"
    shutil.copy(REPO / "images" / "bases.toml", pins)
    before = pins.read_text()
    with pytest.raises(EnvError, match=r"cannot reach the registry for docker\.io/"):
        dk.pin_images(path=pins)
    assert pins.read_text() == before


@pytest.mark.docker
@pytest.mark.slow
def test_torch_image_equals_the_venv(engine, tmp_path):
    """torch 2.13.0+cpu (tests/data/torch-2.13.0.txt, from /opt/wheels): torch.mlp bitwise equal."""
    lock = parse_lock(TORCH_LOCK)
    in_docker = prepared_image(lock, "torch")
    in_venv = prepared_venv(lock)
    scenario = [s for s in bundled() if s.id == "torch.mlp"][0]
    (tmp_path / "d").mkdir()
    (tmp_path / "v").mkdir()
    a = in_docker.run(_request(scenario, steps=10), tmp_path / "d")
    b = in_venv.run(_request(scenario, steps=10), tmp_path / "v")
    assert a.status == Status.ok, a.error
    assert b.status == Status.ok, b.error
    assert a.framework_version == b.framework_version == "2.13.0+cpu"
    assert a.losses == b.losses and a.param_digest == b.param_digest


def test_numpy_scenarios_share_their_lock_framework_image():
    torch_lock = parse_lock(TORCH_LOCK)
    assert dk.image_framework(torch_lock, "numpy") == "torch"
    assert dk.image_framework(torch_lock, "torch") == "torch"
    assert dk.image_framework(numpy_lock(), "numpy") == "numpy"


@pytest.mark.docker
def test_cli_build_reuses_and_check_runs_in_the_image(engine, numpy_image, tmp_path):
    """The user's path: `lockguard build`, then record/check with --env docker."""
    from conftest import golden_file, make_project, run_cli

    project = make_project(tmp_path / "p", """
        lock = "numpy.lock"
        env = "docker"
        scenarios = ["numpy.mlp"]
        steps = 8
        """, locks={"numpy.lock": NUMPY_LOCK})
    built = run_cli("build", "--framework", "numpy", cwd=project)
    assert built.returncode == 0, built.stderr
    assert numpy_image.tag in built.stdout and "reused" in built.stdout
    assert run_cli("record", cwd=project).returncode == 0
    golden = json.loads(golden_file(project, "numpy.mlp").read_text())
    assert golden["result"]["fingerprint"]["image"]["tag"] == numpy_image.tag
    check = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert check.returncode == 0, check.stdout + check.stderr
    assert [v["verdict"] for v in json.loads(check.stdout)["verdicts"]] == ["identical"]
    dead = run_cli("check", "--rerun", cwd=project,
                   env={"DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"})
    assert dead.returncode == 2 and "no-such.sock" in dead.stderr


def test_a_src_layout_entry_runs_from_the_project_mounted_with_src_its_root(tmp_path,
                                                                           monkeypatch):
    """src/pkg/train.py: the project is mounted (its data beside src/ with it), the harness
    imports from the mount's src/."""
    from lockguard.config import load_config
    from lockguard.scenarios import user_scenarios

    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))
    project = tmp_path / "project"
    (project / "src" / "pkg").mkdir(parents=True)
    (project / "src" / "pkg" / "train.py").write_text("def make(seed): ...\n")
    (project / "lockguard.toml").write_text('[scenario.ours]\nentry = "pkg.train:make"\n'
                                            'framework = "numpy"\n')
    [scenario] = user_scenarios(load_config(start=project))
    assert scenario.root == project / "src"
    request = scenario.request(steps=3, seed=0, device="cpu", threads=1, timeout=9,
                               project=project)
    argv = _env_for("cpu").docker_argv(request, tmp_path, "lockguard-x")
    assert f"{project.resolve()}:{USER_MOUNT}:ro" in argv
    harness = argv[argv.index("--entry"):]
    assert harness[:4] == ["--entry", "pkg.train:make", "--root", f"{USER_MOUNT}/src"]
