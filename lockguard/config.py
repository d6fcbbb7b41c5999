"""[tool.lockguard] in pyproject.toml (or a lockguard.toml) as pydantic models.

Unknown keys are errors, because a misspelt `tolerence` silently ignored would make a gate
looser than its owner believes. Paths in the config are relative to the file that holds it.
"""

import os
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union

from pydantic import (BaseModel, ConfigDict, Field, StrictBool, ValidationError, ValidationInfo,
                      field_validator, model_validator)

from lockguard import toml
from lockguard.compare.tolerance import Tolerance
from lockguard.errors import LockguardError, one_line
from lockguard.files import ReadError, read_bytes, write_text
from lockguard.fleet import GPU_ARCHS, ISA_NAMES, Machine, gpu_arch, machine_toml, parse_driver
from lockguard.names import (
    DEVICES, ENV_KINDS, FRAMEWORKS, MAX_STEPS, SANDBOX_MODES, VERDICT_NAMES,
)
from lockguard.sizes import SIZE_RULE, format_size, parse_size

Device = Literal[DEVICES]
EnvKind = Literal[ENV_KINDS]
SandboxMode = Literal[SANDBOX_MODES]
Framework = Literal[FRAMEWORKS]


class ConfigError(LockguardError):
    """Bad configuration; the message is one line naming the file and the key."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# `tolerance = "exact"` or `tolerance = {rtol = 1e-5, atol = 1e-6}` (validated by Tolerance)
ToleranceSetting = Union[Literal["exact"], Tolerance]


def tolerance_value(setting: ToleranceSetting | None) -> Tolerance | None:
    """A `tolerance` setting as comparisons take it: "exact" is a Tolerance that is exact."""
    if setting == "exact":
        return Tolerance(rtol=0.0, atol=0.0, exact=True)
    return setting  # type: ignore[return-value]  # None, or a Tolerance config validated


class LockEntry(_Strict):
    """One entry of `locks`: a lock's path (relative to the config's folder) and what the
    config says of it. A bare string in `locks` is one with only `path`."""

    path: str
    device: Device | None = None  # the device this lock's environment is expected to use
    inputs: str | None = None  # its requirements.in (propose); default: <lock stem>.in beside it


# Scenario ids name golden files and harness result files: no separators, no leading dot, a
# length every file system takes, so an id can never address a path outside golden_dir.
SCENARIO_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
SCENARIO_ID_RULE = ("letters, digits, '.', '_' and '-', starting with a letter or digit, "
                    "at most 100 characters")
MAX_TIMEOUT_S = 7 * 24 * 3600.0
TIMING_RUNS = 5  # the default timing runs a side (measured: docs/performance.md)
MAX_SEED = 2**31 - 1  # what every framework's seeding API accepts (numpy: < 2**32, jax: int32)
MIN_MEMORY_LIMIT = 32 << 20  # below this no interpreter starts: a size missing its unit
MEMORY_LIMIT_RULE = f'{SIZE_RULE}; "auto" (3/4 of this machine\'s memory) or "none"'


# A scenario's entry: a function of the project's own code, "pkg.train:make" (a dotted module
# importable from the config's folder, a colon, a dotted attribute path).
ENTRY = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")
ENTRY_RULE = "module:function, e.g. pkg.train:make (the module importable from the config's folder)"


def entry_id(entry: str) -> str:
    """The id of an entry's scenario unless named otherwise (`scenario add`, init, the pytest
    fixture): "pkg.train:make" -> "pkg.train.make"."""
    return entry.replace(":", ".")


DATA_RULE = ("a path or glob relative to the config's folder, inside it (data/slice.npz, "
             "data/*.csv)")
MAX_DATA_PATTERNS = 64


class ScenarioConfig(_Strict):
    """[tool.lockguard.scenario.<id>]: a user scenario, either a `script` defining
    `run(steps, seed)` (relative to the config's folder) or an `entry`, a function of the
    project's own code ("pkg.train:make", docs/scenarios.md). Unset, steps are 20
    (scenarios.user_scenarios) and the tolerance and device are the project's."""

    script: str | None = None
    entry: str | None = None
    framework: Framework
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS)
    tolerance: ToleranceSetting | None = None
    device: Device | None = None
    description: str = ""
    # Files the training reads from outside its code (a dataset's small fixed slice): paths or
    # globs relative to the config's folder, inside it. Their bytes enter the inputs digest
    # (scenarios.inputs_digest): a changed slice re-runs the scenario, never a stale PASS.
    data: list[str] = Field(default_factory=list, max_length=MAX_DATA_PATTERNS)

    @field_validator("data")
    @classmethod
    def _data(cls, value: list[str]) -> list[str]:
        for pattern in value:
            parts = Path(pattern).parts
            if not pattern or Path(pattern).is_absolute() or ".." in parts or "\\" in pattern:
                raise ValueError(f"{one_line(repr(pattern), 80)}: {DATA_RULE}")
        return value

    @field_validator("entry")
    @classmethod
    def _entry(cls, value: str | None) -> str | None:
        if value is not None and not ENTRY.fullmatch(value):
            raise ValueError(f"{one_line(repr(value), 80)} is not an entry: {ENTRY_RULE}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> "ScenarioConfig":
        if (self.script is None) == (self.entry is None):
            raise ValueError("give either 'script' or 'entry' (exactly one)")
        return self

    def code(self) -> str:
        """The scenario's code as the config names it: its script's path or its entry."""
        return self.script if self.script is not None else f"entry {self.entry}"


# A runner label as the CI system takes it: one label, or several that must all match
# (GitHub's `runs-on: [self-hosted, gpu]`).
RunnerLabel = Union[str, list[str]]


class RunnersConfig(_Strict):
    """[tool.lockguard.runners]: the CI runner each device's plan entries run on."""

    cpu: RunnerLabel | None = "ubuntu-latest"
    cuda: RunnerLabel | None = None
    tpu: RunnerLabel | None = None

    @field_validator("cpu", "cuda", "tpu")
    @classmethod
    def _labels(cls, value: RunnerLabel | None) -> RunnerLabel | None:
        labels = [value] if isinstance(value, str) else value or []
        if isinstance(value, list) and not value:
            raise ValueError("an empty list of runner labels matches no runner")
        for label in labels:
            if not label.strip() or label != label.strip() or any(c in label for c in "\n\r"):
                raise ValueError(f"runner label {one_line(repr(label), 60)} is empty or has "
                                 "surrounding or line-breaking whitespace")
        return value


class FleetMachineConfig(_Strict):
    """[tool.lockguard.fleet.<name>]: one kind of machine the team trains on (lockguard/fleet.py
    judges a lock change against it). `gpus`: names (A100, H100, V100...) or sm_XX; `driver`:
    the NVIDIA driver version; `cpu`: the x86-64 psABI level or aarch64; `glibc`: "2.31";
    `python`: the Python the trainings run on, "3.10"."""

    gpus: list[str] = Field(default_factory=list)
    driver: str | None = None
    cpu: Literal[ISA_NAMES] | None = None  # type: ignore[valid-type]
    glibc: str | None = None
    python: str | None = None
    count: int = Field(default=1, gt=0)

    @field_validator("gpus")
    @classmethod
    def _gpus(cls, value: list[str]) -> list[str]:
        for name in value:
            if gpu_arch(name) is None:
                raise ValueError(f"unknown GPU {one_line(repr(name), 40)}: sm_XX, or one of "
                                 f"{', '.join(sorted(GPU_ARCHS))}")
        return value

    @field_validator("driver")
    @classmethod
    def _driver(cls, value: str | None) -> str | None:
        if value is not None and parse_driver(value) is None:
            raise ValueError(f"{one_line(repr(value), 40)} is not a driver version: \"550.54.15\"")
        return value

    @field_validator("glibc")
    @classmethod
    def _glibc(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"\d+\.\d+", value):
            raise ValueError(f"{one_line(repr(value), 40)} is not a glibc version: \"2.31\"")
        return value

    @field_validator("python")
    @classmethod
    def _python(cls, value: str | None) -> str | None:
        if value is not None and not re.fullmatch(r"3\.\d{1,2}", value):
            raise ValueError(f"{one_line(repr(value), 40)} is not a Python version: \"3.10\"")
        return value

    def machine(self, name: str) -> Machine:
        """The entry as fleet.judge takes it."""
        major, _, minor = (self.glibc or "").partition(".")
        return Machine(name=name, gpus=tuple(gpu_arch(g) or 0 for g in self.gpus),
                       gpu_names=tuple(self.gpus),
                       driver=parse_driver(self.driver) if self.driver else None,
                       isa=self.cpu, glibc=(int(major), int(minor)) if self.glibc else None,
                       python=tuple(int(p) for p in self.python.split(".")) if self.python
                       else None, count=self.count)


class Config(_Strict):
    """[tool.lockguard] (or a lockguard.toml) validated and frozen, with where it came from
    (`root`, `source`, `file`). Its settings are read through settings.Settings.resolve, once;
    the rest (scenario tables, lock entries, runners) as `settings.config`."""

    lock: str | None = None
    locks: list[Union[str, LockEntry]] | None = None
    golden_dir: str = "golden"
    env: EnvKind = "venv"
    device: Device = "cpu"
    steps: int | None = Field(default=None, gt=0, le=MAX_STEPS)  # overrides every scenario's
    timeout: float = Field(default=600.0, gt=0, le=MAX_TIMEOUT_S, allow_inf_nan=False)  # per run, s
    # Resident memory a training run's processes may hold together (bytes); "auto": 3/4 of
    # this machine's (flows/pipeline.memory_limit); "none": no limit. See MEMORY_LIMIT_RULE.
    memory_limit: Union[int, Literal["auto", "none"]] = "auto"
    # The most lockguard's cache may hold after a check or record: the least recently used
    # entries are pruned down to it (cache_entries.py); None: no bound. A size: "8GiB".
    cache_max_size: int | None = None
    threads: int = Field(default=1, gt=0, le=1024)  # fixed, recorded in the fingerprint
    seed: int = Field(default=0, ge=0, le=MAX_SEED)
    tolerance: ToleranceSetting | None = None  # default: per dtype, like torch.testing
    fail_on: list[str] | None = None
    fail_on_improvement: bool = False
    slower_ratio: float = Field(default=1.3, gt=1.0, allow_inf_nan=False)
    slower_min_step_s: float = Field(default=0.002, ge=0, allow_inf_nan=False)  # shorter: timed in blocks
    # Timing runs a side when a timing verdict is asked for (compare/timing.py): one at a time,
    # baseline and candidate alternating.
    timing_runs: int = Field(default=TIMING_RUNS, ge=3, le=50)
    heavier_ratio: float = Field(default=1.2, gt=1.0, allow_inf_nan=False)
    heavier_min_bytes: int = Field(default=48 << 20, ge=0)  # a smaller rise of the peak: noise
    scenarios: list[str] | None = None  # default selection; None = all that apply
    installer: Literal["uv", "pip"] = "uv"  # both install the same wheels, hash-checked
    # What a lock's code runs in (lockguard/sandbox.py): the strongest sandbox available, one
    # or exit 2, or none. LOCKGUARD_SANDBOX (and --sandbox, which sets it) overrides.
    sandbox: SandboxMode = "auto"
    # `check --base` on a pull request that changes a user scenario's code (its folder, the
    # project's Python files) and no lock: its code A/B against the target's, on the same lock
    # (flows/git_base.py); false for a team that gates code changes elsewhere.
    check_code_changes: StrictBool = True
    # An A/B leaves out a costly bundled scenario (compiled, data parallel, data pipeline, model
    # library) whose path and framework the change does not reach, its eager twin running
    # (scenarios.Scenario.unreached); false (or --all-scenarios) runs every selected one.
    skip_unreached: StrictBool = True
    # Venvs install wheels only: building an sdist runs code from the lock on this machine.
    allow_sdist: StrictBool = False  # only a literal `true` opts in
    # A lock whose pins carry no --hash, or that names a plain-http index, find-links or a
    # --trusted-host, is refused before anything is installed from it (locks/trust.py); these
    # opt in, and every report then carries a warning that says so.
    allow_unhashed: StrictBool = False
    allow_insecure_index: StrictBool = False
    python: str | None = None  # interpreter for venvs; default: the one running lockguard
    # A venv's .pyc linked from the store of those lockguard compiled for the same bytes
    # (envs/bytecode.py), else compiled in each venv; tests/test_differential.py holds it.
    share_bytecode: StrictBool = True
    scenario: dict[str, ScenarioConfig] = Field(default_factory=dict)
    runners: RunnersConfig = Field(default_factory=RunnersConfig)  # `lockguard plan`
    # The machines the team trains on: a lock change is judged against each (fleet.py).
    fleet: dict[str, FleetMachineConfig] = Field(default_factory=dict)

    # Where the config came from; relative paths resolve against it.
    root: Path = Field(default_factory=Path.cwd, exclude=True)
    source: str = Field(default="(defaults)", exclude=True)
    file: Path | None = Field(default=None, exclude=True)  # None: no config file (defaults)

    @model_validator(mode="after")
    def _one_lock_key(self) -> "Config":
        if self.lock is not None and self.locks is not None:
            raise ValueError("use either 'lock' or 'locks', not both")
        return self

    @field_validator("scenario", "fleet")
    @classmethod
    def _table_names(cls, value: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        # A scenario's id and a fleet machine's name (a rule's, fleet-<name>) are shown in
        # every report format: plain words.
        what = "scenario id" if info.field_name == "scenario" else "fleet machine name"
        for name in value:
            if not SCENARIO_ID.fullmatch(name):
                raise ValueError(f"{what} {one_line(repr(name), 60)} is not valid: "
                                 f"{SCENARIO_ID_RULE}")
        return value

    @field_validator("cache_max_size", mode="before")
    @classmethod
    def _cache_max_size(cls, value: Any) -> int | None:
        size = parse_size(value) if isinstance(value, str) else value
        if value is None or (isinstance(size, int) and not isinstance(size, bool) and size > 0):
            return size
        raise ValueError(f"{one_line(repr(value), 60)} is not a size: 8GiB, 500MB, or bytes")

    @field_validator("memory_limit", mode="before")
    @classmethod
    def _memory_limit(cls, value: Any) -> Union[int, str]:
        if isinstance(value, str) and value.strip().lower() in ("auto", "none"):
            return value.strip().lower()
        size = None
        if isinstance(value, str):
            size = parse_size(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value > 0:
            size = value
        if size is None:
            raise ValueError(f"{one_line(repr(value), 60)} is not a memory limit: "
                             f"{MEMORY_LIMIT_RULE}")
        if size < MIN_MEMORY_LIMIT:
            raise ValueError(f"{one_line(repr(value), 60)} is {format_size(size)}, less than "
                             f"any interpreter needs ({format_size(MIN_MEMORY_LIMIT)} at "
                             'least; a number without a unit is bytes: "512MiB")')
        return size

    @model_validator(mode="after")
    def _python_exists(self) -> "Config":
        if self.python is not None and find_python(self.python, self.root) is None:
            raise ValueError(f"key 'python': {self.python} is not an executable interpreter")
        return self

    @field_validator("fail_on")
    @classmethod
    def _known_verdicts(cls, value: list[str] | None) -> list[str] | None:
        for name in value or []:
            if name not in VERDICT_NAMES:
                raise ValueError(f"unknown verdict {name!r} (known: {', '.join(VERDICT_NAMES)})")
        return value

    @property
    def python_path(self) -> str | None:
        """`python` resolved as the config means it (relative to the config's folder)."""
        return find_python(self.python, self.root) if self.python else None

    def fleet_machines(self) -> list[Machine]:
        """The fleet's entries as fleet.judge takes them, in the config's order."""
        return [entry.machine(name) for name, entry in self.fleet.items()]

    def lock_entries(self) -> list[LockEntry]:
        """The configured locks as entries, `lock` or `locks` alike, in the config's order;
        empty when neither is set. Paths are as written: resolve them with `resolve`."""
        if self.lock is not None:
            return [LockEntry(path=self.lock)]
        return [e if isinstance(e, LockEntry) else LockEntry(path=e) for e in self.locks or []]

    def resolve(self, path: str) -> Path:
        """A path from the config (`~` expanded) as a path: relative ones are relative to the
        folder of the file that holds the config (`root`), not the working directory."""
        p = Path(path).expanduser()
        return p if p.is_absolute() else self.root / p


@dataclass(frozen=True)
class Options:
    """What the command line adds to the config for one invocation; settings.Settings.resolve
    merges the two, once, and nothing below the command line reads these."""

    device: str | None = None
    steps: int | None = None
    env: str | None = None
    repeat: int = 1
    rerun: bool = False  # run even when the inputs are unchanged since the golden
    allow_new: bool = False  # a scenario without a golden is `new`, not an error
    exact: bool = False
    bisect: bool = False  # A/B: find the changes behind each failing verdict (flows/bisect.py)
    timing: bool = False  # A/B: make the timing runs, `slower` or not in fail_on
    all_scenarios: bool = False  # A/B: run the scenarios the change cannot reach too
    # A/B: where a drift starts (compare/locate.py): True --locate (every scenario whose loss
    # or gradient differs at all), False --no-locate, None a drift of a torch scenario.
    locate: bool | None = None


def find_python(python: str, root: Path) -> str | None:
    """The interpreter `python` names (a path, relative to the config, or a command on PATH)."""
    if "/" not in python:
        return shutil.which(python)
    path = Path(python).expanduser()
    path = path if path.is_absolute() else root / path
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


# Where a project keeps the code an entry names, below the config's folder: the folder itself,
# or src/ (the src layout: src/pkg/train.py, importable once src/ is on sys.path).
IMPORT_ROOTS = (".", "src")


def entry_module(root: Path, entry: str) -> Path | None:
    """The file of an entry's module ("pkg.train:make" -> root/pkg/train.py, or its package's
    __init__.py; else the same below root/src), as the harness imports it with its import
    root (entry_root) first on sys.path; None if none."""
    found = _entry_found(root, entry)
    return found[1] if found is not None else None


def entry_root(root: Path, entry: str) -> Path | None:
    """The folder an entry's module is imported from: the config's folder `root`, or its src/
    for a src layout (the first that holds the module, as entry_module finds it); None if
    neither does."""
    found = _entry_found(root, entry)
    return found[0] if found is not None else None


def _entry_found(root: Path, entry: str) -> tuple[Path, Path] | None:
    parts = entry.partition(":")[0].split(".")
    for below in IMPORT_ROOTS:
        base = Path(root) if below == "." else Path(root, below)
        module = Path(base, *parts)
        for candidate in (module.with_name(module.name + ".py"), module / "__init__.py"):
            if candidate.is_file():
                return base, candidate
    return None


# Below golden_dir: the trainings the pytest fixture registered for the gate, one a file
# (<id>.toml, a scenario table), beside the goldens they are judged against.
TRAININGS_DIR = "trainings"


def registered_trainings(config: Config) -> dict[str, tuple[ScenarioConfig, str]]:
    """id -> (scenario table, where it was read) of each training the lockguard_training
    fixture registered in the golden store (golden_dir/trainings/<id>.toml, written when it
    records the training's golden): an entry scenario, validated as the config's own tables
    are (a ConfigError naming the file and key). An id the config's own tables name is left
    out: the config's table is that scenario."""
    out: dict[str, tuple[ScenarioConfig, str]] = {}
    folder = trainings_dir(config)
    for path in sorted(folder.glob("*.toml")):
        sid = path.name.removesuffix(".toml")
        # As `data` refuses links out: a registration is the golden store's own file, never
        # one read through a link (to anywhere the gate was not meant to take scenarios from;
        # a file of the folder that is no link cannot lead out of it).
        if path.is_symlink():
            raise ConfigError(f"{path}: a registration is a file of {folder}, not a "
                              "symbolic link")
        if sid not in config.scenario:
            out[sid] = (parse_training(_read_toml(path), sid, str(path)), str(path))
    return out


def scenario_tables(config: Config) -> list[tuple[str, ScenarioConfig, str, str]]:
    """(id, table, the file it was read from, its keys' prefix there) of each user scenario:
    the config's own tables (keys "scenario.<id>.*" of config.source), then the trainings the
    fixture registered (registered_trainings: keys at the top of their own files), so an
    error names the file and key the team would edit."""
    tables = [(name, sc, config.source, f"scenario.{name}.")
              for name, sc in config.scenario.items()]
    tables += [(name, sc, where, "") for name, (sc, where) in registered_trainings(config).items()]
    return tables


def data_matches(root: Path, pattern: str) -> list[Path]:
    """The files a `data` pattern (a path or glob, config.DATA_RULE) matches below `root`,
    sorted; OSError or ValueError for a pattern the file system cannot take."""
    return sorted(p for p in root.glob(pattern) if p.is_file())


def data_found(root: Path, patterns: Sequence[str]) -> tuple[Path, ...]:
    """What `patterns` match below `root`, each file once, leniently: a pattern the file
    system cannot take matches nothing (where the scenario was already validated by
    data_files, and the run reports what it cannot read)."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        try:
            found.update((path, None) for path in data_matches(root, pattern))
        except (OSError, ValueError):
            continue
    return tuple(found)


def data_files(root: Path, patterns: Sequence[str], where: str) -> tuple[Path, ...]:
    """The files a scenario's `data` patterns match below its config's folder `root`, sorted,
    each once; a ConfigError starting with `where` (the file and key, or the test, that named
    them) for a pattern that matches no file (a misspelt slice would leave the data out of the
    digest) or a file that lies outside the folder (through a link: runs and the digest read
    only the project)."""
    real = os.path.realpath(root)
    found: dict[Path, None] = {}
    for pattern in patterns:
        try:
            matches = data_matches(root, pattern)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"{where}: {pattern!r}: {exc}") from None
        if not matches:
            raise ConfigError(f"{where}: {pattern!r} matches no file in {root}")
        for path in matches:
            if not os.path.realpath(path).startswith(real + os.sep):
                raise ConfigError(f"{where}: {path} leads out of {root}: {DATA_RULE}")
            found[path] = None
    return tuple(found)


def trainings_dir(config: Config) -> Path:
    """Where the fixture registers trainings: golden_dir/trainings."""
    return config.resolve(config.golden_dir) / TRAININGS_DIR


def parse_training(data: dict[str, Any], sid: str, where: str) -> ScenarioConfig:
    """A registered training's table (`where`: its file, for errors) validated as a scenario
    table of the config, naming an entry; a ConfigError naming the file and key."""
    if not SCENARIO_ID.fullmatch(sid):
        raise ConfigError(f"{where}: {one_line(repr(sid), 80)} is not a scenario id: "
                          f"{SCENARIO_ID_RULE}")
    try:
        table = ScenarioConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"{where}: {_describe(exc.errors())}") from None
    if table.entry is None:
        raise ConfigError(f"{where}: key 'entry': a registered training names an entry "
                          f"({ENTRY_RULE})")
    return table


def with_trainings(config: Config, trainings: dict[str, ScenarioConfig]) -> Config:
    """`config` with `trainings` (registered ones, read elsewhere: the target's, for check
    --base) as scenario tables of its own, selected beside its `scenarios` as registered
    trainings are; its own tables win."""
    new = {sid: t for sid, t in trainings.items() if sid not in config.scenario}
    if not new:
        return config
    update: dict[str, Any] = {"scenario": {**config.scenario, **new}}
    if config.scenarios:
        update["scenarios"] = [*config.scenarios, *(s for s in new if s not in config.scenarios)]
    return config.model_copy(update=update)


def register_training(config: Config, sid: str, entry: str, framework: str, steps: int,
                      test: str, data: tuple[str, ...] = ()) -> Path | None:
    """Register the training `entry` the fixture judged in `test` (a pytest node id) as
    scenario `sid` for the gate (registered_trainings), atomically; the file, or None when
    it was there already with this text."""
    path = trainings_dir(config) / f"{sid}.toml"
    text = (toml.comment(f"Registered by the lockguard_training fixture in {test}: "
                         "`lockguard check` and the A/B gate train it too (docs/scenarios.md, "
                         "\"Goldens in pytest\").")
            + toml.dumps({"entry": entry, "framework": framework, "steps": steps,
                          **({"data": list(data)} if data else {})}))
    try:
        if path.read_text(encoding="utf-8") == text:
            return None
    except (OSError, UnicodeDecodeError):
        pass
    write_text(path, text)
    return path


def project_inputs(config: Config, cli_locks: list[str] | tuple[str, ...] = ()
                   ) -> list[tuple[Path, str, bool]]:
    """(path, what it is, whether everything below it counts too) of each file a run reads
    and a report must never replace: the config file, every lock (configured or given) and
    its requirements input, every user scenario's script (or entry module) and data (the
    registered trainings' too), and golden_dir."""
    found: list[tuple[Path, str, bool]] = []
    if config.file is not None:
        found.append((config.file, "the config file", False))
    for entry in config.lock_entries():
        path = config.resolve(entry.path)
        found.append((path, "a lock", False))
        inputs = config.resolve(entry.inputs) if entry.inputs else path.with_suffix(".in")
        found.append((inputs, "a lock's requirements input", False))
    found += [(Path(p), "a lock", False) for p in cli_locks]
    # The registered trainings' too: the gate trains them as it trains the config's own.
    for name, sc, _, _ in scenario_tables(config):
        code = (config.resolve(sc.script) if sc.script is not None
                else entry_module(config.root, sc.entry or ""))
        what = "script" if sc.script is not None else "entry module"
        if code is not None:
            found.append((code, f"the {what} of scenario {name}", False))
        found += [(path, f"data of scenario {name}", False)
                  for path in data_found(config.root, sc.data)]
    found.append((config.resolve(config.golden_dir), "golden_dir", True))
    return found


def _is_branch(part: object) -> bool:
    # Union members and validators appear in pydantic's error locations ("str", "LockEntry",
    # "literal['exact']", "function-after[...]"); the user's file has only keys and indices.
    text = str(part)
    return (text in ("str", "int", "float") or text[:1].isupper()
            or text.startswith(("literal[", "function-", "list[")))


def _describe(errors: list[Any]) -> str:
    # Of a union's failed branches, the deepest error is the one about what the user wrote:
    # `rtol = -1` fails "is not 'exact'" at depth 1 and "rtol >= 0" at depth 2.
    error = max(errors, key=lambda e: len(e["loc"]))
    loc = ".".join(str(p) for p in error["loc"] if not _is_branch(p))
    if error["type"] == "extra_forbidden":
        return f"unknown key '{loc}'"
    msg = error["msg"].removeprefix("Value error, ")
    return f"key '{loc}': {msg}" if loc else msg


def parse_config(data: dict[str, Any], source: str, root: Path,
                 file: Path | None = None) -> Config:
    """A config's table (`data`) validated into a Config rooted at `root`; when it is not
    valid, a ConfigError of one line naming `source` and the offending key."""
    try:
        return Config.model_validate({**data, "root": root, "source": source, "file": file})
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc.errors())}") from None


CONFIG_NAMES = ("lockguard.toml", "pyproject.toml")  # looked for in this order


# The largest config file read: a pyproject.toml is a few KiB.
MAX_CONFIG_BYTES = 4 << 20


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = read_bytes(path, "config file", MAX_CONFIG_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text (byte {exc.start})") from None
    except ReadError as exc:
        raise ConfigError(str(exc)) from None
    return _parse_toml(text, str(path))


def _parse_toml(text: str, where: str) -> dict[str, Any]:
    try:
        return toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise ConfigError(f"{where}: invalid TOML: {exc}") from None


def lockguard_table(text: str, name: str, where: str) -> dict[str, Any] | None:
    """The lockguard settings a config file's text holds (a lockguard.toml is all settings; a
    pyproject.toml holds them in [tool.lockguard]); None when a pyproject.toml has none.
    `where` names the file in errors (a path, or `main:pyproject.toml` for one read from git)."""
    data = _parse_toml(text, where)
    if name != "pyproject.toml":
        return data
    tool = data.get("tool", {})
    if not isinstance(tool, dict):
        raise ConfigError(f"{where}: key 'tool': expected a table")
    section = tool.get("lockguard")
    if section is not None and not isinstance(section, dict):
        raise ConfigError(f"{where} [tool.lockguard]: expected a table")
    return section


def load_config(path: Path | None = None, start: Path | None = None) -> Config:
    """Load an explicit config file, or find pyproject.toml / lockguard.toml upwards from start."""
    if path is not None:
        data = _read_toml(path)  # first: a FIFO, a device or a symlink loop is named so
        return _load_file(path.resolve(), data)
    here = (start or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        for name in CONFIG_NAMES:
            candidate = directory / name
            if os.path.lexists(candidate):  # read even when not a regular file: said so
                data = _read_toml(candidate)
                tool = data.get("tool", {})
                if not isinstance(tool, dict):
                    raise ConfigError(f"{candidate}: key 'tool': expected a table")
                if name == "lockguard.toml" or "lockguard" in tool:
                    return _load_file(candidate, data)
        if os.path.lexists(directory / ".git"):
            break  # don't wander out of the project
    return Config(root=here)


def _load_file(path: Path, data: dict[str, Any] | None = None) -> Config:
    data = _read_toml(path) if data is None else data
    if path.name == "pyproject.toml":
        tool = data.get("tool", {})
        if not isinstance(tool, dict):
            raise ConfigError(f"{path}: key 'tool': expected a table")
        section = tool.get("lockguard", {})
        source = f"{path} [tool.lockguard]"
    else:
        section = data
        source = str(path)
    if not isinstance(section, dict):
        raise ConfigError(f"{source}: expected a table")
    return parse_config(section, source, path.parent, path)


def add_fleet_machine(config: Config, machine: Machine) -> Path:
    """Add `machine` to the fleet of the config file `config` was read from, as a table
    appended to its text (the rest of the file kept byte for byte), checked by reading the
    result as a config before it replaces the file atomically. A ConfigError (exit 2) when
    there is no config file or the fleet already names the machine."""
    if config.file is None:
        raise ConfigError("no config file to add the machine to: run `lockguard init`, or "
                          "give --config")
    if machine.name in config.fleet:
        raise ConfigError(f"{config.source}: key 'fleet.{machine.name}' is already there: "
                          "edit it, or probe with another --name")
    text = read_bytes(config.file, "config file", MAX_CONFIG_BYTES).decode("utf-8")
    table = "tool.lockguard.fleet" if config.file.name == "pyproject.toml" else "fleet"
    text = text + ("" if text.endswith("\n") or not text else "\n") + "\n" \
        + machine_toml(machine, table)
    section = lockguard_table(text, config.file.name, str(config.file)) or {}
    parse_config(section, config.source, config.root, config.file)
    write_text(config.file, text)
    return config.file
