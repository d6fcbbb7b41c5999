"""What `lockguard init` finds in a project, its first stage (`survey`): its locks
(requirements*.txt as pip-compile or `uv pip compile` write them, pylock.toml, uv.lock,
poetry.lock; read by the one parser; a lock only counts when it pins a framework and passes the
trust rules lockguard installs by), lock formats lockguard does not read (Pipfile.lock,
pdm.lock), the project's own package, an existing lockguard config, the repository and its
workflows. No lock and no config: a UsageError saying what was looked for and how to make one.
Nothing is written here.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from pathlib import Path

from lockguard.config import MAX_CONFIG_BYTES, entry_id, load_config
from lockguard.errors import UsageError, one_line
from lockguard.files import ReadError, display_path, read_bytes, repo_root
from lockguard.gitref import default_branch
import lockguard.init.templates as templates
from lockguard.locks.families import framework_version
from lockguard.locks.formats import format_by_name
from lockguard.locks.model import Lock, LockError
from lockguard.locks.parser import parse_lock
from lockguard.locks.ref import load_locks, read_lock
from lockguard.locks.trust import require_trusted
from lockguard.names import FRAMEWORKS

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


# Where a team keeps its training, in its package: the modules init reads (never imports).
TRAINING_MODULES = ("train", "training", "trainer")
# The entry shapes init offers, by the names of the parameters a function requires (the
# harness tells them apart by their count, entry_shapes.entry_run; init asks for the names too,
# so that an unrelated function of one parameter is not taken for a factory). The factory
# first: lockguard then runs and times the steps itself.
TRAINING_SHAPES = ((("seed",), "make(seed) -> (step, batches[, probe])"),
                   (("steps", "seed"), "fit(steps, seed)"))
# A factory whose body calls `.compile(...)` in a module that imports a Keras: the Keras shape
# (make(seed) -> (model, data[, probe]), driven through Model.fit); the harness tells the shapes
# apart by what make returns, this only names it.
KERAS_FACTORY = "make(seed) -> (compiled Keras model, data[, probe])"
# A class with a Lightning module's three methods (harness entry_shapes.is_lightning) whose
# constructor requires nothing or only the seed: the entry names the class, lockguard builds
# it. Ranked after the factory and before fit (lockguard runs and times its steps itself).
LIGHTNING_SHAPE = "a Lightning-style module (training_step, configure_optimizers, " \
                  "train_dataloader)"
LIGHTNING_METHODS = frozenset({"training_step", "configure_optimizers", "train_dataloader"})
_KERAS_IMPORTS = frozenset({"keras", "tf_keras", "tensorflow"})
# The framework a module's imports name (a top-level package), for the entry's `framework`.
_IMPORTED_FRAMEWORK = {"torch": "torch", "lightning": "torch", "pytorch_lightning": "torch",
                       "jax": "jax", "flax": "jax", "optax": "jax", "tensorflow": "tensorflow",
                       "keras": "tensorflow", "tf_keras": "tensorflow", "numpy": "numpy"}
MAX_TRAINING_BYTES = 1 << 20  # a larger train.py is not read for an entry


@dataclass(frozen=True)
class Training:
    """The team's own training function init found (read as text, never run): the entry it
    offers ("pkg.train:make"), its shape and the framework its module imports."""

    entry: str
    shape: str
    framework: str

    @property
    def scenario_id(self) -> str:
        """The scenario's id, as `lockguard scenario add` names it by default."""
        return entry_id(self.entry)


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
    training: Training | None = None  # the team's training function in its package, if any
    repo: Path | None = None  # the repository's top folder; None: not in one
    branch: str = "main"  # where pushes warm the cache
    workflow: Path = Path(templates.WORKFLOW_PATH)
    workflow_found: str | None = None  # a workflow that already runs lockguard, if any
    template: Path = Path(templates.SCENARIO_PATH)

    @property
    def frameworks(self) -> tuple[str, ...]:
        """The frameworks any found lock pins, in FRAMEWORKS order."""
        pinned = {fw for found in self.locks for fw in found.frameworks}
        return tuple(fw for fw in FRAMEWORKS if fw in pinned)

    @property
    def template_framework(self) -> str:
        """The framework the template trains with: the first one pinned that is not numpy."""
        return next((fw for fw in self.frameworks if fw != "numpy"), "numpy")


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
    pinned = tuple(fw for fw in FRAMEWORKS if any(fw in f.frameworks for f in found))
    training = (find_training(project / "src" if src else project, package, pinned)
                if package else None)
    repo = repo_root(project)
    workflows = (repo or project) / ".github" / "workflows"
    return Survey(project=project, config_file=existing, config_target=target,
                  locks=tuple(found), passed_over=tuple(passed_over), unsupported=tuple(unsupported),
                  uncompiled=tuple(uncompiled), package=package, src_layout=src,
                  training=training, repo=repo,
                  branch=default_branch(repo) if repo else "main",
                  workflow_found=_workflow_running_lockguard(workflows))


def describe(s: Survey) -> list[str]:
    """What the survey found, one line each."""
    lines = [f"project: {s.project}"]
    if s.config_file is not None:
        table = " [tool.lockguard]" if s.config_file.name == "pyproject.toml" else ""
        lines.append(f"already configured: {shown(s.config_file, s.project)}{table} (left as "
                     "it is)")
    lines += [f"lock {found.describe()}" for found in s.locks]
    lines += [f"not used: {p.name}: {p.reason}" for p in s.passed_over]
    lines += [f"not used: {p.name}: {p.reason}" for p in s.unsupported]
    lines += [f"not compiled: {name} (compile it: `lockguard lock {name}`)"
              for name in s.uncompiled]
    if s.package:
        lines.append(f"your code: {'src/' if s.src_layout else ''}{s.package}/")
    if s.training:
        lines.append(f"your training: {s.training.entry} ({s.training.shape}, "
                     f"{s.training.framework})")
    if s.workflow_found:
        lines.append(f"a workflow already runs lockguard: {s.workflow_found}")
    return lines


def config_place(s: Survey) -> str:
    """Where a new config goes, as the user knows it: "[tool.lockguard] in pyproject.toml"."""
    table = "[tool.lockguard] in " if s.config_target.name == "pyproject.toml" else ""
    return table + shown(s.config_target, s.project)


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


def shown(path: Path, project: Path) -> str:
    """`path` as the user knows it: relative to the project, else as files.display_path
    shows it."""
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


def _workflow_running_lockguard(workflows: Path) -> str | None:
    try:
        paths = sorted(p for p in workflows.iterdir() if p.suffix in (".yml", ".yaml"))
    except OSError:
        return None
    for path in paths:
        if path.name == Path(templates.WORKFLOW_PATH).name:
            continue  # the one init writes: judged as "already there"
        try:
            text = read_bytes(path, "workflow", MAX_CONFIG_BYTES).decode("utf-8", "replace")
        except ReadError:
            continue
        if _RUNS_LOCKGUARD.search(text):
            return path.name
    return None




def find_training(base: Path, package: str, pinned: tuple[str, ...]) -> Training | None:
    """The team's training in `package` (below `base`, the folder it is imported from): the
    first top-level function of its train.py, training.py or trainer.py that requires the
    parameters of an entry shape (TRAINING_SHAPES, the factory first), or a Lightning-style
    class there (ranked between the two), read with `ast` and never imported (the project's
    code runs only sandboxed). Its framework: the first of `pinned` (the locks' frameworks)
    the module imports, else the first pinned one that is not numpy. None when there is no
    such function."""
    found: list[tuple[int, Training]] = []
    for name in TRAINING_MODULES:
        path = base / package / f"{name}.py"
        try:
            tree = ast.parse(read_bytes(path, "training module", MAX_TRAINING_BYTES), str(path))
        except (ReadError, SyntaxError, ValueError):
            continue
        imports = _imports(tree)
        imported = {_IMPORTED_FRAMEWORK.get(top) for top in imports}
        framework = next((fw for fw in pinned if fw in imported and fw != "numpy"),
                         next((fw for fw in pinned if fw != "numpy"),
                              "numpy" if "numpy" in pinned else None))
        if framework is None:
            continue
        found += [(rank, Training(f"{package}.{name}:{attr}", shape, framework))
                  for rank, attr, shape in _shapes(tree, bool(imports & _KERAS_IMPORTS))]
    return min(found, key=lambda f: f[0])[1] if found else None


def _shapes(tree: ast.Module, keras: bool) -> list[tuple[int, str, str]]:
    """(rank, name, shape) of each top-level definition of `tree` that has an entry's shape:
    functions by the parameters they require (TRAINING_SHAPES; a factory that compiles a model
    in a module importing a Keras named as the Keras shape), Lightning-style classes ranked
    after the factory and before fit."""
    shapes: list[tuple[int, str, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and _lightning_class(node):
            shapes.append((1, node.name, LIGHTNING_SHAPE))
        if not isinstance(node, ast.FunctionDef):
            continue
        rank = next((i for i, (params, _) in enumerate(TRAINING_SHAPES)
                     if _required(node) == params), None)
        if rank is None:
            continue
        shape = TRAINING_SHAPES[rank][1]
        if rank == 0 and keras and any(
                isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                and call.func.attr == "compile" for call in ast.walk(node)):
            shape = KERAS_FACTORY
        shapes.append((2 * rank, node.name, shape))  # the factory 0, fit 2
    return shapes


def _lightning_class(node: ast.ClassDef) -> bool:
    """Whether the class defines a Lightning module's three methods and its constructor (if it
    defines one) requires nothing but the seed."""
    methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef)}
    if not LIGHTNING_METHODS <= set(methods):
        return False
    init = methods.get("__init__")
    return init is None or _required(init)[1:] in ((), ("seed",))


def _required(fn: ast.FunctionDef) -> tuple[str, ...]:
    """The names of the positional parameters `fn` requires (without a default): the shape
    the harness drives it as (entry_shapes._required_params; tests/test_team_project.py holds
    the two equal). A required keyword-only parameter, which neither shape's call passes, follows
    as "*", name: no shape matches, so init never offers what the harness cannot call."""
    args = fn.args
    positional = args.posonlyargs + args.args
    required = positional[:len(positional) - len(args.defaults)]
    keyword = [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is None]
    return tuple(a.arg for a in required) + (("*", *keyword) if keyword else ())


def _imports(tree: ast.Module) -> set[str]:
    """The top-level packages a module imports, anywhere in it."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names
