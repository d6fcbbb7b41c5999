"""lockguard as `pip install lockguard` gives it: a wheel, installed in a fresh venv, run from a
directory that is not the checkout. The docker backend's templates (images/ in the repository)
are package data of lockguard.envs.docker, found through importlib.resources.

The wheel is built once per module from a copy of the checkout (so the build writes nothing into
it and no stale build/ directory can leak into the wheel), with pip's isolated build, as any
installer builds it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import DATA, REPO

TEMPLATES = ("Dockerfile.in", "matrix.toml", "bases.toml")
PACKAGED = "lockguard/envs/docker/templates"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    source = tmp_path_factory.mktemp("source") / "lockguard"
    shutil.copytree(REPO, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w",
                            str(out), str(source)], capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stdout[-2000:] + built.stderr[-2000:]
    (path,) = out.glob("lockguard-*.whl")
    return path


def test_wheel_ships_the_image_templates_and_every_module(wheel):
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        for name in TEMPLATES:
            assert z.read(f"{PACKAGED}/{name}") == (REPO / "images" / name).read_bytes()
    modules = {p.relative_to(REPO).as_posix() for p in (REPO / "lockguard").rglob("*.py")}
    assert modules - names == set()


def install(wheel: Path, venv: Path, extras: str = "") -> Path:
    """A fresh venv with the wheel (and `extras`) installed: lockguard's dependencies come
    from wherever this machine's pip configuration points."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    installed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
                                f"{wheel}{extras}"], capture_output=True, text=True, timeout=1200)
    assert installed.returncode == 0, installed.stderr[-2000:]
    return venv


def test_the_wheel_needs_only_what_the_core_uses(wheel, tmp_path):
    """`pip install lockguard`: no docker SDK, no pip-tools (lockguard lock runs its own pinned
    copy in a tool venv). The lean install checks a lock in venvs; the docker backend is the
    `docker` extra, and without it says how to install it, in one line, exit 2."""
    from packaging.requirements import Requirement

    with zipfile.ZipFile(wheel) as z:
        metadata = next(z.read(n).decode() for n in z.namelist()
                        if n.endswith(".dist-info/METADATA"))
    requires = [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
                if line.startswith("Requires-Dist:")]
    core = {r.name.lower() for r in requires if not r.marker or "extra" not in str(r.marker)}
    assert core == {"packaging", "pydantic", "rich", "click", "uv", "tomli", "tomli_w"}
    docker = [r for r in requires if r.name == "docker"]
    assert [str(r.marker) for r in docker] == ['extra == "docker"']

    venv = install(wheel, tmp_path / "venv")
    listed = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "list", "--format",
                             "json"], capture_output=True, text=True, timeout=120)
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "lockguard" in names and not names & {"docker", "pip-tools"}, sorted(names)

    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(DATA / "numpy-1.26.4.txt", project / "requirements.txt")
    (project / "pyproject.toml").write_text(
        "[tool.lockguard]\nlock = 'requirements.txt'\nscenarios = ['numpy.mlp']\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    lockguard = str(venv / "bin" / "lockguard")
    checked = subprocess.run([lockguard, "check", "--allow-new"], cwd=project, env=env,
                             capture_output=True, text=True, timeout=1800)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "numpy.mlp" in checked.stdout
    docker = subprocess.run([lockguard, "check", "--allow-new", "--env", "docker"], cwd=project,
                            env=env, capture_output=True, text=True, timeout=300)
    assert docker.returncode == 2
    assert docker.stderr == ("lockguard: error: the docker backend needs lockguard[docker]: "
                             "pip install 'lockguard[docker]'\n")


@pytest.mark.docker
def test_installed_wheel_builds_an_image_outside_the_checkout(wheel, engine, tmp_path):
    """`lockguard build --framework numpy` from the wheel: templates found, image built (or the
    one the checkout's tests built reused: same templates, same tag)."""
    import lockguard.envs.docker as dk
    from lockguard.locks.parser import parse_lock

    venv = install(wheel, tmp_path / "venv", extras="[docker]")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(DATA / "docker-numpy.lock", elsewhere / "numpy.lock")
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", dk.IMAGES_DIR_ENV, "VIRTUAL_ENV")}
    assert env[dk.BASE_IMAGE_ENV]  # the engine fixture's debootstrapped base

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import lockguard.envs.docker as d; print(d.templates_dir())"],
        cwd=elsewhere, env=env, capture_output=True, text=True, timeout=120)
    assert where.returncode == 0, where.stderr
    templates = Path(where.stdout.strip())
    assert templates.is_relative_to(venv) and (templates / "Dockerfile.in").is_file()

    built = subprocess.run([str(venv / "bin" / "lockguard"), "build", "--framework", "numpy",
                            "--lock", "numpy.lock"], cwd=elsewhere, env=env,
                           capture_output=True, text=True, timeout=1800)
    assert built.returncode == 0, built.stdout + built.stderr
    expected = dk.recipe_for("numpy", "cpu", parse_lock(DATA / "docker-numpy.lock"),
                             dk.resolve_base(engine, "cpu"))
    line = built.stdout.strip().splitlines()[-1]
    assert line.startswith(f"{expected.tag} ") and ("reused" in line or "built in" in line)
    engine.images.get(expected.tag)
