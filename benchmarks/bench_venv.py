"""What verifying a cached venv before use costs (lockguard.envs.venv.verify).

    python benchmarks/bench_venv.py [--repeat 20] [--lock PATH]

Prepares (builds once, then reuses) the venv of the tests' torch lock (~1 GB, ~22,000
installed files) with lockguard's own builder, then times `verify` — the marker, bin/python and
one stat per file of the manifest — warm, best and median of --repeat runs. For scale it also
times a fixed pure-Python loop: on a loaded machine both grow together.
Writes benchmarks/results/venv.json and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_LOCK = REPO / "tests" / "data" / "torch-2.13.0.txt"
RESULTS = REPO / "benchmarks" / "results"


def calibration() -> float:
    """Seconds for ten million additions in a Python loop: this machine's speed right now."""
    start = time.perf_counter()
    total = 0
    for i in range(10_000_000):
        total += i
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--lock", type=Path, default=TORCH_LOCK)
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    from lockguard.envs import venv
    from lockguard.locks.parser import parse_lock
    from lockguard.progress import Progress

    lock = parse_lock(args.lock)
    env = venv.VenvBackend().prepare(lock, "torch", "cpu", Progress())
    manifest = json.loads((env.path / venv.MANIFEST).read_text())
    files = sum(len(names) for _, _, names, _ in manifest["files"])
    timings = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        problem = venv.verify(env.path, lock, allow_sdist=False)
        timings.append(time.perf_counter() - start)
        if problem is not None:
            raise SystemExit(f"{env.path}: {problem}")
    result = {
        "lock": str(args.lock.relative_to(REPO) if args.lock.is_relative_to(REPO) else args.lock),
        "files": files,
        "manifest_bytes": (env.path / venv.MANIFEST).stat().st_size,
        "verify_best_s": round(min(timings), 4),
        "verify_median_s": round(statistics.median(timings), 4),
        "repeat": args.repeat,
        "python_loop_10M_s": round(calibration(), 3),
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "venv.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
