"""Where a drift starts: two sides' captures of one training step (RunResult.capture, written by
the harness's locate_torch.py for torch; locate_jax.py and locate_tf.py for jax, flax, tf and
keras: a call for each parameter leaf and tapped layer) compared module call by module call,
and the shape of the drift over the steps (one tiny first difference amplified by training, or
a systematic change).

Pure, like the rest of lockguard.compare: RunResults in, a `Location` out.

The rule. Calls are paired by module name and occurrence. Weights first: a module whose own
parameters differ as the step begins differed before it (at step 0: the initialisation). Then
the forward, in the order the calls finished (a module's children before it): the first call
whose output differs is where the difference shows first; the difference *arises* in the
innermost call around that point whose inputs were still equal on both sides (a module whose
inputs already differ only carries a difference made before it: GPT-2's c_proj after an
attention whose own code changed names the attention). With every forward output equal, the
first gradient, in the order the backward produced them, that differs. A capture of the probe
(`Capture.probe`: every training step equal, the eval-mode outputs not) is compared the same
way, without gradients.

The operation (torch: ModuleCall.operations, the aten operations of a call's own code in a
replay of its forward). Inside the call named, each side's first operation that computes (not a
view or a copy, nor a constant made from no tensor) a value the other side never computed
there: the same operation on both sides, on equal inputs, is the first operation whose output
differs; other operations mean the sides part there, each running its own (eager attention's
bmm and softmax against sdpa's fused kernel). Values are matched by digest, not position, so a
copy or a reshape one side adds does not count as a difference.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from lockguard.compare.numerics import bitwise_equal, first_difference, ulp_at, ulp_distance
from lockguard.results import (
    MAX_CAPTURE_CALLS, CallOperations, Capture, CapturedOp, JsonFloat, ModuleCall,
    RefereeFigures, RunResult,
)

# Drift shapes (amplification): a first loss difference of at most this many ULPs is "tiny"; a
# tiny one that grew at least GROWTH times by the last step was amplified by training; one of
# more than SYSTEMATIC_ULPS at its first step is a systematic change.
TINY_ULPS = 16
GROWTH = 10.0
SYSTEMATIC_ULPS = 1000


class DriftShape(BaseModel):
    """How the loss difference evolves from the first divergent step: |Δloss| per step and
    what that shape says."""

    model_config = ConfigDict(defer_build=True)

    kind: Literal["amplified", "systematic", "steady"]
    first_step: int
    first_ulp: int | None  # the loss difference at the first divergent step, in ULPs
    growth: list[JsonFloat] = Field(default_factory=list)  # |Δloss| at each step from first_step

    def sentence(self) -> str:
        """The shape in words, for reasons and reports."""
        last = self.growth[-1] if self.growth else 0.0
        first = self.growth[0] if self.growth else 0.0
        if self.kind == "amplified":
            # 0 ulp: the losses differ below the run's dtype (a float64 loss against a
            # float32 one that rounds to it: NEP 50's)
            ulps = f"{self.first_ulp} ulp" if self.first_ulp else "under 1 ulp"
            return (f"one first difference amplified by training: {ulps} of loss "
                    f"at step {self.first_step}, |Δloss| {first:.3g} → {last:.3g} by the last "
                    "step")
        if self.kind == "systematic":
            return (f"a systematic change: the loss differs by {self.first_ulp} ulp already at "
                    f"step {self.first_step} (an initialisation, a changed default or kernel "
                    "of large effect), not a rounding amplified")
        return (f"a steady difference: |Δloss| {first:.3g} at step {self.first_step}, {last:.3g} "
                "by the last step (not amplified)")


# Operations named of each side where they part
PARTED_NAMES = 4


class Operation(BaseModel):
    """The operation inside the located call where the sides first differ (module docstring):
    `output`, one operation on both sides, on equal inputs, whose output differs; `parted`, the
    sides run other operations from there (each side's first few named; a side's index None:
    it computes nothing the other does not); `equal`, every operation recorded of the call's
    own code computes the same values (the difference came from a module inside it);
    `unavailable`, a side's replay could not record them (`error`). Indices count the call's
    own operations from 0. Forward only: a replay without gradients."""

    model_config = ConfigDict(defer_build=True)

    kind: Literal["output", "parted", "equal", "unavailable"]
    baseline_index: int | None = None
    candidate_index: int | None = None
    baseline_ops: list[str] = Field(default_factory=list)  # from the index on (`output`: one)
    candidate_ops: list[str] = Field(default_factory=list)
    max_ulp: int | None = None  # `output`: over its sampled values, as Location's
    scaled_ulp: JsonFloat | None = None
    dtype: str | None = None  # `output`: the output's dtype (ULPs only of a floating one)
    candidate_dtype: str | None = None  # `output`: the candidate's, where it is another
    recorded: tuple[int, int] = (0, 0)  # operations recorded of the call, baseline, candidate
    truncated: bool = False  # a side stopped recording before the call's end
    error: str | None = None

    def sentence(self) -> str:
        """The operation in words (Location.sentences)."""
        if self.kind == "unavailable":
            return f"its operations could not be recorded: {self.error}"
        if self.kind == "equal" and self.recorded == (0, 0):
            return ("its own code runs no operation on either side (a container: the "
                    "difference comes from a module inside it)")
        if self.kind == "equal":  # every operation recorded on both sides (never truncated)
            return (f"its own operations (the {self.recorded[0]} recorded of its forward) "
                    "compute the same values on both sides: the difference comes from a "
                    "module inside it")
        b, c = self.baseline_index, self.candidate_index
        at = f"op {b}" if b == c else f"baseline op {b}, candidate op {c}"
        if self.kind == "output":
            by = (f"in its dtype ({self.dtype} → {self.candidate_dtype})"
                  if self.candidate_dtype is not None
                  else f"by max {self.max_ulp} ulp" if self.max_ulp is not None
                  else "beyond its sampled values" if _floating(self.dtype)
                  else f"in {self.dtype} values (no ULPs)")
            if self.scaled_ulp is not None and self.max_ulp is not None \
                    and self.scaled_ulp < self.max_ulp:
                by += f" ({self.scaled_ulp:.2g} ulp at the output's scale)"
            return (f"the first operation whose output differs is {self.baseline_ops[0]} "
                    f"({at}), {by} on equal inputs (its forward replayed)")
        if c is None:  # the candidate computes nothing the baseline does not
            return (f"its operations differ from baseline op {b}: the baseline runs "
                    f"{_run(self.baseline_ops)}, values the candidate never computes (its "
                    "forward replayed)")
        if b is None:
            return (f"its operations differ from candidate op {c}: the candidate runs "
                    f"{_run(self.candidate_ops)}, values the baseline never computes (its "
                    "forward replayed)")
        return (f"its operations differ from {at}: baseline {_run(self.baseline_ops)}, "
                f"candidate {_run(self.candidate_ops)} (its forward replayed)")


# The dtypes whose ULPs numerics.ulp_distance measures (a float8 sample is not one of them)
MEASURED_DTYPES = frozenset({"float16", "bfloat16", "float32", "float64"})


def _floating(dtype: str | None) -> bool:
    return dtype in MEASURED_DTYPES


def _run(names: list[str]) -> str:
    more = " …" if len(names) > PARTED_NAMES else ""
    return names[0] + (f" (then {', '.join(names[1:PARTED_NAMES])}{more})"
                       if len(names) > 1 else "")


class Location(BaseModel):
    """Where two sides' captured step first differs (module docstring's rule)."""

    model_config = ConfigDict(defer_build=True)

    step: int
    kind: Literal["weights", "forward", "gradient", "none"]
    module: str | None = None  # where the difference arises (qualified name)
    module_type: str | None = None  # its class on the baseline side
    candidate_type: str | None = None  # its class on the candidate side, when other
    first_output: str | None = None  # the first call whose output differs, when another module
    max_ulp: int | None = None  # over the sampled values; None when they are all equal
    # the same at the output's scale: each difference in ULPs of the larger of the value and
    # the sample's root mean square (the referee's measure: a value near zero that larger
    # terms cancelled into would count its own rounding a thousand times over)
    scaled_ulp: JsonFloat | None = None
    sampled: int | None = None  # how many values the ULPs were taken over, of `numel`
    numel: int | None = None
    later_differing: int = 0  # calls after it whose output or gradient differs too
    compared: int = 0  # calls compared
    unpaired: list[str] = Field(default_factory=list)  # module calls on one side only
    baseline_referee: RefereeFigures | None = None
    candidate_referee: RefereeFigures | None = None
    same_inputs: bool | None = None  # both sides' referees ran on equal inputs
    truncated: bool = False
    probe: bool = False  # found in the probe's eval-mode forward after training (`step` = steps)
    # inside a forward location, the operation where the sides differ (torch's captures)
    operation: Operation | None = None
    shape: DriftShape | None = None

    def sentences(self, drift: bool = True) -> list[str]:
        """The location in words: where, the operation, how much, what follows, the referee's
        word. `drift`: whether the verdict it explains is a drift (under --locate a difference
        within tolerance is located too, and is no drift)."""
        out = [self._where(drift)]
        if self.operation is not None:
            out.append(self.operation.sentence())
        referee = self._referee()
        if referee:
            out.append(referee)
        if self.unpaired:
            out.append("module calls on one side only: " + ", ".join(self.unpaired[:6])
                       + (" …" if len(self.unpaired) > 6 else ""))
        if self.truncated:
            out.append("the capture was truncated: calls after the first "
                       f"{MAX_CAPTURE_CALLS} were not compared")
        if self.shape is not None:
            out.append(self.shape.sentence())
        return out

    def _where(self, drift: bool = True) -> str:
        if self.kind == "none" and self.probe:
            return ("the probe re-run with every module captured: no module's weights or output "
                    "differs")
        if self.kind == "none":
            return (f"step {self.step} re-run with every module captured: no module's weights, "
                    "output or gradient differs (the difference is outside the modules: the "
                    "loss function or the optimiser)")
        types = self.module_type or "?"
        if self.candidate_type and self.candidate_type != self.module_type:
            types = f"{types} → {self.candidate_type}"
            if _classes(self.module_type, self.candidate_type):
                types += ": the implementation changed"
        head = f"{self.module} ({types})"
        # Sampled values equal as float32 (their digests differ): a float64 value against a
        # float32 one it rounds to, or a difference past the first SAMPLE values; an output on
        # one side only has no values to measure.
        if self.max_ulp is not None:
            by = f"by max {self.max_ulp} ulp"
            if self.scaled_ulp is not None and self.scaled_ulp < self.max_ulp:
                by += f" ({self.scaled_ulp:.2g} ulp at the output's scale)"
        elif self.sampled is not None:
            by = (f"beyond its first {self.sampled} of {self.numel} values as float32 (they "
                  "agree)")
        else:
            by = "(present on one side only)"
        if self.kind == "weights":
            what = ("before the first step: an initialisation change, not a kernel change"
                    if self.step == 0
                    else f"entering step {self.step}: an earlier update moved them")
            return f"the weights of {head} differ {what}"
        where = "forward output" if self.kind == "forward" else "gradient (backward)"
        when = f"at step {self.step}"
        if self.probe:
            when = (f"in the probe (the eval-mode forward after the {self.step} training steps, "
                    "whose losses and gradient norms are equal on both sides)")
        inside = (f"; it shows first at {self.first_output}, inside it, whose inputs already "
                  "differ" if self.first_output else "")
        # the walk out of the first differing call stops at a root (or a call paired on one
        # side only) whose inputs may differ already: the difference came in with them
        on = "on equal inputs" if self.same_inputs is not False else "on inputs that differ"
        # issue 46's reading of a located amplified drift: this one call, then training
        # amplifying it (the shape's own sentence follows with its figures)
        # (not where the call's inputs already differ: the first difference came in with them)
        after = (", and everything after is that difference amplified"
                 if self.shape is not None and self.shape.kind == "amplified"
                 and self.same_inputs is not False else "")
        return (f"the {'drift' if drift else 'difference'} starts in {head} {when}: its {where} differs {by} "
                f"{on}{inside}; {self.later_differing} other module call(s) of "
                f"the {self.compared} compared differ too (downstream){after}")

    def _referee(self) -> str | None:
        old, new = self.baseline_referee, self.candidate_referee
        if old is None or new is None or self.kind not in ("forward",):
            return None
        usable = [r for r in (old, new) if r.error is None and r.replay_exact
                  and r.max_ulp is not None]
        if len(usable) < 2:
            why = next((r.error for r in (old, new) if r.error), None) or \
                "the module's replay did not reproduce its output"
            return f"float64 referee unavailable: {why}"
        inputs = ("on the same inputs" if self.same_inputs
                  else "each on its own inputs (they differ)")
        closer = _closer(new, old)
        return (f"float64 referee, {inputs}: candidate {new.max_ulp:.2g} ulp from float64 "
                f"(mean {new.mean_ulp:.2g}), baseline {old.max_ulp:.2g} ulp (mean "
                f"{old.mean_ulp:.2g}): {closer}")


def _classes(*types: str | None) -> bool:
    """Whether `types` are class names (CapWords identifiers: GPT2Attention, Dense), not what a
    values capture calls a type (a dtype, `parameter float32[3]`): a module whose class differs
    between the sides runs other code, while a value whose dtype differs was promoted."""
    return all(t is not None and t[:1].isupper() and t.isidentifier() for t in types)


def _closer(new: RefereeFigures, old: RefereeFigures) -> str:
    key_new, key_old = (new.max_ulp, new.mean_ulp), (old.max_ulp, old.mean_ulp)
    if key_new <= key_old:
        return "the candidate is at least as accurate"
    return "the baseline is closer to the exact answer"


def _keys(calls: Sequence[ModuleCall]) -> list[str]:
    """Each call's pairing key: its name, and its occurrence when the module ran more than once."""
    seen: dict[str, int] = {}
    keys = []
    for call in calls:
        n = seen.get(call.name, 0)
        seen[call.name] = n + 1
        keys.append(call.name if n == 0 else f"{call.name}#{n}")
    return keys


def _finish_order(calls: Sequence[ModuleCall]) -> list[int]:
    """The calls' indices in the order they finished: children before their parent."""
    children: dict[int, list[int]] = {}
    for index, call in enumerate(calls):
        children.setdefault(call.parent, []).append(index)
    order: list[int] = []
    stack: list[tuple[int, bool]] = [(i, False) for i in reversed(children.get(-1, []))]
    while stack:
        index, done = stack.pop()
        if done:
            order.append(index)
            continue
        stack.append((index, True))
        stack.extend((c, False) for c in reversed(children.get(index, [])))
    return order


def _differs(a, b) -> bool:
    if a is None or b is None:
        return (a is None) != (b is None)
    return a.digest != b.digest


def _ulps(a, b) -> tuple[int | None, float | None, int, int]:
    """(max ULP over the sampled values, the same at the output's scale (Location.scaled_ulp),
    how many were compared, numel) of two captured tensors; None, None when the samples are
    equal (the difference lies beyond them)."""
    va, vb = a.values(), b.values()
    n = min(len(va), len(vb))
    finite = [x for x in va[:n] if math.isfinite(x)]
    rms = math.sqrt(math.fsum(x * x for x in finite) / len(finite)) if finite else 0.0
    worst = scaled = None
    for x, y in zip(va[:n], vb[:n]):
        if not bitwise_equal(x, y):
            try:
                d = ulp_distance(x, y, a.dtype)
            except ValueError:
                continue
            worst = d if worst is None else max(worst, d)
            at = abs(x - y) / ulp_at(max(abs(x), rms), a.dtype)
            if math.isfinite(at):  # an infinity on one side has its ULPs above, not a scale
                scaled = at if scaled is None else max(scaled, at)
    return worst, scaled, n, a.numel


def locate(baseline: Capture, candidate: Capture) -> Location:
    """Where `candidate`'s captured step first differs from `baseline`'s (module docstring)."""
    bkeys, ckeys = _keys(baseline.calls), _keys(candidate.calls)
    cindex = {k: i for i, k in enumerate(ckeys)}
    pairs = {i: cindex[k] for i, k in enumerate(bkeys) if k in cindex}
    unpaired = [k for k in bkeys if k not in cindex] + [k for k in ckeys if k not in set(bkeys)]
    common = dict(step=candidate.step, compared=len(pairs), unpaired=unpaired,
                  truncated=baseline.truncated or candidate.truncated,
                  probe=baseline.probe and candidate.probe)
    b, c = baseline.calls, candidate.calls
    for i, j in pairs.items():  # call order: the outer module's weights first
        if b[i].params != c[j].params:
            return _found("weights", i, j, b, c, pairs, common, tensor="params")
    order = [i for i in _finish_order(b) if i in pairs]
    first = next((i for i in order if _differs(b[i].out, c[pairs[i]].out)), None)
    if first is not None:
        origin = first
        while b[origin].inputs != c[pairs[origin]].inputs and b[origin].parent in pairs:
            origin = b[origin].parent
        loc = _found("forward", origin, pairs[origin], b, c, pairs, common, tensor="out")
        if origin != first:
            loc.first_output = b[first].name
        if loc.same_inputs is not False:  # on differing inputs every operation differs
            loc.operation = operation(b[origin].operations, c[pairs[origin]].operations,
                                      reproduced=_reproduced(b[origin], c[pairs[origin]]))
        return loc
    by_grad = sorted((i for i in pairs if b[i].grad_order is not None),
                     key=lambda i: b[i].grad_order)
    first = next((i for i in by_grad if _differs(b[i].grad, c[pairs[i]].grad)), None)
    if first is not None:
        return _found("gradient", first, pairs[first], b, c, pairs, common, tensor="grad")
    return Location(kind="none", **common)


def _found(kind: str, i: int, j: int, b: Sequence[ModuleCall], c: Sequence[ModuleCall],
           pairs: dict[int, int], common: dict, tensor: str) -> Location:
    later = sum(1 for k, m in pairs.items() if k != i and k not in _ancestors(b, i)
                and (_differs(b[k].out, c[m].out) or _differs(b[k].grad, c[m].grad)))
    figures: dict = {}
    if tensor != "params":
        mine, theirs = getattr(b[i], tensor), getattr(c[j], tensor)
        if mine is not None and theirs is not None:
            (figures["max_ulp"], figures["scaled_ulp"], figures["sampled"],
             figures["numel"]) = _ulps(mine, theirs)
    return Location(kind=kind, module=b[i].name, module_type=b[i].type,
                    candidate_type=c[j].type if c[j].type != b[i].type else None,
                    later_differing=later, baseline_referee=b[i].referee,
                    candidate_referee=c[j].referee, same_inputs=b[i].inputs == c[j].inputs,
                    **figures, **common)


def _reproduced(b: ModuleCall, c: ModuleCall) -> bool:
    """Whether neither side's referee found the call's replay unfaithful (its output again, bit
    for bit): the operations come from a replay too, so one that did not reproduce is no
    evidence. A side with no referee figures says nothing against it."""
    return all(r is None or r.replay_exact is not False for r in (b.referee, c.referee))


def operation(baseline: CallOperations | None, candidate: CallOperations | None,
              reproduced: bool = True) -> Operation | None:
    """Where two sides' operations of one call first differ (module docstring); None when a
    side recorded none (not torch, or a harness before them). `reproduced`: whether the call's
    replay reproduced its output on both sides (else its operations are no evidence). A side
    that stopped recording (the capture's budget spent) cannot say the rest is equal, nor that
    the other computes what it never did."""
    if baseline is None or candidate is None:
        return None
    error = baseline.error or candidate.error
    recorded = (len(baseline.ops), len(candidate.ops))
    truncated = baseline.truncated or candidate.truncated
    if error is None and not reproduced:
        error = ("the module's replay did not reproduce its output on a side, so its "
                 "replayed operations are no evidence")
    if error is not None:
        return Operation(kind="unavailable", error=error, recorded=recorded, truncated=truncated)
    b, c = baseline.ops, candidate.ops
    i, j = _first_own(b, c), _first_own(c, b)
    if truncated and (i is None or j is None):
        return Operation(kind="unavailable", recorded=recorded, truncated=True, error=(
            "the capture's operation budget was spent before this call's end on a side, so "
            "what was not recorded cannot be compared"))
    if i is None and j is None:
        return Operation(kind="equal", recorded=recorded, truncated=truncated)
    common = dict(baseline_index=i, candidate_index=j, recorded=recorded, truncated=truncated)
    if i is not None and j is not None and (b[i].name, b[i].inputs) == (c[j].name, c[j].inputs):
        old, new = b[i].out, c[j].out
        # an integer or boolean output (indices, a mask) has no ULPs: its values differ
        measured = old.dtype == new.dtype and _floating(old.dtype)
        max_ulp, scaled, _, _ = _ulps(old, new) if measured else (None, None, 0, 0)
        return Operation(kind="output", baseline_ops=[b[i].name], candidate_ops=[c[j].name],
                         max_ulp=max_ulp, scaled_ulp=scaled, dtype=old.dtype,
                         candidate_dtype=new.dtype if new.dtype != old.dtype else None, **common)
    return Operation(kind="parted", baseline_ops=_own_run(b, i, c),
                     candidate_ops=_own_run(c, j, b), **common)


# The inputs digest of an operation given no tensor (sha256 of nothing): a factory, aten.full or
# aten.arange, that makes a constant rather than computing from values
NO_TENSORS = hashlib.sha256(b"").hexdigest()


def _values(ops: Sequence[CapturedOp]) -> set[str]:
    return {op.out.digest for op in ops if op.out is not None}


def _computes(op: CapturedOp) -> bool:
    """Whether `op` computes values from values: not a view or a copy, not a factory."""
    return op.out is not None and not op.view and op.inputs != NO_TENSORS


def _first_own(ops: Sequence[CapturedOp], other: Sequence[CapturedOp]) -> int | None:
    """The index of the first of `ops` that computes (_computes) a value none of `other`
    computed."""
    theirs = _values(other)
    return next((k for k, op in enumerate(ops) if _computes(op)
                 and op.out.digest not in theirs), None)


def _own_run(ops: Sequence[CapturedOp], start: int | None, other: Sequence[CapturedOp]
             ) -> list[str]:
    """The computing operations (_computes) of `ops` from `start` until the sides meet again
    (one computes a value both computed), at most PARTED_NAMES + 1 (one more says there are
    more)."""
    if start is None:
        return []
    theirs, names = _values(other), []
    for op in ops[start:]:
        if not _computes(op):  # a view of a common value (attention's v) is no meeting
            continue
        if op.out.digest in theirs:
            break
        names.append(op.name)
        if len(names) > PARTED_NAMES:
            break
    return names


def _ancestors(calls: Sequence[ModuleCall], index: int) -> set[int]:
    found = set()
    while calls[index].parent >= 0:
        index = calls[index].parent
        found.add(index)
    return found


def drift_shape(old: Sequence[float], new: Sequence[float], dtype: str) -> DriftShape | None:
    """The shape of the loss difference from its first divergent step (None: none differs)."""
    first = first_difference(old, new)
    if first is None or first >= min(len(old), len(new)):
        return None
    growth = [abs(a - b) for a, b in zip(old[first:], new[first:])]
    try:
        ulp = ulp_distance(old[first], new[first], dtype)
    except ValueError:
        ulp = None
    if ulp is not None and ulp > SYSTEMATIC_ULPS:
        kind = "systematic"
    elif ulp is not None and ulp <= TINY_ULPS and max(growth[-3:]) >= GROWTH * growth[0]:
        kind = "amplified"
    else:
        kind = "steady"
    return DriftShape(kind=kind, first_step=first, first_ulp=ulp, growth=growth)


def locate_step(baseline: RunResult, candidate: RunResult, probe: bool = False) -> int | None:
    """The step a localisation re-runs: the first whose loss or gradient norm differs (a
    gradient can differ a step before the loss shows it); None when neither does. With `probe`
    (the harness can capture its probe: torch's), a difference in the probe outputs alone
    locates the probe, step = the number of steps: transformers 4.46.3's GPT-2 trains bit for
    bit with 4.40.2's (under dropout, torch's CPU SDPA runs the same math as eager attention)
    and differs only in eval mode, where SDPA takes its fused kernel."""
    steps = [s for s in (first_difference(baseline.losses, candidate.losses),
                         first_difference(baseline.grad_norms, candidate.grad_norms))
             if s is not None]
    limit = min(len(baseline.losses), len(candidate.losses))
    steps = [s for s in steps if s < limit]
    if steps:
        return min(steps)
    if (probe and limit and len(baseline.losses) == len(candidate.losses)
            and first_difference(baseline.outputs, candidate.outputs) is not None):
        return limit
    return None


def located(baseline: RunResult, candidate: RunResult, located_baseline: RunResult,
            located_candidate: RunResult) -> Location | None:
    """The Location of two localisation runs, with the drift's shape from the full runs; None
    when either run captured nothing (it broke: its verdict says so elsewhere)."""
    if located_baseline.capture is None or located_candidate.capture is None:
        return None
    loc = locate(located_baseline.capture, located_candidate.capture)
    loc.shape = drift_shape(baseline.losses, candidate.losses, candidate.dtype)
    return loc
