"""The command line, thin (pip-tools' way: the group and its error edge here, the commands in
modules by concern, nothing below them knows click):

    edge.py     the one exit-code map (handles_errors), fail, the crash log
    options.py  the options commands share, each declared once
    output.py   report targets, delivery, evidence, `finish` (the end of every command)
    gate.py     record · check · bisect · plan · merge · accept
    locks.py    lock · propose · outdated · diff
    project.py  init · scenarios · report · compare-frameworks · build · images · fleet probe
    cache.py    cache · cache prune

A command parses its options, calls one flow and hands its Report to `finish`. The commands
reach environments only through the flows.
"""

from __future__ import annotations

import os
import sys

import click

from lockguard import __version__
from lockguard.cli import cache, gate, locks, project
from lockguard.cli.edge import fail, group_handles_errors
from lockguard.errors import EXIT_ERROR, EXIT_INTERRUPTED, one_line

# lockguard uses no pydantic plugins; looking for them scans every installed distribution's
# entry points, a fifth of the time `check` takes when it can answer from the goldens.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockguard")
@group_handles_errors  # (what runs before every command fails as one does: exit 2 or 3)
def cli() -> None:
    """Catch silent training drift when an ML stack's lock changes.

    \b
    Examples:
      lockguard init                       # add lockguard to this project
      lockguard check --base origin/main   # A/B the locks changed since main (the PR gate)
      lockguard check                      # compare with the goldens
      lockguard check --help               # every option of a command
    """
    from lockguard.process import guard_self, install_signal_handlers

    # Ctrl-C and SIGTERM kill every training and build at once and exit 130 (handles_errors).
    install_signal_handlers()
    guard_self()  # nothing of a lock's reads lockguard's memory or secrets (sandbox.py)


for _command in (*gate.COMMANDS, *locks.COMMANDS, *project.COMMANDS, *cache.COMMANDS):
    cli.add_command(_command)


def main(argv: list[str] | None = None) -> None:
    """The `lockguard` entry point: click's usage errors become the same one line as every
    other bad input (click's own rendering spreads them over three lines)."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="lockguard", standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        fail("interrupted", EXIT_INTERRUPTED)
    except click.ClickException as exc:
        where = exc.ctx.command_path if getattr(exc, "ctx", None) else "lockguard"
        fail(f"error: {where}: {one_line(exc.format_message())} (see `{where} --help`)",
             EXIT_ERROR)
    sys.exit(code if isinstance(code, int) else 0)
