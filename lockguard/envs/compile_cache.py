"""Which venvs share their compilers' caches.

inductor, triton and XLA key each entry of their caches by what they compile (the traced graph,
a kernel's source, the compile options) and by their own build (torch hashes its own sources,
jax names its jaxlib), but not by every package their code runs on: inductor generates code
with sympy, which is in no key of its. So two venvs may share one cache when their compilers
and everything those require are pinned alike: the distributions of the frameworks whose
compilers keep a cache (torch, jax) and the closure of their Requires-Dist within the lock (the
extras they ask for included, markers evaluated for the venv's interpreter), each pin by
version, marker and hashes, on the same interpreter. What else differs between them (a layer
package, a harmless bump, torchvision) reaches a compiler through the graph it traces, which is
in the compiler's key: except for torch's autograd cache, keyed by the graph before autograd
expands its calls (a custom op's backward from another package, say), which a shared cache
turns off (`compile_cache_env`).

Only a bisection's mixes share (backend_for's `share_compile_caches`): they then compile warm
from the first environment's cache, where each compiled cold before. A training writes the
cache it runs with (its compilers fill it as it runs, inside the sandbox), so a cache the two
sides of an A/B shared would let the candidate's code plant the kernels the baseline then runs:
everywhere else each venv keeps its own. A lock without hashes (a version does not fix its
files), a METADATA that cannot be read, or a lock that pins no such framework keeps a cache of
its own venv too.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from packaging.markers import InvalidMarker, Marker
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name

from lockguard.envs.installed import (
    applies, distributions, marker_environment, python_version, requires, site_packages,
)
from lockguard.locks.model import FRAMEWORK_DISTS, Lock

FORMAT = 1  # in the key: what the closure holds; raise it when that changes
COMPILERS = ("torch", "jax")  # the frameworks whose compilers keep a cache (compile_cache_env)


def compile_cache_dir(root: Path, venv: Path, venv_key: str, lock: Lock,
                      tag: str, *, share: bool = False) -> tuple[Path, bool]:
    """The compilers' cache directory for the ready venv at `venv` (key `venv_key`, interpreter
    tag `tag`) under `root`, and whether venvs share it (whose compilers are pinned alike,
    where `share`); else the venv's own."""
    closure = compiler_closure(venv, lock) if share else None
    pins = [pin for name in sorted(closure or ()) for pin in lock.by_name[name]]
    if not pins or not all(pin.hashes for pin in pins):
        return root / f"{venv_key}.compile-cache", False
    document = [FORMAT, tag, [[p.name, p.version, p.marker, list(p.hashes)] for p in pins]]
    key = hashlib.sha256(json.dumps(document).encode()).hexdigest()[:20]
    return root / f"compilers-{key}.compile-cache", True


def compiler_closure(venv: Path, lock: Lock) -> set[str] | None:
    """The canonical names of the lock's pins that its compiling frameworks are or require,
    directly or through one another (with the extras asked for), by the METADATA installed in
    `venv`; None when that cannot be told (a METADATA unread, a requirement unparsed, a pin
    the venv lacks although its marker holds)."""
    site = site_packages(venv)
    if site is None:
        return None
    environment = marker_environment(python_version(site))
    installed = distributions(site)
    to_visit = [(name, tuple(sorted({e for pin in lock.by_name[name] for e in pin.extras})))
                for fw in COMPILERS for name in FRAMEWORK_DISTS[fw] if name in lock.by_name]
    closure: set[str] = set()
    seen: set[tuple[str, tuple[str, ...]]] = set()
    while to_visit:
        name, extras = to_visit.pop()
        if (name, extras) in seen or name not in lock.by_name:
            continue  # a name the lock does not pin is not the venv's to share
        seen.add((name, extras))
        closure.add(name)
        if name not in installed:
            if any(_holds(pin.marker, environment) for pin in lock.by_name[name]):
                return None
            continue  # its marker left it out here: it requires nothing
        required = requires(installed[name][1])
        if required is None:
            return None
        for text in required:
            try:
                requirement = Requirement(text)
            except InvalidRequirement:
                return None
            if applies(requirement, environment, extras):
                to_visit.append((canonicalize_name(requirement.name),
                                 tuple(sorted(canonicalize_name(e) for e in requirement.extras))))
    return closure


def _holds(marker: str | None, environment: dict[str, str]) -> bool:
    """Whether a pin's marker holds for the venv's interpreter (no marker: always)."""
    if marker is None:
        return True
    try:
        return Marker(marker).evaluate(environment)
    except InvalidMarker:
        return True
