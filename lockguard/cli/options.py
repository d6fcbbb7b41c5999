"""The options commands share, each declared once (its flag, its type, its help).

A command takes the ones it needs, or `run_options`: the set every command that runs scenarios
takes (record, check, bisect, propose).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from lockguard.names import DEVICES, ENV_KINDS, FORMATS, MAX_STEPS, SANDBOX_MODES

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]

FORMAT_HELP = ("How the report is written, on stdout or to -o: text for people; json for "
               "programs and `lockguard report`; markdown; html; junit; github (workflow "
               "annotations).")
CONFIG_HELP = "Config file (default: pyproject.toml or lockguard.toml, searched upwards)."

lock_option = click.option(
    "--lock", "locks", multiple=True, metavar="PATH",
    help="Lock file (repeatable); overrides [tool.lockguard] lock/locks.")
scenario_option = click.option(
    "--scenario", "scenarios", multiple=True, metavar="ID",
    help="Scenario id or prefix such as 'torch' (repeatable). Default: all.")
env_option = click.option("--env", type=click.Choice(ENV_KINDS),
                          help="Where scenarios run (default from config: venv).")
device_option = click.option("--device", type=click.Choice(DEVICES),
                             help="Expected device class (default from config: cpu).")
config_option = click.option("--config", "config_path", type=click.Path(path_type=Path),
                             help=CONFIG_HELP)
verbose_option = click.option("-v", "--verbose", is_flag=True,
                              help="Show more progress detail.")
format_option = click.option("--format", "fmt", type=click.Choice(FORMATS), default="text",
                             show_default=True, help=FORMAT_HELP)
output_option = click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                             help="Write the report here instead of stdout.")
report_option = click.option(
    "--report", "reports", multiple=True, metavar="FORMAT=PATH",
    help="Also write the report as FORMAT to PATH (repeatable), e.g. --report junit=out.xml.")
artifacts_option = click.option(
    "--artifacts", "artifacts_dir", type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="Keep the JSON report and both sides' results here (default: lockguard's cache, the "
         "last 20 per project).")
listing_format_option = click.option(
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True,
    help="text: a table; json: for programs.")


def steps_option(minimum: int = 1) -> Decorator:
    """--steps, from `minimum` (a command that needs several steps to compare says so) to
    names.MAX_STEPS; None when not given, so the config's or scenario's steps apply."""
    return click.option("--steps", type=click.IntRange(min=minimum, max=MAX_STEPS),
                        help="Override training steps.")


def repeat_option(help: str) -> Decorator:
    """--repeat K, 1 to names.MAX_REPEAT, default 1; `help` says what the runs are for in
    this command."""
    from lockguard.names import MAX_REPEAT

    return click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1,
                        show_default=True, help=help)


def options(*decorators: Decorator) -> Decorator:
    """Several options as one decorator, in the order --help lists them."""
    def apply(func: Callable[..., Any]) -> Callable[..., Any]:
        for decorator in reversed(decorators):
            func = decorator(func)
        return func
    return apply


def _set_sandbox(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    # The edge: the invocation's setting travels as the variable Settings.resolve reads.
    if value is not None:
        import os

        os.environ["LOCKGUARD_SANDBOX"] = value


sandbox_option = click.option(
    "--sandbox", type=click.Choice(SANDBOX_MODES), expose_value=False,
    callback=_set_sandbox, is_eager=True,
    help="What lock code runs in (default from config: auto, the strongest available; "
         "required: exit 2 without one; off: bare, said first in the report).")


def _set_jobs(ctx: click.Context, param: click.Parameter, value: int | None) -> None:
    # The edge, as --sandbox: the variable the pipeline's worker count is read from.
    if value is not None:
        import os

        os.environ["LOCKGUARD_JOBS"] = str(value)


def _jobs_option() -> Decorator:
    from lockguard.envvars import MAX_JOBS

    return click.option(
        "--jobs", "-j", type=click.IntRange(min=1, max=MAX_JOBS), expose_value=False,
        callback=_set_jobs, is_eager=True, metavar="N",
        help="Training runs at once (default: LOCKGUARD_JOBS, else one per core, at most 8); "
             "1 on a busy or shared machine. Timing runs are always one at a time.")


# Where the scenarios run and what is judged: what every command that plans scenarios takes.
scope_options = options(lock_option, scenario_option, env_option, sandbox_option,
                        _jobs_option(), device_option, steps_option())
# Where the report goes: stdout or -o in one format, and more formats to files.
report_options = options(format_option, output_option, report_option)
run_options = options(scope_options, report_options, artifacts_option, config_option,
                      verbose_option)
