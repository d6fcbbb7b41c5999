"""Where the harness lies and how it is laid out: the backends launch it, goldens hash it.

The harness (lockguard/harness/) is never imported by lockguard to run a scenario: a backend
starts `python <HARNESS_DIR>/run.py ...` in the target environment (docker mounts HARNESS_DIR).
Its modules live in the package PACKAGE beside run.py, under a name no user module has.
"""

from __future__ import annotations

from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent.parent / "harness"
ENTRY = "run.py"
PACKAGE = "_lockguard_harness"
# The module that implements each framework's scenarios (run.py has the same table).
FRAMEWORK_MODULE = {"torch": "torch_", "jax": "jax_", "tensorflow": "tf_", "numpy": "numpy_"}


def implements(framework: str) -> bool:
    """Whether the harness has a module for `framework` (a scenario of one it lacks is not
    offered)."""
    return (HARNESS_DIR / PACKAGE / f"{FRAMEWORK_MODULE[framework]}.py").is_file()


def harness_files() -> list[tuple[str, Path]]:
    """Every Python file of the harness as (path relative to HARNESS_DIR, path), in a fixed
    order: what a golden's harness digest covers."""
    files = [(p.relative_to(HARNESS_DIR).as_posix(), p) for p in HARNESS_DIR.rglob("*.py")]
    return sorted(files)
