"""Compare a scenario's candidate run(s) with its baseline run(s) and give one verdict.

Everything here is a pure function of RunResult objects and a Policy: no I/O, no clock, no
framework import. The CLI feeds it runs, the report layer serialises what comes back with
``model_dump(mode="json")``.

Reading order: the verdicts and their precedence, tolerances and policy, the result models,
then the building blocks (ULP distance, one series, compile diagnostics) and finally
``compare_runs``, which puts them together, and the gate.
"""

import math
import re
import statistics
import struct
from collections.abc import Iterable, Sequence
from typing import Annotated, Literal

from pydantic import BaseModel, Field, PlainSerializer, computed_field, field_serializer

from lockguard.errors import tail
from lockguard.names import Verdict
from lockguard.results import CompileDiagnostics, RunResult, Status

# --------------------------------------------------------------------------------------------
# Verdicts


# A gate passes only what it compared: `incomparable` fails too (a golden of another scenario,
# other steps, a broken baseline are no evidence that nothing changed).
DEFAULT_FAIL_ON = frozenset(
    {Verdict.drift, Verdict.compile_fallback, Verdict.device_fallback, Verdict.broken,
     Verdict.incomparable}
)

# When several findings apply, the verdict is the first of them in this order. A broken run
# says nothing about numerics; a run on the wrong device makes its numerics meaningless; and
# so on down to "identical", which only holds when nothing else was found.
PRECEDENCE: tuple[Verdict, ...] = (
    Verdict.broken,
    Verdict.device_fallback,
    Verdict.incomparable,
    Verdict.new,
    Verdict.compile_fallback,
    Verdict.drift,
    Verdict.other_hardware,
    Verdict.slower,
    Verdict.within_tolerance,
    Verdict.identical,
    Verdict.skipped,
)
_RANK = {verdict: rank for rank, verdict in enumerate(PRECEDENCE)}


def _json_float(value: float) -> float | str:
    # Differences can be inf or nan (a NaN where a number was expected). Strict JSON has no
    # spelling for those, so they are written as the strings "inf" / "nan", which pydantic
    # reads back as floats.
    return value if math.isfinite(value) else str(value)


# A float that serialises to strict JSON even when it is not finite.
JsonFloat = Annotated[float, PlainSerializer(_json_float, when_used="json")]


# --------------------------------------------------------------------------------------------
# Tolerances and policy


class Tolerance(BaseModel):
    """Allowed difference per value: |new - old| <= atol + rtol * |old|, as torch.testing."""

    rtol: float = Field(ge=0)
    atol: float = Field(ge=0)
    exact: bool = False  # bitwise equality required; rtol/atol are then ignored

    def allowed(self, baseline: float) -> float:
        """The greatest |new - old| allowed against the baseline value `baseline` (0 in exact
        mode): the one formula the verdict uses and the HTML report draws as its band."""
        return 0.0 if self.exact else self.atol + self.rtol * abs(baseline)


# torch.testing.assert_close's defaults (rtol, atol). Users know these numbers already.
_DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-5),
    "bfloat16": (1.6e-2, 1e-5),
    "float32": (1.3e-6, 1e-5),
    "float64": (1e-7, 1e-7),
}

_DTYPE_ALIASES = {
    "half": "float16",
    "fp16": "float16",
    "f16": "float16",
    "bf16": "bfloat16",
    "float": "float32",  # torch.float is float32
    "fp32": "float32",
    "f32": "float32",
    "single": "float32",
    "double": "float64",
    "fp64": "float64",
    "f64": "float64",
}


def normalise_dtype(dtype: str) -> str:
    """The canonical float dtype name for `dtype` ("torch.bfloat16" -> "bfloat16").

    Anything unrecognised counts as float32: it is the harness default, and its tolerance is
    a middle ground rather than a silent "anything goes".
    """
    name = dtype.strip().lower().rsplit(".", 1)[-1]  # torch.float32, tf.float32, jnp.float32
    name = _DTYPE_ALIASES.get(name, name)
    return name if name in _DEFAULT_TOLERANCES else "float32"


def default_tolerance(dtype: str) -> Tolerance:
    """torch.testing.assert_close's default tolerance for `dtype`; unknown dtypes get float32's."""
    rtol, atol = _DEFAULT_TOLERANCES[normalise_dtype(dtype)]
    return Tolerance(rtol=rtol, atol=atol)


class Policy(BaseModel):
    exact: bool = False  # bitwise equality required
    tolerance: Tolerance | None = None  # override of the per-dtype default
    fail_on: frozenset[Verdict] = DEFAULT_FAIL_ON
    slower_ratio: float = Field(default=1.30, gt=0)  # candidate/baseline step median above this
    # Steps this short are mostly interpreter overhead and scheduler noise on a shared machine
    # (measured here: sub-millisecond mlp steps "slowed" up to 6× between identical runs), so
    # they never make a `slower` verdict; the ratio is still reported.
    slower_min_step_s: float = Field(default=0.002, ge=0)
    fail_on_improvement: bool = False  # fewer graph breaks etc. fails the gate when True

    @field_serializer("fail_on")
    def _fail_on_in_order(self, fail_on: frozenset[Verdict]) -> list[str]:
        # A set has no stable order; reports should not change from one run to the next.
        return [verdict.value for verdict in PRECEDENCE if verdict in fail_on]


# --------------------------------------------------------------------------------------------
# Result models


class SeriesDiff(BaseModel):
    """One series (losses, grad norms, outputs) compared value by value, as torch.testing does.

    Indexes count from 0; for losses and grad norms the index is the training step.
    """

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


class CountChange(BaseModel):
    old: int
    new: int


class CompileDiff(BaseModel):
    """How the compiled path changed between the baseline's and the candidate's first run."""

    graph_breaks_old: int | None = None
    graph_breaks_new: int | None = None
    # Every reason of each side, for the side-by-side view; the two lists below are the diff.
    break_reasons_old: list[str] = Field(default_factory=list)
    break_reasons_new: list[str] = Field(default_factory=list)
    added_break_reasons: list[str] = Field(default_factory=list)
    removed_break_reasons: list[str] = Field(default_factory=list)
    # [old, new] pairs: one break site whose message changed wording (a framework upgrade
    # rephrasing the same graph break), with no more breaks than before; not a regression.
    reworded_break_reasons: list[list[str]] = Field(default_factory=list)
    recompile_reasons_old: list[str] = Field(default_factory=list)
    recompile_reasons_new: list[str] = Field(default_factory=list)
    recompiles_old: int | None = None
    recompiles_new: int | None = None
    eager_fallbacks_old: int | None = None
    eager_fallbacks_new: int | None = None
    # Per user function whose count changed (a function absent on one side counts 0 there).
    traces: dict[str, CountChange] = Field(default_factory=dict)
    compilations: dict[str, CountChange] = Field(default_factory=dict)
    backend_old: str | None = None
    backend_new: str | None = None
    xla_old: bool | None = None
    xla_new: bool | None = None
    xla_lost: bool = False  # tf: XLA compiled the function before, not any more
    compile_s_old: float | None = None  # time spent compiling (see CompileDiagnostics)
    compile_s_new: float | None = None
    regressions: list[str] = Field(default_factory=list)  # "graph breaks 0 → 1", "+ break: ..."
    improvements: list[str] = Field(default_factory=list)  # "- break: ...", "traces of f 2 → 1"

    @computed_field  # type: ignore[prop-decorator]
    @property
    def regressed(self) -> bool:
        return bool(self.regressions)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def improvement(self) -> bool:
        return bool(self.improvements)

    @computed_field  # type: ignore[prop-decorator]
    @property
    def lines(self) -> list[str]:
        """Every change, regressions first, for a human."""
        return self.regressions + self.improvements


class HardwareChange(BaseModel):
    """The golden was recorded on another hardware class than this run's (lockguard/hardware.py):
    what the caller knows about the two, for compare_runs to word and judge."""

    golden: str  # the golden's class, for people: "Intel Xeon ... [intel-6.207-...]"
    current: str  # this run's class
    same_inputs: bool  # lock, harness, scenario and settings as when the golden was recorded
    lock_changed: bool  # the golden's lock hash differs from this run's lock
    detail: str | None = None  # what tells two same-named classes apart (ISA features)


class ScenarioVerdict(BaseModel):
    scenario: str
    framework: str
    verdict: Verdict
    reasons: list[str] = Field(default_factory=list)  # one sentence each, most important first
    baseline_kind: Literal["golden", "lock"] | None = None
    first_divergent_step: int | None = None  # first step whose loss differs at all (bitwise)
    losses: SeriesDiff | None = None
    tolerance: Tolerance | None = None  # what the series were judged by, when they were compared
    grad_norms: SeriesDiff | None = None
    outputs: SeriesDiff | None = None
    param_digest_equal: bool | None = None
    final_loss_old: JsonFloat | None = None
    final_loss_new: JsonFloat | None = None
    step_time_ratio: float | None = None  # only when timed_together
    first_step_ratio: float | None = None  # only when timed_together; includes compilation
    compile_diff: CompileDiff | None = None
    compile_time_ratio: float | None = None  # only when timed_together: compile_s new / old
    expected_device: str | None = None
    found_device: str | None = None
    improvement: bool = False
    error: str | None = None
    nondeterministic: bool = False
    hardware: HardwareChange | None = None  # set when the golden is of another hardware class


# --------------------------------------------------------------------------------------------
# Values: bitwise equality and ULP distance


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


# --------------------------------------------------------------------------------------------
# Compile diagnostics


def compare_compile(old: CompileDiagnostics, new: CompileDiagnostics) -> CompileDiff:
    """What got worse and what got better in the compiled path.

    A count is only compared when both runs report it, except eager fallbacks: any fallback in
    the candidate counts against a baseline that reported none.
    """
    worse: list[str] = []
    better: list[str] = []

    def count(label: str, before: int | None, after: int | None) -> None:
        if before is None or after is None or before == after:
            return
        (worse if after > before else better).append(f"{label} {before} → {after}")

    count("graph breaks", old.graph_breaks, new.graph_breaks)
    added = _unique([r for r in new.break_reasons if r not in old.break_reasons])
    removed = _unique([r for r in old.break_reasons if r not in new.break_reasons])
    reworded: list[list[str]] = []
    if (old.graph_breaks is None or new.graph_breaks is None
            or new.graph_breaks <= old.graph_breaks):
        reworded = _reworded(removed, added)
        added = [r for r in added if r not in {new for _, new in reworded}]
        removed = [r for r in removed if r not in {old for old, _ in reworded}]
    worse += [f"+ break: {reason}" for reason in added]
    better += [f"- break: {reason}" for reason in removed]
    count("recompiles", old.recompiles, new.recompiles)
    old_fallbacks = old.eager_fallbacks
    if old_fallbacks is None and new.eager_fallbacks is not None:
        old_fallbacks = 0
    count("eager fallbacks", old_fallbacks, new.eager_fallbacks)
    traces = _per_function_changes(old.traces, new.traces)
    compilations = _per_function_changes(old.compilations, new.compilations)
    for what, changes in (("traces", traces), ("compilations", compilations)):
        for function, change in changes.items():
            count(f"{what} of {function}", change.old, change.new)
    if old.backend and new.backend and old.backend != new.backend:
        # Leaving eager for a real backend is a gain; any other switch is the compiled path
        # silently changing under the user.
        (better if old.backend == "eager" else worse).append(
            f"backend {old.backend} → {new.backend}"
        )
    xla_lost = old.xla is True and new.xla is False
    if xla_lost:
        worse.append("XLA on → off")
    if old.xla is False and new.xla is True:
        better.append("XLA off → on")
    return CompileDiff(
        graph_breaks_old=old.graph_breaks,
        graph_breaks_new=new.graph_breaks,
        break_reasons_old=_unique(old.break_reasons),
        break_reasons_new=_unique(new.break_reasons),
        added_break_reasons=added,
        removed_break_reasons=removed,
        reworded_break_reasons=reworded,
        recompile_reasons_old=_unique(old.recompile_reasons),
        recompile_reasons_new=_unique(new.recompile_reasons),
        recompiles_old=old.recompiles,
        recompiles_new=new.recompiles,
        eager_fallbacks_old=old.eager_fallbacks,
        eager_fallbacks_new=new.eager_fallbacks,
        traces=traces,
        compilations=compilations,
        backend_old=old.backend,
        backend_new=new.backend,
        xla_old=old.xla,
        xla_new=new.xla,
        xla_lost=xla_lost,
        compile_s_old=old.compile_s,
        compile_s_new=new.compile_s,
        regressions=worse,
        improvements=better,
    )


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


# The harness writes a torch break reason as "<file>:<function>: <message>" (compile_torch.py);
# the site is what identifies a break across framework versions, the message is prose.
_BREAK_SITE = re.compile(r"^([\w./<>-]+\.py(?::[\w<>.]+)?): ")


def break_site(reason: str) -> str | None:
    match = _BREAK_SITE.match(reason)
    return match.group(1) if match else None


def _reworded(removed: list[str], added: list[str]) -> list[list[str]]:
    """Pair each removed reason with an added one at the same break site, first come first."""
    pairs: list[list[str]] = []
    free = list(added)
    for old in removed:
        where = break_site(old)
        if where is None:
            continue
        new = next((r for r in free if break_site(r) == where), None)
        if new is not None:
            free.remove(new)
            pairs.append([old, new])
    return pairs


def accuracy_failure(diagnostics: CompileDiagnostics | None) -> str | None:
    """Why the compiled path is numerically wrong (miscompile), from the harness's check of
    compiled against eager and fp64 runs in the same environment; None when it passed or was
    not checked.

    The harness stores compile.accuracy = {"rule", "k", "floor", "ok", "series": {name:
    {"compiled_vs_fp64", "eager_vs_fp64", "limit", "ok", ...}}}: PyTorch CI's rule, the
    compiled result may be at most k times farther (rmse) from fp64 than the eager one is.
    """
    if diagnostics is None:
        return None
    acc = (diagnostics.model_extra or {}).get("accuracy")
    if not isinstance(acc, dict) or acc.get("ok") is not False:
        return None
    series = acc.get("series") if isinstance(acc.get("series"), dict) else {}
    failed = [
        f"{name} {_fmt_err(s.get('compiled_vs_fp64'))} from fp64 where eager is"
        f" {_fmt_err(s.get('eager_vs_fp64'))} (limit {_fmt_err(s.get('limit'))})"
        for name, s in series.items()
        if isinstance(s, dict) and s.get("ok") is False
    ]
    rule = acc.get("rule") or "compiled at most k× farther from fp64 than eager"
    return (
        "miscompile: the compiled run is farther from the fp64 reference than eager allows: "
        + ("; ".join(failed) or "accuracy check failed")
        + f" [{rule}]"
    )


def _fmt_err(value: object) -> str:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:.3g}"
    return str(value)


def _per_function_changes(old: dict[str, int], new: dict[str, int]) -> dict[str, CountChange]:
    names = _unique(list(old) + list(new))
    changes = {name: CountChange(old=old.get(name, 0), new=new.get(name, 0)) for name in names}
    return {name: change for name, change in changes.items() if change.old != change.new}


# --------------------------------------------------------------------------------------------
# Putting it together


class _Findings:
    """Reasons gathered while comparing, each tagged with the verdict it argues for (or none).

    The verdict is the highest-precedence tag; the reasons come out in precedence order, the
    untagged notes last, so the first reason always explains the verdict.
    """

    def __init__(self) -> None:
        self._items: list[tuple[Verdict | None, str]] = []

    def add(self, verdict: Verdict, reason: str) -> None:
        self._items.append((verdict, reason))

    def note(self, reason: str) -> None:
        self._items.append((None, reason))

    def has(self, verdict: Verdict) -> bool:
        return any(tag == verdict for tag, _ in self._items)

    def verdict(self) -> Verdict:
        tags = [tag for tag, _ in self._items if tag is not None]
        if not tags:
            raise AssertionError("compare_runs always records at least one verdict")
        return min(tags, key=_RANK.__getitem__)

    def reasons(self) -> list[str]:
        def rank(item: tuple[Verdict | None, str]) -> int:
            return len(PRECEDENCE) if item[0] is None else _RANK[item[0]]

        return [reason for _, reason in sorted(self._items, key=rank)]  # sorted() is stable


def compare_runs(
    baselines: list[RunResult],
    candidates: list[RunResult],
    *,
    policy: Policy,
    baseline_kind: Literal["golden", "lock"] | None,
    expected_device: str | None,
    timed_together: bool,
    tolerance: Tolerance | None = None,
    hardware: HardwareChange | None = None,
) -> ScenarioVerdict:
    """One scenario's verdict: candidate runs (>= 1) against baseline runs (a golden, or the
    old lock's runs; none for a new scenario).

    `hardware`: the baseline golden was recorded on another hardware class. A difference is then
    never a dependency verdict: `other_hardware` when only the hardware changed, `incomparable`
    when the inputs changed too (the two cannot be told apart); the figures are still given, for
    information, and bitwise equality is still `identical`.

    `tolerance` is the scenario's own override; it beats policy.tolerance, which beats the
    dtype default. Timings are only compared when `timed_together` (both sides measured in
    this check, on this machine). Numerics use the first run of each side; further runs are
    only checked for being bitwise reproducible.
    """
    if not candidates:
        raise ValueError("compare_runs needs at least one candidate run")
    candidate = candidates[0]
    result = ScenarioVerdict(
        scenario=candidate.scenario,
        framework=candidate.framework,
        verdict=Verdict.new,  # replaced below
        baseline_kind=baseline_kind,
        expected_device=expected_device,
        found_device=candidate.device,
        final_loss_new=candidate.losses[-1] if candidate.losses else None,
        hardware=hardware if baselines else None,
    )
    findings = _Findings()

    broken = next((run for run in candidates if run.status != Status.ok), None)
    if broken is not None:
        findings.add(Verdict.broken, _broken_reason(broken, "candidate", candidates))
        result.error = tail(broken.error, 20) or None
    _check_expected_device(candidates, expected_device, findings)
    miscompile = accuracy_failure(candidate.compile) if broken is None else None
    if miscompile is not None:
        findings.add(Verdict.compile_fallback, miscompile)
    if broken is None and not baselines:
        findings.add(Verdict.new, "no baseline to compare with: `lockguard record` stores one")
    if broken is not None or not baselines:
        return _finish(result, findings)

    baseline = baselines[0]
    result.final_loss_old = baseline.losses[-1] if baseline.losses else None
    if not _check_comparable(baselines, candidate, findings):
        if hardware is not None:
            findings.note(_hardware_sentence(hardware, candidate.scenario))
        return _finish(result, findings)

    if baseline.compile is not None and candidate.compile is not None:
        result.compile_diff = compare_compile(baseline.compile, candidate.compile)
        _compile_findings(result.compile_diff, findings)
        result.improvement = result.compile_diff.improvement
    elif baseline.compile is not None:
        findings.note("the candidate reported no compile diagnostics, the baseline did")

    tol = _effective_tolerance(policy, tolerance, candidate.dtype)
    result.tolerance = tol
    _compare_numerics(baseline, candidate, tol, result, findings, hardware)

    for runs, role in ((baselines, "baseline"), (candidates, "candidate")):
        reason = _nondeterminism(runs, role)
        if reason is not None:
            result.nondeterministic = True
            findings.note(reason)

    if timed_together:
        _compare_timings(baselines, candidates, policy, result, findings)
    return _finish(result, findings)


def skipped(scenario: str, framework: str, reason: str) -> ScenarioVerdict:
    """A scenario that was not run at all, with why."""
    return ScenarioVerdict(
        scenario=scenario, framework=framework, verdict=Verdict.skipped, reasons=[reason]
    )


def is_failure(verdict: ScenarioVerdict, policy: Policy) -> bool:
    """Whether this verdict fails the gate under `policy`."""
    if verdict.verdict in policy.fail_on:
        return True
    # An improvement means the golden no longer describes the stack; teams that want goldens
    # kept exact make that a failure until someone re-records.
    return policy.fail_on_improvement and verdict.improvement


def gate_passes(verdicts: Iterable[ScenarioVerdict], policy: Policy) -> bool:
    """True when no verdict fails under `policy`."""
    return not any(is_failure(verdict, policy) for verdict in verdicts)


# --------------------------------------------------------------------------------------------
# The steps of compare_runs


def _finish(result: ScenarioVerdict, findings: _Findings) -> ScenarioVerdict:
    result.verdict = findings.verdict()
    result.reasons = findings.reasons()
    return result


def _broken_reason(run: RunResult, role: str, runs: list[RunResult]) -> str:
    what = {
        Status.crashed: "crashed",
        Status.nan: "produced NaN",
        Status.timeout: "timed out",
        Status.invalid: "returned an invalid result",
    }[run.status]
    if len(runs) == 1:
        which = f"the {role} run"
    else:
        which = f"{role} run {runs.index(run) + 1} of {len(runs)}"
    last_line = tail(run.error, 1).strip()
    return f"{which} {what}" + (f": {last_line}" if last_line else "")


def _check_expected_device(
    candidates: list[RunResult], expected_device: str | None, findings: _Findings
) -> None:
    if expected_device is None:
        return
    for run in candidates:
        if run.device is None and run.status != Status.ok:
            continue  # crashed before it could say where it ran; "broken" already says it all
        if run.device != expected_device:
            found = run.device or "an unreported device"
            findings.add(Verdict.device_fallback, f"expected {expected_device}, ran on {found}")
            return


def _check_comparable(
    baselines: list[RunResult], candidate: RunResult, findings: _Findings
) -> bool:
    """Record why the first baseline and `candidate` cannot be compared; True if they can."""
    baseline = baselines[0]
    broken = next((run for run in baselines if run.status != Status.ok), None)
    if broken is not None:
        reason = _broken_reason(broken, "baseline", baselines)
        findings.add(Verdict.incomparable, f"{reason}; there is nothing sound to compare with")
        return False
    problems: list[str] = []
    if baseline.scenario != candidate.scenario:
        problems.append(
            f"the baseline is of scenario {baseline.scenario!r}, not {candidate.scenario!r}"
        )
    if baseline.framework != candidate.framework:
        problems.append(
            f"the baseline ran {baseline.framework}, the candidate {candidate.framework}"
        )
    if baseline.device and candidate.device and baseline.device != candidate.device:
        if baseline.device != "cpu" and candidate.device == "cpu":
            # An accelerator run that lands on the CPU is a fallback, whatever was expected.
            if not findings.has(Verdict.device_fallback):
                findings.add(
                    Verdict.device_fallback,
                    f"the baseline ran on {baseline.device}, the candidate on cpu",
                )
            return False
        problems.append(
            f"the baseline ran on {baseline.device}, the candidate on {candidate.device}"
        )
    if baseline.steps != candidate.steps:
        problems.append(f"the baseline ran {baseline.steps} steps, the candidate {candidate.steps}")
    if normalise_dtype(baseline.dtype) != normalise_dtype(candidate.dtype):
        problems.append(f"the baseline ran in {baseline.dtype}, the candidate in {candidate.dtype}")
    for run, role in ((baseline, "baseline"), (candidate, "candidate")):
        if not run.losses:
            problems.append(f"the {role} recorded no losses")
    for name in ("losses", "grad_norms", "outputs"):
        old, new = getattr(baseline, name), getattr(candidate, name)
        if old and new and len(old) != len(new):
            label = name.replace("_", " ")
            problems.append(f"the baseline has {len(old)} {label}, the candidate {len(new)}")
    for problem in problems:
        findings.add(Verdict.incomparable, problem)
    return not problems


def _compile_findings(diff: CompileDiff, findings: _Findings) -> None:
    if diff.regressions:
        findings.add(
            Verdict.compile_fallback, "compiled path regressed: " + "; ".join(diff.regressions)
        )
    if diff.improvements:
        findings.note("improved: " + "; ".join(diff.improvements) + "; re-record the golden")
    for old, new in diff.reworded_break_reasons:
        findings.note(f"graph break reworded at the same site (not counted): {old} → {new}")


def _effective_tolerance(policy: Policy, tolerance: Tolerance | None, dtype: str) -> Tolerance:
    tol = tolerance or policy.tolerance or default_tolerance(dtype)
    if policy.exact and not tol.exact:
        tol = tol.model_copy(update={"exact": True})
    return tol


def _compare_numerics(
    baseline: RunResult,
    candidate: RunResult,
    tol: Tolerance,
    result: ScenarioVerdict,
    findings: _Findings,
    hardware: HardwareChange | None = None,
) -> None:
    dtype = candidate.dtype
    result.first_divergent_step = first_difference(baseline.losses, candidate.losses)
    result.losses = compare_series("losses", baseline.losses, candidate.losses, tol, dtype=dtype)
    for name in ("grad_norms", "outputs"):
        old, new = getattr(baseline, name), getattr(candidate, name)
        if old and new:
            setattr(result, name, compare_series(name, old, new, tol, dtype=dtype))
        elif old or new:
            side = "baseline" if old else "candidate"
            findings.note(f"only the {side} recorded {name.replace('_', ' ')}; not compared")
    if baseline.param_digest is not None and candidate.param_digest is not None:
        result.param_digest_equal = baseline.param_digest == candidate.param_digest

    pairs = [
        (result.losses, baseline.losses, candidate.losses, "step"),
        (result.grad_norms, baseline.grad_norms, candidate.grad_norms, "step"),
        (result.outputs, baseline.outputs, candidate.outputs, "index"),
    ]
    differences: list[tuple[Verdict, str]] = []
    for diff, old, new, unit in pairs:
        if diff is None:
            continue
        first = first_difference(old, new)
        if first is None:
            continue
        verdict = Verdict.drift if diff.mismatched else Verdict.within_tolerance
        differences.append((verdict, _series_reason(diff, first, unit, tol)))
    if result.param_digest_equal is False:
        # Parameters have no tolerance to check, only their digest; in exact mode that is a
        # drift, otherwise the series above decide.
        verdict = Verdict.drift if tol.exact else Verdict.within_tolerance
        differences.append((verdict, "the trained parameters differ bitwise (parameter digest)"))
    if not differences:
        compared = [d.name.replace("_", " ") for d, *_ in pairs if d is not None]
        if result.param_digest_equal:
            compared.append("parameter digest")
        findings.add(
            Verdict.identical,
            f"bitwise identical over {candidate.steps} steps: " + ", ".join(compared),
        )
        if hardware is not None:
            findings.note(f"golden recorded on {hardware.golden}, running on {hardware.current}:"
                          " bitwise identical all the same")
    elif hardware is None:
        for verdict, reason in differences:
            findings.add(verdict, reason)
    else:
        # Across hardware classes a tolerance proves nothing (bf16 moves beyond it between
        # CPUs): the difference is shown for information and judged by what else changed.
        verdict = Verdict.other_hardware if hardware.same_inputs else Verdict.incomparable
        findings.add(verdict, _hardware_sentence(hardware, candidate.scenario))
        for _, reason in differences:
            findings.add(verdict, f"for information: {reason}")


def _hardware_sentence(hardware: HardwareChange, scenario: str) -> str:
    """Why a difference from another hardware class's golden is not a dependency verdict, and
    what to do about it."""
    detail = f" ({hardware.detail})" if hardware.detail else ""
    ab = ("or check A/B (`lockguard check --base REF` or `--baseline-lock OLD`), which runs both"
          " locks on this machine")
    if hardware.same_inputs:
        return (f"golden recorded on {hardware.golden}, running on {hardware.current}{detail}:"
                " only the hardware changed since the golden (same lock, scenario and settings),"
                " so the numbers below moved with the machine, not with a dependency; remedy:"
                f" `lockguard record --scenario {scenario}` records a golden for this hardware"
                f" class beside the other, {ab}")
    changed = "the lock" if hardware.lock_changed else "the scenario, harness or settings"
    return (f"golden recorded on {hardware.golden}, running on {hardware.current}{detail}, and"
            f" {changed} changed too: a hardware change and a dependency change cannot be told"
            " apart; remedy: record a golden for this hardware class from the unchanged inputs"
            f" (on the base branch: `lockguard record --scenario {scenario}`), {ab}")


def _series_reason(diff: SeriesDiff, first_bitwise: int, unit: str, tol: Tolerance) -> str:
    label = diff.name.replace("_", " ")
    if diff.mismatched:
        where = f"{unit} {diff.first_index}"
        if first_bitwise != diff.first_index:
            where += f" (first bitwise difference at {unit} {first_bitwise})"
        head = f"{label} beyond tolerance from {where}: {diff.mismatched} / {diff.size} mismatched"
    else:
        head = f"{label} first differ at {unit} {first_bitwise}, within tolerance"
    return f"{head}; {_figures(diff, unit, tol)}"


def _figures(diff: SeriesDiff, unit: str, tol: Tolerance) -> str:
    if diff.max_abs_index is None:
        return "the values differ only in the sign of zero"
    abs_allowed = "" if tol.exact else f" (up to {tol.atol} allowed)"
    rel_allowed = "" if tol.exact else f" (up to {tol.rtol} allowed)"
    text = (
        f"greatest absolute difference {diff.max_abs} at {unit} {diff.max_abs_index}{abs_allowed},"
        f" greatest relative difference {diff.max_rel} at {unit} {diff.max_rel_index}{rel_allowed}"
    )
    if diff.max_ulp is not None:
        text += f", up to {diff.max_ulp} ULP"
    return text


def _nondeterminism(runs: list[RunResult], role: str) -> str | None:
    """Why repeated runs of one side are not bitwise equal to its first run, or None."""
    first = runs[0]
    for number, run in enumerate(runs[1:], start=2):
        where = _run_difference(first, run)
        if where is not None:
            return (
                f"the {len(runs)} {role} runs are not bitwise reproducible: run {number} differs"
                f" from run 1 ({where}); the harness or the framework is not deterministic,"
                " numerics use run 1"
            )
    return None


def _run_difference(first: RunResult, other: RunResult) -> str | None:
    for name, unit in (("losses", "step"), ("grad_norms", "step"), ("outputs", "index")):
        index = first_difference(getattr(first, name), getattr(other, name))
        if index is not None:
            return f"{name.replace('_', ' ')} from {unit} {index}"
    if first.param_digest != other.param_digest:
        return "parameter digest"
    return None


def _compare_timings(
    baselines: list[RunResult],
    candidates: list[RunResult],
    policy: Policy,
    result: ScenarioVerdict,
    findings: _Findings,
) -> None:
    result.step_time_ratio = _median_ratio(
        [run.timings.step_median_s for run in baselines],
        [run.timings.step_median_s for run in candidates],
    )
    result.first_step_ratio = _median_ratio(
        [run.timings.first_step_s for run in baselines],
        [run.timings.first_step_s for run in candidates],
    )
    result.compile_time_ratio = _median_ratio(
        [run.compile.compile_s if run.compile else None for run in baselines],
        [run.compile.compile_s if run.compile else None for run in candidates],
    )
    limit = policy.slower_ratio
    steps = [run.timings.step_median_s for run in (*baselines, *candidates)]
    long_enough = all(s is not None and s >= policy.slower_min_step_s for s in steps)
    if result.step_time_ratio is not None and result.step_time_ratio > limit and long_enough:
        findings.add(
            Verdict.slower,
            f"steady-state steps take {result.step_time_ratio:.2f}× the baseline's"
            f" (limit {limit:.2f}×)",
        )
    if result.first_step_ratio is not None and result.first_step_ratio > limit:
        # The first step includes compilation: worth saying, not worth a verdict of its own.
        findings.note(
            f"the first step (including compilation) takes {result.first_step_ratio:.2f}×"
            " the baseline's: compile time regressed"
        )
    if result.compile_time_ratio is not None and result.compile_time_ratio > limit:
        findings.note(
            f"compilation takes {result.compile_time_ratio:.2f}× the baseline's"
            " (time in the compiler backend; a cold compiler cache on one side also shows here)"
        )


def _median_ratio(old: list[float | None], new: list[float | None]) -> float | None:
    # Medians over repeats damp one noisy run; a missing or zero baseline gives no ratio.
    old_values = [value for value in old if value is not None]
    new_values = [value for value in new if value is not None]
    if not old_values or not new_values:
        return None
    old_median = statistics.median(old_values)
    if old_median <= 0:
        return None
    return statistics.median(new_values) / old_median
