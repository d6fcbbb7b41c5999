"""Terminal manners: the text report wraps and never crops at any width from 40 columns, a CI
log gets whole lines and a heartbeat during long steps, runs are named by role and lock, and a
failing check says what to do next. Fast: no environment is built."""

from __future__ import annotations

import io
import os
import re
import threading
import time

import pytest

from fakes import FakeBackend, lock
from lockguard import progress as progress_module
from lockguard.config import Config
from lockguard.flows.ab import check_ab
from lockguard.flows.record import FIRST, record
from lockguard.report import render
from lockguard.report._common import next_steps, summary_line
from lockguard.scenarios import bundled
from lockguard.settings import Settings

from test_report_formats import drift_report  # noqa: F401 - a fixture

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]


@pytest.mark.parametrize("width", [40, 47, 60, 72, 80, 100, 140])
def test_the_text_report_wraps_and_never_crops(drift_report, width):  # noqa: F811
    text = render(drift_report, "text", width=width)
    assert max(len(line) for line in text.splitlines()) <= width
    flat = " ".join(text.split())
    for v in drift_report.compared:
        # Every word of every cell is there whole (a cropped cell loses its ends).
        for word in summary_line(v).split() + [v.scenario, v.verdict.value]:
            assert word in flat, (width, word)


class _Log(io.StringIO):
    def isatty(self) -> bool:
        return False


def log_progress(monkeypatch) -> tuple[progress_module.Progress, _Log]:
    out = _Log()
    monkeypatch.setattr("sys.stderr", out)
    return progress_module.Progress(), out


def test_a_log_gets_whole_lines_and_a_heartbeat_naming_what_runs(monkeypatch):
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.05)
    shown, out = log_progress(monkeypatch)
    long_message = "Building venv for requirements.txt " + "(11 pins, uv, wheels-only) " * 4
    with shown.step(long_message, total=2) as step:
        step.begin("torch.lm.compile [candidate requirements.txt]")
        time.sleep(0.3)
        step.end("torch.lm.compile [candidate requirements.txt]")
        step.advance()
    lines = out.getvalue().splitlines()
    assert lines[0] == long_message + " …"  # one line, however long
    beats = [ln for ln in lines if "running torch.lm.compile [candidate requirements.txt]" in ln]
    assert beats and re.search(r": 0 of 2 done, \d+ s; running ", beats[0])
    assert lines[-1].endswith("(1 of 2)")


def test_the_heartbeat_stops_with_its_step(monkeypatch):
    monkeypatch.setattr(progress_module, "HEARTBEAT_S", 0.05)
    shown, out = log_progress(monkeypatch)
    before = set(threading.enumerate())
    with shown.step("short"):
        # The step's own heartbeat, told apart from threads other tests of this worker start.
        beating = [t for t in threading.enumerate()
                   if t not in before and getattr(t, "_target", None) == shown._heartbeat]
    assert len(beating) == 1
    beating[0].join(timeout=5)
    assert not beating[0].is_alive()
    time.sleep(0.2)
    assert out.getvalue().count("\n") == 2


def test_runs_are_named_by_role_and_lock(monkeypatch, tmp_path):
    shown, out = log_progress(monkeypatch)
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    report = check_ab(Settings.resolve(config), [new], [old], NUMPY, progress=shown,
                      backend=FakeBackend())
    log = out.getvalue()
    assert "numpy.mlp [baseline " in log and "old.txt]" in log
    assert "numpy.mlp [candidate " in log and "new.txt]" in log
    assert "venv " not in log
    # A failing A/B check names the next steps: accept it, or find its cause.
    steps = next_steps(report)
    assert steps[0].startswith('if the change is intended: lockguard accept --scenario '
                               'numpy.mlp --reason "')
    report.invocation = ["lockguard", "check", "--baseline-lock", "old.txt", "--repeat", "3"]
    assert next_steps(report)[1].endswith(
        "lockguard bisect --baseline-lock old.txt --scenario numpy.mlp")


def test_record_says_it_records_a_first_golden(tmp_path):
    config = Config(root=tmp_path, golden_dir="golden", steps=6)
    report = record(Settings.resolve(config), [lock(tmp_path, "l.txt", "numpy==1.26.4\n")], NUMPY,
                    backend=FakeBackend())
    [v] = report.verdicts
    assert v.reasons == [FIRST]
    assert "lockguard record" not in render(report, "text")


def test_a_log_gets_its_lines_without_rich(tmp_path):
    """Progress in a log is plain lines, as given: rich (20-30 ms of import and console set-up
    in front of every training) is only for a terminal's spinners, and its emoji codes never
    turn a path's ":bug:" into a picture."""
    import subprocess
    import sys

    code = ("import sys; from lockguard.progress import Progress; p = Progress()\n"
            "p.info('kept in /tmp/a:bug:b [x]')\n"
            "with p.step('Running 1 training run(s)'): pass\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'rich'))")
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, check=True)
    assert proc.stdout.strip() == "[]"
    lines = proc.stderr.splitlines()
    assert lines[0] == "kept in /tmp/a:bug:b [x]"
    assert lines[1] == "Running 1 training run(s) …"
    assert re.fullmatch(r"Running 1 training run\(s\): done in \d+\.\d s", lines[2])
