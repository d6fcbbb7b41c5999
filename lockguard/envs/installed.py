"""What a venv has installed, read from its dist-info folders (files, never code): the one
reader behind bisection's consistency check (flows/bisect.py) and the compile caches' closures
(envs/compile_cache.py).

A dist-info folder is named `<name>-<version>.dist-info`, its name escaped as the wheel spec
says, so one directory listing gives every distribution and its version without opening a
METADATA file; a METADATA is read (by importlib.metadata) only for the distributions whose
requirements are asked for.
"""

from __future__ import annotations

from importlib.metadata import PathDistribution
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name


def site_packages(venv: Path) -> Path | None:
    """The venv's site-packages; None if it has none."""
    return next(iter(sorted(venv.glob("lib/python*/site-packages"))), None)


def python_version(site: Path) -> str:
    """The X.Y of the interpreter a site-packages belongs to (lib/pythonX.Y/site-packages)."""
    return site.parent.name.removeprefix("python")


def marker_environment(python: str | None) -> dict[str, str]:
    """The environment markers are evaluated in for a venv whose interpreter is Python `python`
    (X.Y; None: this one's)."""
    environment = dict(default_environment())
    if python:
        environment.update(python_version=python, python_full_version=f"{python}.0")
    return environment


def applies(requirement: Requirement, environment: dict[str, str],
            extras: tuple[str, ...]) -> bool:
    """Whether a distribution installed with `extras` requires `requirement` in `environment`:
    no marker, or its marker holds for one of the extras or for none."""
    return requirement.marker is None or any(
        requirement.marker.evaluate({**environment, "extra": extra}) for extra in (*extras, ""))


def distributions(site: Path) -> dict[str, tuple[str, Path]]:
    """{canonical name: (version as the folder writes it, its METADATA)} of `site`."""
    found = {}
    for info in site.glob("*.dist-info"):
        name, _, version = info.name.removesuffix(".dist-info").rpartition("-")
        found[canonicalize_name(name)] = (version, info / "METADATA")
    return found


def requires(metadata: Path) -> tuple[str, ...] | None:
    """A distribution's Requires-Dist as written (their markers and extras in them), read by
    importlib.metadata from the dist-info folder of `metadata`; None if its METADATA cannot be
    read (missing, not a file, not UTF-8), which importlib.metadata tells no requirement from."""
    distribution = PathDistribution(metadata.parent)
    try:
        if distribution.read_text(metadata.name) is None:
            return None
        return tuple(distribution.requires or ())
    except (OSError, UnicodeDecodeError):
        return None
