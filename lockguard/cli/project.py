"""The project's commands: set lockguard up (`init`), list the scenarios, re-render a report,
compare the frameworks on this machine, and build the pinned container images."""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from pathlib import Path

import click

from lockguard.cli.edge import group_handles_errors, handles_errors
from lockguard.cli.options import (
    config_option, device_option, env_option, listing_format_option, repeat_option, report_options, steps_option, verbose_option,
)
from lockguard.cli.output import (
    deliver, finish, invocation, progress_for, refuse_inputs, report_targets,
)
from lockguard.errors import UsageError
from lockguard.names import DEVICES, FRAMEWORKS, MODEL_FAMILIES


@click.command()
@config_option
@listing_format_option
@handles_errors
def scenarios(config_path: Path | None, fmt: str) -> None:
    """List bundled and user scenarios.

    \b
    Examples:
      lockguard scenarios
      lockguard scenarios --format json
    """
    from lockguard.config import load_config
    from lockguard.report import listings
    from lockguard.scenarios import all_scenarios

    click.echo(listings.scenarios(all_scenarios(load_config(config_path)), fmt), nl=False)


@click.group("scenario")
@group_handles_errors
def scenario() -> None:
    """Register a scenario of your own code.

    \b
    Examples:
      lockguard scenario add pkg.train:make --framework torch
    """


@scenario.command("add")
@click.argument("entry")
@click.option("--framework", type=click.Choice(FRAMEWORKS), required=True,
              help="The framework the entry trains with.")
@click.option("--name", default=None, help="The scenario's id (default: the entry, ':' as '.').")
@click.option("--steps", type=click.IntRange(1), default=None,
              help="Steps a run trains (default 20).")
@config_option
@handles_errors
def scenario_add(entry: str, framework: str, name: str | None, steps: int | None,
                 config_path: Path | None) -> None:
    """Add a scenario that drives ENTRY, a function of your project's code (module:function,
    imported from the config's folder): fit(steps, seed), or make(seed) -> (step, batches),
    a compiled Keras model with its data, or a Lightning-style module; or the module's class
    (docs/scenarios.md, "Your own code as the scenario").

    \b
    Examples:
      lockguard scenario add pkg.train:make --framework torch
      lockguard scenario add pkg.train:fit --framework jax --name our-fit --steps 30
    """
    from lockguard.config import load_config
    from lockguard.init.entry import add_entry

    added = add_entry(load_config(config_path), entry, framework, name, steps)
    click.echo(f"added scenario {added.id} ({entry}) to {added.file}")
    if added.unselected:
        click.echo(f"note: the config's `scenarios` leaves it out: add \"{added.id}\" there, or "
                   f"run it by name (--scenario {added.id})")
    click.echo(f"next: lockguard record --scenario {added.id}")


@click.command("report")
@click.argument("report_file", metavar="REPORT.json", type=click.Path(path_type=Path))
@report_options
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
    finish(load_report(report_file), targets, ci=False)


@click.command("compare-frameworks")
@click.option("--lock", "locks", multiple=True, metavar="PATH",
              help="Lock file (repeatable; one per framework); overrides [tool.lockguard] "
                   "lock/locks.")
@click.option("--family", "families", multiple=True, type=click.Choice(MODEL_FAMILIES),
              help="Model family (repeatable). Default: all.")
@click.option("--framework", "frameworks", multiple=True, type=click.Choice(FRAMEWORKS),
              help="Only this framework (repeatable). Default: every one a lock pins.")
@env_option
@device_option
@steps_option(minimum=2)
@repeat_option("Runs per scenario; the table shows their medians.")
@report_options
@config_option
@verbose_option
@handles_errors
def compare_frameworks(locks, families, frameworks, env, device, steps, repeat, fmt, output,
                       reports, config_path, verbose) -> None:
    """Train the bundled model families (mlp, lm, cnn: same data and initial weights
    everywhere) in every framework the locks pin, on this machine, one run at a time, and set
    them side by side: step-0 parity, final loss, first-step (compile) and steady step time,
    peak memory, compiled paths against their plain twins.

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
    from lockguard.settings import Settings

    config = load_config(config_path)
    settings = Settings.resolve(config, Options(device=device, steps=steps, env=env,
                                                repeat=repeat))
    refuse_inputs(targets, project_inputs(config, locks))
    chosen = comparison_scenarios(list(families), list(frameworks))
    report = compare_flow(settings, load_locks(config, list(locks)), chosen,
                          progress_for(fmt, verbose))
    flags = tuple(a for f in families for a in ("--family", f)) + tuple(
        a for f in frameworks for a in ("--framework", f)) + (
        ("--repeat", str(repeat)) if repeat > 1 else ())
    finish(report, targets, argv=invocation("compare-frameworks", locks=locks,
                                            config_path=config_path, env=env, device=device,
                                            steps=steps, flags=flags))


@click.command()
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
@config_option
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
    from lockguard.flows.build import build_images, push
    from lockguard.progress import Progress
    from lockguard.settings import Settings

    for built in build_images(Settings.resolve(load_config(config_path)), list(locks),
                              framework, accelerator, base_image, registry, Progress()):
        image = built.image
        how = "reused" if image.reused else f"built in {image.seconds:.0f} s"
        click.echo(f"{image.tag}  {image.id[:19]}  {image.size / 1e6:.0f} MB  {how}  "
                   f"(log: {image.log})")
        if built.stack is not None:
            click.echo(f"  {built.stack}")
        if registry is not None:
            pushed = push(built, registry)  # (the image is named above should the push fail)
            click.echo(f"pushed {pushed.ref}  (recorded in {pushed.record})")


@click.group()
@group_handles_errors
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
    from lockguard.flows.build import pin_bases
    from lockguard.progress import Progress

    for base, (old, new) in pin_bases(Progress()).items():
        click.echo(f"{base}: {old} → {new}" if old != new else f"{base}: {new} (unchanged)")


@click.group("fleet")
@group_handles_errors
def fleet_group() -> None:
    """The machines the team trains on ([tool.lockguard.fleet.NAME]): `diff`, `check` and
    `propose` judge a lock change against each.

    \b
    Examples:
      lockguard fleet probe                    # this machine's entry, printed
      lockguard fleet probe --name a100-nodes --write
    """


@fleet_group.command("probe")
@click.option("--name", default=None, help="The entry's name (default: this host's name).")
@click.option("--write", is_flag=True,
              help="Add the entry to the config file (atomically), instead of printing it.")
@config_option
@handles_errors
def fleet_probe(name: str | None, write: bool, config_path: Path | None) -> None:
    """This machine's fleet entry: its GPUs and NVIDIA driver (/proc/driver/nvidia), its CPU's
    x86-64 level (/proc/cpuinfo's flags) and its glibc.

    \b
    Examples:
      lockguard fleet probe
      lockguard fleet probe --name v100-nodes --write
    """
    import socket

    from lockguard.config import add_fleet_machine, load_config
    from lockguard.fleet import machine_toml, this_machine

    machine = this_machine(name or socket.gethostname().split(".")[0] or "this-machine")
    if not write:
        click.echo(machine_toml(machine), nl=False)
        return
    written = add_fleet_machine(load_config(config_path), machine)
    click.echo(f"added [fleet.{machine.name}] to {written}", err=True)


@click.command("init")
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
@click.option("--entry/--no-entry", "entry", default=None,
              help="Guard your own training function, found in your package's train.py "
                   "(make(seed), a Lightning-style module, fit(steps, seed)), as a scenario: no "
                   "copied loop. Default: "
                   "yes when one is found (asked on a terminal).")
@click.option("--record/--no-record", "record_goldens", default=None,
              help="Record the goldens of the chosen scenarios on this machine (builds their "
                   "environments). Default: yes (asked on a terminal).")
@click.option("--workflow/--no-workflow", "workflow", default=None,
              help="Write .github/workflows/lockguard.yml, the gate on pull requests with the "
                   "lockguard action. Default: yes (asked on a terminal).")
@click.option("--action", "action", metavar="OWNER/REPO@REF", default=None,
              help="The lockguard action the workflow uses (default: your-org/lockguard@v1).")
@click.option("--budget", "budget", type=click.FloatRange(min=1), default=120.0,
              show_default=True, metavar="SECONDS",
              help="What a lock pull request's A/B may take on this machine: once the goldens "
                   "are recorded, init says what it will take and, over this, which scenarios "
                   "keep within it.")
@click.option("--yes", "-y", is_flag=True,
              help="Ask nothing, take the defaults (required when stdin is not a terminal).")
@click.option("-v", "--verbose", is_flag=True, help="Show more progress detail.")
@handles_errors
def init(directory, locks, config_name, template, entry, record_goldens, workflow, action,
         budget, yes, verbose) -> None:
    """Add lockguard to the project in DIRECTORY (default: here): find its locks and the
    frameworks they pin, write the config with the bundled scenarios that apply, record their
    goldens on this machine and write a GitHub workflow that runs the gate with the action.
    Your own training function, when your package has one (train.py's fit(steps, seed) or
    make(seed)), as a scenario; else, optionally, a scenario template that trains your own
    model. Asks on a terminal; --yes takes the defaults. What is there already (a config, a
    workflow, goldens) is left as it is: a second run changes nothing.

    Exits 0 when done (or nothing to do), 1 when a golden could not be recorded or the config
    was declined at the prompt, 2 when refused: no lock found, or no terminal to ask on and
    no --yes.

    \b
    Examples:
      lockguard init
      lockguard init --yes
      lockguard init --yes --no-record --lock requirements/gpu.txt
      lockguard init ml --scenario-template --action my-org/lockguard@v1"""
    from lockguard import init as setup
    from lockguard.init.templates import ACTION, WORKFLOW_PATH
    from lockguard.progress import Progress

    def ask(flag: bool | None, question: str, default: bool) -> bool:
        return flag if flag is not None else click.confirm(question, default=default)

    found = setup.survey(directory, list(locks), config_name)
    offered = found.training is not None and found.config_file is None
    choices = setup.Choices(template=bool(template), entry=offered and entry is not False,
                            record=record_goldens is not False,
                            workflow=workflow is not False, action=action or ACTION,
                            budget_s=budget)
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
        # First, as it changes the config the next question shows.
        own = offered and ask(entry, f"Guard your own training, {found.training.entry} "
                              f"({found.training.shape}), as scenario "
                              f"{found.training.scenario_id}?", True)
        if own != choices.entry:
            plan = setup.prepare(found, replace(choices, entry=own))
        if plan.config_text is not None and not click.confirm(
                f"Write the config ({plan.config_summary}) to {setup.config_place(found)}?",
                default=True):
            click.echo("lockguard: nothing written", err=True)
            sys.exit(1)
        new_template = not own and not os.path.lexists(found.project / found.template)
        choices = setup.Choices(
            template=ask(template, f"Also write {found.template.as_posix()}, a scenario that "
                         "trains your own model, to edit?", False) if new_template
            else choices.template, entry=own,
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


COMMANDS = (init, scenarios, scenario, report_command, compare_frameworks, build, images,
            fleet_group)
