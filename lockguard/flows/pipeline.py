"""The one pipeline every flow runs on: plan → prepare environments → execute → judge → verdicts.

A flow (record, the golden check, A/B) says two things per planned scenario: which runs it needs
(`decide`: jobs, or none when the answer is known without running), and what the runs mean
(`judge`: a verdict and its evidence). Everything between — environments prepared once each,
harness processes in parallel, results verified and handed back with the job that asked for them —
happens here once, so no flow pairs results with jobs by position.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from itertools import zip_longest
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from lockguard.allowlist import withheld
from lockguard import envvars, integrity, process
# The seam to the environments: the flows know Backend and backend_for, never a backend's module.
from lockguard.compare.verdicts import skipped
from lockguard.envs import Backend, backend_for
from lockguard.envs.base import Env, RunRequest
from lockguard.config import DATA_RULE, ConfigError, data_found
from lockguard.files import scratch_dir
from lockguard.hardware import host_memory, visible_gpus
# The locks of a run live in lockguard.locks.ref; imported here too, for the flows built on
# the pipeline.
from lockguard.locks.ref import LockRef, lock_for, no_lock_reason
from lockguard.progress import QUIET, Progress
from lockguard.results import RunResult, Status, verify
from lockguard.sandbox import resolve
from lockguard.scenarios import Scenario
from lockguard.settings import Settings

if TYPE_CHECKING:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.report import Evidence
    from lockguard.sandbox import Sandbox

Role = Literal["baseline", "candidate"]


@dataclass(frozen=True)
class Planned:
    """One scenario as a check will run it: its lock, device and steps, or why it is skipped."""

    scenario: Scenario
    lock: LockRef | None
    device: str  # expected device class
    steps: int
    skip_reason: str | None = None


@dataclass(frozen=True)
class CodeTree:
    """Where one side of an A/B takes a user scenario's code from: the repository at `repo`
    (the checkout's real path) as extracted below `root` (the target's tip, flows/git_base.py):
    the script, the files beside it and the project's own code, all from there."""

    repo: Path
    root: Path
    label: str  # for people: "main@1a2b3c4"

    def place(self, path: Path) -> Path:
        """`path` of the checkout, in this tree."""
        return self.root / Path(os.path.realpath(path)).relative_to(self.repo)

    def planned(self, p: Planned) -> Planned:
        """`p` with its user script, project and data taken from this tree (what its inputs
        digest reads): its `data` patterns matched anew here, where the run reads them."""
        if p.scenario.script is None:
            return p
        sc = p.scenario
        data_root = self.place(sc.data_root) if sc.data_root is not None else None
        return replace(p, scenario=replace(
            sc, script=self.place(sc.script),
            root=self.place(sc.root) if sc.root is not None else None,
            data=self._data(data_root, sc.data_patterns) if data_root is not None else (),
            data_root=data_root))

    def _data(self, root: Path, patterns: tuple[str, ...]) -> tuple[Path, ...]:
        """The files of this tree below `root` the patterns match, each once: none where a
        pattern matches nothing here (the checkout's scenario was validated; the target's
        files are what they are: a run that reads a missing one fails). A match that leads out
        of the tree is a ConfigError: the run could read it, the digest would not cover it."""
        tree = os.path.realpath(self.root)
        found = data_found(root, patterns)
        for path in found:
            if not os.path.realpath(path).startswith(tree + os.sep):
                raise ConfigError(f"{path}: a `data` file of the judged tree leads out of it: "
                                  f"{DATA_RULE}")
        return found

    def request(self, request: RunRequest) -> RunRequest:
        """`request` run from this tree: its script here, the whole tree its project (what
        it may read: the repository's code, as a checkout's run reads its repository), its
        compile cache the checkout project's (the one it stands for)."""
        if request.script is None:
            return request
        project = request.project or Path(request.script).parent
        root = request.entry_root
        return replace(request, script=self.place(request.script), project=self.root,
                       cache_scope=project,
                       entry_root=self.place(root) if root is not None else None)


@dataclass(frozen=True)
class Job:
    """One harness run a flow asked for: a scenario in the environment of one lock."""

    planned: Planned
    ref: LockRef | None  # None: the local interpreter
    role: Role = "candidate"
    # A timing run (lockguard/compare/timing.py): run after every numeric run of the check, one
    # at a time, alone; its figures judge `slower`, its numbers nothing.
    timing: bool = False
    code: CodeTree | None = None  # where a user scenario's code comes from (None: the checkout)
    time_block: int = 0  # a timing run's: its steps also timed this many at a time
    # A localisation run (compare/locate.py): its steps end with this one, whose module calls
    # it records; its numbers judge nothing else.
    locate_step: int | None = None


@dataclass
class Outcome:
    """What the pipeline hands back to the flow that builds the Report."""

    planned: list[Planned]
    verdicts: list[ScenarioVerdict]  # in plan order, skipped scenarios included
    evidence: list[Evidence] = field(default_factory=list)
    results: dict[str, RunResult] = field(default_factory=dict)  # candidate's first run each
    # lock hash -> distribution -> ((file, runs code), ...): what the environments built for a
    # lock run at every interpreter start (.pth files: envs/venv.startup_files), where known.
    startup_files: dict[str, dict[str, tuple[tuple[str, bool], ...]]] = field(
        default_factory=dict)
    sandbox: str | None = None  # what the runs were confined to (sandbox_line); None: none ran

    def file(self, ran: list[tuple[Job, Env, RunResult]], by_scenario: dict[str, Runs]) -> None:
        """File each run's result with its scenario's runs, and the startup files of the
        environment it ran in."""
        for job, env, result in ran:
            by_scenario[job.planned.scenario.id].add(job, env.label, result)
            shipped = env.startup_files
            if job.ref is not None and shipped:
                self.startup_files.setdefault(job.ref.lock.lock_hash, {}).update(shipped)


@dataclass
class Runs:
    """What `judge` receives: the results of one scenario's jobs by role, in the order they
    ran, and the environment each role ran in (for provenance)."""

    baseline: list[RunResult] = field(default_factory=list)
    candidate: list[RunResult] = field(default_factory=list)
    envs: dict[str, str] = field(default_factory=dict)  # role -> Env.label
    # The timing runs, in the order they ran (baseline_timed[i] just before candidate_timed[i]).
    baseline_timed: list[RunResult] = field(default_factory=list)
    candidate_timed: list[RunResult] = field(default_factory=list)
    # The localisation runs (one a side, at most), their captures for compare/locate.py.
    baseline_located: list[RunResult] = field(default_factory=list)
    candidate_located: list[RunResult] = field(default_factory=list)

    def add(self, job: Job, env_label: str, result: RunResult) -> None:
        """File `result` of `job` under its role (timing and localisation runs apart)."""
        if job.timing or job.locate_step is not None:
            kind = "timed" if job.timing else "located"
            getattr(self, f"{job.role}_{kind}").append(result)
            return
        getattr(self, job.role).append(result)
        self.envs[job.role] = env_label


Decide = Callable[[Planned], list[Job]]
# The timing runs a scenario needs, given what its numeric runs showed (their step times).
Timing = Callable[[Planned, "Runs"], list[Job]]
Judge = Callable[[Planned, Runs], "tuple[ScenarioVerdict, Evidence | None]"]
# What a flow leaves out once the environments are known (an A/B: what its change cannot
# reach, flows/ab.py): the plan with skip reasons added, given the environments (prepared on
# asking, each once: the runs use the same).
Narrow = Callable[[list[Planned], "Environments"], list[Planned]]


# -------------------------------------------------------------------------------------- plan

def plan(settings: Settings, scenarios: list[Scenario], locks: list[LockRef]) -> list[Planned]:
    """Decide lock, device and steps per scenario under `settings` (--device over a
    scenario's, its lock's and the config's device; --steps or the config's over a scenario's;
    with `--env local` a scenario runs without a lock); unrunnable ones carry a skip reason."""
    planned = []
    for sc in scenarios:
        ref = lock_for(sc, locks)
        expected = (settings.device or sc.device or (ref.device if ref else None)
                    or settings.default_device)
        n = settings.steps or sc.steps
        reason = None
        if ref is None and not settings.local:
            reason = no_lock_reason(sc, locks)
        elif sc.replicas > 1 and expected == "tpu":
            reason = f"trains on {sc.replicas} devices at once: on the CPU or on GPUs, not on tpu"
        planned.append(Planned(sc, ref, expected, n, reason))
    return planned


def on_this_host(planned: list[Planned]) -> list[Planned]:
    """What this host cannot run, skipped, saying why: a scenario that trains on several GPUs
    at once (a worker a GPU: NCCL refuses two on one) where fewer show. Apart from plan(),
    which reads no hardware, so that a shard plan is the same on every machine; a host that
    shows none runs it (it falls back to the CPU and says so, like every scenario there)."""
    def short(p: Planned) -> bool:
        return p.scenario.replicas > 1 and p.device == "cuda" and not p.skip_reason

    shown = visible_gpus() if any(short(p) for p in planned) else None
    if not shown:
        return planned
    return [replace(p, skip_reason=f"trains on {p.scenario.replicas} GPUs at once (a worker a "
                                   f"GPU); this host shows {shown}")
            if short(p) and shown < p.scenario.replicas else p for p in planned]


def _healthy(p: Planned, ran: list[tuple[Job, Env, RunResult]]) -> bool:
    """Whether every numeric run of `p` trained to the end: a broken or crashed side has no
    step time worth measuring again."""
    mine = [result for job, _, result in ran if job.planned is p]
    return bool(mine) and all(result.status == Status.ok for result in mine)


def run_backend(settings: Settings, given: Backend | None = None, *,
                share_compile_caches: bool = False) -> Backend:
    """The backend a flow runs on: `given` (a test's fake, a flow's wrapper), else the one
    settings.env names, with the settings it builds with (lockguard.envs.backend_for);
    `share_compile_caches` for bisection's mixes only."""
    if given is not None:
        return given
    return backend_for(settings.env, python=settings.python, installer=settings.installer,
                       allow_sdist=settings.allow_sdist, allow_unhashed=settings.allow_unhashed,
                       allow_insecure_index=settings.allow_insecure_index,
                       sandbox=run_sandbox(settings), share_compile_caches=share_compile_caches,
                       share_bytecode=settings.share_bytecode, project=settings.config.root)


def run_sandbox(settings: Settings) -> Sandbox | None:
    """The sandbox the venv and local backends confine lock code to (None for docker, whose
    containers are their own); what the machine offers is probed once a process, when a run
    first needs it (sandbox.resolve)."""
    if settings.env == "docker":
        return None

    return resolve(settings.sandbox)


def require_sandbox(settings: Settings) -> None:
    """Under sandbox "required", exit 2 (before any build) where none is to be had."""
    confined = run_sandbox(settings)
    if confined is not None:
        confined.require()


def sandbox_line(settings: Settings) -> str:
    """What a report says of the sandbox its runs had (lockguard/sandbox.py)."""
    given = run_sandbox(settings)
    if given is None:
        return "docker: read-only containers without network (--network none)"
    return given.describe()


def pipeline(settings: Settings, scenarios: list[Scenario], locks: list[LockRef], *,
             decide: Decide, judge: Judge, progress: Progress = QUIET,
             backend: Backend | None = None, jobs: int | None = None,
             rounds: bool = False, timing: Timing | None = None,
             narrow: Narrow | None = None, locate: Timing | None = None) -> Outcome:
    """Plan the scenarios, run what `decide` asks for, and `judge` each scenario's results.

    `decide` sees every runnable scenario before anything is built, so a flow validates its
    input (goldens, target directories) there: bad input fails with nothing built or run.
    `jobs`: harness processes at once (default `default_workers()`). `rounds`: run every
    scenario's first job, then every scenario's second, and so on (repeats spread over the
    time the check takes, so a drift in the machine's load spreads over every scenario).
    `timing`: the timing runs a scenario needs (jobs with timing=True, in the order they are to
    run); they run after every other run of the check, one at a time, so that nothing else
    trains beside them. `narrow`: what to leave out, decided when the environments are known.
    `locate`: the localisation runs a scenario needs, given its numeric runs (compare/locate.py),
    run after them, in parallel as they were.
    """
    backend = run_backend(settings, backend)
    envs = Environments(backend, progress)
    planned = on_this_host(plan(settings, scenarios, locks))
    wanted = {p.scenario.id: decide(p) for p in planned if not p.skip_reason}
    envs.expect([(j.ref, j.planned.scenario.framework, j.planned.device)
                 for mine in wanted.values() for j in mine])
    if narrow is not None:
        require_sandbox(settings)  # before anything is built
        planned = narrow(planned, envs)
        wanted = {p.scenario.id: wanted[p.scenario.id] for p in planned if not p.skip_reason}
    if rounds:
        wanted_jobs = [job for round_ in zip_longest(*wanted.values()) for job in round_
                       if job is not None]
    else:
        wanted_jobs = [job for mine in wanted.values() for job in mine]
    ran = (execute(settings, backend, wanted_jobs, progress, workers=jobs, envs=envs)
           if wanted_jobs else [])

    by_scenario = {sid: Runs() for sid in wanted}
    outcome = Outcome(planned=planned, verdicts=[],
                      sandbox=sandbox_line(settings) if ran else None)
    outcome.file(ran, by_scenario)
    timed = [job for p in planned if not p.skip_reason and _healthy(p, ran)
             for job in (timing(p, by_scenario[p.scenario.id]) if timing is not None else [])]
    if timed:
        outcome.file(execute(settings, backend, timed, progress, workers=1, envs=envs,
                             title=f"Timing {len(timed)} run(s), one at a time, baseline and "
                                   "candidate alternating"), by_scenario)
    located = [job for p in planned if not p.skip_reason and _healthy(p, ran)
               for job in (locate(p, by_scenario[p.scenario.id]) if locate is not None else [])]
    if located:
        outcome.file(execute(settings, backend, located, progress, workers=jobs, envs=envs,
                             title=f"Locating {len(located) // 2} drift(s): the first divergent "
                                   "step again, every module captured"), by_scenario)
    for p in planned:
        if p.skip_reason:
            outcome.verdicts.append(skipped(p.scenario.id, p.scenario.framework, p.skip_reason))
            continue
        runs = by_scenario[p.scenario.id]
        verdict, evidence = judge(p, runs)
        outcome.verdicts.append(verdict)
        if evidence is not None:
            outcome.evidence.append(evidence)
        if runs.candidate:
            outcome.results[p.scenario.id] = runs.candidate[0]
    return outcome


# ------------------------------------------------------------------------------ environments

class Environments:
    """Prepares each environment a check needs once, on `backend`: in parallel, each under
    its progress stage ("environment n of N (lock)"), failures raised as a sequential run
    would raise them."""

    def __init__(self, backend: Backend, progress: Progress = QUIET) -> None:
        self.progress = progress
        self.backend = backend
        self._envs: dict[tuple[str, str], Env] = {}
        self._wanted: list[tuple[str, str]] = []  # for "environment n of N"

    def _key(self, ref: LockRef | None, framework: str, device: str) -> tuple[str, str]:
        # The backend says which requests share an environment (a venv: all of one lock's).
        return (ref.lock.lock_hash if ref else "local", self.backend.scope(framework, device))

    def expect(self, wanted: list[tuple[LockRef | None, str, str]]) -> None:
        """The (lock, framework, device) triples this check will ask for, so that progress
        can say which environment of how many it is preparing."""
        self._wanted = list(dict.fromkeys(self._key(*w) for w in wanted))

    def prepare_all(self, wanted: list[tuple[LockRef | None, str, str]]) -> None:
        """Prepare the distinct environments of `wanted` at once, on up to `build_workers`
        threads (installers wait on downloads and disks, and a cold check pays every build).

        Errors are those of a sequential run: a build starts only while none has failed, the
        running ones are awaited (each cleans up after itself, and what finished stays cached),
        then the failure first in plan order is raised — every build before it in plan order
        has finished. An interrupt kills the running builds' processes at once
        (process.kill_all) and returns without waiting for their threads."""
        # Every lock, before any is installed (and the cache, before anything is built).
        self.backend.admit([ref.lock for ref in dict.fromkeys(w[0] for w in wanted
                                                              if w[0] is not None)])
        first: dict[tuple[str, str], tuple[LockRef | None, str, str]] = {}
        for w in wanted:
            first.setdefault(self._key(*w), w)
        todo = [w for key, w in first.items() if key not in self._envs]
        n = build_workers(len(todo))
        if n <= 1:
            for w in todo:
                self.get(*w)
            return


        failed: dict[int, BaseException] = {}
        pool = ThreadPoolExecutor(max_workers=n, thread_name_prefix="lockguard-env")
        try:
            pending = list(enumerate(todo))
            running: dict[Future, int] = {}
            while running or (pending and not failed):
                while pending and not failed and len(running) < n:
                    index, w = pending.pop(0)
                    running[pool.submit(self.get, *w)] = index
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    index = running.pop(future)
                    if future.exception() is not None:
                        failed[index] = future.exception()
        except BaseException:
            # Ctrl-C while waiting: kill the builds' processes and leave at once; a build that
            # is no process (a docker SDK stream) is not waited for (the CLI exits hard).
            process.kill_all()  # done already when the CLI's signal handler raised it
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)
        if failed:
            raise failed[min(failed)]

    def get(self, ref: LockRef | None, framework: str, device: str) -> Env:
        """The environment of (ref, framework, device), prepared on first asking."""
        key = self._key(ref, framework, device)
        if key not in self._envs:
            index = self._wanted.index(key) + 1 if key in self._wanted else len(self._envs) + 1
            with self.progress.counting(index, max(len(self._wanted), index), "environment",
                                        ref.name if ref is not None else "local"):
                self._envs[key] = self.backend.prepare(ref.lock if ref is not None else None,
                                                       framework, device, self.progress)
        return self._envs[key]


# ----------------------------------------------------------------------------------- execute

def request_for(p: Planned, settings: Settings, code: CodeTree | None = None) -> RunRequest:
    """The harness's request for `p`, with the settings' seed, threads, timeout and memory
    limit; a user scenario's code taken from `code` when given."""
    limit, source = memory_limit(settings)
    request = p.scenario.request(steps=p.steps, seed=settings.seed, device=p.device,
                                 threads=settings.threads, timeout=settings.timeout,
                                 memory_limit=limit, memory_limit_source=source,
                                 project=settings.config.root)
    return code.request(request) if code is not None else request


# The default memory limit, of the memory this host gives lockguard: a runaway run is stopped
# (and judged broken) before the kernel's OOM killer or the CI runner's watchdog ends the job,
# and the headroom left is the rest of the check's (other runs, the installer, lockguard).
AUTO_MEMORY_SHARE = 0.75


def memory_limit(settings: Settings) -> tuple[int | None, str]:
    """The bytes one training run may hold resident (None: no limit), and where that figure
    comes from, for the error of a run that exceeds it."""
    if settings.memory_limit == "none":
        return None, "config key memory_limit"
    if settings.memory_limit == "auto":
        host = host_memory()
        if host is None:
            return None, "config key memory_limit"  # nothing to take a share of
        return int(host * AUTO_MEMORY_SHARE), ("3/4 of this machine's memory, the default; "
                                               "config key memory_limit sets another")
    return int(settings.memory_limit), "config key memory_limit"


def execute(settings: Settings, backend: Backend, jobs: list[Job], progress: Progress = QUIET,
            workers: int | None = None, title: str | None = None,
            envs: Environments | None = None) -> list[tuple[Job, Env, RunResult]]:
    """Prepare every job's environment on `backend` (those `envs` holds already, as they are),
    then run all jobs in parallel: (job, the environment it ran in, result), in the order of
    `jobs`."""
    require_sandbox(settings)
    wanted = [(j.ref, j.planned.scenario.framework, j.planned.device) for j in jobs]
    if envs is None:
        envs = Environments(backend, progress)
        envs.expect(wanted)
    envs.prepare_all(wanted)
    prepared = [(envs.get(j.ref, j.planned.scenario.framework, j.planned.device),
                 replace(request_for(j.planned, settings, j.code), time_block=j.time_block,
                         locate_step=j.locate_step))
                for j in jobs]
    hidden = withheld()
    if hidden:  # how many, never which or what: -v output ends up in public CI logs
        progress.detail(f"{hidden} of lockguard's {len(os.environ)} environment variables are "
                        "withheld from the trainings (only locale, paths and thread, "
                        "accelerator and framework settings pass)")
    # Every worker thread validates a RunResult as its run ends: the deferred model is built
    # here, on one thread, before any of them can (pydantic before its _rebuild_lock,
    # pydantic#13438, lets two first uses of a deferred model race; the floor is 2.5).
    RunResult.model_rebuild()
    _hold_the_judge()
    # Runs are named for people by their role and lock ("baseline main@1a2b3c4:lock.txt"),
    # not by the environment's hash.
    both = {j.role for j in jobs} == {"baseline", "candidate"}
    names = [f"{j.planned.scenario.id} [" + (f"{j.role} " if both else "")
             + (j.ref.name if j.ref is not None else "local") + "]" for j in jobs]
    results = run_requests(prepared, progress, workers,
                           slots=[j.planned.scenario.replicas for j in jobs], names=names,
                           title=title)
    return [(job, env, result)
            for job, (env, _), result in zip(jobs, prepared, results, strict=True)]


def _hold_the_judge() -> None:
    """Before the first training: import every module that judges and reports (a module
    imported later would be read from disk after a lock's code ran), then hash lockguard's
    own files, checked again before the verdict (lockguard/integrity.py)."""
    for name in JUDGE_MODULES:
        importlib.import_module(name)
    integrity.take()


# What judges a run and says so: imported before any training (_hold_the_judge).
JUDGE_MODULES = ("lockguard.compare.verdicts", "lockguard.flows.acceptances",
                 "lockguard.golden", "lockguard.evidence",
                 "lockguard.report", "lockguard.report.text", "lockguard.report.markdown",
                 "lockguard.report.html", "lockguard.report.junit", "lockguard.report.github",
                 "lockguard.flows.report_parts", "lockguard.integrity")


def build_workers(n: int) -> int:
    """Environments built at once: one per core, at most 4 (each installer unpacks with
    threads of its own, and more at once only compete for the disk)."""
    return max(1, min(os.cpu_count() or 1, n, 4))


def default_workers() -> int:
    """Parallel harness processes: LOCKGUARD_JOBS, else one per core (at most 8)."""
    configured = envvars.value("LOCKGUARD_JOBS")  # checked: 1 to envvars.MAX_JOBS
    if configured:
        return int(configured)
    return max(1, min(os.cpu_count() or 1, 8))


class _Slots:
    """`n` worker slots taken in the jobs' order: job k waits until jobs before it have taken
    theirs and as many as it needs are free, so a job needing several is never starved by
    single ones behind it."""

    def __init__(self, n: int) -> None:
        self.free, self.turn = n, 0
        self.changed = threading.Condition()

    def take(self, ticket: int, want: int) -> None:
        with self.changed:
            self.changed.wait_for(lambda: self.turn == ticket and self.free >= want)
            self.free -= want
            self.turn += 1
            self.changed.notify_all()

    def give(self, want: int) -> None:
        with self.changed:
            self.free += want
            self.changed.notify_all()


def run_requests(jobs: list[tuple[Env, RunRequest]], progress: Progress = QUIET,
                 workers: int | None = None, slots: list[int] | None = None,
                 names: list[str] | None = None, title: str | None = None
                 ) -> list[RunResult]:
    """Run harness processes in parallel (one thread waits on each process); results in order.

    Each harness is pinned to its own thread count, so running as many processes as there are
    cores keeps the machine busy without changing any run's numerics. `slots`: how many of the
    workers each job takes (a data-parallel run's processes: on 2 cores, the two sides of its
    A/B side by side were ×1.4 apart in steady steps, a same-lock `slower`); 1 each by default.
    When a job fails the jobs not started are cancelled; on an interrupt the running ones are
    killed too, so the temporary directory is removed within a second or two, after its
    processes are gone.
    """
    results: list[RunResult | None] = [None] * len(jobs)
    workers = workers or default_workers()
    wants = [min(max(1, n), workers) for n in (slots or [1] * len(jobs))]
    free = _Slots(workers)
    step = None
    with scratch_dir("run") as tmp:
        def one(index: int) -> None:
            env, request = jobs[index]
            name = names[index] if names else f"{request.scenario_id} [{env.label}]"
            out_dir = Path(tmp) / str(index)
            free.take(index, wants[index])
            if step is not None:
                step.begin(name)
            try:
                out_dir.mkdir()
                ran = env.run(request, out_dir)
            finally:
                free.give(wants[index])
                if step is not None:
                    step.end(name)
            result = verify(ran, scenario=request.scenario_id, framework=request.framework,
                            steps=request.steps)
            results[index] = result
            done = step.advance() if step is not None else index + 1
            progress.info(f"  {done} of {len(jobs)}: {name}: {result.status.value}"
                          + (f" in {result.timings.total_s:.1f} s" if result.timings.total_s
                             else ""))

        with progress.step(title or f"Running {len(jobs)} training run(s) on {workers} "
                           "worker(s)", total=len(jobs)) as step:
            pool = ThreadPoolExecutor(max_workers=workers)
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
