"""pip-tools as a resolver: the pinned pip-compile, its environment, its command and header.

Which pip-tools, which pip
--------------------------
pip-compile's output depends on the pip it drives (the resolver, the hash and marker handling,
how the header is written), and pip-tools supports only a window of pip versions. A lock must not
change because the machine that made it had another pip installed. So lockguard runs one known
pair, `PIP_TOOLS_VERSION` with `PIP_VERSION` (and the rest of pip-tools' dependencies pinned,
`TOOL_REQUIREMENTS`), in a tool virtualenv of its own:

    ${LOCKGUARD_CACHE:-~/.cache/lockguard}/tools/pip-tools-<ver>-pip-<ver>-py<X.Y>-<interp>/

It is created once with the interpreter running lockguard (so markers such as python_version
evaluate as they do for the user), installed with the user's own pip configuration (indexes,
proxies, certificates: installing a tool is the machine's business), and then reused. It is a
cache entry (cache.entry): a `.complete` marker is written last, once the env imports
pip-tools, so an interrupted bootstrap is rebuilt rather than used, and the entry's lock
serialises two lockguards bootstrapping at once. The current interpreter is used instead when
it already has exactly that pair, and LOCKGUARD_PIP_TOOLS_PYTHON names an interpreter to use as
is (pre-provisioned or offline images).

pip-compile runs with PIP_CONFIG_FILE=os.devnull and without the PIP_* variables, except those
that say how the network is reached (certificate, proxy, timeouts, trusted hosts, keyring;
`_PIP_TRANSPORT`), which are passed on from pip's configuration (`env`).
"""

from __future__ import annotations

import hashlib
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from lockguard import envvars
from lockguard.cache import cache_dir, entry
from lockguard.errors import last_line
from lockguard.installers import tool_reason
from lockguard.locks.parser import RequirementsInput
from lockguard.locks.resolvers.common import (
    BOOTSTRAP_TIMEOUT_S, SILENT, Progress, ResolveError, pip_config, relpath, run_tool,
)
from lockguard.locks.writer import find_link

PIP_TOOLS_VERSION = "7.5.2"
PIP_VERSION = "25.2"
# The whole closure, so the tool env is the same everywhere (click releases have broken
# pip-tools before). Markers cover the Pythons lockguard supports (>=3.10).
TOOL_REQUIREMENTS: tuple[str, ...] = (
    f"pip=={PIP_VERSION}",
    f"pip-tools=={PIP_TOOLS_VERSION}",
    "click==8.1.8",
    "build==1.2.2.post1",
    "pyproject_hooks==1.2.0",
    "packaging==25.0",
    "wheel==0.45.1",
    "setuptools==80.9.0",
    'tomli==2.2.1; python_version < "3.11"',
)
# The tool env's ready marker (the name it always had: envs a lockguard bootstrapped are kept).
COMPLETE = ".complete"
# pip settings that say how the network is reached, never which packages a resolve sees:
# passed on to pip-compile from pip's configuration (files and PIP_* variables alike).
_PIP_TRANSPORT = ("cert", "client-cert", "proxy", "timeout", "default-timeout", "retries",
                  "trusted-host", "keyring-provider", "cache-dir", "no-cache-dir")
# pip-compile's header ends with a line of its own after lockguard's block.
CLOSING = "#\n"


def identity() -> str:
    """What decides pip-tools' answers, for a proposal's key."""
    return f"pip-tools {PIP_TOOLS_VERSION} pip {PIP_VERSION}"


def tool(inputs: RequirementsInput, index_args: list[str], workdir: Path,
         say: Progress) -> tuple[str, str, dict[str, str | None]]:
    """pip-compile's interpreter (the pinned tool env), its name and versions for the header,
    and its environment. `index_args` gains the input's --find-links: pip-compile 7.5 looks
    for the files to hash with a finder that never saw them (IndexError in
    _get_matching_candidates), so they are named on its command line too (it writes each
    folder once). A relative one is the folder writer.find_link finds (beside its file when
    there), named relative to `workdir`, where pip-compile runs and the header is read."""
    python = tool_python(say)
    for line in inputs.options():
        value = line.value or ""
        if line.option == "find-links" and value:
            link = find_link(value, str(line.path))
            if link != value:
                link = relpath(Path(link), workdir)
            if f"--find-links={link}" not in index_args:
                index_args.append(f"--find-links={link}")
    python_version = f", Python {sys.version_info.major}.{sys.version_info.minor}"
    return (python, f"pip-tools {PIP_TOOLS_VERSION}, pip {PIP_VERSION}" + python_version,
            env())


def command(program: str, output: Path, find_links: bool) -> list[str]:
    """pip-compile's command line up to its options and input: hashes generated, its own header
    left out (lockguard writes one), the lock written to `output`."""
    return [program, "-m", "piptools", "compile", "--quiet", "--no-header",
            "--generate-hashes", "--allow-unsafe", "--resolver=backtracking",
            "--strip-extras", "--output-file", str(output)]


def head(out_arg: str, src_arg: str, options: Sequence[str], find_links: bool) -> str:
    """pip-compile's own header, as pip-compile writes it (its options sorted)."""
    args = sorted(["--allow-unsafe", "--generate-hashes", f"--output-file={out_arg}",
                   "--strip-extras", *options])
    command_line = " ".join(["pip-compile", *(shlex.quote(a) for a in args),
                             shlex.quote(src_arg)])
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return ("#\n"
            f"# This file is autogenerated by pip-compile with Python {python}\n"
            "# by the following command:\n"
            "#\n"
            f"#    {command_line}\n"
            "#\n")


def normalise(body: str) -> str:
    """pip-compile's output as the lock keeps it: as it is."""
    return body


def env() -> dict[str, str | None]:
    """pip-compile's environment changes: no pip configuration file, no PIP_* variable but
    those that say how the network is reached, and those taken from pip's configuration."""
    changes: dict[str, str | None] = {k: None for k in os.environ if k.startswith("PIP_")}
    for key in ("PIP_NO_INPUT", "PIP_DISABLE_PIP_VERSION_CHECK"):
        changes.pop(key, None)
    values = pip_config()
    for option in _PIP_TRANSPORT:
        if values.get(option):
            changes["PIP_" + option.upper().replace("-", "_")] = values[option]
    changes["PIP_CONFIG_FILE"] = os.devnull
    return changes


def tool_python(say: Progress) -> str:
    """The interpreter that runs pip-compile: the pinned tool env, created on first use."""
    override = envvars.value("LOCKGUARD_PIP_TOOLS_PYTHON")
    if override:
        return override
    if _has_pinned_pair():
        return sys.executable

    interp = hashlib.sha256(f"{os.path.realpath(sys.executable)}|{sys.version}".encode()
                            ).hexdigest()
    name = (f"pip-tools-{PIP_TOOLS_VERSION}-pip-{PIP_VERSION}"
            f"-py{sys.version_info.major}.{sys.version_info.minor}-{interp[:8]}")
    venv = cache_dir() / "tools" / name

    def build(path: Path) -> str:
        say(f"installing pip-tools {PIP_TOOLS_VERSION} with pip {PIP_VERSION} (once) in {path}")
        shutil.rmtree(path, ignore_errors=True)  # a half-built env from an interrupted run
        proc = run_tool([sys.executable, "-m", "venv", str(path)],
                        timeout=BOOTSTRAP_TIMEOUT_S, what="python -m venv")
        if proc.returncode != 0:
            raise ResolveError(f"cannot create the pip-tools env {path}: "
                               f"{last_line(proc.stderr, unindented=True)}")
        _pip_install(path)
        return " ".join(TOOL_REQUIREMENTS) + "\n"

    # In place: a venv's scripts and pyvenv.cfg name the folder it was made in.
    with entry(venv, build, ready=lambda path: (path / COMPLETE).is_file(), marker=COMPLETE,
               check=_imports_pip_tools, in_place=True, what=f"the pip-tools env ({venv})",
               tell=say):
        pass
    return str(venv / "bin" / "python")


def _pip_install(venv: Path) -> None:
    """TOOL_REQUIREMENTS into the tool env at `venv`, with the machine's pip configuration."""
    proc = run_tool([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                     *TOOL_REQUIREMENTS], timeout=BOOTSTRAP_TIMEOUT_S, what="pip install pip-tools")
    if proc.returncode != 0:
        reason = tool_reason(proc.stderr + "\n" + proc.stdout, SILENT)
        raise ResolveError(f"cannot install pip-tools {PIP_TOOLS_VERSION} into {venv}: {reason}")


def _imports_pip_tools(venv: Path) -> None:
    """The tool env's health check before its marker: its interpreter runs pip-compile."""
    proc = run_tool([str(venv / "bin" / "python"), "-m", "piptools", "compile", "--version"],
                    timeout=BOOTSTRAP_TIMEOUT_S, what="pip-compile --version")
    if proc.returncode != 0:
        raise ResolveError(f"the pip-tools env {venv} does not run pip-compile: "
                           f"{last_line(proc.stderr, unindented=True)}")


def _has_pinned_pair() -> bool:
    try:
        return version("pip") == PIP_VERSION and version("pip-tools") == PIP_TOOLS_VERSION
    except PackageNotFoundError:
        return False
