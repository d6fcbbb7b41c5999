"""Where the test suite's time goes: every process it starts, attributed to the test that started
it and sorted into what it is (a training, an environment install, Docker, a browser...).

bench_tests.py --only profile runs the whole suite under `strace -f` (process starts and ends
only, through a seccomp filter, so the suite runs at nearly full speed) with this module loaded
as a pytest plugin (`-p dev.suite_profile`), which writes when each test began and ended
on which worker. `profile(log, clock)` joins the two: a process belongs to the test its worker
was running when the process started (the worker is found up its parents: lockguard's commands
are forked from a zygote the worker started, trainings from lockguard).

Times are wall-clock seconds, each process's clipped to the test it belongs to. A worker's
seconds of one kind are the union of the intervals in which at least one process of that kind
ran (a check runs its trainings side by side: their process seconds can exceed the test's), so
no kind adds up to more than the workers' busy time; two kinds can overlap (an install beside a
training). A process inside another counted one (the compilers a training starts, the installer
a lockguard command runs) counts as the outer one. A module's shared fixtures (an environment,
a memoised recording) run in the test that first needed them: the per-module figures say what a
module costs, the per-test ones where inside it.
"""

from __future__ import annotations

import os
import re
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import pytest

# The file the plugin appends its lines to (worker pid, start, end, test id). Not LOCKGUARD_*:
# lockguard refuses variables of its prefix that it does not know.
CLOCK_ENV = "BENCH_TEST_CLOCK"

# What strace is asked to trace: process starts (execve), the forks and threads that make the
# process tree, and the exit lines that end each (signal lines filtered, but not all of them:
# without any, strace leaves out the `+++ killed by` line of a process a test kills).
STRACE_OPTIONS = ("--seccomp-bpf", "-f", "-ttt", "-q", "-s", "400",
                  "-e", "trace=execve,clone,clone3,fork,vfork", "-e", "signal=!SIGCHLD,SIGURG")


# --------------------------------------------------------------------------- the pytest plugin

@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Runs where the test runs (a worker, or pytest itself without xdist; xdist's controller
    only relays reports): when it began and ended, setup and teardown included."""
    started = time.time()
    try:
        return (yield)
    finally:
        path = os.environ.get(CLOCK_ENV)
        if path:
            line = f"{os.getpid()}\t{started:.6f}\t{time.time():.6f}\t{item.nodeid}\n"
            with open(path, "a", encoding="utf-8") as out:  # one short append: atomic
                out.write(line)


# --------------------------------------------------------------------------- the strace log

@dataclass(eq=False)
class Proc:
    """One process (or thread) from its fork to its exit: pids are reused within a long run,
    so a pid seen again after its exit is a new Proc."""
    pid: int
    parent: Proc | None = None
    start: float | None = None  # its fork, then its last successful execve
    end: float | None = None
    argv: str = ""
    kind: str | None = None


_LINE = re.compile(r"^(\d+)\s+(\d+\.\d+)\s+(.*)$")
_CLONE = re.compile(r"^(?:<\.\.\. )?(?:clone3?|v?fork)\b.*\)\s*=\s*(\d+)$")
_ARGV = re.compile(r"\[(.*)\], 0x[0-9a-f]+")  # up to the environment's pointer: an argument
_PID_CHANGED = re.compile(r"<pid changed to (\d+) \.\.\.>$")  # may hold "], "
_SUPERSEDED = re.compile(r"^\+\+\+ superseded by execve in pid (\d+) \+\+\+$")


def read_strace(log: Path) -> list[Proc]:
    """Every process and thread of an strace log taken with STRACE_OPTIONS."""
    seen: list[Proc] = []
    live: dict[int, Proc] = {}
    pending: dict[int, str] = {}  # an execve's argv until strace says it succeeded

    def proc(pid: int, ts: float) -> Proc:
        p = live.get(pid)
        if p is None or p.end is not None:  # first seen, or a reused pid
            p = live[pid] = Proc(pid, start=ts)
            seen.append(p)
        return p

    def argv_of(rest: str) -> str:
        m = _ARGV.search(rest)
        return m.group(1) if m else rest

    with open(log, encoding="utf-8", errors="replace") as lines:
        for line in lines:
            m = _LINE.match(line.rstrip("\n"))
            if not m:
                continue
            pid, ts, rest = int(m.group(1)), float(m.group(2)), m.group(3)
            clone = _CLONE.match(rest)
            if clone:
                kid = proc(int(clone.group(1)), ts)  # its own lines may come first
                kid.parent = proc(pid, ts)
            elif rest.startswith("execve("):
                changed = _PID_CHANGED.search(rest)
                if changed:  # a thread's execve: the process goes on under the leader's pid
                    pending[int(changed.group(1))] = argv_of(rest)
                    proc(pid, ts).end = ts
                elif rest.endswith("<unfinished ...>"):
                    pending[pid] = argv_of(rest)
                elif rest.endswith("= 0"):
                    p = proc(pid, ts)
                    p.start, p.argv = ts, argv_of(rest)
            elif rest.startswith("<... execve resumed>") and rest.endswith("= 0"):
                p = proc(pid, ts)
                p.start, p.argv = ts, pending.pop(pid, "")
            elif _SUPERSEDED.match(rest):
                p = proc(pid, ts)
                p.start, p.argv = ts, pending.pop(pid, "")
            elif rest.startswith(("+++ exited", "+++ killed")):
                proc(pid, ts).end = ts
    return seen


def kind_of(argv: str) -> str | None:
    """What a process is, from its argv (strace's quoted list), or None: not one of the kinds
    counted (pytest's own, lockguard's, a shell, git...)."""
    program = argv.split(",", 1)[0].strip('"').rsplit("/", 1)[-1]
    # A training in a container (`docker run ... /lockguard/harness/run.py`) is a training too:
    # its client waits for it.
    if "lockguard/harness/run.py" in argv:
        framework = re.search(r'"--framework", "(\w+)"', argv)
        if framework:
            return f"training: {framework.group(1)} (a user script)"
        scenario = re.search(r'"--scenario", "([\w.]+)"', argv)
        prefix = scenario.group(1).split(".", 1)[0] if scenario else "?"
        return f"training: {prefix}"
    if re.search(r"tests/data/\w+_reference\.py", argv):
        return "reference script (the numbers without lockguard)"
    if program in ("uv", "pip", "pip3") or re.search(
            r'"-m", "(pip|ensurepip|venv|build)"', argv):
        return "installs and resolves (uv, pip, venv, ensurepip, build)"
    if program.startswith("docker"):
        return "docker client (builds and runs on the engine)"
    if program.startswith("chrom") or program == "node":
        return "browser and node"
    return None


def _union(intervals: list[tuple[float, float]]) -> float:
    total, last = 0.0, None
    for lo, hi in sorted(intervals):
        if last is None or lo > last:
            total += hi - lo
            last = hi
        elif hi > last:
            total += hi - last
            last = hi
    return total


def profile(log: Path, clock: Path, top: int = 15) -> dict:
    """The workers' busy time split by kind of process, and the modules and tests whose
    trainings took longest."""
    procs = read_strace(log)
    windows: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for line in clock.read_text(encoding="utf-8").splitlines():
        pid, t0, t1, node = line.split("\t", 3)
        windows[int(pid)].append((float(t0), float(t1), node))
    if not windows:
        raise ValueError(f"{clock}: no test's times in it (did pytest run a test?)")
    workers = set(windows)
    for p in procs:
        p.kind = kind_of(p.argv) if p.argv else None

    # The workers' own records: the process of each worker pid alive through its tests.
    worker_procs = {p: p.pid for p in procs if p.pid in workers
                    and (p.start or 0) <= min(w[0] for w in windows[p.pid])
                    and (p.end is None or p.end >= max(w[1] for w in windows[p.pid]))}

    def placed(p: Proc) -> tuple[int, tuple[float, float, str]] | None:
        """The worker and test `p` belongs to, or None: inside a counted process that was
        running when `p` started, or started by no worker."""
        q, hops = p.parent, 0
        while q is not None and q not in worker_procs and hops < len(procs):  # bounded
            if q.kind and (q.start or 0) <= (p.start or 0):
                return None
            q, hops = q.parent, hops + 1
        if q not in worker_procs:
            return None
        worker = worker_procs[q]
        return next(((worker, w) for w in windows[worker] if w[0] <= p.start <= w[1]), None)

    spans: dict[tuple[int, str], list[tuple[float, float]]] = defaultdict(list)
    runs: dict[str, int] = defaultdict(int)
    process_s: dict[str, float] = defaultdict(float)
    tests: dict[str, dict] = {}
    for p in procs:
        if not p.kind or p.start is None:
            continue
        where = placed(p)
        if where is None:
            continue
        worker, (_, t1, node) = where
        span = (p.start, min(p.end if p.end is not None else t1, t1))
        runs[p.kind] += 1
        process_s[p.kind] += span[1] - span[0]
        spans[worker, p.kind].append(span)
        if p.kind.startswith("training"):
            row = tests.setdefault(node, {"test": node, "trainings": 0, "spans": []})
            row["trainings"] += 1
            row["spans"].append(span)
    busy = {w: sum(t1 - t0 for t0, t1, _ in ws) for w, ws in windows.items()}
    kinds = sorted({k for _, k in spans}, key=lambda k: -sum(_union(spans[w, k]) for w in busy))
    by_kind = [{"kind": k, "runs": runs[k], "process_s": round(process_s[k], 1),
                "worker_s": round(sum(_union(spans[w, k]) for w in busy), 1)} for k in kinds]
    training_s = sum(_union([s for (w2, k), ss in spans.items() if w2 == w
                             and k.startswith("training") for s in ss]) for w in busy)
    test_s = {n: t1 - t0 for ws in windows.values() for t0, t1, n in ws}
    module_s: dict[str, float] = defaultdict(float)
    for node, seconds in test_s.items():
        module_s[node.split("::")[0]] += seconds
    modules: dict[str, dict] = {}
    for node, row in tests.items():
        name = node.split("::")[0]
        module = modules.setdefault(name, {"module": name, "trainings": 0, "spans": [],
                                           "module_s": round(module_s[name], 1)})
        module["trainings"] += row["trainings"]
        module["spans"] += row["spans"]
        row["test_s"] = round(test_s[node], 1)
    for row in (*tests.values(), *modules.values()):
        row["training_s"] = round(_union(row.pop("spans")), 1)
    root = procs[0]  # pytest itself: strace's wall time also waits for what a test leaked
    return {"pytest_wall_s": round((root.end or root.start) - root.start, 1),
            "workers": len(busy), "worker_s": round(sum(busy.values()), 1),
            "tests": len(test_s),
            "trainings": sum(runs[k] for k in runs if k.startswith("training")),
            "training_worker_s": round(training_s, 1), "by_kind": by_kind,
            "heaviest_modules": sorted(modules.values(), key=lambda r: -r["training_s"])[:top],
            "heaviest_tests": sorted(tests.values(), key=lambda r: -r["training_s"])[:top]}
