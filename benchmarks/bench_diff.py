"""`lockguard diff` of two 100,000-pin locks: wall time, CPU time and peak memory.

    python benchmarks/bench_diff.py [--pins 100000] [--repeat 3]

The locks are written here, in pip-compile's layout (name==version, a `--hash` continuation
line, a `# via` comment), deterministically: the new one bumps every hundredth pin (version and
hash), drops three and adds five. Each `lockguard diff` runs as a user runs it (the console
script, a new process); its CPU time and peak RSS are the child's own (wait4). Targets: ≤ 3 s
and linear in the number of pins (--pins 10000 for the slope). Writes
benchmarks/results/diff.json.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "benchmarks" / "results"
TARGET_S = 3.0


def lock_text(pins: int, new: bool) -> str:
    lines = ["# big lock"]
    names = [i for i in range(pins) if not (new and i in (7, 70, 700))]
    if new:
        names += list(range(pins, pins + 5))
    for i in names:
        bumped = new and i % 100 == 0
        version = f"1.{i % 50}.{1 if bumped else 0}"
        digest = hashlib.sha256(f"{i}-{version}".encode()).hexdigest()
        lines += [f"pkg-{i}=={version} \\", f"    --hash=sha256:{digest}", "    # via -r x.in"]
    return "\n".join(lines) + "\n"


def lockguard_cmd() -> list[str]:
    script = Path(sys.executable).parent / "lockguard"
    return [str(script)] if script.exists() else [sys.executable, "-m", "lockguard"]


def run_once(cmd: list[str]) -> dict:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): "
                         f"{proc.stderr.read().decode()[-2000:]}")
    return {"wall_s": round(wall, 3), "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
            "peak_mb": round(usage.ru_maxrss / 1024, 1)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pins", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    out: dict = {"machine": {"cores": os.cpu_count(), "python": sys.version.split()[0]},
                 "load_before": list(os.getloadavg())}
    with tempfile.TemporaryDirectory() as tmp:
        for size in sorted({args.pins // 10, args.pins}):
            old, new = Path(tmp) / f"old-{size}.txt", Path(tmp) / f"new-{size}.txt"
            old.write_text(lock_text(size, new=False))
            new.write_text(lock_text(size, new=True))
            runs = [run_once([*lockguard_cmd(), "diff", str(old), str(new)])
                    for _ in range(args.repeat)]
            out[str(size)] = {"runs": runs, **{f"median_{k}": statistics.median(
                r[k] for r in runs) for k in ("wall_s", "cpu_s", "peak_mb")},
                "lock_mb": round(old.stat().st_size / 2**20, 1)}
            print(size, json.dumps(out[str(size)]))
    small, big = out[str(args.pins // 10)], out[str(args.pins)]
    out["load_after"] = list(os.getloadavg())
    out["target_s"] = TARGET_S
    # Linear: ten times the pins, about ten times the work beyond lockguard's start-up.
    out["cpu_ratio_10x"] = round(big["median_cpu_s"] / small["median_cpu_s"], 2)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "diff.json").write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
