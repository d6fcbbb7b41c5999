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
DATA_LOCKS = Path(__file__).parent / "data" / "locks"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@e", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


def project(tmp_path: Path, table: str, files: dict[str, str]) -> Path:
    """A repository whose main holds a pyproject.toml with `table` and `files`; on branch pr."""
    return repository(tmp_path, {"pyproject.toml": f"[tool.lockguard]\n{table}\n", **files},
                      name="p")


def config_of(text: str):
    from lockguard import toml  # tomllib is 3.11's; lockguard's reader runs on 3.10 too

    return parse_config(toml.loads(text), "test", Path("."))


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


# --------------------------------------------------- the target's tip judges, found as ours is

def repository(tmp_path: Path, files: dict[str, str], name: str = "repo") -> Path:
    """A repository whose main holds `files`; checked out on branch pr."""
    root = tmp_path / name
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "main")
    git(root, "checkout", "-qb", "pr")
    return root


def commit_all(root: Path, message: str = "change") -> None:
    git(root, "add", "-A")
    git(root, "commit", "-qm", message)


def judged(root: Path, start: Path, named: Path | None = None):
    """`check --base main` as the CLI opens it from `start` (with --config `named`)."""
    config = load_config(named, start=start)
    gate = open_gate(config, "main", [], start=None if named else start, named=named)
    return gate, check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())


def sha(root: Path, ref: str = "main") -> str:
    return git(root, "rev-parse", ref).strip()[:7]


def test_a_config_moved_up_the_tree_is_judged_by_the_targets_where_it_was(tmp_path):
    """P06 (H1): in a monorepo run from ml/, the PR empties ml/pyproject.toml's table and
    puts a loosened one at the root; the target's ml/pyproject.toml judges, and the move is
    the first change said."""
    root = repository(tmp_path, {
        "pyproject.toml": '[project]\nname = "root"\n',
        "ml/pyproject.toml": '[project]\nname = "ml"\n\n[tool.lockguard]\nlock = "a.txt"\n',
        "ml/a.txt": "numpy==1.26.4\n"})
    (root / "ml" / "pyproject.toml").write_text('[project]\nname = "ml"\n')
    (root / "pyproject.toml").write_text('[project]\nname = "root"\n\n[tool.lockguard]\n'
                                         'lock = "ml/a.txt"\nfail_on = []\n')
    (root / "ml" / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    gate, report = judged(root, root / "ml")
    assert gate.policy_from == "base"
    assert gate.judged_by == f"main@{sha(root)}:ml/pyproject.toml"
    assert gate.changes[0] == ("configuration: main's is ml/pyproject.toml, this checkout's is "
                               "pyproject.toml (judged by main's; this checkout's takes effect "
                               "once merged)")
    assert any(c.startswith("fail_on: ") for c in gate.changes)
    assert not report.passed and report.failing == ["numpy.mlp"]


def test_a_config_added_below_the_targets_is_a_change_not_the_judge(tmp_path):
    """P07: the target's configuration is at the root; the PR adds ml/lockguard.toml and the
    gate runs from ml/: the root's judges."""
    root = repository(tmp_path, {
        "pyproject.toml": '[tool.lockguard]\nlock = "ml/a.txt"\n',
        "ml/a.txt": "numpy==1.26.4\n"})
    (root / "ml" / "lockguard.toml").write_text('lock = "a.txt"\nfail_on = []\n')
    (root / "ml" / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    gate, report = judged(root, root / "ml")
    assert gate.judged_by == f"main@{sha(root)}:pyproject.toml"
    assert gate.changes[0].startswith("configuration: main's is pyproject.toml, this "
                                      "checkout's is ml/lockguard.toml")
    assert not report.passed


def test_a_branch_forked_before_the_gate_is_judged_by_the_targets_tip(tmp_path):
    """P08 (H2): forked before main adopted lockguard, the branch brings its own lockguard.toml
    (fail_on = []): the merge base has no configuration, main's tip has; that one judges."""
    root = repository(tmp_path, {"pyproject.toml": '[project]\nname = "demo"\n',
                                 "a.txt": "numpy==1.26.4\n"})
    git(root, "checkout", "-q", "main")
    (root / "pyproject.toml").write_text('[project]\nname = "demo"\n\n[tool.lockguard]\n'
                                         'lock = "a.txt"\n')
    commit_all(root, "adopt lockguard")
    git(root, "checkout", "-q", "pr")
    (root / "lockguard.toml").write_text('lock = "a.txt"\nfail_on = []\n')
    (root / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root, "bump, and a gate of our own")
    gate, report = judged(root, root)
    assert gate.policy_from == "base" and gate.judged_by == f"main@{sha(root)}:pyproject.toml"
    assert gate.changes[0].startswith("configuration: main's is pyproject.toml, this "
                                      "checkout's is lockguard.toml")
    assert not report.passed and report.failing == ["numpy.mlp"]


def test_a_branch_forked_before_main_tightened_its_policy_meets_the_tight_one(tmp_path):
    """P10: main's fail_on was loose at the fork and is strict at its tip: the tip's judges."""
    root = repository(tmp_path, {"pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\n'
                                                   'fail_on = []\n',
                                 "a.txt": "numpy==1.26.4\n"})
    git(root, "checkout", "-q", "main")
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\n')
    commit_all(root, "tighten")
    git(root, "checkout", "-q", "pr")
    (root / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root, "bump")
    gate, report = judged(root, root)
    assert gate.judging.fail_on is None  # the default: drift fails
    assert any(c.startswith("fail_on: ") for c in gate.changes)  # the branch still has []
    assert not report.passed


def test_a_target_without_a_gate_anywhere_on_the_way_lets_the_checkout_judge(tmp_path):
    root = repository(tmp_path, {"pyproject.toml": '[project]\nname = "x"\n',
                                 "ml/a.txt": "numpy==1.26.4\n"})
    (root / "ml" / "lockguard.toml").write_text('lock = "a.txt"\n')
    commit_all(root)
    gate, _ = judged(root, root / "ml")
    assert gate.policy_from == "pr"
    assert gate.judged_by.endswith("main has none from ml up to the repository's root)") or \
        "main has none from" in gate.judged_by


def test_a_config_that_is_a_symbolic_link_is_refused(tmp_path):
    """P28: pyproject.toml turned into a link to conf/pyproject.toml (fail_on = []), named
    with --config as the pre-commit example does: refused before anything is read through it;
    a lock that is a link (SL02: to /proc/self/environ) too, its content never quoted."""
    from lockguard.files import EscapeError

    root = repository(tmp_path, {"pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\n',
                                 "a.txt": "numpy==1.26.4\n"})
    (root / "conf").mkdir()
    (root / "conf" / "pyproject.toml").write_text('[tool.lockguard]\nlock = "../a.txt"\n'
                                                  'fail_on = []\n')
    (root / "pyproject.toml").unlink()
    (root / "pyproject.toml").symlink_to("conf/pyproject.toml")
    commit_all(root)
    named = root / "pyproject.toml"
    with pytest.raises(EscapeError, match=r"pyproject\.toml: the configuration file through a "
                                          r"symbolic link"):
        open_gate(load_config(named), "main", [], named=named)

    root = repository(tmp_path / "2", {"pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\n',
                                       "a.txt": "numpy==1.26.4\n"})
    (root / "a.txt").unlink()
    (root / "a.txt").symlink_to("/proc/self/environ")
    commit_all(root)
    with pytest.raises(EscapeError) as caught:
        open_gate(load_config(start=root), "main", [], start=root)
    assert "a lock that leads to /proc/" in str(caught.value)
    assert "PATH=" not in str(caught.value)


def test_both_sides_run_the_targets_scenario_code(tmp_path):
    """P01-P03: a PR that bumps the lock and rewrites the scenario (its script, a module or a
    data file beside it) runs the target's code on both sides, and says what it changed."""
    script = "import json\n\ndef run(steps, seed):\n    return {'losses': [1.0] * steps}\n"
    root = repository(tmp_path, {
        "pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\nscenarios = ["mine"]\n'
                          '[tool.lockguard.scenario.mine]\nscript = "sc/mine.py"\n'
                          'framework = "numpy"\n',
        "a.txt": "numpy==1.26.4\n", "sc/mine.py": script, "sc/helper.py": "X = 1\n",
        "sc/cfg.json": "{}\n"})
    (root / "a.txt").write_text("numpy==2.0.2\n")
    (root / "sc" / "mine.py").write_text(script.replace("[1.0]", "[2.0]"))
    (root / "sc" / "helper.py").write_text("X = 2\n")
    (root / "sc" / "cfg.json").write_text('{"x": 1}\n')
    commit_all(root)
    config = load_config(start=root)
    gate = open_gate(config, "main", [], start=root)
    assert gate.code_changes == ["sc/cfg.json", "sc/helper.py", "sc/mine.py"]
    assert "scenario code: sc/helper.py changed (the check runs main's)" in gate.changes
    from lockguard.scenarios import select

    fake = FakeBackend()
    report = check_base(Settings.resolve(gate.judging), gate, select(gate.judging, []),
                        backend=fake)
    # The lock A/B: main's code on both sides. Then the code, judged apart on the new lock
    # (main's, then this checkout's): it trains otherwise, a rule that fails the gate.
    assert [t for _, t in fake.scripts][:2] == [script, script]
    # (Its two sides run at once: in either order.)
    assert sorted(t for _, t in fake.scripts[2:]) == [script, script.replace("[1.0]", "[2.0]")]
    assert report.gate.changes == gate.changes
    assert [r.rule for r in report.rule_failures] == ["scenario code changed with the lock"]
    assert not report.passed


def test_a_pr_that_changes_only_scenario_code_runs_it_against_the_targets(tmp_path):
    """A PR that changes the scenario's code and no lock is not waved through: its code runs
    against the target's on the same lock, under the target's policy; red, then `accept`,
    then green. check_code_changes = false at the target leaves code to other checks."""
    from lockguard.flows import accept
    from lockguard.scenarios import select

    script = "def run(steps, seed):\n    return {'losses': [1.0] * steps}\n"
    table = ('[tool.lockguard]\nlock = "a.txt"\nscenarios = ["mine"]\ngolden_dir = "golden"\n'
             '[tool.lockguard.scenario.mine]\nscript = "sc/mine.py"\nframework = "numpy"\n')
    root = repository(tmp_path, {"pyproject.toml": table, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": script, "sc/helper.py": "X = 1\n"})
    (root / "sc" / "helper.py").write_text("X = 2  # the model changed\n")
    commit_all(root)

    def gate_check():
        gate = open_gate(load_config(start=root), "main", [], start=root)
        settings = Settings.resolve(gate.judging)
        return settings, check_base(settings, gate, select(gate.judging, []),
                                    backend=FakeBackend())

    settings, report = gate_check()
    assert not report.passed and report.failing == ["mine"]
    assert any("the scenarios' code did" in n for n in report.notes)
    [baseline] = [lk for lk in report.locks if lk.role == "baseline"]
    assert baseline.name.endswith(f"with main@{sha(root)}'s scenario code")
    report.id = "20260101T000000Z-aaaaaa"
    adoptions, _ = accept.plan(report, tmp_path / "report.json", settings, [], "new model",
                               "me <me@e>", verified=True)
    accept.adopt(adoptions)
    _, again = gate_check()
    assert again.passed and again.verdicts[0].accepted.reason == "new model"

    # The target turns code checks off: nothing to check.
    git(root, "stash", "-u")
    git(root, "checkout", "-q", "main")
    (root / "pyproject.toml").write_text(table.replace('golden_dir = "golden"\n',
                                                      'golden_dir = "golden"\n'
                                                      'check_code_changes = false\n'))
    commit_all(root, "code is gated elsewhere")
    git(root, "checkout", "-q", "pr")
    _, off = gate_check()
    assert off.passed and off.verdicts == []
    assert any("no lock changed" in n for n in off.notes)


def test_an_export_that_moved_apart_from_its_uv_lock_is_named_stale(tmp_path):
    """A project guarded as uv.lock and the pylock.toml exported from it: a PR that moves one
    and not the other fails with the file that is stale and the command that refreshes it,
    never "nothing was compared"."""
    from lockguard.locks.parser import exported_by

    markers = DATA_LOCKS / "markers"
    uv_lock, pylock = (markers / "uv.lock").read_text(), (markers / "pylock.toml").read_text()
    command = exported_by(pylock)
    assert command.startswith("uv export ")
    for moved in ("uv.lock", "pylock.toml"):
        (tmp_path / moved).mkdir()
        root = project(tmp_path / moved, 'locks = ["uv.lock", "pylock.toml"]',
                       {"uv.lock": uv_lock, "pylock.toml": pylock})
        text = (root / moved).read_text()
        for version in ("2.2.6", "2.4.6", "2.5.5"):  # numpy, whichever Python reads it
            text = text.replace(version, version[:-1] + "9")
        (root / moved).write_text(text)
        gate = open_gate(load_config(start=root), "main", [], start=root)
        report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
        assert not report.passed
        [rule] = report.rule_failures
        assert rule.lock.endswith("pylock.toml") and rule.rule == "stale export"
        if moved == "uv.lock":
            assert "which this change moved: it still holds the old pins" in rule.message
        else:
            assert "moved, but" in rule.message and "did not" in rule.message
        assert f"`{command}`" in rule.message
    # Moved together, in step: the uv.lock's A/B compares the export's change too.
    (tmp_path / "both").mkdir()
    root = project(tmp_path / "both", 'locks = ["uv.lock", "pylock.toml"]',
                   {"uv.lock": uv_lock, "pylock.toml": pylock})
    for moved in ("uv.lock", "pylock.toml"):
        text = (root / moved).read_text()
        for version in ("2.2.6", "2.4.6", "2.5.5"):
            text = text.replace(version, version[:-1] + "9")
        (root / moved).write_text(text)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    report = check_base(Settings.resolve(gate.judging), gate, NUMPY, backend=FakeBackend())
    # (The fake's other numpy drifts: a verdict, no rule.)
    assert not report.rule_failures and [v.scenario for v in report.verdicts] == ["numpy.mlp"]
    assert any("pylock.toml moved in step with " in n for n in report.notes)


# ------------------------------------------- every key of the base policy counts, not its wording

USER = ('scenarios = ["mine"]\n[tool.lockguard.scenario.mine]\nscript = "sc/mine.py"\n'
        'framework = "numpy"\n')
SCRIPT = "def run(steps, seed):\n    return {'losses': [1.0] * steps}\n"


def bumped_under(tmp_path: Path, base: str, pr: str, files: dict[str, str] | None = None):
    """main's [tool.lockguard] `base` with numpy 1.26.4; the PR's `pr` with numpy 2.0.2,
    committed. Returns the repository's root."""
    root = repository(tmp_path, {"pyproject.toml": f'[tool.lockguard]\nlock = "a.txt"\n{base}',
                                 "a.txt": "numpy==1.26.4\n", **(files or {})}, name="p")
    (root / "pyproject.toml").write_text(f'[tool.lockguard]\nlock = "a.txt"\n{pr}')
    (root / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    return root


def gated(root: Path, policy_from: str = "base"):
    from lockguard.scenarios import select

    gate = open_gate(load_config(start=root), "main", [], policy_from, start=root)
    fake = FakeBackend()
    report = check_base(Settings.resolve(gate.judging), gate, select(gate.judging, []),
                        backend=fake)
    return gate, report, fake


def test_a_pr_that_sets_steps_still_runs_the_bases(tmp_path):
    root = bumped_under(tmp_path, "steps = 6\n", "steps = 2\n")
    gate, report, fake = gated(root)
    assert "steps: 6 → 2" in gate.changes
    assert fake.steps and set(fake.steps) == {6}, fake.steps
    assert all(len(ev.candidate.result.losses) == 6 for ev in report.evidence)
    _, _, own = gated(root, "pr")  # (its own policy: its steps)
    assert set(own.steps) == {2}


def test_a_pr_that_allows_sdists_is_still_held_to_wheels(tmp_path):
    root = bumped_under(tmp_path, "", "allow_sdist = true\n")
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert "allow_sdist: False → True" in gate.changes
    # What every build of this check reads (backend_for takes its options from Settings).
    assert Settings.resolve(gate.judging).allow_sdist is False
    assert Settings.resolve(load_config(start=root)).allow_sdist is True


def test_a_pr_that_loosens_its_scenarios_tolerance_is_judged_by_the_bases(tmp_path):
    loose = USER + "tolerance = {rtol = 0.5, atol = 0.5}\n"
    root = bumped_under(tmp_path, USER, loose, {"sc/mine.py": SCRIPT})
    gate, report, _ = gated(root)
    assert "scenario.mine.tolerance: the per-dtype default (torch.testing's) → rtol 0.5, " \
           "atol 0.5" in gate.changes
    [v] = report.verdicts
    assert v.verdict == Verdict.drift and not report.passed
    # The same numbers under the PR's own tolerance would pass: the base's is what failed it.
    _, own, _ = gated(root, "pr")
    assert own.passed and own.verdicts[0].verdict == Verdict.within_tolerance


def test_a_policy_only_pr_passes_at_once_and_says_what_it_changes(tmp_path):
    root = project(tmp_path, 'lock = "a.txt"\nsteps = 6', {"a.txt": "numpy==1.26.4\n"})
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\nsteps = 3\n'
                                         'fail_on = []\n')
    commit_all(root)
    gate, report, fake = gated(root)
    assert report.passed and report.verdicts == [] and fake.prepared == fake.runs == []
    assert report.gate.changes == gate.changes == [
        "fail_on: the default (drift, compile_fallback, device_fallback, broken, incomparable)"
        " → [] (nothing)", "steps: 6 → 3"]
    assert any("no lock changed since main" in n for n in report.notes)
    from lockguard.report import render

    assert "this PR changes the gate" in render(report, "text").splitlines()[0]


def test_a_deleted_scenario_script_stops_the_check_naming_the_bases_config(tmp_path):
    from conftest import run_cli, snapshot

    root = bumped_under(tmp_path, USER, USER, {"sc/mine.py": SCRIPT})
    git(root, "rm", "-q", "sc/mine.py")
    commit_all(root, "no more scenario")
    before = snapshot(root)
    stopped = run_cli("check", "--base", "main", cwd=root)
    assert stopped.returncode == 2, stopped.stdout + stopped.stderr
    assert stopped.stderr.count("\n") == 1 and stopped.stdout == ""
    assert "main:pyproject.toml [tool.lockguard]: key 'scenario.mine.script': " in stopped.stderr
    assert "sc/mine.py not found" in stopped.stderr
    assert snapshot(root) == before
