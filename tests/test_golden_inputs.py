"""The golden store against inputs that are not what they seem: symlinks out of golden_dir
(by real paths), numbers beyond float range, files too large to be goldens or reports, a class
directory `record` could not write, each found before anything runs. Whole runs refused are in
the bad-input corpus (tests/test_bad_input.py)."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from fakes import FakeBackend, lock
from lockguard import golden
from lockguard.config import Config
from lockguard.files import WriteError
from lockguard.flows.record import record
from lockguard.golden import GoldenError, golden_path
from lockguard.hardware import host_class
from lockguard.results import finite, non_finite
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
CLASS = host_class("cpu").id


def test_a_symlink_below_golden_dir_may_not_lead_out_of_it(tmp_path):
    gdir, outside = tmp_path / "golden", tmp_path / "outside"
    outside.mkdir()
    (gdir / "cpu").mkdir(parents=True)
    (gdir / "cpu" / "cls").symlink_to(outside)
    with pytest.raises(GoldenError, match=r"golden/cpu/cls: leads out of golden_dir .*"
                                          r"\(to .*outside\)"):
        golden_path(gdir, "cpu", "cls", "s")
    (gdir / "cpu" / "mine").mkdir()
    (gdir / "cpu" / "mine" / "s.json").symlink_to(outside / "s.json")  # dangling, and out
    with pytest.raises(GoldenError, match="s.json: leads out of golden_dir"):
        golden_path(gdir, "cpu", "mine", "s")
    # Inside golden_dir a link is fine (a class directory shared under two names).
    (gdir / "cpu" / "alias").symlink_to(gdir / "cpu" / "mine")
    assert golden_path(gdir, "cpu", "alias", "t") == gdir / "cpu" / "alias" / "t.json"
    # golden_dir itself may be a link: where it leads is the golden directory.
    (tmp_path / "gd-link").symlink_to(gdir)
    assert golden_path(tmp_path / "gd-link", "cpu", "mine", "t").parent.name == "mine"
    # A device directory leading out hides every class below it: refused when listed.
    (tmp_path / "g2").mkdir()
    (tmp_path / "g2" / "cpu").symlink_to(outside)
    with pytest.raises(GoldenError, match="g2/cpu: leads out of golden_dir"):
        golden.class_paths(tmp_path / "g2", "cpu", "s")


def test_record_refuses_a_class_directory_leading_out_before_anything_runs(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "golden" / "cpu").mkdir(parents=True)
    (tmp_path / "golden" / "cpu" / CLASS).symlink_to(outside)
    fake = FakeBackend()
    config = Config(root=tmp_path, golden_dir="golden", steps=4)
    with pytest.raises(GoldenError, match="leads out of golden_dir"):
        record(Settings.resolve(config), [lock(tmp_path, "lock.txt", "numpy==2.0.2\n")], NUMPY,
               backend=fake)
    assert fake.prepared == [] and fake.runs == []
    assert list(outside.iterdir()) == []


def test_record_checks_this_machines_class_directory_before_anything_runs(tmp_path):
    (tmp_path / "golden" / "cpu").mkdir(parents=True)
    (tmp_path / "golden" / "cpu" / CLASS).write_text("a file where the class directory goes")
    fake = FakeBackend()
    config = Config(root=tmp_path, golden_dir="golden", steps=4)
    with pytest.raises(WriteError, match=f"{CLASS} is not a directory"):
        record(Settings.resolve(config), [lock(tmp_path, "lock.txt", "numpy==2.0.2\n")], NUMPY,
               backend=fake)
    assert fake.prepared == [] and fake.runs == []


def test_record_finds_a_read_only_class_directory_before_anything_runs(tmp_path):
    """Root writes to a read-only directory anyway: as root (CI), the record runs as nobody,
    in a folder it may write, the class directory root's and read-only."""
    if os.geteuid() != 0:
        record_into_a_read_only_class_directory(tmp_path)
        return
    base = Path(tempfile.mkdtemp(prefix="lockguard-readonly-"))
    try:
        base.chmod(0o777)
        (base / "golden" / "cpu" / CLASS).mkdir(parents=True, mode=0o555)
        tests = Path(__file__).resolve().parent
        code = (f"import sys; sys.path[:0] = [{str(tests)!r}, {str(tests.parent)!r}]\n"
                "from pathlib import Path\n"
                "from test_golden_inputs import record_into_a_read_only_class_directory as t\n"
                f"t(Path({str(base)!r}))\nprint('held')\n")
        done = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                               sys.executable, "-c", code], capture_output=True, text=True,
                              env={**os.environ, "HOME": str(base),
                                   "LOCKGUARD_CACHE": str(base / "cache")})
        assert done.returncode == 0 and done.stdout.strip() == "held", done.stderr[-2000:]
    finally:
        shutil.rmtree(base, ignore_errors=True)


def record_into_a_read_only_class_directory(root: Path) -> None:
    """`record` into `root`'s golden folder, whose class directory is read-only to this user:
    refused before anything is prepared."""
    classes = root / "golden" / "cpu" / CLASS
    classes.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0 and classes.stat().st_uid == os.geteuid():
        classes.chmod(0o555)
    fake = FakeBackend()
    try:
        with pytest.raises(WriteError, match="not writable"):
            record(Settings.resolve(Config(root=root, golden_dir="golden", steps=4)),
                   [lock(root, "lock.txt", "numpy==2.0.2\n")], NUMPY, backend=fake)
    finally:
        if classes.stat().st_uid == os.geteuid():
            classes.chmod(0o755)
    assert fake.prepared == []


def test_record_refuses_a_fifo_where_its_golden_goes(tmp_path):
    (tmp_path / "golden" / "cpu" / CLASS).mkdir(parents=True)
    os.mkfifo(tmp_path / "golden" / "cpu" / CLASS / "numpy.mlp.json")
    fake = FakeBackend()
    with pytest.raises(GoldenError, match="is a FIFO"):
        record(Settings.resolve(Config(root=tmp_path, golden_dir="golden", steps=4)),
               [lock(tmp_path, "lock.txt", "numpy==2.0.2\n")], NUMPY, backend=fake)
    assert fake.prepared == []


# ------------------------------------------------------------------------------ finiteness

def test_one_finiteness_check_takes_integers_beyond_float_range():
    assert finite(1.5) and finite(3) and finite(-(10 ** 308))
    assert not finite(10 ** 400) and not finite(-(10 ** 309)) and not finite(math.inf)
    assert not finite(math.nan) and not finite(True) and not finite("1")
    assert finite(int(sys.float_info.max)) and not finite(int(sys.float_info.max) * 2)


def test_a_raw_golden_result_with_a_huge_integer_is_unusable_not_a_crash():
    # What _verify_text checks before the model is built (math.isfinite(10**400) raises).
    problem = golden._unusable({"status": "ok", "steps": 2, "losses": [1.0, 10 ** 400]})
    assert problem is not None and problem.startswith("losses[1] is 100000000000…(401 "
                                                      "characters), not a finite number")
    assert golden._unusable({"status": "ok", "steps": 2, "losses": [1.0, 2]}) is None
    assert "outputs[0] is inf" in golden._unusable(
        {"status": "ok", "steps": 1, "losses": [1.0], "outputs": [math.inf]})


def test_non_finite_names_the_value(tmp_path):
    from lockguard.results import RunResult

    run = RunResult(schema_version=1, scenario="s", framework="numpy", steps=2,
                    losses=[1.0, math.nan])
    assert non_finite(run) == "loss 1 is nan"


def test_a_non_finite_run_reads_back_from_its_json(tmp_path):
    """A run that ended in NaN or infinity is kept in a check's report and evidence: its JSON
    must read back as the same values (JSON has no NaN; null, pydantic's default, is no
    float), so that `accept` and `lockguard report` can say what is wrong with it."""
    import json

    from lockguard.results import RunResult, parse_result

    run = RunResult(schema_version=1, scenario="s", framework="numpy", steps=3,
                    losses=[1.0, math.inf, math.nan], grad_norms=[0.5, -math.inf, 1.0],
                    outputs=[math.nan], metrics={"acc": math.inf}, param_norms={"w": 2.0})
    text = json.dumps(run.model_dump(mode="json"), allow_nan=False)  # valid JSON, no NaN token
    back = parse_result(json.loads(text), "report")
    assert back.model_dump_json() == run.model_dump_json()
    assert [repr(v) for v in back.losses + back.grad_norms + back.outputs] == [
        "1.0", "inf", "nan", "0.5", "-inf", "1.0", "nan"]
    assert non_finite(back) == "loss 1 is inf" and back.metrics == {"acc": math.inf}
    # A finite run's JSON is as it was: numbers.
    fine = run.model_copy(update={"losses": [1.0, 2.0], "grad_norms": [], "outputs": [],
                                  "metrics": {}})
    assert json.loads(fine.model_dump_json())["losses"] == [1.0, 2.0]


# --------------------------------------------------------------------------------- bounds

def test_a_golden_over_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = tmp_path / "golden" / "cpu" / CLASS / "s.json"
    path.parent.mkdir(parents=True)
    path.write_text("{" + " " * 5000 + "}")
    monkeypatch.setattr(golden, "MAX_GOLDEN_BYTES", 4096)
    with pytest.raises(GoldenError, match=r"s.json: the golden file is 4.88 KiB, more than the "
                                          r"4 KiB a golden file can be; not read"):
        golden.load(path)


def test_record_never_writes_a_golden_no_check_could_read(tmp_path, monkeypatch):
    config = Config(root=tmp_path, golden_dir="golden", steps=4)
    monkeypatch.setattr(golden, "MAX_GOLDEN_BYTES", 1024)
    with pytest.raises(GoldenError, match=r"not written: the golden of numpy.mlp would be .* "
                                          r"more than the 1 KiB a golden file can be"):
        record(Settings.resolve(config), [lock(tmp_path, "lock.txt", "numpy==2.0.2\n")], NUMPY,
               backend=FakeBackend())
    assert not (tmp_path / "golden" / "cpu" / CLASS / "numpy.mlp.json").exists()


def test_a_report_over_the_bound_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from lockguard import report
    from lockguard.report import ReportError, load_report

    (tmp_path / "r.json").write_text('{"command": "check", "verdicts": []}' + " " * 2000)
    monkeypatch.setattr(report, "MAX_REPORT_BYTES", 1024)
    with pytest.raises(ReportError,
                       match="r.json: the JSON report is 1.99 KiB, more than the 1 KiB"):
        load_report(tmp_path / "r.json")
