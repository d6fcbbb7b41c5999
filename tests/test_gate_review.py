"""The second hostile review of `check --base` (F1-F9): a pull request that would choose its
judge, run its own scenario code, or pass a change nothing compared; each a real git repository
and the fake backend, as tests/test_gate_policy.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fakes import FakeBackend
from lockguard.config import load_config
from lockguard.flows.git_base import check_base, open_gate
from lockguard.scenarios import select
from lockguard.settings import Settings
from test_gate_policy import NUMPY, commit_all, git, repository

SCRIPT = "def run(steps, seed):\n    return {'losses': [1.0] * steps}\n"
TABLE = ('[tool.lockguard]\nlock = "a.txt"\nscenarios = ["mine"]\n'
         '[tool.lockguard.scenario.mine]\nscript = "sc/mine.py"\nframework = "numpy"\n')


def run_gate(root, start=None, scenarios=None):
    gate = open_gate(load_config(start=start or root), "main", [], start=start or root)
    chosen = scenarios if scenarios is not None else select(gate.judging, [])
    return gate, check_base(Settings.resolve(gate.judging), gate, chosen, backend=FakeBackend())


def test_f1_a_comment_in_the_lock_switches_off_the_code_ab(tmp_path):
    root = repository(tmp_path, {"pyproject.toml": TABLE, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": SCRIPT, "sc/helper.py": "X = 1\n"})
    (root / "sc" / "helper.py").write_text("X = 2  # the model changed\n")
    commit_all(root)
    _, report = run_gate(root)
    assert not report.passed  # as test_gate_policy shows: red
    (root / "a.txt").write_text("# bump nothing\nnumpy==1.26.4\n")  # a comment only
    commit_all(root)
    gate, report = run_gate(root)
    assert gate.code_changes == ["sc/helper.py"]
    assert not report.passed, report.notes


PADDED = "".join(f"# padding {i}\n" for i in range(40)) + "numpy==2.0.2\n"


@pytest.mark.parametrize("files, locks", [
    # F2: numpy moved into the lock that stays, the one that pinned it removed.
    ({"b.txt": "six==1.16.0\nnumpy==2.0.2\n"}, ["b.txt"]),
    # F3: renamed, padded past git's rename detection, after a lock that stays.
    ({"c.txt": PADDED}, ["b.txt", "c.txt"]),
])
def test_f2_f3_a_framework_moved_elsewhere_is_compared_with_the_lock_that_pinned_it(
        tmp_path, files, locks):
    root = repository(tmp_path, {
        "pyproject.toml": '[tool.lockguard]\nlocks = ["a.txt", "b.txt"]\n',
        "a.txt": "numpy==1.26.4\n", "b.txt": "six==1.16.0\n"})
    (root / "a.txt").unlink()
    for name, text in files.items():
        (root / name).write_text(text)
    (root / "pyproject.toml").write_text(f"[tool.lockguard]\nlocks = {locks!r}\n".replace(
        "'", '"'))
    commit_all(root)
    _, report = run_gate(root, scenarios=NUMPY)
    assert not report.passed
    assert [v.verdict.value for v in report.verdicts] == ["drift"]  # never `new`


def test_f4_a_second_lock_moved_with_a_trivial_first_is_never_run(tmp_path):
    root = repository(tmp_path, {
        "pyproject.toml": '[tool.lockguard]\nlocks = ["a.txt", "b.txt"]\n',
        "a.txt": "numpy==1.26.4\nsix==1.16.0\n", "b.txt": "numpy==1.26.4\n"})
    (root / "b.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    _, report = run_gate(root, scenarios=NUMPY)
    assert not report.passed  # b's move alone: "nothing was compared", red
    (root / "a.txt").write_text("numpy==1.26.4\nsix==1.17.0\n")  # an unrelated pin
    commit_all(root)
    _, report = run_gate(root, scenarios=NUMPY)
    assert not report.passed


def test_f5_the_working_folder_made_a_symlink_lets_the_pr_judge_itself(tmp_path):
    root = repository(tmp_path, {
        "pyproject.toml": '[project]\nname = "root"\n',
        "ml/pyproject.toml": '[tool.lockguard]\nlock = "a.txt"\n',
        "ml/a.txt": "numpy==1.26.4\n"})
    git(root, "mv", "ml", "ml2")
    (root / "ml").symlink_to("ml2")
    (root / "ml2" / "pyproject.toml").write_text('[tool.lockguard]\nlock = "a.txt"\n'
                                                 'fail_on = []\n')
    (root / "ml2" / "a.txt").write_text("numpy==2.0.2\n")
    commit_all(root)
    from lockguard.config import ConfigError
    from lockguard.files import EscapeError

    old = os.getcwd()
    os.chdir(root / "ml")  # the workflow's `working-directory: ml`
    try:
        cwd = Path.cwd()  # resolved: ml2, where main has no configuration
        with pytest.raises(ConfigError, match=r"has a lockguard configuration "
                                              r"\(ml/pyproject.toml\) but none on the way"):
            open_gate(load_config(), "main", [], start=cwd)
        # As the shell names it (PWD, what the CLI passes): the link itself is refused.
        with pytest.raises(EscapeError, match="the folder the gate runs from through a "
                                              "symbolic link"):
            open_gate(load_config(), "main", [], start=root / "ml")
    finally:
        os.chdir(old)


def test_f6_a_target_lock_the_pr_stops_naming_is_read_through_a_link(tmp_path):
    from lockguard.files import EscapeError

    root = repository(tmp_path, {
        "pyproject.toml": '[tool.lockguard]\nlocks = ["a.txt", "b.txt"]\n',
        "a.txt": "numpy==1.26.4\n", "b.txt": "six==1.16.0\n"})
    (root / "pyproject.toml").write_text('[tool.lockguard]\nlocks = ["a.txt"]\n')
    secret = tmp_path / "secret.txt"
    secret.write_text("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY\n")
    (root / "b.txt").unlink()
    (root / "b.txt").symlink_to(os.environ.get("F6_TARGET", str(secret)))
    commit_all(root)
    with pytest.raises(EscapeError):
        gate, report = run_gate(root, scenarios=NUMPY)


def test_f7_an_export_moved_apart_from_a_moved_uv_lock_is_not_stale(tmp_path):
    from test_gate_policy import DATA_LOCKS, project

    markers = DATA_LOCKS / "markers"
    root = project(tmp_path, 'locks = ["uv.lock", "pylock.toml"]',
                   {"uv.lock": (markers / "uv.lock").read_text(),
                    "pylock.toml": (markers / "pylock.toml").read_text()})
    uv = (root / "uv.lock").read_text().replace('version = "25.3.0"', 'version = "25.3.1"')
    (root / "uv.lock").write_text(uv)  # attrs only
    text = (root / "pylock.toml").read_text()
    for version in ("2.2.6", "2.4.6", "2.5.5"):  # numpy in the export only
        text = text.replace(version, version[:-1] + "9")
    (root / "pylock.toml").write_text(text)
    commit_all(root)
    gate, report = run_gate(root, scenarios=NUMPY)
    assert not report.passed
    assert [r.rule for r in report.rule_failures] == ["stale export"]
    assert "does not pin what " in report.rule_failures[0].message


@pytest.mark.parametrize("changed", ["shared/lib.py", "ml/model/hparams.yaml"])
def test_f8_code_the_run_reads_but_the_code_ab_does_not_watch(tmp_path, changed):
    script = ("import sys, pathlib\nsys.path.insert(0, str(pathlib.Path(__file__).parents[2]))\n"
              "import shared.lib\n" + SCRIPT)
    root = repository(tmp_path, {
        "ml/pyproject.toml": TABLE, "ml/a.txt": "numpy==1.26.4\n", "ml/sc/mine.py": script,
        "shared/__init__.py": "", "shared/lib.py": "LR = 0.1\n",
        "ml/model/__init__.py": "", "ml/model/hparams.yaml": "lr: 0.1\n"})
    (root / changed).write_text("LR = 10.0\n" if changed.endswith(".py") else "lr: 10.0\n")
    commit_all(root)
    gate, report = run_gate(root, start=root / "ml")
    assert gate.code_changes == [changed]


def test_f8_a_data_file_of_a_project_at_the_repository_root_is_scenario_code(tmp_path):
    """The project's folder whole is watched (its hyperparameter files, its data), also when
    that folder is the repository's root."""
    root = repository(tmp_path, {"pyproject.toml": TABLE, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": SCRIPT, "conf/hparams.yaml": "lr: 0.1\n"})
    (root / "conf" / "hparams.yaml").write_text("lr: 0.2\n")
    commit_all(root)
    gate = open_gate(load_config(start=root), "main", [], start=root)
    assert gate.code_changes == ["conf/hparams.yaml"]


def test_f9_a_branch_behind_main_is_blamed_for_mains_code_change(tmp_path):
    root = repository(tmp_path, {"pyproject.toml": TABLE, "a.txt": "numpy==1.26.4\n",
                                 "sc/mine.py": SCRIPT, "sc/helper.py": "X = 1\n"})
    git(root, "checkout", "-q", "main")
    (root / "sc" / "helper.py").write_text("X = 2\n")  # main's own, reviewed change
    commit_all(root, "main retrains")
    git(root, "checkout", "-q", "pr")
    (root / "README.md").write_text("docs only\n")
    commit_all(root, "docs")
    gate, report = run_gate(root)
    # main's sc/helper.py is not the PR's; its README.md is, in the project's folder (the
    # repository's root), watched whole (tests/test_mutants_git_base.py)
    assert gate.code_changes == ["README.md"]
