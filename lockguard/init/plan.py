"""What `lockguard init` would write and record, its second stage (`prepare`), every piece
validated and nothing written: the config text (re-read by the config loader as every command
reads it), the scenario template, the workflow, the scenarios that have no golden on this
machine yet. Empty when everything is in place: a second run changes nothing. An existing
config is never touched; an existing workflow or template file neither.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from lockguard import toml
from lockguard.config import (
    Config, ConfigError, load_config, lockguard_table, parse_config,
)
from lockguard.files import refuse_escape
from lockguard.flows import pipeline
from lockguard.golden import golden_path
from lockguard.hardware import host_class
from lockguard.init.entry import appended_text, entry_lines, validate_entry
from lockguard.init.project import Survey, Training, config_place, shown
import lockguard.init.templates as templates
from lockguard.locks.ref import LockRef, load_locks, lock_for
from lockguard.scenarios import Scenario, bundled, select, user_scenarios
from lockguard.settings import Settings


@dataclass(frozen=True)
class Choices:
    """What the user chose to have written and done (the command line's flags or answers to
    its questions); `prepare` takes them."""

    template: bool = False  # write the scenario template
    # Guard the team's own training the survey found (Survey.training) as an entry scenario,
    # selected and recorded with the bundled ones: the template's copied loop is then not
    # offered.
    entry: bool = False
    record: bool = True  # record the goldens that are missing on this machine
    workflow: bool = True  # write the GitHub workflow
    action: str = templates.ACTION
    budget_s: float = 120.0  # what a lock PR's A/B should take here (the cost line says)


@dataclass
class Plan:
    """What `apply` will write and record, validated by `prepare`; a text left None is
    nothing to write (the file is in place, or was not chosen)."""

    survey: Survey
    choices: Choices
    config: Config  # as it will be once written (or as it is)
    config_text: str | None = None  # the new text of config_target; None: nothing to write
    config_summary: str = ""
    template_text: str | None = None
    workflow_text: str | None = None
    unrecorded: list[Scenario] = field(default_factory=list)  # no golden on this machine yet
    to_record: list[Scenario] = field(default_factory=list)  # of those, what apply() records
    locks: list[LockRef] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def actions(self) -> list[str]:
        """What apply() will do, one line each; empty: everything is in place."""
        s = self.survey
        out = []
        if self.config_text is not None:
            out.append(f"write {config_place(s)}: {self.config_summary}")
        if self.template_text is not None:
            out.append(f"write {shown(s.project / s.template, s.project)}: a scenario to train "
                       f"your own model with {s.template_framework}, for you to edit")
        if self.workflow_text is not None:
            out.append(f"write {shown(self.workflow_path, s.project)}: the gate on pull "
                       f"requests, with {self.choices.action}")
        if self.to_record:
            ids = ", ".join(sc.id for sc in self.to_record)
            out.append(f"record the goldens of {ids} on this machine (builds the environments: "
                       "minutes the first time)")
        return out

    @property
    def workflow_path(self) -> Path:
        """Where the workflow goes: below the repository's top folder (GitHub reads it only
        there), else the project's."""
        return (self.survey.repo or self.survey.project) / self.survey.workflow



def prepare(s: Survey, choices: Choices) -> Plan:
    """What apply() would write and record, every piece validated; nothing is written."""
    if s.config_file is None:
        locks = [LockRef(found.path, found.lock) for found in s.locks]
        # What the locks can run: a library scenario only where its library is pinned too.
        ids = [sc.id for sc in bundled() if sc.framework in s.frameworks
               and lock_for(sc, locks) is not None]
        training = s.training if choices.entry else None
        text, summary = _config_text(s, ids, choices.template, training)
        config = _validate(s, text)
        chosen = [sc for sc in bundled() if sc.id in ids]
        if training is not None:
            validate_entry(config, training.scenario_id)  # as `scenario add` validates it
            chosen += [sc for sc in user_scenarios(config) if sc.id == training.scenario_id]
        out = Plan(s, choices, config, config_text=text, config_summary=summary)
    else:
        config = load_config(s.config_file)
        out = Plan(s, choices, config)
        chosen = select(config, [])
        locks = load_locks(config, [])
        if choices.template and templates.SCENARIO_ID not in config.scenario:
            out.notes.append(_register_by_hand(s))
        if s.training is not None and not any(sc.entry == s.training.entry
                                              for sc in config.scenario.values()):
            out.notes.append(f"guard your own training with it: `lockguard scenario add "
                             f"{s.training.entry} --framework {s.training.framework}`")
    out.locks = locks
    template = s.project / s.template
    if choices.template and not os.path.lexists(template):
        out.template_text = templates.scenario_template(s.template_framework, s.package,
                                                         s.src_layout)
    if choices.workflow and not os.path.lexists(out.workflow_path) and not s.workflow_found:
        relative = s.project.relative_to(s.repo).as_posix() if s.repo else "."
        out.workflow_text = templates.workflow(
            action=choices.action, branch=s.branch,
            python=f"{sys.version_info.major}.{sys.version_info.minor}",
            working_directory=relative)
    out.unrecorded = _unrecorded(config, locks, chosen)
    out.to_record = list(out.unrecorded) if choices.record else []
    _refuse_escapes(out, config)
    return out


def _refuse_escapes(p: Plan, config: Config) -> None:
    """files.EscapeError, before anything is written, for a file `p` would write (or the
    golden folder it would record into) that lies through a symbolic link or outside the
    repository: a linked pyproject.toml, .github, .github/workflows or scenarios/ would have
    init write wherever the link leads."""
    s = p.survey
    targets = []
    if p.config_text is not None:
        targets.append((s.config_target, "the configuration init would write"))
    if p.template_text is not None:
        targets.append((s.project / s.template, "the scenario template init would write"))
    if p.workflow_text is not None:
        targets.append((p.workflow_path, "the workflow init would write"))
    if p.to_record:
        targets.append((config.resolve(config.golden_dir), "the golden_dir init would record in"))
    for path, what in targets:
        refuse_escape(path, s.repo or s.project, what)


def _config_text(s: Survey, ids: list[str], template: bool,
                 training: Training | None = None) -> tuple[str, str]:
    """The settings as TOML text to append (pyproject.toml) or to write (lockguard.toml), and a
    one-line summary of them: `training`, when given, as an entry scenario, selected."""
    pyproject = s.config_target.name == "pyproject.toml"
    prefix = "tool.lockguard." if pyproject else ""
    names = [found.name for found in s.locks]
    if training is not None:
        ids = ids + [training.scenario_id]
    lines = ["# lockguard: the gate on this project's ML dependency locks (written by "
             "`lockguard init`).",
             "# Every key: lockguard's docs/configuration.md; the scenarios: `lockguard "
             "scenarios`."]
    if pyproject:
        lines.insert(0, "[tool.lockguard]")
    if len(names) == 1:
        lines.append(f"lock = {toml.string(names[0])}")
    else:
        lines.append("locks = [" + ", ".join(toml.string(n) for n in names) + "]")
    lines.append(f"# The bundled scenarios of what the locks pin ({', '.join(s.frameworks)}).")
    lines += _toml_list("scenarios", ids)
    lines.append('golden_dir = "golden"')
    lines += ["# A lock's code runs sandboxed; where no sandbox can be had (macOS, a container "
              "without",
              '# Landlock) lockguard refuses to run it: use --env docker there, or "auto" '
              "(docs/environments.md).",
              'sandbox = "required"']
    if template:
        sid = templates.SCENARIO_ID
        lines += ["",
                  f"# Your own model (written by `lockguard init`): once {s.template.as_posix()}",
                  f'# builds it, add "{sid}" to `scenarios` and run `lockguard record '
                  f"--scenario {sid}`.",
                  f"[{prefix}scenario.{sid}]",
                  f"script = {toml.string(s.template.as_posix())}",
                  f"framework = {toml.string(s.template_framework)}",
                  f"description = {toml.string('your own model: ' + (s.package or 'a template'))}"]
    if training is not None:
        lines += ["", f"# Your own training ({training.shape}), found by `lockguard init`: "
                  "lockguard seeds it and runs it.",
                  *entry_lines(pyproject, training.scenario_id, training.entry,
                               training.framework)]
    summary = (f"lock{'s' if len(names) > 1 else ''} {', '.join(names)}; scenarios "
               f"{', '.join(ids)}" + (f"; scenario {templates.SCENARIO_ID} (not selected "
                                      "until you edit it)" if template else ""))
    return "\n".join(lines) + "\n", summary


def _toml_list(key: str, values: list[str], width: int = 96) -> list[str]:
    one = f"{key} = [" + ", ".join(toml.string(v) for v in values) + "]"
    if len(one) <= width:
        return [one]
    return [f"{key} = ["] + [f"    {toml.string(v)}," for v in values] + ["]"]


def new_config_text(s: Survey, block: str) -> str:
    """The config file's whole new text: a pyproject.toml's with the table appended (its own
    text untouched, its line endings kept), or a new lockguard.toml."""
    return appended_text(s.config_target, block)


def _validate(s: Survey, block: str) -> Config:
    """The config as the loader reads it from the new text: a table that cannot be appended
    (the file already defines tool.lockguard otherwise, or is not TOML) is refused here."""
    text = new_config_text(s, block)
    where = str(s.config_target)
    section = lockguard_table(text, s.config_target.name, where)
    if section is None:  # pragma: no cover - the block holds the table
        raise ConfigError(f"{where}: [tool.lockguard] did not come out of the appended text")
    source = f"{where} [tool.lockguard]" if s.config_target.name == "pyproject.toml" else where
    return parse_config(section, source, s.project, s.config_target)


def _register_by_hand(s: Survey) -> str:
    table = "tool.lockguard.scenario" if s.config_file and s.config_file.name == "pyproject.toml" \
        else "scenario"
    return (f"the config exists and is left as it is: register the template by hand with "
            f"[{table}.{templates.SCENARIO_ID}] script = \"{s.template.as_posix()}\", "
            f"framework = \"{s.template_framework}\"")


def _unrecorded(config: Config, locks: list[LockRef], chosen: list[Scenario]) -> list[Scenario]:
    """Of `chosen`, those a lock pins the framework of and that have no golden for this
    machine's hardware class yet (all of them where the class cannot be read cheaply)."""
    # init resolves the settings itself, where every other command has the command line do
    # it: the config they come from is the one init writes (or found), and init takes no run
    # options, so they are the project's own.
    settings = Settings.resolve(config)
    gdir = settings.golden_dir
    out = []
    for planned in pipeline.plan(settings, chosen, locks):
        if planned.skip_reason:
            continue
        host = host_class(planned.device)
        if host is None or not golden_path(gdir, planned.device, host.id,
                                           planned.scenario.id).is_file():
            out.append(planned.scenario)
    return out
