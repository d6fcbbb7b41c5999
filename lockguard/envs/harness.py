"""Where the harness lies and how it is laid out: the backends launch it, goldens hash it.

The harness (lockguard/harness/) is never imported by lockguard to run a scenario: a backend
starts `python <HARNESS_DIR>/run.py ...` in the target environment (docker mounts HARNESS_DIR).
Its modules live in the package PACKAGE beside run.py, under a name no user module has.
"""

from __future__ import annotations

import ast
from pathlib import Path

HARNESS_DIR = Path(__file__).resolve().parent.parent / "harness"
ENTRY = "run.py"
PACKAGE = "_lockguard_harness"
# The module that implements each framework's scenarios (run.py has the same table).
FRAMEWORK_MODULE = {"torch": "torch_", "jax": "jax_", "tensorflow": "tf_", "numpy": "numpy_"}


def implements(framework: str) -> bool:
    """Whether the harness has a module for `framework` (a scenario of one it lacks is not
    offered)."""
    return (HARNESS_DIR / PACKAGE / f"{FRAMEWORK_MODULE[framework]}.py").is_file()


def harness_files(framework: str, scenario: str, *, user_script: bool = False
                  ) -> list[tuple[str, Path]]:
    """The Python files of the harness a run of `scenario` on `framework` can import, as (path
    relative to HARNESS_DIR, path) in a fixed order: what its golden's harness digest covers,
    so that an edit of tf_.py leaves every torch golden's shortcut standing.

    They are ENTRY with the package, the framework's module and, for a bundled model-library
    scenario, lib_<library>.py (the two modules ENTRY imports by name), with every harness
    module these import, followed to the end. tests/test_harness_identity.py holds that no
    harness module imports a sibling any other way."""
    package = HARNESS_DIR / PACKAGE
    roots = [HARNESS_DIR / ENTRY, package / "__init__.py",
             package / f"{FRAMEWORK_MODULE[framework]}.py"]
    library = package / f"lib_{scenario.split('.', 1)[0]}.py"
    if not user_script and library.is_file():
        roots.append(library)
    seen: set[Path] = set()
    while roots:
        path = roots.pop()
        if path in seen or not path.is_file():
            continue
        seen.add(path)
        roots.extend(package / f"{name}.py" for name in sibling_imports(path))
    return sorted((p.relative_to(HARNESS_DIR).as_posix(), p) for p in seen)


def sibling_imports(path: Path) -> frozenset[str]:
    """The names of harness modules `path` imports (`from . import gen`, `from .common import
    x`, `from _lockguard_harness import gen`, `import _lockguard_harness.gen`); a name that
    is no module of the package (`from . import SOME_CONSTANT`) is dropped by the caller."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(_import_statements(path.read_text(encoding="utf-8")),
                                   str(path))):
        if isinstance(node, ast.ImportFrom):
            inside = node.level == 1 or (node.level == 0 and node.module is not None and (
                node.module == PACKAGE or node.module.startswith(PACKAGE + ".")))
            if not inside:
                continue
            module = node.module or ""
            if module.startswith(PACKAGE):
                module = module[len(PACKAGE):].lstrip(".")
            if module:
                names.add(module.split(".", 1)[0])
            else:
                names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name.split(".")[1] for alias in node.names
                         if alias.name.startswith(PACKAGE + "."))
    return frozenset(names)


def _import_statements(source: str) -> str:
    """Only the import statements of `source`, each dedented onto lines of its own (a
    parenthesised one with its continuation lines): parsing these is a millisecond where the
    whole module is tens (torch_.py). A string that merely looks like an import only adds a
    name to follow, never hides one."""
    out: list[str] = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        stripped = lines[i].split("#", 1)[0].strip()
        if stripped.startswith(("from ", "import ")):
            text = stripped
            while text.count("(") > text.count(")") and i + 1 < len(lines):
                i += 1
                text += " " + lines[i].split("#", 1)[0].strip()
            text = text.rstrip("\\")
            try:
                ast.parse(text)
            except SyntaxError:
                pass  # text that looks like an import, in a docstring: not one
            else:
                out.append(text)
        i += 1
    return "\n".join(out) + "\n"
