"""`lockguard build --push REGISTRY` (lockguard/envs/docker/push.py).

No registry runs here (the registry image cannot be pulled without a network), so the engine is
a stand-in that speaks the docker SDK's push stream; what is tested is lockguard's side: the
name below the registry, the digest taken from the stream and recorded, refusals, and that a
bad REGISTRY is refused before anything is built.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import QUICKSTART, run_cli
from lockguard.envs.docker.push import PushError, check_registry, push_image
from lockguard.errors import UsageError

DIGEST = "sha256:" + "ab" * 32
TAG = "lockguard/torch-cpu:0123456789abcdef"


class FakeImage:
    def __init__(self, client: "FakeClient") -> None:
        self.client = client

    def tag(self, repository: str, tag: str) -> bool:
        self.client.tagged.append(f"{repository}:{tag}")
        return True


class FakeClient:
    """The parts of docker.DockerClient a push uses, answering with `events`."""

    def __init__(self, events: list[dict]) -> None:
        self.events = events
        self.tagged: list[str] = []
        self.pushed: list[str] = []
        self.images = self
        self.api = self

    def get(self, ref: str) -> FakeImage:
        assert ref == TAG
        return FakeImage(self)

    def push(self, repository: str, tag: str, stream: bool, decode: bool):
        assert stream and decode
        self.pushed.append(f"{repository}:{tag}")
        return iter(self.events)


def test_push_tags_below_the_registry_and_records_the_digest(tmp_path: Path) -> None:
    client = FakeClient([{"status": "Pushing"}, {"status": "latest: digest: …"},
                         {"progressDetail": {}, "aux": {"Tag": "0123456789abcdef",
                                                        "Digest": DIGEST, "Size": 1234}}])
    pushed = push_image(client, TAG, "sha256:" + "cd" * 32, "localhost:5000/team/", tmp_path)
    target = "localhost:5000/team/lockguard/torch-cpu:0123456789abcdef"
    assert client.tagged == client.pushed == [target]
    assert pushed.ref == f"localhost:5000/team/lockguard/torch-cpu@{DIGEST}"
    record = json.loads(pushed.record.read_text())
    assert record["digest"] == DIGEST and record["image"] == target
    assert record["local_tag"] == TAG and pushed.record.parent == tmp_path


@pytest.mark.parametrize("events, message", [
    ([{"error": "denied: requested access to the resource is denied"}], "denied"),
    ([{"status": "Pushed"}], "answered no digest"),
    ([{"aux": {"Digest": "md5:00"}}], "answered no digest"),
])
def test_a_refused_or_digestless_push_is_an_error_and_records_nothing(
        tmp_path: Path, events: list[dict], message: str) -> None:
    with pytest.raises(PushError, match=message):
        push_image(FakeClient(events), TAG, "sha256:x", "ghcr.io/acme", tmp_path)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("registry, ok", [
    ("ghcr.io/acme", True), ("localhost:5000", True), ("registry.example.com/a/b", True),
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
    proc = run_cli("build", "--lock", str(QUICKSTART / "requirements.txt"),
                   "--push", "https://ghcr.io/acme", cwd=tmp_path,
                   env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    # Exit 2 on the registry name, not on the missing engine: nothing was attempted.
    assert proc.returncode == 2
    assert "--push https://ghcr.io/acme: a registry without a scheme" in proc.stderr
