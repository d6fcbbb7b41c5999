"""A layer-by-layer capture's record, from host (numpy) arrays: what locate_jax.py and locate_tf.py
share, in the contract locate_torch.py writes (lockguard's results.Capture).

Runs inside the target environment (stdlib and numpy). The record of one step, in order:

    (model)          the root call every other call runs inside
    one call a leaf  each parameter (and state) array by its name as the step begins, its digest
                     as `params`: a leaf that differs at step 0 names an initialisation change,
                     at a later step an earlier update that moved it
    one call a tap   each tapped layer's output (`out`), the digest of the floating arrays it
                     was given (`inputs`) and the gradient that reached its output (`grad`;
                     `grad_order` the reverse of the forward's order, as a backward runs);
                     a Keras layer's float64 referee (`referee`, locate_tf.py)

A user script's values and models (lockguard_capture, lockguard_locate: userscript.py) are
recorded by `UserCapture`, the protocol every framework shares (which step, when a model's
capture closes), and `HostUserCapture`, its host-array form (numpy, jax, tensorflow; torch's is
locate_torch.py's).

Bounded as locate_torch.py is: at most MAX_CALLS calls (then `truncated`), SAMPLE values an array.
numpy is imported where it is used: the framework modules import this one before their setup()
times the framework's import (numpy's with it).
"""

from __future__ import annotations

import base64
import hashlib
import numbers
import types
from typing import Any, Dict, List, Optional, Tuple

SAMPLE = 512  # values kept of each captured array (its digest covers all of them)
MAX_CALLS = 2000  # calls recorded in one step


def digest(arrays: List[Any]) -> str:
    """sha256 over each array's dtype, shape and bytes (native, little-endian here)."""
    import numpy as np
    h = hashlib.sha256()
    for a in arrays:
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype}{tuple(a.shape)}".encode() + b"\0")
        h.update(a.tobytes())
    return h.hexdigest()


def describe(a: Any) -> Dict[str, Any]:
    """What the host compares of an array: digest, dtype, shape, the first SAMPLE values as
    float32 little-endian bytes (exact for float32, bfloat16 and float16)."""
    import numpy as np
    a = np.asarray(a)
    head = a.reshape(-1)[:SAMPLE].astype("<f4")
    return {"digest": digest([a]), "dtype": str(a.dtype), "shapes": [list(a.shape)],
            "numel": int(a.size), "sample": base64.b64encode(head.tobytes()).decode("ascii")}


# A tap as recorded: (key, layer type, output, [floating inputs], gradient at the output or None),
# and, where the layer could be run again, its referee (locate_torch.py's figures) sixth
Tapped = Tuple[Any, ...]


def occurrence(name: str, seen: List[str]) -> str:
    """The key of a layer's call: its name, with its occurrence when it ran before."""
    n = sum(1 for key in seen if key.split("#", 1)[0] == name)
    return name if n == 0 else f"{name}#{n}"


def record(step: int, model: str, leaves: Dict[str, Any], taps: List[Tapped]) -> Dict[str, Any]:
    """The capture (module docstring) of host arrays: `leaves` by name in the model's order,
    `taps` in the forward's order."""
    import numpy as np
    calls: List[Dict[str, Any]] = [{"name": "(model)", "type": model, "parent": -1,
                                    "inputs": digest([])}]
    for name, leaf in leaves.items():
        leaf = np.asarray(leaf)
        calls.append({"name": name, "type": f"parameter {leaf.dtype}{list(leaf.shape)}",
                      "parent": 0, "params": digest([leaf]), "inputs": digest([])})
    for index, (key, kind, out, inputs, grad, *referee) in enumerate(taps):
        call = {"name": key, "type": kind, "parent": 0, "inputs": digest(inputs),
                "out": describe(out)}
        if referee and referee[0] is not None:
            call["referee"] = referee[0]
        if grad is not None:
            call.update(grad=describe(grad), grad_order=len(taps) - 1 - index)
        calls.append(call)
    return {"step": step, "calls": calls[:MAX_CALLS], "truncated": len(calls) > MAX_CALLS,
            "sample": SAMPLE}


class UserCapture:
    """The globals a user script locates its drift with (module docstring): which calls are
    recorded, and when a registered model's capture opens and closes; what is recorded is the
    framework's (its subclass: `value`, `open_model`, `close_model`, `record`).

    A model's capture opens at its lockguard_locate(N, model) call and closes when step N ends:
    at a later step's lockguard_locate or lockguard_capture call, when `timed` moves on (an
    entry's factory loop included), or when run() returns. A step given as None is the step the
    harness's `timed` is in: a model registered once, lockguard_locate(None, model) (an entry's
    factory, whose step function is given no step number), opens when `timed` begins step N.
    """

    MAX_VALUES = MAX_CALLS  # values recorded in one step

    def __init__(self, wanted: Optional[int]) -> None:
        self.wanted = wanted  # the located step; None: not a localisation run
        # (key, the framework's copy, how many model calls were recorded before it)
        self.values: List[Tuple[str, Any, int]] = []
        self.models: List[Any] = []  # what open_model returned, in registration order
        self._registered: List[int] = []  # id() of each model opened at the step
        self._waiting: List[Tuple[Any, Any]] = []  # (model, batch) registered for `timed`'s N
        self.current: Optional[int] = None  # the step `timed` is in
        self.closed = False

    def install(self, module: Any) -> None:
        """Give the script's module (an entry's: its function's module) the two globals."""
        home = module if isinstance(module, types.ModuleType) else getattr(module, "home", None)
        if home is not None:
            home.lockguard_capture = self.lockguard_capture
            home.lockguard_locate = self.lockguard_locate

    def lockguard_capture(self, step: Optional[int], name: str, value: Any) -> Any:
        """`value`; at the located step also recorded (module docstring)."""
        step = self.current if step is None else step
        if self._now(step) and len(self.values) < self.MAX_VALUES:
            # a name as results.ModuleCall keeps it (400 characters, its occurrence after)
            key = occurrence(str(name)[:380], [v[0] for v in self.values])
            self.values.append((key, self.value(value, f"lockguard_capture({step}, {name!r}, "
                                                       "…)"), self.position()))
        return value

    def lockguard_locate(self, step: Optional[int], model: Any, batch: Any = None) -> Any:
        """`model`; at the located step its capture opens (module docstring)."""
        if step is None and self.wanted is not None and self.current != self.wanted:
            if self.current is None or self.current < self.wanted:
                if all(m is not model for m, _ in self._waiting):
                    self._waiting.append((model, batch))
            return model
        step = self.current if step is None else step
        if self._now(step):
            self._open(step, model, batch)
        return model

    def step_began(self, index: int) -> None:
        """`timed` begins step `index`: the models registered for it open."""
        self.current = index
        if index == self.wanted and not self.closed:
            for model, batch in self._waiting:
                self._open(index, model, batch)

    def step_ended(self, index: int) -> None:
        """`timed` saw step `index` end."""
        if self.wanted is not None and index >= self.wanted:
            self._close()

    def finish(self) -> Optional[Dict[str, Any]]:
        """run() returned: the capture (None when nothing was recorded)."""
        self._close()
        if not self.values and not self.models:
            return None
        return self.record(self.wanted, self.values, self.models)

    def _open(self, step: int, model: Any, batch: Any) -> None:
        if id(model) not in self._registered:
            self._registered.append(id(model))
            self.models.append(self.open_model(step, model, batch))

    def _now(self, step: Any) -> bool:
        if self.wanted is None or self.closed:
            return False
        if isinstance(step, numbers.Integral) and not isinstance(step, bool) \
                and step > self.wanted:
            self._close()  # a later step began
        return not self.closed and step == self.wanted

    def _close(self) -> None:
        if not self.closed and self.wanted is not None:
            self.closed = True
            for model in self.models:
                self.close_model(model)

    # the framework's part
    def value(self, value: Any, what: str) -> Any:
        """A copy of `value` as recorded (raises TypeError naming `what` for a non-number)."""
        raise NotImplementedError

    def open_model(self, step: int, model: Any, batch: Any) -> Any:
        """Begin (or, for a model run here on `batch`, make) the capture of `model`."""
        raise TypeError(f"lockguard_locate({step}, …) takes a torch nn.Module or a Keras model, "
                        f"got {type(model).__name__}; under this framework register values with "
                        "lockguard_capture")

    def close_model(self, model: Any) -> None:
        """Stop recording what `open_model` returned (hooks removed)."""

    def position(self) -> int:
        """How many calls the models opened so far have recorded: where a value registered
        now stands among them (a value given before a model's forward comes before its
        calls, and the first difference found is the first in time)."""
        return 0

    def record(self, step: int, values: List[Tuple[str, Any, int]], models: List[Any]
               ) -> Dict[str, Any]:
        """The capture (results.Capture) of the values and models."""
        raise NotImplementedError


def interleaved(calls: int, values: List[Tuple[str, Any, int]]) -> List[Tuple[str, Any]]:
    """The models' `calls` (("call", its index)) and the values (("value", (key, copy))) in the
    order they were recorded (UserCapture.position)."""
    out: List[Tuple[str, Any]] = []
    pending = sorted(range(len(values)), key=lambda i: (values[i][2], i))
    for index in range(calls + 1):
        while pending and values[pending[0]][2] <= index:
            key, copy, _ = values[pending.pop(0)]
            out.append(("value", (key, copy)))
        if index < calls:
            out.append(("call", index))
    return out


class HostUserCapture(UserCapture):
    """A user script's capture as host arrays (numpy, jax, tensorflow): each value copied to the
    host by `to_host` (any real dtype, bfloat16 and float8 included), recorded under its name
    with its dtype as its type; a model opened by a subclass (locate_tf.py's Keras models)
    gives its leaves and its taps, the values among them in the order they were given."""

    def __init__(self, wanted: Optional[int], to_host: Any) -> None:
        super().__init__(wanted)
        self.to_host = to_host

    def value(self, value: Any, what: str) -> Any:
        import numpy as np
        a = np.array(self.to_host(value))  # a copy: the script may change its array in place
        if a.dtype.kind not in "fiu" and not a.dtype.name.startswith(("bfloat16", "float8")):
            raise TypeError(f"{what} takes real numbers or arrays of them, got {a.dtype} "
                            f"({type(value).__name__})")
        return a

    def position(self) -> int:
        return sum(len(model[1]) for model in self.models)

    def record(self, step: int, values: List[Tuple[str, Any, int]], models: List[Any]
               ) -> Dict[str, Any]:
        leaves: Dict[str, Any] = {}
        taps: List[Tapped] = []
        for model in models:  # (leaves, taps) of each model, its names kept apart by prefix
            leaves.update(model[0])
            taps.extend(model[1])
        order = [taps[item] if kind == "call" else (item[0], str(item[1].dtype), item[1], [], None)
                 for kind, item in interleaved(len(taps), values)]
        return record(step, "user script", leaves, order)


def ulps(out: Any, exact: Any) -> Tuple[float, float]:
    """(max, mean) of |out - exact| in units of out's dtype's ULP at `exact` (float64), the ULP
    taken at least at the array's root mean square (locate_torch.py's _ulps, in numpy: a value
    near zero that two larger terms cancelled into is no kernel's fault)."""
    import numpy as np
    exact = np.asarray(exact, dtype=np.float64)
    out = np.asarray(out)
    rms = np.sqrt(np.mean(exact ** 2)) if exact.size else 0.0
    at = np.maximum(np.abs(exact), rms).astype(out.dtype)
    ulp = (np.nextafter(at, np.array(np.inf, dtype=out.dtype)) - at).astype(np.float64)
    d = np.abs(out.astype(np.float64) - exact) / ulp
    return float(d.max()) if d.size else 0.0, float(d.mean()) if d.size else 0.0
