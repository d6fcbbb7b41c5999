"""The team's own training where a real project keeps it (issue 45, second slice), with
numpy-only trainings: a src/ layout (src/pkg/train.py) for `entry`, `scenario add` and the
pytest fixture; a scenario's `data` (a dataset outside the package, its bytes in the inputs
digest) and the words a training that reads the network gets. The first slice (the entry's
shapes, the fixture) is tests/test_team_code.py, whose helpers these tests share."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

from conftest import DATA, golden_file, make_project
from test_team_code import FIXTURE_TEST, TRAIN, cli, harness, plugin_args

pytest_plugins = ["pytester"]

ENTRY = '[scenario.ours]\nentry = "pkg.train:make"\nframework = "numpy"\nsteps = 5\n'


def src_project(root: Path, config: str = "", files: dict[str, str] | None = None) -> Path:
    """A src-layout project: the team's package in src/pkg/ (test_team_code's train.py), a
    numpy lock, the config at the top."""
    return make_project(root, 'lock = "new.txt"\n' + textwrap.dedent(config),
                        files={"src/pkg/__init__.py": "", "src/pkg/train.py": TRAIN,
                               **(files or {})},
                        locks={"new.txt": DATA / "numpy-2.0.2.txt"})


def digest_of(project: Path) -> str:
    """The inputs digest of the config's one user scenario, as check computes it."""
    from lockguard.config import load_config
    from lockguard.scenarios import inputs_digest, user_scenarios

    [scenario] = user_scenarios(load_config(start=project))
    return inputs_digest(scenario, lock_hash="l", steps=5, seed=0, device="cpu", threads=1,
                         harness="h", environment="e")


# ------------------------------------------------------------------------------ src layouts

def test_a_src_layout_entry_is_found_imported_and_digested_from_src(tmp_path):
    from lockguard.config import load_config
    from lockguard.scenarios import user_scenarios

    project = src_project(tmp_path / "p", ENTRY, files={"src/helpers.py": "A = 1\n"})
    [scenario] = user_scenarios(load_config(start=project))
    assert scenario.root == project / "src"
    assert scenario.script == project / "src" / "pkg" / "train.py"
    # The harness imports it with the scenario's root first on sys.path, as a run does.
    run = harness(scenario.root, "pkg.train:make", 4, tmp_path)
    assert run["status"] == "ok" and len(run["losses"]) == 4, run["error"]
    first = digest_of(project)
    for name in ("src/pkg/train.py", "src/pkg/data/w.csv", "src/helpers.py"):
        before = digest_of(project)
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text((project / name).read_text() + "# edited\n"
                                    if (project / name).exists() else "1\n")
        assert digest_of(project) != before, name
    assert first != digest_of(project)


def test_a_src_layout_entry_records_and_checks_through_the_gate(tmp_path):
    project = src_project(tmp_path / "p", ENTRY)
    recorded = cli(project, "record", "--env", "local", "--scenario", "ours")
    assert recorded.exit_code == 0, recorded.output
    assert golden_file(project, "ours").is_file()
    checked = cli(project, "check", "--env", "local", "--scenario", "ours", "--rerun",
                  "--format", "json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["verdicts"][0]["verdict"] == "identical"
    (project / "src" / "pkg" / "train.py").write_text(TRAIN.replace("LR = 0.05", "LR = 0.06"))
    drifted = cli(project, "check", "--env", "local", "--scenario", "ours")
    assert drifted.exit_code == 1 and "drift" in drifted.output, drifted.output


def test_scenario_add_finds_a_src_layout_module_and_names_both_places_when_absent(tmp_path):
    from lockguard.config import load_config
    from lockguard.scenarios import user_scenarios

    project = src_project(tmp_path / "p")
    done = cli(project, "scenario", "add", "pkg.train:fit", "--framework", "numpy")
    assert done.exit_code == 0, done.output
    [scenario] = user_scenarios(load_config(start=project))
    assert scenario.root == project / "src" and scenario.entry == "pkg.train:fit"
    before = (project / "pyproject.toml").read_bytes()
    absent = cli(project, "scenario", "add", "pkg.model:make", "--framework", "numpy")
    assert absent.exit_code == 2 and "nor in its src/" in absent.output, absent.output
    assert (project / "pyproject.toml").read_bytes() == before


def test_the_fixture_trains_a_src_layout_project(pytester):
    src_project(pytester.path, files={"tests/test_train.py": FIXTURE_TEST})
    run = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-update")
    run.assert_outcomes(passed=1)
    assert golden_file(pytester.path, "pkg.train.make").is_file()
    pytester.runpytest_subprocess(*plugin_args()).assert_outcomes(passed=1)
