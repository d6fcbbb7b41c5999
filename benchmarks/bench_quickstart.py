"""The README's first command, cold, from PyPI alone: how long a newcomer waits.

    python benchmarks/bench_quickstart.py [--repeat 1] [--ref HEAD]

Each run takes a fresh clone of REF (default HEAD: commit what you measure), reads the first
command from that clone's README.md (tests/readme.py, as tests/test_quickstart.py does), and runs
it there under `set -x`, whose trace stamps the start of every step (EPOCHREALTIME), with
nothing cached and nothing local:
  * a new venv (the command makes it), empty pip, uv and lockguard caches (PIP_CACHE_DIR,
    UV_CACHE_DIR, LOCKGUARD_CACHE in a temporary folder);
  * PyPI only: PIP_CONFIG_FILE=/dev/null and every other PIP_* / UV_* variable dropped except
    the CA bundle (PIP_CERT), so no pip.conf find-links or local index reaches pip, uv or
    lockguard. Proxy and CA variables (HTTPS_PROXY, SSL_CERT_FILE...) are kept as they are.

Reports the whole command (target <= 60 s), the venv and lockguard install, and the two checks
(the harmless bump, then the jax upgrade; target <= 30 s together), with the load average
before and after, and the CPU seconds the command used (a busy machine stretches wall times far
more than the CPU a command needs). Writes benchmarks/results/quickstart.json (medians of
--repeat runs, every run kept) and the last run's output to benchmarks/results/quickstart.txt,
which is where the README's sample output is copied from.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
TARGETS = {"total_s": 60.0, "checks_s": 30.0}
KEPT = {"PIP_CERT"}  # the CA pip must trust to reach the index at all; not a source of packages


def pypi_only_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not (k.startswith(("PIP_", "UV_")) and k not in KEPT)
           and k not in ("LOCKGUARD_CACHE", "VIRTUAL_ENV", "PYTHONPATH")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_CACHE_DIR=str(tmp / "pip-cache"),
               UV_CACHE_DIR=str(tmp / "uv-cache"), LOCKGUARD_CACHE=str(tmp / "lockguard-cache"))
    return env


def steps(trace: str) -> list[tuple[float, str]]:
    """(start time, command) of every traced simple command."""
    return [(float(m.group(1)), m.group(2))
            for m in re.finditer(r"^\++ (\d+\.\d+) (.*)$", trace, flags=re.M)]


def one_run(ref: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="lockguard-quickstart-") as name:
        tmp = Path(name)
        clone = tmp / "lockguard"
        subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
        subprocess.run(["git", "-C", str(clone), "checkout", "-q", ref], check=True)
        sys.path.insert(0, str(clone / "tests"))
        try:
            import readme
            readme.README = clone / "README.md"
            command = readme.example_command()
        finally:
            sys.path.pop(0)
        load_before = os.getloadavg()
        cpu_before = os.times()
        start = time.time()
        # bash does not take PS4 from the environment when run as root: set it in the script.
        script = f'PS4="+ \\$EPOCHREALTIME "; set -x; {command}'
        proc = subprocess.run(["bash", "-c", script], cwd=clone, env=pypi_only_env(tmp),
                              capture_output=True, text=True, timeout=1800)
        end = time.time()
        cpu_after = os.times()
        load_after = os.getloadavg()
    traced = steps(proc.stderr)
    checks = [t for t, cmd in traced if "lockguard check" in cmd]
    if len(checks) != 2:
        raise SystemExit(f"expected two `lockguard check` steps, traced: {traced}\n"
                         f"{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}")
    return {
        "command": command,
        "rc": proc.returncode,
        "total_s": end - start,
        "venv_and_install_s": checks[0] - start,
        "check_harmless_s": checks[1] - checks[0],
        "check_upgrade_s": end - checks[1],
        "checks_s": end - checks[0],
        # CPU seconds (user + system) of everything the command ran: what another engineer's
        # work on the same cores stretches far less than the wall times.
        "cpu_s": (cpu_after.children_user - cpu_before.children_user
                  + cpu_after.children_system - cpu_before.children_system),
        "summaries": re.findall(r"^(?:PASS|FAIL) check: .*$", proc.stdout, flags=re.M),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "stdout": proc.stdout,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--ref", default="HEAD")
    args = parser.parse_args()
    ref = subprocess.run(["git", "rev-parse", args.ref], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.strip()
    runs = [one_run(ref) for _ in range(args.repeat)]
    keys = ("total_s", "venv_and_install_s", "check_harmless_s", "check_upgrade_s", "checks_s",
            "cpu_s")
    medians = {k: round(statistics.median(r[k] for r in runs), 1) for k in keys}
    result = {
        "machine": {"cores": os.cpu_count(), "python": platform.python_version(),
                    "cpu": next((line.split(":", 1)[1].strip() for line in
                                 Path("/proc/cpuinfo").read_text().splitlines()
                                 if line.startswith("model name")), platform.processor())},
        "ref": ref,
        "command": runs[-1]["command"],
        "index": "PyPI only (PIP_CONFIG_FILE=/dev/null, no PIP_*/UV_* settings)",
        "cold": "fresh clone and venv; empty pip, uv and lockguard caches",
        "targets": TARGETS,
        "median": medians,
        "within_targets": {k: medians[k] <= v for k, v in TARGETS.items()},
        "runs": [{k: (round(v, 1) if isinstance(v, float) else v) for k, v in r.items()
                  if k != "stdout"} for r in runs],
    }
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "quickstart.json").write_text(json.dumps(result, indent=1) + "\n")
    (RESULTS / "quickstart.txt").write_text(runs[-1]["stdout"])
    print(f"{'step':22} {'median s':>9} {'target s':>9}")
    for k in keys:
        target = TARGETS.get(k)
        print(f"{k:22} {medians[k]:9.1f} {target if target is not None else '':>9}")
    print("exit codes:", [r["rc"] for r in runs], "| verdicts:", runs[-1]["summaries"])


if __name__ == "__main__":
    main()
