"""`lockguard build --push REGISTRY` (lockguard/envs/docker/push.py), against the real engine
pushing to a real registry: tests/registry.py, a minimal distribution-API registry on
127.0.0.1 (which the engine treats as insecure, plain HTTP, by default).

The push tests (marked `docker`, `slow`: the engine compresses the numpy image's layers) build
or reuse the numpy image in the normal cache, as tests/test_docker.py does, push it, and check
what arrived independently of lockguard and of the engine's word: the manifest's bytes hash to
the printed digest, its config is the local image, and its layers unpack to the image's layers.
A registry that refuses the manifest makes the build fail in one line and records nothing.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import re
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import DATA, TORCH_LOCK, make_project, run_cli
from lockguard.cache import cache_root
from lockguard.envs.docker.push import check_registry
from lockguard.errors import UsageError
from registry import Registry

NUMPY_LOCK = DATA / "docker-numpy.lock"
REPOSITORY = "lockguard/numpy-cpu"


@pytest.fixture(scope="module")
def registry(tmp_path_factory):
    with Registry(tmp_path_factory.mktemp("registry")) as running:
        yield running


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("push") / "p", """
        lock = "numpy.lock"
        env = "docker"
        scenarios = ["numpy.mlp"]
        """, locks={"numpy.lock": NUMPY_LOCK})


def _local_tag(stdout: str) -> str:
    match = re.search(rf"^({REPOSITORY}:[0-9a-f]+)  ", stdout, re.M)
    assert match, stdout
    return match.group(1)


def _record(tag: str, registry: str) -> Path:
    digest = hashlib.sha256(registry.encode()).hexdigest()[:12]
    return cache_root() / "images" / tag.rsplit(":", 1)[1] / f"pushed-{digest}.json"


def _untag(engine, *refs: str) -> None:
    """Remove the tags a push left (the image itself keeps its local tag)."""
    for ref in refs:
        try:
            engine.images.remove(ref)
        except Exception:  # noqa: BLE001 - not there
            pass


@pytest.mark.docker
@pytest.mark.slow
def test_build_push_to_a_real_registry_and_pull_back(engine, registry, project):
    proc = run_cli("build", "--framework", "numpy", "--push", registry.host, cwd=project)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tag = _local_tag(proc.stdout)
    version = tag.rsplit(":", 1)[1]
    pushed = f"{registry.host}/{REPOSITORY}"
    digest = None
    try:
        match = re.search(rf"^pushed {re.escape(pushed)}@(sha256:[0-9a-f]{{64}})  "
                          r"\(recorded in (.+)\)$", proc.stdout, re.M)
        assert match, proc.stdout
        digest, record = match.group(1), Path(match.group(2))

        # The registry holds the manifest under the tag, and its bytes hash to the digest.
        body, media, stored = registry.manifest(REPOSITORY, version)
        assert stored == digest == "sha256:" + hashlib.sha256(body).hexdigest()
        manifest = json.loads(body)
        assert media == manifest["mediaType"]
        assert registry.manifest(REPOSITORY, digest)[0] == body
        # ... its config is the local image, and every layer blob is there and unpacks to the
        # image's layer of the same place.
        image = engine.images.get(tag)
        assert manifest["config"]["digest"] == image.id
        config = json.loads(registry.blob_path(image.id).read_bytes())
        diff_ids = []
        for layer in manifest["layers"]:
            blob = registry.blob_path(layer["digest"]).read_bytes()
            assert len(blob) == layer["size"]
            assert "sha256:" + hashlib.sha256(blob).hexdigest() == layer["digest"]
            diff_ids.append("sha256:" + hashlib.sha256(gzip.decompress(blob)).hexdigest())
        assert diff_ids == config["rootfs"]["diff_ids"] == image.attrs["RootFS"]["Layers"]

        # The record: in the image's cache folder, named by the registry, the same digest.
        assert record == _record(tag, registry.host)
        recorded = json.loads(record.read_text())
        assert recorded["digest"] == digest and recorded["ref"] == f"{pushed}@{digest}"
        assert recorded["image"] == f"{pushed}:{version}" and recorded["image_id"] == image.id

        # Pulling back by digest: the engine asks the registry for that manifest (HEAD is enough
        # for it when the image is still here, as it is: the layers are not fetched again).
        _untag(engine, f"{pushed}:{version}")
        before = len(registry.requests)
        pull = subprocess.run(["docker", "pull", f"{pushed}@{digest}"], capture_output=True,
                              text=True, timeout=300)
        assert pull.returncode == 0, pull.stderr
        asked = {(method, status) for method, path, status in registry.requests[before:]
                 if path == f"/v2/{REPOSITORY}/manifests/{digest}"}
        assert asked in ({("HEAD", 200)}, {("GET", 200)}, {("HEAD", 200), ("GET", 200)})
        assert engine.images.get(f"{pushed}@{digest}").id == image.id
    finally:
        _untag(engine, f"{pushed}:{version}", f"{pushed}@{digest}")


@pytest.mark.docker
@pytest.mark.slow
def test_a_registry_refusing_the_manifest_fails_the_build_and_records_nothing(
        engine, registry, project):
    # Below its own namespace: another record name than a successful push's; the engine may
    # mount the layers it pushed to this registry already rather than upload them again.
    target = f"{registry.host}/refused"
    registry.fail["manifest_put"] = 500
    try:
        proc = run_cli("build", "--framework", "numpy", "--push", target, cwd=project)
    finally:
        registry.fail.clear()
    tag = _local_tag(proc.stdout)
    _untag(engine, f"{target}/{tag}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"lockguard: error: pushing {target}/{tag}: "), lines
    assert "500" in lines[0]
    assert not _record(tag, target).exists()
    assert ("PUT", f"/v2/refused/{REPOSITORY}/manifests/{tag.rsplit(':', 1)[1]}", 500) \
        in registry.requests


@pytest.mark.docker
@pytest.mark.slow
def test_an_unreachable_registry_fails_the_build_in_one_line(engine, project):
    with socket.socket() as probe:  # a port nothing listens on once it is closed
        probe.bind(("127.0.0.1", 0))
        target = f"127.0.0.1:{probe.getsockname()[1]}"
    proc = run_cli("build", "--framework", "numpy", "--push", target, cwd=project)
    tag = _local_tag(proc.stdout)
    _untag(engine, f"{target}/{tag}")
    assert proc.returncode == 2, proc.stdout + proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"error: pushing {target}/{tag}: " in lines[0], lines
    assert not _record(tag, target).exists()


def test_the_registry_refuses_a_blob_that_does_not_match_its_digest(tmp_path):
    """The fixture's own check: the push test's 'blobs arrived intact' rests on it."""
    with Registry(tmp_path) as registry:
        base = f"http://{registry.host}/v2/t/blobs/uploads/"
        answer = urllib.request.urlopen(urllib.request.Request(base, method="POST"))
        assert answer.status == 202
        location = f"http://{registry.host}{answer.headers['Location']}"
        wrong = "sha256:" + hashlib.sha256(b"other").hexdigest()
        put = urllib.request.Request(f"{location}?digest={wrong}", data=b"data", method="PUT")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(put)
        assert refused.value.code == 400
        assert not registry.has_blob(wrong)
        assert urllib.request.urlopen(f"http://{registry.host}/v2/").headers[
            "Docker-Distribution-API-Version"] == "registry/2.0"


@pytest.mark.parametrize("registry, ok", [
    ("ghcr.io/acme", True), ("localhost:5000", True), ("registry.example.com/a/b", True),
    ("127.0.0.1:5000", True),
    ("https://ghcr.io/acme", False), ("GHCR.io/Acme", False), ("ghcr.io/acme:v1", False),
    ("ghcr.io/acme@sha256:00", False), ("", False), ("a b", False),
])
def test_registry_names(registry: str, ok: bool) -> None:
    if ok:
        assert check_registry(registry) == registry
    else:
        with pytest.raises(UsageError, match="--push"):
            check_registry(registry)


def test_build_refuses_a_bad_registry_before_building(tmp_path: Path) -> None:
    proc = run_cli("build", "--lock", str(TORCH_LOCK),
                   "--push", "https://ghcr.io/acme", cwd=tmp_path,
                   env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    # Exit 2 on the registry name, not on the missing engine: nothing was attempted.
    assert proc.returncode == 2
    assert "--push https://ghcr.io/acme: a registry without a scheme" in proc.stderr
