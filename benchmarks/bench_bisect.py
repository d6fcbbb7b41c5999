"""How many environment builds culprit bisection needs, and what a real one costs.

    python benchmarks/bench_bisect.py [--only search,real,coupled,compile] [--harmless 5]

  search  the search alone on counted oracles (each distinct mix asked is one build): a single
          culprit among n units for every position, n = 2 … 64, against the target
          ⌈log2 n⌉ + 2; and every pair needed together among n units (ddmin's cost).
  real    `lockguard bisect` of the numpy NEP 50 drift among --harmless local-wheel bumps
          (tests/test_bisect.py's setup), cold (mix venvs built) and warm (cached): builds, wall
          time, and each mix's build and run seconds.
  coupled `lockguard bisect` of jax 0.4.35 → 0.5.0 with numpy 1.26.4 → 2.0.2 (ml-dtypes along,
          tests/test_bisect.py's coupled case): per scenario, the culprit, how sure, the
          builds against the bound, the mixes repaired.
  compile `lockguard bisect` of a torch.compile graph break (tests/test_bisect.py's torch
          setup) with the compilers' cache of the torch lock emptied first: the A/B's two runs
          compile cold, each mix's run after them compiles warm from the cache that venvs of the
          same torch share (lockguard/envs/compile_cache.py), where each compiled cold before.
Writes benchmarks/results/bisect.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import sys
import tempfile
import time
from itertools import combinations
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
sys.path[:0] = [str(REPO), str(REPO / "tests")]


def search() -> dict:
    from lockguard.flows.bisect import bisect_search

    def count(n: int, needed: set[int]) -> tuple[int, frozenset[int]]:
        asked: set[frozenset[int]] = set()

        def oracle(subset: frozenset[int]) -> str:
            asked.add(subset)
            return "fail" if needed <= subset else "pass"

        found, _ = bisect_search(n, oracle)
        assert found == needed, (n, needed, found)
        return len(asked), found

    single, pairs = [], []
    for n in (2, 3, 4, 5, 6, 8, 12, 16, 24, 32, 48, 64):
        builds = [count(n, {i})[0] for i in range(n)]
        single.append({"units": n, "max_builds": max(builds), "mean_builds":
                       round(sum(builds) / n, 2), "target": math.ceil(math.log2(n)) + 2})
    for n in (4, 6, 8, 12, 16):
        builds = [count(n, set(p))[0] for p in combinations(range(n), 2)]
        pairs.append({"units": n, "max_builds": max(builds),
                      "mean_builds": round(sum(builds) / len(builds), 2)})
    return {"single_culprit": single, "pair": pairs}


def real(harmless_n: int) -> dict:
    from conftest import DATA, make_project, run_cli
    from test_bisect import EMA_SCRIPT, harmless, locks_with

    # A fixed place, so that a second run of the benchmark finds the mix venvs cached.
    root = Path(tempfile.gettempdir()) / f"lockguard-bench-bisect-{harmless_n}"
    shutil.rmtree(root, ignore_errors=True)
    project = make_project(root, """
        lock = "new.txt"
        scenarios = ["loss_ema"]
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        tolerance = "exact"
        """, files={"loss_ema.py": EMA_SCRIPT})
    locks_with(project, harmless(harmless_n), (DATA / "numpy-1.26.4.txt").read_text(),
               (DATA / "numpy-2.0.2.txt").read_text())
    out = {}
    for label in ("cold", "warm"):
        started = time.perf_counter()
        proc = run_cli("bisect", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
        wall = time.perf_counter() - started
        assert proc.returncode == 1, proc.stderr
        [b] = json.loads(proc.stdout)["bisection"]
        out[label] = {"wall_s": round(wall, 1), "culprit": b["culprit"], "builds": b["builds"],
                      "bound": b["bound"], "units": len(b["units"]),
                      "mixes": [{"changes": t["changes"], "status": t["status"],
                                 "build_s": t["build_s"], "run_s": t["run_s"]}
                                for t in b["trials"]]}
    return out


def coupled() -> dict:
    from conftest import run_cli
    from test_bisect import coupled_project

    root = Path(tempfile.gettempdir()) / "lockguard-bench-bisect-coupled"
    shutil.rmtree(root, ignore_errors=True)
    project = coupled_project(root)
    started = time.perf_counter()
    proc = run_cli("bisect", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    wall = time.perf_counter() - started
    assert proc.returncode == 1, proc.stderr
    return {"wall_s": round(wall, 1), "scenarios": {
        b["scenario"]: {"culprit": b["culprit"], "confidence": b["confidence"],
                        "builds": b["builds"], "bound": b["bound"], "units": len(b["units"]),
                        "repaired": [t["kept"] for t in b["trials"] if t["kept"]],
                        "skipped": sum(t["status"] == "inconsistent" for t in b["trials"])}
        for b in json.loads(proc.stdout)["bisection"]}}


def compile_mixes() -> dict:
    from conftest import run_cli, sides
    from test_bisect import graph_break_project

    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock
    from lockguard.progress import QUIET

    root = Path(tempfile.gettempdir()) / "lockguard-bench-bisect-compile"
    shutil.rmtree(root, ignore_errors=True)
    project = graph_break_project(root)
    new = parse_lock(project / "new.txt")
    shared = VenvBackend().prepare(new, "torch", "cpu", QUIET).compile_cache
    shutil.rmtree(shared, ignore_errors=True)
    started = time.perf_counter()
    proc = run_cli("bisect", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    wall = time.perf_counter() - started
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    [b] = report["bisection"]
    # The harness's own time for the cold runs, each mix's wall time with its process: the
    # ratio errs against the warm side.
    cold = [run["timings"]["total_s"] for run in sides(report, "layer")]
    warm = [t["run_s"] for t in b["trials"]]
    return {"wall_s": round(wall, 1), "culprit": b["culprit"], "builds": b["builds"],
            "compile_cache": shared.name, "ab_runs_cold_s": [round(s, 1) for s in cold],
            "mix_runs_warm_s": warm,
            "cold_over_warm": round(statistics.median(cold) / statistics.median(warm), 2)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only", default="search,real,coupled,compile")
    parser.add_argument("--harmless", type=int, default=5)
    args = parser.parse_args()
    # A mode measured now replaces its own figures only.
    written = RESULTS / "bisect.json"
    results: dict = json.loads(written.read_text()) if written.exists() else {}
    results["python"] = sys.version.split()[0]
    if "search" in args.only:
        results["search"] = search()
        for row in results["search"]["single_culprit"]:
            print(f"single culprit, {row['units']:>2} units: ≤ {row['max_builds']} builds "
                  f"(mean {row['mean_builds']}), target {row['target']}")
        for row in results["search"]["pair"]:
            print(f"pair,           {row['units']:>2} units: ≤ {row['max_builds']} builds "
                  f"(mean {row['mean_builds']})")
    if "real" in args.only:
        results["real"] = real(args.harmless)
        for label, row in results["real"].items():
            print(f"real {label}: {row['culprit']} in {row['builds']} builds (bound "
                  f"{row['bound']}, {row['units']} units), {row['wall_s']} s wall")
            for mix in row["mixes"]:
                print(f"    {', '.join(mix['changes'])}: {mix['status']} "
                      f"(build {mix['build_s']} s, run {mix['run_s']} s)")
    if "coupled" in args.only:
        row = results["coupled"] = coupled()
        for sid, b in row["scenarios"].items():
            print(f"coupled {sid}: {b['culprit']} ({b['confidence']}) in {b['builds']} builds "
                  f"(bound {b['bound']}, {b['units']} units), {len(b['repaired'])} mix(es) "
                  f"repaired, {b['skipped']} skipped")
        print(f"coupled: {row['wall_s']} s wall")
    if "compile" in args.only:
        row = results["compile"] = compile_mixes()
        print(f"compile: {row['culprit']} in {row['builds']} builds, {row['wall_s']} s wall; "
              f"the A/B's runs (cold compile) {row['ab_runs_cold_s']} s, each mix's run (warm) "
              f"{row['mix_runs_warm_s']} s: ×{row['cold_over_warm']}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    written.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
