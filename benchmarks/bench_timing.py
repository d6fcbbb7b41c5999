"""Timing verdicts on real locks: how often a same-lock check cries `slower`, and what the real
torch 2.13.0+cpu → 2.14.1 upgrade is called, with the timing runs (`check --timing`).

    python benchmarks/bench_timing.py [--checks 4] [--upgrade-checks 2] [--scenario ID ...]

  * same lock: `check --timing --baseline-lock L --lock L` of the torch scenarios, --checks
    times: every timing verdict (slower / same / inconclusive / not judged), and the intervals;
    the target is no `slower` at all (0 in checks × scenarios);
  * the upgrade: the torch 2.13.0+cpu lock (tests/data/torch-2.13.0.txt) against a torch 2.14.1
    lock (made here with `uv pip compile` from this machine's package indexes: the 2.14.1 wheel
    and its nvidia-* dependencies are a 5.5 GB environment), --upgrade-checks times.

The load average is recorded before and after each check: the verdicts are meant to hold on a
quiet and on a loaded machine alike. Writes benchmarks/results/timing.json. Uses this
machine's local torch wheels (the 2.13.0+cpu build exists nowhere else): a measurement of this
machine kind, not an example.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
OLD = REPO / "tests" / "data" / "torch-2.13.0.txt"
SCENARIOS = ["torch.mlp", "torch.lm", "torch.lm.bf16", "torch.lm.compile", "torch.data"]


def new_lock(tmp: Path) -> Path:
    """torch 2.14.1 (and numpy 2.0.2, as the old lock), hashed, from this machine's indexes."""
    source = tmp / "torch-2.14.1.in"
    source.write_text("torch==2.14.1\nnumpy==2.0.2\n")
    out = tmp / "torch-2.14.1.txt"
    uv = Path(sys.executable).parent / "uv"
    subprocess.run([str(uv), "pip", "compile", "--quiet", "--generate-hashes", "--no-config",
                    "--find-links", "/opt/wheels", "--index-url", "https://pypi.org/simple",
                    "--extra-index-url", "file:///opt/pypi/simple",
                    "--extra-index-url", "file:///opt/pypi-more/simple",
                    "--index-strategy", "unsafe-best-match", "--python-version", "3.11",
                    str(source), "-o", str(out)], check=True)
    return out


def check(project: Path, old: Path, new: Path, scenarios: list[str]) -> dict:
    args = [sys.executable, "-m", "lockguard", "check", "--timing", "--baseline-lock", str(old),
            "--lock", str(new), "--format", "json"]
    for sid in scenarios:
        args += ["--scenario", sid]
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.run(args, cwd=project, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        raise SystemExit(f"check failed ({proc.returncode}): {proc.stderr[-2000:]}")
    report = json.loads(proc.stdout)
    rows = {}
    for v in report["verdicts"]:
        t = v.get("timing") or {}
        rows[v["scenario"]] = {"verdict": v["verdict"], "timing": t.get("verdict"),
                               "ratio": t.get("ratio"), "low": t.get("low"),
                               "high": t.get("high"), "spread": t.get("spread"),
                               "numeric_ratio": v.get("step_time_ratio")}
    return {"seconds": round(took, 1), "load_before": round(load, 2),
            "load_after": round(os.getloadavg()[0], 2), "scenarios": rows}


def tally(checks: list[dict]) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in checks:
        for row in c["scenarios"].values():
            out[row["timing"] or "none"] = out.get(row["timing"] or "none", 0) + 1
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", type=int, default=4)
    parser.add_argument("--upgrade-checks", type=int, default=2)
    parser.add_argument("--scenario", action="append", dest="scenarios")
    args = parser.parse_args()
    scenarios = args.scenarios or SCENARIOS
    with tempfile.TemporaryDirectory(prefix="lockguard-timing-") as name:
        tmp = Path(name)
        project = tmp / "project"
        project.mkdir()
        (project / "lockguard.toml").write_text("timing_runs = 5\n")
        new = new_lock(tmp)
        same = []
        for i in range(args.checks):
            same.append(check(project, OLD, OLD, scenarios))
            print(f"same lock {i + 1}/{args.checks}: {same[-1]['seconds']} s, load "
                  f"{same[-1]['load_before']} → {same[-1]['load_after']}: "
                  f"{ {s: r['timing'] for s, r in same[-1]['scenarios'].items()} }", flush=True)
        upgrade = []
        for i in range(args.upgrade_checks):
            upgrade.append(check(project, OLD, new, scenarios))
            print(f"2.13.0+cpu → 2.14.1 {i + 1}/{args.upgrade_checks}: "
                  f"{upgrade[-1]['seconds']} s, load {upgrade[-1]['load_before']} → "
                  f"{upgrade[-1]['load_after']}: "
                  f"{ {s: (r['verdict'], r['timing'], r['ratio'] and round(r['ratio'], 2)) for s, r in upgrade[-1]['scenarios'].items()} }",
                  flush=True)
    result = {"machine": {"cpu": platform.processor() or platform.machine(),
                          "cores": os.cpu_count()},
              "timing_runs": 5, "scenarios": scenarios,
              "same_lock": {"checks": same, "tally": tally(same)},
              "upgrade_2_13_to_2_14_1": {"checks": upgrade, "tally": tally(upgrade)}}
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "timing.json").write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({"same_lock": tally(same), "upgrade": tally(upgrade)}))


if __name__ == "__main__":
    main()
