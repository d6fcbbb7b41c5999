"""One check across torch, jax and tensorflow, each in its own environment; real upgrades.

The upgrade tests measure the truth independently and assert that lockguard's report says exactly
that: what changed, from which step, and nothing that did not. Every verdict is recomputed in
plain Python from the numbers of its two runs (the report's evidence), and those numbers are the
harness's own: one scenario of each upgrade is run again by hand in both environments, no
lockguard in between, and must give them to the bit (on one machine a run reproduces, as the
three-framework test below shows for every scenario). Running every scenario by hand as well
doubled these tests' trainings.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (DATA, NUMERICS_ONLY, TORCH_LOCK, golden_file, make_project,
                      prepared_venv, run_cli, scenario_args, sides, three_framework_project)

pytestmark = pytest.mark.slow

TORCH = TORCH_LOCK
# Scenarios of issue 3's suite (the compiled ones have tests of their own).
SUITE = ["torch.mlp", "torch.lm", "torch.lm.bf16", "torch.rng", "numpy.mlp",
         "jax.mlp", "jax.lm", "jax.lm.bf16", "jax.rng",
         "tf.mlp", "tf.mlp.xla", "tf.keras", "tf.lm", "tf.rng"]


def by_hand(lock: Path, scenario: str, out: Path, steps: int) -> dict:
    """Run the harness directly in lockguard's cached venv for `lock`, no lockguard in between."""
    from lockguard.locks.parser import parse_lock
    from lockguard.envs.harness import ENTRY, HARNESS_DIR

    env = prepared_venv(parse_lock(lock))
    subprocess.run([str(env.python), str(HARNESS_DIR / ENTRY), "--scenario", scenario,
                    "--steps", str(steps), "--out", str(out)], check=True, timeout=600,
                   env={**os.environ, "PYTHONHASHSEED": "0"})
    return json.loads(out.read_text())


def first_bitwise_difference(old: list[float], new: list[float]) -> int | None:
    return next((i for i, (a, b) in enumerate(zip(old, new)) if a != b), None)


def beyond(old: list[float], new: list[float], rtol: float, atol: float) -> bool:
    return any(abs(a - b) > atol + rtol * abs(b) for a, b in zip(new, old))


TOL = {"float32": (1.3e-6, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
# The default fail_on (docs/configuration.md): a check with one of these verdicts exits 1
# (slower and heavier are out of reach: NUMERICS_ONLY).
FAILING = {"drift", "compile_fallback", "device_fallback", "broken", "incomparable"}


def expected_exit(report: dict) -> int:
    """The exit status docs/configuration.md gives this report's verdicts and rule failures."""
    failing = any(v["verdict"] in FAILING for v in report["verdicts"])
    return 1 if failing or report.get("rule_failures") else 0
NUMBERS = ("losses", "grad_norms", "outputs", "param_digest")


def assert_report_tells_the_truth(report: dict, tmp: Path, old_lock: Path, new_lock: Path,
                                  steps: dict[str, int], by_hand_scenario: str) -> None:
    verdicts = {v["scenario"]: v for v in report["verdicts"]}
    assert set(verdicts) == set(steps)
    for sid, n in steps.items():
        old, new = sides(report, sid)
        assert old["steps"] == new["steps"] == n, sid
        v = verdicts[sid]
        assert v["first_divergent_step"] == first_bitwise_difference(old["losses"],
                                                                    new["losses"]), sid
        rtol, atol = TOL[old["dtype"]]
        moved = any(beyond(old[k], new[k], rtol, atol)
                    for k in ("losses", "grad_norms", "outputs"))
        same = all(old[k] == new[k] for k in NUMBERS)
        expected = "drift" if moved else "identical" if same else "within_tolerance"
        assert v["verdict"] == expected, (sid, v["verdict"], v["reasons"])
    sid = by_hand_scenario
    for lock, run in zip((old_lock, new_lock), sides(report, sid)):
        hand = by_hand(lock, sid, tmp / f"{sid}-{lock.stem}.json", steps[sid])
        assert {k: hand[k] for k in NUMBERS} == {k: run[k] for k in NUMBERS}, (sid, lock.name)


def test_three_frameworks_in_one_check(tmp_path):
    project = three_framework_project(tmp_path / "p", f"""
        scenarios = {json.dumps(SUITE)}
        {NUMERICS_ONLY}
        """)
    # A run's temporary files go with it: tensorflow's autograph means to delete its files at
    # exit, which the harness skips. (A TMPDIR as short as /tmp's children: below pytest's
    # tmp_path a run's own would leave no room for a socket, and the run would keep this one.)
    tmp = Path(tempfile.mkdtemp(prefix="lg-"))
    try:
        rec = run_cli("record", "--format", "json", cwd=project, env={"TMPDIR": str(tmp)})
        left = sorted(p.name for p in tmp.iterdir())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    assert rec.returncode == 0, rec.stdout[-3000:] + rec.stderr
    assert left == []
    recorded = json.loads(rec.stdout)
    assert len(recorded["written"]) == len(SUITE)
    # Each framework ran in the environment of the lock that pins it, never together.
    for sid in SUITE:
        result = json.loads(golden_file(project, sid).read_text())
        lock = result["provenance"]["lock"]
        framework = result["result"]["framework"]
        assert Path(lock).name == {"torch": "torch.txt", "jax": "jax.txt",
                                   "tensorflow": "tf.txt", "numpy": "torch.txt"}[framework]
    parity = {row["family"]: row for row in recorded["parity"]}
    assert set(parity["mlp"]["step0"]) == {"torch.mlp", "numpy.mlp", "jax.mlp", "tf.mlp",
                                           "tf.mlp.xla", "tf.keras"}
    assert parity["mlp"]["max_rel_spread"] < 1e-6
    assert set(parity["lm"]["step0"]) == {"torch.lm", "jax.lm", "tf.lm"}
    assert parity["lm"]["max_rel_spread"] < 1e-5

    # Run-to-run: every scenario reproduces its golden bit for bit.
    check = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert check.returncode == 0, check.stdout[-3000:]
    verdicts = {v["scenario"]: v["verdict"] for v in json.loads(check.stdout)["verdicts"]}
    assert verdicts == {sid: "identical" for sid in SUITE}


def test_jax_0_9_2_to_0_10_2(tmp_path):
    project = make_project(tmp_path / "p", f"""
        lock = "jax.txt"
        {NUMERICS_ONLY}
        """, locks={"jax.txt": DATA / "jax-0.10.2.txt", "old.txt": DATA / "jax-0.9.2.txt"})
    # The scenarios checked below, not all of the prefix (the data and data-parallel
    # ones have tests of their own).
    steps = {"jax.mlp": 30, "jax.lm": 20, "jax.lm.bf16": 20, "jax.rng": 30}
    proc = run_cli("check", *scenario_args(steps), "--baseline-lock", "old.txt", "--format",
                   "json", cwd=project)
    report = json.loads(proc.stdout)
    changed = [(c["name"], c["old_version"], c["new_version"])
               for c in report["lock_diffs"][0]["changes"] if c["kind"] != "unchanged"]
    assert changed == [("jax", "0.9.2", "0.10.2"), ("jaxlib", "0.9.2", "0.10.2")]
    assert_report_tells_the_truth(report, tmp_path, project / "old.txt", project / "jax.txt",
                                  steps, by_hand_scenario="jax.lm")
    assert proc.returncode == expected_exit(report), (proc.returncode, report["verdicts"])


def test_tensorflow_2_20_to_2_21(tmp_path):
    project = make_project(tmp_path / "p", f"""
        lock = "tf.txt"
        {NUMERICS_ONLY}
        """, locks={"tf.txt": DATA / "tf-2.21.0.txt", "old.txt": DATA / "tf-2.20.0.txt"})
    steps = {"tf.mlp": 30, "tf.mlp.xla": 30, "tf.keras": 30, "tf.lm": 20, "tf.rng": 30}
    proc = run_cli("check", *scenario_args(steps), "--baseline-lock", "old.txt", "--format",
                   "json", cwd=project)
    report = json.loads(proc.stdout)
    changes = {c["name"]: c["kind"] for c in report["lock_diffs"][0]["changes"]
               if c["kind"] != "unchanged"}
    assert changes == {"tensorflow-cpu": "upgraded", "tensorboard": "removed",
                       "tensorboard-data-server": "removed", "markdown": "removed",
                       "markupsafe": "removed", "pillow": "removed", "werkzeug": "removed"}
    assert_report_tells_the_truth(report, tmp_path, project / "old.txt", project / "tf.txt",
                                  steps, by_hand_scenario="tf.mlp.xla")


@pytest.mark.parametrize("scenario, lock", [("jax.mlp", "jax-0.10.2.txt"),
                                            ("tf.mlp", "tf-2.21.0.txt")])
def test_expected_cuda_on_cpu_is_device_fallback(tmp_path, scenario, lock):
    project = make_project(tmp_path / "p", 'lock = "l.txt"\ndevice = "cuda"\nsteps = 3',
                           locks={"l.txt": DATA / lock})
    proc = run_cli("check", "--scenario", scenario, "--allow-new", "--format", "json",
                   cwd=project)
    assert proc.returncode == 1, proc.stderr
    [v] = json.loads(proc.stdout)["verdicts"]
    assert (v["verdict"], v["expected_device"], v["found_device"]) == (
        "device_fallback", "cuda", "cpu")


def test_scenarios_of_unpinned_frameworks_are_skipped(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "l.txt"', locks={"l.txt": TORCH})
    proc = run_cli("check", "--scenario", "jax.mlp", "--scenario", "tf.mlp", "--format", "json",
                   cwd=project)
    # Nothing was compared, so the gate does not pass (and says why).
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["notes"][0].startswith("nothing was compared: all 2 selected scenarios")
    verdicts = report["verdicts"]
    assert [v["verdict"] for v in verdicts] == ["skipped", "skipped"]
    assert "no lock pins jax" in verdicts[0]["reasons"][0]
    assert "no lock pins tensorflow" in verdicts[1]["reasons"][0]
