"""The command line explains itself: every command's --help has examples (kept line for line,
each one a command line the command accepts), every option a description; a mistyped scenario
id, lock or config path gets "did you mean".

The examples are parsed by the commands themselves (click's own parser, nothing run), so an
example that names an option a command lost fails here. The error lines of real processes are
in the bad-input corpus (tests/test_bad_input.py).
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lockguard.cli import cli
from lockguard.config import Config, ConfigError
from lockguard.errors import did_you_mean
from lockguard.files import near_miss
from lockguard.scenarios import select


def commands(group: click.Group = cli, path: tuple[str, ...] = ("lockguard",)):
    yield path, group
    for name, command in sorted(group.commands.items()):
        if isinstance(command, click.Group):
            yield from commands(command, path + (name,))
        else:
            yield path + (name,), command


COMMANDS = list(commands())


def rendered_help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(cli, [*path[1:], "--help"], prog_name="lockguard")
    assert result.exit_code == 0, result.output
    return result.output


def examples(text: str) -> list[str]:
    """The lines of the help's Examples section."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "Examples:")
    found = []
    for line in lines[start + 1:]:
        if not line.strip():
            break
        found.append(line.strip())
    return found


def parse(argv: list[str]) -> None:
    """Parse a command line as `lockguard` would, down to its command, running nothing."""
    try:
        ctx = cli.make_context("lockguard", list(argv))
        while isinstance(ctx.command, click.Group):
            # click 8.2 keeps the subcommand's arguments apart (8.1: protected_args).
            protected = (ctx._protected_args if hasattr(ctx, "_protected_args")
                         else ctx.protected_args)
            rest = [*protected, *ctx.args]
            if not rest:
                return
            name, command, rest = ctx.command.resolve_command(ctx, rest)
            ctx = command.make_context(name, rest, parent=ctx)
    except click.exceptions.Exit:  # --help, --version: parsed, and answered
        return


def test_there_are_all_the_commands():
    names = {" ".join(path) for path, _ in COMMANDS}
    assert len(COMMANDS) >= 18, names
    assert {"lockguard init", "lockguard check", "lockguard images pin"} <= names


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_help_has_examples_the_command_accepts(path, command):
    text = rendered_help(path)
    found = examples(text) if "Examples:" in text else []
    assert found, f"{' '.join(path)} --help has no Examples section"
    prefix = " ".join(path)
    for line in found:
        # Kept as written (click's \b): one example a line, never re-wrapped.
        assert line in (command.help or ""), line
        argv = shlex.split(line, comments=True)
        assert " ".join(argv).startswith(prefix), (line, prefix)
        parse(argv[1:])


@pytest.mark.parametrize("path, command", COMMANDS, ids=[" ".join(p) for p, _ in COMMANDS])
def test_every_option_has_a_description(path, command):
    bare = [param.opts for param in command.params
            if isinstance(param, click.Option) and not param.hidden and not (param.help or "")]
    assert bare == [], f"{' '.join(path)}: options without help: {bare}"


def test_the_help_of_a_real_process():
    proc = subprocess.run([sys.executable, "-m", "lockguard", "init", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "  Examples:\n    lockguard init\n    lockguard init --yes\n" in proc.stdout


def test_an_example_with_an_unknown_option_would_fail():
    with pytest.raises(click.exceptions.NoSuchOption):
        parse(["check", "--no-such-option"])


# ------------------------------------------------------------------------------ did you mean

@pytest.mark.parametrize("typed, meant", [
    ("torch.mpl", "torch.mlp"),
    ("loss-ema", "loss_ema"),
    ("Torch.MLP", "torch.mlp"),
    ("numpy.mlpp", "numpy.mlp"),
])
def test_did_you_mean_names_the_closest(typed, meant):
    assert did_you_mean(typed, ["torch.mlp", "torch.lm", "numpy.mlp", "jax.mlp", "loss_ema"]) \
        == f"did you mean {meant}?"


def test_did_you_mean_says_nothing_when_nothing_is_close():
    assert did_you_mean("xyz", ["torch.mlp", "jax.lm"]) == ""


def test_an_unknown_scenario_gets_the_closest_ids_and_prefixes():
    def error(name: str) -> str:
        # A ConfigError (a LockguardError): exit 2, one line; anything else would be exit 3.
        with pytest.raises(ConfigError) as info:
            select(Config(), [name])
        assert type(info.value) is ConfigError
        return str(info.value)

    assert "'torch.mpl': did you mean torch.mlp?" in error("torch.mpl")
    assert "did you mean torch.lm.bf16?" in error("torch.lm.bf")
    assert "did you mean tf?" in error("tensorflow")  # a framework's name: its prefix
    assert "did you mean" not in error("xyz") and "lockguard scenarios" in error("xyz")


def test_a_missing_file_gets_the_closest_names_beside_it(tmp_path, monkeypatch):
    (tmp_path / "requirements.txt").write_text("")
    (tmp_path / "README.md").write_text("")
    (tmp_path / "requirements").mkdir()  # a folder is not a file it could have meant
    assert near_miss(tmp_path / "requirments.txt") == \
        f"; did you mean {tmp_path / 'requirements.txt'}?"
    monkeypatch.chdir(tmp_path)
    assert near_miss(Path("requirments.txt")) == "; did you mean requirements.txt?"
    assert near_miss(Path("nothing-like-it.cfg")) == ""
    assert near_miss(tmp_path / "no-folder" / "requirements.txt") == ""


def test_jobs_is_an_option_of_every_command_that_runs_scenarios(monkeypatch):
    """--jobs N sets the runs at once (LOCKGUARD_JOBS, read by the pipeline) for the
    invocation; shown in --help; out of range is a usage error."""
    import os

    from lockguard.flows.pipeline import default_workers

    monkeypatch.delenv("LOCKGUARD_JOBS", raising=False)
    for command in ("check", "record", "propose", "bisect"):
        result = CliRunner().invoke(cli, [command, "--help"], prog_name="lockguard")
        assert "--jobs N" in result.output, command
    seen = {}

    @click.command()
    @__import__("lockguard.cli.options", fromlist=["x"])._jobs_option()
    def probe() -> None:
        seen["workers"] = default_workers()

    monkeypatch.setitem(os.environ, "LOCKGUARD_JOBS", "4")  # restored after the test
    assert CliRunner().invoke(probe, ["--jobs", "1"]).exit_code == 0
    assert seen["workers"] == 1
    assert CliRunner().invoke(probe, ["--jobs", "0"]).exit_code == 2
