"""Remembered answers: a check that ran nothing, answered again without the machinery.

Most `lockguard check` runs change nothing: the lock is the goldens' and every scenario is
answered from provenance, or `check --base` finds no lock changed since the base. Such an answer
is a function of a few files (the config, the locks, this machine's goldens, user scenario
scripts), a few git answers, this machine's hardware class, the environment and lockguard's own
code. The full check (cli → flows) records exactly those while it works, through the observers
of the one reader (files.py) and the one process runner (process.py), and keeps them beside its
output under <cache>/answers/. The next identical invocation (`replay`, before click, pydantic
or rich is imported) re-reads each and, when all are as they were, prints the same output,
takes the same last-check pointer away and exits 0. Anything different -- a byte of a lock, a
golden, the config, a ref that moved, an edited lockguard file, another terminal width -- and
the full check runs and records anew.

What the key holds that is not a file read: the command line, the working directory, the
variables lockguard, git and the terminal read, whether each stream is a terminal and its size,
the interpreter, the mtimes of the import path's folders (a package installed or upgraded) and
of lockguard's own files. An answer is remembered only when the command started no process but
git's plumbing (an interpreter asked for its version is not replayed), wrote nothing to stderr,
wrote no file and passed: see `remember`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from lockguard import files, process

# Bumped when what is recorded changes meaning: older answers are then never replayed.
FORMAT = 1
KEEP = 256  # remembered answers kept in the cache, the most recently written
MAX_ANSWER_BYTES = 64 * files.MiB  # a 100,000-pin lock's answer is well under this
_GIT_TIMEOUT_S = 30.0
# Variables that shape a check's answer or its output besides LOCKGUARD_* and GIT_* (which are
# all read): where the cache and git are, the terminal and its colours (rich and click read
# these), the text encoding, and whether this is a GitHub Actions step (which adds a summary).
_ENV = ("PATH", "HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "TERM", "COLORTERM", "NO_COLOR",
        "FORCE_COLOR", "CLICOLOR", "CLICOLOR_FORCE", "COLUMNS", "LINES", "TTY_COMPATIBLE",
        "TTY_INTERACTIVE", "JUPYTER_COLUMNS", "JUPYTER_LINES", "LANG", "LC_ALL", "LC_CTYPE",
        "PYTHONIOENCODING", "PYTHONUTF8", "CI", "GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE")


def _env_subset() -> dict[str, str]:
    return {k: v for k, v in sorted(os.environ.items())
            if k in _ENV or k.startswith(("LOCKGUARD_", "GIT_"))}


def _terminal() -> list[Any]:
    out: list[Any] = []
    for stream in (sys.stdin, sys.stdout, sys.stderr):
        try:
            tty = stream is not None and stream.isatty()
        except (ValueError, OSError):
            tty = False
        out.append(os.get_terminal_size(stream.fileno()) if tty else None)
    out.append(shutil.get_terminal_size())
    return [list(t) if t is not None else None for t in out]


def _code_stamp() -> list[Any]:
    """lockguard's own files and the import path's folders as they are now: an edit, an
    install or an upgrade (of click, rich, pydantic: how the output looks) changes it."""
    package = Path(__file__).parent
    stamp: list[Any] = []
    for directory, dirs, names in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(names):
            try:
                st = os.stat(os.path.join(directory, name))
            except OSError:
                continue
            stamp.append((os.path.relpath(os.path.join(directory, name), package), st.st_size,
                          st.st_mtime_ns))
    here = os.getcwd()
    for entry in sys.path:
        if entry in ("", here):
            continue  # the working directory (`python -m`): its mtime moves with every file
        try:
            stamp.append((entry, os.stat(entry or ".").st_mtime_ns))
        except OSError:
            stamp.append((entry, None))
    return stamp


def key(argv: list[str]) -> str:
    """What an answer is filed under: everything it depends on that is not read as a file."""
    from lockguard import __version__

    parts = [FORMAT, __version__, sys.executable, sys.version, list(argv), os.getcwd(),
             _env_subset(), _terminal(), _code_stamp()]
    return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


# (argv, key) of the check replay could not answer, for its begin(): the walk of lockguard's
# files is done once, not twice, in front of a check that runs.
_missed: tuple[list[str], str] | None = None


def _answers_dir() -> Path:
    from lockguard.cache import cache_root

    return cache_root() / "answers"


def _digest(data: bytes | None) -> str | None:
    return hashlib.sha256(data).hexdigest() if data is not None else None


# ------------------------------------------------------------------------------- recording


class _Watched:
    """A text stream, passed through, that keeps what is written to it."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self.written: list[str] = []

    def write(self, text: str) -> int:
        count = self._stream.write(text)  # bytes are refused here first (click probes so)
        self.written.append(text)
        return count

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            _spoil("wrote bytes past the text stream")
        return getattr(self._stream, name)


@dataclass
class _Recording:
    argv: list[str]
    key: str
    stdout: _Watched
    stderr: _Watched
    reads: dict[str, str | None] = field(default_factory=dict)
    probes: dict[str, Any] = field(default_factory=dict)
    commands: list[dict[str, Any]] = field(default_factory=list)
    hardware: dict[str, str | None] = field(default_factory=dict)
    spoiled: str | None = None


_recording: _Recording | None = None


def _spoil(reason: str) -> None:
    if _recording is not None and _recording.spoiled is None:
        _recording.spoiled = reason


def _saw_file(kind: str, path: Path, value: Any) -> None:
    rec = _recording
    if rec is None:
        return
    name = os.path.abspath(path)
    if kind == "write":
        _spoil(f"wrote {name}")
    elif kind == "read":
        digest = _digest(value)
        if rec.reads.setdefault(name, digest) != digest:
            _spoil(f"{name} changed while it was read")
    else:
        rec.probes[f"{kind}:{name}"] = value


def _saw_process(kind: str, *args: Any) -> None:
    if kind != "capture":
        _spoil(f"ran {args[0][0] if args and args[0] else 'a program'}")
        return
    done, cwd, env, given = args
    if done.argv[:1] != ("git",) or done.argv[1:2] == ("fetch",):
        _spoil(f"ran {' '.join(done.argv[:2])}")
        return
    changed = {k: v for k, v in (env or {}).items() if os.environ.get(k) != v}
    removed = sorted(k for k in os.environ if env is not None and k not in env)
    assert _recording is not None
    _recording.commands.append({
        "argv": list(done.argv), "cwd": str(cwd) if cwd is not None else None,
        "env": changed, "unset": removed,
        "input": given.decode("utf-8", "surrogateescape") if given is not None else None,
        "code": done.code, "stdout": _digest(done.stdout),
        # cat-file prints "<name> missing" for an object it does not have (yet: a fetch may
        # bring it): only an answer with every object found is content-addressed.
        "found": b" missing\n" not in done.stdout})


def begin(argv: list[str]) -> None:
    """Start recording what this command's answer depends on (the full path of a check)."""
    global _recording, _missed
    missed, _missed = _missed, None
    filed = missed[1] if missed is not None and missed[0] == list(argv) else key(argv)
    _recording = _Recording(list(argv), filed, _Watched(sys.stdout), _Watched(sys.stderr))
    sys.stdout, sys.stderr = _recording.stdout, _recording.stderr  # type: ignore[assignment]
    files.observer, process.observer = _saw_file, _saw_process


def depends_on_hardware(device: str, class_id: str | None) -> None:
    """The hardware class this machine was read as for `device` (golden paths are per class)."""
    if _recording is not None:
        _recording.hardware[device] = class_id


def spoil(reason: str) -> None:
    """Something this answer depends on cannot be replayed: it is not remembered."""
    _spoil(reason)


def remember(code: int, *, forget_last_check: Path | None) -> bool:
    """Keep this command's answer for `replay`, if it can be replayed: exit 0, nothing on
    stderr, nothing but git plumbing run. `forget_last_check` is the project root whose last-check
    pointer the command took away (evidence.prepare), which a replay takes away too."""
    global _recording
    rec, _recording = _recording, None
    files.observer = process.observer = None
    if rec is None:
        return False
    sys.stdout, sys.stderr = rec.stdout._stream, rec.stderr._stream  # type: ignore[assignment]
    if code != 0 or rec.spoiled is not None or rec.stderr.written:
        return False
    answer = {"format": FORMAT, "reads": rec.reads, "probes": rec.probes,
              "commands": rec.commands, "hardware": rec.hardware,
              "forget_last_check": str(forget_last_check) if forget_last_check else None,
              "stdout": "".join(rec.stdout.written), "code": code}
    directory = _answers_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        files.write_text(directory / f"{rec.key}.json", json.dumps(answer))
        _prune(directory)
    except (OSError, files.WriteError):
        return False  # an answer not kept only costs the next check its full path
    return True


def forget() -> None:
    """Stop recording without keeping anything (the command failed or wrote elsewhere)."""
    global _recording
    rec, _recording = _recording, None
    files.observer = process.observer = None
    if rec is not None:
        sys.stdout, sys.stderr = rec.stdout._stream, rec.stderr._stream  # type: ignore


def _prune(directory: Path) -> None:
    entries = []
    with os.scandir(directory) as it:
        for entry in it:
            if entry.name.endswith(".json"):
                try:
                    entries.append((entry.stat().st_mtime, entry.path))
                except OSError:
                    pass
    for _, path in sorted(entries, reverse=True)[KEEP:]:
        try:
            os.unlink(path)
        except OSError:
            pass


# --------------------------------------------------------------------------------- replaying


def replay(argv: list[str]) -> int | None:
    """The remembered answer of this exact invocation, printed, when everything it depended on
    is as it was: its exit code. None: not known or not current (the full path runs)."""
    global _missed
    try:
        filed = key(argv)
        _missed = (list(argv), filed)  # until answered below
        path = _answers_dir() / f"{filed}.json"
        if not path.is_file():
            return None  # none filed (read_bytes would look for a near miss among the rest)
        data = files.read_bytes(path, "remembered answer", MAX_ANSWER_BYTES)
        answer = json.loads(data)
        if answer.get("format") != FORMAT or not _current(answer):
            return None
        if answer["forget_last_check"]:
            from lockguard import evidence

            evidence.prepare(None, Path(answer["forget_last_check"]), check=True)
    except Exception:  # noqa: BLE001 - any doubt, and the full check answers instead
        return None
    _missed = None  # answered: no begin() follows
    os.utime(path)  # recently used: kept by _prune
    sys.stdout.write(answer["stdout"])
    sys.stdout.flush()
    return int(answer["code"])


def _current(answer: dict[str, Any]) -> bool:
    for name, digest in answer["reads"].items():
        try:
            data = files.read_bytes(Path(name), "file", MAX_ANSWER_BYTES)
        except files.ReadError as exc:
            if not exc.missing or digest is not None:
                return False
            continue
        if _digest(data) != digest:
            return False
    for probe, value in answer["probes"].items():
        kind, _, name = probe.partition(":")
        if kind == "exists" and os.path.lexists(name) != value:
            return False
        if kind == "listing":
            directory, pattern = os.path.split(name)
            if [p.name for p in sorted(Path(directory).glob(pattern))] != value:
                return False
    if answer["hardware"]:
        from lockguard.hardware import host_class

        for device, class_id in answer["hardware"].items():
            found = host_class(device)
            if (found.id if found is not None else None) != class_id:
                return False
    asked = []
    for command in answer["commands"]:
        if command not in asked and not _content_addressed(command):
            asked.append(command)
    return all(_same_output(command) for command in asked)


_OBJECT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})(?::[^\n]*)?$")


def _content_addressed(command: dict[str, Any]) -> bool:
    """A `git cat-file --batch` of objects named by commit id (`<sha>:<path>`) that were all
    found: what it printed cannot change, so it is not asked again."""
    lines = (command["input"] or "").splitlines()
    return (command["argv"] == ["git", "cat-file", "--batch"] and command["code"] == 0
            and bool(lines) and all(_OBJECT.match(line) for line in lines)
            and command.get("found", False))


def _same_output(command: dict[str, Any]) -> bool:
    env = {k: v for k, v in os.environ.items() if k not in command["unset"]}
    env.update(command["env"])
    given = command["input"]
    done = process.capture(command["argv"], timeout=_GIT_TIMEOUT_S, cwd=command["cwd"], env=env,
                           input=given.encode("utf-8", "surrogateescape") if given is not None
                           else None)
    return done.code == command["code"] and _digest(done.stdout) == command["stdout"]

