"""Numerics: bitwise equality, ULP distance, and one series compared value by value
(`compare_series` → `SeriesDiff`), as torch.testing.assert_close does.
"""

import math
import struct
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict

from lockguard.compare.tolerance import Tolerance, normalise_dtype
from lockguard.results import JsonFloat


class SeriesDiff(BaseModel):
    """One series (losses, grad norms, outputs) compared value by value, as torch.testing does.

    Indexes count from 0; for losses and grad norms the index is the training step.
    """

    model_config = ConfigDict(defer_build=True)

    name: str
    size: int
    mismatched: int  # values beyond tolerance (in exact mode: values not bitwise equal)
    first_index: int | None  # first value beyond tolerance
    max_abs: JsonFloat  # greatest |new - old| over all values (inf when a NaN meets a number)
    max_abs_index: int | None  # None when no value differs by more than 0
    max_rel: JsonFloat  # greatest |new - old| / |old| (inf when old is 0 and new is not)
    max_rel_index: int | None
    max_ulp: int | None  # in the run's dtype; None when no pair could be measured (NaN)
    message: str  # torch.testing-style lines with the figures above



def bitwise_equal(a: float, b: float) -> bool:
    """Equal as stored: 0.0 and -0.0 differ, and NaN equals NaN (a repeated NaN is no change)."""
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)


def ulp_distance(a: float, b: float, dtype: str) -> int:
    """How many representable values of `dtype` lie between a and b (0.0 and -0.0: none).

    float32 goes through struct 'f', float64 'd', float16 'e'; bfloat16 is the top 16 bits of
    the float32. Other dtypes are measured as float32. NaN, or a value the dtype cannot hold,
    raises ValueError.
    """
    if math.isnan(a) or math.isnan(b):
        raise ValueError("ULP distance is undefined for NaN")
    kind = normalise_dtype(dtype)
    return abs(_ordered_bits(a, kind) - _ordered_bits(b, kind))


# (mantissa bits, least normal exponent) of each dtype ulp_at measures in
_FORMATS = {"float64": (52, -1022), "float32": (23, -126), "float16": (10, -14),
            "bfloat16": (7, -126)}


def ulp_at(magnitude: float, dtype: str) -> float:
    """The size of one ULP of `dtype` at `magnitude` (the gap above it; subnormals' below the
    least normal exponent). Other dtypes are measured as float32, as ulp_distance does."""
    bits, least = _FORMATS.get(normalise_dtype(dtype), _FORMATS["float32"])
    exponent = math.frexp(abs(magnitude))[1] - 1 if magnitude else least
    return 2.0 ** (max(exponent, least) - bits)


def _ordered_bits(x: float, kind: str) -> int:
    # Floats are sign-magnitude; mapping negative values to -(magnitude) puts every float of
    # the dtype on one integer line where neighbours are 1 apart and both zeros sit at 0.
    try:
        if kind == "float64":
            bits, width = struct.unpack("<Q", struct.pack("<d", x))[0], 64
        elif kind == "float16":
            bits, width = struct.unpack("<H", struct.pack("<e", x))[0], 16
        else:
            bits, width = struct.unpack("<I", struct.pack("<f", x))[0], 32
            if kind == "bfloat16":
                bits, width = bits >> 16, 16
    except (OverflowError, struct.error):
        raise ValueError(f"{x!r} is out of range for {kind}") from None
    sign = 1 << (width - 1)
    return -(bits & (sign - 1)) if bits & sign else bits


def first_difference(old: Sequence[float], new: Sequence[float]) -> int | None:
    """Index of the first value that is not bitwise equal; a length change counts; None if none."""
    for index, (a, b) in enumerate(zip(old, new)):
        if not bitwise_equal(a, b):
            return index
    if len(old) != len(new):
        return min(len(old), len(new))
    return None


# --------------------------------------------------------------------------------------------
# One series


def compare_series(
    name: str,
    old: Sequence[float],
    new: Sequence[float],
    tol: Tolerance,
    *,
    dtype: str = "float32",
) -> SeriesDiff:
    """Compare `new` against the baseline `old` value by value, like torch.testing.assert_close.

    A value passes when it is bitwise equal, or (unless tol.exact) when both are finite and
    |new - old| <= atol + rtol * |old|. Infinities must match exactly; NaN matches only NaN.
    `dtype` is the run's dtype, used for the ULP figure. The lengths must be equal.
    """
    if len(old) != len(new):
        raise ValueError(f"{name}: {len(old)} baseline values against {len(new)} candidate values")
    mismatched = 0
    first_index: int | None = None
    max_abs, max_abs_index = 0.0, None  # type: tuple[float, int | None]
    max_rel, max_rel_index = 0.0, None  # type: tuple[float, int | None]
    max_ulp, max_ulp_index = None, None  # type: tuple[int | None, int | None]
    first_nan: int | None = None  # first NaN facing a number, named in the message
    for index, (b, a) in enumerate(zip(old, new)):  # b: baseline, a: candidate
        if not (math.isnan(a) or math.isnan(b)):
            ulp = _ulp_or_none(a, b, dtype)
            if ulp is not None and (max_ulp is None or ulp > max_ulp):
                max_ulp, max_ulp_index = ulp, index
        if bitwise_equal(a, b):
            continue
        abs_diff, rel_diff = _differences(a, b)
        if abs_diff > max_abs:
            max_abs, max_abs_index = abs_diff, index
        if rel_diff > max_rel:
            max_rel, max_rel_index = rel_diff, index
        if math.isnan(a) or math.isnan(b):
            first_nan = index if first_nan is None else first_nan
        if not _close(a, b, tol):
            mismatched += 1
            first_index = index if first_index is None else first_index
    diff = SeriesDiff(
        name=name,
        size=len(old),
        mismatched=mismatched,
        first_index=first_index,
        max_abs=max_abs,
        max_abs_index=max_abs_index,
        max_rel=max_rel,
        max_rel_index=max_rel_index,
        max_ulp=max_ulp,
        message="",
    )
    diff.message = _series_message(diff, old, new, tol, dtype, max_ulp_index, first_nan)
    return diff


def _ulp_or_none(a: float, b: float, dtype: str) -> int | None:
    # Out of the dtype's range (a float64 value in a float16 run): no figure rather than a crash.
    try:
        return ulp_distance(a, b, dtype)
    except ValueError:
        return None


def _differences(a: float, b: float) -> tuple[float, float]:
    # Absolute and relative difference of a candidate value a against a baseline value b.
    if math.isnan(a) or math.isnan(b):
        return math.inf, math.inf  # a NaN where a number was (or the reverse) is as far as it gets
    abs_diff = abs(a - b)
    if abs_diff == 0.0:
        return 0.0, 0.0  # 0.0 against -0.0
    if b == 0.0 or math.isinf(b):
        return abs_diff, math.inf
    return abs_diff, abs_diff / abs(b)


def _close(a: float, b: float, tol: Tolerance) -> bool:
    if bitwise_equal(a, b):
        return True
    if tol.exact or not (math.isfinite(a) and math.isfinite(b)):
        return False
    return abs(a - b) <= tol.allowed(b)


def _series_message(
    diff: SeriesDiff,
    old: Sequence[float],
    new: Sequence[float],
    tol: Tolerance,
    dtype: str,
    max_ulp_index: int | None,
    first_nan: int | None,
) -> str:
    differing = sum(1 for b, a in zip(old, new) if not bitwise_equal(a, b))
    if differing == 0:
        return f"All {diff.size} values are bitwise equal."
    if diff.mismatched:
        share = diff.mismatched / diff.size
        lines = [f"Mismatched elements: {diff.mismatched} / {diff.size} ({share:.1%})"]
    else:  # never in exact mode, where every difference is a mismatch
        lines = [f"All {diff.size} values within tolerance; {differing} differ bitwise."]
    abs_allowed = "exact equality required" if tol.exact else f"up to {tol.atol} allowed"
    rel_allowed = "exact equality required" if tol.exact else f"up to {tol.rtol} allowed"
    if diff.max_abs_index is None:
        lines.append("The values differ only in the sign of zero.")
    else:
        lines.append(
            f"Greatest absolute difference: {diff.max_abs} at index {diff.max_abs_index}"
            f" ({abs_allowed})"
        )
        lines.append(
            f"Greatest relative difference: {diff.max_rel} at index {diff.max_rel_index}"
            f" ({rel_allowed})"
        )
    if diff.max_ulp is not None and diff.max_ulp > 0:
        lines.append(
            f"Greatest ULP difference: {diff.max_ulp} at index {max_ulp_index}"
            f" ({normalise_dtype(dtype)})"
        )
    if first_nan is not None:
        lines.append(
            f"NaN against a number at index {first_nan}:"
            f" baseline {old[first_nan]!r}, candidate {new[first_nan]!r}"
        )
    return "\n".join(lines)

