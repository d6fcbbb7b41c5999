"""Noise envelopes end to end (`record --repeat K`, `check --repeat K`): real numpy venvs, the
real CLI, and a user scenario that is nondeterministic on purpose — each run lands somewhere else,
as a GPU reduction with atomics does.

Its noise is seeded, so that a failure can be replayed: from NOISE_SEED (printed; set
LG_TEST_NOISE_SEED to draw others), the invocation's number and the run's own number
among the invocation's runs. A fresh draw lands outside an envelope about once in a thousand
(envelope.FAMILY_ALPHA); with os.urandom that was a flake, seeded it is a fixed outcome.
"""

from __future__ import annotations

import json
import os

import pytest

from conftest import golden_file, make_project, run_cli

pytestmark = pytest.mark.slow

# One draw per run moves the whole curve (and the outputs) by ~1e-4 relative: far beyond
# float64's tolerance, so without an envelope a rerun is `drift`. A shift_numpy2.txt beside the
# script shifts the curve of a numpy 2 environment only: a candidate lock whose numbers really
# moved (a file, not a variable: a training sees none of lockguard's environment).
NOISY_SCRIPT = '''
import math
import os

import numpy as np


def run(steps, seed):
    here = os.path.dirname(os.path.abspath(__file__))
    # The test's seed for this invocation, and this run's number among the invocation's runs:
    # the name of its scratch folder, which holds its own TMPDIR (a run reads no state of
    # another's, and the sandbox lets it write nothing outside its scratch).
    with open(os.path.join(here, "noise_seed.txt")) as f:
        invocation_seed = int(f.read())
    run_number = int(os.path.basename(os.path.dirname(os.environ["TMPDIR"])))
    z = np.random.default_rng([invocation_seed, run_number]).standard_normal()
    flag = os.path.join(here, "shift_numpy2.txt")
    shift = 0.0
    if np.__version__[0] == "2" and os.path.exists(flag):
        shift = float(open(flag).read())
    scale = 1 + 1e-4 * z + shift
    losses = [(2.0 * math.exp(-0.1 * s) + 0.01 * math.sin(s + seed)) * scale
              for s in range(steps)]
    outputs = np.linspace(0.5, 1.5, 3) * (1 + 1e-4 * z)
    return {"losses": losses, "outputs": outputs}
'''


NOISE_SEED = int(os.environ.get("LG_TEST_NOISE_SEED", "20261205"))


def noisy(*args: str, cwd):
    """`lockguard ARGS` in the noisy project, its runs drawing from the next invocation seed."""
    seed_file = cwd / "noise_seed.txt"
    seed = int(seed_file.read_text()) + 1
    seed_file.write_text(str(seed))
    print(f"noise: LG_TEST_NOISE_SEED={NOISE_SEED}, invocation seed {seed}")
    return run_cli(*args, cwd=cwd)


def noisy_project(root, numpy_locks):
    project = make_project(root, """
        lock = "new.txt"
        scenarios = ["noisy"]
        steps = 8
        [scenario.noisy]
        script = "noisy.py"
        framework = "numpy"
        """, files={"noisy.py": NOISY_SCRIPT},
        locks={"new.txt": numpy_locks["new"], "old.txt": numpy_locks["old"]})
    (project / "noise_seed.txt").write_text(str(NOISE_SEED * 1000))
    return project


def verdict_of(proc) -> dict:
    [verdict] = json.loads(proc.stdout)["verdicts"]
    return verdict


def test_a_deterministic_scenario_recorded_three_times_stays_exact(tmp_path, numpy_locks):
    project = make_project(tmp_path / "d", """
        lock = "new.txt"
        scenarios = ["numpy.mlp"]
        steps = 6
        """, locks={"new.txt": numpy_locks["new"]})
    proc = run_cli("record", "--repeat", "3", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "bitwise equal, the golden is compared exactly" in verdict_of(proc)["reasons"][-1]
    gold = json.loads(golden_file(project, "numpy.mlp").read_text())
    assert "envelope" not in gold
    assert (gold["provenance"]["repeats"], gold["provenance"]["deterministic"]) == (3, True)
    proc = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = verdict_of(proc)
    assert verdict["verdict"] == "identical" and verdict["envelope"] is None


def test_a_noisy_scenario_gets_an_envelope_and_is_judged_against_it(tmp_path, numpy_locks):
    project = noisy_project(tmp_path / "n", numpy_locks)
    proc = noisy("record", "--repeat", "5", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    gold = json.loads(golden_file(project, "noisy").read_text())
    envelope = gold["envelope"]
    assert envelope["k"] == 5 and gold["provenance"]["deterministic"] is False
    assert len(envelope["losses"]["std"]) == 8 and len(envelope["outputs"]["mean"]) == 3
    assert all(s > 0 for s in envelope["losses"]["std"])

    # The same lock again: another draw of the noise, inside the envelope.
    proc = noisy("check", "--rerun", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = verdict_of(proc)
    assert verdict["verdict"] == "within_tolerance", verdict["reasons"]
    assert verdict["reasons"][0].startswith("inside the noise envelope of 5 baseline runs")
    assert verdict["envelope"]["inside"] and verdict["envelope"]["k"] == 5

    # A candidate whose curve moved by 1 % either way leaves it: two-sided.
    for shift, side in (("0.01", "above"), ("-0.01", "below")):
        (project / "shift_numpy2.txt").write_text(shift)
        proc = noisy("check", "--rerun", "--format", "json", cwd=project)
        assert proc.returncode == 1, proc.stdout + proc.stderr
        verdict = verdict_of(proc)
        assert verdict["verdict"] == "drift", verdict["reasons"]
        assert verdict["envelope"]["first_outside_step"] == 0
        assert f" is {side} [" in verdict["reasons"][0]
        assert (verdict["envelope"]["worst_sigma"] > 0) == (side == "above")
    (project / "shift_numpy2.txt").write_text("0.01")
    text = noisy("check", "--rerun", cwd=project)
    assert "outside the noise envelope of 5 baseline runs from losses step 0" in text.stdout


def test_ab_repeat_uses_the_baselines_envelope(tmp_path, numpy_locks):
    project = noisy_project(tmp_path / "ab", numpy_locks)
    proc = noisy("check", "--rerun", "--repeat", "3", "--baseline-lock", "new.txt",
                   "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    verdict = verdict_of(proc)
    assert verdict["verdict"] == "within_tolerance", verdict["reasons"]
    assert verdict["envelope"]["k"] == 3 and verdict["envelope"]["runs"] == 3
    (project / "shift_numpy2.txt").write_text("-0.05")
    proc = noisy("check", "--repeat", "3", "--baseline-lock", "old.txt", "--format", "json",
                   cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    verdict = verdict_of(proc)
    assert verdict["verdict"] == "drift" and " is below [" in verdict["reasons"][0]
