"""How fast `lockguard check` answers, and what lockguard adds around a training run.

    python benchmarks/bench_check.py [--repeat 5] [--only fastpath,overhead,parallel]
    python benchmarks/bench_check.py --only instructions --against REF

Measures, on this machine, with real environments built by lockguard (cached after the first run):
  fastpath  `lockguard check` when the lock equals the goldens' and nothing changed: its wall
            time, answered from the goldens' provenance (no framework imported, nothing built;
            target <= 0.25 s).
  base      `lockguard check --base main` on a branch that did not touch the lock (target
            <= 0.25 s).
  overhead  a warm `lockguard check --rerun` of one torch scenario vs running the same harness
            command by hand in the same venv (target: lockguard adds <= 5 %), and what each
            run costs beyond its import and its steps (target < 0.5 s).
  parallel  a three-framework check (torch, jax, tensorflow locks) run in parallel processes vs
            the same check with LOCKGUARD_JOBS=1 (the sum of its parts, one after another).
  instructions  the fastpath and base checks counted in instructions (valgrind's callgrind),
            this tree against --against REF (a git revision, checked out in a temporary
            worktree and run by this interpreter): a load-independent ratio, for machines too
            busy for wall times to mean anything.
Writes benchmarks/results/check.json and prints a table. Medians of --repeat runs.
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
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "tests" / "data"
TORCH_LOCK = REPO / "tests" / "data" / "torch-2.13.0.txt"
RESULTS = REPO / "benchmarks" / "results"


def lockguard_cmd() -> list[str]:
    """The console script next to this interpreter (what a user runs), else `python -m`."""
    script = Path(sys.executable).parent / "lockguard"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lockguard"]


def timed(cmd: list[str], cwd: Path, check_codes=(0,)) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode not in check_codes:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return elapsed


def project(root: Path, config: str, locks: dict[str, Path]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pyproject.toml").write_text(f"[tool.lockguard]\n{config}\n")
    for name, src in locks.items():
        shutil.copy(src, root / name)
    return root


def noop(cmd: list[str], cwd: Path, repeat: int, target: float) -> dict:
    """A no-op check, run `repeat` times: its median wall time against `target`."""
    load = [list(os.getloadavg())]
    runs = [timed(cmd, cwd) for _ in range(repeat)]
    load.append(list(os.getloadavg()))
    return {"median_s": statistics.median(runs), "runs_s": runs, "target_s": target,
            "load": load}


def bench_fastpath(tmp: Path, repeat: int) -> dict:
    p = project(tmp / "fast", 'lock = "requirements.txt"\nsteps = 5\n'
                'scenarios = ["torch.mlp", "torch.lm"]', {"requirements.txt": TORCH_LOCK})
    timed([*lockguard_cmd(), "record"], p)
    return noop([*lockguard_cmd(), "check"], p, repeat, 0.25)


def bench_base_repo(root: Path) -> Path:
    """A git repository on branch `feature`, its lock as on `main`."""
    p = project(root, 'lock = "requirements.txt"', {"requirements.txt": TORCH_LOCK})
    for args in (["init", "-q", "-b", "main"], ["add", "-A"],
                 ["-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "base"],
                 ["checkout", "-qb", "feature"]):
        subprocess.run(["git", *args], cwd=p, check=True)
    return p


def bench_base(tmp: Path, repeat: int) -> dict:
    """`check --base main` on a branch whose lock did not change: git alone answers."""
    p = bench_base_repo(tmp / "base")
    return noop([*lockguard_cmd(), "check", "--base", "main"], p, repeat, 0.25)


def bench_overhead(tmp: Path, repeat: int) -> dict:
    p = project(tmp / "over", 'lock = "requirements.txt"\nscenarios = ["torch.mlp"]',
                {"requirements.txt": TORCH_LOCK})
    timed([*lockguard_cmd(), "record"], p)
    sys.path.insert(0, str(REPO))
    from lockguard.envs.venv import VenvBackend
    from lockguard.locks.parser import parse_lock
    from lockguard.envs.harness import ENTRY, HARNESS_DIR
    from lockguard.progress import QUIET

    env = VenvBackend().prepare(parse_lock(p / "requirements.txt"), "torch", "cpu", QUIET)
    by_hand = [str(env.python), str(HARNESS_DIR / ENTRY), "--scenario", "torch.mlp",
               "--steps", "30", "--out", str(tmp / "hand.json")]
    hand, guarded, fixed = [], [], []
    load = [list(os.getloadavg())]
    report = tmp / "report.json"
    for _ in range(repeat):  # interleaved, so both see the same machine load
        hand.append(timed(by_hand, p))
        guarded.append(timed([*lockguard_cmd(), "check", "--rerun", "--report",
                                   f"json={report}"], p))
        fixed.append(fixed_cost(json.loads(report.read_text())))
    load.append(list(os.getloadavg()))
    h, g = statistics.median(hand), statistics.median(guarded)
    return {"by_hand_median_s": h, "lockguard_median_s": g, "overhead_ratio": g / h,
            "target_ratio": 1.05, "by_hand_s": hand, "lockguard_s": guarded,
            "fixed_median_s": statistics.median(fixed), "fixed_s": fixed,
            "fixed_target_s": 0.5, "load": load}


def fixed_cost(report: dict) -> float:
    """What a run cost beyond importing its framework and its steps, as the harness saw it:
    total_s - import_s - first step - (steps - 1) x the median step (issue 23, item 2)."""
    [evidence] = report["evidence"]
    run = evidence["candidate"]["result"]
    t = run["timings"]
    return t["total_s"] - t["import_s"] - t["first_step_s"] \
        - (run["steps"] - 1) * t["step_median_s"]


def bench_parallel(tmp: Path, repeat: int) -> dict:
    locks = {"torch.txt": TORCH_LOCK, "jax.txt": DATA / "jax-0.10.2.txt",
             "tf.txt": DATA / "tf-2.21.0.txt"}
    # Issue 3's suite: every bundled scenario but the torch.compile twins, which cost inductor
    # compile time of their own (measured separately in the README).
    suite = [s for s in json.loads(subprocess.run(
        [*lockguard_cmd(), "scenarios", "--format", "json"], cwd=REPO, capture_output=True,
        text=True, check=True).stdout) if not s["id"].endswith(".compile")]
    p = project(tmp / "par", 'locks = ["torch.txt", "jax.txt", "tf.txt"]\n'
                f'scenarios = {json.dumps([s["id"] for s in suite])}', locks)
    timed([*lockguard_cmd(), "record", "--format", "json"], p)
    walls, sums = [], []
    check = [*lockguard_cmd(), "check", "--rerun"]
    for _ in range(repeat):
        walls.append(timed(check, p))
        os.environ["LOCKGUARD_JOBS"] = "1"  # the same check, one process at a time
        try:
            sums.append(timed(check, p))
        finally:
            del os.environ["LOCKGUARD_JOBS"]
    w, s = statistics.median(walls), statistics.median(sums)
    return {"scenarios": len(suite), "parallel_wall_s": w, "sum_of_parts_s": s,
            "speedup": s / w, "cores": os.cpu_count(), "target_warm_suite_s": 60}


def instructions(cmd: list[str], cwd: Path, pythonpath: Path) -> int:
    """Instructions the command executes (callgrind's "I refs"), children not followed."""
    out = cwd / "callgrind.out"
    proc = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *cmd],
                          cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(pythonpath)})
    if proc.returncode != 0:
        raise SystemExit(f"valgrind {' '.join(cmd)} failed ({proc.returncode}):\n"
                         f"{proc.stderr[-2000:]}")
    refs = [line for line in proc.stderr.splitlines() if "I   refs:" in line]
    return int(refs[-1].split(":")[1].replace(",", ""))


def bench_instructions(tmp: Path, repeat: int, against: str) -> dict:
    """fastpath and base, each version recording its own goldens first (their formats differ)."""
    if shutil.which("valgrind") is None:
        raise SystemExit("the instructions benchmark needs valgrind")
    ref_tree = tmp / "ref"
    subprocess.run(["git", "worktree", "add", "-q", "--detach", str(ref_tree), against],
                   cwd=REPO, check=True)
    python = [sys.executable, "-m", "lockguard"]
    # Without bytecode every run would count compiling lockguard's sources: not what users run.
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    out: dict = {"against": against}
    try:
        for label, tree in (("this", REPO), ("ref", ref_tree)):
            os.environ["PYTHONPATH"] = str(tree)  # this interpreter, that version's package
            try:
                fast = project(tmp / f"fast-{label}", 'lock = "requirements.txt"\nsteps = 5\n'
                               'scenarios = ["torch.mlp", "torch.lm"]',
                               {"requirements.txt": TORCH_LOCK})
                timed([*python, "record"], fast)
                timed([*python, "check"], fast)  # bytecode written, caches warm
                base = tmp / f"base-{label}"
                bench_base_repo(base)
                timed([*python, "check", "--base", "main"], base)
            finally:
                del os.environ["PYTHONPATH"]
            out[label] = {"fastpath": instructions([*python, "check"], fast, tree),
                          "base": instructions([*python, "check", "--base", "main"], base, tree)}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(ref_tree)], cwd=REPO)
    out["ratio"] = {k: out["this"][k] / out["ref"][k] for k in ("fastpath", "base")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--against", default=None,
                        help="git revision the instructions benchmark compares with")
    parser.add_argument("--only", default="fastpath,base,overhead,parallel")
    args = parser.parse_args()
    out: dict = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]}}
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only.split(","):
            extra = (args.against or "HEAD~1",) if name == "instructions" else ()
            out[name] = globals()[f"bench_{name}"](Path(tmp), args.repeat, *extra)
            print(name, json.dumps(out[name], indent=1))
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "check.json"
    previous = json.loads(path.read_text()) if path.exists() else {}
    path.write_text(json.dumps({**previous, **out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
