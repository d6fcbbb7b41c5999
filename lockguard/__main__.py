"""The `lockguard` command (and `python -m lockguard`): a check's remembered answer when it is
still current (answers.py: standard library and lockguard's bottom layer only), else the
command line (cli.py)."""

import atexit
import os
import sys

_status: int | None = None  # the exit status main() ended with, once it has


def main() -> None:
    """The console entry point: a `check` whose remembered answer is still current exits with it
    without importing the command line; anything else runs cli.main on sys.argv."""
    # Only as the first exit handler, which runs after every other: one registered before
    # main() (a coverage tool's, a wrapper's) would otherwise never run.
    if getattr(atexit, "_ncallbacks", lambda: 1)() == 0:
        atexit.register(_leave)
    try:
        _run(sys.argv[1:])
    except SystemExit as exc:
        global _status
        _status = _exit_status(exc)
        raise


def _run(argv: list[str]) -> None:
    if argv[:1] == ["check"]:
        from lockguard.answers import replay

        code = replay(argv)
        if code is not None:
            sys.exit(code)
    from lockguard.cli import main as run_cli

    run_cli(argv)


def _exit_status(exc: SystemExit) -> int:
    """The status the interpreter would exit with for `exc` (a non-int code is printed)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code & 0xFF
    return 1


def _leave() -> None:
    """The last exit handler: with the threads joined, the other handlers run and the standard
    streams flushed, exit without tearing down the interpreter (CPython runs the handlers after
    joining the threads that are not daemons, most recently registered first). Freeing the modules a check
    imports (pydantic, rich, click, lockguard's own: 400 of them) took 45 ms after every
    training, a tenth of what lockguard added around one (benchmarks/bench_check.py)."""
    if _status is None:
        return  # not ended by SystemExit (a crash the interpreter reports): its way
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - the interpreter ignores these at exit too
            pass
    os._exit(_status)


if __name__ == "__main__":
    main()
