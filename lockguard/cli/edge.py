"""The error edge of the command line: the one exit-code map (handles_errors), the one way a
command fails (fail), and the crash log of an internal error.

Exit codes (lockguard/errors.py): 0 the gate passes, 1 the gate fails, 2 bad input or broken
infrastructure (one line on stderr saying what and where; nothing written), 3 an internal error
(one line and the path of a crash log), 130 interrupted.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lockguard import __version__
from lockguard.errors import (
    EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED, LockguardError, one_line,
)


def fail(message: str, code: int) -> None:
    """Print `message` as one `lockguard: ...` line on stderr and exit with `code`; never
    returns. An interrupted run leaves with os._exit, not waiting on threads still in a build."""
    click.echo(f"lockguard: {message}", err=True)
    if code == EXIT_INTERRUPTED:
        # Interrupted, its processes killed: a thread still inside a build that is no process
        # (a docker SDK stream, a wait on another lockguard's build lock) must not hold the
        # terminal until it ends, as a normal exit would (it joins every thread first).
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


def crash_log(exc: BaseException) -> Path | None:
    """Write the traceback of an unexpected error where the user can send it; its path."""
    import time
    import traceback

    text = (f"lockguard {__version__}, python {sys.version.split()[0]}\n"
            f"argv: {sys.argv!r}\n\n" + "".join(traceback.format_exception(exc)))
    try:
        from lockguard.cache import cache_dir
        from lockguard.files import write_text

        path = cache_dir() / "crash" / f"{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}.log"
        write_text(path, text)
        return path
    except Exception:  # noqa: BLE001 - a broken cache must not hide the original error
        import tempfile

        fd, name = tempfile.mkstemp(prefix="lockguard-crash-", suffix=".log")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        return Path(name)


def handles_errors(func: Callable[..., Any], *, checks_env: bool = True) -> Callable[..., Any]:
    """The one exit-code map: expected failures are one line and exit 2, bugs exit 3."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            if checks_env:
                from lockguard import envvars

                envvars.check()  # LOCKGUARD_* variables, as config keys are: before anything runs
            return func(*args, **kwargs)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)
        except LockguardError as exc:
            fail(f"error: {one_line(str(exc))}", EXIT_ERROR)
        except RecursionError as exc:
            # Only a structure nested deeper than any real file gets here (JSON, TOML).
            fail(f"error: input nested too deeply to read ({one_line(str(exc), 200)})",
                 EXIT_ERROR)
        except Exception as exc:  # noqa: BLE001 - everything else is a bug in lockguard
            log = crash_log(exc)
            fail(f"internal error: {type(exc).__name__}: {one_line(str(exc), 300)} "
                 f"(this is a bug; the traceback is in {log})", EXIT_INTERNAL)
    return wrapper


def group_handles_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """handles_errors for a group's callback, which click runs before it parses a command's
    own options: the exit-code map without the LOCKGUARD_* check, which runs with the command
    (so that `--help` works whatever the environment holds)."""
    return handles_errors(func, checks_env=False)
