"""The team's own training where a real project keeps it (issue 45, second slice), with
numpy-only trainings: a src/ layout (src/pkg/train.py) for `entry`, `scenario add` and the
pytest fixture; a scenario's `data` (a dataset outside the package, its bytes in the inputs
digest) and the words a training that reads the network gets. The first slice (the entry's
shapes, the fixture) is tests/test_team_code.py, whose helpers these tests share."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

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


# ------------------------------------------------------------------- data outside the package

# The team's training reading its dataset's slice from data/ beside its package (found from
# its module's file, as the harness's working folder is not the project's).
READS_DATA = TRAIN.replace("def make(seed):\n    rng = np.random.default_rng(seed)\n"
                           "    x = rng.standard_normal((12, 3)).astype(np.float32)\n", """
from pathlib import Path

SLICE = Path(__file__).resolve().parents[1] / "data" / "slice.csv"


def make(seed):
    x = np.loadtxt(SLICE, delimiter=",", dtype=np.float32).reshape(12, 3)
""")
SLICE = "\n".join(",".join(f"{(i * 3 + j) % 7 - 3.0}" for j in range(3)) for i in range(12))


def data_project(root: Path, data: str = '["data/*.csv"]') -> Path:
    return make_project(root, f'lock = "new.txt"\nscenarios = ["ours"]\n{ENTRY}data = {data}\n',
                        files={"pkg/__init__.py": "", "pkg/train.py": READS_DATA,
                               "data/slice.csv": SLICE + "\n"},
                        locks={"new.txt": DATA / "numpy-2.0.2.txt"})


def test_a_changed_data_slice_reruns_the_scenario_and_its_drift_is_caught(tmp_path):
    """Without `data` the slice is outside the digest: the check would answer "identical" from
    the golden's provenance, unrun, after the data changed (a stale PASS)."""
    assert "def make(seed):\n    x = np.loadtxt" in READS_DATA  # the replacement took
    project = data_project(tmp_path / "p")
    # The venv of the lock (the shortcut needs one: a local interpreter's packages are not
    # pinned); the suite's numpy 2.0.2 venv, built once and shared.
    assert cli(project, "record").exit_code == 0
    unrun = cli(project, "check", "--format", "json")
    assert unrun.exit_code == 0, unrun.output
    assert "not re-run" in json.dumps(json.loads(unrun.stdout)["verdicts"][0])
    (project / "data" / "slice.csv").write_text(SLICE.replace("-3.0", "-2.5", 1) + "\n")
    rerun = cli(project, "check", "--format", "json")
    assert rerun.exit_code == 1, rerun.output
    [verdict] = json.loads(rerun.stdout)["verdicts"]
    assert verdict["verdict"] == "drift" and "not re-run" not in json.dumps(verdict)


def test_the_data_digest_is_every_byte_not_the_size_or_time(tmp_path):
    import os

    project = data_project(tmp_path / "p", '["data/slice.csv"]')
    first = digest_of(project)
    path = project / "data" / "slice.csv"
    stat = path.stat()
    path.write_text((SLICE + "\n").replace("0", "1", 1))  # same size
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same time
    assert path.stat().st_size == stat.st_size and digest_of(project) != first
    (project / "data" / "other.csv").write_text("1\n")  # not named: not in the digest
    second = digest_of(project)
    assert digest_of(project) == second


def test_data_that_names_nothing_or_leaves_the_project_is_refused_naming_the_key(tmp_path):
    from lockguard.config import ConfigError, load_config
    from lockguard.scenarios import user_scenarios

    for data, words in (('["data/slise.csv"]', "'data/slise.csv' matches no file"),
                        ('["/etc/hostname"]', "relative to the config's folder"),
                        ('["../x.csv"]', "relative to the config's folder"),
                        ('"data/slice.csv"', "scenario.ours.data")):
        project = data_project(tmp_path / str(len(data)) / "p", data)
        try:
            user_scenarios(load_config(start=project))
        except ConfigError as exc:
            assert "scenario.ours.data" in str(exc) and words in str(exc), str(exc)
        else:
            raise AssertionError(f"{data} was taken")
    outside = tmp_path / "outside.csv"
    outside.write_text("1\n")
    project = data_project(tmp_path / "link" / "p", '["data/*.csv"]')
    (project / "data" / "linked.csv").symlink_to(outside)
    done = cli(project, "check", "--env", "local")
    assert done.exit_code == 2 and "leads out of" in done.output, done.output


def test_a_report_never_replaces_a_data_file(tmp_path):
    project = data_project(tmp_path / "p")
    done = cli(project, "check", "--env", "local", "--report", "json=data/slice.csv")
    assert done.exit_code == 2 and "data of scenario ours" in done.output, done.output


def test_a_merge_base_tree_places_the_data_too(tmp_path):
    from lockguard.config import load_config
    from lockguard.flows.pipeline import CodeTree, Planned
    from lockguard.scenarios import user_scenarios

    project = data_project(tmp_path / "repo" / "ml")
    (project / "data" / "mine.csv").write_text("only in the checkout\n")
    [scenario] = user_scenarios(load_config(start=project))
    tip = data_project(tmp_path / "tip" / "ml")
    # What the target's run reads that the checkout has not: its digest holds it too (the
    # patterns are matched anew there, not the checkout's files mapped over); a link out of
    # the tree is a config error, as in the checkout (test below).
    (tip / "data" / "theirs.csv").write_text("only in the target\n")
    tree = CodeTree(repo=tmp_path / "repo", root=tmp_path / "tip", label="main@1a2b3c4")
    placed = tree.planned(Planned(scenario, None, "cpu", 5)).scenario
    assert placed.data == (tip / "data" / "slice.csv", tip / "data" / "theirs.csv")
    assert placed.data_root == tip


# ------------------------------------------------------------------------------ the network

DOWNLOADS = TRAIN + '''

def download(seed):
    import socket
    # TEST-NET-1 (RFC 5737): never routed, so this fails on any machine, network or not.
    socket.create_connection(("192.0.2.1", 9), timeout=0.05)


def _reach():
    import socket
    socket.create_connection(("192.0.2.1", 9), timeout=0.05)


def falls_back(seed):
    try:
        _reach()
    except OSError:
        pass  # the team's code goes on without the network, then fails on its own
    raise ValueError("a bug of the team's own")


def wraps(seed):
    try:
        _reach()
    except OSError as exc:
        raise RuntimeError("could not fetch the dataset") from exc
'''


def test_a_training_that_reads_the_network_is_told_what_to_do(tmp_path):
    project = make_project(tmp_path / "p", "", files={"pkg/__init__.py": "",
                                                      "pkg/train.py": DOWNLOADS})
    result = harness(project, "pkg.train:download", 3, tmp_path)
    assert result["status"] == "crashed", result
    assert "reached for the network (192.0.2.1:9)" in result["error"], result["error"]
    assert "`data = [...]`" in result["error"]
    # A failure that is not the network's is not blamed on it.
    other = harness(project, "pkg.train:not_a_pair", 3, tmp_path)
    assert other["status"] == "crashed" and "network" not in other["error"]
    # Nor one after the network failed and the code went on without it; a downloader's own
    # error raised from the network's is.
    after = harness(project, "pkg.train:falls_back", 3, tmp_path)
    assert after["status"] == "crashed" and "a bug of the team's own" in after["error"]
    assert "network" not in after["error"], after["error"]
    wrapped = harness(project, "pkg.train:wraps", 3, tmp_path)
    assert "RuntimeError: could not fetch the dataset -- this training reached for the " \
           "network (192.0.2.1:9)" in wrapped["error"], wrapped["error"]


def test_the_sandbox_that_stops_it_reports_the_same_words(tmp_path):
    """Through the gate (the lock's venv, sandboxed: no network there), the verdict's line."""
    project = make_project(tmp_path / "p", 'lock = "new.txt"\nscenarios = ["dl"]\n[scenario.dl]\n'
                           'entry = "pkg.train:download"\nframework = "numpy"\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": DOWNLOADS},
                           locks={"new.txt": DATA / "numpy-2.0.2.txt"})
    done = cli(project, "record", "--format", "json")
    assert done.exit_code == 1, done.output
    [verdict] = json.loads(done.stdout)["verdicts"]
    assert verdict["verdict"] == "broken"
    assert "reached for the network (192.0.2.1:9)" in " ".join(verdict["reasons"]), verdict


# -------------------------------------------------------------- init offering the entry

def test_init_finds_the_teams_training_by_its_shape_never_importing_it(tmp_path):
    from lockguard.init.project import find_training

    pkg = tmp_path / "pkg"
    pkg.mkdir()
    # A module that would fail on import: read as text, it is never run.
    (pkg / "train.py").write_text("import torch\nraise SystemExit('imported')\n\n"
                                  "def fit(steps, seed, timed=iter):\n    ...\n\n"
                                  "def make(seed):\n    ...\n")
    found = find_training(tmp_path, "pkg", ("torch", "numpy"))
    assert (found.entry, found.framework, found.scenario_id) == ("pkg.train:make", "torch",
                                                                 "pkg.train.make")
    (pkg / "train.py").write_text("import jax\n\ndef fit(steps, seed):\n    ...\n")
    assert find_training(tmp_path, "pkg", ("torch", "jax")).entry == "pkg.train:fit"
    assert find_training(tmp_path, "pkg", ("torch", "jax")).framework == "jax"
    # Other parameters, a method, async, a module of another name: not a training entry.
    (pkg / "train.py").write_text("def make(config):\n    ...\n\nclass T:\n"
                                  "    def fit(self, steps, seed): ...\n\n"
                                  "async def fit(steps, seed): ...\n")
    (pkg / "model.py").write_text("def make(seed):\n    ...\n")
    assert find_training(tmp_path, "pkg", ("torch",)) is None
    (pkg / "training.py").write_text("def build(seed, *, width=3):\n    ...\n")
    assert find_training(tmp_path, "pkg", ("numpy",)).entry == "pkg.training:build"
    (pkg / "training.py").write_text("def build(seed:\n")  # not Python: passed over
    assert find_training(tmp_path, "pkg", ("numpy",)) is None


SIGNATURES = ["seed", "steps, seed", "steps, seed, timed=iter", "seed, /", "seed, *, width=3",
              "steps, *, seed", "seed, *, config", "*, seed", "steps, seed=0", "self, seed",
              "seed, *args, **kwargs", "a, b, c", ""]


@pytest.mark.parametrize("signature", SIGNATURES)
def test_init_reads_a_functions_shape_as_the_harness_drives_it(signature):
    """One rule: the parameters init reads from the source (ast, never importing) are those
    the harness counts on the imported function (inspect), so what init offers as fit or
    make is driven as that; a required keyword-only one, which neither shape's call passes,
    leaves it no shape at all."""
    import ast

    from lockguard.harness._lockguard_harness.entry_shapes import _required_params
    from lockguard.init.project import TRAINING_SHAPES, _required

    source = f"def train({signature}):\n    pass\n"
    namespace: dict = {}
    exec(compile(source, "train.py", "exec"), namespace)
    harness = tuple(_required_params(namespace["train"], "pkg.train:train"))
    init = _required(ast.parse(source).body[0])
    keyword_only = "*" in init
    assert init[:init.index("*")] == harness if keyword_only else init == harness
    shapes = {params for params, _ in TRAINING_SHAPES}
    assert (init in shapes) == (harness in shapes and not keyword_only)


def test_init_never_offers_what_the_harness_would_call_otherwise(tmp_path):
    """`def fit(steps, *, seed)`: the harness sees one positional parameter and would call it
    as make(seed); init offers it as nothing."""
    from lockguard.init.project import find_training

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "train.py").write_text("def fit(steps, *, seed):\n    ...\n")
    assert find_training(tmp_path, "pkg", ("numpy",)) is None


def team_repo(root: Path, *, src: bool = False) -> Path:
    """A git repository with a numpy lock, a pyproject.toml and the team's package with its
    train.py (test_team_code's make(seed) and fit(steps, seed)), no lockguard config."""
    import subprocess

    base = root / "src" if src else root
    (base / "pkg").mkdir(parents=True)
    (base / "pkg" / "__init__.py").write_text("")
    (base / "pkg" / "train.py").write_text(TRAIN)
    (root / "requirements.txt").write_bytes((DATA / "numpy-2.0.2.txt").read_bytes())
    (root / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "0"\n')
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=root, check=True)
    return root


def test_init_yes_guards_the_teams_own_training_and_records_its_golden(tmp_path):
    from lockguard.config import load_config

    project = team_repo(tmp_path / "p", src=True)
    done = cli(project, "init", "--yes", "--no-workflow")
    assert done.exit_code == 0, done.output
    assert "your training: pkg.train:make (make(seed)" in done.output
    assert "lockguard_training(\"pkg.train:make\")" in done.output  # the fixture's next step
    config = load_config(project / "pyproject.toml")
    assert config.scenarios == ["numpy.mlp", "pkg.train.make"]
    assert config.scenario["pkg.train.make"].entry == "pkg.train:make"
    assert not (project / "scenarios").exists()  # no copied loop
    assert golden_file(project, "pkg.train.make").is_file()
    checked = cli(project, "check", "--scenario", "pkg.train.make", "--rerun")
    assert checked.exit_code == 0, checked.output
    assert "nothing to do" in cli(project, "init", "--yes", "--no-workflow").output


def test_init_no_entry_and_an_existing_config_leave_the_training_unregistered(tmp_path):
    from lockguard.config import load_config

    project = team_repo(tmp_path / "p")
    done = cli(project, "init", "--yes", "--no-entry", "--no-record", "--no-workflow")
    assert done.exit_code == 0, done.output
    assert load_config(project / "pyproject.toml").scenario == {}
    again = cli(project, "init", "--yes", "--no-record", "--no-workflow")
    assert again.exit_code == 0, again.output
    assert ("`lockguard scenario add pkg.train:make --framework numpy`" in again.output), \
        again.output
    assert load_config(project / "pyproject.toml").scenario == {}


# ------------------------------------------------- the gate trains the test suite's trainings

UNREGISTERED_TEST = """
def test_our_training(lockguard_training):
    lockguard_training("pkg.train:make", framework="numpy", steps=5)
"""


def test_a_fixture_training_is_registered_for_the_gate_which_trains_it(pytester):
    """The config does not name the training: its first recording registers it in the golden
    store, and `lockguard check` (goldens) and the A/B gate select it beside the config's
    `scenarios`, without running the test suite."""
    project = make_project(pytester.path, 'lock = "new.txt"\nscenarios = ["numpy.mlp"]\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "test_train.py": UNREGISTERED_TEST},
                           locks={"new.txt": DATA / "numpy-2.0.2.txt",
                                  "old.txt": DATA / "numpy-1.26.4.txt"})
    registration = project / "golden" / "trainings" / "pkg.train.make.toml"
    pytester.runpytest_subprocess(*plugin_args()).assert_outcomes(failed=1)  # recorded
    text = registration.read_text()
    assert "test_train.py::test_our_training" in text
    assert 'entry = "pkg.train:make"\nframework = "numpy"\nsteps = 5\n' in text
    pytester.runpytest_subprocess(*plugin_args()).assert_outcomes(passed=1)
    assert registration.read_text() == text  # a passing check rewrites nothing

    assert cli(project, "record", "--env", "local", "--scenario", "numpy.mlp").exit_code == 0
    checked = cli(project, "check", "--env", "local", "--format", "json")
    assert checked.stdout.startswith("{"), checked.output
    verdicts = {v["scenario"]: v["verdict"] for v in json.loads(checked.stdout)["verdicts"]}
    assert verdicts.get("pkg.train.make") == "identical", checked.output
    ab = cli(project, "check", "--baseline-lock", "old.txt", "--lock", "new.txt",
             "--format", "json")
    assert "pkg.train.make" in {v["scenario"] for v in json.loads(ab.stdout)["verdicts"]}, \
        ab.output
    # The team changes its training: the gate catches it, unasked.
    (project / "pkg" / "train.py").write_text(TRAIN.replace("LR = 0.05", "LR = 0.06"))
    drifted = cli(project, "check", "--env", "local", "--format", "json")
    assert drifted.exit_code == 1, drifted.output
    verdicts = {v["scenario"]: v["verdict"] for v in json.loads(drifted.stdout)["verdicts"]}
    assert verdicts["pkg.train.make"] == "drift"


def test_a_broken_registration_is_a_config_error_naming_its_file(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "new.txt"\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "golden/trainings/ours.toml": 'entry = "pkg.train:make"\n'
                                                                'framework = "numpyy"\n'},
                           locks={"new.txt": DATA / "numpy-2.0.2.txt"})
    done = cli(project, "check", "--env", "local")
    assert done.exit_code == 2 and "golden/trainings/ours.toml: key 'framework'" in done.output, \
        done.output
    (project / "golden/trainings/ours.toml").write_text('script = "pkg/train.py"\n'
                                                        'framework = "numpy"\n')
    done = cli(project, "check", "--env", "local")
    assert done.exit_code == 2 and "names an entry" in done.output, done.output


def test_a_pull_request_that_deletes_a_registration_is_still_judged_by_it(tmp_path):
    """check --base: the target's registered trainings are the judging set's, as its config's
    scenarios are; the checkout's deletion of one does not take it out of the gate."""
    import subprocess

    def git(*args: str) -> None:
        subprocess.run(["git", *args], cwd=project, check=True, capture_output=True)

    project = make_project(tmp_path / "repo", 'lock = "requirements.txt"\n'
                           'scenarios = ["numpy.mlp"]\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "golden/trainings/ours.toml": 'entry = "pkg.train:make"\n'
                                                                'framework = "numpy"\n'
                                                                'steps = 4\n'},
                           locks={"requirements.txt": DATA / "numpy-1.26.4.txt"})
    git("init", "-q", "-b", "main")
    git("-c", "user.name=t", "-c", "user.email=t@t", "add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "main")
    git("checkout", "-qb", "bump")
    (project / "requirements.txt").write_bytes((DATA / "numpy-2.0.2.txt").read_bytes())
    (project / "golden" / "trainings" / "ours.toml").unlink()
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "bump, unregister")
    done = cli(project, "check", "--base", "main", "--format", "json")
    assert done.stdout.startswith("{"), done.output
    assert "ours" in {v["scenario"] for v in json.loads(done.stdout)["verdicts"]}, done.output
    text = cli(project, "check", "--base", "main")
    assert ("the test suite's training ours unregistered (golden/trainings/ours.toml removed): "
            "main's registration still judges it") in " ".join(text.output.split()), text.output


def test_on_a_terminal_init_asks_about_the_training_first(tmp_path):
    """Its answer changes the config the next question shows; no template is offered then."""
    import os
    import pty
    import subprocess
    import sys

    from conftest import REPO

    project = team_repo(tmp_path / "p")
    leader, follower = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # this checkout's lockguard
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lockguard", "init"], cwd=project,
                                env=env, stdin=follower, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        # The training: no; the config: yes; the template, recording, the workflow: no.
        os.write(leader, b"n\ny\nn\nn\nn\n")
        out, err = proc.communicate(timeout=60)
    finally:
        os.close(follower)
        os.close(leader)
    assert proc.returncode == 0, out + err
    # The prompts, in order (a pipe gets no echo of the answers: they share a line).
    asked = re.findall(r"(?:^|: )([A-Z][^\n]*?\?) \[", out, re.M)
    assert len(asked) >= 2, out + err
    assert asked[0].startswith("Guard your own training, pkg.train:make (make(seed)"), out
    assert "Write the config (lock requirements.txt; scenarios numpy.mlp) to" in asked[1], out
    assert "Also write scenarios/my_model.py" in out  # declined the entry: the template offered
    assert "entry" not in (project / "pyproject.toml").read_text()


def test_a_fixture_trainings_data_is_registered_and_digested_by_the_gate(pytester):
    project = make_project(pytester.path, 'lock = "new.txt"\nscenarios = []\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": READS_DATA,
                                  "data/slice.csv": SLICE + "\n", "test_train.py": """
        def test_our_training(lockguard_training):
            lockguard_training("pkg.train:make", framework="numpy", steps=5,
                               data=["data/*.csv"])
        """}, locks={"new.txt": DATA / "numpy-2.0.2.txt"})
    pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv",
                                  "--lockguard-update").assert_outcomes(passed=1)
    registration = project / "golden" / "trainings" / "pkg.train.make.toml"
    assert 'data = [\n    "data/*.csv",\n]' in registration.read_text() or \
        'data = ["data/*.csv"]' in registration.read_text(), registration.read_text()
    unrun = cli(project, "check", "--scenario", "pkg.train.make", "--format", "json")
    assert "not re-run" in json.dumps(json.loads(unrun.stdout)["verdicts"][0]), unrun.output
    (project / "data" / "slice.csv").write_text(SLICE.replace("-3.0", "-2.5", 1) + "\n")
    rerun = cli(project, "check", "--scenario", "pkg.train.make", "--format", "json")
    assert json.loads(rerun.stdout)["verdicts"][0]["verdict"] == "drift", rerun.output
    # The test without data= now: the registration's data is kept, not dropped.
    pytester.makepyfile(test_train="""
        def test_our_training(lockguard_training):
            lockguard_training("pkg.train:make", steps=5)
        """)
    pytester.runpytest_subprocess(*plugin_args(), "--lockguard-env", "venv",
                                  "--lockguard-update").assert_outcomes(passed=1)
    assert "data/*.csv" in registration.read_text()


def _registered_repo(root: Path, config: str = "") -> Path:
    """A git repository (branch main, one commit) holding a numpy project whose golden store
    registers the training `ours`; the branch `bump` checked out."""
    import subprocess

    project = make_project(root, 'lock = "requirements.txt"\nscenarios = ["numpy.mlp"]\n'
                           + config,
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "golden/trainings/ours.toml": 'entry = "pkg.train:make"\n'
                                                                'framework = "numpy"\n'
                                                                'steps = 4\n'},
                           locks={"requirements.txt": DATA / "numpy-1.26.4.txt"})
    for args in (("init", "-q", "-b", "main"), ("add", "."), ("commit", "-qm", "main"),
                 ("checkout", "-qb", "bump")):
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       cwd=project, check=True, capture_output=True)
    return project


def test_a_pull_request_that_edits_a_registration_is_told_the_targets_judges(tmp_path):
    """An edited registration is overridden by the target's as a deleted one is, and says so;
    one only the pull request has is its own new training, judged as it stands."""
    from lockguard.config import load_config
    from lockguard.flows.git_base import open_gate
    from lockguard.scenarios import select, user_scenarios

    project = _registered_repo(tmp_path / "repo")
    trainings = project / "golden" / "trainings"
    (trainings / "ours.toml").write_text('entry = "pkg.train:make"\nframework = "numpy"\n'
                                         'steps = 6\n')
    (trainings / "theirs.toml").write_text('entry = "pkg.train:make"\nframework = "numpy"\n')
    gate = open_gate(load_config(start=project), "main", [])
    assert ("the test suite's training ours's registration edited "
            "(golden/trainings/ours.toml changed): main's registration still judges it"
            in gate.changes), gate.changes
    assert not [line for line in gate.changes if "theirs" in line], gate.changes
    steps = {s.id: s.steps for s in user_scenarios(gate.judging)}
    assert steps["ours"] == 4 and "theirs" in steps
    assert {"ours", "theirs"} <= {s.id for s in select(gate.judging, [])}


def test_check_base_opens_with_the_golden_store_outside_the_repository(tmp_path):
    """golden_dir may lie outside the repository (a shared store): the gate opens, and the
    registrations it reads are the checkout's."""
    from lockguard.config import load_config, registered_trainings
    from lockguard.flows.git_base import open_gate

    project = _registered_repo(tmp_path / "repo", 'golden_dir = "../store"\n')
    store = tmp_path / "store" / "trainings"
    store.mkdir(parents=True)
    (store / "shared.toml").write_text('entry = "pkg.train:make"\nframework = "numpy"\n')
    gate = open_gate(load_config(start=project), "main", [])
    assert not [line for line in gate.changes if "training" in line], gate.changes
    assert "shared" in registered_trainings(gate.judging)


def test_a_registration_that_is_a_link_is_refused_naming_it(tmp_path):
    """As `data` refuses links out: a link in golden/trainings, out of the folder or not, is a
    config error naming the file, never a scenario read through it."""

    from lockguard.config import ConfigError, load_config, registered_trainings

    outside = tmp_path / "elsewhere.toml"
    outside.write_text('entry = "pkg.train:make"\nframework = "numpy"\n')
    project = make_project(tmp_path / "p", 'lock = "new.txt"\n',
                           files={"pkg/__init__.py": "", "pkg/train.py": TRAIN,
                                  "golden/trainings/ours.toml": outside.read_text()},
                           locks={"new.txt": DATA / "numpy-2.0.2.txt"})
    folder = project / "golden" / "trainings"
    assert set(registered_trainings(load_config(start=project))) == {"ours"}
    for target in (outside, folder / "ours.toml"):
        link = folder / "linked.toml"
        link.unlink(missing_ok=True)
        link.symlink_to(target)
        with pytest.raises(ConfigError, match=r"linked\.toml: a registration is a file of "):
            registered_trainings(load_config(start=project))


def _registering(root: Path, registration: str, name: str = "ours") -> Path:
    """data_project's project with a registered training `name` (its file's text given)."""
    project = data_project(root)
    (project / "golden" / "trainings").mkdir(parents=True)
    (project / "golden" / "trainings" / f"{name}.toml").write_text(registration)
    return project


def test_a_registrations_errors_name_its_file_and_its_key(tmp_path):
    """A registration's keys are at the top of its own file: the exit-2 line names them
    there, not as the config's scenario.<id>.* keys."""

    from lockguard.config import ConfigError, load_config
    from lockguard.scenarios import all_scenarios, user_scenarios

    entry = 'entry = "pkg.train:make"\nframework = "numpy"\n'
    cases = [(entry + 'data = ["data/*.npz"]\n', "ours",
              r"golden/trainings/theirs\.toml: key 'data': 'data/\*\.npz' matches no file"),
             ('entry = "pkg.gone:make"\nframework = "numpy"\n', "ours",
              r"golden/trainings/theirs\.toml: key 'entry': pkg\.gone:make: no module"),
             (entry, "numpy.mlp", r"golden/trainings/numpy\.mlp\.toml: the id numpy\.mlp "
                                  r"\(the file's name\): name taken by a bundled scenario")]
    for i, (text, name, words) in enumerate(cases):
        project = _registering(tmp_path / str(i), text, "theirs" if name == "ours" else name)
        with pytest.raises(ConfigError, match=words):
            all_scenarios(load_config(start=project))
    # The config's own tables keep their keys.
    project = data_project(tmp_path / "own", '["data/*.npz"]')
    with pytest.raises(ConfigError, match=r"\[tool.lockguard\]: key 'scenario\.ours\.data'"):
        user_scenarios(load_config(start=project))


def test_a_report_never_replaces_a_registered_trainings_code_or_data(tmp_path):
    """project_inputs holds the registered trainings' entry modules and data, matched as
    the scenario's data is (one expansion: config.data_files)."""
    from lockguard.config import data_files, load_config, project_inputs

    project = _registering(tmp_path / "p", 'entry = "pkg.extra:make"\nframework = "numpy"\n'
                           'data = ["extra/*.bin", "extra/[ab].txt"]\n', "theirs")
    (project / "pkg" / "extra.py").write_text(TRAIN)
    (project / "extra").mkdir()
    for name in ("one.bin", "a.txt", "[ab].txt"):
        (project / "extra" / name).write_text("x\n")
    inputs = {path: what for path, what, _ in project_inputs(load_config(start=project))}
    assert inputs[project / "pkg" / "extra.py"] == "the entry module of scenario theirs"
    expected = data_files(project, ["extra/*.bin", "extra/[ab].txt"], "w")
    assert expected == (project / "extra" / "one.bin", project / "extra" / "a.txt")
    assert {p for p, what in inputs.items() if what == "data of scenario theirs"} == \
        set(expected)


def test_a_data_file_of_the_judged_tree_that_leads_out_of_it_is_a_config_error(tmp_path):
    """check --base matches a scenario's `data` patterns anew in the target's tree: a match
    that is a link out of that tree would be read by the run but not digested, so it is a
    ConfigError (exit 2), not a silent omission; a pattern matching nothing there adds
    nothing (a run reading it fails)."""
    import os

    from lockguard.config import ConfigError
    from lockguard.flows.pipeline import CodeTree

    repo, root, outside = tmp_path / "repo", tmp_path / "target", tmp_path / "outside"
    for folder in (repo, root / "data", outside):
        folder.mkdir(parents=True)
    (outside / "secret.npz").write_bytes(b"x")
    (root / "data" / "slice.npz").write_bytes(b"slice")
    tree = CodeTree(repo=repo, root=root, label="main@1a2b3c4")
    assert tree._data(root, ("data/*.npz",)) == (root / "data" / "slice.npz",)
    assert tree._data(root, ("data/none*.npz",)) == ()
    os.symlink(outside / "secret.npz", root / "data" / "leak.npz")
    with pytest.raises(ConfigError, match="leads out of it"):
        tree._data(root, ("data/*.npz",))
