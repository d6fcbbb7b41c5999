"""The one exception root and the one exit-code map.

Every failure lockguard expects (bad input, broken infrastructure) is a `LockguardError`: the
CLI prints its message as one line on stderr and exits 2. Anything else that escapes is a bug:
exit 3, a one-line summary and the path of a crash log holding the traceback. The modules below
the CLI raise subclasses that say which layer failed; none of them chooses an exit code.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable

EXIT_PASS = 0  # the gate passes
EXIT_FAILED = 1  # the gate fails: a verdict in fail_on, a broken family rule, nothing compared
EXIT_ERROR = 2  # bad input or broken infrastructure: one line naming the file/line or key
EXIT_INTERNAL = 3  # a bug in lockguard: one line and the path of a crash log
EXIT_INTERRUPTED = 130  # Ctrl-C / SIGTERM: 128 + SIGINT, as shells report it


class LockguardError(Exception):
    """An expected failure: the message is one line naming the file (and line) or the key."""


class UsageError(LockguardError):
    """A command-line option or argument the user must fix."""


# C0/C1 control characters and ANSI/OSC escape sequences: text from goldens, locks, pip and
# training logs reaches the terminal, and must not be able to drive it.
_ESCAPES = re.compile(r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b\[[0-?]*[ -/]*[@-~]|\x1b.?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


# Credentials in URLs: the user-info part (`https://user:password@host`, `https://TOKEN@host`)
# and query parameters whose names say they carry a secret (`?token=`, `&X-Amz-Signature=`).
# Index URLs in locks, pip's configuration and installer errors carry them; none may reach a
# terminal, a CI log or a report.
_USERINFO = re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)([^/?#\s]*)@")
_SECRET_PARAM = re.compile(
    r"(?i)([?&;][^=&;#\s]*(?:token|key|secret|password|passwd|pwd|auth|sig|signature|credential)"
    r"[^=&;#\s]*=)[^&;#\s]+")
REDACTED = "***"


def _userinfo(match: re.Match[str]) -> str:
    user, colon, _ = match.group(2).partition(":")
    # `user:password@` keeps the user (which account) and hides the password; a lone
    # `TOKEN@` is the secret itself.
    shown = f"{user}:{REDACTED}" if colon else REDACTED
    return f"{match.group(1)}{shown}@"


def redact(text: str) -> str:
    """`text` with the credentials of every URL in it replaced by ***: the password of
    `user:password@` (a lone `token@` wholly), and the values of query parameters named like a
    secret (token, key, secret, password, auth, signature, credential). The one redaction:
    `printable` applies it, so every error line and every rendered report does."""
    if "@" in text:
        text = _USERINFO.sub(_userinfo, text)
    if "=" in text:
        text = _SECRET_PARAM.sub(lambda m: m.group(1) + REDACTED, text)
    return text


def printable(text: str) -> str:
    """`text` as it may be shown: terminal escape sequences and control characters removed
    (newlines and tabs kept), credentials in URLs masked (`redact`)."""
    # A lone surrogate (a non-UTF-8 path in a traceback) cannot be encoded for any output.
    text = text.encode("utf-8", "replace").decode("utf-8")
    return redact(_CONTROL.sub("", _ESCAPES.sub("", text)))


# The most of a file's content an error quotes: enough to find the line, never a whole file a
# hostile link pointed at (/proc/self/environ, /etc/passwd) in a public CI log.
QUOTE_LIMIT = 48


def quote(text: str, limit: int = QUOTE_LIMIT) -> str:
    """`text` from a file, as an error quotes it: repr'd, cut to `limit` characters."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 2] + "…" + shown[0]


def one_line(text: str, limit: int = 2000) -> str:
    """`text` as a single printable line: what an error message on stderr may be."""
    line = " ".join(printable(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def closest(word: str, known: Iterable[str], n: int = 3) -> list[str]:
    """The few of `known` a mistyped `word` most likely meant (case aside), best first: those
    nearly as close as the closest, so that one clear fix is not drowned by distant ones."""
    names = list(dict.fromkeys(known))
    lowered = word.lower()
    scored = sorted(((difflib.SequenceMatcher(None, lowered, name.lower()).ratio(), name)
                     for name in names if name != word), key=lambda pair: -pair[0])
    if not scored or scored[0][0] < 0.6:
        return []
    best = scored[0][0]
    return [name for score, name in scored[:n] if score >= max(0.6, best - 0.05)]


def did_you_mean(word: str, known: Iterable[str],
                 spell: Callable[[str], str] = str) -> str:
    """"did you mean X?" (or "X or Y?") naming what `word` was most likely meant to be, each
    as `spell` shows it; "" when nothing in `known` is close. The one "did you mean" of every
    error line."""
    found = [spell(name) for name in closest(word, known)]
    if not found:
        return ""
    names = found[0] if len(found) == 1 else ", ".join(found[:-1]) + " or " + found[-1]
    return f"did you mean {names}?"


def last_line(text: str, *, prefixes: tuple[str, ...] = (), unindented: bool = False) -> str:
    """The last non-blank line of some output, where a tool usually says why it failed:
    stripped, without any of `prefixes` (git's "fatal:"), and with `unindented` skipping
    indented continuation lines; "" when there is none."""
    for line in reversed(text.splitlines()):
        if not line.strip() or (unindented and line[:1].isspace()):
            continue
        line = line.strip()
        for prefix in prefixes:
            line = line.removeprefix(prefix).strip()
        if line:
            return line
    return ""


def tail(text: str | None, lines: int = 15) -> str:
    """The last `lines` lines of some output: where a failure's reason usually is."""
    if not text:
        return ""
    return "\n".join(text.rstrip().splitlines()[-lines:])
