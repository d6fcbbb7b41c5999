"""Plan and run scenarios: which lock and environment each scenario runs in, and running them.

This is the orchestration between the CLI and the pure pieces: it reads locks, prepares
environments (the only place that decides venv / docker / local), and runs harness processes in
parallel, bounded by the machine's cores.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from lockguard.cache import cache_root
from lockguard.config import Config, ConfigError, lock_paths
from lockguard.envs.base import Env, RunRequest
from lockguard.files import scratch_dir, writable_dir
from lockguard.locks import Lock, parse_lock
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, verify
from lockguard.scenarios import Scenario


@dataclass(frozen=True)
class LockRef:
    path: Path
    lock: Lock
    device: str | None = None  # expected device of this lock's environment, from config
    inputs: Path | None = None  # the requirements.in it is compiled from, when configured
    label: str | None = None  # what reports call a lock read from git: main@1a2b3c4d:path


@dataclass(frozen=True)
class Planned:
    scenario: Scenario
    lock: LockRef | None
    device: str  # expected device class
    steps: int
    skip_reason: str | None = None


def load_locks(config: Config, cli_locks: list[str]) -> list[LockRef]:
    """The locks to check, read and parsed (see config.lock_paths for where they come from)."""
    return [LockRef(path=path, lock=read_lock(path), device=device, inputs=inputs)
            for path, device, inputs in lock_paths(config, cli_locks)]


def read_lock(path: Path) -> Lock:
    if not path.is_file():
        raise ConfigError(f"{path}: lock file not found")
    return parse_lock(path)


def lock_for(scenario: Scenario, locks: list[LockRef]) -> LockRef | None:
    """The first lock that pins the scenario's framework: frameworks never share an env."""
    for ref in locks:
        if scenario.framework in ref.lock.frameworks():
            return ref
    return None


def plan(config: Config, scenarios: list[Scenario], locks: list[LockRef], *,
         device: str | None = None, steps: int | None = None,
         local: bool = False) -> list[Planned]:
    """Decide lock, device and steps per scenario; unrunnable ones carry a skip reason."""
    planned = []
    for sc in scenarios:
        ref = lock_for(sc, locks)
        expected = device or sc.device or (ref.device if ref else None) or config.device
        n = steps or config.steps or sc.steps
        reason = None
        if ref is None and not local:
            pinned = sorted({f for r in locks for f in r.lock.frameworks()})
            reason = (f"no lock pins {sc.framework} (locks pin: "
                      f"{', '.join(pinned) or 'no framework'})")
        planned.append(Planned(sc, ref, expected, n, reason))
    return planned


class Environments:
    """Prepares each lock's environment once per check, for the configured backend."""

    def __init__(self, config: Config, kind: str, progress: Progress = QUIET) -> None:
        if kind != "local":  # a cache that cannot hold an environment: known before any build
            writable_dir(cache_root(), "lockguard's cache (LOCKGUARD_CACHE)")
        self.config = config
        self.kind = kind
        self.progress = progress
        self._envs: dict[tuple[str, str], Env] = {}
        self._wanted: list[tuple[str, str]] = []  # for "environment n of N"

    def _key(self, ref: LockRef | None, framework: str, device: str) -> tuple[str, str]:
        key = (ref.lock.lock_hash if ref else "local", f"{framework}/{device}")
        if self.kind != "docker":
            key = (key[0], "")  # one venv per lock serves every framework and device in it
        return key

    def expect(self, wanted: list[tuple[LockRef | None, str, str]]) -> None:
        """The (lock, framework, device) triples this check will ask for, so that progress
        can say which environment of how many it is preparing."""
        self._wanted = list(dict.fromkeys(self._key(*w) for w in wanted))

    def get(self, ref: LockRef | None, framework: str, device: str) -> Env:
        key = self._key(ref, framework, device)
        if key not in self._envs:
            index = self._wanted.index(key) + 1 if key in self._wanted else len(self._envs) + 1
            with self.progress.counting(index, max(len(self._wanted), index), "environment"):
                self._envs[key] = self._prepare(ref, framework, device)
        return self._envs[key]

    def _prepare(self, ref: LockRef | None, framework: str, device: str) -> Env:
        if self.kind == "local":
            from lockguard.envs import local

            return local.prepare(self.config.python_path, ref.lock.lock_hash if ref else "local")
        assert ref is not None
        if self.kind == "docker":
            from lockguard.envs import docker

            return docker.prepare(ref.lock, framework=framework, accelerator=device,
                                  progress=self.progress)
        from lockguard.envs import venv

        return venv.prepare(ref.lock, python=self.config.python_path,
                            installer=self.config.installer,
                            allow_sdist=self.config.allow_sdist, progress=self.progress)


def workers() -> int:
    """Parallel harness processes: LOCKGUARD_JOBS, else one per core (at most 8)."""
    configured = os.environ.get("LOCKGUARD_JOBS", "")
    if configured.isdigit() and int(configured) > 0:
        return int(configured)
    return max(1, min(os.cpu_count() or 1, 8))


def run_requests(jobs: list[tuple[Env, RunRequest]], progress: Progress = QUIET,
                 on_done: Callable[[RunRequest, RunResult], None] | None = None
                 ) -> list[RunResult]:
    """Run harness processes in parallel (one thread waits on each process); results in order.

    Each harness is pinned to its own thread count, so running as many processes as there are
    cores keeps the machine busy without changing any run's numerics. When a job fails the jobs
    not started are cancelled; on an interrupt the running ones are killed too, so the temporary
    directory is removed within a second or two, after its processes are gone.
    """
    from rich.markup import escape

    from lockguard import process

    results: list[RunResult | None] = [None] * len(jobs)
    step = None
    with scratch_dir("run") as tmp:
        def one(index: int) -> None:
            env, request = jobs[index]
            out_dir = Path(tmp) / str(index)
            out_dir.mkdir()
            result = verify(env.run(request, out_dir), scenario=request.scenario_id,
                            framework=request.framework, steps=request.steps)
            results[index] = result
            label = escape(f"{request.scenario_id} [{env.label}]")
            done = step.advance() if step is not None else index + 1
            progress.info(f"  {done} of {len(jobs)}: {label}: {result.status.value}"
                          + (f" in {result.timings.total_s:.1f} s" if result.timings.total_s
                             else ""))
            if on_done:
                on_done(request, result)

        with progress.step(f"Running {len(jobs)} training run(s) on {workers()} worker(s)",
                           total=len(jobs)) as step:
            pool = ThreadPoolExecutor(max_workers=workers())
            try:
                for future in [pool.submit(one, i) for i in range(len(jobs))]:
                    future.result()
            except BaseException as exc:
                pool.shutdown(wait=False, cancel_futures=True)
                if isinstance(exc, KeyboardInterrupt):
                    process.kill_all()  # done already when the CLI's signal handler raised it
                raise
            finally:
                pool.shutdown(wait=True)
    return [r for r in results if r is not None]
