"""The lock's commands: write a lock (`lock`), propose an upgrade and A/B it (`propose`), list
newer releases (`outdated`), and show what changed between two locks (`diff`)."""

from __future__ import annotations

from pathlib import Path

import click

from lockguard.cli.edge import handles_errors
from lockguard.cli.gate import setup_run
from lockguard.cli.options import (
    config_option, listing_format_option, lock_option, repeat_option, report_options,
    run_options, sandbox_option,
)
from lockguard.cli.output import finish, invocation, progress_for, refuse_inputs, report_targets
from lockguard.errors import UsageError
from lockguard.names import RESOLVERS


@click.command("lock")
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
@sandbox_option
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
    from lockguard.locks import resolvers
    from lockguard.progress import Progress

    if not requirements_in.is_file():
        from lockguard.files import near_miss

        raise UsageError(f"{requirements_in}: requirements input not found"
                         f"{near_miss(requirements_in)}")
    target = output or requirements_in.with_suffix(".txt")
    resolver = resolver or resolvers.default_resolver(target if target.is_file() else None)
    progress = Progress()
    with progress.step(f"Resolving {requirements_in} with {resolver}"):
        resolvers.compile(requirements_in, target, list(upgrade_packages), resolver=resolver,
                          progress=progress.detail, sandbox=resolver_sandbox())
    click.echo(f"wrote {target}", err=True)


def resolver_sandbox():
    """The sandbox a resolver runs in (it may build an sdist for its metadata): --sandbox /
    LOCKGUARD_SANDBOX, else the configuration's `sandbox`; required and none here: exit 2."""
    from lockguard import envvars
    from lockguard.config import load_config
    from lockguard.sandbox import resolve

    confined = resolve(envvars.value("LOCKGUARD_SANDBOX") or load_config().sandbox)
    confined.require()
    return confined


@click.command()
@click.argument("upgrades", nargs=-1, required=True)
@run_options
@click.option("--inputs", type=click.Path(path_type=Path),
              help="The requirements.in the lock is compiled from (default: <lock>.in).")
@click.option("--resolver", type=click.Choice(RESOLVERS), default=None,
              help="Default: each lock's own, the tool its header names (pip-compile's "
                   "header: pip-tools; uv's: uv); uv when the header names neither.")
@repeat_option("Run each scenario K times on each side (detects nondeterminism, steadier "
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
    from lockguard.config import Options, project_inputs
    from lockguard.flows.propose import propose as propose_flow

    run = setup_run(config_path, locks, scenarios, fmt, verbose,
                    Options(device=device, steps=steps, env=env, repeat=repeat))
    config = run.settings.config
    refuse_inputs(targets, project_inputs(config, locks)
                  + ([(inputs, "the requirements input", False)] if inputs else []))
    keep = evidence.prepare(artifacts_dir, config.root)
    report = propose_flow(run.settings, run.locks, list(upgrades), run.scenarios,
                          resolver=resolver, inputs=inputs, progress=run.progress)
    extra = (("--inputs", str(inputs)) if inputs else ()) + (
        ("--resolver", resolver) if resolver else ())
    finish(report, targets, keep=keep,
           argv=invocation("propose", *upgrades, locks=locks, config_path=config_path,
                           env=env, device=device, steps=steps, flags=extra))


@click.command()
@lock_option
@config_option
@listing_format_option
@click.option("--index-url", metavar="URL", help="Default: the index pip is configured with.")
@handles_errors
def outdated(locks, config_path, fmt, index_url) -> None:
    """Newer releases of the framework families pinned in the lock(s).

    \b
    Examples:
      lockguard outdated
      lockguard outdated --lock requirements.txt --format json
    """
    from lockguard.config import load_config
    from lockguard.locks.outdated import outdated as newer_releases
    from lockguard.locks.ref import load_locks
    from lockguard.report import listings

    config = load_config(config_path)
    rows = [(ref, row) for ref in load_locks(config, list(locks))
            for row in newer_releases(ref.lock, index=index_url)]
    click.echo(listings.outdated(rows, fmt), nl=False)


@click.command()
@click.argument("old", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@config_option
@report_options
@handles_errors
def diff(old: Path, new: Path, config_path: Path | None, fmt: str, output: Path | None,
         reports: tuple[str, ...]) -> None:
    """Show what changed between two locks: versions, bump kinds, frameworks touched. With a
    fleet configured ([tool.lockguard.fleet.NAME]), what the change does to each machine,
    read from the changed wheels' own files (found in lockguard's cache by the lock's hashes,
    else downloaded, hash-checked); a change that breaks one, or a wheel that cannot be had,
    fails (exit 1).

    \b
    Examples:
      lockguard diff requirements-old.txt requirements.txt
      lockguard diff old.txt new.txt --format markdown -o diff.md
    """
    targets = report_targets(fmt, output, reports)
    from lockguard.config import load_config
    from lockguard.flows.ab import diff as diff_flow
    from lockguard.locks.ref import LockRef, read_lock

    refuse_inputs(targets, [(old, "the old lock", False), (new, "the new lock", False)])
    fleet = load_config(config_path).fleet_machines()
    report = diff_flow(LockRef(old, read_lock(old)), LockRef(new, read_lock(new)), fleet,
                       progress_for(fmt))
    finish(report, targets, ci=False, argv=invocation("diff", str(old), str(new)))


COMMANDS = (lock_command, propose, outdated, diff)
