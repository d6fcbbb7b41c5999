"""Per-module capture of one torch training step: where a drift starts (lockguard's --locate).

Runs inside the target environment (stdlib and torch). torch_.train attaches a `Capture` to the
model at the step the host asks for (--locate-step N, the first step whose loss or gradient norm
differed between two sides) and finishes it after that step's backward, before the optimiser
moves the weights; asked for the step one past the last (N = steps: the training never differed,
the probe outputs did), it captures the probe's eval-mode forward instead (`probe`; no backward,
so no gradients). For every module call of the step it records, in call order:

    name, type       the module's qualified name in the model ("transformer.h.0.attn") and class
    parent           the index of the call it ran inside (-1: the model itself)
    params           sha256 of the module's own parameters (not its children's) as they entered
                     the step: weights that differ here differed before the step began
    inputs           sha256 of the floating tensors it was given (positional and keyword)
    out, grad        its output and the gradient that reached that output in the backward:
                     sha256 of the bytes, the dtype, the shapes, and the first SAMPLE values as
                     float32 little-endian bytes in base64 (exact for float32, bfloat16, float16;
                     float8 values are not sampled), of the first floating tensor's dtype
    referee          the module run again on a copy of its own inputs, in its own dtype (does the
                     replay reproduce the output bit for bit?) and in float64 (a deep copy cast to
                     float64): the output's distance from the float64 answer in units of the
                     output dtype's ULP at that answer, max and mean. Under the RNG state the
                     call started with, so that a dropout draws the same mask.
    operations       the module run once more on a copy of its inputs (its own dtype, no
                     gradients, the same RNG state) under a TorchDispatchMode: each aten operation
                     its own code runs (not its children's: each child's are its own call's), in
                     order, with the digest of the tensors it was given and a description of
                     what it returned (`out`, OP_SAMPLE values; none for an uninitialised
                     allocation, aten.empty and kin), `view` for an operation that only moves
                     or aliases values (the host names the first that computes). Forward only.

A user script's nn.Module, given to lockguard_locate(step, model) (userscript.py), is hooked
the same way for its step (TorchUserCapture), its lockguard_capture values recorded beside it.

The host (lockguard/compare/locate.py) compares two sides' captures. Bounded: at most MAX_CALLS
calls (then `truncated`), SAMPLE values a tensor; the referee (and the operations) is skipped for
a call holding more than REFEREE_MAX_PARAMS parameters (its float64 copy would cost more than the
step); at most MAX_OPS operations a call and MAX_CAPTURE_OPS a capture (then the call's
operations say `truncated`), OP_SAMPLE values an operation's output.
"""

from __future__ import annotations

import base64
import copy
import ctypes
import hashlib
import math
import re
import struct
from typing import Any, Dict, List, Optional, Tuple

import torch
from torch import nn

try:  # torch's own (private) module: a torch without it runs, its operations unrecorded
    from torch.utils._python_dispatch import TorchDispatchMode
except ImportError:  # pragma: no cover - every torch 2 has it
    TorchDispatchMode = object  # type: ignore[assignment,misc]

from .locate_arrays import UserCapture, interleaved

SAMPLE = 512  # values kept of each captured tensor (its digest covers all of them)
MAX_CALLS = 2000  # module calls recorded in one step
REFEREE_MAX_PARAMS = 20_000_000
MAX_OPS = 256  # operations recorded of one call's own code
MAX_CAPTURE_OPS = 20_000  # operations recorded in one step, all calls together
OP_SAMPLE = 16  # values kept of an operation's output (its digest covers all of them)
# Shapes listed of one output (aten.unbind returns one tensor a row); its numel counts them all
MAX_SHAPES = 64
MAX_OP_NAME = 200
# What results.OP_NAME accepts of an operation's name: any other character becomes "_" (a custom
# op's name is the library's to choose; one refused name would refuse the whole capture)
OP_NAME_CHARS = "A-Za-z0-9_.:"
OP_NAME_REFUSED = re.compile(f"[^{OP_NAME_CHARS}]")
# Operations whose output is memory never written (its bytes are whatever was there)
UNINITIALISED = ("empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                 "new_empty_strided", "resize_")
# Operations that move or alias values without computing any (beside those whose schema says
# they return a view: transpose, expand, view, ...)
MOVES = ("clone", "_unsafe_view", "copy_", "contiguous", "lift_fresh", "detach", "alias",
         "_reshape_alias")


def _float_tensors(value: Any, floating: bool = True) -> List[torch.Tensor]:
    """The floating-point tensors in a module's inputs or outputs, depth first (tuples, lists,
    dicts and transformers' ModelOutput, which is a dict), in a fixed order; not `floating`:
    every dense real tensor (an operation's integer indices and boolean masks too)."""
    found: List[torch.Tensor] = []

    def walk(v: Any, depth: int) -> None:
        if depth > 4:
            return
        if isinstance(v, torch.Tensor):
            if v.is_floating_point() or (not floating and v.layout == torch.strided
                                         and not v.is_complex() and v.device.type != "meta"):
                found.append(v)
        elif isinstance(v, (tuple, list)):
            for item in v:
                walk(item, depth + 1)
        elif isinstance(v, dict):
            for key in v:
                walk(v[key], depth + 1)

    walk(value, 0)
    return found


def _bytes(t: torch.Tensor) -> bytes:
    """The tensor's bytes in native (little-endian) order, without numpy."""
    t = t.detach().cpu().contiguous()
    return ctypes.string_at(t.data_ptr(), t.numel() * t.element_size())


def _digest(tensors: List[torch.Tensor]) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(f"{t.dtype}{tuple(t.shape)}".encode() + b"\0")
        h.update(_bytes(t))
    return h.hexdigest()


def _describe(tensors: List[torch.Tensor], sample: int = SAMPLE) -> Optional[Dict[str, Any]]:
    """What the host compares of tensors: digest, dtype, shapes (the first MAX_SHAPES; numel
    counts every tensor's values, so a shorter list shows the cut), the first `sample` values.
    The dtype and the values are those of the first floating tensor (an operation's output may
    be (values, indices): the host measures ULPs of the dtype it is told, and integer indices
    read as floats would be measured so), else of the first: the values of the tensors of that
    dtype, in order; a float8 tensor's values are not
    sampled (the host would measure them in ULPs of a float32)."""
    if not tensors:
        return None
    first = next((t for t in tensors if t.is_floating_point()), tensors[0])
    same = [t for t in tensors if t.dtype == first.dtype]
    head: List[float] = []
    for t in same if first.element_size() > 1 or not first.is_floating_point() else []:
        if len(head) < sample:  # only the values kept are converted (an output is large)
            head += t.detach().reshape(-1)[:sample - len(head)].float().cpu().tolist()
    return {"digest": _digest(tensors), "dtype": str(first.dtype).replace("torch.", ""),
            "shapes": [list(t.shape) for t in tensors[:MAX_SHAPES]],
            "numel": int(sum(t.numel() for t in tensors)),
            "sample": base64.b64encode(struct.pack(f"<{len(head)}f", *head)).decode("ascii")}


def _to(value: Any, dtype: Optional[torch.dtype], clone: bool) -> Any:
    """`value` with every floating tensor detached and cast to `dtype` (None: its own), copied
    when `clone` (a replay of an in-place module must not write into what it was given)."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            out = value.detach() if dtype is None else value.detach().to(dtype)
            return out.clone() if clone and out.dtype == value.dtype else out
        return value
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return tuple(_to(v, dtype, clone) for v in value)
    if isinstance(value, list):
        return [_to(v, dtype, clone) for v in value]
    if isinstance(value, dict) and type(value) is dict:
        return {k: _to(v, dtype, clone) for k, v in value.items()}
    if clone and value is not None and not isinstance(value, (bool, int, float, str)):
        # An object given to a module (transformers' key/value cache) may be changed by the
        # call: a replay starts from a copy of it as it was.
        try:
            return copy.deepcopy(value)
        except Exception:  # noqa: BLE001 - then the replay says whether it reproduced
            return value
    return value


def _ulps(out: torch.Tensor, exact: torch.Tensor) -> Tuple[float, float]:
    """(max, mean) of |out - exact| in units of out's dtype's ULP at `exact` (float64), the ULP
    taken at least at the tensor's root mean square: a value near zero that two larger terms
    cancelled into is no kernel's fault, and its own ULP would count its rounding a million
    times over."""
    rms = exact.double().pow(2).mean().sqrt()
    at = torch.maximum(exact.abs(), rms).to(out.dtype)
    ulp = (torch.nextafter(at, torch.full_like(at, math.inf)) - at).double()
    d = (out.double() - exact).abs() / ulp
    return float(d.max().item()), float(d.mean().item())


def op_name(func: Any) -> str:
    """`func`'s name as results.OP_NAME accepts it (torch's own are: aten.addmm.default)."""
    return OP_NAME_REFUSED.sub("_", str(func))[:MAX_OP_NAME] or "unnamed"


def _out_arguments(func: Any) -> Tuple[str, ...]:
    """The names of `func`'s out= arguments (its schema's; "out" where it has none)."""
    try:
        return tuple(a.name for a in func._schema.arguments if getattr(a, "is_out", False)) \
            or ("out",)
    except AttributeError:
        return ("out",)


class _Operations(TorchDispatchMode):
    """The aten operations a module's own code runs (module docstring's `operations`): those
    run while no child module is running (`depth` counts the children running), at most
    `budget` of them."""

    def __init__(self, budget: int) -> None:
        super().__init__()
        self.ops: List[Dict[str, Any]] = []
        self.depth = 0
        self.budget = budget
        self.truncated = False

    def enter(self, *_: Any, **__: Any) -> None:
        """A child module's forward begins (a forward pre-hook)."""
        self.depth += 1

    def leave(self, *_: Any, **__: Any) -> None:
        """A child module's forward ended (a forward hook)."""
        self.depth -= 1

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        # Inside this method the mode is off: the digests' own torch calls are not recorded.
        kwargs = kwargs or {}
        if self.depth or self.truncated:
            return func(*args, **kwargs)
        if len(self.ops) >= self.budget:
            self.truncated = True
            return func(*args, **kwargs)
        # The tensors it was given, before it writes; not an out= buffer (its bytes are what
        # was there, and would make the next operation's equal inputs differ)
        outs = _out_arguments(func)
        given = _digest(_float_tensors((args, {k: v for k, v in kwargs.items() if k not in outs}),
                                       floating=False))
        out = func(*args, **kwargs)
        packet = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else ""
        op: Dict[str, Any] = {"name": op_name(func), "inputs": given}
        if packet not in UNINITIALISED:
            op["out"] = _describe(_float_tensors(out, floating=False), OP_SAMPLE)
        if getattr(func, "is_view", False) or packet in MOVES:
            op["view"] = True
        self.ops.append(op)
        return out


class Capture:
    """The per-module record of one training step (module docstring)."""

    def __init__(self, step: int, probe: bool = False) -> None:
        self.step = step
        self.probe = probe  # the probe's eval-mode forward after the last step, not a step
        self.calls: List[Dict[str, Any]] = []
        self.truncated = False
        self._stack: List[int] = []
        self._handles: List[Any] = []
        self._pending: Dict[int, Tuple[Any, Any, Any]] = {}  # call -> (args, kwargs, rng)
        self._busy = False  # the referee's own module calls are not recorded
        self._grads = 0
        self._ops = 0  # operations recorded so far (MAX_CAPTURE_OPS)

    def attach(self, model: nn.Module) -> None:
        """Hook every module of `model` (itself included) for this step."""
        for name, module in model.named_modules():
            label = name or "(model)"
            self._handles.append(module.register_forward_pre_hook(
                lambda m, a, k, label=label: self._pre(m, label, a, k), with_kwargs=True))
            self._handles.append(module.register_forward_hook(
                lambda m, a, k, out: self._post(m, out), with_kwargs=True))

    def _pre(self, module: nn.Module, label: str, args: Any, kwargs: Any) -> None:
        if self._busy:
            return
        if len(self.calls) >= MAX_CALLS:
            self.truncated = True
            self._stack.append(-1)
            return
        index = len(self.calls)
        own = [p for p in module.parameters(recurse=False)]
        self.calls.append({
            "name": label, "type": type(module).__name__,
            "parent": self._stack[-1] if self._stack else -1,
            "params": _digest(own) if own else None,
            "inputs": _digest(_float_tensors((args, kwargs))),
        })
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        rng = (torch.get_rng_state(), torch.cuda.get_rng_state_all() if cuda else None)
        self._pending[index] = (_to(args, _same, True), _to(kwargs, _same, True), rng)
        self._stack.append(index)

    def _post(self, module: nn.Module, out: Any) -> None:
        if self._busy:
            return
        index = self._stack.pop()
        if index < 0:
            return
        entry = self.calls[index]
        tensors = _float_tensors(out)
        entry["out"] = _describe(tensors)
        args, kwargs, rng = self._pending.pop(index)
        entry["referee"] = self._referee(module, args, kwargs, rng, tensors)
        if tensors:
            entry["operations"] = self._operations(module, args, kwargs, rng)
        first = next((t for t in tensors if t.requires_grad), None)
        if first is not None:
            first.register_hook(lambda g, entry=entry: self._grad(entry, g))

    def _grad(self, entry: Dict[str, Any], grad: torch.Tensor) -> None:
        if grad is not None and "grad" not in entry:
            entry["grad"] = _describe([grad])
            entry["grad_order"] = self._grads
            self._grads += 1

    def _referee(self, module: nn.Module, args: Any, kwargs: Any, rng: Any,
                 outputs: List[torch.Tensor]) -> Optional[Dict[str, Any]]:
        """The replay in the module's own dtype and the float64 answer (module docstring)."""
        if not outputs:
            return None
        if sum(p.numel() for p in module.parameters()) > REFEREE_MAX_PARAMS:
            return {"error": "too large for a float64 copy"}
        self._busy = True
        try:
            with torch.no_grad(), torch.random.fork_rng(devices=_devices()):
                _set_rng(rng)
                again = _float_tensors(copy.deepcopy(module)(*_to(args, _same, True),
                                                             **_to(kwargs, _same, True)))
                exact_replay = len(again) == len(outputs) and all(
                    torch.equal(a, b.detach()) for a, b in zip(again, outputs))
                _set_rng(rng)
                with _no_autocast(outputs[0].device):
                    wide = copy.deepcopy(module).double()
                    exact = _float_tensors(wide(*_to(args, torch.float64, True),
                                                **_to(kwargs, torch.float64, True)))
            if len(exact) != len(outputs):
                return {"replay_exact": exact_replay, "error": "the float64 run returned "
                        f"{len(exact)} tensors, not {len(outputs)}"}
            figures = [_ulps(o.detach(), e.to(o.device)) for o, e in zip(outputs, exact)]
            return {"replay_exact": exact_replay, "max_ulp": max(f[0] for f in figures),
                    "mean_ulp": sum(f[1] * o.numel() for f, o in zip(figures, outputs))
                    / max(1, sum(o.numel() for o in outputs))}
        except Exception as exc:  # noqa: BLE001 - a module that cannot be replayed says why
            return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        finally:
            self._busy = False

    def _operations(self, module: nn.Module, args: Any, kwargs: Any, rng: Any
                    ) -> Dict[str, Any]:
        """The aten operations of the module's own code, replayed as the referee replays it
        (module docstring's `operations`)."""
        budget = min(MAX_OPS, MAX_CAPTURE_OPS - self._ops)
        if budget <= 0:  # the capture's budget is spent: no replay to record nothing
            return {"ops": [], "truncated": True}
        recorder = _Operations(budget)
        if TorchDispatchMode is object:
            return {"ops": [], "truncated": True, "error": "this torch has no TorchDispatchMode"}
        if sum(p.numel() for p in module.parameters()) > REFEREE_MAX_PARAMS:
            return {"ops": [], "truncated": True, "error": "too large to replay"}
        self._busy = True
        try:
            copied = copy.deepcopy(module)
            for child in copied.modules():
                if child is not copied:
                    child.register_forward_pre_hook(recorder.enter)
                    child.register_forward_hook(recorder.leave)
            given, named = _to(args, _same, True), _to(kwargs, _same, True)  # not recorded
            with torch.no_grad(), torch.random.fork_rng(devices=_devices()):
                _set_rng(rng)
                with recorder:
                    copied(*given, **named)
            found: Dict[str, Any] = {"ops": recorder.ops, "truncated": recorder.truncated}
        except Exception as exc:  # noqa: BLE001 - a module that cannot be replayed says why
            found = {"ops": recorder.ops, "truncated": True,
                     "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        finally:
            self._busy = False
        self._ops += len(recorder.ops)
        return found

    def finish(self) -> Dict[str, Any]:
        """Remove the hooks; the capture as the result's `capture`."""
        for handle in self._handles:
            handle.remove()
        self._handles = []
        return {"step": self.step, "calls": self.calls, "truncated": self.truncated,
                "sample": SAMPLE, "probe": self.probe}


_same = None  # _to(value, _same, True): every floating tensor copied in its own dtype


def _devices() -> List[int]:
    return list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []


def _set_rng(rng: Any) -> None:
    cpu, cuda = rng
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state_all(cuda)


class _no_autocast:
    """No autocast for the float64 run (a bf16 scenario's forward runs under one)."""

    def __init__(self, device: torch.device) -> None:
        self.inner = torch.autocast(device.type, enabled=False)

    def __enter__(self) -> None:
        self.inner.__enter__()

    def __exit__(self, *exc: Any) -> bool:
        self.inner.__exit__(*exc)
        return False


class TorchUserCapture(UserCapture):
    """A torch user script's capture (userscript.py's globals): each lockguard_capture value a
    tensor (a number or a numpy array converted by torch.as_tensor), recorded as a root call
    named by the script, its dtype as its type; each nn.Module given to lockguard_locate hooked
    by a `Capture` from that call until its step ends, every module call of the step recorded
    with its referee, as a bundled scenario's are."""

    def value(self, value: Any, what: str) -> Any:
        t = value if isinstance(value, torch.Tensor) else torch.as_tensor(value)
        if t.dtype == torch.bool or t.is_complex():
            raise TypeError(f"{what} takes real numbers or tensors of them, got {t.dtype} "
                            f"({type(value).__name__})")
        return t.detach().clone()  # a copy: the script may change its tensor in place

    def open_model(self, step: int, model: Any, batch: Any) -> Any:
        if not isinstance(model, nn.Module):
            return super().open_model(step, model, batch)
        capture = Capture(step)
        capture.attach(model)
        return capture

    def close_model(self, model: Any) -> None:
        model.finish()

    def position(self) -> int:
        return sum(len(capture.calls) for capture in self.models)

    def record(self, step: int, values: List[Tuple[str, Any, int]], models: List[Any]
               ) -> Dict[str, Any]:
        recorded = [c for capture in models for c in capture.calls]
        bases, base = [], 0
        for capture in models:  # where each model's calls start among all the models'
            bases += [base] * len(capture.calls)
            base += len(capture.calls)
        moved: Dict[int, int] = {}  # a call's index among the models' -> in the capture
        calls: List[Dict[str, Any]] = []
        for kind, item in interleaved(len(recorded), values):
            if kind == "value":
                key, t = item
                calls.append({"name": key, "type": str(t.dtype).replace("torch.", ""),
                              "parent": -1, "inputs": _digest([]), "out": _describe([t])})
                continue
            call, parent = recorded[item], recorded[item]["parent"]
            moved[item] = len(calls)
            calls.append(dict(call, parent=moved[parent + bases[item]] if parent >= 0 else -1))
        truncated = any(c.truncated for c in models) or len(calls) > MAX_CALLS
        return {"step": step, "calls": calls[:MAX_CALLS], "truncated": truncated,
                "sample": SAMPLE}
