"""The sandbox (lockguard/sandbox.py, lockguard/landlock.py): what a lock's code can reach.

Each attack of the hostile review that needs no framework is a probe run the way a training is
run (process.run with the spec envs.base.confined makes), once per layer this machine offers:
reading another process's /proc/<pid>/environ, ~/.netrc, ~/.aws/credentials and the
checkout's .git/config; writing into lockguard's install, the cache, the repository and the
goldens; a TCP connection to a listener on 127.0.0.1 (loopback only: no test here sends
anything further). Positive controls in the same probe (its scratch is writable, the project's
files readable) keep a probe that fails for another reason from passing as "denied".
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from lockguard import integrity, process, sandbox
from lockguard.allowlist import own_secrets
from lockguard.envs.base import confined

SECRET = "s3cr3t-value-of-the-ci-job"
LAYERS = ("auto", "landlock")

PROBE = textwrap.dedent("""
    import json, os, socket, sys
    spec = json.loads(sys.argv[1])
    seen = {}

    def attempt(name, action):
        try:
            result = action()
            seen[name] = "allowed" if result is None else ("allowed", str(result)[:80])
        except OSError as exc:
            seen[name] = f"denied: {exc.strerror or exc}"

    def read(path):
        with open(path, "rb") as f:
            data = f.read()
        if spec["secret"].encode() in data:
            return "SECRET " + path
        return None

    def write(path):
        with open(path, "w") as f:
            f.write("x")

    def every_environ():
        found = []
        for pid in os.listdir("/proc"):
            if pid.isdigit() and int(pid) != os.getpid():
                try:
                    with open(f"/proc/{pid}/environ", "rb") as f:
                        if spec["secret"].encode() in f.read():
                            found.append(pid)
                except OSError:
                    pass
        return ("found in", found) if found else "nothing found"

    attempt("environ of the holder", lambda: read(f"/proc/{spec['holder']}/environ"))
    attempt("environ of the parent", lambda: read(f"/proc/{os.getppid()}/environ"))
    seen["every environ"] = every_environ()
    attempt("netrc", lambda: read(os.path.join(spec["home"], ".netrc")))
    attempt("aws", lambda: read(os.path.join(spec["home"], ".aws", "credentials")))
    attempt("git config", lambda: read(os.path.join(spec["repo"], ".git", "config")))
    for name in ("install", "cache", "repository", "golden"):
        attempt(f"write {name}", lambda name=name: write(spec["write"][name]))
    attempt("tcp loopback", lambda: socket.create_connection(("127.0.0.1", spec["port"]), 2))
    # A routable address (TEST-NET-1, which nothing answers): refused at once by the sandbox
    # (no packet leaves); unsandboxed, the connect would only time out.
    attempt("tcp routable", lambda: socket.create_connection(("192.0.2.1", 9), 1))
    attempt("scratch", lambda: write(os.path.join(os.environ["HOME"], "x")))
    attempt("project file", lambda: read(os.path.join(spec["repo"], "train.py")))
    seen["home"] = os.environ["HOME"]
    print(json.dumps(seen))
""")


def available(layer: str) -> sandbox.Sandbox:
    found = sandbox.resolve("auto")
    if not found.active:
        pytest.fail(f"no sandbox on this machine: {found.missing}")  # .ci/run installs bwrap
    if layer == "landlock":
        if not found.landlock:
            pytest.fail(f"no Landlock here: {found.missing}")
        return sandbox.Sandbox("auto", (found.landlock, None, "left out by the test"))
    return found


@pytest.fixture
def world(tmp_path):
    """A CI job's world: a secret in a process's environment and in HOME's files, a checkout
    with credentials in .git/config, a cache, goldens, and a listener on loopback."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".netrc").write_text(f"machine github.com login x password {SECRET}\n")
    (home / ".aws" / "credentials").write_text(f"[default]\naws_secret_access_key={SECRET}\n")
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "config").write_text(
        f'[http "https://github.com/"]\n\textraheader = AUTHORIZATION: basic {SECRET}\n')
    (repo / "train.py").write_text("def run(steps, seed):\n    return [1.0] * steps\n")
    (repo / "golden").mkdir()
    cache = tmp_path / "cache" / "venvs"
    cache.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"],
                              env={**os.environ, "GITHUB_TOKEN": SECRET})
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    marker = Path(integrity.PACKAGE) / f"_probe_{os.getpid()}"
    try:
        yield {"home": str(home), "repo": str(repo), "holder": holder.pid, "secret": SECRET,
               "port": listener.getsockname()[1],
               "write": {"install": str(marker), "cache": str(cache / "poisoned"),
                         "repository": str(repo / "lock.txt"),
                         "golden": str(repo / "golden" / "s.json")}}
    finally:
        holder.kill()
        holder.wait()
        listener.close()
        marker.unlink(missing_ok=True)


def probe(tmp_path: Path, world: dict, layer: str) -> dict:
    scratch = tmp_path / "run"
    scratch.mkdir()
    script = scratch / "probe.py"
    script.write_text(PROBE)
    env, spec = confined(available(layer), scratch, {"PATH": os.environ["PATH"]},
                         sys.executable, script=Path(world["repo"]) / "train.py",
                         project=Path(world["repo"]))
    assert spec is not None
    done = process.run([sys.executable, "-I", "-S", str(script), json.dumps(world)],
                       log=scratch / "probe.log", timeout=60, env=env, sandbox=spec)
    assert done.code == 0, done.output
    return json.loads(done.output.strip().splitlines()[-1])


@pytest.mark.parametrize("layer", LAYERS)
def test_a_sandboxed_process_reads_no_secret_writes_nothing_of_the_judge_and_has_no_tcp(
        tmp_path, world, layer):
    seen = probe(tmp_path, world, layer)
    # The controls: what a training needs still works.
    assert seen["scratch"] == "allowed" and seen["project file"] == "allowed", seen
    assert seen["home"].startswith(str(tmp_path / "run")), seen
    for name in ("environ of the holder", "environ of the parent", "netrc", "aws", "git config",
                 "write install", "write cache", "write repository", "write golden",
                 "tcp loopback"):
        assert seen[name].startswith("denied"), (name, seen[name])
    assert seen["every environ"] == "nothing found", seen
    assert seen["tcp routable"] in ("denied: Permission denied",
                                    "denied: Network is unreachable"), seen
    for path in world["write"].values():
        assert not os.path.exists(path), path


# Exclusive: its write into lockguard's installation is, to a check running beside it, the judge
# changing under it (integrity.JudgeChanged, exit 2).
@pytest.mark.exclusive
def test_without_the_sandbox_the_same_probe_reaches_everything(tmp_path, world):
    """The probe can fail: unsandboxed, each attack succeeds (what the review found)."""
    scratch = tmp_path / "run"
    scratch.mkdir()
    script = scratch / "probe.py"
    script.write_text(PROBE)
    done = process.run([sys.executable, "-I", "-S", str(script), json.dumps(world)],
                       log=scratch / "probe.log", timeout=60,
                       env={"PATH": os.environ["PATH"], "HOME": str(scratch)})
    seen = json.loads(done.output.strip().splitlines()[-1])
    assert seen["netrc"][0] == "allowed" and "SECRET" in seen["netrc"][1]
    assert seen["git config"][0] == "allowed"
    assert seen["write golden"] == "allowed" and seen["tcp loopback"][0] == "allowed"
    assert seen["every environ"][0] == "found in"


@pytest.mark.skipif(os.geteuid() != 0, reason="runs the probe as nobody, which needs root")
def test_the_sandbox_holds_for_an_unprivileged_user(tmp_path, world):
    """A hosted runner is no root: the same probe, its runner (process.run and the supervisor)
    started as nobody with the system's interpreter and a copy of lockguard it may read."""
    python = shutil.which("python3", path="/usr/bin:/bin")
    if python is None:
        pytest.fail("no /usr/bin/python3 to run the unprivileged probe with")
    base = Path(tempfile.mkdtemp(prefix="lockguard-sandbox-test-"))
    try:
        shutil.copytree(world["home"], base / "home")
        shutil.copytree(world["repo"], base / "repo")
        world = {**world, "home": str(base / "home"), "repo": str(base / "repo"),
                 "write": {**world["write"], "golden": str(base / "repo" / "golden" / "s.json"),
                           "repository": str(base / "repo" / "lock.txt")}}
        done = _as_nobody(base, python, world)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    described, line = done.stdout.strip().splitlines()[-2:]
    seen = json.loads(line)
    assert seen["scratch"] == "allowed", (described, seen)
    for name in ("environ of the holder", "netrc", "git config", "write golden",
                 "write repository", "tcp loopback"):
        assert seen[name].startswith("denied"), (described, name, seen[name])
    assert seen["every environ"] == "nothing found", (described, seen)


def _as_nobody(base: Path, python: str, world: dict) -> subprocess.CompletedProcess[str]:
    """The probe's runner started as nobody: everything below `base` readable by all (as a
    runner's checkout and home are to their user), lockguard copied there."""
    code = base / "code"
    shutil.copytree(integrity.PACKAGE, code / "lockguard",
                    ignore=shutil.ignore_patterns("__pycache__", "harness"))
    scratch = base / "run"
    scratch.mkdir()
    (scratch / "probe.py").write_text(PROBE)
    runner = textwrap.dedent(f"""
        import json, os, sys
        sys.path.insert(0, {str(code)!r})
        from pathlib import Path
        from lockguard import process, sandbox
        found = sandbox.resolve("required")
        found.require()
        policy = sandbox.Policy(read=({str(Path(python).resolve().parent.parent)!r},
                                      {str(code)!r}, {world['repo'] + '/train.py'!r}),
                                write=({str(scratch)!r},))
        done = process.run([{python!r}, "-I", "-S", {str(scratch / 'probe.py')!r},
                            sys.argv[1]], log=Path({str(scratch / 'probe.log')!r}),
                           timeout=60, env={{"PATH": "/usr/bin:/bin", "HOME": {str(scratch)!r}}},
                           sandbox=found.spec(policy))
        print(found.describe())
        print(done.output.strip().splitlines()[-1])
    """)
    subprocess.run(["chmod", "-R", "a+rwX", str(base)], check=True)
    return subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           python, "-I", "-c", runner, json.dumps(world)],
                          capture_output=True, text=True, timeout=120, cwd="/")


def test_required_without_a_sandbox_is_exit_2_with_the_fix():
    missing = sandbox.Sandbox("required", (0, None, "bwrap is not installed"))
    with pytest.raises(sandbox.SandboxError, match="bubblewrap") as caught:
        missing.require()
    assert "bwrap is not installed" in str(caught.value)
    sandbox.Sandbox("auto", (0, None, "none")).require()  # auto runs on, and says so
    assert sandbox.Sandbox("auto", (0, None, "none")).describe().startswith("none available")
    assert sandbox.Sandbox("off").describe().startswith("off")
    with pytest.raises(sandbox.SandboxError):
        sandbox.resolve("sometimes")


def test_an_unsandboxed_run_is_said_first_in_every_report():
    import xml.etree.ElementTree as ET

    from lockguard.report import Report, render
    from lockguard.report.markdown import render as markdown
    from lockguard.report.text import render as text

    report = Report(command="check", mode="golden", sandbox=sandbox.Sandbox("off").describe())
    assert text(report).splitlines()[0].startswith("⚠ sandbox off")
    assert "sandbox off" in markdown(report).split("\n\n")[1]
    html = render(report, "html")
    assert html.index('<section id="sandbox"><p class="warn">⚠ sandbox off') < html.index(
        'id="locks"')
    assert render(report, "github").splitlines()[0].startswith(
        "::warning title=lockguard%3A sandbox off")
    props = {p.get("name"): p.get("value") for p in ET.fromstring(
        render(report, "junit")).iter("property")}
    assert props["sandbox"].startswith("off")
    assert '"sandbox": "off' in render(report, "json")

    confined_report = Report(command="check", mode="golden", sandbox="landlock 7 (fs)")
    assert "⚠ sandbox" not in text(confined_report)
    assert "sandbox: landlock 7 (fs)" in text(confined_report)
    assert "⚠ sandbox" not in render(confined_report, "html")
    assert "sandbox: landlock 7 (fs)" in render(confined_report, "html")
    assert "sandbox" not in render(confined_report, "github")


def test_a_judge_changed_during_the_check_gives_no_verdict(tmp_path, monkeypatch):
    copy = tmp_path / "lockguard"
    shutil.copytree(integrity.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(integrity, "PACKAGE", copy)
    monkeypatch.setattr(integrity, "_taken", None)
    integrity.take()
    integrity.verify()  # unchanged: nothing to say
    with open(copy / "flows" / "acceptances.py", "a") as f:
        f.write("\n# appended by a training\n")
    with pytest.raises(integrity.JudgeChanged, match="acceptances.py changed"):
        integrity.verify()


def test_lockguard_keeps_no_credential_its_children_are_not_given():
    environ = {"GITHUB_TOKEN": "x", "AWS_SECRET_ACCESS_KEY": "x", "ACTIONS_RUNTIME_TOKEN": "x",
               "MY_DB_PASSWORD": "x", "PATH": "/usr/bin", "HOME": "/root",
               "PIP_INDEX_URL": "https://u:p@index/simple", "LOCKGUARD_INSTALLER_ENV": "MY_KEY",
               "MY_KEY": "x"}
    assert own_secrets(environ) == ["ACTIONS_RUNTIME_TOKEN", "AWS_SECRET_ACCESS_KEY",
                                    "GITHUB_TOKEN", "MY_DB_PASSWORD"]


@pytest.mark.slow
def test_a_run_stopped_by_the_sandbox_is_broken_naming_the_denied_path(tmp_path):
    """A scenario that writes into the goldens (or anything else outside its scratch) is
    refused by the kernel; the run fails, and its verdict says which path was denied."""
    from conftest import DATA, make_project, run_cli

    script = ("import pathlib\n\ndef run(steps, seed):\n"
              "    pathlib.Path(__file__).parent.joinpath('golden', 'forged.json')"
              ".write_text('{}')\n    return {'losses': [1.0] * steps}\n")
    project = make_project(tmp_path / "p", """
        lock = "lock.txt"
        scenarios = ["forger"]
        [scenario.forger]
        script = "forger.py"
        framework = "numpy"
        """, files={"forger.py": script}, locks={"lock.txt": DATA / "numpy-1.26.4.txt"})
    (project / "golden").mkdir()
    proc = run_cli("record", "--format", "json", "--sandbox", "required", cwd=project)
    assert proc.returncode == 1, proc.stderr
    [verdict] = json.loads(proc.stdout)["verdicts"]
    assert verdict["verdict"] == "broken"
    said = " ".join(verdict["reasons"]) + (verdict.get("error") or "")
    assert "Permission denied" in said or "Read-only file system" in said, said
    assert "golden/forged.json" in said, said
    assert not (project / "golden" / "forged.json").exists()
