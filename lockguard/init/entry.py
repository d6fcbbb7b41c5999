"""`lockguard scenario add pkg.train:make`: a scenario that drives a function of the team's own
code (docs/scenarios.md, "Your own code as the scenario"), appended to the config it is found
in, validated as the loader will read it, and written atomically."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lockguard import toml
from lockguard.config import (
    ENTRY, ENTRY_RULE, SCENARIO_ID, SCENARIO_ID_RULE, Config, ConfigError, lockguard_table,
    parse_config,
)
from lockguard.errors import UsageError, one_line
from lockguard.files import write_text
from lockguard.init.plan import appended_text
from lockguard.scenarios import all_scenarios


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
    if not ENTRY.fullmatch(entry):
        raise UsageError(f"{one_line(repr(entry), 80)} is not an entry: {ENTRY_RULE}")
    sid = name or entry.replace(":", ".")
    if not SCENARIO_ID.fullmatch(sid):
        raise UsageError(f"scenario id {one_line(repr(sid), 80)} is not valid: "
                         f"{SCENARIO_ID_RULE} (--name chooses one)")
    if sid in config.scenario:
        raise UsageError(f"{config.source}: scenario {sid} exists already")
    pyproject = config.file.name == "pyproject.toml"
    # The id quoted: a dotted one ("pkg.train.make") is one key, not nested tables.
    lines = [f"[{'tool.lockguard.' if pyproject else ''}scenario.{toml.string(sid)}]",
             f"entry = {toml.string(entry)}", f"framework = {toml.string(framework)}"]
    if steps is not None:
        lines.append(f"steps = {steps}")
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
