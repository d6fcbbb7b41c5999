"""The Poetry command `propose` suggests for a poetry.lock (Poetry is no dependency of lockguard)
is one the real Poetry takes: run verbatim in a Poetry project, it writes the lock that pins the
proposed version. Poetry comes from .ci/run (a venv of its own, on PATH); elsewhere the test
skips, saying so."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli, unavailable

pytestmark = pytest.mark.slow

PYPROJECT = """\
[project]
name = "poetry-project"
version = "0.1.0"
requires-python = ">=3.11,<3.12"
dependencies = ["numpy==2.0.1"]

[tool.poetry]
package-mode = false

[tool.lockguard]
lock = "poetry.lock"
scenarios = ["numpy.mlp"]
"""


def poetry() -> str:
    found = shutil.which("poetry")
    if found is None:
        unavailable("Poetry", "no `poetry` on PATH (.ci/run installs it: pip install poetry)")
    return found


def test_the_suggested_poetry_command_is_one_poetry_takes(tmp_path):
    exe = poetry()
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text(PYPROJECT)
    env = {**os.environ, "POETRY_VIRTUALENVS_CREATE": "false", "POETRY_CACHE_DIR":
           str(tmp_path / "poetry-cache"), "POETRY_NO_INTERACTION": "1"}
    locked = subprocess.run([exe, "lock"], cwd=root, env=env, capture_output=True, text=True)
    assert locked.returncode == 0, locked.stdout + locked.stderr

    (root / "before").mkdir()
    shutil.copy(root / "poetry.lock", root / "before" / "poetry.lock")
    refused = run_cli("propose", "numpy==2.0.2", cwd=root)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    [command] = re.findall(r"run `([^`]+)` and check it with --baseline-lock", refused.stderr)
    assert command.split()[:3] == ["poetry", "add", "--lock"], command
    taken = subprocess.run(["bash", "-c", command], cwd=root, capture_output=True, text=True,
                           env={**env, "PATH": f"{Path(exe).parent}:{env['PATH']}"})
    assert taken.returncode == 0, taken.stdout + taken.stderr
    lock = (root / "poetry.lock").read_text()
    assert re.search(r'name = "numpy"\nversion = "2\.0\.2"', lock), lock[:500]
    # And the lock it wrote is one lockguard reads: what --baseline-lock will compare.
    diffed = run_cli("diff", "before/poetry.lock", "poetry.lock", cwd=root)
    assert diffed.returncode == 0, diffed.stdout + diffed.stderr
    assert "numpy 2.0.1 → 2.0.2" in diffed.stdout
