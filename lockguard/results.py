"""RunResult: what one harness run reports, as a versioned JSON contract.

The harness (which runs inside the target environment and cannot import pydantic) writes plain
JSON with exactly these fields; this module is the only place that reads it back. Floats are
written with Python's repr, which round-trips exactly, so losses are never rounded.
"""

import json
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCHEMA_VERSION = 1


class Status(str, Enum):
    ok = "ok"
    crashed = "crashed"
    nan = "nan"
    timeout = "timeout"


class Timings(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    import_s: float | None = None  # importing the framework
    first_step_s: float | None = None  # includes compilation / tracing
    step_median_s: float | None = None  # steady state, steps after the first
    total_s: float | None = None  # the whole harness process, as seen from inside


class CompileDiagnostics(BaseModel):
    """Compile behaviour of one run. Every field is optional: each framework fills what it has."""

    model_config = ConfigDict(extra="allow", defer_build=True)

    backend: str | None = None  # torch: backend actually used ("inductor", "eager", ...)
    graphs: int | None = None  # torch: graphs compiled
    unique_graphs: int | None = None
    graph_breaks: int | None = None
    break_reasons: list[str] = Field(default_factory=list)  # normalised: no addresses, no paths
    recompiles: int | None = None
    recompile_reasons: list[str] = Field(default_factory=list)
    eager_fallbacks: int | None = None  # frames that ran eager although compilation was asked
    fallback_reasons: list[str] = Field(default_factory=list)
    traces: dict[str, int] = Field(default_factory=dict)  # jax/tf: traces per user function
    compilations: dict[str, int] = Field(default_factory=dict)  # jax: compiles per user function
    xla: bool | None = None  # tf: XLA compiled the function
    compile_s: float | None = None  # time spent compiling, when it can be told apart


class RunResult(BaseModel):
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
    losses: list[float] = Field(default_factory=list)
    grad_norms: list[float] = Field(default_factory=list)
    outputs: list[float] = Field(default_factory=list)  # probe batch, flattened
    output_shape: list[int] = Field(default_factory=list)
    param_digest: str | None = None  # sha256 of the parameters' bytes, in a fixed order
    param_norms: dict[str, float] = Field(default_factory=dict)
    metrics: dict[str, float] = Field(default_factory=dict)  # user scenario extras
    compile: CompileDiagnostics | None = None
    timings: Timings = Field(default_factory=Timings)
    peak_memory_bytes: int | None = None
    status: Status = Status.ok
    error: str | None = None  # last lines of the error, for crashed/nan/timeout


class ResultError(ValueError):
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


def read_result(path: Path) -> RunResult:
    """Read a RunResult JSON file, with one clear error line when it is missing or corrupt."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ResultError(f"{path}: file not found") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultError(f"{path}:{exc.lineno}: invalid JSON: {exc.msg}") from None
    return parse_result(data, str(path))


def dump_result(result: RunResult) -> str:
    """Serialise a RunResult with exact floats (repr) and stable key order."""
    return json.dumps(result.model_dump(mode="json"), indent=1, sort_keys=True) + "\n"
