"""Bad input: one clear line naming what and where, exit code 2, nothing written.

Fast: each case fails before any environment is built (except the pip ones, which fail while
building and must leave nothing behind either).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import DATA, make_project, run_cli, snapshot
from lockguard.golden import text_digest
from lockguard.harness._lockguard_harness.common import cpu_info
from lockguard.hardware import host_class

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
                          f"golden/cpu/{HOST.id}/s.json", "on any hardware", "lockguard record")


# A golden a bad tool, a bad merge or a hand edit could leave: each is one line naming the file,
# exit 2, before anything is built — `check` never answers from it. GOOD is consistent (digest,
# class, fingerprint), so each case below breaks exactly one thing.
HOST = host_class("cpu")
GOOD_RESULT = {"schema_version": 1, "scenario": "s", "framework": "numpy", "steps": 2,
               "device": "cpu", "fingerprint": {"cpu": cpu_info()}, "losses": [1.0, 0.5],
               "status": "ok"}


def golden_text(result=None, hardware=None, schema=2, provenance=None) -> str:
    """A golden file as golden.py writes one (digest line first), but with whatever content:
    lockguard's writer would refuse NaN."""
    document = {"schema_version": schema, "hardware": hardware or HOST.to_json(),
                "provenance": provenance if provenance is not None else {"inputs_digest": "x"},
                "result": GOOD_RESULT if result is None else result}
    body = json.dumps(document, indent=1, sort_keys=True) + "\n"
    return f'{{\n "digest": "{text_digest(body)}",\n' + body[2:]


def edited(**changes) -> str:
    """GOOD with `changes` in its result, the recorded digest left as it was."""
    document = json.loads(golden_text())
    document["result"] = {**document["result"], **changes}
    return json.dumps(document)


IN_CLASS = f"golden/cpu/{HOST.id}/s.json"


@pytest.mark.parametrize("files, fragments", [
    ({"golden/cpu/s.json": '{"schema_version": 1, "provenance": {}, "result": {}}'},
     ("golden/cpu/s.json", "schema 1", "re-record it")),
    ({IN_CLASS: '{"schema_version": 99, "provenance": {}, "result": {}}'},
     ("s.json", "schema_version 99", "re-record it")),
    ({IN_CLASS: golden_text(schema=1)}, ("s.json", "schema_version 1", "re-record it")),
    ({IN_CLASS: edited(losses=[1.0, 0.25])}, ("s.json", "edited since it was recorded")),
    ({IN_CLASS: json.dumps({**json.loads(golden_text()), "result": {}})},
     ("s.json", "edited since it was recorded")),
    ({IN_CLASS: golden_text(result={})}, ("s.json", "not a usable reference", "status")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "losses": [1.0]})},
     ("s.json", "1 losses for 2 steps")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "status": "crashed"})},
     ("s.json", "'crashed'")),
    ({IN_CLASS: golden_text().replace("0.5", "NaN")}, ("s.json", "edited since")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "losses": [1.0, float("nan")]})},
     ("s.json", "losses[1] is nan")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "outputs": [0.0, 1e999]})},
     ("s.json", "outputs[1] is inf")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "grad_norms": [1.0, "x"]})},
     ("s.json", "grad_norms[1]")),
    # The whole result contract, as a run is held to on arrival.
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "param_norms": {"w": float("nan")}})},
     ("s.json", "not a usable reference", "parameter norm 'w' is nan")),
    ({IN_CLASS: golden_text(result={**GOOD_RESULT, "grad_norms": [1.0]})},
     ("s.json", "not a usable reference", "1 gradient norms for 2 steps")),
    ({IN_CLASS: "{\"a\": " + "[" * 100000 + "]" * 100000 + "}"},
     ("s.json", "nested too deeply")),
    ({IN_CLASS: b'{"schema_version": 2, "x": "\xe9"}'},
     ("s.json", "not UTF-8")),
    ({IN_CLASS: "{\"schema_version\": 2"}, ("s.json:1", "corrupt golden")),
    ({f"golden/cpu/{HOST.id}/s.json/x": ""}, ("s.json", "is a directory")),
    # Moved from another class's directory by hand: the shortcut would trust it as this one's.
    ({IN_CLASS: golden_text(hardware={**HOST.to_json(), "id": "amd-25.17-avx512-00000000"})},
     ("s.json", "stored under")),
    # Moved and relabelled, but its fingerprint says where it was recorded.
    ({"golden/cpu/amd-25.17-avx512-00000000/s.json":
      golden_text(hardware={**HOST.to_json(), "id": "amd-25.17-avx512-00000000"})},
     ("s.json", "not that of its own fingerprint")),
])
def test_unusable_golden_is_one_line_before_anything_runs(tmp_path, files, fragments):
    project = make_project(tmp_path, 'lock = "lock.txt"\n[scenario.s]\nscript = "s.py"\n'
                           'framework = "numpy"\nsteps = 2',
                           files={"lock.txt": NUMPY_LOCK, "s.py": ""})
    for name, text in files.items():
        path = project / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)
    before = snapshot(project)
    assert_one_line_error(run_cli("check", "--scenario", "s", cwd=project,
                                  env={"LOCKGUARD_CACHE": str(tmp_path / "cache")}), *fragments)
    assert snapshot(project) == before
    assert not (tmp_path / "cache").exists()  # nothing was built


def test_record_refuses_a_directory_where_its_golden_goes(tmp_path):
    project = make_project(tmp_path, 'lock = "lock.txt"\n[scenario.s]\nscript = "s.py"\n'
                           'framework = "numpy"', files={"lock.txt": NUMPY_LOCK, "s.py": "",
                                                         f"{IN_CLASS}/keep": "mine"})
    before = snapshot(project)
    assert_one_line_error(run_cli("record", "--scenario", "s", cwd=project,
                                  env={"LOCKGUARD_CACHE": str(tmp_path / "cache")}),
                          "s.json", "is a directory")
    assert snapshot(project) == before
    assert not (tmp_path / "cache").exists()


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
    assert_one_line_error(proc, "lock.txt", "could not install")
    assert fragment in proc.stderr.lower()  # pip says HASHES, uv "Hash mismatch"
    assert snapshot(project) == before
    assert not any((tmp_path / "cache" / "venvs").glob("*/lockguard-ready.json"))
    # The installer's log outlives the half-built env, and the error names it.
    log = Path(re.search(r"\(log: ([^)]+)\)", proc.stderr).group(1))
    assert log.parent == tmp_path / "cache" / "venvs" and fragment in log.read_text().lower()
