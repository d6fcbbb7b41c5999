"""The `lockguard` command (and `python -m lockguard`): the command line (lockguard/cli/), left without
tearing the interpreter down."""

import atexit
import os
import sys

from lockguard.cli import main as run_cli

_status: int | None = None  # the exit status the command ended with, once it has


def entry() -> None:
    """The console script and `python -m lockguard`: main(), then out of the process without
    tearing the interpreter down. Freeing the modules a check imports (pydantic, rich, click,
    lockguard's own: some 400) took 45 ms after every training, a tenth of what lockguard added
    around one (benchmarks/bench_check.py). A program calling main() keeps its own exit."""
    # Only as the first exit handler, which runs after every other (CPython joins the threads
    # that are not daemons, then runs the handlers, most recently registered first): one
    # registered before this (a coverage tool's, a wrapper's) would otherwise never run.
    if getattr(atexit, "_ncallbacks", lambda: 1)() == 0:
        atexit.register(_leave)
    try:
        main()
    except SystemExit as exc:
        global _status
        _status = _exit_status(exc)
        raise


def main() -> None:
    """cli.main on sys.argv. Always raises SystemExit."""
    run_cli(sys.argv[1:])


def _exit_status(exc: SystemExit) -> int:
    """The status the interpreter exits with for `exc` (it prints a code that is not an int)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    return 1


def _leave() -> None:
    """The last exit handler (see entry): flush the standard streams that are open and exit
    with the command's status; 120, as the interpreter does, when one cannot be flushed (a
    full disk, a closed pipe)."""
    if _status is None:
        return  # not ended by SystemExit (a crash the interpreter reports): its way
    status = _status
    for stream in (sys.stdout, sys.stderr):
        if stream is None or getattr(stream, "closed", False):
            continue
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - what the interpreter does with it
            status = 120
    os._exit(status)


if __name__ == "__main__":
    entry()
