"""After a build (and before reusing an image built elsewhere): the image holds exactly the lock.

The probe (lockguard/probes/conformance.py) runs with the image's venv interpreter and reports
what is installed, what the markers see, and whether the framework imports at all: a wheel that
installs but cannot load on the base fails the build, not the first training run.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.envs.base import EnvError
from lockguard.envs.docker.engine import probe
from lockguard.envs.docker.recipe import VENV_PYTHON
from lockguard.envs.docker.wheelhouse import Target, expected_pins
from lockguard.locks.model import Lock, Pin
from lockguard.probes import CONFORMANCE

# Distributions a fresh venv brings with it: allowed in an image although the lock lacks them.
INSTALLER_DISTS = frozenset({"pip", "setuptools", "wheel"})


def conformance_problems(expected: list[Pin], installed: dict[str, str]) -> list[str]:
    """Differences between the pins and {canonical name: version} installed; [] if they agree.

    Versions compare as versions (2.0 == 2.0.0); an installed package the lock does not pin is
    allowed only if it is the installer's own (pip, setuptools, wheel).
    """
    problems = []
    wanted = {p.name: p for p in expected}
    for name, pin in sorted(wanted.items()):
        have = installed.get(name)
        if have is None:
            problems.append(f"missing {pin.requirement}")
            continue
        try:
            same = Version(have) == pin.parsed_version
        except InvalidVersion:
            same = have == pin.version
        if not same:
            problems.append(f"{pin.display_name}: lock {pin.version}, image {have}")
    for name, version in sorted(installed.items()):
        if name not in wanted and name not in INSTALLER_DISTS:
            problems.append(f"extra {name}=={version}")
    return problems


def installed_in(client: Any, tag: str, module: str) -> dict[str, Any]:
    """Run the conformance probe in an image: {"dists": {name: version}, "import_error", ...}."""
    return probe(client, tag, VENV_PYTHON, CONFORMANCE, [module],
                 what=f"checking the packages in {tag}")


def check_conformance(client: Any, tag: str, lock: Lock, module: str, log: Path, *,
                      imports: bool = True) -> None:
    """The packages in the image must equal the lock's (for the image's platform) exactly, and
    (`imports`) the framework must import; an accelerator image leaves that to its stack check
    (stack.py), which says which wheel and library an import failed on."""
    report = installed_in(client, tag, module)
    target = Target.from_probe(report)
    installed = {canonicalize_name(n): v for n, v in report["dists"].items()}
    problems = conformance_problems(expected_pins(lock, target), installed)
    if problems:
        raise EnvError(f"{tag} does not match {lock.source}: {'; '.join(problems)} "
                       f"(build log: {log})")
    if imports and report.get("import_error"):
        raise EnvError(f"{tag}: `import {module}` fails in the image: {report['import_error']} "
                       f"(build log: {log})")
