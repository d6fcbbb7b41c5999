"""`lockguard accept` (flows/accept.py) where mutation testing found no test that would fail
(benchmarks/bench_mutation.py): where the report is read from, what a report of another command
is told, which scenarios are chosen by default and by name, why a run is unhealthy, when the
lock moved since the check, and the lines people confirm. Reports are built by hand from the
verdicts a test is about; every expected text is written out here."""
from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from lockguard.compare.verdicts import ScenarioVerdict
from lockguard.flows.accept import (
    AcceptError, Adoption, _lock_moved, _select, _unhealthy, describe, plan, report_path,
    vouched,
)
from lockguard.locks.parser import parse_lock
from lockguard.names import Verdict
from lockguard.report import Report
from test_compare import run


def verdict(scenario: str, outcome: Verdict) -> ScenarioVerdict:
    return ScenarioVerdict(scenario=scenario, framework="numpy", verdict=outcome,
                           reasons=[], baseline_kind="golden")


def report(*verdicts: ScenarioVerdict, failing: tuple[str, ...] = (),
           command: str = "check") -> Report:
    return Report.model_construct(command=command, verdicts=list(verdicts),
                                  failing=list(failing))


def test_the_report_is_read_from_a_folder_or_a_file(tmp_path):
    assert report_path(tmp_path, tmp_path / "elsewhere") == tmp_path / "report.json"
    named = tmp_path / "mine.json"
    named.write_text("{}")
    assert report_path(named, tmp_path) == named


@pytest.mark.parametrize("command, told", [
    ("record", "a `record` report, not a check's (its results are already goldens)"),
    ("diff", "a `diff` report, not a check's"),
])
def test_a_report_of_another_command_is_refused_with_a_hint_where_there_is_one(command, told):
    with pytest.raises(AcceptError) as caught:
        plan(report(command=command), Path("r.json"), None, [], "why", "me")
    assert str(caught.value) == f"r.json: {told}"


def test_an_unreadable_report_says_why(tmp_path):
    missing = tmp_path / "gone.json"
    with pytest.raises(AcceptError, match=r"gone\.json: cannot read: No such file or directory$"):
        vouched(report(), missing, None)


def test_by_default_what_did_not_come_out_identical_or_fails_is_chosen():
    same, drift, unchanged_but_failing, skipped = (
        verdict("numpy.a", Verdict.identical), verdict("numpy.b", Verdict.drift),
        verdict("numpy.c", Verdict.unchanged), verdict("numpy.d", Verdict.skipped))
    r = report(same, drift, unchanged_but_failing, skipped, failing=("numpy.c",))
    assert [v.scenario for v in _select(r, Path("r.json"), [])] == ["numpy.b", "numpy.c"]


def test_by_name_an_id_or_its_prefix_is_chosen_once():
    r = report(verdict("numpy.a", Verdict.identical), verdict("numpy.b", Verdict.drift),
               verdict("numpyx.c", Verdict.drift))
    assert [v.scenario for v in _select(r, Path("r.json"), ["numpy"])] == ["numpy.a",
                                                                         "numpy.b"]
    assert [v.scenario for v in _select(r, Path("r.json"), ["numpy.b", "numpy"])] == [
        "numpy.b", "numpy.a"]


def test_a_crashed_run_is_unhealthy_with_the_last_line_of_its_error():
    crashed = run(status="crashed", error="Traceback\n  ...\nValueError: boom\n")
    assert _unhealthy(Verdict.broken, False, crashed, "cpu") == \
        "its run is crashed (ValueError: boom)"
    assert _unhealthy(Verdict.broken, False, run(status="crashed"), "cpu") == \
        "its run is crashed"
    long = run(status="crashed", error="E" * 300)
    assert _unhealthy(Verdict.broken, False, long, "cpu") == \
        f"its run is crashed ({'E' * 199}…)"


def test_a_lock_is_found_where_the_check_named_it_and_its_hash_compared(tmp_path,
                                                                        monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "p").mkdir()
    lock = tmp_path / "p" / "a.txt"
    lock.write_text("numpy==1.26.4\n")
    same = parse_lock(lock).lock_hash
    # relative to the project's root, as a check run there wrote it
    assert _lock_moved("a.txt", same, tmp_path / "p") is None
    assert _lock_moved("a.txt", "sha256:other", tmp_path / "p") == \
        "p/a.txt changed since the check ran"
    # as given (absolute, or relative to here)
    assert _lock_moved(str(lock), "sha256:other", tmp_path / "elsewhere") == \
        "p/a.txt changed since the check ran"
    assert _lock_moved("missing.txt", "sha256:other", tmp_path / "p") is None


def test_what_people_confirm_names_the_first_reason_only():
    result = run(framework_version="2.0.2")
    hardware = SimpleNamespace(id="x86-64-v3")

    def adoption(reasons):
        return Adoption("numpy.mlp", "numpy", "drift", reasons, Path("g/numpy.mlp.json"),
                        hardware, result, None, "no golden (a new file)")

    text = describe([adoption(["loss moved at step 3", "grad norms too"])], Path("r.json"))
    assert text.splitlines()[1] == "  numpy.mlp (numpy): drift — loss moved at step 3"
    assert "grad norms too" not in text
    assert describe([adoption([])], Path("r.json")).splitlines()[1] == \
        "  numpy.mlp (numpy): drift"
    assert text.splitlines()[3] == \
        "    final loss now 0.75 (torch 2.0.2, hardware class x86-64-v3)"


def test_what_a_golden_replaces_is_said_by_its_date_and_final_loss(tmp_path):
    from lockguard import golden
    from lockguard.flows.accept import _current
    from lockguard.golden import Provenance
    from lockguard.hardware import hardware_class

    result = run(losses=[2.0, 1.5, 1.25], grad_norms=[], outputs=[])
    hardware = hardware_class(result.fingerprint, "cpu", result.device_name)
    path = golden.golden_path(tmp_path / "golden", "cpu", hardware.id, "mlp")
    assert _current(path) == "no golden (a new file)"
    golden.write(path, result, Provenance(), hardware)
    written = golden.load(path).provenance.recorded_at  # the time of writing, UTC
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", written)
    assert _current(path) == f"the golden of {written} (final loss 1.25)"


def drifted(tmp_path):
    """An A/B numpy 1.26.4 -> 2.0.2 on the fake backend that drifted: (report, settings,
    the candidate lock's file)."""
    from fakes import FakeBackend, lock
    from lockguard.config import parse_config
    from lockguard.flows.ab import check_ab
    from lockguard.settings import Settings
    from test_gate_policy import NUMPY

    root = tmp_path / "p"
    root.mkdir()
    settings = Settings.resolve(parse_config({"golden_dir": "golden", "steps": 6}, "test", root))
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    report = check_ab(settings, [new], [old], NUMPY, backend=FakeBackend())
    assert report.verdicts[0].verdict == Verdict.drift
    report.id = "20260101T000000Z-aaaaaa"
    return report, settings, tmp_path / "new.txt"


def test_a_report_not_vouched_for_is_adopted_as_unverified(tmp_path):
    report, settings, _ = drifted(tmp_path)
    source = tmp_path / "report.json"
    [adoption], notes = plan(report, source, settings, [], "intended", "me <me@e>")
    assert adoption.provenance.acceptance.verified is False
    assert notes[0].startswith(f"{source} was not written by a check of this project on this "
                               "machine (downloaded artefacts?): its goldens are adopted as "
                               "unverified")
    [adoption], notes = plan(report, source, settings, [], "intended", "me <me@e>",
                             verified=True)
    assert adoption.provenance.acceptance.verified is True and notes == []


def test_a_candidate_lock_changed_since_the_check_is_refused(tmp_path, monkeypatch):
    report, settings, new = drifted(tmp_path)
    monkeypatch.chdir(tmp_path)
    new.write_text("numpy==2.1.0\n")
    with pytest.raises(AcceptError) as caught:
        plan(report, tmp_path / "report.json", settings, [], "intended", "me <me@e>",
             verified=True)
    assert str(caught.value) == ("scenario numpy.mlp: new.txt changed since the check ran; "
                                 "run `lockguard check` again and accept that")


def test_no_candidate_or_one_without_a_fingerprint_finds_no_acceptance(tmp_path):
    """Acceptances bind to a hardware class: a run that says nothing of its machine (or no
    run) is passed by none, before any golden is read."""
    from lockguard.compare.tolerance import Policy
    from lockguard.flows.acceptances import find

    args = ("sha256:old", "sha256:new", Verdict.drift, tmp_path / "golden", Policy(), None)
    assert find(None, [], *args) is None
    assert find(None, [run(fingerprint={})], *args) is None


def test_a_long_first_reason_is_cut_at_160_characters():
    result = run(framework_version="2.0.2")
    adoption = Adoption("numpy.mlp", "numpy", "drift", ["r" * 200], Path("g/numpy.mlp.json"),
                        SimpleNamespace(id="x86-64-v3"), result, None, "no golden (a new file)")
    line = describe([adoption], Path("r.json")).splitlines()[1]
    assert line == "  numpy.mlp (numpy): drift — " + "r" * 159 + "…"


def test_a_drift_run_on_another_device_than_expected_is_unhealthy():
    """(seed 3 survivor: accept.py:177 `device_fallback or result.device != device` made
    `and`.) A drift that ran on the CPU where CUDA was expected is no golden for CUDA; a run
    on the device is healthy."""
    assert _unhealthy(Verdict.drift, False, run(device="cpu"), "cuda") == \
        "it ran on cpu, not on cuda"
    assert _unhealthy(Verdict.drift, False, run(device=None), "cpu") == \
        "it ran on an unknown device, not on cpu"
    assert _unhealthy(Verdict.drift, False, run(device="cpu"), "cpu") is None


def test_an_acceptance_from_another_class_weighs_the_numbers_not_the_memory():
    """(seed 3 survivor: acceptances.py `_close` with timed_together=False made True.) The
    accepted run peaked at 100 MiB on its machine, this one at 400 MiB: the same numbers, so
    within tolerance; memory (and time) measured on two machines is no comparison."""
    from lockguard.compare.tolerance import Policy
    from lockguard.flows.acceptances import _close

    accepted, here = run(peak_memory_bytes=100 << 20), run(peak_memory_bytes=400 << 20)
    assert _close(accepted, [here], "cpu", Policy(), None) is True
    assert _close(accepted, [run(losses=[9.0] * 6)], "cpu", Policy(), None) is False


def test_an_unknown_scenario_is_refused_naming_what_the_report_has():
    """(seed 4 survivor: accept.py's `', '.join(known) or 'no scenarios'` made `and`.)"""
    two = report(verdict("numpy.a", Verdict.drift), verdict("torch.b", Verdict.drift))
    with pytest.raises(AcceptError) as caught:
        _select(two, Path("r.json"), ["jax"])
    assert str(caught.value) == "--scenario 'jax': not in r.json (it has numpy.a, torch.b)"
    with pytest.raises(AcceptError) as caught:
        _select(report(), Path("r.json"), ["jax"])
    assert str(caught.value) == "--scenario 'jax': not in r.json (it has no scenarios)"


def test_a_long_unknown_scenario_name_is_cut_at_eighty_characters():
    """(seed 4 survivor: accept.py's `one_line(repr(name), 80)` made 81.) A 100-character name
    is shown as its repr's first 79 characters (the quote and 78 x) and an ellipsis."""
    with pytest.raises(AcceptError) as caught:
        _select(report(), Path("r.json"), ["x" * 100])
    assert str(caught.value) == ("--scenario '" + "x" * 78 + "…: not in r.json (it has no "
                                 "scenarios)")
