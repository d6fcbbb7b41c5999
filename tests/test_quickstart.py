"""The README's first command works on a clean machine that has Python and PyPI, nothing else.

The command is read from README.md itself (tests/readme.py) and run in a container of the
project's Debian base image (TEST_BASE: debootstrap's bookworm with python3; no pip
configuration, no local wheel folder or index) on a copy of this working tree. The container
reaches PyPI as this machine does: through the same proxy settings (HTTPS_PROXY and friends,
passed on when set) and trusting the same CA bundle (the one SSL_CERT_FILE, PIP_CERT or pip's
`cert` names, mounted as the container's system bundle), on Docker's default network. The run
must end as the README says: the harmless bump passes, the jax upgrade fails on `dropout`, exit 1.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO, TEST_BASE
from readme import README, example_command

pytestmark = [pytest.mark.docker, pytest.mark.slow]

PROXY_VARS = ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy")
CONTAINER_CA = "/etc/ssl/certs/ca-certificates.crt"


def host_ca_bundle() -> Path | None:
    """The CA bundle this machine's pip and uv trust to reach the index, if one is set."""
    for var in ("SSL_CERT_FILE", "PIP_CERT", "REQUESTS_CA_BUNDLE"):
        if os.environ.get(var) and Path(os.environ[var]).is_file():
            return Path(os.environ[var])
    from lockguard.installers import pip_config

    cert = pip_config().get("cert")
    return Path(cert) if cert and Path(cert).is_file() else None


def working_tree_copy(dest: Path) -> Path:
    """The files git would commit from this working tree (tracked and not ignored), no venv."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            cwd=REPO, capture_output=True, check=True).stdout.decode()
    for name in filter(None, listed.split("\0")):
        source = REPO / name
        if source.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / name)
    return dest


def documented_summaries() -> list[str]:
    """The summary lines of the README's sample output, without their timings."""
    return re.findall(r"^((?:PASS|FAIL) check: [^\n]*?) in [\d.]+ s$", README.read_text(),
                      flags=re.M)


def test_the_readmes_first_command_runs_in_a_clean_debian_container(engine, tmp_path):
    command = example_command()
    src = working_tree_copy(tmp_path / "src")
    volumes = {str(src): {"bind": "/src", "mode": "rw"}}
    environment = {k: os.environ[k] for k in PROXY_VARS if os.environ.get(k)}
    ca = host_ca_bundle()
    if ca is not None:
        volumes[str(ca.resolve())] = {"bind": CONTAINER_CA, "mode": "ro"}
        environment.update(SSL_CERT_FILE=CONTAINER_CA, PIP_CERT=CONTAINER_CA)
    container = engine.containers.run(TEST_BASE, ["bash", "-c", f"cd /src && {command}"],
                                      volumes=volumes, environment=environment, detach=True)
    try:
        code = container.wait(timeout=1500)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)

    where = f"\n--- stdout\n{out[-4000:]}\n--- stderr\n{err[-4000:]}"
    assert code == 1, where  # the jax upgrade fails the gate, as the README says
    summaries = re.findall(r"^((?:PASS|FAIL) check: .*?) in [\d.]+ s$", out, flags=re.M)
    assert summaries == documented_summaries() == ["PASS check: 2 identical",
                                                   "FAIL check: 1 drift, 1 identical"], where
    passed, failed = out.split("PASS check:", 1)
    assert re.search(r"^=\s+jax\.mlp\s+identical", passed, flags=re.M), where
    assert re.search(r"^=\s+dropout\s+identical", passed, flags=re.M), where
    assert re.search(r"^=\s+jax\.mlp\s+identical", failed, flags=re.M), where
    assert re.search(r"^✗\s+dropout\s+drift\s.*from step 0", failed, flags=re.M), where
    # Nothing local reached the container: every wheel came from the index.
    assert "/opt/" not in out + err, where
