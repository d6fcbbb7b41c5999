"""A golden's harness identity is the harness code its scenario's runs can import, no more and
no less: an edit of one framework's module leaves the other frameworks' goldens answering, and
any edit a run could see is another digest (envs/harness.harness_files)."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lockguard.envs import harness
from lockguard.envs.harness import ENTRY, HARNESS_DIR, PACKAGE, harness_files
from lockguard.scenarios import Scenario, bundled, harness_digest


def user(framework: str) -> Scenario:
    return Scenario(id="mine", framework=framework, description="a user script", steps=3,
                    script=Path("mine.py"))


def every_scenario() -> list[Scenario]:
    return [*bundled(), *(user(fw) for fw in harness.FRAMEWORK_MODULE)]


@pytest.fixture
def copy(tmp_path, monkeypatch) -> Path:
    """A copy of the harness that harness_files reads, to edit."""
    out = tmp_path / "harness"
    shutil.copytree(HARNESS_DIR, out, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(harness, "HARNESS_DIR", out)
    return out


def digests() -> dict[str, str]:
    return {sc.id if sc.script is None else f"{sc.framework}:user": harness_digest(sc)
            for sc in every_scenario()}


def edited(copy: Path, module: str) -> set[str]:
    """The scenarios whose harness digest an edit of `module` changes."""
    before = digests()
    path = copy / PACKAGE / f"{module}.py" if module != "run" else copy / ENTRY
    path.write_text(path.read_text() + "\n# an edit\n")
    after = digests()
    return {sid for sid in before if before[sid] != after[sid]}


def test_a_framework_modules_edit_changes_only_its_frameworks_goldens(copy):
    changed = edited(copy, "tf_")
    tensorflow = {sc.id for sc in bundled() if sc.framework == "tensorflow"}
    assert tensorflow and tensorflow | {"tensorflow:user"} == changed
    assert "keras.cnn" in changed and "torch.mlp" not in changed


def test_a_library_modules_edit_changes_its_scenarios_and_what_imports_it(copy):
    # lib_timm trains with lib_torchvision's loop: both change, torch's own scenarios do not.
    assert edited(copy, "lib_torchvision") == {"torchvision.resnet18", "timm.vit"}


def test_an_edit_of_the_entry_or_common_code_changes_every_golden(copy):
    everything = set(digests())
    assert edited(copy, "common") == everything
    assert edited(copy, "run") == everything
    assert edited(copy, "gen") == everything


def test_a_user_scripts_run_never_reads_a_library_module():
    # run.py loads lib_<prefix> only for a bundled scenario, never beside --script.
    files = {name for name, _ in harness_files("torch", "timm.mine", user_script=True)}
    assert f"{PACKAGE}/lib_timm.py" not in files
    assert f"{PACKAGE}/lib_timm.py" in {n for n, _ in harness_files("torch", "timm.vit")}


def test_every_harness_module_belongs_to_some_scenarios_identity():
    # A module no identity covers is either dead or imported in a way harness_files cannot
    # follow; both need a look.
    covered = {name for sc in every_scenario()
               for name, _ in harness_files(sc.framework, sc.id,
                                            user_script=sc.script is not None)}
    every = {p.relative_to(HARNESS_DIR).as_posix() for p in HARNESS_DIR.rglob("*.py")}
    assert every - covered == set()


def test_the_harness_imports_siblings_only_in_forms_the_identity_follows():
    # Only run.py imports a harness module by a computed name, and only the two that
    # harness_files adds by hand: the framework's module and the model library's. numpy_'s
    # computed name is one of numpy's own C modules, from a tuple of two constants. A new
    # computed import fails here until it is known to name no harness module.
    computed = []
    for path in sorted(HARNESS_DIR.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes())):
            if (isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(
                    node.func, "id", None)) in {"import_module", "__import__"}
                    and not (node.args and isinstance(node.args[0], ast.Constant)
                             and not str(node.args[0].value).startswith((PACKAGE, ".")))):
                computed.append((path.relative_to(HARNESS_DIR).as_posix(),
                                 ast.unparse(node.args[0]) if node.args else ""))
    # run.py's `module_name` is a scenario's entry (the project's own module), refused
    # there when it names the harness's package.
    assert computed == [(f"{PACKAGE}/numpy_.py", "n"),
                        ("run.py", "module_name"),
                        ("run.py", "f'{PACKAGE}.{MODULE_OF_FRAMEWORK[framework]}'"),
                        ("run.py", "f'{PACKAGE}.lib_{prefix}'")]


RECORD_IMPORTS = """
import os, runpy, sys
real_exit = os._exit
def leave(code):
    mods = sorted(m for m in sys.modules if m == {package!r} or m.startswith({package!r} + "."))
    sys.stderr.write("IMPORTED " + " ".join(mods) + "\\n")
    real_exit(code)
os._exit = leave
sys.argv = [{entry!r}, *sys.argv[1:]]
runpy.run_path({entry!r}, run_name="__main__")
"""


def test_a_real_run_imports_no_harness_module_outside_its_identity(tmp_path):
    # numpy is lockguard's own dependency: a real numpy.mlp run in this interpreter.
    entry = str(HARNESS_DIR / ENTRY)
    code = RECORD_IMPORTS.format(package=PACKAGE, entry=entry)
    done = subprocess.run([sys.executable, "-I", "-c", code, "--scenario", "numpy.mlp",
                           "--steps", "2", "--out", str(tmp_path / "r.json")],
                          capture_output=True, text=True, timeout=120)
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("IMPORTED "))
    imported = {m.split(".", 1)[1] if "." in m else "__init__" for m in line.split()[1:]}
    assert "numpy_" in imported and (tmp_path / "r.json").is_file(), done.stderr
    identity = {Path(name).stem for name, _ in harness_files("numpy", "numpy.mlp")}
    assert imported <= identity


def test_the_import_scan_finds_what_a_whole_parse_finds():
    # harness_files parses only a module's import statements (a millisecond, where parsing
    # torch_.py whole is tens): on every harness module it must find what ast finds in all of it.
    for path in sorted(HARNESS_DIR.rglob("*.py")):
        found = set()
        for node in ast.walk(ast.parse(path.read_bytes())):
            if isinstance(node, ast.ImportFrom) and (node.level == 1 or str(
                    node.module).startswith(PACKAGE)):
                module = (node.module or "").removeprefix(PACKAGE).lstrip(".")
                found |= {module.split(".")[0]} if module else {a.name for a in node.names}
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names
                          if a.name.startswith(PACKAGE + ".")}
        assert set(harness.sibling_imports(path)) == found, path
