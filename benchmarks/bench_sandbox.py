"""The sandbox's cost per run, side by side with an unsandboxed run, in one script.

Runs the same command through process.run, interleaved: bare, Landlock alone, and bubblewrap
+ Landlock where bubblewrap starts. Prints the median wall time of each, the difference per run
(target: at most 50 ms) and the ratio (target: at most x1.03 on a warm torch.mlp). The command is
`python -I -S -c pass` (the sandbox's own cost), or with --venv a scenario's harness run in that
venv, confined as a training is (envs.base.confined):

    .venv/bin/python benchmarks/bench_sandbox.py [--runs 30]
    .venv/bin/python benchmarks/bench_sandbox.py --venv ~/.cache/lockguard/venvs/KEY \
        --scenario torch.mlp --runs 7
"""

from __future__ import annotations

import argparse
import json
import os
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
    parser.add_argument("--venv", type=Path, help="a venv of lockguard's cache to train in")
    parser.add_argument("--scenario", default="torch.mlp")
    args = parser.parse_args()
    found = sandbox.resolve("auto")
    layers = {"bare": None}
    if found.landlock:
        layers["landlock"] = sandbox.Sandbox("auto", (found.landlock, None, ""))
    if found.bwrap:
        layers["bwrap + landlock"] = found
    times: dict[str, list[float]] = {name: [] for name in layers}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            for name, layer in layers.items():
                scratch = Path(tmp) / f"{name}-{run}"
                scratch.mkdir()
                argv, env, spec = _command(args, scratch, layer)
                started = time.perf_counter()
                done = process.run(argv, log=scratch / "log", timeout=600, env=env,
                                   sandbox=spec)
                times[name].append(time.perf_counter() - started)
                assert done.code == 0, done.output
    bare = statistics.median(times["bare"])
    result = {name: {"median_ms": round(statistics.median(t) * 1000, 1),
                     "over_bare_ms": round((statistics.median(t) - bare) * 1000, 1),
                     "ratio": round(statistics.median(t) / bare, 3)}
              for name, t in times.items()}
    print(json.dumps({"runs": args.runs, "command": args.scenario if args.venv else "pass",
                      "describe": found.describe(), "layers": result}, indent=1))


def _command(args: argparse.Namespace, scratch: Path, layer: sandbox.Sandbox | None
             ) -> tuple[list[str], dict[str, str], dict | None]:
    if args.venv is None:
        policy = sandbox.Policy(read=(sys.base_prefix, sys.prefix), write=(str(scratch),))
        return ([sys.executable, "-I", "-S", "-c", "pass"], dict(os.environ),
                layer.spec(policy) if layer is not None else None)
    from lockguard.envs.base import (
        HARNESS_DIR, RunRequest, confined, harness_args, harness_env, own_temp_dir,
    )

    request = RunRequest(scenario_id=args.scenario, framework=args.scenario.split(".")[0],
                         steps=10, seed=0, device="cpu", threads=1, timeout=600)
    python = str(args.venv / "bin" / "python")
    argv = [python, *harness_args(request, str(HARNESS_DIR),
                                  str(scratch / f"{args.scenario}.json"), None)]
    env, spec = confined(layer, scratch, own_temp_dir(scratch, harness_env()), python)
    return argv, env, spec


if __name__ == "__main__":
    main()
