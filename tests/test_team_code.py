"""The team's own training as the scenario (issue 45), with numpy-only trainings: a scenario's
`entry` (a function of the project's code, "pkg.train:make") as the harness drives it, its config
key and inputs digest, `lockguard scenario add`, and the `lockguard_training` pytest fixture
recording and checking the golden `lockguard check` reads. The torch project wired both ways,
with a real upgrade caught, is tests/test_team_torch.py."""

from __future__ import annotations

import importlib.metadata
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from conftest import DATA, REPO, golden_file, make_project

pytest_plugins = ["pytester"]

# A team's training in the factory shape: its model (a linear one), its optimiser (plain SGD
# in float32) and its data (three batches: an epoch) built from the seed; `fit` is the same
# training looped by hand, the independent reference of lockguard's loop.
TRAIN = """
import numpy as np

LR = 0.05


def make(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((12, 3)).astype(np.float32)
    y = x @ np.array([1.0, -2.0, 0.5], dtype=np.float32)
    w = np.zeros(3, dtype=np.float32)

    def step(batch):
        nonlocal w
        xb, yb = batch
        err = xb @ w - yb
        grad = (2 * xb.T @ err / len(yb)).astype(np.float32)
        w = (w - np.float32(LR) * grad).astype(np.float32)
        return {"loss": float(np.mean(err ** 2)), "grad_norm": float(np.linalg.norm(grad))}

    batches = [(x[i:i + 4], y[i:i + 4]) for i in range(0, 12, 4)]
    return step, batches, lambda: x[:2] @ w


def fit(steps, seed):
    step, batches, probe = make(seed)
    done = [step(batches[i % len(batches)]) for i in range(steps)]
    return {"losses": [d["loss"] for d in done], "grad_norms": [d["grad_norm"] for d in done],
            "outputs": probe()}


def needs_three(a, b, c):
    return []


def not_a_pair(seed):
    return 1.0


def no_batches(seed):
    return (lambda batch: 0.0), []
"""


def team_project(root: Path, config: str = "", files: dict[str, str] | None = None) -> Path:
    """A project with the team's package pkg/ (train.py above) and a numpy lock."""
    return make_project(root, 'lock = "new.txt"\n' + textwrap.dedent(config),
                        files={"pkg/__init__.py": "", "pkg/train.py": TRAIN, **(files or {})},
                        locks={"new.txt": DATA / "numpy-2.0.2.txt"})


def harness(project: Path, entry: str, steps: int, tmp: Path) -> dict:
    """One harness run of `entry` with this interpreter (numpy): the result file it wrote."""
    out = tmp / f"{entry.replace(':', '.')}-{steps}.json"
    subprocess.run([sys.executable, str(REPO / "lockguard/harness/run.py"), "--scenario", "t",
                    "--steps", str(steps), "--out", str(out), "--entry", entry,
                    "--root", str(project), "--framework", "numpy"], check=True, timeout=120)
    return json.loads(out.read_text())


def test_the_factory_shape_is_driven_as_the_teams_own_loop_drives_it(tmp_path):
    project = team_project(tmp_path / "p")
    # 7 steps over 3 batches: the batches are iterated again, as a DataLoader's next epoch.
    made = harness(project, "pkg.train:make", 7, tmp_path)
    by_hand = harness(project, "pkg.train:fit", 7, tmp_path)
    assert made["status"] == "ok" and by_hand["status"] == "ok", (made["error"], by_hand["error"])
    assert made["losses"] == by_hand["losses"] and len(made["losses"]) == 7
    assert made["grad_norms"] == by_hand["grad_norms"] and len(made["grad_norms"]) == 7
    assert made["outputs"] == by_hand["outputs"] and made["output_shape"] == [2]
    assert made["losses"][0] > made["losses"][-1]  # it trained
    # lockguard's loop timed each step (`timed`); the fit shape that takes no timer shows none.
    assert made["timings"]["first_step_s"] is not None


@pytest.mark.parametrize("entry, words", [
    ("pkg.train:needs_three", "requires 3 parameters"),
    ("pkg.train:not_a_pair", "must return (step, batches)"),
    ("pkg.train:no_batches", "batches yielded no batch"),
    ("pkg.train:absent", "defines no absent"),
    ("pkg.elsewhere:make", "No module named 'pkg.elsewhere'"),
    ("_lockguard_harness.gen:make", "names the harness's own package"),
])
def test_an_entry_off_the_contract_is_a_crash_that_says_why(tmp_path, entry, words):
    result = harness(team_project(tmp_path / "p"), entry, 3, tmp_path)
    assert result["status"] == "crashed" and words in result["error"], result["error"]


def test_the_config_takes_a_script_or_an_entry_and_names_the_key(tmp_path):
    from lockguard.config import ConfigError, load_config
    from lockguard.scenarios import user_scenarios

    both = team_project(tmp_path / "both", """
        [scenario.x]
        script = "pkg/train.py"
        entry = "pkg.train:make"
        framework = "numpy"
        """)
    with pytest.raises(ConfigError, match="scenario.x.*either 'script' or 'entry'"):
        load_config(start=both)
    bad = team_project(tmp_path / "bad", '[scenario.x]\nentry = "pkg/train.py"\n'
                                         'framework = "numpy"\n')
    with pytest.raises(ConfigError, match=r"key 'scenario.x.entry'.*not an entry"):
        load_config(start=bad)
    missing = team_project(tmp_path / "missing", '[scenario.x]\nentry = "pkg.model:make"\n'
                                                 'framework = "numpy"\n')
    with pytest.raises(ConfigError, match=r"key 'scenario.x.entry': pkg.model:make: no module "
                                          r"pkg.model"):
        user_scenarios(load_config(start=missing))
    ok = team_project(tmp_path / "ok", '[scenario.x]\nentry = "pkg.train:make"\n'
                                       'framework = "numpy"\nsteps = 5\n')
    [scenario] = user_scenarios(load_config(start=ok))
    assert (scenario.entry, scenario.steps, scenario.source) == ("pkg.train:make", 5, "user")
    assert scenario.script == ok / "pkg" / "train.py" and scenario.root == ok


def test_a_report_never_replaces_the_entrys_module(tmp_path):
    project = team_project(tmp_path / "p", '[scenario.x]\nentry = "pkg.train:make"\n'
                                           'framework = "numpy"\n')
    done = cli(project, "check", "--env", "local", "--report", "json=pkg/train.py")
    assert done.exit_code == 2 and "the entry module of scenario x" in done.output, done.output
    assert (project / "pkg" / "train.py").read_text() == textwrap.dedent(TRAIN)


def test_every_file_the_entry_can_import_is_in_the_inputs_digest(tmp_path):
    """A golden answers unrun only while the code it ran is unchanged: every file of the entry's
    top-level package (modules and data) and each module beside it at the root."""
    from lockguard.config import load_config
    from lockguard.scenarios import inputs_digest, user_scenarios

    project = team_project(tmp_path / "p", '[scenario.x]\nentry = "pkg.train:make"\n'
                                           'framework = "numpy"\n',
                           files={"pkg/models/mlp.py": "W = 1\n", "util.py": "A = 1\n",
                                  "README.md": "hello\n"})

    def digest() -> str:
        [scenario] = user_scenarios(load_config(start=project))
        return inputs_digest(scenario, lock_hash="l", steps=5, seed=0, device="cpu", threads=1,
                             harness="h", environment="e")

    first = digest()
    assert digest() == first
    for name in ("README.md", "pkg/__pycache__/train.cpython-312.pyc", "notes/x.py"):
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text("not imported\n")
        assert digest() == first, name
    for name, text in (("pkg/models/mlp.py", "W = 2\n"), ("pkg/data/slice.csv", "1,2\n"),
                       ("util.py", "A = 2\n"), ("helpers.py", "B = 1\n")):
        before = digest()
        (project / name).parent.mkdir(exist_ok=True)
        (project / name).write_text(text)
        assert digest() != before, name


def test_a_merge_base_tree_places_the_entrys_project_too(tmp_path):
    """check --base runs a user scenario's code from the target's tree: an entry's module, its
    digest's root and the folder the harness imports from all come from there."""
    from lockguard.config import load_config
    from lockguard.flows.pipeline import CodeTree, Planned
    from lockguard.scenarios import user_scenarios

    project = team_project(tmp_path / "repo" / "ml", '[scenario.x]\nentry = "pkg.train:make"\n'
                                                     'framework = "numpy"\n')
    [scenario] = user_scenarios(load_config(start=project))
    tree = CodeTree(repo=tmp_path / "repo", root=tmp_path / "tip", label="main@1a2b3c4")
    placed = tree.planned(Planned(scenario, None, "cpu", 5)).scenario
    assert placed.root == tmp_path / "tip" / "ml"
    assert placed.script == tmp_path / "tip" / "ml" / "pkg" / "train.py"
    request = tree.request(scenario.request(steps=5, seed=0, device="cpu", threads=1,
                                            timeout=9, project=project))
    assert request.entry_root == tmp_path / "tip" / "ml" and request.entry == "pkg.train:make"


def cli(project: Path, *args: str):
    from lockguard.cli import cli as command

    cwd = os.getcwd()
    os.chdir(project)
    try:
        return CliRunner().invoke(command, list(args))
    finally:
        os.chdir(cwd)


def add_exact_and_record(project: Path, entry: str, framework: str, steps: int) -> dict:
    """`scenario add` of `entry` as scenario "ours" (judged exactly), then `record`: the
    golden's result (the CLI in-process, so the checkout's code runs)."""
    added = cli(project, "scenario", "add", entry, "--framework", framework,
                "--name", "ours", "--steps", str(steps))
    assert added.exit_code == 0, added.output
    with (project / "pyproject.toml").open("a") as config:
        config.write('tolerance = "exact"\n')  # the scenario's table is the file's last
    recorded = cli(project, "record")
    assert recorded.exit_code == 0, recorded.output
    golden = json.loads(golden_file(project, "ours").read_text())["result"]
    assert golden["status"] == "ok" and len(golden["losses"]) == steps
    return golden


def test_scenario_add_writes_the_entry_the_loader_reads(tmp_path):
    from lockguard.config import load_config
    from lockguard.scenarios import user_scenarios

    project = team_project(tmp_path / "p", 'scenarios = ["numpy.mlp"]\n')
    done = cli(project, "scenario", "add", "pkg.train:make", "--framework", "numpy",
               "--steps", "6")
    assert done.exit_code == 0, done.output
    assert "added scenario pkg.train.make" in done.output
    assert "--scenario pkg.train.make" in done.output  # `scenarios` leaves it out: said so
    text = (project / "pyproject.toml").read_text()
    assert '[tool.lockguard.scenario."pkg.train.make"]\nentry = "pkg.train:make"' in text
    [scenario] = user_scenarios(load_config(start=project))
    assert (scenario.id, scenario.steps, scenario.framework) == ("pkg.train.make", 6, "numpy")


@pytest.mark.parametrize("args, words", [
    (("pkg/train.py",), "is not an entry"),
    (("pkg.model:make",), "key 'scenario.pkg.model.make.entry': pkg.model:make: no module"),
    (("pkg.train:make", "--name", "numpy.mlp"), "name taken by a bundled scenario"),
    (("pkg.train:make", "--name", "../x"), "scenario id '../x' is not valid"),
])
def test_scenario_add_refuses_in_one_line_and_writes_nothing(tmp_path, args, words):
    project = team_project(tmp_path / "p")
    before = (project / "pyproject.toml").read_bytes()
    done = cli(project, "scenario", "add", *args, "--framework", "numpy")
    assert done.exit_code == 2, done.output
    assert words in done.output and done.output.count("\n") == 1, done.output
    assert (project / "pyproject.toml").read_bytes() == before


def test_scenario_add_to_a_lockguard_toml(tmp_path):
    project = tmp_path / "p"
    (project / "pkg").mkdir(parents=True)
    (project / "pkg" / "train.py").write_text(TRAIN)
    (project / "lockguard.toml").write_text('golden_dir = "golden"\n')
    done = cli(project, "scenario", "add", "pkg.train:fit", "--framework", "numpy",
               "--name", "ours")
    assert done.exit_code == 0, done.output
    assert (project / "lockguard.toml").read_text() == (
        'golden_dir = "golden"\n\n[scenario."ours"]\nentry = "pkg.train:fit"\n'
        'framework = "numpy"\n')


# ------------------------------------------------------------------------- the pytest fixture

def plugin_args() -> list[str]:
    """`-p lockguard.pytest_plugin` unless the installed lockguard registers it (pytest11)."""
    names = {e.name for e in importlib.metadata.entry_points(group="pytest11")}
    return [] if "lockguard" in names else ["-p", "lockguard.pytest_plugin"]


FIXTURE_TEST = """
def test_our_training(lockguard_training):
    lockguard_training("pkg.train:make", framework="numpy")
"""


def test_the_fixture_records_then_checks_the_golden_lockguard_check_reads(pytester):
    project = team_project(pytester.path, '[scenario."pkg.train.make"]\n'
                                          'entry = "pkg.train:make"\nframework = "numpy"\n'
                                          'steps = 6\n',
                           files={"test_train.py": FIXTURE_TEST})
    golden = golden_file(project, "pkg.train.make")
    first = pytester.runpytest_subprocess(*plugin_args())
    first.assert_outcomes(failed=1)  # no golden yet: recorded, and said so (never a silent pass)
    first.stdout.fnmatch_lines(["*no golden yet: recorded*pkg.train.make.json*"])
    recorded = json.loads(golden.read_text())
    assert recorded["result"]["steps"] == 6 and len(recorded["result"]["losses"]) == 6
    pytester.runpytest_subprocess(*plugin_args()).assert_outcomes(passed=1)

    # `lockguard check` reads that golden: the same file, the same verdict.
    checked = cli(project, "check", "--env", "local", "--scenario", "pkg.train.make",
                  "--format", "json")
    assert checked.exit_code == 0, checked.output
    assert json.loads(checked.stdout)["verdicts"][0]["verdict"] == "identical"

    # The team changes its training: the test fails with the gate's words.
    train = project / "pkg" / "train.py"
    train.write_text(TRAIN.replace("LR = 0.05", "LR = 0.07"))
    drift = pytester.runpytest_subprocess(*plugin_args())
    drift.assert_outcomes(failed=1)
    drift.stdout.fnmatch_lines(["*pkg.train.make: drift*", "*losses beyond tolerance from step 1*",
                                "*up to * ULP*"])
    assert json.loads(golden.read_text()) == recorded  # a failing check writes no golden

    updated = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-update")
    updated.assert_outcomes(passed=1)
    assert json.loads(golden.read_text())["result"]["losses"] != recorded["result"]["losses"]
    pytester.runpytest_subprocess(*plugin_args()).assert_outcomes(passed=1)


def test_the_fixture_takes_the_function_itself_and_refuses_what_it_cannot_name(pytester):
    team_project(pytester.path, files={"test_train.py": """
        import pytest
        from pkg.train import fit

        def test_by_function(lockguard_training):
            report = lockguard_training(fit, framework="numpy", steps=4, name="ours")
            assert [v.scenario for v in report.verdicts] == ["ours"]

        def test_a_local_function(lockguard_training):
            def inner(steps, seed):
                return [1.0]
            lockguard_training(inner, framework="numpy")

        def test_unregistered_without_framework(lockguard_training):
            lockguard_training("pkg.train:fit")
        """})
    pytester.syspathinsert(pytester.path)
    run = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-update")
    run.assert_outcomes(passed=1, failed=2)
    run.stdout.fnmatch_lines(["*is not a module-level function of the project*",
                              "*pkg.train:fit is no scenario of*name its framework*"])
    assert golden_file(pytester.path, "ours").is_file()


def test_a_training_the_locks_cannot_run_never_passes(pytester):
    """Under the gate's env (a venv of the config's lock) a torch entry has no lock here: the
    run is skipped, which the fixture reports as a failure, never as a pass."""
    team_project(pytester.path, files={"test_train.py": """
        def test_skipped(lockguard_training):
            lockguard_training("pkg.train:fit", framework="torch")
        """})
    for flags in ((), ("--lockguard-update",)):
        run = pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv", *flags)
        run.assert_outcomes(failed=1)
        run.stdout.fnmatch_lines(["*skipped*"])
    assert not (pytester.path / "golden").exists()


def test_the_plugin_costs_a_suite_that_does_not_use_it_no_import():
    """pytest loads every pytest11 plugin into every suite: this one imports nothing of
    lockguard (nor pydantic, numpy, click) until a test asks for the fixture."""
    code = ("import sys, lockguard.pytest_plugin; print(sorted(m for m in sys.modules if "
            "m.split('.')[0] in ('lockguard', 'pydantic', 'numpy', 'click', 'rich')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out.strip() == "['lockguard', 'lockguard.pytest_plugin']"


def test_the_plugin_is_registered_with_pytest():
    from lockguard import toml

    project = toml.loads((REPO / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"lockguard": "lockguard.pytest_plugin"}


@pytest.mark.parametrize("name", ["my model", "-x", "a/b", "x" * 101])
def test_a_name_that_is_no_scenario_id_is_refused_before_anything_is_recorded(tmp_path, name):
    """Its golden and registration file would carry it, and every command would then refuse
    the registration: the test fails naming itself, and nothing is written."""
    from lockguard.config import load_config
    from lockguard.pytest_plugin import Asked, _train

    project = team_project(tmp_path / "p")
    asked = Asked("pkg.train:make", "numpy", 3, name, None, "tests/test_t.py::test_ours")
    with pytest.raises(pytest.fail.Exception, match=r"tests/test_t.py::test_ours: name=.* is "
                                                    r"not a scenario id"):
        _train(project, asked, False, "local")
    assert not (project / "golden").exists()
    assert load_config(start=project).scenario == {}
