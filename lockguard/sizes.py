"""Sizes as a user writes them in the configuration ("512MiB", "8GiB", "1.5 GB", 2147483648)
and as lockguard says them back ("512 MiB", "8 GiB", "1.46 GiB")."""

from __future__ import annotations

import re

UNITS = {"": 1, "b": 1,
         "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
         "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12}
SIZE_RULE = ('an integer of bytes or a size with a unit, such as "512MiB" or "8GiB" (KiB, MiB, '
             'GiB, TiB; kB, MB, GB, TB)')
_SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([A-Za-z]*)\s*")


def parse_size(text: str) -> int | None:
    """Bytes of a size written with a unit (case-insensitive) or none; None when `text` is not
    a size."""
    match = _SIZE.fullmatch(text)
    if match is None or match.group(2).lower() not in UNITS:
        return None
    return int(float(match.group(1)) * UNITS[match.group(2).lower()])


def format_size(size: float) -> str:
    """A size in the largest binary unit it fills, to three significant figures: '512 MiB',
    '8 GiB', '1.46 GiB', '900 B'."""
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(size) >= scale:
            return f"{size / scale:.3g} {unit}"
    return f"{size:.0f} B"
