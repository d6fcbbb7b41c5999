"""What a venv's bytecode costs when another venv installed the same files.

    python benchmarks/bench_bytecode.py [--repeat 3]

In one run, with a warm uv wheel cache and, each time, a fresh lockguard cache:
- lockguard builds the tests' torch lock (first: it compiles every module), then the same torch
  beside numpy 1.26.4 (second: torch's and its dependencies' bytecode is linked from the first,
  only numpy is compiled; lockguard/envs/bytecode.py);
- bare `uv pip install --compile-bytecode` of that second lock into a new venv: what lockguard's
  every build paid before (uv compiles each venv's modules again);
- bare `uv pip install` of it, without bytecode: the floor (its runs would compile every module
  they import, in memory, every time).
Repeats interleaved; medians and the ratio of lockguard's second build to bare uv's with
bytecode. Writes benchmarks/results/bytecode.json and prints the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from bench_env_build import (RESULTS, TORCH_LOCK, bare_uv, lockguard_build,  # noqa: E402
                             median)

SECOND = TORCH_LOCK.parent / "torch-2.13.0-numpy-1.26.4.txt"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from lockguard.installers import find_uv

    uv = find_uv()
    assert uv, "uv: a dependency of lockguard (pip install -e .)"
    runs: dict[str, list[float]] = {"first": [], "second": [], "bare_uv_bytecode": [],
                                    "bare_uv": []}
    base = Path(tempfile.mkdtemp(prefix="lockguard-bench-bytecode-"))
    caches = {"UV_CACHE_DIR": str(base / "uv")}
    load = [list(os.getloadavg())]
    try:
        bare_uv(uv, SECOND, base / "warm-up", caches)  # the wheels in the cache: not measured
        for i in range(args.repeat):
            where = base / f"run-{i}"
            for compile_bytecode, name in ((True, "bare_uv_bytecode"), (False, "bare_uv")):
                runs[name].append(bare_uv(uv, SECOND, where / name, caches, compile_bytecode))
            # One lockguard cache (where/lockguard) for both: the second finds the first's bytecode.
            runs["first"].append(lockguard_build(TORCH_LOCK, "uv", where, caches))
            runs["second"].append(lockguard_build(SECOND, "uv", where, caches))
            shutil.rmtree(where, ignore_errors=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load.append(list(os.getloadavg()))
    result = {name: median(values) for name, values in runs.items()}
    result.update(runs={name: [round(v, 2) for v in values] for name, values in runs.items()},
                  second_over_bare_uv_bytecode=round(result["second"] / result["bare_uv_bytecode"], 2),
                  load=load, python=sys.version.split()[0])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bytecode.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"torch venv, first (compiles all): {result['first']} s; beside it (links): "
          f"{result['second']} s; bare uv --compile-bytecode: {result['bare_uv_bytecode']} s; "
          f"bare uv: {result['bare_uv']} s; second / bare uv with bytecode: "
          f"×{result['second_over_bare_uv_bytecode']}")


if __name__ == "__main__":
    main()
