"""The one lock parser: `parse_lock` / `parse_lock_text` turn a lock into a `Lock` of `Pin`s,
whichever of the four formats it is in (lockguard.locks.formats tells them apart by file name,
else by content): requirements text here, pylock.toml, uv.lock and poetry.lock by their readers
beside this module (pylock, uvlock, poetry), each narrowed to the platform the environments are
built for (lockguard.locks.target).

Requirements text is read here: anything that does not pin one exact version (ranges, URLs,
editables, includes) is refused with a one-line `LockError` that names the file and line.

Whatever else in lockguard needs the pins of a lock text calls these; nothing else reads
requirement lines. Beside them: `lock_writer`, which resolver a lock's header names, and
`read_requirements_input`, the lenient reader of a requirements.in (and the files it
includes) that the resolver module consults before a resolve. The only I/O is `parse_lock`
reading the file it is given (through files.read_bytes) and `read_requirements_input` reading
the input and its includes.
"""

import os
import re
import shlex
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import VERSION_PATTERN

from lockguard.errors import quote
from lockguard.files import ReadError, in_system_tree, read_bytes
from lockguard.locks.formats import lock_format
from lockguard.locks.model import Lock, LockError, LockFormat, LockOptions, Pin, bulk
from lockguard.locks.poetry import parse_poetry_lock
from lockguard.locks.pylock import parse_pylock
from lockguard.locks.target import Target, host_target
from lockguard.locks.uvlock import parse_uv_lock


# The largest lock read: a resolved tensorflow stack with hashes is 40 KiB as requirements
# text; a uv.lock of a torch project, every platform's wheels listed, about 1 MiB.
MAX_LOCK_BYTES = 16 << 20


def parse_lock(path: Path, target: Target | None = None) -> Lock:
    """Read and parse a lock file; `str(path)` becomes `Lock.source` and names it in errors.
    Only a regular file is read (a FIFO, a device, a directory is named for what it is).
    `target`: the platform a multi-platform lock is narrowed to (default: this interpreter)."""
    source = str(path)
    real = os.path.realpath(path)
    if in_system_tree(real) and os.path.isfile(real):
        # /proc/self/environ is a regular file, and its first line lockguard's secrets.
        raise LockError(source, None, f"leads to {real}, which holds no lock: refused")
    try:
        data = read_bytes(Path(path), "lock file", MAX_LOCK_BYTES)
        text = data.decode("utf-8-sig")  # -sig: a BOM is not part of line 1
    except ReadError as exc:
        raise LockError(source, None, exc.reason) from None
    except UnicodeDecodeError:
        raise LockError(source, None, "the lock is not UTF-8 text") from None
    return parse_lock_text(text, source, target)


def parse_lock_text(text: str, source: str, target: Target | None = None, *,
                    name: str | None = None, format: LockFormat | None = None) -> Lock:
    """Parse the text of a lock. `source` names it in errors and becomes `Lock.source`; its
    format is `format`, else what its file name (`name`, default `source`) or content says.
    `target`: the platform a multi-platform lock is narrowed to (default: this interpreter)."""
    kind = format or lock_format(text, name or source)
    with bulk():
        return _parse_text(text, source, kind, target)


def _parse_text(text: str, source: str, kind: LockFormat, target: Target | None) -> Lock:
    if kind == "requirements.txt":
        return _parse_requirements(text, source)
    target = target or host_target()  # (computing this interpreter's tags costs: TOML only)
    if kind == "pylock.toml":
        return parse_pylock(text, source, target)
    if kind == "uv.lock":
        return parse_uv_lock(text, source, target)

    return parse_poetry_lock(text, source, target)


def _parse_requirements(text: str, source: str) -> Lock:
    """Parse requirements text (pip-compile's, uv pip compile's)."""
    pins: list[Pin] = []
    # option name -> [(value, line)], for the options LockOptions keeps apart
    options: dict[str, list[tuple[str, int]]] = {
        "index-url": [], "extra-index-url": [], "find-links": []
    }
    other: list[str] = []
    lines: list[tuple[str, str, int]] = []
    for number, line in _logical_lines(text):
        if line.startswith("-"):
            tokens = _shlex_split(line, source, number)
            for name, value in _parse_options(tokens, source, number):
                _refuse_non_file_option(name, value, source, number)
                if name in options:
                    options[name].append((value or "", number))
                    lines.append((name, value or "", number))
                else:
                    other.append(f"--{name}={value}" if value is not None else f"--{name}")
                    lines.append(("other", other[-1], number))
        else:
            plain = _PLAIN_LINE.fullmatch(line)
            pins.append(_plain_pin(plain, number) if plain is not None
                        else _parse_requirement(line, source, number))

    if len(options["index-url"]) > 1:
        # pip would silently use the last one; a lock should not leave that to chance.
        (_, first), (_, again) = options["index-url"][:2]
        raise LockError(source, again, f"--index-url is given again (first on line {first})")
    if not pins:
        raise LockError(source, None, "the lock pins no packages")
    _check_duplicates(pins, source)
    _check_hashes_everywhere(pins, source)
    return Lock(
        source=source,
        pins=tuple(pins),
        options=LockOptions(
            index_url=options["index-url"][0][0] if options["index-url"] else None,
            extra_index_urls=tuple(url for url, _ in options["extra-index-url"]),
            find_links=tuple(link for link, _ in options["find-links"]),
            other_options=tuple(sorted(other)),
            lines=tuple(lines),
        ),
    )


# pip's comment rule: '#' at the start of a line or after whitespace ("pkg#egg=" is not one).
_COMMENT = re.compile(r"(^|\s+)#.*$")


def _logical_lines(text: str) -> Iterator[tuple[int, str]]:
    """Yield (first physical line number, text without comments) per non-empty logical line
    (see _logical_spans)."""
    for first, _last, line in _logical_spans(text):
        yield first, line


def _logical_spans(text: str) -> Iterator[tuple[int, int, str]]:
    """Yield (first, last physical line number, text without comments) per non-empty logical
    line.

    Joins `\\`-continued lines exactly as pip does, so that what parses here is what pip
    installs: the backslash must be the last character of the raw line, the pieces are glued
    without adding spaces, and a comment-only line ends a continuation (pip-compile writes its
    `# via` block right after the last `--hash` line).
    """
    pending: list[str] = []
    start = 0
    number = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        # (what _COMMENT.match finds at the start: '#' first, or after whitespace)
        comment_only = raw.lstrip().startswith("#")
        if not pending:
            if comment_only or not raw:
                continue  # (the `# via` lines of a pip-compile lock: a third of them)
            if raw.endswith("\\"):
                start = number
                pending.append(raw[:-1])
                continue
            line, first = raw, number
        elif raw.endswith("\\") and not comment_only:
            pending.append(raw[:-1])
            continue
        else:
            pending.append(" " + raw if comment_only else raw)
            line, first = "".join(pending), start
            pending = []
        line = (_COMMENT.sub("", line) if "#" in line else line).strip()
        if line:
            yield first, number, line
    if pending:  # the file ends in a backslash
        line = _COMMENT.sub("", "".join(pending)).strip()
        if line:
            yield start, number, line


def _shlex_split(text: str, source: str, number: int) -> list[str]:
    """Split option text like pip does (shell quoting), as a LockError on bad quoting."""
    if not _QUOTING.search(text):
        # No quote and no escape: shell splitting is whitespace splitting, and shlex costs
        # sixty times as much (most of parsing a 100,000-pin lock).
        return text.split()
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise LockError(source, number, f"cannot split {quote(text)}: {exc}") from None


# Options a lock may carry on their own lines, and whether each takes a value.
_FILE_OPTIONS = {
    "index-url": True,
    "extra-index-url": True,
    "find-links": True,
    "trusted-host": True,
    "no-binary": True,
    "only-binary": True,
    "prefer-binary": False,
    "pre": False,
    "no-index": False,
    "require-hashes": False,
}
# Options recognised only to be refused with a precise message (all take a value), and the
# one option a requirement line may carry.
_REFUSED_OPTIONS = ("requirement", "constraint", "editable")
_TAKES_VALUE = {n for n, takes in _FILE_OPTIONS.items() if takes} | {*_REFUSED_OPTIONS, "hash"}
_SHORT_OPTIONS = {"i": "index-url", "f": "find-links", "r": "requirement", "c": "constraint",
                  "e": "editable"}


def _parse_options(tokens: list[str], source: str, number: int) -> list[tuple[str, str | None]]:
    """Turn option tokens into (long name, value) pairs: `-i URL`, `-iURL`, `--hash=x`, `--hash x`.

    Unknown options are refused here: pip would either reject them or act on them in ways a
    lock cannot record.
    """
    parsed: list[tuple[str, str | None]] = []
    rest = list(tokens)
    while rest:
        token = rest.pop(0)
        value: str | None
        if token.startswith("--"):
            name, has_value, value = token[2:].partition("=")
            if not has_value:
                value = None
        elif token.startswith("-") and token[1:2] in _SHORT_OPTIONS:
            name, value = _SHORT_OPTIONS[token[1]], token[2:] or None
        elif token.startswith("-"):
            raise LockError(source, number, f"unsupported option {quote(token)} in a lock")
        else:
            raise LockError(source, number, f"unexpected {quote(token)} (options start with '-')")
        if name not in _FILE_OPTIONS and name not in _TAKES_VALUE:
            raise LockError(source, number, f"unsupported option '--{name}' in a lock")
        if name not in _TAKES_VALUE and value is not None:
            raise LockError(source, number, f"--{name} takes no value")
        if name in _TAKES_VALUE and value is None:
            if not rest:
                raise LockError(source, number, f"--{name} needs a value")
            value = rest.pop(0)
        parsed.append((name, value))
    return parsed


def _refuse_non_file_option(name: str, value: str | None, source: str, number: int) -> None:
    """Explain why an option line that pip would accept cannot be part of a lock."""
    if name in ("requirement", "constraint"):
        flag = "-r" if name == "requirement" else "-c"
        raise LockError(
            source, number, f"'{flag} {value}': includes are not supported in a lock; inline it"
        )
    if name == "editable":
        raise LockError(
            source, number,
            f"'-e {value}' is an editable requirement, which cannot be pinned by version",
        )
    if name == "hash":
        raise LockError(
            source, number,
            "--hash must follow its requirement on the same logical line "
            "(is a trailing '\\' missing, or followed by spaces?)",
        )


# A requirement that names an archive, a directory or a repository instead of a version.
_URL_OR_PATH = re.compile(
    r"://|^(git|hg|svn|bzr)\+|^[./~]|\.(whl|zip|tar\.gz|tgz|tar\.bz2)$", re.IGNORECASE
)
_HASH = re.compile(r"^(sha256:[0-9a-f]{64}|sha384:[0-9a-f]{96}|sha512:[0-9a-f]{128})$")


_QUOTING = re.compile(r"[\"'\\]")
# The pin nearly every lock line is: name[extras]==version, no marker. Read here at once; any
# other requirement goes to packaging's parser (a tenth of the time of parsing a big lock).
# The version must be PEP 440's, as packaging's `==` requires (its own pattern).
_SIMPLE_PIN = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?:\[(?P<extras>[A-Za-z0-9._,\s-]*)\])?==(?P<version>" + VERSION_PATTERN + r")",
    re.VERBOSE | re.IGNORECASE)


# The line nearly every lock is made of, pip-compile's and uv's: name==version (no extras, no
# marker) and plain lower-case sha256 --hash options, read in one match; any other line takes
# the general path below (a third of the time of parsing a 100,000-pin lock).
_PLAIN_LINE = re.compile(
    r"(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==(?P<version>(?i:" + VERSION_PATTERN
    + r"))(?P<hashes>(?:\s+--hash=sha256:[0-9a-f]{64})*)\s*", re.VERBOSE)
_CANONICAL = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")


def _plain_pin(match: re.Match[str], number: int) -> Pin:
    name = match["name"]
    tokens = match["hashes"].split()
    return Pin(name=name if _CANONICAL.fullmatch(name) else canonicalize_name(name),
               display_name=name, version=match["version"],
               hashes=(tokens[0][7:],) if len(tokens) == 1
               else tuple(sorted({token[7:] for token in tokens})), line=number)


def _parse_requirement(line: str, source: str, number: int) -> Pin:
    # As pip does: the requirement runs up to the first whitespace-separated token that starts
    # with '-'; what follows are its per-requirement options (here only --hash).
    tokens = line.split()
    split_at = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
    text = " ".join(tokens[:split_at])
    if text.endswith("\\"):
        raise LockError(
            source, number,
            "the '\\' is followed by spaces, so the line does not continue "
            "(pip needs the backslash last)",
        )
    simple = _SIMPLE_PIN.fullmatch(text)
    if simple is not None and "*" not in text:
        extras = simple.group("extras")
        return _pin(simple.group("name"), simple.group("version"),
                    [e.strip() for e in extras.split(",") if e.strip()] if extras else [],
                    None, tokens[split_at:], source, number)

    try:
        req = Requirement(text)
    except InvalidRequirement as exc:
        if _URL_OR_PATH.search(text):
            raise LockError(source, number, _not_pinnable(text)) from None
        first_line = str(exc).splitlines()[0] if str(exc) else "invalid requirement"
        raise LockError(source, number, f"cannot parse {quote(text)}: {first_line}") from None
    if req.url:
        raise LockError(source, number, _not_pinnable(text))

    specifiers = list(req.specifier)
    if len(specifiers) == 1 and specifiers[0].operator == "===":
        # Arbitrary equality pins a version *string* that need not follow PEP 440, so such a
        # pin could not be ordered in a diff or checked against a family rule: refused.
        raise LockError(
            source, number,
            f"{quote(text)} uses arbitrary equality (===), which lockguard cannot compare; "
            "pin it with ==",
        )
    if len(specifiers) != 1 or specifiers[0].operator != "==" or "*" in specifiers[0].version:
        raise LockError(source, number, f"{quote(text)} is not pinned (expected name==version)")

    return _pin(req.name, specifiers[0].version, req.extras,
                str(req.marker) if req.marker is not None else None, tokens[split_at:], source,
                number)


def _pin(name: str, version: str, extras: Iterable[str], marker: str | None,
         option_tokens: list[str], source: str, number: int) -> Pin:
    """A Pin of a parsed requirement and the --hash options that follow it."""
    hashes: set[str] = set()
    if all(t.startswith("--hash=") for t in option_tokens) \
            and not any(_QUOTING.search(t) for t in option_tokens):
        # What a lock line nearly always carries: plain --hash=... tokens.
        options = [("hash", t[7:]) for t in option_tokens]
    else:
        options = _parse_options(_shlex_split(" ".join(option_tokens), source, number), source,
                                 number)
    for option, value in options:
        if option != "hash":
            raise LockError(
                source, number, f"'--{option}' is not supported after a requirement in a lock"
            )
        digest = (value or "").lower()
        if not _HASH.match(digest):
            raise LockError(
                source, number, f"bad --hash value {quote(value)} (expected sha256:<64 hex digits>)"
            )
        hashes.add(digest)

    return Pin(
        name=canonicalize_name(name),
        display_name=name,
        version=version,
        extras=tuple(sorted(canonicalize_name(e) for e in extras)),
        marker=marker,
        hashes=tuple(sorted(hashes)),
        line=number,
    )


def _not_pinnable(text: str) -> str:
    return f"{quote(text)} is a URL, path or VCS requirement, which cannot be pinned by version"


def _check_duplicates(pins: list[Pin], source: str) -> None:
    """The same package twice is allowed only when markers choose between the pins.

    Two different markers may still overlap; proving they do not would mean solving the
    markers, so this only catches the sure cases: a pin without a marker, or the same marker.
    """
    seen: dict[str, list[Pin]] = {}
    for pin in pins:
        for earlier in seen.setdefault(pin.name, []):
            if earlier.marker is None or pin.marker is None or earlier.marker == pin.marker:
                raise LockError(
                    source, pin.line,
                    f"{pin.display_name} is pinned again (already on line {earlier.line}); "
                    "keep one pin, or give each an environment marker that selects it",
                )
        seen[pin.name].append(pin)


def _check_hashes_everywhere(pins: list[Pin], source: str) -> None:
    # pip switches to hash-checking mode as soon as one requirement has a hash, and then
    # refuses every requirement without one: catch that here, with the package named.
    if not any(pin.hashes for pin in pins):
        return
    for pin in pins:
        if not pin.hashes:
            raise LockError(
                source, pin.line,
                f"{quote(pin.requirement)} has no --hash although other pins have hashes "
                "(pip's hash-checking mode would refuse it)",
            )



# ---------------------------------------------------------------------------------------------
# Who wrote a lock: its header
# ---------------------------------------------------------------------------------------------

# lockguard's own line names the resolver that ran ("(uv 0.13.9, Python 3.11)"); locks written
# before the header followed the resolver carried pip-compile's header over a uv resolve, so
# this line is read first.
_LOCKGUARD_HEADER = re.compile(r"#\s*Written by lockguard \S+ \((?P<tool>[A-Za-z][\w.-]*)")


def lock_writer(text: str) -> str | None:
    """The resolver that wrote a lock, as the comment block at its top says: "pip-tools" for
    pip-compile's header ("autogenerated by pip-compile"), "uv" for uv's ("autogenerated by
    uv"), lockguard's own line over both; None when the header names neither (or there is none).
    """
    found = None
    for raw in text.lstrip("\ufeff").splitlines():
        line = raw.strip()
        if not line:
            continue
        if not line.startswith("#"):
            break  # the header is the comment block before the first option or pin
        mine = _LOCKGUARD_HEADER.match(line)
        if mine:
            tool = mine["tool"].lower()
            return tool if tool in ("pip-tools", "uv") else None
        if found is None and "autogenerated by pip-compile" in line:
            found = "pip-tools"
        elif found is None and "autogenerated by uv" in line:
            found = "uv"
    return found


def exported_by(text: str) -> str | None:
    """The `uv export ...` command a lock's header says wrote it (a pylock.toml or requirements
    text exported from a project's uv.lock), as written; None for any other lock."""
    for raw in text.lstrip("\ufeff").splitlines()[:10]:
        line = raw.strip()
        if line and not line.startswith("#"):
            break
        found = re.match(r"#\s+(uv export\b.*)$", line)
        if found:
            return found.group(1).strip()
    return None


# ---------------------------------------------------------------------------------------------
# Requirements inputs (requirements.in and the files it includes)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class InputLine:
    """One logical line of a requirements input, or of a file it includes."""

    path: Path  # the file as reached from the input (the input's path joined with includes)
    first: int  # physical lines, 1-based, inclusive
    last: int
    kind: Literal["requirement", "constraint", "option", "include"]
    text: str  # the logical line without its comment
    # requirement, constraint (a requirement line of a -c file): the requirement it states
    requirement: Requirement | None = None
    # option: its long name (index-url, extra-index-url, find-links, no-index);
    # include: "requirement" (-r) or "constraint" (-c)
    option: str | None = None
    value: str | None = None  # the option's value; an include's file as written
    target: Path | None = None  # an include's file (None when it is a URL)


@dataclass(frozen=True)
class RequirementsInput:
    """A requirements input as lockguard reads it before resolving (read_requirements_input)."""

    files: tuple[Path, ...]  # the input first, then each local file it includes, once
    lines: tuple[InputLine, ...]  # file by file, in order

    def requirements(self, name: str) -> list[InputLine]:
        """The requirement and constraint lines naming `name` (any spelling) whose marker holds
        for the interpreter running lockguard, the one the resolvers resolve for."""
        wanted = canonicalize_name(name)
        return [ln for ln in self.lines if ln.requirement is not None
                and canonicalize_name(ln.requirement.name) == wanted
                and _marker_holds(ln.requirement)]

    def options(self) -> list[InputLine]:
        """The installer option lines (index-url, extra-index-url, find-links, no-index) of the
        input and its includes, in file order: the resolvers are given these."""
        return [ln for ln in self.lines if ln.kind == "option"]


_INPUT_OPTIONS = ("index-url", "extra-index-url", "find-links", "no-index")


def read_requirements_input(path: Path) -> RequirementsInput:
    """Read a requirements input and the local files it includes (-r, -c, followed as pip
    follows them: relative to the including file), for what lockguard decides before a resolve.

    Lenient where parse_lock is strict: the resolver is the authority on an input's syntax, so
    a line this reader does not understand (an editable, a path, an unknown option, a file that
    cannot be read) is skipped here and left to the resolver to accept or refuse.
    """
    files: list[Path] = []
    lines: list[InputLine] = []
    seen: set[Path] = set()

    def visit(file: Path, constraint: bool) -> None:
        key = Path(os.path.abspath(file))
        if key in seen:
            return
        seen.add(key)
        files.append(file)
        try:
            text = file.read_text(encoding="utf-8-sig")
        except (OSError, UnicodeDecodeError):
            return
        for first, last, line in _logical_spans(text):
            if line.startswith("-"):
                try:
                    name, value = _input_option(shlex.split(line))
                except ValueError:
                    continue
                if name in ("requirement", "constraint") and value:
                    target = None if "://" in value else file.parent / value
                    lines.append(InputLine(file, first, last, "include", line, option=name,
                                           value=value, target=target))
                    if target is not None:
                        visit(target, name == "constraint")
                elif name in _INPUT_OPTIONS:
                    lines.append(InputLine(file, first, last, "option", line, option=name,
                                           value=value))
                continue
            tokens = line.split()
            split_at = next((i for i, t in enumerate(tokens) if t.startswith("-")), len(tokens))
            try:
                requirement = Requirement(" ".join(tokens[:split_at]))
            except InvalidRequirement:
                continue
            lines.append(InputLine(file, first, last,
                                   "constraint" if constraint else "requirement", line,
                                   requirement=requirement))

    visit(Path(path), False)
    return RequirementsInput(files=tuple(files), lines=tuple(lines))


def _input_option(tokens: list[str]) -> tuple[str, str | None]:
    """The first option of an input's option line as (long name, value); ("", None) for one
    this reader does not follow."""
    if not tokens:
        return "", None
    token, rest = tokens[0], tokens[1:]
    if token.startswith("--"):
        name, eq, value = token[2:].partition("=")
        if not eq:
            value = rest[0] if rest and name in _TAKES_VALUE else ""
        return name, value or None
    name = _SHORT_OPTIONS.get(token[1:2], "")
    value = token[2:] or (rest[0] if rest else "")
    return name, value or None


def _marker_holds(requirement: Requirement) -> bool:
    if requirement.marker is None:
        return True
    try:
        return requirement.marker.evaluate({"extra": ""})
    except Exception:  # an undefined variable: let the requirement count
        return True
