"""The `local` backend: the current (or a given) interpreter, no isolation, nothing built.

Useful on machines where the stack is preinstalled (a GPU box, a notebook image). The lock, if
one is given, is only used for reporting: lockguard cannot promise the interpreter matches it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockguard.envs.base import RunRequest, harness_env, run_with
from lockguard.results import RunResult


class LocalEnv:
    def __init__(self, python: str | None = None, lock_hash: str = "local") -> None:
        self.python = python or sys.executable
        self.lock_hash = lock_hash
        self.label = f"local {self.python}"

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        return run_with(self.python, request, out_dir, harness_env())


def prepare(python: str | None = None, lock_hash: str = "local") -> LocalEnv:
    return LocalEnv(python, lock_hash)
