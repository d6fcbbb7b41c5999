"""A layer-by-layer capture's record, from host (numpy) arrays: what locate_jax.py and locate_tf.py
share, in the contract locate_torch.py writes (lockguard's results.Capture).

Runs inside the target environment (stdlib and numpy). The record of one step, in order:

    (model)          the root call every other call runs inside
    one call a leaf  each parameter (and state) array by its name as the step begins, its digest
                     as `params`: a leaf that differs at step 0 names an initialisation change,
                     at a later step an earlier update that moved it
    one call a tap   each tapped layer's output (`out`), the digest of the floating arrays it
                     was given (`inputs`) and the gradient that reached its output (`grad`;
                     `grad_order` the reverse of the forward's order, as a backward runs)

Bounded as locate_torch.py is: at most MAX_CALLS calls (then `truncated`), SAMPLE values an array.
numpy is imported where it is used: the framework modules import this one before their setup()
times the framework's import (numpy's with it).
"""

from __future__ import annotations

import base64
import hashlib
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


# A tap as recorded: (key, layer type, output, [floating inputs], gradient at the output or None)
Tapped = Tuple[str, str, Any, List[Any], Optional[Any]]


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
    for index, (key, kind, out, inputs, grad) in enumerate(taps):
        call = {"name": key, "type": kind, "parent": 0, "inputs": digest(inputs),
                "out": describe(out)}
        if grad is not None:
            call.update(grad=describe(grad), grad_order=len(taps) - 1 - index)
        calls.append(call)
    return {"step": step, "calls": calls[:MAX_CALLS], "truncated": len(calls) > MAX_CALLS,
            "sample": SAMPLE}
