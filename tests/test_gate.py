"""lockguard on the requirements change itself: check --base, propose, lock, outdated, and the
family rules that fail a lock before anything is built. Real git repos, real resolvers."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from conftest import DATA, LOSS_EMA, TORCH_LOCK, make_project, run_cli, snapshot
from lockguard.envs.venv import LOCK_FILE
from lockguard.locks.parser import parse_lock

EMA = LOSS_EMA.read_text()
CONFIG = """
    lock = "requirements.txt"
    scenarios = ["loss_ema"]
    [scenario.loss_ema]
    script = "loss_ema.py"
    framework = "numpy"
    tolerance = "exact"
    """


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True,
                          text=True).stdout


def repo_with_lock(root: Path, lock: Path) -> Path:
    project = make_project(root, CONFIG, files={"loss_ema.py": EMA},
                           locks={"requirements.txt": lock})
    git(project, "init", "-q", "-b", "main")
    git(project, "add", "-A")
    git(project, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    git(project, "checkout", "-qb", "feature")
    return project


def test_base_with_unchanged_lock_answers_from_git_alone(tmp_path):
    project = repo_with_lock(tmp_path / "r", DATA / "numpy-1.26.4.txt")
    cache = tmp_path / "cache"
    proc = run_cli("check", "--base", "main", "--format", "json", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdicts"] == [] and report["passed"]
    assert any("no lock changed since main" in n for n in report["notes"])
    assert not (cache / "venvs").exists()  # nothing built
    # Made without validation (nothing ran), it is what a validated report reads back as.
    from lockguard.report import Report

    assert json.loads(Report.model_validate(report).model_dump_json()) == report


@pytest.mark.slow
def test_base_with_changed_lock_runs_ab(tmp_path):
    project = repo_with_lock(tmp_path / "r", DATA / "numpy-1.26.4.txt")
    (project / "requirements.txt").write_text((DATA / "numpy-2.0.2.txt").read_text())
    # A cache of its own: the baseline env must really be built from the lock read from git.
    cache = tmp_path / "cache"
    proc = run_cli("check", "--base", "main", "--format", "json", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [v["verdict"] for v in report["verdicts"]] == ["drift"]
    assert any("uncommitted changes in requirements.txt" in n for n in report["notes"])
    assert report["lock_diffs"][0]["changes"][0]["new_version"] == "2.0.2"
    # The baseline is named as a reader knows it, not by its copy in the cache.
    base = git(project, "rev-parse", "main").strip()
    assert report["base"] == {"ref": "main", "merge_base": base}
    [baseline] = [lock for lock in report["locks"] if lock["role"] == "baseline"]
    assert baseline["label"] == f"main@{base[:7]}:requirements.txt"
    assert baseline["path"] == "main:requirements.txt"
    assert report["invocation"] == ["lockguard", "check", "--base", "main"]
    # Each env was installed from its parsed lock, written into the env itself: the baseline's
    # from the text git holds, with nothing copied out of git elsewhere in the cache.
    installed = {parse_lock(p).lock_hash for p in cache.glob(f"venvs/*/{LOCK_FILE}")}
    assert installed == {parse_lock(DATA / "numpy-1.26.4.txt").lock_hash,
                         parse_lock(DATA / "numpy-2.0.2.txt").lock_hash}
    assert not (cache / "base-locks").exists()


def test_base_ref_that_does_not_exist(tmp_path):
    project = repo_with_lock(tmp_path / "r", DATA / "numpy-1.26.4.txt")
    proc = run_cli("check", "--base", "no-such-branch", cwd=project)
    assert proc.returncode == 2
    assert "no-such-branch" in proc.stderr and proc.stderr.strip().count("\n") == 0


def test_a_lock_new_beside_the_base_locks_is_said_and_runs_nothing(tmp_path):
    # A lock no base lock stands for is new: said among the gate's changes (judged once merged),
    # its scenarios not run. (One named in another lock's place is paired with it instead:
    # tests/test_hostile_pr.py.)
    project = repo_with_lock(tmp_path / "r", DATA / "numpy-1.26.4.txt")
    (project / "pyproject.toml").write_text((project / "pyproject.toml").read_text().replace(
        'lock = "requirements.txt"', 'locks = ["requirements.txt", "jax.txt"]'))
    (project / "jax.txt").write_text((DATA / "jax-0.10.2.txt").read_text())
    cache = tmp_path / "cache"
    proc = run_cli("check", "--base", "main", "--format", "json", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads(proc.stdout)
    assert report["verdicts"] == [] and report["passed"]
    assert "lock jax.txt is new: its scenarios have no baseline" in report["gate"]["changes"]
    assert report["gate"]["source"] == "base"
    assert not (cache / "venvs").exists()  # nothing built


def test_base_in_a_shallow_clone_fetches_what_it_needs(tmp_path):
    origin = repo_with_lock(tmp_path / "origin", DATA / "numpy-1.26.4.txt")
    git(origin, "checkout", "-q", "main")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", "--depth", "1", "--branch", "main", f"file://{origin}",
        str(clone))
    proc = run_cli("check", "--base", "origin/main", "--format", "json", cwd=clone)
    assert proc.returncode == 0, proc.stderr
    assert any("no lock changed" in n for n in json.loads(proc.stdout)["notes"])


@pytest.mark.slow
def test_propose_leaves_user_files_alone_and_reports_drift(tmp_path):
    # An ordinary requirements.in pins what the lock pins: the proposal reads that line as the
    # upgrade (as a bot's pull request would edit it) and says so; the lock's header names
    # pip-compile, so pip-tools resolves; pip's configuration adds no index line to the lock.
    project = make_project(tmp_path / "p", CONFIG, files={"loss_ema.py": EMA,
                                                          "requirements.in": "numpy==1.26.4\n"},
                           locks={"requirements.txt": DATA / "numpy-1.26.4.txt"})
    before = snapshot(project)
    proc = run_cli("propose", "numpy==2.0.2", "--format", "json", cwd=project)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert report["command"] == "propose"
    assert [v["verdict"] for v in report["verdicts"]] == ["drift"]
    assert any(n.startswith("proposed lock for requirements.txt (pip-tools): ")
               for n in report["notes"])
    assert any("requirements.in:1 pins numpy==1.26.4: proposed with numpy==2.0.2 there" in n
               for n in report["notes"])
    [diff] = report["lock_diffs"]
    assert diff["option_changes"] == []
    assert snapshot(project) == before


def test_family_rule_fails_fast_before_any_build(tmp_path):
    lock = TORCH_LOCK.read_text() + (
        "torchvision==0.20.0 \\\n    --hash=sha256:" + "b" * 64 + "\n")
    project = make_project(tmp_path / "p", 'lock = "requirements.txt"',
                           files={"requirements.txt": lock})
    cache = tmp_path / "cache"
    proc = run_cli("check", "--scenario", "torch.mlp", cwd=project,
                   env={"LOCKGUARD_CACHE": str(cache)})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "torchvision" in proc.stdout and "0.20.0" in proc.stdout
    assert not (cache / "venvs").exists()


@pytest.mark.slow
def test_lock_writes_a_hashed_lock_and_a_failed_resolve_keeps_the_old_one(tmp_path):
    (tmp_path / "requirements.in").write_text("six==1.16.0\n")
    proc = run_cli("lock", "requirements.in", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "requirements.txt").read_text()
    assert "six==1.16.0" in text and "--hash=sha256:" in text
    # no lock yet: uv, under its own header
    assert "#    uv pip compile" in text and "lockguard lock requirements.in --resolver uv" in text

    (tmp_path / "requirements.in").write_text("six==99.0\n")
    before = (tmp_path / "requirements.txt").read_bytes()
    bad = run_cli("lock", "requirements.in", cwd=tmp_path)
    assert bad.returncode == 2
    [error] = [ln for ln in bad.stderr.splitlines() if ln.startswith("lockguard: error:")]
    assert "six==99" in error
    assert (tmp_path / "requirements.txt").read_bytes() == before


@pytest.mark.slow
def test_outdated_lists_newer_framework_releases(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "l.txt"',
                           locks={"l.txt": DATA / "numpy-1.26.4.txt"})
    proc = run_cli("outdated", "--format", "json", cwd=project)
    assert proc.returncode == 0, proc.stderr
    [row] = json.loads(proc.stdout)
    assert row["name"] == "numpy" and row["current"] == "1.26.4"
    assert row["latest_stable"] and row["latest_stable"] != "1.26.4"
