"""The lines of requirements.in that rule an upgrade out, and the copies a proposal resolves.

Exact pins in requirements.in
-----------------------------
An upgrade that a line of requirements.in (or a file it includes) rules out (`numpy==1.26.4`
against `-P numpy==2.0.2`) is found before any resolve. `lockguard lock` refuses it in one line
naming the file:line and the fix; `propose`, whose inputs are only read, resolves a copy of the
input in which that line asks for the upgrade instead (what a Dependabot or Renovate pull
request does to the .in), and says so (`relaxed_copy`). When a resolve fails, the exact pins of
the packages the resolver names are pointed at the same way (`explain_failure`).
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from lockguard import installers
from lockguard.files import display_path, write_text
from lockguard.installers import ToolError
from lockguard.locks.parser import InputLine, RequirementsInput
from lockguard.locks.resolvers.common import relpath, requirement_name
from lockguard.locks.writer import find_link


@dataclass(frozen=True)
class Block:
    """A requirement (or constraint) line of the inputs that rules out an upgrade asked for."""

    line: InputLine
    request: str  # the upgrade as asked: "numpy==2.0.2", "numpy"

    @property
    def where(self) -> str:
        """The blocking line as "file:line" (the file relative to the working directory), for
        the error that names it."""
        return f"{display_path(self.line.path)}:{self.line.first}"

    @property
    def _pinned(self) -> str | None:
        """The version the line pins exactly, if it does."""
        assert self.line.requirement is not None
        return exact_version(self.line.requirement.specifier)

    def _requirement_text(self, specifier: str) -> str:
        req = self.line.requirement
        assert req is not None
        extras = f"[{','.join(sorted(req.extras))}]" if req.extras else ""
        marker = f" ; {req.marker}" if req.marker is not None else ""
        return f"{req.name}{extras}{specifier}{marker}"

    def relaxed_line(self) -> str:
        """The line as the proposal reads it: the upgrade's specifier in place of the line's."""
        return self._requirement_text(str(Requirement(self.request).specifier))

    def refusal(self) -> str:
        """Why `lockguard lock` refuses the upgrade, and the fix, in one line."""
        req = self.line.requirement
        assert req is not None
        asked = Requirement(self.request)
        pinned = self._pinned
        verb = "pins" if pinned is not None else "requires"
        said = f"{self.where} {verb} {self._requirement_text(str(req.specifier))}"
        loosen = f"{req.name}>={pinned}" if pinned is not None else None
        if not asked.specifier:
            return (f"{said}, so -P {self.request} cannot move it: loosen it there "
                    f"(e.g. {loosen or req.name}) and lock again")
        fix = f"loosen it there (e.g. {loosen}) and lock again" if loosen else "widen it there"
        return (f"{said}, which rules out -P {self.request}: {fix}, or write "
                f"{self._requirement_text(str(asked.specifier))} there and lock without -P")

    def relaxed_note(self, where: str | None = None) -> str:
        """What the proposal read otherwise; `where` names the line (default: its path as
        reached from the input, and its line number)."""
        req = self.line.requirement
        assert req is not None
        verb = "pins" if self._pinned is not None else "requires"
        return (f"{where or self.where} {verb} "
                f"{self._requirement_text(str(req.specifier))}: proposed with "
                f"{self.relaxed_line()} there (write that in {self.line.path.name} to adopt "
                "the proposed lock)")


def blocking_lines(inputs: RequirementsInput, upgrades: Sequence[str]) -> list[Block]:
    """The requirement and constraint lines of `inputs` that rule out one of `upgrades`.

    A bare name (`-P numpy`) is ruled out by an exact pin: the upgrade could not move it. A
    specifier is ruled out by an exact pin outside it, and an exact request (`numpy==2.0.2`)
    by any specifier that excludes its version. Two ranges are left to the resolver.
    """
    blocks = []
    for spec in upgrades:
        requirement_name(spec)
        asked = Requirement(spec)
        asked_exact = exact_version(asked.specifier)
        for line in inputs.requirements(asked.name):
            assert line.requirement is not None
            have = line.requirement.specifier
            pinned = exact_version(have)
            if not asked.specifier:
                ruled_out = pinned is not None
            elif pinned is not None:
                ruled_out = not asked.specifier.contains(pinned, prereleases=True)
            elif asked_exact is not None:
                ruled_out = not have.contains(asked_exact, prereleases=True)
            else:
                ruled_out = False
            if ruled_out:
                blocks.append(Block(line, spec))
    return blocks


def exact_version(specifier) -> str | None:
    """The version a specifier set pins exactly (`==1.2`, `===1.2`, no wildcard), else None."""
    specs = list(specifier)
    if len(specs) == 1 and specs[0].operator in ("==", "===") and "*" not in specs[0].version:
        return specs[0].version
    return None


def relaxed_copy(inputs: RequirementsInput, blocks: Sequence[Block], into: Path,
                  workdir: Path) -> tuple[Path, dict[str, str]]:
    """Copies of the input and the local files it includes under `into`, each include pointing
    at its copy and each blocking line replaced by its relaxed form. Returns the input's copy
    and {path in the copies: the original's words (a file relative to `workdir`)}, to write the
    resolver's output back in the originals' names."""
    copies: dict[Path, Path] = {}
    for number, file in enumerate(inputs.files):
        copies[Path(os.path.abspath(file))] = into / str(number) / file.name
    replaced: dict[Path, dict[int, tuple[int, str]]] = {}
    for line in inputs.lines:
        if line.kind == "include" and line.target is not None:
            target = copies.get(Path(os.path.abspath(line.target)))
            if target is not None:
                flag = "-r" if line.option == "requirement" else "-c"
                replaced.setdefault(Path(os.path.abspath(line.path)), {})[line.first] = (
                    line.last, f"{flag} {shlex.quote(str(target))}")
    for block in blocks:
        line = block.line
        replaced.setdefault(Path(os.path.abspath(line.path)), {})[line.first] = (
            line.last, block.relaxed_line())
    names: dict[str, str] = {}
    for line in inputs.options():
        # A relative --find-links means what pip reads in it (writer.find_link: the folder
        # beside its file when there is one): the copy, elsewhere, names that folder. One
        # that is not there is left as written, read from the resolver's working directory
        # as pip reads it in the original.
        value = line.value or ""
        folder = (find_link(value, str(line.path)) if line.option == "find-links" and value
                  else value)
        if folder != value:
            replaced.setdefault(Path(os.path.abspath(line.path)), {})[line.first] = (
                line.last, f"--find-links {shlex.quote(folder)}")
            names[folder] = value
    for original, copy in copies.items():
        try:
            lines = original.read_text(encoding="utf-8-sig").splitlines()
        except (OSError, UnicodeDecodeError):
            continue  # the resolver names what it cannot read
        out, skip_to = [], 0
        for number, text in enumerate(lines, start=1):
            if number <= skip_to:
                continue
            change = replaced.get(original, {}).get(number)
            if change is not None:
                skip_to, text = change
            out.append(text)
        copy.parent.mkdir(parents=True, exist_ok=True)
        write_text(copy, "\n".join(out) + "\n")
        names[str(copy)] = relpath(original.resolve(), workdir)
    return copies[Path(os.path.abspath(inputs.files[0]))], names


def named_back(text: str, names: Mapping[str, str]) -> str:
    """`text` with each path of a copy (or a folder a copy names) in its original's words."""
    for copy in sorted(names, key=len, reverse=True):
        text = text.replace(copy, names[copy])
    return text


def once(body: str) -> str:
    """`body` with each option line once: a folder named in the copies of the input and on the
    command line reads the same once both are in the original's words."""
    seen: set[str] = set()
    out = []
    for line in body.splitlines(keepends=True):
        if line.startswith("-"):
            if line.rstrip() in seen:
                continue
            seen.add(line.rstrip())
        out.append(line)
    return "".join(out)


def explain_failure(reason: str, upgrades: Sequence[str], inputs: RequirementsInput,
                     relaxed: Sequence[Block]) -> str:
    """The resolver's reason, with the requests and the lines of requirements.in it involves."""
    words = reason.lower().replace("_", "-")

    def named(name: str) -> bool:
        return re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", words) is not None

    # pip applies upgrade requests as hidden constraints and then reports only the bare name
    # ("Cannot install six"): say which request that was.
    involved = [p for p in upgrades if named(requirement_name(p))]
    if involved:
        reason += f" (requested upgrade: {', '.join(involved)})"
    if not upgrades:
        return reason + _ignored_pip_indexes_note(reason)
    # The lines of requirements.in that hold a package the resolver names: exact pins of any,
    # and any specifier of an upgraded one.
    upgraded = {requirement_name(p) for p in upgrades}
    skip = {id(b.line) for b in relaxed}
    holding = []
    for line in inputs.lines:
        if line.requirement is None or id(line) in skip or not line.requirement.specifier:
            continue
        name = canonicalize_name(line.requirement.name)
        exact = exact_version(line.requirement.specifier) is not None
        if named(name) and (exact or name in upgraded):
            holding.append(f"{display_path(line.path)}:{line.first} "
                           f"{'pins' if exact else 'requires'} {line.requirement}")
    if holding:
        reason += (f"; {', '.join(holding[:3])}: loosen it there if the upgrade needs another "
                   "version")
    return reason + _ignored_pip_indexes_note(reason)


# A resolver's words for a package or a version it could not find, or an index it could not
# reach: what a missing index looks like.
_NOT_FOUND = re.compile(
    r"could not find a version|no matching distribution|versions: none|there is no version of|"
    r"not found in the package registry|was not found|failed to fetch|connect|network|"
    r"timed out|dns|certificate|no such file", re.I)


def _ignored_pip_indexes_note(reason: str) -> str:
    """A resolve that found nothing may have needed an index only pip's configuration names."""
    if not _NOT_FOUND.search(reason):
        return ""
    try:
        values = installers.pip_config()
    except ToolError:
        return ""
    ignored = [k for k in ("index-url", "extra-index-url", "find-links", "no-index")
               if values.get(k)]
    if not ignored:
        return ""
    return (f" (pip's configuration sets {', '.join(ignored)}, which lockguard does not "
            "resolve with: a lock's indexes come from the lock and requirements.in; add the "
            "index there if the lock needs it)")
