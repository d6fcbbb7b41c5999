"""`lockguard init` on sample projects, as a user runs it (the real CLI in a subprocess, no
terminal on stdin, real git repositories).

A sample project: a git repository with a hashed numpy lock (pip-compile's) as requirements.txt,
a pyproject.toml of its own and the team's package `mymodel/` (a numpy MLP with hand-written
backprop). `init --yes` writes the config (appended to the pyproject.toml, whose own text stays
byte for byte), records the goldens in a real venv (slow), and writes a workflow actionlint
accepts; a second run changes nothing. The scenario template, once its build_model() returns
the team's model, trains it in the lock's venv and records a golden. Refusals (no lock, no
terminal and no --yes, a pyproject.toml that is not TOML) are one line, exit 2, nothing written.
"""

from __future__ import annotations

import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from conftest import DATA, REPO, golden_file, run_cli, snapshot, tool
from forked_cli import cli_env
from lockguard.config import load_config
from lockguard.init import templates

NUMPY_LOCK = DATA / "numpy-1.26.4.txt"
PYPROJECT = '[project]\nname = "sample"\nversion = "0.1"\n\n[tool.ruff]\nline-length = 100  # kept\n'
MYMODEL = '''\
"""The team's own model: a numpy MLP with hand-written backprop and SGD."""
import numpy as np


def build(seed):
    rng = np.random.default_rng(seed)
    params = {"w1": (rng.standard_normal((16, 32)) * 0.3).astype(np.float32),
              "w2": (rng.standard_normal((32, 4)) * 0.3).astype(np.float32)}

    def predict(p, x):
        return np.tanh(x @ p["w1"]) @ p["w2"]

    def train_step(p, x, y):
        h = np.tanh(x @ p["w1"])
        logits = h @ p["w2"]
        z = np.exp(logits - logits.max(axis=1, keepdims=True))
        prob = z / z.sum(axis=1, keepdims=True)
        loss = -np.log(prob[np.arange(len(y)), y]).mean()
        d = prob.copy()
        d[np.arange(len(y)), y] -= 1
        d /= len(y)
        p["w2"] -= np.float32(0.1) * (h.T @ d).astype(np.float32)
        p["w1"] -= np.float32(0.1) * (x.T @ (d @ p["w2"].T * (1 - h ** 2))).astype(np.float32)
        return loss
    return params, train_step, predict
'''


def git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def sample_project(root: Path, *, pyproject: str | None = PYPROJECT) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    git(root, "init", "-q", "-b", "main")
    (root / "requirements.txt").write_bytes(NUMPY_LOCK.read_bytes())
    (root / "mymodel").mkdir()
    (root / "mymodel" / "__init__.py").write_text(MYMODEL)
    if pyproject is not None:
        (root / "pyproject.toml").write_text(pyproject)
    return root


def actionlint(workflow: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("actionlint"), "-oneline", "-no-color", "-shellcheck",
                           tool("shellcheck"), str(workflow)], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def on_a_terminal(args: list[str], cwd: Path, answers: str) -> subprocess.CompletedProcess:
    """`lockguard ARGS` with a terminal on stdin that answers `answers`, one line a question."""
    leader, follower = pty.openpty()
    env = cli_env()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "lockguard", *args], cwd=cwd, env=env,
                                stdin=follower, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        os.write(leader, answers.encode())
        out, err = proc.communicate(timeout=120)
    finally:
        os.close(follower)
        os.close(leader)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def one_line_refusal(proc: subprocess.CompletedProcess[str]) -> str:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("lockguard: error: "), proc.stderr
    return lines[0]


def without_git(files: dict[str, bytes]) -> dict[str, bytes]:
    return {k: v for k, v in files.items() if not k.startswith(".git/")}


# ------------------------------------------------------------------------------ the fast path

def test_init_yes_writes_a_loadable_config_and_a_workflow_actionlint_accepts(tmp_path):
    project = sample_project(tmp_path / "sample")
    proc = run_cli("init", "--yes", "--no-record", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "lock requirements.txt: numpy 1.26.4" in proc.stdout
    assert "your code: mymodel/" in proc.stdout

    # Appended: the project's own text is untouched, byte for byte.
    text = (project / "pyproject.toml").read_text()
    assert text.startswith(PYPROJECT + "\n[tool.lockguard]\n"), text
    config = load_config(project / "pyproject.toml")
    assert config.lock == "requirements.txt"
    assert config.scenarios == ["numpy.mlp"]
    assert config.scenario == {}  # no template without --scenario-template under --yes
    assert not (project / "golden").exists()  # --no-record
    assert not (project / templates.SCENARIO_PATH).exists()

    workflow = project / templates.WORKFLOW_PATH
    proc = actionlint(workflow, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    document = yaml.safe_load(workflow.read_text())
    steps = document["jobs"]["gate"]["steps"]
    assert steps[-1]["uses"] == templates.ACTION
    assert document[True]["push"]["branches"] == ["main"]  # YAML 1.1 reads `on` as true
    assert "working-directory" not in steps[-1]["with"]  # the project is the repository


def test_a_second_run_changes_nothing_and_says_so(tmp_path):
    project = sample_project(tmp_path / "sample")
    assert run_cli("init", "--yes", "--no-record", cwd=project).returncode == 0
    before = snapshot(project)
    # No --yes and no terminal: nothing is left to ask about, so nothing is refused either.
    proc = run_cli("init", "--no-record", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "already configured: pyproject.toml [tool.lockguard]" in proc.stdout
    assert "nothing to do" in proc.stdout
    assert snapshot(project) == before


def test_without_a_terminal_and_without_yes_nothing_is_written(tmp_path):
    project = sample_project(tmp_path / "sample")
    before = snapshot(project)
    line = one_line_refusal(run_cli("init", cwd=project))
    assert "not a terminal" in line and "--yes" in line
    assert snapshot(project) == before


def test_on_a_terminal_it_asks(tmp_path):
    project = sample_project(tmp_path / "sample")
    # The config: yes; the template: yes; record now: no; the workflow: yes.
    proc = on_a_terminal(["init"], project, "y\ny\nn\ny\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for question in ("Write the config (lock requirements.txt; scenarios numpy.mlp) to "
                     "[tool.lockguard] in pyproject.toml? [Y/n]",
                     "Also write scenarios/my_model.py", "[y/N]",
                     "Record the goldens of 1 scenario(s) now", "Write .github/workflows/lockguard.yml? [Y/n]"):
        assert question in proc.stdout, (question, proc.stdout)
    config = load_config(project / "pyproject.toml")
    assert config.scenario["my_model"].script == templates.SCENARIO_PATH
    assert (project / templates.SCENARIO_PATH).is_file()
    assert (project / templates.WORKFLOW_PATH).is_file()
    assert not (project / "golden").exists()


def test_declining_the_config_writes_nothing(tmp_path):
    project = sample_project(tmp_path / "sample")
    before = snapshot(project)
    proc = on_a_terminal(["init"], project, "n\n")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "nothing written" in proc.stderr
    assert snapshot(project) == before


def test_no_lock_is_refused_naming_what_was_looked_for(tmp_path):
    project = tmp_path / "empty"
    project.mkdir()
    (project / "uv.lock").write_text("version = 1\n")
    (project / "requirements.in").write_text("torch\n")
    (project / "requirements-dev.txt").write_text("pytest\n")  # a loose list, no lock
    before = snapshot(project)
    line = one_line_refusal(run_cli("init", "--yes", cwd=project))
    for fragment in ("no lock to guard", "requirements*.txt", "--generate-hashes",
                     "lockguard lock", "uv.lock: package: the lock pins no packages",
                     "requirements.in is not compiled",
                     "requirements-dev.txt: line 1: 'pytest' is not pinned"):
        assert fragment in line, (fragment, line)
    assert snapshot(project) == before


def test_an_unhashed_lock_is_not_taken(tmp_path):
    project = tmp_path / "p"
    project.mkdir()
    (project / "requirements.txt").write_text("numpy==1.26.4\n")
    line = one_line_refusal(run_cli("init", "--yes", cwd=project))
    assert "requirements.txt: line 1: numpy==1.26.4 has no --hash" in line, line


def test_unsupported_lock_formats_are_named_beside_the_lock_used(tmp_path):
    project = sample_project(tmp_path / "sample")
    (project / "pdm.lock").write_text("# pdm\n")
    proc = run_cli("init", "--yes", "--no-record", "--no-workflow", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert "not used: pdm.lock: not read (lockguard reads requirements" in proc.stdout
    assert "pdm export" in proc.stdout


@pytest.mark.parametrize("name", ["uv.lock", "poetry.lock", "pylock.toml"])
def test_the_toml_lock_formats_are_found_and_used(tmp_path, name):
    project = sample_project(tmp_path / "sample")
    (project / "requirements.txt").unlink()
    (project / "ml").mkdir()
    # numpy 2.2.6's locks allow Python 3.10 to 3.13, every Python the fast subset runs on.
    (project / "ml" / name).write_bytes((DATA / "locks" / "numpy-2.2.6" / name).read_bytes())
    proc = run_cli("init", "--yes", "--no-record", "--no-workflow", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert f"lock ml/{name}: numpy 2.2.6" in proc.stdout
    assert load_config(project / "pyproject.toml").lock == f"ml/{name}"


def test_without_pyproject_it_writes_lockguard_toml(tmp_path):
    project = sample_project(tmp_path / "sample", pyproject=None)
    proc = run_cli("init", "--yes", "--no-record", "--no-workflow", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert not (project / "pyproject.toml").exists()
    config = load_config(project / "lockguard.toml")
    assert config.lock == "requirements.txt" and config.scenarios == ["numpy.mlp"]


def test_lockguard_toml_when_asked_beside_a_pyproject(tmp_path):
    project = sample_project(tmp_path / "sample")
    proc = run_cli("init", "--yes", "--no-record", "--no-workflow",
                   "--config-file", "lockguard.toml", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert (project / "pyproject.toml").read_text() == PYPROJECT
    assert load_config(project / "lockguard.toml").lock == "requirements.txt"


def test_crlf_pyproject_keeps_its_line_endings(tmp_path):
    crlf = PYPROJECT.replace("\n", "\r\n").rstrip("\r\n")  # no newline at the end either
    project = sample_project(tmp_path / "sample", pyproject=crlf)
    assert run_cli("init", "--yes", "--no-record", "--no-workflow",
                   cwd=project).returncode == 0
    data = (project / "pyproject.toml").read_bytes()
    assert data.startswith(crlf.encode() + b"\r\n\r\n[tool.lockguard]\r\n")
    assert b"\n" not in data.replace(b"\r\n", b"")
    assert load_config(project / "pyproject.toml").scenarios == ["numpy.mlp"]


def test_a_pyproject_that_is_not_toml_is_refused_and_left_alone(tmp_path):
    project = sample_project(tmp_path / "sample", pyproject="[project\nname = 1\n")
    before = snapshot(project)
    line = one_line_refusal(run_cli("init", "--yes", "--no-record", cwd=project))
    assert "pyproject.toml" in line and "invalid TOML" in line
    assert snapshot(project) == before


@pytest.mark.parametrize("linked", ["pyproject.toml", ".github", ".github/workflows",
                                    "scenarios"])
def test_init_writes_nothing_through_a_link_out_of_the_project(tmp_path, linked):
    """H5/N07 (a linked pyproject.toml), N04 (.github), N05 (.github/workflows), N08
    (scenarios/ with the template): exit 2 in one line naming the link, before anything is
    written, and the outside folder untouched."""
    project = sample_project(tmp_path / "sample")
    outside = tmp_path / "outside"
    outside.mkdir()
    if linked == "pyproject.toml":
        (outside / "config.toml").write_text('[outside]\nkeep = "me"\n')
        (project / "pyproject.toml").unlink()
        (project / "pyproject.toml").symlink_to(outside / "config.toml")
    else:
        (project / linked).parent.mkdir(parents=True, exist_ok=True)
        (project / linked).symlink_to(outside)
    before, before_outside = snapshot(project), snapshot(outside)
    args = ["init", "--yes", "--no-record"] + (["--scenario-template"]
                                                if linked == "scenarios" else [])
    line = one_line_refusal(run_cli(*args, cwd=project))
    assert "through a symbolic link" in line and "init would write" in line, line
    assert snapshot(project) == before and snapshot(outside) == before_outside


def test_an_existing_config_is_left_as_it_is(tmp_path):
    mine = PYPROJECT + '\n[tool.lockguard]\nlock = "requirements.txt"\nscenarios = ["numpy"]\n'
    project = sample_project(tmp_path / "sample", pyproject=mine)
    proc = run_cli("init", "--yes", "--no-record", "--scenario-template", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert (project / "pyproject.toml").read_text() == mine
    assert "already configured" in proc.stdout
    # The template is written, and how to register it is said (the config is not touched).
    assert (project / templates.SCENARIO_PATH).is_file()
    assert "[tool.lockguard.scenario.my_model]" in proc.stdout
    assert (project / templates.WORKFLOW_PATH).is_file()


def test_a_project_in_a_subfolder_gets_the_workflow_at_the_repository_root(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "trunk")
    project = repo / "ml"
    project.mkdir()
    (project / "requirements.txt").write_bytes(NUMPY_LOCK.read_bytes())
    proc = run_cli("init", "--yes", "--no-record", "ml", cwd=repo)
    assert proc.returncode == 0, proc.stderr
    assert (project / "lockguard.toml").is_file()
    workflow = repo / templates.WORKFLOW_PATH
    assert not (project / ".github").exists()
    document = yaml.safe_load(workflow.read_text())
    assert document["jobs"]["gate"]["steps"][-1]["with"]["working-directory"] == "ml"
    assert document[True]["push"]["branches"] == ["trunk"]
    proc = actionlint(workflow, repo)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_workflow_that_already_runs_lockguard_is_respected(tmp_path):
    project = sample_project(tmp_path / "sample")
    workflows = project / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "gate.yml").write_text("jobs:\n  g:\n    steps:\n"
                                        "      - uses: acme/lockguard@v1\n")
    proc = run_cli("init", "--yes", "--no-record", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert not (project / templates.WORKFLOW_PATH).exists()
    assert "a workflow already runs lockguard: gate.yml" in proc.stdout


def test_the_action_can_be_named(tmp_path):
    project = sample_project(tmp_path / "sample")
    proc = run_cli("init", "--yes", "--no-record", "--action", "acme/lockguard@v2.1",
                   cwd=project)
    assert proc.returncode == 0, proc.stderr
    steps = yaml.safe_load((project / templates.WORKFLOW_PATH).read_text())["jobs"]["gate"][
        "steps"]
    assert steps[-1]["uses"] == "acme/lockguard@v2.1"
    assert "your-org" not in proc.stdout


def test_the_workflow_follows_the_action_and_the_example_gate():
    """One place to follow from: every input the workflow gives is one the action takes, and
    its triggers and permissions are the example gate's (lock-gate.yml)."""
    action = yaml.safe_load((REPO / "action.yml").read_text())
    example = yaml.safe_load((REPO / ".github" / "workflows" / "lock-gate.yml").read_text())
    ours = yaml.safe_load(templates.workflow(action=templates.ACTION, branch="main",
                                              python="3.11", working_directory="ml"))
    given = ours["jobs"]["gate"]["steps"][-1]["with"]
    assert set(given) <= set(action["inputs"]), set(given) - set(action["inputs"])
    assert ours[True] == example[True]
    assert ours["permissions"] == example["permissions"]
    assert re.fullmatch(r"[\w.-]+/[\w.-]+@[\w.-]+", templates.ACTION)


@pytest.mark.parametrize("framework", ["torch", "jax", "tensorflow", "numpy"])
def test_every_scenario_template_is_valid_python_that_imports_the_package(framework):
    text = templates.scenario_template(framework, "mymodel", src_layout=False)
    compile(text, "my_model.py", "exec")
    assert "\nimport mymodel  " in text and "def run(steps: int, seed: int)" in text
    assert "raise NotImplementedError" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    assert '"src"' in templates.scenario_template(framework, "mymodel", src_layout=True)
    unknown = templates.scenario_template(framework, None, src_layout=False)
    compile(unknown, "my_model.py", "exec")
    assert "# import your_package" in unknown


# ---------------------------------------------------------------------- real environments

@pytest.mark.slow
def test_init_yes_records_the_goldens_and_a_second_run_changes_nothing(tmp_path):
    project = sample_project(tmp_path / "sample")
    proc = run_cli("init", "--yes", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS record: 1 new" in proc.stdout
    assert golden_file(project, "numpy.mlp").is_file()
    assert load_config(project / "pyproject.toml").scenarios == ["numpy.mlp"]
    proc = actionlint(project / templates.WORKFLOW_PATH, project)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    before = snapshot(project)
    proc = run_cli("init", cwd=project)  # no terminal, no --yes: nothing left to ask
    assert proc.returncode == 0, proc.stderr
    assert "nothing to do" in proc.stdout
    assert without_git(snapshot(project)) == without_git(before)

    # The goldens are the gate's: a check on the same lock and machine passes from them.
    proc = run_cli("check", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.slow
def test_the_scenario_template_trains_the_teams_model_once_edited(tmp_path):
    project = sample_project(tmp_path / "sample")
    proc = run_cli("init", "--yes", "--no-record", "--no-workflow", "--scenario-template",
                   cwd=project)
    assert proc.returncode == 0, proc.stderr
    script = project / templates.SCENARIO_PATH
    config = load_config(project / "pyproject.toml")
    assert config.scenario["my_model"].script == templates.SCENARIO_PATH
    assert config.scenario["my_model"].framework == "numpy"
    assert "my_model" not in config.scenarios  # selected once it trains the team's model

    # As written it says what to do, from inside the lock's environment.
    proc = run_cli("record", "--scenario", "my_model", cwd=project)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "NotImplementedError" in proc.stdout and "build_model() must return" in proc.stdout

    text = script.read_text()
    edited = re.sub(r"^    raise NotImplementedError\(.*\)$", "    return mymodel.build(seed)",
                    text, count=1, flags=re.M)
    assert edited != text
    script.write_text(edited)
    proc = run_cli("record", "--scenario", "my_model", cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert golden_file(project, "my_model").is_file()


def test_init_says_what_a_lock_pr_will_cost_and_what_keeps_within_the_budget():
    """From what record measured: the A/B's seconds here and, over the budget, a selection
    within it that always keeps the user's own scenarios."""
    from lockguard.init import cost_lines
    from lockguard.report import Evidence, Report, Side
    from lockguard.results import SCHEMA_VERSION, RunResult, Status, Timings

    def side(sid: str, seconds: float) -> Evidence:
        result = RunResult(schema_version=SCHEMA_VERSION, scenario=sid, framework="torch",
                           steps=2, seed=0, status=Status.ok,
                           timings=Timings(total_s=seconds))
        return Evidence(scenario=sid, candidate=Side(role="candidate", kind="lock",
                                                     name="lock.txt", result=result))

    report = Report(command="record", mode="record", passed=True, evidence=[
        side("torch.mlp", 6), side("torch.lm.compile", 90), side("mine", 30)])
    within = cost_lines(report, 1000, 2, {"mine"})
    assert within == ["a lock pull request's A/B here: about 126 s (3 scenarios, both sides, "
                      "2 at a time; record measured torch.lm.compile 90 s, mine 30 s, "
                      "torch.mlp 6 s)"]
    # With its eager twin measured, a PR that moves only numpy leaves the compiled run out.
    twin = report.model_copy(update={"evidence": [*report.evidence, side("torch.lm", 10)]})
    assert cost_lines(twin, 1000, 2, {"mine"})[1] == (
        "one that moves only numpy (or another package no compiler or parallel path imports): "
        "about 46 s, leaving out torch.lm.compile")
    over = cost_lines(report, 60, 2, {"mine"})
    assert over[1] == ("over the 60 s budget: `scenarios = ['mine', 'torch.mlp']` keeps a lock "
                       "PR to about 36 s here; run the others (torch.lm.compile) on a schedule "
                       "(`lockguard check --scenario ...`)")
