"""What a lock pull request costs a small torch project: a numpy patch PR and a torch minor PR,
A/B-checked as the gate checks them, with the default workers and with one (a busy machine).

    python benchmarks/bench_lock_pr.py [--repeat 1] [--jobs 2,1]

The project is the newcomer's (../shared/reviews/newcomer-3.md): PyPI's CUDA torch (the
default-index build, tests/data/torch-2.14.1-cuda.txt) with numpy, every bundled torch scenario
(what `init` selects for a torch project) and the user scenario `init` writes. The PRs:
  * numpy patch: numpy 2.0.1 → 2.0.2 under torch 2.14.1 (the gate leaves the compiled and DDP
    runs out: no compiler or parallel package changed, docs/gate.md);
  * torch minor: torch 2.13.0 → 2.14.1 (every scenario runs), the compile caches of both
    environments emptied first, so that the compiled scenarios compile cold.
Each PR is `lockguard check --baseline-lock OLD --lock NEW`, the environments built beforehand
(a PR's gate finds the base's environment cached, and building the candidate's is measured by
bench_ab.py). Targets (issue 41): numpy patch ≤ 60 s and torch minor ≤ 180 s with the default
workers, and one worker no worse than ×2 of that. Writes benchmarks/results/lock_pr.json.
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
sys.path.insert(0, str(REPO))
from lockguard.init.templates import scenario_template  # noqa: E402

DATA = REPO / "tests" / "data"
RESULTS = REPO / "benchmarks" / "results"
# numpy 2.0.1's wheel for CPython 3.11 on manylinux x86_64, as PyPI serves it.
NUMPY_201 = ("numpy==2.0.1 \\\n    --hash=sha256:"
             "15eb4eca47d36ec3f78cde0a3a2ee24cf05ca7396ef808dda2c0ddad7c2bde67\n")
TARGETS = {"numpy patch": 60.0, "torch minor": 180.0}


def numpy_pin(version: str) -> str:
    """numpy's pin: 2.0.2 as the tests' torch lock has it, or 2.0.1."""
    if version == "2.0.1":
        return NUMPY_201
    text = (DATA / "torch-2.13.0.txt").read_text()
    start = text.index("numpy==2.0.2")
    return text[start:text.index("\n", text.index("--hash", start))] + "\n"


def project(root: Path) -> None:
    """The newcomer's torch project: config, the init template as its own scenario, locks."""
    (root / "scenarios").mkdir(parents=True)
    # The template, its model filled in as a newcomer would: a small MLP of their own.
    template = scenario_template("torch", None, False)
    (root / "scenarios" / "my_model.py").write_text(template.replace(
        '    raise NotImplementedError(f"{__file__}: build_model() must return your model")',
        "    return torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(),\n"
        "                               torch.nn.Linear(64, CLASSES))"))
    (root / "pyproject.toml").write_text(
        '[project]\nname = "newcomer"\nversion = "0.1"\n\n[tool.lockguard]\n'
        'lock = "requirements.txt"\nscenarios = ["torch", "my_model"]\n\n'
        '[tool.lockguard.scenario.my_model]\nscript = "scenarios/my_model.py"\n'
        'framework = "torch"\n')
    cuda = (DATA / "torch-2.14.1-cuda.txt").read_text()
    (root / "cuda-numpy-2.0.1.txt").write_text(cuda + numpy_pin("2.0.1"))
    (root / "cuda-numpy-2.0.2.txt").write_text(cuda + numpy_pin("2.0.2"))
    shutil.copy(DATA / "torch-2.13.0.txt", root / "cpu-2.13.0.txt")
    shutil.copy(root / "cuda-numpy-2.0.2.txt", root / "requirements.txt")


PRS = {"numpy patch": ("cuda-numpy-2.0.1.txt", "cuda-numpy-2.0.2.txt"),
       "torch minor": ("cpu-2.13.0.txt", "cuda-numpy-2.0.2.txt")}


def check(root: Path, cache: Path, old: str, new: str, jobs: int) -> tuple[float, dict]:
    env = {**os.environ, "LOCKGUARD_CACHE": str(cache), "LOCKGUARD_JOBS": str(jobs)}
    report = root / f"report-{jobs}.json"
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "lockguard", "check", "--baseline-lock", old,
                           "--lock", new, "--report", f"json={report}"], cwd=root, env=env,
                          capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode not in (0, 1):
        raise SystemExit(f"check failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return elapsed, json.loads(report.read_text())


def cold_compile(cache: Path) -> None:
    for folder in (cache / "venvs").glob("*.compile-cache"):
        shutil.rmtree(folder)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--jobs", default="2,1", help="worker counts, comma-separated")
    args = ap.parse_args()
    jobs = [int(j) for j in args.jobs.split(",")]
    with tempfile.TemporaryDirectory(prefix="lg-bench-pr-") as tmp:
        root, cache = Path(tmp) / "project", Path(tmp) / "cache"
        project(root)
        for old, new in PRS.values():  # the environments, built once, untimed
            check(root, cache, old, new, max(jobs))
        seconds: dict[str, dict[int, list[float]]] = {pr: {j: [] for j in jobs} for pr in PRS}
        ran: dict[str, dict] = {}
        for _ in range(args.repeat):
            for pr, (old, new) in PRS.items():
                for j in jobs:
                    if pr == "torch minor":
                        cold_compile(cache)
                    took, report = check(root, cache, old, new, j)
                    seconds[pr][j].append(took)
                    ran[pr] = {v["scenario"]: v["verdict"] for v in report["verdicts"]}
                    print(f"{pr}, {j} worker(s): {took:.0f} s", flush=True)
    out = {"prs": {}, "machine": os.cpu_count()}
    for pr, by_jobs in seconds.items():
        medians = {j: statistics.median(v) for j, v in by_jobs.items()}
        default = medians[max(jobs)]
        out["prs"][pr] = {
            "seconds": {str(j): m for j, m in medians.items()},
            "target_s": TARGETS[pr], "within_target": default <= TARGETS[pr],
            "one_worker_ratio": medians[min(jobs)] / default,
            "verdicts": ran[pr]}
        print(f"{pr}: " + ", ".join(f"{j} worker(s) {m:.0f} s" for j, m in medians.items())
              + f" (target {TARGETS[pr]:.0f} s; one worker ×{medians[min(jobs)] / default:.2f})")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "lock_pr.json").write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
