"""How measured figures combine and read: medians over repeated runs, sizes in MiB, durations.
One phrasing for every verdict reason and every report."""

from __future__ import annotations

import statistics
from collections.abc import Iterable


def median(values: Iterable[float | int | None]) -> float | None:
    """The median of the figures that were measured; None when none was."""
    known = [value for value in values if value is not None]
    return statistics.median(known) if known else None


def mib(size: float | None, missing: str = "—") -> str:
    """A size in bytes as "12.3 MiB" (binary mebibytes, one decimal); `missing` (a dash unless
    told) when it was not measured."""
    return missing if size is None else f"{size / 2**20:.1f} MiB"


def seconds(value: float | None) -> str:
    """Milliseconds below a second, else seconds; the unit is chosen after rounding (0.9996 s
    is "1.00 s", never "1e+03 ms")."""
    if value is None:
        return "—"
    ms = float(f"{value * 1000:.3g}")
    return f"{ms:.3g} ms" if ms < 1000 else f"{value:.2f} s"
