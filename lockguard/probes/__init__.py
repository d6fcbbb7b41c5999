"""The small programs lockguard runs in an interpreter that is not its own: real modules here,
linted, tested and held to the project's rules (tests/test_probes.py, tests/test_layers.py).

A probe runs in a target interpreter that has neither lockguard nor any dependency: a base
image's python3, an image's venv, a venv's or the `python` setting's interpreter. So a probe
imports the stdlib only (stack.py, also the framework it checks), never lockguard, and prints
what it found (JSON, or one line) for the host to judge:

    platform_info.py    what pip and environment markers see of the interpreter (the base
                        image's target, a `python` setting's markers, an interpreter's tag)
    conformance.py      an image's installed distributions and whether its framework imports
    stack.py            a cuda or tpu image's accelerator stack, proven without a GPU or TPU
    compile_bytecode.py a venv's listed modules compiled to .pyc on every core
    cache_tag.py        the interpreter's bytecode cache tag (cpython-311)

Two ways to run one, both from `Probe`:

- on the host, as a file: `Probe.argv(python, *args)` is `python -I -S <file> args` (isolated:
  no PYTHON* variables, no site, no user folder on sys.path);
- in a container, where the file is not: `python -c Probe.program() args`. The program is
  bundle.py's text and one call that carries the probe's text and its siblings' (the modules
  it imports from this folder, `siblings`): bundle.run defines each sibling as a module from
  its text and runs the probe as __main__ under its own file name, so a traceback names its
  lines. Shipping the texts inside the one `-c` argument keeps the container as it was (no
  mount, no copy: the engine may not see the host's files) and keeps each file whole; the
  shared part is a module, imported, not a prefix pasted before a probe.

A probe that imports a sibling puts its own folder first on sys.path for that import (python -I
leaves the script's folder off it) and takes it off again, and takes the sibling out of
sys.modules, so that nothing the framework imports later can find a module of ours by name.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

PROBES_DIR = Path(__file__).resolve().parent
BUNDLE = "bundle.py"  # the head of every `python -c` program (see the module's docstring)


@dataclass(frozen=True)
class Probe:
    """One probe: `name` is its file here without .py; `siblings` the modules of this folder it
    imports (shipped with it when it runs as `python -c`)."""

    name: str
    siblings: tuple[str, ...] = ()

    @property
    def path(self) -> Path:
        """The probe's file (what a host run gives the interpreter)."""
        return PROBES_DIR / f"{self.name}.py"

    def argv(self, python: str, *args: str) -> list[str]:
        """The host's command line: `python -I -S <file> args`."""
        return [python, "-I", "-S", str(self.path), *args]

    def program(self) -> str:
        """The text `python -c` runs where the file is not (a container): bundle.py and one call
        with the siblings' texts and the probe's own."""
        siblings = {name: _text(PROBES_DIR / f"{name}.py") for name in self.siblings}
        return (_text(PROBES_DIR / BUNDLE)
                + f"\nrun({siblings!r}, {self.path.name!r}, {_text(self.path)!r})\n")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


PLATFORM_INFO = Probe("platform_info")
CONFORMANCE = Probe("conformance", siblings=("platform_info",))
STACK = Probe("stack", siblings=("platform_info",))
COMPILE_BYTECODE = Probe("compile_bytecode")
CACHE_TAG = Probe("cache_tag")
