"""The flows' logic on the fake backend (tests/fakes.py): record, golden check, A/B, skipped,
broken, incomparable, family rules and the shortcut, each in milliseconds. The same flows run
against real environments in test_spine.py, test_gate.py and test_frameworks.py."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from fakes import FakeBackend, lock, losses_for
from lockguard.config import Config, Options
from lockguard.flows.ab import check_ab
from lockguard.flows.check import check
from lockguard.locks.ref import LockRef
from lockguard.flows.record import record
from lockguard import golden
from lockguard.golden import GoldenError
from lockguard.hardware import host_class
from lockguard.names import Verdict
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
TORCH_AND_NUMPY = [s for s in bundled() if s.id in ("numpy.mlp", "torch.mlp")]


@pytest.fixture
def project(tmp_path: Path) -> Config:
    return Config(root=tmp_path, golden_dir="golden", steps=6)


def golden_of(config: Config, scenario: str) -> Path:
    return config.root / "golden" / "cpu" / host_class("cpu").id / f"{scenario}.json"


def test_record_then_check_is_identical_and_answered_without_running(project, tmp_path):
    numpy1 = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    fake = FakeBackend()
    report = record(Settings.resolve(project), [numpy1], NUMPY, backend=fake)
    assert report.passed
    assert report.written == [str(golden_of(project, "numpy.mlp"))]
    [proof] = report.evidence
    assert proof.candidate.result.losses == losses_for("numpy.mlp", "1.26.4", 0, 6)
    assert fake.runs == [("numpy.mlp", "1.26.4")]

    # Same lock, same inputs: the golden answers, nothing is prepared or run.
    again = FakeBackend()
    report = check(Settings.resolve(project), [numpy1], NUMPY, backend=again)
    assert report.passed
    # A run that did not happen is `unchanged`, never `identical`.
    assert [v.verdict for v in report.verdicts] == [Verdict.unchanged]
    assert "not re-run" in report.verdicts[0].reasons[0]
    assert again.prepared == [] and again.runs == []
    # That report skips validation (it ran nothing): validated, it is the same in every format.
    from lockguard.names import FORMATS
    from lockguard.report import Report, render

    validated = Report.model_validate(report.model_dump())
    assert validated == report
    for fmt in FORMATS:
        assert render(report, fmt) == render(validated, fmt), fmt

    # --rerun runs it and compares bitwise.
    report = check(Settings.resolve(project, Options(rerun=True)), [numpy1], NUMPY, backend=again)
    assert report.passed and report.verdicts[0].verdict == Verdict.identical
    assert again.runs == [("numpy.mlp", "1.26.4")]
    assert report.evidence[0].baseline.kind == "golden"


def test_a_drifting_lock_fails_the_golden_check_with_both_curves(project, tmp_path):
    record(Settings.resolve(project), [lock(tmp_path, "old.txt", "numpy==1.26.4\n")], NUMPY,
           backend=FakeBackend())
    report = check(Settings.resolve(project), [lock(tmp_path, "new.txt", "numpy==2.0.2\n")], NUMPY,
                   backend=FakeBackend())
    assert not report.passed and report.failing == ["numpy.mlp"]
    [v] = report.verdicts
    assert v.verdict == Verdict.drift and v.first_divergent_step == 1
    [proof] = report.evidence
    assert proof.baseline.result.losses == losses_for("numpy.mlp", "1.26.4", 0, 6)
    assert proof.candidate.result.losses == losses_for("numpy.mlp", "2.0.2", 0, 6)


def test_ab_pairs_results_with_their_own_lock(project, tmp_path, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_JOBS", "1")  # one at a time: the run order is the plan's
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\ntorch==2.13.0\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\ntorch==2.13.0\n")
    fake = FakeBackend()
    report = check_ab(Settings.resolve(project, Options(repeat=2)), [new], [old], TORCH_AND_NUMPY,
                      backend=fake)
    verdicts = {v.scenario: v.verdict for v in report.verdicts}
    assert verdicts == {"numpy.mlp": Verdict.drift, "torch.mlp": Verdict.identical}
    proof = {e.scenario: e for e in report.evidence}
    assert proof["numpy.mlp"].baseline.result.framework_version == "1.26.4"
    assert proof["numpy.mlp"].candidate.result.framework_version == "2.0.2"
    assert proof["numpy.mlp"].baseline.name.endswith("old.txt")
    # Baseline and candidate alternate per scenario, each repeated.
    numpy_runs = [v for s, v in fake.runs if s == "numpy.mlp"]
    assert numpy_runs == ["1.26.4", "2.0.2", "1.26.4", "2.0.2"]
    assert [d.new_source for d in report.lock_diffs] == [str(new.path)]


def test_a_data_parallel_run_takes_as_many_workers_as_it_has_workers(project, tmp_path,
                                                                     monkeypatch):
    """torch.ddp's two processes take both of 2 workers: neither side of its A/B shares the
    machine with anything (side by side they were ×1.4 apart on 2 cores), while single runs
    still pair up; jobs start in order, so the wide one is not starved."""
    old = lock(tmp_path, "old.txt", "numpy==2.0.2\ntorch==2.13.0\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\ntorch==2.13.0\n")
    chosen = [s for s in bundled() if s.id in ("numpy.mlp", "torch.mlp", "torch.ddp")]
    monkeypatch.setenv("LOCKGUARD_JOBS", "2")
    fake = FakeBackend(run_s=0.05)
    report = check_ab(Settings.resolve(project, Options(repeat=2)), [new], [old], chosen,
                      backend=fake)
    assert {v.scenario: v.verdict for v in report.verdicts} == {
        sid: Verdict.identical for sid in ("numpy.mlp", "torch.mlp", "torch.ddp")}
    assert len([s for s, _ in fake.runs if s == "torch.ddp"]) == 4
    assert not any("torch.ddp" in pair for pair in fake.together), fake.together
    assert frozenset(("numpy.mlp", "torch.mlp")) in fake.together or frozenset(
        ("numpy.mlp",)) in fake.together


def test_ab_without_a_baseline_for_the_framework_is_new(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==1.26.4\ntorch==2.13.0\n")
    report = check_ab(Settings.resolve(project), [new], [old], TORCH_AND_NUMPY,
                      backend=FakeBackend())
    verdicts = {v.scenario: v.verdict for v in report.verdicts}
    assert verdicts == {"numpy.mlp": Verdict.identical, "torch.mlp": Verdict.new}
    assert report.passed


def test_a_crashed_candidate_is_broken_and_is_not_recorded(project, tmp_path):
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "crash"})
    report = record(Settings.resolve(project), [lock(tmp_path, "lock.txt", "numpy==1.26.4\n")],
                    NUMPY,
                    backend=fake)
    assert not report.passed and report.failing == ["numpy.mlp"]
    assert report.verdicts[0].verdict == Verdict.broken
    assert report.written == [] and not golden_of(project, "numpy.mlp").exists()


def test_nan_in_a_candidate_is_broken_not_compared(project, tmp_path):
    record(Settings.resolve(project), [lock(tmp_path, "a.txt", "numpy==1.26.4\n")], NUMPY,
           backend=FakeBackend())
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "nan"})
    report = check(Settings.resolve(project, Options(rerun=True)),
                   [lock(tmp_path, "a.txt", "numpy==1.26.4\n")], NUMPY, backend=fake)
    assert report.verdicts[0].verdict == Verdict.broken and not report.passed


def test_a_broken_baseline_makes_the_scenario_incomparable_and_fails(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "crash"})
    report = check_ab(Settings.resolve(project), [new], [old], NUMPY, backend=fake)
    assert report.verdicts[0].verdict == Verdict.incomparable
    assert not report.passed


def test_a_device_fallback_fails_and_is_not_recorded(project, tmp_path):
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "cpu-fallback"})
    report = record(Settings.resolve(project, Options(device="cuda")),
                    [lock(tmp_path, "lock.txt", "numpy==1.26.4\n")], NUMPY, backend=fake)
    assert report.verdicts[0].verdict == Verdict.device_fallback
    assert not report.passed and report.written == []


def test_all_skipped_is_nothing_compared_and_fails(project, tmp_path):
    fake = FakeBackend()
    report = check(Settings.resolve(project), [lock(tmp_path, "lock.txt", "torch==2.13.0\n")],
                   NUMPY,
                   backend=fake)
    assert [v.verdict for v in report.verdicts] == [Verdict.skipped]
    assert not report.passed and report.notes[0].startswith("nothing was compared")
    assert fake.prepared == []


def test_family_rules_fail_before_anything_is_prepared(project, tmp_path):
    fake = FakeBackend()
    broken = lock(tmp_path, "lock.txt", "torch==2.13.0\ntorchvision==0.10.0\n")
    report = check(Settings.resolve(project), [broken], TORCH_AND_NUMPY, backend=fake)
    assert not report.passed and report.rule_failures
    assert fake.prepared == [] and fake.runs == []


def test_a_missing_golden_is_an_error_before_anything_runs(project, tmp_path):
    fake = FakeBackend()
    with pytest.raises(GoldenError, match="no golden recorded for scenario numpy.mlp"):
        check(Settings.resolve(project), [lock(tmp_path, "lock.txt", "numpy==1.26.4\n")], NUMPY,
              backend=fake)
    assert fake.prepared == [] and fake.runs == []
    report = check(Settings.resolve(project, Options(allow_new=True)),
                   [lock(tmp_path, "lock.txt", "numpy==1.26.4\n")], NUMPY, backend=fake)
    assert report.verdicts[0].verdict == Verdict.new


def test_the_report_json_carries_both_sides_per_step(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    report = check_ab(Settings.resolve(project), [new], [old], NUMPY, backend=FakeBackend())
    document = json.loads(report.model_dump_json())
    [proof] = document["evidence"]
    assert len(proof["baseline"]["result"]["losses"]) == 6
    assert proof["fingerprint_diff"] == {}
    assert document["schema_version"] == 4


# ------------------------------------------------------------------ noise envelopes (--repeat)

def test_record_repeat_of_a_deterministic_scenario_stays_exact(project, tmp_path):
    numpy1 = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    fake = FakeBackend()
    report = record(Settings.resolve(project, Options(repeat=3)), [numpy1], NUMPY, backend=fake)
    assert report.passed and len(fake.runs) == 3
    gold = golden.load(golden_of(project, "numpy.mlp"))
    assert gold.envelope is None
    assert (gold.provenance.repeats, gold.provenance.deterministic) == (3, True)
    assert "bitwise equal, the golden is compared exactly" in report.verdicts[0].reasons[-1]
    again = record(Settings.resolve(project, Options(repeat=3)), [numpy1], NUMPY, backend=fake)
    assert again.written == []  # same runs, same provenance: the golden is left alone
    once = record(Settings.resolve(project), [numpy1], NUMPY, backend=fake)
    assert once.written  # one run proves no determinism: the provenance says so no more
    assert golden.load(golden_of(project, "numpy.mlp")).provenance.repeats is None
    report = check(Settings.resolve(project, Options(rerun=True)), [numpy1], NUMPY, backend=fake)
    assert report.verdicts[0].verdict == Verdict.identical
    assert report.verdicts[0].envelope is None


def test_record_repeat_of_a_noisy_scenario_keeps_its_envelope(project, tmp_path):
    numpy1 = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy"})
    report = record(Settings.resolve(project, Options(repeat=5)), [numpy1], NUMPY, backend=fake)
    assert report.passed
    gold = golden.load(golden_of(project, "numpy.mlp"))
    assert (gold.provenance.repeats, gold.provenance.deterministic) == (5, False)
    env = gold.envelope
    assert env.k == 5 and len(env.losses.mean) == 6 and len(env.outputs.max) == 2
    assert all(lo < hi for lo, hi in zip(env.losses.min[1:], env.losses.max[1:]))
    # The golden's curve is one of the recorded runs: the one of median final loss.
    assert gold.result.losses[-1] == sorted(env.losses.max[-1:] + env.losses.min[-1:]
                                            + [gold.result.losses[-1]])[1]

    # Recording the same noise again rewrites the golden only if the envelope changed: it did.
    again = record(Settings.resolve(project, Options(repeat=5)), [numpy1], NUMPY, backend=fake)
    assert again.written and again.verdicts[0].envelope is not None

    inside = check(Settings.resolve(project, Options(rerun=True)), [numpy1], NUMPY, backend=fake)
    [v] = inside.verdicts
    assert inside.passed and v.verdict == Verdict.within_tolerance, v.reasons
    assert v.envelope.inside and v.envelope.k == 5 and v.envelope.first_outside_step is None
    assert "inside the noise envelope of 5 baseline runs" in v.reasons[0]


@pytest.mark.parametrize("shift, side", [("+0.01", "above"), ("-0.01", "below")])
def test_a_candidate_shifted_beyond_the_envelope_fails_both_ways(project, tmp_path, shift,
                                                                 side):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy",
                                  ("numpy.mlp", "2.0.2"): f"noisy:{shift}"})
    record(Settings.resolve(project, Options(repeat=5)), [old], NUMPY, backend=fake)
    report = check(Settings.resolve(project), [new], NUMPY, backend=fake)
    [v] = report.verdicts
    assert not report.passed and v.verdict == Verdict.drift
    assert not v.envelope.inside and v.envelope.first_outside_step == 0
    assert f"is {side} [" in v.reasons[0] and "outside the noise envelope of 5" in v.reasons[0]
    assert (v.envelope.worst_sigma > 10) == (shift[0] == "+")


def test_ab_repeat_judges_the_candidate_against_the_baselines_envelope(project, tmp_path):
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    same = lock(tmp_path, "same.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy",
                                  ("numpy.mlp", "2.0.2"): "noisy:-0.01"})
    report = check_ab(Settings.resolve(project, Options(repeat=3)), [same], [old], NUMPY,
                      backend=fake)
    [v] = report.verdicts
    assert report.passed and v.verdict == Verdict.within_tolerance, v.reasons
    assert v.envelope.k == 3 and v.envelope.runs == 3 and v.nondeterministic
    assert any("judged by the noise envelope" in r for r in v.reasons)
    report = check_ab(Settings.resolve(project, Options(repeat=3)), [new], [old], NUMPY,
                      backend=fake)
    [v] = report.verdicts
    assert not report.passed and v.verdict == Verdict.drift and "below" in v.reasons[0]
    # One baseline run gives no envelope: the old rule (tolerance) decides, and fails too.
    report = check_ab(Settings.resolve(project), [same], [old], NUMPY, backend=fake)
    assert report.verdicts[0].envelope is None and not report.passed


# ------------------------------------------------------------------ environments in parallel

def three_locks(tmp_path: Path) -> list[LockRef]:
    return [lock(tmp_path, f"{name}.txt", f"numpy=={version}\n")
            for name, version in (("a", "1.26.4"), ("b", "2.0.2"), ("c", "2.1.0"))]


def test_a_checks_environments_are_prepared_at_once(project, tmp_path, monkeypatch):
    from lockguard.flows import pipeline

    monkeypatch.setattr(pipeline, "build_workers", lambda n: min(n, 2))  # as on 2+ cores
    old, new = (lock(tmp_path, "old.txt", "numpy==1.26.4\n"),
                lock(tmp_path, "new.txt", "numpy==2.0.2\n"))
    fake = FakeBackend(build_s={"old.txt": 0.4, "new.txt": 0.4})
    report = check_ab(Settings.resolve(project), [new], [old], NUMPY, backend=fake)
    assert {v.scenario: v.verdict for v in report.verdicts} == {"numpy.mlp": Verdict.drift}
    assert fake.most_at_once == 2, "the two builds did not overlap"
    # Each build's progress says which environment of how many it is, of which lock, however
    # they interleave.
    assert sorted(fake.stages.values()) == [f"environment 1 of 2 ({old.name}): ",
                                            f"environment 2 of 2 ({new.name}): "]


def test_every_lock_is_admitted_before_any_environment_is_prepared(project, tmp_path):
    """The pipeline hands the backend every lock of the check (Backend.admit) before it
    prepares the first environment, so a refused candidate builds not even its baseline."""
    old, new = (lock(tmp_path, "old.txt", "numpy==1.26.4\n"),
                lock(tmp_path, "new.txt", "numpy==2.0.2\n"))
    seen: list[tuple[list[str], int]] = []

    class Watching(FakeBackend):
        def admit(self, locks) -> None:
            seen.append(([lk.lock_hash for lk in locks], len(self.prepared)))
            super().admit(locks)

    fake = Watching()
    check_ab(Settings.resolve(project), [new], [old], NUMPY, backend=fake)
    assert seen == [([old.lock.lock_hash, new.lock.lock_hash], 0)]
    assert sorted(fake.prepared) == sorted([old.lock.lock_hash, new.lock.lock_hash])


def test_the_failure_reported_is_the_first_in_plan_order(project, tmp_path, monkeypatch):
    from lockguard.envs.base import EnvError
    from lockguard.flows import pipeline

    monkeypatch.setattr(pipeline, "build_workers", lambda n: min(n, 2))
    refs = three_locks(tmp_path)
    # a fails last, b soon (not at once: on a loaded machine a's thread may not have started
    # by then): a sequential run would have reported a, and so must this one; c, not started
    # when b failed, is never started.
    fake = FakeBackend(build_s={"a.txt": 0.6, "b.txt": 0.1}, failing={"a.txt", "b.txt"})
    envs = pipeline.Environments(fake)
    wanted = [(ref, "numpy", "cpu") for ref in refs]
    envs.expect(wanted)
    with pytest.raises(EnvError, match=r"^a\.txt: the fake build failed$"):
        envs.prepare_all(wanted)
    assert sorted(fake.stages) == ["a.txt", "b.txt"]
    assert fake.most_at_once == 2

    # A failure after a success: the successes stay prepared, the failure is raised.
    fake = FakeBackend(failing={"c.txt"})
    envs = pipeline.Environments(fake)
    envs.expect(wanted)
    with pytest.raises(EnvError, match=r"^c\.txt"):
        envs.prepare_all(wanted)
    assert len(fake.prepared) == 2


def test_environments_are_built_on_at_most_four_threads_and_never_more_than_wanted():
    from lockguard.flows.pipeline import build_workers

    assert build_workers(0) == 1 and build_workers(1) == 1
    assert 1 <= build_workers(2) <= 2 and build_workers(100) <= 4


def test_an_interrupt_does_not_wait_for_builds_that_are_no_process(tmp_path):
    """Ctrl-C during two 20 s builds that run no subprocess (as a docker SDK stream does not):
    the check gives up within seconds instead of waiting for them."""
    import signal
    import subprocess
    import sys

    script = f"""
import signal, sys, time
# Ctrl-C raises KeyboardInterrupt, as at a terminal: a runner started in the background
# (`cmd &` without job control) hands its children SIGINT ignored, and Python keeps that.
signal.signal(signal.SIGINT, signal.default_int_handler)
sys.path[:0] = {[str(Path(__file__).parent)]!r}
from pathlib import Path
from fakes import FakeBackend
from lockguard.flows import pipeline
from lockguard.flows.pipeline import Environments
from lockguard.locks.ref import LockRef, read_lock
pipeline.build_workers = lambda n: min(n, 2)
root = Path({str(tmp_path)!r})
refs = []
for name, pin in (("a.txt", "numpy==1.26.4"), ("b.txt", "numpy==2.0.2")):
    (root / name).write_text(pin + "\\n")
    refs.append(LockRef(root / name, read_lock(root / name)))
envs = Environments(FakeBackend(build_s={{"a.txt": 20, "b.txt": 20}}))
wanted = [(ref, "numpy", "cpu") for ref in refs]
envs.expect(wanted)
print("building", flush=True)
start = time.perf_counter()
try:
    envs.prepare_all(wanted)
except KeyboardInterrupt:
    print(f"interrupted after {{time.perf_counter() - start:.1f}} s", flush=True)
"""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "building"
    time.sleep(1.0)
    proc.send_signal(signal.SIGINT)
    line = proc.stdout.readline().strip()
    proc.kill()
    proc.wait()
    assert line.startswith("interrupted after "), line
    # The builds take 20 s; a loaded machine may be slow to deliver the signal, never that slow.
    assert float(line.split()[2]) < 8.0, line


def test_accept_refuses_to_replace_a_noise_envelope_with_one_run(project, tmp_path):
    from lockguard.flows import accept

    old = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    record(Settings.resolve(project, Options(repeat=5)), [old], NUMPY,
           backend=FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy"}))
    before = golden_of(project, "numpy.mlp").read_bytes()
    new = lock(tmp_path, "new.txt", "numpy==1.26.4\nsix==1.16.0\n")
    report = check(Settings.resolve(project), [new], NUMPY,
                   backend=FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "noisy:+0.01"}))
    assert not report.passed
    with pytest.raises(accept.AcceptError, match=r"noise envelope of 5 runs.*--repeat 5"):
        accept.plan(report, tmp_path / "report.json", Settings.resolve(project), [],
                    "intended", "me")
    assert golden_of(project, "numpy.mlp").read_bytes() == before


def test_accept_refuses_a_golden_path_taken_by_a_directory_before_writing(project, tmp_path):
    from lockguard.flows import accept

    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    report = check_ab(Settings.resolve(project), [new], [old], NUMPY, backend=FakeBackend())
    golden_of(project, "numpy.mlp").mkdir(parents=True)
    with pytest.raises(accept.AcceptError, match="is a directory"):
        accept.plan(report, tmp_path / "report.json", Settings.resolve(project), [],
                    "intended", "me")


def test_ab_with_the_local_interpreter_is_refused_before_anything_runs(project, tmp_path):
    from lockguard.errors import UsageError

    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    fake = FakeBackend()
    with pytest.raises(UsageError, match="--env local runs one interpreter"):
        check_ab(Settings.resolve(project, Options(env="local")), [new], [old], NUMPY, backend=fake)
    assert fake.prepared == [] and fake.runs == []


def test_an_ab_of_a_lock_against_itself_answers_at_once(project, tmp_path):
    """The same lock on both sides (layout aside) can only say identical: nothing is built or
    run, and each scenario reads `unchanged` (not run), never `identical`."""
    from lockguard.flows.check import BaselineLocks

    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    same = lock(tmp_path, "same.txt", "# a comment, another layout\nnumpy==2.0.2\n")
    fake = FakeBackend()
    report = check(Settings.resolve(project), [new], NUMPY, BaselineLocks((same,)),
                   backend=fake)
    assert report.passed and fake.prepared == [] and fake.runs == []
    assert [v.verdict for v in report.verdicts] == [Verdict.unchanged]
    assert any("nothing was built or run" in n for n in report.notes)


def test_propose_of_what_the_lock_already_satisfies_builds_nothing(project, tmp_path,
                                                                   monkeypatch):
    """`propose 'numpy>=2'` with numpy 2.0.2 pinned resolves the lock it has: "already
    satisfied", exit 0, nothing built."""
    from lockguard.flows import propose as flow
    from lockguard.locks.resolvers import Proposal

    current = lock(tmp_path, "requirements.txt", "numpy==2.0.2\n")
    again = tmp_path / "proposed" / "requirements.txt"
    again.parent.mkdir()
    again.write_text("numpy==2.0.2  # as the resolver wrote it\n")
    monkeypatch.setattr(flow, "_proposal", lambda *a: Proposal(again, "uv"))
    fake = FakeBackend()
    report = flow.propose(Settings.resolve(project), [current], ["numpy>=2"], NUMPY,
                          backend=fake)
    assert report.passed and report.verdicts == [] and fake.prepared == []
    [note] = report.notes
    assert note.startswith("already satisfied: ") and note.endswith(
        "requirements.txt pins numpy==2.0.2 (numpy>=2): nothing to propose")


def test_goldens_of_an_older_lock_still_hold_and_say_how_to_stop_rerunning(project, tmp_path):
    """After a merged bump that left a scenario's numbers alone, its golden names the old
    lock: the check re-runs it (the inputs changed) and passes, saying once that `record`
    would spare those runs."""
    old = lock(tmp_path, "lock.txt", "numpy==1.26.4\n")
    assert record(Settings.resolve(project), [old], NUMPY, backend=FakeBackend()).passed
    new = lock(tmp_path, "lock.txt", "numpy==1.26.4\nsix==1.17.0\n")
    fake = FakeBackend()
    report = check(Settings.resolve(project), [new], NUMPY, backend=fake)
    assert report.passed and fake.runs == [("numpy.mlp", "1.26.4")]
    assert [v.verdict for v in report.verdicts] == [Verdict.identical]
    assert any("the goldens of numpy.mlp were recorded with another lock" in n
               and "`lockguard record`" in n for n in report.notes), report.notes


def test_the_poetry_command_propose_suggests_is_one_poetry_takes():
    """`poetry update` takes names only ("numpy==2.3.0" is an error there): a version is added
    as the requirement with `poetry add --lock`."""
    from lockguard.flows.propose import poetry_command

    assert poetry_command(["numpy"]) == "poetry update --lock numpy"
    assert poetry_command(["numpy==2.3.0"]) == "poetry add --lock 'numpy==2.3.0'"
    assert poetry_command(["numpy>=2", "six"]) == "poetry add --lock 'numpy>=2' 'six'"


def test_a_multi_lock_ab_diffs_each_candidate_against_the_lock_its_scenarios_ran_from(
        project, tmp_path):
    """tf's candidate against tf's baseline, not jax's (both pin numpy, which once paired them):
    the report's lock changes are those its verdicts judged."""
    jax_old = lock(tmp_path, "jax-old.txt", "jax==0.9.2\njaxlib==0.9.2\nnumpy==2.0.2\n")
    tf_old = lock(tmp_path, "tf-old.txt", "tensorflow-cpu==2.20.0\nnumpy==2.0.2\n")
    jax_new = lock(tmp_path, "jax-new.txt", "jax==0.10.2\njaxlib==0.10.2\nnumpy==2.0.2\n")
    tf_new = lock(tmp_path, "tf-new.txt", "tensorflow-cpu==2.21.0\nnumpy==2.0.2\n")
    chosen = [s for s in bundled() if s.id in ("jax.mlp", "tf.mlp")]
    report = check_ab(Settings.resolve(project), [jax_new, tf_new], [jax_old, tf_old], chosen,
                      backend=FakeBackend())
    pairs = [(Path(d.old_source).name, Path(d.new_source).name) for d in report.lock_diffs]
    assert pairs == [("jax-old.txt", "jax-new.txt"), ("tf-old.txt", "tf-new.txt")]
    [tf_diff] = [d for d in report.lock_diffs if d.new_source.endswith("tf-new.txt")]
    assert [c.name for c in tf_diff.changed] == ["tensorflow-cpu"]


def test_a_cpu_gate_on_torchs_cuda_build_says_what_it_costs_once(project, tmp_path):
    cuda = "torch==2.14.1\nnvidia-cublas==13.1.1.3\nnvidia-nccl-cu13==2.30.7\nnumpy==2.0.2\n"
    old = lock(tmp_path, "old.txt", cuda.replace("2.14.1", "2.14.0"))
    new = lock(tmp_path, "new.txt", cuda)
    torch_mlp = [s for s in bundled() if s.id == "torch.mlp"]
    report = check_ab(Settings.resolve(project), [new], [old], torch_mlp, backend=FakeBackend())
    said = [n.removeprefix(f"{tmp_path}/") for n in report.notes if "CUDA build" in n]
    assert said == ["new.txt pins torch's CUDA build (2 CUDA wheels, gigabytes an environment in "
                    "the cache) for a cpu gate: lock the CPU build (`uv pip compile "
                    "--torch-backend cpu`, or `--extra-index-url "
                    "https://download.pytorch.org/whl/cpu` in its requirements input)"]
    cpu = lock(tmp_path, "cpu.txt", "torch==2.14.1\nnumpy==2.0.2\n")
    report = check_ab(Settings.resolve(project), [cpu], [old], torch_mlp, backend=FakeBackend())
    assert not [n for n in report.notes if "CUDA build" in n]


def test_two_locks_that_both_pin_numpy_are_paired_once_by_their_framework(project, tmp_path):
    """--baseline-lock jax-old --baseline-lock torch-old against torch-new and jax-new: numpy.mlp
    runs from torch-new (the first lock that pins numpy) and is compared with torch-old, its
    pair, not with jax-old (the first baseline that pins numpy); the lock diffs agree."""
    jax_old = lock(tmp_path, "jax-old.txt", "jax==0.9.2\njaxlib==0.9.2\nnumpy==1.26.4\n")
    torch_old = lock(tmp_path, "torch-old.txt", "torch==2.13.0\nnumpy==2.0.2\n")
    torch_new = lock(tmp_path, "torch-new.txt", "torch==2.14.0\nnumpy==2.0.2\n")
    jax_new = lock(tmp_path, "jax-new.txt", "jax==0.10.2\njaxlib==0.10.2\nnumpy==1.26.4\n")
    chosen = [s for s in bundled() if s.id in ("numpy.mlp", "torch.mlp", "jax.mlp")]
    report = check_ab(Settings.resolve(project), [torch_new, jax_new], [jax_old, torch_old],
                      chosen, backend=FakeBackend())
    proof = {e.scenario: e for e in report.evidence}
    assert proof["numpy.mlp"].candidate.name.endswith("torch-new.txt")
    assert proof["numpy.mlp"].baseline.name.endswith("torch-old.txt")
    assert {v.scenario: v.verdict for v in report.verdicts}["numpy.mlp"] == Verdict.identical
    assert proof["jax.mlp"].baseline.name.endswith("jax-old.txt")
    pairs = [(Path(d.old_source).name, Path(d.new_source).name) for d in report.lock_diffs]
    assert pairs == [("torch-old.txt", "torch-new.txt"), ("jax-old.txt", "jax-new.txt")]
