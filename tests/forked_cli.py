"""`lockguard ARGS` in a real process that skips the interpreter's start-up and lockguard's
imports: a zygote imports lockguard once, then forks one child per command.

Each child is a process of its own, as `python -m lockguard` is: its own pid and session (a
watcher can kill it and anything it started), working directory, environment (os.environ and
the C environment its subprocesses inherit), stdin from /dev/null, stdout and stderr on files,
`sys.argv` and `sys.path[0]` as `-m` sets them, atexit handlers run, and its exit status as the
interpreter computes it. What it does not pay is most of a second of CPU per command (the
interpreter, pydantic, click, rich and lockguard's modules), which hundreds of bad-input cases
would otherwise spend (tests/test_bad_input.py). tests/test_bad_input.py also runs a few cases
through a fresh interpreter and requires the same outcome from both.

conftest.run_cli runs every command this way (`run`: a zygote per thread that runs one); a test
about imports (what a command loads) or interpreter start-up runs its own `python -m lockguard`,
since every lockguard module but the harness (which runs inside environments) is imported here.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def _preload() -> None:
    """Import every module of lockguard's own process (not the harness nor the probes' programs,
    which run inside the environments lockguard builds or asks)."""
    import importlib

    import lockguard

    package = Path(lockguard.__file__).parent
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if "harness" in parts or ("probes" in parts and parts[-1] != "__init__"):
            continue
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        try:
            importlib.import_module(name)
        except ImportError:
            pass  # an optional dependency (the docker SDK): the child imports it if it can


def _exit_code(exc: SystemExit) -> int:
    """The status the interpreter exits with for an uncaught SystemExit."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    print(exc.code, file=sys.stderr)
    return 1


def _child(request: dict, channels: tuple[int, int]) -> None:
    """Become `python -m lockguard ARGS` for `request`; never returns."""
    code = 1
    try:
        if request["new_session"]:
            os.setsid()
        for fd in channels:
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        for fd, path, flags in ((0, os.devnull, os.O_RDONLY),
                                (1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
                                (2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)):
            opened = os.open(path, flags, 0o644)
            os.dup2(opened, fd)
            os.close(opened)
        import lockguard.__main__ as entry

        sys.argv = [entry.__file__, *request["args"]]
        sys.path[0] = os.getcwd()  # what `python -m` puts first
        code = 0
        try:
            entry.main()
        except SystemExit as exc:
            code = _exit_code(exc)
        except BaseException:  # noqa: BLE001 - what the interpreter does with it
            traceback.print_exc()
            code = 1
        # What the interpreter does at exit, in its order: join the threads that are not
        # daemons, run the atexit handlers, flush the standard streams.
        threading._shutdown()
        atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:  # noqa: BLE001 - the interpreter ignores these at exit too
                pass
    except BaseException:  # noqa: BLE001 - the set-up failed: say why, on the zygote's log
        traceback.print_exc()
    finally:
        os._exit(code)


def serve() -> None:
    """The zygote: requests (one JSON line each) on stdin, `<pid>` when the child started and
    `<exit code>` (negative: killed by that signal) when it ended, on stdout."""
    requests = os.fdopen(os.dup(0), "rb")
    replies = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    _preload()
    channels = (requests.fileno(), replies)
    while True:
        line = requests.readline()
        if not line:
            return
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _child(request, channels)
        os.write(replies, f"{pid}\n".encode())
        _, status = os.waitpid(pid, 0)
        os.write(replies, f"{os.waitstatus_to_exitcode(status)}\n".encode())


def cli_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command the tests run as a user would: the tests' own plus `extra`,
    less PYTHONPATH (lockguard runs as installed, not from whatever a path put first)."""
    env = {**os.environ, **(extra or {})}
    env.pop("PYTHONPATH", None)
    return env


class Zygote:
    """One zygote process (in cli_env()); runs one command at a time (use one per thread)."""

    def __init__(self, stderr: Path) -> None:
        self._log = open(stderr, "w")  # noqa: SIM115 - closed in close()
        self._proc = subprocess.Popen([sys.executable, str(Path(__file__))], cwd=TESTS,
                                      env=cli_env(), stdin=subprocess.PIPE,
                                      stdout=subprocess.PIPE, stderr=self._log)
        self._replies = b""

    def start(self, args: list[str], cwd: Path, env: dict[str, str], stdout: Path,
              stderr: Path, new_session: bool = True) -> int:
        """Fork `lockguard ARGS` with exactly `env` in `cwd`; its pid (with `new_session`, also
        its process group, for kill_group)."""
        request = {"args": args, "cwd": str(cwd), "env": env, "stdout": str(stdout),
                   "stderr": str(stderr), "new_session": new_session}
        assert self._proc.stdin is not None
        self._proc.stdin.write(json.dumps(request).encode() + b"\n")
        self._proc.stdin.flush()
        line = self._line(timeout=60)
        if line is None:
            raise RuntimeError(f"the zygote did not start a child (see {self._log.name})")
        return int(line)

    def wait(self, timeout: float | None) -> int | None:
        """The exit code of the last child once it has ended (negative: the signal that killed
        it), or None if it still runs after `timeout` seconds (None: however long it takes)."""
        line = self._line(timeout)
        return None if line is None else int(line)

    def _line(self, timeout: float | None) -> str | None:
        assert self._proc.stdout is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._replies:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            if not select.select([self._proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self._proc.stdout.fileno(), 4096)
            if not chunk:
                raise RuntimeError(f"the zygote died (see {self._log.name})")
            self._replies += chunk
        line, self._replies = self._replies.split(b"\n", 1)
        return line.decode()

    def close(self) -> None:
        if self._proc.stdin is not None:
            self._proc.stdin.close()
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._log.close()


_idle: list[Zygote] = []
_idle_lock = threading.Lock()
_logs: list[Path] = []  # the zygotes' stderr (why one died), removed at exit


def _close_all() -> None:
    while _idle:
        _idle.pop().close()
    for log in _logs:
        log.unlink(missing_ok=True)


atexit.register(_close_all)


def run(args: list[str], cwd: Path, env: dict[str, str],
        timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """`lockguard ARGS` in `cwd` with exactly `env`, as subprocess.run(capture_output=True,
    text=True, stdin=DEVNULL, timeout=...) would give it: on timeout the process is killed and
    subprocess.TimeoutExpired raised. Any number of threads may call it at once."""
    with _idle_lock:
        zygote = _idle.pop() if _idle else None
    if zygote is None:
        fd, log = tempfile.mkstemp(prefix="lockguard-zygote-", suffix=".log")
        os.close(fd)
        _logs.append(Path(log))
        zygote = Zygote(Path(log))
    cmd = ["lockguard", *args]
    with tempfile.TemporaryDirectory(prefix="lockguard-run-") as streams:
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        pid = zygote.start(args, cwd, env, out, err, new_session=False)
        code = zygote.wait(timeout)
        if code is None:
            os.kill(pid, signal.SIGKILL)  # as subprocess.run does: the process, not its tree
            zygote.wait(60)
        stdout, stderr = out.read_text(), err.read_text()
    with _idle_lock:
        _idle.append(zygote)
    if code is None:
        raise subprocess.TimeoutExpired(cmd, timeout or 0, output=stdout, stderr=stderr)
    return subprocess.CompletedProcess(cmd, code, stdout, stderr)


def kill_group(pid: int) -> None:
    """SIGKILL a child and everything it started (its session's process group)."""
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        try:
            os.kill(pid, signal.SIGKILL)  # killed before it became its group's leader
        except ProcessLookupError:
            pass


if __name__ == "__main__":
    serve()
