"""The one process runner: real processes, killed in every way lockguard can be killed.

The CLI tests run `--env local` user scenarios of framework numpy in this interpreter (it has
numpy), so no environment is built and each test takes seconds. Processes are found through a
marker in their environment, read from /proc: MARKER=token for the processes a test starts
itself, and for trainings (which see only the allowlisted variables, lockguard/allowlist.py) the
TMPDIR the test gave lockguard, unique to the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from conftest import DATA, make_project
from forked_cli import cli_env

from lockguard import process

MARKER = "LG_PROCESS_TEST"  # not LOCKGUARD_: lockguard refuses names it does not know


_SEEN: dict[str, set[int]] = {}


def marked(token: str) -> list[int]:
    """Live processes (not zombies) whose environment carries MARKER=token, or a TMPDIR naming
    `token` (start's)."""
    needle = f"{MARKER}={token}".encode()
    found = []
    # A supervisor starts with no environment of lockguard's: it is found as the child of a
    # marked process while that lives, and remembered after (a reused pid is improbable here).
    seen = _SEEN.setdefault(token, set())
    parents: dict[int, int] = {}
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            variables = (entry / "environ").read_bytes().split(b"\0")
            if needle not in variables and not any(
                    v.startswith(b"TMPDIR=") and token.encode() in v for v in variables):
                continue
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        if stat[stat.rfind(b")") + 2:][:1] not in (b"Z", b"X"):
            found.append(int(entry.name))
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            stat = (entry / "stat").read_bytes()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if fields[0] not in (b"Z", b"X"):
            parents[int(entry.name)] = int(fields[1])
    grown = True
    while grown:
        grown = False
        for pid, parent in parents.items():
            if pid not in found and (parent in found or pid in seen):
                found.append(pid)
                grown = True
    seen.update(found)
    return found


def gone_within(token: str, seconds: float) -> list[int]:
    """The marked processes still alive after waiting up to `seconds` for them to go."""
    deadline = time.monotonic() + seconds
    while (left := marked(token)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


@pytest.fixture
def token() -> str:
    value = uuid.uuid4().hex
    yield value
    for pid in marked(value):  # never leave a stray process behind, whatever failed
        os.kill(pid, signal.SIGKILL)


# A training that starts a detached grandchild (new session, holding the harness's stdout),
# says so with a file, then trains "forever".
SLOW = """
    import os, subprocess, sys, time
    def run(steps, seed):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                         start_new_session=True)
        print("training", flush=True)
        open(os.path.join(os.environ["TMPDIR"], "started"), "w").close()  # its scratch
        time.sleep(600)
        return [1.0] * steps
    """


def project(root: Path, scripts: dict[str, str], timeout: float = 120) -> Path:
    config = (f'lock = "new.txt"\nenv = "local"\nsteps = 3\ntimeout = {timeout}\n'
              f'scenarios = {json.dumps(sorted(scripts))}\n')
    for name in scripts:
        config += f'[scenario.{name}]\nscript = "{name}.py"\nframework = "numpy"\n'
    return make_project(root, config, files={f"{n}.py": body for n, body in scripts.items()},
                        locks={"new.txt": DATA / "numpy-2.0.2.txt"})


def start(cwd: Path, token: str, tmp: Path, *args: str, wrapper: str | None = None,
          stdin=subprocess.DEVNULL) -> subprocess.Popen[str]:
    """lockguard in a session of its own (so a signal to its group reaches only it), with a
    TMPDIR of its own that names `token` (the trainings see it: `started` is written beside it)."""
    env = cli_env({MARKER: token, "TMPDIR": str(tmpdir(tmp, token))})
    tmpdir(tmp, token).mkdir(exist_ok=True)
    cmd = [sys.executable, "-m", "lockguard", *args]
    if wrapper:
        cmd = [sys.executable, "-c", wrapper, *args]
    return subprocess.Popen(cmd, cwd=cwd, env=env, stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def tmpdir(tmp: Path, token: str) -> Path:
    return tmp / f"tmpdir-{token}"


def started_at(tmp: Path) -> float | None:
    """When the training wrote `started` in its TMPDIR (below `tmp`); None: not yet."""
    found = next(tmp.rglob("started"), None)
    return found.stat().st_mtime if found is not None else None


def wait_started(proc: subprocess.Popen[str], tmp: Path) -> None:
    deadline = time.monotonic() + 120
    while started_at(tmp) is None:
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the training never started: {proc.communicate()}")
        time.sleep(0.05)
    time.sleep(0.2)  # the grandchild is spawned before the file: it is running


# --- lockguard killed mid-training ------------------------------------------------------------


@pytest.mark.parametrize("how", ["SIGKILL", "SIGTERM"])
def test_killing_lockguard_leaves_no_process_behind(tmp_path, token, how):
    root = project(tmp_path / "p", {"slow": SLOW})
    proc = start(root, token, tmp_path, "check", "--allow-new")
    wait_started(proc, tmp_path)
    assert len(marked(token)) >= 4  # lockguard, supervisor, harness, detached grandchild
    os.kill(proc.pid, getattr(signal, how))
    proc.communicate(timeout=30)
    assert gone_within(token, 2.0) == []
    if how == "SIGTERM":  # handled like Ctrl-C: exit 130, temporary directories removed
        assert proc.returncode == 130
        assert [p for p in tmpdir(tmp_path, token).iterdir() if p.name != "started"] == []


def test_ctrl_c_returns_within_seconds_with_130(tmp_path, token):
    root = project(tmp_path / "p", {"slow": SLOW, "slow2": SLOW})
    proc = start(root, token, tmp_path, "check", "--allow-new")
    wait_started(proc, tmp_path)
    began = time.monotonic()
    os.killpg(proc.pid, signal.SIGINT)  # what a terminal does: the foreground process group
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - began < 3.0
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1] == "lockguard: interrupted"
    assert "Traceback" not in err
    assert gone_within(token, 2.0) == []
    assert [p for p in tmpdir(tmp_path, token).iterdir() if p.name != "started"] == []


# --- what a training can do to lockguard ------------------------------------------------------


def test_detached_child_holding_stdout_times_out_and_dies(tmp_path, token):
    root = project(tmp_path / "p", {"slow": SLOW}, timeout=3)
    proc = start(root, token, tmp_path, "check", "--allow-new", "--format", "json")
    out, err = proc.communicate(timeout=60)
    # From the training's start, not lockguard's: its own start-up is not what is judged.
    assert time.time() - started_at(tmp_path) < 3 + 5
    assert proc.returncode == 1, err
    [verdict] = json.loads(out)["verdicts"]
    assert verdict["verdict"] == "broken"
    assert verdict["error"].startswith("no result after 3 s (killed)")
    assert verdict["error"].splitlines()[-1] == "training"  # the log's tail
    assert gone_within(token, 1.0) == []


def test_a_daemon_left_behind_does_not_hold_the_run(tmp_path, token):
    # A double fork with setsid, holding stdout: the run ends when the training does.
    daemon = """
        import os, time
        def run(steps, seed):
            if os.fork() == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(600)
                os._exit(0)
            return [1.0 / (s + 1) for s in range(steps)]
        """
    root = project(tmp_path / "p", {"daemon": daemon}, timeout=60)
    began = time.monotonic()
    proc = start(root, token, tmp_path, "check", "--allow-new", "--format", "json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert time.monotonic() - began < 30
    assert [v["verdict"] for v in json.loads(out)["verdicts"]] == ["new"]
    assert gone_within(token, 1.0) == []


# The peak of this process's own memory: VmHWM, which starts afresh at exec. (getrusage's
# ru_maxrss does not: Linux carries the forking process's peak across exec, so a child of a
# pytest that has grown to 100 MB reports 100 MB whatever it does.)
RSS_WRAPPER = """
import atexit, sys
def peak():
    with open("/proc/self/status") as f:
        return next(line.split()[1] for line in f if line.startswith("VmHWM:"))
atexit.register(lambda: print("PEAK_RSS_KB", peak(), file=sys.stderr))
sys.argv[0] = "lockguard"
from lockguard.cli import main
main()
"""


def test_100_mb_of_output_costs_lockguard_no_memory(tmp_path, token):
    chatty = """
        import os
        def run(steps, seed):
            block = (b"y" * 1023 + b"\\n") * 1024
            os.write(1, b"first line\\n")
            for _ in range(100):
                os.write(1, block)
            os.write(1, b"the last words\\n")
            os._exit(3)
        """
    quiet = "def run(steps, seed):\n    return [1.0 / (s + 1) for s in range(steps)]\n"
    root = project(tmp_path / "p", {"chatty": chatty, "quiet": quiet})
    peaks = {}
    for name in ("quiet", "chatty"):
        proc = start(root, token, tmp_path, "check", "--allow-new", "--format", "json",
                     "--scenario", name, wrapper=RSS_WRAPPER)
        out, err = proc.communicate(timeout=300)
        assert "PEAK_RSS_KB" in err and out.startswith("{"), (name, out[-2000:], err[-2000:])
        peaks[name] = int(err.split("PEAK_RSS_KB")[-1].split()[0]) / 1024
        verdict = json.loads(out)["verdicts"][0]
    # The old runner held every byte: 100 MB of prints took lockguard to 349 MB. (Here: ~40 MB
    # for either.)
    assert peaks["chatty"] < peaks["quiet"] + 15, (peaks, err[-2000:])
    assert peaks["chatty"] < 100, (peaks, err[-2000:])
    assert verdict["verdict"] == "broken"
    assert "harness ended with exit code 3 and wrote no result" in verdict["error"]
    assert verdict["error"].splitlines()[-1] == "the last words"


def test_the_training_reads_dev_null(tmp_path, token):
    reader = """
        import sys
        def run(steps, seed):
            data = sys.stdin.read()  # lockguard's stdin is an open pipe: this would block
            if data:
                raise ValueError(f"read {data!r} from stdin")
            return [1.0 / (s + 1) for s in range(steps)]
        """
    root = project(tmp_path / "p", {"reader": reader}, timeout=60)
    proc = start(root, token, tmp_path, "check", "--allow-new", "--format", "json",
                 stdin=subprocess.PIPE)
    assert proc.stdin is not None
    proc.stdin.write("typed by someone\n")
    proc.stdin.flush()
    try:
        out, err = proc.communicate(timeout=60)  # communicate closes stdin only at the end
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [v["verdict"] for v in json.loads(out)["verdicts"]] == ["new"]


# --- process.run itself -----------------------------------------------------------------------


def test_run_reports_exit_code_and_logs_both_streams(tmp_path):
    log = tmp_path / "out.log"
    done = process.run([sys.executable, "-c",
                        "import sys; print('to stdout'); print('to stderr', file=sys.stderr);"
                        "sys.exit(3)"], log=log, timeout=30, header="the command")
    assert (done.code, done.timed_out) == (3, False)
    assert log.read_text().splitlines() == ["the command", "to stdout", "to stderr"]
    assert done.tail(1) == "to stderr" and done.describe() == "exit code 3"

    err = tmp_path / "err.log"
    done = process.run([sys.executable, "-c", "import sys; print('out'); print('err', "
                        "file=sys.stderr)"], log=log, stderr_log=err, timeout=30)
    assert (done.code, log.read_text(), err.read_text()) == (0, "out\n", "err\n")

    done = process.run([sys.executable, "-c", "import os, signal; "
                        "os.kill(os.getpid(), signal.SIGSEGV)"], log=log, timeout=30)
    assert done.code == -signal.SIGSEGV and done.describe() == "killed by SIGSEGV"


def test_a_supervisor_killed_from_outside_ends_the_run_not_lockguard(tmp_path):
    """The OOM killer may take the supervisor: the run has failed, lockguard has no bug, and
    the child goes with its supervisor."""
    marker = tmp_path / "child.pid"
    script = (f"import os, time; open({str(marker)!r}, 'w').write(str(os.getpid())); "
              "os.kill(os.getppid(), 9); time.sleep(60)")
    start = time.monotonic()
    done = process.run([sys.executable, "-c", script], log=tmp_path / "out.log", timeout=60)
    assert time.monotonic() - start < 20
    assert done.code == -signal.SIGKILL and done.describe() == "killed by SIGKILL"
    child = int(marker.read_text())
    deadline = time.monotonic() + 2
    while Path(f"/proc/{child}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    stat = Path(f"/proc/{child}/stat")
    assert not stat.exists() or stat.read_text().split()[2] == "Z"  # gone, or a zombie


def test_run_gives_dev_null_as_stdin_and_the_env_it_is_given(tmp_path):
    log = tmp_path / "out.log"
    done = process.run([sys.executable, "-c",
                        "import os, sys; print(os.path.realpath('/proc/self/fd/0'));"
                        "print(repr(sys.stdin.read())); print(os.environ['ONLY']);"
                        "print(os.getcwd())"],
                       log=log, timeout=30, env={"ONLY": "this"}, cwd=tmp_path)
    assert log.read_text().splitlines() == ["/dev/null", "''", "this", str(tmp_path)]
    assert done.code == 0


def test_timeout_kills_the_whole_tree_without_waiting_on_its_pipes(tmp_path, token):
    script = textwrap.dedent("""
        import subprocess, sys, time
        cmd = [sys.executable, "-c", "import time; time.sleep(600)"]
        subprocess.Popen(cmd)                           # same process group
        subprocess.Popen(cmd, start_new_session=True)   # a session of its own, holding stdout
        print("spawned", flush=True)
        time.sleep(600)
        """)
    began = time.monotonic()
    done = process.run([sys.executable, "-c", script], log=tmp_path / "out.log", timeout=2,
                       env={**os.environ, MARKER: token})
    assert done.timed_out and time.monotonic() - began < 2 + 2
    assert done.describe() == "no result after 2 s (killed)"
    assert done.tail() == "spawned"
    assert gone_within(token, 0.5) == []


def test_leftovers_are_killed_when_the_child_exits(tmp_path, token):
    script = ("import subprocess, sys; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(600)'], start_new_session=True); print('bye')")
    began = time.monotonic()
    done = process.run([sys.executable, "-c", script], log=tmp_path / "out.log", timeout=60,
                       env={**os.environ, MARKER: token})
    assert time.monotonic() - began < 5
    assert (done.code, done.leftovers, done.tail()) == (0, 1, "bye")
    assert gone_within(token, 0.5) == []


def test_output_is_capped_keeping_head_and_tail(tmp_path):
    log = tmp_path / "out.log"
    script = ("import os\nos.write(1, b'first\\n')\nline = b'z' * 99 + b'\\n'\n"
              "for _ in range(20): os.write(1, line * 10000)\nos.write(1, b'last\\n')\n")
    done = process.run([sys.executable, "-c", script], log=log, timeout=60)
    size = log.stat().st_size
    assert size <= process.HEAD_BYTES + process.TAIL_BYTES + 100
    note = f"\n[lockguard: {done.omitted} bytes of output omitted here]\n"
    text = log.read_text()
    assert text.startswith("first\n") and text.endswith("z\nlast\n") and note in text
    assert size - len(note) + done.omitted == len("first\n") + 20 * 100 * 10000 + len("last\n")
    assert done.tail(1) == "last"


def test_on_line_follows_the_output(tmp_path):
    seen: list[str] = []
    script = "import time\nfor i in range(4):\n    print('step', i, flush=True)\n    time.sleep(0.4)"
    process.run([sys.executable, "-c", script], log=tmp_path / "out.log", timeout=30,
                on_line=seen.append)
    assert seen and set(seen) <= {f"step {i}" for i in range(4)} and len(set(seen)) >= 2


def test_work_alongside_a_child_runs_after_its_start_and_what_it_raises_kills_the_tree(
        tmp_path, token):
    """`alongside` (a venv's file check beside the training it guards) runs while the child
    starts, and an exception from it ends the run at once, tree and all."""
    script = ("import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', "
              "'import time; time.sleep(600)']); print('started', flush=True); time.sleep(600)")

    class Damaged(Exception):
        pass

    seen: list[int] = []

    def check() -> None:
        deadline = time.monotonic() + 5  # it runs while the child starts: wait to see it
        while not (found := marked(token)) and time.monotonic() < deadline:
            time.sleep(0.02)
        seen.extend(found)
        raise Damaged("the env changed")

    began = time.monotonic()
    with pytest.raises(Damaged):
        process.run([sys.executable, "-c", script], log=tmp_path / "out.log", timeout=60,
                    env={**os.environ, MARKER: token}, alongside=check)
    assert seen and time.monotonic() - began < 5
    assert gone_within(token, 1.0) == []
    # Nothing raised: the run is as without it.
    calls: list[str] = []
    done = process.run([sys.executable, "-c", "print('ok')"], log=tmp_path / "b.log",
                       timeout=30, alongside=lambda: calls.append("checked"))
    assert (done.code, done.tail(), calls) == (0, "ok", ["checked"])


def test_a_command_that_cannot_start_is_one_error(tmp_path):
    with pytest.raises(process.ProcessError, match="cannot run /nonexistent/python: No such"):
        process.run(["/nonexistent/python"], log=tmp_path / "out.log", timeout=5)
    with pytest.raises(process.ProcessError, match=f"cannot enter {tmp_path}/nowhere: No such"):
        process.run([sys.executable, "-c", "pass"], log=tmp_path / "out.log",
                    cwd=tmp_path / "nowhere", timeout=5)


def test_a_caller_killed_by_sigkill_takes_its_tree_along(tmp_path, token):
    """The watchdog pipe: run() in a process that dies without any chance to clean up."""
    caller = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from lockguard import process
        process.run([sys.executable, "-c", "import time; time.sleep(600)"],
                    log=Path({str(tmp_path / 'out.log')!r}), timeout=600)
        """)
    proc = subprocess.Popen([sys.executable, "-c", caller], env={**os.environ, MARKER: token})
    deadline = time.monotonic() + 60
    while len(marked(token)) < 3 and time.monotonic() < deadline:  # caller, supervisor, child
        time.sleep(0.05)
    assert len(marked(token)) == 3
    proc.kill()
    proc.wait()
    assert gone_within(token, 2.0) == []


def test_an_interrupt_ends_a_threads_wait_for_another_builds_lock(tmp_path):
    """A training's rebuild waits in a worker thread for another lockguard's build of the same
    venv (cache.file_lock); Ctrl-C reaches only the main thread, and the command's end waits for
    its threads: the wait must end at the interrupt, not when the other build does."""
    caller = textwrap.dedent(f"""
        import fcntl, threading, time
        from pathlib import Path
        from lockguard import process
        from lockguard.cache import file_lock
        path = Path({str(tmp_path)!r}) / "venv.lock"
        other = open(path, "a+")
        fcntl.flock(other, fcntl.LOCK_EX)  # another lockguard, building (its own open file)
        outcome = []
        def rebuild():
            try:
                with file_lock(path):
                    outcome.append("locked")
            except process.Interrupted:
                outcome.append("interrupted")
        waiter = threading.Thread(target=rebuild, daemon=True)
        waiter.start()
        time.sleep(1.0)
        began = time.monotonic()
        process.kill_all()
        waiter.join(10)
        print(outcome, waiter.is_alive(), round(time.monotonic() - began, 2))
        """)
    out = subprocess.run([sys.executable, "-c", caller], capture_output=True, text=True,
                         timeout=60)
    words = out.stdout.split()
    assert words[:2] == ["['interrupted']", "False"], out
    assert float(words[2]) < 0.5, out


def test_a_wait_for_another_build_is_told_once_after_a_second_and_a_glance_never(tmp_path):
    """A check held up by another's build says so (the venv, image and wheelhouse builds pass
    a line to print); another check glancing at a finished entry holds the lock for
    milliseconds, which is not worth a line."""
    import fcntl
    import threading

    from lockguard.cache import WAIT_TOLD_S, file_lock

    path = tmp_path / "venv.lock"
    for hold, told in ((0.2, []), (WAIT_TOLD_S + 0.5, [
            "Waiting for another lockguard to finish the venv of torch.txt (/v)"])):
        other = open(path, "a+")
        fcntl.flock(other, fcntl.LOCK_EX)  # another lockguard (its own open file)
        threading.Timer(hold, other.close).start()  # closing it releases the lock
        said: list[str] = []
        began = time.monotonic()
        with file_lock(path, "the venv of torch.txt (/v)", said.append):
            waited = time.monotonic() - began
        assert said == told, (hold, waited)
        assert hold - 0.05 <= waited < hold + 0.5


def test_a_cache_on_a_file_system_without_locks_is_one_line_naming_it(tmp_path, monkeypatch):
    import errno
    import fcntl

    from lockguard import cache

    def no_locks(handle, operation):
        raise OSError(errno.ENOLCK, os.strerror(errno.ENOLCK))

    monkeypatch.setattr(fcntl, "flock", no_locks)
    path = tmp_path / "venvs" / "k.lock"
    with pytest.raises(cache.CacheError) as caught:
        with cache.file_lock(path):
            pass
    assert str(caught.value) == (f"{path}: cannot lock lockguard's cache: "
                                 f"{os.strerror(errno.ENOLCK)} (set LOCKGUARD_CACHE to a "
                                 "directory on a local disk)")


def test_kill_all_stops_runs_in_other_threads_promptly(tmp_path, token):
    caller = textwrap.dedent(f"""
        import sys, threading, time
        from pathlib import Path
        from lockguard import process
        outcome = []
        def one(i):
            try:
                process.run([sys.executable, "-c", "import time; time.sleep(600)"],
                            log=Path({str(tmp_path)!r}) / f"{{i}}.log", timeout=600)
                outcome.append("finished")
            except process.Interrupted:
                outcome.append("interrupted")
        threads = [threading.Thread(target=one, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.5)
        began = time.monotonic()
        process.kill_all()
        for t in threads:
            t.join()
        print(sorted(outcome), round(time.monotonic() - began, 2))
        try:
            process.run([sys.executable, "-c", "pass"], log=Path({str(tmp_path)!r}) / "x.log")
        except process.Interrupted:
            print("no new run")
        """)
    out = subprocess.run([sys.executable, "-c", caller], env={**os.environ, MARKER: token},
                         capture_output=True, text=True, timeout=60)
    lines = out.stdout.splitlines()
    assert lines[0].startswith("['interrupted', 'interrupted', 'interrupted'] "), out
    assert float(lines[0].split()[-1]) < 2.0
    assert lines[1] == "no new run"
    assert marked(token) == []


def test_supervisor_overhead_is_small(tmp_path):
    """What the supervisor adds to a run, against a bare subprocess of the same command. It is
    about one more interpreter start, so the bound scales with what one start costs on this
    machine now (a loaded CI box is slow at both); a poll interval or a sleep would break it.
    The real figure comes from benchmarks/bench_process.py."""
    cmd = [sys.executable, "-I", "-S", "-c", "pass"]

    def bare() -> None:
        subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)

    def supervised() -> None:
        process.run(cmd, log=tmp_path / "out.log", timeout=30)

    def best(func) -> float:
        times = []
        for _ in range(7):
            began = time.perf_counter()
            func()
            times.append(time.perf_counter() - began)
        return min(times)

    one_start = best(bare)
    added = best(supervised) - one_start
    print(f"supervisor overhead: {added * 1000:.0f} ms per run ({one_start * 1000:.0f} ms bare)")
    assert added < 5 * one_start + 0.05


def test_an_interrupt_during_the_work_alongside_is_an_interrupt(tmp_path, token):
    """Ctrl-C landing while `alongside` runs (a venv's file check that then finds damage) ends
    the run as an interrupt: never as the work's own error, which would start a rebuild."""
    caller = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from lockguard import process
        class Damaged(Exception):
            pass
        def check():
            process.kill_all()  # what the signal handler does, as the check runs
            raise Damaged("a file changed")
        try:
            process.run([sys.executable, "-c", "import time; time.sleep(600)"],
                        log=Path({str(tmp_path / 'out.log')!r}), timeout=600, alongside=check)
        except process.Interrupted:
            print("interrupted")
        except Damaged:
            print("damaged")
        """)
    out = subprocess.run([sys.executable, "-c", caller], env={**os.environ, MARKER: token},
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "interrupted", out
    assert gone_within(token, 2.0) == []
