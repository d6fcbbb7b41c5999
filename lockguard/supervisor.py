"""The supervisor of one child process. `lockguard.process` runs its main() in a fresh host
interpreter (`python -I -S`), so it uses the standard library only and starts in milliseconds.

lockguard starts it as the leader of a session of its own and sends it the job on stdin: a
marshalled dict after its length (importing json, or signal's enums, would triple the start-up
time). It marks itself a child subreaper, so every process the child starts stays its
descendant -- also one that calls setsid or double-forks to get away -- and can be found in
/proc and killed. The whole tree is killed when

  - the child exits: what it left running is killed, so a daemon holding stdout cannot keep a
    run alive or make anyone wait for the end of the output;
  - the timeout passes;
  - stdin reaches end-of-file: lockguard holds the only write end, so this is lockguard dying,
    by any means, SIGKILL included;
  - SIGTERM, SIGINT or SIGHUP arrives (lockguard's own interrupt handler sends SIGTERM).

The child runs in a process group of its own with stdin from /dev/null; its stdout and stderr
are pipes this process relays into log files, each capped: the first `head` bytes are written as
they come, after that only the last `tail` bytes are kept and written at the end, so any amount
of output costs bounded disk and memory. Killing starts with SIGTERM (a `docker run` client
forwards it to its container) and ends with SIGKILL after `grace` seconds.

A job with a `memory_limit` (bytes) has the resident memory of the child's whole tree measured a
few times a second (every MEMORY_POLL_S, every MEMORY_POLL_NEAR_S once above half the limit; the
first after MEMORY_FIRST_S, so a short child is never measured) and the tree killed when it
exceeds the limit. The tree is found through /proc/<pid>/task/<tid>/children (1.3 ms for a
training of 31 threads, where descendants()'s read of all of /proc took 18 ms on a host of 170
processes) and measured by the sum of its processes' RSS (one small read each; 2-5 ms of CPU per
second of run in all on a loaded host, benchmarks/bench_process.py); only a sum over the limit
is measured again, by PSS (smaps_rollup), which counts a page shared by several processes of the
tree once -- a forked worker's copy-on-write pages, the libraries every rank maps -- so that
only a tree really over the limit is killed. Such a child is also made the kernel's first choice
should the machine run out of memory before a measurement sees it (oom_score_adj 1000). An
address-space limit (RLIMIT_AS) is no substitute: jax, XLA, TensorFlow and CUDA reserve far more
address space than they ever touch.

When everything is dead it writes its report (marshalled the same way) on stdout and exits 0:
    {"code": <exit code, -N for signal N, None if it never ran>, "timed_out": bool,
     "stopped": "exit" | "timeout" | "orphaned" | "signal" | "memory",
     "memory": <bytes resident when it was killed for memory, else None>,
     "omitted": <bytes not logged>, "leftovers": <processes killed after the child exited>,
     "error": <why it could not start>}
"""

import marshal
import os
import select
import sys
import time

from lockguard import landlock

try:
    import _signal as signal  # the functions and numbers without the enum module's import cost
except ImportError:  # pragma: no cover - not CPython
    import signal

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CHUNK = 1 << 16
PIPE_SIZE = 1 << 20  # fewer context switches for a chatty child (Linux caps it for non-root)
MEMORY_FIRST_S = 0.1
MEMORY_POLL_S = 0.25
MEMORY_POLL_NEAR_S = 0.05

_libc = None


def relay(fd, logs, poller, open_outputs):
    """Move what the child wrote on `fd` into its log; at end-of-file stop watching `fd`."""
    data = os.read(fd, PIPE_SIZE)
    if data:
        logs[fd].write(data)
    else:
        poller.unregister(fd)
        open_outputs.discard(fd)


def prctl(option, value):
    """Call Linux prctl(option, value) through libc; True when it succeeded, False where there
    is none (not Linux), and the caller falls back to process groups."""
    global _libc
    try:
        if _libc is None:
            import ctypes

            _libc = ctypes.CDLL(None, use_errno=True)
        return _libc.prctl(option, value, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: process groups are all there is
        return False


def write_all(fd, data):
    """Write all of `data` to `fd`, however many os.write calls a pipe or file takes."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class CappedLog:
    """A log file that keeps the first `head` bytes and the last `tail` bytes of a stream."""

    def __init__(self, path, head, tail):
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o666)
        self.head_left = head
        self.tail_cap = tail
        self.rest = bytearray()
        self.omitted = 0

    def write(self, data):
        """Append `data`: written at once while the head lasts, then kept in memory, trimmed to
        the last `tail` bytes (and counted as omitted) in batches."""
        if self.head_left > 0:
            part = data[:self.head_left]
            write_all(self.fd, part)
            self.head_left -= len(part)
            data = data[len(part):]
        if data:
            self.rest += data
            if len(self.rest) > 2 * self.tail_cap:  # trim in batches: amortised O(1) per byte
                cut = len(self.rest) - self.tail_cap
                self.omitted += cut
                del self.rest[:cut]

    def close(self):
        """Write the kept tail, starting at a line start, after a line saying how many bytes
        were omitted (if any), and close the file."""
        rest = self.rest
        if len(rest) > self.tail_cap:
            self.omitted += len(rest) - self.tail_cap
            del rest[:len(rest) - self.tail_cap]
        if self.omitted:
            newline = rest.find(b"\n")  # resume at a line start
            if 0 <= newline < len(rest) - 1:
                self.omitted += newline + 1
                del rest[:newline + 1]
            write_all(self.fd, b"\n[lockguard: %d bytes of output omitted here]\n" % self.omitted)
        write_all(self.fd, bytes(rest))
        os.close(self.fd)


def read_exactly(fd, size):
    """`size` bytes read from `fd`; None when it reaches end-of-file first (lockguard went
    away)."""
    data = b""
    while len(data) < size:
        chunk = os.read(fd, size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def read_job():
    """The job lockguard sends: 8 bytes of length, then the marshalled dict."""
    size = read_exactly(0, 8)
    if size is None:
        return None  # lockguard went away before sending it
    data = read_exactly(0, int.from_bytes(size, "little"))
    return None if data is None else marshal.loads(data)


def send_report(report):
    """Write the report on stdout as the job came: 8 bytes of length (little-endian), then the
    marshalled dict."""
    data = marshal.dumps(report)
    write_all(1, len(data).to_bytes(8, "little") + data)


def output_pipe():
    """A pipe (read end, write end) for the child's stdout or stderr, enlarged to PIPE_SIZE
    where the kernel allows, so that a chatty child wakes us less often."""
    r, w = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
    except (ImportError, AttributeError, OSError):
        pass
    return r, w


def spawn(job, out_fd, err_fd):
    """Fork and exec the child: own process group, stdin /dev/null, killed if we die."""
    report_r, report_w = os.pipe()  # close-on-exec: EOF means the exec succeeded
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        what = f"cannot run {job['argv'][0]}"
        try:
            signal.set_wakeup_fd(-1)
            for sig in (signal.SIGCHLD, signal.SIGPIPE, signal.SIGXFSZ, *STOP_SIGNALS):
                signal.signal(sig, signal.SIG_DFL)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent:
                os._exit(1)
            if job.get("memory_limit"):
                try:  # raising one's own score needs no privilege
                    with open("/proc/self/oom_score_adj", "w") as f:
                        f.write("1000")
                except OSError:
                    pass
            os.setpgid(0, 0)
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            if job.get("cwd"):
                what = f"cannot enter {job['cwd']}"
                os.chdir(job["cwd"])
                what = f"cannot run {job['argv'][0]}"
            argv = job["argv"]
            sandbox = job.get("sandbox")
            if sandbox:
                # The last step before the exec: what follows runs a lock's code
                # (lockguard/sandbox.py says what the sandbox holds).
                what = "cannot sandbox the run"
                if sandbox.get("prefix"):
                    argv = [*sandbox["prefix"], *argv]  # bubblewrap, which confines inside
                if sandbox.get("landlock"):
                    landlock.confine(**sandbox["landlock"])
                what = f"cannot run {argv[0]}"
            os.execvpe(argv[0], argv, job["env"])  # always given: this process has none
        except BaseException as exc:  # noqa: BLE001 - whatever it is, the parent must hear it
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else repr(exc)
            try:
                os.write(report_w, f"{what}: {reason}".encode("utf-8", "replace"))
            finally:
                os._exit(127)
    os.close(report_w)
    try:
        os.setpgid(pid, pid)  # also here: killpg must not race the child's own setpgid
    except OSError:
        pass
    failure = b""
    while True:
        chunk = os.read(report_r, CHUNK)
        if not chunk:
            break
        failure += chunk
    os.close(report_r)
    return pid, failure.decode("utf-8", "replace") or None


def descendants(root):
    """Live descendants of `root` (pid, state), from /proc; [] where there is no /proc."""
    children = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return []
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        children.setdefault(int(fields[1]), []).append((int(name), fields[0]))
    found, stack = [], [root]
    while stack:
        for pid, state in children.get(stack.pop(), ()):
            found.append((pid, state))
            stack.append(pid)
    return [(pid, state) for pid, state in found if state not in (b"Z", b"X")]


def tree(root):
    """Pids of `root`'s live descendants, through each thread's children list (a process is
    listed under the thread that forked it); descendants()'s scan of /proc where the kernel
    keeps no such list."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return [pid for pid, _ in descendants(root)]  # a kernel without CONFIG_PROC_CHILDREN
    found, stack = [], [root]
    while stack:
        pid = stack.pop()
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue  # gone since it was listed
        for tid in threads:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    children = f.read().split()
            except OSError:
                continue  # the thread or process ended since
            for child in children:
                found.append(int(child))
                stack.append(int(child))
    return found


PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident(pids):
    """The sum of the processes' resident set sizes, in bytes (a page shared by several
    counts in each)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass  # exited since
    return total


def proportional(pids):
    """The sum of the processes' proportional set sizes (a page shared by n processes counts
    1/n in each), in bytes; None where the kernel has no smaps_rollup (before 4.14)."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup", "rb") as f:
                data = f.read()
        except FileNotFoundError:
            if not os.path.exists("/proc/self/smaps_rollup"):
                return None
            continue  # exited since
        except OSError:
            continue
        at = data.find(b"\nPss:")
        if at >= 0:
            total += int(data[at + 5:data.index(b"kB", at)]) * 1024
    return total


class Supervisor:
    """The supervisor's state: the child, its exit status once reaped, and the wakeup pipe
    through which SIGCHLD and the stop signals interrupt its poll (they are handled from the
    start, never fatal)."""

    def __init__(self):
        self.child = None
        self.child_status = None
        self.leftovers = 0
        self.wake_r, wake_w = os.pipe()
        os.set_blocking(self.wake_r, False)
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
        for sig in (signal.SIGCHLD, *STOP_SIGNALS):
            signal.signal(sig, lambda *_: None)  # the wakeup fd says which arrived

    def reap(self):
        """Collect every exited child (orphans reparented to us too); False when none is left."""
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return False
            if pid == 0:
                return True
            if pid == self.child:
                self.child_status = status

    def wakeups(self):
        """The signal numbers that arrived since the last call, as bytes (one each, from the
        wakeup pipe); b"" when none did."""
        try:
            return os.read(self.wake_r, 512)
        except BlockingIOError:
            return b""

    def stop_requested(self):
        """Whether SIGTERM, SIGINT or SIGHUP arrived since the last look (the pipe is drained,
        other signals are dropped)."""
        arrived = self.wakeups()
        return any(sig in arrived for sig in STOP_SIGNALS)

    def signal_all(self, sig):
        """Send `sig` to the child's process group (while it is unreaped) and to every
        descendant found in /proc; those descendants, as (pid, state) pairs."""
        alive = descendants(os.getpid())
        if self.child_status is None:
            try:
                os.killpg(self.child, sig)
            except OSError:
                pass
        for pid, _ in alive:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        return alive

    def settle(self, seconds):
        """Wait up to `seconds` for every child to be gone; True when they are."""
        end = time.monotonic() + seconds
        while self.reap():
            remaining = end - time.monotonic()
            if remaining <= 0:
                return False
            select.select([self.wake_r], [], [], min(remaining, 0.05))
            self.wakeups()
        return True

    def tree_memory(self, limit):
        """(bytes resident in the child's tree, whether that is over `limit`): the RSS sum, and
        where it is over, the PSS sum that decides."""
        pids = tree(os.getpid())
        used = resident(pids)
        if used <= limit:
            return used, False
        shared_once = proportional(pids)
        if shared_once is not None:
            used = shared_once
        return used, used > limit

    def kill_tree(self, grace):
        """SIGTERM everything below us, then SIGKILL whatever is still there after `grace` s."""
        if not self.reap():
            return  # no children: for a subreaper that means no descendants at all
        alive = self.signal_all(signal.SIGTERM)
        if self.child_status is not None:
            self.leftovers = len(alive)
        if self.settle(grace):
            return
        end = time.monotonic() + 5.0  # bounded: a process in uninterruptible sleep may linger
        while time.monotonic() < end:
            self.signal_all(signal.SIGKILL)  # again and again: a fork may race the scan
            if self.settle(0.05):
                return

    def run(self, job):
        """Run `job` to the end: start the child, watch it, kill its tree, drain and close the
        logs; the report dict (module docstring) for send_report."""
        logs, (out_w, err_w) = open_logs(job)
        self.child, error = spawn(job, out_w, err_w)
        for fd in {out_w, err_w}:
            os.close(fd)
        if error is not None:
            self.reap()
            for log in logs.values():
                log.close()
            return {"code": None, "timed_out": False, "stopped": "exit", "omitted": 0,
                    "leftovers": 0, "error": error}
        open_outputs = set(logs)
        stopped, killed_at = self.watch(job, logs, open_outputs)
        self.kill_tree(float(job.get("grace", 0.5)))
        # Every writer is dead now; only a process that escaped the tree could hold a pipe open.
        drain = select.poll()
        for fd in open_outputs:
            drain.register(fd, select.POLLIN)
        end = time.monotonic() + 0.5
        while open_outputs and time.monotonic() < end:
            for fd, _ in drain.poll(50):
                relay(fd, logs, drain, open_outputs)
        omitted = 0
        for fd, log in logs.items():
            log.close()
            omitted += log.omitted
            os.close(fd)
        code = None
        if self.child_status is not None:
            code = os.waitstatus_to_exitcode(self.child_status)
        return {"code": code, "timed_out": stopped == "timeout", "stopped": stopped,
                "memory": killed_at, "omitted": omitted, "leftovers": self.leftovers,
                "error": None}

    def watch(self, job, logs, open_outputs):
        """Relay the child's output until it exits, its time is up, its tree holds more than
        its memory limit, lockguard is gone (stdin closed) or asks it to stop: (why it
        stopped, the bytes the tree held when killed for memory)."""
        timeout = job.get("timeout")
        deadline = None if timeout is None else time.monotonic() + min(float(timeout), 1e9)
        limit = job.get("memory_limit")
        measure_at = time.monotonic() + MEMORY_FIRST_S if limit else None
        killed_at = None
        poller = select.poll()
        for fd in (0, self.wake_r, *logs):
            poller.register(fd, select.POLLIN)
        stopped = None
        while stopped is None:
            wait = None if deadline is None else max(0, int((deadline - time.monotonic()) * 1000))
            if measure_at is not None:
                soon = max(0, int((measure_at - time.monotonic()) * 1000))
                wait = soon if wait is None else min(wait, soon)
            wait = 3_600_000 if wait is None else min(wait, 3_600_000)  # poll takes a C int
            for fd, event in poller.poll(wait):
                if fd in logs:
                    relay(fd, logs, poller, open_outputs)
                elif fd == 0:
                    try:
                        data = os.read(0, CHUNK)
                    except OSError:
                        data = b""
                    if not data:
                        stopped = "orphaned"
                        poller.unregister(0)
                elif fd == self.wake_r:
                    if self.stop_requested():
                        stopped = "signal"
            self.reap()
            if self.child_status is not None:
                stopped = stopped or "exit"
            elif stopped is None and deadline is not None and time.monotonic() >= deadline:
                stopped = "timeout"
            elif stopped is None and measure_at is not None and time.monotonic() >= measure_at:
                used, over = self.tree_memory(limit)
                if over:
                    stopped, killed_at = "memory", used
                near = 2 * used > limit
                measure_at = time.monotonic() + (MEMORY_POLL_NEAR_S if near else MEMORY_POLL_S)
        return stopped, killed_at


def open_logs(job):
    """The pipes the child writes to and the capped logs they fill: ({read end: log},
    (stdout's write end, stderr's write end)); stderr shares stdout's unless it has a file."""
    head, tail = int(job.get("head", 1_000_000)), int(job.get("tail", 256 * 1024))
    logs = {}
    out_r, out_w = output_pipe()
    logs[out_r] = CappedLog(job["stdout"], head, tail)
    err_w = out_w
    if job.get("stderr") and job["stderr"] != job["stdout"]:
        err_r, err_w = output_pipe()
        logs[err_r] = CappedLog(job["stderr"], head, tail)
    return logs, (out_w, err_w)


def main():
    """The supervisor process: read the job from stdin, run it, write the report on stdout.
    Always 0: what went wrong is in the report's `error` (none without a job to run)."""
    supervisor = Supervisor()  # first: from here on a SIGTERM is handled, not fatal
    prctl(PR_SET_CHILD_SUBREAPER, 1)  # where it fails only the process group can be killed
    # Not dumpable: no process of this user (a training among them) may read this one's
    # memory or /proc/<pid>/environ, which holds the job's environment. The child's exec
    # makes it dumpable again, for its own tools.
    prctl(PR_SET_DUMPABLE, 0)
    job = read_job()
    if job is None or supervisor.stop_requested():
        return 0  # lockguard went away or stopped us before there was anything to run
    try:
        status = supervisor.run(job)
    except OSError as exc:  # an unwritable log file
        supervisor.kill_tree(0)
        where = f"{exc.filename}: " if exc.filename else ""
        status = {"code": None, "timed_out": False, "stopped": "exit", "omitted": 0,
                  "leftovers": 0, "error": f"{where}{exc.strerror or exc}"}
    try:
        send_report(status)
    except OSError:
        pass  # lockguard is gone; the tree is dead, which is all that matters now
    os._exit(0)  # nothing left to flush; interpreter teardown would only delay lockguard


if __name__ == "__main__":
    sys.exit(main())
