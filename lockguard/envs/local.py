"""The `local` backend: the current (or a given) interpreter, no isolation, nothing built.

Useful on machines where the stack is preinstalled (a GPU box, a notebook image). The lock, if
one is given, is only used for reporting: lockguard cannot promise the interpreter matches it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from lockguard.envs.base import RunRequest, execute, harness_args, harness_env
from lockguard.results import RunResult
from lockguard.scenarios import HARNESS_DIR


class LocalEnv:
    def __init__(self, python: str | None = None, lock_hash: str = "local") -> None:
        self.python = python or sys.executable
        self.lock_hash = lock_hash
        self.label = f"local {self.python}"

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        out = out_dir / f"{request.scenario.id}.json"
        script = str(request.scenario.script) if request.scenario.script else None
        argv = [self.python, *harness_args(request, str(HARNESS_DIR), str(out), script)]
        return execute(argv, request, out, env=harness_env())


def prepare(python: str | None = None, lock_hash: str = "local") -> LocalEnv:
    return LocalEnv(python, lock_hash)
