"""Sharded vs unsharded wall time: `lockguard plan` → N `check --shard K/N` processes side by
side (one local worker each, as N CI runners would be) → `lockguard merge`, against one
unsharded `check` with the same number of workers in one process, and with one worker.

    python benchmarks/bench_shards.py [--shards 2] [--repeat 1]

Runs the six torch scenarios of the tests' torch lock (real venv, cached after the first run)
with --rerun against the repository's goldens, whose recorded timings are the plan's estimates.
Writes benchmarks/results/shards.json and prints a table. Medians of --repeat runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TORCH_LOCK = REPO / "tests" / "data" / "torch-2.13.0.txt"
RESULTS = REPO / "benchmarks" / "results"
SCENARIOS = ["torch.mlp", "torch.lm", "torch.rng", "torch.lm.bf16", "torch.mlp.compile",
             "torch.lm.compile"]


def lockguard_cmd() -> list[str]:
    script = Path(sys.executable).parent / "lockguard"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lockguard"]


def run(args: list[str], cwd: Path, jobs: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LOCKGUARD_JOBS": str(jobs)}
    proc = subprocess.run(lockguard_cmd() + args, cwd=cwd, env=env, capture_output=True,
                          text=True)
    if proc.returncode not in (0, 1):
        sys.exit(f"lockguard {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


def project(root: Path) -> Path:
    root.mkdir()
    shutil.copy(TORCH_LOCK, root / "requirements.txt")
    shutil.copytree(REPO / "golden", root / "golden")
    (root / "pyproject.toml").write_text(
        "[tool.lockguard]\nlock = \"requirements.txt\"\n"
        f"scenarios = {json.dumps(SCENARIOS)}\n")
    return root


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--shards", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    n = args.shards
    with tempfile.TemporaryDirectory() as tmp:
        root = project(Path(tmp) / "p")
        run(["check", "--rerun"], root, n)  # warm: build or reuse the venv, compile caches
        plan = json.loads(run(["plan", "--shards", str(n), "--format", "json"], root, 1).stdout)
        unsharded, one_worker, sharded, parts = [], [], [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            whole = run(["check", "--rerun", "--format", "json"], root, n)
            unsharded.append(time.perf_counter() - start)
            start = time.perf_counter()
            run(["check", "--rerun"], root, 1)
            one_worker.append(time.perf_counter() - start)

            def shard(k: int) -> float:
                t = time.perf_counter()
                run(["check", "--rerun", "--shard", f"{k}/{n}", "--format", "json",
                     "-o", f"part{k}.json"], root, 1)
                return time.perf_counter() - t

            start = time.perf_counter()
            run(["plan", "--shards", str(n)], root, 1)
            with ThreadPoolExecutor(n) as pool:
                each = list(pool.map(shard, range(1, n + 1)))
            merged = run(["merge", *(f"part{k}.json" for k in range(1, n + 1)),
                          "--format", "json"], root, 1)
            sharded.append(time.perf_counter() - start)
            parts.append(each)
            same = ([(v["scenario"], v["verdict"]) for v in json.loads(merged.stdout)["verdicts"]]
                    == [(v["scenario"], v["verdict"]) for v in json.loads(whole.stdout)["verdicts"]])
            if not same or merged.returncode != whole.returncode:
                sys.exit("the merged report differs from the unsharded one")
    result = {
        "scenarios": SCENARIOS, "shards": n, "cpus": os.cpu_count(),
        "plan": [{"id": e["id"], "scenarios": e["scenarios"], "estimate_s": e["cost_s"]}
                 for e in plan["entries"]],
        "unsharded_s": statistics.median(unsharded),
        "unsharded_one_worker_s": statistics.median(one_worker),
        "sharded_s": statistics.median(sharded),
        "shard_s": [statistics.median(p[k] for p in parts) for k in range(n)],
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "shards.json").write_text(json.dumps(result, indent=2) + "\n")
    for e in result["plan"]:
        print(f"  {e['id']:<28} estimate {e['estimate_s']:6.1f} s  {' '.join(e['scenarios'])}")
    print(f"unsharded, {n} workers in one process : {result['unsharded_s']:6.1f} s")
    print(f"unsharded, 1 worker                   : {result['unsharded_one_worker_s']:6.1f} s")
    print(f"plan + {n} shard processes + merge     : {result['sharded_s']:6.1f} s  "
          f"(shards {', '.join(f'{s:.1f}' for s in result['shard_s'])} s)")


if __name__ == "__main__":
    main()
