"""What every environment backend shares: the seam the flows see (`Backend`, `Env`,
`RunRequest`), and running the harness in a process.

A backend (venv, docker, local) only decides *which* environment a lock gets and *which* command
runs the harness there; turning a process into a RunResult — timeouts, crashes without a
result file, unreadable output — happens here once, so all backends report failures the same
way.
"""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lockguard import process
from lockguard.allowlist import HARNESS_SETTINGS, WHERE_ONLY, training_env
from lockguard.cache import cache_root
from lockguard.envs.harness import ENTRY, HARNESS_DIR
from lockguard.errors import LockguardError
from lockguard.files import ReadError, read_json, writable_dir
from lockguard.locks.target import target_for
from lockguard.progress import Progress, show_command
from lockguard.results import (
    MAX_RESULT_BYTES, SCHEMA_VERSION, ResultError, RunResult, Status, parse_result,
)
from lockguard.sandbox import Policy, interpreter_prefix, project_access
from lockguard.sizes import format_size

if TYPE_CHECKING:
    from lockguard.locks.model import Lock
    from lockguard.sandbox import Sandbox

# The marker a backend writes last into what it built (a venv, an image's build record, a
# wheelhouse): where it is missing, a build did not finish.
READY = "lockguard-ready.json"


class EnvError(LockguardError):
    """The environment could not be prepared (bad lock for pip, no docker daemon, ...)."""


@dataclass(frozen=True)
class RunRequest:
    """One harness run, in the harness's own terms: what a backend needs, and no more (the
    env layer knows nothing of scenarios or configuration)."""

    scenario_id: str
    framework: str  # torch | jax | tensorflow | numpy
    steps: int
    seed: int
    device: str  # expected device class
    threads: int
    timeout: float  # seconds
    dtype: str = "float32"  # for the result of a run that wrote none
    script: Path | None = None  # a user scenario's script; None for a bundled scenario
    # A user scenario's function of the project's code ("pkg.train:make"; `script` is then its
    # module's file) and the folder its module is imported from (the config's).
    entry: str | None = None
    entry_root: Path | None = None
    # The project a user scenario's script belongs to (its config's folder): what a
    # sandboxed run of it may read besides the script's own folder.
    project: Path | None = None
    # The project whose compile cache the run writes (compile_cache_for), when its code was
    # taken from elsewhere (a tree extracted from git): the project it stands for.
    cache_scope: Path | None = None
    memory_limit: int | None = None  # bytes its processes may hold resident together
    memory_limit_source: str = "config key memory_limit"  # where the limit came from, for errors
    # A timing run of steps too short to time one by one: also time them in blocks of this
    # many (the harness's --time-block); 0: one by one only.
    time_block: int = 0
    # A localisation run: record every module call of this step (the harness's --locate-step);
    # None: an ordinary run.
    locate_step: int | None = None


class Env(Protocol):
    """One prepared environment: runs the harness for a request, in a process of its own, and
    says what the flows read of it without a run."""

    label: str  # for reports: "venv 3f2a9c…", "docker lockguard/torch-cpu:…", "local /usr/bin/python"
    lock_hash: str
    # What the environment's interpreter runs at every start (.pth files, sitecustomize):
    # distribution -> ((file, runs code), ...); None where it cannot tell (a container).
    startup_files: dict[str, tuple[tuple[str, bool], ...]] | None

    def site_packages(self) -> Path | None:
        """Where its installed distributions' dist-info can be read (its files checked first);
        None where they cannot be read from here (a container, an interpreter as it is)."""
        ...

    def run(self, request: RunRequest, out_dir: Path) -> RunResult:
        """Run `request`'s training, its result file and log under `out_dir`: always a
        RunResult (a failing training is a result, never an exception)."""
        ...


@runtime_checkable
class Backend(Protocol):
    """What the flows need of an environment backend: environments for (lock, framework,
    device), each an Env that turns a RunRequest into a RunResult.

    The seam has httpx's transports' shape: this base, the real implementations beside it
    (envs/venv.py VenvBackend, envs/local.py LocalBackend, envs/docker/backend.py
    DockerBackend), `lockguard.envs.backend_for` choosing one, and a fake for flow tests
    (tests/fakes.py FakeBackend). A new backend (an accelerator host, a remote runner) is a
    module here implementing these four methods, and its entry in envs.BACKENDS.

    The pipeline (flows/pipeline.py) calls `admit` with every lock of a check before it builds
    anything, then `prepare` once per lock and `scope`, several at once on threads of its own:
    `prepare` must be safe to call concurrently (for other locks, or other scopes).
    """

    def identity(self) -> str:
        """What this backend's environments are built with that a lock's hash does not say
        ("venv cpython 3.11.7 x86_64"; "docker": an image's Python is its recipe's): part of
        a golden's inputs digest, so a golden answers only for environments built alike."""
        ...

    def admit(self, locks: Sequence[Lock]) -> None:
        """Refuse, before anything is built, what this backend will not build: a cache it
        cannot write (WriteError), a lock it will not install (LockError naming its
        file:line: no hashes, a plain-http index, a pin with no wheel it may install)."""
        ...

    def scope(self, framework: str, device: str) -> str:
        """What tells one lock's environments apart: "" when one serves every framework and
        device the lock pins (a venv), "torch/cuda" for an image per framework and
        accelerator. Requests of equal lock and scope share one prepared Env."""
        ...

    def prepare(self, lock: Lock | None, framework: str, device: str,
                progress: Progress) -> Env:
        """The environment `lock` runs `framework`'s scenarios in on `device`, built first if
        no sound one is cached; None: the interpreter itself (the local backend only). A
        build that fails raises EnvError (or LockError) naming the lock."""
        ...


@runtime_checkable
class ImageBackend(Backend, Protocol):
    """A backend whose environments are container images, which it also builds, pushes and
    pins apart from any check (`lockguard build`, `lockguard images pin`): the docker backend.
    The flows reach it as every backend, through envs.backend_for, and read its images'
    `tag`, `id`, `size`, `reused`, `seconds` and `log` (the docker backend's BuiltImage),
    and a push's `ref` and `record` (its Pushed); they import no backend's module."""

    def check_registry(self, registry: str) -> str:
        """REGISTRY as `--push` takes it, or a UsageError saying what is wrong with it: asked
        before anything is built."""
        ...

    def build_image(self, lock: Lock, framework: str, accelerator: str, *,
                    base_image: str | None, progress: Progress) -> Any:
        """The lock's pinned image for `framework` on `accelerator`, built or reused (the lock
        is admitted first by the caller, as a check admits it)."""
        ...

    def stack_line(self, image: Any) -> str | None:
        """A cuda or tpu image's stack, as a line ("cuda 13.0 · cuDNN 9.x · NCCL 2.x ...");
        None for an image with no accelerator stack."""
        ...

    def push(self, image: Any, registry: str) -> Any:
        """Tag `image` below `registry`, push it and record the pushed digest."""
        ...

    def pin_bases(self, progress: Progress) -> dict[str, tuple[str, str]]:
        """Refresh the pinned base images' digests from the registry: base -> (old, new)."""
        ...


def require_writable_cache() -> None:
    """Fail before any build when lockguard's cache (LOCKGUARD_CACHE) cannot hold what a
    backend builds."""
    writable_dir(cache_root(), "lockguard's cache (LOCKGUARD_CACHE)")


def variables_identity(variables: Mapping[str, str]) -> str:
    """The variables a backend's runs see (allowlist.WHERE_ONLY aside), as a short digest for
    its identity: a golden recorded under other XLA_FLAGS, OMP_* or TORCHINDUCTOR_* settings,
    or another PATH (the compiler torch.compile finds), is no shortcut."""
    kept = sorted((k, v) for k, v in variables.items() if k not in WHERE_ONLY)
    return hashlib.sha256(json.dumps(kept).encode()).hexdigest()[:16]


def interpreter_tag(python: str) -> str:
    """"cpython 3.11.7 x86_64": the implementation, version and machine of a host interpreter,
    from the markers lockguard reads a lock for it with (locks.target: asked once a process;
    a LockError naming the `python` setting when it does not run)."""
    markers = target_for(python).markers
    return (f"{markers['implementation_name']} {markers['python_full_version']} "
            f"{markers['platform_machine']}")


def harness_args(request: RunRequest, harness_dir: str, out_path: str,
                 script_path: str | None, root_path: str | None = None) -> list[str]:
    """The harness command line after the interpreter (paths as the interpreter will see them:
    `root_path` is an entry's root there, the request's own by default).
    Runs write no bytecode (PYTHONDONTWRITEBYTECODE): a venv's is compiled at build
    (envs/bytecode.py)."""
    args = [f"{harness_dir}/{ENTRY}", "--scenario", request.scenario_id,
            "--steps", str(request.steps), "--seed", str(request.seed),
            "--device", request.device, "--threads", str(request.threads), "--out", out_path]
    if request.entry is not None:
        root = root_path if root_path is not None else str(request.entry_root)
        args += ["--entry", request.entry, "--root", root, "--framework", request.framework]
    elif script_path is not None:
        args += ["--script", script_path, "--framework", request.framework]
    if request.time_block:
        args += ["--time-block", str(request.time_block)]
    if request.locate_step is not None:
        args += ["--locate-step", str(request.locate_step)]
    return args


def harness_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The process environment for a harness run: the training allowlist of lockguard's own
    (lockguard/allowlist.py: no CI secret, no PYTHONPATH), HARNESS_SETTINGS, then `extra`."""
    env = training_env()
    env.update(HARNESS_SETTINGS)
    env.update(extra or {})
    return env


def compile_cache_env(root: str, shared: bool = False) -> dict[str, str]:
    """Where the compilers keep their caches: in lockguard's cache, so a re-check compiles warm
    (a warm jax cache took jax.lm's first step from 9.3 s to 1.3 s, bit-identical). A cache
    `shared` with other environments (envs/compile_cache.py) goes without torch's autograd
    cache, keyed by the graph before autograd expands it, which another package's custom op
    may expand otherwise. No run reads another's dynamic-shape profile (dynamo keeps one in
    the cache when a TORCH_COMPILE_JOB_ID is set): each run compiles as the first would."""
    env = {"TORCHINDUCTOR_CACHE_DIR": f"{root}/inductor", "TRITON_CACHE_DIR": f"{root}/triton",
           "JAX_COMPILATION_CACHE_DIR": f"{root}/jax",
           # torch's vendored quack (GPU kernels) keeps its JIT cache below TMPDIR otherwise
           "QUACK_CACHE_DIR": f"{root}/quack",
           "TORCH_DYNAMO_AUTOMATIC_DYNAMIC_LOCAL_PGO": "0"}
    if shared:
        env["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    return env


def compile_cache_for(root: Path, request: RunRequest) -> Path:
    """The compile cache `request` runs with, and may write: the environment's `root`, or for
    a user scenario a folder of it for the scenario's project alone, since its script is that
    project's code: no project's script plants the kernels another project's runs of the same
    lock read."""
    if request.script is None:
        return root
    project = os.path.abspath(request.cache_scope or request.project
                              or Path(request.script).parent)
    return root / "projects" / hashlib.sha256(os.fsencode(project)).hexdigest()[:16]


# A training makes Unix sockets below TMPDIR (multiprocessing's listener, which DataLoader
# workers pass tensors through: <TMPDIR>/pymp-XXXXXXXX/listener-XXXXXXXX, 32 bytes more; torch's
# shared-memory manager: <TMPDIR>/torch-shm-dir-XXXXXX/manager.sock, 34), and a socket's path
# holds at most 103 bytes (macOS; Linux 107). Past that the worker fails and the loader waits
# for it until the run's timeout.
_SOCKET_ROOM = 40
_SOCKET_PATH_MAX = 103


def own_temp_dir(out_dir: Path, env: dict[str, str]) -> dict[str, str]:
    """`env` with a TMPDIR of the run's own, below `out_dir`, removed with the run's scratch
    folder: the harness leaves without interpreter teardown, so what a framework meant to
    delete at exit would stay behind (tensorflow's autograph left four files in /tmp per
    tf.function run). Where that folder's path leaves no room for a socket below it (a long
    TMPDIR of lockguard's own), the run keeps the TMPDIR it was given."""
    tmp = out_dir / "tmp"
    if len(os.fsencode(tmp)) + _SOCKET_ROOM > _SOCKET_PATH_MAX:
        return env
    tmp.mkdir(exist_ok=True)
    env = {**env, "TMPDIR": str(tmp)}
    _keep_precompiled_headers(tmp, env)
    return env


def _keep_precompiled_headers(tmp: Path, env: dict[str, str]) -> None:
    """Inductor's precompiled C++ headers, kept past a run whose TMPDIR is `tmp`.

    torch keeps them in `<TMPDIR>/torchinductor_<user>/precompiled_headers` whatever
    TORCHINDUCTOR_CACHE_DIR says (global on purpose: torch/_inductor/codecache.py's
    _HEADER_DIR), and a run's TMPDIR goes with the run. Linked into the compile cache, the
    next run that compiles C++ finds the header it would otherwise spend seconds of g++ on.
    The user is named as torch names it (getpass.getuser in the run's environment `env`); a
    wrong name costs a cold header, nothing else. (A header cut short by a killed run stays
    there as it would in torch's own folder: g++ ignores a precompiled header it cannot use.)"""
    cache = env.get("TORCHINDUCTOR_CACHE_DIR")
    if not cache:
        return

    user = next((env[name] for name in ("LOGNAME", "USER", "LNAME", "USERNAME")
                 if env.get(name)), None)
    if user is None:
        try:
            user = pwd.getpwuid(os.getuid()).pw_name
        except KeyError:
            user = f"uid_{os.getuid()}"
    home = tmp / ("torchinductor_" + re.sub(r'[\\/:*?"<>|]', "_", user))
    # Absolute: a relative link is read from the folder it is in (LOCKGUARD_CACHE may be
    # relative), and torch cannot make its folders through a link that points nowhere.
    target = Path(os.path.abspath(cache)) / "precompiled_headers"
    try:
        target.mkdir(parents=True, exist_ok=True)
        home.mkdir(exist_ok=True)
        (home / "precompiled_headers").symlink_to(target, target_is_directory=True)
    except OSError:
        pass  # compiled cold, as in a fresh cache


def run_with(python: str, request: RunRequest, out_dir: Path,
             env: dict[str, str],
             alongside: Callable[[], None] | None = None, *,
             sandbox: Sandbox | None = None, writes: Sequence[str] = ()) -> RunResult:
    """Run the harness with a host interpreter (the venv and local backends); `alongside`:
    process.run's. Under an active `sandbox` the run reads only the system, the interpreter
    (and its venv), the harness and its project (a user script's), and writes only `out_dir`
    and `writes` (confined)."""
    out = out_dir / f"{request.scenario_id}.json"
    script = str(request.script) if request.script is not None else None
    argv = [python, *harness_args(request, str(HARNESS_DIR), str(out), script)]
    env, spec = confined(sandbox, out_dir, env, python, script=request.script,
                         project=request.project, writes=writes)
    result = execute(argv, request, out, env=env, memory_limit=request.memory_limit,
                     alongside=alongside, sandbox=spec)
    if result.fingerprint and sandbox is not None:
        # Part of what the run was, beside its platform: a golden says what it was recorded in.
        result.fingerprint["sandbox"] = sandbox.describe()
    return result


def confined(sandbox: Sandbox | None, out_dir: Path, env: dict[str, str], python: str, *,
             script: Path | None = None, project: Path | None = None,
             writes: Sequence[str] = (), reads: Sequence[str] = (),
             network: bool = False) -> tuple[dict[str, str], dict | None]:
    """A training's environment and sandbox spec (process.run's `sandbox`): HOME an empty
    folder of the run's scratch `out_dir`, which is all it may write besides `writes`; it
    reads the system, `python`'s installation and venv, the harness, `reads` and, for a user
    `script`, its `project` (lockguard/sandbox.py); `network`: it may open TCP connections
    (an allowed sdist's build, whose installer fetches). Unsandboxed: `env` as it is, None."""
    if sandbox is None or not sandbox.active:
        return env, None

    prefix = str(Path(os.path.abspath(python)).parent.parent)  # a venv's own folder
    readable, listed = project_access(script, project)
    policy = Policy(read=(prefix, interpreter_prefix(python), str(HARNESS_DIR), *readable,
                          *reads),
                    write=tuple(writes), listed=listed, network=network)
    return sandbox.confine(out_dir, env, policy, temp=env.get("TMPDIR"))


def failed_result(request: RunRequest, status: Status, error: str) -> RunResult:
    """A RunResult for a run that produced no usable result (timed out, crashed, unreadable
    output), `error` saying why; the verdicts treat it as broken."""
    return RunResult(schema_version=SCHEMA_VERSION, scenario=request.scenario_id,
                     framework=request.framework, steps=request.steps,
                     seed=request.seed, dtype=request.dtype, status=status, error=error)


def memory_error(request: RunRequest) -> str:
    """The start of the error of a run its memory limit stopped."""
    return (f"exceeded the memory limit of {format_size(request.memory_limit or 0)} "
            f"({request.memory_limit_source})")


def execute(argv: list[str], request: RunRequest, result_path: Path,
            env: dict[str, str] | None = None, cwd: Path | None = None,
            memory_limit: int | None = None,
            alongside: Callable[[], None] | None = None,
            sandbox: dict | None = None) -> RunResult:
    """Run a harness command; always return a RunResult, never raise for a failing training.

    Its output goes to a log beside the result file (the run's temporary directory); the log's
    last lines become the error of a run that failed or timed out. `memory_limit`: the bytes
    the process tree may hold resident (the host backends pass the request's; a container is
    limited by its engine instead)."""
    result_path.unlink(missing_ok=True)
    log = result_path.with_name(result_path.name.removesuffix(".json") + ".log")
    show_command(argv)
    try:
        done = process.run(argv, log=log, timeout=request.timeout, env=env, cwd=cwd,
                           memory_limit=memory_limit, alongside=alongside, sandbox=sandbox)
    except process.ProcessError as exc:
        raise EnvError(f"cannot start the harness: {exc}") from None
    if done.timed_out:
        return failed_result(request, Status.timeout,
                             f"no result after {request.timeout:g} s (killed)\n{done.tail()}")
    if done.memory_killed is not None:
        # Last: a broken verdict's reason is the error's last line.
        return failed_result(request, Status.crashed,
                             f"{done.tail()}\n{memory_error(request)}: killed at "
                             f"{format_size(done.memory_killed)} resident")
    try:
        # Bounded, regular files only, no duplicate keys, no integer beyond float range: what
        # a training wrote is checked like any other input.
        data = read_json(result_path, "harness result", MAX_RESULT_BYTES)
        result = parse_result(data, str(result_path))
    except ReadError as exc:
        if exc.missing:
            return failed_result(request, Status.crashed,
                                 f"harness ended with {done.describe()} and wrote no result\n"
                                 f"{done.tail()}")
        return failed_result(request, Status.crashed, f"unreadable harness result: {exc}")
    except ResultError as exc:
        return failed_result(request, Status.crashed, f"unreadable harness result: {exc}")
    if result.timings.total_s is None:
        result.timings.total_s = done.seconds
    return result
