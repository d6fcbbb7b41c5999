"""The default backend: one cached virtualenv per lock, installed with --require-hashes.

Cache layout: $LOCKGUARD_CACHE/venvs/<key>/ where key hashes the lock's canonical hash and the
interpreter, so a second record/check on the same lock reinstalls nothing. A build happens under
a file lock and is only marked ready (`lockguard-ready.json`) once pip succeeded: a killed build
is detected and redone by the next run, and two concurrent checks never install into one venv.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

from lockguard import process
from lockguard.cache import cache_dir, file_lock
from lockguard.envs.base import EnvError, RunRequest, compile_cache_env, harness_env, run_with
from lockguard.errors import tail as last_lines
from lockguard.locks import Lock
from lockguard.progress import QUIET, Progress, show_command
from lockguard.results import RunResult

READY = "lockguard-ready.json"
BUILD_TIMEOUT_S = 3600  # one installer run; a hung download must not hold CI forever


def interpreter_tag(python: str) -> str:
    if python == sys.executable:  # spare a subprocess in the common case
        import platform

        return f"{sys.implementation.name} {platform.python_version()} {platform.machine()}"
    with tempfile.TemporaryDirectory(prefix="lockguard-python-") as tmp:
        out, err = Path(tmp) / "stdout", Path(tmp) / "stderr"
        try:
            done = process.run([python, "-c", "import sys,platform;print(sys.implementation.name,"
                                "platform.python_version(),platform.machine())"],
                               log=out, stderr_log=err, timeout=120)
        except process.ProcessError as exc:
            raise EnvError(f"python = {python!r}: {exc}") from None
        if done.code != 0:
            reason = last_lines(err.read_text(errors="replace"), 1) or done.describe()
            raise EnvError(f"python = {python!r} is not a working interpreter: {reason}")
        return out.read_text(errors="replace").strip()


def venv_key(lock: Lock, python: str, installer: str) -> str:
    tag = interpreter_tag(python)
    return hashlib.sha256(f"{lock.lock_hash}\0{tag}\0{installer}".encode()).hexdigest()[:20]


class VenvEnv:
    def __init__(self, path: Path, lock_hash: str, inductor_cache: Path) -> None:
        self.path = path
        self.lock_hash = lock_hash
        self.python = path / "bin" / "python"
        self.label = f"venv {path.name}"
        self.inductor_cache = inductor_cache

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        env = harness_env(compile_cache_env(str(self.inductor_cache)))
        return run_with(str(self.python), request, out_dir, env)


def prepare(lock: Lock, *, python: str | None = None, installer: str = "pip",
            progress: Progress = QUIET) -> VenvEnv:
    """Return the env for `lock`, building it first if the cache has none."""
    python = python or sys.executable
    if installer == "uv" and shutil.which("uv") is None:
        raise EnvError("installer 'uv' was asked for but `uv` is not on PATH (pip install uv)")
    key = venv_key(lock, python, installer)
    root = cache_dir() / "venvs"
    path = root / key
    with file_lock(root / f"{key}.lock"):
        if not (path / READY).is_file():
            _build(path, lock, python, installer, progress)
    return VenvEnv(path, lock.lock_hash, root / f"{key}.compile-cache")


def _build(path: Path, lock: Lock, python: str, installer: str, progress: Progress) -> None:
    if path.exists():
        shutil.rmtree(path)  # an earlier build was interrupted
    lock_file = Path(lock.source)
    started = time.perf_counter()
    with progress.step(f"Building venv for {lock_file.name} ({len(lock.pins)} pins, "
                       f"{installer})") as step:
        if installer == "uv":
            code, tail = run_logged(["uv", "venv", "--python", python, str(path)],
                                    path.parent / "uv.log", step)
            if code != 0:
                raise EnvError(f"uv could not create a venv with {python}: "
                               f"{tail[-1] if tail else f'exit code {code}'}")
            cmd = ["uv", "pip", "install", "--python", str(path / "bin" / "python")]
        else:
            code, tail = run_logged([python, "-m", "venv", str(path)],
                                    path.parent / f"{path.name}.venv.log", step)
            if code != 0:
                raise EnvError(f"{python} could not create a venv: "
                               f"{tail[-1] if tail else f'exit code {code}'}")
            cmd = [str(path / "bin" / "python"), "-m", "pip", "install", "--no-input",
                   "--disable-pip-version-check", "--progress-bar", "off"]
        if lock.has_hashes:
            cmd.append("--require-hashes")
        cmd += ["-r", str(lock_file)]
        log = path / "install.log"
        code, tail = run_logged(cmd, log, step)
        if code != 0:
            reason = pip_reason(tail) or f"exit code {code}"
            shutil.rmtree(path, ignore_errors=True)
            raise EnvError(f"{lock_file}: {installer} could not install the lock: {reason}")
    ready = {"lock_hash": lock.lock_hash, "lock": str(lock_file), "python": python,
             "installer": installer, "built_s": round(time.perf_counter() - started, 1),
             "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = path / (READY + ".tmp")
    tmp.write_text(json.dumps(ready, indent=1))
    os.replace(tmp, path / READY)


def run_logged(cmd: list[str], log: Path, step) -> tuple[int, list[str]]:
    """Run an installer, its output going to a log file and its latest line to the spinner.
    Returns the exit code (non-zero when it could not start or ran past BUILD_TIMEOUT_S) and
    the log's last lines."""
    show_command(cmd)
    try:
        done = process.run(cmd, log=log, timeout=BUILD_TIMEOUT_S, env=harness_env(),
                           header=" ".join(cmd), on_line=step.update)
    except process.ProcessError as exc:
        return 127, [str(exc)]
    lines = done.output.splitlines()[-40:]
    if done.timed_out:
        return 124, [*lines, f"{cmd[0]}: {done.describe()}"]
    return done.code if done.code is not None else 1, lines


def pip_reason(lines: list[str]) -> str:
    """The line of pip's output that says why, not the whole wall of text."""
    errors = [ln.removeprefix("ERROR: ").strip() for ln in lines if ln.startswith("ERROR:")]
    # pip's noise around the reason: Python-version skips and the list of every version.
    errors = [re.sub(r" \(from versions: [^)]*\)", "", e) for e in errors
              if e and not e.startswith("Ignored the following versions")]
    if errors:
        return " ".join(errors[:2])
    meaningful = [ln.strip() for ln in lines if ln.strip()]
    return meaningful[-1] if meaningful else ""
