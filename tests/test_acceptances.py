"""What an acceptance binds and what `accept` refuses, fast: on the fake backend (no environment
is built), through the real flows, goldens and CLI.

- An acceptance passes a failing A/B verdict only for the change it was made for
  (lockguard/flows/acceptances.py): bit for bit on the hardware class it was accepted on, within
  the scenario's tolerance on another class, for the verdict it accepted, and only while the
  golden's numbers are the ones it digested.
- `accept` refuses a candidate that is not a healthy run, a report that is not a check's, and a
  lock that moved since the check (lockguard/flows/accept.py): exit 2, one line, nothing written.
- `record` replaces an unverified golden (adopted from artefacts nothing vouches for) with a
  verified one.

test_accept.py and test_hostile_pr.py run the same promises with real environments.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import make_project, run_cli, snapshot
from fakes import FakeBackend, lock, other_cpu
from lockguard import golden
from lockguard.config import Options, load_config, parse_config
from lockguard.flows import accept
from lockguard.flows.ab import check_ab
from lockguard.flows.record import record
from lockguard.hardware import hardware_class, host_class
from lockguard.names import Verdict
from lockguard.report import render
from lockguard.scenarios import bundled
from lockguard.settings import Settings

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]
TORCH = [s for s in bundled() if s.id == "torch.mlp"]
OLD, NEW = "numpy==1.26.4\n", "numpy==2.0.2\n"
# Another CPU's kernels: the same curve, moved by about a tenth of float32's default rtol
# (1.3e-6), so not bit for bit but well within tolerance; and a move far beyond it.
LOW_BITS, BEYOND = 1e-7, 1e-2


def settings_of(root: Path) -> Settings:
    return Settings.resolve(parse_config({"golden_dir": "golden", "steps": 6}, "test", root))


def accepted_on(tmp_path: Path, backend: FakeBackend):
    """The numpy 1.26.4 → 2.0.2 drift checked on `backend` and accepted from that check's
    report (as vouched for); returns (settings, old lock, new lock, the golden written)."""
    root = tmp_path / "p"
    root.mkdir()
    settings = settings_of(root)
    old, new = lock(tmp_path, "old.txt", OLD), lock(tmp_path, "new.txt", NEW)
    report = check_ab(settings, [new], [old], NUMPY, backend=backend)
    assert not report.passed and report.verdicts[0].verdict == Verdict.drift
    report.id = "20260101T000000Z-aaaaaa"
    adoptions, _ = accept.plan(report, tmp_path / "report.json", settings, [], "intended",
                               "me <me@e>", verified=True)
    [(adoption, written)] = accept.adopt(adoptions)
    assert written
    return settings, old, new, adoption.path


def checked(settings: Settings, old, new, backend: FakeBackend):
    report = check_ab(settings, [new], [old], NUMPY, backend=backend)
    [v] = report.verdicts
    return report, v


def test_an_acceptance_on_another_hardware_class_passes_within_tolerance_only(tmp_path):
    amd = other_cpu()
    settings, old, new, path = accepted_on(tmp_path, FakeBackend(cpu=amd))
    amd_id = hardware_class({"cpu": {**host_cpu(), **amd}}, "cpu").id
    assert amd_id != host_class("cpu").id and path.parent.name == amd_id

    # This machine's run moves the low bits: within the tolerance of the accepted numbers.
    report, v = checked(settings, old, new, FakeBackend(nudge=LOW_BITS))
    assert report.passed and v.verdict == Verdict.drift and v.accepted is not None
    assert v.accepted.how == (f"accepted on hardware class {amd_id}; this run on "
                              f"{host_class('cpu').id} is within the scenario's tolerance of "
                              "those numbers")
    for fmt in ("text", "markdown", "html", "junit", "github"):
        shown = " ".join(render(report, fmt).split())  # (text wraps its lines)
        assert f"accepted on hardware class {amd_id}; this run on" in shown, fmt

    # Beyond the tolerance of the accepted numbers: the acceptance does not hold.
    report, v = checked(settings, old, new, FakeBackend(nudge=BEYOND))
    assert not report.passed and v.accepted is None and report.failing == ["numpy.mlp"]

    # On the class it was accepted on, tolerance is not enough: bit for bit only.
    report, v = checked(settings, old, new, FakeBackend(cpu=amd, nudge=LOW_BITS))
    assert not report.passed and v.accepted is None
    report, v = checked(settings, old, new, FakeBackend(cpu=amd))
    assert report.passed and "bit for bit" in v.accepted.how


def host_cpu() -> dict:
    from lockguard.hardware import cpu_info

    return cpu_info()


def test_an_acceptance_holds_for_the_verdict_it_accepted(tmp_path):
    """A drift accepted: the same candidate numbers under another failing verdict (the
    baseline now crashes: incomparable) are not passed by it."""
    settings, old, new, _ = accepted_on(tmp_path, FakeBackend())
    report, v = checked(settings, old, new, FakeBackend())
    assert report.passed and v.accepted is not None
    crashing_baseline = FakeBackend(behaviour={("numpy.mlp", "1.26.4"): "crash"})
    report, v = checked(settings, old, new, crashing_baseline)
    assert v.verdict == Verdict.incomparable and v.accepted is None and not report.passed
    # (A broken candidate is other numbers as well: refused either way.)
    report, v = checked(settings, old, new, FakeBackend(behaviour={("numpy.mlp", "2.0.2"): "nan"}))
    assert v.verdict == Verdict.broken and v.accepted is None and not report.passed


def test_a_golden_whose_accepted_result_was_edited_is_no_acceptance(tmp_path):
    """The golden's result edited (a loss moved) and the file re-digested, as golden.py writes
    it: its acceptance's result digest no longer matches it, so it passes nothing — even for a
    run whose numbers are the ones that acceptance digested."""
    settings, old, new, path = accepted_on(tmp_path, FakeBackend())
    document = json.loads(path.read_text())
    document["result"]["losses"][-1] *= 1 + BEYOND
    path.write_text(golden.document_text(document))
    gold = golden.load(path)  # still a valid golden file: only the binding is broken
    assert gold.provenance.acceptance.result_digest != golden.result_digest(gold.result)
    report, v = checked(settings, old, new, FakeBackend())
    assert not report.passed and v.accepted is None


# ------------------------------------------------------------------- what `accept` refuses

CANDIDATE = ("numpy.mlp", "2.0.2")


def refused_project(tmp_path: Path, case: str) -> tuple[Path, Path]:
    """A project whose A/B check (numpy 1.26.4 → 2.0.2, on the fake) produced the report at
    the returned path, in the way `case` names; nothing accepted yet."""
    root = make_project(tmp_path / "p", 'golden_dir = "golden"\nsteps = 6')
    old, new = lock(root, "old.txt", OLD), lock(root, "new.txt", NEW)
    config = load_config(start=root)
    options = Options(device="cuda") if case == "cpu-fallback" else \
        Options(repeat=3) if case == "noisy" else None
    behaviour = {CANDIDATE: case} if case in ("nan", "timeout", "invalid", "crash",
                                             "cpu-fallback", "noisy") else {}
    backend = FakeBackend(behaviour=behaviour)
    if case == "record":
        report = record(Settings.resolve(config), [new], NUMPY, backend=backend)
    else:
        report = check_ab(Settings.resolve(config, options), [new], [old], NUMPY,
                          backend=backend)
        assert not report.passed
    data = json.loads(render(report, "json"))
    if case == "propose":  # (a proposal's report is a check of a lock in lockguard's cache)
        data["command"] = "propose"
    path = root / "report.json"
    path.write_text(json.dumps(data))
    if case == "lock rewritten":
        (root / "new.txt").write_text("numpy==2.1.0\n")
    return root, path


@pytest.mark.parametrize("case, why", [
    ("crash", "scenario numpy.mlp: its run is crashed (RuntimeError: boom); a golden must be a "
              "healthy run"),
    ("nan", "scenario numpy.mlp: its run is nan (loss 5 is nan)"),
    ("timeout", "scenario numpy.mlp: its run is timeout"),
    ("invalid", "scenario numpy.mlp: its run is invalid (the run's result breaks the result "
                "contract"),
    ("cpu-fallback", "scenario numpy.mlp: it ran on cpu, not on cuda"),
    ("noisy", "scenario numpy.mlp: its repeated runs disagreed with each other "
              "(nondeterministic)"),
    ("record", "report.json: a `record` report, not a check's (its results are already "
               "goldens)"),
    ("propose", "report.json: a `propose` report, not a check's (a proposal's lock lives in "
                "lockguard's cache"),
    ("lock rewritten", "scenario numpy.mlp: "),
])
def test_accept_refuses_and_writes_nothing(tmp_path, case, why):
    root, path = refused_project(tmp_path, case)
    before = snapshot(root)
    refused = run_cli("accept", "--from", str(path), "--reason", "intended", "--yes", cwd=root)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert refused.stdout == "" and refused.stderr.count("\n") == 1, refused.stderr
    assert why in refused.stderr, refused.stderr
    if case == "lock rewritten":
        assert "new.txt changed since the check ran; run `lockguard check` again and accept " \
               "that" in refused.stderr
    assert snapshot(root) == before
    # The same report with its refused cause away is adopted (the refusal was that cause's).
    if case == "lock rewritten":
        (root / "new.txt").write_text(NEW)
        taken = run_cli("accept", "--from", str(path), "--reason", "intended", "--yes",
                        cwd=root)
        assert taken.returncode == 0 and "wrote: golden/cpu/" in taken.stderr, taken.stderr


# ------------------------------------------------------------- an unverified golden, recorded

def test_record_replaces_an_unverified_golden_with_a_verified_one(tmp_path):
    """Adopted from artefacts nothing vouches for, a golden answers no check without a run;
    `record` of the same lock on this class (the same numbers) makes it a verified golden, and
    the next check answers from it."""
    from lockguard.flows.check import check

    root = tmp_path / "p"
    root.mkdir()
    settings = settings_of(root)
    old, new = lock(tmp_path, "old.txt", OLD), lock(tmp_path, "new.txt", NEW)
    report = check_ab(settings, [new], [old], NUMPY, backend=FakeBackend())
    report.id = "20260101T000000Z-aaaaaa"
    adoptions, notes = accept.plan(report, tmp_path / "report.json", settings, [], "from CI",
                                   "me <me@e>", verified=False)
    assert any("adopted as unverified" in n for n in notes)
    [(adoption, _)] = accept.adopt(adoptions)
    assert not golden.trusted(golden.load(adoption.path))
    fake = FakeBackend()
    check(settings, [new], NUMPY, backend=fake)
    assert fake.runs == [("numpy.mlp", "2.0.2")]  # unverified: run and compared, not answered

    recorded = record(settings, [new], NUMPY, backend=FakeBackend())
    assert [v.verdict for v in recorded.verdicts] == [Verdict.identical]  # the same numbers
    gold = golden.load(adoption.path)
    assert golden.trusted(gold) and gold.provenance.acceptance is None
    assert gold.result == adoption.result
    fake = FakeBackend()
    answered = check(settings, [new], NUMPY, backend=fake)
    assert fake.runs == [] and [v.verdict for v in answered.verdicts] == [Verdict.unchanged]


def test_the_runs_own_class_is_tried_first_bit_for_bit(tmp_path):
    """(seed 3 survivor: acceptances.py's sort key `!=` made `==`.) The change accepted on the
    other class and then on this one: a run here with this machine's numbers is passed by this
    class's golden, bit for bit, not by the other's within tolerance (which it would meet too)."""
    amd = other_cpu()
    settings, old, new, amd_path = accepted_on(tmp_path, FakeBackend(cpu=amd))
    report, v = checked(settings, old, new, FakeBackend())
    assert report.passed and v.accepted.how.startswith("accepted on hardware class")
    report.id = "20260101T000001Z-bbbbbb"
    adoptions, _ = accept.plan(report, tmp_path / "report.json", settings, [], "intended here",
                               "me <me@e>", verified=True)
    [(adoption, written)] = accept.adopt(adoptions)
    assert written and adoption.path != amd_path
    report, v = checked(settings, old, new, FakeBackend())
    assert report.passed
    assert v.accepted.how == "the candidate's numbers are the accepted ones, bit for bit"
    assert v.accepted.reason == "intended here"
    # (seed 4 survivor: the `continue` past this class's golden made `break`.) This machine's
    # numbers moved in their low bits: not this class's bit for bit, but within tolerance of
    # the other class's acceptance, which is tried next
    report, v = checked(settings, old, new, FakeBackend(nudge=LOW_BITS))
    assert report.passed and v.accepted.how.startswith("accepted on hardware class")
    assert v.accepted.reason == "intended"


def test_the_accepted_golden_names_the_candidate_lock_it_came_from(tmp_path):
    """(seed 4 survivor: accept.py's `lock=lock.path if lock else None` negated.) The golden's
    provenance names the check's candidate lock, new.txt, by the path the check gave it (no
    git label: it was read from disk) and its hash; the acceptance binds old.txt's hash."""
    settings, old, new, path = accepted_on(tmp_path, FakeBackend())
    gold = golden.load(path)
    assert gold.provenance.lock is not None and Path(gold.provenance.lock).name == "new.txt"
    assert gold.provenance.lock_label is None
    assert gold.provenance.lock_hash == new.lock.lock_hash
    assert gold.provenance.acceptance.baseline_lock_hash == old.lock.lock_hash


def test_an_unusable_golden_of_another_class_does_not_hide_the_acceptance(tmp_path):
    """(seed 4 survivor: acceptances.py's `continue` past an unusable golden made `break`.)
    A damaged golden in a class folder listed before the accepting class's ("0-damaged" sorts
    before any class id) is skipped; the acceptance after it still passes this run."""
    amd = other_cpu()
    settings, old, new, path = accepted_on(tmp_path, FakeBackend(cpu=amd))
    damaged = path.parent.parent / "0-damaged" / path.name
    damaged.parent.mkdir()
    damaged.write_text("{ not a golden")
    report, v = checked(settings, old, new, FakeBackend(nudge=LOW_BITS))
    assert report.passed and v.accepted is not None
    assert Path(v.accepted.golden).name == path.name and path.parent.name in v.accepted.golden
