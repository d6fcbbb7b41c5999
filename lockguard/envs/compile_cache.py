"""Which venvs share their compilers' caches.

inductor, triton and XLA key each entry of their caches by what they compile (the traced graph,
a kernel's source, the compile options) and by their own build (torch hashes its own sources,
jax names its jaxlib), but not by every package their code runs on: inductor generates code
with sympy, which is in no key of its. So two environments may share one cache exactly when
their compilers and everything those require are pinned alike: the frameworks' distributions
(`FRAMEWORK_DISTS`, numpy aside: it compiles nothing) and the closure of their Requires-Dist
within the lock, each pin by version and hashes, on the same interpreter. What else differs
between them (a model library, a data loader, a harmless bump, torchvision) reaches a compiler
only through the graph it traces, which is in the compiler's own key.

A bisection's mixes and an A/B whose framework did not move then compile warm from the first
environment's cache, where each compiled cold before (`torch.mlp.compile`'s first step: 27-37 s
cold, 5-7 s warm on 2 cores). A closure holding a pin without hashes, whose content its version
does not fix, keeps a cache of its own environment, as every venv did before.

Requires-Dist is read from the installed distributions' METADATA (files, never code), every
requirement whatever its marker or extra: a larger closure only shares less.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lockguard.locks.model import FRAMEWORK_DISTS, Lock

SUFFIX = ".compile-cache"  # beside the venvs, which lockguard's cache tells apart by it
FORMAT = 1  # in the key: what the closure holds; raise it when that changes


def compile_cache_dir(root: Path, venv: Path, venv_key: str, lock: Lock, tag: str) -> Path:
    """The compilers' cache directory for the ready venv at `venv` (key `venv_key`, interpreter
    tag `tag`), under `root`: shared by every venv whose compilers are pinned alike, else (no
    compiler, a pin without hashes, a METADATA unread) the venv's own."""
    closure = compiler_closure(venv, lock)
    pins = [pin for name in sorted(closure or ()) for pin in lock.by_name[name]]
    if not pins or not all(pin.hashes for pin in pins):
        return root / f"{venv_key}{SUFFIX}"
    document = [FORMAT, tag, [[p.name, p.version, p.marker, list(p.hashes)] for p in pins]]
    key = hashlib.sha256(json.dumps(document).encode()).hexdigest()[:20]
    return root / f"compilers-{key}{SUFFIX}"


def compiler_closure(venv: Path, lock: Lock) -> set[str] | None:
    """The canonical names of the lock's pins that its frameworks are or require, directly or
    through one another, by the METADATA of the distributions installed in `venv`; None when a
    METADATA cannot be read or a requirement parsed (the closure is then unknown)."""
    to_visit = [name for fw, dists in FRAMEWORK_DISTS.items() if fw != "numpy"
                for name in dists if name in lock.by_name]
    installed = _dist_infos(venv) if to_visit else {}
    closure: set[str] = set()
    while to_visit:
        name = to_visit.pop()
        if name in closure or name not in lock.by_name:
            continue
        closure.add(name)
        if name not in installed:
            continue  # pinned but not installed (its marker left it out): requires nothing
        required = _requires(installed[name])
        if required is None:
            return None
        to_visit.extend(required)
    return closure


def _dist_infos(venv: Path) -> dict[str, Path]:
    """{canonical name: METADATA path} of the distributions installed in the venv."""
    return {canonicalize_name(info.name.removesuffix(".dist-info").rpartition("-")[0]):
            info / "METADATA"
            for info in venv.glob("lib/python*/site-packages/*.dist-info")}


def _requires(metadata: Path) -> list[str] | None:
    """The canonical names a distribution's METADATA requires (its header ends at the first
    empty line, the description follows), None if unreadable."""
    required = []
    try:
        with open(metadata, encoding="utf-8") as f:
            for line in f:
                if line in ("\n", "\r\n"):
                    break  # a folded field's blank lines hold spaces: only "" ends the header
                field, _, value = line.partition(":")
                if field.lower() == "requires-dist":
                    required.append(canonicalize_name(Requirement(value.strip()).name))
    except (OSError, UnicodeDecodeError, InvalidRequirement):
        return None
    return required
