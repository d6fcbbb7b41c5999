"""The exit-code map: a bug is exit 3 with a crash log; a gate that compared nothing fails."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import DATA, REPO, make_project, run_cli, snapshot

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()


def test_an_internal_error_is_exit_3_one_line_and_a_crash_log(tmp_path):
    project = make_project(tmp_path / "p", 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    cache = tmp_path / "cache"
    # A bug planted in the flow layer: what reaches the CLI is an ordinary ZeroDivisionError.
    code = ("import sys; from lockguard import cli\nfrom lockguard.flows import record as flow\n"
            "def bug(*a, **k): return 1 / 0\n"
            "flow.record = bug\n"
            "cli.main(['record'])\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=project, capture_output=True,
                          text=True, env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                          "LOCKGUARD_CACHE": str(cache),
                                          "PYTHONPATH": str(REPO)})
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("lockguard: internal error: ZeroDivisionError: division by zero")
    assert "Traceback" not in line
    log = Path(line.rsplit(" in ", 1)[1].rstrip(")"))
    assert log.parent == cache / "crash"
    text = log.read_text()
    assert "Traceback" in text and "in bug" in text and "ZeroDivisionError" in text


def test_a_check_that_compares_nothing_fails_and_says_why(tmp_path):
    # The lock pins numpy only: every torch scenario is skipped, so nothing is compared.
    project = make_project(tmp_path / "p", 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    before = snapshot(project)
    for command in ("check", "record"):
        proc = run_cli(command, "--scenario", "torch", "--format", "json", cwd=project,
                       env={"LOCKGUARD_CACHE": str(tmp_path / "cache")})
        assert proc.returncode == 1, proc.stderr
        report = json.loads(proc.stdout)
        assert not report["passed"]
        assert {v["verdict"] for v in report["verdicts"]} == {"skipped"}
        [note] = report["notes"]
        assert note.startswith(f"nothing was {'compared' if command == 'check' else 'recorded'}")
        assert "no lock pins torch" in note
    assert snapshot(project) == before


def test_click_usage_errors_are_one_line(tmp_path):
    for args, fragment in ((["check", "--steps", "abc"], "'abc' is not a valid integer"),
                           (["--nope"], "No such option"), (["diff"], "Missing argument")):
        proc = run_cli(*args, cwd=tmp_path)
        assert proc.returncode == 2
        [line] = proc.stderr.splitlines()
        assert line.startswith("lockguard: error: ") and fragment in line, line


def _python(code: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *(["-c", code] if code else []), *args], cwd=cwd,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env={"PATH": "/usr/bin:/bin", "HOME": str(cwd),
                               "LOCKGUARD_CACHE": str(cwd / "cache"), "PYTHONPATH": str(REPO)})


def test_the_command_leaves_without_teardown_and_keeps_its_status_and_output(tmp_path):
    """`python -m lockguard` (and the console script) end in os._exit after the exit handlers
    (lockguard/__main__.py): the status, stdout and the one line on stderr are the command's;
    a handler registered before it still runs; a program calling main() keeps its own exit."""
    version = _python("", tmp_path, "-m", "lockguard", "--version")
    assert (version.returncode, version.stdout.strip()) == (0, "lockguard, version 0.1.0")
    empty = tmp_path / "empty"
    empty.mkdir()
    bad = _python("", empty, "-m", "lockguard", "check")
    assert bad.returncode == 2 and len(bad.stderr.splitlines()) == 1, bad.stderr
    # Teardown skipped: a finaliser run at interpreter teardown (not at exit) never runs.
    skipped = _python("import sys; from lockguard.__main__ import entry\n"
                      "class Late:\n    def __del__(self): print('torn down', flush=True)\n"
                      "sys.modules['late'] = Late()  # freed only by teardown\n"
                      "sys.argv = ['lockguard', '--version']; entry()", tmp_path)
    assert (skipped.returncode, skipped.stdout.strip()) == (0, "lockguard, version 0.1.0")
    # A handler registered first still runs (the fast exit is then not registered at all).
    first = _python("import atexit, sys; atexit.register(lambda: print('mine ran'))\n"
                    "from lockguard.__main__ import entry\n"
                    "sys.argv = ['lockguard', 'check']; entry()", empty)
    assert first.returncode == 2 and first.stdout.strip() == "mine ran", first
    # Output that cannot be written is exit 120, as the interpreter makes it.
    with open("/dev/full", "w") as full:
        lost = subprocess.run([sys.executable, "-m", "lockguard", "--version"], cwd=tmp_path,
                              stdout=full, stderr=subprocess.PIPE, text=True,
                              env={"PATH": "/usr/bin:/bin", "HOME": str(tmp_path),
                                   "PYTHONPATH": str(REPO)})
    assert lost.returncode == 120, lost.stderr
    # A program calling main() goes on, and exits as it says.
    caller = _python("import sys; from lockguard.__main__ import main\n"
                     "sys.argv = ['lockguard', '--version']\n"
                     "try:\n    main()\nexcept SystemExit:\n    pass\n"
                     "print('still here'); sys.exit(7)", tmp_path)
    assert caller.returncode == 7 and caller.stdout.splitlines()[-1] == "still here", caller


# ------------------------------------------------------------------- the map, on every command

def commands():
    """Every command of the command line, subgroups' included, with its path."""
    import click

    from lockguard.cli import cli

    def walk(command, path):
        yield path, command
        for name, sub in getattr(command, "commands", {}).items():
            yield from walk(sub, [*path, name])

    found = list(walk(cli, []))
    assert all(isinstance(c, click.Command) for _, c in found)
    return found


def test_every_command_is_behind_the_exit_code_map():
    """Each callback click runs (the root group's, a subgroup's, every command's) is wrapped by
    handles_errors: a command without it would exit 1 with a traceback on a bad input, and on
    a bug, instead of 2 or 3 with one line."""
    from lockguard.cli.edge import handles_errors

    mapped = handles_errors(lambda: None).__code__  # the code of every wrapper it makes

    def wrapped(func) -> bool:
        while func is not None:
            if getattr(func, "__code__", None) is mapped:
                return True
            func = getattr(func, "__wrapped__", None)
        return False

    found = commands()
    assert len(found) >= 20 and any(len(path) == 2 for path, _ in found)  # subgroups walked
    unmapped = [" ".join(path) or "lockguard" for path, command in found
                if command.callback is not None and not wrapped(command.callback)]
    assert unmapped == []


PLANTED = """
import sys, importlib
from lockguard import cli
module = importlib.import_module(sys.argv[1])
def bug(*a, **k):
    raise KeyError("planted")
setattr(module, sys.argv[2], bug)
cli.main(sys.argv[3:])
"""


@pytest.mark.parametrize("argv, module, name", [
    (["check"], "lockguard.flows.check", "check"),
    (["report", "r.json"], "lockguard.report", "load_report"),
    (["accept", "--reason", "x", "--yes"], "lockguard.flows.accept", "report_path"),
])
def test_a_bug_in_any_command_is_exit_3_with_a_crash_log(tmp_path, argv, module, name):
    project = make_project(tmp_path / "p", 'lock = "lock.txt"', files={"lock.txt": NUMPY_LOCK})
    before = snapshot(project)
    proc = _python(PLANTED, project, module, name, *argv)
    assert proc.returncode == 3, proc.stderr
    [line] = proc.stderr.splitlines()
    assert line.startswith("lockguard: internal error: KeyError: 'planted' (this is a bug; "
                           "the traceback is in "), line
    log = Path(line.rsplit(" in ", 1)[1].rstrip(")"))
    assert log.parent == project / "cache" / "crash" and "in bug" in log.read_text()
    assert {k: v for k, v in snapshot(project).items() if not k.startswith("cache/")} == before


def test_every_commands_help_in_a_fresh_interpreter(tmp_path):
    """`--help` of every command in an interpreter of its own, as a user runs it: the tests'
    CLI runs fork a zygote that imported every module first (forked_cli.py), which would hide
    a command that imports what it needs only through another's imports."""
    paths = [path for path, _ in commands()]
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYTHONPATH": str(REPO),
           "LOCKGUARD_CACHE": str(tmp_path / "cache")}
    procs = [(path, subprocess.Popen([sys.executable, "-m", "lockguard", *path, "--help"],
                                     cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     text=True))
             for path in paths]
    for path, proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0 and err == "", (path, err)
        assert out.startswith(f"Usage: lockguard {' '.join(path)}".rstrip()), (path, out[:80])
