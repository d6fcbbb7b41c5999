"""lockguard.locks.resolve and .outdated: fast tests of the pure parts, then real pip-compile / uv /
pip runs (slow).

The slow tests resolve small packages (six, packaging) through the indexes pip is configured
with on this machine; the pinned pip-tools env is built once per session in a temp cache.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest

from lockguard import installers
from lockguard.locks import outdated as releases, resolve
from lockguard.locks.model import LockError
from lockguard.locks.outdated import OutdatedRow, Release, outdated
from lockguard.locks.resolve import ResolveError, compile_lock, propose_lock

# Renovate's pip-compile manager reads the command to re-run from the header with this pattern
# (lib/modules/manager/pip-compile/common.ts, constraintLineRegex) and accepts only these options.
RENOVATE_HEADER = re.compile(r"^(#.*?\r?\n)+# {4}(?P<command>\S*)(?P<arguments> .*?)?\r?\n")
RENOVATE_OPTIONS = {"-v", "--all-extras", "--allow-unsafe", "--generate-hashes", "--no-emit-index-url",
                    "--emit-index-url", "--strip-extras", "--index-url", "--output-file", "--extra",
                    "--extra-index-url", "--resolver", "--constraint"}

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
    reason = resolve.trim_resolver_error(PIP_TOOLS_NOT_FOUND)
    assert reason.startswith("Could not find a version that satisfies the requirement six==99.0")
    assert "(from 7 versions: 0.9.0 ... 1.1.0, 1.2.0, 1.16.0, 1.17.0)" in reason
    assert "Traceback" not in reason and "WARNING" not in reason and "\n" not in reason


def test_trim_pip_conflict_names_both_sides():
    reason = resolve.trim_resolver_error(PIP_TOOLS_CONFLICT)
    assert reason.startswith("Cannot install -r d.in (line 1) and numpy==1.21.0")
    assert "you asked for numpy==1.21.0" in reason
    assert 'pandas 2.2.3 requires numpy>=1.23.2; python_version == "3.11"' in reason


def test_trim_uv_messages():
    assert resolve.trim_resolver_error(UV_CONFLICT) == (
        "Because pandas==2.2.3 depends on numpy>=1.23.2 and you require pandas==2.2.3, we can "
        "conclude that you require numpy>=1.23.2. And because you require numpy==1.21.0, we can "
        "conclude that your requirements are unsatisfiable."
    )
    assert resolve.trim_resolver_error(UV_CONFLICT_NEW).startswith(
        "Because there is no version of six==99.0"
    )


def test_header_is_pip_compiles_and_renovate_can_read_it():
    extra = ["--no-emit-index-url", "-v", "-c", "c.txt", "--cache-dir", "/tmp/x", "-P", "six"]
    header = resolve._header("requirements.txt", "requirements.in", extra,
                             "pip-tools 7.5.2, pip 25.2", "lockguard lock requirements.in")
    match = RENOVATE_HEADER.match(header)
    assert match and match["command"] == "pip-compile"
    args = match["arguments"].split()
    assert args == ["--allow-unsafe", "--constraint=c.txt", "--generate-hashes",
                    "--no-emit-index-url", "--output-file=requirements.txt", "--strip-extras",
                    "requirements.in"]
    assert all(a.split("=")[0] in RENOVATE_OPTIONS for a in args if a.startswith("-"))
    assert "#   lockguard lock requirements.in\n" in header


def test_propose_rejects_bad_requests_before_resolving(tmp_path):
    (tmp_path / "requirements.in").write_text("six\n")
    (tmp_path / "requirements.txt").write_text(f"six==1.16.0 \\\n    --hash=sha256:{'ab' * 32}\n")
    args = (tmp_path / "requirements.in", tmp_path / "requirements.txt")
    with pytest.raises(ResolveError, match="torch is not pinned in"):
        propose_lock(*args, ["torch==2.14.1"], tmp_path / "cache")
    with pytest.raises(ResolveError, match="is not a requirement"):
        propose_lock(*args, ["six=="], tmp_path / "cache")
    with pytest.raises(ResolveError, match="nothing to propose"):
        propose_lock(*args, [], tmp_path / "cache")
    with pytest.raises(ResolveError, match="does not exist"):
        propose_lock(tmp_path / "missing.in", args[1], ["six"], tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_propose_reads_the_current_lock_with_the_lock_parser(tmp_path):
    # The pins come from lockguard.locks.parser, not a pattern of its own: a lock it refuses is
    # refused here too, naming the line, and nothing is resolved.
    (tmp_path / "requirements.in").write_text("six\n")
    (tmp_path / "requirements.txt").write_text("six==1.16.0 \\\n    --hash=sha256:ab\n")
    with pytest.raises(LockError, match=r"requirements.txt:1: bad --hash value"):
        propose_lock(tmp_path / "requirements.in", tmp_path / "requirements.txt", ["six"],
                     tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_uv_missing_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(resolve, "find_uv", lambda: None)
    (tmp_path / "requirements.in").write_text("six\n")
    with pytest.raises(ResolveError, match=r"needs the uv command \(pip install uv\)"):
        compile_lock(tmp_path / "requirements.in", tmp_path / "out.txt", resolver="uv")
    assert not (tmp_path / "out.txt").exists()


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
    out = compile_lock(project / "requirements.in", project / "requirements.txt",
                       progress=messages.append)
    text = out.read_text()
    assert out == project / "requirements.txt"
    assert text.startswith("#\n# This file is autogenerated by pip-compile with Python 3.")
    assert ("#    pip-compile --allow-unsafe --generate-hashes --output-file=requirements.txt "
            "--strip-extras requirements.in\n") in text
    assert "#   lockguard lock" in text
    assert set(pins(out)) == {"six", "packaging"}
    assert text.count("--hash=sha256:") >= 2 and "# via -r requirements.in" in text
    assert any("pip-tools" in m for m in messages)
    tools = [p for p in (tool_cache / "tools").glob(f"pip-tools-{resolve.PIP_TOOLS_VERSION}-pip-{resolve.PIP_VERSION}-*") if p.is_dir()]
    assert len(tools) == 1 and (tools[0] / ".complete").is_file()
    assert sorted(p.name for p in project.iterdir()) == ["requirements.in", "requirements.txt"]


@pytest.mark.slow
def test_failed_resolve_leaves_the_lock_byte_for_byte(project):
    lock = project / "requirements.txt"
    compile_lock(project / "requirements.in", lock)
    before = digest(lock)
    (project / "requirements.in").write_text("six==99.0\n")
    with pytest.raises(ResolveError) as err:
        compile_lock(project / "requirements.in", lock)
    message = str(err.value)
    assert "Could not find a version that satisfies the requirement six==99.0" in message
    assert "\n" not in message and "Traceback" not in message and len(message) < 400
    assert digest(lock) == before
    assert sorted(p.name for p in project.iterdir()) == ["requirements.in", "requirements.txt"]


@pytest.mark.slow
def test_upgrade_package_keeps_other_pins(project):
    lock = project / "requirements.txt"
    (project / "requirements.in").write_text("six\npackaging\n")
    (project / "requirements.txt").write_text("six==1.16.0\npackaging==24.2\n")  # a seed
    compile_lock(project / "requirements.in", lock)
    assert pins(lock) == {"six": "1.16.0", "packaging": "24.2"}  # existing pins are kept
    compile_lock(project / "requirements.in", lock, upgrade_packages=["six"])
    assert pins(lock)["packaging"] == "24.2" and pins(lock)["six"] != "1.16.0"
    compile_lock(project / "requirements.in", lock, upgrade_packages=["packaging<25"])
    assert pins(lock)["packaging"] == "24.2"
    before = digest(lock)
    with pytest.raises(ResolveError, match=r"requested upgrade: six==99"):
        compile_lock(project / "requirements.in", lock, upgrade_packages=["six==99"])
    assert digest(lock) == before


@pytest.mark.slow
def test_propose_lock_leaves_user_files_alone(project, tool_cache):
    inputs, lock = project / "requirements.in", project / "requirements.txt"
    lock.write_text("six==1.16.0\npackaging==24.2\n")
    compile_lock(inputs, lock)
    before = {p.name: digest(p) for p in project.iterdir()}
    cache = tool_cache / "proposal-test"
    proposal = propose_lock(inputs, lock, ["six==1.17.0"], cache)
    assert proposal.is_relative_to(cache) and proposal.name == "requirements.txt"
    assert pins(proposal) == {"six": "1.17.0", "packaging": "24.2"}
    assert "--output-file=requirements.txt" in proposal.read_text()
    assert "#   lockguard propose six==1.17.0" in proposal.read_text()
    assert {p.name: digest(p) for p in project.iterdir()} == before
    # content-addressed: the same question is answered from the cache
    assert propose_lock(inputs, lock, ["six==1.17.0"], cache) == proposal
    with pytest.raises(ResolveError, match="could not resolve"):
        propose_lock(inputs, lock, ["six==99.0"], cache)
    assert {p.name: digest(p) for p in project.iterdir()} == before


@pytest.mark.slow
def test_uv_writes_the_same_lock_format(project):
    assert installers.find_uv(), "uv is in the test extra: pip install -e '.[test]'"
    try:
        uv_lock = compile_lock(project / "requirements.in", project / "uv.txt", resolver="uv")
    except ResolveError as exc:
        if re.search(r"connect|network|dns|timed out|certificate|proxy", str(exc), re.I):
            pytest.skip(f"uv cannot reach the index: {exc}")
        raise
    pip_lock = compile_lock(project / "requirements.in", project / "pip.txt")
    uv_text, pip_text = uv_lock.read_text(), pip_lock.read_text()
    assert RENOVATE_HEADER.match(uv_text)["command"] == "pip-compile"
    assert "--output-file=uv.txt" in uv_text and "--resolver uv" in uv_text
    assert pins(uv_lock) == pins(pip_lock)
    # the same index options as pip-compile, from pip's configuration
    options = lambda t: [ln for ln in t.splitlines() if ln.startswith("--")]  # noqa: E731
    assert options(uv_text) == options(pip_text)
    assert "--hash=sha256:" in uv_text and "# via -r requirements.in" in uv_text
    before = digest(uv_lock)
    (project / "requirements.in").write_text("six==99.0\n")
    with pytest.raises(ResolveError, match="six==99.0"):
        compile_lock(project / "requirements.in", uv_lock, resolver="uv")
    assert digest(uv_lock) == before


@pytest.mark.slow
@pytest.mark.parametrize("resolver", ["pip-tools", "uv"])
def test_pips_constraint_files_apply_to_both_resolvers(project, monkeypatch, resolver):
    assert resolver != "uv" or installers.find_uv(), "uv is in the test extra"
    cap = project / "cap.txt"
    cap.write_text("six<1.17\n")
    monkeypatch.setenv("PIP_CONSTRAINT", str(cap))  # as pip.conf's `constraint =` would
    installers.pip_config.cache_clear()
    try:
        lock = compile_lock(project / "requirements.in", project / "requirements.txt",
                            resolver=resolver)
        assert pins(lock)["six"] == "1.16.0"
        lock = compile_lock(project / "requirements.in", project / "free.txt", resolver=resolver,
                            use_pip_config=False)
        assert pins(lock)["six"] != "1.16.0"
    finally:
        monkeypatch.delenv("PIP_CONSTRAINT")
        installers.pip_config.cache_clear()


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
