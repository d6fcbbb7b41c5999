"""lockguard in CI: the composite action, the example workflows, the GitLab CI template and the
pre-commit hook.

Linted: the workflows and the action pass actionlint (with shellcheck on every `run:` script)
and the schemas check-jsonschema ships (GitHub's action and workflow schemas, GitLab CI's), the
GitLab job's script passes shellcheck, the hook manifest pre-commit's own schema; and no script
interpolates an expression (`${{ … }}`) into a shell line or a github-script: values from
outside (branch names, titles) reach scripts only through `env:`. actionlint checks workflow
files, not action metadata; the action's steps are checked by wrapping them into a reusable
workflow whose inputs are the action's inputs.

Run: the action's own scripts, taken from action.yml, run as the runner runs them (bash -eo
pipefail, $GITHUB_OUTPUT, $GITHUB_STEP_SUMMARY) with the real lockguard in a real git repository
whose project sits in ml/: the pull request that changes no lock, the one whose lock breaks a
family rule (annotated at ml/requirements.txt), the merge of shard parts, exit 2. The comment
script runs under Node.js, as actions/github-script runs it, against a stand-in for GitHub's
REST client that records the calls (GitHub cannot be reached from a test). The GitLab job's
script runs the same way, its merge request note against a local HTTP server answering as
GitLab's notes API; the hook's command in a repository with a staged lock.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from conftest import DATA, REPO, TORCH_LOCK, tool, unavailable

WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
ACTION = REPO / "action.yml"
GITLAB = REPO / "ci" / "gitlab" / "lockguard.gitlab-ci.yml"
HOOKS = REPO / ".pre-commit-hooks.yaml"


def actionlint(*files: Path, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("actionlint"), "-oneline", "-no-color",
                           "-shellcheck", tool("shellcheck"), *map(str, files)],
                          cwd=cwd, capture_output=True, text=True, timeout=120)


def _script(step: dict) -> str | None:
    """A step's script: its `run:`, or the JavaScript of an actions/github-script step."""
    if "run" in step:
        return step["run"]
    if str(step.get("uses", "")).startswith("actions/github-script@"):
        return (step.get("with") or {}).get("script")
    return None


def scripts(document: dict) -> list[tuple[str, str]]:
    """(where, script) of every `run:` (and github-script) in a workflow or a composite action."""
    found = []
    for job_id, job in (document.get("jobs") or {}).items():
        for i, step in enumerate(job.get("steps") or []):
            if _script(step) is not None:
                found.append((f"jobs.{job_id}.steps[{i}]", _script(step)))
    for i, step in enumerate((document.get("runs") or {}).get("steps") or []):
        if _script(step) is not None:
            found.append((f"runs.steps[{i}]", _script(step)))
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
    assert {"working-directory", "base-ref", "scenarios", "report-dir", "formats", "comment",
            "merge-parts", "fail", "python-version", "extras"} <= set(action["inputs"])
    assert {"exit-code", "passed", "failing", "json-report", "markdown-report", "html-report",
            "junit-report", "evidence-dir", "artifact-name", "comment-url"} <= set(
        action["outputs"])
    assert interpolations(ACTION) == []
    # The comment's JavaScript is among the scripts that must not interpolate.
    assert any("github.paginate" in script for _, script in scripts(action))
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
          working-directory: ml
          scenarios: torch jax.mlp
          formats: html junit text
          comment: "false"
          python-version: "3.11"
          fail: "false"
      - env:
          CODE: ${{ steps.lockguard.outputs.exit-code }}
          DRIFT: ${{ steps.lockguard.outputs.drift }}
          EVIDENCE: ${{ steps.lockguard.outputs.artifact-url }}
        run: echo "lockguard exited $CODE, $DRIFT drifted; evidence at $EVIDENCE"
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


def test_the_files_pass_the_schemas_check_jsonschema_ships(tmp_path: Path) -> None:
    """GitHub's action and workflow schemas and GitLab CI's, as SchemaStore publishes them
    (vendored in check-jsonschema: nothing is downloaded)."""
    def validate(schema: str, *files: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([tool("check-jsonschema"), "--builtin-schema", schema,
                               *map(str, files)], capture_output=True, text=True, timeout=120)

    # The schema takes anything under a hidden key: the template's job is checked as the
    # visible job a project's `extends: .lockguard` makes of it.
    job = tmp_path / "job.gitlab-ci.yml"
    job.write_text(GITLAB.read_text().replace("\n.lockguard:\n", "\nlockguard:\n"))
    assert job.read_text() != GITLAB.read_text()
    for schema, files in (("vendor.github-actions", [ACTION]),
                          ("vendor.github-workflows", WORKFLOWS),
                          ("vendor.gitlab-ci", [job])):
        proc = validate(schema, *files)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    # With teeth: a misspelt keyword fails each schema.
    broken = tmp_path / "broken.yml"
    broken.write_text(job.read_text().replace("  artifacts:\n", "  artefacts:\n"))
    assert validate("vendor.gitlab-ci", broken).returncode == 1
    broken.write_text(ACTION.read_text().replace("\n  using: composite", "\n  using: compost"))
    assert validate("vendor.github-actions", broken).returncode == 1


# ---------------------------------------------------------------------------------------------
# The action's scripts, run as the runner runs them
# ---------------------------------------------------------------------------------------------

BASH = ["bash", "--noprofile", "--norc", "-eo", "pipefail"]  # the runner's `shell: bash`
VENV_BIN = Path(sys.executable).parent  # lockguard, python and python3, as setup-python's
TORCHVISION = "torchvision==0.20.0 \\\n    --hash=sha256:" + "b" * 64 + "\n"


def action_step(step_id: str) -> dict:
    action = yaml.safe_load(ACTION.read_text())
    return next(s for s in action["runs"]["steps"] if s.get("id") == step_id)


def git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(["git", "-c", "user.email=ci@example.com", "-c", "user.name=ci",
                           *args], cwd=cwd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def monorepo(root: Path, change: dict[str, str]) -> Path:
    """A repository whose lockguard project is ml/ (the torch lock), pushed to `origin` as main,
    with a branch `pr` that writes `change` ({path: text}) on top: a pull request's checkout."""
    repo = root / "repo"
    (repo / "ml").mkdir(parents=True)
    shutil.copy(TORCH_LOCK, repo / "ml" / "requirements.txt")
    (repo / "ml" / "pyproject.toml").write_text(
        "[project]\nname = 'ml'\nversion = '0'\n\n[tool.lockguard]\nlock = 'requirements.txt'\n")
    git("init", "-q", "-b", "main", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "base", cwd=repo)
    git("clone", "-q", "--bare", str(repo), str(root / "origin.git"), cwd=root)
    git("remote", "add", "origin", str(root / "origin.git"), cwd=repo)
    git("fetch", "-q", "origin", cwd=repo)
    git("checkout", "-q", "-b", "pr", cwd=repo)
    for path, text in change.items():
        (repo / path).write_text(text)
    if change:
        git("add", ".", cwd=repo)
        git("commit", "-q", "-m", "the pull request", cwd=repo)
    return repo


def run_script(script: str, env: dict[str, str], cwd: Path, tmp: Path,
               shell: list[str] = BASH) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """`script` as a runner runs a step: its env, $GITHUB_OUTPUT read back as a dict."""
    file, output = tmp / "step.sh", tmp / "github-output"
    file.write_text(script)
    output.write_text("")
    full = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    full.update({"PATH": f"{VENV_BIN}{os.pathsep}{os.environ['PATH']}",
                 "GITHUB_OUTPUT": str(output), **env})
    proc = subprocess.run([*shell, str(file)], cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=600)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return proc, outputs


def run_gate(repo: Path, tmp: Path, **inputs: str) -> tuple[subprocess.CompletedProcess[str],
                                                             dict[str, str]]:
    """The action's `lockguard` step on a pull request into main, in ml/, under GitHub
    Actions; `inputs` override the step's env (all of which must be given here)."""
    step = action_step("gate")
    env = {"BASE_REF": "", "PR_BASE": "main", "QUEUE_BASE": "", "SCENARIOS": "", "ARGS": "",
           "MERGE_PARTS": "", "REPORT_DIR": "lockguard-report", "FORMATS": "html junit",
           "LOCKGUARD_SANDBOX": step["env"]["LOCKGUARD_SANDBOX"]}
    assert set(step["env"]) == set(env), "the test must set every variable the step reads"
    env.update(inputs)
    summary = tmp / "summary.md"
    env.update({"GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(repo),
                "GITHUB_STEP_SUMMARY": str(summary), "LOCKGUARD_CACHE": str(tmp / "cache")})
    assert step["working-directory"] == "${{ inputs.working-directory }}"
    return run_script(step["run"], env, repo / "ml", tmp)


def test_the_action_passes_a_pull_request_that_changes_no_lock_at_once(tmp_path: Path) -> None:
    """No `paths:` filter is needed: lockguard answers from git alone, in well under a second
    of its own time, and says so in the outputs (nothing compared, so no new comment)."""
    repo = monorepo(tmp_path, {"ml/train.py": "print('a change that is not a lock')\n"})
    started = time.monotonic()
    proc, out = run_gate(repo, tmp_path)
    wall = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert out["exit-code"] == "0" and out["passed"] == "true"
    assert (out["compared"], out["failing"], out["drift"], out["rule-failures"]) == ("0",) * 4
    report = json.loads(Path(out["json-report"]).read_text())
    # lockguard's own time, against what one git command on this repository costs on this
    # machine now (a loaded runner is slow at both): git alone answers, a few commands and
    # their parsing (about 1 s on an idle machine would be 40 commands' worth).
    one_git = min(git_command_s(repo) for _ in range(5))
    assert report["duration_s"] < 40 * one_git + 0.3, (report["duration_s"], one_git)
    assert any(n.startswith("no lock changed since origin/main") for n in report["notes"])
    assert Path(out["report-dir"]) == repo / "ml" / "lockguard-report"
    for name in ("markdown-report", "html-report", "junit-report"):
        assert Path(out[name]).is_file(), name
    assert "text-report" not in out  # not asked for
    assert "PASS check" in proc.stdout and (tmp_path / "summary.md").is_file()
    print(f"no-lock pull request: lockguard {report['duration_s']:.2f} s, step {wall:.2f} s, "
          f"one git command {one_git * 1000:.0f} ms")


def git_command_s(repo: Path) -> float:
    """The wall-clock seconds of one cheap git command in `repo`."""
    began = time.perf_counter()
    subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True)
    return time.perf_counter() - began


def test_the_action_annotates_from_the_repository_root_and_counts(tmp_path: Path) -> None:
    """A lock in ml/ that breaks the torchvision family rule (found before anything is built):
    annotations name ml/requirements.txt, the outputs count, every report and the evidence are
    written, and the JSON re-rendered from another directory still annotates ml/."""
    lock = TORCH_LOCK.read_text() + TORCHVISION
    repo = monorepo(tmp_path, {"ml/requirements.txt": lock})
    proc, out = run_gate(repo, tmp_path, FORMATS="html junit text")
    assert proc.returncode == 0, proc.stderr  # the step records the code; Verdict fails the job
    assert out["exit-code"] == "1" and out["passed"] == "false"
    assert int(out["rule-failures"]) >= 1 and out["compared"] == "0"
    vision = next(i for i, ln in enumerate(lock.splitlines(), 1) if ln.startswith("torchvision"))
    assert f"::error file=ml/requirements.txt,line={vision}," in proc.stdout
    assert "file=requirements.txt" not in proc.stdout
    for name in ("json-report", "markdown-report", "html-report", "junit-report", "text-report"):
        assert Path(out[name]).stat().st_size > 0, name
    assert (Path(out["evidence-dir"]) / "report.json").is_file()  # what accept --from reads
    assert "torchvision-matches-torch" in (tmp_path / "summary.md").read_text()
    assert json.loads(Path(out["json-report"]).read_text())["workdir"] == "ml"

    rerendered = subprocess.run(
        [str(VENV_BIN / "lockguard"), "report", out["json-report"], "--format", "github"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert rerendered.returncode == 1
    assert f"::error file=ml/requirements.txt,line={vision}," in rerendered.stdout

    # A second run that cannot check (exit 2) leaves no report of the first behind.
    proc, out = run_gate(repo, tmp_path, ARGS="--repeat 0")
    assert out["exit-code"] == "2" and "passed" not in out
    assert not Path(out["json-report"]).exists() and not Path(out["evidence-dir"]).exists()


def test_the_action_merges_the_parts_of_a_sharded_check(tmp_path: Path) -> None:
    repo = monorepo(tmp_path, {"ml/README.md": "docs only\n"})
    parts = repo / "ml" / "parts"
    parts.mkdir()
    for k in (1, 2):
        proc = subprocess.run([str(VENV_BIN / "lockguard"), "check", "--base", "origin/main",
                               "--shard", f"{k}/2", "--format", "json", "-o",
                               str(parts / f"part-{k}.json")],
                              cwd=repo / "ml", capture_output=True, text=True, timeout=120,
                              env={**os.environ, "LOCKGUARD_CACHE": str(tmp_path / "cache")})
        assert proc.returncode == 0, proc.stderr
    proc, out = run_gate(repo, tmp_path, MERGE_PARTS="parts/*.json", PR_BASE="")
    assert proc.returncode == 0, proc.stderr
    assert (out["exit-code"], out["passed"]) == ("0", "true")
    assert out["evidence-dir"] == out["json-report"]  # the joined report carries the evidence
    # A part missing is never a pass.
    (parts / "part-2.json").unlink()
    proc, out = run_gate(repo, tmp_path, MERGE_PARTS="parts/*.json", PR_BASE="")
    assert out["exit-code"] == "2" and "shard 2/2 missing" in proc.stderr


def test_the_action_refuses_an_unknown_format_before_running(tmp_path: Path) -> None:
    proc, out = run_gate(monorepo(tmp_path, {"ml/x.txt": "x\n"}), tmp_path, FORMATS="pdf")
    assert out["exit-code"] == "2"
    assert "::error title=lockguard::formats: unknown format 'pdf'" in proc.stdout


def test_the_action_installs_its_own_revision_with_the_extras(tmp_path: Path) -> None:
    """The install step's command line, read off a `python` that records it."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$RECORD"\n')
    (fake / "python").chmod(0o755)
    step = next(s for s in yaml.safe_load(ACTION.read_text())["runs"]["steps"]
                if s.get("name", "").startswith("Install lockguard"))
    assert set(step["env"]) == {"ACTION_PATH", "EXTRAS"}
    for extras, target in (("", "/actions/lockguard"), ("docker", "/actions/lockguard[docker]"),
                           ("docker, x", "/actions/lockguard[docker,x]")):
        record = tmp_path / "argv"
        proc, _ = run_script(step["run"], {"ACTION_PATH": "/actions/lockguard", "EXTRAS": extras,
                                           "RECORD": str(record),
                                           "PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"},
                             tmp_path, tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert record.read_text().splitlines()[-1] == target


def test_the_verdict_step_fails_the_job_as_lockguard_exited(tmp_path: Path) -> None:
    step = next(s for s in yaml.safe_load(ACTION.read_text())["runs"]["steps"]
                if s.get("name") == "Verdict")
    for code, expected in (("0", 0), ("1", 1), ("2", 2), ("", 2)):
        proc, _ = run_script(step["run"], {"CODE": code}, tmp_path, tmp_path)
        assert proc.returncode == expected
    assert "lockguard did not run" in proc.stdout


def test_every_output_is_one_the_steps_write() -> None:
    """The action's outputs read step outputs that exist: the gate's own, step_outputs' (a
    count for every verdict), upload-artifact's and the comment's."""
    from lockguard.names import Verdict
    from lockguard.report import Report
    from lockguard.report.github import step_outputs

    action = yaml.safe_load(ACTION.read_text())
    counted = {line.split("=")[0] for line in step_outputs(Report(command="check",
                                                                    mode="ab")).splitlines()}
    assert {v.value.replace("_", "-") for v in Verdict} <= counted
    written = counted | {"exit-code", "report-dir", "json-report", "markdown-report",
                         "evidence-dir", "html-report", "junit-report", "text-report"}
    for name, spec in action["outputs"].items():
        refs = re.findall(r"steps\.(\w+)\.outputs\.([\w-]+)", spec["value"])
        assert refs, name
        for step_id, key in refs:
            allowed = {"gate": written, "upload": {"artifact-id", "artifact-url"},
                       "comment": {"comment-url"}}[step_id]
            assert key in allowed, (name, step_id, key)
    assert counted <= set(action["outputs"])  # and every count is exposed


def test_step_outputs_count_the_verdicts() -> None:
    from lockguard.compare.verdicts import ScenarioVerdict
    from lockguard.names import Verdict
    from lockguard.report import Report
    from lockguard.report.github import step_outputs

    kinds = [Verdict.drift, Verdict.drift, Verdict.identical, Verdict.within_tolerance,
             Verdict.skipped]
    report = Report(command="check", mode="ab", passed=False, failing=["s0", "s1"],
                    verdicts=[ScenarioVerdict(scenario=f"s{i}", framework="numpy", verdict=v)
                              for i, v in enumerate(kinds)])
    out = dict(line.split("=", 1) for line in step_outputs(report).splitlines())
    assert (out["passed"], out["failing"], out["compared"], out["rule-failures"]) == \
        ("false", "2", "4", "0")
    assert (out["drift"], out["identical"], out["within-tolerance"], out["skipped"],
            out["broken"]) == ("2", "1", "1", "1", "0")


# ---------------------------------------------------------------------------------------------
# The pull-request comment: the action's github-script, run by Node.js
# ---------------------------------------------------------------------------------------------

# What actions/github-script gives a script (github, context, core, require), with a GitHub that
# answers from the scenario and records every call.
GITHUB_SCRIPT = r"""
const fs = require("fs");
const [script, scenario] = process.argv.slice(2).map((p) => fs.readFileSync(p, "utf8"));
const s = JSON.parse(scenario);
const calls = [];
const fail = (what) => {
  if (s.fail === what) throw Object.assign(new Error("Resource not accessible by integration"),
                                           { status: 403 });
};
const github = {
  paginate: async (method, args) => { calls.push(["list", args]); fail("list"); return s.comments; },
  rest: { issues: {
    listComments: "listComments",
    updateComment: async (args) => { calls.push(["update", args]); fail("write");
                                     return { data: { html_url: `url/${args.comment_id}` } }; },
    createComment: async (args) => { calls.push(["create", args]); fail("write");
                                     return { data: { html_url: "url/new" } }; },
  } },
};
const core = {};
for (const level of ["notice", "info", "warning"]) core[level] = (m) => calls.push([level, m]);
core.setOutput = (k, v) => calls.push(["output", k, v]);
const context = { payload: s.payload, repo: { owner: "o", repo: "r" }, runId: 42 };
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
new AsyncFunction("require", "github", "context", "core", script)(require, github, context, core)
  .then(() => console.log(JSON.stringify(calls)),
        (e) => { console.error(e); process.exit(1); });
"""


def node() -> str:
    path = shutil.which("node") or shutil.which("nodejs")
    if path is None:
        unavailable("Node.js", "no node on PATH (apt-get install nodejs, as .ci/run does)")
    return path


def comment(tmp: Path, *, report: str | None = "❌ lockguard: 1 of 3 scenarios drifted\n",
            comments: list[dict] | None = None, fork: bool = False, fail: str | None = None,
            **env: str) -> list[list]:
    """The comment step's script on a pull request: the calls it made."""
    step = action_step("comment")
    assert step["uses"].startswith("actions/github-script@")
    values = {"REPORT": "", "CODE": "1", "PASSED": "false", "COMPARED": "3", "KEY": "ml",
              "ARTIFACT_URL": "https://example.com/artifact/7", "ARTIFACT_NAME": "lockguard-report",
              "RUN_URL": "https://example.com/run/42"}
    assert set(step["env"]) == set(values), "the test must set every variable the step reads"
    if report is not None:
        (tmp / "report.md").write_text(report)
        values["REPORT"] = str(tmp / "report.md")
    values.update(env)
    repository = {"full_name": "o/r"}
    scenario = {"payload": {"repository": repository, "pull_request": {
        "number": 5, "head": {"repo": {"full_name": "fork/r" if fork else "o/r"}}}},
        "comments": comments or [], "fail": fail}
    (tmp / "script.js").write_text(step["with"]["script"])
    (tmp / "scenario.json").write_text(json.dumps(scenario))
    (tmp / "harness.cjs").write_text(GITHUB_SCRIPT)
    proc = subprocess.run([node(), str(tmp / "harness.cjs"), str(tmp / "script.js"),
                           str(tmp / "scenario.json")], env={**os.environ, **values},
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_comment_is_created_once_then_updated_in_place(tmp_path: Path) -> None:
    calls = comment(tmp_path)
    [(kind, args)] = [c for c in calls if c[0] in ("create", "update")]
    assert kind == "create" and args["issue_number"] == 5
    body = args["body"]
    assert body.startswith("❌ lockguard: 1 of 3 scenarios drifted\n")
    assert "https://example.com/artifact/7" in body and "https://example.com/run/42" in body
    assert "gh run download 42 -n lockguard-report" in body and "accept --from" in body
    assert body.endswith("<!-- lockguard-comment: ml -->\n")
    assert ["output", "comment-url", "url/new"] in calls

    # The next run finds it by its marker, among the bot's comments only.
    theirs = {"id": 1, "user": {"type": "User"}, "body": "quoting " + body}
    mine = {"id": 2, "user": {"type": "Bot"}, "body": body}
    other = {"id": 3, "user": {"type": "Bot"}, "body": "<!-- lockguard-comment: vision -->"}
    calls = comment(tmp_path, comments=[theirs, other, mine], report="✅ lockguard: passed\n")
    [(kind, args)] = [c for c in calls if c[0] in ("create", "update")]
    assert kind == "update" and args["comment_id"] == 2
    assert args["body"].startswith("✅ lockguard: passed\n")


def test_no_new_comment_when_no_lock_changed_but_an_old_one_is_updated(tmp_path: Path) -> None:
    quiet = {"PASSED": "true", "COMPARED": "0", "CODE": "0"}
    calls = comment(tmp_path, **quiet)
    assert not [c for c in calls if c[0] in ("create", "update")]
    assert ["info", "lockguard: no lock changed: no comment"] in calls
    # A pull request whose lock change was reverted: its comment must not keep saying "drift".
    earlier = {"id": 9, "user": {"type": "Bot"}, "body": "x\n<!-- lockguard-comment: ml -->\n"}
    calls = comment(tmp_path, comments=[earlier], **quiet)
    assert [c[0] for c in calls if c[0] in ("create", "update")] == ["update"]


def test_a_check_that_could_not_run_says_so_in_the_comment(tmp_path: Path) -> None:
    calls = comment(tmp_path, report=None, CODE="2", PASSED="", COMPARED="", ARTIFACT_URL="")
    [(_, args)] = [c for c in calls if c[0] == "create"]
    assert args["body"].startswith("⚠️ lockguard could not check this pull request (exit code 2)")
    assert "artifact" not in args["body"]


def test_forks_and_read_only_tokens_get_no_comment_and_no_failure(tmp_path: Path) -> None:
    calls = comment(tmp_path, fork=True)
    assert [c[0] for c in calls] == ["notice"] and "fork" in calls[0][1]
    calls = comment(tmp_path, fail="write")  # Dependabot, or no `pull-requests: write`
    warning = next(c[1] for c in calls if c[0] == "warning")
    assert "403" in warning and "pull-requests: write" in warning
    calls = comment(tmp_path, fail="list")
    assert calls[-1][0] == "warning" and not [c for c in calls if c[0] == "create"]


# ---------------------------------------------------------------------------------------------
# The GitLab CI template
# ---------------------------------------------------------------------------------------------

def gitlab_job() -> dict:
    return yaml.safe_load(GITLAB.read_text())[".lockguard"]


def gitlab_script() -> str:
    """The job's script as the runner runs it: its lines, one shell, in order."""
    return "\n".join(gitlab_job()["script"]) + "\n"


def test_the_gitlab_script_passes_shellcheck(tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(gitlab_script())
    proc = subprocess.run([tool("shellcheck"), "--shell=bash", str(script)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "${{" not in script.read_text()


def run_gitlab_job(repo: Path, tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """The job's script on a merge request into main, with the template's variables; lockguard
    is this test's own (already installed: `pip install lockguard` finds it satisfied)."""
    variables = {k: str(v) for k, v in gitlab_job()["variables"].items()}
    variables.update({"LOCKGUARD": "lockguard", "LG_PROJECT_DIR": "ml",
                      "LOCKGUARD_CACHE": str(tmp / "cache"), "CI_PROJECT_DIR": str(repo),
                      "CI_MERGE_REQUEST_TARGET_BRANCH_NAME": "main", "PIP_NO_INDEX": "1"})
    variables.update(env)
    proc, _ = run_script(gitlab_script(), variables, repo, tmp)
    return proc


# The whole job, several times (bash, pip, git, lockguard's check): CI glue, left out of the
# developer's loop (the fast subset) as the pre-commit test is.
@pytest.mark.slow
def test_the_gitlab_job_checks_a_merge_request(tmp_path: Path) -> None:
    """A lock that breaks a family rule fails the job with 1 and leaves the artefacts GitLab
    collects (junit for the test widget); one that changes no lock passes at once."""
    lock = TORCH_LOCK.read_text() + TORCHVISION
    repo = monorepo(tmp_path, {"ml/requirements.txt": lock})
    proc = run_gitlab_job(repo, tmp_path)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    job = gitlab_job()
    for path in (job["artifacts"]["reports"]["junit"], *job["artifacts"]["paths"]):
        assert (repo / path.replace("$LG_PROJECT_DIR", "ml").replace(
            "$LG_REPORT_DIR", "lockguard-report")).exists(), path
    reports = repo / "ml" / "lockguard-report"
    assert {"report.json", "report.md", "report.html", "junit.xml", "evidence"} <= {
        p.name for p in reports.iterdir()}
    assert "torchvision-matches-torch" in (reports / "junit.xml").read_text()

    git("checkout", "-q", "main", cwd=repo)
    git("checkout", "-q", "-b", "docs", cwd=repo)
    (repo / "ml" / "README.md").write_text("docs\n")
    git("add", ".", cwd=repo)
    git("commit", "-q", "-m", "docs", cwd=repo)
    proc = run_gitlab_job(repo, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no lock changed since origin/main" in proc.stdout + proc.stderr


class NotesAPI(BaseHTTPRequestHandler):
    """GitLab's merge request notes API, as much of it as the job's note uses: GET /user, the
    notes listed a page at a time, POST a note, PUT one."""

    notes: list[dict] = []
    requests: list[tuple[str, str, dict | None]] = []
    me = 77

    def _answer(self, payload: object, status: int = 200) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> dict | None:
        length = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(length)) if length else None

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        self.requests.append(("GET", self.path, None))
        if self.headers.get("PRIVATE-TOKEN") != "secret":
            return self._answer({"message": "401 Unauthorized"}, 401)
        if self.path == "/api/v4/user":
            return self._answer({"id": self.me})
        page = int(re.search(r"[?&]page=(\d+)", self.path)[1])
        return self._answer(self.notes[(page - 1) * 2:page * 2])  # two a page: pages are read

    def do_POST(self) -> None:  # noqa: N802
        body = self._body()
        self.requests.append(("POST", self.path, body))
        note = {"id": 100 + len(self.notes), "author": {"id": self.me}, **body}
        self.notes.append(note)
        self._answer(note, 201)

    def do_PUT(self) -> None:  # noqa: N802
        body = self._body()
        self.requests.append(("PUT", self.path, body))
        note = next(n for n in self.notes if self.path.endswith(f"/notes/{n['id']}"))
        note.update(body)
        self._answer(note)

    def log_message(self, *args) -> None:
        pass


# The whole job, several times (bash, pip, git, lockguard's check): CI glue, left out of the
# developer's loop (the fast subset) as the pre-commit test is.
@pytest.mark.slow
def test_the_gitlab_note_is_added_once_then_updated(tmp_path: Path) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), NotesAPI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    NotesAPI.notes = [{"id": 1, "author": {"id": 5}, "body": "a reviewer's note"},
                      {"id": 2, "author": {"id": 5}, "body": "<!-- lockguard-note: ml -->"},
                      {"id": 3, "author": {"id": 77}, "body": "the bot's other note"}]
    NotesAPI.requests = []
    try:
        repo = monorepo(tmp_path, {"ml/requirements.txt": TORCH_LOCK.read_text() + TORCHVISION})
        env = {"LG_NOTE": "true", "LG_NOTE_TOKEN": "secret",
               "CI_API_V4_URL": f"http://127.0.0.1:{server.server_port}/api/v4",
               "CI_PROJECT_ID": "12", "CI_MERGE_REQUEST_IID": "34",
               "CI_JOB_URL": "https://gitlab.example.com/job/56"}
        proc = run_gitlab_job(repo, tmp_path, **env)
        assert proc.returncode == 1  # the gate's answer, whatever the note did
        assert "lockguard: note 103 added" in proc.stdout, proc.stdout + proc.stderr
        added = NotesAPI.notes[-1]["body"]
        assert added.startswith("❌ lockguard: requirements.txt breaks")
        assert "https://gitlab.example.com/job/56" in added
        assert added.endswith("<!-- lockguard-note: ml -->\n")
        assert ("POST", "/api/v4/projects/12/merge_requests/34/notes", {"body": added}) in \
            NotesAPI.requests

        proc = run_gitlab_job(repo, tmp_path, **env)
        assert "lockguard: note 103 updated" in proc.stdout
        assert len(NotesAPI.notes) == 4  # the person's note with the marker was left alone

        proc = run_gitlab_job(repo, tmp_path, **{**env, "LG_NOTE_TOKEN": "wrong"})
        assert proc.returncode == 1 and "no merge request note: HTTP Error 401" in proc.stdout
        proc = run_gitlab_job(repo, tmp_path, **{**env, "LG_NOTE_TOKEN": ""})
        assert "needs LG_NOTE_TOKEN" in proc.stdout
    finally:
        server.shutdown()


# ---------------------------------------------------------------------------------------------
# The pre-commit hook
# ---------------------------------------------------------------------------------------------

def test_the_hook_manifest_is_valid_for_pre_commit() -> None:
    from pre_commit.clientlib import load_manifest

    [hook] = load_manifest(str(HOOKS))
    assert hook["id"] == "lockguard-check" and hook["language"] == "python"
    assert hook["pass_filenames"] is False
    assert hook["entry"] == "lockguard check --base HEAD --sandbox required"
    files = re.compile(hook["files"])
    for path in ("requirements.txt", "requirements-dev.txt", "ml/requirements.gpu.txt",
                 "uv.lock", "poetry.lock", "pylock.toml", "ml/pylock.train.toml"):
        assert files.search(path), path
    for path in ("requirements.in", "setup.py", "docs/requirements.md", "mylock.toml",
                 "requirements.txt.orig"):
        assert not files.search(path), path


def hook(repo: Path, tmp: Path) -> subprocess.CompletedProcess[str]:
    """The hook's entry, as pre-commit runs it: from the repository root, no file names."""
    [spec] = yaml.safe_load(HOOKS.read_text())
    return subprocess.run([str(VENV_BIN / spec["entry"].split()[0]), *spec["entry"].split()[1:],
                           "--config", "ml/pyproject.toml"], cwd=repo,
                          env={**os.environ, "LOCKGUARD_CACHE": str(tmp / "cache")},
                          capture_output=True, text=True, timeout=300)


def test_the_hook_checks_what_the_commit_changes(tmp_path: Path) -> None:
    """Against HEAD: the staged lock is the candidate, the committed one the baseline."""
    repo = monorepo(tmp_path, {})
    lock = repo / "ml" / "requirements.txt"
    lock.write_text("# a comment\n" + TORCH_LOCK.read_text())  # layout only: no A/B to run
    git("add", ".", cwd=repo)
    proc = hook(repo, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "only comments or layout changed since HEAD" in proc.stdout + proc.stderr
    lock.write_text(TORCH_LOCK.read_text() + TORCHVISION)  # a family rule broken: found at once
    git("add", ".", cwd=repo)
    proc = hook(repo, tmp_path)
    assert proc.returncode == 1 and "torchvision-matches-torch" in proc.stdout + proc.stderr


@pytest.mark.slow
def test_pre_commit_installs_and_runs_the_hook(tmp_path: Path) -> None:
    """pre-commit, as a project configures it, with this checkout as the hook's repository: it
    builds the hook's environment from the lean install (no docker SDK, no pip-tools) and runs
    the hook on a commit's staged lock."""
    # This checkout's working tree as a repository of its own, at a commit: what `rev:` names.
    hooks_repo = tmp_path / "lockguard"
    shutil.copytree(REPO, hooks_repo, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache"))
    git("init", "-q", cwd=hooks_repo)
    git("add", ".", cwd=hooks_repo)
    git("commit", "-q", "-m", "lockguard", cwd=hooks_repo)
    rev = git("rev-parse", "HEAD", cwd=hooks_repo).strip()
    config = (f"repos:\n  - repo: {hooks_repo}\n    rev: {rev}\n    hooks:\n"
              "      - id: lockguard-check\n        args: [--config, ml/pyproject.toml]\n")
    repo = monorepo(tmp_path, {".pre-commit-config.yaml": config})
    (repo / "ml" / "requirements.txt").write_text("# a comment\n" + TORCH_LOCK.read_text())
    (repo / "ml" / "train.py").write_text("print('no lock')\n")
    git("add", ".", cwd=repo)
    env = {**os.environ, "PRE_COMMIT_HOME": str(tmp_path / "pre-commit"),
           "LOCKGUARD_CACHE": str(tmp_path / "cache")}
    env.pop("VIRTUAL_ENV", None)

    def pre_commit(*files: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "pre_commit", "run", "--verbose",
                               "--files", *files], cwd=repo, env=env, capture_output=True,
                              text=True, timeout=1200)

    proc = pre_commit("ml/train.py")  # no lock staged: pre-commit does not even start it
    assert proc.returncode == 0 and "(no files to check)Skipped" in proc.stdout, proc.stdout
    proc = pre_commit("ml/requirements.txt", "ml/train.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "lockguard check (the staged locks against HEAD)" in proc.stdout
    assert "only comments or layout changed since HEAD" in proc.stdout

    (repo / "ml" / "requirements.txt").write_text(TORCH_LOCK.read_text() + TORCHVISION)
    git("add", ".", cwd=repo)
    proc = pre_commit("ml/requirements.txt")
    assert proc.returncode == 1 and "torchvision-matches-torch" in proc.stdout

    [python] = (tmp_path / "pre-commit").glob("repo*/py_env-*/bin/python")
    listed = subprocess.run([str(python), "-m", "pip", "list", "--format", "json"],
                            capture_output=True, text=True, timeout=120)
    names = {d["name"].lower() for d in json.loads(listed.stdout)}
    assert "lockguard" in names and not names & {"docker", "pip-tools"}, sorted(names)


# ---------------------------------------------------------------------------------------------
# Annotations name repository files, wherever lockguard ran
# ---------------------------------------------------------------------------------------------

def annotated_files(report, cwd: Path, monkeypatch, workspace: Path | None = None) -> list:
    from lockguard.report import render

    monkeypatch.chdir(cwd)
    if workspace is None:
        monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    else:
        monkeypatch.setenv("GITHUB_WORKSPACE", str(workspace))
    text = render(report, "github")
    return [dict(p.split("=", 1) for p in line.split("::")[1].split(" ", 1)[1].split(","))
            .get("file") for line in text.splitlines()]


def rule_report(lock: str, workdir: str | None):
    from lockguard.report import Report, RuleFailure

    return Report(command="check", mode="golden", passed=False, workdir=workdir,
                  rule_failures=[RuleFailure(lock=lock, rule="torchvision-matches-torch",
                                             message="no match", lines=[3])])


def test_annotation_paths_start_at_the_repository_root(tmp_path: Path, monkeypatch) -> None:
    from lockguard.files import repo_workdir

    repo = tmp_path / "repo"
    (repo / "ml" / "sub").mkdir(parents=True)
    (repo / ".git").mkdir()
    ml = repo / "ml"
    assert (repo_workdir(ml), repo_workdir(repo), repo_workdir(tmp_path)) == ("ml", "", "")

    # Recorded where the check ran: rendered anywhere, the same files.
    for where in (ml, repo, tmp_path):
        assert annotated_files(rule_report("requirements.txt", "ml"), where, monkeypatch) == \
            ["ml/requirements.txt"]
    # Not recorded (a report of an older lockguard): the rendering's own directory.
    assert annotated_files(rule_report("requirements.txt", None), ml, monkeypatch) == \
        ["ml/requirements.txt"]
    assert annotated_files(rule_report("../shared/req.txt", "ml"), ml, monkeypatch) == \
        ["shared/req.txt"]
    # Outside the repository (a proposal in the cache): no file, the annotation is the run's.
    assert annotated_files(rule_report("../../req.txt", "ml"), ml, monkeypatch) == [None]
    assert annotated_files(rule_report(str(tmp_path / "cache" / "x.txt"), "ml"), ml,
                           monkeypatch) == [None]
    assert annotated_files(rule_report(str(ml / "sub" / "x.txt"), "ml"), ml, monkeypatch) == \
        ["ml/sub/x.txt"]
    # GITHUB_WORKSPACE is the root the runner annotates from, when it holds the directory.
    assert annotated_files(rule_report("requirements.txt", None), ml / "sub", monkeypatch,
                           workspace=ml) == ["sub/requirements.txt"]
    assert annotated_files(rule_report("requirements.txt", None), ml, monkeypatch,
                           workspace=tmp_path / "elsewhere") == ["ml/requirements.txt"]
