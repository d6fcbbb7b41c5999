"""`lockguard outdated`: newer releases of the framework-family packages a lock pins, from the
configured index (`pip index versions`, through the resolver's process runner).
"""

import sys
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Protocol

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from lockguard.locks.families import package_families
from lockguard.installers import tool_reason
from lockguard.locks.resolvers import SILENT, ResolveError, run_tool
from lockguard.names import FRAMEWORKS

INDEX_TIMEOUT_S = 120.0


class PinLike(Protocol):
    """What `outdated` needs of a pin: lockguard.locks.model.Pin fits."""

    @property
    def name(self) -> str:
        """The package's name in any spelling (canonicalised here): what the index is asked for."""

    @property
    def version(self) -> str:
        """The pinned version as written in the lock; newer releases are found against it."""


@dataclass(frozen=True)
class Release:
    """One release on the index newer than the pinned version; a pre-release never makes a
    package count as outdated."""

    version: str
    prerelease: bool  # alpha, beta, rc or dev release


@dataclass(frozen=True)
class OutdatedRow:
    """Newer releases of one pinned package, from the configured index."""

    name: str
    current: str
    families: tuple[str, ...]
    newer: tuple[Release, ...] = ()  # newer than `current`, newest first, pre-releases marked
    latest_stable: str | None = None  # newest final release on the index (may equal current)
    latest_in_series: str | None = None  # newest final release with current's major.minor
    latest_prerelease: str | None = None  # only when newer than latest_stable
    error: str | None = None  # this package could not be looked up (the others still were)

    @property
    def is_outdated(self) -> bool:
        """Whether the index has a newer final release; pre-releases alone do not count."""
        return any(not release.prerelease for release in self.newer)


def outdated(
    lock: object,
    families: Iterable[str] = FRAMEWORKS,
    index: str | None = None,
    *,
    include_nvidia: bool = False,
    timeout: float = INDEX_TIMEOUT_S,
) -> list[OutdatedRow]:
    """Newer releases of the framework-family packages pinned in `lock`, sorted by name.

    `lock` is a lockguard.locks.model.Lock or any iterable of pins (objects with `.name` and
    `.version`). Releases come from `pip index versions` so pip's own configuration (indexes,
    find-links, proxies, certificates) applies, or from `index` alone when given. Only versions
    installable on this interpreter and platform are listed, as pip would install them. nvidia-*
    wheels follow their framework and are skipped unless `include_nvidia`.
    """
    wanted = set(families)
    pins = list(getattr(lock, "pins", lock))  # type: ignore[call-overload]
    chosen: dict[str, tuple[PinLike, tuple[str, ...]]] = {}
    for pin in pins:
        name = canonicalize_name(pin.name)
        fams = tuple(f for f in package_families(name) if f in wanted)
        if not fams or (name.startswith("nvidia-") and not include_nvidia):
            continue
        if name in chosen:  # several pins under markers: report the oldest
            try:
                if Version(pin.version) >= Version(chosen[name][0].version):
                    continue
            except InvalidVersion:
                continue
        chosen[name] = (pin, fams)
    if not chosen:
        return []

    names = sorted(chosen)
    # Threads, not processes: each lookup waits on a pip subprocess and the network.
    with ThreadPoolExecutor(max_workers=min(4, len(names))) as pool:
        found = dict(zip(names, pool.map(lambda n: _index_versions(n, index, timeout), names)))

    rows = [_outdated_row(n, chosen[n][0], chosen[n][1], *found[n]) for n in names]
    if all(row.error for row in rows):
        raise ResolveError(f"could not look up any release on the index: {rows[0].error}")
    return rows


def _index_versions(name: str, index: str | None, timeout: float) -> tuple[list[str], str | None]:
    """All versions pip can see for `name` (pre-releases included), or an error line."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", name, "--pre"]
    if index:
        cmd += ["--index-url", index]
    try:
        proc = run_tool(cmd, timeout=timeout, what=f"pip index versions {name}")
    except ResolveError as exc:
        return [], str(exc)
    for line in proc.stdout.splitlines():
        if line.startswith("Available versions:"):
            versions = [v.strip() for v in line.split(":", 1)[1].split(",") if v.strip()]
            return versions, None
    reason = tool_reason(proc.stderr + "\n" + proc.stdout, SILENT)
    return [], f"{name}: {reason}"


def _outdated_row(name: str, pin: PinLike, fams: tuple[str, ...], versions: list[str],
                  error: str | None) -> OutdatedRow:
    if error is not None:
        return OutdatedRow(name=name, current=pin.version, families=fams, error=error)
    try:
        current = Version(Version(pin.version).public)  # 2.13.0+cpu compares as 2.13.0
    except InvalidVersion:
        return OutdatedRow(name=name, current=pin.version, families=fams,
                           error=f"{name}: cannot compare version {pin.version!r}")
    parsed = []
    for text in versions:
        try:
            parsed.append(Version(text))
        except InvalidVersion:
            continue  # legacy versions on old releases; never newer than a valid pin
    parsed.sort(reverse=True)
    stable = [v for v in parsed if not v.is_prerelease]
    series = [v for v in stable if (v.major, v.minor) == (current.major, current.minor)]
    pre = [v for v in parsed if v.is_prerelease and (not stable or v > stable[0])]
    newer = tuple(Release(str(v), v.is_prerelease) for v in parsed if v > current)
    return OutdatedRow(
        name=name,
        current=pin.version,
        families=fams,
        newer=newer,
        latest_stable=str(stable[0]) if stable else None,
        latest_in_series=str(series[0]) if series else None,
        latest_prerelease=str(pre[0]) if pre else None,
    )

