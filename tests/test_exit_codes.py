"""The exit-code map: a bug is exit 3 with a crash log; a gate that compared nothing fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import DATA, REPO, make_project, run_cli, snapshot

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()


def test_an_internal_error_is_exit_3_one_line_and_a_crash_log(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    cache = tmp_path / "cache"
    # A bug planted in the flow layer: what reaches the CLI is an ordinary ZeroDivisionError.
    code = ("import sys; from lockguard import cli\nfrom lockguard.flows import record as flow\n"
            "def bug(*a, **k): return 1 / 0\n"
            "flow.record = bug\n"
            "cli.main(['record'])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                          "LOCKGUARD_CACHE": str(cache),
                                          "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("lockguard: internal error: ZeroDivisionError: division by zero")
    assert "Traceback" not in line
    log = Path(line.rsplit(" in ", 1)[1].rstrip(")"))
    assert log.parent == cache / "crash"
    text = log.read_text()
    assert "Traceback" in text and "in bug" in text and "ZeroDivisionError" in text


def test_a_check_that_compares_nothing_fails_and_says_why(tmp_path):
    # The lock pins numpy only: every torch scenario is skipped, so nothing is compared.
    project = make_project(tmp_path / "p", 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    before = snapshot(project)
    for command in ("check", "record"):
        proc = run_cli(command, "--scenario", "torch", "--format", "json", cwd=project,
                       env={"LOCKGUARD_CACHE": str(tmp_path / "cache")})
        assert proc.returncode == 1, proc.stderr
        report = json.loads(proc.stdout)
        assert not report["passed"]
        assert {v["verdict"] for v in report["verdicts"]} == {"skipped"}
        [note] = report["notes"]
        assert note.startswith(f"nothing was {'compared' if command == 'check' else 'recorded'}")
        assert "no lock pins torch" in note
    assert snapshot(project) == before


def test_click_usage_errors_are_one_line(tmp_path):
    for args, fragment in ((["check", "--steps", "abc"], "'abc' is not a valid integer"),
                           (["--nope"], "No such option"), (["diff"], "Missing argument")):
        proc = run_cli(*args, cwd=tmp_path)
        assert proc.returncode == 2
        [line] = proc.stderr.splitlines()
        assert line.startswith("lockguard: error: ") and fragment in line, line
