"""The gate's own rules, fast: what `check --base` reads from the merge base (whose configuration
judges, which lock replaces which, what the checkout changes of the gate) and how an acceptance
committed with a change passes it — on real git repositories, with the fake backend (no
environment is built). tests/test_hostile_pr.py runs the same cases end to end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fakes import FakeBackend, lock
from lockguard.config import ConfigError, load_config, parse_config
from lockguard.flows.ab import check_ab
from lockguard.flows.git_base import check_base, config_changes, open_gate
from lockguard.names import Verdict
from lockguard.scenarios import bundled
from lockguard.settings import Settings
from lockguard.flows.check import MergeBase, check

NUMPY = [s for s in bundled() if s.id == "numpy.mlp"]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def project(tmp_path: Path, table: str, files: dict[str, str]) -> Path:
    root = tmp_path / "p"
    root.mkdir()
    (root / "pyproject.toml").write_text(f"[tool.lockguard]\n{table}\n")
    for name, text in files.items():
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-qb", "pr")
    return root


def config_of(text: str):
    import tomllib

    return parse_config(tomllib.loads(text), "test", Path("."))


def test_config_changes_name_each_setting_old_and_new():
    base = config_of('lock = "a.txt"\nscenarios = ["numpy", "torch"]\n'
                     '[scenario.x]\nscript = "x.py"\nframework = "numpy"\ntolerance = "exact"\n')
    head = config_of('lock = "b.txt"\nscenarios = ["numpy"]\nfail_on = []\nsteps = 3\n'
                     'tolerance = {rtol = 1e300, atol = 1e300}\nallow_sdist = true\n'
                     '[scenario.x]\nscript = "x.py"\nframework = "numpy"\n'
                     'tolerance = {rtol = 0.5, atol = 0.0}\n')
    changes = config_changes(base, head)
    # The settings that decide pass or fail come first; locks are said per pair, not here.
    assert changes == [
        "fail_on: the default (drift, compile_fallback, device_fallback, broken, incomparable)"
        " → [] (nothing)",
        "tolerance: the per-dtype default (torch.testing's) → rtol 1e+300, atol 1e+300",
        "scenarios: numpy, torch → numpy",
        "steps: each scenario's own → 3",
        "scenario.x.tolerance: exact → rtol 0.5, atol 0",
        "allow_sdist: False → True",
    ]
    assert config_changes(base, base) == []


def test_the_base_configuration_judges_and_the_change_is_said(tmp_path):
    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\nfail_on = []\n')
    (root / "a.txt").write_text("numpy==2.0.2\n")
    gate = open_gate(load_config(start=root), "main", [])
    assert gate.policy_from == "base" and gate.judging.fail_on is None
    assert gate.judged_by.startswith("main@") and gate.judged_by.endswith(":pyproject.toml")
    assert [c.split(":")[0] for c in gate.changes] == ["fail_on"]
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    assert not report.passed and report.failing == ["numpy.mlp"]
    assert report.gate.changes == gate.changes
    # --policy pr: the checkout's own rules, said as such.
    gate = open_gate(load_config(start=root), "main", [], "pr")
    assert gate.judging.fail_on == [] and "--policy pr" in gate.judged_by
    assert check(Settings.resolve(gate.judging), [], NUMPY, MergeBase(gate),
                 backend=FakeBackend()).passed


def test_a_base_without_configuration_is_judged_by_the_checkout(tmp_path):
    root = tmp_path / "p"
    root.mkdir()
    (root / "a.txt").write_text("numpy==1.26.4\n")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\n')
    gate = open_gate(load_config(start=root), "main", [])
    assert gate.policy_from == "pr" and "main has none" in gate.judged_by
    assert gate.changes == [] and not gate.moved


def test_a_broken_base_configuration_names_the_ref(tmp_path):
    root = project(tmp_path, 'lock = "a.txt"\ntolerence = "exact"', {"a.txt": "numpy==1.26.4\n"})
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\n')
    with pytest.raises(ConfigError, match=r"main:pyproject.toml \[tool.lockguard\]: unknown "
                                          r"key 'tolerence'"):
        open_gate(load_config(start=root), "main", [])


def pairs(gate) -> list[tuple[str | None, str | None, str]]:
    return [(p.base.name if p.base else None, p.head.name if p.head else None, p.how)
            for p in gate.pairs]


def test_locks_are_paired_by_rename_then_position_else_new(tmp_path):
    root = project(tmp_path, 'locks = ["a.txt", "b.txt"]',
                   {"a.txt": "numpy==1.26.4\n", "b.txt": "torch==2.3.0\n"})
    git(root, "mv", "a.txt", "a2.txt")
    (root / "c.txt").write_text("jax==0.4.30\n")
    (root / "d.txt").write_text("six==1.16.0\n")
    (root / "pyproject.toml").write_text(
        '[tool.lockguard]\nlocks = ["a2.txt", "c.txt", "d.txt"]\n')
    gate = open_gate(load_config(start=root), "main", [])
    assert pairs(gate) == [("a.txt", "a2.txt", "renamed, as git sees it"),
                           ("b.txt", "c.txt", "named in its place in the configuration"),
                           (None, "d.txt", "new")]
    assert gate.moved
    # On the command line, --lock names the locks; a new path takes the base's in its place.
    gate = open_gate(load_config(start=root), "main", [str(root / "d.txt")])
    assert pairs(gate) == [("a.txt", "d.txt", "named in its place in the configuration")]


def test_under_the_base_policy_every_base_lock_is_checked(tmp_path):
    root = project(tmp_path, 'locks = ["a.txt", "b.txt"]',
                   {"a.txt": "numpy==1.26.4\n", "b.txt": "torch==2.3.0\n"})
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlocks = ["a.txt"]\n')
    (root / "b.txt").write_text("torch==2.4.0\n")
    gate = open_gate(load_config(start=root), "main", [])
    assert pairs(gate) == [("a.txt", "a.txt", "same path"), ("b.txt", "b.txt", "kept")]
    assert any("b.txt: this checkout's configuration no longer names it; checked all the same"
               in c for c in gate.changes)
    (root / "b.txt").unlink()
    gate = open_gate(load_config(start=root), "main", [])
    assert pairs(gate)[-1] == ("b.txt", None, "removed")
    # The checkout's own policy checks only its own set.
    gate = open_gate(load_config(start=root), "main", [], "pr")
    assert pairs(gate) == [("a.txt", "a.txt", "same path")]


def test_nothing_moved_answers_from_git_alone(tmp_path):
    root = project(tmp_path, 'lock = "a.txt"', {"a.txt": "numpy==1.26.4\n"})
    fake = FakeBackend()
    gate = open_gate(load_config(start=root), "main", [])
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=fake)
    assert report.passed and report.verdicts == [] and fake.prepared == []
    assert any("no lock changed since main" in n for n in report.notes)


def test_an_acceptance_passes_only_its_own_change(tmp_path):
    from lockguard.flows import accept
    from lockguard.report import Report, render

    root = tmp_path / "p"
    root.mkdir()
    config = parse_config({"golden_dir": "golden", "steps": 6}, "test", root)
    old = lock(tmp_path, "old.txt", "numpy==1.26.4\n")
    new = lock(tmp_path, "new.txt", "numpy==2.0.2\n")
    report = check_ab(Settings.resolve(config), [new], [old], NUMPY, backend=FakeBackend())
    assert not report.passed and report.verdicts[0].verdict == Verdict.drift
    report.id = "20260101T000000Z-aaaaaa"
    adoptions, notes = accept.plan(report, tmp_path / "report.json", Settings.resolve(config),
                                   [], "intended", "me <me@e>", verified=True)
    [adoption] = adoptions
    binding = adoption.provenance.acceptance
    assert binding.baseline_lock_hash == old.lock.lock_hash
    assert adoption.provenance.lock_hash == new.lock.lock_hash
    assert binding.result_digest.startswith("sha256:") and binding.verified is True
    accept.adopt(adoptions)

    again = check_ab(Settings.resolve(config), [new], [old], NUMPY, backend=FakeBackend())
    assert again.passed and again.failing == []
    [v] = again.verdicts
    assert v.verdict == Verdict.drift and v.accepted.reason == "intended"
    assert v.reasons[0].startswith("accepted: intended (me <me@e>")
    for fmt in ("text", "markdown", "html", "junit", "github"):
        assert "accepted" in render(Report.model_validate(again.model_dump()), fmt), fmt

    # Another candidate (another numpy): not the change that was accepted.
    other = lock(tmp_path, "other.txt", "numpy==2.1.0\n")
    assert not check_ab(Settings.resolve(config), [other], [old], NUMPY,
                        backend=FakeBackend()).passed
    # Another baseline: neither.
    older = lock(tmp_path, "older.txt", "numpy==1.25.0\n")
    assert not check_ab(Settings.resolve(config), [new], [older], NUMPY,
                        backend=FakeBackend()).passed
    # The same locks, other numbers (the scenario now behaves otherwise): fails again.
    moved = FakeBackend(behaviour={("numpy.mlp", "2.0.2"): "noisy:+0.01"})
    assert not check_ab(Settings.resolve(config), [new], [old], NUMPY, backend=moved).passed
