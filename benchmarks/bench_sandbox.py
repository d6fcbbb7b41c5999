"""The sandbox's cost per run, side by side with an unsandboxed run, in one script.

Runs the same short command (`python -I -S -c pass`, or with --scenario a real training's
harness command line is not needed: the cost is the start) through process.run, interleaved:
bare, Landlock alone, and bubblewrap + Landlock where bubblewrap starts. Prints the median wall
time of each and the difference per run (target: at most 50 ms a run).

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 30]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from lockguard import process, sandbox  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    found = sandbox.resolve("auto")
    layers = {"bare": None}
    if found.landlock:
        layers["landlock"] = sandbox.Sandbox("auto", (found.landlock, None, ""))
    if found.bwrap:
        layers["bwrap + landlock"] = found
    times: dict[str, list[float]] = {name: [] for name in layers}
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        policy = sandbox.Policy(read=(sys.base_prefix, sys.prefix), write=(str(scratch),))
        for _ in range(args.runs):
            for name, layer in layers.items():
                spec = layer.spec(policy) if layer is not None else None
                started = time.perf_counter()
                done = process.run([sys.executable, "-I", "-S", "-c", "pass"],
                                   log=scratch / "log", timeout=60, sandbox=spec)
                times[name].append(time.perf_counter() - started)
                assert done.code == 0, done.output
    bare = statistics.median(times["bare"])
    result = {name: {"median_ms": round(statistics.median(t) * 1000, 1),
                     "over_bare_ms": round((statistics.median(t) - bare) * 1000, 1)}
              for name, t in times.items()}
    print(json.dumps({"runs": args.runs, "describe": found.describe(), "layers": result},
                     indent=1))


if __name__ == "__main__":
    main()
