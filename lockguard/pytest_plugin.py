"""lockguard inside the test suite a team already runs: the `lockguard_training` fixture
(pytest's `pytest11` entry point `lockguard`, pyproject.toml).

    def test_training_still_behaves(lockguard_training):
        lockguard_training("pkg.train:make", framework="torch", steps=20)

The fixture runs the training as `lockguard check` runs an entry scenario (the harness, in a
process of its own, seeded, with the determinism flags; docs/scenarios.md, "Your own code as the
scenario") and judges it against the project's golden store with the gate's own flows: the
first run records the golden (record's atomic write, its digest and provenance) and fails, as
pytest-regressions does, so that a suite with no golden never passes silently; later runs
compare with the same tolerance table, first divergent step and ULP wording; `--lockguard-update`
records anew and passes. The goldens are the files `lockguard check` reads: a scenario the config
registers with this entry (`lockguard scenario add`) is that scenario, golden and settings.

Nothing of lockguard but this module is imported until a test asks for the fixture: a suite
that never uses it pays for a module of option declarations (tests/test_pytest_plugin.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import pytest

# Where the training runs: "local" is the interpreter running pytest (the suite's own
# environment, nothing built); "venv" builds the config's lock as `lockguard check` does.
ENVS = ("local", "venv", "docker")


def pytest_addoption(parser: Any) -> None:
    """--lockguard-update and --lockguard-env."""
    group = parser.getgroup("lockguard", "lockguard goldens of the project's trainings")
    group.addoption("--lockguard-update", action="store_true", default=False,
                    help="Record the goldens of lockguard_training's trainings anew (their "
                         "tests pass), as --force-regen does.")
    group.addoption("--lockguard-env", default="local", choices=ENVS,
                    help="Where lockguard_training runs a training: local (this interpreter, "
                         "default), or the config's lock in a venv or a container.")


@dataclass(frozen=True)
class Asked:
    """What a test asked the fixture to train: the entry ("module:function") and the
    arguments it gave (None: not given), and the test (its pytest node id)."""

    entry: str
    framework: str | None
    steps: int | None
    name: str | None
    data: tuple[str, ...] | None
    test: str

    @property
    def id(self) -> str:
        """The scenario's id: `name`, else the entry's (as `scenario add` names it)."""
        from lockguard.config import entry_id

        return self.name or entry_id(self.entry)


@pytest.fixture
def lockguard_training(request: Any) -> Callable[..., Any]:
    """train(entry, *, framework, steps=None, name=None, data=None) -> the check's (or
    record's) Report: `entry` is "module:function" or the function itself (the module
    importable from the project's folder, the one holding its lockguard config, found upwards
    from the test's); `data`, the files it reads outside its package, as a scenario's `data`
    (paths or globs relative to the config's folder)."""
    update = bool(request.config.getoption("lockguard_update"))
    env = request.config.getoption("lockguard_env")
    start = Path(str(request.path)).parent

    def train(entry: str | Callable[..., Any], *, framework: str | None = None,
              steps: int | None = None, name: str | None = None,
              data: list[str] | tuple[str, ...] | None = None) -> Any:
        asked = Asked(entry_name(entry), framework, steps, name,
                      tuple(data) if data is not None else None, request.node.nodeid)
        return _train(start, asked, update, env)

    return train


def entry_name(entry: str | Callable[..., Any]) -> str:
    """"module:function" of a function (its module must be importable by that name), or
    `entry` as given."""
    if isinstance(entry, str):
        return entry
    module, qualname = getattr(entry, "__module__", None), getattr(entry, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        pytest.fail(f"lockguard_training: {entry!r} is not a module-level function of the "
                    "project: pass it as \"module:function\"", pytrace=False)
    return f"{module}:{qualname}"


def _train(start: Path, asked: Asked, update: bool, env: str) -> Any:
    """Record (first run, --lockguard-update) or check the entry's training; pytest.fail with
    the gate's report when it does not pass. A training the config does not register is
    registered for the gate in the golden store when its golden is recorded."""
    from lockguard.config import Options, load_config, register_training
    from lockguard.errors import LockguardError
    from lockguard.flows.check import GOLDENS, check
    from lockguard.flows.pipeline import plan
    from lockguard.flows.record import record
    from lockguard.golden import golden_path
    from lockguard.hardware import host_class
    from lockguard.locks.ref import load_locks
    from lockguard.report import text
    from lockguard.settings import Settings

    try:
        config = load_config(start=start)
        scenario, asked = _scenario(config, asked)
        # Always run: a test that answered from the golden's provenance would trust the
        # interpreter's packages not to have moved under an unchanged lock.
        settings = Settings.resolve(config, Options(env=env, rerun=True))
        locks = load_locks(config, [])
        device = plan(settings, [scenario], locks)[0].device  # as record and check plan it
        gold = golden_path(settings.golden_dir, device, host_class(device).id, scenario.id)
        first = not gold.is_file()
        if update or first:
            report = record(settings, locks, [scenario])
            if scenario.id not in config.scenario and report.passed and gold.is_file():
                register_training(config, scenario.id, asked.entry, scenario.framework,
                                  scenario.steps, asked.test, asked.data or ())
        else:
            report = check(settings, locks, [scenario], GOLDENS)
    except LockguardError as exc:
        pytest.fail(f"lockguard_training({asked.entry}): {exc}", pytrace=False)
    # A skipped training (no lock pins its framework) judged nothing: never a pass.
    if not report.passed or report.skipped or (update or first) and not gold.is_file():
        pytest.fail(text.render(report, width=100), pytrace=False)
    if first and not update:
        pytest.fail(f"lockguard_training({asked.entry}): no golden yet: recorded {gold} "
                    "(commit it; the next run compares with it)", pytrace=False)
    return report


def _scenario(config: Any, asked: Asked) -> tuple[Any, Asked]:
    """The config's scenario of the entry (by `name` when given), else one made for this test
    (framework, steps and data the test's, else those it registered last): recorded, it is
    registered in the golden store, and `lockguard check` and the A/B gate train it too. With
    it, `asked` as it stands once what the test left out is taken from its registration."""
    from lockguard.config import (
        ENTRY, ENTRY_RULE, SCENARIO_ID, SCENARIO_ID_RULE, data_files, entry_module,
        entry_root, registered_trainings,
    )
    from lockguard.errors import UsageError, one_line
    from lockguard.scenarios import Scenario, user_scenarios

    entry, framework, steps, name = asked.entry, asked.framework, asked.steps, asked.name
    data = asked.data
    if not ENTRY.fullmatch(entry):
        raise UsageError(f"{entry!r} is not an entry: {ENTRY_RULE}")
    if name is not None and not SCENARIO_ID.fullmatch(name):
        # Before anything is recorded: the id names its golden and its registration file,
        # which every command reads as a scenario id (a bad one, a ConfigError everywhere).
        raise UsageError(f"{asked.test}: name={one_line(repr(name), 80)} is not a scenario "
                         f"id: {SCENARIO_ID_RULE}")
    found = [s for s in user_scenarios(config)
             if s.entry == entry and (name is None or s.id == name)]
    # What a test registered is that test's training: the one of the id it names.
    registered = [s for s in found if s.id not in config.scenario and s.id == asked.id]
    found = [s for s in found if s.id in config.scenario]
    if registered and not found:  # the test's own arguments win over what it registered
        framework = framework or registered[0].framework
        name, steps = registered[0].id, steps or registered[0].steps
        if data is None:
            data = tuple(registered_trainings(config)[name][0].data)
        asked = replace(asked, framework=framework, steps=steps, data=data)
    if found:
        if framework is not None and framework != found[0].framework:
            raise UsageError(f"scenario {found[0].id} of {config.source} trains {entry} with "
                             f"{found[0].framework}, not {framework}")
        if steps is not None and steps != found[0].steps:
            raise UsageError(f"scenario {found[0].id} of {config.source} trains {entry} for "
                             f"{found[0].steps} steps, not {steps}: its golden is check's")
        if data is not None:
            raise UsageError(f"scenario {found[0].id} of {config.source} trains {entry}: "
                             "its data is the config's (`data` there), not the test's")
        return found[0], asked
    if framework is None:
        raise UsageError(f"{entry} is no scenario of {config.source}: name its framework "
                         "(framework=\"torch\") or register it (`lockguard scenario add`)")
    module = entry_module(config.root, entry)
    if module is None:
        raise UsageError(f"{entry}: no module {entry.partition(':')[0]} in {config.root} "
                         "(nor in its src/)")
    sid = name or asked.id
    return Scenario(id=sid, framework=framework,
                    description=f"the test suite's training {entry}", steps=steps or 20,
                    script=module, entry=entry, root=entry_root(config.root, entry),
                    data=data_files(config.root, data or (),
                                    f"{asked.test}: the fixture's data"),
                    data_patterns=tuple(data or ()),
                    data_root=config.root if data else None), asked
