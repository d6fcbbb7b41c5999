"""What every resolver shares: the error, the proposal, running a resolver, and the indexes a
resolve sees.

Where packages come from
------------------------
A lock is the project's, so what it resolves to must not depend on the machine that resolved
it. The indexes of a resolve are the lock's own (`--index-url`, `--extra-index-url`,
`--find-links`, `--no-index` lines of the lock being re-resolved, passed on the command line
where requirements.in does not already say them: `index_args`) and those requirements.in
states; never the machine's pip configuration (piptools.env, and uv's --no-config). A proposed
lock therefore carries the index lines the lock had and nothing the machine added. (The venv
installer still installs a lock with the machine's pip settings: that is installing, not
writing the lock.)
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lockguard import installers
from lockguard.cache import cache_dir
from lockguard.errors import LockguardError
from lockguard.installers import ToolError
from lockguard.locks.model import LockOptions
from lockguard.locks.parser import RequirementsInput
from lockguard.sandbox import project_access

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox

Resolver = Literal["pip-tools", "uv"]
RESOLVERS: tuple[Resolver, ...] = ("pip-tools", "uv")
Progress = Callable[[str], None]

RESOLVE_TIMEOUT_S = 1800.0  # a torch+jax+tf resolve from a cold cache takes minutes, not hours
BOOTSTRAP_TIMEOUT_S = 600.0
# What a resolver failure says when the resolver said nothing (installers.tool_reason).
SILENT = "the resolver failed without saying why"
PYPI_SIMPLE = "https://pypi.org/simple"
# A proposal's ready marker (cache.entry), beside the lock it holds: `lockguard cache` lists a
# proposal by the other files of its folder.
PROPOSED = "lockguard-proposed"


class ResolveError(LockguardError):
    """A lock could not be resolved or written; `str()` is one line saying why."""


@dataclass(frozen=True)
class Proposal:
    """A candidate lock a proposal wrote into the cache (resolvers.propose, locks/relock.py)."""

    path: Path
    resolver: Resolver
    # One line per requirements.in line that was read otherwise for the proposal
    # ("requirements.in:3 pins numpy==1.26.4: proposed with numpy==2.0.2 there ...").
    relaxed: tuple[str, ...] = ()


def run_tool(cmd: Sequence[str], *, timeout: float, what: str, cwd: Path | None = None,
             env: Mapping[str, str | None] | None = None, sandbox: Sandbox | None = None,
             reads: Sequence[str] = (), writes: Sequence[str] = ()
             ) -> subprocess.CompletedProcess[str]:
    """A resolver command (installers.run_tool), its failures as ResolveError. In an active
    `sandbox` (a resolve that may build an sdist for its metadata) it keeps its caches in
    lockguard's cache (resolvers/), the one place besides `writes` it may write."""
    if sandbox is not None and sandbox.active:
        caches = cache_dir() / "resolvers"
        env = {**(env or {}), "UV_CACHE_DIR": str(caches / "uv"),
               "PIP_CACHE_DIR": str(caches / "pip"), "XDG_CACHE_HOME": str(caches)}
        writes = (*writes, str(caches))
    return installers.run_tool(cmd, timeout=timeout, what=what, cwd=cwd, error=ResolveError,
                               env_changes=env, sandbox=sandbox, reads=reads, writes=writes)


def resolver_reads(workdir: Path, args: Sequence[str] = ()) -> list[str]:
    """What a sandboxed resolver reads besides the system and the installations: the
    repository holding `workdir` (its requirements inputs, the files they include, local
    wheel folders in it; `.git` left out) and the local folders `args` name (--find-links,
    a file:// index, as `--option value` or `--option=value`)."""
    readable, _ = project_access(workdir / "requirements.in", workdir)
    return [*readable, str(workdir), *installers.local_sources(args)]


def requirement_name(spec: str) -> str:
    """The canonical name `spec` (`torch==2.14.1`, `jax>=0.10`, `numpy`) asks for; a
    ResolveError when it is no requirement."""
    try:
        return canonicalize_name(Requirement(spec).name)
    except InvalidRequirement:
        raise ResolveError(f"{spec!r} is not a requirement (expected e.g. torch==2.14.1 or "
                           "jax>=0.10)") from None


def relpath(path: Path, start: Path) -> str:
    """`path` relative to `start`, with forward slashes (how a lock's header names files)."""
    return Path(os.path.relpath(path, start)).as_posix()


def pip_config() -> dict[str, str]:
    """pip's configuration (installers.pip_config), its failures as ResolveError."""
    try:
        return installers.pip_config()
    except ToolError as exc:
        raise ResolveError(str(exc)) from None


def index_args(kept: LockOptions, inputs: RequirementsInput) -> list[str]:
    """The lock's index options that requirements.in does not state, as resolver arguments.

    An index url the input names replaces the lock's (the project moved); extra indexes and
    find-links add up, as pip adds them up.
    """
    said: dict[str, set[str]] = {}
    for line in inputs.options():
        said.setdefault(line.option or "", set()).add((line.value or "").rstrip("/"))
    args = []
    if (kept.index_url and kept.index_url.rstrip("/") != PYPI_SIMPLE
            and "index-url" not in said and "no-index" not in said):
        args.append(f"--index-url={kept.index_url}")
    for url in kept.extra_index_urls:
        if url.rstrip("/") not in said.get("extra-index-url", set()):
            args.append(f"--extra-index-url={url}")
    for link in kept.find_links:
        if link.rstrip("/") not in said.get("find-links", set()):
            args.append(f"--find-links={link}")
    if "--no-index" in kept.other_options and "no-index" not in said:
        args.append("--no-index")
    return args
