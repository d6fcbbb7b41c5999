"""`lockguard cache` and `cache prune` (lockguard/cache_entries.py), on caches laid out here the
way lockguard lays them out: what each entry takes and frees (a venv's files are hardlinks of
the installer's cache), least recently used first, never an entry in use, the installers'
caches last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import run_cli
from lockguard import cache_entries
from lockguard.cache_entries import USED, entries, hold, prune, total
from lockguard.envs.base import READY

MiB = 1 << 20


def venv(root: Path, key: str, lock: str, used: float, project: str = "/p") -> Path:
    path = root / "venvs" / key
    (path / "lib").mkdir(parents=True)
    (path / READY).write_text(json.dumps({"lock": lock}))
    (path / USED).write_text(json.dumps({"at": used, "project": project}))
    return path


def blob(path: Path, size: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(os.urandom(size))
    return path


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    """Two venvs (the older one's 2 MiB torch hardlinked from uv's cache), a wheelhouse, two
    checks' evidence (the last one pointed at), uv's downloads."""
    root = tmp_path / "cache"
    now = time.time()
    old = venv(root, "a" * 20, "old.txt", now - 40 * 86400, "/proj/one")
    new = venv(root, "b" * 20, "new.txt", now - 60, "/proj/two")
    wheel = blob(root / "wheels" / "uv" / "archive-v0" / "x" / "torch.so", 2 * MiB)
    os.link(wheel, old / "lib" / "torch.so")
    for path in (wheel, *wheel.parents[:3]):
        os.utime(path, (now - 40 * 86400,) * 2)
    blob(new / "lib" / "numpy.so", MiB)
    six = blob(root / "wheelhouses" / "w1" / "six.whl", 64 << 10)
    for path in (six, six.parent):
        os.utime(path, (now - 10 * 86400,) * 2)
    project = root / "artifacts" / "0123456789abcdef"
    for run, days in (("20260101T000000Z-aaaaaa", 50), ("20260102T000000Z-bbbbbb", 1)):
        report = blob(project / run / "report.json", 4096)
        for path in (report, report.parent):
            os.utime(path, (now - days * 86400,) * 2)
    (project / "last-check").write_text(str(project / "20260102T000000Z-bbbbbb"))
    return root


def by_name(found):
    return {e.name: e for e in found}


def test_the_listing_says_what_each_entry_takes_frees_and_who_used_it(cache):
    found = entries(cache)
    named = by_name(found)
    assert found[0].name == "new.txt"  # most recently used first
    old = named["old.txt"]
    assert old.kind == "venv" and old.project == "/proj/one"
    assert old.size >= 2 * MiB and old.frees < MiB  # its torch is uv's too
    assert named["uv's downloads"].last_resort
    assert named["check 20260102T000000Z-bbbbbb"].kept.startswith("the project's last check")
    assert named["check 20260101T000000Z-aaaaaa"].kept is None
    # The linked torch counts once in the total.
    assert total(found) < sum(e.size for e in found)


def test_prune_by_age_and_count_leaves_the_installers_caches(cache):
    done = prune(entries(cache), older_than_s=30 * 86400)
    assert [e.name for e in done.removed] == ["check 20260101T000000Z-aaaaaa", "old.txt"]
    assert not (cache / "venvs" / ("a" * 20)).exists()
    assert (cache / "wheels" / "uv").is_dir()  # last resort only
    assert done.freed < MiB  # uv still holds torch
    done = prune(entries(cache), keep=0, dry_run=True)
    assert [e.name for e in done.removed] == ["new.txt"] and (cache / "venvs" / ("b" * 20)).is_dir()


def test_prune_to_a_size_counts_hardlinks_once_and_takes_the_installers_cache_last(cache):
    found = entries(cache)
    before = total(found)
    done = prune(found, max_size=before - 2 * MiB)
    names = [e.name for e in done.removed]
    # Least recently used first; the old venv alone frees nearly nothing (uv's cache links
    # its torch), so uv's downloads go too, last, and together they free the torch.
    assert names == ["check 20260101T000000Z-aaaaaa", "old.txt", "w1", "new.txt",
                     "uv's downloads"]
    assert done.freed >= 2 * MiB
    assert total(entries(cache)) <= before - 2 * MiB
    # Never the evidence accept would read.
    assert (cache / "artifacts" / "0123456789abcdef" / "20260102T000000Z-bbbbbb").is_dir()


def test_a_venv_a_running_check_holds_is_never_removed(cache):
    path = cache / "venvs" / ("a" * 20)
    # Another process holds it, as a check does for its life (VenvBackend.prepare).
    holder = subprocess.Popen([sys.executable, "-c", (
        "import sys, time; sys.path.insert(0, sys.argv[1]); "
        "from lockguard.cache_entries import hold; h = hold(__import__('pathlib').Path("
        "sys.argv[2])); print('held', flush=True); time.sleep(60)"),
        str(Path(cache_entries.__file__).parent.parent), str(path)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        found = entries(cache)
        assert by_name(found)["old.txt"].kept == "in use by a running check"
        done = prune(found, keep=0)
        assert [e.name for e in done.removed] == ["new.txt"]
        assert [(e.name, why) for e, why in done.kept] == [("old.txt",
                                                            "in use by a running check")]
        assert path.is_dir()
    finally:
        holder.kill()
        holder.wait()
    mine = hold(path)  # shared: a second holder is no conflict
    mine.close()
    assert [e.name for e in prune(entries(cache), keep=0).removed] == ["old.txt"]


def test_the_commands(cache):
    env = {"LOCKGUARD_CACHE": str(cache)}
    listed = run_cli("cache", cwd=cache, env=env)
    assert listed.returncode == 0 and "old.txt  [/proj/one]" in listed.stdout, listed.stdout
    dry = run_cli("cache", "prune", "--keep", "1", "--dry-run", cwd=cache, env=env)
    assert dry.returncode == 0 and "would remove venv old.txt" in dry.stdout
    assert (cache / "venvs" / ("a" * 20)).is_dir()
    for args, said in ((["prune"], "prune what?"), (["prune", "--max-size", "lots"],
                                                    "expected a size"),
                       (["prune", "--older-than", "soon"], "expected a number and a unit")):
        proc = run_cli("cache", *args, cwd=cache, env=env)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1
    done = run_cli("cache", "prune", "--older-than", "30d", cwd=cache, env=env)
    assert done.returncode == 0 and "removed venv old.txt" in done.stdout
    assert not (cache / "venvs" / ("a" * 20)).exists()


def test_cache_max_size_prunes_after_a_command_and_names_its_key(cache, monkeypatch):
    from lockguard.cli.cache import trim_cache
    from lockguard.config import ConfigError, parse_config

    assert parse_config({"cache_max_size": "8GiB"}, "t", cache).cache_max_size == 8 << 30
    assert parse_config({}, "t", cache).cache_max_size is None
    with pytest.raises(ConfigError, match="key 'cache_max_size': 'lots' is not a size"):
        parse_config({"cache_max_size": "lots"}, "t", cache)
    said = []

    class Progress:
        def info(self, line: str) -> None:
            said.append(line)

    monkeypatch.setenv("LOCKGUARD_CACHE", str(cache))
    held = hold(cache / "venvs" / ("b" * 20))  # what this command used: held, so kept
    try:
        trim_cache(1, Progress())
    finally:
        held.close()
    assert (cache / "venvs" / ("b" * 20)).is_dir() and not (cache / "venvs" / ("a" * 20)).exists()
    [line] = said
    assert line.startswith("cache_max_size 1 B: removed ")


def test_a_killed_fleet_download_leaves_a_stage_listed_as_unfinished(cache):
    """The fleet's downloads (wheels/fleet, envs/wheels.py) are built through cache.entry's
    stages too: one a killed diff left is listed as such (STAGED names the folder)."""
    from lockguard.cache import stage_of

    left = stage_of(cache / "wheels" / "fleet" / "f1")
    blob(left / "wheels" / "half.whl", 64 << 10)
    stage = by_name(entries(cache))["wheels/fleet/f1 (left by an interrupted build)"]
    assert stage.kind == cache_entries.UNFINISHED


def test_a_stage_a_killed_build_left_is_removed_by_every_prune_unless_a_build_holds_it(cache):
    """cache.entry builds a wheelhouse or a proposal in `.NAME.stage` beside it; a SIGKILL
    leaves the stage behind. `cache` lists it, any prune removes it (nothing will read it),
    but not while its entry's lock is held: that is a build under way."""
    import fcntl

    from lockguard.cache import entry_lock, stage_of

    left = stage_of(cache / "wheelhouses" / "w2")
    blob(left / "half.whl", 64 << 10)
    found = by_name(entries(cache))
    stage = found["wheelhouses/w2 (left by an interrupted build)"]
    assert stage.kind == cache_entries.UNFINISHED and stage.kept is None
    assert stage.size >= 64 << 10
    # Held by a build: listed as such and left alone, and a prune that listed it free before
    # the build began leaves it too (the lock is asked again when removing).
    listed_free = entries(cache)
    with open(entry_lock(cache / "wheelhouses" / "w2"), "a+") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        busy = by_name(entries(cache))["wheelhouses/w2 (left by an interrupted build)"]
        assert busy.kept == "being built"
        for found in (entries(cache), listed_free):
            done = prune(found, older_than_s=10_000 * 86400)
            assert done.removed == [] and left.is_dir()
            assert [e.name for e, _ in done.kept] == [stage.name]
    # Free again: a prune asked for nothing else removes it, and only it.
    done = prune(entries(cache), older_than_s=10_000 * 86400)
    assert [e.name for e in done.removed] == [stage.name] and not left.exists()
    assert (cache / "wheelhouses" / "w1").is_dir()
