"""Where a command's report goes, checked before anything runs and written once at the end:
the report targets (stdout or -o in one format, --report FORMAT=PATH for more), refusing a
target that is one of the run's inputs, the text's colour and width, what a GitHub Actions
step shows besides, the evidence a run keeps, and `finish`: the one end of every command that
produces a Report (deliver, keep the evidence, exit 0 or 1).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockguard.errors import LockguardError, UsageError, one_line
from lockguard.names import FORMATS

if TYPE_CHECKING:
    from lockguard.evidence import Target
    from lockguard.progress import Progress
    from lockguard.report import Report

MACHINE_FORMATS = ("json", "junit", "github")  # read by programs: progress stays quiet
Targets = list[tuple[str, "Path | None"]]


def progress_for(fmt: str, verbose: bool = False) -> Progress:
    """Progress on stderr, quiet when stdout is a report a program reads."""
    from lockguard.progress import Progress

    return Progress(quiet=fmt in MACHINE_FORMATS, verbose=verbose)


def color_wanted() -> bool:
    """Colour on a terminal, unless NO_COLOR is set (https://no-color.org)."""
    return sys.stdout.isatty() and not os.environ.get("NO_COLOR")


def text_width() -> int | None:
    """The terminal's width; in a log with no terminal, COLUMNS if set, else the default."""
    import shutil

    if sys.stdout.isatty():
        return shutil.get_terminal_size().columns
    columns = os.environ.get("COLUMNS", "")
    return int(columns) if columns.isdigit() and int(columns) > 0 else None


def check_output(output: Path | None, what: str = "-o") -> None:
    """Refuse an unusable report target before anything runs, not after the trainings."""
    if output is None:
        return
    from lockguard.files import writable_dir

    try:
        if output.is_dir():
            raise UsageError(f"{what} {output}: is a directory")
        if not output.exists():
            writable_dir(output.parent, f"the directory of {what} {output}")
        elif not os.access(output, os.W_OK):
            raise UsageError(f"{what} {output}: not writable")
    except OSError as exc:  # a name too long, a symlink loop
        raise UsageError(f"{what} {output}: {exc.strerror or exc}") from None


def report_targets(fmt: str, output: Path | None, reports: tuple[str, ...]
                   ) -> list[tuple[str, Path | None]]:
    """(format, path or None for stdout) of every report to write, checked before anything
    runs: known formats, writable paths, no path named twice."""
    check_output(output)
    targets: Targets = [(fmt, output)]
    seen = {output.resolve(): "-o"} if output is not None else {}
    for value in reports:
        name, sep, path_text = value.partition("=")
        if not sep or not path_text:
            raise UsageError(f"--report {value}: expected FORMAT=PATH, e.g. junit=report.xml")
        if name not in FORMATS:
            raise UsageError(f"--report {value}: unknown format {name!r} "
                             f"(one of {', '.join(FORMATS)})")
        path = Path(path_text)
        check_output(path, "--report")
        key = path.resolve()
        if key in seen:
            raise UsageError(f"--report {value}: {path} is already written by {seen[key]}")
        seen[key] = f"--report {value}"
        targets.append((name, path))
    return targets


def refuse_inputs(targets: Targets,
                  inputs: list[tuple[Path, str, bool]]) -> None:
    """Refuse, before anything runs, a report target that is one of the run's own inputs
    (config.project_inputs: the config file, a lock, a scenario script, anything below
    golden_dir; or a file the command reads): a report written over it would replace the
    project's input with itself. Compared by real paths, so no symlink or `../` gets round it."""
    for index, (_, path) in enumerate(targets):
        if path is None:
            continue
        flag = "-o" if index == 0 else "--report"
        real = os.path.realpath(path)
        for given, what, below in inputs:
            root = os.path.realpath(given)
            if real == root or (below and os.path.commonpath([root, real]) == root):
                where = what if real == root else f"below {what}"
                raise UsageError(f"{flag} {path}: is {where} ({given}), an input of this run; "
                                 "a report never replaces it: write it elsewhere")


def deliver(report: Report, targets: Targets, *, ci: bool = True) -> None:
    """Write the report in every asked-for format; under GitHub Actions also the job summary,
    the annotations and, in the log, the verdict table."""
    from lockguard.files import repo_workdir, write_text
    from lockguard.report import render

    if report.workdir is None:
        report.workdir = repo_workdir()
    for fmt, path in targets:
        if path is None:
            color = fmt == "text" and color_wanted()
            click.echo(render(report, fmt, color=color, width=text_width()), nl=False)
        else:
            write_text(path, render(report, fmt))
            click.echo(f"report written to {path}", err=True)
    if ci and os.environ.get("GITHUB_ACTIONS") == "true":
        github_actions(report, targets)


def github_actions(report: Report, targets: Targets) -> None:
    """What a workflow step shows without being asked: the verdict table in the log, the
    annotations on the PR's lock lines, the Markdown report in the job summary."""
    from lockguard.report import render

    stdout_fmt = next((fmt for fmt, path in targets if path is None), None)
    # Only a log (text) or a free stdout takes the extras; a report someone redirects
    # (`--format markdown > out.md`) stays as it is, and they go to stderr.
    spare = stdout_fmt in (None, "text")
    if stdout_fmt != "text":
        click.echo(render(report, "text", width=text_width()), nl=False, err=not spare)
    if stdout_fmt != "github":
        click.echo(render(report, "github"), nl=False, err=not spare)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if not summary:
        return
    summary_path = Path(summary)
    if any(fmt == "markdown" and path is not None and path.resolve() == summary_path.resolve()
           for fmt, path in targets):
        return  # asked for explicitly: already there
    from lockguard.report.github import append_step_summary

    try:
        append_step_summary(summary_path, render(report, "markdown"))
    except (OSError, LockguardError) as exc:
        # The gate's answer stands; a summary the runner will not take is worth a warning.
        click.echo(f"lockguard: warning: job summary {summary}: {one_line(str(exc))}", err=True)


def keep_evidence(target: Target, report: Report) -> None:
    """Write the run's artefacts (lockguard/evidence.py) and say where, on one line."""
    from lockguard import evidence

    if target.pruned and report.command == "check" and not report.evidence:
        # A check that ran nothing (answered from the goldens) has no evidence to keep, and
        # no last-check pointer (evidence.prepare took it away as the check started).
        return
    from lockguard.report import render

    directory = evidence.save(target, report, render(report, "json"))
    click.echo(f"artefacts kept in {directory}", err=True)
    if report.passed or not sys.stderr.isatty() and os.environ.get("GITHUB_ACTIONS") == "true":
        return  # (the Markdown summary says what to do next in a workflow)
    from lockguard.report._common import next_steps

    for line in next_steps(report):
        click.echo(f"next: {line}", err=True)
    if report.command == "check":
        click.echo("next: the whole report, with its curves: lockguard report "
                   f"{directory / 'report.json'} --format html -o report.html", err=True)


def invocation(command: str, *args: str, locks: tuple[str, ...] = (),
               config_path: Path | None = None, env: str | None = None,
               device: str | None = None, steps: int | None = None,
               flags: tuple[str, ...] = ()) -> list[str]:
    """The command line that reproduces a run (scenarios are added per reader)."""
    argv = ["lockguard", command, *args]
    for lock in locks:
        argv += ["--lock", lock]
    if config_path is not None:
        argv += ["--config", str(config_path)]
    for flag, value in (("--env", env), ("--device", device), ("--steps", steps)):
        if value is not None:
            argv += [flag, str(value)]
    return argv + list(flags)


def finish(report: Report, targets: Targets, *, argv: list[str] | None = None,
           keep: Target | None = None, ci: bool = True) -> None:
    """The end of every command that produces a Report: name it (its id, the command line that
    reproduces it), write it to every target, keep its evidence, and exit 0 when the gate
    passes, 1 when it fails."""
    if argv is not None:
        report.invocation = argv
    if keep is not None:
        report.id = keep.report_id
    deliver(report, targets, ci=ci)
    if keep is not None:
        keep_evidence(keep, report)
    sys.exit(0 if report.passed else 1)
