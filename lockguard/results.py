"""RunResult: what one harness run reports, as a versioned JSON contract.

The harness (which runs inside the target environment and cannot import pydantic) writes plain
JSON with exactly these fields; this module is the only place that reads it back. Floats are
written with Python's repr, which round-trips exactly, so losses are never rounded.
"""

import base64
import binascii
import math
import struct
import sys
from enum import Enum
from typing import Annotated, Any

from pydantic import (BaseModel, ConfigDict, Field, PlainSerializer, SerializerFunctionWrapHandler,
                      ValidationError, field_validator, model_serializer, model_validator)

from lockguard.errors import LockguardError

SCHEMA_VERSION = 1
# The largest result file read from a harness run: the size of the largest golden
# (golden.MAX_GOLDEN_BYTES), since a result is what a golden keeps.
MAX_RESULT_BYTES = 64 << 20


def _json_float(value: float) -> float | str:
    # Differences can be inf or nan (a NaN where a number was expected), and so can a broken
    # run's losses, kept in a report and its evidence. Strict JSON has no spelling for those
    # (pydantic's default writes null, which no float field reads back: `accept` and `lockguard
    # report` of a NaN run said "invalid report"), so they are written as the strings "inf" /
    # "nan", which pydantic reads back as floats.
    return value if math.isfinite(value) else str(value)


# A float that serialises to strict JSON even when it is not finite.
JsonFloat = Annotated[float, PlainSerializer(_json_float, when_used="json")]


def without_absent(model: BaseModel, data: dict[str, Any], keys: tuple[str, ...]
                   ) -> dict[str, Any]:
    """`data` (a model's serialised fields) without those of `keys` the model does not hold
    (None, empty): fields added to the contract later leave the JSON of runs that have none of
    them exactly as it was, and the files written before them."""
    for key in keys:
        if getattr(model, key) in (None, [], {}):
            data.pop(key, None)
    return data


class Status(str, Enum):
    """How a harness run ended; anything but `ok` makes the run broken. `nan`: a loss was not
    finite; `crashed`: the scenario raised, or the process left no result; `timeout` and
    `invalid` are set by lockguard."""

    ok = "ok"
    crashed = "crashed"
    nan = "nan"
    timeout = "timeout"
    invalid = "invalid"  # set by lockguard: the run finished but its result breaks the contract


class Timings(BaseModel):
    """How long a run took, in seconds, each figure None when it was not measured; the fields
    added later are left out of the JSON when absent, so older files read and write unchanged."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    import_s: float | None = None  # importing the framework
    first_step_s: float | None = None  # includes compilation / tracing
    step_median_s: float | None = None  # steady state, steps after the first
    total_s: float | None = None  # the whole harness process, as seen from inside
    # Data-parallel scenarios, where the framework lets the gradient all-reduce be timed apart
    # (torch DDP's comm hook): its median per step after the first. Absent elsewhere.
    sync_median_s: float | None = None
    # Data-pipeline scenarios: the mean step after the first (what `slower` judges for them).
    step_mean_s: float | None = None
    # A timing run of short steps (compare/timing.py): the median time of `block_steps`
    # consecutive steady steps.
    block_median_s: float | None = None
    block_steps: int | None = None

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return without_absent(self, handler(self), ("sync_median_s", "step_mean_s",
                                                    "block_median_s", "block_steps"))


class AccuracySeries(BaseModel):
    """The accuracy check of one series (losses, outputs): rmse from the fp64 reference."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    compiled_vs_fp64: JsonFloat | None = None
    eager_vs_fp64: JsonFloat | None = None
    limit: JsonFloat | None = None  # the most compiled_vs_fp64 may be
    compiled_vs_eager_max_abs: JsonFloat | None = None
    ok: bool | None = None


class AccuracyCheck(BaseModel):
    """torch's miscompile evidence, as harness/compile_torch.py `accuracy` writes it: PyTorch CI's
    rule, the compiled result at most k times farther (rmse) from fp64 than the eager one is."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    rule: str | None = None
    k: float | None = None
    floor: float | None = None
    ok: bool | None = None
    series: dict[str, AccuracySeries] = Field(default_factory=dict)


class CompileMemory(BaseModel):
    """A compiled scenario's peak device memory and its eager twin's, trained right after it in
    the same process (harness torch_.py `_compiled`), each as peak_device_memory_bytes from its
    own start: whether compiling saves memory. Device only: in one process the twin's host
    figure would count none of the pages the compiled run freed and it reuses."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    compiled_device: int | None = None
    eager_device: int | None = None


# A name a report prints (a module's, its class): one line, no control characters or escape
# sequences (the environment under test wrote it)
ONE_LINE = r"^[^\x00-\x1f\x7f-\x9f]*$"


class BreakLocation(BaseModel):
    """Where one torch graph break is (harness break_layer.py): the frame Dynamo stopped in
    (file shown from site-packages down, line, function) and the layer, the module of the
    compiled model whose class's method holds that frame or one around it (`module` its path in
    named_modules(), "(model)" the model itself; `modules` how many modules of that class the
    model holds, as the stack names no instance). Bounded: the harness's output is untrusted."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    # the entry of break_reasons it places (the harness cuts it to 400)
    reason: str = Field(max_length=400, pattern=ONE_LINE)
    file: str = Field(max_length=200, pattern=ONE_LINE)
    line: int | None = Field(default=None, ge=1, le=10_000_000)
    function: str | None = Field(default=None, max_length=200, pattern=ONE_LINE)
    module: str | None = Field(default=None, max_length=200, pattern=ONE_LINE)
    module_class: str | None = Field(default=None, max_length=200, pattern=ONE_LINE)
    method: str | None = Field(default=None, max_length=200, pattern=ONE_LINE)
    modules: int | None = Field(default=None, ge=1, le=1_000_000)


class CompileDiagnostics(BaseModel):
    """Compile behaviour of one run. Every field is optional: each framework fills what it has."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    backend: str | None = None  # torch: backend actually used ("inductor", "eager", ...)
    graphs: int | None = None  # torch: graphs compiled
    unique_graphs: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = Field(default_factory=list)  # normalised: no addresses, no paths
    # torch: the layer and frame of each break reason the harness could place (at most 50)
    break_locations: list[BreakLocation] = Field(default_factory=list, max_length=50)
    recompiles: int | None = None
    recompile_reasons: list[str] = Field(default_factory=list)
    eager_fallbacks: int | None = None  # frames that ran eager although compilation was asked
    fallback_reasons: list[str] = Field(default_factory=list)
    traces: dict[str, int] = Field(default_factory=dict)  # jax/tf: traces per user function
    compilations: dict[str, int] = Field(default_factory=dict)  # jax: compiles per user function
    xla: bool | None = None  # tf: XLA compiled the function
    compile_s: float | None = None  # time spent compiling, when it can be told apart
    accuracy: AccuracyCheck | None = None  # torch: compiled vs eager vs fp64 (miscompiles)
    memory: CompileMemory | None = None  # torch on cuda: compiled vs eager peak device memory

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only torch's compiled runs carry these.
        return without_absent(self, handler(self), ("accuracy", "memory", "break_locations"))


# A localisation run's capture (harness locate_torch.py): bounded whatever the harness wrote, so
# that a hostile result cannot make the judge hold or compare more than this.
MAX_CAPTURE_CALLS = 2000
MAX_CAPTURE_SAMPLE = 4096  # values of one tensor
# A module call's own aten operations (harness locate_torch.py's `operations`): at most this many
# a call, and a capture, and values kept of each one's output
MAX_CALL_OPS = 256
MAX_CAPTURE_OPS = 20_000
MAX_OP_SAMPLE = 64
# An operation's name as torch prints it: aten.addmm.default, a library's mylib.fused.default
OP_NAME = r"^[A-Za-z0-9_.:]+$"
SHA256 = r"^[0-9a-f]{64}$"


class CapturedTensor(BaseModel):
    """A module's output (or the gradient at it) in a capture: its digest, dtype, shapes, and
    its first values as float32 little-endian bytes in base64 (`values()` decodes them)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    digest: str = Field(pattern=SHA256)
    dtype: str = Field(max_length=32)
    shapes: list[list[int]] = Field(max_length=64)
    numel: int = Field(ge=0)
    sample: str = Field(max_length=(MAX_CAPTURE_SAMPLE * 4 + 2) // 3 * 4)

    @field_validator("sample")
    @classmethod
    def _whole_floats(cls, value: str) -> str:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("is not base64") from None
        if len(raw) % 4:
            raise ValueError("does not hold whole float32 values")
        return value

    def values(self) -> list[float]:
        """The sampled values (float32, widened exactly)."""
        raw = base64.b64decode(self.sample)
        return list(struct.unpack(f"<{len(raw) // 4}f", raw))


class RefereeFigures(BaseModel):
    """A module call run again by the harness: whether the replay in its own dtype reproduced
    its output bit for bit, and its output's distance from the float64 answer (ULPs of its
    dtype, max and mean); or why that could not be done."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    replay_exact: bool | None = None
    max_ulp: JsonFloat | None = Field(default=None, ge=0)
    mean_ulp: JsonFloat | None = Field(default=None, ge=0)
    error: str | None = Field(default=None, max_length=400)


class CapturedOp(BaseModel):
    """One aten operation of a module call's own code, as its replay ran it: its name, the
    digest of the tensors it was given, what it returned (None: an uninitialised allocation,
    aten.empty and kin, whose bytes mean nothing), and whether it only moves or aliases values
    (a view, a copy) rather than computing any."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(max_length=200, pattern=OP_NAME)
    inputs: str = Field(pattern=SHA256)
    out: CapturedTensor | None = None
    view: bool = False


class CallOperations(BaseModel):
    """The aten operations a module call's own code ran (not its children's), in order, in a
    replay of the call without gradients (forward only); `truncated` when the harness stopped
    recording (MAX_CALL_OPS, or the capture's budget), `error` when the replay failed."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    ops: list[CapturedOp] = Field(max_length=MAX_CALL_OPS)
    truncated: bool = False
    error: str | None = Field(default=None, max_length=400)


class ModuleCall(BaseModel):
    """One module call of a captured step, in call order (harness locate_torch.py)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(max_length=400, pattern=ONE_LINE)
    type: str = Field(max_length=200, pattern=ONE_LINE)  # its class (a values capture: dtype)
    parent: int = Field(ge=-1)  # the call it ran inside; -1: none
    params: str | None = Field(default=None, pattern=SHA256)  # its own parameters' digest
    inputs: str = Field(pattern=SHA256)
    out: CapturedTensor | None = None
    grad: CapturedTensor | None = None
    grad_order: int | None = Field(default=None, ge=0)  # when its gradient came, in the backward
    referee: RefereeFigures | None = None
    operations: CallOperations | None = None  # torch's (compare/locate.py names the op)

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Captures written before operations were recorded keep their JSON.
        return without_absent(self, handler(self), ("operations",))


class Capture(BaseModel):
    """Every module call of one training step (a localisation run's, lockguard's --locate)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    step: int = Field(ge=0)
    calls: list[ModuleCall] = Field(max_length=MAX_CAPTURE_CALLS)
    truncated: bool = False
    sample: int = Field(ge=1, le=MAX_CAPTURE_SAMPLE)
    probe: bool = False  # the probe's eval-mode forward after the last step (`step` = steps)

    @model_validator(mode="after")
    def _a_tree(self) -> "Capture":
        ops = 0
        for index, call in enumerate(self.calls):
            if call.parent >= index:
                raise ValueError(f"call {index} runs inside call {call.parent}, which is not "
                                 "an earlier call")
            for tensor in (call.out, call.grad):
                if tensor is not None and len(base64.b64decode(tensor.sample)) > 4 * self.sample:
                    raise ValueError(f"call {index} keeps more than {self.sample} values")
            for op in call.operations.ops if call.operations is not None else ():
                if op.out is not None and len(base64.b64decode(op.out.sample)) > 4 * MAX_OP_SAMPLE:
                    raise ValueError(f"an operation of call {index} keeps more than "
                                     f"{MAX_OP_SAMPLE} values")
            ops += len(call.operations.ops) if call.operations is not None else 0
            if ops > MAX_CAPTURE_OPS:
                raise ValueError(f"the calls hold more than {MAX_CAPTURE_OPS} operations")
        return self


class RunResult(BaseModel):
    """What one harness run reports (module docstring): per-step losses and grad norms, the
    probe outputs, parameter digest, compile diagnostics, timings and peak memory; what goldens
    keep and the verdicts compare."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: int
    scenario: str
    framework: str
    framework_version: str | None = None
    device: str | None = None  # device class actually used: cpu | cuda | tpu
    device_name: str | None = None  # e.g. "cuda:0 NVIDIA H200", "cpu"
    dtype: str = "float32"
    steps: int
    seed: int = 0
    fingerprint: dict[str, Any] = Field(default_factory=dict)
    losses: list[JsonFloat] = Field(default_factory=list)
    grad_norms: list[JsonFloat] = Field(default_factory=list)
    outputs: list[JsonFloat] = Field(default_factory=list)  # probe batch, flattened
    output_shape: list[int] = Field(default_factory=list)
    param_digest: str | None = None  # sha256 of the parameters' bytes, in a fixed order
    param_norms: dict[str, JsonFloat] = Field(default_factory=dict)
    metrics: dict[str, JsonFloat] = Field(default_factory=dict)  # user scenario extras
    compile: CompileDiagnostics | None = None
    timings: Timings = Field(default_factory=Timings)
    # Peak host memory of the training: how far the resident set rose above where it stood when
    # the training started, after the framework's import (harness common.TrainingMemory), so
    # that two processes compare A/B as a ratio. Not a lifetime peak of the process.
    peak_memory_bytes: int | None = None
    # Peak accelerator memory of the training, where the framework reports one (torch on cuda:
    # torch.cuda.max_memory_allocated, reset before training). Absent from older results.
    peak_device_memory_bytes: int | None = None
    # Data-pipeline scenarios: the sample ids of each step's batch in the order the pipeline
    # delivered them, batches per epoch, and the sha256 of each epoch's order (harness
    # gen.order_digest). Absent from other results, and from their JSON.
    sample_order: list[list[int]] = Field(default_factory=list)
    batches_per_epoch: int | None = Field(default=None, ge=1)
    epoch_digests: list[str] = Field(default_factory=list)
    # A localisation run (--locate-step): every module call of that step. Absent elsewhere.
    capture: Capture | None = None
    status: Status = Status.ok
    error: str | None = None  # last lines of the error, for crashed/nan/timeout

    @model_serializer(mode="wrap")
    def _without_absent(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        # Only the data scenarios record an order, only localisation runs a capture.
        return without_absent(self, handler(self),
                              ("sample_order", "batches_per_epoch", "epoch_digests", "capture"))


class ResultError(LockguardError):
    """A RunResult file that cannot be read: the message names the file and what is wrong."""


def parse_result(data: Any, source: str) -> RunResult:
    """Validate decoded JSON as a RunResult; `source` names where it came from for errors."""
    if not isinstance(data, dict):
        raise ResultError(f"{source}: expected a JSON object, found {type(data).__name__}")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise ResultError(
            f"{source}: schema_version {version!r} is not supported (expected {SCHEMA_VERSION})"
        )
    try:
        return RunResult.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise ResultError(f"{source}: field {where}: {first['msg']}") from None


def contract_problems(result: RunResult, *, scenario: str, framework: str,
                      steps: int) -> list[str]:
    """What makes an `ok` result unusable as evidence; empty when it is sound.

    A run that stops early, returns five losses for twenty steps or a NaN output must never
    be compared as if it were healthy: "bitwise identical over 20 steps" has to mean 20 steps.
    """
    problems = []
    if result.scenario != scenario:
        problems.append(f"it is a result of scenario {result.scenario!r}, not {scenario!r}")
    if result.framework != framework:
        problems.append(f"it was run by {result.framework!r}, not {framework!r}")
    if result.steps != steps:
        problems.append(f"it says {result.steps} steps, {steps} were asked for")
    if len(result.losses) != steps:
        problems.append(f"{len(result.losses)} losses for {steps} steps")
    if result.grad_norms and len(result.grad_norms) != steps:
        problems.append(f"{len(result.grad_norms)} gradient norms for {steps} steps")
    if result.sample_order and len(result.sample_order) != steps:
        problems.append(f"{len(result.sample_order)} batches' sample order for {steps} steps")
    if result.capture is not None and result.capture.step >= steps:
        problems.append(f"it captured step {result.capture.step} of a run of {steps} steps")
    if result.output_shape and math.prod(result.output_shape) != len(result.outputs):
        problems.append(f"{len(result.outputs)} outputs for shape {result.output_shape}")
    return problems


def finite(value: Any) -> bool:
    """Whether `value` is a number a float holds: a finite float, or an integer within float
    range (10**400 is not: math.isfinite cannot even take it). A bool is no number here. The
    one finiteness check, for results as validated and for raw JSON alike."""
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return -sys.float_info.max <= value <= sys.float_info.max
    return False


def shown_number(value: Any) -> str:
    """A number for an error line: an integer of hundreds of digits shortened."""
    text = repr(value)
    return text if len(text) <= 24 else f"{text[:12]}…({len(text)} characters)"


def non_finite(result: RunResult) -> str | None:
    """Where an ok result holds NaN or inf, if anywhere: a NaN output is as broken as a NaN loss."""
    series = [("loss", result.losses), ("gradient norm", result.grad_norms),
              ("output", result.outputs)]
    for label, values in series:
        for i, v in enumerate(values):
            if not finite(v):
                return f"{label} {i} is {shown_number(v)}"
    for label, named in (("parameter norm", result.param_norms), ("metric", result.metrics)):
        for name, v in named.items():
            if not finite(v):
                return f"{label} {name!r} is {shown_number(v)}"
    return None


def verify(result: RunResult, *, scenario: str, framework: str, steps: int) -> RunResult:
    """`result` checked in full on arrival: an `ok` run that breaks the contract becomes
    `invalid` (or `nan`), with what was wrong, so that it is `broken`, never compared."""
    if result.status != Status.ok:
        return result
    problems = contract_problems(result, scenario=scenario, framework=framework, steps=steps)
    if problems:
        return result.model_copy(update={
            "status": Status.invalid,
            "error": "the run's result breaks the result contract: " + "; ".join(problems)})
    if (where := non_finite(result)) is not None:
        return result.model_copy(update={"status": Status.nan, "error": where})
    return result
