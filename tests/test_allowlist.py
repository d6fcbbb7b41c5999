"""Trainings, installers and resolvers see only the allowlisted environment (lockguard/
allowlist.py): a lock-only pull request cannot read the CI job's secrets.

The unit tests read the allowlist's answers; the real ones run the CLI with secrets in its
environment: a user scenario reports which variables its training sees, and a local package
(a hashed sdist on a --find-links line, `allow_sdist = true`) records the environment its build
runs in (the installer's) and ships a .pth file that records the environment of every
interpreter start of the venv (the training's), which the A/B report then names.
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import sys
import tarfile
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from conftest import DATA, make_project, run_cli

from lockguard import allowlist
from lockguard.envs.base import HARNESS_SETTINGS, harness_env

SECRETS = {name: f"lg-secret-value-{name.lower()}" for name in (
    "GITHUB_TOKEN", "AWS_SECRET_ACCESS_KEY", "ACTIONS_RUNTIME_TOKEN", "MY_SECRET",
    "AWS_ACCESS_KEY_ID", "HF_TOKEN", "NVIDIA_API_KEY", "TF_VAR_db_password",
    "OMP_SECRET_TOKEN", "PIP_PASSWORD")}
# What a training may see (a locale, the home directory) and what only an installer may (a
# proxy setting, harmless here: it names no host lockguard reaches).
ALLOWED = {"LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": os.environ.get("HOME", "/root")}
INSTALL_ONLY = {"NO_PROXY": "lockguard-test.invalid"}
WATCHED = sorted([*SECRETS, *ALLOWED, *INSTALL_ONLY])


# ---------------------------------------------------------------------------------- the lists

def test_a_training_sees_its_families_and_nothing_else():
    environ = {**SECRETS, **ALLOWED, **INSTALL_ONLY, "PATH": "/usr/bin", "TMPDIR": "/tmp/x",
               "OMP_NUM_THREADS": "4", "CUDA_VISIBLE_DEVICES": "0", "XLA_FLAGS": "--x",
               "TF_ENABLE_ONEDNN_OPTS": "0", "NVIDIA_VISIBLE_DEVICES": "all",
               "PIP_INDEX_URL": "https://user:pw@index.example/simple",
               "PYTHONPATH": "/evil", "VIRTUAL_ENV": "/venv", "UNKNOWN_THING": "1",
               "ACTIONS_CACHE_URL": "https://x", "GITHUB_ACTIONS": "true"}
    seen = allowlist.training_env(environ)
    assert set(seen) == {"LANG", "LC_ALL", "HOME", "PATH", "TMPDIR", "OMP_NUM_THREADS",
                         "CUDA_VISIBLE_DEVICES", "XLA_FLAGS", "TF_ENABLE_ONEDNN_OPTS",
                         "NVIDIA_VISIBLE_DEVICES"}
    assert allowlist.withheld(environ) == len(environ) - len(seen)


def test_an_installer_also_gets_what_the_install_needs_and_still_no_secret(monkeypatch):
    environ = {**SECRETS, **ALLOWED, **INSTALL_ONLY, "PATH": "/usr/bin",
               "PIP_INDEX_URL": "https://user:pw@index.example/simple",
               "HTTPS_PROXY": "http://proxy:3128", "SSL_CERT_FILE": "/etc/ca.pem",
               "UV_CACHE_DIR": "/c", "UV_INDEX_URL": "https://elsewhere", "NETRC": "/n",
               "UV_CONFIG_FILE": "/x/uv.toml", "AWS_PROFILE": "ci"}
    seen = allowlist.install_env(environ)
    assert {"PIP_INDEX_URL", "HTTPS_PROXY", "SSL_CERT_FILE", "UV_CACHE_DIR", "NETRC",
            "NO_PROXY", "LANG", "HOME", "PATH"} <= set(seen)
    assert not set(seen) & {*SECRETS, "UV_INDEX_URL", "UV_CONFIG_FILE", "AWS_PROFILE"}
    # A credential helper's own variable, named by the user, reaches installers only.
    environ[allowlist.INSTALLER_ENV] = "AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS"
    assert allowlist.install_env(environ)["AWS_PROFILE"] == "ci"
    assert "AWS_PROFILE" not in allowlist.training_env(environ)


def test_the_harness_keeps_its_own_settings_and_loses_the_secrets(monkeypatch):
    for name, value in {**SECRETS, **ALLOWED, "PYTHONHASHSEED": "123"}.items():
        monkeypatch.setenv(name, value)
    env = harness_env({"EXTRA": "1"})
    assert not set(env) & set(SECRETS)
    assert {k: env[k] for k in ALLOWED} == ALLOWED
    assert {k: env[k] for k in HARNESS_SETTINGS} == HARNESS_SETTINGS  # the host's seed loses
    assert env["EXTRA"] == "1"


def test_a_resolvers_tool_runs_without_the_secrets(monkeypatch):
    """installers.run_tool (pip-compile, uv pip compile, pip index versions) is an installer."""
    from lockguard.installers import run_tool

    for name, value in {**SECRETS, **ALLOWED, **INSTALL_ONLY}.items():
        monkeypatch.setenv(name, value)
    proc = run_tool([sys.executable, "-c", f"import os; print(sorted(k for k in {WATCHED!r} "
                                           "if k in os.environ))"], timeout=60, what="probe")
    assert json.loads(proc.stdout.replace("'", '"')) == sorted([*ALLOWED, *INSTALL_ONLY])


def test_the_docker_client_and_the_container_get_their_own_lists(monkeypatch):
    for name, value in {**SECRETS, "DOCKER_HOST": "unix:///x.sock", "DOCKER_PASSWORD": "pw",
                        "XLA_FLAGS": "--x", "PATH": "/usr/bin"}.items():
        monkeypatch.setenv(name, value)
    client = allowlist.docker_client_env()
    assert client["DOCKER_HOST"] == "unix:///x.sock" and "PATH" in client
    assert not set(client) & {*SECRETS, "DOCKER_PASSWORD"}
    # In the container only the numerics variables: the host's paths mean nothing there.
    assert allowlist.container_env() == {"XLA_FLAGS": "--x"}


# ----------------------------------------------------------------- a user scenario, for real

SEES = f"""
import json, os
from pathlib import Path

import numpy as np


def run(steps, seed):
    seen = {{k: k in os.environ for k in {WATCHED!r}}}
    Path(__file__).with_name("seen.json").write_text(json.dumps(seen))
    rng = np.random.default_rng(seed)
    return [float(x) for x in rng.random(steps)]
"""


@pytest.mark.slow
def test_a_user_scenario_sees_no_secret_through_the_real_cli(tmp_path):
    project = make_project(tmp_path / "p", """
        lock = "lock.txt"
        scenarios = ["sees"]
        [scenario.sees]
        script = "sees.py"
        framework = "numpy"
        """, files={"sees.py": SEES}, locks={"lock.txt": DATA / "numpy-1.26.4.txt"})
    # Unsandboxed: the script writes what it saw into the project, which the sandbox forbids
    # (test_sandbox.py holds what the sandbox hides).
    env = {**SECRETS, **ALLOWED, **INSTALL_ONLY, "LOCKGUARD_SANDBOX": "off"}
    proc = run_cli("record", "-v", cwd=project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    seen = json.loads((project / "seen.json").read_text())
    assert seen == {k: k in ALLOWED for k in WATCHED}
    # -v says how many were withheld, and never a value.
    assert "environment variables are withheld from the trainings" in proc.stderr
    assert not any(value in proc.stderr + proc.stdout for value in SECRETS.values())


# ------------------------------------------- a package's build and its .pth, for real (A/B)

PROBE = "lgprobe"

# The probe's in-tree build backend (needs nothing from an index): its build runs in the
# installer's environment and records what it sees; the wheel it builds ships lgprobe.pth,
# whose `import` line records what every interpreter start of the venv sees.
BACKEND = '''
import base64, hashlib, json, os, zipfile

RECORDS = {records!r}
WATCHED = {watched!r}
PTH = ("import json, os, sys; open(os.path.join(%r, 'training-%%d.json' %% os.getpid()), 'w')"
       ".write(json.dumps({{'argv': sys.argv, 'seen': sorted(k for k in %r if k in os.environ)}}))"
       "\\n" % (RECORDS, WATCHED))


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    with open(os.path.join(RECORDS, "installer.json"), "w") as f:
        json.dump({{"seen": sorted(k for k in WATCHED if k in os.environ)}}, f)
    info = "lgprobe-1.0.dist-info"
    files = {{
        "lgprobe.pth": PTH.encode(),
        "lgprobe_mod.py": b"",
        info + "/METADATA": b"Metadata-Version: 2.1\\nName: lgprobe\\nVersion: 1.0\\n",
        info + "/WHEEL": b"Wheel-Version: 1.0\\nGenerator: probe\\nRoot-Is-Purelib: true\\n"
                         b"Tag: py3-none-any\\n",
    }}
    record = "".join(
        "%s,sha256=%s,%d\\n" % (path, base64.urlsafe_b64encode(
            hashlib.sha256(data).digest()).rstrip(b"=").decode(), len(data))
        for path, data in files.items()) + info + "/RECORD,,\\n"
    files[info + "/RECORD"] = record.encode()
    wheel = "lgprobe-1.0-py3-none-any.whl"
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel), "w") as z:
        for path, data in files.items():
            z.writestr(path, data)
    return wheel
'''


def probe_sdist(directory: Path, records: Path) -> Path:
    members = {
        "PKG-INFO": f"Metadata-Version: 2.1\nName: {PROBE}\nVersion: 1.0\n",
        "pyproject.toml": '[build-system]\nrequires = []\nbuild-backend = "backend"\n'
                          'backend-path = ["."]\n',
        "backend.py": BACKEND.format(records=str(records), watched=WATCHED),
    }
    directory.mkdir(parents=True, exist_ok=True)
    sdist = directory / f"{PROBE}-1.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        for name, text in members.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{PROBE}-1.0/{name}")
            info.size, info.mtime = len(data), 0
            tar.addfile(info, io.BytesIO(data))
    return sdist


@pytest.mark.slow
def test_installers_and_trainings_never_see_the_secrets_and_the_pth_is_named(tmp_path):
    from lockguard.names import FORMATS
    from lockguard.report import load_report, render

    records = tmp_path / "records"
    records.mkdir()
    sdist = probe_sdist(tmp_path / "links", records)
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    base = (DATA / "numpy-1.26.4.txt").read_text()
    candidate = (f"--find-links {sdist.parent}\n{base}"
                 f"{PROBE}==1.0 \\\n    --hash=sha256:{digest}\n")
    project = make_project(tmp_path / "p", """
        lock = "candidate.txt"
        scenarios = ["numpy.mlp"]
        allow_sdist = true
        """, files={"candidate.txt": candidate, "base.txt": base})
    # Unsandboxed: the .pth records what each start saw outside its run (test_sandbox.py holds
    # what the sandbox hides).
    env = {**SECRETS, **ALLOWED, **INSTALL_ONLY, "LOCKGUARD_SANDBOX": "off"}
    proc = run_cli("check", "--baseline-lock", "base.txt", "--format", "json", "-o",
                   "report.json", cwd=project, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr

    # The build ran in the installer's environment: the install's variables, no secret.
    installer = json.loads((records / "installer.json").read_text())
    assert installer["seen"] == sorted([*ALLOWED, *INSTALL_ONLY])
    # The .pth ran at every start of a training's interpreter, which sees a training's
    # variables only; never at build time (the bytecode is compiled isolated, without site).
    started = [json.loads(p.read_text()) for p in records.glob("training-*.json")]
    trainings = [t for t in started if any(a.endswith("run.py") for a in t["argv"])]
    assert trainings, started
    assert all(t["seen"] == sorted(ALLOWED) for t in trainings), trainings
    assert [t for t in started if t not in trainings] == []

    # The report names the .pth the added pin ships, in every format.
    report = load_report(project / "report.json")
    [diff] = report.lock_diffs
    [change] = [c for c in diff.changed if c.name == PROBE]
    assert change.kind == "added"
    assert [(f.file, f.runs_code) for f in change.startup_files] == [("lgprobe.pth", True)]
    said = "lgprobe 1.0; ships lgprobe.pth: code that runs at every interpreter start"
    for fmt in FORMATS:
        text = render(report, fmt)
        if fmt == "junit":
            props = {p.get("name"): p.get("value") for p in ET.fromstring(text).iter("property")}
            assert said in props[f"startup.{PROBE}"]
        elif fmt == "json":
            assert '"lgprobe.pth"' in text
        else:
            assert said in text.replace("\n", " "), (fmt, text)
