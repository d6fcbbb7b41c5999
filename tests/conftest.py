"""Shared test helpers: run the real CLI in a subprocess, lay out small projects.

Environments are built by lockguard itself into the normal cache (LOCKGUARD_CACHE or
~/.cache/lockguard), so a second test run on the same machine reuses them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
QUICKSTART = REPO / "examples" / "quickstart"


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`lockguard ARGS` as a user would run it, from `cwd`."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("PYTHONPATH", None)
    return subprocess.run([sys.executable, "-m", "lockguard", *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def make_project(root: Path, config: str, files: dict[str, str] | None = None,
                 locks: dict[str, Path] | None = None) -> Path:
    """A project directory with a pyproject.toml holding `config` under [tool.lockguard].

    Table headers in `config` are relative to [tool.lockguard]: `[scenario.x]` becomes
    `[tool.lockguard.scenario.x]`.
    """
    root.mkdir(parents=True, exist_ok=True)
    lines = [f"[tool.lockguard.{ln.strip()[1:]}" if ln.strip().startswith("[") else ln
             for ln in textwrap.dedent(config).strip().splitlines()]
    (root / "pyproject.toml").write_text(
        "[project]\nname = 'demo'\nversion = '0'\n\n[tool.lockguard]\n"
        + "\n".join(lines) + "\n")
    for name, text in (files or {}).items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    for name, source in (locks or {}).items():
        shutil.copy(source, root / name)
    return root


def snapshot(directory: Path) -> dict[str, bytes]:
    """Every file below `directory`, for 'nothing was written' assertions."""
    if not directory.exists():
        return {}
    return {str(p.relative_to(directory)): p.read_bytes()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def golden_file(project: Path, scenario: str, device: str = "cpu") -> Path:
    """Where `record` on this machine puts a scenario's golden: its hardware class's folder."""
    from lockguard.hardware import host_class

    return project / "golden" / device / host_class(device).id / f"{scenario}.json"


@pytest.fixture
def numpy_locks() -> dict[str, Path]:
    return {"old": DATA / "numpy-1.26.4.txt", "new": DATA / "numpy-2.0.2.txt"}


def lockguard_python(lock: Path) -> Path:
    """The interpreter of the venv lockguard itself builds (or reuses) for `lock`."""
    from lockguard.envs.venv import prepare
    from lockguard.locks import parse_lock

    return prepare(parse_lock(lock)).python


# The environments harness tests run in: the same locks the integration tests use, so a test
# session builds each framework's venv once, with lockguard's own builder.
FRAMEWORK_LOCKS = {
    "torch": QUICKSTART / "requirements.txt",  # torch 2.13.0+cpu, numpy 2.0.2
    "jax": DATA / "jax-0.10.2.txt",
    "tensorflow": DATA / "tf-2.21.0.txt",
}
