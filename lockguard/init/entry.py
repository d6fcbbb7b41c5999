"""`lockguard scenario add pkg.train:make`: a scenario that drives a function of the team's own
code (docs/scenarios.md, "Your own code as the scenario"), appended to the config it is found
in, validated as the loader will read it, and written atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lockguard import toml
from lockguard.config import (
    ENTRY, ENTRY_RULE, MAX_CONFIG_BYTES, SCENARIO_ID, SCENARIO_ID_RULE, Config, ConfigError,
    entry_id, lockguard_table, parse_config,
)
from lockguard.errors import UsageError, one_line
from lockguard.files import read_bytes, write_text
from lockguard.scenarios import all_scenarios


def entry_lines(pyproject: bool, sid: str, entry: str, framework: str,
                steps: int | None = None) -> list[str]:
    """The TOML table of an entry scenario, as `scenario add` and `init` write it (in a
    pyproject.toml below [tool.lockguard]); a UsageError (exit 2, one line) for a malformed
    entry or id."""
    if not ENTRY.fullmatch(entry):
        raise UsageError(f"{one_line(repr(entry), 80)} is not an entry: {ENTRY_RULE}")
    if not SCENARIO_ID.fullmatch(sid):
        raise UsageError(f"scenario id {one_line(repr(sid), 80)} is not valid: "
                         f"{SCENARIO_ID_RULE} (--name chooses one)")
    # The id quoted: a dotted one ("pkg.train.make") is one key, not nested tables.
    lines = [f"[{'tool.lockguard.' if pyproject else ''}scenario.{toml.string(sid)}]",
             f"entry = {toml.string(entry)}", f"framework = {toml.string(framework)}"]
    if steps is not None:
        lines.append(f"steps = {steps}")
    return lines


def validate_entry(config: Config, sid: str) -> None:
    """Entry scenario `sid` of `config` as every command will load it: a ConfigError naming
    the key when its module is not in the project (nor its src/) or the id is a bundled
    scenario's. The other user scenarios are left to their own loading (init's template
    script is not written yet when its plan is validated)."""
    alone = config.model_copy(update={"scenario": {sid: config.scenario[sid]}})
    all_scenarios(alone)


def appended_text(target: Path, block: str) -> str:
    """`target`'s whole text with the TOML `block` appended after a blank line (its own text
    untouched, its line endings kept); `block` alone when there is no such file."""
    if not target.exists():
        return block
    raw = read_bytes(target, "config file", MAX_CONFIG_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{target}: not UTF-8 text (byte {exc.start})") from None
    newline = "\r\n" if "\r\n" in text else "\n"
    if text and not text.endswith("\n"):
        text += newline
    return text + ("" if not text else newline) + block.replace("\n", newline)


@dataclass(frozen=True)
class Added:
    """What `scenario add` wrote: the scenario's id, the file, and whether the config's
    `scenarios` selection leaves it out (it then runs only when named)."""

    id: str
    file: Path
    unselected: bool


def add_entry(config: Config, entry: str, framework: str, name: str | None = None,
              steps: int | None = None) -> Added:
    """Append [scenario.<name>] entry = ..., framework = ... to `config`'s file; a UsageError
    (exit 2, one line) for a malformed entry or name, a ConfigError naming the key when the
    result does not load (the module not in the project, the id taken): nothing written."""
    if config.file is None:
        raise UsageError("no lockguard config found here or above: run `lockguard init` first, "
                         "or name one with --config")
    sid = name or entry_id(entry)
    pyproject = config.file.name == "pyproject.toml"
    lines = entry_lines(pyproject, sid, entry, framework, steps)
    if sid in config.scenario:
        raise UsageError(f"{config.source}: scenario {sid} exists already")
    text = appended_text(config.file, "\n".join(lines) + "\n")
    where = str(config.file)
    section = lockguard_table(text, config.file.name, where)
    if section is None:  # pragma: no cover - the block holds the table
        raise ConfigError(f"{where}: [tool.lockguard] did not come out of the appended text")
    source = f"{where} [tool.lockguard]" if pyproject else where
    new = parse_config(section, source, config.root, config.file)
    all_scenarios(new)  # the entry's module must be in the project; the id not a bundled one
    write_text(config.file, text)
    return Added(sid, config.file, bool(new.scenarios) and sid not in new.scenarios)
