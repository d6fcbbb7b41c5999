"""lockguard.locks.resolvers and .outdated: fast tests of the pure parts and of uv resolving
against wheels built here (no network), then real pip-compile / uv / pip runs (slow).

The slow tests resolve small packages (six, packaging) from PyPI; the pinned pip-tools env is
built once per session in a temp cache.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import time
from pathlib import Path

import pytest

from conftest import build_wheels, run_cli, snapshot
from lockguard import installers
from lockguard.locks import outdated as releases, resolvers
from lockguard.locks.model import LockError
from lockguard.locks.outdated import OutdatedRow, Release, outdated
from lockguard.locks.parser import lock_writer, read_requirements_input
from lockguard.locks.resolvers import ResolveError, piptools

# Renovate's pip-compile manager (renovatebot/renovate lib/modules/manager/pip-compile/
# common.ts, c2dd4f8, 2026): the command it re-runs is the first "#    " line of the header
# (constraintLineRegex), `pip-compile` or `uv pip compile`; each option must be in that
# command's list, and those taking a value must join it with "=".
RENOVATE_HEADER = re.compile(r"^(#.*?\r?\n)+# {4}(?P<command>\S*)(?P<arguments> .*?)?\r?\n")
_RENOVATE_WITH_VALUE = {"--output-file", "--extra", "--extra-index-url", "--resolver",
                        "--constraint", "--constraints", "--python-version", "--no-emit-package",
                        "--prerelease", "--format", "--resolution", "--fork-strategy",
                        "--exclude-newer", "--exclude-newer-package", "--group", "--override",
                        "--overrides"}
_RENOVATE_COMMON = {"-v", "--generate-hashes", "--emit-index-url", "--index-url", "--all-extras",
                    "--output-file", "--extra", "--extra-index-url"}
RENOVATE_OPTIONS = {
    "pip-compile": _RENOVATE_COMMON | {"--allow-unsafe", "--no-emit-index-url", "--strip-extras",
                                       "--resolver", "--constraint"},
    "uv": _RENOVATE_COMMON | {"--no-strip-extras", "--universal", "--constraints", "--constraint",
                              "--python-version", "--no-emit-package", "--prerelease", "--format",
                              "--resolution", "--fork-strategy", "--exclude-newer",
                              "--exclude-newer-package", "--group", "--override", "--overrides"},
}


def renovate_reads(text: str) -> tuple[str, list[str], list[str]]:
    """(command, options, source files) as Renovate's extractHeaderCommand reads the header;
    an AssertionError where Renovate would refuse it."""
    match = RENOVATE_HEADER.match(text)
    assert match, "no '#    command' line in the header"
    argv = shlex.split(match["command"] + (match["arguments"] or ""))
    kind = {"pip-compile": "pip-compile", "uv": "uv"}.get(argv[0])
    assert kind, f"{argv[0]}: Renovate runs this only as a custom command"
    args = argv[3:] if kind == "uv" else argv[1:]
    if kind == "uv":
        assert argv[1:3] == ["pip", "compile"]
    options = [a for a in args if a.startswith("-")]
    for option in options:
        assert option not in _RENOVATE_WITH_VALUE, f"{option} needs '=value'"
        assert option.split("=")[0] in RENOVATE_OPTIONS[kind], f"Renovate refuses {option}"
    return kind, options, [a for a in args if not a.startswith("-")]


PIP_TOOLS_NOT_FOUND = """\
  WARNING: Location 'file:///opt/pypi-more/simple/six/' is ignored: it is neither a file nor a directory.
  ERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: 0.9.0, 0.9.1, 1.0.0, 1.1.0, 1.2.0, 1.16.0, 1.17.0)
Traceback (most recent call last):
  File "/x/pip/_vendor/resolvelib/resolvers/resolution.py", line 429, in resolve
    self._add_to_criteria(self.state.criteria, r, parent=None)
pip._vendor.resolvelib.resolvers.exceptions.ResolutionImpossible: [RequirementInformation(requirement=SpecifierRequirement('six==99.0'), parent=None)]
pip._internal.exceptions.DistributionNotFound: No matching distribution found for six==99.0
"""

PIP_TOOLS_CONFLICT = """\
  ERROR: Cannot install -r d.in (line 1) and numpy==1.21.0 because these package versions have conflicting dependencies.
Traceback (most recent call last):
  File "/x/resolver.py", line 98, in resolve
pip._vendor.resolvelib.resolvers.exceptions.ResolutionImpossible: [RequirementInformation(requirement=SpecifierRequirement('numpy==1.21.0'), parent=None), RequirementInformation(requirement=SpecifierRequirement('numpy>=1.23.2; python_version == "3.11"'), parent=LinkCandidate('file:///opt/pypi-more/files/pandas-2.2.3-cp311-cp311-manylinux_2_17_x86_64.whl#sha256=c1 (from file:///opt/pypi-more/simple/pandas/index.html)'))]

The above exception was the direct cause of the following exception:
pip._internal.exceptions.DistributionNotFound: ResolutionImpossible: for help visit https://pip.pypa.io/
"""

UV_CONFLICT = """\
error: No solution found when resolving dependencies
  cause: Because pandas==2.2.3 depends on numpy>=1.23.2 and you require pandas==2.2.3, we can conclude that you require numpy>=1.23.2.
         And because you require numpy==1.21.0, we can conclude that your requirements are unsatisfiable.
"""

UV_CONFLICT_NEW = """\
  × No solution found when resolving dependencies:
  ╰─▶ Because there is no version of six==99.0 and you require six==99.0, we can conclude that your
      requirements are unsatisfiable.
"""


# --- pure parts (fast) --------------------------------------------------------------------------


def test_trim_pip_not_found():
    reason = installers.tool_reason(PIP_TOOLS_NOT_FOUND)
    assert reason.startswith("Could not find a version that satisfies the requirement six==99.0")
    assert "(from 7 versions: 0.9.0 ... 1.1.0, 1.2.0, 1.16.0, 1.17.0)" in reason
    assert "Traceback" not in reason and "WARNING" not in reason and "\n" not in reason


def test_trim_pip_conflict_names_both_sides():
    reason = installers.tool_reason(PIP_TOOLS_CONFLICT)
    assert reason.startswith("Cannot install -r d.in (line 1) and numpy==1.21.0")
    assert "you asked for numpy==1.21.0" in reason
    assert 'pandas 2.2.3 requires numpy>=1.23.2; python_version == "3.11"' in reason


def test_trim_uv_messages():
    assert installers.tool_reason(UV_CONFLICT) == (
        "Because pandas==2.2.3 depends on numpy>=1.23.2 and you require pandas==2.2.3, we can "
        "conclude that you require numpy>=1.23.2. And because you require numpy==1.21.0, we can "
        "conclude that your requirements are unsatisfiable."
    )
    assert installers.tool_reason(UV_CONFLICT_NEW).startswith(
        "Because there is no version of six==99.0"
    )


# What the installers said when an environment build failed (uv 0.13, pip 25): the same
# trimming as the resolvers' (installers.tool_reason, the one).
UV_HASH_MISMATCH = f"""\
Using Python 3.11.7 environment at: v
Resolved 1 package in 77ms
error: Failed to download `six==1.17.0`
  cause: Hash mismatch for `six==1.17.0`

         Expected:
           sha256:{'0' * 64}

         Computed:
           sha256:{'4721' * 16}
"""

PIP_INSTALL_NOT_FOUND = """\
WARNING: Location 'file:///x/simple/six/' is ignored: it is neither a file nor a directory.
ERROR: Ignored the following versions that require a different python version: 1.18.0 Requires-Python >=3.12
ERROR: Could not find a version that satisfies the requirement six==99.0 (from versions: 1.5.0, 1.6.0, 1.7.0, 1.8.0, 1.9.0, 1.16.0, 1.17.0)
ERROR: No matching distribution found for six==99.0
"""


def test_an_installers_failure_is_trimmed_as_a_resolvers():
    assert installers.tool_reason(UV_HASH_MISMATCH) == (
        f"Hash mismatch for `six==1.17.0` Expected: sha256:{'0' * 64} Computed: "
        f"sha256:{'4721' * 16}")
    # pip's note on versions for other Pythons is noise before the reason.
    assert installers.tool_reason(PIP_INSTALL_NOT_FOUND) == (
        "Could not find a version that satisfies the requirement six==99.0 (from 7 versions: "
        "1.5.0 ... 1.8.0, 1.9.0, 1.16.0, 1.17.0); No matching distribution found for six==99.0")
    # A tool that said nothing: the caller's words (an exit code, "the resolver failed ...").
    assert installers.tool_reason("\n  \n", "exit code 1") == "exit code 1"
    assert installers.tool_reason("Killed") == "Killed"


def test_header_is_the_resolvers_own_and_renovate_and_dependabot_read_it():
    extra = ["--no-emit-index-url", "-v", "-c", "c.txt", "--cache-dir", "/tmp/x", "-P", "six"]
    options = resolvers.header.options(extra)
    invocation = "lockguard lock requirements.in -P six==1.17.0 --resolver pip-tools"
    header = resolvers._header("pip-tools", "requirements.txt", "requirements.in", options,
                             "pip-tools 7.5.2, pip 25.2, Python 3.11", invocation, [], False)
    kind, args, sources = renovate_reads(header)
    assert kind == "pip-compile" and sources == ["requirements.in"]
    assert args == ["--allow-unsafe", "--constraint=c.txt", "--generate-hashes",
                    "--no-emit-index-url", "--output-file=requirements.txt", "--strip-extras"]
    # Dependabot: "autogenerated by pip-c" keeps its header on; it finds the lock of an .in by
    # the --output-file line that ends in the .in's name.
    assert "autogenerated by pip-c" in header
    assert re.search(r"--output-file[=\s]+.*\srequirements\.in\s*$", header, re.M)
    assert f"#   {invocation}\n" in header  # the lockguard command, -P and --resolver included
    assert lock_writer(header + "six==1.17.0\n") == "pip-tools"

    header = resolvers._header("uv", "requirements.txt", "requirements.in", [],
                             "uv 0.13.9, Python 3.11", "lockguard lock requirements.in "
                             "--resolver uv", [], False)
    assert header.startswith("# This file was autogenerated by uv via the following command:\n"
                             "#    uv pip compile ")
    kind, args, sources = renovate_reads(header)
    assert kind == "uv" and sources == ["requirements.in"]
    # what lockguard ran uv with, nothing pip-compile-only (--strip-extras, --allow-unsafe)
    assert args == ["--generate-hashes", "--emit-index-url", "--output-file=requirements.txt"]
    assert "pip-compile" not in header
    assert lock_writer(header + "six==1.17.0\n") == "uv"


def test_header_redacts_index_credentials():
    options = resolvers.header.options(["--extra-index-url", "https://me:s3cret@pypi.corp/simple",
                                       "-i", "https://tok3n@pypi.corp/simple"])
    assert options == ["--extra-index-url=https://me:****@pypi.corp/simple",
                       "--index-url=https://****@pypi.corp/simple"]


def test_lock_writer_and_the_default_resolver(tmp_path):
    pip_compile = ("#\n# This file is autogenerated by pip-compile with Python 3.11\n"
                   "# by the following command:\n#\n#    pip-compile requirements.in\n#\n")
    uv = ("# This file was autogenerated by uv via the following command:\n"
          "#    uv pip compile requirements.in -o requirements.txt\n")
    # lockguard before this header followed the resolver: pip-compile's words over a uv resolve
    old_lockguard_uv = pip_compile + "# Written by lockguard 0.1.0 (uv 0.13.9) via:\n#   x\n"
    cases = {"pip": (pip_compile, "pip-tools"), "uv": (uv, "uv"),
             "old": (old_lockguard_uv, "uv"), "bom": ("\ufeff" + uv, "uv"),
             "bare": ("", None), "late": ("six==1.0\n# autogenerated by pip-compile\n", None),
             "other": ("# This file is autogenerated by poetry\n", None)}
    for name, (head, writer) in cases.items():
        assert lock_writer(head + "six==1.17.0\n") == writer, name
        lock = tmp_path / f"{name}.txt"
        lock.write_text(head + "six==1.17.0\n", encoding="utf-8")
        assert resolvers.default_resolver(lock) == (writer or "uv"), name
    assert resolvers.default_resolver(None) == "uv"
    assert resolvers.default_resolver(tmp_path / "missing.txt") == "uv"


def _inputs(tmp_path, files: dict[str, str]):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    return read_requirements_input(tmp_path / next(iter(files)))


def test_lines_of_requirements_in_that_rule_an_upgrade_out(tmp_path):
    inputs = _inputs(tmp_path, {
        "requirements.in": "--extra-index-url https://example.org/simple\n"
                           "-r reqs/base.in\n-c cons.txt\n"
                           "NumPy[dev]==1.26.4 ; python_version >= '3'\n"
                           "pandas\nscipy<1.14\nold==1.0 ; python_version < '3'\n",
        "reqs/base.in": "torch==2.13.0\n-r ../requirements.in\n",  # a cycle, followed once
        "cons.txt": "jax==0.10.2\n",
    })
    assert [p.name for p in inputs.files] == ["requirements.in", "base.in", "cons.txt"]
    assert [(o.option, o.value) for o in inputs.options()] == [
        ("extra-index-url", "https://example.org/simple")]

    def blocked(*upgrades):
        return [b.refusal() for b in resolvers.blocking_lines(inputs, upgrades)]

    assert blocked("numpy==2.0.2") == [
        f"{tmp_path}/requirements.in:4 pins NumPy[dev]==1.26.4 ; python_version >= \"3\", which "
        "rules out -P numpy==2.0.2: loosen it there (e.g. NumPy>=1.26.4) and lock again, or "
        "write NumPy[dev]==2.0.2 ; python_version >= \"3\" there and lock without -P"]
    assert blocked("numpy") == [
        f"{tmp_path}/requirements.in:4 pins NumPy[dev]==1.26.4 ; python_version >= \"3\", so "
        "-P numpy cannot move it: loosen it there (e.g. NumPy>=1.26.4) and lock again"]
    assert blocked("torch==2.14.1")[0].startswith(f"{tmp_path}/reqs/base.in:1 pins torch==2.13.0")
    assert blocked("jax>=0.11")[0].startswith(f"{tmp_path}/cons.txt:1 pins jax==0.10.2")
    assert blocked("scipy==1.14.1")[0].startswith(
        f"{tmp_path}/requirements.in:6 requires scipy<1.14, which rules out -P scipy==1.14.1: "
        "widen it there")
    # allowed: inside the pin or the range, an unpinned package, two ranges, a marker that
    # does not hold here
    assert blocked("numpy==1.26.4", "numpy<2", "pandas==2.2.3", "scipy>=1.13",
                   "old==2.0", "torch") == [blocked("torch")[0]]
    assert blocked("numpy==1.26.4", "numpy<2", "pandas==2.2.3", "scipy>=1.13", "old==2.0") == []
    [block] = resolvers.blocking_lines(inputs, ["numpy==2.0.2"])
    assert block.relaxed_line() == 'NumPy[dev]==2.0.2 ; python_version >= "3"'


def test_pip_compile_runs_without_pips_index_settings(monkeypatch):
    # pip's configuration says where this machine gets packages: none of it may reach a lock.
    # How the network is reached (a certificate, a proxy) is passed on from it.
    monkeypatch.setattr(installers, "pip_config", lambda: {
        "extra-index-url": "file:///machine/simple", "find-links": "/machine/wheels",
        "constraint": "/machine/cap.txt", "cert": "/corp/ca.pem", "proxy": "http://proxy:3128",
        "index-url": "https://mirror.corp/simple"})
    for name, value in {"PIP_FIND_LINKS": "/machine/wheels", "PIP_INDEX_URL": "https://x/simple",
                        "PIP_NO_INDEX": "1", "PIP_CONSTRAINT": "/machine/cap.txt",
                        "PIP_NO_INPUT": "1"}.items():
        monkeypatch.setenv(name, value)
    env = piptools.env()
    assert env["PIP_CONFIG_FILE"] == os.devnull
    assert all(env[k] is None for k in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_NO_INDEX",
                                        "PIP_CONSTRAINT"))
    assert env["PIP_CERT"] == "/corp/ca.pem" and env["PIP_PROXY"] == "http://proxy:3128"
    assert "PIP_NO_INPUT" not in env  # left as run_tool sets it
    assert not {"PIP_EXTRA_INDEX_URL", "PIP_INDEX_URL"} & {k for k, v in env.items() if v}


def test_propose_rejects_bad_requests_before_resolving(tmp_path):
    (tmp_path / "requirements.in").write_text("six\n")
    (tmp_path / "requirements.txt").write_text(f"six==1.16.0 \\\n    --hash=sha256:{'ab' * 32}\n")
    args = (tmp_path / "requirements.in", tmp_path / "requirements.txt")
    with pytest.raises(ResolveError, match="torch is not pinned in"):
        resolvers.propose(*args, ["torch==2.14.1"], tmp_path / "cache")
    with pytest.raises(ResolveError, match="is not a requirement"):
        resolvers.propose(*args, ["six=="], tmp_path / "cache")
    with pytest.raises(ResolveError, match="nothing to propose"):
        resolvers.propose(*args, [], tmp_path / "cache")
    with pytest.raises(ResolveError, match="does not exist"):
        resolvers.propose(tmp_path / "missing.in", args[1], ["six"], tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_propose_reads_the_current_lock_with_the_lock_parser(tmp_path):
    # The pins come from lockguard.locks.parser, not a pattern of its own: a lock it refuses is
    # refused here too, naming the line, and nothing is resolved.
    (tmp_path / "requirements.in").write_text("six\n")
    (tmp_path / "requirements.txt").write_text("six==1.16.0 \\\n    --hash=sha256:ab\n")
    with pytest.raises(LockError, match=r"requirements.txt:1: bad --hash value"):
        resolvers.propose(tmp_path / "requirements.in", tmp_path / "requirements.txt", ["six"],
                     tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_uv_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(installers, "find_uv", lambda: None)
    (tmp_path / "requirements.in").write_text("six\n")
    with pytest.raises(ResolveError, match=r"^--resolver uv needs the uv command, .*reinstall "
                                           r"lockguard, or pass --resolver pip-tools\)$"):
        resolvers.compile(tmp_path / "requirements.in", tmp_path / "out.txt", resolver="uv")
    assert not (tmp_path / "out.txt").exists()


# --- uv resolving wheels built here (fast, no network) ----------------------------------------


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    """alpha 1.0 and 2.0, gamma 1.0 and 2.0 (which needs alpha>=2): real wheels in a folder."""
    root = tmp_path_factory.mktemp("wheelhouse")
    build_wheels({"alpha": ("1.0", "", (), None), "gamma": ("1.0", "", (), None)},
                 root / "wheels")
    build_wheels({"alpha": ("2.0", "", (), None), "gamma": ("2.0", "", ("alpha>=2",), None)},
                 root / "wheels")
    return root / "wheels"


@pytest.fixture()
def local_project(tmp_path, wheelhouse, monkeypatch):
    """A project whose wheels are in ./wheels; pip's configuration and index variables name
    places that do not exist (a lock must not take them up, nor need them)."""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "wheels").symlink_to(wheelhouse)
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nextra-index-url = file:///nonexistent/pypi/simple\n"
                    "find-links = /nonexistent/wheels\n")
    env = {"PIP_CONFIG_FILE": str(conf), "PIP_FIND_LINKS": "/nonexistent/env-wheels",
           "PIP_EXTRA_INDEX_URL": "file:///nonexistent/env/simple",
           "LOCKGUARD_CACHE": str(tmp_path / "cache")}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    installers._pip_config.cache_clear()
    yield project
    installers._pip_config.cache_clear()


def index_lines(path: Path) -> list[str]:
    return [ln for ln in path.read_text().splitlines() if ln.startswith("-")]


def test_lock_keeps_the_locks_indexes_and_never_pips(local_project):
    """`lockguard lock` resolves from the lock's --find-links when requirements.in no longer
    says it, writes no index line of pip's configuration, and follows the lock's header."""
    inputs, lock = local_project / "requirements.in", local_project / "requirements.txt"
    inputs.write_text("--no-index\n--find-links wheels\nalpha\ngamma==1.0\n")
    proc = run_cli("lock", cwd=local_project)
    assert proc.returncode == 0, proc.stderr
    text = lock.read_text()
    assert text.startswith("# This file was autogenerated by uv via the following command:\n"
                           "#    uv pip compile --generate-hashes --emit-index-url "
                           "--emit-find-links --output-file=requirements.txt requirements.in\n")
    assert "#   lockguard lock requirements.in --resolver uv\n" in text
    assert index_lines(lock) == ["--find-links wheels"]
    assert pins(lock) == {"alpha": "2.0", "gamma": "1.0"}

    inputs.write_text("--no-index\nalpha\ngamma\n")  # the index now only in the lock
    proc = run_cli("lock", "-P", "gamma==2.0", cwd=local_project)
    assert proc.returncode == 0, proc.stderr
    assert pins(lock) == {"alpha": "2.0", "gamma": "2.0"}
    assert index_lines(lock) == ["--find-links wheels"]
    assert "--find-links=wheels --output-file=requirements.txt requirements.in" in lock.read_text()
    assert "#   lockguard lock requirements.in -P gamma==2.0 --resolver uv\n" in lock.read_text()
    assert "nonexistent" not in lock.read_text()


def test_lock_refuses_an_upgrade_requirements_in_rules_out(local_project):
    inputs, lock = local_project / "requirements.in", local_project / "requirements.txt"
    inputs.write_text("--no-index\n--find-links wheels\n\nalpha==1.0\ngamma\n")
    assert run_cli("lock", cwd=local_project).returncode == 0
    before = snapshot(local_project)
    start = time.monotonic()
    proc = run_cli("lock", "-P", "alpha==2.0", cwd=local_project)
    assert proc.returncode == 2
    assert proc.stderr.splitlines()[-1] == (
        "lockguard: error: requirements.in:4 pins alpha==1.0, which rules out -P alpha==2.0: "
        "loosen it there (e.g. alpha>=1.0) and lock again, or write alpha==2.0 there and lock "
        "without -P")
    errors = [ln for ln in proc.stderr.splitlines() if "error" in ln]
    assert errors == [proc.stderr.splitlines()[-1]]
    assert time.monotonic() - start < 20  # refused before any resolve (a pip resolve: 28 s)
    assert snapshot(local_project) == before


def test_a_failed_resolve_names_the_pin_that_holds(local_project):
    inputs, lock = local_project / "requirements.in", local_project / "requirements.txt"
    inputs.write_text("--no-index\n--find-links wheels\nalpha==1.0\ngamma\n")
    resolvers.compile(inputs, lock)
    assert pins(lock) == {"alpha": "1.0", "gamma": "1.0"}
    before = digest(lock)
    with pytest.raises(ResolveError) as err:
        resolvers.compile(inputs, lock, upgrades=["gamma==2.0"])
    message = str(err.value)
    assert message.startswith("uv could not resolve ") and "\n" not in message
    assert "requirements.in:3 pins alpha==1.0: loosen it there" in message
    assert "(requested upgrade: gamma==2.0)" in message
    assert digest(lock) == before


def test_propose_reads_a_blocking_pin_as_the_upgrade(local_project):
    """What a bot's pull request does to the .in, in a copy: the proposal asks for the upgrade
    where an included file pins the old version, and says so; the user's files stay as they
    are and the annotations name them, not the copies."""
    (local_project / "reqs").mkdir()
    base = local_project / "reqs" / "base.in"
    base.write_text("alpha==1.0  # pinned by hand\n")
    inputs, lock = local_project / "requirements.in", local_project / "requirements.txt"
    inputs.write_text("--no-index\n--find-links wheels\n-r reqs/base.in\ngamma==1.0\n")
    resolvers.compile(inputs, lock)
    before = snapshot(local_project)
    cache = local_project.parent / "proposals"
    proposal = resolvers.propose(inputs, lock, ["alpha==2.0"], cache)
    assert proposal.resolver == "uv" and proposal.path.is_relative_to(cache)
    assert pins(proposal.path) == {"alpha": "2.0", "gamma": "1.0"}
    assert proposal.relaxed == (
        f"{base}:1 pins alpha==1.0: proposed with alpha==2.0 there (write that in base.in to "
        "adopt the proposed lock)",)
    text = proposal.path.read_text()
    assert "# via -r reqs/base.in" in text and "# via -r requirements.in" in text
    assert "# reqs/base.in:1 pins alpha==1.0: proposed with alpha==2.0 there" in text
    assert "#   lockguard propose alpha==2.0 --resolver uv\n" in text
    assert str(cache) not in text.replace(str(proposal.path), "") and "/tmp" not in text
    assert index_lines(proposal.path) == index_lines(lock)  # no index line grown
    assert snapshot(local_project) == before
    # the included file is part of the question: another pin there is another proposal
    assert resolvers.propose(inputs, lock, ["alpha==2.0"], cache).path == proposal.path
    base.write_text("alpha>=1.0\n")
    again = resolvers.propose(inputs, lock, ["alpha==2.0"], cache)
    assert again.path != proposal.path and again.relaxed == ()


class _Pin:
    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version


def test_outdated_rows_mark_prereleases_and_series(monkeypatch):
    versions = {
        "torch": ["2.15.0rc1", "2.14.1", "2.14.0", "2.13.1", "2.13.0", "2.12.0"],
        "numpy": ["2.1.0", "2.0.2", "1.26.4"],
        "jax": ["0.11.0.dev20260101", "0.10.2"],
    }
    monkeypatch.setattr(releases, "_index_versions", lambda name, _index, _t: (versions[name], None))
    pins = [_Pin("torch", "2.13.0+cpu"), _Pin("numpy", "2.1.0"), _Pin("jax", "0.10.2"),
            _Pin("nvidia-cudnn-cu12", "9.1.0.70"), _Pin("requests", "2.32.0")]
    rows = {row.name: row for row in outdated(pins)}
    assert set(rows) == {"jax", "numpy", "torch"}  # requests: no family; nvidia-*: skipped
    torch = rows["torch"]
    assert torch.latest_stable == "2.14.1" and torch.latest_in_series == "2.13.1"
    assert torch.latest_prerelease == "2.15.0rc1"
    assert torch.newer[0] == Release("2.15.0rc1", prerelease=True)
    assert [r.version for r in torch.newer] == ["2.15.0rc1", "2.14.1", "2.14.0", "2.13.1"]
    assert torch.is_outdated and "torch" in torch.families
    assert not rows["numpy"].is_outdated and rows["numpy"].newer == ()
    assert rows["jax"].newer == (Release("0.11.0.dev20260101", True),)
    assert not rows["jax"].is_outdated


def test_outdated_reports_lookup_failures(monkeypatch):
    monkeypatch.setattr(releases, "_index_versions",
                        lambda name, _i, _t: ([], f"{name}: No matching distribution found")
                        if name == "jax" else (["2.0.2"], None))
    rows = outdated([_Pin("jax", "0.10.2"), _Pin("numpy", "2.0.2")])
    assert [(r.name, r.error) for r in rows] == [("jax", "jax: No matching distribution found"),
                                                ("numpy", None)]
    with pytest.raises(ResolveError, match="could not look up any release"):
        outdated([_Pin("jax", "0.10.2")])


# --- real resolver runs (slow) ------------------------------------------------------------------


@pytest.fixture(scope="session")
def _session_cache(tmp_path_factory):
    # One lockguard cache per session, so the pinned pip-tools env is built once.
    return tmp_path_factory.mktemp("lockguard-cache")


@pytest.fixture()
def tool_cache(_session_cache, monkeypatch):
    monkeypatch.setenv("LOCKGUARD_CACHE", str(_session_cache))
    monkeypatch.delenv("LOCKGUARD_PIP_TOOLS_PYTHON", raising=False)
    return _session_cache


@pytest.fixture()
def project(tmp_path, tool_cache):
    (tmp_path / "requirements.in").write_text("six\npackaging\n")
    return tmp_path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def pins(path: Path) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", path.read_text(), re.MULTILINE))


@pytest.mark.slow
def test_compile_lock_pip_tools(project, tool_cache):
    messages: list[str] = []
    out = resolvers.compile(project / "requirements.in", project / "requirements.txt",
                       resolver="pip-tools", progress=messages.append)
    text = out.read_text()
    assert out == project / "requirements.txt"
    assert text.startswith("#\n# This file is autogenerated by pip-compile with Python 3.")
    assert ("#    pip-compile --allow-unsafe --generate-hashes --output-file=requirements.txt "
            "--strip-extras requirements.in\n") in text
    assert "#   lockguard lock requirements.in --resolver pip-tools\n" in text
    assert set(pins(out)) == {"six", "packaging"}
    assert text.count("--hash=sha256:") >= 2 and "# via -r requirements.in" in text
    assert any("pip-tools" in m for m in messages)
    tools = [p for p in (tool_cache / "tools").glob(f"pip-tools-{piptools.PIP_TOOLS_VERSION}-pip-{piptools.PIP_VERSION}-*") if p.is_dir()]
    assert len(tools) == 1 and (tools[0] / ".complete").is_file()
    assert sorted(p.name for p in project.iterdir()) == ["requirements.in", "requirements.txt"]
    # re-resolved without --resolver: the tool its header names
    resolvers.compile(project / "requirements.in", out, progress=messages.append)
    assert out.read_text().startswith("#\n# This file is autogenerated by pip-compile")


@pytest.mark.slow
def test_failed_resolve_leaves_the_lock_byte_for_byte(project):
    lock = project / "requirements.txt"
    resolvers.compile(project / "requirements.in", lock, resolver="pip-tools")
    before = digest(lock)
    (project / "requirements.in").write_text("six==99.0\n")
    with pytest.raises(ResolveError) as err:
        resolvers.compile(project / "requirements.in", lock)
    message = str(err.value)
    assert message.startswith("pip-tools could not resolve")  # the lock's own resolver
    assert "Could not find a version that satisfies the requirement six==99.0" in message
    assert "\n" not in message and "Traceback" not in message and len(message) < 700
    assert digest(lock) == before
    assert sorted(p.name for p in project.iterdir()) == ["requirements.in", "requirements.txt"]


@pytest.mark.slow
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_upgrade_package_keeps_other_pins(project, resolver):
    lock = project / "requirements.txt"
    (project / "requirements.in").write_text("six\npackaging\n")
    (project / "requirements.txt").write_text("six==1.16.0\npackaging==24.2\n")  # a seed
    resolvers.compile(project / "requirements.in", lock, resolver=resolver)
    assert pins(lock) == {"six": "1.16.0", "packaging": "24.2"}  # existing pins are kept
    resolvers.compile(project / "requirements.in", lock, upgrades=["six"])
    assert pins(lock)["packaging"] == "24.2" and pins(lock)["six"] != "1.16.0"
    resolvers.compile(project / "requirements.in", lock, upgrades=["packaging<25"])
    assert pins(lock)["packaging"] == "24.2"
    assert lock_writer(lock.read_text()) == resolver  # kept by the header, run after run
    before = digest(lock)
    with pytest.raises(ResolveError, match=r"requested upgrade: six==99"):
        resolvers.compile(project / "requirements.in", lock, upgrades=["six==99"])
    assert digest(lock) == before


@pytest.mark.slow
def test_propose_lock_leaves_user_files_alone(project, tool_cache):
    inputs, lock = project / "requirements.in", project / "requirements.txt"
    lock.write_text("six==1.16.0\npackaging==24.2\n")
    resolvers.compile(inputs, lock, resolver="pip-tools")
    before = {p.name: digest(p) for p in project.iterdir()}
    cache = tool_cache / "proposal-test"
    proposal = resolvers.propose(inputs, lock, ["six==1.17.0"], cache)
    assert proposal.resolver == "pip-tools"  # the lock's header names it
    assert proposal.path.is_relative_to(cache) and proposal.path.name == "requirements.txt"
    assert pins(proposal.path) == {"six": "1.17.0", "packaging": "24.2"}
    assert "--output-file=requirements.txt" in proposal.path.read_text()
    assert "#   lockguard propose six==1.17.0 --resolver pip-tools\n" in proposal.path.read_text()
    assert {p.name: digest(p) for p in project.iterdir()} == before
    # content-addressed: the same question is answered from the cache
    assert resolvers.propose(inputs, lock, ["six==1.17.0"], cache) == proposal
    with pytest.raises(ResolveError, match="could not resolve"):
        resolvers.propose(inputs, lock, ["six==99.0"], cache)
    assert {p.name: digest(p) for p in project.iterdir()} == before


@pytest.mark.slow
def test_uv_and_pip_tools_pin_alike_under_their_own_headers(project):
    assert installers.find_uv(), "uv is in the test extra: pip install -e '.[test]'"
    try:
        uv_lock = resolvers.compile(project / "requirements.in", project / "uv.txt", resolver="uv")
    except ResolveError as exc:
        if re.search(r"connect|network|dns|timed out|certificate|proxy", str(exc), re.I):
            pytest.skip(f"uv cannot reach the index: {exc}")
        raise
    pip_lock = resolvers.compile(project / "requirements.in", project / "pip.txt",
                            resolver="pip-tools")
    uv_text, pip_text = uv_lock.read_text(), pip_lock.read_text()
    assert renovate_reads(uv_text)[0] == "uv" and renovate_reads(pip_text)[0] == "pip-compile"
    assert "--output-file=uv.txt" in uv_text and "--resolver uv" in uv_text
    assert pins(uv_lock) == pins(pip_lock)
    # the same index options (none: requirements.in names none, and pip's configuration
    # is not the lock's)
    options = lambda t: [ln for ln in t.splitlines() if ln.startswith("--")]  # noqa: E731
    assert options(uv_text) == options(pip_text) == []
    assert "--hash=sha256:" in uv_text and "# via -r requirements.in" in uv_text
    before = digest(uv_lock)
    (project / "requirements.in").write_text("six==99.0\n")
    with pytest.raises(ResolveError, match="six==99.0"):
        resolvers.compile(project / "requirements.in", uv_lock, resolver="uv")
    assert digest(uv_lock) == before


@pytest.mark.slow
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_pips_configuration_does_not_shape_the_lock(project, monkeypatch, resolver):
    """pip's constraint files and indexes are the machine's: a lock resolves without them."""
    assert resolver != "uv" or installers.find_uv(), "uv is in the test extra"
    cap = project / "cap.txt"
    cap.write_text("six<1.17\n")
    conf = project / "pip.conf"
    conf.write_text(f"[global]\nconstraint = {cap}\n"
                    "extra-index-url = file:///nonexistent/simple\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(conf))
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))
    installers._pip_config.cache_clear()
    try:
        lock = resolvers.compile(project / "requirements.in", project / "requirements.txt",
                            resolver=resolver)
        assert pins(lock)["six"] != "1.16.0"
        assert "nonexistent" not in lock.read_text() and "cap.txt" not in lock.read_text()
    finally:
        installers._pip_config.cache_clear()


@pytest.mark.slow
def test_pip_tools_keeps_the_locks_indexes_and_never_pips(local_project, _session_cache,
                                                          monkeypatch):
    """As test_lock_keeps_the_locks_indexes_and_never_pips, with pip-compile."""
    monkeypatch.setenv("LOCKGUARD_CACHE", str(_session_cache))  # the pip-tools env, built once
    inputs, lock = local_project / "requirements.in", local_project / "requirements.txt"
    inputs.write_text("--no-index\n--find-links wheels\nalpha\ngamma==1.0\n")
    proc = run_cli("lock", "--resolver", "pip-tools", cwd=local_project)
    assert proc.returncode == 0, proc.stderr
    assert index_lines(lock) == ["--find-links wheels"]
    inputs.write_text("--no-index\nalpha\ngamma\n")
    proc = run_cli("lock", "-P", "gamma==2.0", cwd=local_project)  # no --resolver: the header's
    assert proc.returncode == 0, proc.stderr
    text = lock.read_text()
    assert pins(lock) == {"alpha": "2.0", "gamma": "2.0"}
    assert index_lines(lock) == ["--find-links wheels"]
    assert ("#    pip-compile --allow-unsafe --find-links=wheels --generate-hashes "
            "--output-file=requirements.txt --strip-extras requirements.in\n") in text
    assert "#   lockguard lock requirements.in -P gamma==2.0 --resolver pip-tools\n" in text
    assert "nonexistent" not in text
    # a proposal through a copy of the input that names the folder itself
    inputs.write_text("--no-index\n--find-links wheels\nalpha\ngamma==2.0\n")
    proposal = resolvers.propose(inputs, lock, ["gamma==1.0"], local_project.parent / "proposals")
    assert proposal.resolver == "pip-tools" and len(proposal.relaxed) == 1
    assert pins(proposal.path) == {"alpha": "2.0", "gamma": "1.0"}
    assert index_lines(proposal.path) == ["--find-links wheels"]
    assert "# via -r requirements.in" in proposal.path.read_text()


@pytest.mark.slow
def test_outdated_lists_newer_numpy():
    rows = outdated([_Pin("numpy", "1.26.4")])
    assert len(rows) == 1
    row: OutdatedRow = rows[0]
    assert row.error is None, row.error
    assert row.is_outdated
    newer = [r.version for r in row.newer]
    assert "2.0.2" in newer and "1.26.4" not in newer
    assert row.latest_in_series == "1.26.4"
    from packaging.version import Version
    assert Version(row.latest_stable) >= Version("2.0.2")


def test_outdated_text_names_each_lock_above_its_rows(tmp_path):
    from lockguard.locks.ref import LockRef
    from lockguard.locks.parser import parse_lock_text
    from lockguard.report import listings

    a = LockRef(tmp_path / "torch.txt", parse_lock_text("torch==2.3.0\n", "torch.txt"))
    b = LockRef(tmp_path / "jax.txt", parse_lock_text("jax==0.4.30\n", "jax.txt"))
    row = OutdatedRow(name="torch", current="2.3.0", families=("torch",),
                      newer=(Release("2.4.0", False),), latest_stable="2.4.0",
                      latest_in_series="2.3.1")
    jrow = OutdatedRow(name="jax", current="0.4.30", families=("jax",),
                       latest_stable="0.4.30", latest_in_series="0.4.30")
    text = listings.outdated([(a, row), (b, jrow)], "text")
    lines = text.splitlines()
    assert lines[0].endswith("torch.txt:") and lines[1].lstrip().startswith("torch ")
    assert lines[2] == "" and lines[3].endswith("jax.txt:") and "up to date" in lines[4]
