"""The one way lockguard runs a child process (trainings, environment builds, resolvers).

Every child runs under a small supervisor (lockguard/supervisor.py, started by the host
interpreter as the leader of a session of its own) which gives it stdin from /dev/null, relays
its output into a capped log file, enforces a hard timeout, and kills the child's whole tree --
daemons that called setsid or double-forked included -- when the child exits, at the timeout,
when lockguard asks, and when lockguard dies by any means (the supervisor watches a pipe only
lockguard holds). Nothing here keeps a child's output in memory.

Interrupts: `install_signal_handlers()` (called by the CLI) makes SIGINT and SIGTERM kill every
running tree at once and raise `Interrupted`, a KeyboardInterrupt, so both end the way Ctrl-C
does: temporary directories removed, "interrupted" on stderr, exit 130. A SIGKILL cannot be
handled; the supervisors still see their pipe close and kill their trees.
"""

from __future__ import annotations

import marshal
import math
import os
import select
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from lockguard.allowlist import drop_own_secrets
from lockguard.errors import LockguardError, tail
from lockguard.sizes import format_size
from lockguard.supervisor import descendants, PR_SET_DUMPABLE, prctl

# lockguard importable in a `python -I -S -c` of the host interpreter (no site, no PYTHONPATH).
IMPORTABLE = f"import sys; sys.path.append({str(Path(__file__).resolve().parent.parent)!r}); "
# -I -S: the supervisor needs nothing but the standard library, and no user site, PYTHONPATH or
# sitecustomize may slow it down or change what it does. Imported rather than run as a script,
# so it starts from its cached bytecode instead of being compiled every time.
_SUPERVISE = IMPORTABLE + "from lockguard.supervisor import main; sys.exit(main())"
_SUPERVISOR_ENV = ("PATH", "LD_LIBRARY_PATH", "DYLD_LIBRARY_PATH")  # to start the interpreter
HEAD_BYTES = 1_000_000  # of each output stream, kept as it comes
TAIL_BYTES = 256 * 1024  # of each output stream, kept from its end
GRACE_S = 0.5  # between SIGTERM and SIGKILL
OUTPUT_TAIL_BYTES = 64 * 1024  # of the log, kept in Completed.output for error messages


class ProcessError(LockguardError):
    """A command could not be started (no such program, an unusable working directory)."""


class Interrupted(KeyboardInterrupt):
    """lockguard got SIGINT or SIGTERM; every child tree has been killed."""


@dataclass(frozen=True)
class Completed:
    """How a supervised child (process.run) ended: exit code or signal, timeout or memory kill,
    and its capped log, of which `output` keeps the end for error messages."""

    argv: tuple[str, ...]
    code: int | None  # exit code; -N when a signal N ended it
    timed_out: bool
    log: Path  # stdout (and stderr, unless it had a log of its own), capped
    output: str  # the end of the log, for error messages
    seconds: float
    timeout: float | None = None
    leftovers: int = 0  # processes still running when the child exited, killed
    omitted: int = 0  # bytes of output the cap left out of the log(s)
    memory_limit: int | None = None  # bytes the child's tree may hold resident
    memory_killed: int | None = None  # bytes it held when it was killed for exceeding them

    def tail(self, lines: int = 15) -> str:
        """The last `lines` lines of the output kept: where a failure's reason usually is, for a
        one-screen error."""
        return tail(self.output, lines)

    def describe(self) -> str:
        """How it ended, for messages: 'exit code 1', 'killed by SIGSEGV', 'timed out ...'."""
        if self.timed_out:
            return f"no result after {self.timeout:g} s (killed)"
        if self.memory_killed is not None:
            return (f"killed at {format_size(self.memory_killed)} resident, over its memory "
                    f"limit of {format_size(self.memory_limit or 0)}")
        if self.code is not None and self.code < 0:
            try:
                return f"killed by {signal.Signals(-self.code).name}"
            except ValueError:
                return f"killed by signal {-self.code}"
        return f"exit code {self.code}"


@dataclass
class _Live:
    proc: subprocess.Popen[bytes]
    owner: int  # the thread waiting on it
    done: threading.Event


_live: dict[int, _Live] = {}
_registry = threading.RLock()  # re-entered by a signal handler that lands inside run()
_interrupted = threading.Event()
_first_signal = 0.0


def run(argv: Sequence[str], *, log: Path, timeout: float | None = None,
        env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
        stderr_log: Path | None = None, header: str | None = None,
        on_line: Callable[[str], None] | None = None,
        memory_limit: int | None = None,
        alongside: Callable[[], None] | None = None,
        sandbox: Mapping[str, object] | None = None) -> Completed:
    """Run `argv` to completion under a supervisor and say how it ended.

    stdout and stderr go to `log` (stderr to `stderr_log` if given), truncated first and
    started with `header`; each stream keeps its first HEAD_BYTES and last TAIL_BYTES. At
    `timeout` seconds the tree is killed and `timed_out` is set; once the tree holds more than
    `memory_limit` bytes resident it is killed and `memory_killed` says how much it held
    (supervisor.py: how that is measured). `on_line` is called from this thread with the
    latest line of the log, a few times a second (progress display). `alongside` is called in
    this thread as soon as the child's supervisor is started, before waiting for the end: work
    the result depends on that need not delay the start; what it raises kills the tree and is
    raised from here. `sandbox`: what the child is confined to before its exec
    (lockguard.sandbox.Sandbox.spec); None: it runs as lockguard does.
    Raises ProcessError when the command cannot start, Interrupted after an interrupt.
    """
    argv = tuple(str(a) for a in argv)
    if timeout is not None and not math.isfinite(timeout):
        timeout = None
    log = Path(log)
    try:
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"{header}\n" if header else "", encoding="utf-8")
        if stderr_log is not None:
            Path(stderr_log).write_bytes(b"")
    except OSError as exc:
        raise ProcessError(f"{exc.filename or log}: cannot write the log of {argv[0]}: "
                           f"{exc.strerror or exc}") from None
    job = {"argv": list(argv), "stdout": str(log.resolve()),
           "stderr": str(Path(stderr_log).resolve()) if stderr_log else None,
           # Always given: the supervisor itself starts with no environment (below).
           "env": dict(env) if env is not None else dict(os.environ),
           "cwd": str(cwd) if cwd is not None else None,
           "timeout": timeout, "head": HEAD_BYTES, "tail": TAIL_BYTES, "grace": GRACE_S,
           "memory_limit": int(memory_limit) if memory_limit else None,
           "sandbox": dict(sandbox) if sandbox else None}
    start = time.perf_counter()
    live = _start(job)
    try:
        if alongside is not None:
            try:
                alongside()
            except BaseException:
                if _interrupted.is_set():
                    raise Interrupted() from None  # an interrupt, not what the work found
                raise
        report = _wait(live.proc, log, on_line, timeout)
    finally:
        _finish(live)
    seconds = time.perf_counter() - start
    if _interrupted.is_set():
        raise Interrupted()
    if report.get("error"):
        raise ProcessError(report["error"])
    return Completed(argv=argv, code=report.get("code"), timed_out=bool(report.get("timed_out")),
                     log=log, output=_read_end(log, OUTPUT_TAIL_BYTES), seconds=seconds,
                     timeout=timeout,
                     leftovers=int(report.get("leftovers") or 0),
                     omitted=int(report.get("omitted") or 0), memory_limit=memory_limit,
                     memory_killed=report.get("memory"))


@dataclass(frozen=True)
class Captured:
    """A short plumbing command's whole output (capture)."""

    argv: tuple[str, ...]
    code: int | None  # None: killed at its timeout
    stdout: bytes
    stderr: bytes

    @property
    def timed_out(self) -> bool:
        """Whether the command was killed at its timeout (then it has no exit code)."""
        return self.code is None


def capture(argv: Sequence[str], *, timeout: float, cwd: Path | str | None = None,
            env: Mapping[str, str] | None = None, input: bytes | None = None) -> Captured:
    """Run a short plumbing command (git) to completion and keep all of its output in memory.

    For commands whose output is data, not a log (a file's text at a ref, a status), and which
    are cheap enough that the supervisor's start-up (tens of milliseconds) would be most of their
    cost: the child gets its own session, `input` (or nothing) on stdin and a hard timeout, and
    is killed with lockguard's other children on an interrupt. Spawns no daemons to reap, so it
    needs no subreaper. Raises ProcessError when it cannot start, Interrupted after an
    interrupt."""
    argv = tuple(str(a) for a in argv)
    with _registry:
        if _interrupted.is_set():
            raise Interrupted()
        try:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None
                                    else subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, cwd=cwd,
                                    env=dict(env) if env is not None else None,
                                    start_new_session=True)
        except OSError as exc:
            raise ProcessError(f"cannot run {argv[0]}: {exc.strerror or exc}") from None
        live = _Live(proc, threading.get_ident(), threading.Event())
        _live[proc.pid] = live
    try:
        try:
            out, err = proc.communicate(input, timeout=timeout)
            code: int | None = proc.returncode
        except subprocess.TimeoutExpired:
            _kill_group(proc.pid)
            out, err = proc.communicate()
            code = None
    finally:
        if proc.poll() is None:
            _kill_group(proc.pid)
            proc.wait()
        with _registry:
            _live.pop(proc.pid, None)
        live.done.set()
    if _interrupted.is_set():
        raise Interrupted()
    return Captured(argv, code, out, err)


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def _start(job: dict) -> _Live:
    data = marshal.dumps(job)  # what the supervisor reads without importing json
    payload = len(data).to_bytes(8, "little") + data
    with _registry:
        if _interrupted.is_set():
            raise Interrupted()
        proc = None
        try:
            # No more environment than an interpreter needs to start: the job carries the
            # child's, and the supervisor's /proc/<pid>/environ is one more place a secret of
            # lockguard's would otherwise sit.
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _SUPERVISE],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    env={k: os.environ[k] for k in _SUPERVISOR_ENV
                                         if k in os.environ})
            live = _Live(proc, threading.get_ident(), threading.Event())
            _live[proc.pid] = live
        except BaseException:
            if proc is not None:
                _kill_supervisor(proc)
            raise
    assert proc.stdin is not None
    try:
        # The job fits a pipe buffer unless the environment is huge; then this blocks until
        # the supervisor reads it, which it does first thing.
        proc.stdin.write(payload)
        proc.stdin.flush()
    except BrokenPipeError:
        pass  # it died at once; its output says why
    except BaseException:
        _finish(live)
        raise
    return live


def _wait(proc: subprocess.Popen[bytes], log: Path,
          on_line: Callable[[str], None] | None, timeout: float | None) -> dict:
    """Read the supervisor's report; it arrives when the child's tree is dead."""
    assert proc.stdout is not None
    fd = proc.stdout.fileno()
    # A backstop only: the supervisor enforces the timeout itself.
    deadline = None if timeout is None else time.monotonic() + timeout + GRACE_S + 30
    out = bytearray()
    position = 0
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    while True:
        wait = 0.25 if on_line else 3600.0
        if deadline is not None:
            wait = min(wait, max(0.0, deadline - time.monotonic()))
        if poller.poll(int(wait * 1000)):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
            if len(out) >= 8 and len(out) == 8 + int.from_bytes(out[:8], "little"):
                break  # the whole report: the supervisor is exiting
            if len(out) > 1 << 20:  # a broken supervisor: its report is a few hundred bytes
                del out[:-(1 << 16)]
        if on_line:
            position = _follow(log, position, on_line)
        if deadline is not None and time.monotonic() >= deadline:
            _kill_supervisor(proc)
            return {"code": None, "timed_out": True}
    proc.wait()
    report = None
    size = int.from_bytes(out[:8], "little")
    if len(out) == 8 + size:
        try:
            report = marshal.loads(bytes(out[8:]))
        except (ValueError, EOFError, TypeError):
            pass
    if not isinstance(report, dict):
        if _interrupted.is_set():
            return {}
        # Killed from outside (the OOM killer, say): the run failed, lockguard did not. Its
        # child got SIGKILL with it (PR_SET_PDEATHSIG); report the supervisor's end as the run's.
        return {"code": proc.returncode, "timed_out": False}
    return report


def _follow(log: Path, position: int, on_line: Callable[[str], None]) -> int:
    """Pass the last complete line written to `log` since `position` to `on_line`."""
    try:
        with open(log, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            if size <= position:
                return position
            start = max(position, size - 8192)
            f.seek(start)
            data = f.read(size - start)
    except OSError:
        return position
    end = data.rfind(b"\n")
    if end < 0:
        return position if size - position < 8192 else size
    lines = [ln for ln in data[:end].decode("utf-8", "replace").splitlines() if ln.strip()]
    if lines:
        on_line(lines[-1].strip())
    return start + end + 1


def _read_end(path: Path, limit: int) -> str:
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit))
            data = f.read()
    except OSError:
        return ""
    return data.decode("utf-8", "replace")


def _finish(live: _Live) -> None:
    """Make sure the supervisor (and so its tree) is gone, and forget it."""
    proc = live.proc
    try:
        if proc.poll() is None:
            _kill_supervisor(proc)
    finally:
        for stream in (proc.stdin, proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        with _registry:
            _live.pop(proc.pid, None)
        live.done.set()


def _kill_supervisor(proc: subprocess.Popen[bytes], wait: float = GRACE_S + 2) -> None:
    """SIGTERM: the supervisor kills its tree and exits; if it does not in time, SIGKILL."""
    try:
        proc.send_signal(signal.SIGTERM)
        proc.wait(wait)
        return
    except subprocess.TimeoutExpired:
        pass
    except OSError:
        return
    _kill_hard(proc.pid)
    proc.wait()


def _kill_hard(supervisor: int) -> None:
    """SIGKILL a supervisor that did not stop, and everything below it (it is their subreaper,
    so they are all still its descendants)."""
    for pid, _ in descendants(supervisor):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    try:
        os.killpg(supervisor, signal.SIGKILL)
    except OSError:
        pass


def guard_self() -> None:
    """Make lockguard's process undumpable (no process of its user may read its memory or
    /proc/<pid>/environ, where CI secrets it was started with stay) and drop from its
    environment the credentials no child of its is given (allowlist.drop_own_secrets):
    called once, before anything runs a lock's code."""
    prctl(PR_SET_DUMPABLE, 0)
    drop_own_secrets()


def interrupted() -> bool:
    """Whether lockguard was interrupted (kill_all; never cleared, as no run starts after it):
    work that waits on something other than a child process (another lockguard's lock) asks,
    and stops."""
    return _interrupted.is_set()


def wait_interrupted(seconds: float) -> bool:
    """Wait up to `seconds`, ending at once when lockguard is interrupted; whether it was."""
    return _interrupted.wait(seconds)


def kill_all(wait: float = GRACE_S + 1.5) -> None:
    """Kill every running child tree; no new one starts afterwards. Returns once the
    supervisors other threads wait on are gone; those still there after `wait` s get SIGKILL."""
    with _registry:
        _interrupted.set()
        live = list(_live.values())
    for handle in live:
        try:
            handle.proc.send_signal(signal.SIGTERM)
        except OSError:
            pass
    me = threading.get_ident()
    deadline = time.monotonic() + wait
    for handle in live:
        if handle.owner != me:  # our own is cleaned up as the exception unwinds run()
            handle.done.wait(max(0.0, deadline - time.monotonic()))
    for handle in live:
        if handle.owner != me and not handle.done.is_set():
            _kill_hard(handle.proc.pid)


def install_signal_handlers() -> None:
    """SIGINT and SIGTERM: kill every child tree, then raise Interrupted in the main thread.

    Signals repeated while that unwinds (a second Ctrl-C) are ignored for a few seconds, so
    the clean-up they would cut short -- temporary directories -- still happens."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, _on_signal)


def _on_signal(signum: int, frame: object) -> None:
    global _first_signal
    now = time.monotonic()
    repeated = _interrupted.is_set() and _first_signal and now - _first_signal < 5
    if not _first_signal:
        _first_signal = now
    if not repeated:
        kill_all()
        raise Interrupted()
