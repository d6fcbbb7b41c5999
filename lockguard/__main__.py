"""The `lockguard` command (and `python -m lockguard`): a check's remembered answer when it is
still current (answers.py: standard library and lockguard's bottom layer only), else the
command line (cli.py)."""

import sys


def main() -> None:
    """The console entry point: a `check` whose remembered answer is still current exits with it
    without importing the command line; anything else runs cli.main on sys.argv."""
    argv = sys.argv[1:]
    if argv[:1] == ["check"]:
        from lockguard.answers import replay

        code = replay(argv)
        if code is not None:
            sys.exit(code)
    from lockguard.cli import main as run_cli

    run_cli(argv)


if __name__ == "__main__":
    main()
