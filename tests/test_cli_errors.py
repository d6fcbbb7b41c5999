"""Bad input: one clear line naming what and where, exit code 2, nothing written.

Fast: each case fails before any environment is built (except the pip ones, which fail while
building and must leave nothing behind either).
"""

from __future__ import annotations

import pytest

from conftest import DATA, make_project, run_cli, snapshot

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()
GOOD_HASH = NUMPY_LOCK.split("sha256:")[1].split()[0]


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    line = proc.stderr.strip()
    assert "\n" not in line, line
    assert "Traceback" not in line
    for fragment in fragments:
        assert fragment in line, line
    assert proc.stdout == ""


@pytest.mark.parametrize("lock_text, fragments", [
    ("numpy>=1.26\n", ("lock.txt:1", "not pinned")),
    ("six==1.16.0 \\\n    --hash=sha256:" + "a" * 64 + "\nnumpy==2.0.2\n",
     ("lock.txt:3", "hash")),
    ("numpy==2.0.2\nsix==1.16.0\nnumpy==2.0.2\n", ("lock.txt:3", "numpy")),
    ("numpy==2.0.2\nthis is not a requirement\n", ("lock.txt:2",)),
])
def test_bad_lock_lines(tmp_path, lock_text, fragments):
    project = make_project(tmp_path, 'lock = "lock.txt"', files={"lock.txt": lock_text})
    before = snapshot(project)
    for command in ("record", "check"):
        assert_one_line_error(run_cli(command, cwd=project), *fragments)
    assert snapshot(project) == before


def test_unknown_config_key_names_the_key(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"\ntolerence = "exact"',
                           files={"lock.txt": NUMPY_LOCK})
    assert_one_line_error(run_cli("check", cwd=project), "pyproject.toml", "tolerence")


def test_bad_config_value(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"\ndevice = "gpu"',
                           files={"lock.txt": NUMPY_LOCK})
    assert_one_line_error(run_cli("check", cwd=project), "device")


def test_unknown_scenario(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    assert_one_line_error(run_cli("check", "--scenario", "torch.nope", cwd=project),
                          "torch.nope")


def test_missing_lock_file(tmp_path):
    project = make_project(tmp_path, 'lock = "missing.txt"')
    assert_one_line_error(run_cli("check", cwd=project), "missing.txt", "not found")


def test_missing_golden_says_how_to_record(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"\n[scenario.s]\nscript = "s.py"\n'
                           'framework = "numpy"', files={"lock.txt": NUMPY_LOCK, "s.py": ""})
    assert_one_line_error(run_cli("check", "--scenario", "s", cwd=project),
                          "golden/cpu/s.json", "lockguard record")


def test_golden_with_wrong_schema_version(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"\n[scenario.s]\nscript = "s.py"\n'
                           'framework = "numpy"',
                           files={"lock.txt": NUMPY_LOCK, "s.py": "",
                                  "golden/cpu/s.json": '{"schema_version": 99, '
                                                       '"provenance": {}, "result": {}}'})
    assert_one_line_error(run_cli("check", "--scenario", "s", cwd=project),
                          "s.json", "schema_version 99")


@pytest.mark.slow
@pytest.mark.parametrize("lock_text, fragment", [
    (NUMPY_LOCK.replace(GOOD_HASH, "0" * 64), "hash"),
    (NUMPY_LOCK.replace("numpy==2.0.2", "numpy==2.0.99"), "numpy==2.0.99"),
])
def test_lock_pip_cannot_install(tmp_path, lock_text, fragment):
    project = make_project(tmp_path / "p", 'lock = "lock.txt"\n[scenario.s]\nscript = "s.py"\n'
                           'framework = "numpy"', files={"lock.txt": lock_text, "s.py": ""})
    before = snapshot(project)
    proc = run_cli("record", "--scenario", "s", "--format", "json", cwd=project,
                   env={"LOCKGUARD_CACHE": str(tmp_path / "cache")})
    assert_one_line_error(proc, "lock.txt", "could not install", fragment)
    assert snapshot(project) == before
    assert not any((tmp_path / "cache" / "venvs").glob("*/lockguard-ready.json"))
