"""Capture of one jax training step, layer by layer: where a drift starts (lockguard's --locate).

Runs inside the target environment (stdlib, numpy, jax). The result has the contract of
locate_torch.py's (results.Capture), so that the host's comparison (lockguard/compare/locate.py)
reads both alike. jax has no module hooks: a scenario's forward marks its layers with
`tap(name, type, out, *inputs)`, which returns `out` unchanged outside a capture (the training
step traces to the same program and trains to the same numbers). jax_.train calls `capture` at
the step the host asks for (--locate-step N), with the parameters as they enter that step, before
the step runs. It records, in order:

    (model)          the root call every other call runs inside
    one call a leaf  each parameter leaf (and state leaf, BatchNorm's running statistics) by its
                     name ("w1", "l0.qkv_w", "Dense_0/kernel"), its digest as `params`: a leaf
                     that differs at step 0 names an initialisation change (jax 0.5.0's random
                     streams), at a later step an earlier update that moved it
    one call a tap   each tapped layer's output (`out`), the digest of the floating arrays it
                     was given (`inputs`), and the gradient that reached its output in the
                     backward (`grad`; `grad_order` the reverse of the forward's order)

How: the step's loss is traced once more under jax.jit with every tap recording its output and
adding a zero array (a probe) to it; the gradient of the loss with respect to the probes is the
gradient at each tapped output. That is a program of its own, not the training step's: XLA may
fuse it otherwise, so the capture compares the two sides' captures with each other, never with
the training run's numbers. No float64 referee (locate_torch.py's replay): a tap holds a layer's
output, not its operation, so there is nothing to run again in float64.

Bounded as locate_torch.py is: at most MAX_CALLS calls (then `truncated`), SAMPLE values a tensor.
jax is imported by capture(), not here: jax_.py imports this module before its setup() sets the
variables XLA reads when jax starts.
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Callable, Dict, List, Optional, Tuple

SAMPLE = 512  # values kept of each captured array (its digest covers all of them)
MAX_CALLS = 2000  # calls recorded in one step

_ACTIVE: List["_Recorder"] = []  # the recorder while a capture traces the loss; else empty


def tap(name: str, kind: str, out: Any, *inputs: Any) -> Any:
    """`out`, the output of the layer `name` (of type `kind`) computed from `inputs`; inside a
    capture also recorded, with a zero probe added whose gradient is the gradient at `out`."""
    if not _ACTIVE:
        return out
    return _ACTIVE[-1].record(name, kind, out, inputs)


class _Recorder:
    """The taps of one trace: their order, types, outputs and inputs (tracers)."""

    def __init__(self, probes: Optional[Dict[str, Any]]) -> None:
        self.probes = probes  # tap key -> zeros of its output; None while shapes are found
        self.order: List[Tuple[str, str]] = []  # (key, type) in the forward's order
        self.values: Dict[str, Tuple[Any, List[Any]]] = {}
        self.shapes: Dict[str, Tuple[Tuple[int, ...], Any]] = {}

    def record(self, name: str, kind: str, out: Any, inputs: Tuple[Any, ...]) -> Any:
        seen = sum(1 for key, _ in self.order if key.split("#", 1)[0] == name)
        key = name if seen == 0 else f"{name}#{seen}"  # a layer called again: its occurrence
        self.order.append((key, kind))
        floats = [x for x in inputs if _floating(x)]
        self.values[key] = (out, floats)
        self.shapes[key] = (tuple(out.shape), out.dtype)
        if self.probes is None:
            return out
        return out + self.probes[key]


def _floating(x: Any) -> bool:
    import jax.numpy as jnp
    return hasattr(x, "dtype") and bool(jnp.issubdtype(x.dtype, jnp.floating))


def _host(x: Any) -> Any:
    import jax
    import numpy as np
    return np.asarray(jax.device_get(x))


def _digest(arrays: List[Any]) -> str:
    h = hashlib.sha256()
    for a in arrays:
        a = _host(a)
        h.update(f"{a.dtype}{tuple(a.shape)}".encode() + b"\0")
        h.update(a.tobytes())
    return h.hexdigest()


def _describe(array: Any) -> Dict[str, Any]:
    """What the host compares of an array: digest, dtype, shape, the first SAMPLE values as
    float32 little-endian bytes (exact for float32, bfloat16 and float16)."""
    a = _host(array)
    head = a.reshape(-1)[:SAMPLE].astype("<f4")
    return {"digest": _digest([a]), "dtype": str(a.dtype), "shapes": [list(a.shape)],
            "numel": int(a.size), "sample": base64.b64encode(head.tobytes()).decode("ascii")}


def capture(step: int, model: str, leaves: Dict[str, Any], loss: Callable[..., Any],
            *args: Any) -> Dict[str, Any]:
    """The capture of the step `loss(*args)` computes (module docstring): `leaves` the
    parameter and state arrays by name as the step begins, in the model's order; `model` the
    root call's type (the scenario's model)."""
    import jax
    import jax.numpy as jnp

    shapes = _Recorder(None)
    _ACTIVE.append(shapes)
    try:
        jax.eval_shape(loss, *args)
    finally:
        _ACTIVE.pop()
    probes = {key: jnp.zeros(shape, dtype) for key, (shape, dtype) in shapes.shapes.items()}

    def probed(probes: Dict[str, Any], *args: Any) -> Any:
        rec = _Recorder(probes)
        _ACTIVE.append(rec)
        try:
            value = loss(*args)
        finally:
            _ACTIVE.pop()
        return value, {key: rec.values[key] for key, _ in rec.order}

    (_, seen), grads = jax.jit(jax.value_and_grad(probed, has_aux=True))(probes, *args)
    calls: List[Dict[str, Any]] = [{"name": "(model)", "type": model, "parent": -1,
                                    "inputs": _digest([])}]
    for name, leaf in leaves.items():
        calls.append({"name": name, "type": f"parameter {leaf.dtype}{list(leaf.shape)}",
                      "parent": 0, "params": _digest([leaf]), "inputs": _digest([])})
    order = shapes.order
    for index, (key, kind) in enumerate(order):
        out, inputs = seen[key]
        calls.append({"name": key, "type": kind, "parent": 0, "inputs": _digest(inputs),
                      "out": _describe(out), "grad": _describe(grads[key]),
                      "grad_order": len(order) - 1 - index})
    return {"step": step, "calls": calls[:MAX_CALLS], "truncated": len(calls) > MAX_CALLS,
            "sample": SAMPLE}
