"""The GitHub workflows and the composite action pass actionlint (with shellcheck on every
`run:` script), and no script interpolates an expression (`${{ … }}`) into a shell line: values
from outside (branch names, titles) reach scripts only through `env:`.

actionlint checks workflow files, not action metadata; the action's steps are checked by
wrapping them into a reusable workflow whose inputs are the action's inputs.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import REPO, tool

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTION = REPO / "action.yml"


def actionlint(*files: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("actionlint"), "-oneline", "-no-color",
                           "-shellcheck", tool("shellcheck"), *map(str, files)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def scripts(document: dict) -> list[tuple[str, str]]:
    """(where, script) of every `run:` in a workflow or a composite action."""
    found = []
    for job_id, job in (document.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            if "run" in step:
                found.append((f"jobs.{job_id}.steps[{i}]", step["run"]))
    for i, step in enumerate((document.get("runs") or {}).get("steps") or []):
        if "run" in step:
            found.append((f"runs.steps[{i}]", step["run"]))
    return found


def interpolations(path: Path) -> list[str]:
    """Scripts that splice an expression into the shell line, e.g. `--base ${{ … }}`."""
    document = yaml.safe_load(path.read_text())
    return [where for where, script in scripts(document) if "${{" in script]


def action_as_workflow(action: dict) -> dict:
    """The composite action's steps as a reusable workflow, with its inputs and outputs, so
    that actionlint checks their expressions, step references and scripts."""
    inputs = {name: {"type": "string", "required": False, "default": str(spec.get("default", ""))}
              for name, spec in (action.get("inputs") or {}).items()}
    outputs = {name: spec["value"] for name, spec in (action.get("outputs") or {}).items()}
    return {
        "name": f"action {action['name']}",
        "on": {"workflow_call": {
            "inputs": inputs,
            "outputs": {name: {"value": f"${{{{ jobs.action.outputs.{name} }}}}"}
                        for name in outputs},
        }},
        "permissions": {"contents": "read"},
        "jobs": {"action": {"runs-on": "ubuntu-latest", "outputs": outputs,
                            "steps": action["runs"]["steps"]}},
    }


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_workflow_passes_actionlint(workflow: Path) -> None:
    proc = actionlint(workflow)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert interpolations(workflow) == []


def test_action_steps_pass_actionlint(tmp_path: Path) -> None:
    action = yaml.safe_load(ACTION.read_text())
    assert action["runs"]["using"] == "composite"
    assert {"base-ref", "scenarios", "report-dir", "python-version"} <= set(action["inputs"])
    assert {"exit-code", "json-report", "markdown-report", "junit-report"} <= set(
        action["outputs"])
    assert interpolations(ACTION) == []
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    wrapped = workflows / "action.yml"
    wrapped.write_text(yaml.safe_dump(action_as_workflow(action), sort_keys=False))
    proc = actionlint(wrapped, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_action_is_usable_from_a_workflow(tmp_path: Path) -> None:
    """A workflow that says `uses: ./` (this repository) with the documented inputs: actionlint
    reads action.yml as the action's metadata and checks the inputs against it."""
    shutil.copy(ACTION, tmp_path / "action.yml")
    (tmp_path / ".git").mkdir()  # where actionlint finds the repository root, and so `./`
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    (workflows / "gate.yml").write_text("""\
name: gate
on: [pull_request]
permissions: {contents: read}
jobs:
  gate:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v5
      - id: lockguard
        uses: ./
        with:
          scenarios: torch jax.mlp
          python-version: "3.11"
          fail: "false"
      - env:
          CODE: ${{ steps.lockguard.outputs.exit-code }}
        run: echo "lockguard exited $CODE"
""")
    proc = actionlint(workflows / "gate.yml", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # An input the action does not have is caught: the metadata really was read.
    (workflows / "gate.yml").write_text(
        (workflows / "gate.yml").read_text().replace("fail: \"false\"", "no-such-input: x"))
    proc = actionlint(workflows / "gate.yml", cwd=tmp_path)
    assert proc.returncode == 1 and 'input "no-such-input" is not defined' in proc.stdout


def test_a_broken_workflow_fails(tmp_path: Path) -> None:
    """The old example's mistakes: a branch name spliced into the shell line, a step output
    that does not exist, an unquoted variable."""
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    broken = workflows / "broken.yml"
    broken.write_text("""\
name: broken
on: [pull_request]
jobs:
  gate:
    runs-on: ubuntu-latest
    steps:
      - run: lockguard check --base "origin/${{ github.head_ref }}"
      - run: cat ${{ steps.gate.outputs.report }} >> $GITHUB_STEP_SUMMARY
""")
    proc = actionlint(broken, cwd=tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "potentially untrusted" in proc.stdout  # the injection
    assert 'property "gate" is not defined' in proc.stdout  # no such step
    assert "SC2086" in proc.stdout  # shellcheck ran on the script
    assert interpolations(broken) == ["jobs.gate.steps[0]", "jobs.gate.steps[1]"]


def test_the_plans_github_matrix_drives_the_sharded_workflow(tmp_path: Path) -> None:
    """`lockguard plan --format github-matrix` put where the sharded workflow reads it
    (`strategy.matrix: ${{ fromJSON(needs.plan.outputs.matrix) }}`): actionlint then checks every
    `matrix.*` the jobs use against the entries, and `runs-on` against their runner labels."""
    from conftest import TORCH_LOCK, make_project, run_cli

    project = make_project(tmp_path / "p", """
        lock = "requirements.txt"
        scenarios = ["torch.mlp", "torch.lm", "probe"]
        [runners]
        cuda = ["self-hosted", "gpu"]
        [scenario.probe]
        script = "probe.py"
        framework = "numpy"
        device = "cuda"
    """, files={"probe.py": "pass\n"}, locks={"requirements.txt": TORCH_LOCK})
    proc = run_cli("plan", "--shards", "3", "--format", "github-matrix", cwd=project)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("\n") == 1  # one line, as $GITHUB_OUTPUT takes it
    matrix = json.loads(proc.stdout)
    assert sorted(map(str, (e["runner"] for e in matrix["include"]))) == \
        ["['self-hosted', 'gpu']", "ubuntu-latest", "ubuntu-latest"]

    sharded = REPO / ".github" / "workflows" / "lock-gate-sharded.yml"
    document = yaml.safe_load(sharded.read_text())
    shard = document["jobs"]["shard"]
    assert shard["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert shard["runs-on"] == "${{ matrix.runner }}"
    workflows = tmp_path / ".github" / "workflows"
    workflows.mkdir(parents=True)
    inlined = workflows / "sharded.yml"

    def lint(entries: list[dict]) -> subprocess.CompletedProcess[str]:
        shard["strategy"]["matrix"] = {"include": entries}
        # yaml.safe_dump writes `on:` as the key true; actionlint wants the word.
        inlined.write_text(yaml.safe_dump(document, sort_keys=False).replace("\ntrue:", "\non:"))
        return actionlint(inlined, cwd=tmp_path)

    result = lint(matrix["include"])
    assert result.returncode == 0, result.stdout + result.stderr
    # The check has teeth: an entry without a key the jobs read is caught.
    result = lint([{k: v for k, v in e.items() if k != "lock_hash"} for e in matrix["include"]])
    assert result.returncode == 1 and 'property "lock_hash" is not defined' in result.stdout
