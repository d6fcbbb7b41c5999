"""The docker backend on the newest CPython the frameworks support: images built on Debian
trixie's python3.13 (conftest.NEWEST_BASE, debootstrapped by .ci/test-base.sh as bookworm's
is), their locks' wheels downloaded on the host for cp313, and bundled scenarios recorded and
checked in them through the command line, as a user runs them: numpy.mlp, and jax.mlp (jax
0.10.2 publishes cp313 wheels on PyPI; torch's CPU build for cp313 is on PyTorch's index only,
which this machine kind cannot reach, and PyPI's torch is the ~5 GB CUDA build).

The result's fingerprint names the interpreter that trained (the container's, not the host's),
the image's labels the base it was built on, and the check, which trains again (--rerun), is
identical to the golden recorded in the same image.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import DATA, make_project, run_cli
from lockguard.envs.docker import BASE_IMAGE_ENV

pytestmark = pytest.mark.docker
NUMPY_LOCK = DATA / "numpy-2.2.6.txt"  # wheels for CPython 3.10-3.13
JAX_LOCK = DATA / "jax-0.10.2-py313.txt"  # jax-0.10.2.txt's pins, resolved for cp313


def record_and_check(project: Path, base: str, scenario: str) -> tuple[dict, dict]:
    """`record`, then `check --rerun` of `scenario` on images built on `base`: the golden's
    result and the check's JSON report."""
    env = {BASE_IMAGE_ENV: base}
    recorded = run_cli("record", cwd=project, env=env)
    assert recorded.returncode == 0, recorded.stdout + recorded.stderr
    [golden] = (project / "golden" / "cpu").glob(f"*/{scenario}.json")
    checked = run_cli("check", "--rerun", "--format", "json", cwd=project, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    return json.loads(golden.read_text())["result"], json.loads(checked.stdout)


def assert_trained_on_313(engine, base: str, result: dict, report: dict, scenario: str,
                          steps: int) -> None:
    """`result` trained `steps` steps on the image's python3.13, an image built on `base`,
    and the report's verdict is identical."""
    assert result["status"] == "ok" and len(result["losses"]) == steps, result.get("error")
    assert result["fingerprint"]["python"].startswith("3.13."), result["fingerprint"]["python"]
    labels = engine.images.get(result["fingerprint"]["image"]["tag"]).labels
    assert labels["lockguard.python"] == "3.13"
    assert labels["lockguard.base-digest"] == engine.images.get(base).id
    assert [(v["scenario"], v["verdict"]) for v in report["verdicts"]] == [
        (scenario, "identical")]


def test_numpy_scenario_in_a_trixie_image(engine, newest_base, tmp_path):
    project = make_project(tmp_path / "p", """
        lock = "numpy.lock"
        env = "docker"
        scenarios = ["numpy.mlp"]
        steps = 8
        """, locks={"numpy.lock": NUMPY_LOCK})
    result, report = record_and_check(project, newest_base, "numpy.mlp")
    assert_trained_on_313(engine, newest_base, result, report, "numpy.mlp", 8)
    assert result["framework_version"] == "2.2.6"


@pytest.mark.slow
def test_jax_scenario_in_a_trixie_image(engine, newest_base, tmp_path):
    project = make_project(tmp_path / "p", """
        lock = "jax.lock"
        env = "docker"
        scenarios = ["jax.mlp"]
        steps = 6
        """, locks={"jax.lock": JAX_LOCK})
    result, report = record_and_check(project, newest_base, "jax.mlp")
    assert_trained_on_313(engine, newest_base, result, report, "jax.mlp", 6)
    assert result["framework_version"] == "0.10.2"
