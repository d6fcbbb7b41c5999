"""A check that ran nothing is answered again from what it read (lockguard/answers.py): with the
standard library and lockguard's bottom layer only (the import budget below), and never once
anything it depended on changed. The goldens are recorded through the fake backend; every check
here runs the real command line in a subprocess, answered from provenance (nothing is built)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, make_project
from forked_cli import cli_env
from fakes import FakeBackend
from lockguard import answers
from lockguard.config import load_config
from lockguard.evidence import LAST_CHECK, project_dir
from lockguard.flows.record import record
from lockguard.locks.ref import load_locks
from lockguard.scenarios import bundled
from lockguard.settings import Settings

# What a remembered answer may import: the standard library and these of lockguard's (the
# bottom layer: files, process, cache and evidence; hardware for this machine's class).
BUDGET = {"lockguard", "lockguard.__main__", "lockguard.answers", "lockguard.files",
          "lockguard.process", "lockguard.errors", "lockguard.sizes", "lockguard.cache",
          "lockguard.envvars", "lockguard.evidence", "lockguard.hardware",
          "lockguard.harness", "lockguard.harness._lockguard_harness",
          "lockguard.harness._lockguard_harness.common", "lockguard.harness._lockguard_harness.gen"}
NEVER = ("pydantic", "rich", "click", "docker", "git", "packaging", "numpy")

# `lockguard ARGS`, then the modules it imported written to MODULES (at exit: after replay's
# sys.exit too).
RUN = """
import atexit, os, sys
atexit.register(lambda: open(os.environ["MODULES"], "w").write("\\n".join(sorted(sys.modules))))
sys.argv = ["lockguard", *sys.argv[1:]]
from lockguard.__main__ import main
main()
"""


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=cwd,
                          check=True, capture_output=True, text=True).stdout


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    """A git project whose numpy lock has goldens for this machine (branch `feature`)."""
    root = make_project(tmp_path / "p", 'lock = "requirements.txt"\nsteps = 4\n'
                        'scenarios = ["numpy.mlp"]', locks={"requirements.txt":
                                                            DATA / "numpy-2.0.2.txt"})
    config = load_config(start=root)
    record(Settings.resolve(config), load_locks(config, []),
           [s for s in bundled() if s.id == "numpy.mlp"], backend=FakeBackend())
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-qm", "base")
    git(root, "checkout", "-qb", "feature")
    return root


class Lockguard:
    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.env = cli_env({"LOCKGUARD_CACHE": str(cache),
                            "MODULES": str(cache.parent / "modules.txt")})
        self.env.pop("GITHUB_ACTIONS", None)
        self.modules: set[str] = set()

    def __call__(self, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([sys.executable, "-c", RUN, *args], cwd=cwd,
                              env={**self.env, **env}, stdin=subprocess.DEVNULL,
                              capture_output=True, text=True, timeout=300)
        self.modules = set(Path(self.env["MODULES"]).read_text().split())
        return done

    @property
    def replayed(self) -> bool:
        """Whether the last command was answered from a remembered answer: nothing above
        the bottom layer imported (the import budget)."""
        return not any(m.split(".")[0] in NEVER for m in self.modules)

    def remembered(self) -> int:
        return len(list((self.cache / "answers").glob("*.json")))


@pytest.fixture
def lockguard(tmp_path, monkeypatch) -> Lockguard:
    monkeypatch.setenv("LOCKGUARD_CACHE", str(tmp_path / "cache"))  # project_dir's, here too
    return Lockguard(tmp_path / "cache")


def test_a_check_that_ran_nothing_is_answered_again_within_the_import_budget(project,
                                                                             lockguard):
    first = lockguard(project, "check")
    assert first.returncode == 0, first.stderr
    # (words, not lines: the evidence column wraps where the temporary path's length puts it)
    assert "not re-run" in " ".join(first.stdout.split())
    assert "PASS check: 1 unchanged\n" in first.stdout
    assert not lockguard.replayed and lockguard.remembered() == 1
    # A last-check pointer (an earlier check's) is taken away by a replay too: `accept` never
    # adopts runs older than the latest check.
    pointer = project_dir(project.resolve()) / LAST_CHECK
    pointer.parent.mkdir(parents=True, exist_ok=True)
    pointer.write_text("/somewhere\n")
    again = lockguard(project, "check")
    assert (again.returncode, again.stdout, again.stderr) == (0, first.stdout, "")
    assert lockguard.replayed and not pointer.exists()
    mine = {m for m in lockguard.modules if m.split(".")[0] == "lockguard"}
    assert mine <= BUDGET, sorted(mine - BUDGET)


def test_check_base_with_no_lock_changed_is_answered_again_until_the_base_moves(project,
                                                                               lockguard):
    first = lockguard(project, "check", "--base", "main")
    assert first.returncode == 0 and "nothing to check" in first.stdout, first.stderr
    assert not lockguard.replayed
    again = lockguard(project, "check", "--base", "main")
    assert (again.returncode, again.stdout) == (0, first.stdout) and lockguard.replayed
    # HEAD moves, the answer does not: still answered again.
    (project / "README").write_text("x\n")
    git(project, "add", "README")
    git(project, "commit", "-qm", "readme")
    assert lockguard(project, "check", "--base", "main").stdout == first.stdout
    assert lockguard.replayed
    # The base moves under the branch (main merged in): a new merge base, a new answer.
    git(project, "checkout", "-q", "main")
    (project / "NOTES").write_text("y\n")
    git(project, "add", "NOTES")
    git(project, "commit", "-qm", "notes")
    git(project, "checkout", "-q", "feature")
    git(project, "merge", "-q", "--no-edit", "main")
    moved = lockguard(project, "check", "--base", "main")
    base = git(project, "rev-parse", "main").strip()
    assert moved.returncode == 0 and f"merge base {base[:12]}" in moved.stdout
    assert not lockguard.replayed


@pytest.mark.parametrize("change, code, said", [
    # Every input the answer read: the golden, the lock, the config, a config beside it.
    ("golden", 2, "golden"),
    ("lock", 2, "requirements.txt"),
    ("config", 2, "pyproject.toml"),
    ("new config", 2, "lockguard.toml"),
])
def test_a_changed_input_is_never_answered_from_memory(project, lockguard, change, code, said):
    assert lockguard(project, "check").returncode == 0
    sub = project / "sub"
    sub.mkdir()
    assert lockguard(sub, "check").returncode == 0 and lockguard(sub, "check").returncode == 0
    assert lockguard.replayed
    if change == "golden":
        [path] = (project / "golden").rglob("numpy.mlp.json")
        document = json.loads(path.read_text())
        document["result"]["losses"][-1] += 1e-6
        path.write_text(json.dumps(document))
    elif change == "lock":
        (project / "requirements.txt").write_text("numpy=2.0.2\n")
    elif change == "config":
        text = (project / "pyproject.toml").read_text()
        (project / "pyproject.toml").write_text(text.replace("steps = 4", "stepz = 4"))
    else:  # found first, from sub/: the answer depended on its absence
        (sub / "lockguard.toml").write_text("stepz = 4\n")
    done = lockguard(sub, "check")
    assert done.returncode == code and said in done.stderr, done.stderr
    assert not lockguard.replayed


def test_another_terminal_width_is_another_answer(project, lockguard):
    narrow = lockguard(project, "check", COLUMNS="60")
    wide = lockguard(project, "check", COLUMNS="200")
    assert not lockguard.replayed and narrow.stdout != wide.stdout
    assert lockguard(project, "check", COLUMNS="60").stdout == narrow.stdout
    assert lockguard.replayed


@pytest.mark.parametrize("args, env", [
    (("--format", "json"), {}),  # a report id and a duration: not the same twice
    (("-o", "report.txt"), {}),  # a file written
    ((), {"GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": "summary.md"}),  # appended to
])
def test_what_a_replay_would_not_do_again_is_not_remembered(project, lockguard, args, env):
    for _ in range(2):
        done = lockguard(project, "check", *args, **env)
        assert done.returncode == 0, done.stderr
        assert not lockguard.replayed
    assert lockguard.remembered() == 0


def test_the_key_moves_with_the_import_path_and_the_environment(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    before = answers.key(["check"])
    assert answers.key(["check"]) == before
    (site / "newpkg").mkdir()  # a package installed or upgraded beside lockguard's imports
    os.utime(site, ns=(1, 1))
    assert answers.key(["check"]) != before
    before = answers.key(["check"])
    monkeypatch.setenv("LOCKGUARD_JOBS", "1")
    assert answers.key(["check"]) != before
    assert answers.key(["check", "--base", "main"]) != answers.key(["check"])


def test_only_a_lookup_of_found_objects_by_commit_id_is_not_asked_again():
    sha = "e6bf4ec4c0668699e688b37f4bfeeab58f771c6d"
    base = {"argv": ["git", "cat-file", "--batch"], "code": 0, "found": True,
            "input": f"{sha}:requirements.txt\n"}
    assert answers._content_addressed(base)
    assert not answers._content_addressed({**base, "input": "main:requirements.txt\n"})
    assert not answers._content_addressed({**base, "found": False})
    assert not answers._content_addressed({**base, "argv": ["git", "merge-base", "HEAD", sha]})


def test_another_hardware_class_is_not_answered(tmp_path):
    answer = {"reads": {}, "probes": {}, "commands": [], "hardware": {"cpu": "another-class"}}
    assert not answers._current(answer)
    from lockguard.hardware import host_class

    assert answers._current({**answer, "hardware": {"cpu": host_class("cpu").id}})
