"""Proposals for the TOML locks, made by the tool that writes them: `propose_uv_lock` (a uv
project's `uv.lock`: `uv lock --upgrade-package`) and `propose_pylock` (a pylock.toml compiled
from an input: `uv pip compile -o pylock.toml --upgrade-package`). What a PR bot runs, so that
the proposal and the bot's pull request agree on what changed.

Like lockguard.locks.resolvers' proposals for requirements locks, each is written under
`<cache>/proposals/<key>/`, keyed by everything that decides it, the user's files only read.
A requirement of the project that rules an upgrade out (`numpy==1.26.4` in pyproject.toml, as
a bot's pull request edits it) is read as asking for the upgrade, and a note says so: in a
uv project, that requirement is rewritten in the copy that is locked; for a pylock, uv's
`--override` states the upgrade over the input's line.

A pylock's scope (which Python, which platform, universal or not, its indexes) is its own:
the options of the `uv pip compile` command its header names are kept (those that say what is
resolved, never an interpreter or a file to run), and the header is kept as it was
(`--custom-compile-command`).
"""

from __future__ import annotations

import hashlib
import re
import shlex
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard import toml
from lockguard.cache import entry, ensure_dir
from lockguard.files import display_path, write_text
from lockguard.installers import require_uv, tool_reason
from lockguard.locks.parser import parse_lock, read_requirements_input
from lockguard.locks.resolvers import (
    PROPOSED, RESOLVE_TIMEOUT_S, SILENT, Progress, Proposal, ResolveError, resolver_reads,
    run_tool,
)

if TYPE_CHECKING:
    from lockguard.sandbox import Sandbox

_FORMAT = "1"  # of the proposal key: bump when what decides a proposal changes


def propose_uv_lock(lock: Path, upgrades: Sequence[str], cache_dir: Path, *,
                    progress: Progress | None = None,
                    timeout: float = RESOLVE_TIMEOUT_S,
                    sandbox: Sandbox | None = None) -> Proposal:
    """`uv lock --upgrade-package` for each of `upgrades` (`name` or `name==version`), in a copy
    of the project (its pyproject.toml and uv.lock) under the cache."""
    lock = Path(lock)
    project = lock.parent / "pyproject.toml"
    if not project.is_file():
        raise ResolveError(f"{project}: the project of {display_path(lock)} does not exist "
                           "(a uv.lock is proposed by `uv lock` in its project)")
    wanted = _upgrades(lock, upgrades)
    text = project.read_text(encoding="utf-8")
    relaxed_text, relaxed = _relax_pyproject(text, wanted, display_path(project))
    uv = _uv()
    where = _proposal_dir(cache_dir, "uv.lock", lock, [text], upgrades, uv)

    def build(_where: Path) -> str:
        write_text(where / "pyproject.toml", relaxed_text)
        write_text(where / "uv.lock", lock.read_text(encoding="utf-8"))  # the preferences
        cmd = [uv, "lock", "--no-config", "--quiet", "--project", str(where)]
        cmd += [f"--upgrade-package={spec}" for spec in upgrades]
        _run(cmd, where, timeout, progress, f"locking {display_path(project)} with uv",
             sandbox, reads=resolver_reads(lock.parent), writes=(str(where),))
        return ""

    _entry(where, build)
    return Proposal(where / "uv.lock", "uv", tuple(relaxed))


def propose_pylock(lock: Path, inputs: Path | None, upgrades: Sequence[str], cache_dir: Path,
                   *, progress: Progress | None = None,
                   timeout: float = RESOLVE_TIMEOUT_S,
                   sandbox: Sandbox | None = None) -> Proposal:
    """`uv pip compile INPUT -o pylock.toml --upgrade-package ...`, the current pylock the
    preferences (other pins kept). `inputs`: the input it is compiled from; None: the one its
    header's command names, else requirements.in beside it."""
    lock = Path(lock)
    header = _header_command(lock.read_text(encoding="utf-8"))
    source = inputs or _header_input(header, lock) or lock.parent / "requirements.in"
    if not source.is_file():
        raise ResolveError(f"{source}: the input of {display_path(lock)} does not exist (pass "
                           "--inputs, or set `inputs` on the lock in config)")
    wanted = _upgrades(lock, upgrades)
    uv = _uv()
    scope = _scope_args(header)
    where = _proposal_dir(cache_dir, "pylock.toml", lock,
                          [source.read_text(encoding="utf-8", errors="replace"), *scope],
                          upgrades, uv)
    target = where / lock.name
    notes = _blocked_notes(source, wanted)

    def build(_where: Path) -> str:
        _compile_pylock(lock, source, target, uv, scope, header, wanted, notes, upgrades,
                        timeout, progress, sandbox)
        return ""

    _entry(where, build)
    return Proposal(target, "uv", tuple(notes))


def _entry(where: Path, build: Callable[[Path], str]) -> None:
    """The proposal folder `where` as a cache entry (cache.entry), its marker PROPOSED, written
    once the tool succeeded (until then the folder holds a copy of the current lock, the tool's
    preferences, which is no proposal). In place: uv writes the folder's path into what it writes (the project, a pylock's command line);
    _proposal_dir makes the folder again after a failure removed it."""
    with entry(where, build, ready=lambda path: (path / PROPOSED).is_file(), marker=PROPOSED,
               in_place=True, what=f"the proposal {where.name}"):
        pass


def _compile_pylock(lock: Path, source: Path, target: Path, uv: str, scope: list[str],
                    header: str | None, wanted: dict[str, str], notes: list[str],
                    upgrades: Sequence[str], timeout: float, progress: Progress | None,
                    sandbox: Sandbox | None) -> None:
    """`uv pip compile` of `source` into `target`, the current pylock the preferences."""
    where = target.parent
    write_text(target, lock.read_text(encoding="utf-8"))  # the preferences: other pins kept
    cmd = [uv, "pip", "compile", "--no-config", "--quiet", *scope]
    if not any(a in ("--python-version", "--universal") or a.startswith("--python-version=")
               for a in scope):
        cmd += ["--python", sys.executable]
    if header:
        cmd += ["--custom-compile-command", header]
    overrides = [spec for spec, name in wanted.items() if _version_of(spec) is not None]
    if overrides and notes:
        write_text(where / "overrides.txt", "".join(f"{spec}\n" for spec in overrides))
        cmd += ["--override", str(where / "overrides.txt")]
    cmd += [f"--upgrade-package={spec}" for spec in upgrades]
    cmd += [str(source.resolve()), "--output-file", str(target)]
    _run(cmd, lock.parent, timeout, progress, f"compiling {display_path(source)} with uv",
         sandbox, reads=[*resolver_reads(lock.parent), str(source.resolve().parent)],
         writes=(str(where),))


# ---------------------------------------------------------------------------------------------

def _uv() -> str:
    return require_uv("proposing for a uv.lock or pylock.toml", ResolveError)


def _upgrades(lock: Path, upgrades: Sequence[str]) -> dict[str, str]:
    """spec -> canonical name, each a package the lock pins."""
    if not upgrades:
        raise ResolveError("nothing to propose: name at least one upgrade, e.g. torch==2.14.1")
    pinned = parse_lock(lock).by_name
    wanted: dict[str, str] = {}
    for spec in upgrades:
        try:
            name = canonicalize_name(Requirement(spec).name)
        except InvalidRequirement as exc:
            raise ResolveError(f"upgrade {spec!r}: {exc}") from None
        if name not in pinned:
            raise ResolveError(f"{spec}: {name} is not pinned in {display_path(lock)}")
        wanted[spec] = name
    if len(set(wanted.values())) != len(wanted):
        raise ResolveError(f"each package can be named once: {' '.join(upgrades)}")
    return wanted


def _version_of(spec: str) -> str | None:
    specifiers = list(Requirement(spec).specifier)
    if len(specifiers) == 1 and specifiers[0].operator == "==":
        return specifiers[0].version
    return None


def _proposal_dir(cache_dir: Path, kind: str, lock: Path, inputs: Sequence[str],
                  upgrades: Sequence[str], uv: str) -> Path:
    key = hashlib.sha256()
    version = run_tool([uv, "--version"], timeout=60, what="uv").stdout.strip()
    for part in (_FORMAT, kind, lock.read_text(encoding="utf-8"), *inputs,
                 "\n".join(sorted(upgrades)), version, f"{sys.version_info[:2]}"):
        key.update(hashlib.sha256(part.encode()).digest())
    return ensure_dir(Path(cache_dir) / "proposals" / key.hexdigest()[:24])


def _run(cmd: list[str], cwd: Path, timeout: float, progress: Progress | None,
         what: str, sandbox: Sandbox | None = None, *, reads: Sequence[str] = (),
         writes: Sequence[str] = ()) -> None:
    if progress is not None:
        progress(what)
    proc = run_tool(cmd, cwd=cwd, timeout=timeout, what="uv", sandbox=sandbox, reads=reads,
                    writes=writes)
    if proc.returncode != 0:
        raise ResolveError(f"uv could not resolve the proposal: "
                           f"{tool_reason(proc.stderr + chr(10) + proc.stdout, SILENT)}")


# ------------------------------------------------------------------ a uv project's requirements

def _relax_pyproject(text: str, wanted: dict[str, str], shown: str) -> tuple[str, list[str]]:
    """`text` with each requirement that rules out an exact upgrade asking for it instead, and
    one note per requirement rewritten."""
    try:
        data = toml.loads(text)
    except toml.TOMLDecodeError as exc:
        raise ResolveError(f"{shown}: not valid TOML: {exc}") from None
    project = data.get("project") or {}
    lists = [project.get("dependencies") or []]
    lists += list((project.get("optional-dependencies") or {}).values())
    lists += list((data.get("dependency-groups") or {}).values())
    notes = []
    for spec, name in wanted.items():
        version = _version_of(spec)
        if version is None:
            continue
        for listed in (e for group in lists for e in group if isinstance(e, str)):
            try:
                req = Requirement(listed)
                new = Version(version)
            except (InvalidRequirement, InvalidVersion):
                continue
            if canonicalize_name(req.name) != name or req.specifier.contains(
                    new, prereleases=True):
                continue
            extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
            marker = f" ; {req.marker}" if req.marker else ""
            replacement = f"{req.name}{extras}=={version}{marker}"
            for quote in ('"', "'"):
                if f"{quote}{listed}{quote}" in text:
                    line = text[:text.index(f"{quote}{listed}{quote}")].count("\n") + 1
                    text = text.replace(f"{quote}{listed}{quote}",
                                        f"{quote}{replacement}{quote}", 1)
                    notes.append(f"{shown}:{line} requires {listed}: proposed with "
                                 f"{replacement} there (as a bot's pull request edits it)")
                    break
    return text, notes


# ------------------------------------------------------------------ a pylock's own command

def _header_command(text: str) -> str | None:
    """The `uv pip compile ...` command a pylock's header names, as written."""
    for line in text.splitlines()[:10]:
        found = re.match(r"#\s+(uv pip compile .*)$", line)
        if found:
            return found.group(1).strip()
        if line.strip() and not line.startswith("#"):
            break
    return None


# Options of `uv pip compile` that say what is resolved (and how it is written), with whether
# each takes a value: what a proposal keeps of the header's command.
_SCOPE = {"--universal": False, "--python-version": True, "--python-platform": True,
          "--index-url": True, "--extra-index-url": True, "--default-index": True,
          "--index": True, "--find-links": True, "--no-index": False, "--group": True,
          "--extra": True, "--all-extras": False, "--no-deps": False, "--generate-hashes": False,
          "--emit-index-url": False, "--index-strategy": True, "--prerelease": True,
          "--resolution": True, "--torch-backend": True, "-i": True, "-f": True}


def _scope_args(header: str | None) -> list[str]:
    if not header:
        return []
    try:
        tokens = shlex.split(header)[3:]
    except ValueError:
        return []
    kept: list[str] = []
    while tokens:
        token = tokens.pop(0)
        name = token.split("=", 1)[0]
        if name in _SCOPE:
            kept.append(token)
            if _SCOPE[name] and "=" not in token and tokens:
                kept.append(tokens.pop(0))
    return kept


def _header_input(header: str | None, lock: Path) -> Path | None:
    """The input file the header's command compiles (relative to the lock's folder)."""
    if not header:
        return None
    try:
        tokens = shlex.split(header)[3:]
    except ValueError:
        return None
    takes_value = {n for n, v in _SCOPE.items() if v} | {"-o", "--output-file", "--python",
                                                         "-p", "--custom-compile-command",
                                                         "-c", "--constraint", "--override",
                                                         "-r", "--requirement"}
    while tokens:
        token = tokens.pop(0)
        if token.startswith("-"):
            if token in takes_value and tokens:
                tokens.pop(0)
            continue
        return lock.parent / token
    return None


def _blocked_notes(source: Path, wanted: dict[str, str]) -> list[str]:
    """For a pylock's input: the lines that rule an exact upgrade out, as notes (uv's
    --override states the upgrade over them)."""
    if source.suffix == ".toml":
        return _relax_pyproject(source.read_text(encoding="utf-8"), wanted,
                                display_path(source))[1]
    notes = []
    inputs = read_requirements_input(source)
    for spec, name in wanted.items():
        version = _version_of(spec)
        if version is None:
            continue
        for line in inputs.requirements(name):
            assert line.requirement is not None
            if not line.requirement.specifier.contains(Version(version), prereleases=True):
                notes.append(f"{line.where} requires {line.requirement}: proposed with "
                             f"{spec} over it (uv --override)")
    return notes
