"""The bad-input corpus: every input a user (or a hostile one) can get wrong, one case each.

Each case runs the real CLI once, as a process forked from a zygote that has imported lockguard
(forked_cli.py: a process of its own, without the second of start-up a fresh interpreter
costs; a few cases also run through a fresh `python -m lockguard`, which must give the same
outcome), and asserts the promise of the exit-code map: exit 2, exactly
one line on stderr of the form `lockguard: error: ...` naming the file/line or key at fault
(the `fragments`), no traceback, no terminal escape sequences, nothing on stdout, and nothing
changed anywhere under the test's directory (the project, its private LOCKGUARD_CACHE and the
places a hostile scenario id or `-o` would reach).

Every case must be refused before any environment is built: a run that starts filling its
(private, empty) LOCKGUARD_CACHE is stopped at once and the case fails; pip is also cut off from
every index and wheel directory, so nothing is ever downloaded. No case builds, trains or needs
a network, and each takes a few hundredths of a second.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import pytest

from conftest import DATA, make_project
from forked_cli import Zygote, cli_env, kill_group
from lockguard.hardware import host_class

NUMPY_LOCK = (DATA / "numpy-2.0.2.txt").read_text()
NUMPY_PIN = "numpy==2.0.2"
GOOD_HASH = NUMPY_LOCK.split("sha256:")[1].split()[0]
LOCK_LINES = NUMPY_LOCK.count("\n")  # a line appended to the lock is line LOCK_LINES + 1

SCRIPT = """\
import numpy as np


def run(steps, seed):
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.random(steps)]
"""

# A user scenario `s` on the numpy lock: the smallest valid project, which each case breaks.
SCENARIO = 'script = "s.py"\nframework = "numpy"'
TOP = 'lock = "lock.txt"'
RECORD = ("record", "--scenario", "s")
CHECK = ("check", "--scenario", "s")
# This machine's own golden of `s`: goldens live in one folder per hardware class.
CLASS_DIR = f"golden/cpu/{host_class('cpu').id}"
GOLDEN = f"{CLASS_DIR}/s.json"
VALID_SHAPE = '{"schema_version": 1, "provenance": {}, "result": %s}'

TIMEOUT_S = 20  # a refusal takes about a second; this only bounds a case that hangs

PYDANTIC_EXACT = "Input should be 'exact'"
PYDANTIC_STR = "Input should be a valid string"  # what a union reports for its str branch


class Dir:
    """A file entry that is a directory."""


@dataclass(frozen=True)
class Link:
    """A file entry that is a symlink to `target` ({tmp} is replaced)."""
    target: str


class Fifo:
    """A file entry that is a named pipe."""


@dataclass
class Case:
    id: str
    fragments: tuple[str, ...]  # each must appear in the error line
    args: tuple[str, ...] = RECORD
    top: str = TOP  # keys directly under [tool.lockguard]
    scenario: str | None = SCENARIO  # the body of [tool.lockguard.scenario.s]; None: no table
    extra: str = ""  # more config after the scenario table (headers relative to tool.lockguard)
    files: dict = field(default_factory=dict)  # relative to the project; "../x" is beside it
    env: dict = field(default_factory=dict)
    absent: tuple[str, ...] = ()  # must not appear in the error line


def config_text(case: Case) -> str:
    parts = [case.top]
    if case.scenario is not None:
        parts.append("[scenario.s]\n" + case.scenario)
    if case.extra:
        parts.append(case.extra)
    return "\n".join(parts)


def cfg(top: str = "", scenario: str = SCENARIO) -> dict:
    """Case fields for a config with `top` added to the valid keys."""
    return {"top": TOP + ("\n" + top if top else ""), "scenario": scenario}


def lock(text, *fragments: str) -> dict:
    """Case fields for a project whose lock.txt holds `text`."""
    return {"files": {"lock.txt": text}, "fragments": fragments or ("lock.txt",)}


def golden(content, *fragments: str, args=CHECK) -> dict:
    return {"files": {GOLDEN: content}, "fragments": fragments or ("s.json",), "args": args}


# The same pin (numpy 2.0.2, one wheel, its real hash) in each TOML format lockguard reads.
WHEEL = "numpy-2.0.2-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
FOREIGN_WHEEL = "numpy-2.0.2-cp311-cp311-win_amd64.whl"  # installs on no CI machine
UV_LOCK = f"""version = 1
requires-python = ">=3.10"

[[package]]
name = "p"
version = "0"
source = {{ virtual = "." }}
dependencies = [{{ name = "numpy" }}]

[[package]]
name = "numpy"
version = "2.0.2"
source = {{ registry = "https://pypi.org/simple" }}
wheels = [{{ url = "https://files.pythonhosted.org/packages/x/{WHEEL}", hash = "sha256:{GOOD_HASH}" }}]
"""
PYLOCK = f"""lock-version = "1.0"
created-by = "hand"

[[packages]]
name = "numpy"
version = "2.0.2"
wheels = [{{ url = "https://files.pythonhosted.org/packages/x/{WHEEL}", hashes = {{ sha256 = "{GOOD_HASH}" }} }}]
"""
POETRY_LOCK = f"""[[package]]
name = "numpy"
version = "2.0.2"
optional = false
python-versions = ">=3.9"
groups = ["main"]
files = [{{ file = "{WHEEL}", hash = "sha256:{GOOD_HASH}" }}]

[metadata]
lock-version = "2.1"
python-versions = ">=3.10"
content-hash = "0"
"""


def toml_lock(name: str, text: str, *fragments: str) -> dict:
    """Case fields for a project whose lock is the TOML lock `name` holding `text`."""
    return {"top": f'lock = "{name}"', "files": {name: text}, "fragments": fragments}


NESTED = "[" * 100_000 + "]" * 100_000
ESC = "\x1b]0;pwned\x07"
LONG_ID = "a" * 300

CASES = [
    # ---------------------------------------------------------------- locks
    Case("lock-unpinned", **lock("numpy>=1.26\n", "lock.txt:1", "numpy")),
    Case("lock-wildcard-pin", **lock("numpy==2.*\n", "lock.txt:1")),
    Case("lock-arbitrary-equality", **lock("numpy===2.0.2\n", "lock.txt:1")),
    Case("lock-invalid-version", **lock("numpy==two\n", "lock.txt:1")),
    Case("lock-hash-too-short", **lock("numpy==2.0.2 --hash=sha256:abc\n", "lock.txt:1", "hash")),
    Case("lock-hash-md5", **lock(f"numpy==2.0.2 --hash=md5:{'a' * 32}\n", "lock.txt:1", "hash")),
    Case("lock-hash-not-hex", **lock(f"numpy==2.0.2 --hash=sha256:{'z' * 64}\n", "lock.txt:1")),
    Case("lock-hash-on-its-own-line", **lock(f"{NUMPY_PIN}\n    --hash=sha256:{GOOD_HASH}\n",
                                            "lock.txt:2", "hash")),
    Case("lock-one-pin-without-hash", **lock(NUMPY_LOCK + "six==1.16.0\n",
                                            f"lock.txt:{LOCK_LINES + 1}", "six")),
    Case("lock-duplicate-pin", **lock(NUMPY_LOCK + NUMPY_LOCK.split("#\n")[-1],
                                     f"lock.txt:{LOCK_LINES + 1}", "numpy")),
    Case("lock-garbage-line", **lock(NUMPY_LOCK + "this is not a requirement\n",
                                    f"lock.txt:{LOCK_LINES + 1}")),
    Case("lock-bom-then-garbage", **lock("\ufeff%%% garbage %%%\n", "lock.txt:1")),
    Case("lock-empty", **lock("", "lock.txt")),
    Case("lock-only-comments", **lock("# nothing pinned here\n\n", "lock.txt")),
    Case("lock-is-a-directory", **lock(Dir(), "lock.txt")),
    Case("lock-not-utf8", **lock(NUMPY_LOCK.encode() + b"# caf\xe9\n", "lock.txt")),
    Case("lock-nul-byte", **lock("numpy==2.0.2\x00\n", "lock.txt:1")),
    Case("lock-editable", **lock("-e .\n", "lock.txt:1")),
    Case("lock-editable-vcs", **lock("-e git+https://example.invalid/x.git#egg=x\n", "lock.txt:1")),
    Case("lock-url-requirement",
         **lock("numpy @ https://example.invalid/numpy-2.0.2-py3-none-any.whl\n", "lock.txt:1")),
    Case("lock-path-requirement", **lock("./numpy-2.0.2-py3-none-any.whl\n", "lock.txt:1")),
    Case("lock-index-url-without-value", **lock("--index-url\n" + NUMPY_LOCK, "lock.txt:1",
                                               "index-url")),
    Case("lock-index-url-twice", **lock("--index-url https://a.invalid/simple\n"
                                       "--index-url https://b.invalid/simple\n" + NUMPY_LOCK,
                                       "lock.txt:2")),
    Case("lock-include", **lock("-r other.txt\n" + NUMPY_LOCK, "lock.txt:1")),
    Case("lock-unknown-option", **lock("--frobnicate\n" + NUMPY_LOCK, "lock.txt:1")),
    Case("lock-unbalanced-quote", **lock('--find-links "wheels\n' + NUMPY_LOCK, "lock.txt:1")),
    Case("lock-bad-marker", **lock('numpy==2.0.2 ; python_version >>> "3"\n', "lock.txt:1")),
    Case("lock-backslash-then-space", **lock(f"{NUMPY_PIN} \\ \n    --hash=sha256:{GOOD_HASH}\n",
                                            "lock.txt:1")),
    Case("lock-missing", top='lock = "missing.txt"', fragments=("missing.txt",)),
    Case("lock-dangling-symlink", **lock(Link("gone.txt"), "lock.txt")),
    Case("lock-symlink-loop", **lock(Link("lock.txt"), "lock.txt")),

    # ---------------------------------------------------------------- config: values
    Case("timeout-inf", **cfg("timeout = inf"), fragments=("pyproject.toml", "timeout")),
    Case("timeout-nan", **cfg("timeout = nan"), fragments=("pyproject.toml", "timeout")),
    Case("timeout-negative", **cfg("timeout = -1"), fragments=("pyproject.toml", "timeout")),
    Case("timeout-string", **cfg('timeout = "ten"'), fragments=("pyproject.toml", "timeout")),
    Case("memory-limit-no-unit", **cfg("memory_limit = 512"),
         fragments=("pyproject.toml", "memory_limit", "512 B", '"512MiB"')),
    Case("memory-limit-unknown-unit", **cfg('memory_limit = "8 parsecs"'),
         fragments=("pyproject.toml", "memory_limit", "8 parsecs", "GiB")),
    Case("memory-limit-negative", **cfg("memory_limit = -1"),
         fragments=("pyproject.toml", "memory_limit")),
    Case("memory-limit-float", **cfg("memory_limit = 1.5"),
         fragments=("pyproject.toml", "memory_limit", "none")),
    Case("memory-limit-bool", **cfg("memory_limit = false"),
         fragments=("pyproject.toml", "memory_limit", '"none"')),
    Case("memory-limit-too-small", **cfg('memory_limit = "1MiB"'),
         fragments=("pyproject.toml", "memory_limit", "32 MiB")),
    Case("python-nonexistent", **cfg('python = "/nonexistent"'), fragments=("/nonexistent",)),
    Case("python-not-an-interpreter", **cfg('python = "{tmp}/p/s.py"'), fragments=("s.py",)),
    Case("python-is-a-directory", **cfg('python = "{tmp}/p/golden"'),
         files={"golden": Dir()}, fragments=("golden",)),
    Case("golden-dir-is-a-file", files={"golden": "not a directory\n"},
         fragments=("golden",)),
    Case("golden-dir-under-a-file", **cfg('golden_dir = "s.py/golden"'), args=CHECK,
         fragments=("s.py",)),
    Case("golden-dir-wrong-type", **cfg("golden_dir = 5"),
         fragments=("pyproject.toml", "golden_dir")),
    Case("seed-negative", **cfg("seed = -1"), fragments=("pyproject.toml", "seed")),
    Case("seed-2-pow-70", **cfg(f"seed = {2 ** 70}"), fragments=("pyproject.toml", "seed")),
    Case("seed-float", **cfg("seed = 1.5"), fragments=("pyproject.toml", "seed")),
    Case("rtol-negative", **cfg("tolerance = {rtol = -1e-5, atol = 1e-6}"),
         fragments=("pyproject.toml", "tolerance.rtol"), absent=(PYDANTIC_EXACT,)),
    Case("tolerance-unknown-key", **cfg("tolerance = {rtol = 1e-5, atol = 1e-6, btol = 1}"),
         fragments=("pyproject.toml", "btol"), absent=(PYDANTIC_EXACT,)),
    Case("tolerance-missing-atol", **cfg("tolerance = {rtol = 1e-5}"),
         fragments=("pyproject.toml", "atol"), absent=(PYDANTIC_EXACT,)),
    Case("tolerance-unknown-word", **cfg('tolerance = "exactly"'),
         fragments=("pyproject.toml", "tolerance")),
    Case("tolerance-wrong-type", **cfg("tolerance = 5"), fragments=("pyproject.toml", "tolerance")),
    Case("lock-entry-bad-device", top='locks = [{path = "lock.txt", device = "gpu"}]',
         fragments=("pyproject.toml", "locks", "device"), absent=(PYDANTIC_STR,)),
    Case("lock-entry-missing-path", top='locks = [{device = "cpu"}]',
         fragments=("pyproject.toml", "locks", "path"), absent=(PYDANTIC_STR,)),
    Case("lock-entry-unknown-key", top='locks = [{path = "lock.txt", lane = 1}]',
         fragments=("pyproject.toml", "lane"), absent=(PYDANTIC_STR,)),
    Case("locks-not-a-list", top='locks = "lock.txt"', fragments=("pyproject.toml", "locks")),
    Case("lock-wrong-type", top="lock = 5", fragments=("pyproject.toml", "lock")),
    Case("lock-and-locks", top='lock = "lock.txt"\nlocks = ["lock.txt"]',
         fragments=("pyproject.toml", "locks")),
    Case("no-lock-at-all", top='golden_dir = "golden"', fragments=("lock",)),
    Case("scenarios-unknown-id", **cfg('scenarios = ["nope"]'), args=("record",),
         fragments=("pyproject.toml", "scenarios", "nope")),
    Case("scenarios-not-a-list", **cfg('scenarios = "s"'), args=("record",),
         fragments=("pyproject.toml", "scenarios")),
    Case("steps-zero", **cfg("steps = 0"), fragments=("pyproject.toml", "steps")),
    Case("steps-string", **cfg('steps = "twenty"'), fragments=("pyproject.toml", "steps")),
    Case("threads-zero", **cfg("threads = 0"), fragments=("pyproject.toml", "threads")),
    Case("threads-string", **cfg('threads = "two"'), fragments=("pyproject.toml", "threads")),
    Case("python-wrong-type", **cfg("python = 5"), fragments=("pyproject.toml", "python")),
    Case("slower-ratio-below-one", **cfg("slower_ratio = 0.5"),
         fragments=("pyproject.toml", "slower_ratio")),
    Case("slower-ratio-string", **cfg('slower_ratio = "fast"'),
         fragments=("pyproject.toml", "slower_ratio")),
    Case("slower-min-step-negative", **cfg("slower_min_step_s = -1"),
         fragments=("pyproject.toml", "slower_min_step_s")),
    Case("heavier-ratio-one", **cfg("heavier_ratio = 1.0"),
         fragments=("pyproject.toml", "heavier_ratio")),
    Case("heavier-min-bytes-negative", **cfg("heavier_min_bytes = -1"),
         fragments=("pyproject.toml", "heavier_min_bytes")),
    Case("heavier-min-bytes-fraction", **cfg("heavier_min_bytes = 0.5"),
         fragments=("pyproject.toml", "heavier_min_bytes")),
    Case("fail-on-unknown-verdict", **cfg('fail_on = ["nope"]'),
         fragments=("pyproject.toml", "fail_on", "nope")),
    Case("fail-on-a-string", **cfg('fail_on = "drift"'), fragments=("pyproject.toml", "fail_on")),
    Case("fail-on-improvement-not-bool", **cfg('fail_on_improvement = "maybe"'),
         fragments=("pyproject.toml", "fail_on_improvement")),
    Case("env-unknown", **cfg('env = "conda"'), fragments=("pyproject.toml", "env")),
    Case("env-a-list", **cfg('env = ["venv"]'), fragments=("pyproject.toml", "env")),
    Case("device-unknown", **cfg('device = "gpu"'), fragments=("pyproject.toml", "device")),
    Case("device-a-bool", **cfg("device = true"), fragments=("pyproject.toml", "device")),
    Case("installer-unknown", **cfg('installer = "poetry"'),
         fragments=("pyproject.toml", "installer")),
    Case("installer-a-number", **cfg("installer = 3"), fragments=("pyproject.toml", "installer")),
    Case("unknown-top-level-key", **cfg('tolerence = "exact"'),
         fragments=("pyproject.toml", "tolerence")),

    # ---------------------------------------------------------------- config: files
    Case("pyproject-not-utf8", files={"pyproject.toml": b'[tool.lockguard]\n# caf\xe9\n'
                                                        b'lock = "lock.txt"\n'},
         fragments=("pyproject.toml",)),
    Case("pyproject-toml-syntax-error", files={"pyproject.toml": '[tool.lockguard]\n'
                                                                 'lock = "lock.txt\n'},
         fragments=("pyproject.toml",)),
    Case("pyproject-tool-not-a-table", files={"pyproject.toml": "tool = 5\n"},
         fragments=("pyproject.toml",)),
    Case("pyproject-lockguard-not-a-table", files={"pyproject.toml": "[tool]\nlockguard = 5\n"},
         fragments=("pyproject.toml", "lockguard")),
    Case("pyproject-lockguard-array-of-tables",
         files={"pyproject.toml": '[[tool.lockguard]]\nlock = "lock.txt"\n'},
         fragments=("pyproject.toml", "lockguard")),
    Case("lockguard-toml-syntax-error", files={"lockguard.toml": 'lock = \n'},
         fragments=("lockguard.toml",)),

    # ---------------------------------------------------------------- config: scenario tables
    Case("scenario-unknown-key", **cfg(scenario=SCENARIO + "\nstepz = 3"),
         fragments=("pyproject.toml", "stepz")),
    Case("scenario-not-a-table", top=TOP + "\nscenario = 5", scenario=None,
         fragments=("pyproject.toml", "scenario")),
    Case("scenario-entry-not-a-table", top=TOP, scenario=None, extra="[scenario]\ns = 5",
         fragments=("pyproject.toml", "scenario")),
    Case("scenario-missing-script", **cfg(scenario='framework = "numpy"'),
         fragments=("pyproject.toml", "script")),
    Case("scenario-missing-framework", **cfg(scenario='script = "s.py"'),
         fragments=("pyproject.toml", "framework")),
    Case("scenario-framework-unknown", **cfg(scenario='script = "s.py"\nframework = "mxnet"'),
         fragments=("pyproject.toml", "framework")),
    Case("scenario-steps-zero", **cfg(scenario=SCENARIO + "\nsteps = 0"),
         fragments=("pyproject.toml", "steps")),
    Case("scenario-device-unknown", **cfg(scenario=SCENARIO + '\ndevice = "gpu"'),
         fragments=("pyproject.toml", "device")),
    Case("scenario-atol-negative",
         **cfg(scenario=SCENARIO + "\ntolerance = {rtol = 1e-5, atol = -1.0}"),
         fragments=("pyproject.toml", "atol"), absent=(PYDANTIC_EXACT,)),
    Case("scenario-id-taken-by-bundled", top=TOP, scenario=None,
         extra='[scenario."numpy.mlp"]\n' + SCENARIO, args=("record", "--scenario", "numpy.mlp"),
         fragments=("pyproject.toml", "numpy.mlp")),
    Case("scenario-id-300-chars", top=TOP, scenario=None,
         extra=f'[scenario."{LONG_ID}"]\n' + SCENARIO, args=("record", "--scenario", LONG_ID),
         fragments=("pyproject.toml", "scenario")),
    Case("scenario-id-dotdot", top=TOP, scenario=None,
         extra='[scenario."../../outside/evil"]\n' + SCENARIO,
         args=("record", "--scenario", "../../outside/evil"),
         fragments=("pyproject.toml", "../../outside/evil")),
    Case("scenario-id-absolute", top=TOP, scenario=None,
         extra='[scenario."{tmp}/outside/evil"]\n' + SCENARIO,
         args=("record", "--scenario", "{tmp}/outside/evil"),
         # the id is shortened in the message: how much of it shows depends on {tmp}'s length
         fragments=("pyproject.toml", "scenario id '{tmp}/out", "is not valid")),
    Case("scenario-id-slash", top=TOP, scenario=None, extra='[scenario."a/b"]\n' + SCENARIO,
         args=("record", "--scenario", "a/b"), fragments=("pyproject.toml", "a/b")),
    Case("scenario-id-empty", top=TOP, scenario=None, extra='[scenario.""]\n' + SCENARIO,
         args=("record",), fragments=("pyproject.toml", "scenario")),
    Case("scenario-id-terminal-escape", top=TOP, scenario=None,
         extra='[scenario."x\\u001b]0;pwned\\u0007"]\n' + SCENARIO,
         args=("record", "--scenario", f"x{ESC}"), fragments=("pyproject.toml", "scenario")),
    Case("scenario-id-newline", top=TOP, scenario=None, extra='[scenario."a\\nb"]\n' + SCENARIO,
         args=("record", "--scenario", "a\nb"), fragments=("pyproject.toml", "scenario")),

    # ---------------------------------------------------------------- user scripts
    Case("script-missing", **cfg(scenario='script = "nope.py"\nframework = "numpy"'),
         fragments=("pyproject.toml", "nope.py")),
    Case("script-is-a-directory", **cfg(scenario='script = "scripts"\nframework = "numpy"'),
         files={"scripts": Dir()}, fragments=("pyproject.toml", "scripts")),
    Case("script-dangling-symlink", files={"s.py": Link("gone.py")},
         fragments=("pyproject.toml", "s.py")),
    Case("script-symlink-loop", files={"s.py": Link("s.py")}, fragments=("pyproject.toml", "s.py")),
    Case("script-is-a-fifo", files={"s.py": Fifo()}, fragments=("pyproject.toml", "s.py")),
    Case("script-nul-in-path", **cfg(scenario='script = "s\\u0000.py"\nframework = "numpy"'),
         fragments=("pyproject.toml", "script")),
    Case("script-path-too-long",
         **cfg(scenario=f'script = "{"x" * 5000}.py"\nframework = "numpy"'),
         fragments=("pyproject.toml", "script")),
    Case("script-empty-path", **cfg(scenario='script = ""\nframework = "numpy"'),
         fragments=("pyproject.toml", "script")),
    Case("script-wrong-type", **cfg(scenario='script = 5\nframework = "numpy"'),
         fragments=("pyproject.toml", "script")),

    # ---------------------------------------------------------------- goldens
    Case("golden-not-json", **golden("{\n")),
    Case("golden-empty-file", **golden("")),
    Case("golden-empty-object", **golden("{}")),
    Case("golden-array", **golden("[]")),
    Case("golden-schema-99", **golden('{"schema_version": 99, "provenance": {}, "result": {}}',
                                      "s.json", "99")),
    Case("golden-schema-string", **golden('{"schema_version": "1", "provenance": {}, '
                                          '"result": {}}')),
    Case("golden-missing-result", **golden('{"schema_version": 1, "provenance": {}}')),
    Case("golden-result-empty", **golden(VALID_SHAPE % "{}")),
    Case("golden-result-wrong-types",
         **golden(VALID_SHAPE % '{"schema_version": 1, "losses": "abc"}')),
    Case("golden-provenance-not-object",
         **golden('{"schema_version": 1, "provenance": [], "result": {}}')),
    Case("golden-not-utf8", **golden(b'{"schema_version": 1, "provenance": {"x": "caf\xe9"}, '
                                     b'"result": {}}')),
    Case("golden-utf8-bom", **golden("\ufeff" + VALID_SHAPE % "{}")),
    Case("golden-trailing-garbage", **golden(VALID_SHAPE % "{}" + " trailing")),
    Case("golden-is-a-directory", **golden(Dir())),
    Case("golden-deeply-nested-json", **golden(NESTED)),
    Case("golden-symlink-loop", **golden(Link("s.json"))),
    Case("golden-is-a-directory-on-record", **golden(Dir(), args=RECORD)),
    Case("golden-corrupt-under-escape-dir", **cfg('golden_dir = "g\\u001b]0;pwned\\u0007"'),
         files={f"g{ESC}/cpu/s.json": "{"}, args=CHECK, fragments=("s.json",)),

    # ---------------------------------------------------------------- command line
    Case("cli-steps-zero", args=CHECK + ("--steps", "0"), fragments=("--steps",)),
    Case("cli-steps-abc", args=CHECK + ("--steps", "abc"), fragments=("--steps",)),
    Case("cli-steps-negative", args=RECORD + ("--steps", "-1"), fragments=("--steps",)),
    Case("cli-repeat-zero", args=CHECK + ("--repeat", "0"), fragments=("--repeat",)),
    Case("cli-format-unknown", args=CHECK + ("--format", "nope"), fragments=("--format",)),
    Case("cli-env-unknown", args=CHECK + ("--env", "nope"), fragments=("--env",)),
    Case("cli-device-unknown", args=CHECK + ("--device", "gpu"), fragments=("--device",)),
    Case("cli-base-with-baseline-lock", args=CHECK + ("--base", "HEAD", "--baseline-lock",
                                                      "lock.txt"),
         fragments=("--base", "--baseline-lock")),
    Case("cli-unknown-option", args=CHECK + ("--frobnicate",), fragments=("--frobnicate",)),
    Case("cli-unknown-command", args=("frobnicate",), fragments=("frobnicate",)),
    Case("cli-option-without-value", args=("check", "--lock"), fragments=("--lock",)),
    Case("cli-diff-no-arguments", args=("diff",), fragments=("OLD",)),
    Case("cli-diff-missing-argument", args=("diff", "lock.txt"), fragments=("NEW",)),
    Case("cli-diff-missing-files", args=("diff", "old.txt", "new.txt"), fragments=("old.txt",)),
    Case("cli-diff-directory", args=("diff", "lock.txt", "sub"), files={"sub": Dir()},
         fragments=("sub",)),
    Case("cli-diff-not-utf8", args=("diff", "lock.txt", "bad.txt"),
         files={"bad.txt": b"numpy==2.0.2 # caf\xe9\n"}, fragments=("bad.txt",)),
    Case("cli-diff-output-under-a-file", args=("diff", "lock.txt", "lock.txt", "-o",
                                               "s.py/report.txt"), fragments=("s.py",)),
    Case("cli-diff-output-is-a-directory", args=("diff", "lock.txt", "lock.txt", "-o", "out"),
         files={"out": Dir()}, fragments=("out",)),
    Case("cli-record-output-under-a-file", args=RECORD + ("-o", "s.py/report.json"),
         fragments=("s.py",)),
    Case("cli-config-missing", args=CHECK + ("--config", "nope.toml"), fragments=("nope.toml",)),
    Case("cli-config-is-a-directory", args=CHECK + ("--config", "sub"), files={"sub": Dir()},
         fragments=("sub",)),
    Case("cli-config-not-utf8", args=CHECK + ("--config", "bad.toml"),
         files={"bad.toml": b'lock = "lock.txt" # caf\xe9\n'}, fragments=("bad.toml",)),
    Case("cli-lock-missing", args=CHECK + ("--lock", "nope.txt"), fragments=("nope.txt",)),
    Case("cli-lock-is-a-directory", args=RECORD + ("--lock", "sub"), files={"sub": Dir()},
         fragments=("sub",)),
    Case("cli-baseline-lock-missing", args=CHECK + ("--baseline-lock", "old.txt"),
         fragments=("old.txt",)),
    Case("cli-baseline-lock-garbage", args=CHECK + ("--baseline-lock", "old.txt"),
         files={"old.txt": "numpy==1.26.4\nnot a requirement at all\n"},
         fragments=("old.txt:2",)),
    Case("cli-scenario-unknown", args=("check", "--scenario", "nope"), fragments=("nope",)),
    # ---------------------------------------------------------------- "did you mean"
    Case("cli-scenario-typo", args=("check", "--scenario", "numpy.mpl"),
         fragments=("'numpy.mpl': did you mean numpy.mlp?", "lockguard scenarios")),
    Case("cli-scenario-framework-name", args=("check", "--scenario", "tensorflow"),
         fragments=("'tensorflow': did you mean tf?",)),
    Case("config-scenarios-typo", **cfg('scenarios = ["numpy.mpl"]'), args=("record",),
         fragments=("pyproject.toml", "'scenarios'", "did you mean numpy.mlp?")),
    Case("lock-path-typo", top='lock = "lokc.txt"',
         fragments=("lokc.txt: lock file not found; did you mean {tmp}/p/lock.txt?",)),
    Case("cli-lock-typo", args=("check", "--lock", "requirments.txt"),
         files={"requirements.txt": NUMPY_LOCK},
         fragments=("requirments.txt: lock file not found; did you mean requirements.txt?",)),
    Case("cli-config-typo", args=("check", "--config", "pyprojct.toml"),
         fragments=("pyprojct.toml: config file not found; did you mean pyproject.toml?",)),
    Case("cli-lock-input-typo", args=("lock", "requirments.in"),
         files={"requirements.in": "numpy\n"},
         fragments=("requirments.in: requirements input not found; did you mean "
                    "requirements.in?",)),
    # ---------------------------------------------------------------- lockguard init
    Case("init-no-lock", args=("init", "--yes", "{tmp}/empty"),
         files={"../empty/README.md": "a project without a lock\n"},
         fragments=("{tmp}/empty: no lock to guard", "requirements*.txt", "lockguard lock")),
    Case("init-not-a-terminal", args=("init", "{tmp}/fresh"),
         files={"../fresh/requirements.txt": NUMPY_LOCK},
         fragments=("not a terminal", "--yes", "nothing written")),
    Case("init-lock-typo", args=("init", "--yes", "--lock", "requirments.txt", "{tmp}/fresh"),
         files={"requirements.txt": NUMPY_LOCK, "../fresh/README.md": "x\n"},
         fragments=("requirments.txt: lock file not found; did you mean requirements.txt?",)),
    Case("init-lock-pins-no-framework", args=("init", "--yes", "--lock", "six.txt", "{tmp}/fresh"),
         files={"six.txt": "six==1.16.0 --hash=sha256:" + "0" * 64 + "\n",
                "../fresh/README.md": "x\n"},
         fragments=("six.txt: the lock pins none of torch, jax, tensorflow, numpy",)),
    Case("cli-scenario-empty", args=("record", "--scenario", ""), fragments=("scenario",)),
    Case("cli-propose-bad-spec", args=("propose", "numpy==="), fragments=("numpy===",)),
    Case("cli-propose-no-inputs", args=("propose", "numpy==2.1.0", "--scenario", "s"),
         fragments=("lock.in",)),
    Case("cli-propose-no-upgrades", args=("propose",), fragments=("UPGRADES",)),
    Case("cli-lock-input-missing", args=("lock", "nope.in"), fragments=("nope.in",)),
    Case("cli-outdated-lock-missing", args=("outdated", "--lock", "nope.txt"),
         fragments=("nope.txt",)),
    Case("cli-scenarios-format-unknown", args=("scenarios", "--format", "nope"),
         fragments=("--format",)),
    Case("cli-build-framework-unknown", args=("build", "--framework", "mxnet"),
         fragments=("--framework",)),

    # ---------------------------------------------------------------- the cache
    Case("cache-is-a-file", files={"../cachefile": "x\n"},
         env={"LOCKGUARD_CACHE": "{tmp}/cachefile"}, fragments=("cachefile",)),
    Case("cache-under-a-file", files={"../cachefile": "x\n"},
         env={"LOCKGUARD_CACHE": "{tmp}/cachefile/sub"}, fragments=("cachefile",)),
    Case("cache-venvs-is-a-file", files={"../cache/venvs": "x\n"}, fragments=("venvs",)),
    Case("cache-dangling-symlink", files={"../cachelink": Link("{tmp}/gone")},
         env={"LOCKGUARD_CACHE": "{tmp}/cachelink"}, fragments=("cachelink",)),
    Case("cache-unwritable", env={"LOCKGUARD_CACHE": "/dev/null/lockguard"},
         fragments=("/dev/null",)),

    # ---------------------------------------------------------------- locks that install unchecked
    Case("lock-without-any-hash", **lock(f"{NUMPY_PIN}\n", "lock.txt:1", "no --hash",
                                         "allow_unhashed = true")),
    Case("lock-pip-freeze-style", **lock("# pip freeze\n\nsix==1.16.0\nnumpy==2.0.2\n",
                                         "lock.txt:3", "six==1.16.0", "allow_unhashed")),
    Case("lock-http-index", **lock("--index-url http://pypi.example.invalid/simple\n"
                                   + NUMPY_LOCK, "lock.txt:1", "plain http",
                                   "allow_insecure_index = true")),
    Case("lock-http-extra-index-with-password",
         **lock(NUMPY_LOCK + "--extra-index-url http://alice:s3cret@pypi.example.invalid/s\n",
                f"lock.txt:{LOCK_LINES + 1}", "alice:***@", "allow_insecure_index"),
         absent=("s3cret",)),
    Case("lock-http-find-links", **lock("--find-links HTTP://wheels.example.invalid/\n"
                                        + NUMPY_LOCK, "lock.txt:1", "plain http")),
    Case("lock-trusted-host", **lock("--trusted-host pypi.example.invalid\n" + NUMPY_LOCK,
                                     "lock.txt:1", "--trusted-host", "allow_insecure_index")),
    Case("lock-unhashed-opt-in-is-not-insecure-opt-in",
         **cfg("allow_unhashed = true"),
         files={"lock.txt": f"--index-url http://pypi.example.invalid/simple\n{NUMPY_PIN}\n"},
         fragments=("lock.txt:1", "allow_insecure_index")),
    Case("allow-unhashed-not-a-bool", **cfg('allow_unhashed = "yes"'),
         fragments=("pyproject.toml", "allow_unhashed")),
    Case("allow-insecure-index-not-a-bool", **cfg("allow_insecure_index = 1"),
         fragments=("pyproject.toml", "allow_insecure_index")),

    # ---------------------------------------------------------------- not regular files
    Case("lock-is-a-fifo", **lock(Fifo(), "lock.txt", "is a FIFO")),
    Case("lock-is-dev-zero", top='lock = "/dev/zero"', fragments=("/dev/zero",
                                                                   "is a character device")),
    Case("cli-lock-is-a-fifo", args=RECORD + ("--lock", "l.txt"), files={"l.txt": Fifo()},
         fragments=("l.txt", "is a FIFO")),
    Case("cli-baseline-lock-is-dev-zero", args=CHECK + ("--baseline-lock", "/dev/zero"),
         fragments=("/dev/zero", "is a character device")),
    Case("pyproject-is-a-fifo", files={"pyproject.toml": Fifo()},
         fragments=("pyproject.toml", "is a FIFO")),
    Case("cli-config-is-a-fifo", args=CHECK + ("--config", "c.toml"), files={"c.toml": Fifo()},
         fragments=("c.toml", "is a FIFO")),
    Case("cli-config-is-dev-zero", args=CHECK + ("--config", "/dev/zero"),
         fragments=("/dev/zero", "is a character device")),
    Case("golden-is-a-fifo", **golden(Fifo(), "s.json", "is a FIFO")),
    Case("golden-is-a-fifo-on-record", **golden(Fifo(), "s.json", "FIFO", args=RECORD)),
    Case("cli-accept-from-a-fifo", args=("accept", "--from", "r.json", "--reason", "x", "--yes"),
         files={"r.json": Fifo()}, fragments=("r.json", "is a FIFO")),
    Case("cli-accept-from-dev-zero", args=("accept", "--from", "/dev/zero", "--reason", "x",
                                           "--yes"),
         fragments=("/dev/zero", "is a character device")),
    Case("cli-report-of-a-fifo", args=("report", "r.json"), files={"r.json": Fifo()},
         fragments=("r.json", "is a FIFO")),
    Case("cli-merge-part-is-a-fifo", args=("merge", "a.json"), files={"a.json": Fifo()},
         fragments=("a.json", "is a FIFO")),

    # ---------------------------------------------------------------- JSON that reads two ways
    Case("golden-duplicate-result-key",
         **golden('{"schema_version": 2, "result": {"steps": 1}, "provenance": {},\n'
                  ' "result": {"steps": 2}}', "s.json", "duplicate key 'result'")),
    Case("golden-integer-beyond-float",
         **golden(VALID_SHAPE % ('{"losses": [1' + "0" * 400 + "]}"), "s.json",
                  "beyond the range of a float")),
    Case("golden-integer-past-python-digit-limit",
         **golden(VALID_SHAPE % ('{"losses": [' + "9" * 5000 + "]}"), "s.json",
                  "beyond the range of a float")),
    Case("cli-report-duplicate-key", args=("report", "r.json"),
         files={"r.json": '{"command": "check", "verdicts": [], "command": "record"}'},
         fragments=("r.json", "duplicate key 'command'")),
    Case("cli-report-integer-beyond-float", args=("report", "r.json"),
         files={"r.json": '{"command": "check", "verdicts": [], "duration_s": 1'
                          + "0" * 400 + "}"},
         fragments=("r.json", "beyond the range of a float")),

    # ---------------------------------------------------------------- golden containment
    Case("golden-class-dir-links-out", args=RECORD,
         files={CLASS_DIR: Link("{tmp}/outside"), "../outside/keep": "x\n"},
         fragments=(CLASS_DIR, "leads out of golden_dir")),
    Case("golden-file-links-out", args=RECORD,
         files={GOLDEN: Link("{tmp}/outside/s.json"), "../outside/keep": "x\n"},
         fragments=("s.json", "leads out of golden_dir")),
    Case("golden-device-dir-links-out", args=CHECK,
         files={"golden/cpu": Link("{tmp}/outside"), "../outside/keep": "x\n"},
         fragments=("golden/cpu", "leads out of golden_dir")),
    Case("golden-class-dir-is-a-file", args=RECORD, files={CLASS_DIR: "not a directory\n"},
         fragments=(CLASS_DIR, "not a directory")),

    # ---------------------------------------------------------------- reports over inputs
    Case("cli-output-is-the-lock", args=RECORD + ("-o", "lock.txt"),
         fragments=("-o lock.txt", "a lock")),
    Case("cli-output-is-the-config", args=CHECK + ("-o", "pyproject.toml"),
         fragments=("-o pyproject.toml", "the config file")),
    Case("cli-output-is-a-golden", args=CHECK + ("-o", GOLDEN),
         files={GOLDEN: "{}\n"}, fragments=("-o", "below golden_dir")),
    Case("cli-report-is-the-script", args=RECORD + ("--report", "json=s.py"),
         fragments=("--report s.py", "the script of scenario s")),
    Case("cli-output-is-the-lock-through-a-link", args=RECORD + ("-o", "out.txt"),
         files={"out.txt": Link("lock.txt")}, fragments=("-o out.txt", "a lock")),
    Case("cli-output-is-the-baseline-lock", args=CHECK + ("--baseline-lock", "old.txt",
                                                          "-o", "old.txt"),
         files={"old.txt": NUMPY_LOCK}, fragments=("-o old.txt", "a lock")),
    Case("cli-diff-output-is-its-input", args=("diff", "lock.txt", "lock.txt", "-o",
                                               "lock.txt"), fragments=("-o lock.txt", "lock")),
    Case("cli-report-output-is-its-input", args=("report", "r.json", "-o", "r.json"),
         files={"r.json": "{}\n"}, fragments=("-o r.json", "the report being rendered")),
    Case("cli-plan-output-is-the-config", args=("plan", "-o", "pyproject.toml"),
         fragments=("-o pyproject.toml", "the config file")),

    # ---------------------------------------------------------------- bounds
    Case("cli-repeat-10-pow-30", args=CHECK + ("--repeat", "1" + "0" * 30),
         fragments=("--repeat",)),
    Case("cli-repeat-over-the-bound", args=RECORD + ("--repeat", "101"),
         fragments=("--repeat", "100")),
    Case("cli-steps-over-the-bound", args=RECORD + ("--steps", "1" + "0" * 30),
         fragments=("--steps", "1000000")),
    Case("cli-shards-over-the-bound", args=("plan", "--shards", "257"),
         fragments=("--shards", "256")),
    Case("cli-shard-n-over-the-bound", args=CHECK + ("--shard", "1/1000000000000"),
         fragments=("--shard", "256")),

    # ---------------------------------------------------------------- LOCKGUARD_* variables
    Case("env-jobs-abc", env={"LOCKGUARD_JOBS": "abc"}, fragments=("LOCKGUARD_JOBS",)),
    Case("env-jobs-zero", env={"LOCKGUARD_JOBS": "0"}, fragments=("LOCKGUARD_JOBS",)),
    Case("env-jobs-huge", env={"LOCKGUARD_JOBS": "9" * 5000}, fragments=("LOCKGUARD_JOBS",)),
    Case("env-unknown-name", env={"LOCKGUARD_JOB": "2"},
         fragments=("LOCKGUARD_JOB:", "did you mean LOCKGUARD_JOBS")),
    Case("env-base-image-with-newline", env={"LOCKGUARD_BASE_IMAGE": "python:3.11\nRUN x"},
         fragments=("LOCKGUARD_BASE_IMAGE",)),
    Case("env-images-dir-missing", env={"LOCKGUARD_IMAGES_DIR": "{tmp}/nope"},
         fragments=("LOCKGUARD_IMAGES_DIR", "nope")),
    Case("env-pip-tools-python-not-executable",
         env={"LOCKGUARD_PIP_TOOLS_PYTHON": "{tmp}/p/s.py"},
         fragments=("LOCKGUARD_PIP_TOOLS_PYTHON", "s.py")),

    # ---------------------------------------------------------------- TOML locks (issue 24)
    Case("uv-lock-malformed-toml", **toml_lock("uv.lock", UV_LOCK.replace(
        'name = "numpy"', 'name = "numpy'), "uv.lock:", "not a valid uv.lock (TOML)")),
    Case("uv-lock-unknown-version", **toml_lock("uv.lock", UV_LOCK.replace(
        "version = 1\n", "version = 7\n", 1), "uv.lock:1", "version: 7 is not a uv.lock")),
    Case("uv-lock-missing-hashes", **toml_lock("uv.lock", UV_LOCK.replace(
        f', hash = "sha256:{GOOD_HASH}"', ""), "uv.lock:10", "numpy==2.0.2 has no hash",
        "allow_unhashed = true")),
    Case("uv-lock-no-wheel-for-this-platform", **toml_lock("uv.lock", UV_LOCK.replace(
        WHEEL, FOREIGN_WHEEL).replace("wheels = [", 'sdist = { url = "https://files.'
        f'pythonhosted.org/packages/x/numpy-2.0.2.tar.gz", hash = "sha256:{GOOD_HASH}" }}\n'
        "wheels = ["), "uv.lock:10", "numpy==2.0.2: none of its 1 wheels installs",
        "only its sdist is left", "allow_sdist = true")),
    Case("uv-lock-git-source", **toml_lock("uv.lock", UV_LOCK.replace(
        'source = { registry = "https://pypi.org/simple" }',
        'source = { git = "https://example.invalid/numpy.git?rev=v2#0123abc" }'),
        "uv.lock:10", "package[1] (numpy)", "comes from a git")),
    Case("uv-lock-http-index", **toml_lock("uv.lock", UV_LOCK.replace(
        "https://pypi.org/simple", "http://pypi.example.invalid/simple"), "uv.lock:10",
        "plain http", "allow_insecure_index")),
    Case("pylock-malformed-toml", **toml_lock("pylock.toml", PYLOCK.replace(
        "[[packages]]", "[[packages]"), "pylock.toml:4", "not a valid pylock.toml (TOML)")),
    Case("pylock-unknown-lock-version", **toml_lock("pylock.toml", PYLOCK.replace(
        'lock-version = "1.0"', 'lock-version = "2.0"'), "pylock.toml:1",
        "lock-version: 2.0 is not a lock version lockguard reads")),
    Case("pylock-missing-hashes", **toml_lock("pylock.toml", PYLOCK.replace(
        f', hashes = {{ sha256 = "{GOOD_HASH}" }}', ""), "pylock.toml:4",
        "packages[0] (numpy).wheels[0].hashes", "Missing required value (PEP 751")),
    Case("pylock-no-wheel-for-this-platform", **toml_lock("pylock.toml", PYLOCK.replace(
        WHEEL, FOREIGN_WHEEL), "pylock.toml:4", "numpy==2.0.2: none of its 1 wheels installs",
        "no installer can install it here")),
    Case("poetry-lock-malformed-toml", **toml_lock("poetry.lock", POETRY_LOCK.replace(
        "[[package]]", "[[package]] x"), "poetry.lock:1", "not a valid poetry.lock (TOML)")),
    Case("poetry-lock-unknown-lock-version", **toml_lock("poetry.lock", POETRY_LOCK.replace(
        'lock-version = "2.1"', 'lock-version = "9.0"'), "poetry.lock:",
        "metadata.lock-version: 9.0 is not a lock version lockguard reads")),
    Case("poetry-lock-of-poetry-1", **toml_lock("poetry.lock", POETRY_LOCK.replace(
        'lock-version = "2.1"', 'lock-version = "2.0"'), "poetry.lock:",
        "records no markers per package", "poetry lock")),
    Case("poetry-lock-missing-hashes", **toml_lock("poetry.lock", POETRY_LOCK.replace(
        f', hash = "sha256:{GOOD_HASH}"', ""), "poetry.lock:1", "numpy==2.0.2 has no hash",
        "allow_unhashed")),
    Case("poetry-lock-no-wheel-for-this-platform", **toml_lock("poetry.lock", POETRY_LOCK.replace(
        WHEEL, FOREIGN_WHEEL), "poetry.lock:1", "none of its 1 wheels installs",
        "no installer can install it here")),
]


def tree(root: Path) -> dict[str, object]:
    """Every entry below `root` with what it is: bytes for files, the target for symlinks.

    Directories count too: a bad input must not even leave an empty golden/ behind.
    """
    out: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            key = str(path.relative_to(root))
            if stat.S_ISLNK(mode):
                out[key] = ("link", os.readlink(path))
            elif stat.S_ISDIR(mode):
                out[key] = "dir"
            elif stat.S_ISREG(mode):
                out[key] = path.read_bytes()
            else:
                out[key] = ("special", stat.S_IFMT(mode))
    return out


def build(case: Case, tmp: Path) -> Path:
    def sub(text: str) -> str:
        return text.replace("{tmp}", str(tmp))

    project = make_project(tmp / "p", sub(config_text(case)), files={"s.py": SCRIPT},
                           locks={"lock.txt": DATA / "numpy-2.0.2.txt"})
    for name, content in case.files.items():
        path = project / sub(name)
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        if isinstance(content, Dir):
            path.mkdir()
        elif isinstance(content, Link):
            path.symlink_to(sub(content.target))
        elif isinstance(content, Fifo):
            os.mkfifo(path)
        elif isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return project


def assert_one_line_error(proc, case: Case, tmp: Path) -> None:
    shown = (proc.returncode, proc.stdout[-500:], proc.stderr[-2000:])
    assert proc.returncode == 2, shown
    assert "Traceback" not in proc.stderr, shown
    assert proc.stdout == "", shown
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, shown
    line = lines[0]
    assert line.startswith("lockguard: error: "), shown
    # Terminal control (OSC/CSI escapes, BEL, ...) from the input must never reach stderr.
    assert not re.search(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]", line), ascii(line)
    # Fragments are matched with the test's own directory taken out, so that they must come
    # from the message and can never match the temporary path it names.
    bare = line
    for prefix in {str(tmp.resolve()), str(tmp)}:
        bare = bare.replace(prefix, "{tmp}")
    for fragment in case.fragments:
        assert fragment in bare, (fragment, line)
    for fragment in case.absent:
        assert fragment not in bare, (fragment, line)


def run_lockguard(args: list[str], cwd: Path, env: dict[str, str], cache: Path,
                  zygote: Zygote | None = None) -> subprocess.CompletedProcess[str] | str:
    """`lockguard ARGS` as conftest's run_cli runs it (a fresh interpreter), or forked from
    `zygote` (forked_cli.py: the same process contract without the start-up), or why it was
    stopped: it is killed (with all its children) as soon as it writes into the cache, since
    bad input must be refused before any environment is built and a case that slipped through
    would otherwise spend a minute creating a venv."""
    full_env = cli_env(env)
    before = sorted(os.listdir(cache)) if cache.is_dir() else None
    # Output goes to files, not pipes: nothing reads pipes while the run is watched.
    with tempfile.TemporaryDirectory(prefix="lockguard-case-") as streams:
        out, err = Path(streams) / "stdout", Path(streams) / "stderr"
        if zygote is None:
            with open(out, "w") as out_file, open(err, "w") as err_file:
                proc = subprocess.Popen([sys.executable, "-m", "lockguard", *args], cwd=cwd,
                                        env=full_env, stdin=subprocess.DEVNULL,
                                        stdout=out_file, stderr=err_file,
                                        start_new_session=True)
            pid = proc.pid

            def wait(timeout: float) -> int | None:
                try:
                    return proc.wait(timeout)
                except subprocess.TimeoutExpired:
                    return None
        else:
            pid = zygote.start(args, cwd, full_env, out, err)
            wait = zygote.wait
        deadline = time.monotonic() + TIMEOUT_S
        stopped = None
        while (code := wait(0.05)) is None:
            now = sorted(os.listdir(cache)) if cache.is_dir() else None
            if now != before:
                stopped = f"began to fill the cache (an environment build): {now}"
            elif time.monotonic() > deadline:
                stopped = f"still running after {TIMEOUT_S} s"
            if stopped:
                kill_group(pid)
                code = wait(60)
                break
        stdout, stderr = out.read_text(), err.read_text()
    if stopped:
        return f"{stopped}; stderr so far: {stderr[-300:]!r}"
    return subprocess.CompletedProcess(args, code, stdout, stderr)


@dataclass
class Outcome:
    tmp: Path
    proc: subprocess.CompletedProcess[str] | str  # a string: why the run was stopped
    before: dict[str, object]
    after: dict[str, object]


def run_case(case: Case, tmp: Path, zygote: Zygote | None = None) -> Outcome:
    project = build(case, tmp)
    env = {
        "LOCKGUARD_CACHE": str(tmp / "cache"),
        # Pip can find nothing, so nothing is ever downloaded or installed.
        "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": "",
        **{k: v.replace("{tmp}", str(tmp)) for k, v in case.env.items()},
    }
    args = [a.replace("{tmp}", str(tmp)) for a in case.args]
    before = tree(tmp)
    proc = run_lockguard(args, project, env, Path(env["LOCKGUARD_CACHE"]), zygote)
    return Outcome(tmp, proc, before, tree(tmp))


@pytest.fixture(scope="module")
def zygote(tmp_path_factory) -> Iterator[Zygote]:
    """What the cases are forked from: a fresh interpreter would cost most of a second of CPU
    per case in start-up, and there are over two hundred of them."""
    z = Zygote(tmp_path_factory.mktemp("zygote") / "zygote.log")
    yield z
    z.close()


@pytest.fixture(scope="module")
def case_dir() -> Iterator[Callable[[], Path]]:
    """A new short directory for each case: an error line shortens what it quotes (a scenario
    id to 60 characters), and a case whose id is a path under its directory must find that
    path's end in the line, however long pytest's own directories are (longer under xdist)."""
    root = Path(tempfile.mkdtemp(prefix="lg-bad-"))
    yield lambda: Path(tempfile.mkdtemp(dir=root))
    shutil.rmtree(root, ignore_errors=True)


def changes(before: dict[str, object], after: dict[str, object]) -> list[str]:
    return sorted([f"added {k}" for k in after.keys() - before.keys()]
                  + [f"removed {k}" for k in before.keys() - after.keys()]
                  + [f"changed {k}" for k in before.keys() & after.keys()
                     if before[k] != after[k]])


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case: Case, case_dir: Callable[[], Path], zygote: Zygote) -> None:
    outcome = run_case(case, case_dir(), zygote)
    if isinstance(outcome.proc, str):
        pytest.fail(outcome.proc)
    assert_one_line_error(outcome.proc, case, outcome.tmp)
    assert changes(outcome.before, outcome.after) == []


def test_the_corpus_is_large_and_ids_are_unique() -> None:
    assert len(CASES) >= 60
    assert len({c.id for c in CASES}) == len(CASES)


@pytest.mark.parametrize("forked", [True, False], ids=["forked", "fresh"])
def test_the_watch_sees_writes_and_builds(tmp_path: Path, forked: bool, request) -> None:
    """The corpus's own controls: valid input that writes a file, and valid input that builds
    an environment, are both seen (so an empty change list and a finished run mean something),
    forked from the zygote as the corpus runs and from a fresh interpreter."""
    runner = request.getfixturevalue("zygote") if forked else None
    report = run_case(Case("control-report", (), args=("diff", "lock.txt", "lock.txt", "-o",
                                                       "report.txt")), tmp_path / "a", runner)
    assert not isinstance(report.proc, str) and report.proc.returncode == 0, report.proc
    assert changes(report.before, report.after) == ["added p/report.txt"]

    build_run = run_case(Case("control-build", ()), tmp_path / "b", runner)
    assert isinstance(build_run.proc, str) and "began to fill the cache" in build_run.proc


# One case of each kind, run by a fresh `python -m lockguard` as a user runs it: the outcome
# (exit code, stdout, the stderr line) is the one the zygote's fork gives.
FRESH = ["lock-unpinned", "timeout-nan", "scenario-id-terminal-escape",
         "golden-deeply-nested-json", "cli-unknown-option", "env-jobs-abc"]


@pytest.mark.parametrize("case", [c for c in CASES if c.id in FRESH],
                         ids=[c.id for c in CASES if c.id in FRESH])
def test_a_fresh_interpreter_gives_the_forked_outcome(case: Case, case_dir: Callable[[], Path],
                                                     zygote: Zygote) -> None:
    fresh = run_case(case, case_dir())
    if isinstance(fresh.proc, str):
        pytest.fail(fresh.proc)
    assert_one_line_error(fresh.proc, case, fresh.tmp)
    assert changes(fresh.before, fresh.after) == []
    forked = run_case(case, case_dir(), zygote)
    assert not isinstance(forked.proc, str), forked.proc

    def seen(outcome: Outcome) -> tuple[int, str, str]:
        proc = outcome.proc
        text = [proc.stdout, proc.stderr]
        for i, t in enumerate(text):
            for prefix in (str(outcome.tmp.resolve()), str(outcome.tmp)):
                t = t.replace(prefix, "{tmp}")
            text[i] = t
        return proc.returncode, text[0], text[1]

    assert seen(fresh) == seen(forked)
