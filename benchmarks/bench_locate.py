"""The cost of localising a drift (lockguard/compare/locate.py): one localisation run of a side
(the first divergent step again, every module captured: torch's with a float64 referee per
module call, jax's and tf's every leaf and tapped layer) against that scenario's normal run, in
the same environment, one after the other.

    python benchmarks/bench_locate.py PYTHON [SCENARIO[@probe] ...]

PYTHON: the interpreter of an environment that has the scenarios' framework (torch, and
transformers for its scenario; jax; tensorflow), e.g. one of lockguard's cached venvs: one
framework a call, so the rows of the others are kept from benchmarks/results/locate.json. Each run is the harness process as lockguard starts it
(no sandbox: the sandbox costs both the same). The localisation run is timed at its worst, the
last step of the normal run (every earlier step trains first); `SCENARIO@probe` times a torch
scenario's probe localisation instead (every step trained, the probe's forward captured: a
difference in the probe outputs alone, transformers 4.40.2 -> 4.46.3's GPT-2 attention, run with
the 4.46.3 environment's interpreter). Target: at most 2× the normal run.
Writes benchmarks/results/locate.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
HARNESS = HERE.parent / "lockguard" / "harness" / "run.py"
STEPS = {"torch.lm": 20, "transformers.gpt2": 10, "jax.lm": 20, "tf.lm": 20, "keras.cnn": 10,
         "transformers.gpt2@probe": 20}


def wall(python: str, scenario: str, steps: int, *extra: str) -> float:
    """Seconds one harness process takes, start to exit."""
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        subprocess.run([python, str(HARNESS), "--scenario", scenario, "--steps", str(steps),
                        "--out", os.path.join(tmp, "r.json"), *extra], check=True,
                       capture_output=True)
        took = time.perf_counter() - start
        result = json.loads(Path(tmp, "r.json").read_text())
        assert result["status"] == "ok", result["error"]
        assert not extra or result.get("capture"), "no capture"
    return took


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    python, scenarios = argv[0], argv[1:] or ["torch.lm", "transformers.gpt2"]
    out = HERE / "results" / "locate.json"
    rows = json.loads(out.read_text()) if out.exists() else {}
    for spec in scenarios:
        sid, _, where = spec.partition("@")
        n = STEPS.get(spec, 10)
        step = n if where == "probe" else n - 1  # the harness's step = steps: the probe
        normal = min(wall(python, sid, n) for _ in range(2))
        located = min(wall(python, sid, n, "--locate-step", str(step)) for _ in range(2))
        rows[spec] = {"normal_s": round(normal, 2), "located_s": round(located, 2),
                      "ratio": round(located / normal, 2), "steps": n,
                      "load": os.getloadavg()[0]}
        what = "the probe" if where == "probe" else "the last"
        print(f"{spec}: normal {normal:.2f} s ({n} steps), localisation run {located:.2f} s "
              f"(steps 0-{n - 1}, {what} captured): ×{located / normal:.2f}")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
