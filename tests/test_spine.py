"""The spine end to end: lock → venv → harness → RunResult → compare → report → exit code.

Everything here runs the real CLI in a subprocess against real virtualenvs built by lockguard.
The numpy locks are cheap (one wheel); the torch lock is tests/data/torch-2.13.0.txt.
"""

from __future__ import annotations

import json
import os
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import (LOSS_EMA, TORCH_LOCK, golden_file, make_project, run_cli, scenario_args,
                      snapshot)
from fakes import other_cpu
from forked_cli import cli_env

pytestmark = pytest.mark.slow

EMA_SCRIPT = LOSS_EMA.read_text()


def _f32(x: float) -> float:
    return struct.unpack("<f", struct.pack("<f", x))[0]


def expected_nep50_divergence(steps: int, seed: int = 0) -> int:
    """First step where legacy promotion (float64 EMA) and NEP 50 (float32 EMA) part ways,
    computed independently of numpy in plain IEEE arithmetic."""
    import math

    legacy, nep50 = 0.0, 0.0
    for step in range(steps):
        raw = _f32(2.0 * math.exp(-0.05 * step) + 0.01 * math.sin(step + seed))
        # numpy 1.x: float32 * float32 stays float32 only while ema is float32 (step 0), then
        # `0.1 * raw` is float64 and so is everything after it.
        legacy = (_f32(legacy * _f32(0.9)) if step == 0 else legacy * _f32(0.9)) + 0.1 * raw
        nep50 = _f32(_f32(nep50 * _f32(0.9)) + _f32(_f32(0.1) * raw))
        if legacy != nep50:
            return step
    raise AssertionError("no divergence")


def ema_project(root: Path, locks: dict[str, Path], extra: str = "",
                tolerance: str = 'tolerance = "exact"') -> Path:
    return make_project(root, f"""
        lock = "new.txt"
        scenarios = ["loss_ema"]
        {extra}
        [scenario.loss_ema]
        script = "loss_ema.py"
        framework = "numpy"
        {tolerance}
        """, files={"loss_ema.py": EMA_SCRIPT}, locks={"new.txt": locks["new"],
                                                        "old.txt": locks["old"]})


def test_numpy_nep50_upgrade_is_drift_in_ab(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    proc = run_cli("check", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    [verdict] = report["verdicts"]
    assert verdict["verdict"] == "drift"
    assert verdict["first_divergent_step"] == expected_nep50_divergence(20)
    assert verdict["losses"]["max_abs"] > 0
    [change] = [c for c in report["lock_diffs"][0]["changes"] if c["kind"] != "unchanged"]
    assert (change["name"], change["old_version"], change["new_version"], change["bump"]) == (
        "numpy", "1.26.4", "2.0.2", "major")
    assert report["passed"] is False


def test_nep50_is_within_default_float32_tolerance(tmp_path, numpy_locks):
    """The promotion change moves the EMA by a few ULP: inside torch.testing's float32
    tolerance, so without `exact` it passes, still naming the first divergent step."""
    project = ema_project(tmp_path / "p", numpy_locks, tolerance="")
    proc = run_cli("check", "--baseline-lock", "old.txt", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    [verdict] = json.loads(proc.stdout)["verdicts"]
    assert verdict["verdict"] == "within_tolerance"
    assert verdict["first_divergent_step"] == expected_nep50_divergence(20)
    assert 0 < verdict["losses"]["max_ulp"] <= 4


def test_same_lock_on_both_sides_is_identical(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    # --rerun: the same lock on both sides runs (else it is answered at once, unchanged).
    proc = run_cli("check", "--baseline-lock", "new.txt", "--rerun", "--format", "json",
                   cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    [verdict] = json.loads(proc.stdout)["verdicts"]
    assert verdict["verdict"] == "identical"


def test_text_and_markdown_reports_name_the_evidence(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    text = run_cli("check", "--baseline-lock", "old.txt", cwd=project)
    assert text.returncode == 1
    step = expected_nep50_divergence(20)
    assert f"from step {step}" in text.stdout
    assert "numpy 1.26.4 → 2.0.2 (upgraded, major)" in text.stdout
    assert "FAIL check" in text.stdout
    md = run_cli("check", "--baseline-lock", "old.txt", "--format", "markdown", cwd=project)
    assert md.stdout.startswith("❌ lockguard: 1 of 1 scenario drifted (numpy 1.26.4 → 2.0.2)\n")
    assert f"- ❌ **loss\\_ema** (numpy): drift — from step {step};" in md.stdout


def test_one_ab_run_writes_every_report_and_they_agree(tmp_path, numpy_locks):
    """The NEP 50 drift, once, with -v: JUnit, Markdown, GitHub annotations and JSON from one
    run, each parsed; `lockguard report` re-renders the JSON into the same bytes."""
    import xml.etree.ElementTree as ET

    project = ema_project(tmp_path / "p", numpy_locks)
    reports = tmp_path / "reports"
    proc = run_cli("check", "-v", "--baseline-lock", "old.txt",
                   "--report", f"junit={reports / 'junit.xml'}",
                   "--report", f"markdown={reports / 'report.md'}",
                   "--report", f"github={reports / 'annotations.txt'}",
                   "--report", f"json={reports / 'report.json'}", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    step = expected_nep50_divergence(20)
    assert f"from step {step}" in proc.stdout and "FAIL check" in proc.stdout  # the table
    # Progress: n of N for the runs, and -v shows the harness commands.
    assert "1 of 2: loss_ema" in proc.stderr and "2 of 2: loss_ema" in proc.stderr
    assert proc.stderr.count("--scenario loss_ema") >= 2 and "$ " in proc.stderr

    numpy_line = next(i for i, line in enumerate(
        (project / "new.txt").read_text().splitlines(), 1) if line.startswith("numpy=="))
    [case] = ET.parse(reports / "junit.xml").getroot().iter("testcase")
    assert (case.get("classname"), case.get("name")) == ("numpy", "loss_ema")
    failure = case.find("failure")
    assert failure.get("type") == "drift" and f"from step {step}" in failure.get("message")
    assert f"new.txt:{numpy_line} numpy 1.26.4 → 2.0.2" in failure.text

    [annotation] = (reports / "annotations.txt").read_text().splitlines()
    assert annotation.startswith(f"::error file=new.txt,line={numpy_line},title=lockguard%3A "
                                 "loss_ema drift")

    md = (reports / "report.md").read_text()
    assert md.splitlines()[0] == "❌ lockguard: 1 of 1 scenario drifted (numpy 1.26.4 → 2.0.2)"
    assert "<!-- lockguard-report -->" in md
    assert "lockguard check --baseline-lock old.txt --scenario loss_ema" in md

    document = json.loads((reports / "report.json").read_text())
    assert document["schema_version"] == 4 and document["failing"] == ["loss_ema"]
    # Both sides' per-step losses travel with the report: the curves, and what `accept` adopts.
    [proof] = document["evidence"]
    old_losses = proof["baseline"]["result"]["losses"]
    new_losses = proof["candidate"]["result"]["losses"]
    assert len(old_losses) == len(new_losses) == 20
    assert old_losses[:step] == new_losses[:step] and old_losses[step] != new_losses[step]
    assert proof["baseline"]["name"] == "old.txt" and proof["candidate"]["name"] == "new.txt"
    for fmt, name in (("markdown", "report.md"), ("junit", "junit.xml"),
                      ("github", "annotations.txt")):
        again = run_cli("report", str(reports / "report.json"), "--format", fmt, cwd=project)
        assert again.returncode == 1, again.stderr
        assert again.stdout == (reports / name).read_text()


def test_record_then_check_with_golden(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    rec = run_cli("record", cwd=project)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    golden = golden_file(project, "loss_ema")
    document = json.loads(golden.read_text())
    assert document["provenance"]["lock_hash"] and document["result"]["status"] == "ok"

    fast = run_cli("check", "--format", "json", cwd=project)
    assert fast.returncode == 0
    assert "not re-run" in json.loads(fast.stdout)["verdicts"][0]["reasons"][0]

    rerun = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert rerun.returncode == 0
    assert json.loads(rerun.stdout)["verdicts"][0]["verdict"] == "identical"

    # The golden was recorded with numpy 2.0.2; checking the old lock against it is drift.
    old = run_cli("check", "--lock", "old.txt", "--format", "json", cwd=project)
    assert old.returncode == 1
    assert json.loads(old.stdout)["verdicts"][0]["verdict"] == "drift"


def test_torch_record_check_identical_then_corrupt_golden(tmp_path):
    project = make_project(tmp_path / "t", """
        lock = "requirements.txt"
        steps = 6
        scenarios = ["torch.mlp", "torch.lm", "torch.lm.bf16"]
        """, locks={"requirements.txt": TORCH_LOCK})
    rec = run_cli("record", cwd=project)
    assert rec.returncode == 0, rec.stdout + rec.stderr
    for sid in ("torch.mlp", "torch.lm", "torch.lm.bf16"):
        result = json.loads(golden_file(project, sid).read_text())["result"]
        assert result["framework_version"].startswith("2.13.0")
        assert len(result["losses"]) == 6 and result["param_digest"]
    check = run_cli("check", "--rerun", "--format", "json", cwd=project)
    assert check.returncode == 0, check.stdout + check.stderr
    assert {v["verdict"] for v in json.loads(check.stdout)["verdicts"]} == {"identical"}

    golden = golden_file(project, "torch.lm")
    golden.write_text(golden.read_text()[:200])
    before = snapshot(project)
    bad = run_cli("check", cwd=project)
    assert bad.returncode == 2
    assert bad.stderr.strip().count("\n") == 0
    assert "torch.lm.json" in bad.stderr and "corrupt golden" in bad.stderr
    assert snapshot(project) == before


def test_expected_cuda_on_a_cpu_machine_is_device_fallback(tmp_path):
    project = make_project(tmp_path / "d", """
        lock = "requirements.txt"
        steps = 3
        """, locks={"requirements.txt": TORCH_LOCK})
    proc = run_cli("check", "--scenario", "torch.mlp", "--device", "cuda", "--allow-new",
                   "--format", "json", cwd=project)
    assert proc.returncode == 1, proc.stderr
    [verdict] = json.loads(proc.stdout)["verdicts"]
    assert verdict["verdict"] == "device_fallback"
    assert (verdict["expected_device"], verdict["found_device"]) == ("cuda", "cpu")


@pytest.mark.parametrize("body, status_text", [
    ("def run(steps, seed):\n    raise RuntimeError('boom in user code')\n", "boom in user code"),
    ("def run(steps, seed):\n    return [1.0, float('nan')] + [0.5] * (steps - 2)\n", "nan"),
    ("import time\ndef run(steps, seed):\n    time.sleep(120)\n", "no result after 5 s"),
    # Results are checked in full on arrival: short, non-finite anywhere, or of another shape.
    ("def run(steps, seed):\n    return [1.0] * 5\n", "5 losses for 20 steps"),
    ("def run(steps, seed):\n    return {'losses': [1.0] * steps, 'outputs': [0.5, float('nan')]}\n",
     "output 1 is nan"),
    ("def run(steps, seed):\n    return {'losses': [1.0] * steps, "
     "'grad_norms': [float('inf')] * steps}\n", "gradient norm 0 is inf"),
    ("def run(steps, seed):\n    return {'losses': [1.0] * steps, 'grad_norms': [1.0]}\n",
     "1 gradient norms for 20 steps"),
])
def test_broken_runs_are_reported_not_raised(tmp_path, numpy_locks, body, status_text):
    # The sleeping case times out after 5 s; the others have 300 s, room for numpy's
    # import on a loaded machine (a slow import there was "no result after 5 s", not theirs).
    timeout = 5 if "time.sleep" in body else 300
    project = make_project(tmp_path / "b", f"""
        lock = "new.txt"
        timeout = {timeout}
        [scenario.bad]
        script = "bad.py"
        framework = "numpy"
        """, files={"bad.py": body}, locks={"new.txt": numpy_locks["new"]})
    start = time.monotonic()
    proc = run_cli("check", "--scenario", "bad", "--allow-new", "--format", "json", cwd=project)
    if timeout == 5:
        assert time.monotonic() - start < 60  # stopped at its timeout, not at the sleep's end
    assert proc.returncode == 1, proc.stderr
    [verdict] = json.loads(proc.stdout)["verdicts"]
    assert verdict["verdict"] == "broken"
    assert status_text in (verdict["error"] or "") + " ".join(verdict["reasons"])


# A user scenario beside modules named like the harness's: each says whose it is, and the
# script fails unless every import found the user's own.
SHADOW_SCRIPT = """\
import common
import gen
import numpy_
import userscript
from common import MARKER

import numpy as np

assert MARKER == "the user's common", MARKER
assert (gen.MARKER, numpy_.MARKER, userscript.MARKER) == (
    "the user's gen", "the user's numpy_", "the user's userscript")


def run(steps, seed):
    x = np.float32(gen.START) + np.arange(steps, dtype=np.float32)
    return [float(v) for v in np.float32(common.SCALE) / x]
"""


def test_user_modules_named_like_the_harness_s_are_the_user_s(tmp_path, numpy_locks):
    """A user script may import its own common.py, gen.py, ... : the harness's modules never
    shadow them, and the harness (here numpy.mlp, which uses its own gen and common) still
    runs with them in the user's folder."""
    project = make_project(tmp_path / "s", """
        lock = "new.txt"
        scenarios = ["mine", "numpy.mlp"]
        [scenario.mine]
        script = "scenarios/mine.py"
        framework = "numpy"
        """, files={"scenarios/mine.py": SHADOW_SCRIPT,
                    "scenarios/common.py": "MARKER = \"the user's common\"\nSCALE = 3.0\n",
                    "scenarios/gen.py": "MARKER = \"the user's gen\"\nSTART = 2.0\n",
                    "scenarios/numpy_.py": "MARKER = \"the user's numpy_\"\n",
                    "scenarios/userscript.py": "MARKER = \"the user's userscript\"\n"},
        locks={"new.txt": numpy_locks["new"]})
    proc = run_cli("check", "--allow-new", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert {v["scenario"]: v["verdict"] for v in report["verdicts"]} == {
        "mine": "new", "numpy.mlp": "new"}
    runs = {e["scenario"]: e["candidate"]["result"] for e in report["evidence"]}
    assert runs["mine"]["status"] == "ok", runs["mine"]["error"]
    assert runs["mine"]["losses"] == [_f32(3.0 / (2.0 + s)) for s in range(20)]
    assert runs["numpy.mlp"]["status"] == "ok", runs["numpy.mlp"]["error"]
    assert len(runs["numpy.mlp"]["losses"]) == 30


def command_lines() -> str:
    """Every process's command line, from /proc (ps truncates long lines)."""
    lines = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            lines.append(cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            continue
    return "\n".join(lines)


def test_killed_record_leaves_previous_goldens_intact(tmp_path, numpy_locks):
    project = make_project(tmp_path / "k", """
        lock = "new.txt"
        scenarios = ["ema", "slow"]
        [scenario.ema]
        script = "ema.py"
        framework = "numpy"
        [scenario.slow]
        script = "slow.py"
        framework = "numpy"
        """, files={"ema.py": EMA_SCRIPT,
                    # (a flag file, not a variable: a training sees none of the test's
                    # environment, lockguard/allowlist.py)
                    "slow.py": "import os, time\n"
                               "def run(steps, seed):\n"
                               "    here = os.path.dirname(os.path.abspath(__file__))\n"
                               "    if os.path.exists(os.path.join(here, 'slow.flag')):\n"
                               "        time.sleep(300)\n"
                               "    return [1.0 / (s + 1) for s in range(steps)]\n"},
        locks={"new.txt": numpy_locks["new"]})
    assert run_cli("record", cwd=project).returncode == 0
    before = snapshot(project / "golden")
    here = golden_file(project, "ema").parent.relative_to(project / "golden")
    assert set(before) == {f"{here}/ema.json", f"{here}/slow.json"}

    (project / "slow.flag").write_text("")
    env = cli_env()
    proc = subprocess.Popen([sys.executable, "-m", "lockguard", "record", "--format", "json"],
                            cwd=project, env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    # Wait until the fast scenario has finished and the slow one is training, then kill -9.
    while time.monotonic() < deadline:
        running = command_lines()
        if "slow.py" in running and "ema.py" not in running:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the slow scenario never started")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert snapshot(project / "golden") == before


def test_second_record_reinstalls_nothing(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "c", numpy_locks)
    assert run_cli("record", cwd=project).returncode == 0
    from lockguard.cache import cache_dir

    logs = {p: p.stat().st_mtime_ns for p in (cache_dir() / "venvs").glob("*/install.log")}
    again = run_cli("record", "-v", cwd=project)
    assert again.returncode == 0
    assert "Building venv" not in again.stderr
    assert {p: p.stat().st_mtime_ns for p in logs} == logs


def test_two_concurrent_checks_share_one_cache(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "cc", numpy_locks)
    env = cli_env({"LOCKGUARD_CACHE": str(tmp_path / "cache")})
    cmd = [sys.executable, "-m", "lockguard", "check", "--rerun", "--baseline-lock", "new.txt",
           "--format", "json"]
    procs = [subprocess.Popen(cmd, cwd=project, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    venvs = [p for p in (tmp_path / "cache" / "venvs").iterdir() if p.is_dir()
             and not p.name.endswith("compile-cache")]
    assert len(venvs) == 1
    assert (venvs[0] / "lockguard-ready.json").is_file()


def test_the_projects_own_goldens_reproduce():
    """golden/cpu/<class>/ holds the project's references for each hardware class they were
    recorded on. On a machine of a recorded class every scenario reproduces bit for bit; on any
    other x86-64 machine the check compares with another class's golden and must not fail: the
    verdict is identical or other_hardware, never a dependency verdict (drift).

    That needs the goldens recorded from today's inputs: the harness, the scenarios and the
    variables a training sees (PATH among them: the compiler torch.compile finds), which no
    two machines' shells share. So they are recorded, and checked here, in one environment,
    GOLDEN_ENV (docs/development.md gives the command), and every golden's inputs digest must
    be today's, on every machine: a harness change not followed by a re-record fails here,
    not only on a machine of a class the goldens were not recorded on."""
    from conftest import GOLDEN_ENV, REPO
    from forked_cli import run
    from lockguard.hardware import host_class

    here = host_class("cpu")
    chosen = ["torch.mlp", "numpy.mlp", "jax.mlp", "tf.keras"]
    ours = {sid for sid in chosen if (REPO / "golden" / "cpu" / here.id / f"{sid}.json").is_file()}
    env = {k: os.environ[k] for k in ("HOME", "LOCKGUARD_CACHE", "TMPDIR") if k in os.environ}
    proc = run(["check", "--rerun", *scenario_args(chosen), "--format", "json"], REPO,
               {**env, **GOLDEN_ENV}, 900)
    report = json.loads(proc.stdout) if proc.stdout.startswith("{") else {}
    today = {e["scenario"]: e["candidate"]["inputs_digest"] for e in report.get("evidence", [])}
    stale = [f"{path.parent.name}/{path.name}" for sid in chosen
             for path in sorted((REPO / "golden" / "cpu").glob(f"*/{sid}.json"))
             if json.loads(path.read_text())["provenance"]["inputs_digest"] != today.get(sid)]
    assert not stale, (f"the project's goldens {stale} were recorded from other inputs than "
                       "today's (harness, scenario, settings or environment): re-record them "
                       "as docs/development.md says")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr
    verdicts = {v["scenario"]: v for v in report["verdicts"]}
    for sid, v in verdicts.items():
        if sid in ours:  # same hardware class: bitwise identity, the golden of this class
            assert v["verdict"] == "identical" and v["hardware"] is None, (sid, v["reasons"])
        else:
            assert v["verdict"] in ("identical", "other_hardware"), (sid, v["reasons"])
            assert here.id in v["hardware"]["current"], v["hardware"]


# ------------------------------------------------------------------ hardware classes, trust

AMD = other_cpu()
AMD_NAME = AMD["model"].removesuffix(" 64-Core Processor")  # "AMD EPYC 7B13"


def as_if_recorded_elsewhere(project: Path, sid: str, nudge_loss: int | None = None,
                             source: Path | None = None) -> str:
    """Turn the golden of `sid` at `source` (default: this machine's) into one recorded on
    another CPU (an AMD EPYC): another fingerprint, in that class's folder, re-digested by
    golden.py's own writer. `nudge_loss`: also move that step's loss by one float32 ULP, as
    another CPU's kernels would. Returns the other class's id."""
    from lockguard import golden
    from lockguard.hardware import hardware_class
    from lockguard.results import RunResult

    path = source or golden_file(project, sid)
    document = json.loads(path.read_text())
    result = document["result"]
    result["fingerprint"]["cpu"].update(AMD)
    if nudge_loss is not None:
        value = result["losses"][nudge_loss]
        bits = struct.unpack("<I", struct.pack("<f", value))[0]
        result["losses"][nudge_loss] = struct.unpack("<f", struct.pack("<I", bits + 1))[0]
    other = hardware_class(result["fingerprint"], "cpu")
    provenance = {k: v for k, v in document["provenance"].items()
                  if k not in ("lockguard_version", "recorded_at")}
    target = golden.golden_path(project / "golden", "cpu", other.id, sid)
    golden.write(target, RunResult.model_validate(result), golden.Provenance(**provenance), other)
    if target != path:
        path.unlink()
        path.parent.rmdir()
    return other.id


def test_golden_of_another_hardware_class_is_never_a_dependency_verdict(tmp_path, numpy_locks):
    from lockguard.hardware import host_class

    here = host_class("cpu")
    project = ema_project(tmp_path / "p", numpy_locks, extra='fail_on = ["drift", "broken", '
                          '"compile_fallback", "device_fallback", "incomparable"]')
    assert run_cli("record", cwd=project).returncode == 0
    other = as_if_recorded_elsewhere(project, "loss_ema")

    # Same lock, other CPU, and the same numbers: identical, naming both classes. No shortcut:
    # the golden is not of this machine's class.
    same = run_cli("check", "--format", "json", cwd=project)
    assert same.returncode == 0, same.stdout + same.stderr
    report = json.loads(same.stdout)
    [v] = report["verdicts"]
    assert v["verdict"] == "identical" and "not re-run" not in v["reasons"][0]
    assert AMD_NAME in v["hardware"]["golden"] and other in v["hardware"]["golden"]
    assert here.id in v["hardware"]["current"]
    assert any("AMD EPYC" in r and here.name in r for r in v["reasons"])
    assert any(other in n and here.id in n for n in report["notes"])
    assert report["hardware"]["cpu"]["id"] == here.id

    # The other CPU's kernels moved a loss by one ULP: other_hardware, shown, not judged; the
    # text report names both machines, the difference and the remedy.
    sid = "loss_ema"
    as_if_recorded_elsewhere(project, sid, nudge_loss=5,
                             source=project / "golden" / "cpu" / other / f"{sid}.json")
    moved = run_cli("check", "--format", "json", cwd=project)
    assert moved.returncode == 0, moved.stdout + moved.stderr
    [v] = json.loads(moved.stdout)["verdicts"]
    assert v["verdict"] == "other_hardware", v["reasons"]
    assert v["first_divergent_step"] == 5 and v["losses"]["max_ulp"] >= 1
    assert v["hardware"]["same_inputs"] is True
    text = run_cli("check", cwd=project)
    assert text.returncode == 0
    words = " ".join(text.stdout.split())  # the evidence column wraps at the terminal's width
    assert "other_hardware" in words and AMD_NAME in words
    assert here.name in words and "lockguard record --scenario loss_ema" in words

    # The lock changed as well (numpy 2.0.2 -> 1.26.4 moves the EMA): hardware and dependency
    # cannot be told apart — incomparable, which this project's gate fails on.
    changed = run_cli("check", "--lock", "old.txt", "--format", "json", cwd=project)
    assert changed.returncode == 1, changed.stdout + changed.stderr
    [v] = json.loads(changed.stdout)["verdicts"]
    assert v["verdict"] == "incomparable", v["reasons"]
    assert AMD_NAME in v["reasons"][0] and "the lock changed too" in v["reasons"][0]
    assert v["hardware"]["lock_changed"] is True

    # Recording on this machine adds its class beside the other one, which stays.
    assert run_cli("record", cwd=project).returncode == 0
    assert golden_file(project, sid).is_file()
    assert (project / "golden" / "cpu" / other / f"{sid}.json").is_file()
    fast = run_cli("check", "--format", "json", cwd=project)
    [v] = json.loads(fast.stdout)["verdicts"]
    assert v["verdict"] == "unchanged" and "not re-run" in v["reasons"][0] and not v["hardware"]


def test_the_shortcut_never_answers_from_an_edited_golden(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    assert run_cli("record", cwd=project).returncode == 0
    path = golden_file(project, "loss_ema")
    recorded = path.read_text()
    assert json.loads(run_cli("check", "--format", "json", cwd=project).stdout)[
        "verdicts"][0]["verdict"] == "unchanged"

    def tampered(change) -> subprocess.CompletedProcess[str]:
        document = json.loads(recorded)
        change(document)
        path.write_text(json.dumps(document, indent=1))
        return run_cli("check", "--format", "json", cwd=project)

    for change in (lambda d: d.update(result={}),
                   lambda d: d["result"]["losses"].__setitem__(3, 0.125),
                   lambda d: d["result"].update(losses=d["result"]["losses"][:5]),
                   lambda d: d["result"].update(status="crashed")):
        proc = tampered(change)  # provenance untouched: the inputs digest still matches
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout
        assert "edited since it was recorded" in proc.stderr and "loss_ema.json" in proc.stderr
        assert proc.stderr.strip().count("\n") == 0


def test_record_replaces_a_corrupt_or_old_schema_golden(tmp_path, numpy_locks):
    project = ema_project(tmp_path / "p", numpy_locks)
    path = golden_file(project, "loss_ema")
    legacy = project / "golden" / "cpu" / "loss_ema.json"
    for bad in ('{"schema_version": 1, "provenance": {}, "result": {}}', "{trunc", "\udcff"):
        for where in (path, legacy):
            where.parent.mkdir(parents=True, exist_ok=True)
            where.write_text(bad, errors="surrogateescape")
        refused = run_cli("check", cwd=project)
        assert refused.returncode == 2 and "re-record it" in refused.stderr
        rec = run_cli("record", "--format", "json", cwd=project)
        assert rec.returncode == 0, rec.stdout + rec.stderr
        notes = " ".join(json.loads(rec.stdout)["notes"])
        assert "replacing unusable golden" in notes and "removed" in notes
        assert not legacy.exists()
        assert json.loads(path.read_text())["schema_version"] == 2
        check = run_cli("check", "--format", "json", cwd=project)
        assert check.returncode == 0, check.stdout + check.stderr
