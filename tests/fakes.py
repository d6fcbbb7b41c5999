"""A fake environment backend for fast flow tests (like httpx's MockTransport): the flows run
for real — plan, goldens, compare, Report — but no environment is built and no framework runs.

The numbers a FakeEnv reports are a deterministic function of the scenario, the seed and the
version its lock pins for the scenario's framework, so a flow test can make two locks agree
(same pins) or drift (another version) without installing anything. Real environments are
tested beside these, never replaced by them.
"""

from __future__ import annotations

import base64
import hashlib
import math
import os
import struct
import random
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from lockguard.envs.base import EnvError
from lockguard.locks.ref import LockRef, read_lock
from lockguard.hardware import cpu_info
from lockguard.locks.families import framework_version
from lockguard.locks.model import Lock
from lockguard.results import SCHEMA_VERSION, RunResult, Status
from lockguard.scenarios import BUNDLED

# The libraries each library scenario builds its model with (Scenario.requires).
LIBRARIES = {s.id: s.requires for s in BUNDLED if s.requires}


def lock(tmp_path: Path, name: str, text: str) -> LockRef:
    """A lock file `name` with `text` in tmp_path, parsed, as a flow takes it."""
    path = tmp_path / name
    path.write_text(text)
    return LockRef(path, read_lock(path))


def losses_for(scenario: str, version: str, seed: int, steps: int) -> list[float]:
    """A decaying curve whose low bits depend on the framework version: another version drifts
    by a few ULPs from step 1 on, exactly as a real upgrade that changes a reduction order."""
    salt = int(hashlib.sha256(f"{scenario}|{version}".encode()).hexdigest()[:8], 16) % 997
    base = [2.0 * math.exp(-0.1 * i) + 0.01 * ((seed * 7 + i * 13) % 5) for i in range(steps)]
    return [v if i == 0 else v * (1 + salt * 1e-6) for i, v in enumerate(base)]


def other_cpu() -> dict:
    """A CPU of another hardware class than this machine's, whichever of the Intel and AMD
    machines of this kind runs the test: an AMD EPYC 7B13 (family 25 model 1), or on such a
    machine a 7B12 (family 23 model 49)."""
    here = cpu_info()
    zen3 = {"vendor_id": "AuthenticAMD", "family": 25, "model_number": 1,
            "model": "AMD EPYC 7B13 64-Core Processor"}
    zen2 = {"vendor_id": "AuthenticAMD", "family": 23, "model_number": 49,
            "model": "AMD EPYC 7B12 64-Core Processor"}
    same = (here.get("vendor_id"), here.get("family"), here.get("model_number")) == (
        zen3["vendor_id"], zen3["family"], zen3["model_number"])
    return zen2 if same else zen3


def _code_salt(script: Path, project: Path | None = None) -> str:
    """A salt of a user scenario's code: its script and the files beside it (what a real run
    would import or read), and its project's data/ folder (a dataset it reads from outside its
    code, named in its `data` or not: the run reads it either way)."""
    h = hashlib.sha256()
    data = sorted(Path(project, "data").glob("*")) if project is not None else []
    for path in sorted(p for p in Path(script).parent.iterdir() if p.is_file()) + data:
        h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return "+code-" + h.hexdigest()[:8]


def _captured(values: list[float]) -> dict:
    """A captured tensor as the harness writes it (locate_torch._describe): float32 values."""
    raw = struct.pack(f"<{len(values)}f", *values)
    return {"digest": hashlib.sha256(raw).hexdigest(), "dtype": "float32",
            "shapes": [[len(values)]], "numel": len(values),
            "sample": base64.b64encode(raw).decode("ascii")}


def fake_shift(version: str) -> int:
    """How many float32 ULPs a version moves fc2's second output value (1 to 64)."""
    return 1 + int(hashlib.sha256(version.encode()).hexdigest()[:8], 16) % 64


def capture_for(version: str, step: int) -> dict:
    """A localisation run's capture of a two-layer model whose fc2 kernel moves with the
    version: fc2's second output value `fake_shift(version)` ULPs above 2.0, the model's output
    (fc2's, passed on) with it, and the gradient at fc1's output moving too (downstream);
    fc1 and every input are the same in every version, as are the weights."""
    fc2 = [1.0, 2.0 + fake_shift(version) * 2.0 ** -22, 3.0]
    same = hashlib.sha256(b"inputs").hexdigest()
    weights = hashlib.sha256(b"weights").hexdigest()
    fc1 = _captured([0.5, 0.25])
    calls = [
        {"name": "(model)", "type": "MLP", "parent": -1, "inputs": same, "out": _captured(fc2),
         "grad": _captured([1.0, 1.0, 1.0]), "grad_order": 0},
        {"name": "fc1", "type": "Linear", "parent": 0, "params": weights, "inputs": same,
         "out": fc1, "grad": _captured([0.125, 0.5 + fake_shift(version) * 2.0 ** -24]),
         "grad_order": 2},
        {"name": "fc2", "type": "Linear", "parent": 0, "params": weights,
         "inputs": hashlib.sha256(fc1["digest"].encode()).hexdigest(), "out": _captured(fc2),
         "grad": _captured([1.0, 1.0, 1.0]), "grad_order": 1,
         "referee": {"replay_exact": True, "max_ulp": fake_shift(version) / 4,
                     "mean_ulp": fake_shift(version) / 12}},
    ]
    return {"step": step, "calls": calls, "truncated": False, "sample": 512}


@dataclass
class FakeEnv:
    label: str
    lock_hash: str
    lock: Lock
    backend: "FakeBackend"
    # distribution -> ((file, runs code), ...), as a venv's (envs/venv.startup_files)
    startup_files: dict = field(default_factory=dict)
    path: Path | None = None  # a venv-like folder whose dist-info holds `requires`, if given

    def site_packages(self) -> Path | None:
        return next(iter(self.path.glob("lib/python*/site-packages")), None) if self.path else None

    def run(self, request, out_dir: Path) -> RunResult:
        with self.backend.running(request.scenario_id):
            return self._run(request)

    def _run(self, request) -> RunResult:
        sid, fw = request.scenario_id, request.framework
        # One environment serves every framework its lock pins, as a venv does.
        version = framework_version(self.lock, fw) or "unpinned"
        # A library scenario (transformers.gpt2) moves with its libraries' versions too.
        for name in LIBRARIES.get(sid, ()):
            pin = self.lock.pin(name)
            version += f"+{name}-{pin.version if pin else 'unpinned'}"
        self.backend.record_run(sid, version, request.steps)
        behaviour = self.backend.behaviour.get((sid, version))
        if behaviour in ("crash", "timeout"):
            return RunResult(schema_version=SCHEMA_VERSION, scenario=sid, framework=fw,
                             steps=request.steps, seed=request.seed,
                             status=Status.crashed if behaviour == "crash" else Status.timeout,
                             error="RuntimeError: boom" if behaviour == "crash" else
                             f"no result after {request.timeout}s")
        # A user scenario's numbers move with its code too, as a real run's would.
        code = (_code_salt(request.script, request.project) if request.script is not None
                else "")
        # ...and with a variable that changes numerics, as XLA_FLAGS does a real run's.
        code += os.environ.get("XLA_FLAGS", "")
        if request.script is not None:
            with self.backend._lock:
                self.backend.scripts.append((sid, Path(request.script).read_text()))
        # "probe-only": every version trains to the same bits, its probe outputs differ (as
        # transformers' eager -> sdpa GPT-2 on the CPU: SDPA's fused kernel in eval mode only)
        losses = losses_for(sid, (version if behaviour != "probe-only" else "") + code,
                            request.seed, request.steps)
        # Another CPU's kernels: the same curve, its low bits moved.
        losses = [v * (1 + self.backend.nudge) for v in losses]
        if behaviour == "invalid":
            losses = losses[:-1]  # one loss short: a result that breaks the contract
        if behaviour == "nan":
            losses[-1] = float("nan")
        digest = f"d{version}"
        if behaviour and behaviour.startswith("noisy"):
            # Like a GPU reduction with atomics: every run lands elsewhere, by about 1e-4
            # relative; "noisy:+0.01" also shifts the whole curve by 1 % of itself.
            z, shift = self.backend.next_noise(), float(behaviour.partition(":")[2] or 0)
            losses = [v * (1 + 1e-4 * z * (1 + i % 3) / 3 + shift) for i, v in enumerate(losses)]
            digest += f"-{z!r}"
        device = "cpu" if behaviour == "cpu-fallback" else request.device
        step = self.backend.step_time(sid, version)
        return RunResult(schema_version=SCHEMA_VERSION, scenario=sid, framework=fw,
                         framework_version=version, device=device, device_name=device,
                         steps=request.steps, seed=request.seed, losses=losses,
                         # the harness's own reading, or another CPU's (`cpu`)
                         fingerprint={"cpu": {**cpu_info(), **self.backend.cpu}},

                         grad_norms=[abs(v) / 2 for v in losses],
                         outputs=(losses[-2:] if behaviour != "probe-only"
                                  else losses[-1:] + [float(fake_shift(version))]),
                         output_shape=[2], param_digest=digest,
                         timings={"total_s": 0.01, "first_step_s": 0.002,
                                  "step_median_s": step,
                                  # a timing run of short steps times them in blocks too
                                  **({"block_median_s": step * request.time_block,
                                      "block_steps": request.time_block}
                                     if request.time_block else {})},
                         peak_memory_bytes=self.backend.peak_bytes.get(sid),
                         capture=({**capture_for(version, request.locate_step),
                                   "probe": request.locate_step == request.steps}
                                  if request.locate_step is not None else None))


@dataclass
class FakeBackend:
    """Counts what a flow prepared and ran; `behaviour[(scenario, version)]` makes a run crash
    ("crash"), time out ("timeout"), end in NaN ("nan"), break the result contract ("invalid":
    a loss short), land on the CPU ("cpu-fallback"), differ from run to run ("noisy",
    "noisy:+0.01" shifted by +1 %) or differ in the probe outputs alone ("probe-only"). `cpu` overrides the fingerprint's CPU (other_cpu(): a run
    on another hardware class) and `nudge` scales every loss by 1 + nudge, as another CPU's
    kernels move the low bits. `step_s` and `peak_bytes` set a scenario's
    reported step time and peak memory; `run_s` how long each run takes, and `together` which
    scenarios ran at the same time (a pair; one id alone: two runs of that scenario).

    It implements lockguard.envs.Backend as the venv backend it stands in for does: one
    environment per lock, admitting every lock, and the venv backend's identity, so that the
    goldens it records answer a real check."""

    behaviour: dict[tuple[str, str], str] = field(default_factory=dict)
    cpu: dict = field(default_factory=dict)
    nudge: float = 0.0
    prepared: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)  # lock hashes, as the pipeline admitted them
    runs: list[tuple[str, str]] = field(default_factory=list)  # (scenario, version) in run order
    steps: list[int] = field(default_factory=list)  # each run's steps, in run order
    # (scenario, the text of the script it ran) of each user scenario's run, in run order
    scripts: list[tuple[str, str]] = field(default_factory=list)
    # Preparing: seconds each lock's build takes (by lock file name), the locks whose build
    # fails (an EnvError naming the lock), and what was seen: builds at once, at most, and the
    # progress stage ("environment n of N: ") each build ran under.
    build_s: dict[str, float] = field(default_factory=dict)
    failing: set[str] = field(default_factory=set)
    most_at_once: int = 0
    stages: dict[str, str] = field(default_factory=dict)
    # A scenario's step time: by scenario, or by (scenario, version); `timing_noise` makes each
    # run's differ by a log-normal factor of that sigma (seeded: reproducible).
    step_s: dict[str | tuple[str, str], float] = field(default_factory=dict)
    timing_noise: float = 0.0
    peak_bytes: dict[str, int] = field(default_factory=dict)
    run_s: float = 0.0
    # The startup files a distribution installs wherever a lock pins it (a .pth, as a venv
    # would list it): distribution -> ((file, runs code), ...).
    startup: dict[str, tuple[tuple[str, bool], ...]] = field(default_factory=dict)
    # The Requires-Dist of (name, version), written as a venv's dist-info METADATA below
    # `site_root` for every pin of a lock prepared (what bisection's consistency check reads).
    requires: dict[tuple[str, str], tuple[str, ...]] = field(default_factory=dict)
    site_root: Path | None = None
    together: set[frozenset[str]] = field(default_factory=set)  # scenarios seen running at once
    overlaps: list[int] = field(default_factory=list)  # runs already running as each started
    _active: list[str] = field(default_factory=list)
    _building: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _noise: int = 0
    _rng: random.Random = field(default_factory=lambda: random.Random(20261201))

    def step_time(self, scenario: str, version: str) -> float:
        base = self.step_s.get((scenario, version), self.step_s.get(scenario, 0.001))
        if not self.timing_noise:
            return base
        with self._lock:
            return base * math.exp(self.timing_noise * self._rng.gauss(0.0, 1.0))

    def next_noise(self) -> float:
        """Run-to-run noise in [-1, 1): a low-discrepancy sequence, so a test's runs spread
        over the range in any order they are asked for, reproducibly."""
        with self._lock:
            self._noise += 1
            return ((self._noise * 0.6180339887498949) % 1) * 2 - 1

    def identity(self) -> str:
        from lockguard.envs import backend_for

        return backend_for("venv").identity()

    def admit(self, locks) -> None:
        self.admitted.extend(lock.lock_hash for lock in locks)

    def scope(self, framework: str, device: str) -> str:
        return ""  # one environment per lock, as a venv

    def prepare(self, lock: Lock | None, framework: str, device: str, progress) -> FakeEnv:
        assert lock is not None, "the fake backend serves locks, not the local interpreter"
        name = Path(lock.source).name
        with self._lock:
            self._building += 1
            self.most_at_once = max(self.most_at_once, self._building)
            self.stages[name] = progress.stage
        try:
            time.sleep(self.build_s.get(name, 0.0))
            if name in self.failing:
                raise EnvError(f"{name}: the fake build failed")
        finally:
            with self._lock:
                self._building -= 1
        self.prepared.append(lock.lock_hash)
        return FakeEnv(label=f"fake {lock.lock_hash[:8]}", lock_hash=lock.lock_hash,
                       lock=lock, backend=self, path=self._installed(lock),
                       startup_files={name: files for name, files in self.startup.items()
                                      if lock.pin(name) is not None})

    def _installed(self, lock: Lock) -> Path | None:
        """A venv-like folder with a dist-info of every pin, when `requires` is given."""
        if not self.requires or self.site_root is None:
            return None
        venv = self.site_root / lock.lock_hash[:16]
        site = venv / "lib" / "python3.11" / "site-packages"
        for pin in lock.pins:
            info = site / f"{pin.name.replace('-', '_')}-{pin.version}.dist-info"
            info.mkdir(parents=True, exist_ok=True)
            lines = [f"Requires-Dist: {r}" for r in self.requires.get((pin.name, pin.version), ())]
            (info / "METADATA").write_text("\n".join(["Metadata-Version: 2.1", f"Name: {pin.name}",
                                                      f"Version: {pin.version}", *lines]) + "\n\n")
        return venv

    @contextmanager
    def running(self, scenario: str) -> Iterator[None]:
        with self._lock:
            self.together.update(frozenset((scenario, other)) for other in self._active)
            self.overlaps.append(len(self._active))
            self._active.append(scenario)
        try:
            time.sleep(self.run_s)
            yield
        finally:
            with self._lock:
                self._active.remove(scenario)

    def record_run(self, scenario: str, version: str, steps: int = 0) -> None:
        with self._lock:
            self.runs.append((scenario, version))
            self.steps.append(steps)
