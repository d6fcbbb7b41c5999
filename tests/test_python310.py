"""lockguard on the oldest Python it promises (pyproject: requires-python >= 3.10), where TOML
is read with tomli: installed there from this checkout, every TOML reader runs (a lock in each
TOML format, planned from a config). Needs a Python 3.10 interpreter, which .ci/run cannot install (no
python3.10 package on Debian 12): found on PATH or in pyenv, else the test skips, saying so."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parent.parent


def python310() -> str:
    """A Python 3.10 interpreter: python3.10 on PATH, or pyenv's."""
    candidates = [shutil.which("python3.10")]
    root = os.environ.get("PYENV_ROOT", str(Path.home() / ".pyenv"))
    candidates += sorted(str(p) for p in Path(root).glob("versions/3.10.*/bin/python3.10"))
    for exe in filter(None, candidates):
        done = subprocess.run([exe, "-c", "import sys; print(sys.version_info[:2])"],
                              capture_output=True, text=True)
        if done.returncode == 0 and done.stdout.strip() == "(3, 10)":
            return exe
    pytest.skip("needs a Python 3.10 interpreter (python3.10 on PATH, or pyenv's)")


def test_every_toml_reader_works_on_python_310(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([python310(), "-m", "venv", str(venv)], check=True)
    installed = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", str(REPO)],
                               capture_output=True, text=True)
    assert installed.returncode == 0, installed.stderr[-2000:]
    project = tmp_path / "p"
    (project / "old").mkdir(parents=True)
    (project / "new").mkdir()
    # The locks are read for the interpreter the environments are built with: this 3.11 (they
    # require it), whatever runs lockguard.
    (project / "lockguard.toml").write_text(f'lock = "new/uv.lock"\npython = "{sys.executable}"\n')
    for name in ("uv.lock", "pylock.toml", "poetry.lock"):
        shutil.copy(DATA / "locks" / "numpy-1.26.4" / name, project / "old" / name)
        shutil.copy(DATA / "locks" / "numpy-2.0.2" / name, project / "new" / name)
    # Every module imports there (the harness aside: it runs in the environments built).
    imported = subprocess.run([str(venv / "bin" / "python"), "-c", (
        "import importlib, pkgutil, lockguard\n"
        "for m in pkgutil.walk_packages(lockguard.__path__, 'lockguard.'):\n"
        "    if '.harness' not in m.name:\n"
        "        importlib.import_module(m.name)\n")], capture_output=True, text=True)
    assert imported.returncode == 0, imported.stderr[-2000:]
    lockguard = str(venv / "bin" / "lockguard")
    for name in ("uv.lock", "pylock.toml", "poetry.lock"):
        done = subprocess.run([lockguard, "plan", "--lock", f"new/{name}", "--format", "json"],
                              cwd=project, capture_output=True, text=True)
        assert done.returncode == 0, done.stdout + done.stderr
        assert "numpy.mlp" in done.stdout, done.stdout
    listed = subprocess.run([lockguard, "scenarios"], cwd=project, capture_output=True,
                            text=True)
    assert listed.returncode == 0 and "numpy.mlp" in listed.stdout, listed.stderr
