"""The command line. Thin: parse options, call the modules, render, choose the exit code.

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

from lockguard import __version__, answers
from lockguard.names import (
    DEVICES, ENV_KINDS, FORMATS, FRAMEWORKS, MAX_REPEAT, MAX_SHARDS, MAX_STEPS, MODEL_FAMILIES,
    RESOLVERS,
)
from lockguard.errors import (
    EXIT_ERROR, EXIT_INTERNAL, EXIT_INTERRUPTED, LockguardError, UsageError, one_line,
)

# lockguard uses no pydantic plugins; looking for them scans every installed distribution's
# entry points, a fifth of the time `check` takes when it can answer from the goldens.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

MACHINE_FORMATS = ("json", "junit", "github")  # read by programs: progress stays quiet
FORMAT_HELP = ("How the report is written, on stdout or to -o: text for people; json for "
               "programs and `lockguard report`; markdown; html; junit; github (workflow "
               "annotations).")
CONFIG_HELP = "Config file (default: pyproject.toml or lockguard.toml, searched upwards)."


def fail(message: str, code: int) -> None:
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


def handles_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """The one exit-code map: expected failures are one line and exit 2, bugs exit 3."""
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
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


def common_options(func: Callable[..., Any]) -> Callable[..., Any]:
    options = [
        click.option("--lock", "locks", multiple=True, metavar="PATH",
                     help="Lock file (repeatable); overrides [tool.lockguard] lock/locks."),
        click.option("--scenario", "scenarios", multiple=True, metavar="ID",
                     help="Scenario id or prefix such as 'torch' (repeatable). Default: all."),
        click.option("--env", type=click.Choice(ENV_KINDS),
                     help="Where scenarios run (default from config: venv)."),
        click.option("--device", type=click.Choice(DEVICES),
                     help="Expected device class."),
        click.option("--steps", type=click.IntRange(min=1, max=MAX_STEPS),
                     help="Override training steps."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="text",
                     show_default=True, help=FORMAT_HELP),
        click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
                     help="Write the report here instead of stdout."),
        report_option,
        click.option("--artifacts", "artifacts_dir",
                     type=click.Path(file_okay=False, path_type=Path), metavar="DIR",
                     help="Keep the JSON report and both sides' results here (default: "
                          "lockguard's cache, the last 20 per project)."),
        click.option("--config", "config_path", type=click.Path(path_type=Path),
                     help="Config file (default: pyproject.toml or lockguard.toml, searched "
                          "upwards)."),
        click.option("-v", "--verbose", is_flag=True, help="Show more progress detail."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


report_option = click.option(
    "--report", "reports", multiple=True, metavar="FORMAT=PATH",
    help="Also write the report as FORMAT to PATH (repeatable), e.g. --report junit=out.xml.")


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
    targets: list[tuple[str, Path | None]] = [(fmt, output)]
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


def refuse_inputs(targets: list[tuple[str, Path | None]],
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


def deliver(report: Any, targets: list[tuple[str, Path | None]], *, ci: bool = True) -> None:
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


def github_actions(report: Any, targets: list[tuple[str, Path | None]]) -> None:
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
    answers.spoil("appended to the job summary")  # a replay would not
    summary_path = Path(summary)
    if any(fmt == "markdown" and path is not None and path.resolve() == summary_path.resolve()
           for fmt, path in targets):
        return  # asked for explicitly: already there
    try:
        # Appended, not replaced: the runner and other steps append to this file too (GitHub's
        # documented protocol), so it is the one file lockguard does not write atomically.
        with open(summary_path, "a", encoding="utf-8") as f:
            f.write("\n" + render(report, "markdown"))
    except (OSError, LockguardError) as exc:
        # The gate's answer stands; a summary the runner will not take is worth a warning.
        click.echo(f"lockguard: warning: job summary {summary}: {one_line(str(exc))}", err=True)


def keep_evidence(target: Any, report: Any) -> None:
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


def _setup(config_path: Path | None, locks: tuple[str, ...], scenarios: tuple[str, ...],
           fmt: str, verbose: bool):
    from lockguard.config import load_config
    from lockguard.progress import Progress
    from lockguard.locks.ref import load_locks
    from lockguard.scenarios import select

    config = load_config(config_path)
    chosen = select(config, list(scenarios))
    lock_refs = load_locks(config, list(locks))
    progress = Progress(quiet=fmt in MACHINE_FORMATS, verbose=verbose)
    return config, chosen, lock_refs, progress


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lockguard")
def cli() -> None:
    """Catch silent training drift when an ML stack's lock changes.

    \b
    Examples:
      lockguard init                       # add lockguard to this project
      lockguard check --base origin/main   # A/B the locks changed since main (the PR gate)
      lockguard check                      # compare with the goldens
      lockguard check --help               # every option of a command
    """
    from lockguard.process import install_signal_handlers

    # Ctrl-C and SIGTERM kill every training and build at once and exit 130 (handles_errors).
    install_signal_handlers()


def main(argv: list[str] | None = None) -> None:
    """The `lockguard` entry point: click's usage errors become the same one line as every
    other bad input (click's own rendering spreads them over three lines)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["check"]:
        # What the answer depends on is recorded; one that ran nothing is kept (answers.py).
        answers.begin(args)
    try:
        code = cli.main(args=args, prog_name="lockguard", standalone_mode=False)
    except (KeyboardInterrupt, click.exceptions.Abort):
        fail("interrupted", EXIT_INTERRUPTED)
    except click.ClickException as exc:
        where = exc.ctx.command_path if getattr(exc, "ctx", None) else "lockguard"
        fail(f"error: {where}: {one_line(exc.format_message())} (see `{where} --help`)",
             EXIT_ERROR)
    finally:
        answers.forget()
    sys.exit(code if isinstance(code, int) else 0)


@cli.command()
@click.option("--config", "config_path", type=click.Path(path_type=Path), help=CONFIG_HELP)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text: a table; json: for programs.")
@handles_errors
def scenarios(config_path: Path | None, fmt: str) -> None:
    """List bundled and user scenarios.

    \b
    Examples:
      lockguard scenarios
      lockguard scenarios --format json
    """
    import json

    from lockguard.config import load_config
    from lockguard.scenarios import all_scenarios

    config = load_config(config_path)
    items = all_scenarios(config)
    if fmt == "json":
        click.echo(json.dumps([{"id": s.id, "framework": s.framework, "source": s.source,
                                "steps": s.steps, "dtype": s.dtype,
                                "requires": list(s.requires),
                                "description": s.description} for s in items], indent=2))
        return
    width = max(len(s.id) for s in items)
    for s in items:
        click.echo(f"{s.id:<{width}}  {s.framework:<10}  {s.source:<7}  {s.steps:>3} steps  "
                   f"{s.description}")


@cli.command()
@common_options
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1,
              show_default=True,
              help="Run each scenario K times: bitwise-equal runs make an exact golden, "
                   "differing ones a golden with their noise envelope.")
@handles_errors
def record(locks, scenarios, env, device, steps, fmt, output, reports, artifacts_dir,
           config_path, verbose, repeat) -> None:
    """Run scenarios and write golden/<device>/<hardware class>/<scenario>.json (only those
    whose results or inputs changed).

    \b
    Examples:
      lockguard record                                 # every configured scenario
      lockguard record --scenario torch.mlp --repeat 3
      lockguard record --lock requirements.txt --scenario jax
    """
    targets = report_targets(fmt, output, reports)
    from lockguard import evidence
    from lockguard.flows.record import record as record_flow
    from lockguard.config import Options, project_inputs

    config, chosen, lock_refs, progress = _setup(config_path, locks, scenarios, fmt, verbose)
    refuse_inputs(targets, project_inputs(config, locks))
    keep = evidence.prepare(artifacts_dir, config.root)
    opts = Options(device=device, steps=steps, env=env, repeat=repeat)
    report = record_flow(config, lock_refs, chosen, opts, progress)
    report.id = keep.report_id
    report.invocation = invocation("record", locks=locks, config_path=config_path, env=env,
                                   device=device, steps=steps,
                                   flags=("--repeat", str(repeat)) if repeat > 1 else ())
    deliver(report, targets)
    keep_evidence(keep, report)
    sys.exit(0 if report.passed else 1)


@cli.command()
@common_options
@click.option("--baseline-lock", "baseline_locks", multiple=True, metavar="OLD",
              help="Also build OLD's environment and compare side by side (A/B).")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1,
              show_default=True,
              help="Run each scenario K times (detects nondeterminism, steadier timings).")
@click.option("--rerun", is_flag=True, help="Run even when nothing changed since the golden.")
@click.option("--allow-new", is_flag=True,
              help="A scenario without a golden is reported `new` instead of an error.")
@click.option("--exact", is_flag=True, help="Require bitwise-identical results.")
@click.option("--base", "base_ref", metavar="GITREF",
              help="A/B against the locks at the merge base with GITREF (e.g. origin/main), "
                   "judged by the configuration there; exits 0 at once when no lock changed.")
@click.option("--policy", "policy_from", type=click.Choice(["base", "pr"]), default="base",
              show_default=True,
              help="With --base: whose configuration judges. base: the merge base's (a change "
                   "cannot weaken the gate that judges it; what it changes of the policy is "
                   "reported first and takes effect once merged); pr: this checkout's own.")
@click.option("--shard", metavar="K/N",
              help="Run part K of the N-part plan (`lockguard plan --shards N`) and write a "
                   "partial report; `lockguard merge` joins the parts.")
@click.option("--plan-entry", "plan_entry", metavar="ID",
              help="Run the plan entry ID (as `lockguard plan` prints it) instead of --shard; "
                   "with the plan's own --shards N, if it was made with one.")
@click.option("--shards", "plan_shards", type=click.IntRange(min=1, max=MAX_SHARDS),
              metavar="N",
              help="With --plan-entry: the --shards the plan was made with.")
@click.option("--bisect", "bisect", is_flag=True,
              help="A/B: find the smallest set of changed packages behind each failing verdict.")
@click.option("--timing", is_flag=True,
              help="A/B: also make the timing runs that judge `slower` (timing_runs a side, one "
                   "at a time, baseline and candidate alternating); automatic when `slower` is "
                   "in fail_on.")
@handles_errors
def check(locks, scenarios, env, device, steps, fmt, output, reports, artifacts_dir,
          config_path, verbose, baseline_locks, repeat, rerun, allow_new, exact,
          base_ref, policy_from, shard, plan_entry, plan_shards, bisect=False,
          timing=False) -> None:
    """Run scenarios against the lock and compare with goldens (or a baseline lock).

    \b
    Examples:
      lockguard check                              # against the goldens
      lockguard check --base origin/main           # A/B: the merge base's locks against these
      lockguard check --baseline-lock old.txt --scenario torch --report junit=junit.xml
      lockguard check --base origin/main --bisect  # which changed packages fail the gate
    """
    targets = report_targets(fmt, output, reports)
    from lockguard import evidence
    from lockguard.config import Options, project_inputs

    if bisect and not (baseline_locks or base_ref):
        raise UsageError("--bisect needs a baseline: --baseline-lock OLD or --base GITREF")
    opts = Options(device=device, steps=steps, env=env,
                          repeat=repeat, rerun=rerun, allow_new=allow_new, exact=exact,
                          bisect=bisect, timing=timing)
    if base_ref:
        if baseline_locks:
            raise UsageError("--base and --baseline-lock are two ways to pick a baseline: "
                            "use one")
        from lockguard.config import load_config
        from lockguard.flows.git_base import check_base, open_gate
        from lockguard.progress import Progress
        from lockguard.scenarios import select

        config = load_config(config_path)
        refuse_inputs(targets, project_inputs(config, locks))
        # The policy, the scenarios and the locks are the judging configuration's: the base's.
        gate = open_gate(config, base_ref, list(locks), policy_from)
        chosen = select(gate.judging, list(scenarios))
        part = _shard_part(shard, gate.judging, opts, chosen, locks, gate.candidate_refs()
                           if shard or plan_entry else None, plan_entry, plan_shards)
        keep = evidence.prepare(artifacts_dir, config.root, check=True)
        if part is not None and not part[1]:
            report = part[2]
        else:
            report = check_base(gate, part[1] if part else chosen, opts,
                                Progress(quiet=fmt in MACHINE_FORMATS, verbose=verbose))
    else:
        from lockguard.flows.check import check as check_flow
        from lockguard.locks.ref import LockRef, lock_target, read_lock

        config, chosen, lock_refs, progress = _setup(config_path, locks, scenarios, fmt, verbose)
        refuse_inputs(targets, project_inputs(config, locks + baseline_locks))
        baseline = [LockRef(Path(p), read_lock(Path(p), lock_target(config)))
                    for p in baseline_locks]
        part = _shard_part(shard, config, opts, chosen, locks, lock_refs, plan_entry,
                           plan_shards)
        keep = evidence.prepare(artifacts_dir, config.root, check=True)
        if part is not None and not part[1]:
            report = part[2]
        else:
            report = check_flow(config, lock_refs, part[1] if part else chosen, opts, baseline,
                                progress)
    if part is not None:
        report.shard = part[0]
        report.notes.append(f"shard {part[0].index}/{part[0].total} ({part[0].entry}) of plan "
                            f"{part[0].plan_digest[:19]}: a partial report; `lockguard merge` "
                            "joins the parts into the gate's decision")
    report.id = keep.report_id
    args = (("--base", base_ref) + (("--policy", policy_from) if policy_from != "base" else ())
            if base_ref else tuple(a for b in baseline_locks for a in ("--baseline-lock", b)))
    report.invocation = invocation("check", *args, locks=locks, config_path=config_path,
                                   env=env, device=device, steps=steps,
                                   flags=(("--exact",) if exact else ())
                                   + (("--bisect",) if bisect else ())
                                   + (("--timing",) if timing else ())
                                   + (("--repeat", str(repeat)) if repeat > 1 else ()))
    deliver(report, targets)
    keep_evidence(keep, report)
    if not report.evidence and keep.pruned and targets == [("text", None)]:
        # Nothing ran: the same invocation is answered from what this one read (answers.py).
        answers.remember(0 if report.passed else 1, forget_last_check=config.root)
    sys.exit(0 if report.passed else 1)


def _shard_part(shard: str | None, config, opts, chosen, locks: tuple[str, ...],
                lock_refs=None, entry: str | None = None, plan_shards: int | None = None):
    """For `check --shard K/N` or `--plan-entry ID`: (this part's ShardInfo, the scenarios it
    runs, the Report of a part the plan leaves empty), or None without either."""
    if plan_shards is not None and entry is None:
        raise UsageError("--shards goes with --plan-entry (`check --shard K/N` says N itself)")
    if shard is None and entry is None:
        return None
    if shard is not None and entry is not None:
        raise UsageError("--shard and --plan-entry are two ways to name one part: use one")
    from lockguard.flows import shards
    from lockguard.locks.ref import load_locks

    # An entry id names a part of the plan made with the same options (--shards included).
    k, n = shards.parse_shard(shard) if shard is not None else (0, plan_shards)
    made = shards.make_plan(config, opts, chosen, lock_refs or load_locks(config, list(locks)), n)
    if entry is not None:
        k = shards.entry_index(made, shards.parse_entry(entry))
    mine = shards.shard_scenarios(made, k, chosen)
    return shards.shard_info(made, k), mine, shards.empty_report(made, k) if not mine else None


@cli.command()
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Lock file (repeatable); overrides [tool.lockguard] lock/locks.")
@click.option("--scenario", "scenarios", multiple=True, metavar="ID",
              help="Scenario id or prefix (repeatable). Default: all.")
@click.option("--env", type=click.Choice(ENV_KINDS),
              help="Where scenarios run (default from config: venv).")
@click.option("--device", type=click.Choice(DEVICES),
              help="Expected device class (default from config: cpu).")
@click.option("--steps", type=click.IntRange(min=1, max=MAX_STEPS),
              help="Override training steps.")
@click.option("--shards", type=click.IntRange(min=1, max=MAX_SHARDS), metavar="N",
              help="Number of parts (default: one per device, framework and lock).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github-matrix"]),
              default="text", show_default=True,
              help="text for people; json: the whole plan; github-matrix: one line for a "
                   "workflow's strategy.matrix.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the plan here instead of stdout.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help=CONFIG_HELP)
@handles_errors
def plan(locks, scenarios, env, device, steps, shards, fmt, output, config_path) -> None:
    """Print the work as CI matrix entries: one per device, framework, lock and shard, with
    its runner label, the environments it builds and its estimated seconds. Run every entry
    with the same options plus `check --shard K/N`, then `lockguard merge` the parts.

    \b
    Examples:
      lockguard plan --shards 4
      lockguard plan --format github-matrix -o matrix.json
    """
    import json

    check_output(output)
    from lockguard.config import Options, load_config, project_inputs
    from lockguard.flows import shards as sharding
    from lockguard.locks.ref import load_locks
    from lockguard.scenarios import select

    config = load_config(config_path)
    refuse_inputs([("text", output)], project_inputs(config, locks))
    made = sharding.make_plan(config, Options(device=device, steps=steps, env=env),
                              select(config, list(scenarios)), load_locks(config, list(locks)),
                              shards)
    if fmt == "github-matrix":
        # One line: what `echo "matrix=…" >> "$GITHUB_OUTPUT"` takes.
        text = json.dumps(sharding.github_matrix(made), separators=(",", ":")) + "\n"
    elif fmt == "json":
        text = json.dumps(made.to_json(), indent=2) + "\n"
    else:
        text = sharding.plan_text(made)
    if output is None:
        click.echo(text, nl=False)
    else:
        from lockguard.files import write_text

        write_text(output, text)


@cli.command()
@click.argument("parts", nargs=-1, required=True, metavar="PART.json...",
                type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help=FORMAT_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of stdout.")
@report_option
@handles_errors
def merge(parts: tuple[Path, ...], fmt: str, output: Path | None,
          reports: tuple[str, ...]) -> None:
    """Join the partial JSON reports of every `check --shard K/N` of one plan into one report
    and gate decision. A missing, duplicated or foreign part is an error (exit 2) naming it.
    Exits 0 when the joined gate passes, 1 when it fails.

    \b
    Examples:
      lockguard merge parts/*.json
      lockguard merge parts/*.json --format markdown -o report.md --report junit=junit.xml
    """
    targets = report_targets(fmt, output, reports)
    from lockguard.flows.shards import merge_files

    refuse_inputs(targets, [(part, "a part being merged", False) for part in parts])
    report = merge_files(list(parts))
    deliver(report, targets)
    sys.exit(0 if report.passed else 1)


@cli.command("bisect")
@common_options
@click.option("--baseline-lock", "baseline_locks", multiple=True, metavar="OLD",
              help="The lock the candidate moved from.")
@click.option("--base", "base_ref", metavar="GITREF",
              help="Take the baseline locks from the merge base with GITREF.")
@click.option("--policy", "policy_from", type=click.Choice(["base", "pr"]), default="base",
              show_default=True, help="With --base: whose configuration judges (see check).")
@click.option("--exact", is_flag=True, help="Require bitwise-identical results.")
@click.pass_context
@handles_errors
def bisect_command(ctx, locks, scenarios, env, device, steps, fmt, output, reports,
                   artifacts_dir, config_path, verbose, baseline_locks, base_ref,
                   policy_from, exact) -> None:
    """A/B the lock against a baseline, then find the smallest set of changed packages that
    reproduces each failing verdict (`check --bisect`).

    \b
    Examples:
      lockguard bisect --baseline-lock old.txt
      lockguard bisect --base origin/main --scenario torch.mlp
    """
    if not (baseline_locks or base_ref):
        raise UsageError("bisect needs a baseline: --baseline-lock OLD or --base GITREF")
    ctx.invoke(check, locks=locks, scenarios=scenarios, env=env, device=device, steps=steps,
               fmt=fmt, output=output, reports=reports, artifacts_dir=artifacts_dir,
               config_path=config_path, verbose=verbose, baseline_locks=baseline_locks,
               repeat=1, rerun=False,
               allow_new=False, exact=exact, base_ref=base_ref, policy_from=policy_from,
               bisect=True)


@cli.command()
@click.argument("upgrades", nargs=-1, required=True)
@common_options
@click.option("--inputs", type=click.Path(path_type=Path),
              help="The requirements.in the lock is compiled from (default: <lock>.in).")
@click.option("--resolver", type=click.Choice(RESOLVERS), default=None,
              help="Default: each lock's own, the tool its header names (pip-compile's "
                   "header: pip-tools; uv's: uv); uv when the header names neither.")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1,
              show_default=True,
              help="Run each scenario K times on each side (detects nondeterminism, steadier "
                   "timings).")
@handles_errors
def propose(upgrades, locks, scenarios, env, device, steps, fmt, output, reports,
            artifacts_dir, config_path, verbose, inputs, resolver, repeat) -> None:
    """Resolve a candidate lock with UPGRADES (e.g. torch==2.14.1 'jax>=0.10') into the cache
    and A/B-check it against the current lock. Your files are not touched.

    \b
    Examples:
      lockguard propose torch==2.14.1
      lockguard propose 'jax>=0.10' --scenario jax --repeat 3
    """
    targets = report_targets(fmt, output, reports)
    from lockguard import evidence
    from lockguard.flows.propose import propose as propose_flow
    from lockguard.config import Options, project_inputs

    config, chosen, lock_refs, progress = _setup(config_path, locks, scenarios, fmt, verbose)
    refuse_inputs(targets, project_inputs(config, locks)
                  + ([(inputs, "the requirements input", False)] if inputs else []))
    keep = evidence.prepare(artifacts_dir, config.root)
    opts = Options(device=device, steps=steps, env=env,
                          repeat=repeat)
    report = propose_flow(config, lock_refs, list(upgrades), chosen, opts, resolver=resolver,
                            inputs=inputs, progress=progress)
    extra = (("--inputs", str(inputs)) if inputs else ()) + (
        ("--resolver", resolver) if resolver else ())
    report.id = keep.report_id
    report.invocation = invocation("propose", *upgrades, locks=locks, config_path=config_path,
                                   env=env, device=device, steps=steps, flags=extra)
    deliver(report, targets)
    keep_evidence(keep, report)
    sys.exit(0 if report.passed else 1)


@cli.command("compare-frameworks")
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Lock file (repeatable; one per framework); overrides [tool.lockguard] "
                   "lock/locks.")
@click.option("--family", "families", multiple=True, type=click.Choice(MODEL_FAMILIES),
              help="Model family (repeatable). Default: all.")
@click.option("--framework", "frameworks", multiple=True, type=click.Choice(FRAMEWORKS),
              help="Only this framework (repeatable). Default: every one a lock pins.")
@click.option("--env", type=click.Choice(ENV_KINDS),
              help="Where scenarios run (default from config: venv).")
@click.option("--device", type=click.Choice(DEVICES), help="Expected device class.")
@click.option("--steps", type=click.IntRange(min=2, max=MAX_STEPS),
              help="Override training steps.")
@click.option("--repeat", type=click.IntRange(min=1, max=MAX_REPEAT), default=1,
              show_default=True,
              help="Runs per scenario; the table shows their medians.")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help=FORMAT_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of stdout.")
@report_option
@click.option("--config", "config_path", type=click.Path(path_type=Path),
              help="Config file (default: pyproject.toml or lockguard.toml, searched upwards).")
@click.option("-v", "--verbose", is_flag=True, help="Show more progress detail.")
@handles_errors
def compare_frameworks(locks, families, frameworks, env, device, steps, repeat, fmt, output,
                       reports, config_path, verbose) -> None:
    """Train the bundled model families (mlp, lm, cnn: same data and initial weights everywhere) in
    every framework the locks pin, on this machine, one run at a time, and set them side by
    side: step-0 parity, final loss, first-step (compile) and steady step time, peak memory,
    compiled paths against their plain twins.

    Exits 0 when every run was healthy, 1 when one broke or ran on the wrong device.

    \b
    Examples:
      lockguard compare-frameworks
      lockguard compare-frameworks --family mlp --repeat 3 --format html -o frameworks.html
    """
    targets = report_targets(fmt, output, reports)
    from lockguard.config import Options, load_config, project_inputs
    from lockguard.flows.frameworks import compare_frameworks as compare_flow
    from lockguard.flows.frameworks import comparison_scenarios
    from lockguard.locks.ref import load_locks
    from lockguard.progress import Progress

    config = load_config(config_path)
    refuse_inputs(targets, project_inputs(config, locks))
    chosen = comparison_scenarios(list(families), list(frameworks))
    lock_refs = load_locks(config, list(locks))
    progress = Progress(quiet=fmt in MACHINE_FORMATS, verbose=verbose)
    opts = Options(device=device, steps=steps, env=env, repeat=repeat)
    report = compare_flow(config, lock_refs, chosen, opts, progress)
    flags = tuple(a for f in families for a in ("--family", f)) + tuple(
        a for f in frameworks for a in ("--framework", f)) + (
        ("--repeat", str(repeat)) if repeat > 1 else ())
    report.invocation = invocation("compare-frameworks", locks=locks, config_path=config_path,
                                   env=env, device=device, steps=steps, flags=flags)
    deliver(report, targets)
    sys.exit(0 if report.passed else 1)


@cli.command()
@click.option("--scenario", "scenarios", multiple=True, metavar="ID",
              help="Accept only these scenarios (id or prefix; repeatable). Default: every "
                   "compared scenario that did not come out identical.")
@click.option("--reason", metavar="TEXT",
              help="Why the change is intended; recorded in each golden's provenance. Required.")
@click.option("--from", "source", type=click.Path(path_type=Path), metavar="DIR|REPORT.json",
              help="An artefact directory or JSON report (default: the last check's artefacts).")
@click.option("--yes", "-y", is_flag=True,
              help="Do not ask for confirmation (required when stdin is not a terminal).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help=CONFIG_HELP)
@handles_errors
def accept(scenarios, reason, source, yes, config_path) -> None:
    """Adopt the last check's candidate results as goldens, on purpose. Shows what will change,
    asks (or --yes), and records the reason, author, commit and lock in each golden.

    Exits 0 when written (or nothing to accept), 1 when declined at the prompt, 2 when refused:
    no --reason, a candidate that is not a healthy run, a scenario not in the report, or no
    terminal to ask and no --yes.

    \b
    Examples:
      lockguard accept --reason "numpy 2 promotion, reviewed in #123"
      lockguard accept --from lockguard-report/evidence --scenario torch.mlp --reason "..." --yes
    """
    if not reason or not reason.strip():
        raise UsageError('accept needs --reason "why this change is intended" (it is recorded '
                         "in each golden's provenance)")
    from lockguard.flows import accept as acceptance
    from lockguard.config import load_config
    from lockguard.files import display_path
    from lockguard.gitref import author
    from lockguard.report import load_report

    config = load_config(config_path)
    path = acceptance.report_path(source, config.root)
    report = load_report(path)
    adoptions, notes = acceptance.plan(report, path, config, list(scenarios), reason.strip(),
                                       author(config.root),
                                       verified=acceptance.vouched(report, path, config))
    for note in notes:
        click.echo(f"lockguard: {note}", err=True)
    if not adoptions:
        return
    click.echo(acceptance.describe(adoptions, path), nl=False)
    if not yes:
        if not sys.stdin.isatty():
            raise UsageError(f"not a terminal to confirm {len(adoptions)} golden(s) on: pass "
                             "--yes to write them; nothing written")
        if not click.confirm(f"Write {len(adoptions)} golden(s)?", default=False):
            click.echo("lockguard: nothing written", err=True)
            sys.exit(1)
    for adoption, written in acceptance.adopt(adoptions):
        state = "wrote" if written else "unchanged (it already holds this result)"
        click.echo(f"{state}: {display_path(adoption.path)}", err=True)


@cli.command("lock")
@click.argument("requirements_in", required=False, default="requirements.in",
                type=click.Path(path_type=Path))
@click.option("-o", "--output-file", "output", type=click.Path(dir_okay=False, path_type=Path),
              help="Default: the input with a .txt suffix.")
@click.option("-P", "--upgrade-package", "upgrade_packages", multiple=True, metavar="P[==V]",
              help="Upgrade one package (to a version), keeping every other pin.")
@click.option("--resolver", type=click.Choice(RESOLVERS), default=None,
              help="Default: the tool that wrote the existing lock, as its header says "
                   "(pip-compile's header: pip-tools; uv's: uv); uv when there is no lock or "
                   "its header names neither.")
@handles_errors
def lock_command(requirements_in: Path, output: Path | None, upgrade_packages, resolver) -> None:
    """Write a fully pinned, hashed lock (requirements.txt format, with the header of the
    resolver that wrote it) from REQUIREMENTS_IN. Pins and index options of an existing lock
    are kept; the machine's pip configuration is not used. An upgrade that a line of
    REQUIREMENTS_IN rules out is refused, naming the line.

    \b
    Examples:
      lockguard lock                       # requirements.in -> requirements.txt
      lockguard lock ml/requirements.in -o ml/requirements.txt --resolver uv
      lockguard lock -P torch==2.14.1      # one package moves, every other pin stays
    """
    from lockguard.locks import resolve
    from lockguard.progress import Progress

    if not requirements_in.is_file():
        from lockguard.files import near_miss

        raise UsageError(f"{requirements_in}: requirements input not found"
                         f"{near_miss(requirements_in)}")
    target = output or requirements_in.with_suffix(".txt")
    resolver = resolver or resolve.default_resolver(target if target.is_file() else None)
    progress = Progress()
    with progress.step(f"Resolving {requirements_in} with {resolver}"):
        resolve.compile_lock(requirements_in, target, upgrade_packages=list(upgrade_packages),
                             resolver=resolver, progress=progress.detail)
    click.echo(f"wrote {target}", err=True)


@cli.command()
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Lock file (repeatable); overrides [tool.lockguard] lock/locks.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help=CONFIG_HELP)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text",
              show_default=True, help="text: a table; json: for programs.")
@click.option("--index-url", metavar="URL", help="Default: the index pip is configured with.")
@handles_errors
def outdated(locks, config_path, fmt, index_url) -> None:
    """Newer releases of the framework families pinned in the lock(s).

    \b
    Examples:
      lockguard outdated
      lockguard outdated --lock requirements.txt --format json
    """
    import dataclasses
    import json

    from lockguard.config import load_config
    from lockguard.locks.ref import load_locks
    from lockguard.locks.outdated import outdated as newer_releases

    config = load_config(config_path)
    rows = [(ref, row) for ref in load_locks(config, list(locks))
            for row in newer_releases(ref.lock, index=index_url)]
    if fmt == "json":
        click.echo(json.dumps([{"lock": str(ref.path), **dataclasses.asdict(row)}
                               for ref, row in rows], indent=2, default=str))
        return
    for ref, row in rows:
        if row.error:
            click.echo(f"{row.name:<22} {row.current:<14} (index error: {row.error})")
            continue
        latest = row.latest_stable or "—"
        series = row.latest_in_series or "—"
        pre = row.latest_prerelease or ""
        flag = "" if row.is_outdated else "  up to date"
        click.echo(f"{row.name:<22} {row.current:<14} latest {latest:<12} same series "
                   f"{series:<12}{(' pre ' + pre) if pre else ''}{flag}")


@cli.command()
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help=FORMAT_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of stdout.")
@report_option
@handles_errors
def diff(old: Path, new: Path, fmt: str, output: Path | None, reports: tuple[str, ...]) -> None:
    """Show what changed between two locks: versions, bump kinds, frameworks touched.

    \b
    Examples:
      lockguard diff requirements-old.txt requirements.txt
      lockguard diff old.txt new.txt --format markdown -o diff.md
    """
    targets = report_targets(fmt, output, reports)
    from lockguard.flows.ab import diff as diff_flow
    from lockguard.locks.ref import LockRef, read_lock

    refuse_inputs(targets, [(old, "the old lock", False), (new, "the new lock", False)])
    report = diff_flow(LockRef(old, read_lock(old)), LockRef(new, read_lock(new)))
    report.invocation = invocation("diff", str(old), str(new))
    deliver(report, targets, ci=False)


@cli.command("report")
@click.argument("report_file", metavar="REPORT.json", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="text", show_default=True,
              help=FORMAT_HELP)
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the report here instead of stdout.")
@report_option
@handles_errors
def report_command(report_file: Path, fmt: str, output: Path | None,
                   reports: tuple[str, ...]) -> None:
    """Re-render a JSON report (--format json / --report json=PATH) in other formats, without
    running anything. Exits with the report's gate decision: 0 passed, 1 failed.

    \b
    Examples:
      lockguard report report.json --format html -o report.html
      lockguard report report.json --report junit=junit.xml --report markdown=report.md
    """
    targets = report_targets(fmt, output, reports)
    from lockguard.report import load_report

    refuse_inputs(targets, [(report_file, "the report being rendered", False)])
    report = load_report(report_file)
    deliver(report, targets, ci=False)
    sys.exit(0 if report.passed else 1)


@cli.command()
@click.option("--framework", type=click.Choice(FRAMEWORKS),
              help="Default: every framework the lock pins.")
@click.option("--accelerator", type=click.Choice(DEVICES), default="cpu",
              show_default=True,
              help="The device the image is for. A cuda or tpu image is the lock's own "
                   "wheels (nvidia-*, libtpu) on the cpu images' base, its stack proven to "
                   "load before any GPU is seen; the driver comes from the host at run time.")
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Lock file (repeatable); default: the config's.")
@click.option("--base-image", metavar="IMAGE",
              help="Build on this local image instead of the pinned base (air gaps, tests).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help=CONFIG_HELP)
@click.option("--push", "registry", metavar="REGISTRY",
              help="Also tag the image below REGISTRY (e.g. ghcr.io/your-org) and push it; "
                   "the pushed digest is printed and recorded. Nothing is pushed without it.")
@handles_errors
def build(framework, accelerator, locks, base_image, config_path, registry) -> None:
    """Build (or reuse) the pinned container image of a lock for one framework.

    \b
    Examples:
      lockguard build --framework torch
      lockguard build --framework jax --accelerator cuda --push ghcr.io/your-org
    """
    from lockguard.config import load_config
    from lockguard.envs import docker
    from lockguard.progress import Progress
    from lockguard.locks.ref import load_locks
    from lockguard.locks.trust import require_trusted

    if registry is not None:
        from lockguard.envs.docker.push import check_registry

        check_registry(registry)  # before anything is built

    config = load_config(config_path)
    progress = Progress()
    refs = load_locks(config, list(locks))
    for ref in refs:  # every lock before any image: nothing installs what it does not pin
        require_trusted(ref.lock, allow_unhashed=config.allow_unhashed,
                        allow_insecure_index=config.allow_insecure_index)
    for ref in refs:
        pinned = sorted(ref.lock.frameworks() - {"numpy"}) or sorted(ref.lock.frameworks())
        for fw in [framework] if framework else pinned:
            if fw not in ref.lock.frameworks():
                raise UsageError(f"{ref.path}: the lock does not pin {fw}")
            image = docker.build_image(ref.lock, fw, accelerator, base_image=base_image,
                                       progress=progress)
            how = "reused" if image.reused else f"built in {image.seconds:.0f} s"
            click.echo(f"{image.tag}  {image.id[:19]}  {image.size / 1e6:.0f} MB  {how}  "
                       f"(log: {image.log})")
            if image.stack is not None:
                click.echo(f"  {docker.stack_line(image.stack)}")
            if registry is not None:
                from lockguard.envs.docker import engine
                from lockguard.envs.docker.build import image_dir
                from lockguard.envs.docker.push import push_image

                pushed = push_image(engine.connect(), image.tag, image.id, registry,
                                    image_dir(image.recipe))
                click.echo(f"pushed {pushed.ref}  (recorded in {pushed.record})")


@cli.command("init")
@click.argument("directory", required=False, default=".",
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Guard this lock (repeatable) instead of the requirements*.txt locks found "
                   "in DIRECTORY.")
@click.option("--config-file", "config_name", type=click.Choice(["pyproject.toml",
                                                                  "lockguard.toml"]),
              help="Where the settings go. Default: a [tool.lockguard] table appended to "
                   "pyproject.toml when there is one, else lockguard.toml.")
@click.option("--scenario-template/--no-scenario-template", "template", default=None,
              help="Also write scenarios/my_model.py, a scenario that trains your own model, "
                   "to edit. Default: asked on a terminal; not written with --yes.")
@click.option("--record/--no-record", "record_goldens", default=None,
              help="Record the goldens of the chosen scenarios on this machine (builds their "
                   "environments). Default: yes (asked on a terminal).")
@click.option("--workflow/--no-workflow", "workflow", default=None,
              help="Write .github/workflows/lockguard.yml, the gate on pull requests with the "
                   "lockguard action. Default: yes (asked on a terminal).")
@click.option("--action", "action", metavar="OWNER/REPO@REF", default=None,
              help="The lockguard action the workflow uses (default: your-org/lockguard@v1).")
@click.option("--yes", "-y", is_flag=True,
              help="Ask nothing, take the defaults (required when stdin is not a terminal).")
@click.option("-v", "--verbose", is_flag=True, help="Show more progress detail.")
@handles_errors
def init(directory, locks, config_name, template, record_goldens, workflow, action, yes,
         verbose) -> None:
    """Add lockguard to the project in DIRECTORY (default: here): find its locks and the
    frameworks they pin, write the config with the bundled scenarios that apply, record their
    goldens on this machine and write a GitHub workflow that runs the gate with the action.
    Optionally a scenario template that trains your own model. Asks on a terminal; --yes takes
    the defaults. What is there already (a config, a workflow, goldens) is left as it is: a
    second run changes nothing.

    Exits 0 when done (or nothing to do), 1 when a golden could not be recorded or the config
    was declined at the prompt, 2 when refused: no lock found, or no terminal to ask on and
    no --yes.

    \b
    Examples:
      lockguard init
      lockguard init --yes
      lockguard init --yes --no-record --lock requirements/gpu.txt
      lockguard init ml --scenario-template --action my-org/lockguard@v1"""
    from lockguard.flows import init as setup
    from lockguard.flows.init_files import ACTION, WORKFLOW_PATH
    from lockguard.progress import Progress

    def ask(flag: bool | None, question: str, default: bool) -> bool:
        return flag if flag is not None else click.confirm(question, default=default)

    found = setup.survey(directory, list(locks), config_name)
    choices = setup.Choices(template=bool(template), record=record_goldens is not False,
                            workflow=workflow is not False, action=action or ACTION)
    plan = setup.prepare(found, choices)
    if not plan.actions():
        for line in setup.describe(found) + plan.notes:
            click.echo(line)
        click.echo("lockguard is set up here: nothing to do")
        return
    if not yes and not sys.stdin.isatty():
        raise UsageError("not a terminal to ask on: pass --yes to take the defaults (--no-record, "
                         "--no-workflow, --scenario-template to change them); nothing written")
    for line in setup.describe(found):
        click.echo(line)
    if not yes:
        if plan.config_text is not None and not click.confirm(
                f"Write the config ({plan.config_summary}) to {setup.config_place(found)}?",
                default=True):
            click.echo("lockguard: nothing written", err=True)
            sys.exit(1)
        new_template = not os.path.lexists(found.project / found.template)
        choices = setup.Choices(
            template=ask(template, f"Also write {found.template.as_posix()}, a scenario that "
                         "trains your own model, to edit?", False) if new_template
            else choices.template,
            record=ask(record_goldens, f"Record the goldens of {len(plan.unrecorded)} "
                       "scenario(s) now (builds the environments: minutes the first time)?",
                       True) if plan.unrecorded else choices.record,
            workflow=ask(workflow, f"Write {WORKFLOW_PATH}?", True)
            if plan.workflow_text is not None else choices.workflow,
            action=choices.action)
        plan = setup.prepare(found, choices)
    done = setup.apply(plan, Progress(verbose=verbose))
    for line in done.lines:
        click.echo(line)
    if done.report is not None:
        deliver(done.report, [("text", None)], ci=False)
    click.echo("next:")
    for line in done.next_steps:
        click.echo(f"  {line}")
    if done.report is not None and not done.report.passed:
        sys.exit(1)


@cli.group()
def images() -> None:
    """Container image templates and their pinned bases.

    \b
    Examples:
      lockguard images pin
    """


@images.command("pin")
@handles_errors
def images_pin() -> None:
    """Refresh the base image digests in images/bases.toml from the registry.

    \b
    Examples:
      lockguard images pin
    """
    from lockguard.envs import docker
    from lockguard.progress import Progress

    changes = docker.pin_images(Progress())
    for base, (old, new) in changes.items():
        click.echo(f"{base}: {old} → {new}" if old != new else f"{base}: {new} (unchanged)")


if __name__ == "__main__":  # pragma: no cover
    main()
