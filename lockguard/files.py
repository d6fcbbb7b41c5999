"""The one writer: every golden, lock, report, result and cache file lockguard writes goes
through `write_text` / `write_bytes`.

A regular file (or a path that does not exist yet) is replaced atomically: a temporary file in
the same directory, fsynced, renamed over the target, so a kill at any moment leaves either the
old content or the new one. The new file gets the mode an ordinary `open()` would give it (the
umask's, or the replaced file's), not mkstemp's 0600. Anything else -- a FIFO, a terminal,
`/dev/stdout`, a process substitution -- is written through, since renaming over it would
destroy it; a symlink is followed and its target replaced. Temporary files left by a killed
writer are removed by the next write into the same directory.

The one reader: every config, lock, golden, report and harness result is read through
`read_bytes` (bounded, regular files only, never a blocking open) and JSON through
`parse_json` / `read_json` (no duplicate keys, no integer beyond float range).

Paths are shown to the user with `display_path`, here beside the other path helpers.

"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lockguard.errors import LockguardError, did_you_mean
from lockguard.sizes import format_size

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
    return next((p for p in (here, *here.parents) if os.path.lexists(p / ".git")), None)


def repo_workdir(cwd: Path | None = None) -> str:
    """The working directory as a path from the repository root ("ml" for a project in ml/,
    "" at the root or outside any repository): what display paths are relative to."""
    here = (cwd or Path.cwd()).resolve()
    root = repo_root(here)
    return "" if root is None or root == here else here.relative_to(root).as_posix()


def write_text(path: Path, text: str) -> None:
    """Write `text` as UTF-8 through write_bytes: atomically for a regular file, through for
    anything else; WriteError, one line naming the path, when it cannot."""
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
        _discard(tmp)
        raise WriteError(_describe(target, exc)) from None
    except BaseException:
        _discard(tmp)
        raise


def _discard(tmp: Path) -> None:
    """Remove a temporary file a write left, if it can be: on a read-only file system (the
    reason the write failed) even that fails, and the write's own error is the one to say."""
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def sha256_file(path: Path | str) -> str:
    """A file's sha256 (hex), read in blocks (hashlib.file_digest is Python 3.11's, and
    lockguard runs on 3.10); OSError as open raises it."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def link_file(source: Path, target: Path) -> bool:
    """Put a hard link to `source` at `target`, replacing what is there atomically (a reader
    sees the old file or the new one); False, and nothing changed, where no link can be made
    (another file system, a file system without hard links)."""
    tmp = target.parent / f".{target.name}.{os.getpid()}.{threading.get_ident()}{_TMP_SUFFIX}"
    try:
        os.link(source, tmp)
        os.replace(tmp, target)
        return True
    except OSError:
        _discard(tmp)
        return False


def staging_dir(directory: Path) -> Path:
    """Where this process assembles `directory`'s next content, beside it, for publish_dir."""
    return directory.parent / f".{directory.name}.{os.getpid()}.partial"


def publish_dir(staging: Path, directory: Path) -> None:
    """Put the finished directory `staging` where `directory` is, in one rename (a reader sees
    the old directory or the new one, never half of one), replacing what was there."""
    recover_dir(directory)
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


def recover_dir(directory: Path) -> None:
    """Undo what a writer of `directory` that was killed left beside it: the old directory it
    had renamed aside and not yet replaced is put back (killed between publish_dir's two
    renames); its staging directory, or an old copy already replaced, is removed. Those of a
    writer still running are left alone."""
    prefix = f".{directory.name}."
    try:
        entries = list(os.scandir(directory.parent))
    except OSError:
        return
    for entry in entries:
        pid, _, kind = entry.name.removeprefix(prefix).partition(".")
        if not entry.name.startswith(prefix) or kind not in ("partial", "old") \
                or not pid.isdigit() or int(pid) == os.getpid() or _alive(int(pid)):
            continue
        if kind == "old" and not os.path.lexists(directory):
            # The only copy left: put back, or left where it is when that fails (never removed).
            with contextlib.suppress(OSError):
                os.rename(entry.path, directory)
            continue
        shutil.rmtree(entry.path, ignore_errors=True)


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
        # scandir and a prefix test, not glob: a shared /tmp of thousands of entries cost 20 ms
        # of fnmatch in front of every training run.
        with os.scandir(root) as entries:
            stale = [entry.path for entry in entries if entry.name.startswith(prefix)]
        for path in stale:
            pid = os.path.basename(path)[len(prefix):].split("-", 1)[0]
            if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
                shutil.rmtree(path, ignore_errors=True)
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


# ------------------------------------------------------------------------------------ reading
#
# The one reader: every config, lock, golden, report and harness result lockguard reads comes
# through `read_bytes` (JSON through `parse_json` too). A FIFO, a device or a socket where a
# file was expected is named for what it is -- "is a FIFO", not "not found" -- and never opened
# in a way that could block; a file larger than its kind can be is refused before it is read,
# rather than costing minutes and gigabytes before failing anyway.

MiB = 1 << 20


class ReadError(LockguardError):
    """A file that cannot be read as asked: missing, not a regular file, too large, unreadable,
    or not the JSON it should be. `str()` is one line naming the file (and line); `reason` is
    the part after it, for callers that phrase the error their own way."""

    def __init__(self, path: Path | str, reason: str, *, missing: bool = False,
                 line: int | None = None) -> None:
        self.path, self.reason, self.missing, self.line = Path(path), reason, missing, line
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")


class EscapeError(LockguardError):
    """A path of the project's gate (a lock, the configuration, a scenario script) that is a
    symbolic link, or whose real path leaves the repository: refused before it is read."""


# Trees whose files are the kernel's, never a project's: a lock or script that leads there is
# a way to print /proc/self/environ (lockguard's secrets) into an error line.
SYSTEM_TREES = ("/proc", "/sys", "/dev")


def in_system_tree(real: str) -> bool:
    """Whether the real path `real` lies in (or is) one of SYSTEM_TREES."""
    return any(real == t or real.startswith(t + "/") for t in SYSTEM_TREES)


def refuse_escape(path: Path, root: Path, what: str) -> None:
    """EscapeError when `path` (`what`: "a lock"), or a folder it lies in below the
    repository `root`, is a symbolic link (git would record it as one), or its real path lies
    outside `root` or in /proc, /sys or /dev. A path that does not exist is no escape."""
    path = Path(os.path.abspath(path))
    real, top = os.path.realpath(path), os.path.realpath(root)
    if in_system_tree(real):
        raise EscapeError(f"{path}: {what} that leads to {real}: refused")
    parts = path.parts
    below = next((parts[i:] for i in range(len(parts), 0, -1)
                  if os.path.realpath(Path(*parts[:i])) == top), None)
    if below is None:
        raise EscapeError(f"{path}: {what} outside the repository at {top}: refused")
    here = Path(top)
    for part in below:
        here = here / part
        if os.path.islink(here):
            shown = "it" if here == Path(top, *below) else str(here)
            raise EscapeError(f"{path}: {what} through a symbolic link ({shown} leads to "
                              f"{os.path.realpath(here)}): lockguard reads none through a link")
    if not (real == top or real.startswith(top + "/")) and os.path.lexists(path):
        raise EscapeError(f"{path}: {what} that leads out of the repository (to {real}): "
                          "refused")


_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def file_kind(mode: int) -> str:
    """What a stat mode says a path is, as a message names it: "a FIFO (named pipe)", ..."""
    if stat.S_ISREG(mode):
        return "a regular file"
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def listing(directory: Path, pattern: str) -> list[Path]:
    """The entries of `directory` matching the glob `pattern`, sorted."""
    return sorted(Path(directory).glob(pattern))


def read_bytes(path: Path, what: str, limit: int) -> bytes:
    """The content of the regular file at `path` (symlinks followed), `what` naming it in
    errors ("lock file", "golden file"). Anything but a regular file is refused with its kind
    named; a file over `limit` bytes is refused before it is read. A missing file is a
    ReadError with `missing` set, "<path>: <what> not found"."""
    return _read_bytes(Path(path), what, limit)


def _read_bytes(path: Path, what: str, limit: int) -> bytes:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ReadError(path, f"{what} not found{near_miss(path)}", missing=True) from None
    except OSError as exc:
        raise ReadError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    _check_kind(path, st, what, limit)
    try:
        # O_NONBLOCK: should a FIFO be swapped in after the stat, opening it does not wait for
        # a writer (fstat below refuses it); on a regular file the flag changes nothing.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise ReadError(path, f"{what} not found", missing=True) from None
    except OSError as exc:
        raise ReadError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    try:
        _check_kind(path, os.fstat(fd), what, limit)
        chunks, size = [], 0
        while size <= limit:  # st_size can lie (/proc, a file growing): count what is read
            chunk = os.read(fd, min(1 << 20, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    except OSError as exc:
        raise ReadError(path, f"cannot read the {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if size > limit:
        raise ReadError(path, f"the {what} is larger than the {format_size(limit)} a {what} "
                              "can be; not read")
    return b"".join(chunks)


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


def _check_kind(path: Path, st: os.stat_result, what: str, limit: int) -> None:
    if not stat.S_ISREG(st.st_mode):
        raise ReadError(path, f"the {what} is {file_kind(st.st_mode)}, not a regular file")
    if st.st_size > limit:
        raise ReadError(path, f"the {what} is {format_size(st.st_size)}, more than the "
                              f"{format_size(limit)} a {what} can be; not read")


# The largest integer a JSON document lockguard reads may hold: every number in a result,
# golden or report is a float or must fit one (a count, a byte size), and an integer beyond
# float range would fail in arithmetic long after it was read.
_FLOAT_MAX_DIGITS = len(str(int(sys.float_info.max)))


class _Refused(ValueError):
    pass


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _Refused(f"duplicate key {key!r} in one object (a reader takes the last "
                           "copy, a reviewer sees the first)")
        obj[key] = value
    return obj


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) <= _FLOAT_MAX_DIGITS:
        value = int(text)
        if abs(value) <= sys.float_info.max:
            return value
    digits = len(text.lstrip("-"))
    raise _Refused(f"the integer {text[:12]}{'…' if len(text) > 12 else ''} ({digits} digits) "
                   "is beyond the range of a float")


def parse_json(text: str, source: Path | str) -> Any:
    """`text` decoded as JSON, refusing what the json module would take silently: a key given
    twice in one object, an integer beyond float range. Errors are ReadErrors naming `source`
    (and the line, where the JSON is malformed)."""
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_int=_bounded_int)
    except json.JSONDecodeError as exc:
        raise ReadError(source, f"invalid JSON: {exc.msg}", line=exc.lineno) from None
    except _Refused as exc:
        raise ReadError(source, str(exc)) from None
    except RecursionError:
        raise ReadError(source, "nested too deeply to read") from None


def read_json(path: Path, what: str, limit: int) -> Any:
    """The JSON document in the regular file `path`: read_bytes, UTF-8, then parse_json."""
    data = read_bytes(path, what, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ReadError(path, f"the {what} is not UTF-8 text (byte {exc.start})") from None
    return parse_json(text, path)
