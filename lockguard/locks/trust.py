"""What a lock must carry before lockguard installs anything from it.

A lock pins versions; its hashes pin the files. A lock without them (`pip freeze` output, a
hand-written list) installs whatever file the index serves under that version today: a wheel
replaced on a mirror, or served by whoever sits between this machine and a plain-http index,
installs without a word. So, by default, before anything is built:

- a lock whose pins carry no `--hash` is refused, naming its first pin's line;
- a lock that names an `http://` index, extra index or find-links (not https, not a local
  path or file:// URL), or a `--trusted-host` (which turns off TLS checks for that host), is
  refused, naming the line; in a TOML lock, a package whose index or file URL is `http://`.

The same rules hold for every lock format: a TOML lock's hashes are its files' hashes.

A project that must install such a lock opts in with `allow_unhashed = true` /
`allow_insecure_index = true` in [tool.lockguard]; every report of a run then carries a
warning saying which lock and what (`warnings`). (A lock with hashes on some pins only is
refused by the parser: pip's hash-checking mode would refuse it anyway.)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from lockguard.errors import redact
from lockguard.locks.model import Lock, LockError

Kind = Literal["unhashed", "insecure_index"]
KEYS: dict[Kind, str] = {"unhashed": "allow_unhashed", "insecure_index": "allow_insecure_index"}
_URL_OPTIONS = ("index-url", "extra-index-url", "find-links")


@dataclass(frozen=True)
class Weakness:
    """One reason a lock cannot be trusted to install what it pins."""

    kind: Kind
    line: int | None  # in the lock, where the report and the error point
    what: str  # e.g. "numpy==2.0.2 has no --hash"


def weaknesses(lock: Lock) -> list[Weakness]:
    """Why installing `lock` would not be checked against what it pins, in line order."""
    found = []
    if lock.pins and not lock.has_hashes:
        first = min(lock.pins, key=lambda p: p.line)
        found.append(Weakness("unhashed", first.line,
                              f"{first.requirement} has no "
                              f"{'--hash' if lock.format == 'requirements.txt' else 'hash'}, nor "
                              "has any pin of the lock (an install takes whatever file the "
                              "index serves)"))
    for option, value, line in lock.options.lines:
        if option in _URL_OPTIONS and value[:7].lower() == "http://":
            found.append(Weakness("insecure_index", line,
                                  f"--{option} {redact(value)} is plain http (whoever is on the "
                                  "path can serve other files)"))
        elif option == "other" and value.startswith("--trusted-host"):
            host = value.partition("=")[2]
            found.append(Weakness("insecure_index", line,
                                  f"--trusted-host {host} turns off the TLS checks of that host"))
    # A TOML lock (pylock.toml, uv.lock, poetry.lock) names its indexes and file URLs in its
    # packages' tables, not on option lines: the first plain-http one of each package.
    for pin in lock.pins:
        url = next((u for u in (pin.index, *(f.url for f in pin.files))
                    if u and u[:7].lower() == "http://"), None)
        if url is not None:
            found.append(Weakness("insecure_index", pin.line,
                                  f"{pin.requirement} comes from {redact(url)}, plain http "
                                  "(whoever is on the path can serve other files)"))
    return sorted(found, key=lambda w: w.line or 0)


def require_trusted(lock: Lock, *, allow_unhashed: bool, allow_insecure_index: bool) -> None:
    """Refuse `lock` (LockError naming its file:line) unless every weakness it has is opted
    into. Called before anything is installed from a lock."""
    allowed = {"unhashed": allow_unhashed, "insecure_index": allow_insecure_index}
    for weakness in weaknesses(lock):
        if not allowed[weakness.kind]:
            fix = ("regenerate it with hashes (`lockguard lock`, `pip-compile "
                   "--generate-hashes`, `uv pip compile --generate-hashes`)"
                   if weakness.kind == "unhashed" else "use an https index")
            raise LockError(lock.source, weakness.line,
                            f"{weakness.what}: not installed; {fix}, or set "
                            f"{KEYS[weakness.kind]} = true in [tool.lockguard] to install it "
                            "anyway")


def warnings(lock: Lock, name: str, *, allow_unhashed: bool,
             allow_insecure_index: bool) -> list[str]:
    """What every report of a run says of `lock` (shown as `name`) when it was let through by
    an opt-in: one warning per weakness allowed (one a run refused never gets this far)."""
    allowed = {"unhashed": allow_unhashed, "insecure_index": allow_insecure_index}
    return [f"warning: {name}" + (f":{w.line}" if w.line is not None else "")
            + f": {w.what}; allowed by {KEYS[w.kind]} = true"
            for w in weaknesses(lock) if allowed[w.kind]]
