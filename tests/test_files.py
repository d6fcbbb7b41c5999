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


# ------------------------------------------------------------------------------- the reader

def test_read_bytes_names_what_stands_there_and_never_blocks(tmp_path):
    """A FIFO with no writer, a socket, a device, a directory: each refused at once, by kind."""
    import re
    import socket
    import time

    from lockguard.files import ReadError, read_bytes

    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    (tmp_path / "link").symlink_to(tmp_path / "fifo")
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    cases = {tmp_path / "fifo": "is a FIFO (named pipe), not a regular file",
             tmp_path / "link": "is a FIFO",  # followed: what it leads to is what is read
             tmp_path / "sock": "is a socket",
             Path("/dev/zero"): "is a character device",
             tmp_path: "is a directory",
             tmp_path / "loop": "cannot read the lock file: Too many levels of symbolic links"}
    for path, reason in cases.items():
        began = time.monotonic()
        with pytest.raises(ReadError, match=re.escape(reason)) as info:
            read_bytes(path, "lock file", 1 << 20)
        assert time.monotonic() - began < 2
        assert str(info.value).startswith(f"{path}: ")
        assert not info.value.missing
    sock.close()
    with pytest.raises(ReadError, match="lock file not found") as info:
        read_bytes(tmp_path / "absent", "lock file", 10)
    assert info.value.missing


def test_read_bytes_refuses_a_file_over_its_bound_before_reading_it(tmp_path):
    from lockguard.files import ReadError, read_bytes

    (tmp_path / "big.json").write_bytes(b"x" * 2048)
    with pytest.raises(ReadError, match=r"big.json: the golden file is 2 KiB, more than the "
                                        r"1000 B a golden file can be; not read"):
        read_bytes(tmp_path / "big.json", "golden file", 1000)
    assert read_bytes(tmp_path / "big.json", "golden file", 2048) == b"x" * 2048


def test_read_bytes_counts_what_it_reads_not_what_stat_says():
    """/proc files say size 0 and hold more: the bound holds on what is read."""
    from lockguard.files import ReadError, read_bytes

    with pytest.raises(ReadError, match="larger than the 16 B"):
        read_bytes(Path("/proc/self/status"), "report", 16)


def test_parse_json_refuses_what_reads_two_ways(tmp_path):
    from lockguard.files import ReadError, parse_json

    with pytest.raises(ReadError, match=r"g.json: duplicate key 'result' in one object"):
        parse_json('{"result": {"a": 1}, "result": {"a": 2}}', tmp_path / "g.json")
    with pytest.raises(ReadError, match="duplicate key 'a'"):  # nested objects too
        parse_json('{"x": [{"a": 1, "a": 1}]}', "r.json")
    for big in ("1" + "0" * 400, "-" + "9" * 309, "9" * 5000):
        with pytest.raises(ReadError, match="beyond the range of a float"):
            parse_json(f"[{big}]", "r.json")
    with pytest.raises(ReadError) as info:
        parse_json('{\n "a": 1,\n}', "r.json")
    # Python 3.13's decoder names the trailing comma (line 2); before, the missing key (line 3).
    line = 2 if sys.version_info >= (3, 13) else 3
    assert info.value.line == line and str(info.value).startswith(f"r.json:{line}: invalid JSON")
    with pytest.raises(ReadError, match="nested too deeply"):
        parse_json("[" * 100_000 + "]" * 100_000, "r.json")
    # What the harness writes for a diverged run stays readable: its checks judge it.
    import math
    values = parse_json('{"losses": [NaN, Infinity, 1e999, ' + str(int(sys.float_info.max))
                        + "]}", "r.json")["losses"]
    assert math.isnan(values[0]) and values[1] == values[2] == math.inf
    assert values[3] == int(sys.float_info.max)


def test_read_json_reads_a_regular_file(tmp_path):
    from lockguard.files import ReadError, read_json

    (tmp_path / "r.json").write_text('{"a": [1, 2.5]}')
    assert read_json(tmp_path / "r.json", "JSON report", 100) == {"a": [1, 2.5]}
    (tmp_path / "bad.json").write_bytes(b'{"a": "caf\xe9"}')
    with pytest.raises(ReadError, match=r"bad.json: the JSON report is not UTF-8 text \(byte"):
        read_json(tmp_path / "bad.json", "JSON report", 100)


def test_a_read_only_file_system_is_a_one_line_write_error(tmp_path, monkeypatch):
    """N16, R08b: on a read-only mount the write fails, and so does removing its temporary
    file; the write's error is what is said (exit 2 at the edge), never the cleanup's OSError
    (an internal error, exit 3)."""
    import errno

    from lockguard import files

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(files.os, "replace", read_only)
    monkeypatch.setattr(files.Path, "unlink", read_only)
    with pytest.raises(files.WriteError, match="Read-only file system") as caught:
        write_text(tmp_path / "golden.json", "{}")
    assert "\n" not in str(caught.value)
    monkeypatch.setattr(files.os, "link", read_only)
    assert files.link_file(tmp_path / "golden.json", tmp_path / "x") is False


def test_refuse_escape_names_links_outside_paths_and_system_trees(tmp_path):
    from lockguard.files import EscapeError, refuse_escape

    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    (repo / "sub" / "lock.txt").write_text("x")
    (tmp_path / "elsewhere").mkdir()
    refuse_escape(repo / "sub" / "lock.txt", repo, "a lock")  # inside: fine
    refuse_escape(repo / "absent.txt", repo, "a lock")  # nothing there: no escape
    (repo / "linked").symlink_to(repo / "sub")
    with pytest.raises(EscapeError, match=r"a lock through a symbolic link \(.*linked leads to"):
        refuse_escape(repo / "linked" / "lock.txt", repo, "a lock")
    (repo / "env.txt").symlink_to("/proc/self/environ")
    with pytest.raises(EscapeError, match="a lock that leads to /proc/"):
        refuse_escape(repo / "env.txt", repo, "a lock")
    with pytest.raises(EscapeError, match="outside the repository"):
        refuse_escape(tmp_path / "elsewhere" / "lock.txt", repo, "a lock")
