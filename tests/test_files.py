"""The one writer: atomic replace for regular files, write-through for anything else."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from lockguard.errors import LockguardError
from lockguard.files import clean_stale_temps, scratch_dir, write_text, writable_dir


def test_new_file_gets_the_umask_mode_not_0600(tmp_path):
    old = os.umask(0o027)
    try:
        write_text(tmp_path / "a" / "b.json", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "a" / "b.json").stat().st_mode) == 0o640


def test_replacing_keeps_the_files_mode_and_leaves_no_temp(tmp_path):
    target = tmp_path / "g.json"
    target.write_text("old")
    target.chmod(0o604)
    write_text(target, "new")
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o604
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


def test_a_symlink_is_kept_and_its_target_replaced(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_text(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_a_fifo_is_written_through_not_replaced(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()))
    reader.start()
    write_text(fifo, "through the pipe")
    reader.join(5)
    assert got == ["through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_a_device_node_stays_a_device(tmp_path):
    write_text(Path(os.devnull), "x")
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)


@pytest.mark.parametrize("make, fragment", [
    (lambda p: (p / "file").write_text(""), "is not a directory"),
    (lambda p: (p / "file").mkdir(), "it is a directory"),
])
def test_errors_are_one_line_lockguard_errors(tmp_path, make, fragment):
    make(tmp_path)
    target = tmp_path / "file" / "x.json" if "not a dir" in fragment else tmp_path / "file"
    with pytest.raises(LockguardError, match=fragment) as info:
        write_text(target, "x")
    assert "\n" not in str(info.value)


def test_temps_of_dead_writers_are_cleaned_live_ones_kept(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    dead_pid = int(dead.stdout)
    stale = tmp_path / f".g.json.{dead_pid}.1.lockguard-tmp"
    live = tmp_path / f".g.json.{os.getppid()}.1.lockguard-tmp"
    stale.write_text("half")
    live.write_text("in flight")
    clean_stale_temps(tmp_path)
    assert not stale.exists() and live.exists()
    write_text(tmp_path / "g.json", "x")  # the writer cleans on its own, too
    assert live.exists()


def test_a_killed_writer_leaves_the_old_content(tmp_path):
    """SIGKILL between writing the temp file and the rename: the old file is intact, and the
    next write cleans the orphaned temp."""
    target = tmp_path / "g.json"
    target.write_text("old")
    code = ("import os, signal, sys; sys.path[:0] = sys.argv[2:3]\n"
            "import lockguard.files as f\n"
            "os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)\n"
            "from pathlib import Path\n"
            "f.write_text(Path(sys.argv[1]), 'new')\n")
    proc = subprocess.run([sys.executable, "-c", code, str(target),
                           str(Path(__file__).parent.parent)])
    assert proc.returncode == -9
    assert target.read_text() == "old"
    assert any(p.name.endswith(".lockguard-tmp") for p in tmp_path.iterdir())
    write_text(target, "newer")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["g.json"]


def test_writable_dir_fails_before_anything_runs(tmp_path):
    (tmp_path / "golden").write_text("")
    with pytest.raises(LockguardError, match="golden is not a directory"):
        writable_dir(tmp_path / "golden" / "cpu", "golden_dir")
    writable_dir(tmp_path / "new" / "deeper", "golden_dir")  # creatable: fine
    assert not (tmp_path / "new").exists()


def test_scratch_dirs_of_dead_lockguards_are_swept(tmp_path, monkeypatch):
    """SIGKILL gives lockguard no chance to remove its run directory: the next one does."""
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True)
    stale = tmp_path / f"lockguard-run-{int(dead.stdout)}-abc"
    live = tmp_path / f"lockguard-run-{os.getppid()}-def"
    for d in (stale, live):
        (d / "0").mkdir(parents=True)
    with scratch_dir("run") as mine:
        assert mine.is_dir() and mine.name.startswith(f"lockguard-run-{os.getpid()}-")
        assert not stale.exists() and live.exists()
    assert not mine.exists()
