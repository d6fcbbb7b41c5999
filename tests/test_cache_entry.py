"""cache.entry, the one way a cache entry is built: a failed or interrupted build leaves
nothing half-built where the entry lives, a check that fails publishes nothing, and two
processes asking for the same entry at once build it once."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lockguard.cache import entry, entry_lock, stage_of

MARKER = "ready"


def is_ready(path: Path) -> bool:
    return (path / MARKER).is_file()


def writes(files: dict[str, str], then: BaseException | None = None):
    """A build that writes `files` into its stage, then raises `then` (if any), else
    returns the marker's text."""
    def build(stage: Path) -> str:
        for name, text in files.items():
            (stage / name).parent.mkdir(parents=True, exist_ok=True)
            (stage / name).write_text(text)
        if then is not None:
            raise then
        return "done\n"
    return build


def test_a_built_entry_is_published_whole_with_its_marker_last(tmp_path):
    path = tmp_path / "entries" / "one"
    seen: list[list[str]] = []

    def check(stage: Path) -> None:
        # the health check sees the build's files and not yet the marker
        seen.append(sorted(p.name for p in stage.iterdir()))
        assert not path.exists()

    with entry(path, writes({"a": "1", "sub/b": "2"}), ready=is_ready, marker=MARKER,
               check=check) as built:
        assert built and entry_lock(path).exists()
        assert (path / "a").read_text() == "1" and (path / "sub" / "b").read_text() == "2"
    assert seen == [["a", "sub"]]
    assert (path / MARKER).read_text() == "done\n"
    assert not stage_of(path).exists()
    # ready: not built again
    with entry(path, writes({}, RuntimeError("must not run")), ready=is_ready,
               marker=MARKER) as built:
        assert built is False


@pytest.mark.parametrize("failure", [RuntimeError("pip said no"), KeyboardInterrupt(),
                                     OSError(28, "No space left on device")])
def test_a_build_that_fails_midway_leaves_nothing(tmp_path, failure):
    path = tmp_path / "one"
    with pytest.raises(type(failure)):
        with entry(path, writes({"half": "x"}, failure), ready=is_ready, marker=MARKER):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.lock"]
    # the next taker builds it
    with entry(path, writes({"whole": "y"}), ready=is_ready, marker=MARKER) as built:
        assert built
    assert sorted(p.name for p in path.iterdir()) == [MARKER, "whole"]


def test_a_failed_check_publishes_nothing_and_keeps_the_old_entry_out_of_use(tmp_path):
    path = tmp_path / "one"

    def check(stage: Path) -> None:
        raise RuntimeError("does not import")

    with pytest.raises(RuntimeError, match="does not import"):
        with entry(path, writes({"a": "1"}), ready=is_ready, marker=MARKER, check=check):
            pass
    assert not path.exists() and not stage_of(path).exists()


def test_a_rebuild_replaces_an_entry_that_is_not_ready(tmp_path):
    """An entry a predicate refuses (stale, damaged) is replaced in one rename: the new one
    holds nothing of the old."""
    path = tmp_path / "one"
    path.mkdir()
    (path / "stale").write_text("old")
    with entry(path, writes({"fresh": "new"}), ready=lambda p: False, marker=MARKER):
        pass
    assert sorted(p.name for p in path.iterdir()) == sorted([MARKER, "fresh"])
    assert not any(p.name.endswith(".old") for p in tmp_path.iterdir())


def test_in_place_the_marker_goes_first_and_a_failure_is_discarded(tmp_path):
    """In place (a venv, whose path is baked into it): the old marker is removed before the
    build starts, so an interrupted build is never taken for finished; `discard` says what a
    failure removes (default: the entry)."""
    path = tmp_path / "venv"
    path.mkdir()
    (path / MARKER).write_text("old build")
    (path / "log").write_text("kept")

    def build(stage: Path) -> str:
        assert stage == path and not (path / MARKER).exists()
        raise RuntimeError("install failed")

    discarded = []
    with pytest.raises(RuntimeError):
        with entry(path, build, ready=lambda p: False, marker=MARKER, in_place=True,
                   discard=discarded.append):
            pass
    assert discarded == [path] and sorted(p.name for p in path.iterdir()) == ["log"]
    with pytest.raises(RuntimeError):
        with entry(path, build, ready=lambda p: False, marker=MARKER, in_place=True):
            pass
    assert not path.exists()


TAKER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from lockguard.cache import entry

    path, log = Path(sys.argv[1]), Path(sys.argv[2])

    def build(stage):
        with open(log, "a") as f:
            f.write(f"build {os.getpid()}\\n")
        (stage / "payload").write_text(str(os.getpid()))
        time.sleep(0.5)  # long enough for the other taker to be waiting on the lock
        return "done"

    with entry(path, build, ready=lambda p: (p / "ready").is_file(), marker="ready") as built:
        payload = (path / "payload").read_text()
    print(built, payload)
""")


def test_two_processes_taking_one_entry_build_it_once(tmp_path):
    path, log = tmp_path / "entries" / "shared", tmp_path / "builds.log"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).resolve().parent.parent), os.environ.get("PYTHONPATH", "")])}
    takers = [subprocess.Popen([sys.executable, "-c", TAKER, str(path), str(log)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
              for _ in range(2)]
    outputs = [taker.communicate(timeout=60) for taker in takers]
    assert [t.returncode for t in takers] == [0, 0], outputs
    answers = sorted(out.split() for out, _ in outputs)
    builder = log.read_text().split()
    assert len(builder) == 2, "built more than once"  # one "build <pid>" line
    # one built, the other waited and took what it built
    assert answers == [["False", builder[1]], ["True", builder[1]]]
