"""How long lockguard's own tests take: the developer's loop and what CI runs.

    python dev/bench_tests.py [--only fast,suite,ci,profile] [--top 15]

Developer tooling, not a benchmark of lockguard: it measures lockguard's own test suite (the
speed table in docs/performance.md still shows its CI figures, from dev/results/tests.json).

Measures on this machine, one after another (never two test runs at once):
  fast   the fast subset, the command docs/development.md gives (no framework, no Docker,
         pytest-xdist on every core): target <= 60 s on 2 cores; then the same subset one
         test at a time, for the ratio.
  suite  the whole suite in this checkout with its .venv and lockguard's cache as they are
         (warm: environments and images already built); when it passes, what each module
         took goes to tests/durations.json, the order the suite's slow modules are handed to
         the workers in.
  ci     `.ci/run` in a fresh clone of HEAD under a temporary directory, as root, with
         LOCKGUARD_CACHE an empty directory (cold: every environment built, the wheel and
         compiler caches empty), then again in the same clone with that cache (warm). Docker
         images the engine already holds are reused (checked again, not rebuilt); an engine
         without them builds them in the cold run. Targets: cold <= 12 min, warm <= 6 min.
  profile
         the whole suite as `suite` runs it, under `strace -f` (process starts and ends only),
         with dev/suite_profile.py telling which test each worker ran when: the workers'
         busy time split by what ran (trainings per framework, installs, Docker, the browser;
         the rest is pytest and lockguard in-process), and the tests whose trainings took
         longest. Under strace the suite ran some 6 % slower than in `.ci/run` (540 s against
         510 s; its CPU time includes strace's own).

Each records the wall time, the CPU time of the test processes (user + system), the load
average before and after (the machine may be shared: CPU time is the steadier figure), the
outcome counts and the slowest tests and files (from pytest's --junitxml). Results are merged
into dev/results/tests.json, one key per measurement, so that measurements taken at
different times keep their own figures; the table is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "dev" / "results" / "tests.json"
# docs/development.md's loop and the README's test command (its pytest part).
FAST_SERIAL = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow and not docker"]
FAST = [*FAST_SERIAL, "-n", "auto"]
# The whole suite as CI runs it (the README's test command): on every core, the tests that
# judge a timing alone (tests/conftest.py).
SUITE = ["-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "auto", "-ra"]
# What each test module cost in the last `suite` measurement: the order the suite hands its
# slow modules out in (tests/conftest.py).
DURATIONS = REPO / "tests" / "durations.json"
TARGETS = {"fast": 60, "ci_cold": 12 * 60, "ci_warm": 6 * 60}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(cmd: list[str], cwd: Path, env: dict[str, str] | None = None,
        log: Path | None = None) -> dict:
    """Run `cmd`, its output to `log`; wall, CPU and load around it."""
    before_load, before_cpu = load(), children_cpu()
    started = time.perf_counter()
    with open(log or os.devnull, "w") as out:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    return {"command": " ".join(cmd), "exit_code": proc.returncode, "wall_s": round(wall, 1),
            "cpu_s": round(children_cpu() - before_cpu, 1), "load_before": before_load,
            "load_after": load()}


def outcome(log: Path) -> dict[str, int]:
    """pytest's last line: `3 failed, 1200 passed, 1 skipped ... in 59.0s`."""
    text = log.read_text(errors="replace") if log.is_file() else ""
    lines = [ln for ln in text.splitlines() if re.search(r"\b(passed|failed|error)", ln)]
    counts = re.findall(r"(\d+) (passed|failed|skipped|deselected|errors?|xfailed|xpassed)",
                        lines[-1] if lines else "")
    return {word.rstrip("s") if word.startswith("error") else word: int(n) for n, word in counts}


def _test_id(case: ET.Element) -> str:
    """A --junitxml test case's id as pytest prints it: tests/test_x.py::test_y[param]."""
    return f"{case.get('classname', '').replace('.', '/')}.py::{case.get('name')}"


def cases(junit: Path) -> list[tuple[float, str]]:
    """Every test case of a --junitxml report: (seconds, call + setup + teardown), test id."""
    if not junit.is_file():
        return []
    return [(float(case.get("time") or 0), _test_id(case))
            for case in ET.parse(junit).iter("testcase")]


def failures(junit: Path) -> list[str]:
    """The test ids a --junitxml report says failed or errored, with their messages' first
    line: which ones, where a run is otherwise only counts."""
    if not junit.is_file():
        return []
    found = []
    for case in ET.parse(junit).iter("testcase"):
        bad = case.find("failure")
        bad = bad if bad is not None else case.find("error")
        if bad is not None:
            message = (bad.get("message") or "").strip().splitlines()
            found.append(_test_id(case) + (f": {message[0][:200]}" if message else ""))
    return found


def per_file(timed: list[tuple[float, str]]) -> Counter:
    """What each test file took: its tests' seconds added up."""
    files = Counter()
    for seconds, name in timed:
        files[name.split("::")[0]] += seconds
    return files


def module_seconds(timed: list[tuple[float, str]]) -> dict[str, int]:
    """What each test module took, by module name: tests/durations.json's contents."""
    return {Path(f).stem: round(s) for f, s in sorted(per_file(timed).items())}


def slowest(timed: list[tuple[float, str]], top: int) -> dict:
    """The slowest tests and test files."""
    files = per_file(timed)
    ranked = sorted(timed, reverse=True)[:top]
    return {"slowest_tests": [{"test": n, "s": round(s, 2)} for s, n in ranked],
            "slowest_files": [{"file": f, "s": round(s, 1)} for f, s in files.most_common(top)]}


def pytest_run(args: list[str], cwd: Path, top: int, python: str = sys.executable,
               env: dict[str, str] | None = None,
               wrapper: tuple[str, ...] = ()) -> tuple[dict, list[tuple[float, str]]]:
    """One pytest run (under `wrapper`, a command that runs the rest): its measurement, and
    its test cases with their times."""
    with tempfile.TemporaryDirectory(prefix="bench-tests-") as tmp:
        junit, log = Path(tmp) / "junit.xml", Path(tmp) / "pytest.log"
        result = run([*wrapper, python, *args, f"--junitxml={junit}"], cwd, env, log)
        timed = cases(junit)
        result.update(outcome=outcome(log), **slowest(timed, top))
        failed = failures(junit)
        if failed:
            result["failures"] = failed
        if result["exit_code"] not in (0, 1):
            result["log_tail"] = log.read_text(errors="replace")[-3000:]
    return result, timed


def profile_run(top: int) -> dict:
    """The warm suite under strace, its time split by what its processes were
    (dev/suite_profile.py). The log is kept (its path in the result) where the profile
    could not be made of it."""
    import suite_profile  # beside this script; pytest, run in the repository, loads it as
    # dev.suite_profile

    strace = shutil.which("strace")
    if strace is None:
        raise SystemExit("profile: needs strace (Debian: apt-get install strace)")
    tmp = Path(tempfile.mkdtemp(prefix="bench-profile-"))
    log, clock = tmp / "strace.log", tmp / "clock.tsv"
    result, _ = pytest_run([*SUITE, "-p", "dev.suite_profile"], REPO, top,
                           env={**os.environ, suite_profile.CLOCK_ENV: str(clock)},
                           wrapper=(strace, *suite_profile.STRACE_OPTIONS, "-o", str(log)))
    try:
        result["profile"] = suite_profile.profile(log, clock, top)
    except (OSError, ValueError) as exc:  # strace refused, or pytest never ran a test
        result["profile_error"] = f"{type(exc).__name__}: {exc} (kept: {tmp})"
        return result
    shutil.rmtree(tmp, ignore_errors=True)
    return result


def ci_runs(top: int) -> dict:
    """.ci/run in a fresh clone with an empty cache, then again with the cache it filled."""
    if os.geteuid() != 0:
        raise SystemExit("ci: .ci/run installs system packages and runs as root")
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-ci-") as tmp:
        clone, cache = Path(tmp) / "lockguard", Path(tmp) / "cache"
        subprocess.run(["git", "clone", "-q", "--no-local", str(REPO), str(clone)], check=True)
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=clone, check=True,
                              capture_output=True, text=True).stdout.strip()
        env = {**os.environ, "LOCKGUARD_CACHE": str(cache), "CI": "true"}
        env.pop("PYTHONPATH", None)
        for name in ("ci_cold", "ci_warm"):
            log = Path(tmp) / f"{name}.log"
            result = run(["bash", ".ci/run"], clone, env, log)
            result.update(commit=head, outcome=outcome(log))
            text = log.read_text(errors="replace")
            result["slowest_tests"] = re.findall(r"^\s*(\d+\.\d+)s (?:call|setup)\s+(\S+)",
                                                 text, re.M)[:top]
            if result["exit_code"] != 0:
                result["log_tail"] = text[-3000:]
            results[name] = result
            print(f"{name}: {result['wall_s']} s, exit {result['exit_code']}, "
                  f"{result['outcome']}", flush=True)
            # The warm run reinstalls nothing it has: same clone, same .venv, same cache.
        shutil.rmtree(cache, ignore_errors=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="fast",
                        help="fast,suite,ci,profile (default: fast)")
    parser.add_argument("--top", type=int, default=15, help="slowest tests to keep")
    args = parser.parse_args()
    wanted = [w.strip() for w in args.only.split(",") if w.strip()]
    unknown = set(wanted) - {"fast", "suite", "ci", "profile"}
    if unknown:
        parser.error(f"--only: unknown {', '.join(sorted(unknown))}")

    data = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    data["machine"] = {"cores": os.cpu_count(), "python": platform.python_version()}
    measured = {}
    if "fast" in wanted:
        measured["fast"], _ = pytest_run(FAST, REPO, args.top)
        # Side by side: the same subset one test at a time (xdist's gain on this machine).
        measured["fast_serial"], _ = pytest_run(FAST_SERIAL, REPO, args.top)
    if "suite" in wanted:
        measured["suite_warm"], timed = pytest_run(SUITE, REPO, args.top)
        if measured["suite_warm"]["exit_code"] == 0:
            DURATIONS.write_text(json.dumps(module_seconds(timed), indent=1) + "\n")
    if "ci" in wanted:
        measured.update(ci_runs(args.top))
    if "profile" in wanted:
        measured["suite_profile"] = profile_run(args.top)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    for name, result in measured.items():
        result["measured_at"] = stamp
        if name in TARGETS:
            result["target_s"] = TARGETS[name]
        data[name] = result
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(data, indent=1) + "\n")

    print(f"{'what':13} {'wall s':>8} {'cpu s':>8} {'target s':>9}  load before -> after  outcome")
    for name, r in data.items():
        if not isinstance(r, dict) or "wall_s" not in r:
            continue
        target = r.get("target_s", "")
        print(f"{name:13} {r['wall_s']:8} {r['cpu_s']:8} {target:>9}  "
              f"{r['load_before']} -> {r['load_after']}  {r['outcome']}")
    prof = data.get("suite_profile", {}).get("profile")
    if prof:
        print(f"\nsuite_profile: {prof['workers']} workers busy {prof['worker_s']} s in all, "
              f"{prof['tests']} tests, {prof['trainings']} trainings "
              f"({prof['training_worker_s']} s of the workers' time)")
        for row in prof["by_kind"]:
            print(f"  {row['worker_s']:8} s  {row['runs']:5} runs  {row['kind']}")
        for what in ("module", "test"):
            print(f"  the {what}s whose trainings took longest "
                  f"(training s / {what} s, trainings):")
            for row in prof[f"heaviest_{what}s"]:
                print(f"  {row['training_s']:8} / {row[f'{what}_s']:6}  {row['trainings']:3}  "
                      f"{row[what]}")


if __name__ == "__main__":
    main()
