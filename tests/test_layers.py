"""The package's layers point one way, and each shared mechanism is defined once.

Read from the source with ast (function-level imports included), so the rules hold for code
paths no test runs:

    cli → init → flows → report → domain (locks, compare, results, golden, hardware,
    scenarios, config, settings, gitref) → envs → bottom (errors, files, process, supervisor,
    cache, names, progress, installers, allowlist, sizes, envvars, probes); the harness apart,
    importing nothing of lockguard; the probes (lockguard/probes/*.py, run in a target
    interpreter) import the stdlib only.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lockguard"

BOTTOM = {"lockguard.errors", "lockguard.files", "lockguard.process", "lockguard.supervisor",
          "lockguard.cache", "lockguard.names", "lockguard.progress", "lockguard.installers",
          "lockguard.allowlist", "lockguard.sizes", "lockguard.envvars", "lockguard.sandbox",
          "lockguard.landlock", "lockguard.toml", "lockguard.probes", "lockguard"}
# What the environment layer may not know: the project (config, scenarios), the flows, the
# report and the command line. It takes a parsed lock and a run request.
NOT_IN_ENVS = ("lockguard.flows", "lockguard.config", "lockguard.scenarios", "lockguard.report",
               "lockguard.cli", "lockguard.locks.resolvers", "lockguard.locks.outdated",
               "lockguard.golden", "lockguard.compare", "lockguard.gitref")
# The domain is pure of everything above it.
NOT_IN_DOMAIN = ("lockguard.flows", "lockguard.report", "lockguard.cli")
# compare decides verdicts from values: no file, process or cache access.
IO_MODULES = ("os", "pathlib", "subprocess", "shutil", "tempfile", "io", "socket", "glob",
              "lockguard.files", "lockguard.process", "lockguard.cache", "lockguard.golden",
              "lockguard.envs")


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file, resolved to absolute names."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    me = module_name(path)
    package = me if path.name == "__init__.py" else me.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            # `from lockguard import golden` imports the module lockguard.golden
            found |= {f"{base}.{alias.name}" for alias in node.names
                      if (PACKAGE.parent / base.replace(".", "/") / alias.name).exists()
                      or (PACKAGE.parent / (base.replace(".", "/") + f"/{alias.name}.py")).exists()}
    return found


SOURCES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def harness_modules() -> list[str]:
    return [name for name in SOURCES if name.startswith("lockguard.harness")]


def within(name: str, prefixes) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def violations(modules, forbidden) -> list[str]:
    return sorted(f"{m} imports {i}" for m in modules for i in imports(SOURCES[m])
                  if within(i, forbidden))


def test_the_harness_imports_nothing_of_lockguard():
    assert harness_modules(), "no harness modules found"
    # Its relative imports stay inside the harness (which runs as its own package, apart).
    outside = [v for v in violations(harness_modules(), ("lockguard",))
               if not v.split(" imports ")[1].startswith("lockguard.harness")]
    assert outside == []


# What a probe may import besides the stdlib and its siblings: the frameworks the stack probe
# checks, in the image that has them.
PROBE_FRAMEWORKS = {"lockguard.probes.stack": {"torch", "jax", "libtpu"}}


def test_the_probes_import_the_stdlib_only():
    """A probe runs in a target interpreter that has neither lockguard nor any dependency: it
    imports the stdlib, its siblings in lockguard/probes (by their plain names), and for the
    stack probe the framework it checks; never lockguard. The probes are among the sources
    every other rule here reads (the 80-line rule, docstrings)."""
    import sys

    probes = [m for m in SOURCES if within(m, ("lockguard.probes",))]
    assert "lockguard.probes.stack" in probes and "lockguard.probes.platform_info" in probes
    siblings = {m.rpartition(".")[2] for m in probes}
    bad = sorted(f"{m} imports {i}" for m in probes for i in imports(SOURCES[m])
                 if i.split(".")[0] not in sys.stdlib_module_names | siblings
                 | PROBE_FRAMEWORKS.get(m, set()) or within(i, ("lockguard",)))
    assert bad == []


def test_the_environment_layer_knows_nothing_of_the_project_or_the_flows():
    envs = [m for m in SOURCES if within(m, ("lockguard.envs",))]
    assert violations(envs, NOT_IN_ENVS) == []


@pytest.mark.parametrize("layer", ["lockguard.locks", "lockguard.compare",
                                   "lockguard.results", "lockguard.golden", "lockguard.hardware",
                                   "lockguard.scenarios", "lockguard.config", "lockguard.gitref",
                                   "lockguard.settings", "lockguard.envs", "lockguard.fleet",
                                   "lockguard.native", "lockguard.nvidia"])
def test_the_domain_and_envs_do_not_import_upwards(layer):
    modules = [m for m in SOURCES if within(m, (layer,))]
    if not modules:
        pytest.fail(f"{layer}: no such module (update the layer list with the package)")
    assert violations(modules, NOT_IN_DOMAIN) == []


def test_nvidia_tables_are_data_and_native_reads_below_the_domain():
    """nvidia.py holds data (it imports nothing of lockguard); native.py, a value of the
    values layer, imports no domain module (fleet, config...): the judge is above it."""
    assert [i for i in imports(SOURCES["lockguard.nvidia"]) if within(i, ("lockguard",))] == []
    assert [i for i in imports(SOURCES["lockguard.native"]) if within(i, ("lockguard",))
            and not within(i, ("lockguard.nvidia",))] == []


def test_the_lock_model_is_the_bottom_of_locks():
    """Every lock module builds on the model; the model on none of them (no cycle, lazy or not)."""
    assert [i for i in imports(SOURCES["lockguard.locks.model"])
            if within(i, ("lockguard.locks",))] == []


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_import_graph_has_no_cycle():
    """Function-level imports count: a lazy import that closes a cycle is still one."""
    graph = {m: {i for i in imports(p) if i in SOURCES and i != m}
             for m, p in SOURCES.items()}
    assert cycles(graph) == []


def test_the_command_line_imports_no_environment():
    """The commands reach environments through the flows (a backend, a build)."""
    cli = [m for m in SOURCES if within(m, ("lockguard.cli",))]
    assert violations(cli, ("lockguard.envs",)) == []


def test_the_pytest_plugin_is_an_edge_like_the_command_line():
    """lockguard/pytest_plugin.py (pytest11) resolves settings and calls the flows as a command
    does: nothing of lockguard imports it, and it reaches no environment but through them."""
    assert "lockguard.pytest_plugin" in SOURCES
    others = [m for m in SOURCES if m != "lockguard.pytest_plugin"]
    assert violations(others, ("lockguard.pytest_plugin",)) == []
    assert violations(["lockguard.pytest_plugin"], ("lockguard.envs", "lockguard.cli",
                                                    "lockguard.init")) == []


def test_compare_does_no_io():
    modules = [m for m in SOURCES if within(m, ("lockguard.compare",))]
    assert violations(modules, IO_MODULES) == []


def test_the_bottom_layer_imports_only_the_bottom():
    bottom = [m for m in SOURCES if m in BOTTOM and m != "lockguard"]
    bad = sorted(f"{m} imports {i}" for m in bottom for i in imports(SOURCES[m])
                 if within(i, ("lockguard",)) and i not in BOTTOM)
    assert bad == []


def definitions(pattern: str, exclude: tuple[str, ...] = ()) -> list[str]:
    """`module:line` of every source line matching `pattern` (the harness keeps its own copies:
    it cannot import lockguard)."""
    rx = re.compile(pattern)
    return [f"{name}:{n}" for name, path in SOURCES.items()
            if not within(name, ("lockguard.harness",) + exclude)
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if rx.search(line)]


@pytest.mark.parametrize("what, pattern, expected_in", [
    ("the atomic writer", r"\bos\.replace\(|\bos\.rename\(", ["lockguard.files"]),
    ("the subprocess runner", r"\bsubprocess\.(Popen|run|call|check_call|check_output)\(",
     ["lockguard.process"]),
    ("the output tail, one line, the last line",
     r"^def _?(tail|last_lines?|one_line)\(", ["lockguard.errors"]),
    # git runs through process.capture, in one module; no git library.
    ("git", r"^\s*(import git\b|from git(\.\w+)* import\b)|\.git\.execute\(|\[\"git\", \*", ["lockguard.gitref"]),
    ("the framework names", r"^FRAMEWORKS\s*=", ["lockguard.names"]),
    ("the verdict names", r"^class Verdict\b|^VERDICT_NAMES\s*=", ["lockguard.names"]),
    ("the report formats", r"^FORMATS\s*=", ["lockguard.names"]),
    ("the lock parser", r"^def parse_lock_text\(", ["lockguard.locks.parser"]),
    # Requirements text (and a pylock.toml) is written in one place, with one --find-links rule.
    ("the lock writer", r"--hash=\{|^def find_link\(", ["lockguard.locks.writer"]),
    ("where locks are loaded", r"^(class LockRef\b|def (load_locks|lock_paths|read_lock)\()",
     ["lockguard.locks.ref"]),
    ("the exception root", r"^class LockguardError\b", ["lockguard.errors"]),
    # tomllib on 3.11, tomli on 3.10 (tests/test_python_versions.py): every TOML reader
    # imports it.
    ("the TOML reader", r"^\s*(import|from) toml(lib|i)\b", ["lockguard.toml"]),
    # ...and tomli_w the one writer (toml.dumps, toml.string): no TOML quoted by hand.
    ("the TOML writer", r"^\s*(import|from) tomli_w\b|^def (dumps|string)\(",
     ["lockguard.toml"]),
    # What pip, pip-tools and uv said when they failed, in one line: for resolver and backends.
    ("installer and resolver error trimming", r"╰─▶|\(from versions",
     ["lockguard.installers"]),
    ("finding uv, or saying why it is needed", r'which\("uv"\)|needs the uv command',
     ["lockguard.installers"]),
    ("the ready marker's name", r"^READY\s*=", ["lockguard.envs.base"]),
    # A program for another interpreter is a probe (lockguard/probes, run by engine.probe in a
    # container) or, importing lockguard by design, the supervisor and the sandbox's stub.
    ("a Python program passed with -c", r'"-c", [^"]',
     ["lockguard.envs.docker.engine", "lockguard.process", "lockguard.sandbox"]),
    # A cache entry is built one way (cache.entry: file lock, ready?, stage, check, marker
    # written last, publish, the stage removed on failure): no other module writes a ready
    # marker (READY, the pip-tools env's COMPLETE, a proposal's PROPOSED) or takes
    # an entry's lock to build one.
    ("the cache entry's choreography",
     r"write_(text|bytes)\(.*\b(READY|COMPLETE|PROPOSED|marker)\b|"
     r"\b(READY|COMPLETE|PROPOSED|marker)\)\.write_(text|bytes)\(|"
     r"file_lock\((entry|build)_lock\(", ["lockguard.cache"]),
    # Settings are resolved once (settings.Settings.resolve): the gate policy, "exact"
    # normalised into a Tolerance, and no `--option or config key` merged anywhere else.
    ("the gate policy from the config", r"\bPolicy\(exact=", ["lockguard.settings"]),
    ("the tolerance setting read", r'== "exact"', ["lockguard.config", "lockguard.settings"]),
    ("an option merged with its config key",
     r"\b(opts|options|given)\.\w+ or (config|self\.config)\.\w+", ["lockguard.settings"]),
    # Each shortcut between venvs has one switch, decided in one place (docs/performance.md,
    # "Shortcuts"): compile caches shared for bisection's mixes only, never an A/B's sides;
    # the bytecode store as the config says, resolved into Settings and handed to the backend
    # by pipeline.run_backend.
    ("a file hashed in blocks", r"iter\(lambda: \w+\.read\(", ["lockguard.files"]),
    ("the compile caches' sharing switched on", r"share_compile_caches=True",
     ["lockguard.flows.bisect"]),
    # NVIDIA's facts are one table each, in nvidia.py, with their sources (fleet.py and
    # native.py judge and read by them); a lock's wheels are downloaded one way (pip_download:
    # the wheelhouses' and the fleet's).
    ("NVIDIA's tables", r"^(GPU_ARCHS|MIN_DRIVER|TOOLKIT_DRIVER|PTX_ISA|TOOLKIT_VERSIONED)\b.*=",
     ["lockguard.nvidia"]),
    ("a wheel download", r'"pip", "download"', ["lockguard.envs.wheels"]),
    ("the bytecode store's switch read", r"\.share_bytecode\b",
     # (envs: the registry's options and the venv backend)
     ["lockguard.settings", "lockguard.flows.pipeline", "lockguard.envs"]),
    # The project's code runs only in the harness, sandboxed: lockguard imports by name only
    # its own judge (pipeline's hold on it) and, in a probe's program (run by the target's
    # interpreter), the framework it checks; init reads a team's train.py with `ast`.
    ("a module imported by name or from a file",
     r"import_module\(|__import__\(|\brunpy\b|exec_module\(|spec_from_file_location\(",
     ["lockguard.flows.pipeline", "lockguard.probes"]),
    # The trainings the pytest fixture registers for the gate: one folder, one reader.
    ("the registered trainings' folder", r"\bTRAININGS_DIR\b", ["lockguard.config"]),
])
def test_each_mechanism_is_defined_once(what, pattern, expected_in):
    found = definitions(pattern)
    places = sorted({f.split(":")[0] for f in found})
    assert all(within(p, expected_in) for p in places) and places, \
        f"{what}: expected only in {expected_in}, found at {found}"


def test_the_flows_read_an_environment_through_its_protocol():
    """What a flow reads of an Env (startup_files, site_packages) the protocol declares, and
    every backend has it: no getattr across the seam, which hid which backend had what."""
    found = definitions(r"getattr\((envs\.get\(|(self\.)?[a-z_]*env\b)")
    assert found == [], found


def test_every_expected_error_derives_from_the_one_root():
    """A class named *Error defined in lockguard derives (directly or not) from LockguardError."""
    import importlib

    from lockguard.errors import LockguardError

    loose = []
    for name, path in SOURCES.items():
        if within(name, ("lockguard.harness",)) or name == "lockguard.supervisor":
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        classes = [n.name for n in tree.body if isinstance(n, ast.ClassDef)
                   and n.name.endswith("Error")]
        if not classes:
            continue
        module = importlib.import_module(name)
        loose += [f"{name}.{c}" for c in classes
                  if not issubclass(getattr(module, c), LockguardError)]
    assert loose == []


# The environment backends, named by module: what only envs/ (and backend_for) may import.
BACKENDS = ("lockguard.envs.venv", "lockguard.envs.local", "lockguard.envs.docker")


def test_the_flows_import_no_concrete_backend():
    """The flows reach environments through the seam (lockguard.envs: Backend, backend_for;
    envs.base), never a backend's module: a new backend is a change inside envs/."""
    flows = [m for m in SOURCES if within(m, ("lockguard.flows",))]
    assert flows
    assert violations(flows, BACKENDS) == []


def test_init_is_a_layer_between_the_command_line_and_the_flows():
    """`lockguard init` (lockguard/init/) is a project wizard, no pipeline flow: it may use the
    flows, config, locks and scenarios, and reaches no environment backend nor the command
    line; nothing but the command line imports it."""
    init = [m for m in SOURCES if within(m, ("lockguard.init",))]
    assert init
    assert violations(init, ("lockguard.cli",) + BACKENDS) == []
    below = [m for m in SOURCES if not within(m, ("lockguard.init", "lockguard.cli"))]
    assert violations(below, ("lockguard.init",)) == []
    assert "lockguard.flows.init" not in SOURCES


def test_the_docker_backend_imports_no_other_backend():
    """What the backends share (the ready marker, running an installer, trimming its error)
    lies in envs/base.py and installers.py, not in the venv backend."""
    docker = [m for m in SOURCES if within(m, ("lockguard.envs.docker",))]
    assert docker
    assert violations(docker, ("lockguard.envs.venv", "lockguard.envs.local")) == []


def test_markup_belongs_to_progress_and_the_report():
    """Orchestration and backends hand Progress plain text; rich markup (and its escaping) is
    written by progress.py and report/ only."""
    modules = [m for m in SOURCES if within(m, ("lockguard.flows", "lockguard.envs"))]
    assert violations(modules, ("rich",)) == []


def test_every_backend_implements_the_whole_protocol():
    """backend_for gives an envs.base.Backend for every kind, and each backend (the test fake
    too) defines every method of the protocol itself, none left to the protocol's stubs."""
    from fakes import FakeBackend
    from lockguard.envs import Backend, ImageBackend, backend_for
    from lockguard.names import ENV_KINDS

    methods = [name for name, value in vars(Backend).items()
               if callable(value) and not name.startswith("_")]
    assert sorted(methods) == ["admit", "identity", "prepare", "scope"]
    backends = [backend_for(kind) for kind in ENV_KINDS] + [FakeBackend()]
    for backend in backends:
        assert isinstance(backend, Backend)
        assert [m for m in methods if m not in vars(type(backend))] == [], type(backend)
    # The image commands (`lockguard build`, `images pin`) are the docker backend's own
    # methods, reached through backend_for: no forwarding module beside it.
    images = [name for name, value in vars(ImageBackend).items()
              if callable(value) and not name.startswith("_")]
    assert sorted(images) == ["build_image", "check_registry", "pin_bases", "push",
                              "stack_line"]
    builders = [b for b in backends if isinstance(b, ImageBackend)]
    assert [type(b).__name__ for b in builders] == ["DockerBackend"]
    assert [m for m in images if m not in vars(type(builders[0]))] == []


def test_the_backend_registry_names_every_environment_kind_once():
    """envs.BACKENDS is the one list of backends, and names.ENV_KINDS (what --env and the config
    accept) the one list of their names: the two agree, in order, and an unknown kind is
    refused naming the ones there are."""
    from lockguard.envs import BACKENDS, backend_for
    from lockguard.names import ENV_KINDS

    assert tuple(BACKENDS) == ENV_KINDS
    with pytest.raises(ValueError, match="expected venv, docker, local"):
        backend_for("conda")


# Functions still over the limit, each with why it waits (the list may only shrink: it is
# empty since a harness module's edit changes only its own framework's goldens).
LONG_FUNCTIONS: set[tuple[str, str]] = set()
MAX_FUNCTION_LINES = 80


def test_no_function_is_over_80_lines():
    """A function a reader can hold at once: none over 80 lines but the few listed, and a
    listed one that got shorter leaves the list."""
    long = set()
    for name, path in SOURCES.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                    and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES):
                long.add((name, node.name))
    assert sorted(long - LONG_FUNCTIONS) == []
    assert sorted(LONG_FUNCTIONS - long) == [], "no longer over the limit: take it off the list"


def undocumented(tree: ast.Module) -> set[str]:
    """Qualified names of the public module-level functions and classes, and the public methods
    of public classes, that have no docstring (a property's setter counts apart from its getter,
    under the same name)."""
    missing = set()
    for node in tree.body:
        if (not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
                or node.name.startswith("_")):
            continue
        if not ast.get_docstring(node):
            missing.add(node.name)
        if isinstance(node, ast.ClassDef):
            missing |= {f"{node.name}.{method.name}" for method in node.body
                        if isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and not method.name.startswith("_") and not ast.get_docstring(method)}
    return missing


def test_public_definitions_say_what_they_are():
    """Every public function, class and method of a public class says in a docstring what it
    is and what a caller must know; the harness is left out (its bytes are in every golden's
    inputs digest)."""
    missing = sorted((name, qualified) for name, path in SOURCES.items()
                     if not within(name, ("lockguard.harness",))
                     for qualified in undocumented(ast.parse(path.read_text(encoding="utf-8"),
                                                             str(path))))
    assert missing == []


def test_the_flows_read_settings_never_the_command_lines_options():
    """The command line resolves one settings.Settings from the config and its options and
    hands it down: no flow imports config.Options or reads an option, and the helpers that
    climbed back into them (env_kind, golden_dir, tolerance_of, policy_for) are gone."""
    flows = {m: SOURCES[m] for m in SOURCES if within(m, ("lockguard.flows", "lockguard.init"))}
    assert flows
    importing = []
    for name, path in flows.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module == "lockguard.config" \
                    and any(alias.name == "Options" for alias in node.names):
                importing.append(name)
    assert importing == []
    read = [f"{name}:{n}" for name, path in flows.items()
            for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
            if re.search(r"\bopts\.|\bOptions\b|\bdef (env_kind|golden_dir|tolerance_of|"
                         r"policy_for)\(", line)]
    assert read == []


# Where a function may import instead of its module's top. Everywhere else imports sit at the
# top: one place says what a module depends on, and a cycle fails at load rather than on the
# first call of a rare path.
LAZY_IMPORTS = {
    # The command line: `lockguard --help` and each command load only what that command runs.
    "lockguard.cli": None,
    # The pytest plugin (pytest11): every test suite of a project with lockguard installed
    # loads it, so it imports lockguard only when a test asks for lockguard_training.
    "lockguard.pytest_plugin": None,
    # The libraries that cost a command that does not need them: the docker SDK (and the
    # requests/urllib3 errors it raises), rich (only a terminal shows it).
    "": ("docker", "requests", "urllib3", "rich"),
    # What the invocation chooses loads when it is chosen: one backend's module (the
    # registry), one report format's renderer, and the flow a check takes (against goldens,
    # A/B, a merge base; bisection only after a failing A/B): a no-op check against the
    # goldens loads none of the others (benchmarks/bench_check.py, its instructions).
    "lockguard.envs": ("lockguard.envs.venv", "lockguard.envs.local",
                       "lockguard.envs.docker.backend"),
    "lockguard.report": tuple(f"lockguard.report.{fmt}" for fmt in (
        "json_", "markdown", "html", "junit", "github", "text")),
    "lockguard.flows.check": ("lockguard.flows.ab", "lockguard.flows.git_base"),
    "lockguard.flows.ab": ("lockguard.flows.bisect",),
    # Run in a child of every training (the supervisor, the sandbox's stub): what a path that
    # child takes needs, loaded when it takes it.
    "lockguard.supervisor": ("ctypes", "fcntl"),
    "lockguard.landlock": ("ctypes", "marshal"),
}


def test_imports_sit_at_the_top_but_where_a_lazy_one_pays():
    """The import budget: a function-level import only in the command line, for a heavy
    library, a backend chosen at run time, or in the training's child processes."""
    found = []
    for name, path in SOURCES.items():
        if within(name, ("lockguard.harness", "lockguard.probes")):
            continue  # apart: they run in the target interpreter, with their own rules
        if any(within(name, (prefix,)) for prefix, allowed in LAZY_IMPORTS.items()
               if prefix and allowed is None):
            continue
        seen = set()
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)) or node.lineno in seen:
                    continue
                seen.add(node.lineno)
                # `from lockguard.report import text` imports lockguard.report.text
                targets = ([f"{node.module}.{a.name}" for a in node.names]
                           if isinstance(node, ast.ImportFrom) else [node.names[0].name])
                allowed = [*LAZY_IMPORTS[""], *LAZY_IMPORTS.get(name, ())]
                if not all(any(t == a or t.startswith(a + ".") for a in allowed)
                           for t in targets):
                    found.append(f"{name}:{node.lineno} {', '.join(targets)}")
    assert found == []
