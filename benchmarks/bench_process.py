"""What the process supervisor adds to every run lockguard starts.

    python benchmarks/bench_process.py [--repeat 30]

Runs the same tiny command (`python -I -S -c pass`) bare (subprocess.run, stdin from /dev/null),
through lockguard.process.run, and through it with a memory limit (as every training run has),
interleaved so all see the same machine load, and reports per-run wall time (median and best)
and the CPU time of the child processes (the supervisor's own start-up is most of the
difference). Then what the memory limit costs while a run lasts: a child that sleeps 2 s, with
and without a limit, the CPU time of the supervisor's measurements per second of run. Writes
benchmarks/results/process.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path.insert(0, str(REPO))

from lockguard import process  # noqa: E402

CMD = [sys.executable, "-I", "-S", "-c", "pass"]
SLEEP_S = 2.0


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(func) -> tuple[float, float]:
    cpu, start = children_cpu(), time.perf_counter()
    func()
    return time.perf_counter() - start, children_cpu() - cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "out.log"

        def bare() -> None:
            subprocess.run(CMD, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, check=True)

        def supervised() -> None:
            process.run(CMD, log=log, timeout=60)

        def limited() -> None:
            process.run(CMD, log=log, timeout=60, memory_limit=8 << 30)

        runs: dict[str, list[tuple[float, float]]] = {"bare": [], "supervised": [],
                                                      "supervised_memory_limit": []}
        for _ in range(args.repeat):
            runs["bare"].append(measure(bare))
            runs["supervised"].append(measure(supervised))
            runs["supervised_memory_limit"].append(measure(limited))
        sleeper = [sys.executable, "-I", "-S", "-c", f"import time; time.sleep({SLEEP_S})"]
        polls: dict[str, list[float]] = {"unlimited": [], "limited": []}
        for _ in range(max(3, args.repeat // 10)):
            for name, limit in (("unlimited", None), ("limited", 8 << 30)):
                polls[name].append(measure(lambda: process.run(
                    sleeper, log=log, timeout=60, memory_limit=limit))[1])
    out: dict = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0],
                             "load_1min": round(os.getloadavg()[0], 2)}}
    for name, samples in runs.items():
        walls = [w for w, _ in samples]
        out[name] = {"wall_median_ms": round(statistics.median(walls) * 1000, 1),
                     "wall_best_ms": round(min(walls) * 1000, 1),
                     "cpu_median_ms": round(statistics.median(c for _, c in samples) * 1000, 1)}
    out["added_ms"] = {key: round(out["supervised"][key] - out["bare"][key], 1)
                       for key in ("wall_median_ms", "wall_best_ms", "cpu_median_ms")}
    out["memory_limit_added_ms"] = {
        key: round(out["supervised_memory_limit"][key] - out["supervised"][key], 1)
        for key in ("wall_median_ms", "wall_best_ms", "cpu_median_ms")}
    cost = statistics.median(polls["limited"]) - statistics.median(polls["unlimited"])
    out["memory_polling_cpu_ms_per_s"] = round(cost * 1000 / SLEEP_S, 2)
    print(json.dumps(out, indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "process.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
