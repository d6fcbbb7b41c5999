"""`lockguard init`: add lockguard to a project.

Three stages, so that the command line can ask its questions in between and nothing is written
before every check has passed:

- `survey`: what the project holds. Its locks (requirements*.txt as pip-compile or `uv pip
  compile` write them, pylock.toml, uv.lock, poetry.lock; read by the one parser; a lock only
  counts when it pins a framework and passes the trust rules lockguard installs by), lock
  formats lockguard does not read (Pipfile.lock, pdm.lock),
  the project's own package, an existing lockguard config, the repository and its workflows.
  No lock and no config: a UsageError saying what was looked for and how to make one.
- `prepare`: what would be written, validated: the config text (re-read by the config loader
  as every command reads it), the scenario template, the workflow, the scenarios that have no
  golden on this machine yet. Empty when everything is in place: a second run changes nothing.
- `apply`: write them (each atomically) and record the missing goldens through the record
  flow, as `lockguard record` does.

An existing config is never touched; an existing workflow or template file neither.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from lockguard import toml
from lockguard.config import (
    MAX_CONFIG_BYTES, Config, ConfigError, load_config, lockguard_table, parse_config,
)
from lockguard.errors import UsageError, one_line
from lockguard.files import (
    ReadError, display_path, read_bytes, refuse_escape, repo_root, write_text,
)
from lockguard.flows import init_files
from lockguard.flows.pipeline import plan
from lockguard.locks.ref import LockRef, load_locks, lock_for, read_lock
from lockguard.golden import golden_path
from lockguard.hardware import host_class
from lockguard.locks.families import framework_version
from lockguard.locks.formats import format_by_name
from lockguard.locks.model import Lock, LockError
from lockguard.locks.parser import parse_lock
from lockguard.locks.trust import require_trusted
from lockguard.settings import Settings
from lockguard.names import FRAMEWORKS
from lockguard.progress import QUIET, Progress
from lockguard.scenarios import Scenario, bundled, select

if TYPE_CHECKING:
    from lockguard.report import Report

# Lock files lockguard does not read, and how to get a lock it reads from each (uv.lock,
# poetry.lock and pylock.toml are read: lockguard.locks.formats).
UNSUPPORTED = {
    "Pipfile.lock": "compile a hashed requirements.txt: `uv pip compile --generate-hashes`",
    "pdm.lock": "`pdm export -o requirements.txt` writes a hashed one (or `pdm export -f "
                "pylock -o pylock.toml`)",
}
# What a requirements lock is called: requirements.txt, requirements-gpu.txt, dev-requirements.txt,
# and any .txt in a requirements/ folder.
_REQUIREMENTS = re.compile(r"(?i)^(.*[-_.])?requirements([-_.].*)?\.txt$")
_INPUT = re.compile(r"(?i)^(.*[-_.])?requirements([-_.].*)?\.in$")
# Folders never searched: tools' and environments' own, and what holds no lock of the project.
_PRUNED = {"node_modules", "__pycache__", "site-packages", "build", "dist", "golden"}
SEARCH_DEPTH = 3  # the project's folder and two below it: ml/requirements/gpu.txt
MAX_SEARCHED = 20_000  # entries looked at: a huge tree is not walked to its end
# Folders that hold no code of the project's own, for the scenario template's import.
_NOT_PACKAGES = {"tests", "test", "testing", "scenarios", "docs", "examples", "golden",
                 "benchmarks", "scripts", "tools", "build", "dist"}
# A workflow that already runs lockguard: the action of any owner, or the command.
_RUNS_LOCKGUARD = re.compile(r"uses:\s*['\"]?[\w.-]+/lockguard[@/]|\blockguard\s+check\b")

NO_LOCK_FIX = ("make one with `lockguard lock requirements.in` or `uv pip compile "
               "requirements.in --generate-hashes -o requirements.txt`, or name it: "
               "`lockguard init --lock PATH`")


@dataclass(frozen=True)
class FoundLock:
    """A lock init will configure: read by the one parser and pinning at least one framework
    (`frameworks`)."""

    path: Path
    name: str  # as the config names it: relative to the project, with forward slashes
    lock: Lock
    frameworks: tuple[str, ...]  # in FRAMEWORKS order

    def describe(self) -> str:
        """For the survey's summary: its name and the framework versions it pins
        ("requirements.txt: torch 2.4.1, numpy 2.0.2")."""
        versions = ", ".join(f"{fw} {framework_version(self.lock, fw)}" for fw in self.frameworks)
        return f"{self.name}: {versions}"


@dataclass(frozen=True)
class PassedOver:
    """A file that looked like a lock and is not used, and why."""
    name: str
    reason: str


@dataclass(frozen=True)
class Survey:
    """What `survey` found in the project: its locks and the files passed over, an existing
    config, its package and layout, the repository and a workflow that already runs lockguard.
    `prepare` decides from it what to write."""

    project: Path  # absolute
    config_file: Path | None  # the project's existing lockguard config; None: none yet
    config_target: Path  # where a new config goes: pyproject.toml, or lockguard.toml
    locks: tuple[FoundLock, ...]
    passed_over: tuple[PassedOver, ...] = ()  # looked like locks, not used
    unsupported: tuple[PassedOver, ...] = ()  # lock formats lockguard does not read
    uncompiled: tuple[str, ...] = ()  # requirements*.in without their lock
    package: str | None = None  # the project's own package, for the scenario template
    src_layout: bool = False
    repo: Path | None = None  # the repository's top folder; None: not in one
    branch: str = "main"  # where pushes warm the cache
    workflow: Path = Path(init_files.WORKFLOW_PATH)
    workflow_found: str | None = None  # a workflow that already runs lockguard, if any
    template: Path = Path(init_files.SCENARIO_PATH)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks any found lock pins, in FRAMEWORKS order."""
        pinned = {fw for found in self.locks for fw in found.frameworks}
        return tuple(fw for fw in FRAMEWORKS if fw in pinned)

    @property
    def template_framework(self) -> str:
        """The framework the template trains with: the first one pinned that is not numpy."""
        return next((fw for fw in self.frameworks if fw != "numpy"), "numpy")


@dataclass(frozen=True)
class Choices:
    """What the user chose to have written and done (the command line's flags or answers to
    its questions); `prepare` takes them."""

    template: bool = False  # write the scenario template
    record: bool = True  # record the goldens that are missing on this machine
    workflow: bool = True  # write the GitHub workflow
    action: str = init_files.ACTION
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
            out.append(f"write {_shown(s.project / s.template, s.project)}: a scenario to train "
                       f"your own model with {s.template_framework}, for you to edit")
        if self.workflow_text is not None:
            out.append(f"write {_shown(self.workflow_path, s.project)}: the gate on pull "
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


@dataclass
class Done:
    """What `apply` did, for the command line to print: the files written or left as they
    were, the record flow's report, and what to do next."""

    lines: list[str]  # what was written, or left as it was
    report: Report | None  # the record flow's, when goldens were recorded
    next_steps: list[str]


# -------------------------------------------------------------------------------- survey

def survey(project: Path, cli_locks: list[str] | None = None,
           config_name: str | None = None) -> Survey:
    """What `project` holds (see the module's docstring). `cli_locks`: use these locks
    instead of searching; `config_name`: pyproject.toml or lockguard.toml for a new config."""
    project = project.resolve()
    if not project.is_dir():
        raise UsageError(f"{project}: not a directory")
    existing = _existing_config(project)
    target = project / (config_name or ("pyproject.toml" if (project / "pyproject.toml").is_file()
                                        else "lockguard.toml"))
    found: list[FoundLock] = []
    passed_over: list[PassedOver] = []
    unsupported: list[PassedOver] = []
    uncompiled: list[str] = []
    if existing is not None:
        # Its locks, read as every command reads them (a broken config is said so, here).
        for ref in load_locks(load_config(existing), []):
            found.append(FoundLock(ref.path, _config_path(ref.path, project), ref.lock,
                                   _frameworks(ref.lock)))
        passed_over += [PassedOver(f"--lock {given}", "the config names the locks")
                   for given in cli_locks or []]
    elif cli_locks:
        for given in cli_locks:
            path = Path(given).resolve()
            lock = read_lock(Path(given))
            require_trusted(lock, allow_unhashed=False, allow_insecure_index=False)
            frameworks = _frameworks(lock)
            if not frameworks:
                raise UsageError(f"{given}: the lock pins none of {', '.join(FRAMEWORKS)}: "
                                 "lockguard has nothing to train under it")
            found.append(FoundLock(path, _config_path(path, project), lock, frameworks))
    else:
        files = _search(project)
        for path in files:
            name = _config_path(path, project)
            if path.name in UNSUPPORTED:
                unsupported.append(PassedOver(name, f"not read (lockguard reads requirements "
                                                f"locks, pylock.toml, uv.lock and poetry.lock); "
                                                f"{UNSUPPORTED[path.name]}"))
            elif _INPUT.match(path.name):
                if not path.with_suffix(".txt").exists():
                    uncompiled.append(name)
            else:
                try:
                    lock = parse_lock(path)
                    require_trusted(lock, allow_unhashed=False, allow_insecure_index=False)
                except LockError as exc:
                    where = f"line {exc.line}: " if exc.line is not None else ""
                    passed_over.append(PassedOver(name, one_line(where + exc.reason, 300)))
                    continue
                frameworks = _frameworks(lock)
                if frameworks:
                    found.append(FoundLock(path, name, lock, frameworks))
                else:
                    passed_over.append(PassedOver(name, f"pins none of {', '.join(FRAMEWORKS)}"))
        found.sort(key=lambda f: (f.name.count("/"), f.name != "requirements.txt", f.name))
    if existing is None and not found:
        raise UsageError(_no_lock(project, passed_over, unsupported, uncompiled))
    package, src = _package(project)
    repo = repo_root(project)
    workflows = (repo or project) / ".github" / "workflows"
    return Survey(project=project, config_file=existing, config_target=target,
                  locks=tuple(found), passed_over=tuple(passed_over), unsupported=tuple(unsupported),
                  uncompiled=tuple(uncompiled), package=package, src_layout=src, repo=repo,
                  branch=_default_branch(repo) if repo else "main",
                  workflow_found=_workflow_running_lockguard(workflows))


def describe(s: Survey) -> list[str]:
    """What the survey found, one line each."""
    lines = [f"project: {s.project}"]
    if s.config_file is not None:
        table = " [tool.lockguard]" if s.config_file.name == "pyproject.toml" else ""
        lines.append(f"already configured: {_shown(s.config_file, s.project)}{table} (left as "
                     "it is)")
    lines += [f"lock {found.describe()}" for found in s.locks]
    lines += [f"not used: {p.name}: {p.reason}" for p in s.passed_over]
    lines += [f"not used: {p.name}: {p.reason}" for p in s.unsupported]
    lines += [f"not compiled: {name} (compile it: `lockguard lock {name}`)"
              for name in s.uncompiled]
    if s.package:
        lines.append(f"your code: {'src/' if s.src_layout else ''}{s.package}/")
    if s.workflow_found:
        lines.append(f"a workflow already runs lockguard: {s.workflow_found}")
    return lines


def config_place(s: Survey) -> str:
    """Where a new config goes, as the user knows it: "[tool.lockguard] in pyproject.toml"."""
    table = "[tool.lockguard] in " if s.config_target.name == "pyproject.toml" else ""
    return table + _shown(s.config_target, s.project)


def _existing_config(project: Path) -> Path | None:
    """The project's own file holding lockguard settings, found as every command finds it (a
    config in a folder above is another project's: this one gets its own)."""
    found = load_config(start=project).file
    return found if found is not None and found.parent == project else None


def _search(project: Path) -> list[Path]:
    """Files below `project` (SEARCH_DEPTH folders deep) named like a lock or its input."""
    found: list[Path] = []
    seen = 0
    for top, dirs, files in os.walk(project):
        here = Path(top)
        depth = len(here.relative_to(project).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in _PRUNED
                         and depth + 1 < SEARCH_DEPTH
                         and not (here / d / "pyvenv.cfg").exists())
        for name in sorted(files):
            seen += 1
            if (_REQUIREMENTS.match(name) or _INPUT.match(name) or name in UNSUPPORTED
                    or format_by_name(name) in ("uv.lock", "poetry.lock", "pylock.toml")
                    or (here.name == "requirements" and name.endswith(".txt"))):
                found.append(here / name)
        if seen > MAX_SEARCHED:
            break
    return found


def _frameworks(lock: Lock) -> tuple[str, ...]:
    pinned = lock.frameworks()
    return tuple(fw for fw in FRAMEWORKS if fw in pinned)


def _config_path(path: Path, project: Path) -> str:
    return Path(os.path.relpath(path, project)).as_posix()


def _shown(path: Path, project: Path) -> str:
    try:
        return path.relative_to(project).as_posix()
    except ValueError:
        return display_path(path)


def _no_lock(project: Path, passed_over: list[PassedOver], unsupported: list[PassedOver],
             uncompiled: list[str]) -> str:
    why = [f"{p.name}: {p.reason}" for p in passed_over + unsupported]
    why += [f"{name} is not compiled" for name in uncompiled]
    seen = f" ({'; '.join(why)})" if why else ""
    return (f"{display_path(project)}: no lock to guard: looked for hashed locks "
            f"(requirements*.txt, pylock.toml, uv.lock, poetry.lock) that pin "
            f"{', '.join(FRAMEWORKS)}{seen}; "
            + NO_LOCK_FIX)


def _package(project: Path) -> tuple[str | None, bool]:
    """The project's own importable package (a folder with __init__.py at the top or in
    src/), the one named like the project's folder when there are several; and whether it is
    in src/."""
    for base, src in ((project, False), (project / "src", True)):
        try:
            names = sorted(e.name for e in os.scandir(base) if e.is_dir()
                           and e.name.isidentifier() and e.name not in _NOT_PACKAGES
                           and (Path(e.path) / "__init__.py").is_file())
        except OSError:
            continue
        if names:
            wanted = re.sub(r"[-.]+", "_", project.name).lower()
            return (wanted if wanted in names else names[0]), src
    return None, False


def _default_branch(repo: Path) -> str:
    """The branch pushes go to (gitref.default_branch)."""
    from lockguard.gitref import default_branch

    return default_branch(repo)


def _workflow_running_lockguard(workflows: Path) -> str | None:
    try:
        paths = sorted(p for p in workflows.iterdir() if p.suffix in (".yml", ".yaml"))
    except OSError:
        return None
    for path in paths:
        if path.name == Path(init_files.WORKFLOW_PATH).name:
            continue  # the one init writes: judged as "already there"
        try:
            text = read_bytes(path, "workflow", MAX_CONFIG_BYTES).decode("utf-8", "replace")
        except ReadError:
            continue
        if _RUNS_LOCKGUARD.search(text):
            return path.name
    return None


# ------------------------------------------------------------------------------- prepare

def prepare(s: Survey, choices: Choices) -> Plan:
    """What apply() would write and record, every piece validated; nothing is written."""
    if s.config_file is None:
        locks = [LockRef(found.path, found.lock) for found in s.locks]
        # What the locks can run: a library scenario only where its library is pinned too.
        ids = [sc.id for sc in bundled() if sc.framework in s.frameworks
               and lock_for(sc, locks) is not None]
        text, summary = _config_text(s, ids, choices.template)
        config = _validate(s, text)
        chosen = [sc for sc in bundled() if sc.id in ids]
        out = Plan(s, choices, config, config_text=text, config_summary=summary)
    else:
        config = load_config(s.config_file)
        out = Plan(s, choices, config)
        chosen = select(config, [])
        locks = load_locks(config, [])
        if choices.template and init_files.SCENARIO_ID not in config.scenario:
            out.notes.append(_register_by_hand(s))
    out.locks = locks
    template = s.project / s.template
    if choices.template and not os.path.lexists(template):
        out.template_text = init_files.scenario_template(s.template_framework, s.package,
                                                         s.src_layout)
    if choices.workflow and not os.path.lexists(out.workflow_path) and not s.workflow_found:
        relative = s.project.relative_to(s.repo).as_posix() if s.repo else "."
        out.workflow_text = init_files.workflow(
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


def _config_text(s: Survey, ids: list[str], template: bool) -> tuple[str, str]:
    """The settings as TOML text to append (pyproject.toml) or to write (lockguard.toml), and a
    one-line summary of them."""
    pyproject = s.config_target.name == "pyproject.toml"
    prefix = "tool.lockguard." if pyproject else ""
    names = [found.name for found in s.locks]
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
        sid = init_files.SCENARIO_ID
        lines += ["",
                  f"# Your own model (written by `lockguard init`): once {s.template.as_posix()}",
                  f'# builds it, add "{sid}" to `scenarios` and run `lockguard record '
                  f"--scenario {sid}`.",
                  f"[{prefix}scenario.{sid}]",
                  f"script = {toml.string(s.template.as_posix())}",
                  f"framework = {toml.string(s.template_framework)}",
                  f"description = {toml.string('your own model: ' + (s.package or 'a template'))}"]
    summary = (f"lock{'s' if len(names) > 1 else ''} {', '.join(names)}; scenarios "
               f"{', '.join(ids)}" + (f"; scenario {init_files.SCENARIO_ID} (not selected "
                                      "until you edit it)" if template else ""))
    return "\n".join(lines) + "\n", summary


def _toml_list(key: str, values: list[str], width: int = 96) -> list[str]:
    one = f"{key} = [" + ", ".join(toml.string(v) for v in values) + "]"
    if len(one) <= width:
        return [one]
    return [f"{key} = ["] + [f"    {toml.string(v)}," for v in values] + ["]"]


def _new_text(s: Survey, block: str) -> str:
    """The config file's whole new text: a pyproject.toml's with the table appended (its own
    text untouched, its line endings kept), or a new lockguard.toml."""
    target = s.config_target
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


def _validate(s: Survey, block: str) -> Config:
    """The config as the loader reads it from the new text: a table that cannot be appended
    (the file already defines tool.lockguard otherwise, or is not TOML) is refused here."""
    text = _new_text(s, block)
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
            f"[{table}.{init_files.SCENARIO_ID}] script = \"{s.template.as_posix()}\", "
            f"framework = \"{s.template_framework}\"")


def _unrecorded(config: Config, locks: list[LockRef], chosen: list[Scenario]) -> list[Scenario]:
    """Of `chosen`, those a lock pins the framework of and that have no golden for this
    machine's hardware class yet (all of them where the class cannot be read cheaply)."""
    settings = Settings.resolve(config)
    gdir = settings.golden_dir
    out = []
    for planned in plan(settings, chosen, locks):
        if planned.skip_reason:
            continue
        host = host_class(planned.device)
        if host is None or not golden_path(gdir, planned.device, host.id,
                                           planned.scenario.id).is_file():
            out.append(planned.scenario)
    return out


# --------------------------------------------------------------------------------- apply

def apply(p: Plan, progress: Progress = QUIET) -> Done:
    """Write what `p` holds, each file atomically, then record the missing goldens."""
    s = p.survey
    lines: list[str] = []
    if p.config_text is not None:
        write_text(s.config_target, _new_text(s, p.config_text))
        load_config(s.config_target)  # as every command will read it
        lines.append(f"wrote {_shown(s.config_target, s.project)}")
    template = s.project / s.template
    if p.template_text is not None:
        write_text(template, p.template_text)
        lines.append(f"wrote {_shown(template, s.project)}")
    elif p.choices.template:
        lines.append(f"already there: {_shown(template, s.project)} (left as it is)")
    if p.workflow_text is not None:
        write_text(p.workflow_path, p.workflow_text)
        lines.append(f"wrote {_shown(p.workflow_path, s.project)}")
    elif p.choices.workflow:
        lines.append(f"already there: {s.workflow_found or _shown(p.workflow_path, s.project)} "
                     "(left as it is)")
    report = None
    if p.to_record:
        from lockguard.flows.record import record

        config = load_config(s.config_file or s.config_target)
        # A new project's own settings: init takes no run options.
        report = record(Settings.resolve(config), p.locks, p.to_record, progress)
    elif p.choices.record:
        lines.append("goldens: already recorded on this machine")
    return Done(lines, report, _next_steps(p, report))


def cost_lines(report: Report, budget_s: float, workers: int,
               users: set[str] = frozenset()) -> list[str]:
    """What a lock pull request will cost on this machine, from what `record` measured: each
    scenario's seconds, the A/B's (both sides of each, `workers` at a time), and, over
    `budget_s`, a selection that keeps within it (the `users`' own scenarios always in it,
    the cheapest bundled ones next), the rest left to a scheduled check."""
    seconds = {e.scenario: e.candidate.result.timings.total_s for e in report.evidence
               if e.candidate is not None and e.candidate.result.timings.total_s is not None}
    if not seconds:
        return []
    ab = 2 * sum(seconds.values()) / max(1, workers)
    each = ", ".join(f"{sid} {t:.0f} s" for sid, t in sorted(seconds.items(),
                                                              key=lambda kv: -kv[1]))
    lines = [f"a lock pull request's A/B here: about {ab:.0f} s ({len(seconds)} scenarios, both "
             f"sides, {workers} at a time; record measured {each})"]
    # What a PR that moves only numpy runs: what the A/B leaves out of such a change
    # (Scenario.unreached) while its eager twin runs.
    from lockguard.locks.diff import Change
    from lockguard.scenarios import bundled

    numpy_only = [Change(name="numpy", display_name="numpy", kind="upgraded")]
    left_out = {s.id for s in bundled() if s.id in seconds and s.covered_by in seconds
                and s.unreached(numpy_only)}
    if left_out:
        light = 2 * sum(t for sid, t in seconds.items() if sid not in left_out) / max(1, workers)
        lines.append("one that moves only numpy (or another package no compiler or parallel "
                     f"path imports): about {light:.0f} s, leaving out "
                     f"{', '.join(sorted(left_out))}")
    if ab <= budget_s:
        return lines
    kept, total = [], 0.0
    for sid, t in sorted(seconds.items(), key=lambda kv: (kv[0] not in users, kv[1])):
        cost = 2 * t / max(1, workers)
        if sid in users or total + cost <= budget_s:
            kept.append(sid)
            total += cost
    left = sorted(set(seconds) - set(kept))
    lines.append(f"over the {budget_s:.0f} s budget: `scenarios = [{', '.join(map(repr, kept))}]`"
                 f" keeps a lock PR to about {total:.0f} s here; run the others ("
                 f"{', '.join(left)}) on a schedule (`lockguard check --scenario ...`)")
    return lines


def _next_steps(p: Plan, report: Report | None) -> list[str]:
    s = p.survey
    steps = []
    if report is not None and report.passed:
        from lockguard.flows.pipeline import default_workers

        steps += cost_lines(report, p.choices.budget_s, default_workers(),
                            set(p.config.scenario))
    if report is not None and not report.passed:
        steps.append("some goldens were not recorded (see above): fix what the report says, "
                     "then run `lockguard init` again or `lockguard record`")
    written = [s.config_target] if p.config_text is not None else []
    written += [s.project / s.template] if p.template_text is not None else []
    written += [p.workflow_path] if p.workflow_text is not None else []
    if report is not None:
        written.append(p.config.resolve(p.config.golden_dir))
    if written:
        paths = " ".join(_shown(path, s.project) for path in written)
        steps.append(f"commit them: git add {paths} && git commit -m \"Add lockguard\"")
    if p.template_text is not None:
        steps.append(f"edit {s.template.as_posix()} to train your own model, add "
                     f"\"{init_files.SCENARIO_ID}\" to `scenarios`, then `lockguard record "
                     f"--scenario {init_files.SCENARIO_ID}`")
    if p.workflow_text is not None and p.choices.action == init_files.ACTION:
        steps.append(f"the workflow uses {init_files.ACTION}: make `uses:` name the lockguard "
                     "action you install from (or run `lockguard init --action OWNER/REPO@REF`)")
    if p.workflow_text is None and p.choices.workflow and s.workflow_found:
        steps.append(f"{s.workflow_found} already runs lockguard: no workflow written")
    if p.unrecorded and report is None:
        ids = " ".join(f"--scenario {sc.id}" for sc in p.unrecorded)
        steps.append(f"record the goldens on this machine: `lockguard record {ids}`")
    steps.append(f"try the gate: on a branch that changes a lock, `lockguard check --base "
                 f"origin/{s.branch}`; against the goldens, `lockguard check`")
    return steps + p.notes
