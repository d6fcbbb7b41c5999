"""A cold A/B check of two big locks against installing them with bare uv, side by side.

    python benchmarks/bench_ab.py [--repeat 2] [--old LOCK] [--new LOCK] [--scenario ID]

Default: the tests' torch 2.13.0+cpu lock against tests/data/torch-2.14.1-cuda.txt (the
default-index torch 2.14.1 and its nvidia-* wheels: a 5 GB environment), scenario torch.mlp.
Each repeat, interleaved:
  * bare uv: one empty uv cache, `uv venv` + `uv pip install --require-hashes` of the old lock,
    then of the new one (benchmarks/bench_env_build.bare_uv: the same interpreter, index options
    and UV_LINK_MODE=hardlink as lockguard's builds): the download of both locks' wheels, the
    shared ones once, and the linking;
  * lockguard cold: `lockguard check --baseline-lock OLD --lock NEW --scenario ID` with an
    empty lockguard cache and an empty uv cache: both environments built, the scenario run on
    each side;
  * lockguard warm: the same check again (environments cached): the runs alone.
  * with `--also LOCKGUARD` (another install's `lockguard` executable, e.g. an older commit's in
    a venv of its own): its cold check too, in the same repeat and with caches of its own, so
    that a change is measured against what it changed under the same load.
Each timed step starts after `os.sync()` (the previous step's gigabytes written out first,
untimed), and the steps' order rotates from repeat to repeat: on a virtual disk the step
right after bare uv's 6 GB of writes paid for their writeback (two runs of the same commit,
bare uv always first, gave ×1.08 and ×1.59). Reported: the medians, `cold - warm` (what
building the two environments cost inside the check) and its ratio to bare uv (target ≤ ×1.2),
and the whole cold check (target ≤ 45 s); with `--also`, its cold check and the ratio of the
two. Writes benchmarks/results/ab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_env_build import REPO, RESULTS, Scratch, bare_uv, shown  # noqa: E402

OLD = REPO / "tests" / "data" / "torch-2.13.0.txt"
NEW = REPO / "tests" / "data" / "torch-2.14.1-cuda.txt"


def lockguard_cmd() -> list[str]:
    script = Path(sys.executable).parent / "lockguard"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lockguard"]


def check(old: Path, new: Path, scenario: str, cache: Path, uv_cache: Path,
          project: Path, lockguard: list[str] | None = None) -> float:
    env = {**os.environ, "LOCKGUARD_CACHE": str(cache), "UV_CACHE_DIR": str(uv_cache)}
    start = time.perf_counter()
    done = subprocess.run([*(lockguard or lockguard_cmd()), "check", "--baseline-lock", str(old),
                           "--lock", str(new), "--scenario", scenario], cwd=project, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"lockguard check failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--old", type=Path, default=OLD)
    parser.add_argument("--new", type=Path, default=NEW)
    parser.add_argument("--scenario", default="torch.mlp")
    parser.add_argument("--also", type=Path, help="another lockguard executable, timed cold too")
    parser.add_argument("--also-label", help="what --also is, for the table (e.g. a commit)")
    args = parser.parse_args()
    steps = 3 if args.also else 2
    if args.repeat % steps:
        print(f"bench_ab: --repeat {args.repeat} is not a multiple of {steps}: the steps do "
              "not each go first equally often", file=sys.stderr)
    uv = shutil.which("uv") or str(Path(sys.executable).parent / "uv")
    scratch = Scratch()
    runs: dict[str, list[float]] = {"bare_uv_s": [], "cold_s": [], "warm_s": []}
    if args.also:
        runs["also_cold_s"] = []
    load = [list(os.getloadavg())]
    try:
        for i in range(args.repeat):
            project = scratch.new("project")
            (project / "pyproject.toml").write_text("[tool.lockguard]\n")
            cache, uv_cache = scratch.new("lockguard"), scratch.new("uv")

            def bare() -> None:
                caches = {"UV_CACHE_DIR": str(scratch.new("uv-bare"))}
                os.sync()  # each measurement starts with no other's gigabytes left to write
                start = time.perf_counter()
                for lock in (args.old, args.new):
                    bare_uv(uv, lock, scratch.new("venv"), caches)
                runs["bare_uv_s"].append(time.perf_counter() - start)

            def cold() -> None:
                os.sync()
                runs["cold_s"].append(check(args.old, args.new, args.scenario, cache, uv_cache,
                                            project))
                os.sync()
                runs["warm_s"].append(check(args.old, args.new, args.scenario, cache, uv_cache,
                                            project))

            def also() -> None:
                os.sync()
                runs["also_cold_s"].append(check(
                    args.old, args.new, args.scenario, scratch.new("also"),
                    scratch.new("also-uv"), project, [str(args.also.resolve())]))

            # The order rotates, each step first in turn: a step that follows another's 5 GB of
            # writes can still find the disk busy with them, sync or not.
            order = [bare, cold] + ([also] if args.also else [])
            k = i % len(order)
            for step in order[k:] + order[:k]:
                step()
            print(f"repeat {i + 1}: " + ", ".join(f"{k} {v[-1]:.1f}" for k, v in runs.items()),
                  flush=True)
            shutil.rmtree(scratch.root)
            scratch.root.mkdir()
            load.append(list(os.getloadavg()))
    finally:
        shutil.rmtree(scratch.root, ignore_errors=True)
    med = {k: round(statistics.median(v), 1) for k, v in runs.items()}
    building = med["cold_s"] - med["warm_s"]
    out = {"old": shown(args.old), "new": shown(args.new), "scenario": args.scenario,
           "cores": os.cpu_count(), "runs": runs, "median": med,
           "building_in_check_s": round(building, 1),
           "building_over_bare_uv": round(building / med["bare_uv_s"], 2),
           "targets": {"building_over_bare_uv": 1.2, "cold_s": 45},
           **({"also_label": args.also_label or str(args.also), "cold_over_also_cold": round(
               med["cold_s"] / med["also_cold_s"], 2)} if args.also else {}),
           "load_average": load}
    print(json.dumps(out, indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "ab.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
