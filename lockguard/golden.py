"""The golden store: golden/<device>/<hardware class>/<scenario>.json, bound by a digest.

One file per scenario and hardware class (lockguard/hardware.py), side by side:

    golden/cpu/intel-6.207-avx512-84eabb3b/torch.mlp.json
    golden/cpu/amd-25.17-avx512-0c1d2e3f/torch.mlp.json

A directory per class rather than one file holding every class: `record` on one machine replaces
only its own class's file (atomically, through lockguard/files.py) and never reads, rewrites or
races with another machine's; two branches that each record a class merge without conflict; and
the unchanged-inputs shortcut reads one small file.

A golden file (schema 2) is one pydantic model, GoldenFile, which every reader goes through:

    {
     "digest": "sha256:<hex>",
     "hardware": {"device", "id", "name", "features"},
     "provenance": {Provenance: "lock", "lock_hash", "inputs_digest", "framework_version", "env",
                    "git_commit", "lockguard_version", "recorded_at", and, for a golden
                    adopted by `lockguard accept`, "acceptance": {"reason", "author",
                    "accepted_at", "report_id", "verdict", "baseline"}},
     "result": {... RunResult, its fingerprint included ...},
     "schema_version": 2}

The digest line comes first, and the digest is sha256 over the file's text without that line
(line endings normalised, so a CRLF checkout still verifies): an edit of a loss, of the
provenance or of the class after recording makes the file an error (exit 2, "re-record it"),
never a reference. Hashing the text as written, rather than a canonical re-serialisation of the
decoded JSON, costs a read instead of a second encoding of every float, and lets a future writer
change its formatting freely. It is a checksum against hand edits, bad merges and truncation, not
a signature: whoever can write golden/ can re-record it, and that is what code review of golden/
is for. Every read also checks what the shortcut trusts (the status, the number and finiteness of
the losses, the class against the file's directory and the result's own fingerprint), so an
answer "identical" from provenance rests on a golden that could be one.

`write` leaves a golden alone when the one there holds the same reference (`reference_key`: the
numbers, digests and diagnostics of the result and the inputs it was recorded from, not its
timings, fingerprint details or when and by whom it was recorded), so that re-recording an
unchanged scenario changes no file, and a golden diff in a pull request is a real change.

Schema 1 goldens (golden/<device>/<scenario>.json, no class, no digest) are refused with "re-record
it"; `record` replaces them.
"""


import hashlib
import json
import math
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, ValidationError, field_serializer, field_validator

from lockguard import __version__
from lockguard.compare.envelope import Envelope
from lockguard.errors import LockguardError, printable
from lockguard.files import MiB, ReadError, parse_json, read_bytes, write_text
from lockguard.hardware import HardwareClass, hardware_class
from lockguard.sizes import format_size
from lockguard.results import (
    SCHEMA_VERSION as RESULT_SCHEMA, RunResult, Status, finite, shown_number, verify,
)

SCHEMA_VERSION = 2  # of the golden file; its "result" carries RunResult's own schema_version
# The largest golden file read or written: the largest bundled scenario's takes 54 KiB, and a
# million steps (names.MAX_STEPS) of losses and gradient norms 43 MiB. A larger file is
# refused before it is read (an 80 MB one cost a minute and 1.5 GB before it failed anyway),
# and `record` refuses to write one no check could read.
MAX_GOLDEN_BYTES = 64 * MiB


class GoldenError(LockguardError):
    """A golden file that exists but cannot be used; one line naming the file."""


class Acceptance(BaseModel):
    """Why a golden was adopted from a check's candidate run by `lockguard accept`."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    reason: str
    author: str
    accepted_at: str  # UTC, ISO 8601
    report_id: str | None = None  # the check report (and artefact directory) it came from
    verdict: str | None = None  # what that check said of it: drift, new, ...
    baseline: str | None = None  # what that check compared it with
    # What binds an A/B acceptance to the change it was made for (`check --base` passes the
    # failing verdict only for these locks and these numbers): the baseline lock's hash (the
    # candidate's is the provenance's lock_hash) and `result_digest` of the candidate's run.
    baseline_lock_hash: str | None = None
    result_digest: str | None = None
    # False: adopted from artefacts this machine's lockguard did not write (a CI download), so
    # nothing vouches that a run produced them: the unchanged-inputs shortcut never answers
    # from this golden, every check runs the scenario and compares. None: before this was
    # recorded (taken as written here).
    verified: bool | None = None


class Provenance(BaseModel):
    """Where a golden's result came from. Every field is optional: a golden is read whatever
    lockguard of schema 2 recorded it."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    lock: str | None = None  # the lock's path as the recording command named it
    lock_label: str | None = None  # a lock read from git: main@1a2b3c4d:requirements.txt
    lock_hash: str | None = None
    # What the unchanged-inputs shortcut compares (scenarios.inputs_digest): lock, harness,
    # scenario, settings, backend and interpreter.
    inputs_digest: str | None = None
    framework_version: str | None = None
    env: str | None = None  # the environment it ran in (venv <hash>, image)
    git_commit: str | None = None
    lockguard_version: str | None = None
    recorded_at: str | None = None  # UTC, ISO 8601
    acceptance: Acceptance | None = None
    # `record --repeat K` (K > 1): how many runs were made and whether they were bitwise equal
    # (then the golden is compared exactly; otherwise it carries their noise envelope).
    repeats: int | None = None
    deterministic: bool | None = None


class GoldenFile(BaseModel):
    """A golden file as stored (the digest line aside, which `document_text` adds)."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    schema_version: Literal[2]
    digest: str | None = None  # checked against the text before the model is built
    hardware: HardwareClass
    provenance: Provenance
    result: RunResult  # with an envelope: the run of median final loss
    envelope: Envelope | None = None  # recorded runs that were not bitwise equal

    @field_validator("hardware", mode="before")
    @classmethod
    def _hardware(cls, value: Any) -> HardwareClass:
        return value if isinstance(value, HardwareClass) else HardwareClass.from_json(value)

    @field_serializer("hardware")
    def _hardware_json(self, value: HardwareClass) -> dict[str, Any]:
        return value.to_json()

    def text(self) -> str:
        """The file's text: sorted keys, repr floats, the digest line first."""
        document = self.model_dump(mode="json", exclude={"digest"}
                                   | ({"envelope"} if self.envelope is None else set()))
        document["provenance"] = self.provenance.model_dump(mode="json", exclude_none=True)
        return document_text(document)


@dataclass(frozen=True)
class Golden:
    """A golden file read from `path`, verified."""

    path: Path
    file: GoldenFile

    @property
    def result(self) -> RunResult:
        """The recorded RunResult; for a golden with an envelope, the run of median final loss."""
        return self.file.result

    @property
    def provenance(self) -> Provenance:
        """Where the result came from (the lock, git commit, environment, when), each field None
        when the recording lockguard did not say."""
        return self.file.provenance

    @property
    def hardware(self) -> HardwareClass:
        """The hardware class it was recorded on: bitwise comparisons hold only on the same
        class."""
        return self.file.hardware

    @property
    def envelope(self) -> Envelope | None:
        """The spread of the recorded runs (`record --repeat`) when they were not bitwise equal;
        None when the golden is a single, reproducible result."""
        return self.file.envelope


def golden_path(golden_dir: Path, device: str, hardware_id: str, scenario_id: str) -> Path:
    """Where the golden of `scenario_id` on `hardware_id` lives; never outside golden_dir."""
    return _inside(golden_dir, device, hardware_id, f"{scenario_id}.json")


def legacy_path(golden_dir: Path, device: str, scenario_id: str) -> Path:
    """Where schema 1 kept it, before goldens had a hardware class."""
    return _inside(golden_dir, device, f"{scenario_id}.json")


def _inside(golden_dir: Path, *parts: str) -> Path:
    # Scenario ids are validated where they are read (config); this is the second lock on the
    # door: whatever an id holds, a golden is only ever read or written below golden_dir.
    for part in parts:
        if not part or part in (".", "..") or "/" in part or "\0" in part \
                or (os.sep != "/" and os.sep in part):
            raise GoldenError(f"{golden_dir}: {part!r} cannot be a golden file's path "
                              "component (it would leave golden_dir)")
    path = golden_dir.joinpath(*parts)
    # By real paths: a symlink below golden_dir (a device or class directory, a golden file)
    # that leads out of it would have `record` write, and `check` read, wherever it points.
    # golden_dir itself may be a symlink: where it leads is the golden directory.
    root = os.path.realpath(golden_dir)
    here = root
    for depth, part in enumerate(parts, 1):
        here = os.path.realpath(os.path.join(here, part))
        if os.path.commonpath([root, here]) != root:
            step = golden_dir.joinpath(*parts[:depth])
            raise GoldenError(f"{step}: leads out of golden_dir {golden_dir} (to {here}); "
                              "a golden is only read or written below it: replace the "
                              "symlink with a directory or file of its own")
    return path


def class_paths(golden_dir: Path, device: str, scenario_id: str) -> list[Path]:
    """The goldens of `scenario_id` for every hardware class of `device`, by class id."""
    base = _inside(golden_dir, device)
    try:
        classes = sorted(e.name for e in os.scandir(base) if e.is_dir())
    except (FileNotFoundError, NotADirectoryError):
        return []
    except OSError as exc:
        raise GoldenError(f"{base}: cannot list golden classes: {exc.strerror}") from None
    paths = [golden_path(golden_dir, device, c, scenario_id) for c in classes]
    return [p for p in paths if os.path.lexists(p)]


_DIGEST_LINE = re.compile(r'\{\r?\n "digest": "(sha256:[0-9a-f]{64})",\r?\n')


def text_digest(body: str) -> str:
    """The sha256 of a golden's JSON body as "sha256:<hex>", line endings normalised to LF, so
    that a checkout with CRLF endings still verifies."""
    return "sha256:" + hashlib.sha256(body.replace("\r\n", "\n").encode("utf-8")).hexdigest()


def document_text(document: dict[str, Any]) -> str:
    """A golden document as written: its JSON, with the digest of that JSON as the first line
    after the brace (a "digest" key in `document` is replaced)."""
    body = json.dumps({k: v for k, v in document.items() if k != "digest"}, indent=1,
                      sort_keys=True, allow_nan=False) + "\n"
    assert body.startswith("{\n")
    return f'{{\n "digest": "{text_digest(body)}",\n' + body[2:]


def load(path: Path) -> Golden | None:
    """The golden at `path`, verified in full (digest, model, result contract, class) — None
    when there is none. The one way a golden is read."""
    try:
        data = read_bytes(path, "golden file", MAX_GOLDEN_BYTES)
    except ReadError as exc:
        if exc.missing:
            return None
        raise GoldenError(str(exc)) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise GoldenError(f"{path}: corrupt golden file: not UTF-8 (byte {exc.start}); "
                          "re-record it") from None
    try:
        document = parse_json(text, path)
    except ReadError as exc:
        where = f"{path}:{exc.line}" if exc.line else str(path)
        raise GoldenError(f"{where}: corrupt golden file: {exc.reason}; re-record it") \
            from None
    _verify_text(path, document, text)
    try:
        file = GoldenFile.model_validate(document)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(root)"
        raise GoldenError(f"{path}: corrupt golden file: {where}: {first['msg']}; "
                          "re-record it") from None
    _verify_model(path, file)
    return Golden(path=path, file=file)


def _verify_text(path: Path, document: Any, text: str) -> None:
    """What is checked before the model is built: the version, the digest, and (with messages
    naming the value) what makes a result unusable as a reference."""
    if not isinstance(document, dict):
        raise GoldenError(f"{path}: corrupt golden file: expected a JSON object; re-record it")
    version = document.get("schema_version")
    if version != SCHEMA_VERSION:
        raise GoldenError(f"{path}: golden schema_version {version!r} is not supported "
                          f"(expected {SCHEMA_VERSION}); re-record it")
    result, provenance = document.get("result"), document.get("provenance")
    if not isinstance(result, dict) or not isinstance(provenance, dict):
        raise GoldenError(f"{path}: corrupt golden file: expected 'provenance' and 'result'; "
                          "re-record it")
    line = _DIGEST_LINE.match(text)
    if line is None or document.get("digest") != line.group(1) \
            or text_digest("{\n" + text[line.end():]) != line.group(1):
        raise GoldenError(f"{path}: golden file edited since it was recorded (its digest does "
                          "not match its content); re-record it")
    # Recorded by lockguard, so these hold unless lockguard had a bug or its rules changed;
    # each is what an answer from provenance would otherwise take on trust.
    problem = _unusable(result)
    if problem:
        raise GoldenError(f"{path}: not a usable reference: {problem}; re-record it")


def _verify_model(path: Path, file: GoldenFile) -> None:
    result, hardware = file.result, file.hardware
    if result.schema_version != RESULT_SCHEMA:
        raise GoldenError(f"{path}: its result's schema_version {result.schema_version} is not "
                          f"supported (expected {RESULT_SCHEMA}); re-record it")
    # The same contract a run is held to on arrival (what `_unusable` checks by name, and more).
    checked = verify(result, scenario=result.scenario, framework=result.framework,
                     steps=result.steps)
    if checked.status != Status.ok:
        raise GoldenError(f"{path}: not a usable reference: {checked.error}; re-record it")
    where = (path.parent.parent.name, path.parent.name)
    if (hardware.device, hardware.id) != where:
        recorded = printable(f"{hardware.device}/{hardware.id}")
        raise GoldenError(f"{path}: recorded for {recorded!r} but stored under "
                          f"{where[0]}/{where[1]}; move it back or re-record it")
    if file.envelope is not None:
        for name in ("losses", "grad_norms", "outputs"):
            band = getattr(file.envelope, name)
            lengths = {len(values) for values in band.model_dump().values()} if band else set()
            if band is not None and lengths != {len(getattr(result, name))}:
                raise GoldenError(f"{path}: its noise envelope's {name} do not match its "
                                  f"result's ({sorted(lengths)} values, not "
                                  f"{len(getattr(result, name))}); re-record it")
    own = hardware_class(result.fingerprint, hardware.device, result.device_name)
    if own.id != hardware.id:
        raise GoldenError(f"{path}: its hardware class {hardware.id} is not that of its own "
                          f"fingerprint ({own.id}: another lockguard's classes?); re-record it")


def _unusable(result: dict[str, Any]) -> str | None:
    """Why a recorded result cannot serve as a reference, or None."""
    if result.get("status") != "ok":
        return f"the recorded run's status is {result.get('status')!r}, not 'ok'"
    steps = result.get("steps")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        return f"steps is {steps!r}"
    losses = result.get("losses")
    if not isinstance(losses, list) or len(losses) != steps:
        count = len(losses) if isinstance(losses, list) else "no"
        return f"{count} losses for {steps} steps"
    for name in ("losses", "grad_norms", "outputs"):
        values = result.get(name, [])
        if not isinstance(values, list):
            return f"{name} is not a list"
        if _all_finite(values):
            continue
        for i, v in enumerate(values):
            if not finite(v):
                return f"{name}[{i}] is {shown_number(v)}, not a finite number"
    return None


def _all_finite(values: list[Any]) -> bool:
    # The common case in C: only floats, and their exact sum is finite (so is every term).
    # Anything else (an int, which may be beyond float range) is left to `finite`, one by one.
    if not set(map(type, values)) <= {float}:
        return False
    try:
        return math.isfinite(math.fsum(values))
    except (OverflowError, ValueError):
        return False


# The parts of a golden that are measurements of the moment or say where and when it was made,
# not what it holds: a new recording that differs only in these leaves the file as it is.
# metrics["run_s"]: the wall time of a user script's run() (harness/userscript.py).
# compile["memory"]: the peak memory of a compiled scenario and its eager twin.
_RESULT_NOISE: dict[str, Any] = {"timings": True, "peak_memory_bytes": True,
                                 "peak_device_memory_bytes": True, "fingerprint": True,
                                 "compile": {"compile_s", "memory"}, "metrics": {"run_s"}}
_PROVENANCE_KEPT = ("lock_hash", "inputs_digest", "framework_version", "repeats",
                    "deterministic")


def result_digest(result: RunResult) -> str:
    """A digest of what a run produced — its numbers, digests, diagnostics and sample order,
    not its timings, memory or fingerprint details: equal digests, the same numbers."""
    data = result.model_dump(mode="json", exclude=_RESULT_NOISE)
    text = json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))
    return "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def trusted(gold: Golden) -> bool:
    """Whether a golden may answer a check without a run: not one adopted from artefacts that
    nothing vouches for (Acceptance.verified)."""
    return _vouched(gold.provenance)


def _vouched(provenance: Provenance) -> bool:
    acceptance = provenance.acceptance
    return acceptance is None or acceptance.verified is not False


def reference_key(result: RunResult, provenance: Provenance, hardware: HardwareClass,
                  envelope: Envelope | None = None) -> str:
    """What a golden is compared by when deciding whether to rewrite it, as stable JSON (sorted
    keys, repr floats): the result without timings, memory and fingerprint details (its
    hardware class stands for the machine), and the inputs it was recorded from."""
    data = {"result": result.model_dump(mode="json", exclude=_RESULT_NOISE),
            "inputs": {k: getattr(provenance, k) for k in _PROVENANCE_KEPT},
            "hardware": hardware.to_json()}
    if envelope is not None:
        data["envelope"] = envelope.model_dump(mode="json")
    return json.dumps(data, sort_keys=True, allow_nan=False, separators=(",", ":"))


def _binding(provenance: Provenance) -> tuple[object, ...] | None:
    """What an A/B acceptance binds a golden to; None for a golden that records none."""
    acc = provenance.acceptance
    if acc is None or acc.baseline_lock_hash is None:
        return None
    return (acc.baseline_lock_hash, provenance.lock_hash, acc.result_digest, acc.verified)


def write(path: Path, result: RunResult, provenance: Provenance,
          hardware: HardwareClass, envelope: Envelope | None = None) -> bool:
    """Replace `path` atomically with a golden for `result` (and the noise `envelope` of its
    runs, if they differed), recorded on `hardware` — unless the golden there already holds the
    same reference (`reference_key`): then the file is left untouched and False returned."""
    try:
        old = load(path)
    except GoldenError:
        old = None  # unusable: replaced
    if old is not None \
            and reference_key(old.result, old.provenance, old.hardware, old.envelope) \
            == reference_key(result, provenance, hardware, envelope) \
            and _binding(provenance) in (None, _binding(old.provenance)) \
            and (_vouched(old.provenance) or not _vouched(provenance)):
        # (A new acceptance of the same numbers is written: it is what passes; and a run
        # this machine vouches for replaces an unverified golden of the same numbers.)
        return False
    stamped = provenance.model_copy(update={
        "lockguard_version": __version__,
        "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())})
    file = GoldenFile(schema_version=SCHEMA_VERSION, hardware=hardware, provenance=stamped,
                      result=result, envelope=envelope)
    text = file.text()
    if len(text.encode("utf-8")) > MAX_GOLDEN_BYTES:
        raise GoldenError(f"{path}: not written: the golden of {result.scenario} would be "
                          f"{format_size(len(text.encode('utf-8')))}, more than the "
                          f"{format_size(MAX_GOLDEN_BYTES)} a golden file can be; record fewer "
                          "steps")
    write_text(path, text)
    return True
