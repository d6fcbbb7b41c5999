"""The package's layers point one way, and each shared mechanism is defined once.

Read from the source with ast (function-level imports included), so the rules hold for code
paths no test runs:

    cli → flows → report → domain (locks, compare, results, golden, hardware, scenarios,
    config, gitref) → envs → bottom (errors, files, process, supervisor, cache, names,
    progress, installers, allowlist, sizes, envvars); the harness apart, importing nothing of
    lockguard.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "lockguard"

BOTTOM = {"lockguard.errors", "lockguard.files", "lockguard.process", "lockguard.supervisor",
          "lockguard.cache", "lockguard.names", "lockguard.progress", "lockguard.installers",
          "lockguard.allowlist", "lockguard.sizes", "lockguard.envvars", "lockguard"}
# What the environment layer may not know: the project (config, scenarios), the flows, the
# report and the command line. It takes a parsed lock and a run request.
NOT_IN_ENVS = ("lockguard.flows", "lockguard.config", "lockguard.scenarios", "lockguard.report",
               "lockguard.cli", "lockguard.locks.resolve", "lockguard.locks.outdated",
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


def test_the_environment_layer_knows_nothing_of_the_project_or_the_flows():
    envs = [m for m in SOURCES if within(m, ("lockguard.envs",))]
    assert violations(envs, NOT_IN_ENVS) == []


@pytest.mark.parametrize("layer", ["lockguard.locks", "lockguard.compare",
                                   "lockguard.results", "lockguard.golden", "lockguard.hardware",
                                   "lockguard.scenarios", "lockguard.config", "lockguard.gitref",
                                   "lockguard.envs"])
def test_the_domain_and_envs_do_not_import_upwards(layer):
    modules = [m for m in SOURCES if within(m, (layer,))]
    if not modules:
        pytest.fail(f"{layer}: no such module (update the layer list with the package)")
    assert violations(modules, NOT_IN_DOMAIN) == []


def test_the_lock_model_is_the_bottom_of_locks():
    """Every lock module builds on the model; the model on none of them (no cycle, lazy or not)."""
    assert [i for i in imports(SOURCES["lockguard.locks.model"])
            if within(i, ("lockguard.locks",))] == []


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
])
def test_each_mechanism_is_defined_once(what, pattern, expected_in):
    found = definitions(pattern)
    places = sorted({f.split(":")[0] for f in found})
    assert all(within(p, expected_in) for p in places) and places, \
        f"{what}: expected only in {expected_in}, found at {found}"


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
