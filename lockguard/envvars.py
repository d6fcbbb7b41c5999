"""The LOCKGUARD_* environment variables: the one list of their names, what each takes, and
their one check, made before any command runs (cli.handles_errors).

They are validated as config keys are: a value lockguard cannot use, or a LOCKGUARD_ name it
does not know (`LOCKGUARD_JOB=4`, a typo silently ignored, would run with a setting its owner
did not choose), is an error naming the variable, exit 2. An empty value counts as unset (a CI
template passes optional inputs through as empty strings).

    LOCKGUARD_CACHE             the cache directory (default ~/.cache/lockguard); `~` expanded
    LOCKGUARD_JOBS              training runs at once, 1 to MAX_JOBS (default: one per core,
                                at most 8)
    LOCKGUARD_BASE_IMAGE        a local Docker image to build on instead of the pinned base
    LOCKGUARD_IMAGES_DIR        a directory of Docker image templates (Dockerfile.in)
    LOCKGUARD_PIP_TOOLS_PYTHON  an interpreter with pip-tools, used as is by `lockguard lock`
    LOCKGUARD_SANDBOX           auto, required or off: overrides the config's `sandbox` (what
                                --sandbox sets for its invocation)
    LOCKGUARD_INSTALLER_ENV     names of variables installers (never trainings) also get, for
                                an index's credential helper (allowlist.py); space or comma
                                separated
    LOCKGUARD_REPO, LOCKGUARD_VERSION
                                not read: earlier workflow templates set them (where to
                                install lockguard from) for every step, lockguard's included

The readers (cache.py, flows/pipeline.py, envs/docker, locks/resolvers/) take their values
through `value`, so what is read is what was checked.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path

from lockguard.errors import LockguardError, did_you_mean, one_line
from lockguard.names import SANDBOX_MODES

PREFIX = "LOCKGUARD_"
MAX_JOBS = 256
# What Docker takes as an image reference or id; nothing that could end a FROM line or read
# as an option.
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]{0,254}")


class EnvVarError(LockguardError):
    """A LOCKGUARD_* variable lockguard does not know, or a value it cannot use."""


def _jobs(value: str) -> str | None:
    if not (value.isascii() and value.isdigit() and len(value) <= 4) \
            or not 1 <= int(value) <= MAX_JOBS:
        return f"must be a whole number from 1 to {MAX_JOBS} (training runs at once)"
    return None


def _image(value: str) -> str | None:
    if not _IMAGE.fullmatch(value):
        return ("must be a Docker image reference (name[:tag][@digest]) or image id: letters, "
                "digits and . _ / : @ -, starting with a letter or digit")
    return None


def _directory(value: str) -> str | None:
    path = Path(value).expanduser()
    if not path.is_dir():
        return f"must name a directory; {path} is {'not one' if path.exists() else 'missing'}"
    return None


def _interpreter(value: str) -> str | None:
    if "/" not in value:
        return None if shutil.which(value) else f"must name an interpreter; {value} is not on PATH"
    path = Path(value).expanduser()
    if not (path.is_file() and os.access(path, os.X_OK)):
        return f"must name an executable interpreter; {path} is not one"
    return None


def _any(value: str) -> str | None:
    return None


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _names(value: str) -> str | None:
    names = [n for n in re.split(r"[\s,]+", value) if n]
    bad = next((n for n in names if not _NAME.fullmatch(n) or n.startswith(PREFIX)), None)
    if bad is not None:
        return (f"must list environment variable names (letters, digits, _; none of "
                f"lockguard's own); {one_line(repr(bad), 60)} is not one")
    return None


def _sandbox(value: str) -> str | None:
    return None if value in SANDBOX_MODES else f"must be one of {', '.join(SANDBOX_MODES)}"


# Set for every step by earlier versions of lockguard's workflow templates (where to install
# lockguard from): not read, and not refused, so a workflow copied from them keeps working.
NOT_READ = ("LOCKGUARD_REPO", "LOCKGUARD_VERSION")
# name -> the check of a non-empty value (a reason when it is not usable)
KNOWN: dict[str, Callable[[str], str | None]] = {
    "LOCKGUARD_CACHE": _any,
    "LOCKGUARD_JOBS": _jobs,
    "LOCKGUARD_BASE_IMAGE": _image,
    "LOCKGUARD_IMAGES_DIR": _directory,
    "LOCKGUARD_PIP_TOOLS_PYTHON": _interpreter,
    "LOCKGUARD_INSTALLER_ENV": _names,
    "LOCKGUARD_SANDBOX": _sandbox,
    **{name: _any for name in NOT_READ},
}


def check(environ: Mapping[str, str] | None = None) -> None:
    """Every LOCKGUARD_* variable of `environ` (default: this process's) known and usable, or
    an EnvVarError naming the first that is not."""
    environ = os.environ if environ is None else environ
    for name in sorted(n for n in environ if n.startswith(PREFIX)):
        if name not in KNOWN:
            # Matched without the prefix every name shares, or everything is close to all.
            hint = did_you_mean(name.removeprefix(PREFIX),
                                [n.removeprefix(PREFIX) for n in KNOWN if n not in NOT_READ],
                                lambda n: PREFIX + n)
            hint = f"{hint} " if hint else ""
            raise EnvVarError(f"environment variable {one_line(name, 80)}: not one lockguard "
                              f"knows ({hint}known: {', '.join(KNOWN)})")
        value = environ[name]
        problem = KNOWN[name](value) if value else None
        if problem:
            raise EnvVarError(f"environment variable {name}={one_line(repr(value), 80)}: "
                              f"{problem}")


def value(name: str) -> str | None:
    """The value of the known variable `name` (None when unset or empty), checked: readers
    deep in the layers fail as the CLI's check would, should they run without it."""
    assert name in KNOWN, name
    raw = os.environ.get(name) or None
    if raw is not None and (problem := KNOWN[name](raw)):
        raise EnvVarError(f"environment variable {name}={one_line(repr(raw), 80)}: {problem}")
    return raw
