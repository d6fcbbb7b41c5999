"""The one writer of locks, the parser's inverse: a `Lock` as text an installer reads.

- `requirements_text`: requirements text (pip, uv pip), every pin with its extras, marker and
  hashes and every option, each on the line it had in the lock read (an installer's "line N"
  is the user's line N); `fresh=True` lays a lock out anew (a bisection mix).
- `pylock_text`: a pylock.toml (PEP 751) of the pins, each with the files (url and hashes) its
  lock named: what `uv pip install -r pylock.toml` installs, without resolving.
- `install_form`: which of the two installs a lock as its own installer would: a pylock.toml
  or a uv.lock (whose installable form is `uv export`'s pylock.toml) as pylock, requirements
  text and a poetry.lock (which names no file URLs: `poetry export` writes requirements) as
  requirements. `write_lock` writes a lock in that form.
- `option_args`: the lock's options as installer arguments; `wheel_request`: pins as the
  request of a wheel download.

A relative `--find-links` has one rule everywhere (`find_link`): pip's for a value in a
requirements file, the folder of that name beside the lock when it exists there, else the
value as written (relative to where the installer runs). Every copy of a lock an installer
reads lies elsewhere (in the env, in a wheelhouse's staging folder, in the bisection cache), so
each writes the folder it meant as an absolute path.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable
from typing import Literal

from lockguard import toml
from lockguard.locks.model import Lock, Pin

InstallForm = Literal["requirements.txt", "pylock.toml"]


def find_link(link: str, source: str) -> str:
    """A lock's `--find-links` value as it means it: a URL as is; a relative path that exists
    beside the lock (`source`) as that absolute path (pip looks there first); else as written."""
    if "://" in link or os.path.isabs(link):
        return link
    beside = os.path.join(os.path.dirname(os.path.abspath(source)), link)
    return beside if os.path.exists(beside) else link


def option_args(lock: Lock) -> list[str]:
    """The lock's options as pip (or uv pip) command-line arguments."""
    opts = lock.options
    args: list[str] = []
    if opts.index_url is not None:
        args += ["--index-url", opts.index_url]
    for url in opts.extra_index_urls:
        args += ["--extra-index-url", url]
    for link in opts.find_links:
        args += ["--find-links", find_link(link, lock.source)]
    return args + list(opts.other_options)


def install_form(lock: Lock) -> InstallForm:
    """The form a lock is installed in: pylock.toml when it names every file by URL with its
    hashes (a pylock.toml, a uv.lock), else requirements text."""
    if lock.format in ("pylock.toml", "uv.lock") and all(
            pin.files and all(f.url and f.hashes for f in pin.files) for pin in lock.pins):
        return "pylock.toml"
    return "requirements.txt"


def write_lock(lock: Lock, header: str | None = None) -> tuple[InstallForm, str]:
    """The lock in its install form, laid out anew: (form, text)."""
    form = install_form(lock)
    if form == "pylock.toml":
        return form, pylock_text(lock, header)
    return form, requirements_text(lock, fresh=True, header=header)


# ------------------------------------------------------------------------- requirements text

def requirements_text(lock: Lock, *, fresh: bool = False, header: str | None = None) -> str:
    """The lock as requirements text, made from the parsed Lock alone: every pin (extras,
    marker, hashes) and every option, which is what its lock_hash covers, so an environment
    is exactly what its cache key names.

    As read (default): each pin and option on its line of the lock read, so that an
    installer's "line N" is the user's line N. `fresh`: a new layout, options first, then the
    pins by name, each hash on a line of its own; `header` a comment line above it all."""
    opts = lock.options
    placed = [("index-url", u, f"--index-url {_quote(u)}") for u in [opts.index_url] if u]
    placed += [("extra-index-url", u, f"--extra-index-url {_quote(u)}")
               for u in opts.extra_index_urls]
    placed += [("find-links", link, f"--find-links {_quote(find_link(link, lock.source))}")
               for link in opts.find_links]
    placed += [("other", option, _quote(option)) for option in opts.other_options]
    if fresh:
        lines = [f"# {header}"] if header else []
        lines += [text for _, _, text in placed]
        lines += [_pin_text(pin, "\n    ") for pin in sorted(
            lock.pins, key=lambda p: (p.name, p.marker or ""))]
        return "".join(f"{line}\n" for line in lines)
    by_line: dict[int, list[str]] = {}
    for pin in lock.pins:
        by_line.setdefault(pin.line, []).append(_pin_text(pin, " "))
    # The options come from the fields lock_hash covers; `lines` only says where each one was.
    where: dict[tuple[str, str], list[int]] = {}
    for kind, value, number in opts.lines:
        where.setdefault((kind, value), []).append(number)
    top: list[str] = [f"# {header}"] if header else []
    for kind, value, text in placed:
        numbers = where.get((kind, value))
        if numbers:
            by_line.setdefault(numbers.pop(0), []).append(text)
        else:  # a Lock made without line numbers (a TOML lock's indexes)
            top.append(text)
    last = max(by_line)
    body = [" ".join(by_line.get(n, [])) for n in range(1, last + 1)]
    if top and body and not body[0]:
        # The first lines of the lock held no pin (a TOML lock's header): the options go there.
        body = body[len(top):] if all(not b for b in body[:len(top)]) else body
    return "".join(f"{line}\n" for line in top + body)


def _pin_text(pin: Pin, hash_separator: str) -> str:
    text = pin.requirement + (f" ; {pin.marker}" if pin.marker else "")
    if hash_separator == " ":
        return text + "".join(f" --hash={h}" for h in pin.hashes)
    return "".join([text] + [f" \\{hash_separator}--hash={h}" for h in pin.hashes])


def _quote(text: str) -> str:
    # Installers split option lines as a shell would; quoting a plain URL is left out, as
    # lockers write them (uv reads unquoted values).
    return shlex.quote(text) if re.search(r"[\s'\"\\]", text) else text


def wheel_request(pins: Iterable[Pin]) -> str:
    """Pins as requirements for a wheel download with --no-deps: name==version and hashes
    (extras add nothing without dependencies: their packages are pins of their own)."""
    return "".join(f"{p.display_name}=={p.version}"
                   + "".join(f" --hash={h}" for h in p.hashes) + "\n" for p in pins)


# --------------------------------------------------------------------------------- pylock.toml

def pylock_text(lock: Lock, header: str | None = None) -> str:
    """The lock as a pylock.toml (PEP 751, lock-version 1.0) that `uv pip install -r`
    installs: each pin with its index, marker (a narrowed lock has none) and files, written by
    a TOML library (toml.dumps), so any text in it round-trips."""
    packages = []
    for pin in sorted(lock.pins, key=lambda p: (p.name, p.marker or "")):
        if not pin.files or not all(f.url and f.hashes for f in pin.files):
            raise ValueError(f"{pin.requirement} names no file URLs: not writable as pylock")
        package: dict = {"name": pin.display_name, "version": pin.version}
        if pin.marker:
            package["marker"] = pin.marker
        if pin.index:
            package["index"] = pin.index
        sdists = [f for f in pin.files if not f.is_wheel]
        wheels = [f for f in pin.files if f.is_wheel]
        if wheels:
            package["wheels"] = [_file_table(f) for f in wheels]
        if sdists:
            package["sdist"] = _file_table(sdists[0])
        packages.append(package)
    document = {"lock-version": "1.0", "created-by": "lockguard", "packages": packages}
    return (toml.comment(header) if header else "") + toml.dumps(document)


def _file_table(f) -> dict:
    """A file of a pin as PEP 751 names it: its name, its URL (or a local path), its hashes."""
    place = "url" if "://" in (f.url or "") else "path"
    return {"name": f.name, place: f.url,
            "hashes": {algorithm: digest
                       for algorithm, _, digest in (h.partition(":") for h in f.hashes)}}


