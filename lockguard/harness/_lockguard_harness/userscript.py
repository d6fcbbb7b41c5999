"""What a user scenario script's run(steps, seed) may return: checked and recorded once, for every
framework module.

Stdlib only, and framework-free: it imports neither numpy nor any framework. A framework module
hands in what only it knows as an `Adapter` (is this value one of my arrays, its values as floats,
its bytes and norm for the parameter digest) and keeps its own run_user for its setup and
diagnostics (seeding, device sync, compile/trace counting).

The contract: run(steps, seed) returns either a list of per-step losses, or a dict
    {"losses": [...], "outputs": optional, "grad_norms": optional,
     "metrics": optional {str: number}, "params": optional {name: tensor},
     "step_times": optional [seconds per step],
     "batches": optional [the sample ids of each step's batch, in the pipeline's order],
     "batches_per_epoch": optional int (with batches: per-epoch order digests)}
A number is a Python int or float (never a bool) or a one-element array of the framework (its
tensors, numpy arrays, numpy scalars) of a real dtype: integers or floats, bfloat16 and float8
widened exactly; bool and complex are refused everywhere. losses, grad_norms and step_times are
lists/tuples of numbers or one-dimensional arrays. outputs may be a number, an array, or nested
lists/tuples of them that are rectangular (flattened, their shape recorded); params are digested
in the dict's order, each value converted by the framework (lists become its arrays).
Anything else raises UserResultError, which names the offending entry ("losses[1] must be a
number, got str 'x'"): the run is "crashed" with that line.

Timing: the harness records the wall time of the whole run() call in metrics["run_s"] (import
excluded), which times a script that shows no steps. A script shows its steps by taking a third
parameter named `timed` and looping through it:

    def run(steps, seed, timed=iter):      # `iter` when run by hand; the harness's timer here
        for step in timed(range(steps)):   # or timed(loader): fetching the batch is timed too
            ...

`timed(iterable)` yields the iterable's items and times each step from the end of the previous
one (the device's queued work waited for), so first_step_s and step_median_s come from real
steps; a script may instead return "step_times" itself. An averaged per-step time would be
invented data (it would smear a compile step across all steps), so none is made up.

Where a drift starts (lockguard's --locate): the harness gives the script's module (an entry's:
the module that defines its function) two globals, `UserCapture`'s, which a script run by hand
defines itself as no-ops (locate_arrays.UserCapture):

    def lockguard_capture(step, name, value):    # a value of step `step`, by name
        return value
    def lockguard_locate(step, model, batch=None):   # a torch nn.Module or a Keras model
        return model                                  # (step None: the step `timed` is in)

In a localisation run (--locate-step N) the calls made with step == N are recorded as the run's
capture (results.Capture); every other call returns its argument and does nothing. What each
framework records is its UserCapture's (locate_arrays.py for host arrays, locate_torch.py,
locate_tf.py).
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from .common import host_floats, le_bytes, sum_squares

USER_KEYS = ("losses", "outputs", "grad_norms", "metrics", "params", "step_times", "batches",
             "batches_per_epoch")

Floats = Tuple[List[float], List[int]]  # (flat row-major values, shape)


class UserResultError(TypeError):
    """What a user script's run() returned does not follow the contract."""


class Adapter(NamedTuple):
    """The framework-specific part of reading what run() returned.

    is_array(value)            whether value is one of the framework's arrays (tensors, numpy
                               arrays and numpy scalars): flattened by to_floats, not walked
    to_floats(value, what)     (flat float values, shape) of such an array; raises
                               UserResultError naming `what` for a non-real dtype
    param_bytes(value, what)   (raw little-endian bytes, L2 norm) of one params entry, converting
                               non-arrays the framework's way; raises UserResultError
    kind                       what params hold, for messages: "tensor" or "array"
    """
    is_array: Callable[[Any], bool]
    to_floats: Callable[[Any, str], Floats]
    param_bytes: Callable[[Any, str], Tuple[bytes, float]]
    kind: str = "array"


def describe(value: Any) -> str:
    text = repr(value)
    if len(text) > 120:
        text = text[:117] + "..."
    return f"{type(value).__name__} {text}"


# --------------------------------------------------------------------------- numpy host arrays

def real_array(a: Any, what: str, value: Any) -> Any:
    """`a` (a numpy array made from `value`) if its dtype is real numbers; ml_dtypes' bfloat16
    and float8 are widened to float32 (exact); anything else raises UserResultError."""
    if a.dtype.kind in "iuf":
        return a
    if a.dtype.name == "bfloat16" or a.dtype.name.startswith("float8"):
        return a.astype("float32")
    raise UserResultError(f"{what} has dtype {a.dtype}, expected real numbers "
                          f"(got {describe(value)})")


def host_array_adapter(is_array: Callable[[Any], bool], to_host: Callable[[Any], Any],
                       norm: Optional[Callable[[Any], float]] = None) -> Adapter:
    """An Adapter for values that become numpy arrays on the host (numpy, jax, tensorflow).

    to_host(value) -> numpy array (it may raise: "is not an array"); norm(array) defaults to the
    exact one (float64 squares, math.fsum). Parameter bytes are the array's own dtype.
    """
    def array(value: Any, what: str) -> Any:
        try:
            a = to_host(value)
        except Exception as exc:  # noqa: BLE001 - any conversion failure is the script's
            raise UserResultError(f"{what} is not an array: {describe(value)}") from exc
        return real_array(a, what, value)

    def param_bytes(value: Any, what: str) -> Tuple[bytes, float]:
        a = array(value, what)
        return le_bytes(a), (norm(a) if norm is not None else math.sqrt(sum_squares(a)))

    return Adapter(is_array, lambda value, what: host_floats(array(value, what)), param_bytes)


# --------------------------------------------------------------------------- the contract

def _number(value: Any, what: str, adapter: Adapter) -> float:
    if isinstance(value, bool):
        raise UserResultError(f"{what} must be a number, got {describe(value)}")
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:
            raise UserResultError(f"{what} is too large for a float: {describe(value)}") from None
    if adapter.is_array(value):
        flat, shape = adapter.to_floats(value, what)
        if len(flat) != 1:
            raise UserResultError(f"{what} must be a number, got an array of shape {shape}")
        return flat[0]
    raise UserResultError(f"{what} must be a number, got {describe(value)}")


def _flatten(value: Any, what: str, adapter: Adapter) -> Floats:
    """A number, an array, or nested lists / tuples of them -> (flat floats, shape); rectangular."""
    if adapter.is_array(value):
        return adapter.to_floats(value, what)
    if isinstance(value, (list, tuple)):
        if not value:
            return [], [0]
        parts = [_flatten(v, f"{what}[{i}]", adapter) for i, v in enumerate(value)]
        inner = parts[0][1]
        for i, (_, shape) in enumerate(parts):
            if shape != inner:
                raise UserResultError(f"{what} is ragged: element 0 has shape {inner}, "
                                      f"element {i} has shape {shape}")
        return [x for flat, _ in parts for x in flat], [len(value)] + inner
    return [_number(value, what, adapter)], []


def _seq(value: Any, what: str, adapter: Adapter) -> List[float]:
    """A list / tuple of numbers or a one-dimensional array -> floats."""
    if adapter.is_array(value):
        flat, shape = adapter.to_floats(value, what)
        if len(shape) != 1:
            raise UserResultError(f"{what} must be one-dimensional, got shape {shape}")
        return flat
    if not isinstance(value, (list, tuple)):
        raise UserResultError(f"{what} must be a sequence of numbers, got {describe(value)}")
    return [_number(v, f"{what}[{i}]", adapter) for i, v in enumerate(value)]


def _sample_ids(value: Any, what: str) -> List[int]:
    """A batch's sample ids: a list / tuple / one-dimensional array of integers, read as
    integers (never through a float: hashed ids above 2**53 would collide)."""
    if not isinstance(value, (list, tuple)):
        if hasattr(value, "numpy") and not hasattr(value, "tolist"):
            value = value.numpy()  # a TensorFlow tensor
        if hasattr(value, "tolist"):
            value = value.tolist()  # any framework's array: Python ints for integer dtypes
    if not isinstance(value, (list, tuple)):
        raise UserResultError(f"{what} must be a sequence of integer sample ids, got "
                              f"{describe(value)}")
    ids = []
    for i, v in enumerate(value):
        if hasattr(v, "item") and not isinstance(v, (int, float)):
            v = v.item()  # a numpy integer scalar
        if isinstance(v, bool) or not isinstance(v, int):
            raise UserResultError(f"{what}[{i}] must be an integer sample id, got {describe(v)}")
        ids.append(v)
    return ids


def _params(params: Dict[Any, Any], adapter: Adapter) -> Tuple[List[Tuple[str, bytes]],
                                                               Dict[str, float]]:
    named: List[Tuple[str, bytes]] = []
    norms: Dict[str, float] = {}
    for key, value in params.items():
        name = str(key)
        if name in norms:
            raise UserResultError(f"params has two entries named {name!r}")
        raw, norms[name] = adapter.param_bytes(value, f"params[{key!r}]")
        named.append((name, raw))
    return named, norms


class StepTimer:
    """The `timed` a script's run(steps, seed, timed) receives: timed(iterable) yields the items
    and records each step's seconds, from the end of the previous step (so a batch's fetch is in
    its step) to the end of this one, after `sync()` waited for the device's queued work."""

    def __init__(self, sync: Optional[Callable[[], Any]] = None, capture: Any = None) -> None:
        self.sync = sync
        # told each step's index as it begins and ends (locate_arrays.UserCapture: a
        # registered model's capture opens and closes there)
        self.capture = capture
        self.seconds: List[float] = []

    def __call__(self, iterable: Any) -> Any:
        last = time.perf_counter()
        for item in iterable:
            if self.capture is not None:
                self.capture.step_began(len(self.seconds))
            yield item
            if self.sync is not None:
                self.sync()
            now = time.perf_counter()
            self.seconds.append(now - last)
            last = now
            if self.capture is not None:
                self.capture.step_ended(len(self.seconds) - 1)


def apply_user_result(ctx: Any, returned: Any, run_seconds: float, adapter: Adapter,
                      timed: Optional[List[float]] = None) -> None:
    """Validate what run() returned and fill ctx's result; UserResultError says what is wrong.
    `timed`: the step times the harness's StepTimer saw (used when the script returned none).

    Everything is checked before anything but outputs is recorded."""
    if isinstance(returned, dict):
        if "losses" not in returned:
            raise UserResultError(f"run() returned a dict without 'losses' (keys: "
                                  f"{sorted(map(str, returned))}); expected {list(USER_KEYS)}")
        unknown = sorted(str(k) for k in returned if k not in USER_KEYS)
        if unknown:
            raise UserResultError(f"run() returned unknown keys {unknown}; "
                                  f"allowed: {list(USER_KEYS)}")
        spec = returned
    elif isinstance(returned, (list, tuple)) or adapter.is_array(returned):
        spec = {"losses": returned}
    else:
        raise UserResultError(
            "run(steps, seed) must return a list of per-step losses or a dict with 'losses'; "
            f"it returned {describe(returned)}")
    losses = _seq(spec["losses"], "losses", adapter)
    if not losses:
        raise UserResultError("losses is empty: run() must return at least one step's loss")
    grad_norms = None
    if spec.get("grad_norms") is not None:
        grad_norms = _seq(spec["grad_norms"], "grad_norms", adapter)
    step_times: Optional[Sequence[float]] = None
    if spec.get("step_times") is not None:
        step_times = _seq(spec["step_times"], "step_times", adapter)
        if len(step_times) != len(losses):
            raise UserResultError(f"step_times has {len(step_times)} entries for "
                                  f"{len(losses)} losses")
    elif timed:
        if len(timed) != len(losses):
            raise UserResultError(f"timed(...) saw {len(timed)} steps for {len(losses)} "
                                  "losses: loop through it once, one loss per step")
        step_times = timed
    batches: Optional[List[List[int]]] = None
    per_epoch = spec.get("batches_per_epoch")
    if spec.get("batches") is not None:
        if not isinstance(spec["batches"], (list, tuple)):
            raise UserResultError(f"batches must be a list of each step's sample ids, got "
                                  f"{describe(spec['batches'])}")
        batches = [_sample_ids(b, f"batches[{i}]")
                   for i, b in enumerate(spec["batches"])]
        if len(batches) != len(losses):
            raise UserResultError(f"batches has {len(batches)} entries for {len(losses)} losses")
    if per_epoch is not None and (isinstance(per_epoch, bool) or not isinstance(per_epoch, int)
                                  or per_epoch < 1 or batches is None):
        raise UserResultError("batches_per_epoch must be a positive int, given with batches; "
                              f"got {describe(per_epoch)}")
    metrics = {}
    if spec.get("metrics") is not None:
        if not isinstance(spec["metrics"], dict):
            raise UserResultError(f"metrics must be a dict of numbers, got "
                                  f"{describe(spec['metrics'])}")
        metrics = {str(k): _number(v, f"metrics[{k!r}]", adapter)
                   for k, v in spec["metrics"].items()}
    if spec.get("outputs") is not None:
        ctx.set_outputs(*_flatten(spec["outputs"], "outputs", adapter))
    if spec.get("params") is not None:
        if not isinstance(spec["params"], dict):
            raise UserResultError(f"params must be a dict name -> {adapter.kind}, got "
                                  f"{describe(spec['params'])}")
        ctx.set_params(*_params(spec["params"], adapter))

    if step_times is not None:
        for loss, seconds in zip(losses, step_times):
            ctx.record_step(loss, None, seconds)
    else:
        ctx.result["losses"].extend(losses)
    if grad_norms is not None:
        ctx.result["grad_norms"] = grad_norms
    for ids in batches or []:
        ctx.record_batch(ids, per_epoch)
    ctx.result["metrics"].update(metrics)
    ctx.result["metrics"]["run_s"] = run_seconds


def run_script(ctx: Any, module: Any, adapter: Adapter,
               sync: Optional[Callable[[], Any]] = None,
               capture: Optional[Any] = None) -> None:
    """Call the script's run(ctx.steps, ctx.seed) — with a StepTimer as `timed` when it takes
    one — time it (up to `sync()`, which waits for the device's queued work), and record what it
    returned; with `capture` (the framework's locate_arrays.UserCapture) given to the script as its globals,
    and what it recorded as the result's capture."""
    if capture is not None:
        capture.install(module)
    timer = StepTimer(sync, capture) if _takes_timed(module.run) else None
    start = time.perf_counter()
    if timer is not None:
        returned = module.run(ctx.steps, ctx.seed, timed=timer)
    else:
        returned = module.run(ctx.steps, ctx.seed)
    if sync is not None:
        sync()
    seconds = time.perf_counter() - start
    if capture is not None:
        found = capture.finish()
        if found is not None:
            ctx.result["capture"] = found
    apply_user_result(ctx, returned, seconds, adapter,
                      timer.seconds if timer is not None else None)


def _takes_timed(run: Callable[..., Any]) -> bool:
    return takes(run, "timed")


def takes(fn: Callable[..., Any], parameter: str) -> bool:
    """Whether fn's signature has a parameter of that name (False when it has none to read)."""
    import inspect

    try:
        return parameter in inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a builtin or a C function: it takes no such parameter
        return False


# --------------------------------------------------------------------------- the network

# Hosts a training may reach inside its sandbox (loopback: gloo's ranks, a local server).
_LOCAL_HOSTS = ("", "localhost", "0.0.0.0", "::", "::1")
NETWORK_HINT = ("{error} -- this training reached for the network ({hosts}); trainings run "
                "without one (the sandbox). Point it at a small fixed slice of its data in the "
                "project (opened relative to its module's file, `Path(__file__)`) and list "
                "that file in the scenario's `data = [...]`, so that its bytes are in the "
                "inputs digest (docs/scenarios.md, \"Data outside the package\")")


def watch_network() -> List[str]:
    """The hosts user code reaches for from now on ("host:port", the first few), seen through
    the interpreter's audit events (`socket.getaddrinfo`, `socket.connect`): whatever the
    library (urllib, requests, a dataset downloader), the run's error can then say why it
    failed and what to do (NETWORK_HINT). Watching changes nothing the code sees."""
    import sys

    seen: List[str] = []

    def hook(event: str, args: Tuple[Any, ...]) -> None:
        if len(seen) >= 3 or not event.startswith("socket."):
            return
        if event == "socket.getaddrinfo":
            host, port = args[0], args[1]
        elif event == "socket.connect" and isinstance(args[1], tuple) and len(args[1]) >= 2:
            host, port = args[1][0], args[1][1]
        else:
            return
        host = host.decode("ascii", "replace") if isinstance(host, bytes) else str(host or "")
        if host in _LOCAL_HOSTS or host.startswith("127."):
            return
        where = f"{host}:{port}" if port is not None else host
        if where not in seen:
            seen.append(where)

    sys.addaudithook(hook)
    return seen


def network_hint(seen: Sequence[str], error: BaseException) -> str:
    """The line a failed run's error ends with when its code reached for the network and the
    error is the network's: an OSError (socket errors, urllib's URLError, requests'
    ConnectionError, ssl's), or one raised from or while handling one (a downloader's own
    error wrapping it). The error itself first, the last line being what a report shows; ""
    otherwise: a bug after a lookup that answered is not blamed on the network."""
    if not seen or not _from_os_error(error):
        return ""
    text = " ".join(f"{type(error).__name__}: {error}".split())
    return NETWORK_HINT.format(error=text[:200], hosts=", ".join(seen))


def _from_os_error(error: BaseException) -> bool:
    """Whether `error` is an OSError, or was raised from or while handling one."""
    seen = set()
    at: Any = error
    while at is not None and id(at) not in seen:  # a cycle of causes ends the walk
        if isinstance(at, OSError):
            return True
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return False
