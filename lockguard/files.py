"""The one writer: every golden, lock, report, result and cache file lockguard writes goes
through `write_text` / `write_bytes`.

A regular file (or a path that does not exist yet) is replaced atomically: a temporary file in
the same directory, fsynced, renamed over the target, so a kill at any moment leaves either the
old content or the new one. The new file gets the mode an ordinary `open()` would give it (the
umask's, or the replaced file's), not mkstemp's 0600. Anything else -- a FIFO, a terminal,
`/dev/stdout`, a process substitution -- is written through, since renaming over it would
destroy it; a symlink is followed and its target replaced. Temporary files left by a killed
writer are removed by the next write into the same directory.

Paths are shown to the user with `display_path`, here beside the other path helpers.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

from lockguard.errors import LockguardError, did_you_mean

_TMP_SUFFIX = ".lockguard-tmp"
_umask_lock = threading.Lock()


class WriteError(LockguardError):
    """A file could not be written; the message names it and says why."""


def _umask() -> int:
    with _umask_lock:  # os.umask can only be read by setting it
        mask = os.umask(0o022)
        os.umask(mask)
    return mask


def _describe(path: Path, exc: OSError) -> str:
    if isinstance(exc, NotADirectoryError) or exc.errno == 20:
        parent = next((p for p in path.parents if p.exists() and not p.is_dir()), path.parent)
        return f"{path}: cannot write: {parent} is not a directory"
    if isinstance(exc, IsADirectoryError):
        return f"{path}: cannot write: it is a directory"
    return f"{path}: cannot write: {exc.strerror or exc}"


def display_path(path: Path) -> str:
    """Relative to the working directory when below it: what the user typed, not /abs/paths."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def repo_root(cwd: Path | None = None) -> Path | None:
    """The repository the working directory is in, as CI sees it: GITHUB_WORKSPACE when it
    holds the directory, else the git top level (the nearest parent with `.git`, a directory or
    a worktree's file); None outside any."""
    here = (cwd or Path.cwd()).resolve()
    workspace = os.environ.get("GITHUB_WORKSPACE")
    if workspace:
        root = Path(workspace).resolve()
        if here == root or root in here.parents:
            return root
    return next((p for p in (here, *here.parents) if (p / ".git").exists()), None)


def repo_workdir(cwd: Path | None = None) -> str:
    """The working directory as a path from the repository root ("ml" for a project in ml/,
    "" at the root or outside any repository): what display paths are relative to."""
    here = (cwd or Path.cwd()).resolve()
    root = repo_root(here)
    return "" if root is None or root == here else here.relative_to(root).as_posix()


def write_text(path: Path, text: str) -> None:
    write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> None:
    """Write `data` to `path`: atomically for regular files, through for anything else."""
    path = Path(path)
    try:
        st = os.stat(path)  # follows symlinks: what matters is what they point to
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise WriteError(_describe(path, exc)) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise WriteError(f"{path}: cannot write: it is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_through(path, data)
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    mode = stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask()
    _replace(target, data, mode)


def _write_through(path: Path, data: bytes) -> None:
    try:
        with open(path, "wb") as f:
            f.write(data)
    except OSError as exc:
        raise WriteError(_describe(path, exc)) from None


def _replace(target: Path, data: bytes, mode: int) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise WriteError(_describe(target, exc)) from None
    clean_stale_temps(target.parent)
    tmp = target.parent / f".{target.name}.{os.getpid()}.{threading.get_ident()}{_TMP_SUFFIX}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fchmod(fd, mode)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise WriteError(_describe(target, exc)) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def publish_dir(staging: Path, directory: Path) -> None:
    """Put the finished directory `staging` where `directory` is, in one rename (a reader sees
    the old directory or the new one, never half of one), replacing what was there."""
    if not directory.exists():
        os.rename(staging, directory)
        return
    old = directory.parent / f".{directory.name}.{os.getpid()}.old"
    os.rename(directory, old)
    try:
        os.rename(staging, directory)
    except OSError:
        os.rename(old, directory)
        raise
    shutil.rmtree(old, ignore_errors=True)


def clean_stale_temps(directory: Path) -> None:
    """Remove temporary files in `directory` whose writing process is gone (killed mid-write)."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        name = entry.name
        if not (name.startswith(".") and name.endswith(_TMP_SUFFIX)):
            continue
        parts = name[: -len(_TMP_SUFFIX)].rsplit(".", 2)
        pid = int(parts[1]) if len(parts) == 3 and parts[1].isdigit() else None
        if pid is not None and pid != os.getpid() and _alive(pid):
            continue
        if pid == os.getpid():
            continue  # one of this process's own writes, in flight in another thread
        try:
            os.unlink(entry.path)
        except OSError:
            pass


@contextlib.contextmanager
def scratch_dir(purpose: str) -> Iterator[Path]:
    """A temporary directory named for this process (`lockguard-<purpose>-<pid>-…`), removed on
    exit; the ones a killed lockguard (SIGKILL leaves no chance to clean up) left behind are
    removed by the next lockguard that makes one."""
    root = Path(tempfile.gettempdir())
    prefix = f"lockguard-{purpose}-"
    try:
        for entry in root.glob(prefix + "*"):
            pid = entry.name[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(entry, ignore_errors=True)
    except OSError:
        pass
    with tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-", dir=root,
                                     ignore_cleanup_errors=True) as tmp:
        yield Path(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


# A directory listed for a "did you mean": no more entries than this are compared.
MAX_NEAR_MISS_ENTRIES = 10_000


def near_miss(path: Path) -> str:
    """For a path that does not exist: "; did you mean X?" naming the files beside it whose
    names are closest to its name (a typo, `requirments.txt`), spelled as `path` was; ""
    when none is close or its folder cannot be listed."""
    path = Path(path)
    try:
        with os.scandir(path.parent) as entries:
            names = [entry.name for _, entry in zip(range(MAX_NEAR_MISS_ENTRIES), entries)
                     if not entry.is_dir()]
    except OSError:
        return ""
    hint = did_you_mean(path.name, names, spell=lambda name: str(path.with_name(name)))
    return f"; {hint}" if hint else ""


def writable_dir(path: Path, what: str) -> None:
    """Fail now, before any training runs, if files cannot be written below `path` later."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        raise WriteError(f"{path}: {what} cannot be created: {probe} is not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise WriteError(f"{path}: {what} is not writable ({probe}: permission denied)")
