"""The `local` backend: the current (or a given) interpreter, no isolation, nothing built.

Useful on machines where the stack is preinstalled (a GPU box, a notebook image). The lock, if
one is given, is only used for reporting: lockguard cannot promise the interpreter matches it.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard.allowlist import training_env
from lockguard.envs.base import (
    Backend, RunRequest, harness_env, interpreter_tag, run_with, variables_identity,
)
from lockguard.progress import Progress
from lockguard.results import RunResult

if TYPE_CHECKING:
    from lockguard.locks.model import Lock
    from lockguard.sandbox import Sandbox


class LocalEnv:
    """The interpreter `python` (None: the one running lockguard), as it is."""

    def __init__(self, python: str | None = None, lock_hash: str = "local",
                 sandbox: Sandbox | None = None) -> None:
        self.python = python or sys.executable
        self.sandbox = sandbox
        self.lock_hash = lock_hash
        self.label = f"local {self.python}"
        self.startup_files = None  # the interpreter's own, not a lock's: not told

    def site_packages(self) -> Path | None:
        """None: an interpreter as it is installs no lock."""
        return None

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        """The harness with this interpreter, in the training allowlist's environment."""
        return run_with(self.python, request, out_dir, harness_env(), sandbox=self.sandbox)


class LocalBackend(Backend):
    """Runs every scenario with `python` (None: the interpreter running lockguard); installs
    nothing, so it admits every lock and refuses none."""

    def __init__(self, python: str | None = None, sandbox: Sandbox | None = None) -> None:
        self.python = python
        self.sandbox = sandbox
        self._identity: str | None = None

    def identity(self) -> str:
        """"local", the interpreter's tag and the variables its runs see."""
        if self._identity is None:
            self._identity = f"local {interpreter_tag(self.python or sys.executable)}"
        return f"{self._identity} vars {variables_identity(training_env())}"

    def admit(self, locks: Sequence[Lock]) -> None:
        """Nothing is installed from a lock: nothing to refuse."""

    def scope(self, framework: str, device: str) -> str:
        """One interpreter serves every framework and device."""
        return ""

    def prepare(self, lock: Lock | None, framework: str, device: str,
                progress: Progress) -> LocalEnv:
        """The interpreter, labelled with the lock's hash (or "local" without one): nothing
        is checked or built."""
        return LocalEnv(self.python, lock.lock_hash if lock is not None else "local",
                        self.sandbox)
