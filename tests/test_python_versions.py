"""lockguard on the oldest Python it promises (pyproject: requires-python >= 3.10, where TOML is
read with tomli) and on the newest the frameworks publish wheels for (3.13): installed there
from this checkout, every module imports, every TOML reader runs (a lock in each TOML format,
planned from a config), and a real `lockguard record` and `check` of numpy.mlp train in a venv
built on that interpreter, which the result's fingerprint names.

The interpreters come from tests/pythons.py (python3.X on PATH, or pyenv's); .ci/run installs
the missing ones with `uv python install`, so under CI their absence fails the test.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import pythons
from conftest import DATA, REPO, unavailable

pytestmark = pytest.mark.slow
# numpy 2.2.6, hashes of every file (PyPI): wheels for CPython 3.10 to 3.13.
NUMPY_LOCK = DATA / "numpy-2.2.6.txt"


def interpreter(version: str) -> str:
    """A CPython `version` interpreter, else unavailable (a skip; under CI a failure)."""
    found = pythons.find(version)
    if found is None:
        unavailable(f"a Python {version} interpreter",
                    f"no python{version} on PATH nor in pyenv (.ci/run installs one with "
                    f"`uv python install {version}`)")
    return found


def installed_on(version: str, tmp_path: Path) -> Path:
    """This checkout installed (not editable) into a fresh venv of `version`: its bin folder."""
    venv = tmp_path / "venv"
    subprocess.run([interpreter(version), "-m", "venv", str(venv)], check=True)
    done = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(REPO)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return venv / "bin"


def run(bin_dir: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """`lockguard ARGS` of that install, from `cwd`, with no terminal on stdin."""
    return subprocess.run([str(bin_dir / "lockguard"), *args], cwd=cwd, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=900)


def every_toml_reader(bin_dir: Path, project: Path) -> None:
    """Plan from a lock in each TOML format, read through a lockguard.toml config, for the
    interpreter under test (numpy 2.2.6's locks allow 3.10 to 3.13)."""
    project.mkdir(parents=True)
    (project / "lockguard.toml").write_text('lock = "uv.lock"\n')
    for name in ("uv.lock", "pylock.toml", "poetry.lock"):
        shutil.copy(DATA / "locks" / "numpy-2.2.6" / name, project / name)
        done = run(bin_dir, "plan", "--lock", name, "--format", "json", cwd=project)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "numpy.mlp" in done.stdout, done.stdout
    listed = run(bin_dir, "scenarios", cwd=project)
    assert listed.returncode == 0 and "numpy.mlp" in listed.stdout, listed.stderr


@pytest.mark.parametrize("version", pythons.VERSIONS)
def test_lockguard_installs_and_checks_on(version, tmp_path):
    bin_dir = installed_on(version, tmp_path)
    # Every module imports there (the harness aside: it runs in the environments built; and
    # the pytest plugin, which only pytest loads: pytest is no dependency of lockguard's).
    imported = subprocess.run([str(bin_dir / "python"), "-c", (
        "import importlib, pkgutil, lockguard\n"
        "for m in pkgutil.walk_packages(lockguard.__path__, 'lockguard.'):\n"
        "    if '.harness' not in m.name and m.name != 'lockguard.pytest_plugin':\n"
        "        importlib.import_module(m.name)\n")], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr[-2000:]
    every_toml_reader(bin_dir, tmp_path / "toml")
    # A gate's whole path on this interpreter: no `python` key, so the venv is built with the
    # interpreter lockguard runs on.
    project = tmp_path / "check"
    project.mkdir()
    shutil.copy(NUMPY_LOCK, project / "numpy.lock")
    (project / "lockguard.toml").write_text(
        'lock = "numpy.lock"\nscenarios = ["numpy.mlp"]\nsteps = 8\n')
    recorded = run(bin_dir, "record", cwd=project)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    [golden] = (project / "golden" / "cpu").glob("*/numpy.mlp.json")
    result = json.loads(golden.read_text())["result"]
    assert result["status"] == "ok" and len(result["losses"]) == 8
    assert result["fingerprint"]["python"].startswith(f"{version}."), result["fingerprint"]
    assert result["framework_version"] == "2.2.6"
    # --rerun: the candidate trains again rather than being answered from the golden.
    checked = run(bin_dir, "check", "--rerun", "--format", "json", cwd=project)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    report = json.loads(checked.stdout)
    assert [(v["scenario"], v["verdict"]) for v in report["verdicts"]] == [
        ("numpy.mlp", "identical")]
