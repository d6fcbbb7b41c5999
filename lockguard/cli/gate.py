"""The gate's commands: record goldens, check against them (or a baseline, or a git base),
bisect a failing check, plan and merge a sharded check, accept an intended change."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import click

from lockguard.cli.cache import trim_cache
from lockguard.cli.edge import handles_errors
from lockguard.cli.options import (
    config_option, device_option, env_option, lock_option, options, repeat_option, report_options, run_options, scenario_option, steps_option,
)
from lockguard.cli.output import (
    check_output, finish, invocation, progress_for, refuse_inputs, report_targets,
)
from lockguard.errors import UsageError
from lockguard.names import MAX_SHARDS

if TYPE_CHECKING:
    from lockguard.config import Options
    from lockguard.locks.ref import LockRef
    from lockguard.progress import Progress
    from lockguard.report import Report
    from lockguard.scenarios import Scenario
    from lockguard.settings import Settings


@dataclass(frozen=True)
class Run:
    """What a command that runs scenarios starts from: the settings (resolved once, from the
    config and the command line's options), the scenarios chosen, the locks read and the
    progress display."""

    settings: Settings
    scenarios: list[Scenario]
    locks: list[LockRef]
    progress: Progress


def setup_run(config_path: Path | None, locks: tuple[str, ...], scenarios: tuple[str, ...],
              fmt: str, verbose: bool, options: Options) -> Run:
    """Load the config, resolve the invocation's settings from it and `options`, select the
    scenarios and read the locks."""
    from lockguard.config import load_config
    from lockguard.locks.ref import load_locks
    from lockguard.scenarios import select
    from lockguard.settings import Settings

    config = load_config(config_path)
    return Run(Settings.resolve(config, options), select(config, list(scenarios)),
               load_locks(config, list(locks)), progress_for(fmt, verbose))


@click.command()
@run_options
@repeat_option("Run each scenario K times: bitwise-equal runs make an exact golden, "
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
    from lockguard.config import Options, project_inputs
    from lockguard.flows.record import record as record_flow

    run = setup_run(config_path, locks, scenarios, fmt, verbose,
                    Options(device=device, steps=steps, env=env, repeat=repeat))
    config = run.settings.config
    refuse_inputs(targets, project_inputs(config, locks))
    keep = evidence.prepare(artifacts_dir, config.root)
    report = record_flow(run.settings, run.locks, run.scenarios, run.progress)
    trim_cache(run.settings.cache_max_size, run.progress)
    finish(report, targets, keep=keep,
           argv=invocation("record", locks=locks, config_path=config_path, env=env,
                           device=device, steps=steps,
                           flags=("--repeat", str(repeat)) if repeat > 1 else ()))


policy_option = click.option(
    "--policy", "policy_from", type=click.Choice(["base", "pr"]), default="base",
    show_default=True,
    help="With --base: whose configuration judges. base: the merge base's (a change cannot "
         "weaken the gate that judges it; what it changes of the policy is reported first and "
         "takes effect once merged); pr: this checkout's own.")
exact_option = click.option("--exact", is_flag=True, help="Require bitwise-identical results.")


@click.command()
@run_options
@click.option("--baseline-lock", "baseline_locks", multiple=True, metavar="OLD",
              help="Also build OLD's environment and compare side by side (A/B).")
@repeat_option("Run each scenario K times (detects nondeterminism, steadier timings).")
@click.option("--rerun", is_flag=True,
              help="Run even when nothing changed since the golden (A/B: even when both sides "
                   "are the same lock, a check of determinism).")
@click.option("--allow-new", is_flag=True,
              help="A scenario without a golden is reported `new` instead of an error.")
@exact_option
@click.option("--base", "base_ref", metavar="GITREF",
              help="A/B against the locks at the merge base with GITREF (e.g. origin/main), "
                   "judged by the configuration there; exits 0 at once when no lock changed.")
@policy_option
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
@click.option("--locate/--no-locate", "locate", default=None,
              help="A/B: re-run the first divergent step of each torch scenario whose numbers "
                   "differ with every module captured, and name the module where the "
                   "difference starts (automatic for a drift; --no-locate: never).")
@click.option("--all-scenarios", "all_scenarios", is_flag=True,
              help="A/B: run every selected scenario, also a compiled, data-parallel, "
                   "data-pipeline or model-library one that the lock change cannot reach "
                   "(left out by default while its eager twin runs: config skip_unreached).")
@handles_errors
def check(locks, scenarios, env, device, steps, fmt, output, reports, artifacts_dir,
          config_path, verbose, baseline_locks, repeat, rerun, allow_new, exact,
          base_ref, policy_from, shard, plan_entry, plan_shards, bisect=False,
          timing=False, locate=None, all_scenarios=False) -> None:
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
    from lockguard.config import Options, load_config, project_inputs
    from lockguard.flows.check import GOLDENS, Baseline, BaselineLocks, MergeBase
    from lockguard.flows.check import check as check_flow
    from lockguard.flows.shards import shard_part
    from lockguard.locks.ref import LockRef, load_locks, lock_target, read_lock
    from lockguard.scenarios import select
    from lockguard.settings import Settings

    if bisect and not (baseline_locks or base_ref):
        raise UsageError("--bisect needs a baseline: --baseline-lock OLD or --base GITREF")
    if base_ref and baseline_locks:
        raise UsageError("--base and --baseline-lock are two ways to pick a baseline: use one")
    # A shard runs every scenario it is dealt: a left-out one's twin may be another shard's.
    opts = Options(device=device, steps=steps, env=env, repeat=repeat, rerun=rerun,
                   allow_new=allow_new, exact=exact, bisect=bisect, timing=timing,
                   locate=locate, all_scenarios=all_scenarios or bool(shard or plan_entry))
    progress = progress_for(fmt, verbose)
    config = load_config(config_path)
    baseline: Baseline
    if base_ref:
        from lockguard.flows.git_base import open_gate

        refuse_inputs(targets, project_inputs(config, locks))
        # The policy, the scenarios and the locks are the judging configuration's: the target's
        # (its tip's), found as the checkout's was.
        gate = open_gate(config, base_ref, list(locks), policy_from,
                         start=None if config_path else working_folder(), named=config_path)
        judging, baseline = gate.judging, MergeBase(gate)
        chosen = select(judging, list(scenarios))
        # The gate names the locks; they are read here only for a plan (no lock changed is
        # answered from git alone).
        lock_refs = ((gate.candidate_refs() or load_locks(judging, list(locks)))
                     if shard or plan_entry else [])
    else:
        judging = config
        chosen = select(config, list(scenarios))
        lock_refs = load_locks(config, list(locks))
        refuse_inputs(targets, project_inputs(config, locks + baseline_locks))
        baseline = (BaselineLocks(tuple(LockRef(Path(p), read_lock(Path(p), lock_target(config)))
                                        for p in baseline_locks))
                    if baseline_locks else GOLDENS)
    settings = Settings.resolve(judging, opts)
    part = shard_part(shard, plan_entry, plan_shards, settings, chosen, lock_refs)

    def run_check(chosen: list[Scenario]) -> Report:
        return check_flow(settings, lock_refs, chosen, baseline, progress)

    keep = evidence.prepare(artifacts_dir, config.root, check=True)
    if part is None:
        report = run_check(chosen)
    else:
        report = part.mark(part.empty or run_check(part.scenarios))
    args = (("--base", base_ref) + (("--policy", policy_from) if policy_from != "base" else ())
            if base_ref else tuple(a for b in baseline_locks for a in ("--baseline-lock", b)))
    trim_cache(settings.cache_max_size, progress)
    finish(report, targets, keep=keep,
           argv=invocation("check", *args, locks=locks, config_path=config_path, env=env,
                           device=device, steps=steps,
                           flags=(("--exact",) if exact else ())
                           + (("--bisect",) if bisect else ())
                           + (("--timing",) if timing else ())
                           + ({True: ("--locate",), False: ("--no-locate",)}.get(locate, ()))
                           + (("--all-scenarios",) if all_scenarios else ())
                           + (("--repeat", str(repeat)) if repeat > 1 else ())))


def working_folder() -> Path:
    """The working folder as the shell names it (PWD, when that is this folder), so that one
    reached through a symbolic link is seen as one (the gate refuses it), else as resolved."""
    import os

    pwd = os.environ.get("PWD")
    if pwd and os.path.isabs(pwd) and os.path.realpath(pwd) == os.path.realpath(os.getcwd()):
        return Path(pwd)
    return Path.cwd()


@click.command("bisect")
@run_options
@click.option("--baseline-lock", "baseline_locks", multiple=True, metavar="OLD",
              help="The lock the candidate moved from.")
@click.option("--base", "base_ref", metavar="GITREF",
              help="Take the baseline locks from the merge base with GITREF.")
@click.option("--policy", "policy_from", type=click.Choice(["base", "pr"]), default="base",
              show_default=True, help="With --base: whose configuration judges (see check).")
@exact_option
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
               repeat=1, rerun=False, allow_new=False, exact=exact, base_ref=base_ref,
               policy_from=policy_from, shard=None, plan_entry=None, plan_shards=None,
               bisect=True)


@click.command()
@options(lock_option, scenario_option, env_option, device_option, steps_option())
@click.option("--shards", type=click.IntRange(min=1, max=MAX_SHARDS), metavar="N",
              help="Number of parts (default: one per device, framework and lock).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "github-matrix"]),
              default="text", show_default=True,
              help="text for people; json: the whole plan; github-matrix: one line for a "
                   "workflow's strategy.matrix.")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="Write the plan here instead of stdout.")
@config_option
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
    check_output(output)
    from lockguard.config import Options, load_config, project_inputs
    from lockguard.flows import shards as sharding
    from lockguard.locks.ref import load_locks
    from lockguard.scenarios import select

    config = load_config(config_path)
    refuse_inputs([("text", output)], project_inputs(config, locks))
    from lockguard.settings import Settings

    made = sharding.make_plan(Settings.resolve(config, Options(device=device, steps=steps,
                                                                 env=env)),
                              select(config, list(scenarios)), load_locks(config, list(locks)),
                              shards)
    text = sharding.plan_document(made, fmt)
    if output is None:
        click.echo(text, nl=False)
    else:
        from lockguard.files import write_text

        write_text(output, text)


@click.command()
@click.argument("parts", nargs=-1, required=True, metavar="PART.json...",
                type=click.Path(path_type=Path))
@report_options
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
    finish(merge_files(list(parts)), targets)


@click.command()
@click.option("--scenario", "scenarios", multiple=True, metavar="ID",
              help="Accept only these scenarios (id or prefix; repeatable). Default: every "
                   "compared scenario that did not come out identical.")
@click.option("--reason", metavar="TEXT",
              help="Why the change is intended; recorded in each golden's provenance. Required.")
@click.option("--from", "source", type=click.Path(path_type=Path), metavar="DIR|REPORT.json",
              help="An artefact directory or JSON report (default: the last check's artefacts).")
@click.option("--yes", "-y", is_flag=True,
              help="Do not ask for confirmation (required when stdin is not a terminal).")
@config_option
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
    from lockguard.config import load_config
    from lockguard.files import display_path
    from lockguard.flows import accept as acceptance
    from lockguard.gitref import author
    from lockguard.report import load_report
    from lockguard.settings import Settings

    config = load_config(config_path)
    path = acceptance.report_path(source, config.root)
    report = load_report(path)
    adoptions, notes = acceptance.plan(report, path, Settings.resolve(config), list(scenarios),
                                       reason.strip(), author(config.root),
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


COMMANDS = (record, check, bisect_command, plan, merge, accept)
