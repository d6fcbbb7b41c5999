"""What a venv's bytecode costs: at build, and in the runs after it.

    python benchmarks/bench_bytecode.py [--repeat 3]

In one run, with a warm uv wheel cache and, each time, a fresh lockguard cache, each venv built
then `torch.mlp` (30 steps) run in it twice (a build compiles every module's bytecode,
lockguard/envs/bytecode.py, so both runs should cost alike):
- `first`: lockguard (share_bytecode on) builds the tests' torch lock into an empty cache: every
  module compiled into the store and linked;
- `second`: the same torch beside numpy 1.26.4, in the same cache: torch's .pyc linked from the
  store, numpy 1.26.4's compiled;
- `own`: share_bytecode off, the second lock into an empty cache: every module compiled into
  the venv itself;
- `uv_bytecode`: bare `uv pip install --compile-bytecode` of the second lock (every module of
  every venv compiled by uv), the runs in it alike;
- `uv`: bare `uv pip install` of it, no bytecode: the install's floor (every run compiles what
  it imports).
Reported per kind: the build, the first and the second run (wall seconds, medians of the
interleaved repeats), and build + first run against bare uv's with bytecode. Writes
benchmarks/results/bytecode.json and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parent.parent)]

from bench_env_build import (RESULTS, TORCH_LOCK, bare_uv, fresh_lockguard_cache,  # noqa: E402
                             median, with_env)

SECOND = TORCH_LOCK.parent / "torch-2.13.0-numpy-1.26.4.txt"
KINDS = ("first", "second", "own", "uv_bytecode", "uv")


def request():
    from lockguard.envs.base import RunRequest

    return RunRequest(scenario_id="torch.mlp", framework="torch", steps=30, seed=0,
                      device="cpu", threads=1, timeout=600)


def two_runs(env, where: Path) -> list[float]:
    """Wall seconds of two harness runs of torch.mlp in `env`, one after the other."""
    seconds = []
    for i in range(2):
        out = where / f"run-{i}"
        out.mkdir(parents=True)
        start = time.perf_counter()
        result = env.run(request(), out)
        seconds.append(time.perf_counter() - start)
        assert result.status.value == "ok", result.error
    return seconds


def lockguard_kind(lock: Path, where: Path, cache: Path, share_bytecode: bool = True
                   ) -> list[float]:
    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock
    from lockguard.progress import QUIET

    with with_env({"LOCKGUARD_CACHE": str(cache)}):
        start = time.perf_counter()
        env = VenvBackend(share_bytecode=share_bytecode).prepare(parse_lock(lock), "numpy", "cpu", QUIET)
        built = time.perf_counter() - start
        return [built, *two_runs(env, where)]


def bare_kind(uv: str, where: Path, caches: dict[str, str], compile_bytecode: bool) -> list[float]:
    """Bare uv's venv, its interpreter run as the local backend runs one (the harness with
    PYTHONDONTWRITEBYTECODE: its runs write no bytecode)."""
    from lockguard.envs.local import LocalEnv

    built = bare_uv(uv, SECOND, where, caches, compile_bytecode)
    return [built, *two_runs(LocalEnv(str(where / "venv" / "bin" / "python")), where)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    from lockguard.installers import find_uv

    uv = find_uv()
    assert uv, "uv: a dependency of lockguard (pip install -e .)"
    runs: dict[str, list[list[float]]] = {kind: [] for kind in KINDS}
    base = Path(tempfile.mkdtemp(prefix="lockguard-bench-bytecode-"))
    caches = {"UV_CACHE_DIR": str(base / "uv")}
    load = [list(os.getloadavg())]
    try:
        with with_env(caches):
            bare_uv(uv, SECOND, base / "warm-up", caches)  # the wheels in the cache: not measured
            bare_uv(uv, TORCH_LOCK, base / "warm-up-2", caches)
            for i in range(args.repeat):
                where = base / f"run-{i}"
                runs["uv_bytecode"].append(bare_kind(uv, where / "uv_bytecode", caches, True))
                runs["uv"].append(bare_kind(uv, where / "uv", caches, False))
                # One lockguard cache for both: the second links what the first compiled.
                cache = fresh_lockguard_cache(where)
                runs["first"].append(lockguard_kind(TORCH_LOCK, where / "first", cache))
                runs["second"].append(lockguard_kind(SECOND, where / "second", cache))
                runs["own"].append(lockguard_kind(SECOND, where / "own",
                                                  fresh_lockguard_cache(where / "own"), False))
                shutil.rmtree(where, ignore_errors=True)
                print(f"repeat {i + 1}: " + ", ".join(
                    f"{k} {'/'.join(f'{s:.1f}' for s in v[-1])}" for k, v in runs.items()),
                    flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    load.append(list(os.getloadavg()))
    result: dict = {}
    for kind, values in runs.items():
        build, run1, run2 = (median([v[j] for v in values]) for j in range(3))
        result[kind] = {"build_s": build, "first_run_s": run1, "second_run_s": run2,
                        "build_and_first_run_s": round(build + run1, 2)}
    reference = result["uv_bytecode"]["build_and_first_run_s"]
    for kind in KINDS:
        result[kind]["over_uv_bytecode"] = round(
            result[kind]["build_and_first_run_s"] / reference, 2)
    result.update(runs={k: [[round(s, 2) for s in v] for v in vs] for k, vs in runs.items()},
                  load=load, python=sys.version.split()[0])
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "bytecode.json").write_text(json.dumps(result, indent=1) + "\n")
    print(f"{'venv':<12} {'build':>7} {'run 1':>7} {'run 2':>7} {'build+run 1':>12}")
    for kind in KINDS:
        r = result[kind]
        print(f"{kind:<12} {r['build_s']:>7.2f} {r['first_run_s']:>7.2f} "
              f"{r['second_run_s']:>7.2f} {r['build_and_first_run_s']:>8.2f} "
              f"×{r['over_uv_bytecode']}")


if __name__ == "__main__":
    main()
